//! Abort and cancellation (contract P7, WF3, the `aborted` code): a caller that goes away
//! or a host abort ends the run as `aborted` — its nested calls are cancelled, its state is deleted,
//! and nothing is stored later for a `wait` nobody will send. The slow tool is a mock
//! (`codemode_testing::mock`): its calls are held until the test says, and the test sees each one
//! start and each one given up, so events are ordered by handles, not by sleeping.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CodeMode, CodeModeConfig, CodeModeErrorCode, CodeModeExecInput, CodeModeWaitInput, LocalTools, RunContext, RunId,
    ToolDefinition, ToolSource,
};
use codemode_testing::mock::{Call, Handle, mock};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Longest any awaited event may take before the test fails (a hang, not a slow machine).
const PATIENCE: Duration = Duration::from_secs(20);

fn runtime(timeout_ms: u64) -> (CodeMode, Handle) {
    runtime_on("quickjs-wasi", timeout_ms)
}

fn runtime_on(engine: &str, timeout_ms: u64) -> (CodeMode, Handle) {
    let (tools, handle) = slow_tool();
    let mut config = CodeModeConfig::enabled();
    config.timeout_ms = timeout_ms;
    (CodeMode::builder(config).engine_name(engine).local_tools(tools).build(), handle)
}

/// `plugin:t:slow`: each call held until the test answers it (here: never).
fn slow_tool() -> (LocalTools, Handle) {
    let (tool, handle) = mock(ToolDefinition::new(ToolSource::Plugin, "t", "slow"));
    let mut tools = LocalTools::new();
    tools.add(tool);
    (tools, handle)
}

/// The next call of the slow tool, once the cell makes it.
async fn started(handle: &mut Handle) -> Call {
    tokio::time::timeout(PATIENCE, handle.next_call()).await.expect("the cell calls the tool").expect("a call")
}

/// Waits until `call` is given up (its run aborted).
async fn given_up(call: &mut Call) {
    tokio::time::timeout(PATIENCE, call.cancelled()).await.expect("the nested call is cancelled");
}

/// Waits until no `exec` / `wait` of `cm` drives a run any more.
async fn idle(cm: &CodeMode) {
    tokio::time::timeout(PATIENCE, async {
        while cm.runs_in_progress() > 0 {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the runtime goes idle");
}

fn ctx() -> RunContext {
    RunContext::session("abort")
}

/// Drives `call` until the runtime is driving its run, then drops it (the caller goes away).
async fn drop_once_driving(cm: &CodeMode, call: impl std::future::Future<Output = codemode::CodeModeResult>) {
    tokio::pin!(call);
    let driving = async {
        while cm.runs_in_progress() == 0 {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::select! {
        r = &mut call => panic!("the call ended before it was dropped: {}", r.to_json()),
        _ = tokio::time::timeout(PATIENCE, driving) => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_exec_aborts_its_run() {
    // A budget long enough that the exec cannot suspend before the test drops it.
    let (cm, mut calls) = runtime(60_000);
    let (c, input) = (ctx(), CodeModeExecInput::code("return await tools.slow({})"));
    let mut call = {
        // The caller gives up while the cell waits on the slow call, once the call has started.
        let exec = cm.exec(&c, &input);
        tokio::pin!(exec);
        tokio::select! {
            r = &mut exec => panic!("the exec ended before it was dropped: {}", r.to_json()),
            call = started(&mut calls) => call,
        }
    };
    given_up(&mut call).await;
    idle(&cm).await;
    assert_eq!(calls.calls_made(), 1);
    // The run ended with its caller: nothing was stored for nobody.
    assert_eq!(cm.store().count().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_wait_aborts_the_run_it_resumed() {
    let (cm, mut calls) = runtime(200);
    let r = cm.exec(&ctx(), &CodeModeExecInput::code("return await tools.slow({})")).await;
    let run_id = r.run_id().unwrap().to_string();
    let mut call = started(&mut calls).await;
    assert_eq!(cm.store().count().await, 1);
    let (c, input) = (ctx(), CodeModeWaitInput::new(&run_id));
    drop_once_driving(&cm, cm.wait(&c, &input)).await;
    given_up(&mut call).await;
    idle(&cm).await;
    assert_eq!(cm.store().count().await, 0, "the run's state is deleted");
    let again = cm.wait(&ctx(), &CodeModeWaitInput::new(&run_id)).await;
    assert_eq!(again.error_code(), Some(CodeModeErrorCode::InvalidInput), "{}", again.to_json());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_reaches_a_run_while_a_wait_drives_it() {
    // The wait's budget is far away: it can only end at the abort.
    let (cm, mut calls) = runtime(60_000);
    let r = cm.exec(&ctx(), &CodeModeExecInput::code("await yield_control(); return await tools.slow({})")).await;
    let run_id = r.run_id().unwrap().to_string();
    let id = RunId::parse(&run_id).unwrap();
    let (c, input) = (ctx(), CodeModeWaitInput::new(&run_id));
    let (result, (aborted, mut call)) = tokio::join!(cm.wait(&c, &input), async {
        // Aborted while the wait drives the run: its cell made the slow call, the test holds it.
        let call = started(&mut calls).await;
        (cm.abort(&id).await, call)
    });
    assert!(aborted);
    assert_eq!(result.error_code(), Some(CodeModeErrorCode::Aborted), "{}", result.to_json());
    let events = result.to_json()["telemetry"]["snapshotEvents"].clone();
    assert!(events.as_array().unwrap().iter().any(|e| e["event"] == "aborted"), "{events}");
    given_up(&mut call).await;
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
        // Far sooner than its 20 s deadline (`idle` gives up long before it).
        tokio::time::timeout(Duration::from_secs(10), idle(&cm)).await.expect("the busy guest is interrupted");
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
    let (cm, mut calls) = runtime(200);
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
    let mut call = started(&mut calls).await;

    // Cancelling a wait aborts the run: its call is cancelled and the run is gone.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let handle = cm.wait_then(&ctx(), &CodeModeWaitInput::new(run_id.as_str()), move |r| {
        let _ = tx.send(r);
    });
    handle.cancel();
    let ended = rx.await.unwrap();
    assert_eq!(ended.error_code(), Some(CodeModeErrorCode::Aborted), "{}", ended.to_json());
    given_up(&mut call).await;
    let gone = cm.wait(&ctx(), &CodeModeWaitInput::new(run_id.as_str())).await;
    assert_eq!(gone.error_code(), Some(CodeModeErrorCode::InvalidInput));
}

/// With hooks, `exec_then` runs the async path; cancelling still delivers an `aborted` result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callback_calls_with_hooks_report_their_cancellation() {
    struct Quiet;
    impl codemode::ToolHook for Quiet {}
    let (tools, mut calls) = slow_tool();
    let mut config = CodeModeConfig::enabled();
    config.timeout_ms = 60_000;
    let cm = CodeMode::builder(config).engine_name("quickjs-wasi").local_tools(tools).hook(Arc::new(Quiet)).build();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let handle =
        cm.exec_then(&ctx(), &CodeModeExecInput::code("return await tools.call('plugin:t:slow', {})"), move |r| {
            let _ = tx.send(r);
        });
    let mut call = started(&mut calls).await;
    handle.cancel();
    let r = tokio::time::timeout(PATIENCE, rx).await.expect("a result arrives").unwrap();
    assert_eq!(r.error_code(), Some(CodeModeErrorCode::Aborted), "{}", r.to_json());
    given_up(&mut call).await;
}
