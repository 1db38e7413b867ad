//! Exported runs (issue 27 §3, SPEC §6): a `waiting` run leaves one runtime as bytes and resumes in
//! another, with its nested calls neither lost nor repeated; damaged, foreign, expired and
//! duplicate imports and exports of other scopes' runs are refused with coded errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CodeMode, CodeModeConfig, CodeModeErrorCode, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, FnTool,
    LocalTools, RunContext, RunId, ToolDefinition, ToolResult, ToolSource,
};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A runtime whose `slow` tool sleeps `sleep_ms` and counts its calls, and whose `fast` tool answers
/// at once.
fn runtime(engine: &str, sleep_ms: u64, calls: Arc<AtomicU32>) -> CodeMode {
    let mut tools = LocalTools::new();
    tools.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Plugin, "t", "slow"), move |input| {
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
            Ok(ToolResult::value(json!({ "echo": input, "slept": sleep_ms })))
        }
    })));
    let mut config = CodeModeConfig::enabled();
    config.timeout_ms = 200;
    CodeMode::builder(config).engine_name(engine).local_tools(tools).build()
}

const CELL: &str =
    "const r = await tools.call('plugin:t:slow', { n: 7 }); return { got: r.details.echo.n, slept: r.details.slept };";

async fn waiting(cm: &CodeMode, ctx: &RunContext) -> RunId {
    let r = cm.exec(ctx, &CodeModeExecInput::code(CELL)).await;
    assert_eq!(r.status(), "waiting", "{}", r.to_json());
    RunId::parse(r.run_id().unwrap()).unwrap()
}

fn code(r: &Result<impl std::fmt::Debug, codemode::CodeModeError>) -> Option<CodeModeErrorCode> {
    r.as_ref().err().and_then(|e| e.code)
}

/// The call started in the first runtime finishes during the export and its result travels with
/// the run: the second runtime resumes without calling the tool again.
#[tokio::test]
async fn an_exported_run_resumes_in_another_runtime_with_its_call_result() {
    let (first_calls, second_calls) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let first = runtime("quickjs-wasi", 600, first_calls.clone());
    let ctx = RunContext::session("portable");
    let id = waiting(&first, &ctx).await;
    let bytes = first.export_run(&ctx, &id).await.expect("export");
    assert!(bytes.starts_with(codemode_snapshot_magic()), "the export starts with its format header");
    // The run left the first runtime: neither a second export nor a wait finds it there.
    assert_eq!(code(&first.export_run(&ctx, &id).await), Some(CodeModeErrorCode::InvalidInput));
    let gone = first.wait(&ctx, &CodeModeWaitInput::new(id.as_str())).await;
    assert_eq!(gone.error_code(), Some(CodeModeErrorCode::InvalidInput), "{}", gone.to_json());

    let second = runtime("quickjs-wasi", 600, second_calls.clone());
    let imported = second.import_run(bytes.clone()).await.expect("import");
    assert_eq!(imported, id);
    let done = second.wait(&ctx, &CodeModeWaitInput::new(id.as_str())).await;
    match &done {
        CodeModeResult::Completed { value, .. } => assert_eq!(value, &json!({ "got": 7, "slept": 600 })),
        other => panic!("expected completed, got {}", other.to_json()),
    }
    assert_eq!(first_calls.load(Ordering::SeqCst), 1, "the tool ran once, in the exporting runtime");
    assert_eq!(second_calls.load(Ordering::SeqCst), 0, "the importing runtime did not repeat it");
}

fn codemode_snapshot_magic() -> &'static [u8] {
    b"codemode-run/1\n"
}

/// Another session cannot export the run; damaged bytes, bytes of another engine's runtime and a
/// second import of a run that is being resumed are refused with coded errors, and the runtime
/// keeps serving.
#[tokio::test]
async fn hostile_exports_and_imports_are_refused() {
    let calls = Arc::new(AtomicU32::new(0));
    let cm = runtime("quickjs-wasi", 400, calls.clone());
    let ctx = RunContext::session("owner");
    let id = waiting(&cm, &ctx).await;
    let intruder = RunContext::session("intruder");
    assert_eq!(code(&cm.export_run(&intruder, &id).await), Some(CodeModeErrorCode::InvalidInput));
    let unknown = RunId::parse("run-that-never-was").unwrap();
    assert_eq!(code(&cm.export_run(&ctx, &unknown).await), Some(CodeModeErrorCode::InvalidInput));

    let bytes = cm.export_run(&ctx, &id).await.expect("export");
    let mut damaged = bytes.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x55;
    let err = cm.import_run(damaged).await.expect_err("damaged bytes");
    assert_eq!(err.code, Some(CodeModeErrorCode::InvalidInput));
    assert!(err.message.contains("checksum"), "{}", err.message);
    assert_eq!(code(&cm.import_run(b"not a run".to_vec()).await), Some(CodeModeErrorCode::InvalidInput));
    assert_eq!(code(&cm.import_run(Vec::new()).await), Some(CodeModeErrorCode::InvalidInput));

    // A runtime of another engine cannot take a quickjs-wasi snapshot.
    let native = runtime("quickjs", 50, Arc::new(AtomicU32::new(0)));
    let err = native.import_run(bytes.clone()).await.expect_err("another engine");
    assert_eq!(err.code, Some(CodeModeErrorCode::InvalidInput));
    assert!(err.message.contains("quickjs-wasi"), "{}", err.message);

    // The intact bytes import, and resume to the right answer.
    cm.import_run(bytes.clone()).await.expect("import");
    let done = cm.wait(&ctx, &CodeModeWaitInput::new(id.as_str())).await;
    assert_eq!(done.status(), "completed", "{}", done.to_json());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Still serving.
    let r = cm.exec(&ctx, &CodeModeExecInput::code("return 40 + 2")).await;
    assert_eq!(r.to_json()["value"], json!(42));
}

/// A run whose TTL passed before the import is `snapshot_expired`; a live snapshot (the native
/// engine) cannot be exported and stays resumable where it is.
#[tokio::test]
async fn expired_and_live_runs_do_not_travel() {
    let calls = Arc::new(AtomicU32::new(0));
    let mut config = CodeModeConfig::enabled();
    config.timeout_ms = 100;
    config.snapshot_ttl_seconds = 1;
    let mut tools = LocalTools::new();
    let c = calls.clone();
    tools.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Plugin, "t", "slow"), move |_| {
        c.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(ToolResult::value(json!({ "echo": { "n": 1 }, "slept": 300 })))
        }
    })));
    let cm = CodeMode::builder(config).engine_name("quickjs-wasi").local_tools(tools).build();
    let ctx = RunContext::session("ttl");
    let id = waiting(&cm, &ctx).await;
    let bytes = cm.export_run(&ctx, &id).await.expect("export");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let err = cm.import_run(bytes).await.expect_err("expired");
    assert_eq!(err.code, Some(CodeModeErrorCode::SnapshotExpired), "{}", err.message);

    let native = runtime("quickjs", 300, Arc::new(AtomicU32::new(0)));
    let id = waiting(&native, &ctx).await;
    let err = native.export_run(&ctx, &id).await.expect_err("live snapshot");
    assert_eq!(err.code, Some(CodeModeErrorCode::InvalidInput));
    assert!(err.message.contains("live"), "{}", err.message);
    let done = native.wait(&ctx, &CodeModeWaitInput::new(id.as_str())).await;
    assert_eq!(done.status(), "completed", "the refused export left the run resumable: {}", done.to_json());
}
