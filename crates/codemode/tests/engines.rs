//! The open engine registry: an engine that is not built in is registered by name and
//! then selected by `tools.codeMode.runtime` exactly like a built-in one; names are never replaced,
//! and an unknown name still fails closed with `runtime_unavailable`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CodeMode, CodeModeConfig, CodeModeErrorCode, CodeModeExecInput, Engines, GuestEngine, RegisterError, RunContext,
};
use codemode_core::engine::{EngineError, GuestInstance, GuestLimits, GuestProgram, Snapshot};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An "outside" engine: it only uses the public contract (here it delegates to a built-in engine
/// and counts the runs it started, so the test can tell it was really used).
struct Outside {
    name: &'static str,
    inner: Arc<dyn GuestEngine>,
    started: AtomicUsize,
}

impl GuestEngine for Outside {
    fn name(&self) -> &str {
        self.name
    }
    fn serializes_snapshots(&self) -> bool {
        self.inner.serializes_snapshots()
    }
    fn start(&self, program: &GuestProgram, limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.inner.start(program, limits)
    }
    fn restore(&self, snapshot: Snapshot, limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
        // Snapshots carry the inner engine's name.
        self.inner.restore(snapshot, limits)
    }
}

fn runtime(name: &str) -> CodeMode {
    let mut config = CodeModeConfig::enabled();
    config.runtime = name.to_string();
    CodeMode::builder(config).build()
}

#[tokio::test]
async fn a_registered_engine_is_selected_by_name() {
    let built_in = Engines::all().into_iter().next().expect("at least one engine is compiled in").1;
    let outside = Arc::new(Outside { name: "outside-test", inner: built_in.clone(), started: AtomicUsize::new(0) });
    assert!(Engines::by_name("outside-test").is_none());
    let before = runtime("outside-test");
    let r = before.exec(&RunContext::session("s"), &CodeModeExecInput::code("return 1")).await;
    assert_eq!(r.error_code(), Some(CodeModeErrorCode::RuntimeUnavailable), "not registered yet: fail closed");

    Engines::register(outside.clone()).unwrap();
    assert!(Engines::compiled().contains(&"outside-test".to_string()));
    let cm = runtime("outside-test");
    assert_eq!(cm.engine_name(), "outside-test");
    let r = cm.exec(&RunContext::session("s"), &CodeModeExecInput::code("return 20 + 22")).await;
    assert_eq!(r.to_json()["value"], 42, "{}", r.to_json());
    assert_eq!(outside.started.load(Ordering::Relaxed), 1, "the registered engine ran the cell");

    // Names are never replaced, built-in names are refused, names must be plain.
    let again = Arc::new(Outside { name: "outside-test", inner: built_in.clone(), started: AtomicUsize::new(0) });
    assert_eq!(Engines::register(again), Err(RegisterError::Taken("outside-test".into())));
    let fake = Arc::new(Outside { name: "quickjs-wasi", inner: built_in.clone(), started: AtomicUsize::new(0) });
    assert_eq!(Engines::register(fake), Err(RegisterError::BuiltIn("quickjs-wasi".into())));
    let bad = Arc::new(Outside { name: "bad name!", inner: built_in, started: AtomicUsize::new(0) });
    assert_eq!(Engines::register(bad), Err(RegisterError::BadName("bad name!".into())));
    let r = runtime("still-unknown").exec(&RunContext::session("s"), &CodeModeExecInput::code("return 1")).await;
    assert_eq!(r.error_code(), Some(CodeModeErrorCode::RuntimeUnavailable));
    assert!(r.to_json()["error"].as_str().unwrap().contains("outside-test"), "the error lists the available engines");
}

/// The two "nothing will happen" endings are told apart: a cell awaiting a
/// promise nothing settles is the guest's own failure (no code, saying nothing will settle it); a
/// stored run with nothing to resume with is the store's fault (`internal_error`).
#[tokio::test]
async fn stalled_cells_and_empty_stored_runs_are_told_apart() {
    use codemode::{MemorySnapshotStore, RunId, SnapshotStore};
    use codemode_core::engine::SnapshotBody;
    use codemode_core::store::SuspendedRun;
    let store = Arc::new(MemorySnapshotStore::new());
    let cm = CodeMode::builder(CodeModeConfig::enabled()).store(store.clone()).build();
    let ctx = RunContext::session("s");
    let r = cm.exec(&ctx, &CodeModeExecInput::code("await new Promise(() => {}); return 1")).await;
    assert_eq!(r.error_code(), None, "{}", r.to_json());
    let message = r.to_json()["error"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("waiting on a promise that nothing will settle"), "{message}");
    // A real snapshot of a run that yielded, stored again without anything to resume with.
    let r = cm.exec(&ctx, &CodeModeExecInput::code("await yield_control(); return 1")).await;
    let run_id = r.run_id().unwrap().to_string();
    let taken = store.checkout(&RunId::parse(&run_id).unwrap(), &ctx.scope).await.unwrap();
    let id = RunId::parse("cm_emptyrun").unwrap();
    // A stored run with nothing pending and nothing to deliver.
    let empty = |snapshot| SuspendedRun {
        run_id: id.clone(),
        scope: ctx.scope.clone(),
        snapshot,
        reason: codemode_core::result::WaitReason::PendingTools,
        pending: vec![],
        ready: vec![],
        restart_safe: false,
        telemetry: Default::default(),
        created_at_ms: 0,
        expires_at_ms: u64::MAX / 2,
        positions: Default::default(),
        policy: Some(codemode::RunPolicy::default()),
    };
    store.put(empty(taken.snapshot)).await.unwrap();
    store.remove(&RunId::parse(&run_id).unwrap()).await;
    let r = cm.wait(&ctx, &codemode::CodeModeWaitInput::new("cm_emptyrun")).await;
    assert_eq!(r.error_code(), Some(CodeModeErrorCode::InternalError), "{}", r.to_json());
    let message = r.to_json()["error"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("nothing to resume with"), "{message}");
    assert_eq!(store.count().await, 0, "the run is released");
    // Snapshot bytes that are not a snapshot of this engine build fail as `snapshot_restore_failed`
    // when the run is taken, before anything else of it is looked at.
    let bytes = Snapshot { engine: cm.engine_name().to_string(), body: SnapshotBody::Serialized(vec![]) };
    store.put(empty(bytes)).await.unwrap();
    let r = cm.wait(&ctx, &codemode::CodeModeWaitInput::new("cm_emptyrun")).await;
    assert_eq!(r.error_code(), Some(CodeModeErrorCode::SnapshotRestoreFailed), "{}", r.to_json());
    assert_eq!(store.count().await, 0, "the run is released");
}

/// MCP calls count like catalog calls: a slow one is listed in
/// `pendingToolCalls` (kind `mcp`), a failing one in `failedCallCount`.
#[tokio::test]
async fn mcp_calls_are_pending_calls_and_failures_like_any_other() {
    use codemode::{FnTool, LocalTools, ToolDefinition, ToolError, ToolErrorKind, ToolResult, ToolSource};
    let mut tools = LocalTools::new();
    tools.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Mcp, "slow", "nap").read_only(), |_| async {
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        Ok(ToolResult::value(serde_json::json!({ "content": [] })))
    })));
    tools.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Mcp, "slow", "fail"), |_| async {
        Err(ToolError::new(ToolErrorKind::Failed, "upstream said no"))
    })));
    let mut config = CodeModeConfig::enabled();
    config.timeout_ms = 150;
    let cm = CodeMode::builder(config).local_tools(tools).build();
    let ctx = RunContext::session("s");
    let r = cm.exec(&ctx, &CodeModeExecInput::code("await MCP.slow.nap({}); return 1")).await;
    let v = r.to_json();
    assert_eq!(v["status"], "waiting", "{v}");
    assert_eq!(v["pendingToolCalls"][0]["kind"], "mcp", "{v}");
    assert_eq!(v["pendingToolCalls"][0]["toolId"], "mcp:slow:nap", "{v}");
    let r =
        cm.exec(&ctx, &CodeModeExecInput::code("try { await MCP.slow.fail({}) } catch (e) { return e.code }")).await;
    let v = r.to_json();
    assert_eq!(v["value"], "nested_tool_failed", "{v}");
    assert_eq!(v["telemetry"]["failedCallCount"], 1, "{v}");
}
