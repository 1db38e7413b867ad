//! Loop detection on nested calls (contract §22 `tools.loopDetection`): warnings the
//! model sees, refused calls it can catch, a circuit breaker that fails the run; history across the
//! `exec` / `wait` calls of one session; off by default.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CodeMode, CodeModeConfig, CodeModeErrorCode, CodeModeExecInput, CodeModeOutput, LoopPolicy, RunContext,
};
use serde_json::json;

fn runtime(loops: serde_json::Value) -> CodeMode {
    codemode_testing::builder("quickjs", CodeModeConfig::enabled())
        .loop_detection(LoopPolicy::from_document(&loops).unwrap())
        .build()
}

/// Collects trajectory records.
#[derive(Default)]
struct Records(std::sync::Mutex<Vec<codemode::trajectory::TraceRecord>>);

impl codemode::RunObserver for Records {
    fn on_event(&self, event: codemode::RunEvent) {
        if let codemode::RunEvent::Trace(r) = event {
            self.0.lock().unwrap().push(*r);
        }
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn texts(r: &codemode::CodeModeResult) -> Vec<String> {
    r.output()
        .iter()
        .filter_map(|o| if let CodeModeOutput::Text { text } = o { Some(text.clone()) } else { None })
        .collect()
}

const REPEAT: &str = "const out = [];\n\
    for (let i = 0; i < N; i++) {\n\
      try { await tools.demo_echo({ q: 1 }); out.push('ok'); } catch (e) { out.push(e.code); }\n\
    }\n\
    return out;";

#[test]
fn warn_then_refuse_then_break() {
    let rt = rt();
    let cm = runtime(
        json!({"tools": {"loopDetection": {"enabled": true, "warningThreshold": 3, "criticalThreshold": 5, "globalCircuitBreakerThreshold": 7}}}),
    );
    let ctx = RunContext::session("loops-1");
    let records = std::sync::Arc::new(Records::default());
    let r =
        rt.block_on(cm.exec_observed(&ctx, &CodeModeExecInput::code(REPEAT.replace('N', "6")), Some(records.clone())));
    assert_eq!(r.to_json()["value"], json!(["ok", "ok", "ok", "ok", "nested_tool_failed", "nested_tool_failed"]));
    // The refused calls are `denied` entries of the trajectory, with the reason.
    let denied: Vec<_> = records
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|r| match r {
            codemode::trajectory::TraceRecord::Nested(e) if e.outcome == codemode::trajectory::CallOutcome::Denied => {
                e.error.clone()
            }
            _ => None,
        })
        .collect();
    assert_eq!(denied.len(), 2, "{denied:?}");
    assert!(denied[0].contains("loop detection (genericRepeat)"), "{denied:?}");
    let warnings = texts(&r);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("loop detection (genericRepeat) warning") && warnings[0].contains("plugin:demo:demo_echo"),
        "{warnings:?}"
    );
    // The same session, next exec: the history continues, and the 7th identical call breaks the run.
    let r = rt.block_on(cm.exec(&ctx, &CodeModeExecInput::code(REPEAT.replace('N', "3"))));
    assert_eq!(r.error_code(), Some(CodeModeErrorCode::NestedToolFailed), "{}", r.to_json());
    assert!(r.to_json()["error"].as_str().unwrap().contains("circuit breaker"), "{}", r.to_json());
    // Another session starts from an empty history; other inputs are other calls.
    let other = RunContext::session("loops-2");
    let r = rt.block_on(cm.exec(&other, &CodeModeExecInput::code(REPEAT.replace('N', "2"))));
    assert_eq!(r.to_json()["value"], json!(["ok", "ok"]));
    let r = rt.block_on(cm.exec(
        &ctx,
        &CodeModeExecInput::code(
            "for (let i = 0; i < 20; i++) await tools.demo_echo({ q: 'd' + i }); return 'distinct'",
        ),
    ));
    assert_eq!(r.to_json()["value"], json!("distinct"), "{}", r.to_json());
}

#[test]
fn off_by_default_and_per_agent() {
    let rt = rt();
    let cm = runtime(json!({}));
    let r = rt.block_on(cm.exec(&RunContext::session("s"), &CodeModeExecInput::code(REPEAT.replace('N', "40"))));
    assert_eq!(r.to_json()["value"].as_array().unwrap().len(), 40);
    assert!(texts(&r).is_empty());
    // Enabled globally, disabled for agent `trusted`.
    let cm = runtime(json!({
        "tools": {"loopDetection": {"enabled": true, "warningThreshold": 2, "criticalThreshold": 3, "globalCircuitBreakerThreshold": 50}},
        "agents": {"list": [{"id": "trusted", "tools": {"loopDetection": {"enabled": false}}}]}
    }));
    let trusted = RunContext {
        scope: codemode::RunScope { agent_id: Some("trusted".into()), ..codemode::RunScope::session("t") },
        ..RunContext::default()
    };
    let r = rt.block_on(cm.exec(&trusted, &CodeModeExecInput::code(REPEAT.replace('N', "5"))));
    assert_eq!(r.to_json()["value"], json!(["ok", "ok", "ok", "ok", "ok"]));
    let r = rt.block_on(cm.exec(&RunContext::session("u"), &CodeModeExecInput::code(REPEAT.replace('N', "4"))));
    assert_eq!(r.to_json()["value"], json!(["ok", "ok", "nested_tool_failed", "nested_tool_failed"]));
}

#[test]
fn polls_without_progress_are_caught_polls_with_progress_are_not() {
    let rt = rt();
    let cm = runtime(
        json!({"tools": {"loopDetection": {"enabled": true, "warningThreshold": 3, "criticalThreshold": 4, "globalCircuitBreakerThreshold": 50,
        "detectors": {"genericRepeat": false, "pingPong": false}}}}),
    );
    // The shipment list does not change between identical calls: no progress.
    let r = rt.block_on(cm.exec(
        &RunContext::session("poll"),
        &CodeModeExecInput::code(
            "const out = []; for (let i = 0; i < 5; i++) { try { await tools.demo_shipping_list({ paid: false }); out.push('ok'); } catch (e) { out.push(e.code); } } return out;",
        ),
    ));
    assert_eq!(r.to_json()["value"], json!(["ok", "ok", "ok", "nested_tool_failed", "nested_tool_failed"]));
    assert!(texts(&r)[0].contains("knownPollNoProgress"), "{:?}", texts(&r));
    // Marking shipments paid between polls changes the result: progress, never flagged.
    let r = rt.block_on(cm.exec(
        &RunContext::session("poll-progress"),
        &CodeModeExecInput::code(
            "const ids = ['SHP-1002', 'SHP-1003', 'SHP-1005', 'SHP-1007', 'SHP-1008'];\n\
             for (const id of ids) { await tools.demo_shipping_list({ paid: false }); await tools.demo_shipping_mark_paid({ id }); }\n\
             return (await tools.demo_shipping_list({ paid: false })).length;",
        ),
    ));
    assert_eq!(r.to_json()["value"], json!(1), "{}", r.to_json());
}

/// Cycling the key order of one input is still one repeated call: under the default
/// thresholds 300 such calls used to run (each order was a "different" call); now the circuit
/// breaker fails the run as it does for one order.
#[test]
fn key_order_does_not_evade_the_breaker() {
    let rt = rt();
    let cm = runtime(json!({"tools": {"loopDetection": {"enabled": true}}}));
    let ctx = RunContext::session("loops-key-order");
    let code = "const inputs = [{ a: 1, b: 2, c: 3 }, { c: 3, a: 1, b: 2 }, { b: 2, c: 3, a: 1 }];\n\
                let ran = 0;\n\
                for (let i = 0; i < 300; i++) { try { await tools.demo_echo(inputs[i % 3]); ran++; } catch (e) {} }\n\
                return ran;";
    let r = rt.block_on(cm.exec(&ctx, &CodeModeExecInput::code(code)));
    assert_eq!(r.error_code(), Some(CodeModeErrorCode::NestedToolFailed), "{}", r.to_json());
    assert!(r.to_json()["error"].as_str().unwrap().contains("genericRepeat"), "{}", r.to_json());
    assert!(r.telemetry().call_count < 300, "{}", r.to_json()["telemetry"]);
}
