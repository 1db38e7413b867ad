//! The host half of the bridge: what happens when the guest calls the host primitive, and how
//! settled requests are encoded for delivery. Shared by every engine, so the protocol's rules (ids,
//! limits, output accounting) are implemented exactly once.

use crate::adapter::{RequestPayloadError, encode_for_guest, parse_guest_json, parse_request};
use codemode_core::engine::BootSource;
use codemode_core::engine::{
    Answer, Answerer, BridgeRequest, Delivery, GuestFailure, GuestLimits, RequestId, RequestKind,
};
use codemode_core::error::CodeModeErrorCode;
use codemode_core::result::CodeModeOutput;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The part of the bridge state that must survive a snapshot (ids are unique per run, so the next id
/// and the outstanding set travel with the VM).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BridgeState {
    /// The next request id to hand out.
    pub next_id: RequestId,
    /// Requests issued and not yet delivered.
    pub outstanding: Outstanding,
}

/// Requests issued and not yet delivered, by id, in increasing order: a vector kept sorted (ids are
/// handed out in increasing order, so a new request goes at the end). A tree map made and freed
/// a node each time the set went from empty to one request and back — on every nested call a
/// cell awaits before making the next (~0.35k instructions of the call). Serialized as the map it
/// is: the same form, and the same bytes, as a `BTreeMap<RequestId, RequestKind>`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outstanding(Vec<(RequestId, RequestKind)>);

impl Outstanding {
    /// Number of requests.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds request `id` (replacing the kind of one already there, which the bridge never does).
    pub fn insert(&mut self, id: RequestId, kind: RequestKind) {
        match self.0.last() {
            Some((last, _)) if *last >= id => match self.0.binary_search_by_key(&id, |(i, _)| *i) {
                Ok(at) => self.0[at].1 = kind,
                Err(at) => self.0.insert(at, (id, kind)),
            },
            _ => self.0.push((id, kind)),
        }
    }

    /// Takes request `id` out, if it is there.
    pub fn remove(&mut self, id: RequestId) -> Option<RequestKind> {
        let at = self.0.binary_search_by_key(&id, |(i, _)| *i).ok()?;
        Some(self.0.remove(at).1)
    }

    /// The kind of request `id`, if it is there.
    pub fn get(&self, id: RequestId) -> Option<RequestKind> {
        self.0.binary_search_by_key(&id, |(i, _)| *i).ok().map(|at| self.0[at].1)
    }

    /// The requests in increasing id order.
    pub fn iter(&self) -> impl Iterator<Item = (RequestId, RequestKind)> + '_ {
        self.0.iter().copied()
    }
}

impl Serialize for Outstanding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(id, kind)| (id, kind)))
    }
}

impl<'de> Deserialize<'de> for Outstanding {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A map's keys come sorted and unique out of the tree.
        Ok(Outstanding(BTreeMap::<RequestId, RequestKind>::deserialize(d)?.into_iter().collect()))
    }
}

/// What the host primitive answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostCallResult {
    /// A request was queued under this id (> 0).
    Request(RequestId),
    /// A synchronous output item was accepted (the primitive returns 0).
    Accepted,
    /// The answer to a `pull`: the catalog text under the key (the primitive returns it as a
    /// string), or `None` (the primitive returns `undefined`). See [`BootSource`].
    Data(Option<Arc<str>>),
    /// The request is refused; throw a catchable error of this name and message in the guest.
    Throw {
        /// Error constructor name (`TypeError`, `RangeError`, `Error`).
        name: &'static str,
        /// Message.
        message: String,
    },
    /// The request was answered at once by the step's [`Answerer`]: the primitive answers with a
    /// new promise, which the engine settles with this outcome (resolved with the parsed `json`
    /// when `ok`, else rejected with the prelude's `hostError` of it) when the guest's job queue
    /// next runs dry, as a delivery in the next step would have.
    Settled {
        /// The request (an engine that files its promise by id may use it).
        id: RequestId,
        /// Resolve (`true`) or reject.
        ok: bool,
        /// The outcome, encoded for the guest as [`BridgeHost::prepare_delivery`] encodes it.
        json: String,
    },
    /// [`HostCallResult::Settled`] with a value, for an engine that makes guest values from host
    /// values itself ([`BridgeHost::take_values`]): the request resolved with `value`, which is
    /// within the bridge's limits ([`crate::adapter::fits_for_guest`]) and must become what
    /// `JSON.parse` makes of its encoding ([`BridgeHost::prepare_delivery`]'s text) — forbidden keys
    /// left out. Only a resolved outcome comes this way; anything else as `Settled`.
    SettledValue {
        /// The request.
        id: RequestId,
        /// The value it resolved with.
        value: serde_json::Value,
    },
    /// A limit was hit that ends the cell: the engine must interrupt the guest (uncatchably) and report
    /// [`BridgeHost::fatal`]. The guest additionally sees a thrown error until the interrupt lands.
    Fatal,
}

/// Deepest value handed over as [`HostCallResult::SettledValue`] (an engine may build it
/// recursively); deeper ones go as text, however deep the limits allow.
pub const VALUE_DEPTH_MAX: u32 = 64;

/// The engine-independent bridge state machine behind the host primitive.
#[derive(Debug)]
pub struct BridgeHost {
    limits: GuestLimits,
    state: BridgeState,
    requests: Vec<BridgeRequest>,
    output: Vec<CodeModeOutput>,
    output_used: u64,
    output_budget: u64,
    fatal: Option<GuestFailure>,
    source: Option<Arc<dyn BootSource>>,
    answerer: Option<Arc<dyn Answerer>>,
    takes_values: bool,
}

impl BridgeHost {
    /// A fresh bridge for a new run.
    pub fn new(limits: GuestLimits) -> Self {
        Self::with_state(limits, BridgeState { next_id: 1, outstanding: Outstanding::default() })
    }

    /// A bridge restored from a snapshot.
    pub fn with_state(limits: GuestLimits, state: BridgeState) -> Self {
        let state = BridgeState { next_id: state.next_id.max(1), ..state };
        Self {
            limits,
            state,
            requests: Vec::new(),
            output: Vec::new(),
            output_used: 0,
            output_budget: u64::MAX,
            fatal: None,
            source: None,
            answerer: None,
            takes_values: false,
        }
    }

    /// The engine makes guest values from host values itself: a request the answerer resolves at
    /// once with a value that certainly fits the bridge's limits comes back as
    /// [`HostCallResult::SettledValue`] (the value, not its text). Spares the encoding and the
    /// guest's parse of it on every such call.
    pub fn take_values(&mut self) {
        self.takes_values = true;
    }

    /// The state to put into a snapshot.
    pub fn state(&self) -> &BridgeState {
        &self.state
    }

    /// The limits in force.
    pub fn limits(&self) -> &GuestLimits {
        &self.limits
    }

    /// Starts a drive step with `output_budget` bytes of output allowed.
    pub fn begin_drive(&mut self, output_budget: u64) {
        self.output_budget = output_budget;
        self.output_used = 0;
    }

    /// Sets the catalog data `pull` answers from (each drive step passes the run's, see
    /// [`DriveInput::boot_source`](codemode_core::engine::DriveInput::boot_source)).
    pub fn set_boot_source(&mut self, source: Option<Arc<dyn BootSource>>) {
        self.source = source;
    }

    /// Sets who takes this step's requests as they are made (see [`Answerer`]); cleared by
    /// [`Self::finish_drive`]. Only engines whose primitive handles [`HostCallResult::Settled`]
    /// set one.
    pub fn set_answerer(&mut self, answerer: Option<Arc<dyn Answerer>>) {
        self.answerer = answerer;
    }

    /// The failure that ends the cell, if a fatal limit was hit.
    pub fn fatal(&self) -> Option<&GuestFailure> {
        self.fatal.as_ref()
    }

    /// Number of outstanding requests.
    pub fn outstanding(&self) -> usize {
        self.state.outstanding.len()
    }

    /// Handles one call of the host primitive `host(kind, payload)` (an engine joins a payload the
    /// prelude sends in parts before calling this).
    pub fn host_call(&mut self, kind: &str, payload: &str) -> HostCallResult {
        self.host_call_holding(kind, payload, 0)
    }

    /// [`Self::host_call`] for an engine whose guest holds `held` outcomes answered at once
    /// ([`HostCallResult::Settled`]) that it has not settled yet: they count as outstanding
    /// requests, as they would if they had been delivered in a later step, so the
    /// outstanding-request limit means the same with and without an answerer.
    pub fn host_call_holding(&mut self, kind: &str, payload: &str, held: usize) -> HostCallResult {
        if self.fatal.is_some() {
            return HostCallResult::Fatal;
        }
        match kind {
            // Catalog data on demand: a lookup in host memory, nothing queued, nothing counted (the
            // text lands in the guest heap, which its own limit bounds).
            "pull" => HostCallResult::Data(self.source.as_ref().and_then(|s| s.pull(payload))),
            "text" => {
                let item = CodeModeOutput::Text { text: payload.to_string() };
                self.push_output(item, payload.len() as u64)
            }
            "json" => {
                let cost = payload.len() as u64;
                if self.output_used.saturating_add(cost) > self.output_budget {
                    return self.output_overflow(cost);
                }
                match parse_guest_json(payload, self.limits.max_message_bytes, self.limits.max_json_depth) {
                    Ok(value) => {
                        let cost = CodeModeOutput::Json { value: value.clone() }.cost() as u64;
                        self.push_output(CodeModeOutput::Json { value }, cost)
                    }
                    Err(e) => HostCallResult::Throw { name: "RangeError", message: format!("json(): {e}") },
                }
            }
            _ => {
                let Some(kind) = RequestKind::parse(kind) else {
                    return HostCallResult::Throw {
                        name: "TypeError",
                        message: format!("unknown bridge request `{kind}`"),
                    };
                };
                if self.state.outstanding.len().saturating_add(held) >= self.limits.max_outstanding_requests as usize {
                    self.fatal = Some(GuestFailure {
                        code: Some(CodeModeErrorCode::TooManyPendingToolCalls),
                        message: format!(
                            "too many outstanding bridge requests (limit {}); await results before issuing more",
                            self.limits.max_outstanding_requests
                        ),
                    });
                    return HostCallResult::Fatal;
                }
                // Parsed once, here: everything after the primitive matches on the typed request.
                let (max_bytes, max_depth) = (self.limits.max_message_bytes, self.limits.max_json_depth);
                let request = match parse_request(kind, payload, max_bytes, max_depth) {
                    Ok(r) => r,
                    Err(RequestPayloadError::Adapter(e)) => {
                        return HostCallResult::Throw {
                            name: "RangeError",
                            message: format!("{}: {e}", kind.as_str()),
                        };
                    }
                    Err(RequestPayloadError::Shape(e)) => {
                        return HostCallResult::Throw { name: "TypeError", message: e.to_string() };
                    }
                };
                let id = self.state.next_id;
                self.state.next_id += 1;
                self.state.outstanding.insert(id, kind);
                let request = BridgeRequest { id, request };
                // Taken at once only while nothing of this step waits for the report (output, or a
                // request kept for it): so requests are handled in the order they were made, and
                // the output before a request is seen before what handling it emits. A yield ends
                // the step, so it always goes to the report.
                let takes = kind != RequestKind::Yield && self.output.is_empty() && self.requests.is_empty();
                let Some(answerer) = self.answerer.take_if(|_| takes) else {
                    self.requests.push(request);
                    return HostCallResult::Request(id);
                };
                let mut notes = Vec::new();
                let answer = answerer.answer(request, &mut notes);
                self.answerer = Some(answerer);
                // Notes (loop-detection warnings) are the host's, not the guest's: counted, never
                // refused, as when they are added after a step.
                for text in notes {
                    let item = CodeModeOutput::Text { text };
                    self.output_used = self.output_used.saturating_add(item.cost() as u64);
                    self.output.push(item);
                }
                match answer {
                    Answer::Started => HostCallResult::Request(id),
                    Answer::Declined(request) => {
                        self.requests.push(request);
                        HostCallResult::Request(id)
                    }
                    Answer::Settled(delivery) if delivery.id == id => self.settled_at_once(delivery),
                    // An answer for another request would leave this one unanswered.
                    Answer::Settled(_) => self.internal_fatal(id),
                    Answer::Stop(failure) => {
                        self.fatal = Some(failure);
                        HostCallResult::Fatal
                    }
                }
            }
        }
    }

    /// Ends the cell over an answerer that broke its contract (a bug, never the guest's doing):
    /// the request it answered wrongly could never settle.
    fn internal_fatal(&mut self, id: RequestId) -> HostCallResult {
        self.fatal = Some(GuestFailure {
            code: Some(CodeModeErrorCode::InternalError),
            message: format!("internal error: the answer to request {id} cannot be delivered"),
        });
        HostCallResult::Fatal
    }

    fn push_output(&mut self, item: CodeModeOutput, cost: u64) -> HostCallResult {
        if self.output_used.saturating_add(cost) > self.output_budget {
            return self.output_overflow(cost);
        }
        self.output_used += cost;
        self.output.push(item);
        HostCallResult::Accepted
    }

    fn output_overflow(&mut self, cost: u64) -> HostCallResult {
        self.fatal = Some(GuestFailure {
            code: Some(CodeModeErrorCode::OutputLimitExceeded),
            message: format!(
                "output limit exceeded: an item of {cost} bytes does not fit in the {} bytes left of maxOutputBytes",
                self.output_budget.saturating_sub(self.output_used)
            ),
        });
        HostCallResult::Fatal
    }

    /// Records a fatal failure found by the engine itself.
    pub fn set_fatal(&mut self, failure: GuestFailure) {
        if self.fatal.is_none() {
            self.fatal = Some(failure);
        }
    }

    /// The primitive's answer for a request the answerer settled at once: the value as it is for an
    /// engine that takes values ([`BridgeHost::take_values`]) when it certainly fits the limits,
    /// else the delivery encoded as [`BridgeHost::prepare_delivery`] encodes it. Either way the
    /// request leaves the outstanding set; one that was not in it is an internal failure.
    fn settled_at_once(&mut self, delivery: Delivery) -> HostCallResult {
        let id = delivery.id;
        let (max_bytes, max_depth) = (self.limits.max_delivery_bytes, self.limits.max_json_depth.min(VALUE_DEPTH_MAX));
        let as_value = self.takes_values
            && matches!(&delivery.outcome, Ok(value) if crate::adapter::fits_for_guest(value, max_bytes, max_depth));
        match delivery.outcome {
            Ok(value) if as_value => match self.state.outstanding.remove(id) {
                Some(_) => HostCallResult::SettledValue { id, value },
                None => self.internal_fatal(id),
            },
            outcome => match self.prepare_delivery(&Delivery { id, outcome }) {
                Some((ok, json)) => HostCallResult::Settled { id, ok, json },
                None => self.internal_fatal(id),
            },
        }
    }

    /// Prepares a delivery: `Some((ok, json))` to pass to the guest's settle function, or `None` when
    /// the id is not outstanding (never issued, or already delivered — a result is never delivered
    /// twice). A result too large or too deep for the bridge becomes an error delivery.
    pub fn prepare_delivery(&mut self, delivery: &Delivery) -> Option<(bool, String)> {
        self.state.outstanding.remove(delivery.id)?;
        let limits = self.limits;
        let encoded = match &delivery.outcome {
            Ok(value) => match encode_for_guest(value, limits.max_delivery_bytes, limits.max_json_depth) {
                Ok(json) => (true, json),
                Err(e) => (
                    false,
                    error_json("RangeError", &format!("result refused by the bridge: {e}"), Some("nested_tool_failed")),
                ),
            },
            Err(err) => {
                let v = serde_json::json!({ "name": err.name, "message": err.message, "code": err.code });
                match encode_for_guest(&v, limits.max_delivery_bytes, limits.max_json_depth) {
                    Ok(json) => (false, json),
                    Err(_) => (
                        false,
                        error_json(&err.name, "error message too large for the bridge", err.code.map(|c| c.as_str())),
                    ),
                }
            }
        };
        Some(encoded)
    }

    /// Ends a drive step: the requests and output items it produced.
    pub fn finish_drive(&mut self) -> (Vec<BridgeRequest>, Vec<CodeModeOutput>) {
        self.answerer = None;
        (std::mem::take(&mut self.requests), std::mem::take(&mut self.output))
    }

    /// Bytes of output produced in this drive step.
    pub fn output_used(&self) -> u64 {
        self.output_used
    }
}

fn error_json(name: &str, message: &str, code: Option<&str>) -> String {
    serde_json::json!({ "name": name, "message": message, "code": code }).to_string()
}

#[cfg(test)]
mod tests {
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
}
