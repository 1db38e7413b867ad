//! # codemode
//!
//! Code mode for LLM agents. Instead of hundreds of tool schemas, the model sees two tools, `exec`
//! and `wait`. It writes a short JavaScript program; the program runs in a sandbox that treats it as
//! hostile, and every real tool is a function reachable only through a narrow JSON bridge. A program
//! waiting on slow tools is suspended as a VM snapshot and resumed later by `wait`.
//!
//! This is the facade and runtime crate: [`CodeMode::exec`] / [`CodeMode::wait`] implement contract §5–§6
//! over a [`GuestEngine`] chosen by name ([`Engines`]), a catalog of tools ([`LocalTools`] and/or the
//! host's own [`ToolExecutor`]), [`ToolHook`]s, plugin namespaces ([`Namespaces`], contract §10: guest
//! globals such as `Shipping.unpaid()` whose calls are catalog calls), and a [`SnapshotStore`].
//!
//! ```no_run
//! # async fn demo() {
//! use codemode::{CodeMode, CodeModeConfig, CodeModeExecInput, RunContext};
//! let cm = CodeMode::builder(CodeModeConfig::enabled())
//!     .engine_name("quickjs-wasi")
//!     .local_tools(codemode::LocalTools::new()) // your tools
//!     .build();
//! let ctx = RunContext::session("s1");
//! let result = cm.exec(&ctx, &CodeModeExecInput::code("return 1 + 1")).await;
//! assert_eq!(result.status(), "completed");
//! # }
//! ```
//!
//! Layering (docs/src/layout.md): the top library layer. Depends on core, bridge, catalog, namespaces, snapshot and — by
//! Cargo feature — the engines.
#![forbid(unsafe_code)]

pub mod audit;
mod auto_wait;
mod builder;
pub mod config_file;
mod engines;
#[cfg(feature = "otel")]
pub mod otel;
mod runtime;
mod spans;
pub mod surface;
mod then;
pub mod tools;
pub mod typescript;

pub use codemode_catalog::Catalog;
pub use codemode_catalog::approval::ApprovalPolicy;
pub use codemode_catalog::loops::{LoopConfig, LoopPolicy};
pub use codemode_catalog::policy::{PolicyContext, PolicyTarget, ToolPolicy};
pub use codemode_catalog::sandbox::SandboxPolicy;
pub use codemode_core::approval::{ApprovalDecision, ApprovalRequest, Approver};
pub use codemode_core::executor::{
    CODE_MODE_TOOL_KIND, CodeModeCallEvent, NestedToolCall, RunEvent, RunObserver, TaskNoteSink, ToolError,
    ToolErrorKind, ToolResult,
};
pub use codemode_core::namespace::{NamespaceInfo, NamespaceOwner, NamespaceRegistry};
pub use codemode_core::result::PendingCallKind;
pub use codemode_core::telemetry::SnapshotEventKind;
pub use codemode_core::text;
/// Trajectory records (transcript entries of nested calls) and their redaction policy.
pub use codemode_core::trajectory;
pub use codemode_core::{
    CodeModeConfig, CodeModeError, CodeModeErrorCode, CodeModeExecInput, CodeModeOutput, CodeModeResult,
    CodeModeTelemetry, CodeModeWaitInput, GuestEngine, Language, RunContext, RunId, RunPolicy, RunScope, SnapshotStore,
    ToolDefinition, ToolExecutor, ToolId, ToolSource,
};
/// The namespace registry crate (contract §10): registration, scopes, name rules, config namespaces.
pub use codemode_namespaces as namespaces;
pub use codemode_namespaces::{
    NamespaceRegistration, NamespaceTool, Namespaces, RegisterError as NamespaceRegisterError, ScopeValue,
    namespace_tool, namespace_tool_with,
};
pub use codemode_snapshot::{Clock, DirectorySnapshotStore, ManualClock, MemorySnapshotStore, SystemClock};
pub use codemode_workers::THREAD_NAME as GUEST_THREAD_NAME;
/// The permit a host's caller takes to look for a run's answer a moment instead of sleeping until
/// woken (see [`codemode_workers::answer_spin`]), and the test of an idle core it and other short
/// spins rest on; for language packages whose caller is an event loop's thread.
pub use codemode_workers::{AnswerSpin, answer_spin, core_idle};
pub use tools::{FnTool, LocalTools, Tool, ToolHook};

/// The idempotency key of a nested call: `<runId>/<requestId>`. It is the same when the call is
/// issued again (the process running it was lost) or replayed (a fleet replica resumes the run
/// from its last snapshot and the cell makes the call again): a downstream service that keeps the
/// keys it has seen can make its side effect happen once. Upstream MCP servers get it in the
/// `_meta` of `tools/call` as [`IDEMPOTENCY_META_KEY`]; Python and Node tools in their call info.
pub fn idempotency_key(call: &codemode_core::NestedToolCall) -> String {
    format!("{}/{}", call.run_id, call.request_id)
}

/// The `_meta` key of an upstream `tools/call` carrying [`idempotency_key`].
pub const IDEMPOTENCY_META_KEY: &str = "io.codemode/idempotencyKey";

pub use auto_wait::AutoWait;
use builder::BuildInputs;
pub use builder::CodeModeBuilder;
pub use engines::{Engines, RegisterError};
use runtime::Inner;
use spans::{ControlEnd, control_span, link_span, record_result, span_traceparent};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
pub use then::CallHandle;

/// A worker job's answer. While a core is idle (see [`codemode_workers::answer_spin`]) the
/// caller looks for it between yields to its executor for up to
/// [`ANSWER_SPIN`](codemode_workers::ANSWER_SPIN) — never blocking the thread: other tasks
/// run between looks — instead of sleeping until the worker wakes it; then it waits as usual.
async fn answer<T>(mut rx: tokio::sync::oneshot::Receiver<T>) -> Result<T, tokio::sync::oneshot::error::RecvError> {
    use tokio::sync::oneshot::error::TryRecvError;
    if let Some(mut spin) = codemode_workers::answer_spin() {
        loop {
            match rx.try_recv() {
                Ok(v) => return Ok(v),
                Err(TryRecvError::Closed) => break,
                Err(TryRecvError::Empty) if spin.keep_going() => tokio::task::yield_now().await,
                Err(TryRecvError::Empty) => break,
            }
        }
    }
    rx.await
}

/// Cancels an `exec` / `wait` whose future is dropped before it finished (see `CodeMode::on_worker`).
struct CancelOnDrop {
    flag: Arc<AtomicBool>,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// What [`CodeMode::control_begin`] started.
struct ControlStart {
    started: std::time::Instant,
    span: tracing::Span,
    run_trace: Option<String>,
    run_id: Option<String>,
}

/// The result of a call made outside a tokio runtime.
fn no_runtime(e: tokio::runtime::TryCurrentError) -> CodeModeResult {
    CodeModeResult::failed(
        CodeModeError::new(CodeModeErrorCode::InternalError, format!("code mode must run inside a tokio runtime: {e}")),
        Vec::new(),
        CodeModeTelemetry::default(),
    )
}

/// Routes nested calls: local tools by id, everything else to the host's executor.
struct Router {
    local: LocalTools,
    host: Option<Arc<dyn ToolExecutor>>,
}

/// Written out instead of with `#[async_trait]` (this is the signature that macro gives the
/// trait's method): routing awaits nothing of its own, so it hands on the chosen executor's future,
/// already boxed, instead of boxing another one around it (a copy of the call into a new
/// allocation, per nested call).
impl ToolExecutor for Router {
    fn call<'life0, 'async_trait>(
        &'life0 self,
        call: NestedToolCall,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<ToolResult, ToolError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        match &self.host {
            Some(host) if !self.local.contains(&call.tool_id) => host.call(call),
            _ => self.local.call(call),
        }
    }
}

/// The code-mode runtime: `exec` and `wait` (contract §5).
///
/// Cheap to clone; clones share suspended runs.
#[derive(Clone)]
pub struct CodeMode {
    inner: Arc<Inner>,
    extra: Arc<BuildInputs>,
    auto_wait: AutoWait,
}

impl std::fmt::Debug for CodeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeMode")
            .field("engine", &self.engine_name())
            .field("catalog_size", &self.inner.catalog().catalog.len())
            .field("store", &self.inner.store.name())
            .finish()
    }
}

impl CodeMode {
    /// Starts building a runtime with `config`.
    pub fn builder(config: CodeModeConfig) -> CodeModeBuilder {
        CodeModeBuilder::new(config)
    }

    /// Runs one cell (contract §5.1). Never panics on hostile input; every problem is a `failed` result.
    ///
    /// The call runs on a guest worker thread (never on the async executor) and must be awaited
    /// inside a tokio runtime, where nested calls that really wait are spawned.
    pub async fn exec(&self, ctx: &RunContext, input: &CodeModeExecInput) -> CodeModeResult {
        self.exec_observed(ctx, input, None).await
    }

    /// [`Self::exec`], reporting the run's events (nested calls started, finished or parked; output as
    /// each drive step produces it) to `observer` while it runs (contract P8).
    pub async fn exec_observed(
        &self,
        ctx: &RunContext,
        input: &CodeModeExecInput,
        observer: Option<Arc<dyn RunObserver>>,
    ) -> CodeModeResult {
        let event = || CodeModeCallEvent {
            tool_name: crate::surface::EXEC.to_string(),
            tool_kind: CODE_MODE_TOOL_KIND,
            tool_input_kind: Some(input.language.clone().unwrap_or_else(|| "javascript".to_string())),
            run_id: None,
            context: ctx.clone(),
        };
        if let Some(refused) = self.outer_hooks(event).await {
            return refused;
        }
        let started = std::time::Instant::now();
        let (ctx2, input) = (ctx.clone(), input.clone());
        let r = self
            .control_call(crate::surface::EXEC, ctx, None, observer.clone(), move |inner, rt, handles| {
                inner.exec(rt, &ctx2, &input, handles)
            })
            .await;
        self.keep_waiting(ctx, r, started, observer).await
    }

    /// One `exec` / `wait` call on a guest worker, inside its span, with its start and end
    /// trajectory records. `run_id` is the run a `wait` names (an `exec` learns it from a
    /// `waiting` result).
    async fn control_call(
        &self,
        tool: &'static str,
        ctx: &RunContext,
        run_id: Option<String>,
        observer: Option<Arc<dyn RunObserver>>,
        f: impl FnOnce(&Inner, &tokio::runtime::Handle, runtime::CallHandles) -> CodeModeResult + Send + 'static,
    ) -> CodeModeResult {
        let start = self.control_begin(tool, ctx, run_id, observer.as_ref());
        // Until the call ends, dropping it (its caller went away: the run is aborted) still closes
        // its control record and marks its span.
        let mut end = ControlEnd {
            cm: self,
            ctx,
            tool,
            run_id: start.run_id.clone(),
            started: start.started,
            observer: observer.as_ref(),
            span: start.span.clone(),
            done: false,
        };
        let (worker_span, obs) = (start.span.clone(), observer.clone());
        let result = self
            .on_worker(move |inner, rt, cancel| {
                let _entered = worker_span.enter();
                f(inner, rt, runtime::CallHandles { cancel, observer: obs })
            })
            .await;
        end.done = true;
        drop(end);
        self.control_finish(start, ctx, tool, observer.as_ref(), &result);
        result
    }

    /// The start of an `exec` / `wait` call: its start record, its span, linked to its run's trace.
    fn control_begin(
        &self,
        tool: &'static str,
        ctx: &RunContext,
        run_id: Option<String>,
        observer: Option<&Arc<dyn RunObserver>>,
    ) -> ControlStart {
        let started = std::time::Instant::now();
        self.trace_control(ctx, tool, run_id.clone(), None, observer);
        let span = control_span(tool, ctx, run_id.as_deref());
        // One trace per run: an `exec` continues the caller's trace context, a `wait`
        // the trace of its run's `exec` (linking the caller's own context).
        let run_trace = run_id.as_deref().and_then(|id| self.inner.run_trace(id));
        link_span(&span, run_trace.as_deref(), ctx.trace_parent.as_deref());
        ControlStart { started, span, run_trace, run_id }
    }

    /// The end of an `exec` / `wait` call: the result on its span, the run's trace remembered or
    /// forgotten, its end record.
    fn control_finish(
        &self,
        start: ControlStart,
        ctx: &RunContext,
        tool: &'static str,
        observer: Option<&Arc<dyn RunObserver>>,
        result: &CodeModeResult,
    ) {
        let ControlStart { started, span, run_trace, run_id } = start;
        record_result(&span, result, run_id.is_none());
        let run_id = run_id.or_else(|| result.run_id().map(str::to_string));
        if let Some(id) = &run_id {
            match result {
                CodeModeResult::Waiting { .. } if run_trace.is_none() => {
                    if let Some(tp) = span_traceparent(&span) {
                        self.inner.remember_run_trace(id, tp);
                    }
                }
                CodeModeResult::Waiting { .. } => {}
                _ => self.inner.forget_run_trace(id),
            }
        }
        self.trace_control(ctx, tool, run_id, Some((result, started)), observer);
    }

    /// Emits the start (`result` = `None`) or end record of an `exec` / `wait` call to the
    /// trajectory sink and `observer`, when either exists.
    fn trace_control(
        &self,
        ctx: &RunContext,
        tool: &str,
        run_id: Option<String>,
        result: Option<(&CodeModeResult, std::time::Instant)>,
        observer: Option<&Arc<dyn RunObserver>>,
    ) {
        let end = result.map(|(r, t)| (r.status(), r.error_code().map(|c| c.as_str()), t));
        self.trace_control_record(ctx, tool, run_id, end, observer);
    }

    /// [`Self::trace_control`] with the end given as status, code and start time.
    fn trace_control_record(
        &self,
        ctx: &RunContext,
        tool: &str,
        run_id: Option<String>,
        end: Option<(&str, Option<&str>, std::time::Instant)>,
        observer: Option<&Arc<dyn RunObserver>>,
    ) {
        if self.inner.trajectory.is_none() && observer.is_none() {
            return;
        }
        let record = codemode_core::trajectory::TraceRecord::Control(codemode_core::trajectory::ControlRecord {
            tool_call_id: ctx.tool_call_id.clone(),
            tool: tool.to_string(),
            run_id,
            status: end.map(|(s, _, _)| s).unwrap_or("started").to_string(),
            code: end.and_then(|(_, c, _)| c).map(str::to_string),
            at_ms: self.inner.clock.now_ms(),
            duration_ms: end.map(|(_, _, t)| t.elapsed().as_millis() as u64),
        });
        if let Some(sink) = &self.inner.trajectory {
            sink.on_event(RunEvent::Trace(Box::new(record.clone())));
        }
        if let Some(o) = observer {
            o.on_event(RunEvent::Trace(Box::new(record)));
        }
    }

    /// Runs every hook's [`ToolHook::before_code_mode_call`]; a refusal becomes the call's result.
    /// The event is built only when there are hooks (not on every call).
    async fn outer_hooks(&self, event: impl FnOnce() -> CodeModeCallEvent) -> Option<CodeModeResult> {
        if self.inner.hooks.is_empty() {
            return None;
        }
        let event = event();
        for h in &self.inner.hooks {
            if let Err(e) = h.before_code_mode_call(&event).await {
                let err = CodeModeError::uncoded(format!("{} refused by a hook: {}", event.tool_name, e.message));
                let mut telemetry = CodeModeTelemetry { engine: self.engine_name().to_string(), ..Default::default() };
                telemetry.exec_count = u32::from(event.tool_name == crate::surface::EXEC);
                return Some(CodeModeResult::failed(err, Vec::new(), telemetry));
            }
        }
        None
    }

    /// Resumes a suspended run (contract §5.3). Runs like [`Self::exec`].
    pub async fn wait(&self, ctx: &RunContext, input: &CodeModeWaitInput) -> CodeModeResult {
        self.wait_observed(ctx, input, None).await
    }

    /// [`Self::wait`] with an observer, like [`Self::exec_observed`].
    pub async fn wait_observed(
        &self,
        ctx: &RunContext,
        input: &CodeModeWaitInput,
        observer: Option<Arc<dyn RunObserver>>,
    ) -> CodeModeResult {
        let started = std::time::Instant::now();
        let r = self.wait_once(ctx, input, observer.clone()).await;
        self.keep_waiting(ctx, r, started, observer).await
    }

    /// One `wait` call, without auto-wait.
    async fn wait_once(
        &self,
        ctx: &RunContext,
        input: &CodeModeWaitInput,
        observer: Option<Arc<dyn RunObserver>>,
    ) -> CodeModeResult {
        let event = || CodeModeCallEvent {
            tool_name: crate::surface::WAIT.to_string(),
            tool_kind: CODE_MODE_TOOL_KIND,
            tool_input_kind: None,
            run_id: Some(input.run_id.clone()),
            context: ctx.clone(),
        };
        if let Some(refused) = self.outer_hooks(event).await {
            return refused;
        }
        let (ctx2, input) = (ctx.clone(), input.clone());
        let run_id = Some(input.run_id.clone());
        self.control_call(crate::surface::WAIT, ctx, run_id, observer, move |inner, rt, handles| {
            inner.wait(rt, &ctx2, &input, handles)
        })
        .await
    }

    /// Runs an `exec` / `wait` on a guest worker. If this future is dropped before it finishes (the
    /// caller went away, an MCP request was cancelled), the call is cancelled: the run stops at its
    /// next step — at once when it waits on nested calls, at the latest at its deadline when the
    /// guest is busy — its nested calls are stopped and its state is deleted (`aborted`); it is never
    /// stored for a `wait` nobody will send.
    async fn on_worker(
        &self,
        f: impl FnOnce(&Inner, &tokio::runtime::Handle, Arc<AtomicBool>) -> CodeModeResult + Send + 'static,
    ) -> CodeModeResult {
        let internal = |msg: String| {
            CodeModeResult::failed(
                CodeModeError::new(CodeModeErrorCode::InternalError, msg),
                Vec::new(),
                CodeModeTelemetry::default(),
            )
        };
        let rt = match tokio::runtime::Handle::try_current() {
            Ok(rt) => rt,
            Err(e) => return internal(format!("code mode must run inside a tokio runtime: {e}")),
        };
        let inner = self.inner.clone();
        let cancel = Arc::new(AtomicBool::new(false));
        let mut guard = CancelOnDrop { flag: cancel.clone(), armed: true };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = codemode_workers::spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&inner, &rt, cancel)));
            let _ = tx.send(result.map_err(codemode_workers::panic_message));
        });
        if let Err(e) = spawned {
            return internal(format!("cannot start a guest worker thread: {e}"));
        }
        let received = answer(rx).await;
        guard.armed = false;
        match received {
            Ok(Ok(result)) => result,
            Ok(Err(panic)) => internal(format!("code mode worker panicked: {panic}")),
            Err(_) => internal("code mode worker stopped".into()),
        }
    }

    /// `exec` from raw tool arguments (hostile JSON).
    pub async fn exec_json(&self, ctx: &RunContext, args: &serde_json::Value) -> CodeModeResult {
        self.exec_json_observed(ctx, args, None).await
    }

    /// [`Self::exec_json`] with an observer (see [`Self::exec_observed`]).
    pub async fn exec_json_observed(
        &self,
        ctx: &RunContext,
        args: &serde_json::Value,
        observer: Option<Arc<dyn RunObserver>>,
    ) -> CodeModeResult {
        match CodeModeExecInput::from_json(args) {
            Ok(input) => self.exec_observed(ctx, &input, observer).await,
            Err(e) => CodeModeResult::failed(e, Vec::new(), CodeModeTelemetry::default()),
        }
    }

    /// `wait` from raw tool arguments (hostile JSON).
    pub async fn wait_json(&self, ctx: &RunContext, args: &serde_json::Value) -> CodeModeResult {
        self.wait_json_observed(ctx, args, None).await
    }

    /// [`Self::wait_json`] with an observer (see [`Self::exec_observed`]).
    pub async fn wait_json_observed(
        &self,
        ctx: &RunContext,
        args: &serde_json::Value,
        observer: Option<Arc<dyn RunObserver>>,
    ) -> CodeModeResult {
        match CodeModeWaitInput::from_json(args) {
            Ok(input) => self.wait_observed(ctx, &input, observer).await,
            Err(e) => CodeModeResult::failed(e, Vec::new(), CodeModeTelemetry::default()),
        }
    }

    /// Keeps the nested calls this process started for suspended runs to completion and records
    /// their results in the snapshot store, so that a `wait` in another process receives them. For
    /// short-lived processes (`codemode exec` / `codemode wait`) before they exit: a nested call that
    /// was started always gets to finish, within the run's lifetime (at most `snapshotTtlSeconds`)
    /// and the tool's own limits. While this runs, a `wait` elsewhere waits for these results
    /// instead of issuing the calls again. Returns how many results were recorded; with a store that
    /// keeps runs in this process only, nothing is recorded and the calls are dropped.
    pub async fn finish_nested_calls(&self) -> usize {
        let inner = self.inner.clone();
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return 0 };
        tokio::task::spawn_blocking(move || inner.finish_inflight(&rt)).await.unwrap_or(0)
    }

    /// Whether nested calls this process started for suspended runs are still running (see
    /// [`finish_nested_calls`](Self::finish_nested_calls)).
    pub fn has_nested_calls_in_flight(&self) -> bool {
        self.inner.has_inflight_calls()
    }

    /// Prepares the engine now (for a guest module: load or compile it, see `GuestEngine::prepare`)
    /// instead of at the first run. Runs never count preparation against their `timeoutMs` anyway;
    /// hosts call this at start-up so the first cell is as fast as the others.
    pub async fn prepare_engine(&self) -> Result<(), CodeModeError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.prepare_engine())
            .await
            .unwrap_or_else(|e| Err(CodeModeError::new(CodeModeErrorCode::InternalError, e.to_string())))
    }

    /// How many runs an `exec` or `wait` is driving at this moment (suspended runs do not count). A
    /// call whose caller went away stops driving its run at the run's next step (see
    /// [`Self::exec`]); this shows when it did.
    pub fn runs_in_progress(&self) -> usize {
        self.inner.driven()
    }

    /// Records a human's decision on a parked call (`request_id` is the `requestId` of its
    /// `pendingToolCalls` entry, `kind: "approval"`). The next `wait` of the run — in this process or,
    /// with a shared store, in another one — runs an approved call or rejects a denied one in the
    /// guest with a catchable `nested_tool_failed` error. A `wait` already resuming the run picks the
    /// decision up while it waits. Fails with `invalid_input` for an unknown, expired or settled run.
    /// This is a host API: nothing the guest or the model can reach calls it.
    pub async fn decide(
        &self,
        run_id: &RunId,
        request_id: u64,
        decision: ApprovalDecision,
    ) -> Result<(), CodeModeError> {
        self.inner.store.record_decision(run_id, request_id, &decision).await.map_err(|e| e.to_code_mode_error())?;
        tracing::info!(target: "codemode::approval", run = %run_id, request = request_id, ?decision, "approval decision recorded");
        Ok(())
    }

    /// The result types learned so far from tools without an output schema (see
    /// `observeResultTypes`), by catalog id, rendered as TypeScript.
    pub fn learned_result_types(&self) -> std::collections::BTreeMap<String, String> {
        self.inner.observed_types()
    }

    /// Aborts a run (contract §6 `aborted`): its snapshot is deleted and its nested calls stop. Returns
    /// whether there was anything to abort.
    pub async fn abort(&self, run_id: &RunId) -> bool {
        self.inner.abort(run_id).await
    }

    /// Aborts every suspended run of `scope` that this process started or resumed (their snapshots
    /// leave the store and their nested calls are cancelled); returns how many. For hosts whose
    /// sessions end (an MCP session closing): nobody can resume those runs any more, and they should
    /// not hold slots of the 64-run cap until their TTL. Runs that only another process holds are
    /// left to expire.
    pub async fn abort_scope(&self, scope: &RunScope) -> usize {
        self.inner.abort_scope(scope).await
    }

    /// Takes a `waiting` run of `ctx`'s scope out of this runtime as bytes the host may keep
    /// anywhere (a file, its own database) and later give to [`Self::import_run`] of this or another
    /// process. The run leaves the store: it is resumed only where its bytes are imported. Nested
    /// calls this process started for the run are awaited first (at most until the run expires), so
    /// their results travel with it — no call is lost or repeated. Fails with `invalid_input` for an
    /// unknown run, another scope's run, a run being resumed, or a run of an engine with live
    /// in-process snapshots (`quickjs`, `boa`). Format: [`codemode_snapshot::portable`].
    pub async fn export_run(&self, ctx: &RunContext, run_id: &RunId) -> Result<Vec<u8>, CodeModeError> {
        let (inner, scope, id) = (self.inner.clone(), ctx.scope.clone(), run_id.clone());
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|e| CodeModeError::new(CodeModeErrorCode::InternalError, e.to_string()))?;
        tokio::task::spawn_blocking(move || inner.export_run(&rt, &scope, &id))
            .await
            .unwrap_or_else(|e| Err(CodeModeError::new(CodeModeErrorCode::InternalError, e.to_string())))
    }

    /// Puts a run exported by [`Self::export_run`] (here or in another process) into this runtime's
    /// store and returns its id; a `wait` from the run's own scope resumes it. Fails with
    /// `invalid_input` for damaged bytes or a run of another engine, `snapshot_expired` past its TTL,
    /// and `snapshot_limit_exceeded` over this runtime's `maxSnapshotBytes`. Import the bytes of an
    /// export once: each import is a resumable copy of the run as it was exported.
    pub async fn import_run(&self, bytes: Vec<u8>) -> Result<RunId, CodeModeError> {
        let inner = self.inner.clone();
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|e| CodeModeError::new(CodeModeErrorCode::InternalError, e.to_string()))?;
        tokio::task::spawn_blocking(move || inner.import_run(&rt, &bytes))
            .await
            .unwrap_or_else(|e| Err(CodeModeError::new(CodeModeErrorCode::InternalError, e.to_string())))
    }

    /// Deletes expired suspended runs now (`exec` / `wait` also sweep, at most once a second).
    pub async fn sweep(&self) {
        self.inner.sweep().await;
    }

    /// Now, in Unix milliseconds, on the runtime's clock (the one its runs expire by).
    pub fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }

    /// The effective configuration.
    pub fn config(&self) -> &CodeModeConfig {
        &self.inner.config
    }

    /// The engine's name (or the configured name when it is not available).
    pub fn engine_name(&self) -> &str {
        self.inner.engine.as_ref().map(|e| e.name()).unwrap_or(&self.inner.config.runtime)
    }

    /// Whether the configured engine is available (otherwise every run fails closed).
    pub fn engine_available(&self) -> bool {
        self.inner.engine.is_some()
    }

    /// The current catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.inner.catalog().catalog.clone()
    }

    /// The namespaces the current catalog makes visible (contract §10 L3): what the `exec` description
    /// lists and what a run would get.
    pub fn visible_namespaces(&self) -> Vec<NamespaceInfo> {
        self.inner.namespaces.visible(self.inner.catalog().catalog.as_ref())
    }

    /// The model-visible `exec` tool of the current catalog: its description lists the visible
    /// namespaces and, when given, the MCP servers.
    pub fn exec_tool(&self, mcp_servers: &[String]) -> surface::ModelTool {
        surface::exec_tool_with(&self.catalog(), &self.visible_namespaces(), mcp_servers, &self.inner.observed_types())
    }

    /// The catalog a run of `ctx` sees: the tool policy applied for the context's agent, provider and
    /// model (each falling back to [`CodeModeBuilder::policy_target`]). Runs of different agents on
    /// one runtime see and can call only their own tools.
    pub fn catalog_for(&self, ctx: &RunContext) -> Arc<Catalog> {
        self.inner.catalog_for(ctx).catalog.clone()
    }

    /// [`Self::exec_tool`] for the model of `ctx`: the description its runs' catalog gives (quick
    /// index, visible namespaces).
    pub fn exec_tool_for(&self, ctx: &RunContext, mcp_servers: &[String]) -> surface::ModelTool {
        let catalog = self.catalog_for(ctx);
        let namespaces = self.inner.namespaces.visible(catalog.as_ref());
        surface::exec_tool_with(&catalog, &namespaces, mcp_servers, &self.inner.observed_types())
    }

    /// Replaces the host-executed tools (those of [`CodeModeBuilder::tool_definitions`]), e.g. when an
    /// upstream server's tool list changed. Local tools and the policy stay; runs already started keep
    /// the catalog they started with (ids are stable within a run).
    pub fn set_host_tools(&self, defs: Vec<ToolDefinition>) {
        self.set_upstream(defs, Vec::new());
    }

    /// [`set_host_tools`](Self::set_host_tools), and marks upstream MCP servers as down with the
    /// reason (they stay in the guest's `MCP` and in the `exec` description, their calls failing
    /// with a coded error; see [`Catalog::with_unavailable_mcp_servers`]).
    pub fn set_upstream(&self, defs: Vec<ToolDefinition>, down: Vec<(String, String)>) {
        self.inner.set_catalog(self.extra.catalog(defs, down));
    }

    /// The snapshot store.
    pub fn store(&self) -> &Arc<dyn SnapshotStore> {
        &self.inner.store
    }
}
