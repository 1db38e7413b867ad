//! One guest instance: a wasmtime store over the pre-initialized module, driven through the shim's
//! exports, snapshotted as a diff of its linear memory.
//!
//! # Map of the types
//!
//! - `Vm` — the store, the instance and its memory: placing bytes in the guest, reading its output,
//!   the interrupt and deadline, and the `GuestVm` steps the bridge's driver calls.
//! - `Exports` — the shim's exports, each looked up the first time a run needs it.
//! - `Statics` — addresses in the shim's memory, read once per build from its first instance (the
//!   output slot, the scratch and input buffers, the heap-refusal flag, the stack top).
//! - `Placed` — bytes placed in guest memory for one call, released after it.
//! - `WasiInstance` — a `Vm` as the runtime's `GuestInstance`: drive steps and snapshots.
//!
//! The modules: `suspend` (a `Vm` encoded into snapshot bytes and rebuilt from them), `hygiene`
//! (the stack pages a deep run gives back when it ends), `tests`.

mod hygiene;
mod suspend;

use crate::ENGINE_NAME;
use crate::host::HostState;
use crate::module::{EPOCH_TICK, Loaded, STACK_POINTER};
use codemode_bridge::BridgeHost;
use codemode_bridge::driver::{GuestVm, VmFault, classify_failure, drive};
use codemode_core::engine::{
    DriveInput, DriveReport, EngineError, GuestInstance, GuestLimits, RequestId, Snapshot, SnapshotBody,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::{Instance, Memory, Store, Trap, TypedFunc};

/// How long past the deadline the epoch backstop waits for QuickJS's own (graceful) interrupt.
const BACKSTOP_GRACE: Duration = Duration::from_millis(200);

/// Largest QuickJS stack budget: the guest's linear-memory stack is 1 MiB (build.rs), and the shim
/// and host calls need some of it.
const MAX_GUEST_STACK: u64 = 768 << 10;

/// The shim's exports, each looked up once per instance and only when first needed: each lookup of
/// an export initializes a function reference in the fresh instance (~1k instructions; a trivial
/// cell's instance once paid for fifteen of them, then four). A fresh run that ends in its first
/// step uses `cm_start` alone.
#[derive(Default)]
struct Exports {
    /// `cm_start(boot, boot_len, code, len, heap, stack, seed_lo, seed_hi, reseed, texts_units)`.
    start: Option<StartFn>,
    /// Looked up by a restored instance, or a fresh one called before it started.
    configure: Option<TypedFunc<Configuration, ()>>,
    /// Looked up by a run that goes on past its first step.
    run_jobs: Option<TypedFunc<(), i32>>,
    poll: Option<TypedFunc<(), i32>>,
    /// Looked up when first needed: a cell that makes no nested call never settles one.
    settle: Option<TypedFunc<(f64, i32, u32, u32), i32>>,
    /// `cm_step(id, ok, json, len, deliver)`: a step's last delivery, its jobs and its poll in one
    /// call (looked up by a run that goes on past its first step).
    step: Option<StepFn>,
    /// Looked up when an input does not fit the shim's input buffer.
    alloc: Option<TypedFunc<u32, u32>>,
    free: Option<TypedFunc<u32, ()>>,
}

type StartFn = TypedFunc<(u32, u32, u32, u32, u32, u32, u32, u32, i32, u32), i32>;
type StepFn = TypedFunc<(f64, i32, u32, u32, i32), i32>;

/// The length in UTF-16 code units of the boot text's namespace texts (what the index's lengths
/// count, as JavaScript strings do), for `cm_start`: the shim checks the index against it without
/// scanning the texts itself (a word-at-a-time scan in the guest cost a run with two namespaces ~1k
/// instructions; `is_ascii` here a few dozen). Saturates, so an impossible length only stops the
/// guest's list early.
fn texts_units(boot: &str) -> u32 {
    u32::try_from(codemode_bridge::utf16_len(codemode_bridge::split_boot(boot).2)).unwrap_or(u32::MAX)
}

/// `cm_configure`'s arguments: the heap limit, the stack budget, a seed's two halves, whether to
/// reseed.
type Configuration = (u32, u32, u32, u32, i32);

/// Addresses of the shim's host-visible statics (`cm_statics`): fixed at link time, so the same in
/// every instance of one build. They are read once, from the first instance, before any cell ran
/// in it (a hostile cell that overwrites the table in its own memory changes nothing the host
/// uses); every value read through them is bounds-checked like any other guest data, and what the
/// host writes there lands in that run's own memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Statics {
    /// Where the shim keeps the pointer to its last state or failure, and its length.
    out_buf_at: u32,
    out_len_at: u32,
    /// The buffer `host_call` writes error messages to, and its size.
    pub(crate) scratch: (u32, u32),
    /// The heap-refusal flag (an `int`).
    refused_at: u32,
    /// The input buffer small host -> guest data goes to, and its size.
    in_buf: (u32, u32),
    /// The top of the guest's stack (the stack pointer before any guest code ran): the stack grows
    /// down from here and lies below all data.
    stack_top: u32,
    /// Bytes of linear memory an instance starts with (the pre-initialized image's size).
    initial_memory: usize,
}

impl Statics {
    fn read(store: &mut Store<HostState>, instance: &Instance, memory: &Memory) -> Result<Self, EngineError> {
        let f: TypedFunc<(), u32> = instance
            .get_func(&mut *store, "cm_statics")
            .ok_or_else(|| internal("missing export cm_statics"))?
            .typed(&*store)
            .map_err(internal)?;
        let at = f.call(&mut *store, ()).map_err(internal)? as usize;
        let mut raw = [0u8; 28];
        memory.read(&*store, at, &mut raw).map_err(internal)?;
        let word = |i: usize| u32::from_le_bytes([raw[4 * i], raw[4 * i + 1], raw[4 * i + 2], raw[4 * i + 3]]);
        let stack_top = crate::module::stack_pointer(store, instance)
            .ok_or_else(|| internal(format!("the guest exports no i32 `{STACK_POINTER}`")))?;
        Ok(Statics {
            stack_top,
            initial_memory: memory.data_size(&*store),
            out_buf_at: word(0),
            out_len_at: word(1),
            scratch: (word(2), word(3)),
            refused_at: word(4),
            in_buf: (word(5), word(6)),
        })
    }
}

/// Where one input was put in guest memory.
struct Placed {
    ptr: u32,
    len: u32,
    /// Allocated with `cm_alloc` (to be freed), rather than in the input buffer.
    owned: bool,
}

pub(crate) struct Vm {
    store: Store<HostState>,
    instance: Instance,
    memory: Memory,
    ex: Exports,
    statics: Statics,
    loaded: Arc<Loaded>,
    boot: Option<Arc<str>>,
    limits: GuestLimits,
    /// The configuration no guest call has applied yet (`Some(seed)`): a fresh instance's first
    /// guest call, `cm_start`, takes it along; any other call applies it with `cm_configure` first.
    unconfigured: Option<Option<u64>>,
}

fn internal(e: impl std::fmt::Display) -> EngineError {
    EngineError::Internal(e.to_string())
}

fn typed<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
    store: &mut Store<HostState>,
    instance: &Instance,
    name: &str,
) -> Result<TypedFunc<P, R>, EngineError> {
    instance
        .get_func(&mut *store, name)
        .ok_or_else(|| internal(format!("missing export {name}")))?
        .typed(&*store)
        .map_err(internal)
}

/// The export in `slot`, looked up on first use. Lent, not cloned: a `TypedFunc`'s clone copies its
/// registered type (~200 instructions with its drop, two or three times a nested call).
fn lazy<'a, P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
    slot: &'a mut Option<TypedFunc<P, R>>,
    store: &mut Store<HostState>,
    instance: &Instance,
    name: &str,
) -> Result<&'a TypedFunc<P, R>, EngineError> {
    if slot.is_none() {
        *slot = Some(typed(store, instance, name)?);
    }
    slot.as_ref().ok_or_else(|| internal(format!("missing export {name}")))
}

impl Vm {
    /// A fresh instance of the pre-initialized guest (memory = the base image), to be configured with
    /// `limits` before its first guest call runs anything; `seed` reseeds `Math.random` (every new
    /// run: a baked image would otherwise repeat one sequence). A restored instance keeps the seed
    /// state its snapshot carries.
    pub(crate) fn new(loaded: Arc<Loaded>, limits: GuestLimits, seed: Option<u64>) -> Result<Self, EngineError> {
        let mut store = Store::new(&loaded.engine, HostState::new(limits));
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = loaded.pre.instantiate(&mut store).map_err(internal)?;
        let memory =
            instance.get_memory(&mut store, "memory").ok_or_else(|| internal("the guest exports no memory"))?;
        store.data_mut().memory = Some(memory);
        let statics = match loaded.statics.get() {
            Some(s) => *s,
            None => {
                let read = Statics::read(&mut store, &instance, &memory)?;
                *loaded.statics.get_or_init(|| read)
            }
        };
        store.data_mut().scratch = statics.scratch;
        let ex = Exports::default();
        Ok(Vm { store, instance, memory, ex, statics, loaded, boot: None, limits, unconfigured: Some(seed) })
    }

    /// `cm_configure`'s (and `cm_start`'s) arguments for `seed`: the heap limit, the stack budget,
    /// the seed's two halves and whether to reseed.
    fn configuration(&self, seed: Option<u64>) -> Configuration {
        let heap = u32::try_from(self.limits.memory_limit_bytes).unwrap_or(u32::MAX - (64 << 20));
        let stack = u32::try_from(self.limits.max_stack_bytes.min(MAX_GUEST_STACK)).unwrap_or(256 << 10);
        let s = seed.unwrap_or(0);
        (heap, stack, s as u32, (s >> 32) as u32, i32::from(seed.is_some()))
    }

    /// Applies the limits (also after a restore: the snapshot carries the old process's values) and
    /// clears the heap-refusal flag; `seed` reseeds `Math.random`.
    fn configure(&mut self, seed: Option<u64>) -> Result<(), EngineError> {
        self.unconfigured = None;
        let args = self.configuration(seed);
        let configure = lazy(&mut self.ex.configure, &mut self.store, &self.instance, "cm_configure")?;
        configure.call(&mut self.store, args).map_err(internal)
    }

    /// Applies a configuration no guest call has applied yet, before another guest call.
    fn configured(&mut self) -> Result<(), VmFault> {
        match self.unconfigured {
            Some(seed) => self.configure(seed).map_err(VmFault::Engine),
            None => Ok(()),
        }
    }

    fn fault(&mut self, e: wasmtime::Error) -> VmFault {
        if matches!(e.downcast_ref::<Trap>(), Some(Trap::Interrupt)) || self.store.data().fired {
            return VmFault::Interrupted;
        }
        VmFault::Engine(EngineError::Internal(format!("the guest trapped: {e}")))
    }

    /// A `u32` static of the shim (bounds-checked).
    fn read_u32(&self, at: u32) -> Result<u32, VmFault> {
        let mut raw = [0u8; 4];
        self.memory.read(&self.store, at as usize, &mut raw).map_err(|e| VmFault::Engine(internal(e)))?;
        Ok(u32::from_le_bytes(raw))
    }

    /// Puts `bytes` into guest memory: into the input buffer from `*offset` on when they fit
    /// (advancing it), else into a guest allocation (an allocation the heap limit refuses is the
    /// run's `memory_limit_exceeded`).
    fn place(&mut self, bytes: &[u8], offset: &mut u32) -> Result<Placed, VmFault> {
        let len = u32::try_from(bytes.len()).map_err(|_| VmFault::Engine(internal("value too large for the guest")))?;
        let (buf, cap) = self.statics.in_buf;
        let placed = if cap.saturating_sub(*offset) >= len {
            let at = buf + *offset;
            *offset += len;
            Placed { ptr: at, len, owned: false }
        } else {
            let alloc = lazy(&mut self.ex.alloc, &mut self.store, &self.instance, "cm_alloc")?;
            let ptr = alloc.call(&mut self.store, len);
            let ptr = ptr.map_err(|e| self.fault(e))?;
            if ptr == 0 {
                return Err(VmFault::Failure(codemode_core::engine::GuestFailure {
                    code: Some(codemode_core::error::CodeModeErrorCode::MemoryLimitExceeded),
                    message: "out of memory while passing a value into the guest".into(),
                }));
            }
            Placed { ptr, len, owned: true }
        };
        self.memory.write(&mut self.store, placed.ptr as usize, bytes).map_err(|e| VmFault::Engine(internal(e)))?;
        Ok(placed)
    }

    /// Frees what [`Self::place`] allocated.
    fn release(&mut self, placed: Placed) -> Result<(), VmFault> {
        if !placed.owned {
            return Ok(());
        }
        let free = lazy(&mut self.ex.free, &mut self.store, &self.instance, "cm_free")?;
        let freed = free.call(&mut self.store, placed.ptr);
        freed.map_err(|e| self.fault(e))
    }

    fn read_out(&mut self) -> Result<String, VmFault> {
        let ptr = self.read_u32(self.statics.out_buf_at)? as usize;
        let len = self.read_u32(self.statics.out_len_at)? as usize;
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

    /// What a `cm_poll`-style status means: 0 the cell still runs, 1 its state is in the output
    /// buffer, anything else a failure there (an interrupt first: the guest may have described it).
    fn polled(&mut self, status: i32) -> Result<Option<String>, VmFault> {
        if self.store.data().fired {
            return Err(VmFault::Interrupted);
        }
        match status {
            0 => Ok(None),
            1 => Ok(Some(self.read_out()?)),
            _ => Err(VmFault::Failure(classify_failure(&self.read_out()?))),
        }
    }
}

/// The pooling allocator resets a slot by copying back every page of it that is resident and no
/// longer the image's (`PAGEMAP_SCAN`), and keeps those pages resident: every page any run in the
/// slot ever wrote is copied again at the end of every later run in it. One deep recursion (up to
/// the 512 KiB default stack budget: 128 pages) or one heap that outgrew the initial memory would
/// make every later cell in that slot pay for resetting those pages, for the life of the process
/// (measured: a trivial cell after such cells took 1.5–1.7× as long). So an instance whose run wrote
/// beyond what ordinary runs write releases those pages before the slot is reset; the next run in
/// the slot faults in again what it touches. An ordinary run pays one page read.
impl Drop for Vm {
    fn drop(&mut self) {
        if self.loaded.pooled {
            let len = self.written_beyond_ordinary();
            if len > 0 {
                self.release_pages(len);
            }
        }
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
        let at = self.statics.refused_at as usize;
        if let Err(e) = self.memory.write(&mut self.store, at, &0i32.to_le_bytes()) {
            tracing::debug!(error = %e, "cannot clear the heap refusal flag");
        }
    }

    /// As [`Self::start_and_poll`]: the state it reaches is polled again by the driver's next step.
    fn start_cell(&mut self, wrapped: &str) -> Result<(), VmFault> {
        self.start_and_poll(wrapped).map(|_| ())
    }

    /// Configuration, boot, the cell's start, its jobs and its state in one call into the guest
    /// (`cm_start`).
    fn start_and_poll(&mut self, wrapped: &str) -> Result<Option<String>, VmFault> {
        let boot = self.boot.take().unwrap_or_else(|| Arc::from("{}"));
        if boot.len().saturating_add(wrapped.len()) > self.statics.in_buf.1 as usize {
            // The inputs go to guest allocations (`cm_alloc`), which the run's heap limit must bound.
            self.configured()?;
        }
        // The configuration not applied yet goes along; when it was applied above, `cm_start`
        // applies the same limits again and does not reseed.
        let seed = self.unconfigured.take().flatten();
        let (heap, stack, seed_lo, seed_hi, reseed) = self.configuration(seed);
        let mut offset = 0;
        let b = self.place(boot.as_bytes(), &mut offset)?;
        let c = self.place(wrapped.as_bytes(), &mut offset)?;
        let units = texts_units(&boot);
        let start = lazy(&mut self.ex.start, &mut self.store, &self.instance, "cm_start")?;
        let status =
            start.call(&mut self.store, (b.ptr, b.len, c.ptr, c.len, heap, stack, seed_lo, seed_hi, reseed, units));
        let status = status.map_err(|e| self.fault(e));
        self.release(b)?;
        self.release(c)?;
        self.polled(status?)
    }

    fn settle(&mut self, id: RequestId, ok: bool, json: &str) -> Result<(), VmFault> {
        self.configured()?;
        let placed = self.place(json.as_bytes(), &mut 0)?;
        let settle = lazy(&mut self.ex.settle, &mut self.store, &self.instance, "cm_settle")?;
        let status = settle.call(&mut self.store, (id as f64, i32::from(ok), placed.ptr, placed.len));
        let status = status.map_err(|e| self.fault(e));
        self.release(placed)?;
        self.status(status?)
    }

    /// One call into the guest (`cm_step`) where the default makes up to three.
    fn settle_and_poll(&mut self, last: Option<(RequestId, bool, &str)>) -> Result<Option<String>, VmFault> {
        self.configured()?;
        let placed = match last {
            Some((_, _, json)) => Some(self.place(json.as_bytes(), &mut 0)?),
            None => None,
        };
        let (id, ok) = last.map_or((0.0, 0), |(id, ok, _)| (id as f64, i32::from(ok)));
        let (ptr, len) = placed.as_ref().map_or((0, 0), |p| (p.ptr, p.len));
        let step = lazy(&mut self.ex.step, &mut self.store, &self.instance, "cm_step")?;
        let status = step.call(&mut self.store, (id, ok, ptr, len, i32::from(last.is_some())));
        let status = status.map_err(|e| self.fault(e));
        if let Some(placed) = placed {
            self.release(placed)?;
        }
        self.polled(status?)
    }

    fn run_jobs(&mut self) -> Result<(), VmFault> {
        self.configured()?;
        let run_jobs = lazy(&mut self.ex.run_jobs, &mut self.store, &self.instance, "cm_run_jobs")?;
        let status = run_jobs.call(&mut self.store, ());
        let status = status.map_err(|e| self.fault(e))?;
        self.status(status)
    }

    fn poll(&mut self) -> Result<Option<String>, VmFault> {
        self.configured()?;
        let poll = lazy(&mut self.ex.poll, &mut self.store, &self.instance, "cm_poll")?;
        let status = poll.call(&mut self.store, ());
        let status = status.map_err(|e| self.fault(e))?;
        self.polled(status)
    }

    /// The shim settles a request answered at once inside `host` (see `host::ANSWERED`).
    fn answers_inline(&self) -> bool {
        true
    }

    fn with_bridge<R>(&mut self, f: impl FnOnce(&mut BridgeHost) -> R) -> R {
        f(&mut self.store.data_mut().bridge)
    }

    fn memory_refused(&mut self) -> bool {
        self.read_u32(self.statics.refused_at).is_ok_and(|r| r != 0)
    }
}

/// A [`GuestInstance`] of the `quickjs-wasi` engine. Guest code always runs on a worker thread
/// ([`codemode_workers`]), inline when the caller already is one.
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
        let (vm, unstarted, report) = codemode_workers::run(move || {
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
mod tests;
