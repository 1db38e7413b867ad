//! # codemode-testing
//!
//! Test support, kept out of the product as tower keeps `tower-test`:
//!
//! - [`mock`]: a tool whose calls the test answers, holds or fails through a handle, so tests order
//!   events with handles instead of tools that sleep;
//! - [`ManualClock`]: a clock that moves only when the test says (TTLs, leases, upgrade windows);
//! - [`builder`] / [`runtime`]: the one way every suite builds a runtime over the demo catalog
//!   (`codemode-demo`), so a suite states only what it changes (a hook, a policy, a store).
//!
//! The conformance suite, the engines' tests and the facade's tests use it; an embedding application
//! never needs it. Layering: above the facade (`codemode`) and the demo catalog; no library crate
//! depends on it.
#![forbid(unsafe_code)]

pub mod mock;

use codemode::{CodeMode, CodeModeBuilder, CodeModeConfig};

/// The clock tests move by hand.
pub use codemode::ManualClock;

/// A builder for a runtime on `engine` with `config`, the demo catalog's tools
/// (`plugin:demo:*`) and nothing else: add what the test is about, then `build()`.
pub fn builder(engine: &str, config: CodeModeConfig) -> CodeModeBuilder {
    CodeMode::builder(config).engine_name(engine).local_tools(codemode_demo::demo_tools())
}

/// A runtime on `engine` with code mode enabled, the given run timeout and the demo catalog.
pub fn runtime(engine: &str, timeout_ms: u64) -> CodeMode {
    builder(engine, CodeModeConfig { timeout_ms, ..CodeModeConfig::enabled() }).build()
}
