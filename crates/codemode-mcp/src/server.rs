//! The downstream side: an MCP server exposing exactly two tools, `exec` and `wait`, over stdio or
//! streamable HTTP (`codemode serve`).
//!
//! Runs belong to their client: a handshake-era MCP session is its own run scope (a `runId` from one
//! session cannot be resumed from another); a sessionless request (MCP 2026-07-28 over HTTP) is in
//! its client's scope (its credential's digest, or the shared scope where the `runId` is the
//! capability), and its approvals are asked with MRTR input requests. The HTTP transport and the
//! approval endpoint live in [`crate::http`]. `exec`'s description carries the quick index of the catalog, the `API` hint for the
//! upstream MCP servers, and (later) namespace prompts; when an upstream server's tool list changes,
//! the catalog is rebuilt and clients are told with `notifications/tools/list_changed`.

pub use crate::gateway::Gateway;
use crate::gateway::authorization;
use crate::http::same_secret;
pub use crate::http::{HttpOptions, MIN_APPROVAL_TOKEN_LEN, allowed_hosts_and_origins, serve_http, serve_http_with};
use crate::tasks::APPROVAL_KEY;
use codemode::surface::{EXEC, ModelTool, WAIT};
use codemode::{CodeModeResult, RunContext, RunEvent, RunObserver};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One MCP session of the server.
#[derive(Clone)]
pub struct ExecWaitServer {
    gateway: Arc<Gateway>,
    session: Arc<str>,
    /// Served over streamable HTTP (where a sessionless request gets a handler of its own).
    http: bool,
    /// The agents of the runs this session started (shared with [`SessionEnd`]).
    agents: Arc<std::sync::Mutex<std::collections::BTreeSet<Option<String>>>>,
    _end: Option<Arc<SessionEnd>>,
}

/// The run scope of the sessionless requests of clients that present no credentials.
pub const SESSIONLESS_SCOPE: &str = "mcp-sessionless";

/// The run scope of an HTTP request made without a session (MCP 2026-07-28, where every request
/// stands alone and rmcp gives each one a handler of its own): the client's, not the transport's.
/// A client that sends `Authorization` owns its runs by that credential (its SHA-256 digest is the
/// scope; the credential itself is never kept); one that sends none shares [`SESSIONLESS_SCOPE`],
/// where the `runId` (122 random bits, shown only to the client that started the run) is the
/// capability that resumes, approves or aborts a run.
fn sessionless_scope(cx: &RequestContext<RoleServer>) -> String {
    use sha2::Digest;
    let auth = cx
        .extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.headers.get(http::header::AUTHORIZATION))
        .map(|v| v.as_bytes().to_vec());
    match auth {
        Some(a) if !a.is_empty() => {
            let digest = sha2::Sha256::digest(&a);
            let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
            format!("mcp-client-{hex}")
        }
        _ => SESSIONLESS_SCOPE.to_string(),
    }
}

/// Whether the request speaks a protocol without sessions (2026-07-28 and later).
fn modern(cx: &RequestContext<RoleServer>) -> bool {
    cx.protocol_version().is_some_and(|v| !v.has_initialize())
}

/// The state echoed back by an MRTR retry: the run whose approvals were asked, and a tag binding it
/// to the client (run scope) that was asked. `requestState` is client input: a forged or replayed one
/// — another client's run, a made-up run id — fails the tag and is refused.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApprovalState {
    run_id: String,
    tag: String,
}

impl ApprovalState {
    /// The tag of `run_id` asked of the client in `scope`: SHA-256 over the gateway's secret key,
    /// the scope and the run id.
    fn tag(key: &[u8; 32], scope: &str, run_id: &str) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(key);
        h.update(scope.as_bytes());
        h.update([0]);
        h.update(run_id.as_bytes());
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A decision from the human's answer to an MRTR approval question.
pub(crate) fn decision_of(answer: &Value) -> codemode::ApprovalDecision {
    match answer.get("action").and_then(Value::as_str) {
        Some("accept") => codemode::ApprovalDecision::Approve,
        Some("decline") => codemode::ApprovalDecision::deny("declined by the user"),
        Some("cancel") => codemode::ApprovalDecision::deny("cancelled by the user"),
        _ => codemode::ApprovalDecision::deny("the client's answer was not an approval"),
    }
}

/// The MRTR questions for the calls of a `waiting` result that are parked for approval: one form
/// elicitation each, keyed `approval:<requestId>` (MCP 2026-07-28, where a server cannot send
/// `elicitation/create` but returns the questions and gets the answers with the client's retry).
fn approval_questions(
    gateway: &Gateway,
    scope: &str,
    result: &CodeModeResult,
) -> Option<rmcp::model::InputRequiredResult> {
    use rmcp::model::{ElicitRequest, ElicitRequestParams, ElicitationSchema, InputRequest, InputRequiredResult};
    let CodeModeResult::Waiting { run_id, pending_tool_calls, .. } = result else { return None };
    let parked: Vec<_> = pending_tool_calls.iter().filter(|p| p.kind == codemode::PendingCallKind::Approval).collect();
    if parked.is_empty() {
        return None;
    }
    let schema: ElicitationSchema =
        serde_json::from_value(serde_json::json!({ "type": "object", "properties": {} })).ok()?;
    let mut questions = std::collections::BTreeMap::new();
    for p in parked {
        // The question the call's tool asked, or what the approver was told when the call parked
        // (input, reason, cell line), if it still knows; else what the result says.
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: gateway.question_for(run_id, p),
            requested_schema: schema.clone(),
        };
        questions
            .insert(format!("{APPROVAL_KEY}{}", p.request_id), InputRequest::Elicitation(ElicitRequest::new(params)));
    }
    let tag = ApprovalState::tag(&gateway.state_key, scope, run_id);
    let state = serde_json::to_string(&ApprovalState { run_id: run_id.clone(), tag }).ok()?;
    Some(InputRequiredResult::new(Some(questions), Some(state)))
}

/// Aborts a closed session's suspended runs when the last handle of its handler is dropped.
struct SessionEnd {
    gateway: Arc<Gateway>,
    session: Arc<str>,
    /// The agents the session's runs were for (a configured client's, see `clients`): each is part
    /// of those runs' scope, so each is aborted by its own scope.
    agents: Arc<std::sync::Mutex<std::collections::BTreeSet<Option<String>>>>,
}

impl Drop for SessionEnd {
    fn drop(&mut self) {
        if let Some(approver) = &self.gateway.approver {
            approver.forget(&self.session);
        }
        self.gateway.log_clients.lock().unwrap_or_else(|p| p.into_inner()).remove(&*self.session);
        // A fleet's runs belong to the client, who may go on from another replica.
        if self.gateway.stopping.load(Ordering::SeqCst) || self.gateway.fleet {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let gateway = self.gateway.clone();
        let agents: Vec<Option<String>> =
            self.agents.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect();
        let session = self.session.to_string();
        rt.spawn(async move {
            for agent in agents {
                let scope = codemode::RunScope { agent_id: agent, ..codemode::RunScope::session(session.clone()) };
                let n = gateway.cm.abort_scope(&scope).await;
                if n > 0 {
                    tracing::info!(session = ?scope, runs = n, "MCP session closed: its suspended runs were aborted");
                }
            }
        });
    }
}

impl ExecWaitServer {
    /// A handler with a fresh session id. Its suspended runs stay when the session ends (stdio: the
    /// process ends with it, and a directory store keeps them).
    pub fn new(gateway: Arc<Gateway>) -> Self {
        ExecWaitServer {
            gateway,
            session: format!("mcp-{}", uuid::Uuid::new_v4().simple()).into(),
            http: false,
            agents: Arc::new(std::sync::Mutex::new(std::iter::once(None).collect())),
            _end: None,
        }
    }

    /// A handler whose suspended runs are aborted when the session closes (streamable HTTP: nobody
    /// else can resume them, and they would hold slots of the suspended-run cap until they expire).
    pub fn aborting_on_close(gateway: Arc<Gateway>) -> Self {
        let mut server = Self::new(gateway);
        server.http = true;
        server._end = Some(Arc::new(SessionEnd {
            gateway: server.gateway.clone(),
            session: server.session.clone(),
            agents: server.agents.clone(),
        }));
        server
    }

    /// This session's id (its run scope).
    pub fn session(&self) -> &str {
        &self.session
    }

    /// Who owns the runs (and tasks) of a request: its run scope's session part and the client's
    /// policy target.
    fn run_owner(
        &self,
        cx: &RequestContext<RoleServer>,
    ) -> Result<(String, Option<codemode::PolicyTarget>), ErrorData> {
        // Runs belong to the client: on a sessionless HTTP request (MCP 2026-07-28) the
        // handler lives for this one request, so the run scope is the client's, not the handler's.
        // So do a fleet's runs on every HTTP request: the client's next request may reach another
        // replica, in another MCP session or none.
        let session: String = if self.http && (modern(cx) || self.gateway.fleet) {
            sessionless_scope(cx)
        } else {
            self.session.to_string()
        };
        // Which agent this client's runs are for: its configured token decides (never what the
        // client says about itself); an unlisted client gets the gateway's default, or is refused.
        let target = self
            .gateway
            .client_target(authorization(cx).as_deref(), self.http)
            .map_err(|e| ErrorData::invalid_request(e.to_string(), None))?;
        Ok((session, target))
    }

    /// The run scope of a request's client (what its tasks are checked against).
    fn task_scope(&self, cx: &RequestContext<RoleServer>) -> Result<codemode::RunScope, ErrorData> {
        let (session, target) = self.run_owner(cx)?;
        Ok(crate::gateway::target_context(RunContext::session(session), target.as_ref()).scope)
    }
}

/// The contract §4 payload guard on the tool list a `tools/list` answer carries: exactly `exec` and
/// `wait`, else an error (the list is not sent).
pub(crate) fn guard_payload(tools: &[Tool]) -> Result<(), codemode::CodeModeError> {
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    codemode::surface::guard_tool_names(&[EXEC, WAIT], &names)
}

pub(crate) fn rmcp_tool(t: ModelTool) -> Tool {
    let schema = match t.input_schema {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    Tool::new(t.name, t.description, Arc::new(schema))
}

impl ServerHandler for ExecWaitServer {
    // `enable_logging`: SEP-2577 deprecates server logging; clients of the 2025 protocols use it.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("codemode", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Code mode: write a JavaScript program with the `exec` tool; it calls the real tools through `tools.*` and \
                 `MCP.*`. Call `wait` with the runId when a result is `waiting`.",
        )
    }

    /// `logging/setLevel`: the session's client gets the upstream servers' log messages at `level`
    /// and above (SEP-2577 deprecates server logging; clients of the 2025 protocols still use it).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.gateway
            .log_clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.session.to_string(), (cx.peer.clone(), request.level));
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let target = self
            .gateway
            .client_target(authorization(&cx).as_deref(), self.http)
            .map_err(|e| ErrorData::invalid_request(e.to_string(), None))?;
        let tools = self.gateway.guarded_tool_list_for(target.as_ref()).map_err(|e| {
            tracing::error!(error = %e.message, "tools/list refused by the payload guard");
            ErrorData::internal_error(e.message, None)
        })?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let changed = self.gateway.sync();
        let started = std::time::Instant::now();
        if self.gateway.debug.transport {
            tracing::info!(target: "codemode::debug", session = %self.session, id = %cx.id, method = "tools/call", tool = %request.name, "request received");
        }
        let modern = modern(&cx);
        let (session, target) = self.run_owner(&cx)?;
        if let Some(t) = &target {
            self.agents.lock().unwrap_or_else(|p| p.into_inner()).insert(t.agent.clone());
        }
        // This request, as the run context's `tool_call_id` names it while it drives a run: unique
        // to this handler (a session, or one sessionless request) and its JSON-RPC id — unlike the
        // run scope, which clients can share (every anonymous client of a fleet).
        let driver = format!("{}/{}", self.session, cx.id);
        // Approval questions about the runs this request drives go to this client and no other,
        // for as long as the request lasts. Elicitation requests can only be sent on a session
        // (2025 protocols): a modern client is asked through MRTR questions in the result instead
        // (below).
        let _asker = match &self.gateway.approver {
            Some(approver) if !modern => Some(approver.register(&driver, &session, &cx.peer)),
            _ => None,
        };
        // An MRTR retry carries the human's answers to the approval questions of a run: they are
        // recorded, and the retried request resumes that run (it never runs the original `exec`
        // again).
        let mut tool_name = request.name.to_string();
        let mut arguments = request.arguments.unwrap_or_default();
        if modern && let Some(state) = request.request_state.as_deref() {
            let issued = serde_json::from_str::<ApprovalState>(state).ok().filter(|s| {
                same_secret(
                    s.tag.as_bytes(),
                    ApprovalState::tag(&self.gateway.state_key, &session, &s.run_id).as_bytes(),
                )
            });
            let Some(ApprovalState { run_id, .. }) = issued else {
                return Err(ErrorData::invalid_params(
                    "requestState is not one this server issued to this client",
                    None,
                ));
            };
            let Ok(id) = codemode::RunId::parse(&run_id) else {
                return Err(ErrorData::invalid_params("requestState names no valid run", None));
            };
            for (key, answer) in request.input_responses.iter().flatten() {
                let Some(request_id) = key.strip_prefix(APPROVAL_KEY).and_then(|r| r.parse::<u64>().ok()) else {
                    continue;
                };
                let decision = decision_of(answer);
                tracing::info!(target: "codemode::approval", run = %run_id, request = request_id, ?decision, "approval decided through MCP input request");
                if let Err(e) = self.gateway.cm.decide(&id, request_id, decision).await {
                    tracing::warn!(target: "codemode::approval", run = %run_id, request = request_id, error = %e.message, "cannot record the answer");
                }
            }
            tool_name = WAIT.to_string();
            arguments = serde_json::Map::from_iter([("runId".to_string(), Value::String(run_id))]);
        }
        let args = Value::Object(arguments);
        // The client's trace context (`_meta.traceparent`, as W3C trace context propagation over MCP
        // carries it), for the run's spans.
        let trace_parent = request
            .meta
            .as_ref()
            .and_then(|m| m.get_traceparent())
            .or_else(|| cx.meta.get_traceparent())
            .filter(|t| t.len() <= 128)
            .map(str::to_string);
        // With a progress token, the run's events reach the client as progress notifications.
        let token = cx.meta.get_progress_token().or_else(|| request.meta.as_ref().and_then(|m| m.get_progress_token()));
        let relay = token.map(|t| ProgressRelay::start(cx.peer.clone(), t, self.gateway.debug.clone()));
        let observer = relay.as_ref().map(|(o, _)| o.clone() as Arc<dyn RunObserver>);
        // `notifications/cancelled` for this request (or the session going away) cancels the call:
        // dropping it aborts the run (its nested calls stop, its state is deleted).
        let call = tokio::select! {
            result = self.gateway.call_for(&session, target.as_ref(), Some(driver.clone()), trace_parent, &tool_name, &args, observer) => result,
            () = cx.ct.cancelled() => {
                if let Some(approver) = &self.gateway.approver {
                    approver.withdraw(&driver);
                }
                tracing::info!(%session, tool = %tool_name, "MCP request cancelled: its code mode run is aborted");
                return Err(ErrorData::internal_error("the request was cancelled; its code mode run was aborted", None));
            }
        };
        if let Some((observer, task)) = relay {
            // Every progress notification goes out before the response.
            drop(observer);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), task).await;
        }
        let Some(result) = call else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{tool_name}`: this server has `exec` and `wait`"),
                None,
            ));
        };
        if changed {
            let _ = cx.peer.notify_tool_list_changed().await;
        }
        if self.gateway.debug.transport {
            tracing::info!(target: "codemode::debug", session = %self.session, id = %cx.id, status = result.status(), ms = started.elapsed().as_millis() as u64, "response sent");
        }
        // A client that declared the tasks extension gets a task instead of `waiting`, and the
        // gateway drives the run to its end (book: "Runs as MCP tasks").
        let result = if matches!(result, CodeModeResult::Waiting { .. })
            && cx.client_capabilities().is_some_and(|c| c.supports_tasks())
        {
            let ctx = crate::gateway::target_context(RunContext::session(session.clone()), target.as_ref());
            match self.gateway.start_task(&ctx, result).await {
                Ok(task) => return Ok(CallToolResponse::Task(task)),
                Err(result) => result,
            }
        } else {
            result
        };
        // A modern client that can answer form elicitations is asked about parked calls in the
        // result itself (MRTR); its retry brings the answers and resumes the run.
        let elicits = cx.client_capabilities().and_then(|c| c.elicitation).is_some();
        if modern
            && elicits
            && let Some(questions) = approval_questions(&self.gateway, &session, &result)
        {
            return Ok(questions.into());
        }
        Ok(crate::tasks::call_result(&result).into())
    }

    /// `tasks/get`: a task of this client (see [`crate::tasks`]).
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        let scope = self.task_scope(&cx)?;
        self.gateway.task_get(&request.task_id, &scope).await
    }

    /// `tasks/update`: answers to a task's approval questions.
    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let scope = self.task_scope(&cx)?;
        self.gateway.task_update(&request.task_id, &scope, &request.input_responses).await
    }

    /// `tasks/cancel`: cancels a task and aborts its run.
    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let scope = self.task_scope(&cx)?;
        self.gateway.task_cancel(&request.task_id, &scope).await
    }
}

/// Longest progress message (a cell's `text()` can be long; the final result carries it whole).
const MAX_PROGRESS_MESSAGE_CHARS: usize = 1_000;

/// Relays a run's events to the MCP client as `notifications/progress` on the request's progress
/// token, in order, from a task of its own (the observer is called on the guest worker).
struct ProgressRelay {
    events: tokio::sync::mpsc::UnboundedSender<RunEvent>,
}

impl ProgressRelay {
    fn start(
        peer: rmcp::Peer<RoleServer>,
        token: rmcp::model::ProgressToken,
        debug: Arc<crate::debug::DebugSwitches>,
    ) -> (Arc<Self>, tokio::task::JoinHandle<()>) {
        let (events, mut rx) = tokio::sync::mpsc::unbounded_channel::<RunEvent>();
        let task = tokio::spawn(async move {
            let mut n = 0.0;
            while let Some(event) = rx.recv().await {
                n += 1.0;
                let mut param = rmcp::model::ProgressNotificationParam::new(token.clone(), n);
                let message = progress_message(&event);
                debug.log_event(&message);
                param.message = Some(message);
                if peer.notify_progress(param).await.is_err() {
                    return;
                }
            }
        });
        (Arc::new(ProgressRelay { events }), task)
    }
}

impl RunObserver for ProgressRelay {
    fn on_event(&self, event: RunEvent) {
        // Trajectory records go to the audit log, not to the client as progress.
        if !matches!(event, RunEvent::Trace(_)) {
            let _ = self.events.send(event);
        }
    }
}

/// The progress message of one event.
fn progress_message(event: &RunEvent) -> String {
    let text = match event {
        RunEvent::CallStarted { tool_id, request_id, .. } => format!("call started: {tool_id} (request {request_id})"),
        RunEvent::CallFinished { tool_id, request_id, ok, .. } => {
            format!("call {}: {tool_id} (request {request_id})", if *ok { "finished" } else { "failed" })
        }
        RunEvent::CallProgress { tool_id, request_id, message, .. } => {
            format!("progress of {tool_id} (request {request_id}): {message}")
        }
        RunEvent::CallParked { tool_id, request_id, .. } => {
            format!("call awaiting approval: {tool_id} (request {request_id})")
        }
        RunEvent::Output { item: codemode::CodeModeOutput::Text { text }, .. } => format!("text: {text}"),
        RunEvent::Output { item: codemode::CodeModeOutput::Json { value }, .. } => format!("json: {value}"),
        _ => "code mode event".to_string(),
    };
    if text.chars().count() <= MAX_PROGRESS_MESSAGE_CHARS {
        text
    } else {
        text.chars().take(MAX_PROGRESS_MESSAGE_CHARS).chain(std::iter::once('…')).collect()
    }
}

/// Serves one session over stdin/stdout until the client disconnects. Nothing but protocol
/// messages is written to stdout.
///
/// When the client closes the session, its suspended runs are aborted: their run scope is this
/// session, which nobody can join again, so they could only hold slots until they expire. (A server
/// stopped by a signal drops this future instead and keeps them.)
pub async fn serve_stdio(gateway: Arc<Gateway>) -> Result<(), ServeError> {
    let server = ExecWaitServer::new(gateway.clone());
    let session = server.session.clone();
    let running = server.serve(rmcp::transport::stdio()).await.map_err(|e| ServeError::Initialize(e.to_string()))?;
    let ended = running.waiting().await;
    if let Some(approver) = &gateway.approver {
        approver.forget(&session);
    }
    if !gateway.stopping.load(Ordering::SeqCst) {
        let scope = RunContext::session(session.to_string()).scope;
        let n = gateway.cm.abort_scope(&scope).await;
        if n > 0 {
            tracing::info!(%session, runs = n, "MCP session closed: its suspended runs were aborted");
        }
    }
    ended.map_err(|e| ServeError::Session(e.to_string()))?;
    Ok(())
}

/// Why serving MCP stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The client's MCP handshake failed.
    #[error("MCP initialization failed: {0}")]
    Initialize(String),
    /// The session ended abnormally.
    #[error("MCP session ended abnormally: {0}")]
    Session(String),
    /// The HTTP listener failed.
    #[error("HTTP server failed: {0}")]
    Http(#[source] std::io::Error),
    /// The approval endpoint's token is too short to be safe.
    #[error("the approval token (CODEMODE_APPROVAL_TOKEN) must be at least {MIN_APPROVAL_TOKEN_LEN} characters")]
    WeakToken,
}

#[cfg(test)]
mod tests;
