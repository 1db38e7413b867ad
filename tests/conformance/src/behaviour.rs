//! Engine-generic behaviour tests: what the corpus cannot express (several runs, stores, clocks,
//! hooks, concurrency). Each function is one test; [`crate::suite`] lists them as trials, with the
//! engine capabilities each needs (a test the engine's claims rule out is reported as ignored, and
//! the functions here never skip anything themselves). Checklist ids of the contract (the book's
//! contract pages) are cited in the names' docs.

use crate::{SESSION, config, ctx, harness, harness_with_held, run_to_end};
use codemode::{
    CodeMode, CodeModeErrorCode, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, GuestEngine, ManualClock,
    MemorySnapshotStore, NestedToolCall, RunContext, RunId, ToolError, ToolErrorKind, ToolHook, ToolResult,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

fn code(s: &str) -> CodeModeExecInput {
    CodeModeExecInput::code(s)
}

fn expect_failed(r: &CodeModeResult, code: Option<CodeModeErrorCode>, message: &str) {
    match r {
        CodeModeResult::Failed { error, code: c, .. } => {
            assert_eq!(*c, code, "unexpected code for `{error}`");
            assert!(error.contains(message), "`{error}` does not contain `{message}`");
        }
        other => panic!("expected failed, got {}", other.to_json()),
    }
}

fn completed_value(r: &CodeModeResult) -> &Value {
    match r {
        CodeModeResult::Completed { value, .. } => value,
        other => panic!("expected completed, got {}", other.to_json()),
    }
}

async fn yielded(cm: &CodeMode, ctx: &RunContext) -> String {
    let r = cm.exec(ctx, &code("await yield_control('pause'); return 'resumed'")).await;
    match r.run_id() {
        Some(id) => id.to_string(),
        None => panic!("expected waiting, got {}", r.to_json()),
    }
}

/// V22, V26 (WF1, WF4): unknown, malformed and other-session run ids fail with `invalid_input` and
/// the contract's messages (contract §6), without consuming the run.
pub async fn wait_lookup_failures(engine: Arc<dyn GuestEngine>) {
    let cm = harness(engine, config(json!({})));
    let c = ctx();
    for bad in ["cm_doesnotexist", "../../etc/passwd", "", &"x".repeat(500)] {
        let r = cm.wait(&c, &CodeModeWaitInput::new(bad)).await;
        expect_failed(&r, Some(CodeModeErrorCode::InvalidInput), "code mode run is unavailable or expired.");
    }
    let r = cm.wait_json(&c, &json!({"runId": 42})).await;
    expect_failed(&r, Some(CodeModeErrorCode::InvalidInput), "runId");
    let id = yielded(&cm, &c).await;
    let other = RunContext::session("someone-else");
    let r = cm.wait(&other, &CodeModeWaitInput::new(&id)).await;
    expect_failed(&r, Some(CodeModeErrorCode::InvalidInput), "code mode run belongs to a different session.");
    let mut other_run = c.clone();
    other_run.scope.agent_run_id = Some("another-agent-run".into());
    let mut first_run = c.clone();
    first_run.scope.agent_run_id = Some("agent-run-1".into());
    let id2 = yielded(&cm, &first_run).await;
    let r = cm.wait(&other_run, &CodeModeWaitInput::new(&id2)).await;
    expect_failed(&r, Some(CodeModeErrorCode::InvalidInput), "belongs to a different agent run");
    // The rightful owner still resumes both.
    assert_eq!(completed_value(&cm.wait(&c, &CodeModeWaitInput::new(&id)).await), &json!("resumed"));
    assert_eq!(completed_value(&cm.wait(&first_run, &CodeModeWaitInput::new(&id2)).await), &json!("resumed"));
    // V21/E15: a settled run is gone.
    let r = cm.wait(&c, &CodeModeWaitInput::new(&id)).await;
    expect_failed(&r, Some(CodeModeErrorCode::InvalidInput), "unavailable or expired");
    assert_eq!(cm.store().count().await, 0);
}

/// WF5: only one `wait` at a time per run. The second `wait` is sent once the first drives the run
/// (its nested call held by the test), and refused; the first goes on to the result.
pub async fn wait_is_exclusive(engine: Arc<dyn GuestEngine>) {
    let (cm, mut held) = harness_with_held(engine, config(json!({ "timeoutMs": 300 })));
    let c = ctx();
    let r = cm.exec(&c, &code("const r = await tools.held({}); return r.slept")).await;
    let id = r.run_id().map(str::to_string).unwrap_or_else(|| panic!("expected waiting: {}", r.to_json()));
    let call = held.next_call().await.unwrap_or_else(|| panic!("the cell called the held tool"));
    let input = CodeModeWaitInput::new(&id);
    let (a, b) = tokio::join!(cm.wait(&c, &input), async {
        while cm.runs_in_progress() == 0 {
            tokio::task::yield_now().await;
        }
        let b = cm.wait(&c, &input).await;
        call.respond(json!({ "slept": 2500 }));
        b
    });
    expect_failed(&b, Some(CodeModeErrorCode::InvalidInput), "already being resumed");
    let steps = {
        let mut last = a;
        for _ in 0..40 {
            if last.status() != "waiting" {
                break;
            }
            last = cm.wait(&c, &CodeModeWaitInput::new(&id)).await;
        }
        last
    };
    assert_eq!(completed_value(&steps), &json!(2500));
}

/// V25: the 65th concurrently suspended run is rejected with the contract's message (contract V25); the others survive.
pub async fn sixty_fifth_suspension(engine: Arc<dyn GuestEngine>) {
    let cm = harness(engine, config(json!({})));
    let c = ctx();
    let mut ids = Vec::new();
    for _ in 0..64 {
        ids.push(yielded(&cm, &c).await);
    }
    let r = cm.exec(&c, &code("await yield_control(); return 1")).await;
    expect_failed(&r, None, "too many suspended code mode runs.");
    assert_eq!(cm.store().count().await, 64);
    for id in &ids {
        assert_eq!(completed_value(&cm.wait(&c, &CodeModeWaitInput::new(id)).await), &json!("resumed"));
    }
    assert_eq!(cm.store().count().await, 0);
    assert_eq!(yielded(&cm, &c).await.len(), ids[0].len(), "slots are free again");
}

/// WF2, E15: an expired run cannot be resumed and its state is gone.
pub async fn expiry_cleans_up(engine: Arc<dyn GuestEngine>) {
    let clock = ManualClock::at(1_000_000);
    let store = Arc::new(MemorySnapshotStore::with_clock(Arc::new(clock.clone())));
    let cm = CodeMode::builder(config(json!({ "snapshotTtlSeconds": 5 })))
        .engine(engine)
        .local_tools(codemode_demo::demo_tools())
        .store(store.clone())
        .clock(Arc::new(clock.clone()))
        .build();
    let c = ctx();
    let id = yielded(&cm, &c).await;
    clock.advance_ms(4_999);
    let keep = yielded(&cm, &c).await;
    clock.advance_ms(1);
    let r = cm.wait(&c, &CodeModeWaitInput::new(&id)).await;
    expect_failed(&r, Some(CodeModeErrorCode::InvalidInput), "code mode run is unavailable or expired.");
    assert_eq!(store_len(&cm).await, 1, "only the younger run is left");
    assert_eq!(completed_value(&cm.wait(&c, &CodeModeWaitInput::new(&keep)).await), &json!("resumed"));
}

async fn store_len(cm: &CodeMode) -> usize {
    cm.store().count().await
}

/// WF3, E15: an aborted run is gone and its nested calls are stopped.
pub async fn abort_cleans_up(engine: Arc<dyn GuestEngine>) {
    let cm = harness(engine, config(json!({ "timeoutMs": 200 })));
    let c = ctx();
    let r = cm.exec(&c, &code("await tools.demo_sleep({ms: 5000}); return 'never'")).await;
    let id = r.run_id().map(str::to_string).unwrap_or_else(|| panic!("expected waiting: {}", r.to_json()));
    let run_id = RunId::parse(&id).unwrap_or_else(|e| panic!("{e}"));
    assert!(cm.abort(&run_id).await);
    assert!(!cm.abort(&run_id).await, "nothing left to abort");
    let r = cm.wait(&c, &CodeModeWaitInput::new(&id)).await;
    expect_failed(&r, Some(CodeModeErrorCode::InvalidInput), "unavailable or expired");
    assert_eq!(cm.store().count().await, 0);
}

/// V20: snapshot limits hold for suspended runs. Needs an engine that knows its snapshots' size:
/// serialized ones, or live ones of an engine that accounts its heap (`memoryLimit`).
pub async fn snapshot_limit(engine: Arc<dyn GuestEngine>) {
    let cm = harness(engine, config(json!({ "maxSnapshotBytes": 1024 })));
    let r = cm.exec(&ctx(), &code("const big = 'y'.repeat(200000); await yield_control(); return big.length")).await;
    expect_failed(&r, Some(CodeModeErrorCode::SnapshotLimitExceeded), "exceeds maxSnapshotBytes");
    assert_eq!(r.telemetry().limit_failures.snapshot, 1);
    assert_eq!(cm.store().count().await, 0);
}

/// V20: the output limit holds across a suspension: each result carries at most `maxOutputBytes`.
pub async fn output_limit_across_suspension(engine: Arc<dyn GuestEngine>) {
    let cm = harness(engine, config(json!({ "maxOutputBytes": 1024 })));
    let steps = run_to_end(
        &cm,
        &code("text('a'.repeat(800)); await yield_control(); text('b'.repeat(800)); await yield_control(); text('c'.repeat(2000)); return 1"),
    )
    .await;
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[0].output().len(), 1);
    assert_eq!(steps[1].output().len(), 1, "output after a restore is returned by that wait (E14)");
    expect_failed(&steps[2], Some(CodeModeErrorCode::OutputLimitExceeded), "output limit exceeded");
    assert_eq!(cm.store().count().await, 0);
}

/// E12–E14, V21: a nested call outlives the `exec` that started it; `wait` delivers its result into the
/// restored VM, and output produced after the restore reaches the final result.
pub async fn nested_calls_continue_after_exec(engine: Arc<dyn GuestEngine>) {
    let (cm, mut held) = harness_with_held(engine, config(json!({ "timeoutMs": 150 })));
    let c = ctx();
    let first =
        cm.exec(&c, &code("text('before'); const r = await tools.held({}); text('after ' + r.slept); return r")).await;
    let CodeModeResult::Waiting { run_id, reason, pending_tool_calls, output, .. } = &first else {
        panic!("expected waiting, got {}", first.to_json());
    };
    assert_eq!(reason, &codemode_core::result::WaitReason::PendingTools);
    assert_eq!(pending_tool_calls.len(), 1);
    assert_eq!(pending_tool_calls[0].tool_id, "plugin:conformance:held");
    assert_eq!(output.len(), 1);
    // The call is still running after the exec returned; it ends without a `wait` in progress.
    let call = held.next_call().await.unwrap_or_else(|| panic!("the cell called the held tool"));
    call.respond(json!({ "slept": 400 }));
    let done = cm.wait(&c, &CodeModeWaitInput::new(run_id)).await;
    assert_eq!(completed_value(&done), &json!({"slept": 400}));
    assert_eq!(done.output().len(), 1);
    assert_eq!(done.telemetry().wait_count, 1);
    assert_eq!(done.telemetry().call_count, 1);
}

/// Runs `src` on `cm`, expects it to fail with `expected`, then checks that the host still runs an
/// ordinary cell.
async fn survives(cm: &CodeMode, src: &str, expected: Option<CodeModeErrorCode>) {
    let c = ctx();
    let r = cm.exec(&c, &code(src)).await;
    assert_eq!(r.status(), "failed", "{src}: {}", r.to_json());
    assert_eq!(r.error_code(), expected, "{src}: {}", r.to_json());
    let ok = cm.exec(&c, &code("return [1, 2, 3].map((x) => x * 2)")).await;
    assert_eq!(completed_value(&ok), &json!([2, 4, 6]), "host unharmed after `{src}`");
}

/// V18, V19, V17 and the hostile list: every hostile cell fails with its code and the host keeps
/// serving runs afterwards.
/// Needs nothing the engine claims: an output bomb, module loaders and deeply nested source.
pub async fn host_survives_hostile_cells(engine: Arc<dyn GuestEngine>) {
    // A slower engine must not time out building the text: a generous time limit.
    let roomy = harness(engine.clone(), config(json!({ "timeoutMs": 20000, "maxOutputBytes": 4096 })));
    survives(&roomy, "text('x'.repeat(10 * 1024 * 1024))", Some(CodeModeErrorCode::OutputLimitExceeded)).await;
    for src in ["import fs from 'fs'", "return await import('fs')", "return require('child_process')"] {
        survives(&roomy, src, Some(CodeModeErrorCode::ModuleAccessDenied)).await;
    }
    // Deeply nested source, in JavaScript (the engine's own parser, which checks its
    // stack) and in TypeScript (refused by the nesting bound before the host-side transform).
    let (cm, c, n) = (roomy, ctx(), 100_000);
    let deep = [
        format!("return {}1{}", "(".repeat(n), ")".repeat(n)),
        format!("return 1{}", "+1".repeat(n)),
        format!("return {}1{}", "[".repeat(n), "]".repeat(n)),
        format!("return {}x", "!".repeat(n)),
        format!("{}{}", "{".repeat(n), "}".repeat(n)),
    ];
    for src in &deep {
        for language in ["javascript", "typescript"] {
            let input = CodeModeExecInput { language: Some(language.to_string()), ..code(src) };
            let r = cm.exec(&c, &input).await;
            // JavaScript may run (QuickJS copes with some shapes) or fail cleanly; TypeScript is refused.
            if language == "typescript" {
                assert_eq!(r.error_code(), Some(CodeModeErrorCode::TypescriptTransformFailed), "{}", r.to_json());
            } else {
                assert!(matches!(r.status(), "failed" | "completed"), "{}", r.to_json());
            }
            let ok = cm.exec(&c, &code("return 'alive'")).await;
            assert_eq!(completed_value(&ok), &json!("alive"), "host unharmed after a deep {language} cell");
        }
    }
    assert_eq!(cm.store().count().await, 0);
}

/// Busy loops, also after an `await`, end as `timeout` and leave the host unharmed. Needs
/// `interrupt`.
pub async fn hostile_loops_time_out(engine: Arc<dyn GuestEngine>) {
    let quick = harness(engine, config(json!({ "timeoutMs": 400, "maxOutputBytes": 4096 })));
    for src in ["while (true) {}", "await tools.demo_echo({}); for (;;) {}"] {
        survives(&quick, src, Some(CodeModeErrorCode::Timeout)).await;
    }
    assert_eq!(quick.store().count().await, 0);
}

/// Memory bombs (big strings, many small objects) end as `memory_limit_exceeded` and leave the host
/// unharmed. Needs `memoryLimit`.
pub async fn hostile_memory_bombs_are_stopped(engine: Arc<dyn GuestEngine>) {
    // Bombs of small objects take a while to fill even an 8 MiB heap, and these machines are shared.
    let cm =
        harness(engine, config(json!({ "timeoutMs": 20000, "memoryLimitBytes": 8388608, "maxOutputBytes": 4096 })));
    for src in [
        "const a = []; for (;;) a.push('x'.repeat(1 << 16) + a.length)",
        "const m = new Map(); for (let i = 0; ; i++) m.set(i, { i, s: 'v' + i })",
    ] {
        survives(&cm, src, Some(CodeModeErrorCode::MemoryLimitExceeded)).await;
    }
    assert_eq!(cm.store().count().await, 0);
}

/// Unbounded recursion is a catchable error in the guest (the run fails without a code), never a
/// host stack overflow. Needs `stackLimit`.
pub async fn hostile_recursion_is_caught(engine: Arc<dyn GuestEngine>) {
    let cm = harness(engine, config(json!({ "timeoutMs": 20000, "maxOutputBytes": 4096 })));
    survives(&cm, "function f(n) { return f(n + 1) + 1 } return f(0)", None).await;
    assert_eq!(cm.store().count().await, 0);
}

/// E15: a timeout discards the run's state and stops its nested calls.
pub async fn timeout_cleans_up(engine: Arc<dyn GuestEngine>) {
    let (cm, mut held) = harness_with_held(engine, config(json!({ "timeoutMs": 200 })));
    let c = ctx();
    let r = cm.exec(&c, &code("tools.held({}); while (true) {}")).await;
    expect_failed(&r, Some(CodeModeErrorCode::Timeout), "timed out");
    assert_eq!(r.telemetry().limit_failures.timeout, 1);
    assert_eq!(cm.store().count().await, 0, "the run's state is discarded");
    // Its nested call was started, and is stopped with the run (the tool sees it given up).
    let mut call = held.try_next_call().unwrap_or_else(|| panic!("the cell's nested call was started"));
    tokio::time::timeout(std::time::Duration::from_secs(20), call.cancelled())
        .await
        .unwrap_or_else(|_| panic!("the timed-out run's nested call is stopped"));
}

struct CountingHook {
    before: AtomicU32,
    after: AtomicU32,
}

#[async_trait::async_trait]
impl ToolHook for CountingHook {
    async fn before_tool_call(&self, call: &mut NestedToolCall) -> Result<(), ToolError> {
        self.before.fetch_add(1, Ordering::SeqCst);
        assert_eq!(call.context.scope.session_id.as_deref(), Some(SESSION), "P2: session preserved");
        if call.tool_id == "plugin:demo:demo_invoice_send" {
            return Err(ToolError::new(ToolErrorKind::Denied, "approval denied by policy"));
        }
        if call.tool_id == "plugin:demo:demo_echo" {
            call.input = json!({ "rewritten": true });
        }
        Ok(())
    }

    async fn after_tool_call(&self, _call: &NestedToolCall, outcome: &mut Result<ToolResult, ToolError>) {
        self.after.fetch_add(1, Ordering::SeqCst);
        if let Ok(r) = outcome
            && let Some(o) = r.details.as_object_mut()
        {
            o.insert("audited".into(), json!(true));
        }
    }
}

/// V13, P6: hooks see every nested call, may deny or rewrite it, and see every result.
pub async fn hooks_see_every_call(engine: Arc<dyn GuestEngine>) {
    let hook = Arc::new(CountingHook { before: AtomicU32::new(0), after: AtomicU32::new(0) });
    let cm = CodeMode::builder(config(json!({})))
        .engine(engine)
        .local_tools(codemode_demo::demo_tools())
        .hook(hook.clone())
        .build();
    let r = cm
        .exec(
            &ctx(),
            &code(
                "const echo = await tools.demo_echo({ original: 1 });
                 let denied;
                 try { await tools.demo_invoice_send({ shipmentId: 'SHP-1001', amount: 1 }) } catch (e) { denied = e.message + ' / ' + e.code }
                 return { echo, denied }",
            ),
        )
        .await;
    assert_eq!(
        completed_value(&r),
        &json!({ "echo": { "rewritten": true, "audited": true }, "denied": "plugin:demo:demo_invoice_send: approval denied by policy / nested_tool_failed" })
    );
    assert_eq!(hook.before.load(Ordering::SeqCst), 2);
    assert_eq!(hook.after.load(Ordering::SeqCst), 2);
    assert_eq!(r.telemetry().call_count, 2);
    assert_eq!(r.telemetry().failed_call_count, 1);
}

/// Runs do not see each other: 12 concurrent cells with the same global names.
pub async fn concurrent_runs_are_isolated(engine: Arc<dyn GuestEngine>) {
    let cm = harness(engine, config(json!({})));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..12 {
        let cm = cm.clone();
        set.spawn(async move {
            let src = format!(
                "globalThis.mine = {i}; const r = await tools.demo_echo({{ i: {i} }}); await yield_control(); return [globalThis.mine, r.i]"
            );
            let steps = run_to_end(&cm, &code(&src)).await;
            (i, steps.last().map(CodeModeResult::to_json))
        });
    }
    while let Some(joined) = set.join_next().await {
        let (i, last) = joined.unwrap_or_else(|e| panic!("{e}"));
        let last = last.unwrap_or_default();
        assert_eq!(last["value"], json!([i, i]), "{last}");
    }
}

/// contract §17: telemetry counts searches, describes, calls and tool ids across exec and wait.
pub async fn telemetry_counts(engine: Arc<dyn GuestEngine>) {
    let cm = harness(engine, config(json!({})));
    let steps = run_to_end(
        &cm,
        &code(
            "const [hit] = await tools.search('list shipments');
             await tools.describe(hit.id);
             await tools.callValue(hit.id, {});
             await yield_control();
             await tools.demo_customer_get({ id: 'C-01' });
             try { await tools.call('plugin:demo:nope', {}) } catch (e) {}
             return 'ok'",
        ),
    )
    .await;
    let last = steps.last().map(|r| r.telemetry().clone()).unwrap_or_default();
    assert_eq!((last.exec_count, last.wait_count), (1, 1));
    assert_eq!((last.search_count, last.describe_count, last.call_count, last.failed_call_count), (1, 1, 3, 1));
    assert_eq!(
        last.nested_tool_ids,
        ["plugin:demo:demo_shipping_list", "plugin:demo:demo_customer_get", "plugin:demo:nope"]
    );
    let kinds: Vec<_> = last.snapshot_events.iter().map(|e| e.event).collect();
    use codemode_core::telemetry::SnapshotEventKind as K;
    assert_eq!(kinds, [K::Created, K::Restored, K::Deleted]);
}

/// An engine whose preparation is slow (a cold guest-module compile), delegating everything else.
struct SlowPrepare(Arc<dyn GuestEngine>);

impl GuestEngine for SlowPrepare {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn serializes_snapshots(&self) -> bool {
        self.0.serializes_snapshots()
    }
    fn prepare(&self) -> Result<(), codemode_core::engine::EngineError> {
        std::thread::sleep(std::time::Duration::from_millis(600));
        self.0.prepare()
    }
    fn start(
        &self,
        program: &codemode_core::engine::GuestProgram,
        limits: &codemode_core::engine::GuestLimits,
    ) -> Result<Box<dyn codemode_core::engine::GuestInstance>, codemode_core::engine::EngineError> {
        self.0.start(program, limits)
    }
    fn restore(
        &self,
        snapshot: codemode_core::engine::Snapshot,
        limits: &codemode_core::engine::GuestLimits,
    ) -> Result<Box<dyn codemode_core::engine::GuestInstance>, codemode_core::engine::EngineError> {
        self.0.restore(snapshot, limits)
    }
}

/// Engine preparation is never charged to a run, and a `waiting`
/// result always names what it waits for — a cell busy with instant answers past its time limit
/// is a `timeout`, not `waiting` with nothing pending.
pub async fn waiting_always_names_what_it_waits_for(engine: Arc<dyn GuestEngine>) {
    let slow = harness(Arc::new(SlowPrepare(engine.clone())), config(json!({"timeoutMs": 200})));
    let r = slow.exec(&ctx(), &code("const hits = await tools.search('echo'); return hits.length > 0")).await;
    assert_eq!(completed_value(&r), &json!(true), "preparation counted against timeoutMs");
    let cm = harness(engine, config(json!({"timeoutMs": 150})));
    let r = cm.exec(&ctx(), &code("for (;;) { await tools.search('echo'); await tools.demo_echo({}); }")).await;
    expect_failed(&r, Some(CodeModeErrorCode::Timeout), "timed out");
    let r = cm.exec(&ctx(), &code("await tools.demo_sleep({ ms: 1000 }); return 1")).await;
    match &r {
        CodeModeResult::Waiting { pending_tool_calls, .. } => {
            assert_eq!(pending_tool_calls.len(), 1, "{}", r.to_json())
        }
        other => panic!("expected waiting, got {}", other.to_json()),
    }
}

/// JSON equality where numbers compare by value (`-0` has no JSON form of its own and comes back
/// as `0`) and object key order does not matter (JavaScript lists integer-like keys first).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, p)| y.get(k).is_some_and(|q| json_eq(p, q)))
        }
        _ => a == b,
    }
}

/// contract O3/O4 as a property: random JSON-safe values (unicode strings, extreme numbers, nesting,
/// awkward keys) come back unchanged through a nested call's input and result and through `return`,
/// on every engine.
pub async fn json_values_round_trip(engine: Arc<dyn GuestEngine>) {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRunner};
    let cm = harness(engine, config(json!({ "timeoutMs": 20000 })));
    let key = prop_oneof![
        "[a-zA-Z_$][a-zA-Z0-9_$]{0,8}",
        "\\PC{0,6}",
        Just(String::new()),
        Just("a b".to_string()),
        Just("0".to_string()),
        Just("𝄞".to_string()),
    ]
    .prop_filter("forbidden keys are dropped by design", |k| {
        !["__proto__", "constructor", "prototype"].contains(&k.as_str())
    });
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        (-9_007_199_254_740_991i64..=9_007_199_254_740_991).prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    let values = leaf.prop_recursive(4, 32, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    // Deterministic: the same values on every run (random exploration is the fuzzers' job).
    let mut runner = TestRunner::new_with_rng(
        Config { cases: 48, ..Config::default() },
        proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    for _ in 0..48 {
        let tree = match values.new_tree(&mut runner) {
            Ok(t) => t,
            Err(e) => panic!("cannot generate a value: {e}"),
        };
        let v = tree.current();
        // JSON.parse, so keys are own data properties exactly as generated.
        let literal = serde_json::to_string(&v.to_string()).unwrap_or_default();
        let cell = format!(
            "const v = JSON.parse({literal}); const echoed = await tools.callValue('plugin:demo:demo_echo', {{ v }}); return {{ direct: v, echoed: echoed.v }};"
        );
        let r = cm.exec(&ctx(), &code(&cell)).await;
        let got = completed_value(&r);
        assert!(json_eq(&got["direct"], &v), "return changed the value:\n{v}\n{}", got["direct"]);
        assert!(json_eq(&got["echoed"], &v), "a nested call's round trip changed the value:\n{v}\n{}", got["echoed"]);
    }
}

/// contract §6, docs/src/engines.md (serialized snapshots): a run suspended by one engine instance is restored by
/// a fresh instance in another runtime sharing only the directory store — the way a second process
/// resumes it — and ends exactly as the uninterrupted run does. Engines that keep live snapshots
/// skip it (they cannot leave the process).
pub async fn resume_in_a_fresh_engine(first: Arc<dyn GuestEngine>, fresh: Arc<dyn GuestEngine>) {
    let dir = std::env::temp_dir().join(format!("codemode-conformance-resume-{}-{}", first.name(), std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = |dir: &std::path::Path| -> Arc<dyn codemode::SnapshotStore> {
        match codemode::DirectorySnapshotStore::new(dir) {
            Ok(s) => Arc::new(s),
            Err(e) => panic!("cannot create a directory store: {e}"),
        }
    };
    let runtime = |engine: Arc<dyn GuestEngine>| {
        CodeMode::builder(config(json!({ "timeoutMs": 5000 })))
            .engine(engine)
            .local_tools(codemode_demo::demo_tools())
            .local_tools(crate::conformance_tools())
            .store(store(&dir))
            .build()
    };
    let cell = "const rows = Array.from({ length: 300 }, (_, i) => ({ i, sq: i * i }));
        const m = new Map([['k', rows]]);
        text('before');
        const echoed = await tools.demo_echo({ n: 7 });
        await yield_control('checkpoint');
        const again = await tools.demo_echo({ n: echoed.n + 1 });
        return { sum: m.get('k').reduce((a, r) => a + r.sq, 0), last: rows[299], again, seed: typeof Math.random() };";
    // Uninterrupted, for reference (same engine, same store kind).
    let reference = run_to_end(&runtime(first.clone()), &code(cell)).await;
    let expected = completed_value(reference.last().unwrap_or_else(|| panic!("no result"))).clone();
    let a = runtime(first);
    let r = a.exec(&ctx(), &code(cell)).await;
    let Some(id) = r.run_id().map(str::to_string) else { panic!("expected waiting, got {}", r.to_json()) };
    drop(a);
    let b = runtime(fresh);
    let mut last = b.wait(&ctx(), &CodeModeWaitInput::new(&id)).await;
    for _ in 0..crate::MAX_STEPS {
        let Some(id) = last.run_id().map(str::to_string) else { break };
        last = b.wait(&ctx(), &CodeModeWaitInput::new(id)).await;
    }
    assert_eq!(completed_value(&last), &expected, "a fresh engine resumed the run to a different end");
    assert_eq!(last.telemetry().wait_count, 1);
    assert_eq!(b.store().count().await, 0, "nothing left in the store");
    let _ = std::fs::remove_dir_all(&dir);
}
