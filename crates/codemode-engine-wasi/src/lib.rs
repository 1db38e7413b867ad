//! # codemode-engine-wasi
//!
//! The default [`GuestEngine`] of codemode, `quickjs-wasi`: QuickJS-ng compiled to `wasm32-wasi` (by
//! build.rs, from the `rquickjs-sys` package's sources) and run in wasmtime. Hostile guest code is
//! confined twice: by QuickJS and by the WebAssembly sandbox, which holds the guest's whole state in
//! one linear memory. That memory (diffed against the pre-initialized image, zstd-compressed) plus the
//! stack pointer is a complete [`SnapshotBody::Serialized`] snapshot, so a suspended run can be
//! resumed by another process, or another machine with the same engine build.
//!
//! - **Start-up**: the module is pre-initialized once (QuickJS runtime, context and the bridge prelude
//!   baked in by wasmtime-wizer), compiled once, and cached on disk (see [`cache_dir`]); runs then
//!   start from a fresh copy-on-write instance of the image. A process that knows its first run's
//!   limits before it has the cell loads the module and instantiates that run's instance ahead, on
//!   a thread of its own (`GuestEngine::prepare_instance`; no guest code runs in it before the run).
//! - **Limits**: a heap limit enforced by the shim's allocator (a memory bomb is a catchable
//!   `out of memory`); wasmtime store limits on linear memory; QuickJS's stack limit, re-enabled for
//!   WASI and set below the wasm stack (deep recursion is a catchable `RangeError`); QuickJS's
//!   interrupt handler at the deadline, and wasmtime epoch interruption as a backstop for code that
//!   never polls it. A trap of any kind ends only that run.
//! - **Capabilities**: none. The guest imports the bridge primitive (plus `host_take`, which copies a
//!   pulled catalog entry, or a large outcome of a request answered inline, into a guest buffer),
//!   an interrupt poll, and five WASI
//!   functions stubbed on the host (a clock; output and file calls that do nothing): no files, no
//!   environment, no arguments, no sockets.
//!
//! Layering (docs/src/layout.md): depends on `codemode-core` and `codemode-bridge`; knows nothing of tools,
//! policy or MCP.
#![deny(unsafe_code)]

mod host;
mod instance;
mod module;
mod snapshot;
mod written;

pub use snapshot::SnapshotError;
/// The snapshot decoder's entry points for fuzzers (untrusted bytes through the restore path's checks).
pub use snapshot::fuzzing as snapshot_fuzzing;

pub use module::{ModuleError, cache_dir};

use codemode_core::engine::{
    EngineError, GuestEngine, GuestInstance, GuestLimits, GuestProgram, Snapshot, SnapshotBody,
};
use instance::{Vm, WasiInstance};
use module::Loaded;
use std::sync::{Arc, OnceLock};

/// The engine's name, as used by `runtime` in the config and `--engine` on the command line.
pub const ENGINE_NAME: &str = "quickjs-wasi";

// The C sources come from this package (see build.rs); nothing of its Rust side is used.
use rquickjs_sys as _;

fn loaded() -> Result<Arc<Loaded>, EngineError> {
    static LOADED: OnceLock<Result<Arc<Loaded>, module::ModuleError>> = OnceLock::new();
    LOADED.get_or_init(|| module::load().map(Arc::new)).clone().map_err(|e| EngineError::Unavailable(e.to_string()))
}

/// The instance built ahead of a first run ([`GuestEngine::prepare_instance`]).
static AHEAD: codemode_workers::ahead::Ahead<Vm> = codemode_workers::ahead::Ahead::new();

/// How many runs so far started on an instance built ahead of them
/// ([`GuestEngine::prepare_instance`]), in this process. Tests use it to check that the run took
/// the instance built for it.
pub fn instances_taken_ahead() -> u64 {
    AHEAD.taken()
}

/// The `quickjs-wasi` engine. Cheap to create; the guest module is loaded on first use (and a load
/// failure makes every run fail closed with `runtime_unavailable`).
#[derive(Debug, Clone, Copy, Default)]
pub struct QuickJsWasiEngine;

impl QuickJsWasiEngine {
    /// Creates the engine.
    pub fn new() -> Self {
        QuickJsWasiEngine
    }

    /// Loads (or builds and caches) the guest module now instead of at the first run.
    pub fn warm_up(&self) -> Result<(), EngineError> {
        loaded().map(|_| ())
    }

    /// The identity of this engine build, as recorded in its snapshots.
    pub fn build_id(&self) -> String {
        module::build_id()
    }
}

impl GuestEngine for QuickJsWasiEngine {
    fn name(&self) -> &str {
        ENGINE_NAME
    }

    fn serializes_snapshots(&self) -> bool {
        true
    }

    fn capabilities(&self) -> codemode_core::engine::EngineCapabilities {
        codemode_core::engine::EngineCapabilities::all_limits(true)
    }

    fn prepare(&self) -> Result<(), EngineError> {
        self.warm_up()
    }

    /// Loads the module and instantiates it for `limits` (no guest code runs: the instance is
    /// configured and booted by its run) on a thread of its own (`codemode-load`), and starts a
    /// guest worker if none runs yet (on the calling thread, meanwhile), unless an
    /// instance is already built or being built ahead; the next run with these limits takes it.
    /// Returns at once.
    fn prepare_instance(&self, limits: &GuestLimits) -> Result<(), EngineError> {
        let limits = *limits;
        // Marked as being built before anything is loaded: a run that starts meanwhile waits for
        // this instance (it would wait for the load anyway) instead of building a second one.
        AHEAD.build(limits, move || Vm::new(loaded()?, limits, Some(codemode_bridge::random_seed())))
    }

    fn start(&self, program: &GuestProgram, limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
        let vm = match AHEAD.take(limits) {
            Some(vm) => vm,
            None => Vm::new(loaded()?, *limits, Some(codemode_bridge::random_seed()))?,
        };
        Ok(Box::new(WasiInstance::fresh(vm, program.boot.clone(), codemode_bridge::wrap_code(&program.code))))
    }

    fn verify(&self, snapshot: &Snapshot) -> Result<(), EngineError> {
        if snapshot.engine != ENGINE_NAME {
            return Err(EngineError::Restore(format!(
                "snapshot was taken by engine `{}`, not `{ENGINE_NAME}`",
                snapshot.engine
            )));
        }
        let SnapshotBody::Serialized(bytes) = &snapshot.body else {
            return Err(EngineError::Restore("quickjs-wasi restores serialized snapshots only".into()));
        };
        let loaded = loaded()?;
        snapshot::check(bytes, ENGINE_NAME, &loaded.build_id)
            .map(|_| ())
            .map_err(|e| EngineError::Restore(e.to_string()))
    }

    fn restore(&self, snapshot: Snapshot, limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
        if snapshot.engine != ENGINE_NAME {
            return Err(EngineError::Restore(format!(
                "snapshot was taken by engine `{}`, not `{ENGINE_NAME}`",
                snapshot.engine
            )));
        }
        let SnapshotBody::Serialized(bytes) = snapshot.body else {
            return Err(EngineError::Restore("quickjs-wasi restores serialized snapshots only".into()));
        };
        let vm = Vm::restore(loaded()?, &bytes, *limits)?;
        Ok(Box::new(WasiInstance::restored(vm)))
    }
}
