//! # codemode-engine-quickjs
//!
//! A [`GuestEngine`] over native QuickJS-ng through `rquickjs`: the fastest start (no WebAssembly), and
//! weaker isolation than the default `quickjs-wasi` engine (QuickJS's C code runs in the host process).
//! It is the differential reference of the conformance suite.
//!
//! Guest code runs on the shared worker threads of `codemode-bridge` (with a known stack size, so
//! QuickJS's stack limit is meaningful). A VM's whole QuickJS heap lives in one region of host
//! memory (module `arena`), and a finished run's VM is reset to the image of that region taken
//! after boot, byte for byte, before another run may use it: runs do not pay for building a
//! runtime, a context and the prelude, and nothing of one run reaches the next. The bridge
//! prelude is compiled to QuickJS bytecode by the build (`build.rs`; once per process on first use
//! where the build could not), so a new VM only loads it. A process that knows its first run's
//! limits before it has the cell builds that run's VM ahead, on a thread of its own
//! (`GuestEngine::prepare_instance`; no guest code runs while a VM is built). Plain
//! data a cell sends or returns is serialized by a native `plainJson` (module `plain_json`,
//! written against QuickJS's C API) instead of the prelude's walk plus `JSON.stringify`, and a
//! run's namespaces are defined at boot by a native `defineNamespaces` (module
//! `define_namespaces`) instead of the prelude's loop. A
//! suspended run keeps its VM alive: its snapshot is [`SnapshotBody::Live`], sized by QuickJS's
//! memory accounting, and cannot leave the process (only the in-memory store accepts it); the VM is
//! reset and pooled when the run ends.
//!
//! Limits: a guest heap limit enforced by the engine's allocator (a memory bomb is a catchable
//! `out of memory`, and the engine knows when the limit was hit even if QuickJS cannot allocate the
//! error object), QuickJS's stack limit
//! (deep recursion is a catchable `RangeError`), and an interrupt handler that stops the guest at the
//! drive deadline or when the bridge records a fatal limit (both uncatchable). There is no module
//! loader, no `std`/`os`, no `console` from QuickJS (the prelude provides its own), no timers, no I/O.
//!
//! Layering (docs/src/layout.md): depends on `codemode-core` and `codemode-bridge`; knows nothing of tools,
//! policy or MCP.
#![deny(unsafe_code)]

mod alloc;
mod arena;
mod define_namespaces;
mod ffi;
mod from_json;
mod plain_json;
mod pool;
mod prelude_compile;
mod vm;

use codemode_bridge::driver::drive;
use codemode_core::engine::{
    DriveInput, DriveReport, EngineError, GuestEngine, GuestInstance, GuestLimits, GuestProgram, Snapshot, SnapshotBody,
};
use codemode_workers as workers;
use pool::*;
pub use pool::{reused_vms, vms_taken_ahead};
use std::sync::atomic::Ordering;
use vm::*;

/// The engine's name, as used by `runtime` in the config and `--engine` on the command line.
pub const ENGINE_NAME: &str = "quickjs";

/// How far above the allocator's limit QuickJS's own memory limit sits (a second line of defence).
const BACKSTOP_SLACK: usize = 1 << 20;

/// The native QuickJS engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuickJsEngine;

impl QuickJsEngine {
    /// Creates the engine.
    pub fn new() -> Self {
        QuickJsEngine
    }
}

impl GuestEngine for QuickJsEngine {
    fn name(&self) -> &str {
        ENGINE_NAME
    }

    fn serializes_snapshots(&self) -> bool {
        false
    }

    fn capabilities(&self) -> codemode_core::engine::EngineCapabilities {
        codemode_core::engine::EngineCapabilities::all_limits(false)
    }

    /// Builds one VM for `limits` on a thread of its own (`codemode-load`), and starts a guest
    /// worker if none runs yet (on the calling thread, while the VM is built), unless the pool already has a VM for these limits or another is
    /// being built ahead; the next run with these limits takes it. Returns at once.
    fn prepare_instance(&self, limits: &GuestLimits) -> Result<(), EngineError> {
        build_ahead(*limits)
    }

    fn start(&self, program: &GuestProgram, limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
        let instance =
            NativeInstance::spawn(codemode_bridge::wrap_code(&program.code), program.boot.to_string(), *limits)?;
        Ok(Box::new(instance))
    }

    fn restore(&self, snapshot: Snapshot, _limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
        snapshot.into_live_instance(ENGINE_NAME)
    }
}

/// A VM; guest code runs on a [`workers`] thread (inline when the caller is one).
struct NativeInstance {
    vm: Option<Box<Vm>>,
    unstarted: Option<String>,
}

fn gone() -> EngineError {
    EngineError::Internal("the quickjs instance is gone after an earlier failure".into())
}

impl NativeInstance {
    fn spawn(wrapped: String, boot: String, limits: GuestLimits) -> Result<Self, EngineError> {
        let mut vm = match take_warm(&limits) {
            Some(vm) => {
                refill_warm(limits);
                vm
            }
            None => {
                // The process's first run refills nothing: a one-shot process (`codemode run`)
                // would build VMs it never uses while it answers, and a server's next run in turn
                // gets this run's VM back from the pool. A second miss means runs overlap. A VM
                // built ahead of the first run counts as that run's own.
                if BUILT_ON_DEMAND.fetch_add(1, Ordering::Relaxed) > 0 {
                    refill_warm(limits);
                }
                match AHEAD.take(&limits) {
                    Some(vm) => vm,
                    None => Box::new(workers::run(move || Vm::new(limits)).map_err(EngineError::from)??),
                }
            }
        };
        vm.begin_run();
        vm.boot = Some(boot);
        Ok(NativeInstance { vm: Some(vm), unstarted: Some(wrapped) })
    }
}

impl Drop for NativeInstance {
    fn drop(&mut self) {
        if let Some(vm) = self.vm.take() {
            release(vm);
        }
    }
}

impl GuestInstance for NativeInstance {
    fn drive(&mut self, input: DriveInput) -> Result<DriveReport, EngineError> {
        let mut vm = self.vm.take().ok_or_else(gone)?;
        let mut unstarted = self.unstarted.take();
        let (vm, unstarted, report) = workers::run(move || {
            let report = drive(&mut *vm, &mut unstarted, input);
            (vm, unstarted, report)
        })
        .map_err(EngineError::from)?;
        self.vm = Some(vm);
        self.unstarted = unstarted;
        report
    }

    fn snapshot(self: Box<Self>) -> Result<Snapshot, EngineError> {
        let vm = self.vm.as_ref().ok_or_else(gone)?;
        vm.rt.run_gc();
        let size_bytes = vm.rt.memory_usage().memory_used_size.max(0) as u64;
        Ok(Snapshot { engine: ENGINE_NAME.to_string(), body: SnapshotBody::Live { size_bytes, instance: self } })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
