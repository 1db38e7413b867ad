//! The trajectory (contract §12 P9, U9, V23, V24, E16): nested calls as transcript entries under the
//! model-visible `exec` / `wait` call that drove them, with redacted inputs and results, replayable
//! in order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::trajectory::{CallOutcome, ControlRecord, MASK, TraceRecord, Transcript, TranscriptEntry};
use codemode::{
    ApprovalDecision, ApprovalPolicy, CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, CodeModeWaitInput,
    NestedToolCall, RunContext, RunEvent, RunId, RunObserver, ToolError, ToolErrorKind, ToolHook,
};
use codemode_demo::demo_tools;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Sink(Mutex<Vec<TraceRecord>>);

impl RunObserver for Sink {
    fn on_event(&self, event: RunEvent) {
        if let RunEvent::Trace(r) = event {
            self.0.lock().unwrap().push(*r);
        }
    }
}

impl Sink {
    fn take(&self) -> Vec<TraceRecord> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn config(timeout_ms: u64) -> CodeModeConfig {
    CodeModeConfig::from_value(Some(&json!({"enabled": true, "timeoutMs": timeout_ms})), "tools.codeMode").unwrap()
}

fn call_ctx(id: &str) -> RunContext {
    RunContext { tool_call_id: Some(id.to_string()), ..RunContext::session("trajectory") }
}

fn nested(records: &[TraceRecord]) -> Vec<&TranscriptEntry> {
    records.iter().filter_map(|r| if let TraceRecord::Nested(e) = r { Some(e) } else { None }).collect()
}

fn control(records: &[TraceRecord]) -> Vec<&ControlRecord> {
    records.iter().filter_map(|r| if let TraceRecord::Control(c) = r { Some(c) } else { None }).collect()
}

/// E16 / V24: an `exec` that suspends and the `wait` that finishes it; each nested event names the
/// call that drove it, and the JSON lines replay into the same structure.
#[test]
fn e16_two_step_run_entries_sit_under_their_parent_calls() {
    let rt = rt();
    for engine in ["quickjs-wasi", "quickjs"] {
        let sink = Arc::new(Sink::default());
        let cm = CodeMode::builder(config(1_000))
            .engine_name(engine)
            .local_tools(demo_tools())
            .trajectory(sink.clone())
            .build();
        let code = "const a = await tools.demo_sleep({ ms: 1500 });\n\
                    const b = await tools.demo_echo({ x: 1, password: 'hunter2', blob: 'y'.repeat(5000) });\n\
                    return [a.slept, b.x];";
        let first = rt.block_on(cm.exec(&call_ctx("call_exec"), &CodeModeExecInput::code(code)));
        let CodeModeResult::Waiting { run_id, .. } = &first else { panic!("{}", first.to_json()) };
        let mut last = rt.block_on(cm.wait(&call_ctx("call_wait_1"), &CodeModeWaitInput::new(run_id.clone())));
        let mut n = 1;
        while let CodeModeResult::Waiting { run_id, .. } = &last {
            n += 1;
            last = rt.block_on(cm.wait(&call_ctx(&format!("call_wait_{n}")), &CodeModeWaitInput::new(run_id.clone())));
        }
        assert_eq!(last.status(), "completed", "{engine}: {}", last.to_json());
        let records = sink.take();
        let controls = control(&records);
        assert_eq!(
            controls
                .iter()
                .map(|c| (c.tool_call_id.as_deref().unwrap(), c.tool.as_str(), c.status.as_str()))
                .take(3)
                .collect::<Vec<_>>(),
            [("call_exec", "exec", "started"), ("call_exec", "exec", "waiting"), ("call_wait_1", "wait", "started")],
            "{engine}"
        );
        assert_eq!(controls[1].run_id.as_deref(), Some(run_id.as_str()));
        let entries = nested(&records);
        let sleep_issued =
            entries.iter().find(|e| e.tool_id == "plugin:demo:demo_sleep" && e.outcome == CallOutcome::Issued).unwrap();
        assert_eq!(
            (sleep_issued.parent_tool_call_id.as_deref(), sleep_issued.parent_tool.as_str()),
            (Some("call_exec"), "exec")
        );
        assert_eq!(sleep_issued.input, Some(json!({"ms": 1500})));
        assert_eq!(&sleep_issued.run_id, run_id);
        // The sleep finished while a `wait` drove the run: its completion is that wait's entry.
        let sleep_done = entries
            .iter()
            .find(|e| e.tool_id == "plugin:demo:demo_sleep" && e.outcome == CallOutcome::Completed)
            .unwrap();
        assert_eq!(sleep_done.parent_tool, "wait", "{engine}");
        assert!(sleep_done.parent_tool_call_id.as_deref().unwrap().starts_with("call_wait_"));
        assert!(sleep_done.duration_ms.unwrap() >= 1_000, "{sleep_done:?}");
        assert_eq!(sleep_done.result, Some(json!({"slept": 1500})));
        assert_eq!(sleep_done.request_id, sleep_issued.request_id);
        // Redaction: the password is masked, the big value is cut, in the input and in the result.
        let echo_issued =
            entries.iter().find(|e| e.tool_id == "plugin:demo:demo_echo" && e.outcome == CallOutcome::Issued).unwrap();
        let input = echo_issued.input.as_ref().unwrap();
        assert_eq!(input["truncated"], json!(true), "{input}");
        assert!(!input.to_string().contains("hunter2"), "{input}");
        assert!(input["preview"].as_str().unwrap().contains(&format!("\"password\":\"{MASK}\"")), "{input}");
        let echo_done = entries
            .iter()
            .find(|e| e.tool_id == "plugin:demo:demo_echo" && e.outcome == CallOutcome::Completed)
            .unwrap();
        assert!(!echo_done.result.as_ref().unwrap().to_string().contains("hunter2"));
        // Replay from JSON lines: the control calls in order, each with its entries.
        let text: String = records.iter().map(|r| r.to_json_line() + "\n").collect();
        let transcript = Transcript::from_json_lines(&text).unwrap();
        assert_eq!(transcript.records, records);
        let calls = transcript.calls();
        assert_eq!(calls[0].start.tool, "exec");
        assert_eq!(
            calls[0].entries.iter().map(|e| (e.tool_id.as_str(), e.outcome)).collect::<Vec<_>>(),
            [("plugin:demo:demo_sleep", CallOutcome::Issued)]
        );
        let last_call = calls.last().unwrap();
        assert_eq!(last_call.end.as_ref().unwrap().status, "completed");
        let all_wait_entries: Vec<_> =
            calls[1..].iter().flat_map(|c| c.entries.iter().map(|e| (e.tool_id.as_str(), e.outcome))).collect();
        assert_eq!(
            all_wait_entries,
            [
                ("plugin:demo:demo_sleep", CallOutcome::Completed),
                ("plugin:demo:demo_echo", CallOutcome::Issued),
                ("plugin:demo:demo_echo", CallOutcome::Completed)
            ],
            "{engine}"
        );
        assert_eq!(transcript.orphans(), 0);
    }
}

struct DenyEcho;

#[async_trait::async_trait]
impl ToolHook for DenyEcho {
    async fn before_tool_call(&self, call: &mut NestedToolCall) -> Result<(), ToolError> {
        if call.tool_id == "plugin:demo:demo_echo" {
            return Err(ToolError::new(ToolErrorKind::Denied, "echo is not allowed here"));
        }
        Ok(())
    }
}

/// Parked, approved, denied (hook and human), failed and cancelled calls are entries too; an
/// observer of one call gets that call's records.
#[test]
fn every_nested_outcome_is_an_entry() {
    let rt = rt();
    let sink = Arc::new(Sink::default());
    let cm = CodeMode::builder(config(2_000))
        .engine_name("quickjs")
        .local_tools(demo_tools())
        .hook(Arc::new(DenyEcho))
        .approvals(ApprovalPolicy::require(["plugin:demo:demo_invoice_send"]))
        .trajectory(sink.clone())
        .build();
    let observer = Arc::new(Sink::default());
    let code = "const out = [];\n\
                for (const f of [() => tools.demo_echo({}), () => tools.demo_fail({ message: 'boom' })]) {\n\
                  try { await f(); } catch (e) { out.push(e.message); }\n\
                }\n\
                out.push((await tools.demo_invoice_send({ shipmentId: 'SHP-1001', amount: 5 })).status);\n\
                try { await tools.demo_invoice_send({ shipmentId: 'SHP-1002', amount: 5 }); } catch (e) { out.push(e.message); }\n\
                return out;";
    let first = rt.block_on(cm.exec_observed(&call_ctx("c1"), &CodeModeExecInput::code(code), Some(observer.clone())));
    let run_id = first.run_id().unwrap().to_string();
    let id = RunId::parse(&run_id).unwrap();
    let parked = first.pending_tool_calls()[0].request_id;
    rt.block_on(cm.decide(&id, parked, ApprovalDecision::Approve)).unwrap();
    let second = rt.block_on(cm.wait(&call_ctx("c2"), &CodeModeWaitInput::new(run_id.clone())));
    let parked = second.pending_tool_calls()[0].request_id;
    rt.block_on(cm.decide(&id, parked, ApprovalDecision::Deny { reason: "not today".into() })).unwrap();
    let last = rt.block_on(cm.wait(&call_ctx("c3"), &CodeModeWaitInput::new(run_id.clone())));
    assert_eq!(last.status(), "completed", "{}", last.to_json());
    let records = sink.take();
    let outcomes: Vec<(&str, &str, CallOutcome)> = nested(&records)
        .iter()
        .map(|e| (e.parent_tool_call_id.as_deref().unwrap(), e.tool_id.rsplit(':').next().unwrap(), e.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("c1", "demo_echo", CallOutcome::Issued),
            ("c1", "demo_echo", CallOutcome::Denied),
            ("c1", "demo_fail", CallOutcome::Issued),
            ("c1", "demo_fail", CallOutcome::Failed),
            ("c1", "demo_invoice_send", CallOutcome::Issued),
            ("c1", "demo_invoice_send", CallOutcome::Parked),
            ("c2", "demo_invoice_send", CallOutcome::Approved),
            ("c2", "demo_invoice_send", CallOutcome::Completed),
            ("c2", "demo_invoice_send", CallOutcome::Issued),
            ("c2", "demo_invoice_send", CallOutcome::Parked),
            ("c3", "demo_invoice_send", CallOutcome::Denied),
        ]
    );
    let denied = nested(&records).into_iter().find(|e| e.outcome == CallOutcome::Denied).unwrap();
    assert!(denied.error.as_deref().unwrap().contains("echo is not allowed here"), "{denied:?}");
    // The observer of the `exec` saw exactly that call's records.
    let seen = observer.take();
    assert!(seen.iter().all(|r| match r {
        TraceRecord::Control(c) => c.tool_call_id.as_deref() == Some("c1"),
        TraceRecord::Nested(e) => e.parent_tool_call_id.as_deref() == Some("c1"),
        TraceRecord::Lifecycle(_) | TraceRecord::Decision(_) => false,
    }));
    assert_eq!(nested(&seen).len(), 6);

    // Aborting a run with a call in flight: a `cancelled` entry.
    let first =
        rt.block_on(cm.exec(&call_ctx("c4"), &CodeModeExecInput::code("await tools.demo_sleep({ ms: 60000 });")));
    let id = RunId::parse(first.run_id().unwrap()).unwrap();
    sink.take();
    let cm2 = cm.clone();
    let waiting = std::thread::spawn(move || {
        rt.block_on(async {
            let w = tokio::spawn({
                let cm2 = cm2.clone();
                let run = id.to_string();
                async move { cm2.wait(&call_ctx("c5"), &CodeModeWaitInput::new(run)).await }
            });
            while cm2.runs_in_progress() == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            assert!(cm2.abort(&id).await);
            w.await.unwrap()
        })
    });
    let aborted = waiting.join().unwrap();
    assert_eq!(aborted.error_code(), Some(codemode::CodeModeErrorCode::Aborted));
    let records = sink.take();
    let cancelled: Vec<_> = nested(&records).into_iter().filter(|e| e.outcome == CallOutcome::Cancelled).collect();
    assert_eq!(cancelled.len(), 1, "{records:?}");
    assert_eq!(
        (cancelled[0].parent_tool_call_id.as_deref(), cancelled[0].tool_id.as_str()),
        (Some("c5"), "plugin:demo:demo_sleep")
    );
}

/// A call's observer gets its records as JSON lines with the documented keys, inputs redacted.
#[test]
fn records_are_json_lines_with_redacted_inputs() {
    let rt = rt();
    let cm = CodeMode::builder(config(2_000)).engine_name("quickjs").local_tools(demo_tools()).build();
    let observer = Arc::new(Sink::default());
    let r = rt.block_on(cm.exec_observed(
        &call_ctx("y"),
        &CodeModeExecInput::code("return (await tools.demo_echo({ token: 'abc', n: 2 })).n"),
        Some(observer.clone()),
    ));
    assert_eq!(r.status(), "completed");
    let records = observer.take();
    let issued = nested(&records)[0];
    assert_eq!(issued.input, Some(json!({"token": MASK, "n": 2})));
    let line: Value = serde_json::from_str(&records[1].to_json_line()).unwrap();
    for key in ["parentToolCallId", "runId", "toolId", "outcome", "type"] {
        assert!(line.get(key).is_some(), "{key} missing in {line}");
    }
    let done: Value = serde_json::from_str(&records[2].to_json_line()).unwrap();
    assert!(done.get("durationMs").is_some(), "{done}");
}

/// Lifecycle events no call reports: a suspended run aborted out of band, and one
/// that expired, are records of the trajectory sink.
#[test]
fn expiry_and_out_of_band_abort_are_lifecycle_records() {
    use codemode::trajectory::LifecycleRecord;
    let rt = rt();
    let sink = Arc::new(Sink::default());
    let clock = Arc::new(codemode::ManualClock::at(1_000_000));
    let store = Arc::new(codemode::MemorySnapshotStore::with_clock(clock.clone()));
    let config = CodeModeConfig::from_value(
        Some(&json!({"enabled": true, "timeoutMs": 200, "snapshotTtlSeconds": 5})),
        "tools.codeMode",
    )
    .unwrap();
    let cm = CodeMode::builder(config)
        .engine_name("quickjs")
        .local_tools(demo_tools())
        .store(store)
        .clock(clock.clone())
        .trajectory(sink.clone())
        .build();
    let suspend = |cm: &CodeMode| {
        let r = rt.block_on(cm.exec(&call_ctx("x"), &CodeModeExecInput::code("await yield_control(); return 1")));
        RunId::parse(r.run_id().unwrap()).unwrap()
    };
    let aborted = suspend(&cm);
    assert!(rt.block_on(cm.abort(&aborted)));
    let expired = suspend(&cm);
    clock.advance_ms(6_000);
    rt.block_on(cm.sweep());
    let lifecycle: Vec<LifecycleRecord> = sink
        .take()
        .into_iter()
        .filter_map(|r| if let TraceRecord::Lifecycle(l) = r { Some(l) } else { None })
        .collect();
    assert_eq!(
        lifecycle.iter().map(|l| (l.run_id.clone(), l.event)).collect::<Vec<_>>(),
        [
            (aborted.to_string(), codemode::SnapshotEventKind::Aborted),
            (expired.to_string(), codemode::SnapshotEventKind::Expired)
        ]
    );
}

/// Nested calls made while a `wait` drives the run carry that wait's call id in their context (the
/// executor's transcript projection), not the original `exec`'s.
#[test]
fn nested_calls_carry_the_driving_calls_id() {
    struct Ids(Mutex<Vec<Option<String>>>);
    #[async_trait::async_trait]
    impl ToolHook for Ids {
        async fn before_tool_call(&self, call: &mut NestedToolCall) -> Result<(), ToolError> {
            self.0.lock().unwrap().push(call.context.tool_call_id.clone());
            Ok(())
        }
    }
    let rt = rt();
    let ids = Arc::new(Ids(Mutex::new(Vec::new())));
    let cm =
        CodeMode::builder(config(2_000)).engine_name("quickjs").local_tools(demo_tools()).hook(ids.clone()).build();
    let code = "await tools.demo_echo({}); await yield_control(); await tools.demo_echo({}); return 1";
    let first = rt.block_on(cm.exec(&call_ctx("the-exec"), &CodeModeExecInput::code(code)));
    let run_id = first.run_id().unwrap().to_string();
    let last = rt.block_on(cm.wait(&call_ctx("the-wait"), &CodeModeWaitInput::new(run_id)));
    assert_eq!(last.status(), "completed");
    assert_eq!(*ids.0.lock().unwrap(), [Some("the-exec".to_string()), Some("the-wait".to_string())]);
}

/// A read-only call lost with the process that ran it is issued again by the process that resumes
/// the run: a `reissued` entry under that process's `wait` (two runtimes over one directory store
/// stand in for the two processes; dropping the first releases its claim on the call).
#[test]
fn a_lost_read_only_call_is_a_reissued_entry() {
    let rt = rt();
    let dir = std::env::temp_dir().join(format!("codemode-trajectory-reissue-{}", std::process::id()));
    let store = || Arc::new(codemode::DirectorySnapshotStore::new(&dir).unwrap());
    let first = {
        let cm = CodeMode::builder(config(1_000))
            .engine_name("quickjs-wasi")
            .local_tools(demo_tools())
            .store(store())
            .build();
        rt.block_on(cm.exec(
            &call_ctx("e"),
            &CodeModeExecInput::code("const r = await tools.demo_sleep({ ms: 1500 }); return r.slept"),
        ))
    };
    let CodeModeResult::Waiting { run_id, .. } = &first else { panic!("{}", first.to_json()) };
    let sink = Arc::new(Sink::default());
    let cm = CodeMode::builder(config(5_000))
        .engine_name("quickjs-wasi")
        .local_tools(demo_tools())
        .store(store())
        .trajectory(sink.clone())
        .build();
    let mut last = rt.block_on(cm.wait(&call_ctx("w"), &CodeModeWaitInput::new(run_id.clone())));
    while let CodeModeResult::Waiting { run_id, .. } = &last {
        last = rt.block_on(cm.wait(&call_ctx("w"), &CodeModeWaitInput::new(run_id.clone())));
    }
    assert_eq!(last.to_json()["value"], json!(1500), "{}", last.to_json());
    let records = sink.take();
    let outcomes: Vec<(&str, CallOutcome)> =
        nested(&records).iter().map(|e| (e.parent_tool_call_id.as_deref().unwrap(), e.outcome)).collect();
    assert_eq!(outcomes, [("w", CallOutcome::Reissued), ("w", CallOutcome::Completed)]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An `exec` whose caller goes away (the MCP request was cancelled: the future is
/// dropped) still closes its control record — `failed` / `aborted` — and its nested call is recorded
/// as cancelled; nothing is left open in the audit trail.
#[test]
fn a_cancelled_exec_closes_its_control_record() {
    let rt = rt();
    let sink = Arc::new(Sink::default());
    let cm = CodeMode::builder(config(5_000))
        .engine_name("quickjs")
        .local_tools(demo_tools())
        .trajectory(sink.clone())
        .build();
    let dropped = rt.block_on(async {
        tokio::time::timeout(
            // Long enough for the nested call to start even on a loaded machine, well before it ends.
            std::time::Duration::from_millis(1_500),
            cm.exec(&call_ctx("cancelled-1"), &CodeModeExecInput::code("return await tools.demo_sleep({ ms: 4000 })")),
        )
        .await
    });
    assert!(dropped.is_err(), "the exec was still running when its caller went away");
    // The run notices the cancellation at its next step and records its nested call's end.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < until
        && !nested(&sink.0.lock().unwrap()).iter().any(|e| e.outcome == CallOutcome::Cancelled)
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let records = sink.take();
    let controls = control(&records);
    assert_eq!(controls.len(), 2, "a start and an end record: {records:?}");
    assert_eq!(controls[0].status, "started");
    assert_eq!((controls[1].status.as_str(), controls[1].code.as_deref()), ("failed", Some("aborted")), "{records:?}");
    assert_eq!(controls[1].tool_call_id.as_deref(), Some("cancelled-1"));
    assert!(controls[1].duration_ms.is_some());
    assert!(nested(&records).iter().any(|e| e.outcome == CallOutcome::Cancelled), "{records:?}");
}

/// A value holding U+2028, U+2029 or C1 controls cannot split (and so hide) its own
/// audit record for readers that split on Unicode line breaks: the JSON line escapes them and still
/// means the same value.
#[test]
fn audit_lines_hold_no_unicode_line_breaks() {
    let rt = rt();
    let path = std::env::temp_dir().join(format!("codemode-audit-breaks-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let audit =
        Arc::new(codemode::audit::JsonLinesAudit::start(codemode::audit::AuditTarget::File(path.clone())).unwrap());
    let cm = CodeMode::builder(config(2_000))
        .engine_name("quickjs")
        .local_tools(demo_tools())
        .trajectory(audit.clone())
        .build();
    let code = "return await tools.demo_echo({ s: 'hidden\\u2028call\\u2029here\\u0085and\\u009bthere' })";
    let r = rt.block_on(cm.exec(&call_ctx("breaks"), &CodeModeExecInput::code(code)));
    assert_eq!(r.status(), "completed", "{}", r.to_json());
    audit.close();
    let text = std::fs::read_to_string(&path).unwrap();
    for bad in ['\u{2028}', '\u{2029}', '\u{85}', '\u{9b}'] {
        assert!(!text.contains(bad), "{bad:?} raw in the audit log: {text:?}");
    }
    let transcript = Transcript::from_json_lines(&text).unwrap();
    let issued = transcript
        .records
        .iter()
        .find_map(|r| match r {
            TraceRecord::Nested(e) if e.outcome == CallOutcome::Issued => Some(e.clone()),
            _ => None,
        })
        .expect("the call's record");
    assert_eq!(issued.input.unwrap()["s"], json!("hidden\u{2028}call\u{2029}here\u{85}and\u{9b}there"));
    let _ = std::fs::remove_file(&path);
}
