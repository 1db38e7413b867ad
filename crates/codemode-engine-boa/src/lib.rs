//! # codemode-engine-boa
//!
//! A [`GuestEngine`] over [`boa_engine`], a JavaScript engine written in Rust: no C toolchain, no
//! WebAssembly, live in-process snapshots. It is built only through the public engine contract
//! (`codemode-core`'s [`codemode_core::engine`] and `codemode-bridge`), exactly as an engine written
//! outside this repository would be, and it is the proof that the contract and the conformance
//! suite are engine-neutral.
//!
//! ## For trusted code only
//!
//! boa has no heap limit and no way to interrupt running code at a wall-clock deadline, so this
//! engine declares [`EngineCapabilities::NONE`] and must not run code you would not run in your own
//! process:
//!
//! - **Memory is not bounded.** `memoryLimitBytes` is not enforced; a memory bomb grows the process
//!   until the operating system stops it. A suspended run's snapshot size is unknown (reported as
//!   0), so `maxSnapshotBytes` does not bound it either.
//! - **Time is bounded only by counting.** A cell cannot be stopped at `timeoutMs` while it runs
//!   (the runtime still applies `timeoutMs` while a run waits on tools). What stops runaway code is
//!   boa's loop-iteration limit ([`BoaLimits::loop_iterations`], per function activation,
//!   uncatchable), which fails the cell with `timeout`. Code that does not loop in one activation
//!   (a long chain of calls, a huge sort, pathological builtins such as a 100,000-deep chain of
//!   bound functions) runs to its end and holds its VM thread and the caller meanwhile.
//!   An abort (`DriveInput::cancel`) is not seen while guest code runs either.
//!   A loop stopped **after an `await`** is worse: boa drops the error raised inside an async
//!   continuation, so the cell never settles and fails as stalled (no code) rather than `timeout`.
//! - **Recursion** is stopped by boa's recursion limit ([`BoaLimits::recursion`]), uncatchably —
//!   not as the catchable `RangeError` the other engines give.
//! - **Parser depth.** boa's parser and compiler recurse on the host stack; a cell whose nesting
//!   estimate (`codemode_bridge::nesting`) exceeds `MAX_NESTING` is refused with a `SyntaxError`
//!   before boa sees it, and every VM runs on its own thread with a large stack
//!   ([`BoaLimits::thread_stack_bytes`]).
//! - A panic inside boa ends that run's VM thread and fails the run with `internal_error`; the
//!   process keeps serving.
//!
//! The quickjs engines enforce all of these limits; use them for untrusted code.
//!
//! ## How it runs
//!
//! boa's [`Context`] cannot move between threads, so every instance owns one dedicated thread that
//! creates the context, evaluates the bridge prelude and then serves drive commands over a channel
//! until the instance is dropped. A suspended run keeps its thread parked (its snapshot is
//! [`SnapshotBody::Live`] and cannot leave the process). The drive step itself is the shared
//! [`codemode_bridge::drive`] over this crate's [`GuestVm`] primitives.
//!
//! Layering (docs/src/layout.md): depends on `codemode-core` and `codemode-bridge`; knows nothing of tools,
//! policy or MCP.
#![forbid(unsafe_code)]

use boa_engine::error::{EngineError as BoaEngineError, RuntimeLimitError};
use boa_engine::module::{Module, ModuleLoader, ModuleRequest, Referrer};
use boa_engine::object::FunctionObjectBuilder;
use boa_engine::{Context, JsError, JsNativeError, JsObject, JsResult, JsString, JsValue, NativeFunction, Source};
use codemode_bridge::driver::{GuestVm, VmFault, drive, failure_from_parts};
use codemode_bridge::nesting::{MAX_NESTING, nesting_estimate};
use codemode_bridge::{BridgeHost, CELL_FILENAME, HostCallResult, MODULE_DENIED_PREFIX, PRELUDE, PRELUDE_FILENAME};
use codemode_core::engine::{
    DriveInput, DriveReport, EngineCapabilities, EngineError, GuestEngine, GuestFailure, GuestInstance, GuestLimits,
    GuestProgram, RequestId, Snapshot, SnapshotBody,
};
use codemode_core::error::CodeModeErrorCode;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::Instant;

/// The engine's name, as used by `runtime` in the config and `--engine` on the command line.
pub const ENGINE_NAME: &str = "boa";

/// Message of a cell stopped by the loop-iteration limit.
pub const LOOP_LIMIT_MESSAGE: &str = "code mode cell timed out: a loop ran past the boa engine's loop iteration limit \
     (boa cannot interrupt code at the time limit; this limit stops runaway loops instead)";

/// Message of a cell stopped by the recursion or value-stack limit.
pub const RECURSION_LIMIT_MESSAGE: &str =
    "RangeError: Maximum call stack size exceeded (the boa engine's recursion limit; not catchable on this engine)";

/// The counting limits that stand in for the interrupt and stack limit boa does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BoaLimits {
    /// Most loop iterations one function activation may run, over all its loops. Stops `while
    /// (true) {}` (which boa cannot interrupt at the deadline) uncatchably, as `timeout`. Default
    /// 20,000,000: a few seconds of a tight loop on a slow machine, far above what an ordinary cell
    /// runs in one function.
    pub loop_iterations: u64,
    /// Deepest JavaScript call depth. Stops unbounded recursion (uncatchably) before it exhausts
    /// boa's value stack or, through native callbacks such as `Array.prototype.map`, the thread's
    /// stack. Default 10,000.
    pub recursion: usize,
    /// Most values on boa's operand stack (boa's own stack-size limit). Default 1,000,000.
    pub value_stack: usize,
    /// Stack of each VM thread. boa's parser, compiler and native builtins recurse on it; the
    /// nesting bound and the recursion limit are sized so this never overflows. Default 256 MiB
    /// (reserved address space; only touched pages are memory).
    pub thread_stack_bytes: usize,
}

impl Default for BoaLimits {
    fn default() -> Self {
        BoaLimits {
            loop_iterations: 20_000_000,
            recursion: 10_000,
            value_stack: 1_000_000,
            thread_stack_bytes: 256 << 20,
        }
    }
}

impl BoaLimits {
    /// These limits with another loop-iteration limit.
    pub fn with_loop_iterations(mut self, n: u64) -> Self {
        self.loop_iterations = n;
        self
    }

    /// These limits with another recursion limit.
    pub fn with_recursion(mut self, n: usize) -> Self {
        self.recursion = n;
        self
    }
}

/// The boa engine. Cheap to clone; every run gets its own VM thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct BoaEngine {
    limits: BoaLimits,
}

impl BoaEngine {
    /// The engine with [`BoaLimits::default`].
    pub fn new() -> Self {
        BoaEngine::default()
    }

    /// The engine with other counting limits.
    pub fn with_limits(limits: BoaLimits) -> Self {
        BoaEngine { limits }
    }

    /// The engine's counting limits.
    pub fn limits(&self) -> BoaLimits {
        self.limits
    }
}

impl GuestEngine for BoaEngine {
    fn name(&self) -> &str {
        ENGINE_NAME
    }

    fn serializes_snapshots(&self) -> bool {
        false
    }

    /// None of the limits is promised: see the crate documentation (trusted code only).
    fn capabilities(&self) -> EngineCapabilities {
        EngineCapabilities::NONE
    }

    /// Makes sure a VM with the prelude loaded is waiting in the warm pool, so the first run does
    /// not pay for compiling the prelude inside its `timeoutMs`.
    fn prepare(&self) -> Result<(), EngineError> {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            tracing::warn!(
                target: "codemode::engine::boa",
                "the boa engine enforces no heap limit and cannot interrupt guest code at the time limit: \
                 run trusted code only (use quickjs-wasi for untrusted cells)"
            );
        });
        refill_warm(self.limits);
        let pooled = {
            let pool = warm().lock().unwrap_or_else(|p| p.into_inner());
            pool.iter().find(|(l, _)| *l == self.limits).map(|(_, vm)| vm.clone())
        };
        let Some(vm) = pooled else {
            return Err(EngineError::Unavailable("cannot start a boa VM thread".into()));
        };
        let (reply, ready) = mpsc::sync_channel(1);
        vm.send(Command::Ready(reply)).map_err(|_| thread_gone())?;
        ready.recv().map_err(|_| thread_gone())?
    }

    fn start(&self, program: &GuestProgram, limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
        let cell = codemode_bridge::wrap_code(&program.code);
        Ok(Box::new(BoaInstance::spawn(cell, program.boot.to_string(), *limits, self.limits)?))
    }

    fn restore(&self, snapshot: Snapshot, _limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
        snapshot.into_live_instance(ENGINE_NAME)
    }
}

type DriveResult = Result<DriveReport, EngineError>;

/// What an instance asks of its VM thread.
enum Command {
    /// Load a run into the (fresh) VM: its bridge limits, boot data and wrapped cell.
    Start { cell: String, boot: String, limits: GuestLimits, reply: mpsc::SyncSender<Result<(), EngineError>> },
    /// One drive step.
    Drive(DriveInput, mpsc::SyncSender<DriveResult>),
    /// Answered once the VM is built (or failed to build): how [`GuestEngine::prepare`] waits.
    Ready(mpsc::SyncSender<Result<(), EngineError>>),
}

/// A run: the sending half of its VM thread's command channel. Dropping it ends the thread (and
/// the VM with it) once the thread finishes what it is doing.
struct BoaInstance {
    commands: mpsc::Sender<Command>,
}

fn thread_gone() -> EngineError {
    EngineError::Internal("the boa VM thread is gone (it panicked or failed earlier)".into())
}

/// Spawns a VM thread; it builds its context and prelude at once, then waits for `Start`.
fn spawn_vm(boa: BoaLimits) -> Result<mpsc::Sender<Command>, EngineError> {
    let (commands, inbox) = mpsc::channel::<Command>();
    std::thread::Builder::new()
        .name("codemode-boa".into())
        .stack_size(boa.thread_stack_bytes)
        .spawn(move || vm_thread(boa, inbox))
        .map_err(|e| EngineError::Unavailable(format!("cannot start a boa VM thread: {e}")))?;
    Ok(commands)
}

/// VM threads whose context and prelude are built (or being built) and that ran no guest code,
/// kept per [`BoaLimits`] so a new run does not wait for boa to compile the prelude (most of a
/// trivial run's time on this engine). Refilled after each start.
const WARM_TARGET: usize = 2;

/// The warm pool: idle VM threads with the limits they were built for.
type WarmPool = Mutex<Vec<(BoaLimits, mpsc::Sender<Command>)>>;

fn warm() -> &'static WarmPool {
    static WARM: OnceLock<WarmPool> = OnceLock::new();
    WARM.get_or_init(|| Mutex::new(Vec::new()))
}

fn take_warm(boa: BoaLimits) -> Option<mpsc::Sender<Command>> {
    let mut pool = warm().lock().unwrap_or_else(|p| p.into_inner());
    let at = pool.iter().position(|(l, _)| *l == boa)?;
    Some(pool.swap_remove(at).1)
}

fn refill_warm(boa: BoaLimits) {
    let mut pool = warm().lock().unwrap_or_else(|p| p.into_inner());
    while pool.iter().filter(|(l, _)| *l == boa).count() < WARM_TARGET {
        let Ok(vm) = spawn_vm(boa) else { return };
        // Keep the pool small across all limit sets: drop the oldest entries first (their threads
        // end when their sender is dropped).
        if pool.len() >= 4 * WARM_TARGET {
            pool.remove(0);
        }
        pool.push((boa, vm));
    }
}

impl BoaInstance {
    fn spawn(cell: String, boot: String, limits: GuestLimits, boa: BoaLimits) -> Result<Self, EngineError> {
        let commands = match take_warm(boa) {
            Some(vm) => vm,
            None => spawn_vm(boa)?,
        };
        refill_warm(boa);
        let (reply, started) = mpsc::sync_channel(1);
        commands
            .send(Command::Start { cell, boot, limits, reply })
            .map_err(|_| EngineError::Unavailable("the boa VM thread ended while starting".into()))?;
        match started.recv() {
            Ok(Ok(())) => Ok(BoaInstance { commands }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(EngineError::Unavailable("the boa VM thread ended while starting".into())),
        }
    }
}

impl GuestInstance for BoaInstance {
    fn drive(&mut self, input: DriveInput) -> Result<DriveReport, EngineError> {
        let (reply_tx, reply_rx) = mpsc::sync_channel(1);
        self.commands.send(Command::Drive(input, reply_tx)).map_err(|_| thread_gone())?;
        reply_rx.recv().map_err(|_| thread_gone())?
    }

    fn snapshot(self: Box<Self>) -> Result<Snapshot, EngineError> {
        // boa does not account its heap: the size is unknown (see the crate documentation).
        Ok(Snapshot { engine: ENGINE_NAME.to_string(), body: SnapshotBody::Live { size_bytes: 0, instance: self } })
    }
}

/// The body of a VM thread: build the VM, take one run, serve its drive steps until the instance
/// is dropped.
fn vm_thread(boa: BoaLimits, inbox: mpsc::Receiver<Command>) {
    let built = match std::panic::catch_unwind(move || BoaVm::new(boa)) {
        Ok(built) => built,
        Err(panic) => Err(EngineError::Unavailable(format!(
            "boa panicked while starting: {}",
            codemode_workers::panic_message(panic)
        ))),
    };
    let mut unstarted: Option<String>;
    let mut vm = loop {
        match (&built, inbox.recv()) {
            (Ok(_), Ok(Command::Ready(reply))) => {
                let _ = reply.send(Ok(()));
            }
            (Err(e), Ok(Command::Ready(reply) | Command::Start { reply, .. })) => {
                let _ = reply.send(Err(e.clone()));
                return;
            }
            (Ok(_), Ok(Command::Start { cell, boot, limits, reply })) => {
                let Ok(mut vm) = built else { return };
                vm.host.bridge.replace(BridgeHost::new(limits));
                vm.boot = Some(boot);
                unstarted = Some(cell);
                let _ = reply.send(Ok(()));
                break vm;
            }
            (_, Ok(Command::Drive(_, reply))) => {
                let _ = reply.send(Err(EngineError::Internal("a boa VM was driven before it was started".into())));
                return;
            }
            (_, Err(_)) => return,
        }
    };
    while let Ok(command) = inbox.recv() {
        let (input, reply) = match command {
            Command::Drive(input, reply) => (input, reply),
            Command::Ready(reply) => {
                let _ = reply.send(Ok(()));
                continue;
            }
            Command::Start { reply, .. } => {
                let _ = reply.send(Err(EngineError::Internal("a boa VM was started twice".into())));
                continue;
            }
        };
        let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drive(&mut vm, &mut unstarted, input)));
        match stepped {
            Ok(report) => {
                let _ = reply.send(report);
            }
            Err(panic) => {
                // The VM may be half-way through an operation: it is not used again.
                let message = codemode_workers::panic_message(panic);
                tracing::error!(target: "codemode::engine::boa", %message, "boa panicked; the run's VM is discarded");
                let _ = reply.send(Err(EngineError::Internal(format!("the boa engine panicked: {message}"))));
                return;
            }
        }
    }
}

/// What the host primitive needs, kept in the context's host-defined data.
#[derive(Clone)]
struct HostState {
    bridge: Rc<RefCell<BridgeHost>>,
}

/// The prelude's handle: the functions `install(host)` returned.
struct Api {
    boot: JsObject,
    run: JsObject,
    settle: JsObject,
    poll: JsObject,
}

/// One VM, owned by its thread.
struct BoaVm {
    ctx: Context,
    api: Api,
    host: HostState,
    boot: Option<String>,
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Unavailable(format!("{what}: {e}"))
}

impl BoaVm {
    fn new(boa: BoaLimits) -> Result<Self, EngineError> {
        let mut ctx = Context::builder()
            .module_loader(Rc::new(DenyModules))
            .build()
            .map_err(|e| unavailable("cannot create a boa context", e))?;
        let runtime = ctx.runtime_limits_mut();
        runtime.set_loop_iteration_limit(boa.loop_iterations);
        runtime.set_recursion_limit(boa.recursion);
        runtime.set_stack_size_limit(boa.value_stack);
        let host = HostState { bridge: Rc::new(RefCell::new(BridgeHost::new(GuestLimits::default()))) };
        ctx.insert_data(host.clone());
        let api = install_prelude(&mut ctx).map_err(|e| unavailable("the guest prelude failed to load", e))?;
        Ok(BoaVm { ctx, api, host, boot: None })
    }

    fn call(&mut self, f: &JsObject, args: &[JsValue]) -> Result<JsValue, VmFault> {
        f.call(&JsValue::undefined(), args, &mut self.ctx).map_err(|e| fault(e, &mut self.ctx))
    }
}

/// Evaluated before the prelude. boa's `Array.prototype.join`/`toString`/`toLocaleString` convert
/// nested arrays by native recursion that no runtime limit sees: `[[[…]]].toString()` on a deep
/// array built in a loop would overflow the VM thread's stack and abort the process. Wrapped in
/// JavaScript with a depth count, too deep a conversion is a catchable `RangeError` instead.
const HARDEN: &str = r#"(function () {
  "use strict";
  const apply = Reflect.apply;
  const defineProperty = Object.defineProperty;
  const RangeErrorCtor = RangeError;
  const proto = Array.prototype;
  let depth = 0;
  for (const name of ["join", "toString", "toLocaleString"]) {
    const original = proto[name];
    const wrapped = {
      [name](...args) {
        if (depth >= MAX_DEPTH) {
          throw new RangeErrorCtor("Maximum call stack size exceeded (arrays nested too deeply to convert to a string)");
        }
        depth++;
        try {
          return apply(original, this, args);
        } finally {
          depth--;
        }
      },
    }[name];
    defineProperty(proto, name, { value: wrapped, writable: true, enumerable: false, configurable: true });
  }
})();"#;

/// Deepest array-to-string conversion [`HARDEN`] allows (each level counts twice: `toString`
/// calls `join`).
const MAX_CONVERSION_DEPTH: usize = 2_000;

fn install_prelude(ctx: &mut Context) -> Result<Api, String> {
    let harden = HARDEN.replace("MAX_DEPTH", &MAX_CONVERSION_DEPTH.to_string());
    ctx.eval(Source::from_bytes(&harden).with_path(Path::new(PRELUDE_FILENAME))).map_err(|e| e.to_string())?;
    let install = ctx
        .eval(Source::from_bytes(PRELUDE).with_path(Path::new(PRELUDE_FILENAME)))
        .map_err(|e| e.to_string())?
        .as_callable()
        .ok_or("the prelude did not evaluate to a function")?;
    let host = FunctionObjectBuilder::new(ctx.realm(), NativeFunction::from_fn_ptr(host_primitive))
        .name(JsString::from("host"))
        .length(2)
        .build();
    let api = install
        .call(&JsValue::undefined(), &[host.into()], ctx)
        .map_err(|e| e.to_string())?
        .as_object()
        .ok_or("install(host) did not return an object")?;
    let mut get = |name: &str| -> Result<JsObject, String> {
        api.get(JsString::from(name), ctx)
            .map_err(|e| e.to_string())?
            .as_callable()
            .ok_or_else(|| format!("the prelude's `{name}` is not a function"))
    };
    Ok(Api { boot: get("boot")?, run: get("run")?, settle: get("settle")?, poll: get("poll")? })
}

/// The module loader of every context: there are no modules in code mode. (The bridge's static
/// guard rejects `import`/`require` in the source; this catches `import()` built at run time.)
struct DenyModules;

/// Longest module specifier quoted in the denial message.
const MAX_SPECIFIER_CHARS: usize = 100;

impl ModuleLoader for DenyModules {
    fn load_imported_module(
        self: Rc<Self>,
        _referrer: Referrer,
        request: ModuleRequest,
        _context: &RefCell<&mut Context>,
    ) -> impl Future<Output = JsResult<Module>> {
        let specifier: String = request.specifier().to_std_string_lossy().chars().take(MAX_SPECIFIER_CHARS).collect();
        std::future::ready(Err(JsNativeError::reference()
            .with_message(format!(
                "{MODULE_DENIED_PREFIX}: import('{specifier}') is not available in code mode; modules, files and \
                 network are reached through tools"
            ))
            .into()))
    }
}

/// An error no guest `catch` can see: boa unwinds every frame back to the host.
fn uncatchable() -> JsError {
    BoaEngineError::RuntimeLimit(RuntimeLimitError::LoopIteration).into()
}

/// The one host primitive: `host(kind, payload, more?, last?)` → request id (or 0), or a thrown
/// error; `more` and `last` are the rest of the payload (the prelude's layer 0).
fn host_primitive(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let Some(state) = ctx.get_data::<HostState>().cloned() else {
        return Err(JsNativeError::error().with_message("code mode host state is missing").into());
    };
    let text = |i: usize| args.get(i).and_then(JsValue::as_string).map(|s| s.to_std_string_lossy());
    let kind = text(0).unwrap_or_default();
    let mut payload = text(1).unwrap_or_default();
    for i in 2..args.len().min(4) {
        payload.push_str(&text(i).unwrap_or_default());
    }
    let Ok(mut bridge) = state.bridge.try_borrow_mut() else {
        return Err(uncatchable());
    };
    match bridge.host_call(&kind, &payload) {
        HostCallResult::Request(id) => Ok(JsValue::from(id as f64)),
        HostCallResult::Accepted => Ok(JsValue::from(0)),
        HostCallResult::Data(Some(text)) => Ok(JsValue::from(JsString::from(&*text))),
        HostCallResult::Data(None) => Ok(JsValue::undefined()),
        HostCallResult::Throw { name, message } => Err(match name {
            "TypeError" => JsNativeError::typ(),
            "RangeError" => JsNativeError::range(),
            _ => JsNativeError::error(),
        }
        .with_message(message)
        .into()),
        HostCallResult::Fatal => Err(uncatchable()),
        // Never: this engine does not answer inline (`GuestVm::answers_inline` is false), so its
        // bridge has no answerer. Should it ever, the cell stops rather than lose the outcome.
        HostCallResult::Settled { .. } | HostCallResult::SettledValue { .. } => Err(uncatchable()),
    }
}

/// Turns an error that escaped to the host into a fault.
fn fault(err: JsError, ctx: &mut Context) -> VmFault {
    if let Some(engine) = err.as_engine() {
        return match engine {
            BoaEngineError::RuntimeLimit(RuntimeLimitError::LoopIteration) => VmFault::Failure(GuestFailure {
                code: Some(CodeModeErrorCode::Timeout),
                message: LOOP_LIMIT_MESSAGE.to_string(),
            }),
            BoaEngineError::RuntimeLimit(_) => {
                VmFault::Failure(GuestFailure { code: None, message: RECURSION_LIMIT_MESSAGE.to_string() })
            }
            other => VmFault::Engine(EngineError::Internal(format!("boa engine error: {other}"))),
        };
    }
    if let Some(native) = err.as_native() {
        let text = native.to_string();
        let (name, message) = text.split_once(": ").unwrap_or((text.as_str(), ""));
        let message = message.lines().next().unwrap_or_default();
        return VmFault::Failure(failure_from_parts(name, message, "", None));
    }
    // A thrown value (not a native error): read its name and message like the prelude would.
    match err.into_opaque(ctx) {
        Ok(value) => VmFault::Failure(thrown_value_failure(&value, ctx)),
        Err(e) => VmFault::Engine(EngineError::Internal(format!("boa error: {e}"))),
    }
}

fn thrown_value_failure(value: &JsValue, ctx: &mut Context) -> GuestFailure {
    let Some(object) = value.as_object() else {
        let text = if value.is_null() {
            "null".to_string()
        } else if value.is_undefined() {
            "undefined".to_string()
        } else {
            value.as_string().map(|s| s.to_std_string_lossy()).unwrap_or_else(|| value.type_of().to_string())
        };
        return failure_from_parts("Uncaught", &text, "", None);
    };
    let mut get = |key: &str| -> String {
        object
            .get(JsString::from(key), ctx)
            .ok()
            .and_then(|v| v.as_string())
            .map(|s| s.to_std_string_lossy())
            .unwrap_or_default()
    };
    let (name, message, stack) = (get("name"), get("message"), get("stack"));
    failure_from_parts(&name, &message, &stack, None)
}

impl GuestVm for BoaVm {
    /// boa cannot be interrupted: the deadline is not enforced while guest code runs (see the crate
    /// documentation). The runtime still bounds the run's wall-clock time between drive steps.
    fn set_deadline(&mut self, _deadline: Instant) {}

    fn start_cell(&mut self, wrapped: &str) -> Result<(), VmFault> {
        let boot = self.boot.take().unwrap_or_else(|| "{}".to_string());
        let (head, index, texts) = codemode_bridge::split_boot(&boot);
        // The head goes as its text, which the prelude parses; the QuickJS engines pass its number
        // (`codemode_bridge::head_max_depth`), so the corpus runs both of `boot`'s forms.
        let args = [
            JsValue::from(JsString::from(head)),
            JsValue::from(JsString::from(index)),
            JsValue::from(JsString::from(texts)),
        ];
        let boot_fn = self.api.boot.clone();
        self.call(&boot_fn, &args)?;
        // boa's parser recurses on the thread's stack: refuse what could overflow it.
        if nesting_estimate(wrapped) > MAX_NESTING {
            return Err(VmFault::Failure(failure_from_parts(
                "SyntaxError",
                &format!("the cell is nested too deeply to parse (more than {MAX_NESTING} levels)"),
                "",
                None,
            )));
        }
        let source = Source::from_bytes(wrapped).with_path(Path::new(CELL_FILENAME));
        let cell = self.ctx.eval(source).map_err(|e| fault(e, &mut self.ctx))?;
        let run = self.api.run.clone();
        self.call(&run, &[cell]).map(|_| ())
    }

    fn settle(&mut self, id: RequestId, ok: bool, json: &str) -> Result<(), VmFault> {
        let settle = self.api.settle.clone();
        let args = [JsValue::from(id as f64), JsValue::from(ok), JsValue::from(JsString::from(json))];
        self.call(&settle, &args).map(|_| ())
    }

    fn run_jobs(&mut self) -> Result<(), VmFault> {
        self.ctx.run_jobs().map_err(|e| fault(e, &mut self.ctx))
    }

    fn poll(&mut self) -> Result<Option<String>, VmFault> {
        let poll = self.api.poll.clone();
        Ok(self.call(&poll, &[])?.as_string().map(|s| s.to_std_string_lossy()))
    }

    fn with_bridge<R>(&mut self, f: impl FnOnce(&mut BridgeHost) -> R) -> R {
        f(&mut self.host.bridge.borrow_mut())
    }

    fn memory_refused(&mut self) -> bool {
        // No allocator accounting: an uncaught `null` is only ever a `throw null`.
        false
    }
}
