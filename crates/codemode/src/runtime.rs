//! The exec/wait run state machine (SPEC §5–§6, DESIGN §5).
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

use crate::tools::{ToolHook, run_hooked};
use codemode_bridge::driver::TIMEOUT_MESSAGE;
use codemode_bridge::modules::find_module_access;
use codemode_catalog::{Catalog, CatalogTool};
use codemode_core::config::{CodeModeConfig, Language};
use codemode_core::engine::{
    BridgeRequest, Delivery, DriveInput, DriveOutcome, GuestEngine, GuestError, GuestFailure, GuestInstance,
    GuestLimits, GuestProgram, RequestId, RequestKind, Snapshot,
};
use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::executor::{NestedToolCall, ToolError, ToolErrorKind, ToolExecutor};
use codemode_core::guest::{CallMode, GuestRequest};
use codemode_core::input::{CodeModeExecInput, CodeModeWaitInput};
use codemode_core::positions::CellPositions;
use codemode_core::result::{CodeModeOutput, CodeModePendingToolCall, CodeModeResult, WaitReason, json_len};
use codemode_core::scope::{RunContext, RunId};
use codemode_core::store::{PendingRequest, SnapshotStore, StoreError, SuspendedRun};
use codemode_core::telemetry::{CodeModeTelemetry, SnapshotEventKind};
use codemode_snapshot::Clock;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::task::AbortHandle;

/// Message of the failure when a cell awaits something that nothing will ever settle.
pub const MSG_STALLED: &str =
    "the cell is waiting on a promise that nothing will settle (no nested calls are in flight)";

fn new_run_id() -> RunId {
    RunId::from_generated(format!("cm_{}", uuid::Uuid::new_v4().simple()))
}

/// Guest limits derived from the config.
pub fn guest_limits(config: &CodeModeConfig) -> GuestLimits {
    let base = GuestLimits::default();
    GuestLimits {
        memory_limit_bytes: config.memory_limit_bytes,
        max_delivery_bytes: base.max_delivery_bytes.min(config.memory_limit_bytes / 2),
        max_outstanding_requests: base.max_outstanding_requests.max(2 * config.max_pending_tool_calls as u32),
        ..base
    }
}

/// The nested calls of one run that are still executing on the host.
struct NestedCalls {
    tx: mpsc::Sender<Delivery>,
    rx: mpsc::Receiver<Delivery>,
    running: HashMap<RequestId, AbortHandle>,
}

impl NestedCalls {
    fn new() -> Self {
        let (tx, rx) = mpsc::channel();
        NestedCalls { tx, rx, running: HashMap::new() }
    }

    fn running(&self) -> usize {
        self.running.len()
    }

    /// Starts a call: polled once inline (a call that is ready at once is returned without any thread
    /// switch), otherwise handed to the tokio runtime, its result arriving on the channel later.
    fn start(
        &mut self,
        rt: &Handle,
        id: RequestId,
        fut: impl Future<Output = Result<Value, GuestError>> + Send + 'static,
    ) -> Option<Delivery> {
        let mut fut = Box::pin(fut);
        let _in_runtime = rt.enter();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(outcome) => Some(Delivery { id, outcome }),
            Poll::Pending => {
                let tx = self.tx.clone();
                let handle = rt.spawn(async move {
                    let outcome = fut.await;
                    let _ = tx.send(Delivery { id, outcome });
                });
                self.running.insert(id, handle.abort_handle());
                None
            }
        }
    }

    /// Waits for results another live process records in the store for calls it started (see
    /// [`SnapshotStore::claim_calls`]). Each id counts as running until its result arrives. If the
    /// claim goes away with results still missing (that process died), those calls fail.
    fn watch_recorded(
        &mut self,
        rt: &Handle,
        store: Arc<dyn SnapshotStore>,
        run_id: RunId,
        calls: Vec<(RequestId, String)>,
    ) {
        if calls.is_empty() {
            return;
        }
        let tx = self.tx.clone();
        let mut missing: BTreeMap<RequestId, String> = calls.iter().cloned().collect();
        let handle = rt.spawn(async move {
            loop {
                let claimed = store.calls_claimed(&run_id);
                for d in store.take_results(&run_id).await.unwrap_or_default() {
                    if missing.remove(&d.id).is_some() {
                        let _ = tx.send(d);
                    }
                }
                if missing.is_empty() {
                    return;
                }
                if !claimed {
                    for (id, tool_id) in std::mem::take(&mut missing) {
                        let message = format!(
                            "nested call to `{tool_id}` was lost: the process running it ended before it finished (its \
                             side effect may or may not have happened); call it again if that is safe"
                        );
                        let _ = tx.send(Delivery {
                            id,
                            outcome: Err(guest_error(CodeModeErrorCode::NestedToolFailed, message)),
                        });
                    }
                    return;
                }
                tokio::time::sleep(RECORDED_POLL).await;
            }
        });
        for (id, _) in calls {
            self.running.insert(id, handle.abort_handle());
        }
    }

    fn try_next(&mut self) -> Option<Delivery> {
        let d = self.rx.try_recv().ok()?;
        self.running.remove(&d.id);
        Some(d)
    }

    fn next_until(&mut self, deadline: Instant) -> Option<Delivery> {
        let d = self.rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok()?;
        self.running.remove(&d.id);
        Some(d)
    }

    fn abort_all(&mut self) {
        for (_, h) in self.running.drain() {
            h.abort();
        }
    }
}

impl Drop for NestedCalls {
    fn drop(&mut self) {
        self.abort_all();
    }
}

/// Drops a finished instance on another worker: tearing a VM down takes ~0.1 ms that no caller needs
/// to wait for.
fn dispose(instance: Box<dyn GuestInstance>) {
    if let Err(e) = codemode_bridge::workers::spawn(move || drop(instance)) {
        tracing::debug!(error = %e, "disposing an instance inline");
    }
}

/// How often a resumed run looks for results another process recorded in the store.
const RECORDED_POLL: Duration = Duration::from_millis(25);

/// Process-local state of a suspended run: what cannot be serialized.
struct Inflight {
    context: RunContext,
    catalog: Arc<Catalog>,
    calls: NestedCalls,
    /// This process's claim on the run's running calls (stores shared across processes).
    _claim: Option<codemode_core::store::CallsClaim>,
    expires_at_ms: u64,
}

/// The catalog of a run plus its cached boot data.
pub(crate) struct RunCatalog {
    pub(crate) catalog: Arc<Catalog>,
    boot: Arc<str>,
}

impl RunCatalog {
    pub(crate) fn new(catalog: Catalog, limits: &GuestLimits) -> Self {
        let boot = codemode_catalog::mcp_api::boot_data(&catalog, limits.max_json_depth);
        let boot = codemode_bridge::boot_json(&boot);
        RunCatalog { catalog: Arc::new(catalog), boot: boot.into() }
    }
}

pub(crate) struct Inner {
    pub(crate) config: CodeModeConfig,
    pub(crate) engine: Option<Arc<dyn GuestEngine>>,
    catalog: std::sync::RwLock<Arc<RunCatalog>>,
    pub(crate) executor: Arc<dyn ToolExecutor>,
    pub(crate) hooks: Vec<Arc<dyn ToolHook>>,
    pub(crate) store: Arc<dyn SnapshotStore>,
    pub(crate) limits: GuestLimits,
    pub(crate) clock: Arc<dyn Clock>,
    inflight: Mutex<HashMap<RunId, Inflight>>,
    /// Clock time of the last automatic sweep (see [`SWEEP_INTERVAL_MS`]).
    last_sweep_ms: std::sync::atomic::AtomicU64,
}

/// Shortest time between two automatic sweeps of the store at `exec` / `wait`. Sweeping a directory
/// store reads every run file, which must not happen on every call; expiry itself does not depend on
/// it (stores refuse expired runs at checkout and purge them before the capacity check of `put`).
const SWEEP_INTERVAL_MS: u64 = 1_000;

/// One run while an `exec` or `wait` call holds it.
struct Run {
    id: RunId,
    context: RunContext,
    catalog: Arc<Catalog>,
    restart_safe: bool,
    telemetry: CodeModeTelemetry,
    pending: BTreeMap<RequestId, PendingRequest>,
    ready: Vec<Delivery>,
    calls: NestedCalls,
    created_at_ms: u64,
    stored: bool,
    /// Maps error positions back to the cell's own source.
    positions: CellPositions,
}

/// Budget and output of one `exec` / `wait` call.
struct Call {
    started: Instant,
    deadline: Instant,
    output: Vec<CodeModeOutput>,
    output_used: u64,
}

impl Call {
    fn new(timeout_ms: u64) -> Self {
        let started = Instant::now();
        Call { started, deadline: started + Duration::from_millis(timeout_ms), output: Vec::new(), output_used: 0 }
    }
}

impl Run {
    fn accept(&mut self, d: Delivery) {
        if let Some(p) = self.pending.remove(&d.id)
            && p.kind().is_tool_call()
            && d.outcome.is_err()
        {
            self.telemetry.failed_call_count += 1;
        }
        self.ready.push(d);
    }

    fn collect_finished(&mut self) {
        while let Some(d) = self.calls.try_next() {
            self.accept(d);
        }
    }

    fn pending_tool_calls(&self, now: u64) -> Vec<CodeModePendingToolCall> {
        self.pending
            .values()
            .filter(|p| p.kind().is_tool_call())
            .map(|p| CodeModePendingToolCall {
                request_id: p.id,
                kind: p.kind(),
                tool_id: p.tool_id.clone().unwrap_or_default(),
                elapsed_ms: now.saturating_sub(p.issued_at_ms),
            })
            .collect()
    }
}

/// How [`Inner::drive_steps`] ended.
enum StepsEnd {
    /// The cell returned this value and nothing is outstanding.
    Complete(Value),
    /// The run fails.
    Fail(CodeModeError),
    /// The run is to be snapshotted and stored.
    Suspend(WaitReason),
}

/// A nested call about to start: the request, the catalog tool it resolved to, and how its result
/// reaches the guest.
struct CallSpec {
    id: RequestId,
    request: GuestRequest,
    tool: CatalogTool,
    mode: CallMode,
}

/// Finds the catalog tool a call request names: guest-visible tools for `tools.*`, MCP entries for
/// `MCP.*`. The error carries the id for telemetry.
fn resolve_tool(catalog: &Catalog, request: &GuestRequest) -> Result<(CatalogTool, CallMode), (String, GuestError)> {
    match request {
        GuestRequest::Mcp { server, tool, .. } => match catalog.mcp_tool(server, tool) {
            Some(t) => Ok((t.clone(), CallMode::Value)),
            None => {
                let err = guest_error(
                    CodeModeErrorCode::NestedToolFailed,
                    format!("unknown MCP tool `{tool}` of server `{server}`; see API.list(\"mcp\")"),
                );
                Err((codemode_core::catalog::catalog_id(codemode_core::ToolSource::Mcp, server, tool), err))
            }
        },
        GuestRequest::Call { id, mode, .. } => match catalog.guest_tool(id) {
            Some(t) => Ok((t.clone(), *mode)),
            None => Err((id.clone(), unknown_tool(id, CodeModeErrorCode::NestedToolFailed))),
        },
        other => Err((
            String::new(),
            guest_error(CodeModeErrorCode::InternalError, format!("`{}` is not a tool call", other.kind().as_str())),
        )),
    }
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
        catalog: Catalog,
        executor: Arc<dyn ToolExecutor>,
        hooks: Vec<Arc<dyn ToolHook>>,
        store: Arc<dyn SnapshotStore>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let limits = guest_limits(&config);
        let catalog = std::sync::RwLock::new(Arc::new(RunCatalog::new(catalog, &limits)));
        Inner {
            config,
            engine,
            catalog,
            executor,
            hooks,
            store,
            limits,
            clock,
            inflight: Mutex::new(HashMap::new()),
            last_sweep_ms: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The current catalog (runs keep the one they started with).
    pub(crate) fn catalog(&self) -> Arc<RunCatalog> {
        self.catalog.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the catalog for runs started from now on.
    pub(crate) fn set_catalog(&self, catalog: Catalog) {
        let next = Arc::new(RunCatalog::new(catalog, &self.limits));
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = next;
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
            catalog_by_source: catalog.catalog.count_by_source(),
            ..CodeModeTelemetry::default()
        }
    }

    /// Drops expired runs and stops their nested calls.
    /// Sweeps unless the last automatic sweep was less than [`SWEEP_INTERVAL_MS`] ago.
    async fn sweep_if_due(&self) {
        use std::sync::atomic::Ordering;
        let now = self.now_ms();
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= SWEEP_INTERVAL_MS;
        if due && self.last_sweep_ms.compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            self.sweep().await;
        }
    }

    pub(crate) async fn sweep(&self) {
        let expired = self.store.purge_expired().await;
        if !expired.is_empty() {
            let mut inflight = self.inflight();
            for id in &expired {
                inflight.remove(id);
            }
            tracing::debug!(count = expired.len(), "expired suspended code mode runs");
        }
    }

    pub(crate) async fn abort(&self, run_id: &RunId) -> bool {
        let local = self.inflight().remove(run_id).is_some();
        self.store.remove(run_id).await || local
    }

    pub(crate) async fn abort_scope(&self, scope: &codemode_core::RunScope) -> usize {
        let ids: Vec<RunId> =
            self.inflight().iter().filter(|(_, r)| r.context.scope == *scope).map(|(id, _)| id.clone()).collect();
        let mut aborted = 0;
        for id in ids {
            if self.abort(&id).await {
                aborted += 1;
            }
        }
        aborted
    }

    pub(crate) fn exec(&self, rt: &Handle, ctx: &RunContext, input: &CodeModeExecInput) -> CodeModeResult {
        // Engine preparation (loading or compiling a guest module) is never charged to the cell.
        let prepared = self.prepare_engine();
        let call = Call::new(self.config.timeout_ms);
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
        let catalog = self.catalog();
        let program = GuestProgram { code, boot: catalog.boot.clone() };
        let instance = match engine.start(&program, &self.limits) {
            Ok(i) => i,
            Err(e) => return early(CodeModeError::new(e.code(), e.to_string()), telemetry),
        };
        let run = Run {
            id: new_run_id(),
            context: ctx.clone(),
            catalog: catalog.catalog.clone(),
            restart_safe: req.restart_safe,
            telemetry,
            pending: BTreeMap::new(),
            ready: Vec::new(),
            calls: NestedCalls::new(),
            created_at_ms: self.now_ms(),
            stored: false,
            positions,
        };
        self.drive_loop(rt, run, instance, call)
    }

    pub(crate) fn wait(&self, rt: &Handle, ctx: &RunContext, input: &CodeModeWaitInput) -> CodeModeResult {
        let prepared = self.prepare_engine();
        let call = Call::new(self.config.timeout_ms);
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
        let local = self.inflight().remove(&run_id);
        let resumed_elsewhere = local.is_none();
        let (context, catalog, calls) = match local {
            Some(l) => (l.context, l.catalog, l.calls),
            None => (ctx.clone(), self.catalog().catalog.clone(), NestedCalls::new()),
        };
        let SuspendedRun { snapshot, pending, ready, restart_safe, mut telemetry, created_at_ms, positions, .. } =
            suspended;
        telemetry.wait_count += 1;
        let mut run = Run {
            id: run_id,
            context,
            catalog,
            restart_safe,
            telemetry,
            pending: pending.into_iter().map(|p| (p.id, p)).collect(),
            ready,
            calls,
            created_at_ms,
            stored: true,
            positions,
        };
        if resumed_elsewhere && let Err(e) = self.adopt_calls_from_elsewhere(rt, &mut run) {
            return self.fail(rt, run, call, e);
        }
        let yields: Vec<RequestId> =
            run.pending.values().filter(|p| p.kind() == RequestKind::Yield).map(|p| p.id).collect();
        for id in yields {
            run.accept(Delivery { id, outcome: Ok(Value::Null) });
        }
        run.collect_finished();
        if run.ready.is_empty() {
            if run.calls.running() == 0 {
                let err = CodeModeError::new(CodeModeErrorCode::InternalError, MSG_STALLED);
                return self.fail(rt, run, call, err);
            }
            match run.calls.next_until(call.deadline) {
                Some(d) => run.accept(d),
                // Nothing settled in time: the stored snapshot is still exact, keep it as it is.
                None => return self.store_suspended(rt, run, snapshot, call, WaitReason::PendingTools),
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

    /// A run resumed in a process that did not start its outstanding calls: results another process
    /// recorded are delivered; calls a live process still runs are awaited (their results will be
    /// recorded); the rest are lost and handled by [`reissue_lost_calls`](Self::reissue_lost_calls).
    fn adopt_calls_from_elsewhere(&self, rt: &Handle, run: &mut Run) -> Result<(), CodeModeError> {
        let claimed = self.store.calls_claimed(&run.id);
        let recorded = rt.block_on(self.store.take_results(&run.id)).map_err(|e| e.to_code_mode_error())?;
        for d in recorded {
            if run.pending.contains_key(&d.id) {
                run.accept(d);
            }
        }
        if claimed {
            let outstanding: Vec<(RequestId, String)> = run
                .pending
                .values()
                .filter(|p| p.kind().is_tool_call())
                .map(|p| (p.id, p.tool_id.clone().unwrap_or_default()))
                .collect();
            run.calls.watch_recorded(rt, self.store.clone(), run.id.clone(), outstanding);
            return Ok(());
        }
        self.reissue_lost_calls(rt, run)
    }

    /// Keeps this process's nested calls of suspended runs to completion and records their results
    /// in the store, for a process that will resume the runs (used before a short-lived process
    /// such as `codemode exec` exits). Each run's calls are awaited at most until the run expires.
    /// Returns how many results were recorded.
    pub(crate) fn finish_inflight(&self, rt: &Handle) -> usize {
        if self.store.accepts_live() {
            // A store for live VMs keeps runs in this process: nobody elsewhere can resume them.
            return 0;
        }
        let runs: Vec<(RunId, Inflight)> = self.inflight().drain().collect();
        let mut recorded = 0;
        for (id, mut inflight) in runs {
            let remaining_ms = inflight.expires_at_ms.saturating_sub(self.now_ms());
            let deadline = Instant::now() + Duration::from_millis(remaining_ms);
            while inflight.calls.running() > 0 {
                let Some(d) = inflight.calls.next_until(deadline) else { break };
                match rt.block_on(self.store.record_result(&id, &d)) {
                    Ok(true) => recorded += 1,
                    // A store that keeps runs in this process: nothing can resume them elsewhere.
                    Ok(false) => break,
                    Err(e) => tracing::warn!(run = %id, error = %e, "cannot record a nested call's result"),
                }
            }
            // Dropping `inflight` aborts what is still running and releases the claim.
        }
        recorded
    }

    /// Whether this process holds nested calls of suspended runs.
    pub(crate) fn has_inflight_calls(&self) -> bool {
        self.inflight().values().any(|r| r.calls.running() > 0)
    }

    /// After a resume in a process that did not issue them, outstanding calls are gone. Read-only
    /// tools are issued again; any other tool fails the run, since its side effect may or may not
    /// have happened. A result is never delivered twice: the old call's result died with its process.
    fn reissue_lost_calls(&self, rt: &Handle, run: &mut Run) -> Result<(), CodeModeError> {
        let lost: Vec<PendingRequest> = run.pending.values().filter(|p| p.kind().is_tool_call()).cloned().collect();
        if let Some(p) = lost.iter().find(|p| !p.read_only) {
            return Err(CodeModeError::new(
                CodeModeErrorCode::NestedToolFailed,
                format!(
                    "nested call to `{}` was still running when the process that suspended this run ended; the tool is not \
                     read-only, so it is not repeated (its side effect may or may not have happened)",
                    p.tool_id.as_deref().unwrap_or("?")
                ),
            ));
        }
        for p in lost {
            match resolve_tool(&run.catalog, &p.request) {
                Ok((tool, mode)) => self.start_call(rt, run, CallSpec { id: p.id, request: p.request, tool, mode }),
                Err((_, err)) => {
                    run.pending.remove(&p.id);
                    run.ready.push(Delivery { id: p.id, outcome: Err(err) });
                }
            }
        }
        Ok(())
    }

    fn drive_loop(
        &self,
        rt: &Handle,
        mut run: Run,
        mut instance: Box<dyn GuestInstance>,
        mut call: Call,
    ) -> CodeModeResult {
        match self.drive_steps(rt, &mut run, instance.as_mut(), &mut call) {
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
    fn drive_steps(&self, rt: &Handle, run: &mut Run, instance: &mut dyn GuestInstance, call: &mut Call) -> StepsEnd {
        let max_out = self.config.max_output_bytes;
        let mut completed: Option<Value> = None;
        loop {
            let input = DriveInput {
                deliveries: std::mem::take(&mut run.ready),
                deadline: call.deadline,
                output_budget: max_out.saturating_sub(call.output_used),
            };
            let report = match instance.drive(input) {
                Ok(report) => report,
                Err(e) => return StepsEnd::Fail(CodeModeError::new(e.code(), e.to_string())),
            };
            for item in report.output {
                call.output_used += item.cost() as u64;
                call.output.push(item);
            }
            match report.outcome {
                DriveOutcome::Failed(f) => return StepsEnd::Fail(failure_error(f)),
                DriveOutcome::Completed(v) => completed = Some(v),
                DriveOutcome::Pending => {}
            }
            let mut yielded = false;
            for req in report.requests {
                match self.handle_request(rt, run, req) {
                    Ok(y) => yielded |= y,
                    Err(e) => return StepsEnd::Fail(e),
                }
            }
            run.collect_finished();
            if completed.is_some() && run.calls.running() == 0 && run.ready.is_empty() {
                return StepsEnd::Complete(completed.take().unwrap_or(Value::Null));
            }
            if yielded {
                return StepsEnd::Suspend(WaitReason::Yield);
            }
            if !run.ready.is_empty() {
                if Instant::now() < call.deadline {
                    continue;
                }
                if run.calls.running() == 0 {
                    // Only instant answers are left (searches, lookups, calls that returned at
                    // once): the cell was busy, not waiting on slow tools. A `waiting` result must
                    // always name what it waits for.
                    return StepsEnd::Fail(CodeModeError::new(CodeModeErrorCode::Timeout, TIMEOUT_MESSAGE));
                }
                return StepsEnd::Suspend(WaitReason::PendingTools);
            }
            if run.calls.running() == 0 {
                return StepsEnd::Fail(CodeModeError::uncoded(MSG_STALLED));
            }
            match run.calls.next_until(call.deadline) {
                Some(d) => {
                    run.accept(d);
                    run.collect_finished();
                }
                None => return StepsEnd::Suspend(WaitReason::PendingTools),
            }
        }
    }

    /// Answers one bridge request. Returns whether it was a yield.
    fn handle_request(&self, rt: &Handle, run: &mut Run, req: BridgeRequest) -> Result<bool, CodeModeError> {
        let BridgeRequest { id, request } = req;
        match request {
            GuestRequest::Search { query, limit } => {
                run.telemetry.search_count += 1;
                let max = self.config.max_search_limit;
                let limit = match limit {
                    Some(n) if n.is_finite() => (n.max(1.0) as u64).min(max),
                    _ => self.config.search_default_limit,
                };
                let hits = run.catalog.search(&query, limit as usize);
                run.ready.push(Delivery { id, outcome: Ok(json!(hits)) });
            }
            GuestRequest::Describe { id: tool_id } => {
                run.telemetry.describe_count += 1;
                let outcome = match run.catalog.describe(&tool_id) {
                    Some(d) => Ok(json!(d)),
                    None => Err(unknown_tool(&tool_id, CodeModeErrorCode::InvalidInput)),
                };
                run.ready.push(Delivery { id, outcome });
            }
            request @ (GuestRequest::Call { .. } | GuestRequest::Mcp { .. }) => {
                let (tool, mode) = match resolve_tool(&run.catalog, &request) {
                    Ok(found) => found,
                    Err((tool_id, err)) => {
                        run.telemetry.record_call(&tool_id);
                        run.telemetry.failed_call_count += 1;
                        run.ready.push(Delivery { id, outcome: Err(err) });
                        return Ok(false);
                    }
                };
                run.telemetry.record_call(&tool.id);
                let refusal = if let Err(e) = tool.check_runnable() {
                    Some(e.to_string())
                } else if run.restart_safe && !tool.def.read_only {
                    Some(format!("`{}` has side effects; a restartSafe cell may only call read-only tools", tool.id))
                } else {
                    None
                };
                if let Some(msg) = refusal {
                    run.telemetry.failed_call_count += 1;
                    run.ready
                        .push(Delivery { id, outcome: Err(guest_error(CodeModeErrorCode::NestedToolFailed, msg)) });
                    return Ok(false);
                }
                if run.calls.running() >= self.config.max_pending_tool_calls as usize {
                    run.telemetry.limit_failures.pending_calls += 1;
                    return Err(CodeModeError::new(
                        CodeModeErrorCode::TooManyPendingToolCalls,
                        format!(
                            "too many nested tool calls in flight at once (maxPendingToolCalls is {}); await some before \
                             starting more",
                            self.config.max_pending_tool_calls
                        ),
                    ));
                }
                self.start_call(rt, run, CallSpec { id, request, tool, mode });
            }
            GuestRequest::McpApi { server, tool, schema } => {
                let outcome = codemode_catalog::mcp_api::api_header(&run.catalog, &server, tool.as_deref(), schema)
                    .ok_or_else(|| {
                        guest_error(
                            CodeModeErrorCode::InvalidInput,
                            format!(
                                "unknown MCP server or tool `{server}{}`; see API.list(\"mcp\")",
                                tool.as_deref().map(|t| format!(".{t}")).unwrap_or_default()
                            ),
                        )
                    });
                run.ready.push(Delivery { id, outcome });
            }
            request @ GuestRequest::Yield { .. } => {
                run.pending.insert(
                    id,
                    PendingRequest { id, tool_id: None, request, read_only: true, issued_at_ms: self.now_ms() },
                );
                return Ok(true);
            }
            other => {
                run.ready.push(Delivery {
                    id,
                    outcome: Err(guest_error(
                        CodeModeErrorCode::InvalidInput,
                        format!("unsupported bridge request `{}`", other.kind().as_str()),
                    )),
                });
            }
        }
        Ok(false)
    }

    /// Starts a nested call of a catalog tool on the host's executor.
    fn start_call(&self, rt: &Handle, run: &mut Run, spec: CallSpec) {
        let CallSpec { id, request, tool, mode } = spec;
        let raw = mode == CallMode::Raw;
        let input = request.tool_input().cloned().unwrap_or_else(|| json!({}));
        run.pending.insert(
            id,
            PendingRequest {
                id,
                tool_id: Some(tool.id.clone()),
                request,
                read_only: tool.def.read_only,
                issued_at_ms: self.now_ms(),
            },
        );
        let nested = NestedToolCall {
            run_id: run.id.clone(),
            request_id: id,
            tool_id: tool.id.clone(),
            tool: tool.def.clone(),
            input,
            context: run.context.clone(),
        };
        let executor = self.executor.clone();
        let hooks = self.hooks.clone();
        let tool_id = tool.id.clone();
        let contract = tool;
        let finished = run.calls.start(rt, id, async move {
            // SPEC D4: the declared output contract is checked after the hooks, before the value
            // reaches the guest; a mismatch fails the call and the value is never emitted.
            let outcome = run_hooked(&hooks, executor.as_ref(), nested).await.and_then(|r| {
                contract
                    .check_output(&r.details)
                    .map(|()| r)
                    .map_err(|m| ToolError::new(ToolErrorKind::OutputContract, m.to_string()))
            });
            match outcome {
                Ok(r) if raw => {
                    let content = if r.content.is_empty() {
                        vec![json!({ "type": "text", "text": r.details.to_string() })]
                    } else {
                        r.content
                    };
                    Ok(json!({ "details": r.details, "content": content }))
                }
                Ok(r) => Ok(r.details),
                Err(e) => Err(GuestError::new(
                    "ToolError",
                    format!("{tool_id}: {}", e.message),
                    Some(CodeModeErrorCode::NestedToolFailed),
                )),
            }
        });
        if let Some(d) = finished {
            run.accept(d);
        }
    }

    fn complete(&self, rt: &Handle, mut run: Run, mut call: Call, value: Value) -> CodeModeResult {
        let value_len = json_len(&value) as u64;
        if call.output_used + value_len > self.config.max_output_bytes {
            let err = CodeModeError::new(
                CodeModeErrorCode::OutputLimitExceeded,
                format!(
                    "output limit exceeded: output and return value take {} bytes; maxOutputBytes is {}",
                    call.output_used + value_len,
                    self.config.max_output_bytes
                ),
            );
            return self.fail(rt, run, call, err);
        }
        self.release(rt, &mut run);
        run.telemetry.duration_ms += call.started.elapsed().as_millis() as u64;
        CodeModeResult::Completed { value, output: std::mem::take(&mut call.output), telemetry: run.telemetry }
    }

    fn fail(&self, rt: &Handle, mut run: Run, call: Call, mut err: CodeModeError) -> CodeModeResult {
        err.message = run.positions.rewrite(&err.message);
        let limits = &mut run.telemetry.limit_failures;
        match err.code {
            Some(CodeModeErrorCode::Timeout) => limits.timeout += 1,
            Some(CodeModeErrorCode::MemoryLimitExceeded) => limits.memory += 1,
            Some(CodeModeErrorCode::OutputLimitExceeded) => limits.output += 1,
            Some(CodeModeErrorCode::SnapshotLimitExceeded) => limits.snapshot += 1,
            Some(CodeModeErrorCode::TooManyPendingToolCalls) if limits.pending_calls == 0 => limits.pending_calls += 1,
            _ => {}
        }
        tracing::debug!(run = %run.id, code = ?err.code, "code mode run failed");
        self.release(rt, &mut run);
        run.telemetry.duration_ms += call.started.elapsed().as_millis() as u64;
        CodeModeResult::failed(err, call.output, run.telemetry)
    }

    /// A settled run: its snapshot leaves the store at once and its nested calls stop.
    fn release(&self, rt: &Handle, run: &mut Run) {
        run.calls.abort_all();
        if run.stored && rt.block_on(self.store.remove(&run.id)) {
            run.telemetry.record_snapshot(SnapshotEventKind::Deleted, None);
        }
    }

    fn suspend(
        &self,
        rt: &Handle,
        mut run: Run,
        instance: Box<dyn GuestInstance>,
        call: Call,
        reason: WaitReason,
    ) -> CodeModeResult {
        let snapshot = match instance.snapshot() {
            Ok(s) => s,
            Err(e) => return self.fail(rt, run, call, CodeModeError::new(e.code(), e.to_string())),
        };
        let size = snapshot.size_bytes();
        if size > self.config.max_snapshot_bytes {
            run.telemetry.record_snapshot(SnapshotEventKind::Rejected, Some(size));
            let err = CodeModeError::new(
                CodeModeErrorCode::SnapshotLimitExceeded,
                format!("snapshot of {size} bytes exceeds maxSnapshotBytes ({})", self.config.max_snapshot_bytes),
            );
            discard(snapshot);
            return self.fail(rt, run, call, err);
        }
        if !snapshot.is_serialized() && !self.store.accepts_live() {
            let err = StoreError::LiveNotSupported(snapshot.engine.clone()).to_code_mode_error();
            discard(snapshot);
            return self.fail(rt, run, call, err);
        }
        run.telemetry.record_snapshot(SnapshotEventKind::Created, Some(size));
        self.store_suspended(rt, run, snapshot, call, reason)
    }

    fn store_suspended(
        &self,
        rt: &Handle,
        mut run: Run,
        snapshot: Snapshot,
        mut call: Call,
        reason: WaitReason,
    ) -> CodeModeResult {
        let mut telemetry = run.telemetry.clone();
        telemetry.duration_ms += call.started.elapsed().as_millis() as u64;
        let now = self.now_ms();
        let suspended = SuspendedRun {
            run_id: run.id.clone(),
            scope: run.context.scope.clone(),
            snapshot,
            reason,
            pending: run.pending.values().cloned().collect(),
            ready: std::mem::take(&mut run.ready),
            restart_safe: run.restart_safe,
            telemetry: telemetry.clone(),
            created_at_ms: run.created_at_ms,
            expires_at_ms: now.saturating_add(self.config.snapshot_ttl_seconds.saturating_mul(1000)),
            positions: run.positions.clone(),
        };
        let pending_tool_calls = run.pending_tool_calls(now);
        if let Err(e) = rt.block_on(self.store.put(suspended)) {
            run.telemetry.record_snapshot(SnapshotEventKind::Rejected, None);
            return self.fail(rt, run, call, e.to_code_mode_error());
        }
        run.telemetry = telemetry;
        run.stored = true;
        let claim = if run.calls.running() > 0 {
            match self.store.claim_calls(&run.id) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(run = %run.id, error = %e, "cannot claim nested calls in the store");
                    None
                }
            }
        } else {
            None
        };
        let expires_at_ms = now.saturating_add(self.config.snapshot_ttl_seconds.saturating_mul(1000));
        let Run { id, context, catalog, calls, telemetry, .. } = run;
        self.inflight().insert(id.clone(), Inflight { context, catalog, calls, _claim: claim, expires_at_ms });
        CodeModeResult::Waiting {
            run_id: id.to_string(),
            reason,
            pending_tool_calls,
            output: std::mem::take(&mut call.output),
            telemetry,
        }
    }
}
