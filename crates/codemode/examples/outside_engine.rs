//! Registering an engine that is not built in: any type implementing `GuestEngine` is registered by
//! name and selected by `tools.codeMode.runtime`, exactly like a built-in one (an unknown name fails
//! closed with `runtime_unavailable`). This one delegates to the default engine and counts the runs
//! it started; a real one would run its own JavaScript engine behind the same contract, and prove
//! itself with the `codemode-conformance` suite.
//!
//! Run: `cargo run -p codemode --example outside_engine`

use codemode::{CodeMode, CodeModeConfig, CodeModeExecInput, Engines, GuestEngine, RunContext};
use codemode_core::engine::{EngineError, GuestInstance, GuestLimits, GuestProgram, Snapshot};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting {
    inner: Arc<dyn GuestEngine>,
    started: AtomicUsize,
}

impl GuestEngine for Counting {
    fn name(&self) -> &str {
        "counting"
    }
    fn serializes_snapshots(&self) -> bool {
        self.inner.serializes_snapshots()
    }
    fn prepare(&self) -> Result<(), EngineError> {
        self.inner.prepare()
    }
    fn start(&self, program: &GuestProgram, limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.inner.start(program, limits)
    }
    fn verify(&self, snapshot: &Snapshot) -> Result<(), EngineError> {
        // Snapshots carry the inner engine's name.
        self.inner.verify(snapshot)
    }
    fn restore(&self, snapshot: Snapshot, limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
        self.inner.restore(snapshot, limits)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let inner = Engines::by_name("quickjs-wasi").ok_or("the default engine is not compiled in")?;
    let engine = Arc::new(Counting { inner, started: AtomicUsize::new(0) });
    Engines::register(engine.clone()).map_err(|e| format!("{e:?}"))?;
    let mut config = CodeModeConfig::enabled();
    config.runtime = "counting".into();
    let cm = CodeMode::builder(config).build();
    let r = cm.exec(&RunContext::session("example"), &CodeModeExecInput::code("return 6 * 7")).await;
    println!("{} (runs started by the outside engine: {})", r.to_json(), engine.started.load(Ordering::Relaxed));
    Ok(())
}
