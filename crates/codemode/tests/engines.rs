//! The open engine registry (issue 10 §2): an engine that is not built in is registered by name and
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
