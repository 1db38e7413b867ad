//! Exported runs (the book's "Exported runs" in embedding.md): a `waiting` run leaves one runtime as
//! bytes and resumes in another, with its nested calls neither lost nor repeated; damaged, foreign,
//! expired, forged and duplicate imports and exports of other scopes' runs are refused with coded
//! errors (security.md, "Signed runs").
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

/// A runtime whose `slow` tool is a mock: each call waits until the test answers it through the
/// returned handle (`codemode_testing::mock`), so the tests order events without sleeping.
fn mocked(engine: &str) -> (CodeMode, codemode_testing::mock::Handle) {
    let (tool, handle) = codemode_testing::mock::mock(ToolDefinition::new(ToolSource::Plugin, "t", "slow"));
    let mut tools = LocalTools::new();
    tools.add(tool);
    let mut config = CodeModeConfig::enabled();
    config.timeout_ms = 200;
    (CodeMode::builder(config).engine_name(engine).local_tools(tools).build(), handle)
}

/// The answer of the mocked `slow` tool to the cell's call.
fn slow_answer() -> serde_json::Value {
    json!({ "echo": { "n": 7 }, "slept": 600 })
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

/// The call started in the first runtime is answered while the export waits for it, and its result
/// travels with the run: the second runtime resumes without calling the tool again.
#[tokio::test]
async fn an_exported_run_resumes_in_another_runtime_with_its_call_result() {
    let (first, mut first_calls) = mocked("quickjs-wasi");
    let ctx = RunContext::session("portable");
    let id = waiting(&first, &ctx).await;
    let call = first_calls.next_call().await.expect("the cell called the tool");
    assert_eq!(call.input, json!({ "n": 7 }));
    let export = {
        let (first, ctx, id) = (first.clone(), ctx.clone(), id.clone());
        tokio::spawn(async move { first.export_run(&ctx, &id).await })
    };
    call.respond(slow_answer());
    let bytes = export.await.expect("the export task").expect("export");
    assert!(bytes.starts_with(codemode_snapshot_magic()), "the export starts with its format header");
    // The run left the first runtime: neither a second export nor a wait finds it there.
    assert_eq!(code(&first.export_run(&ctx, &id).await), Some(CodeModeErrorCode::InvalidInput));
    let gone = first.wait(&ctx, &CodeModeWaitInput::new(id.as_str())).await;
    assert_eq!(gone.error_code(), Some(CodeModeErrorCode::InvalidInput), "{}", gone.to_json());

    let (second, second_calls) = mocked("quickjs-wasi");
    let imported = second.import_run(bytes.clone()).await.expect("import");
    assert_eq!(imported, id);
    let done = second.wait(&ctx, &CodeModeWaitInput::new(id.as_str())).await;
    match &done {
        CodeModeResult::Completed { value, .. } => assert_eq!(value, &json!({ "got": 7, "slept": 600 })),
        other => panic!("expected completed, got {}", other.to_json()),
    }
    assert_eq!(first_calls.calls_made(), 1, "the tool ran once, in the exporting runtime");
    assert_eq!(second_calls.calls_made(), 0, "the importing runtime did not repeat it");
}

fn codemode_snapshot_magic() -> &'static [u8] {
    codemode_snapshot::portable::MAGIC
}

/// Another session cannot export the run; damaged bytes, bytes of another engine's runtime and a
/// second import of a run that is being resumed are refused with coded errors, and the runtime
/// keeps serving.
#[tokio::test]
async fn hostile_exports_and_imports_are_refused() {
    let (cm, mut calls) = mocked("quickjs-wasi");
    let ctx = RunContext::session("owner");
    let id = waiting(&cm, &ctx).await;
    let intruder = RunContext::session("intruder");
    assert_eq!(code(&cm.export_run(&intruder, &id).await), Some(CodeModeErrorCode::InvalidInput));
    let unknown = RunId::parse("run-that-never-was").unwrap();
    assert_eq!(code(&cm.export_run(&ctx, &unknown).await), Some(CodeModeErrorCode::InvalidInput));

    let export = {
        let (cm, ctx, id) = (cm.clone(), ctx.clone(), id.clone());
        tokio::spawn(async move { cm.export_run(&ctx, &id).await })
    };
    calls.next_call().await.expect("the cell called the tool").respond(slow_answer());
    let bytes = export.await.expect("the export task").expect("export");
    let mut damaged = bytes.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x55;
    let err = cm.import_run(damaged).await.expect_err("damaged bytes");
    assert_eq!(err.code, Some(CodeModeErrorCode::InvalidInput));
    assert!(err.message.contains("altered or forged") || err.message.contains("signature"), "{}", err.message);
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
    assert_eq!(calls.calls_made(), 1);
    // Still serving.
    let r = cm.exec(&ctx, &CodeModeExecInput::code("return 40 + 2")).await;
    assert_eq!(r.to_json()["value"], json!(42));
}

/// A run whose TTL passed before the import is `snapshot_expired`; a live snapshot (the native
/// engine) cannot be exported and stays resumable where it is.
#[tokio::test]
async fn expired_and_live_runs_do_not_travel() {
    // The runtime's and the store's time is the test's: the TTL passes without waiting for it.
    let clock = Arc::new(codemode::ManualClock::at(1_000_000));
    let mut config = CodeModeConfig::enabled();
    config.timeout_ms = 100;
    config.snapshot_ttl_seconds = 1;
    let (tool, mut calls) = codemode_testing::mock::mock(ToolDefinition::new(ToolSource::Plugin, "t", "slow"));
    let mut tools = LocalTools::new();
    tools.add(tool);
    let cm = CodeMode::builder(config)
        .engine_name("quickjs-wasi")
        .local_tools(tools)
        .clock(clock.clone())
        .store(Arc::new(codemode::MemorySnapshotStore::with_clock(clock.clone())))
        .build();
    let ctx = RunContext::session("ttl");
    let id = waiting(&cm, &ctx).await;
    let export = {
        let (cm, ctx, id) = (cm.clone(), ctx.clone(), id.clone());
        tokio::spawn(async move { cm.export_run(&ctx, &id).await })
    };
    calls.next_call().await.expect("the cell called the tool").respond(slow_answer());
    let bytes = export.await.expect("the export task").expect("export");
    clock.advance_ms(1_200);
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

const K1: &[u8] = b"the team's key, at least 32 bytes long";
const K2: &[u8] = b"the next key after a rotation, 32+ bytes";

/// A runtime whose `pay` tool waits for approval and counts its calls, signing with `keys`.
fn gated(keys: codemode_snapshot::RunKeys, paid: Arc<AtomicU32>) -> CodeMode {
    let mut tools = LocalTools::new();
    tools.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Plugin, "t", "pay"), move |_| {
        let paid = paid.clone();
        async move {
            paid.fetch_add(1, Ordering::SeqCst);
            Ok(ToolResult::value(json!("paid")))
        }
    })));
    let mut config = CodeModeConfig::enabled();
    config.timeout_ms = 200;
    CodeMode::builder(config)
        .engine_name("quickjs-wasi")
        .local_tools(tools)
        .approvals(codemode::ApprovalPolicy::require(["plugin:t:pay"]))
        .run_keys(keys)
        .build()
}

/// The export with its envelope edited and the trailing 32 bytes replaced by a SHA-256 of the rest,
/// as someone who can recompute a digest but holds no key would.
fn forged(bytes: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    use sha2::Digest;
    let magic = codemode_snapshot::portable::MAGIC.len();
    let body = &bytes[magic..bytes.len() - 32];
    let len = u32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
    let mut envelope: serde_json::Value = serde_json::from_slice(&body[4..4 + len]).unwrap();
    edit(&mut envelope);
    let meta = serde_json::to_vec(&envelope).unwrap();
    let mut out = bytes[..magic].to_vec();
    out.extend_from_slice(&(meta.len() as u32).to_be_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(&body[4 + len..]);
    let sum = sha2::Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// An exported run carrying a forged approval (digest recomputed) is refused on import, before its
/// parked call can run; a runtime with another key refuses the intact export; a runtime that keeps
/// the exporting key as a previous key (a rotation) imports it, and the call runs only once a
/// human approves it.
#[tokio::test]
async fn a_forged_approval_in_an_export_is_refused_and_keys_rotate() {
    let keys = |k: &[u8]| codemode_snapshot::RunKeys::configured(k).unwrap();
    let paid = Arc::new(AtomicU32::new(0));
    let first = gated(keys(K1), paid.clone());
    let ctx = RunContext::session("signed");
    let r = first.exec(&ctx, &CodeModeExecInput::code("return await tools.pay({ amount: 5 })")).await;
    let json = r.to_json();
    assert_eq!(json["pendingToolCalls"][0]["kind"], json!("approval"), "{json}");
    let request = json["pendingToolCalls"][0]["requestId"].as_u64().unwrap();
    let id = RunId::parse(r.run_id().unwrap()).unwrap();
    let bytes = first.export_run(&ctx, &id).await.unwrap();

    let approve = serde_json::to_value(codemode::ApprovalDecision::Approve).unwrap();
    let with_approval = forged(&bytes, |e| e["decisions"] = json!([[request, approve]]));
    let second = gated(keys(K1), paid.clone());
    let err = second.import_run(with_approval).await.expect_err("a forged approval");
    assert_eq!(err.code, Some(CodeModeErrorCode::InvalidInput));
    assert!(err.message.contains("altered or forged"), "{}", err.message);
    let unparked = forged(&bytes, |e| e["run"]["pending"][0]["awaitingApproval"] = json!(false));
    assert_eq!(code(&second.import_run(unparked).await), Some(CodeModeErrorCode::InvalidInput));
    let gone = second.wait(&ctx, &CodeModeWaitInput::new(id.as_str())).await;
    assert_eq!(gone.error_code(), Some(CodeModeErrorCode::InvalidInput), "nothing was imported: {}", gone.to_json());

    // Another key: refused. The next key with this one kept as previous: imported.
    let other = gated(keys(K2), paid.clone());
    assert_eq!(code(&other.import_run(bytes.clone()).await), Some(CodeModeErrorCode::InvalidInput));
    let rotated = gated(keys(K2).with_previous(&[K1]).unwrap(), paid.clone());
    assert_eq!(rotated.import_run(bytes).await.unwrap(), id);
    let still = rotated.wait(&ctx, &CodeModeWaitInput::new(id.as_str())).await;
    assert_eq!(still.to_json()["pendingToolCalls"][0]["kind"], json!("approval"), "{}", still.to_json());
    assert_eq!(paid.load(Ordering::SeqCst), 0, "no forged approval ran the call");
    rotated.decide(&id, request, codemode::ApprovalDecision::Approve).await.unwrap();
    let done = rotated.wait(&ctx, &CodeModeWaitInput::new(id.as_str())).await;
    assert_eq!(done.to_json()["value"], json!("paid"), "{}", done.to_json());
    assert_eq!(paid.load(Ordering::SeqCst), 1);
}
