//! Abort and cancellation (contract P7, WF3, the `aborted` code): a caller that goes away
//! or a host abort ends the run as `aborted` — its nested calls are cancelled, its state is deleted,
//! and nothing is stored later for a `wait` nobody will send.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CodeMode, CodeModeConfig, CodeModeErrorCode, CodeModeExecInput, CodeModeWaitInput, FnTool, LocalTools, RunContext,
    RunId, ToolDefinition, ToolResult, ToolSource,
};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Counts how often the slow tool started, finished, and was dropped before finishing.
#[derive(Default)]
struct Counts {
    started: AtomicU32,
    finished: AtomicU32,
    cancelled: AtomicU32,
}

struct DropCounter(Arc<Counts>, bool);

impl Drop for DropCounter {
    fn drop(&mut self) {
        if !self.1 {
            self.0.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn runtime(timeout_ms: u64) -> (CodeMode, Arc<Counts>) {
    runtime_on("quickjs-wasi", timeout_ms)
}

fn runtime_on(engine: &str, timeout_ms: u64) -> (CodeMode, Arc<Counts>) {
    let (tools, counts) = slow_tool();
    let mut config = CodeModeConfig::enabled();
    config.timeout_ms = timeout_ms;
    (CodeMode::builder(config).engine_name(engine).local_tools(tools).build(), counts)
}

/// `plugin:t:slow`: sleeps 3 s, counting starts, finishes and cancellations.
fn slow_tool() -> (LocalTools, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let c = counts.clone();
    let mut tools = LocalTools::new();
    tools.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Plugin, "t", "slow"), move |_| {
        let c = c.clone();
        async move {
            c.started.fetch_add(1, Ordering::SeqCst);
            let mut guard = DropCounter(c.clone(), false);
            tokio::time::sleep(Duration::from_secs(3)).await;
            guard.1 = true;
            c.finished.fetch_add(1, Ordering::SeqCst);
            Ok(ToolResult::value(json!("slept")))
        }
    })));
    (tools, counts)
}

fn ctx() -> RunContext {
    RunContext::session("abort")
}

/// Drives `call` until the runtime is driving its run, then drops it (the caller goes away).
async fn drop_once_driving(cm: &CodeMode, call: impl std::future::Future<Output = codemode::CodeModeResult>) {
    tokio::pin!(call);
    let driving = async {
        while cm.runs_in_progress() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // A little longer, so the guest is really inside its step.
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::select! {
        r = &mut call => panic!("the call ended before it was dropped: {}", r.to_json()),
        _ = tokio::time::timeout(Duration::from_secs(10), driving) => {}
    }
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_exec_aborts_its_run() {
    let (cm, counts) = runtime(1_000);
    let (c, input) = (ctx(), CodeModeExecInput::code("return await tools.slow({})"));
    {
        // The caller gives up while the cell waits on the slow call (once the call has started,
        // however slow this machine is today).
        let exec = cm.exec(&c, &input);
        tokio::pin!(exec);
        let started = async {
            while counts.started.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::select! {
            r = &mut exec => panic!("the exec ended before it was dropped: {}", r.to_json()),
            _ = tokio::time::timeout(Duration::from_secs(10), started) => {}
        }
    }
    settle().await;
    assert_eq!(counts.started.load(Ordering::SeqCst), 1);
    assert_eq!(counts.cancelled.load(Ordering::SeqCst), 1, "the nested call was cancelled");
    // Past the moment the exec would have suspended: nothing was stored for nobody.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(cm.store().count().await, 0);
    assert_eq!(counts.finished.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_wait_aborts_the_run_it_resumed() {
    let (cm, counts) = runtime(200);
    let r = cm.exec(&ctx(), &CodeModeExecInput::code("return await tools.slow({})")).await;
    let run_id = r.run_id().unwrap().to_string();
    assert_eq!(cm.store().count().await, 1);
    let (c, input) = (ctx(), CodeModeWaitInput::new(&run_id));
    drop_once_driving(&cm, cm.wait(&c, &input)).await;
    settle().await;
    assert_eq!(cm.store().count().await, 0, "the run's state is deleted");
    assert_eq!(counts.cancelled.load(Ordering::SeqCst), 1);
    let again = cm.wait(&ctx(), &CodeModeWaitInput::new(&run_id)).await;
    assert_eq!(again.error_code(), Some(CodeModeErrorCode::InvalidInput), "{}", again.to_json());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_reaches_a_run_while_a_wait_drives_it() {
    let (cm, counts) = runtime(2_000);
    let r = cm.exec(&ctx(), &CodeModeExecInput::code("await yield_control(); return await tools.slow({})")).await;
    let run_id = r.run_id().unwrap().to_string();
    let id = RunId::parse(&run_id).unwrap();
    let started = std::time::Instant::now();
    let (c, input) = (ctx(), CodeModeWaitInput::new(&run_id));
    let (result, aborted) = tokio::join!(cm.wait(&c, &input), async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        cm.abort(&id).await
    });
    assert!(aborted);
    assert_eq!(result.error_code(), Some(CodeModeErrorCode::Aborted), "{}", result.to_json());
    assert!(started.elapsed() < Duration::from_millis(1_500), "the wait ended at the abort, not at its deadline");
    let events = result.to_json()["telemetry"]["snapshotEvents"].clone();
    assert!(events.as_array().unwrap().iter().any(|e| e["event"] == "aborted"), "{events}");
    settle().await;
    assert_eq!(counts.cancelled.load(Ordering::SeqCst), 1);
    assert_eq!(cm.store().count().await, 0);
}

/// A busy guest is interrupted at once when its caller goes away (engines that claim `interrupt`),
/// not at its deadline: here 20 s away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_guest_stops_at_once_when_cancelled() {
    for engine in ["quickjs-wasi", "quickjs"].into_iter().filter(|e| codemode::Engines::by_name(e).is_some()) {
        let (cm, _) = runtime_on(engine, 20_000);
        let (c, input) = (ctx(), CodeModeExecInput::code("text('spinning'); while (true) {}"));
        drop_once_driving(&cm, cm.exec(&c, &input)).await;
        let started = std::time::Instant::now();
        while cm.runs_in_progress() > 0 {
            assert!(started.elapsed() < Duration::from_secs(5), "{engine}: the busy guest was not interrupted");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(cm.store().count().await, 0);
        let ok = cm.exec(&ctx(), &CodeModeExecInput::code("return 1")).await;
        assert_eq!(ok.to_json()["value"], json!(1), "{engine}");
    }
}

/// `exec_then` / `wait_then` (the callback form the language packages use) deliver the same
/// results as `exec` / `wait`, on the guest worker thread; `CallHandle::cancel` aborts the run
/// like dropping the future does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callback_calls_deliver_results_and_cancel_aborts() {
    let (cm, counts) = runtime(200);
    let (tx, rx) = tokio::sync::oneshot::channel();
    cm.exec_then(&ctx(), &CodeModeExecInput::code("return 6 * 7"), move |r| {
        let _ = tx.send((r, std::thread::current().name().map(str::to_string)));
    });
    let (r, thread) = rx.await.unwrap();
    assert_eq!(r.to_json()["value"], json!(42));
    assert_eq!(thread.as_deref(), Some(codemode::GUEST_THREAD_NAME));

    // A run that suspends, resumed through wait_then.
    let (tx, rx) = tokio::sync::oneshot::channel();
    cm.exec_then(&ctx(), &CodeModeExecInput::code("return await tools.call('plugin:t:slow', {})"), move |r| {
        let _ = tx.send(r);
    });
    let waiting = rx.await.unwrap();
    assert_eq!(waiting.status(), "waiting", "{}", waiting.to_json());
    let run_id = waiting.run_id().unwrap().to_string();

    // Cancelling a wait aborts the run: its call is cancelled and the run is gone.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let handle = cm.wait_then(&ctx(), &CodeModeWaitInput::new(run_id.as_str()), move |r| {
        let _ = tx.send(r);
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    handle.cancel();
    let ended = rx.await.unwrap();
    assert_eq!(ended.error_code(), Some(CodeModeErrorCode::Aborted), "{}", ended.to_json());
    settle().await;
    assert_eq!(counts.cancelled.load(Ordering::SeqCst), 1, "the nested call was cancelled");
    let gone = cm.wait(&ctx(), &CodeModeWaitInput::new(run_id.as_str())).await;
    assert_eq!(gone.error_code(), Some(CodeModeErrorCode::InvalidInput));
}

/// With hooks, `exec_then` runs the async path; cancelling still delivers an `aborted` result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callback_calls_with_hooks_report_their_cancellation() {
    struct Quiet;
    impl codemode::ToolHook for Quiet {}
    let (tools, counts) = slow_tool();
    let mut config = CodeModeConfig::enabled();
    config.timeout_ms = 5_000;
    let cm = CodeMode::builder(config).engine_name("quickjs-wasi").local_tools(tools).hook(Arc::new(Quiet)).build();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let handle =
        cm.exec_then(&ctx(), &CodeModeExecInput::code("return await tools.call('plugin:t:slow', {})"), move |r| {
            let _ = tx.send(r);
        });
    while cm.runs_in_progress() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    handle.cancel();
    let r = tokio::time::timeout(Duration::from_secs(5), rx).await.expect("a result arrives").unwrap();
    assert_eq!(r.error_code(), Some(CodeModeErrorCode::Aborted), "{}", r.to_json());
    settle().await;
    assert_eq!(counts.cancelled.load(Ordering::SeqCst), 1, "the nested call was cancelled");
}
