//! One guest instance: a wasmtime store over the pre-initialized module, driven through the shim's
//! exports, snapshotted as a diff of its linear memory.

use crate::ENGINE_NAME;
use crate::host::HostState;
use crate::module::{EPOCH_TICK, Loaded};
use crate::snapshot::{self, GlobalValue, Header};
use codemode_bridge::BridgeHost;
use codemode_bridge::driver::{GuestVm, VmFault, classify_failure, drive};
use codemode_core::engine::{
    DriveInput, DriveReport, EngineError, GuestInstance, GuestLimits, RequestId, Snapshot, SnapshotBody,
};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::{Instance, Memory, Store, Trap, TypedFunc, Val};

/// How long past the deadline the epoch backstop waits for QuickJS's own (graceful) interrupt.
const BACKSTOP_GRACE: Duration = Duration::from_millis(200);

/// Largest QuickJS stack budget: the guest's linear-memory stack is 1 MiB (build.rs), and the shim
/// and host calls need some of it.
const MAX_GUEST_STACK: u64 = 768 << 10;

struct Exports {
    alloc: TypedFunc<u32, u32>,
    free: TypedFunc<u32, ()>,
    configure: TypedFunc<(u32, u32), ()>,
    seed: TypedFunc<(u32, u32), ()>,
    boot: TypedFunc<(u32, u32), i32>,
    start: TypedFunc<(u32, u32), i32>,
    settle: TypedFunc<(f64, i32, u32, u32), i32>,
    run_jobs: TypedFunc<(), i32>,
    poll: TypedFunc<(), i32>,
    out_ptr: TypedFunc<(), u32>,
    out_len: TypedFunc<(), u32>,
    refused: TypedFunc<(), i32>,
    clear_refused: TypedFunc<(), ()>,
}

pub(crate) struct Vm {
    store: Store<HostState>,
    instance: Instance,
    memory: Memory,
    ex: Exports,
    loaded: Arc<Loaded>,
    boot: Option<Arc<str>>,
    limits: GuestLimits,
}

fn internal(e: impl std::fmt::Display) -> EngineError {
    EngineError::Internal(e.to_string())
}

fn random_seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}

impl Vm {
    /// A fresh instance of the pre-initialized guest (memory = the base image).
    pub(crate) fn new(loaded: Arc<Loaded>, limits: GuestLimits) -> Result<Self, EngineError> {
        let mut store = Store::new(&loaded.engine, HostState::new(limits));
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = loaded.pre.instantiate(&mut store).map_err(internal)?;
        let memory =
            instance.get_memory(&mut store, "memory").ok_or_else(|| internal("the guest exports no memory"))?;
        store.data_mut().memory = Some(memory);
        let get = |store: &mut Store<HostState>, name: &str| {
            instance.get_func(&mut *store, name).ok_or_else(|| internal(format!("missing export {name}")))
        };
        macro_rules! typed {
            ($name:literal) => {
                get(&mut store, $name)?.typed(&store).map_err(internal)?
            };
        }
        let ex = Exports {
            alloc: typed!("cm_alloc"),
            free: typed!("cm_free"),
            configure: typed!("cm_configure"),
            seed: typed!("cm_seed"),
            boot: typed!("cm_boot"),
            start: typed!("cm_start"),
            settle: typed!("cm_settle"),
            run_jobs: typed!("cm_run_jobs"),
            poll: typed!("cm_poll"),
            out_ptr: typed!("cm_out_ptr"),
            out_len: typed!("cm_out_len"),
            refused: typed!("cm_refused"),
            clear_refused: typed!("cm_clear_refused"),
        };
        let scratch: TypedFunc<(), u32> = typed!("cm_scratch");
        let scratch_len: TypedFunc<(), u32> = typed!("cm_scratch_len");
        let at = scratch.call(&mut store, ()).map_err(internal)?;
        let len = scratch_len.call(&mut store, ()).map_err(internal)?;
        store.data_mut().scratch = (at, len);
        let mut vm = Vm { store, instance, memory, ex, loaded, boot: None, limits };
        vm.configure()?;
        Ok(vm)
    }

    /// Applies the limits (also after a restore: the snapshot carries the old process's values).
    fn configure(&mut self) -> Result<(), EngineError> {
        let heap = u32::try_from(self.limits.memory_limit_bytes).unwrap_or(u32::MAX - (64 << 20));
        let stack = u32::try_from(self.limits.max_stack_bytes.min(MAX_GUEST_STACK)).unwrap_or(256 << 10);
        self.ex.configure.call(&mut self.store, (heap, stack)).map_err(internal)?;
        self.ex.clear_refused.call(&mut self.store, ()).map_err(internal)
    }

    /// Reseeds `Math.random` (every new run; a baked image would otherwise repeat one sequence).
    pub(crate) fn seed(&mut self) -> Result<(), EngineError> {
        let s = random_seed();
        self.ex.seed.call(&mut self.store, (s as u32, (s >> 32) as u32)).map_err(internal)
    }

    fn fault(&mut self, e: wasmtime::Error) -> VmFault {
        if matches!(e.downcast_ref::<Trap>(), Some(Trap::Interrupt)) || self.store.data().fired {
            return VmFault::Interrupted;
        }
        VmFault::Engine(EngineError::Internal(format!("the guest trapped: {e}")))
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(u32, u32), VmFault> {
        let len = u32::try_from(bytes.len()).map_err(|_| VmFault::Engine(internal("value too large for the guest")))?;
        let ptr = self.ex.alloc.call(&mut self.store, len).map_err(|e| self.fault(e))?;
        if ptr == 0 {
            return Err(VmFault::Failure(codemode_core::engine::GuestFailure {
                code: Some(codemode_core::error::CodeModeErrorCode::MemoryLimitExceeded),
                message: "out of memory while passing a value into the guest".into(),
            }));
        }
        self.memory.write(&mut self.store, ptr as usize, bytes).map_err(|e| VmFault::Engine(internal(e)))?;
        Ok((ptr, len))
    }

    fn free(&mut self, ptr: u32) -> Result<(), VmFault> {
        self.ex.free.call(&mut self.store, ptr).map_err(|e| self.fault(e))
    }

    fn read_out(&mut self) -> Result<String, VmFault> {
        let ptr = self.ex.out_ptr.call(&mut self.store, ()).map_err(|e| self.fault(e))? as usize;
        let len = self.ex.out_len.call(&mut self.store, ()).map_err(|e| self.fault(e))? as usize;
        let data = self.memory.data(&self.store);
        let bytes = data
            .get(ptr..ptr.saturating_add(len))
            .ok_or_else(|| VmFault::Engine(internal("guest output out of bounds")))?;
        Ok(codemode_bridge::adapter::guest_text(bytes).into_owned())
    }

    /// Maps a shim status: 0 is fine, anything else is a guest failure described in the out buffer.
    fn status(&mut self, status: i32) -> Result<(), VmFault> {
        if self.store.data().fired {
            return Err(VmFault::Interrupted);
        }
        if status == 0 {
            return Ok(());
        }
        Err(VmFault::Failure(classify_failure(&self.read_out()?)))
    }

    /// Passes `bytes` to a shim function taking `(ptr, len)` and frees them afterwards.
    fn call_with(&mut self, f: TypedFunc<(u32, u32), i32>, bytes: &[u8]) -> Result<(), VmFault> {
        let (ptr, len) = self.write(bytes)?;
        let status = f.call(&mut self.store, (ptr, len)).map_err(|e| self.fault(e))?;
        self.free(ptr)?;
        self.status(status)
    }

    /// Serializes the instance (only between drive steps: no wasm call is on the stack).
    pub(crate) fn snapshot(mut self) -> Result<Vec<u8>, EngineError> {
        let mut globals = Vec::new();
        for name in self.loaded.mutable_globals.clone() {
            let g = self
                .instance
                .get_global(&mut self.store, &name)
                .ok_or_else(|| internal(format!("global {name} vanished")))?;
            let v = match g.get(&mut self.store) {
                Val::I32(x) => GlobalValue::I32(x),
                Val::I64(x) => GlobalValue::I64(x),
                other => return Err(EngineError::Snapshot(format!("global {name} has unsupported value {other:?}"))),
            };
            globals.push((name, v));
        }
        let header = Header {
            format: snapshot::FORMAT,
            engine: ENGINE_NAME.to_string(),
            build: self.loaded.build_id.clone(),
            memory_bytes: self.memory.data_size(&self.store) as u64,
            page_size: snapshot::PAGE as u32,
            globals,
            bridge: self.store.data().bridge.state().clone(),
        };
        let base = self.loaded.base().map_err(|e| EngineError::Snapshot(e.to_string()))?;
        snapshot::encode(&header, base, self.memory.data(&self.store)).map_err(|e| EngineError::Snapshot(e.to_string()))
    }

    /// Rebuilds an instance from snapshot bytes.
    pub(crate) fn restore(loaded: Arc<Loaded>, bytes: &[u8], limits: GuestLimits) -> Result<Self, EngineError> {
        let base = loaded.base().map_err(|e| EngineError::Restore(e.to_string()))?;
        let decoded = snapshot::decode(bytes, ENGINE_NAME, &loaded.build_id, base)
            .map_err(|e| EngineError::Restore(e.to_string()))?;
        let mut vm = Vm::new(loaded, limits)?;
        let want = decoded.header.memory_bytes;
        let have = vm.memory.data_size(&vm.store) as u64;
        if want < have {
            return Err(EngineError::Restore(
                "the snapshot's memory is smaller than the guest's initial memory".into(),
            ));
        }
        if want > have {
            vm.memory
                .grow(&mut vm.store, (want - have) / 65536)
                .map_err(|e| EngineError::Restore(format!("cannot grow memory to {want} bytes: {e}")))?;
        }
        let data = vm.memory.data_mut(&mut vm.store);
        for (index, page) in &decoded.pages {
            let start = *index as usize * snapshot::PAGE;
            let dest = data
                .get_mut(start..start + snapshot::PAGE)
                .ok_or_else(|| EngineError::Restore("page out of bounds".into()))?;
            dest.copy_from_slice(page);
        }
        let expected: Vec<&String> = vm.loaded.mutable_globals.iter().collect();
        let mut got: Vec<&String> = decoded.header.globals.iter().map(|(n, _)| n).collect();
        got.sort();
        let mut want_names = expected.clone();
        want_names.sort();
        if got != want_names {
            return Err(EngineError::Restore("the snapshot's globals do not match the guest module".into()));
        }
        for (name, value) in &decoded.header.globals {
            let g = vm
                .instance
                .get_global(&mut vm.store, name)
                .ok_or_else(|| EngineError::Restore(format!("no global {name}")))?;
            let v = match *value {
                GlobalValue::I32(x) => Val::I32(x),
                GlobalValue::I64(x) => Val::I64(x),
            };
            g.set(&mut vm.store, v).map_err(|e| EngineError::Restore(format!("global {name}: {e}")))?;
        }
        vm.store.data_mut().bridge = BridgeHost::with_state(limits, decoded.header.bridge);
        vm.configure()?;
        Ok(vm)
    }
}

impl GuestVm for Vm {
    fn set_cancel(&mut self, cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>) {
        self.store.data_mut().cancel = cancel;
    }

    fn set_deadline(&mut self, deadline: Instant) {
        let st = self.store.data_mut();
        st.deadline = deadline;
        st.fired = false;
        st.fatal = false;
        let budget = deadline.saturating_duration_since(Instant::now()) + BACKSTOP_GRACE;
        let ticks = (budget.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1;
        self.store.set_epoch_deadline(ticks);
        if let Err(e) = self.ex.clear_refused.call(&mut self.store, ()) {
            tracing::debug!(error = %e, "cannot clear the heap refusal flag");
        }
    }

    fn start_cell(&mut self, wrapped: &str) -> Result<(), VmFault> {
        let boot = self.boot.take().unwrap_or_else(|| Arc::from("{}"));
        self.call_with(self.ex.boot.clone(), boot.as_bytes())?;
        self.call_with(self.ex.start.clone(), wrapped.as_bytes())
    }

    fn settle(&mut self, id: RequestId, ok: bool, json: &str) -> Result<(), VmFault> {
        let (ptr, len) = self.write(json.as_bytes())?;
        let status =
            self.ex.settle.call(&mut self.store, (id as f64, i32::from(ok), ptr, len)).map_err(|e| self.fault(e))?;
        self.free(ptr)?;
        self.status(status)
    }

    fn run_jobs(&mut self) -> Result<(), VmFault> {
        let status = self.ex.run_jobs.call(&mut self.store, ()).map_err(|e| self.fault(e))?;
        self.status(status)
    }

    fn poll(&mut self) -> Result<Option<String>, VmFault> {
        let status = self.ex.poll.call(&mut self.store, ()).map_err(|e| self.fault(e))?;
        if self.store.data().fired {
            return Err(VmFault::Interrupted);
        }
        match status {
            0 => Ok(None),
            1 => Ok(Some(self.read_out()?)),
            _ => Err(VmFault::Failure(classify_failure(&self.read_out()?))),
        }
    }

    fn with_bridge<R>(&mut self, f: impl FnOnce(&mut BridgeHost) -> R) -> R {
        f(&mut self.store.data_mut().bridge)
    }

    fn memory_refused(&mut self) -> bool {
        self.ex.refused.call(&mut self.store, ()).is_ok_and(|r| r != 0)
    }
}

/// A [`GuestInstance`] of the `quickjs-wasi` engine. Guest code always runs on a worker thread
/// ([`codemode_bridge::workers`]), inline when the caller already is one.
pub(crate) struct WasiInstance {
    vm: Option<Box<Vm>>,
    unstarted: Option<String>,
}

impl WasiInstance {
    pub(crate) fn fresh(mut vm: Vm, boot: Arc<str>, code: String) -> Self {
        vm.boot = Some(boot);
        WasiInstance { vm: Some(Box::new(vm)), unstarted: Some(code) }
    }

    pub(crate) fn restored(vm: Vm) -> Self {
        WasiInstance { vm: Some(Box::new(vm)), unstarted: None }
    }
}

impl GuestInstance for WasiInstance {
    fn drive(&mut self, input: DriveInput) -> Result<DriveReport, EngineError> {
        let mut vm = self.vm.take().ok_or_else(|| internal("the guest instance is gone after an earlier failure"))?;
        let mut unstarted = self.unstarted.take();
        let (vm, unstarted, report) = codemode_bridge::workers::run(move || {
            let report = drive(&mut *vm, &mut unstarted, input);
            (vm, unstarted, report)
        })
        .map_err(internal)?;
        self.vm = Some(vm);
        self.unstarted = unstarted;
        report
    }

    fn snapshot(self: Box<Self>) -> Result<Snapshot, EngineError> {
        let vm = self.vm.ok_or_else(|| internal("the guest instance is gone"))?;
        if self.unstarted.is_some() {
            return Err(EngineError::Snapshot("the cell has not started".into()));
        }
        let bytes = vm.snapshot()?;
        Ok(Snapshot { engine: ENGINE_NAME.to_string(), body: SnapshotBody::Serialized(bytes) })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use codemode_core::engine::DriveOutcome;

    fn fresh_memory(loaded: &Arc<Loaded>) -> Vec<u8> {
        let vm = Vm::new(loaded.clone(), GuestLimits::default()).unwrap();
        vm.memory.data(&vm.store).to_vec()
    }

    /// Memory of an instance no guest code ran in (not even the limits' configuration).
    fn raw_memory(loaded: &Arc<Loaded>) -> Vec<u8> {
        let mut store = Store::new(&loaded.engine, HostState::new(GuestLimits::default()));
        let instance = loaded.pre.instantiate(&mut store).unwrap();
        instance.get_memory(&mut store, "memory").unwrap().data(&store).to_vec()
    }

    fn run_to_end(loaded: &Arc<Loaded>, code: &str) -> DriveOutcome {
        let mut vm = Vm::new(loaded.clone(), GuestLimits::default()).unwrap();
        vm.seed().unwrap();
        let mut instance = WasiInstance::fresh(vm, Arc::from(r#"{"maxDepth":64}"#), codemode_bridge::wrap_code(code));
        let input = DriveInput {
            deliveries: Vec::new(),
            deadline: Instant::now() + Duration::from_secs(30),
            output_budget: 1 << 20,
            cancel: None,
            boot_source: None,
        };
        instance.drive(input).unwrap().outcome
    }

    /// The pooling allocator resets only the pages a run wrote (`pagemap_scan`), keeping them
    /// resident: after runs that dirtied the deep stack (below the image), grew the heap and
    /// rewrote the image's own pages, every new instance's memory is still byte for byte what an
    /// instance that never ran a cell holds, and an unconfigured one is the base snapshots are
    /// diffed against.
    #[test]
    fn a_new_instance_starts_from_the_pristine_image_whatever_earlier_runs_wrote() {
        let loaded = crate::loaded().unwrap();
        let base = loaded.base().unwrap().to_vec();
        let pristine = fresh_memory(&loaded);
        let hostile = [
            // Recursion to the stack limit (caught): the deepest stack pages, below the image.
            "function deep(n) { return n === 0 ? 0 : 1 + deep(n - 1); } try { return deep(1e6) } catch (e) { return e.name }",
            "globalThis.leak = 'x'.repeat(3 << 20); const a = []; for (let i = 0; i < 50000; i++) a.push({ i }); return a.length",
            "Object.prototype.polluted = 1; Array.prototype.push = null; JSON.stringify = null; return 1",
        ];
        for round in 0..4 {
            for code in hostile {
                let outcome = run_to_end(&loaded, code);
                assert!(matches!(outcome, DriveOutcome::Completed(_)), "round {round}: {code}: {outcome:?}");
            }
            let now = fresh_memory(&loaded);
            assert_eq!(now.len(), pristine.len(), "round {round}: memory size");
            let differing = now.chunks(4096).zip(pristine.chunks(4096)).filter(|(a, b)| a != b).count();
            assert_eq!(differing, 0, "round {round}: {differing} pages differ from the pristine image");
        }
        assert!(raw_memory(&loaded) == base, "an unconfigured instance is the base snapshots are diffed against");
    }
}
