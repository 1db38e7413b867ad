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
mod prelude_compile;

use codemode_bridge::driver::{GuestVm, VmFault, drive, failure_from_parts};
use codemode_bridge::{BridgeHost, CELL_FILENAME, PRELUDE, PRELUDE_FILENAME, workers};
use codemode_core::engine::{
    DriveInput, DriveReport, EngineError, GuestEngine, GuestInstance, GuestLimits, GuestProgram, RequestId, Snapshot,
    SnapshotBody,
};
use rquickjs::context::EvalOptions;
use rquickjs::{CatchResultExt, Context, Ctx, Function, Module, Object, Persistent, Runtime, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

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

/// Pristine VMs — runtime, context and prelude ready, and no guest code ever ran in them, or every
/// byte of their heap put back to their booted image since — kept per limits, so a new run does not
/// wait for QuickJS to set up (~0.2 ms). Refilled in the background once runs overlap (or a run
/// took a pooled VM).
const WARM_TARGET: usize = 2;

/// Most VMs kept across all limit sets (a finished run's VM is dropped instead when it is full).
const WARM_MAX: usize = 4 * WARM_TARGET;

/// Heap capacity of a reusable VM: twice its limit plus room for the image. The limit applies to
/// live bytes; the rest absorbs fragmentation (blocks are never merged), and the capacity bounds
/// what a hostile run can make the region grow to.
fn arena_capacity(heap_limit: usize) -> usize {
    heap_limit.saturating_mul(2).saturating_add(16 << 20)
}

/// Most bytes a run may carve beyond the image for its VM to be reused: resetting costs the zeroing
/// of those bytes, and their pages stay resident while the VM waits in the pool.
const RECYCLE_MAX: usize = 4 << 20;

/// How many VMs runs had to wait for, because the pool had none for their limits.
static BUILT_ON_DEMAND: AtomicU64 = AtomicU64::new(0);

/// How many runs started on a VM reused from its image (for tests: proof that reuse happens).
static REUSED: AtomicU64 = AtomicU64::new(0);

/// How many runs so far started on a VM reused from its booted image, in this process. Tests use
/// it to check that the isolation they exercise is that of reused VMs.
pub fn reused_vms() -> u64 {
    REUSED.load(Ordering::Relaxed)
}

/// The pool of pristine VMs, each with the limits it was built for.
type WarmPool = Mutex<Vec<(GuestLimits, Box<Vm>)>>;

fn warm() -> &'static WarmPool {
    static WARM: OnceLock<WarmPool> = OnceLock::new();
    WARM.get_or_init(|| Mutex::new(Vec::new()))
}

fn take_warm(limits: &GuestLimits) -> Option<Box<Vm>> {
    let mut pool = warm().lock().unwrap_or_else(|p| p.into_inner());
    let at = pool.iter().position(|(l, _)| l == limits)?;
    let vm = pool.swap_remove(at).1;
    if vm.reused {
        REUSED.fetch_add(1, Ordering::Relaxed);
    }
    Some(vm)
}

/// A finished run's VM: put back to its image and pooled when it can be, else dropped.
fn release(mut vm: Box<Vm>) {
    if !vm.recycle() {
        return;
    }
    let mut pool = warm().lock().unwrap_or_else(|p| p.into_inner());
    if pool.len() < WARM_MAX {
        pool.push((vm.limits, vm));
    }
}

fn refill_warm(limits: GuestLimits) {
    let _ = workers::spawn(move || {
        let have = warm().lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|(l, _)| *l == limits).count();
        if have >= WARM_TARGET {
            return;
        }
        if let Ok(vm) = Vm::new(limits) {
            let mut pool = warm().lock().unwrap_or_else(|p| p.into_inner());
            // Keep the pool small across all limit sets: drop the oldest entries first.
            if pool.len() >= WARM_MAX {
                pool.remove(0);
            }
            pool.push((limits, Box::new(vm)));
        }
    });
}

/// The VM built ahead of a first run ([`GuestEngine::prepare_instance`]).
static AHEAD: codemode_bridge::ahead::Ahead<Box<Vm>> = codemode_bridge::ahead::Ahead::new();

/// How many runs so far started on a VM built ahead of them ([`GuestEngine::prepare_instance`]), in
/// this process. Tests use it to check that the run took the VM built for it.
pub fn vms_taken_ahead() -> u64 {
    AHEAD.taken()
}

fn build_ahead(limits: GuestLimits) -> Result<(), EngineError> {
    if warm().lock().unwrap_or_else(|p| p.into_inner()).iter().any(|(l, _)| *l == limits) {
        return Ok(());
    }
    AHEAD.build(limits, move || Vm::new(limits).map(Box::new))
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

/// Deadline and fatal flags read by QuickJS's interrupt handler.
struct Interrupt {
    epoch: Instant,
    deadline_ns: AtomicU64,
    fatal: AtomicBool,
    fired: AtomicBool,
    /// The current drive step's cancel flag (see `DriveInput::cancel`).
    cancel: Mutex<Option<Arc<AtomicBool>>>,
}

impl Interrupt {
    fn should_stop(&self) -> bool {
        let now = self.epoch.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        let cancelled = || {
            // `try_lock`: never block QuickJS's interrupt poll; the flag is looked at again next poll.
            self.cancel.try_lock().is_ok_and(|c| c.as_ref().is_some_and(|f| f.load(Ordering::Relaxed)))
        };
        let stop = self.fatal.load(Ordering::Relaxed) || now >= self.deadline_ns.load(Ordering::Relaxed) || cancelled();
        if stop {
            self.fired.store(true, Ordering::Relaxed);
        }
        stop
    }
}

/// The whole VM (runtime, context, prelude handle) moves between worker threads as one value.
///
/// Field order matters: the prelude handle must be released before the context and the runtime
/// (QuickJS asserts that no object outlives its runtime), the primitives' state after them
/// (the context points at it), and the arena holding the heap last. The resolving functions of
/// requests in flight, held in that state, are released by `Drop` before any field goes.
///
/// A VM whose heap lives in an [`arena::Arena`] is reusable: after a run, [`Vm::recycle`] copies
/// the image taken after boot back over the whole heap (QuickJS's runtime and context included)
/// and resets the Rust-side state, so the next run starts from exactly the state a new VM would
/// have. Without an arena (the host would not lend the region) each VM serves one run.
struct Vm {
    api: Api,
    ctx: Context,
    rt: Runtime,
    bridge: Arc<Mutex<BridgeHost>>,
    interrupt: Arc<Interrupt>,
    boot: Option<String>,
    /// Set by the allocator when it refuses an allocation; cleared at every drive step.
    refused: Arc<AtomicBool>,
    /// The primitives' state, which the context points at (see `ffi`): dropped after the runtime.
    context_state: Box<ffi::ContextState>,
    /// The limits the VM was built for (its pool key; its heap and stack limits are in its image).
    limits: GuestLimits,
    /// Whether a run already used this VM (it was reset since).
    reused: bool,
    /// The outcomes being settled (swapped with `ContextState::answered`, so neither list is
    /// allocated anew each time the job queue runs dry); empty between settlements.
    settling: Vec<(RequestId, ffi::Outcome)>,
    /// A block of each small size class, held so their pages are not made and freed per call.
    pages: ffi::PageKeepers,
    /// The region holding the whole QuickJS heap, when reusable: dropped after everything above.
    arena: Option<arena::Arena>,
}

/// The prelude's private handle, each function kept on its own (no property lookup per drive step).
/// `settle` is not among them: `host` answers requests with promises this engine settles itself.
struct Api {
    boot: Persistent<Function<'static>>,
    run: Persistent<Function<'static>>,
    poll: Persistent<Function<'static>>,
    host_error: Persistent<Function<'static>>,
    /// An empty ordinary object no guest code can reach, kept for the VM's life: it holds QuickJS's
    /// shared initial shape of `Object.prototype` objects, which otherwise dies whenever the last
    /// object still empty gains a property, so each `{ i }` a cell passes and each object a result
    /// is parsed into would make and free it again.
    _shape_keeper: Persistent<Object<'static>>,
}

impl Api {
    fn save<'js>(ctx: &Ctx<'js>, handle: &Object<'js>) -> rquickjs::Result<Self> {
        let get = |name: &str| -> rquickjs::Result<Persistent<Function<'static>>> {
            Ok(Persistent::save(ctx, handle.get::<_, Function<'js>>(name)?))
        };
        Ok(Api {
            boot: get("boot")?,
            run: get("run")?,
            poll: get("poll")?,
            host_error: get("hostError")?,
            _shape_keeper: Persistent::save(ctx, Object::new(ctx.clone())?),
        })
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        // Resolving functions of requests still in flight, the kept texts' strings, the `toJSON`
        // atom and the page keepers are held in the runtime: release them while the context is
        // alive (the fields, context and runtime included, are dropped after this).
        let state = &self.context_state;
        let pages = &mut self.pages;
        self.ctx.with(|ctx| {
            state.release_pending(&ctx);
            pages.release(&ctx);
        });
    }
}

// SAFETY: with rquickjs's `parallel` feature the runtime and context are `Send` and every access
// takes the runtime's lock; QuickJS itself has no thread affinity beyond the stack top, which
// rquickjs refreshes at each lock. `Persistent` is `!Send` only because on its own it could be used
// without that lock; here it is owned by the same `Vm` as its runtime, only ever used inside
// `ctx.with` (under the lock), and the whole `Vm` moves between threads as one value, never shared.
#[allow(unsafe_code)]
unsafe impl Send for Vm {}

/// A run's bridge: it hands resolved values over as they are (`HostCallResult::SettledValue`), which
/// the engine makes guest values of itself ([`ffi::value_of`]).
fn new_bridge(limits: GuestLimits) -> BridgeHost {
    let mut bridge = BridgeHost::new(limits);
    bridge.take_values();
    bridge
}

fn eval_options(filename: &str) -> EvalOptions {
    let mut opts = EvalOptions::default();
    opts.global = true;
    opts.strict = false;
    opts.filename = Some(filename.to_string());
    opts
}

/// The prelude as QuickJS module bytecode (see [`prelude_compile::compile`]).
///
/// Compiled at build time (`build.rs`) where the build could, and used when the text it was
/// compiled from is exactly [`PRELUDE`]; otherwise compiled once per process on first use.
fn prelude_bytecode() -> Result<&'static [u8], EngineError> {
    if let Some(bytes) = built_prelude_bytecode() {
        return Ok(bytes);
    }
    static BYTES: OnceLock<Result<Vec<u8>, String>> = OnceLock::new();
    let compiled = BYTES.get_or_init(compile_prelude);
    match compiled {
        Ok(bytes) => Ok(bytes.as_slice()),
        Err(e) => Err(EngineError::Unavailable(format!("the guest prelude does not compile: {e}"))),
    }
}

/// Compiles the prelude as `build.rs` does (the same function; a test compares the bytes).
fn compile_prelude() -> Result<Vec<u8>, String> {
    prelude_compile::compile(PRELUDE_FILENAME, PRELUDE)
}

/// The build's bytecode, if the build made one from exactly this [`PRELUDE`] (comparing the two
/// texts costs ~10 µs, once per process).
#[cfg(codemode_prelude_bytecode)]
fn built_prelude_bytecode() -> Option<&'static [u8]> {
    /// Aligned like an allocation, as the run-time compile's bytes are (QuickJS keeps pointing
    /// into them).
    #[repr(C, align(16))]
    struct Aligned<B: ?Sized>(B);
    static BYTECODE: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/prelude.qjsbc")));
    const SOURCE: &str = include_str!(concat!(env!("OUT_DIR"), "/prelude.js"));
    static MATCHES: OnceLock<bool> = OnceLock::new();
    let matches = *MATCHES.get_or_init(|| {
        let same = SOURCE == PRELUDE;
        if !same {
            tracing::warn!("the build's prelude bytecode is not of this prelude: compiling it at run time");
        }
        same
    });
    matches.then_some(&BYTECODE.0)
}

/// No bytecode from the build (cross-compiling, or the bridge's sources were not at hand).
#[cfg(not(codemode_prelude_bytecode))]
fn built_prelude_bytecode() -> Option<&'static [u8]> {
    None
}

fn unavailable(what: &str) -> impl Fn(rquickjs::Error) -> EngineError + '_ {
    move |e| EngineError::Unavailable(format!("{what}: {e}"))
}

impl Vm {
    /// Delivers outcomes `(id, outcome)`, in order, under one lock of the runtime: each fulfils
    /// or rejects its request's promise (`host` made it and kept its resolving functions). A request
    /// that is not pending (settled already, or never answered with a promise) has nothing to
    /// deliver to, as in the prelude's own `settle`. An encoded outcome gets a NUL pushed in place
    /// (see [`ffi::parse_json`]); a value is made in the guest directly ([`ffi::value_of`]). While
    /// one is settled, the ones after it count as outstanding (`ContextState::settling_left`):
    /// settling can run guest code that makes requests.
    fn settle_all(
        &mut self,
        mut outcomes: impl ExactSizeIterator<Item = (RequestId, ffi::Outcome)>,
    ) -> Result<(), VmFault> {
        let host_error = &self.api.host_error;
        let state = &self.context_state;
        let interrupt = &self.interrupt;
        self.ctx.with(|ctx| {
            let settled = (|| {
                while let Some((id, outcome)) = outcomes.next() {
                    state.settling_left.set(outcomes.len());
                    let Some([resolve, reject]) = state.take_pending(&ctx, id) else { continue };
                    let settled = (|| -> rquickjs::Result<Value<'_>> {
                        let (ok, value) = match outcome {
                            ffi::Outcome::Value(value) => (true, ffi::value_of(&ctx, &value)?),
                            ffi::Outcome::Json { ok, mut json } => (ok, ffi::parse_json(&ctx, &mut json)?),
                        };
                        if ok {
                            ffi::call(
                                &ctx,
                                &resolve.into_function().ok_or(rquickjs::Error::Unknown)?,
                                &mut [value.as_raw()],
                            )
                        } else {
                            let error = ffi::call(&ctx, &host_error.clone().restore(&ctx)?, &mut [value.as_raw()])?;
                            ffi::call(
                                &ctx,
                                &reject.into_function().ok_or(rquickjs::Error::Unknown)?,
                                &mut [error.as_raw()],
                            )
                        }
                    })();
                    settled.map_err(|e| fault(interrupt, &ctx, e))?;
                }
                Ok(())
            })();
            state.settling_left.set(0);
            settled
        })
    }

    fn new(limits: GuestLimits) -> Result<Self, EngineError> {
        let heap_limit = usize::try_from(limits.memory_limit_bytes).unwrap_or(usize::MAX);
        let refused = Arc::new(AtomicBool::new(false));
        let mut arena = arena::Arena::new(arena_capacity(heap_limit));
        let rt = match arena.as_mut() {
            Some(arena) => {
                arena.set_limit(heap_limit);
                Runtime::new_with_alloc(arena.allocator(refused.clone()))
            }
            None => Runtime::new_with_alloc(alloc::GuardedAllocator::new(heap_limit, refused.clone())),
        }
        .map_err(unavailable("cannot create a QuickJS runtime"))?;
        // QuickJS's own limit stays as a backstop, a little above the allocator's.
        rt.set_memory_limit(heap_limit.saturating_add(BACKSTOP_SLACK));
        rt.set_max_stack_size(usize::try_from(limits.max_stack_bytes).unwrap_or(usize::MAX));
        let interrupt = Arc::new(Interrupt {
            epoch: Instant::now(),
            deadline_ns: AtomicU64::new(u64::MAX),
            fatal: AtomicBool::new(false),
            fired: AtomicBool::new(false),
            cancel: Mutex::new(None),
        });
        let handler_state = interrupt.clone();
        rt.set_interrupt_handler(Some(Box::new(move || handler_state.should_stop())));
        let ctx = Context::full(&rt).map_err(unavailable("cannot create a QuickJS context"))?;
        let bridge = Arc::new(Mutex::new(new_bridge(limits)));
        let bytecode = prelude_bytecode()?;
        let mut state = ffi::ContextState::new(bridge.clone(), interrupt.clone(), refused.clone(), heap_limit);
        let api = ctx.with(|ctx| -> Result<Api, EngineError> {
            let installed = (|| -> rquickjs::Result<Object<'_>> {
                ffi::attach(&ctx, &mut state);
                ffi::install_random(&ctx)?;
                // SAFETY: the bytes were produced by `Module::write` of this same QuickJS version
                // (the pinned `rquickjs-sys`), either by this build for this target or in this
                // process, from our own prelude source (see `prelude_bytecode`), and live for the
                // rest of the process (`JS_READ_OBJ_ROM_DATA` keeps pointing into them).
                #[allow(unsafe_code)]
                let module = unsafe { Module::load(ctx.clone(), bytecode) }?;
                let (module, done) = module.eval()?;
                done.finish::<()>()?;
                let install: Function<'_> = module.namespace()?.get("default")?;
                let p = ffi::primitives(&ctx, &mut state)?;
                // settlesNatively: `host` answers every request with its promise. No `react`: the
                // prelude's `then` path serves it (once per run, for the cell's result).
                install.call((
                    p.host,
                    p.plain_json,
                    p.define_namespaces,
                    true,
                    p.own_first,
                    rquickjs::Undefined,
                    p.call_plain,
                ))
            })();
            installed
                .and_then(|api| Api::save(&ctx, &api))
                .catch(&ctx)
                .map_err(|e| EngineError::Unavailable(format!("the guest prelude failed to load: {e}")))
        })?;
        rt.run_gc();
        let pages = ctx.with(|ctx| ffi::PageKeepers::hold(&ctx));
        if let Some(arena) = arena.as_mut() {
            // The next collection when the heap has grown by half, as QuickJS sets it after one of
            // its own. Left at its initial 256 KiB, it sat a few KiB above the booted heap (~238
            // KiB), and the image restores it for every run: a run allocating that much collected
            // every time (~240k instructions). The heap's size is the allocator's count of usable
            // bytes (a third above QuickJS's own, which would walk every object to compute).
            let booted = arena.used();
            rt.set_gc_threshold(booted.saturating_add(booted / 2));
            // The image: the booted VM after a collection, with no value held outside the heap
            // but the prelude's handle and the page keepers (which every run keeps too).
            if !arena.take_image() {
                tracing::debug!("the booted native VM holds a large block: it serves one run");
            }
        }
        Ok(Vm {
            rt,
            ctx,
            api,
            bridge,
            interrupt,
            boot: None,
            refused,
            context_state: state,
            limits,
            reused: false,
            settling: Vec::new(),
            pages,
            arena,
        })
    }

    /// Resets the Rust-side state a run uses (the heap is fresh or was reset): a new bridge, a new
    /// `Math.random` seed, no deadline, cancel flag, fatal stop or allocation refusal.
    fn begin_run(&mut self) {
        match self.bridge.lock() {
            Ok(mut b) => *b = new_bridge(self.limits),
            Err(poisoned) => *poisoned.into_inner() = new_bridge(self.limits),
        }
        // Poisoned by a panic in an earlier run (which failed): the bridge is new now.
        self.bridge.clear_poison();
        self.context_state.reseed();
        self.interrupt.deadline_ns.store(u64::MAX, Ordering::Relaxed);
        self.interrupt.fatal.store(false, Ordering::Relaxed);
        self.interrupt.fired.store(false, Ordering::Relaxed);
        *self.interrupt.cancel.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.refused.store(false, Ordering::Relaxed);
    }

    /// Puts a finished run's VM back to its booted image, if it is reusable and the run did not
    /// grow its heap past [`RECYCLE_MAX`]; `false` means drop it instead.
    ///
    /// Every byte of the QuickJS heap — the runtime and context structures, atoms, shapes, the
    /// job queue, the collector's lists, the allocator's state — becomes what it was when the
    /// image was taken, and what the run carved beyond it is zeroed. Values the host held into the
    /// run's heap are only the resolving functions of requests never settled and the strings of
    /// `callPlain`'s kept texts: they are forgotten here (they belong to the state being
    /// discarded), never freed into the restored heap.
    fn recycle(&mut self) -> bool {
        let Some(arena) = self.arena.as_mut() else { return false };
        if !arena.has_image() || arena.carved().saturating_sub(arena.image_len()) > RECYCLE_MAX {
            return false;
        }
        self.context_state.pending.borrow_mut().clear();
        self.context_state.texts.borrow_mut().clear();
        self.context_state.answered.borrow_mut().clear();
        self.context_state.settling_left.set(0);
        self.boot = None;
        arena.reset();
        self.reused = true;
        true
    }

    /// Turns an rquickjs error inside `ctx` into a fault, reading the pending exception if any.
    fn fault(&self, ctx: &Ctx<'_>, err: rquickjs::Error) -> VmFault {
        fault(&self.interrupt, ctx, err)
    }

    fn call_api(
        &mut self,
        f: impl FnOnce(&Api) -> &Persistent<Function<'static>>,
        args: impl for<'js> FnOnce(&Ctx<'js>, Function<'js>) -> rquickjs::Result<Value<'js>>,
    ) -> Result<Option<String>, VmFault> {
        let f = f(&self.api).clone();
        self.ctx.with(|ctx| {
            let result = f.restore(&ctx).and_then(|f| args(&ctx, f));
            match result {
                Ok(v) => Ok(v.as_string().and_then(ffi::text_of)),
                Err(e) => Err(self.fault(&ctx, e)),
            }
        })
    }
}

/// Turns an rquickjs error inside `ctx` into a fault, reading the pending exception if any.
fn fault(interrupt: &Interrupt, ctx: &Ctx<'_>, err: rquickjs::Error) -> VmFault {
    if interrupt.fired.load(Ordering::Relaxed) {
        // Clear the uncatchable exception so the context stays consistent.
        let _ = ctx.catch();
        return VmFault::Interrupted;
    }
    match err {
        rquickjs::Error::Exception => exception_fault(&ctx.catch()),
        other => VmFault::Engine(EngineError::Internal(other.to_string())),
    }
}

fn exception_fault(value: &Value<'_>) -> VmFault {
    let get = |key: &str| -> String {
        value
            .as_object()
            .and_then(|o| o.get::<_, Value<'_>>(key).ok())
            .and_then(|v| v.as_string().and_then(ffi::text_of))
            .unwrap_or_default()
    };
    let (name, message) = if value.is_object() {
        (get("name"), get("message"))
    } else {
        let text = if value.is_null() {
            "null".to_string()
        } else if value.is_undefined() {
            "undefined".to_string()
        } else {
            value.as_string().and_then(ffi::text_of).unwrap_or_else(|| format!("{:?}", value.type_of()))
        };
        ("Uncaught".to_string(), text)
    };
    VmFault::Failure(failure_from_parts(&name, &message, &get("stack"), None))
}

impl GuestVm for Vm {
    fn set_deadline(&mut self, deadline: Instant) {
        let ns = deadline.saturating_duration_since(self.interrupt.epoch).as_nanos().min(u64::MAX as u128) as u64;
        self.interrupt.deadline_ns.store(ns, Ordering::Relaxed);
        self.interrupt.fired.store(false, Ordering::Relaxed);
        self.refused.store(false, Ordering::Relaxed);
    }

    fn set_cancel(&mut self, cancel: Option<Arc<AtomicBool>>) {
        *self.interrupt.cancel.lock().unwrap_or_else(|p| p.into_inner()) = cancel;
    }

    fn start_cell(&mut self, wrapped: &str) -> Result<(), VmFault> {
        let boot = self.boot.take().unwrap_or_else(|| "{}".to_string());
        let (head, index, texts) = codemode_bridge::split_boot(&boot);
        // The usual head goes as its number (one `JSON.parse` fewer in the guest per run).
        match codemode_bridge::head_max_depth(head) {
            Some(depth) => self.call_api(|api| &api.boot, |_, f| f.call((depth, index, texts)))?,
            None => self.call_api(|api| &api.boot, |_, f| f.call((head, index, texts)))?,
        };
        let run = self.api.run.clone();
        let wrapped = wrapped.to_string();
        self.ctx.with(|ctx| {
            let result = ctx
                .eval_with_options::<Value<'_>, _>(wrapped, eval_options(CELL_FILENAME))
                .and_then(|cell| run.restore(&ctx)?.call::<_, Value<'_>>((cell,)));
            result.map(|_| ()).map_err(|e| self.fault(&ctx, e))
        })
    }

    fn settle(&mut self, id: RequestId, ok: bool, json: &str) -> Result<(), VmFault> {
        // Room for the NUL JS_ParseJSON reads up to (see `parse_json`), so pushing it never copies.
        let mut text = String::with_capacity(json.len() + 1);
        text.push_str(json);
        self.settle_all(std::iter::once((id, ffi::Outcome::Json { ok, json: text })))
    }

    /// Runs jobs until the queue is dry and no outcome answered at once waits to be settled:
    /// those are settled, in order, each time the queue runs dry (settling one may run guest code
    /// that makes more requests; those wait for the next time).
    fn run_jobs(&mut self) -> Result<(), VmFault> {
        loop {
            match self.rt.execute_pending_job() {
                Ok(true) => continue,
                Ok(false) => {
                    let mut batch = std::mem::take(&mut self.settling);
                    std::mem::swap(&mut batch, &mut *self.context_state.answered.borrow_mut());
                    if batch.is_empty() {
                        self.settling = batch;
                        return Ok(());
                    }
                    let settled = self.settle_all(batch.drain(..));
                    self.settling = batch;
                    settled?;
                }
                Err(job) => {
                    if self.interrupt.fired.load(Ordering::Relaxed) {
                        job.0.with(|ctx| {
                            let _ = ctx.catch();
                        });
                        return Err(VmFault::Interrupted);
                    }
                    return Err(job.0.with(|ctx| exception_fault(&ctx.catch())));
                }
            }
        }
    }

    fn poll(&mut self) -> Result<Option<String>, VmFault> {
        self.call_api(|api| &api.poll, |ctx, f| ffi::call(ctx, &f, &mut []))
    }

    fn memory_refused(&mut self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    /// `host` answers a request settled at once with a promise settled by `run_jobs`.
    fn answers_inline(&self) -> bool {
        true
    }

    fn with_bridge<R>(&mut self, f: impl FnOnce(&mut BridgeHost) -> R) -> R {
        match self.bridge.lock() {
            Ok(mut b) => f(&mut b),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use codemode_core::engine::DriveOutcome;
    use serde_json::{Value as Json, json};
    use std::time::Duration;

    /// Runs `code` as a cell on `vm` (fresh or recycled) to its first report, for at most `within`.
    fn drive_on(vm: &mut Vm, code: &str, within: Duration) -> Result<DriveReport, EngineError> {
        vm.begin_run();
        vm.boot = Some("{}".into());
        let input = DriveInput::new(Vec::new(), Instant::now() + within, 1 << 20);
        drive(vm, &mut Some(codemode_bridge::wrap_code(code)), input)
    }

    /// [`drive_on`] with ten seconds, to an outcome.
    fn run_on(vm: &mut Vm, code: &str) -> DriveOutcome {
        drive_on(vm, code, Duration::from_secs(10)).unwrap().outcome
    }

    fn completed(outcome: DriveOutcome) -> Json {
        match outcome {
            DriveOutcome::Completed(v) => v,
            other => panic!("not completed: {other:?}"),
        }
    }

    const PLANT: &str = r#"globalThis.planted = "secret"; Object.prototype.polluted = 1;
        globalThis.keep = []; for (let i = 0; i < 2000; i++) keep.push({ i, s: "s" + i });
        Promise.resolve().then(() => { globalThis.late = 1; });
        return Math.random();"#;
    const CHECK: &str = r#"return [typeof planted, ({}).polluted, typeof keep, typeof late, Math.random()];"#;

    /// The build compiles the prelude (the tests never cross-compile), from exactly [`PRELUDE`],
    /// to the bytes a run-time compile makes (both call `prelude_compile::compile`): a layer the
    /// build script missed, a file name of its own, or a bytecode that is not deterministic would
    /// each fail here.
    #[test]
    fn the_build_made_the_prelude_bytecode_a_run_time_compile_makes() {
        let built = built_prelude_bytecode().expect("build.rs embedded bytecode of this very prelude");
        let compiled = compile_prelude().unwrap();
        // (Not `assert_eq!`: it would print 25 KB of bytes.)
        assert!(built == compiled.as_slice(), "{} bytes built, {} compiled, not the same", built.len(), compiled.len());
        assert_eq!(prelude_bytecode().unwrap().as_ptr(), built.as_ptr(), "the engine loads the build's bytes");
    }

    #[test]
    fn a_recycled_vm_is_its_booted_image_again_byte_for_byte() {
        let mut vm = Vm::new(GuestLimits::default()).unwrap();
        let image = vm.arena.as_ref().expect("a reusable VM").image_len();
        // The booted runtime, context and prelude: a few hundred KiB (what a reset copies back).
        assert!((64 << 10..4 << 20).contains(&image), "image of {image} bytes");
        let first = completed(run_on(&mut vm, PLANT));
        let carved = vm.arena.as_ref().unwrap().carved();
        assert!(carved > image, "the run carved beyond the image");
        assert!(vm.recycle());
        // Every byte the run could have written: the image's, and the zeroed rest up to its reach.
        assert!(vm.arena.as_ref().unwrap().is_pristine(carved + (1 << 16)));
        let seen = completed(run_on(&mut vm, CHECK));
        assert_eq!(
            seen.as_array().unwrap()[..4],
            [json!("undefined"), Json::Null, json!("undefined"), json!("undefined")],
            "{seen}"
        );
        assert_ne!(seen[4], first, "Math.random is reseeded for the new run");
        // And again from the same image.
        assert!(vm.recycle());
        assert_eq!(completed(run_on(&mut vm, "return typeof planted")), json!("undefined"));
    }

    /// The page keepers (`ffi::PageKeepers`): from the booted image, a short-lived block of any
    /// size class takes a place in a page that stays. Without them, a class whose pages were full
    /// at boot made a page for it and freed it again (this prelude leaves one such class, an
    /// object's, which every nested call met); keeping one block per class, without the pair,
    /// still left two classes whose last free place the keeper itself took.
    #[test]
    fn a_short_lived_block_of_any_class_makes_no_page() {
        let vm = Vm::new(GuestLimits::default()).unwrap();
        let pages = |vm: &Vm| vm.arena.as_ref().expect("a reusable VM").pages_made();
        let before = pages(&vm);
        vm.ctx.with(|ctx| ffi::PageKeepers::churn(&ctx));
        assert_eq!(pages(&vm), before, "pages made for short-lived blocks");
    }

    /// A catalog source that records every key the guest pulls.
    #[derive(Debug)]
    struct Recording(Arc<dyn codemode_core::engine::BootSource>, Mutex<Vec<String>>);

    impl codemode_core::engine::BootSource for Recording {
        fn pull(&self, key: &str) -> Option<Arc<str>> {
            self.1.lock().unwrap().push(key.to_string());
            self.0.pull(key)
        }
    }

    /// The guest pulls only what a cell reaches: one tool of a 40-tool MCP server makes that tool
    /// alone (one `mcptool:` pull, never the server's list), and neither it nor a convenience
    /// function asks on its first call whether the approval policy gates it (the name's answer
    /// said). Enumerating the namespace then pulls the list and makes every tool.
    #[test]
    fn a_cell_pulls_only_the_tools_it_reaches() {
        use codemode_core::guest::{BootData, McpServerView, McpToolView};
        let tools = (0..40).map(|i| McpToolView { name: format!("t{i}"), alias: None, explicit: false }).collect();
        let boot = BootData {
            conveniences: vec![("demo_echo".into(), "plugin:demo:demo_echo".into())],
            max_depth: 64,
            mcp: vec![McpServerView {
                name: "srv".into(),
                alias: None,
                tools,
                resources: false,
                prompts: false,
                down: None,
            }],
            ..BootData::default()
        };
        let source = Arc::new(Recording(codemode_bridge::BootText::new(&boot).source(), Mutex::new(Vec::new())));
        // Each cell on a fresh VM: its outcome, and the keys it pulled.
        let run = |code: &str| {
            let mut vm = Vm::new(GuestLimits::default()).unwrap();
            vm.begin_run();
            vm.boot = Some("{}".into());
            let mut input = DriveInput::new(Vec::new(), Instant::now() + Duration::from_secs(10), 1 << 20);
            input.boot_source = Some(source.clone());
            let report = drive(&mut vm, &mut Some(codemode_bridge::wrap_code(code)), input).unwrap();
            (completed(report.outcome), std::mem::take(&mut *source.1.lock().unwrap()))
        };
        let (value, keys) = run("const f = MCP.srv.t7; const same = f === MCP.srv.t7; f({}); tools.demo_echo({}); \
             return [typeof f, same, f.name, typeof tools.demo_echo]");
        assert_eq!(value, json!(["function", true, "t7", "function"]));
        assert_eq!(keys, ["mcpserver:srv", "mcptool:3:srvt7", "conv:demo_echo"]);
        let (value, keys) = run(r#"return Object.keys(MCP.srv).filter((k) => !k.startsWith("$")).length"#);
        assert_eq!(value, json!(40));
        assert_eq!(keys, ["mcpserver:srv", "mcp:srv"]);
    }

    /// A run that makes a few tens of KiB of objects does not collect: the booted image's GC
    /// threshold is half again the booted heap, as QuickJS sets it after a collection, not its
    /// initial 256 KiB a few KiB above the heap (which every reset restored, so such runs
    /// collected every time).
    #[test]
    fn a_small_run_does_not_collect() {
        let mut vm = Vm::new(GuestLimits::default()).unwrap();
        let threshold = |vm: &Vm| vm.ctx.with(|ctx| ffi::gc_threshold(&ctx));
        let before = threshold(&vm);
        let cell = "const a = []; for (let i = 0; i < 500; i++) a.push({ i, s: 'x' + i }); return a.length";
        for _ in 0..3 {
            assert_eq!(completed(run_on(&mut vm, cell)), json!(500));
            assert_eq!(threshold(&vm), before, "a collection ran (it sets a new threshold)");
            assert!(vm.recycle());
        }
    }

    /// When the host will not lend a region (here: a heap limit so large that twice it cannot be
    /// mapped), the VM takes its memory from the guarded system allocator instead and serves one
    /// run; it is never reset for another.
    #[test]
    fn a_vm_whose_region_cannot_be_mapped_serves_one_run() {
        let limits = GuestLimits { memory_limit_bytes: 1 << 62, ..GuestLimits::default() };
        let mut vm = Vm::new(limits).unwrap();
        assert!(vm.arena.is_none(), "a 2^63-byte region was mapped");
        assert_eq!(completed(run_on(&mut vm, "return [1 + 1, 'x'.repeat(1 << 20).length]")), json!([2, 1 << 20]));
        assert!(!vm.recycle(), "a VM without a region is not reused");
        // A VM with ordinary limits still gets its region.
        assert!(Vm::new(GuestLimits::default()).unwrap().arena.is_some());
    }

    /// `callPlain`'s request buffer is the VM's between calls: handed out empty each time (no byte
    /// of one request reaches the next), and not kept once a request made it large.
    #[test]
    fn the_request_buffer_is_emptied_for_each_call_and_not_kept_large() {
        let vm = Vm::new(GuestLimits::default()).unwrap();
        let state = &*vm.context_state;
        let first = {
            let mut m = ffi::KeptMessage::take(state);
            m.0.extend_from_slice(br#"{"id":"plugin:demo:demo_echo","input":{"secret":1}}"#);
            m.0.as_ptr()
        };
        {
            let m = ffi::KeptMessage::take(state);
            assert!(m.0.is_empty(), "{:?}", String::from_utf8_lossy(&m.0));
            assert_eq!(m.0.as_ptr(), first, "the buffer is reused, not made again");
            // Taken again while out (a call within a call): a buffer of its own.
            let inner = ffi::KeptMessage::take(state);
            assert!(inner.0.is_empty() && inner.0.as_ptr() != first);
        }
        {
            let mut m = ffi::KeptMessage::take(state);
            m.0.resize(ffi::MESSAGE_KEPT_BYTES + 1, b'x');
        }
        let m = ffi::KeptMessage::take(state);
        assert!(m.0.is_empty() && m.0.capacity() < ffi::MESSAGE_KEPT_BYTES, "a large buffer was kept");
    }

    #[test]
    fn a_vm_whose_run_carved_far_into_its_region_is_not_reused() {
        let mut vm = Vm::new(GuestLimits::default()).unwrap();
        // Many small objects: carved from the region (past the reuse bound).
        let many = "globalThis.k = []; for (let i = 0; i < 100000; i++) k.push({ i, s: 's' + i }); return k.length";
        assert_eq!(completed(run_on(&mut vm, many)), json!(100000));
        assert!(!vm.recycle(), "dropped instead of reset: its pages would stay resident in the pool");
    }

    #[test]
    fn big_strings_and_buffers_do_not_stop_reuse_and_are_freed_by_the_reset() {
        let mut vm = Vm::new(GuestLimits::default()).unwrap();
        let big = "globalThis.b = 'x'.repeat(8 << 20); globalThis.u = new Uint8Array(4 << 20); u[7] = 1; return b.length + u.length";
        assert_eq!(completed(run_on(&mut vm, big)), json!(12 << 20));
        assert!(vm.recycle(), "large blocks live outside the region");
        assert_eq!(
            completed(run_on(&mut vm, "return [typeof b, typeof u, new Uint8Array(4 << 20)[7]]")),
            json!(["undefined", "undefined", 0])
        );
        // The heap accounting starts again from the image: a run may use most of the limit again.
        for _ in 0..4 {
            assert!(vm.recycle());
            assert_eq!(completed(run_on(&mut vm, "return 'y'.repeat(40 << 20).length")), json!(40 << 20));
        }
    }

    #[test]
    fn a_vm_stopped_at_its_memory_limit_or_deadline_comes_back_clean() {
        let limits = GuestLimits { memory_limit_bytes: 2 << 20, ..GuestLimits::default() };
        let mut vm = Vm::new(limits).unwrap();
        let oom = run_on(&mut vm, "globalThis.a = []; for (;;) a.push({ s: 'x'.repeat(100) + a.length });");
        assert!(matches!(oom, DriveOutcome::Failed(_)), "{oom:?}");
        assert!(vm.recycle(), "a 2 MiB heap stays under the reuse bound");
        assert_eq!(
            completed(run_on(&mut vm, "return [typeof a, 'y'.repeat(1 << 20).length]")),
            json!(["undefined", 1 << 20])
        );
        assert!(vm.recycle());
        let spin = drive_on(&mut vm, "globalThis.spun = 1; for (;;) {}", Duration::from_millis(50));
        assert!(spin.is_err() || matches!(spin.as_ref().unwrap().outcome, DriveOutcome::Failed(_)), "{spin:?}");
        assert!(vm.recycle());
        assert_eq!(completed(run_on(&mut vm, "return typeof spun")), json!("undefined"));
    }

    /// The region never merges blocks, so a cell that keeps a few MiB alive in a new size class
    /// below 16 KiB each round (larger blocks come from the system allocator, which merges) can
    /// exhaust the region's fixed capacity (twice the limit plus 16 MiB) before its live bytes
    /// reach the limit. That ends the run like a memory bomb — a clean `memory_limit_exceeded`
    /// failure, the VM dropped rather than reused — and the next run is unaffected.
    #[test]
    fn fragmenting_the_region_fails_the_run_cleanly() {
        let limits = GuestLimits { memory_limit_bytes: 4 << 20, ..GuestLimits::default() };
        let mut vm = Vm::new(limits).unwrap();
        let fragmenting = "let keep = [];
            for (let round = 0; round < 60; round++) {
              const size = 600 + round * 250;
              keep = [];
              for (let i = 0; i < (2 << 20) / size; i++) keep.push('x'.repeat(size) + i);
            }
            return keep.length;";
        let outcome = run_on(&mut vm, fragmenting);
        assert!(
            matches!(&outcome, DriveOutcome::Failed(f) if f.code == Some(codemode_core::CodeModeErrorCode::MemoryLimitExceeded)),
            "{outcome:?}"
        );
        assert!(vm.memory_refused());
        assert!(!vm.recycle(), "a VM whose region filled up is dropped");
        let mut fresh = Vm::new(limits).unwrap();
        assert_eq!(completed(run_on(&mut fresh, "return 'y'.repeat(2 << 20).length")), json!(2 << 20));
    }
}
