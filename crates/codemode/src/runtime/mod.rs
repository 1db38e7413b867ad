//! The exec/wait run state machine (contract §5–§6, docs/src/layout.md).
//!
//! One `exec` or `wait` call drives the guest in steps. After each step the runtime answers the new
//! bridge requests: catalog lookups at once, tool calls by spawning them on the host's executor. Ready
//! answers are delivered in the same call (auto-drain). The call ends when
//! - the cell's value is final and no nested call is in flight → `completed`;
//! - the cell failed, or the guest was still busy at the deadline (`timeout`) → `failed`;
//! - the guest called `yield_control()` → `waiting` / `yield`;
//! - the guest is idle on nested calls at the deadline → `waiting` / `pending_tools`: the VM is
//!   snapshotted and stored, the nested calls keep running, and `wait` collects them.
//!
//! Threads: a whole `exec` / `wait` call runs on one guest worker thread
//! ([`codemode_workers`]), never on the async executor. Engines run guest code inline there,
//! and a nested call's future is polled once inline: a tool that answers at once costs no thread
//! switch. Only calls that really wait are spawned on the tokio runtime; their results come back
//! through a channel.
//!
//! # Map of the types
//!
//! - [`Inner`] — the runtime behind every `CodeMode` clone: configuration, engine, the default
//!   catalog and the per-target catalogs (a policy per run), the gates of nested calls, the store,
//!   the process-local state of suspended runs ([`Inflight`]) and the runs being driven now.
//! - [`RunCatalog`] — a catalog plus the boot data its runs start with (`run.rs` holds the run).
//! - [`Run`] (`run.rs`) — one run while an `exec` / `wait` holds it: catalog, namespaces,
//!   outstanding requests, ready results, telemetry, trajectory target ([`TraceTarget`]).
//! - `Call` — the budget and output of one `exec` / `wait` call (deadline, output bytes, cancel flag).
//! - [`CallGates`] — what the builder hands the runtime for the gates of nested calls (loop
//!   detection, namespaces, trajectory, hooks, approvals, sandbox).
//! - `StartGate` and `BEFORE_START` (`gates.rs`) — the ordered, declared list of checks a nested
//!   call passes before it starts, and `run_in_flight`, the stages while it runs (hooks, approval,
//!   tool, output contract). The order is documented there and in the book's security model.
//! - `NestedCalls` (`calls.rs`) — the nested calls of a run still executing on the host.
//! - `ActiveRun` (`lifecycle.rs`) — a run registered as driven, so an abort reaches it.
//! - [`Observations`] (`observed.rs`) — result types learned from observed results, and their
//!   sharing through a fleet's store.
//!
//! The code is split by concern (a test checks that this list names every module):
//!
//! - this file: [`Inner`], the start of an `exec` and of a `wait`;
//! - `drive`: the drive loop of one call and its budget (`Call`);
//! - `catalogs`: the catalogs runs see, per target, and the one a resumed run keeps;
//! - `run`: the run state;
//! - `gates`: the checks of nested calls;
//! - `calls`: the nested calls (starting, collecting, handing over between processes);
//! - `inline`: answers the host gives inside a drive step;
//! - `dispatch`: the answer to each typed guest request;
//! - `suspend`: the three ways a call ends (completed, failed, suspended into the store);
//! - `policy`: the policy a run carries and the checks of a resume against it;
//! - `portable`: exporting and importing runs;
//! - `lifecycle`: sweeps, aborts and lifecycle records;
//! - `loops`: each session's loop-detection history (shared through a fleet's store);
//! - `observed`: the learned result types;
//! - `traces`: where a run's trajectory records go, and the trace a run's `exec` started.

mod calls;
mod catalogs;
mod dispatch;
mod drive;
mod gates;
mod inline;
mod lifecycle;
mod loops;
mod observed;
mod policy;
mod portable;
mod run;
mod suspend;
mod traces;

use crate::tools::ToolHook;
use calls::{Finished, NestedCalls};
pub(crate) use catalogs::RunCatalog;
use codemode_bridge::modules::find_module_access;
use codemode_catalog::Catalog;
use codemode_catalog::approval::ApprovalPolicy;
use codemode_catalog::loops::{History, LoopPolicy};
use codemode_catalog::sandbox::SandboxPolicy;
use codemode_core::approval::Approver;
use codemode_core::config::{CodeModeConfig, Language};
use codemode_core::engine::{
    BootSource, Delivery, GuestEngine, GuestError, GuestFailure, GuestInstance, GuestLimits, GuestProgram, RequestId,
    RequestKind, Snapshot,
};
use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::executor::{RunObserver, ToolExecutor};
use codemode_core::input::{CodeModeExecInput, CodeModeWaitInput};
use codemode_core::namespace::{NamespaceContext, NamespaceRegistry, NoNamespaces, RunNamespaces};
use codemode_core::positions::CellPositions;
use codemode_core::result::{CodeModeResult, WaitReason};
use codemode_core::scope::{RunContext, RunId};
use codemode_core::store::{SnapshotStore, SuspendedRun};
use codemode_core::telemetry::{CodeModeTelemetry, SnapshotEventKind};
use codemode_core::trajectory::Redaction;
use codemode_snapshot::Clock;
pub(crate) use drive::CallHandles;
use drive::{Call, Next, next_settled};
use observed::Observations;
use run::Run;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
pub(crate) use traces::TraceTarget;

/// Why a call fails whose run a drive step's answerer did not give back (never expected).
const MSG_RUN_LOST: &str = "internal error: the run's state was not handed back after a drive step";

/// Message of the failure when a cell awaits something that nothing will ever settle (a guest
/// program error, like an uncaught exception: no code).
pub(crate) const MSG_STALLED: &str =
    "the cell is waiting on a promise that nothing will settle (no nested calls are in flight)";

/// Message of a gated call whose approver did not answer before the process that started it ended
/// (`codemode exec` handing its run over): the call fails instead of parking in a run that is
/// already stored.
pub(crate) const MSG_PARKED_TOO_LATE: &str = "approval was not given before the process running the call ended; the call did \
     not run (call it again to ask for approval again)";

/// Message of an `aborted` run.
pub(crate) const MSG_ABORTED: &str = "code mode run was aborted: its caller cancelled the call or the host aborted the run; its nested calls were \
     stopped and its state deleted";

/// Message of the `internal_error` when a stored run has nothing to resume with: no result to
/// deliver and no call in flight (a store that lost part of a run).
pub(crate) const MSG_NOTHING_TO_RESUME: &str =
    "the suspended run has nothing to resume with: no result is ready and no nested call is in flight";

fn new_run_id() -> RunId {
    RunId::from_generated(format!("cm_{}", uuid::Uuid::new_v4().simple()))
}

/// Guest limits derived from the config.
pub(crate) fn guest_limits(config: &CodeModeConfig) -> GuestLimits {
    let base = GuestLimits::default();
    GuestLimits {
        memory_limit_bytes: config.memory_limit_bytes,
        max_delivery_bytes: base.max_delivery_bytes.min(config.memory_limit_bytes / 2),
        max_outstanding_requests: base.max_outstanding_requests.max(2 * config.max_pending_tool_calls as u32),
        ..base
    }
}

/// Drops a finished instance once the worker has answered the call: tearing a VM down (resetting its
/// memory for the next instance) is work no caller needs to wait for.
fn dispose(instance: Box<dyn GuestInstance>) {
    if let Err(e) = codemode_workers::after_job(move || drop(instance)) {
        tracing::debug!(error = %e, "disposing an instance inline");
    }
}

/// How often a resumed run looks for results another process recorded in the store.
const RECORDED_POLL: Duration = Duration::from_millis(25);

/// What every nested call passes through besides the executor: namespace resolution (a namespace
/// call becomes a catalog call first, contract L6), hooks and the approval gate.
pub(crate) struct CallGates {
    pub(crate) loops: LoopPolicy,
    /// Learn result types of tools without an output schema.
    pub(crate) observe_results: bool,
    /// How long a guest worker waits for a nested call's result itself before handing the call
    /// to the async runtime (see [`crate::CodeModeBuilder::inline_wait`]).
    pub(crate) inline_wait: Duration,
    pub(crate) namespaces: Arc<dyn NamespaceRegistry>,
    pub(crate) trajectory: Option<Arc<dyn RunObserver>>,
    pub(crate) redaction: Redaction,
    pub(crate) hooks: Vec<Arc<dyn ToolHook>>,
    pub(crate) approvals: ApprovalPolicy,
    pub(crate) approver: Option<Arc<dyn Approver>>,
    pub(crate) sandbox: SandboxPolicy,
}

/// Process-local state of a suspended run: what cannot be serialized.
struct Inflight {
    context: Arc<RunContext>,
    catalog: Arc<Catalog>,
    source: Arc<dyn BootSource>,
    namespaces: Arc<dyn RunNamespaces>,
    calls: NestedCalls,
    /// This process's claim on the run's running calls (stores shared across processes).
    _claim: Option<codemode_core::store::CallsClaim>,
    expires_at_ms: u64,
}

pub(crate) struct Inner {
    /// The runtime itself, for what outlives a borrow of it (a drive step's answerer).
    pub(crate) me: std::sync::Weak<Inner>,
    pub(crate) config: CodeModeConfig,
    pub(crate) engine: Option<Arc<dyn GuestEngine>>,
    /// The catalog of the runtime's default target (agent, provider, model).
    catalog: std::sync::RwLock<Arc<RunCatalog>>,
    /// What the catalogs of other targets are built from (a policy per run).
    inputs: Arc<crate::BuildInputs>,
    /// The catalogs of the other targets runs came with, built once each and dropped when the tools
    /// change. At most [`MAX_TARGET_CATALOGS`]: an arbitrary one goes to make room.
    target_catalogs: Mutex<HashMap<codemode_catalog::policy::PolicyTarget, Arc<RunCatalog>>>,
    pub(crate) executor: Arc<dyn ToolExecutor>,
    pub(crate) hooks: Vec<Arc<dyn ToolHook>>,
    /// Which nested calls wait for a human (contract P5).
    pub(crate) approvals: ApprovalPolicy,
    /// Who decides gated calls at once; without one, every gated call parks.
    pub(crate) approver: Option<Arc<dyn Approver>>,
    /// What nested calls of sandboxed runs may reach (contract P4, §22).
    pub(crate) sandbox: SandboxPolicy,
    /// The namespaces runs may see (contract §10).
    pub(crate) namespaces: Arc<dyn NamespaceRegistry>,
    /// Receives every run's trajectory records (audit log), if set.
    pub(crate) trajectory: Option<Arc<dyn RunObserver>>,
    /// How values are redacted in trajectory records.
    pub(crate) redaction: Arc<Redaction>,
    /// Loop detection (contract §22), and each session's history of nested calls.
    pub(crate) loops: LoopPolicy,
    /// How long a guest worker waits for a nested call's result itself (see [`CallGates`]).
    pub(crate) inline_wait: Duration,
    /// What was learned about the results of tools without an output schema, by tool id (`None`:
    /// switched off). A tool's entry is dropped when a new catalog changes its definition or leaves
    /// it out. At most [`MAX_OBSERVED_TOOLS`] tools.
    pub(crate) observed: Option<Arc<Observations>>,
    loop_histories: Mutex<HashMap<codemode_core::RunScope, Arc<Mutex<History>>>>,
    pub(crate) store: Arc<dyn SnapshotStore>,
    /// Signs exported runs and verifies imported ones.
    pub(crate) run_keys: codemode_snapshot::RunKeys,
    pub(crate) limits: GuestLimits,
    pub(crate) clock: Arc<dyn Clock>,
    inflight: Mutex<HashMap<RunId, Inflight>>,
    /// The cancel flags of the runs an `exec` / `wait` is driving right now (see [`Inner::abort`]).
    active: Mutex<HashMap<RunId, Arc<AtomicBool>>>,
    /// Clock time of the last automatic sweep (see [`SWEEP_INTERVAL_MS`]).
    last_sweep_ms: std::sync::atomic::AtomicU64,
    /// The trace (W3C `traceparent` of its `exec` span) of each suspended run this process started,
    /// so its `wait` spans join that trace. At most [`MAX_RUN_TRACES`] are kept.
    run_traces: Mutex<HashMap<String, String>>,
}

/// Shortest time between two automatic sweeps of the store at `exec` / `wait`. Sweeping a directory
/// store reads every run file, which must not happen on every call; expiry itself does not depend on
/// it (stores refuse expired runs at checkout and purge them before the capacity check of `put`).
const SWEEP_INTERVAL_MS: u64 = 1_000;

/// Most sessions whose loop-detection history is kept. Prevents: a stream of one-off sessions
/// growing the map without bound (an arbitrary session's history is dropped to make room).
const MAX_LOOP_SESSIONS: usize = 4_096;

/// The history key of request `id` of run `run`.
fn loop_key(run: &RunId, id: RequestId) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    run.as_str().hash(&mut h);
    id.hash(&mut h);
    h.finish()
}

/// Drops a snapshot that will not be stored (a live one holds a whole VM) off the caller's path.
fn discard(snapshot: Snapshot) {
    if let codemode_core::engine::SnapshotBody::Live { instance, .. } = snapshot.body {
        dispose(instance);
    }
}

fn failure_error(f: GuestFailure) -> CodeModeError {
    CodeModeError { code: f.code, message: f.message }
}

fn guest_error(code: CodeModeErrorCode, message: impl Into<String>) -> GuestError {
    GuestError::new("Error", message, Some(code))
}

/// The refusal for an id that is not in the guest's views. Unknown, denied, MCP and direct-only ids
/// all get exactly this answer, so a guessed id reveals nothing. Calls fail as nested calls, lookups
/// (`describe`) as bad input.
fn unknown_tool(id: &str, code: CodeModeErrorCode) -> GuestError {
    guest_error(code, format!("unknown tool id `{id}`; use tools.search(query) or ALL_TOOLS to find catalog ids"))
}

impl Inner {
    pub(crate) fn new(
        config: CodeModeConfig,
        engine: Option<Arc<dyn GuestEngine>>,
        inputs: Arc<crate::BuildInputs>,
        executor: Arc<dyn ToolExecutor>,
        gates: CallGates,
        store: Arc<dyn SnapshotStore>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let limits = guest_limits(&config);
        let CallGates {
            loops,
            observe_results,
            inline_wait,
            namespaces,
            trajectory,
            redaction,
            hooks,
            approvals,
            approver,
            sandbox,
        } = gates;
        let catalog = inputs.catalog_for(inputs.default_target());
        let catalog = std::sync::RwLock::new(Arc::new(RunCatalog::new(catalog, &limits, &approvals, None)));
        Inner {
            // Set by the builder, which makes the `Arc` (`Arc::new_cyclic`).
            me: std::sync::Weak::new(),
            config,
            engine,
            catalog,
            inputs,
            target_catalogs: Mutex::new(HashMap::new()),
            executor,
            hooks,
            approvals,
            approver,
            sandbox,
            namespaces,
            trajectory,
            redaction: Arc::new(redaction),
            loops,
            inline_wait,
            observed: observe_results.then(|| {
                Arc::new(Observations {
                    map: Mutex::new(HashMap::default()),
                    generation: Default::default(),
                    synced: Mutex::new((0, 0)),
                    shared: store.fleet(),
                })
            }),
            loop_histories: Mutex::new(HashMap::new()),
            store,
            run_keys: codemode_snapshot::RunKeys::process(),
            limits,
            clock,
            inflight: Mutex::new(HashMap::new()),
            active: Mutex::new(HashMap::new()),
            last_sweep_ms: std::sync::atomic::AtomicU64::new(0),
            run_traces: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn inflight(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Inflight>> {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn engine(&self) -> Result<&Arc<dyn GuestEngine>, CodeModeError> {
        self.engine.as_ref().ok_or_else(|| {
            CodeModeError::new(
                CodeModeErrorCode::RuntimeUnavailable,
                format!(
                    "code mode runtime `{}` is not available in this build (compiled engines: {}); failing closed",
                    self.config.runtime,
                    crate::Engines::compiled().join(", ")
                ),
            )
        })
    }

    /// Prepares the engine (see [`GuestEngine::prepare`]); a failure fails closed as
    /// `runtime_unavailable`. Logs when preparation took long (the first run on a machine compiles
    /// the guest module).
    pub(crate) fn prepare_engine(&self) -> Result<(), CodeModeError> {
        let Some(engine) = &self.engine else { return Ok(()) };
        let started = Instant::now();
        engine.prepare().map_err(|e| CodeModeError::new(e.code(), e.to_string()))?;
        let took = started.elapsed();
        if took > Duration::from_millis(200) {
            tracing::info!(engine = engine.name(), ms = took.as_millis() as u64, "prepared the code mode engine");
        }
        Ok(())
    }

    fn base_telemetry(&self) -> CodeModeTelemetry {
        let catalog = self.catalog();
        CodeModeTelemetry {
            engine: self.engine.as_ref().map(|e| e.name().to_string()).unwrap_or_else(|| self.config.runtime.clone()),
            catalog_size: catalog.catalog.len() as u32,
            catalog_by_source: catalog.by_source.clone(),
            ..CodeModeTelemetry::default()
        }
    }

    /// Where the trajectory records of the `tool` call of `ctx` go.
    fn trace_target(&self, ctx: &RunContext, tool: &'static str) -> TraceTarget {
        TraceTarget {
            parent: ctx.tool_call_id.clone(),
            parent_tool: tool,
            sink: self.trajectory.clone(),
            redaction: self.redaction.clone(),
            clock: self.clock.clone(),
        }
    }

    /// Opens the namespaces `catalog` makes visible for run `run_id` of `ctx` (contract L3–L5). A scope
    /// that fails serialization fails the run before guest code runs (`invalid_config`).
    fn open_namespaces(
        &self,
        ctx: &RunContext,
        run_id: &RunId,
        catalog: &Catalog,
        cancel: &AtomicBool,
    ) -> Result<Arc<dyn RunNamespaces>, CodeModeError> {
        let scope = &ctx.scope;
        let nctx = NamespaceContext {
            agent_id: scope.agent_id.as_deref(),
            session_key: scope.session_key.as_deref(),
            session_id: scope.session_id.as_deref(),
            run_id: run_id.as_str(),
            config: &self.config,
            abort: cancel,
        };
        self.namespaces
            .open(&nctx, catalog)
            .map_err(|e| CodeModeError::new(CodeModeErrorCode::InvalidConfig, e.to_string()))
    }

    pub(crate) fn exec(
        &self,
        rt: &Handle,
        ctx: &RunContext,
        input: &CodeModeExecInput,
        handles: CallHandles,
    ) -> CodeModeResult {
        // Engine preparation (loading or compiling a guest module) is never charged to the cell.
        let prepared = self.prepare_engine();
        let call = Call::new(self.config.timeout_ms, handles.cancel);
        let mut telemetry = self.base_telemetry();
        telemetry.exec_count = 1;
        let early = |err: CodeModeError, mut telemetry: CodeModeTelemetry| {
            telemetry.duration_ms = call.started.elapsed().as_millis() as u64;
            telemetry.returned_bytes = err.message.len() as u64;
            CodeModeResult::failed(err, Vec::new(), telemetry)
        };
        if !self.config.enabled {
            return early(
                CodeModeError::new(
                    CodeModeErrorCode::InvalidConfig,
                    "code mode is disabled (tools.codeMode.enabled is not true)",
                ),
                telemetry,
            );
        }
        let engine = match self.engine().and_then(|e| prepared.map(|()| e)) {
            Ok(e) => e.clone(),
            Err(e) => return early(e, telemetry),
        };
        let req = match input.validate(&self.config) {
            Ok(r) => r,
            Err(e) => return early(e, telemetry),
        };
        // Module patterns are refused before anything else (in TypeScript, before transpiling: an
        // import inside the cell would otherwise surface as a syntax error).
        if let Some(found) = find_module_access(&req.code) {
            return early(CodeModeError::new(CodeModeErrorCode::ModuleAccessDenied, found.message()), telemetry);
        }
        if let Some(message) = codemode_bridge::shell::looks_like_shell(&req.code) {
            return early(CodeModeError::new(CodeModeErrorCode::InvalidInput, message), telemetry);
        }
        let (code, source_map) = match req.language {
            Language::Javascript => (req.code, None),
            Language::Typescript => match crate::typescript::transpile(&req.code) {
                Ok(t) => (t.code, Some(t.positions)),
                Err(e) => return early(e, telemetry),
            },
        };
        let positions = CellPositions::of(&code, source_map);
        rt.block_on(self.sweep_if_due());
        let catalog = self.catalog_for(ctx);
        telemetry.catalog_size = catalog.catalog.len() as u32;
        telemetry.catalog_by_source = catalog.by_source.clone();
        let run_id = new_run_id();
        // contract L3–L5: the visible namespaces' scopes for this run, before any guest code runs.
        let namespaces = match self.open_namespaces(ctx, &run_id, &catalog.catalog, &call.cancel) {
            Ok(n) => n,
            Err(e) => return early(e, telemetry),
        };
        let texts = namespaces.guest_texts();
        let boot = catalog.boot.with_namespace_texts(
            namespaces.guest().iter().map(|ns| ns.global_name.as_str()).zip(texts.iter().map(String::as_str)),
        );
        drop(texts);
        let program = GuestProgram { code, boot };
        let instance = match engine.start(&program, &self.limits) {
            Ok(i) => i,
            Err(e) => return early(CodeModeError::new(e.code(), e.to_string()), telemetry),
        };
        let run = Run {
            id: run_id,
            policy: None,
            context: Arc::new(ctx.clone()),
            catalog: catalog.catalog.clone(),
            source: catalog.boot.source(),
            namespaces,
            restart_safe: req.restart_safe,
            telemetry,
            pending: run::PendingTable::default(),
            ready: Vec::new(),
            calls: NestedCalls::new(),
            created_at_ms: self.now_ms(),
            stored: false,
            logged: false,
            positions,
            observer: handles.observer,
            trace: self.trace_target(ctx, "exec"),
            loops: self.loop_history(rt, ctx),
            loop_warnings: Vec::new(),
            reissue: Vec::new(),
        };
        // `abort` reaches the run while this call drives it (`wait` registers before restoring).
        let _active = self.activate(&run.id, &call);
        self.drive_loop(rt, run, instance, call)
    }

    pub(crate) fn wait(
        &self,
        rt: &Handle,
        ctx: &RunContext,
        input: &CodeModeWaitInput,
        handles: CallHandles,
    ) -> CodeModeResult {
        let prepared = self.prepare_engine();
        let call = Call::new(self.config.timeout_ms, handles.cancel);
        let lookup_failure = |err: CodeModeError| {
            let mut t = self.base_telemetry();
            t.duration_ms = call.started.elapsed().as_millis() as u64;
            t.returned_bytes = err.message.len() as u64;
            CodeModeResult::failed(err, Vec::new(), t)
        };
        let run_id = match RunId::parse(&input.run_id) {
            Ok(id) => id,
            Err(e) => return lookup_failure(e),
        };
        let engine = match self.engine().and_then(|e| prepared.map(|()| e)) {
            Ok(e) => e.clone(),
            Err(e) => return lookup_failure(e),
        };
        rt.block_on(self.sweep_if_due());
        let suspended = match rt.block_on(self.store.checkout(&run_id, &ctx.scope)) {
            Ok(s) => s,
            Err(e) => return lookup_failure(e.to_code_mode_error()),
        };
        // A run resumes only under the policy it was started with (agent, provider, model,
        // sandbox): otherwise it goes back to the store untouched and the wait is refused.
        if let Err(e) = self.check_run_policy(&suspended, ctx) {
            if let Err(put) = rt.block_on(self.store.put(suspended)) {
                tracing::warn!(run = %run_id, error = %put, "cannot put back a run refused to a wait");
            }
            return lookup_failure(e);
        }
        let stored_policy = suspended.policy.clone().unwrap_or_default();
        let mut local = self.inflight().remove(&run_id);
        if self.store.fleet()
            && let Some(l) = local.take()
        {
            // On a fleet store the run may have moved through other replicas since this one
            // suspended it: its state comes from the store, and the calls this replica still runs
            // deliver through the call log like anyone else's.
            l.calls.detach();
        }
        let resumed_elsewhere = local.is_none();
        let (context, catalog, source, namespaces, calls, policy) = match local {
            // The run keeps its own context, except the model call now driving it: nested calls
            // this `wait` makes carry the wait's call id (transcript projection, contract U9).
            Some(l) => {
                let context = if l.context.tool_call_id == ctx.tool_call_id {
                    l.context
                } else {
                    Arc::new(RunContext { tool_call_id: ctx.tool_call_id.clone(), ..RunContext::clone(&l.context) })
                };
                let catalog = self.recheck_catalog(&l.catalog, ctx);
                let policy = if Arc::ptr_eq(&catalog, &l.catalog) {
                    stored_policy
                } else {
                    Inner::narrowed_policy(&stored_policy, &catalog)
                };
                (context, catalog, l.source, l.namespaces, l.calls, policy)
            }
            None => {
                // Resumed in a process that did not start it: this process's catalog for the
                // run's target, narrowed to the tools the run started with (a tool this process's
                // configuration adds is not the run's), and its namespace registrations (a
                // namespace no longer registered here fails its calls).
                let (current, policy) = self.resumed_catalog(self.catalog_for(ctx), &stored_policy);
                let (catalog, source) = (current.catalog.clone(), current.boot.source());
                let namespaces = match self.open_namespaces(ctx, &run_id, &catalog, &call.cancel) {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!(run = %run_id, error = %e, "namespaces unavailable for a resumed run");
                        Arc::new(NoNamespaces) as Arc<dyn RunNamespaces>
                    }
                };
                (Arc::new(ctx.clone()), catalog, source, namespaces, NestedCalls::new(), policy)
            }
        };
        let SuspendedRun { snapshot, pending, ready, restart_safe, mut telemetry, created_at_ms, positions, .. } =
            suspended;
        telemetry.wait_count += 1;
        let mut run = Run {
            id: run_id,
            policy: Some(Arc::new(policy)),
            context,
            catalog,
            source,
            namespaces,
            restart_safe,
            telemetry,
            pending: pending.into_iter().collect(),
            ready,
            calls,
            created_at_ms,
            stored: true,
            logged: false,
            positions,
            observer: handles.observer,
            trace: self.trace_target(ctx, "wait"),
            loops: self.loop_history(rt, ctx),
            loop_warnings: Vec::new(),
            reissue: Vec::new(),
        };
        let _active = self.activate(&run.id, &call);
        // The run must be resumable before anything of it happens: no approved or
        // re-issued call starts, and no result is taken, for a snapshot that will not restore.
        if let Err(e) = engine.verify(&snapshot) {
            run.telemetry.record_snapshot(SnapshotEventKind::RestoreFailed, None);
            discard(snapshot);
            return self.fail(rt, run, call, CodeModeError::new(e.code(), e.to_string()));
        }
        if resumed_elsewhere && let Err(e) = self.adopt_calls_from_elsewhere(rt, &mut run) {
            return self.fail(rt, run, call, e);
        }
        let yields: Vec<RequestId> =
            run.pending.values().filter(|p| p.kind() == RequestKind::Yield).map(|p| p.id).collect();
        for id in yields {
            run.accept(Finished::Settled(Delivery { id, outcome: Ok(Value::Null) }));
        }
        run.collect_finished();
        while run.ready.is_empty() {
            if run.parked() > 0
                && let Err(e) = self.apply_decisions(rt, &mut run)
            {
                return self.fail(rt, run, call, e);
            }
            run.collect_finished();
            if let Err(e) = self.start_reissues(rt, &mut run) {
                return self.fail(rt, run, call, e);
            }
            if !run.ready.is_empty() {
                break;
            }
            if run.calls.running() == 0 && run.parked() == 0 {
                let err = CodeModeError::new(CodeModeErrorCode::InternalError, MSG_NOTHING_TO_RESUME);
                return self.fail(rt, run, call, err);
            }
            // Wait for a call to settle, or (while calls are parked) poll for decisions recorded
            // meanwhile, by this process or another one.
            let until =
                if run.parked() > 0 { (Instant::now() + RECORDED_POLL).min(call.deadline) } else { call.deadline };
            match next_settled(&mut run, &call, until) {
                Next::Finished(f) => run.accept(f),
                Next::Cancelled => {
                    discard(snapshot);
                    return self.aborted(rt, run, call);
                }
                Next::Deadline if Instant::now() < call.deadline => {}
                // Nothing settled in time: the stored snapshot is still exact, keep it as it is.
                Next::Deadline => return self.store_suspended(rt, run, snapshot, call, WaitReason::PendingTools),
            }
        }
        let instance = match engine.restore(snapshot, &self.limits) {
            Ok(i) => i,
            Err(e) => {
                run.telemetry.record_snapshot(SnapshotEventKind::RestoreFailed, None);
                return self.fail(rt, run, call, CodeModeError::new(e.code(), e.to_string()));
            }
        };
        run.telemetry.record_snapshot(SnapshotEventKind::Restored, None);
        self.drive_loop(rt, run, instance, call)
    }
}

#[cfg(test)]
mod map {
    /// The module map at the top of this file names every module of the runtime, so a newcomer
    /// reading it finds each concern.
    #[test]
    fn the_map_names_every_module() {
        let source = include_str!("mod.rs");
        let (map, body) = source.split_once("\nmod ").unwrap_or((source, ""));
        let modules: Vec<&str> = std::iter::once(body)
            .chain(source.split("\nmod ").skip(2))
            .filter_map(|rest| rest.split_once(';').map(|(name, _)| name))
            .filter(|name| name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        assert!(modules.len() >= 10, "{modules:?}");
        for m in modules {
            assert!(map.contains(&format!("//! - `{m}`")), "the module map does not name `{m}`");
        }
    }
}
