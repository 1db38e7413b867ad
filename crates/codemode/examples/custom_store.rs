//! A snapshot store of your own: suspended runs go wherever you keep state. This one wraps the
//! in-memory store and logs what the runtime asks of it; a real one would write to a database (the
//! directory store in `codemode-snapshot` is a complete example with files).
//!
//! Run: `cargo run -p codemode --example custom_store`

use codemode::{
    CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, MemorySnapshotStore, RunContext,
    RunId, RunScope, SnapshotStore,
};
use codemode_core::store::{StoreError, SuspendedRun};
use std::sync::Arc;

/// Logs every operation and keeps the runs in memory.
struct Logged {
    inner: MemorySnapshotStore,
}

#[async_trait::async_trait]
impl SnapshotStore for Logged {
    fn name(&self) -> &str {
        "logged-memory"
    }

    fn accepts_live(&self) -> bool {
        // Engines with live (in-process) snapshots need a store that can keep a VM handle.
        self.inner.accepts_live()
    }

    async fn put(&self, run: SuspendedRun) -> Result<(), StoreError> {
        println!("store: put {} ({} bytes stored)", run.run_id, run.stored_bytes());
        self.inner.put(run).await
    }

    async fn checkout(&self, run_id: &RunId, scope: &RunScope) -> Result<SuspendedRun, StoreError> {
        println!("store: checkout {run_id}");
        self.inner.checkout(run_id, scope).await
    }

    async fn remove(&self, run_id: &RunId) -> bool {
        println!("store: remove {run_id}");
        self.inner.remove(run_id).await
    }

    async fn purge_expired(&self) -> Vec<RunId> {
        self.inner.purge_expired().await
    }

    async fn count(&self) -> usize {
        self.inner.count().await
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Arc::new(Logged { inner: MemorySnapshotStore::new() });
    let cm = CodeMode::builder(CodeModeConfig::enabled()).store(store.clone()).build();
    let ctx = RunContext::session("example");
    // `yield_control()` suspends the run at once: its snapshot goes to the store.
    let first = cm.exec(&ctx, &CodeModeExecInput::code("let n = 1; await yield_control(); return n + 1")).await;
    let CodeModeResult::Waiting { run_id, .. } = &first else {
        return Err(format!("expected waiting: {}", first.to_json()).into());
    };
    let done = cm.wait(&ctx, &CodeModeWaitInput::new(run_id.clone())).await;
    println!("{}", done.to_json());
    assert_eq!(store.count().await, 0, "a settled run leaves the store");
    Ok(())
}
