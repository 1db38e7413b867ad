//! Requests still in flight when a run ends, on both QuickJS engines (issue 14). The native engine
//! answers a request with a promise it settles itself and keeps that promise's resolving functions
//! (QuickJS references) until the result comes: a run that completes, fails, times out or is
//! dropped while suspended with calls in flight must give them back before its VM goes, or
//! QuickJS's own check for leaked objects aborts the process when the runtime is freed. Each case
//! runs several times; the engine must go on serving cells afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{CodeMode, CodeModeConfig, CodeModeErrorCode, CodeModeExecInput, CodeModeResult, RunContext};
use codemode_testing::demo::demo_tools;
use serde_json::json;

const ENGINES: [&str; 2] = ["quickjs", "quickjs-wasi"];

fn runtime(engine: &str, timeout_ms: u64) -> CodeMode {
    let config = CodeModeConfig { timeout_ms, ..CodeModeConfig::enabled() };
    CodeMode::builder(config).engine_name(engine).local_tools(demo_tools()).build()
}

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
