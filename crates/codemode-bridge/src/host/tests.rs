//! Unit tests of `host` (kept beside it so the module itself reads as one concern).

use proptest::prelude::*;

proptest! {
    /// The outstanding set against the tree map it replaced: after any sequence of inserts
    /// (mostly increasing ids, as the bridge hands them out, some not) and removals, the same
    /// requests in the same order, the same answers, and the same JSON both ways.
    #[test]
    fn outstanding_behaves_and_serializes_as_the_tree_map_did(
        ops in prop::collection::vec((0u8..4, 0u64..40), 0..200),
    ) {
        let kinds = [RequestKind::Call, RequestKind::Search, RequestKind::Describe];
        let mut model = BTreeMap::new();
        let mut ours = Outstanding::default();
        let mut next = 1u64;
        for (op, x) in ops {
            let kind = kinds[(x % 3) as usize];
            match op {
                0 | 1 => {
                    ours.insert(next, kind);
                    model.insert(next, kind);
                    next += 1 + x % 3;
                }
                2 => {
                    ours.insert(x, kind);
                    model.insert(x, kind);
                }
                _ => prop_assert_eq!(ours.remove(x), model.remove(&x)),
            }
            prop_assert_eq!(ours.get(x), model.get(&x).copied());
            prop_assert_eq!(ours.len(), model.len());
        }
        prop_assert!(ours.iter().eq(model.iter().map(|(i, k)| (*i, *k))));
        let json = serde_json::to_string(&ours).unwrap();
        prop_assert_eq!(&json, &serde_json::to_string(&model).unwrap());
        prop_assert_eq!(serde_json::from_str::<Outstanding>(&json).unwrap(), ours);
    }
}

use super::*;
use codemode_core::engine::GuestError;
use codemode_core::guest::GuestRequest;
use serde_json::json;

fn host() -> BridgeHost {
    BridgeHost::new(GuestLimits { max_outstanding_requests: 3, max_message_bytes: 64, ..GuestLimits::default() })
}

#[test]
fn requests_get_increasing_ids_and_are_delivered_once() {
    let mut h = host();
    h.begin_drive(1000);
    assert_eq!(h.host_call("search", r#"{"query":"x"}"#), HostCallResult::Request(1));
    assert_eq!(h.host_call("call", r#"{"id":"a","input":{"__proto__":{"p":1}}}"#), HostCallResult::Request(2));
    let (reqs, out) = h.finish_drive();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[1].request,
        GuestRequest::Call {
            id: "a".into(),
            input: json!({}),
            mode: codemode_core::guest::CallMode::Value,
            line: None,
        }
    );
    // A payload of the wrong shape is refused at the primitive, as a catchable TypeError.
    assert!(matches!(h.host_call("describe", r#"{"id":7}"#), HostCallResult::Throw { name: "TypeError", .. }));
    assert!(out.is_empty());
    assert_eq!(h.outstanding(), 2);
    let d = Delivery { id: 2, outcome: Ok(json!({"v": 1})) };
    assert_eq!(h.prepare_delivery(&d), Some((true, r#"{"v":1}"#.to_string())));
    assert_eq!(h.prepare_delivery(&d), None, "never delivered twice");
    assert_eq!(h.prepare_delivery(&Delivery { id: 99, outcome: Ok(json!(1)) }), None);
    let err = Delivery {
        id: 1,
        outcome: Err(GuestError::new("ToolError", "boom", Some(CodeModeErrorCode::NestedToolFailed))),
    };
    let (ok, text) = h.prepare_delivery(&err).unwrap();
    assert!(!ok);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap()["code"], "nested_tool_failed");
    assert_eq!(h.state().next_id, 3);
}

#[test]
fn output_budget_is_fatal() {
    let mut h = host();
    h.begin_drive(10);
    assert_eq!(h.host_call("text", "hello"), HostCallResult::Accepted);
    assert_eq!(h.host_call("json", "[1,2]"), HostCallResult::Accepted);
    assert_eq!(h.host_call("text", "toolong"), HostCallResult::Fatal);
    assert_eq!(h.fatal().unwrap().code, Some(CodeModeErrorCode::OutputLimitExceeded));
    assert_eq!(h.host_call("search", "{}"), HostCallResult::Fatal, "nothing more after a fatal");
    let (_, out) = h.finish_drive();
    assert_eq!(out.len(), 2, "items that fit are kept in order");
}

#[test]
fn refusals() {
    let mut h = host();
    h.begin_drive(1000);
    assert!(matches!(h.host_call("exec", "{}"), HostCallResult::Throw { name: "TypeError", .. }));
    assert!(matches!(
        h.host_call("call", &format!("\"{}\"", "x".repeat(100))),
        HostCallResult::Throw { name: "RangeError", .. }
    ));
    // A payload that is not the request's shape is a catchable TypeError, and takes no id.
    assert!(matches!(h.host_call("search", "{}"), HostCallResult::Throw { name: "TypeError", .. }));
    for _ in 0..3 {
        assert!(matches!(h.host_call("search", r#"{"query":"q"}"#), HostCallResult::Request(_)));
    }
    assert_eq!(h.host_call("search", r#"{"query":"q"}"#), HostCallResult::Fatal);
    assert_eq!(h.fatal().unwrap().code, Some(CodeModeErrorCode::TooManyPendingToolCalls));
}

#[test]
fn oversized_results_become_errors() {
    let mut h = BridgeHost::new(GuestLimits { max_delivery_bytes: 16, ..GuestLimits::default() });
    h.begin_drive(1000);
    let HostCallResult::Request(id) = h.host_call("call", r#"{"id":"t"}"#) else { panic!() };
    let (ok, text) = h.prepare_delivery(&Delivery { id, outcome: Ok(json!("x".repeat(100))) }).unwrap();
    assert!(!ok);
    assert!(text.contains("exceeds the bridge limit"), "{text}");
}

#[test]
fn state_survives_restore() {
    let mut h = host();
    h.begin_drive(100);
    h.host_call("call", r#"{"id":"t"}"#);
    let state = h.state().clone();
    let mut h2 = BridgeHost::with_state(*h.limits(), state);
    assert_eq!(h2.outstanding(), 1);
    h2.begin_drive(100);
    assert_eq!(h2.host_call("call", r#"{"id":"t"}"#), HostCallResult::Request(2));
}

/// An answerer that answers by the tool id of a call (`now`, `later`, `no`, `stop`, `other`,
/// `warn`) and records the ids it was handed.
#[derive(Debug, Default)]
struct Scripted {
    seen: std::sync::Mutex<Vec<RequestId>>,
}

impl Answerer for Scripted {
    fn answer(&self, request: BridgeRequest, notes: &mut Vec<String>) -> Answer {
        self.seen.lock().unwrap().push(request.id);
        let tool = match &request.request {
            GuestRequest::Call { id, .. } => id.clone(),
            _ => "now".into(),
        };
        match tool.as_str() {
            "now" => Answer::Settled(Delivery { id: request.id, outcome: Ok(json!({ "n": request.id })) }),
            "fails" => Answer::Settled(Delivery {
                id: request.id,
                outcome: Err(GuestError::new("ToolError", "boom", Some(CodeModeErrorCode::NestedToolFailed))),
            }),
            "warn" => {
                notes.push("the same call again".into());
                Answer::Settled(Delivery { id: request.id, outcome: Ok(json!(null)) })
            }
            "later" => Answer::Started,
            "stop" => Answer::Stop(GuestFailure {
                code: Some(CodeModeErrorCode::NestedToolFailed),
                message: "the loop breaker tripped".into(),
            }),
            "other" => Answer::Settled(Delivery { id: request.id + 100, outcome: Ok(json!(1)) }),
            // 40 control characters: 240 bytes by `fits_for_guest`'s bound, 82 encoded
            // (`\n` each); with `__proto__`, which the encoding leaves out.
            "controls" => Answer::Settled(Delivery {
                id: request.id,
                outcome: Ok(json!({ "s": "\n".repeat(40), "__proto__": 1 })),
            }),
            "big" => Answer::Settled(Delivery { id: request.id, outcome: Ok(json!("x".repeat(300))) }),
            _ => Answer::Declined(request),
        }
    }
}

fn answering(limits: GuestLimits) -> (BridgeHost, Arc<Scripted>) {
    let scripted = Arc::new(Scripted::default());
    let mut h = BridgeHost::new(limits);
    h.begin_drive(1000);
    h.set_answerer(Some(scripted.clone()));
    (h, scripted)
}

fn call(h: &mut BridgeHost, tool: &str) -> HostCallResult {
    h.host_call("call", &format!(r#"{{"id":"{tool}","input":{{}}}}"#))
}

/// An engine that takes values gets a resolved outcome as it is when it certainly fits the
/// limits, taken out of the outstanding set as a delivery would be; anything else (a rejection,
/// a value whose bound is over the limit, one over the limit itself) comes encoded as before.
#[test]
fn an_engine_that_takes_values_gets_those_that_certainly_fit() {
    let limits = GuestLimits { max_delivery_bytes: 200, ..GuestLimits::default() };
    let (mut h, _) = answering(limits);
    h.take_values();
    assert_eq!(call(&mut h, "now"), HostCallResult::SettledValue { id: 1, value: json!({ "n": 1 }) });
    assert_eq!(h.outstanding(), 0, "delivered at once");
    assert!(
        matches!(call(&mut h, "fails"), HostCallResult::Settled { id: 2, ok: false, json } if json.contains("nested_tool_failed"))
    );
    let expected = format!(r#"{{"s":"{}"}}"#, "\\n".repeat(40));
    assert_eq!(call(&mut h, "controls"), HostCallResult::Settled { id: 3, ok: true, json: expected });
    assert!(
        matches!(call(&mut h, "big"), HostCallResult::Settled { id: 4, ok: false, json } if json.contains("result refused by the bridge"))
    );
    assert_eq!(call(&mut h, "other"), HostCallResult::Fatal, "an answer for another request");
    // Without `take_values` (the other engines), the same answers come encoded.
    let (mut h, _) = answering(limits);
    assert_eq!(call(&mut h, "now"), HostCallResult::Settled { id: 1, ok: true, json: r#"{"n":1}"#.into() });
}

/// The step's answerer takes each request as it is made: a settled one comes back encoded as a
/// delivery would be (and is no longer outstanding), a started one stays outstanding and is not
/// reported, a declined one is reported.
#[test]
fn an_answerer_settles_starts_or_declines_each_request() {
    let (mut h, scripted) = answering(GuestLimits::default());
    assert_eq!(call(&mut h, "now"), HostCallResult::Settled { id: 1, ok: true, json: r#"{"n":1}"#.into() });
    assert_eq!(h.outstanding(), 0, "delivered at once");
    assert!(
        matches!(call(&mut h, "fails"), HostCallResult::Settled { id: 2, ok: false, json } if json.contains("nested_tool_failed"))
    );
    assert_eq!(call(&mut h, "later"), HostCallResult::Request(3));
    assert_eq!(h.outstanding(), 1, "under way: delivered in a later step");
    assert_eq!(
        h.host_call("search", r#"{"query":"q"}"#),
        HostCallResult::Settled { id: 4, ok: true, json: r#"{"n":4}"#.into() }
    );
    assert_eq!(call(&mut h, "no"), HostCallResult::Request(5));
    let (requests, output) = h.finish_drive();
    assert_eq!(requests.iter().map(|r| r.id).collect::<Vec<_>>(), vec![5], "only the declined one is reported");
    assert!(output.is_empty());
    assert_eq!(*scripted.seen.lock().unwrap(), vec![1, 2, 3, 4, 5]);
    // The answerer lasts one step.
    h.begin_drive(1000);
    assert_eq!(call(&mut h, "now"), HostCallResult::Request(6));
}

/// Once a step has output, or a request kept for its report, the rest of its requests go to the
/// report too (handled after the step, in the order they were made); a yield always does.
#[test]
fn after_output_or_a_reported_request_the_rest_of_the_step_is_reported() {
    let (mut h, scripted) = answering(GuestLimits::default());
    assert!(matches!(h.host_call("yield", "{}"), HostCallResult::Request(1)));
    assert!(matches!(call(&mut h, "now"), HostCallResult::Request(2)), "after a reported request");
    let (requests, _) = h.finish_drive();
    assert_eq!(requests.len(), 2);

    h.begin_drive(1000);
    h.set_answerer(Some(scripted.clone()));
    assert!(matches!(call(&mut h, "now"), HostCallResult::Settled { .. }));
    assert_eq!(h.host_call("text", "hi"), HostCallResult::Accepted);
    assert_eq!(call(&mut h, "now"), HostCallResult::Request(4), "after output");
    let (requests, output) = h.finish_drive();
    assert_eq!(requests.iter().map(|r| r.id).collect::<Vec<_>>(), vec![4]);
    assert_eq!(output.len(), 1);
    assert_eq!(*scripted.seen.lock().unwrap(), vec![3], "the yield and the later ones never reached it");
}

/// Notes go into the output where the request was made, counted but never refused (a
/// warning must not fail the cell at the output limit); an answer that stops the run is fatal
/// with its own failure; an answer for another request is fatal as an internal error.
#[test]
fn notes_are_output_and_failures_stop_the_cell() {
    let (mut h, _) = answering(GuestLimits::default());
    h.begin_drive(5);
    assert!(matches!(call(&mut h, "warn"), HostCallResult::Settled { .. }));
    assert!(h.output_used() > 5, "counted past the budget");
    assert_eq!(h.fatal(), None, "and not refused");
    let (_, output) = h.finish_drive();
    assert_eq!(output, vec![CodeModeOutput::Text { text: "the same call again".into() }]);

    let (mut h, _) = answering(GuestLimits::default());
    assert_eq!(call(&mut h, "stop"), HostCallResult::Fatal);
    assert_eq!(h.fatal().map(|f| f.message.as_str()), Some("the loop breaker tripped"));
    assert_eq!(call(&mut h, "now"), HostCallResult::Fatal, "nothing more after a fatal");

    let (mut h, _) = answering(GuestLimits::default());
    assert_eq!(call(&mut h, "other"), HostCallResult::Fatal);
    assert_eq!(h.fatal().and_then(|f| f.code), Some(CodeModeErrorCode::InternalError));
}

/// Outcomes the guest holds (answered at once, not settled in it yet) count as outstanding, so
/// the limit trips where it would if they had been delivered in a later step.
#[test]
fn held_outcomes_count_as_outstanding() {
    let (mut h, _) = answering(GuestLimits { max_outstanding_requests: 3, ..GuestLimits::default() });
    for held in 0..3 {
        let answer = h.host_call_holding("call", r#"{"id":"now","input":{}}"#, held);
        assert!(matches!(answer, HostCallResult::Settled { .. }), "{held}: {answer:?}");
    }
    assert_eq!(h.host_call_holding("call", r#"{"id":"now","input":{}}"#, 3), HostCallResult::Fatal);
    assert_eq!(h.fatal().and_then(|f| f.code), Some(CodeModeErrorCode::TooManyPendingToolCalls));
}
