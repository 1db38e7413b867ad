//! One native VM: a QuickJS runtime and context whose whole heap lives in one region (module
//! `arena`), the prelude loaded from bytecode, the interrupt handler that enforces the deadline and
//! fatal limits, and the [`GuestVm`] steps the bridge's driver calls.
//!
//! # Map of the types
//!
//! - `Vm` — the runtime and context, the kept prelude functions (`Api`), the bridge host, the
//!   primitives' state (`ffi::ContextState`), the page keepers and the region its heap lives in
//!   (`arena::Arena`); reset byte for byte to its booted image between runs.
//! - `Api` — the prelude's entry points (`boot`, `run`, `poll`, `hostError`), kept as persistent
//!   functions so a drive step calls them without a property lookup.
//! - `Interrupt` — the deadline and fatal flags QuickJS's interrupt handler reads.

use crate::pool::{RECYCLE_MAX, arena_capacity};
use crate::{BACKSTOP_SLACK, alloc, arena, ffi, prelude_compile};
use codemode_bridge::driver::{GuestVm, VmFault, failure_from_parts};
use codemode_bridge::{BridgeHost, CELL_FILENAME, PRELUDE, PRELUDE_FILENAME};
use codemode_core::engine::{EngineError, GuestLimits, RequestId};
use rquickjs::context::EvalOptions;
use rquickjs::{CatchResultExt, Context, Ctx, Function, Module, Object, Persistent, Runtime, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Deadline and fatal flags read by QuickJS's interrupt handler.
pub(crate) struct Interrupt {
    pub(crate) epoch: Instant,
    pub(crate) deadline_ns: AtomicU64,
    pub(crate) fatal: AtomicBool,
    pub(crate) fired: AtomicBool,
    /// The current drive step's cancel flag (see `DriveInput::cancel`).
    pub(crate) cancel: Mutex<Option<Arc<AtomicBool>>>,
}

impl Interrupt {
    pub(crate) fn should_stop(&self) -> bool {
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
pub(crate) struct Vm {
    pub(crate) api: Api,
    pub(crate) ctx: Context,
    pub(crate) rt: Runtime,
    pub(crate) bridge: Arc<Mutex<BridgeHost>>,
    pub(crate) interrupt: Arc<Interrupt>,
    pub(crate) boot: Option<String>,
    /// Set by the allocator when it refuses an allocation; cleared at every drive step.
    pub(crate) refused: Arc<AtomicBool>,
    /// The primitives' state, which the context points at (see `ffi`): dropped after the runtime.
    pub(crate) context_state: Box<ffi::ContextState>,
    /// The limits the VM was built for (its pool key; its heap and stack limits are in its image).
    pub(crate) limits: GuestLimits,
    /// Whether a run already used this VM (it was reset since).
    pub(crate) reused: bool,
    /// The outcomes being settled (swapped with `ContextState::answered`, so neither list is
    /// allocated anew each time the job queue runs dry); empty between settlements.
    pub(crate) settling: Vec<(RequestId, ffi::Outcome)>,
    /// A block of each small size class, held so their pages are not made and freed per call.
    pub(crate) pages: ffi::PageKeepers,
    /// The region holding the whole QuickJS heap, when reusable: dropped after everything above.
    pub(crate) arena: Option<arena::Arena>,
}

/// The prelude's private handle, each function kept on its own (no property lookup per drive step).
/// `settle` is not among them: `host` answers requests with promises this engine settles itself.
pub(crate) struct Api {
    pub(crate) boot: Persistent<Function<'static>>,
    pub(crate) run: Persistent<Function<'static>>,
    pub(crate) poll: Persistent<Function<'static>>,
    pub(crate) host_error: Persistent<Function<'static>>,
    /// An empty ordinary object no guest code can reach, kept for the VM's life: it holds QuickJS's
    /// shared initial shape of `Object.prototype` objects, which otherwise dies whenever the last
    /// object still empty gains a property, so each `{ i }` a cell passes and each object a result
    /// is parsed into would make and free it again.
    pub(crate) _shape_keeper: Persistent<Object<'static>>,
}

impl Api {
    pub(crate) fn save<'js>(ctx: &Ctx<'js>, handle: &Object<'js>) -> rquickjs::Result<Self> {
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
pub(crate) fn new_bridge(limits: GuestLimits) -> BridgeHost {
    let mut bridge = BridgeHost::new(limits);
    bridge.take_values();
    bridge
}

pub(crate) fn eval_options(filename: &str) -> EvalOptions {
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
pub(crate) fn prelude_bytecode() -> Result<&'static [u8], EngineError> {
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
pub(crate) fn compile_prelude() -> Result<Vec<u8>, String> {
    prelude_compile::compile(PRELUDE_FILENAME, PRELUDE)
}

/// The build's bytecode, if the build made one from exactly this [`PRELUDE`] (comparing the two
/// texts costs ~10 µs, once per process).
#[cfg(codemode_prelude_bytecode)]
pub(crate) fn built_prelude_bytecode() -> Option<&'static [u8]> {
    /// Aligned like an allocation, as the run-time compile's bytes are (QuickJS keeps pointing
    /// into them).
    #[repr(C, align(16))]
    struct Aligned<B: ?Sized>(B);
    static BYTECODE: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/prelude.qjsbc")));
    pub(crate) const SOURCE: &str = include_str!(concat!(env!("OUT_DIR"), "/prelude.js"));
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
pub(crate) fn built_prelude_bytecode() -> Option<&'static [u8]> {
    None
}

pub(crate) fn unavailable(what: &str) -> impl Fn(rquickjs::Error) -> EngineError + '_ {
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
    pub(crate) fn settle_all(
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

    pub(crate) fn new(limits: GuestLimits) -> Result<Self, EngineError> {
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
    pub(crate) fn begin_run(&mut self) {
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
    pub(crate) fn recycle(&mut self) -> bool {
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
    pub(crate) fn fault(&self, ctx: &Ctx<'_>, err: rquickjs::Error) -> VmFault {
        fault(&self.interrupt, ctx, err)
    }

    pub(crate) fn call_api(
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
pub(crate) fn fault(interrupt: &Interrupt, ctx: &Ctx<'_>, err: rquickjs::Error) -> VmFault {
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

pub(crate) fn exception_fault(value: &Value<'_>) -> VmFault {
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
