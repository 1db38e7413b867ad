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
//! ([`codemode_bridge::workers`]), never on the async executor. Engines run guest code inline there,
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
//! The code is split by concern: this file holds the exec/wait/drive loop; `run` the run state;
//! `gates` the checks of nested calls; `calls` the nested calls (starting, collecting, handing over
//! between processes); `dispatch` the answer to each typed guest request; `suspend` the three ways
//! a call ends (completed, failed, suspended into the store); `lifecycle` sweeps, aborts and
//! lifecycle records; `loops` each session's loop-detection history (shared through a fleet's
//! store); `observed` the learned result types.

mod calls;
mod dispatch;
mod gates;
mod inline;
mod lifecycle;
mod loops;
mod observed;
mod policy;
mod portable;
mod run;
mod suspend;

use crate::tools::ToolHook;
use calls::{Finished, NestedCalls};
use codemode_bridge::driver::TIMEOUT_MESSAGE;
use codemode_bridge::modules::find_module_access;
use codemode_catalog::Catalog;
use codemode_catalog::approval::ApprovalPolicy;
use codemode_catalog::loops::{History, LoopPolicy};
use codemode_catalog::sandbox::SandboxPolicy;
use codemode_core::approval::Approver;
use codemode_core::config::{CodeModeConfig, Language};
use codemode_core::engine::{
    BootSource, Delivery, DriveInput, DriveOutcome, GuestEngine, GuestError, GuestFailure, GuestInstance, GuestLimits,
    GuestProgram, RequestId, RequestKind, Snapshot,
};
use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::executor::{RunEvent, RunObserver, ToolExecutor};
use codemode_core::input::{CodeModeExecInput, CodeModeWaitInput};
use codemode_core::namespace::{NamespaceContext, NamespaceRegistry, NoNamespaces, RunNamespaces};
use codemode_core::positions::CellPositions;
use codemode_core::result::{CodeModeOutput, CodeModeResult, WaitReason};
use codemode_core::scope::{RunContext, RunId};
use codemode_core::store::{SnapshotStore, SuspendedRun};
use codemode_core::telemetry::{CodeModeTelemetry, SnapshotEventKind};
use codemode_core::trajectory::Redaction;
use codemode_snapshot::Clock;
use observed::Observations;
use run::Run;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

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
    if let Err(e) = codemode_bridge::workers::after_job(move || drop(instance)) {
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

/// The catalog of a run plus its cached boot data.
pub(crate) struct RunCatalog {
    pub(crate) catalog: Arc<Catalog>,
    boot: codemode_bridge::BootText,
    /// Tools per source (telemetry of every call; counted once per catalog).
    by_source: std::collections::BTreeMap<String, u32>,
    /// The [`Observations::generation`] its `.d.ts` files state.
    observed_generation: u64,
}

impl RunCatalog {
    pub(crate) fn new(
        catalog: Catalog,
        limits: &GuestLimits,
        approvals: &ApprovalPolicy,
        observed: Option<&Observations>,
    ) -> Self {
        let (docs, observed_generation) = match observed {
            Some(o) => (o.docs(), o.generation()),
            None => (Default::default(), 0),
        };
        let mut boot = codemode_catalog::mcp_api::boot_data_with(&catalog, limits.max_json_depth, &docs);
        if !approvals.is_off() {
            boot.gated = catalog
                .tools()
                .iter()
                .filter(|t| approvals.reason(&t.def).is_some())
                .map(|t| t.id.to_string())
                .collect();
        }
        let boot = codemode_bridge::BootText::new(&boot);
        let by_source = catalog.count_by_source();
        RunCatalog { catalog: Arc::new(catalog), boot, by_source, observed_generation }
    }

    /// Whether its `.d.ts` files state an older learned type than `observed` holds now.
    fn stale(&self, observed: Option<&Observations>) -> bool {
        observed.is_some_and(|o| o.generation() != self.observed_generation)
    }
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

/// Most run traces kept. Prevents: runs nobody resumes growing the map (an arbitrary entry goes).
const MAX_RUN_TRACES: usize = 4_096;

/// Most per-target catalogs kept. Prevents: a stream of made-up agent, provider or model names
/// growing the cache without bound.
const MAX_TARGET_CATALOGS: usize = 256;

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

/// Where a run's trajectory records go while one `exec` / `wait` call drives it.
pub(crate) struct TraceTarget {
    /// The model-visible call driving the run (`RunContext::tool_call_id` of that call).
    pub(crate) parent: Option<String>,
    /// `exec` or `wait`.
    pub(crate) parent_tool: &'static str,
    /// The runtime-wide trajectory sink (audit log), if any.
    pub(crate) sink: Option<Arc<dyn RunObserver>>,
    pub(crate) redaction: Arc<Redaction>,
    pub(crate) clock: Arc<dyn Clock>,
}

/// Budget and output of one `exec` / `wait` call.
struct Call {
    started: Instant,
    deadline: Instant,
    output: Vec<CodeModeOutput>,
    output_used: u64,
    /// Set when the call is cancelled: its caller went away, or the run was aborted.
    cancel: Arc<AtomicBool>,
}

/// What an `exec` / `wait` call brings besides its input: its cancel flag and who watches it.
pub(crate) struct CallHandles {
    pub(crate) cancel: Arc<AtomicBool>,
    pub(crate) observer: Option<Arc<dyn RunObserver>>,
}

impl Call {
    fn new(timeout_ms: u64, cancel: Arc<AtomicBool>) -> Self {
        let started = Instant::now();
        Call {
            started,
            deadline: started + Duration::from_millis(timeout_ms),
            output: Vec::new(),
            output_used: 0,
            cancel,
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// How often a call waiting on nested calls looks at its cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// What waiting for the next settled call found.
enum Next {
    Finished(Finished),
    Deadline,
    Cancelled,
}

/// How [`Inner::drive_steps`] ended.
enum StepsEnd {
    /// The cell returned this value and nothing is outstanding.
    Complete(Value),
    /// The run fails.
    Fail(CodeModeError),
    /// The run is to be snapshotted and stored.
    Suspend(WaitReason),
    /// The call was cancelled: the run is aborted.
    Abort,
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

    /// The trace a run's `exec` started (see [`Inner::remember_run_trace`]).
    pub(crate) fn run_trace(&self, run_id: &str) -> Option<String> {
        self.run_traces.lock().unwrap_or_else(|p| p.into_inner()).get(run_id).cloned()
    }

    /// Remembers the trace of a suspended run's `exec`.
    pub(crate) fn remember_run_trace(&self, run_id: &str, traceparent: String) {
        let mut traces = self.run_traces.lock().unwrap_or_else(|p| p.into_inner());
        if traces.len() >= MAX_RUN_TRACES
            && !traces.contains_key(run_id)
            && let Some(k) = traces.keys().next().cloned()
        {
            traces.remove(&k);
        }
        traces.insert(run_id.to_string(), traceparent);
    }

    /// Forgets a settled run's trace.
    pub(crate) fn forget_run_trace(&self, run_id: &str) {
        self.run_traces.lock().unwrap_or_else(|p| p.into_inner()).remove(run_id);
    }

    /// The current catalog (runs keep the one they started with).
    pub(crate) fn catalog(&self) -> Arc<RunCatalog> {
        let current = self.catalog.read().unwrap_or_else(|p| p.into_inner()).clone();
        if !current.stale(self.observed.as_deref()) {
            return current;
        }
        // A learned result type widened: the next run's `.d.ts` files state it.
        let next = Arc::new(RunCatalog::new(
            (*current.catalog).clone(),
            &self.limits,
            &self.approvals,
            self.observed.as_deref(),
        ));
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = next.clone();
        next
    }

    /// Replaces the catalog for runs started from now on (the default target's; the other targets'
    /// are built again when next needed).
    pub(crate) fn set_catalog(&self, catalog: Catalog) {
        // A new catalog version: what a tool returns is learned anew when its definition changed or
        // it went away. The others keep what was learned: an upstream server announcing tools it
        // registers after the handshake must not erase what its unchanged tools were seen to return.
        if let Some(o) = &self.observed {
            let before = self.catalog.read().unwrap_or_else(|p| p.into_inner()).catalog.clone();
            let mut map = o.map.lock().unwrap_or_else(|p| p.into_inner());
            let len = map.len();
            map.retain(|id, _| match (before.get(id), catalog.get(id)) {
                (Some(old), Some(new)) => old.def == new.def,
                _ => false,
            });
            if map.len() != len {
                o.generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let next = Arc::new(RunCatalog::new(catalog, &self.limits, &self.approvals, self.observed.as_deref()));
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = next;
        self.target_catalogs.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// The catalog a resumed run keeps for this `wait`: the tools it started with (ids are stable
    /// within a run) that the policy still allows the wait's context, each as the catalog defines
    /// it now — so approved and re-issued calls meet their gates against the tool's current
    /// definition. Costs a pointer comparison when nothing changed.
    fn recheck_catalog(&self, started: &Arc<Catalog>, ctx: &RunContext) -> Arc<Catalog> {
        let now = self.catalog_for(ctx);
        if Arc::ptr_eq(started, &now.catalog) {
            return started.clone();
        }
        let kept: Vec<codemode_core::ToolDefinition> =
            now.catalog.tools().iter().filter(|t| started.get(&t.id).is_some()).map(|t| (*t.def).clone()).collect();
        if kept.len() == now.catalog.len() {
            return now.catalog.clone();
        }
        Arc::new(Catalog::build(kept).with_unavailable_mcp_servers(now.catalog.unavailable_mcp_servers().clone()))
    }

    /// The catalog a run of `ctx` sees (the policy is per agent): the
    /// tool policy applied for the context's agent, provider and model. The default target's
    /// catalog serves every run when there is no policy or the context names no other target, so
    /// the single-agent case costs nothing; other targets' catalogs are built once and cached.
    pub(crate) fn catalog_for(&self, ctx: &RunContext) -> Arc<RunCatalog> {
        if !self.inputs.has_policy() {
            return self.catalog();
        }
        let target = self.inputs.target_of(ctx);
        if &target == self.inputs.default_target() {
            return self.catalog();
        }
        if let Some(c) = self.target_catalogs.lock().unwrap_or_else(|p| p.into_inner()).get(&target)
            && !c.stale(self.observed.as_deref())
        {
            return c.clone();
        }
        let built = Arc::new(RunCatalog::new(
            self.inputs.catalog_for(&target),
            &self.limits,
            &self.approvals,
            self.observed.as_deref(),
        ));
        let mut cache = self.target_catalogs.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_TARGET_CATALOGS
            && let Some(k) = cache.keys().next().cloned()
        {
            cache.remove(&k);
        }
        cache.insert(target, built.clone());
        built
    }

    fn now_ms(&self) -> u64 {
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

    fn drive_loop(
        &self,
        rt: &Handle,
        run: Run,
        mut instance: Box<dyn GuestInstance>,
        mut call: Call,
    ) -> CodeModeResult {
        let (run, end) = match self.drive_steps(rt, run, instance.as_mut(), &mut call) {
            Ok(driven) => driven,
            Err(lost) => {
                // Never expected (see `InlineAnswers::take_run`): the run's state is gone, so
                // there is nothing to store or release; the call fails rather than hang.
                dispose(instance);
                let output = std::mem::take(&mut call.output);
                return CodeModeResult::failed(lost, output, CodeModeTelemetry::default());
            }
        };
        match end {
            StepsEnd::Abort => {
                dispose(instance);
                self.aborted(rt, run, call)
            }
            StepsEnd::Suspend(reason) => self.suspend(rt, run, instance, call, reason),
            StepsEnd::Complete(value) => {
                dispose(instance);
                self.complete(rt, run, call, value)
            }
            StepsEnd::Fail(err) => {
                dispose(instance);
                self.fail(rt, run, call, err)
            }
        }
    }

    /// Drives the guest until it completes, fails, yields, or waits past the deadline.
    ///
    /// The run is handed back with how the steps ended; `Err` only if a step's answerer did not
    /// give it back (never expected).
    fn drive_steps(
        &self,
        rt: &Handle,
        mut run: Run,
        instance: &mut dyn GuestInstance,
        call: &mut Call,
    ) -> Result<(Run, StepsEnd), CodeModeError> {
        let end = |run: Run, end: StepsEnd| Ok((run, end));
        let max_out = self.config.max_output_bytes;
        let mut completed: Option<Value> = None;
        // The answerer of every step of this call; the run is lent to it while the guest runs
        // (see `inline`).
        let answers =
            self.me.upgrade().map(|me| Arc::new(inline::InlineAnswers::new(me, rt, call.deadline, &call.cancel)));
        loop {
            if call.cancelled() {
                return end(run, StepsEnd::Abort);
            }
            let mut input = DriveInput {
                deliveries: std::mem::take(&mut run.ready),
                deadline: call.deadline,
                output_budget: max_out.saturating_sub(call.output_used),
                cancel: Some(call.cancel.clone()),
                boot_source: Some(run.source.clone()),
                answerer: None,
            };
            let (driven, back) = match &answers {
                Some(answers) => {
                    answers.lend(run);
                    input.answerer = Some(answers.clone());
                    let driven = instance.drive(input);
                    (driven, answers.take_run())
                }
                None => (instance.drive(input), Some(run)),
            };
            run = match back {
                Some(run) => run,
                None => return Err(CodeModeError::new(CodeModeErrorCode::InternalError, MSG_RUN_LOST)),
            };
            let report = match driven {
                Ok(report) => report,
                Err(e) => return end(run, StepsEnd::Fail(CodeModeError::new(e.code(), e.to_string()))),
            };
            // Interrupted because the run was aborted, not because time ran out.
            if call.cancelled() {
                return end(run, StepsEnd::Abort);
            }
            for item in report.output {
                call.output_used += item.cost() as u64;
                run.emit(|| RunEvent::Output { run_id: run.id.to_string(), item: item.clone() });
                call.output.push(item);
            }
            match report.outcome {
                DriveOutcome::Failed(f) => return end(run, StepsEnd::Fail(failure_error(f))),
                DriveOutcome::Completed(v) => completed = Some(v),
                DriveOutcome::Pending => {}
            }
            let mut yielded = false;
            for req in report.requests {
                match self.handle_request(rt, &mut run, req) {
                    Ok(y) => yielded |= y,
                    Err(e) => return end(run, StepsEnd::Fail(e)),
                }
            }
            // Loop-detection warnings are output the model sees (contract §22).
            for text in std::mem::take(&mut run.loop_warnings) {
                let item = CodeModeOutput::Text { text };
                call.output_used += item.cost() as u64;
                run.emit(|| RunEvent::Output { run_id: run.id.to_string(), item: item.clone() });
                call.output.push(item);
            }
            run.collect_finished();
            if let Err(e) = self.start_reissues(rt, &mut run) {
                return end(run, StepsEnd::Fail(e));
            }
            // A parked call is outstanding like a running one: the run completes only once it has
            // been decided (and, if approved, has run).
            let outstanding = run.calls.running() + run.parked();
            if completed.is_some() && outstanding == 0 && run.ready.is_empty() {
                return end(run, StepsEnd::Complete(completed.take().unwrap_or(Value::Null)));
            }
            if yielded {
                return end(run, StepsEnd::Suspend(WaitReason::Yield));
            }
            if !run.ready.is_empty() {
                if Instant::now() < call.deadline {
                    continue;
                }
                if outstanding == 0 {
                    // Only instant answers are left (searches, lookups, calls that returned at
                    // once): the cell was busy, not waiting on slow tools. A `waiting` result must
                    // always name what it waits for.
                    return end(run, StepsEnd::Fail(CodeModeError::new(CodeModeErrorCode::Timeout, TIMEOUT_MESSAGE)));
                }
                return end(run, StepsEnd::Suspend(WaitReason::PendingTools));
            }
            if run.calls.running() == 0 {
                if run.parked() > 0 {
                    // Only calls waiting for a human are left: suspend now (the decision comes
                    // through `decide`, and the next `wait` applies it).
                    return end(run, StepsEnd::Suspend(WaitReason::PendingTools));
                }
                return end(run, StepsEnd::Fail(CodeModeError::uncoded(MSG_STALLED)));
            }
            match next_settled(&mut run, call, call.deadline) {
                Next::Finished(f) => {
                    run.accept(f);
                    run.collect_finished();
                    if let Err(e) = self.start_reissues(rt, &mut run) {
                        return end(run, StepsEnd::Fail(e));
                    }
                }
                Next::Cancelled => return end(run, StepsEnd::Abort),
                Next::Deadline => return end(run, StepsEnd::Suspend(WaitReason::PendingTools)),
            }
        }
    }
}

/// Waits until a nested call settles or parks, `until` passes, or the call is cancelled (looked at
/// every [`CANCEL_POLL`]).
fn next_settled(run: &mut Run, call: &Call, until: Instant) -> Next {
    loop {
        if call.cancelled() {
            return Next::Cancelled;
        }
        let now = Instant::now();
        if now >= until {
            return Next::Deadline;
        }
        if let Some(f) = run.calls.next_until((now + CANCEL_POLL).min(until)) {
            return Next::Finished(f);
        }
    }
}
