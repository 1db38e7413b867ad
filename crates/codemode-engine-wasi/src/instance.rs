//! One guest instance: a wasmtime store over the pre-initialized module, driven through the shim's
//! exports, snapshotted as a diff of its linear memory.

use crate::ENGINE_NAME;
use crate::host::HostState;
use crate::module::{EPOCH_TICK, Loaded, STACK_POINTER};
use crate::snapshot::{self, GlobalValue, Header};
use codemode_bridge::BridgeHost;
use codemode_bridge::driver::{GuestVm, VmFault, classify_failure, drive};
use codemode_core::engine::{
    DriveInput, DriveReport, EngineError, GuestInstance, GuestLimits, RequestId, Snapshot, SnapshotBody,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::{Instance, Memory, Store, Trap, TypedFunc, Val};

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

    /// Serializes the instance (only between drive steps: no wasm call is on the stack).
    ///
    /// The instance is then torn down (the pool resetting the pages it wrote) once the current
    /// guest-worker job has returned and so answered its caller, as a finished run's instance is
    /// (off a worker, on one): whoever waits for the snapshot does not wait for the reset.
    pub(crate) fn snapshot(mut self) -> Result<Vec<u8>, EngineError> {
        let bytes = self.encode();
        if let Err(e) = codemode_bridge::workers::after_job(move || drop(self)) {
            // The work, and with it the instance, is dropped here instead.
            tracing::debug!(error = %e, "tearing a snapshotted instance down inline");
        }
        bytes
    }

    /// The snapshot of this instance's state.
    fn encode(&mut self) -> Result<Vec<u8>, EngineError> {
        self.encode_with(true)
    }

    /// [`Self::encode`], comparing with the image only the pages the page tables say may have
    /// been written (`read_page_tables`, where they can be read; else every page).
    fn encode_with(&mut self, read_page_tables: bool) -> Result<Vec<u8>, EngineError> {
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
        // The stack grows down from its top and lies below all data: under the stack pointer it is
        // dead between drive steps (no guest function is running).
        let dead_below = header
            .globals
            .iter()
            .find(|(name, _)| name == STACK_POINTER)
            .and_then(|(_, v)| match v {
                GlobalValue::I32(sp) => usize::try_from(*sp).ok(),
                GlobalValue::I64(_) => None,
            })
            .map_or(0, |sp| sp.min(base.stack_top));
        let memory = self.memory.data(&self.store);
        let written =
            if read_page_tables { crate::written::may_differ(memory, dead_below / snapshot::PAGE) } else { None };
        snapshot::encode(&header, &base.memory, memory, dead_below, written.as_deref())
            .map_err(|e| EngineError::Snapshot(e.to_string()))
    }

    /// Rebuilds an instance from snapshot bytes.
    pub(crate) fn restore(loaded: Arc<Loaded>, bytes: &[u8], limits: GuestLimits) -> Result<Self, EngineError> {
        let base = loaded.base().map_err(|e| EngineError::Restore(e.to_string()))?;
        let decoded = snapshot::decode(bytes, ENGINE_NAME, &loaded.build_id, &base.memory)
            .map_err(|e| EngineError::Restore(e.to_string()))?;
        let mut vm = Vm::new(loaded, limits, None)?;
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
        for (at, content) in decoded.runs() {
            let dest = data
                .get_mut(at..at + content.len())
                .ok_or_else(|| EngineError::Restore("page out of bounds".into()))?;
            dest.copy_from_slice(content);
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
        // The snapshot's memory carries the old process's limits: this process's apply.
        vm.configure(None)?;
        Ok(vm)
    }
}

/// How deep a run's stack may reach before [`Vm`]'s clean-up releases the stack pages below that
/// depth when the instance ends. A run that went deeper (recursion towards the stack limit) wrote
/// pages no ordinary cell touches.
const STACK_KEEP: u32 = 64 << 10;

impl Vm {
    /// Whether this run's stack reached below [`STACK_KEEP`]: the first page under that depth no
    /// longer holds what the image holds there, zeros (`the_stack_below_the_kept_depth_is_zero_in_the_image`
    /// checks the image). The page is read, never written; in a slot no deep run has used it is the
    /// image's page, faulted in once for the slot's lifetime.
    fn stack_went_deep(&self) -> bool {
        let probe = self.statics.stack_top.saturating_sub(STACK_KEEP) as usize;
        probe >= 4096
            && self
                .memory
                .data(&self.store)
                .get(probe - 4096..probe)
                .is_some_and(|page| page.iter().fold(0u8, |acc, b| acc | b) != 0)
    }

    /// How much of this instance's memory, from address 0, to give back to the kernel as it ends
    /// (see the `Drop` impl): all of its initial memory when the run outgrew it (its heap then
    /// filled every free page of the image), the stack below [`STACK_KEEP`] when only the stack
    /// went deep, nothing after an ordinary run.
    fn written_beyond_ordinary(&self) -> usize {
        if self.memory.data_size(&self.store) > self.statics.initial_memory {
            self.statics.initial_memory
        } else if self.stack_went_deep() {
            self.statics.stack_top.saturating_sub(STACK_KEEP) as usize
        } else {
            0
        }
    }

    /// Gives the first `len` bytes (whole pages) of this instance's memory back to the kernel, so
    /// they are the image's again and no longer count as written.
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    fn release_pages(&mut self, len: usize) {
        let len = len & !4095;
        if len == 0 || len > self.memory.data_size(&self.store) {
            return;
        }
        let at = self.memory.data_ptr(&self.store);
        // SAFETY: `at..at + len` lies inside this instance's linear memory (checked above against its
        // size; wasm memories start page-aligned), which this `Vm` owns exclusively through its
        // `Store` and which no guest code is using (the instance is ending: no wasm call is on the
        // stack, and nothing holds a reference into the memory). `MADV_DONTNEED` on wasmtime's
        // private mapping replaces these pages with what the mapping was made from — the module's
        // memory image or zeros, exactly what wasmtime's own reset restores — so the next instance
        // in the slot still starts from the pristine image
        // (`a_new_instance_starts_from_the_pristine_image_whatever_earlier_runs_wrote`). It
        // changes no Rust-visible value and cannot fail in a way that matters: on error the pages
        // stay, and wasmtime resets them as before.
        let rc = unsafe { libc::madvise(at.cast(), len, libc::MADV_DONTNEED) };
        if rc != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "could not release a heavy run's pages");
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn release_pages(&mut self, _len: usize) {}
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
    use codemode_bridge::random_seed;
    use codemode_core::engine::{BridgeRequest, Delivery, DriveOutcome};

    fn fresh_memory(loaded: &Arc<Loaded>) -> Vec<u8> {
        let vm = Vm::new(loaded.clone(), GuestLimits::default(), None).unwrap();
        vm.memory.data(&vm.store).to_vec()
    }

    /// Memory of an instance no guest code ran in (not even the limits' configuration).
    fn raw_memory(loaded: &Arc<Loaded>) -> Vec<u8> {
        let mut store = Store::new(&loaded.engine, HostState::new(GuestLimits::default()));
        let instance = loaded.pre.instantiate(&mut store).unwrap();
        instance.get_memory(&mut store, "memory").unwrap().data(&store).to_vec()
    }

    fn run_to_end(loaded: &Arc<Loaded>, code: &str) -> DriveOutcome {
        ran(loaded, code).0
    }

    /// Runs `code` to its end and hands back the instance, not yet dropped.
    fn ran(loaded: &Arc<Loaded>, code: &str) -> (DriveOutcome, WasiInstance) {
        let mut instance = fresh_instance(loaded, code);
        let input = DriveInput::new(Vec::new(), Instant::now() + Duration::from_secs(30), 1 << 20);
        let outcome = instance.drive(input).unwrap().outcome;
        (outcome, instance)
    }

    /// A fresh VM with the default limits.
    fn fresh_vm(loaded: &Arc<Loaded>) -> Vm {
        Vm::new(loaded.clone(), GuestLimits::default(), Some(random_seed())).unwrap()
    }

    /// A fresh VM with its boot data set and a drive begun (a 30 s deadline), ready to start a cell.
    fn ready_vm(loaded: &Arc<Loaded>) -> Vm {
        let mut vm = fresh_vm(loaded);
        vm.boot = Some(Arc::from(r#"{"maxDepth":64}"#));
        vm.with_bridge(|b| b.begin_drive(1 << 20));
        vm.set_deadline(Instant::now() + Duration::from_secs(30));
        vm
    }

    /// A fresh instance that will start `code` at its first drive.
    fn fresh_instance(loaded: &Arc<Loaded>, code: &str) -> WasiInstance {
        let vm = fresh_vm(loaded);
        WasiInstance::fresh(vm, Arc::from(r#"{"maxDepth":64}"#), codemode_bridge::wrap_code(code))
    }

    /// The texts' length `cm_start` passes is the one JavaScript gives them (UTF-16 units: `é` one,
    /// `𝄞` two), whatever the head and index hold, and zero without texts.
    #[test]
    fn texts_are_counted_in_utf16_units() {
        assert_eq!(texts_units("{\"maxDepth\":64}\nA 5\n{\"a\":1}"), 7);
        assert_eq!(texts_units("{\"é\":1}\nŜ 6\n\"é𝄞\""), 5);
        assert_eq!(texts_units("{\"maxDepth\":64}"), 0);
        assert_eq!(texts_units("{}\n\n"), 0);
    }

    /// The shim settles requests from its own table of pending promises (in the guest's memory):
    /// an id settled a second time, or one it never handed out, reaches nothing and the first
    /// outcome stands; a failure arrives as the coded error the prelude's `hostError` makes; and a
    /// snapshot taken while requests wait carries the table to a fresh instance.
    #[test]
    fn requests_are_settled_by_id_once_and_survive_a_snapshot() {
        let loaded = crate::loaded().unwrap();
        let mut vm = ready_vm(&loaded);
        let code = codemode_bridge::wrap_code(
            "const p = [tools.call('a', {}), tools.call('b', {}), tools.call('c', {})];\n\
             const out = [];\n\
             for (const x of p) { try { out.push(await x); } catch (e) { out.push(`${e.name}/${e.code}/${e.message}`); } }\n\
             return out;",
        );
        vm.start_cell(&code).unwrap();
        vm.run_jobs().unwrap();
        assert_eq!(vm.poll().unwrap(), None, "the cell waits for its three calls");
        let ids: Vec<RequestId> = vm.with_bridge(|b| b.finish_drive()).0.iter().map(|r| r.id).collect();
        assert_eq!(ids.len(), 3, "three requests: {ids:?}");
        let bytes = vm.snapshot().unwrap();
        let mut vm = Vm::restore(loaded, &bytes, GuestLimits::default()).unwrap();
        vm.with_bridge(|b| b.begin_drive(1 << 20));
        vm.set_deadline(Instant::now() + Duration::from_secs(30));
        vm.settle(ids[1], true, r#"{"v":2}"#).unwrap();
        vm.settle(ids[1], true, r#"{"v":"again"}"#).unwrap();
        vm.settle(ids[2] + 1000, true, r#""never issued""#).unwrap();
        vm.settle(ids[0], false, r#"{"name":"ToolError","message":"nope","code":"nested_tool_failed"}"#).unwrap();
        vm.run_jobs().unwrap();
        assert_eq!(vm.poll().unwrap(), None, "the third call is still pending");
        vm.settle(ids[2], true, "3").unwrap();
        vm.settle(ids[0], true, r#""too late""#).unwrap();
        vm.run_jobs().unwrap();
        let state = vm.poll().unwrap().expect("the cell completed");
        let value: serde_json::Value = serde_json::from_str(state.strip_prefix('1').expect("completed")).unwrap();
        assert_eq!(value, serde_json::json!(["ToolError/nested_tool_failed/nope", { "v": 2 }, 3]));
    }

    /// A fresh instance that started `cell` (in one step) and waits for the calls it made: the
    /// instance, with its next drive begun, and the ids of the calls.
    fn waiting(loaded: &Arc<Loaded>, cell: &str) -> (Vm, Vec<RequestId>) {
        let mut vm = ready_vm(loaded);
        assert_eq!(vm.start_and_poll(&codemode_bridge::wrap_code(cell)).unwrap(), None, "{cell}");
        let ids: Vec<RequestId> = vm.with_bridge(|b| b.finish_drive()).0.iter().map(|r| r.id).collect();
        vm.with_bridge(|b| b.begin_drive(1 << 20));
        (vm, ids)
    }

    /// What the tests' tools answer: a call to `t` gives back its input, a call to `bad` fails, a
    /// call to `slow` is under way (settled by the next step), anything else gives `null`.
    fn outcome_of(request: &BridgeRequest) -> Delivery {
        use codemode_core::guest::GuestRequest;
        let outcome = match &request.request {
            GuestRequest::Call { id, input, .. } if id == "t" || id == "slow" => Ok(input.clone()),
            GuestRequest::Call { id, .. } if id == "bad" => Err(codemode_core::engine::GuestError::new(
                "ToolError",
                "it broke",
                Some(codemode_core::error::CodeModeErrorCode::NestedToolFailed),
            )),
            _ => Ok(serde_json::Value::Null),
        };
        Delivery { id: request.id, outcome }
    }

    /// Answers every request at once, except calls to `slow` (started, kept for the next step).
    #[derive(Debug, Default)]
    struct AtOnce {
        answered: std::sync::Mutex<usize>,
        started: std::sync::Mutex<Vec<BridgeRequest>>,
    }

    impl codemode_core::engine::Answerer for AtOnce {
        fn answer(&self, request: BridgeRequest, _notes: &mut Vec<String>) -> codemode_core::engine::Answer {
            use codemode_core::guest::GuestRequest;
            if matches!(&request.request, GuestRequest::Call { id, .. } if id == "slow") {
                self.started.lock().unwrap().push(request);
                return codemode_core::engine::Answer::Started;
            }
            *self.answered.lock().unwrap() += 1;
            codemode_core::engine::Answer::Settled(outcome_of(&request))
        }
    }

    /// Drives `cell` to its end, delivering each step's reported (and started) requests in the
    /// next step: the outcome, the number of steps and of requests answered inline.
    fn drive_to_end(loaded: &Arc<Loaded>, cell: &str, answerer: Option<Arc<AtOnce>>) -> (DriveOutcome, usize, usize) {
        let mut instance = fresh_instance(loaded, cell);
        let mut deliveries = Vec::new();
        for steps in 1..=1000 {
            let mut input = DriveInput::new(deliveries, Instant::now() + Duration::from_secs(30), 1 << 20);
            input.answerer = answerer.clone().map(|a| a as Arc<dyn codemode_core::engine::Answerer>);
            let report = instance.drive(input).unwrap();
            let started =
                answerer.as_ref().map(|a| std::mem::take(&mut *a.started.lock().unwrap())).unwrap_or_default();
            deliveries = report.requests.iter().chain(&started).map(outcome_of).collect();
            if !matches!(report.outcome, DriveOutcome::Pending) && deliveries.is_empty() {
                let inline = answerer.map_or(0, |a| *a.answered.lock().unwrap());
                return (report.outcome, steps, inline);
            }
        }
        panic!("{cell}: no end in 1000 steps");
    }

    /// Requests answered inside the host primitive (the step's answerer) leave the cell exactly
    /// what the host's delivery in a later step leaves it — the same value, the same failures,
    /// callbacks run in the same order (an un-awaited call's callback after the return value is
    /// taken; a `then` getter on every object, which makes calls while outcomes are settled) — in
    /// fewer steps: a loop of calls answered at once runs in one.
    #[test]
    fn requests_answered_inline_leave_the_cell_what_later_steps_leave_it() {
        let loaded = crate::loaded().unwrap();
        let cells = [
            "let s = 0; for (let i = 0; i < 50; i++) s += (await tools.call('t', { i })).i; return s;",
            "const log = []; tools.call('t', { n: 1 }).then((r) => log.push(r.n)); return log;",
            "const log = [];\n\
             const all = Promise.all([1, 2, 3].map((i) => tools.call('t', { i }).then((r) => { log.push(r.i); return r.i * 10; })));\n\
             log.push('sync'); const got = await all; await null; return [log, got];",
            "const out = []; try { await tools.call('bad', {}); } catch (e) { out.push(`${e.name}/${e.code}/${e.message}`); }\n\
             out.push((await tools.call('t', { after: 1 })).after); return out;",
            "const big = 'x'.repeat(10000) + '\\u00e9'; const r = await tools.call('t', { big }); return [r.big.length, r.big.at(-1)];",
            "const a = tools.call('slow', { s: 1 }); const b = await tools.call('t', { f: 2 });\n\
             return [b.f, (await a).s];",
            "let made = 0;\n\
             Object.defineProperty(Object.prototype, 'then', { configurable: true, get() {\n\
               if (made < 3) { made++; tools.call('t', { made }).then((r) => { globalThis.last = r.made; }); }\n\
               return undefined; } });\n\
             const r = await tools.call('t', { first: true });\n\
             for (let i = 0; i < 5; i++) await null;\n\
             delete Object.prototype.then; return [r.first, made, globalThis.last];",
        ];
        for cell in cells {
            let (stepwise, stepwise_steps, _) = drive_to_end(&loaded, cell, None);
            let (inline, inline_steps, answered) = drive_to_end(&loaded, cell, Some(Arc::new(AtOnce::default())));
            assert_eq!(inline, stepwise, "{cell}");
            assert!(matches!(inline, DriveOutcome::Completed(_)), "{cell}: {inline:?}");
            assert!(answered > 0, "{cell}: nothing was answered inline");
            // (With a call under way the step waits for it either way.)
            assert!(
                inline_steps < stepwise_steps || (cell.contains("slow") && inline_steps == stepwise_steps),
                "{cell}: {inline_steps} steps inline, {stepwise_steps} stepwise"
            );
        }
        let (outcome, steps, answered) = drive_to_end(&loaded, cells[0], Some(Arc::new(AtOnce::default())));
        assert_eq!((outcome, steps, answered), (DriveOutcome::Completed(serde_json::json!(1225)), 1, 50));
    }

    /// A step's end (`settle_and_poll`, one call into the guest: `cm_step`) delivers, runs the jobs
    /// and polls as `settle`, `run_jobs` and `poll` do one by one: a cell still waiting polls as
    /// pending (the shim then answers from the cell's promise without calling the prelude), a step
    /// with nothing to deliver changes nothing, the last delivery completes the cell, and a
    /// delivery the guest refuses fails the step with the guest's error (the jobs after it do not
    /// run).
    #[test]
    fn a_steps_end_delivers_runs_and_polls_in_one_call() {
        let loaded = crate::loaded().unwrap();
        let start = |cell: &str| waiting(&loaded, cell);
        let cell = "const a = tools.call('a', {}), b = tools.call('b', {});\n\
                    const x = await a; globalThis.seen = x; return [x, await b, globalThis.seen];";
        let (mut vm, ids) = start(cell);
        assert_eq!(ids.len(), 2);
        assert_eq!(vm.settle_and_poll(None).unwrap(), None, "nothing delivered: still running");
        assert_eq!(vm.settle_and_poll(Some((ids[0], true, r#"{"v":1}"#))).unwrap(), None, "waits for b");
        let state = vm.settle_and_poll(Some((ids[1], true, "[2]"))).unwrap().expect("the cell completed");
        let value: serde_json::Value = serde_json::from_str(state.strip_prefix('1').expect("completed")).unwrap();
        assert_eq!(value, serde_json::json!([{ "v": 1 }, [2], { "v": 1 }]));
        assert_eq!(vm.settle_and_poll(None).unwrap(), Some(state), "a finished cell keeps its state");

        let (mut vm, ids) = start(cell);
        match vm.settle_and_poll(Some((ids[0], true, "{not json"))) {
            Err(VmFault::Failure(f)) => assert!(f.message.contains("SyntaxError"), "{f:?}"),
            other => panic!("a refused delivery fails the step: {other:?}"),
        }

        // A cell that fails: its rejection is the state once the jobs have run.
        let (mut vm, ids) = start("await tools.call('a', {}); throw new TypeError('after the call');");
        let state = vm.settle_and_poll(Some((ids[0], true, "1"))).unwrap().expect("the cell failed");
        assert!(state.starts_with('0') && state.contains("after the call"), "{state}");
    }

    /// A snapshot that compares only the pages the page tables say were written is byte for byte
    /// the one that compares every page: for a small cell, one that grows the memory, one that
    /// writes a megabyte and sets it back to zeros (pages written, content equal to the image),
    /// one that builds a large string and drops it, and for each of them again in an instance
    /// taken from a pool slot the previous cells wrote (its pages reset by copying the image
    /// back). Where the page tables can be read, some pages are skipped, so the shortcut is what
    /// is compared here. The snapshot of the suspended cell resumes to the right answer.
    #[test]
    fn snapshots_through_the_page_tables_equal_comparing_every_page() {
        let loaded = crate::loaded().unwrap();
        let cells = [
            "const r = await tools.call('a', {}); return [r, 1];",
            "globalThis.big = Array.from({ length: 300000 }, (_, i) => i * 2);\n\
             const r = await tools.call('a', {}); return [r, big.length, big[299999]];",
            "const u = new Uint8Array(1 << 20); u.fill(7); u.fill(0);\n\
             const r = await tools.call('a', {}); return [r, u.length, u[12345]];",
            "let s = 'x'.repeat(2_000_000) + 'y'; const n = s.length; s = null;\n\
             const r = await tools.call('a', {}); return [r, n];",
        ];
        let expected = [
            serde_json::json!([5, 1]),
            serde_json::json!([5, 300000, 599998]),
            serde_json::json!([5, 1048576, 0]),
            serde_json::json!([5, 2000001]),
        ];
        let mut skipped_some = false;
        for round in 0..2 {
            for (cell, want) in cells.iter().zip(&expected) {
                let (mut vm, ids) = waiting(&loaded, cell);
                assert_eq!(ids.len(), 1, "{cell}");
                if let Some(flags) = crate::written::may_differ(vm.memory.data(&vm.store), 0) {
                    skipped_some |= flags.iter().any(|f| !f);
                }
                let read = vm.encode_with(true).unwrap();
                let compared = vm.encode_with(false).unwrap();
                assert!(read == compared, "round {round}: the snapshots differ for {cell}");
                drop(vm);
                let mut vm = Vm::restore(loaded.clone(), &read, GuestLimits::default()).unwrap();
                vm.with_bridge(|b| b.begin_drive(1 << 20));
                vm.set_deadline(Instant::now() + Duration::from_secs(30));
                let state = vm.settle_and_poll(Some((ids[0], true, "5"))).unwrap().expect("the cell completed");
                let value: serde_json::Value =
                    serde_json::from_str(state.strip_prefix('1').expect("completed")).unwrap();
                assert_eq!(&value, want, "{cell}");
            }
        }
        assert_eq!(skipped_some, crate::written::usable(), "pages are skipped exactly where the tables are read");
    }

    /// Starts `cell`, settles the calls it makes at once with `texts` in order, and runs it to its
    /// end: the cell's state (`1` + value), or the fault of a settle or of the run.
    fn settled_with(loaded: &Arc<Loaded>, cell: &str, texts: &[&str]) -> Result<String, VmFault> {
        let mut vm = ready_vm(loaded);
        vm.start_cell(&codemode_bridge::wrap_code(cell)).unwrap();
        vm.run_jobs().unwrap();
        let ids: Vec<RequestId> = vm.with_bridge(|b| b.finish_drive()).0.iter().map(|r| r.id).collect();
        assert_eq!(ids.len(), texts.len(), "one call per text: {cell}");
        vm.with_bridge(|b| b.begin_drive(1 << 20));
        for (id, text) in ids.iter().zip(texts) {
            vm.settle(*id, true, text)?;
        }
        vm.run_jobs()?;
        Ok(vm.poll()?.expect("the cell completed"))
    }

    /// A cell comparing the value its call settles with against `JSON.parse` of the same text, by
    /// type, `Object.is`, prototype, own keys in order and their descriptors: `null` when equal,
    /// else where they differ.
    fn compared_with_json_parse(text: &str) -> String {
        let literal = serde_json::to_string(text).unwrap();
        format!(
            "function same(a, b, at) {{\n\
               if (typeof a !== typeof b) return at + ': ' + typeof a + ' vs ' + typeof b;\n\
               if (a === null || typeof a !== 'object') return Object.is(a, b) ? null : at + ': ' + String(a) + ' vs ' + String(b);\n\
               if (b === null || Array.isArray(a) !== Array.isArray(b)) return at + ': kind';\n\
               if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return at + ': prototype';\n\
               if (Object.isExtensible(a) !== Object.isExtensible(b)) return at + ': extensible';\n\
               const ka = Reflect.ownKeys(a), kb = Reflect.ownKeys(b);\n\
               if (ka.length !== kb.length) return at + ': keys ' + JSON.stringify(ka) + ' vs ' + JSON.stringify(kb);\n\
               for (let i = 0; i < ka.length; i++) {{\n\
                 if (ka[i] !== kb[i]) return at + ': key ' + i + ' ' + JSON.stringify(ka[i]) + ' vs ' + JSON.stringify(kb[i]);\n\
                 const da = Object.getOwnPropertyDescriptor(a, ka[i]), db = Object.getOwnPropertyDescriptor(b, kb[i]);\n\
                 if (da.writable !== db.writable || da.enumerable !== db.enumerable || da.configurable !== db.configurable || 'get' in da) return at + ': descriptor of ' + String(ka[i]);\n\
                 const d = same(da.value, db.value, at + '.' + String(ka[i]));\n\
                 if (d !== null) return d;\n\
               }}\n\
               return null;\n\
             }}\n\
             const got = await tools.call('a', {{}});\n\
             return same(got, JSON.parse({literal}), '$')"
        )
    }

    /// A tiny deterministic generator of JSON values (xorshift), for the settle test below: keys and
    /// strings with escapes, control characters, non-ASCII and astral characters, numeric and
    /// special keys; integers, fractions, exponents, long and negative numbers, `-0`; nesting.
    struct Gen(u64);
    impl Gen {
        fn next(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
        fn string(&mut self) -> String {
            // Pieces, `|`-separated (one is empty).
            const PIECES: &str = "a|i|0|12|__proto__|constructor|toJSON||é|𝄞|\n|\"|\\|\u{1}|\u{2028}|\u{7f}";
            let pieces: Vec<&str> = PIECES.split('|').collect();
            (0..self.next(4)).map(|_| pieces[self.next(pieces.len() as u64) as usize]).collect()
        }
        fn value(&mut self, depth: u32) -> serde_json::Value {
            use serde_json::{Value, json};
            match self.next(if depth == 0 { 5 } else { 7 }) {
                0 => Value::Null,
                1 => Value::Bool(self.next(2) == 1),
                2 => match self.next(6) {
                    0 => json!(self.next(1 << 20)),
                    1 => json!(-(self.next(u64::MAX >> 1) as i64)),
                    2 => json!(self.next(u64::MAX)),
                    3 => json!(-0.0),
                    4 => json!(self.next(1_000_000) as f64 / 7.0),
                    _ => json!(f64::from_bits(self.next(0x7fe0_0000_0000_0000))),
                },
                3 | 4 => Value::String(self.string()),
                5 => Value::Array((0..self.next(4)).map(|_| self.value(depth - 1)).collect()),
                _ => Value::Object((0..self.next(4)).map(|_| (self.string(), self.value(depth - 1))).collect()),
            }
        }
    }

    /// What a settled call delivers is what `JSON.parse` makes of the same text: the shim reads the
    /// host's compact JSON itself (`codemode_json_read`) and hands anything else (whitespace, bad
    /// input) to QuickJS's parser. Compact texts of every kind, the same texts pretty-printed, and
    /// texts the reader must give up on; a text JSON.parse refuses fails the settle as before; a
    /// short text after a longer one in the same input buffer is read to its own end only.
    #[test]
    fn settled_values_are_what_json_parse_makes() {
        let loaded = crate::loaded().unwrap();
        let mut texts: Vec<String> = [
            r#"{"i":1}"#,
            "5",
            "-0",
            "-0.0",
            "0.1",
            "1e300",
            "-1.5E-7",
            "123456789012345678901234567890",
            "1.7976931348623157e308",
            r#""""#,
            r#""\u0000\ud800\udc00\ud800x\udfff\/\b\f\n\r\t""#,
            r#"{"__proto__":{"polluted":true},"0":1,"4294967295":2,"01":3,"-1":4,"":5,"é":6}"#,
            r#"{"a":1,"a":2}"#,
            "[[],{},[[[]]],[null,true,false]]",
            " {\"i\" : 1 } ",
            "[1, 2,\n3]",
            "\"\u{7f}\u{80}é𝄞\"",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        texts.push(format!("{}1{}", "[".repeat(200), "]".repeat(200)));
        texts.push(format!("\"{}\"", "x".repeat(5000)));
        let mut g = Gen(0x2545_F491_4F6C_DD1D);
        for _ in 0..120 {
            let v = g.value(4);
            texts.push(serde_json::to_string(&v).unwrap());
            texts.push(serde_json::to_string_pretty(&v).unwrap());
        }
        for text in &texts {
            let state = settled_with(&loaded, &compared_with_json_parse(text), &[text]).unwrap();
            assert_eq!(state, "1null", "settled with {text}");
        }
        for bad in ["", "{", r#"{"a":}"#, "[1,]", "01", "1.", "-", "tru", r#""\x""#, "\"a\u{1}\"", r#"{"a":1}x"#, "NaN"]
        {
            assert!(
                settled_with(&loaded, "return await tools.call('a', {})", &[bad]).is_err(),
                "JSON.parse refuses {bad:?}, so must the settle"
            );
        }
        let state = settled_with(
            &loaded,
            "const p = [tools.call('a', {}), tools.call('b', {})]; return [await p[0], await p[1]]",
            &["\"123456789\"", "1"],
        )
        .unwrap();
        assert_eq!(state, r#"1["123456789",1]"#);
    }

    /// Inputs that fit the shim's input buffer go there; larger ones (here a 40 KB cell and boot
    /// data) take a guest allocation, freed afterwards, and arrive whole either way.
    #[test]
    fn inputs_larger_than_the_input_buffer_arrive_whole() {
        let loaded = crate::loaded().unwrap();
        for n in [10, 20_000, 40_000] {
            let code = format!("const s = '{}'; return s.length", "x".repeat(n));
            let outcome = run_to_end(&loaded, &code);
            match outcome {
                DriveOutcome::Completed(v) => assert_eq!(v, serde_json::json!(n), "cell of {} bytes", code.len()),
                other => panic!("cell of {} bytes: {other:?}", code.len()),
            }
        }
        let cap = loaded.statics.get().copied().map_or(0, |s| s.in_buf.1) as usize;
        assert!(cap > 0 && cap < 40_000, "the 40 KB cell took the allocation path (buffer {cap} B)");
    }

    const DEEP: &str = "function deep(n) { return n === 0 ? 0 : 1 + deep(n - 1); } try { return deep(1e6) } catch (e) { return e.name }";

    /// The deep-stack probe reads zeros in every instance no deep run has used: the whole stack
    /// below the kept depth is zero in the image (pre-initialization did not reach it), so an
    /// ordinary run never looks deep, and releasing those pages gives back exactly the image.
    #[test]
    fn the_stack_below_the_kept_depth_is_zero_in_the_image() {
        let loaded = crate::loaded().unwrap();
        let memory = raw_memory(&loaded);
        let vm = Vm::new(loaded.clone(), GuestLimits::default(), None).unwrap();
        let below =
            vm.statics.stack_top.checked_sub(STACK_KEEP).expect("the stack is deeper than the kept depth") as usize;
        assert!(below >= 4096 && below.is_multiple_of(4096), "page-aligned probe: {below:#x}");
        assert!(memory[..below].iter().all(|&b| b == 0), "the image holds data below the kept stack depth");
        for (code, deep) in [("return 1+1", false), ("return JSON.stringify([[[[[[[[1]]]]]]]])", false), (DEEP, true)] {
            let (outcome, instance) = ran(&loaded, code);
            assert!(matches!(outcome, DriveOutcome::Completed(_)), "{code}: {outcome:?}");
            let vm = instance.vm.as_ref().expect("the instance keeps its vm");
            assert_eq!(vm.stack_went_deep(), deep, "{code}");
        }
    }

    /// Flags of the pages at `at..at + len` of this process, from `/proc/self/pagemap`: how many
    /// are resident, private and written (present, exclusively mapped, not file-backed).
    #[cfg(target_os = "linux")]
    fn written_pages(at: usize, len: usize) -> usize {
        use std::os::unix::fs::FileExt;
        let map = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mut raw = vec![0u8; len / 4096 * 8];
        map.read_exact_at(&mut raw, (at / 4096 * 8) as u64).unwrap();
        raw.chunks_exact(8)
            .map(|e| u64::from_le_bytes(e.try_into().unwrap()))
            .filter(|e| e & (1 << 63) != 0 && e & (1 << 56) != 0 && e & (1 << 61) == 0)
            .count()
    }

    /// Pages a heavy run wrote beyond what ordinary runs write do not outlive it in the pool's
    /// slot: without the release, the slot keeps them resident and wasmtime copies every one of them
    /// back at the end of each later run in that slot. An ordinary run's pages stay (wasmtime resets
    /// them in place; releasing them would make the next run fault them in again). Read from the
    /// kernel's page table, after each instance is gone.
    #[cfg(target_os = "linux")]
    #[test]
    fn heavy_runs_leave_no_written_pages_beyond_the_ordinary_in_their_slot() {
        let loaded = crate::loaded().unwrap();
        assert!(loaded.pooled, "this machine grants the pooling allocator");
        let statics = Vm::new(loaded.clone(), GuestLimits::default(), None).unwrap().statics;
        let deep_stack = (statics.stack_top - STACK_KEEP) as usize;
        let grow = "const a = []; for (let i = 0; i < 20000; i++) a.push({ i, s: 'x' + i }); return a.length";
        // (cell, its result, the range checked, written pages expected there after the instance ends)
        let cases: [(&str, serde_json::Value, usize, bool); 3] = [
            (DEEP, serde_json::json!("RangeError"), deep_stack, false),
            (grow, serde_json::json!(20000), statics.initial_memory, false),
            ("return 1+1", serde_json::json!(2), statics.initial_memory, true),
        ];
        for (code, result, range, kept) in cases {
            let (outcome, instance) = ran(&loaded, code);
            assert_eq!(outcome, DriveOutcome::Completed(result), "{code}");
            let vm = instance.vm.as_ref().expect("the instance keeps its vm");
            let at = vm.memory.data_ptr(&vm.store) as usize;
            let before = written_pages(at, range);
            assert!(before >= 8, "{code}: the run wrote {before} pages of the range");
            drop(instance);
            // The slot stays mapped in the pool; only its page-table entries are read.
            let after = written_pages(at, range);
            if kept {
                assert!(after >= 8, "{code}: an ordinary run's pages were released ({after} left)");
            } else {
                assert_eq!(after, 0, "{code}: written pages left in the slot");
            }
        }
    }

    /// The pooling allocator resets only the pages a run wrote (`pagemap_scan`), keeping them
    /// resident: after runs that dirtied the deep stack (below the image), grew the heap and
    /// rewrote the image's own pages, every new instance's memory is still byte for byte what an
    /// instance that never ran a cell holds, and an unconfigured one is the base snapshots are
    /// diffed against.
    #[test]
    fn a_new_instance_starts_from_the_pristine_image_whatever_earlier_runs_wrote() {
        let loaded = crate::loaded().unwrap();
        let base = loaded.base().unwrap().memory.clone();
        let pristine = fresh_memory(&loaded);
        let hostile = [
            // Recursion to the stack limit (caught): the deepest stack pages, below the image.
            DEEP,
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
