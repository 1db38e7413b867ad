//! Requests still in flight when a run ends, on both QuickJS engines. The native engine
//! answers a request with a promise it settles itself and keeps that promise's resolving functions
//! (QuickJS references) until the result comes: a run that completes, fails, times out or is
//! dropped while suspended with calls in flight must give them back before its VM goes, or
//! QuickJS's own check for leaked objects aborts the process when the runtime is freed. Each case
//! runs several times; the engine must go on serving cells afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{CodeMode, CodeModeConfig, CodeModeErrorCode, CodeModeExecInput, CodeModeResult, RunContext};
use serde_json::json;

const ENGINES: [&str; 2] = ["quickjs", "quickjs-wasi"];

use codemode_testing::runtime;

async fn exec(cm: &CodeMode, code: &str) -> CodeModeResult {
    cm.exec(&RunContext::session("in-flight"), &CodeModeExecInput::code(code)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_that_end_with_calls_in_flight_release_them() {
    for engine in ENGINES {
        let cm = runtime(engine, 300);
        for _ in 0..5 {
            // Completes while two calls are still unanswered.
            let r = exec(&cm, "tools.demo_echo({ a: 1 }); tools.demo_sleep({ ms: 50 }); return 'done';").await;
            assert!(
                matches!(&r, CodeModeResult::Completed { value, .. } if *value == json!("done")),
                "{engine}: {}",
                r.to_json()
            );
            // Fails with a call unanswered.
            let r = exec(&cm, "tools.demo_echo({ a: 1 }); throw new Error('boom');").await;
            assert!(matches!(r, CodeModeResult::Failed { .. }), "{engine}: {}", r.to_json());
            // Times out busy, with a slow call outstanding.
            let r = exec(&cm, "tools.demo_sleep({ ms: 2000 }); while (true) {}").await;
            assert_eq!(r.error_code(), Some(CodeModeErrorCode::Timeout), "{engine}: {}", r.to_json());
        }
        let r = exec(&cm, "return await tools.demo_echo({ after: true });").await;
        assert!(
            matches!(&r, CodeModeResult::Completed { value, .. } if value["after"] == json!(true)),
            "{engine}: {}",
            r.to_json()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_dropped_with_suspended_runs_releases_their_calls() {
    for engine in ENGINES {
        // A run waiting on tools at `timeoutMs` is suspended (`waiting`), not failed.
        let cm = runtime(engine, 300);
        for _ in 0..3 {
            let r = exec(&cm, "const a = tools.demo_sleep({ ms: 3000 }); const b = tools.demo_sleep({ ms: 3000 }); return [await a, await b];").await;
            assert!(matches!(r, CodeModeResult::Waiting { .. }), "{engine}: {}", r.to_json());
        }
        // The suspended runs (for the native engine: live VMs with two promises each) go with it.
        drop(cm);
    }
}

/// `inline_wait` (the guest worker waits itself for calls answered from another thread): quick
/// answers, a fan-out of slow calls, and a call slower than `timeoutMs` all behave as without it —
/// values right, slow calls started together (not one window apart each beyond the window), the
/// run suspending and resuming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_waits_keep_fan_out_and_suspension() {
    use codemode::{CodeModeWaitInput, FnTool, LocalTools, ToolDefinition, ToolResult, ToolSource};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut tools = LocalTools::new();
    // Answered from a plain thread after ~0.2 ms (as a host language's thread answers).
    tools.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Plugin, "t", "quick"), |input| async move {
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_micros(200));
            let _ = tx.send(input["n"].as_i64().unwrap_or(0) * 2);
        });
        Ok(ToolResult::value(json!(rx.await.unwrap_or(-1))))
    })));
    // Counts the slow calls running at once, and the most there ever were.
    let running = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
    let r2 = running.clone();
    tools.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Plugin, "t", "slow"), move |_| {
        let running = r2.clone();
        async move {
            let now = running.0.fetch_add(1, Ordering::SeqCst) + 1;
            running.1.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(400)).await;
            running.0.fetch_sub(1, Ordering::SeqCst);
            Ok(ToolResult::value(json!("slow")))
        }
    })));
    let config = CodeModeConfig { timeout_ms: 2_000, ..CodeModeConfig::enabled() };
    let cm = CodeMode::builder(config.clone())
        .engine_name("quickjs-wasi")
        .local_tools(tools.clone())
        .inline_wait(std::time::Duration::from_millis(5))
        .build();
    let r = exec(&cm, "let s = 0; for (let i = 0; i < 50; i++) s += await tools.quick({n: i}); return s").await;
    assert_eq!(r.to_json()["value"], json!(2450), "{}", r.to_json());
    // Eight slow calls at once: each waited for only a window before the next started, so all
    // eight ran together (one at a time, the guest would have waited for each).
    let r = exec(&cm, "return (await Promise.all([1,2,3,4,5,6,7,8].map(() => tools.slow({})))).length").await;
    assert_eq!(r.to_json()["value"], json!(8), "{}", r.to_json());
    assert_eq!(running.1.load(Ordering::SeqCst), 8, "the slow calls ran together");
    // A call slower than timeoutMs still suspends the run, which resumes.
    let cm = CodeMode::builder(CodeModeConfig { timeout_ms: 100, ..config })
        .engine_name("quickjs-wasi")
        .local_tools(tools)
        .inline_wait(std::time::Duration::from_millis(5))
        .build();
    let ctx = RunContext::session("in-flight");
    let r = cm.exec(&ctx, &CodeModeExecInput::code("return await tools.slow({})")).await;
    assert_eq!(r.status(), "waiting", "{}", r.to_json());
    let mut r = r;
    while let CodeModeResult::Waiting { run_id, .. } = &r {
        r = cm.wait(&ctx, &CodeModeWaitInput::new(run_id.clone())).await;
    }
    assert_eq!(r.to_json()["value"], json!("slow"));
}
