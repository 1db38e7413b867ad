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

use crate::approval::ElicitingApprover;
use crate::http::same_secret;
pub use crate::http::{MIN_APPROVAL_TOKEN_LEN, allowed_hosts_and_origins, serve_http};
use crate::hub::McpHub;
use codemode::PolicyTarget;
use codemode::surface::{EXEC, ModelTool, WAIT, wait_tool};
use codemode::{CodeMode, CodeModeResult, RunContext, RunEvent, RunObserver};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The runtime behind the server: code mode over the upstream servers (and any local tools).
pub struct Gateway {
    cm: CodeMode,
    hub: Arc<McpHub>,
    /// Puts gated calls to the human behind each session (MCP elicitation), when `cm` uses it.
    approver: Option<Arc<ElicitingApprover>>,
    applied: AtomicU64,
    /// Set when the server stops: sessions closing then keep their runs (a directory store keeps
    /// them across the restart).
    stopping: std::sync::atomic::AtomicBool,
    /// The contract §18 debugging switches (read from the environment).
    debug: Arc<crate::debug::DebugSwitches>,
    /// The secret behind the tags of MRTR `requestState`s (random per process; shared by the
    /// fleet in fleet mode, so a retry may land on any replica).
    state_key: [u8; 32],
    /// Fleet mode (a store shared by replicas): runs belong to the client on every transport (its
    /// credential's digest, or the `runId` as capability), never to one replica's MCP session, and
    /// a session closing does not abort its runs (the client may continue on another replica).
    fleet: bool,
    /// The configured clients: which client's runs are for which agent (`clients`, set once).
    clients: std::sync::OnceLock<crate::clients::Clients>,
    /// The clients that asked for log messages (`logging/setLevel`), by session, with their level.
    #[allow(deprecated)]
    log_clients:
        std::sync::Mutex<std::collections::HashMap<String, (rmcp::Peer<RoleServer>, rmcp::model::LoggingLevel)>>,
}

/// The rank of a log level (higher is more severe).
#[allow(deprecated)]
fn level_rank(level: rmcp::model::LoggingLevel) -> u8 {
    use rmcp::model::LoggingLevel as L;
    match level {
        L::Debug => 0,
        L::Info => 1,
        L::Notice => 2,
        L::Warning => 3,
        L::Error => 4,
        L::Critical => 5,
        L::Alert => 6,
        L::Emergency => 7,
    }
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("cm", &self.cm).field("hub", &self.hub).finish()
    }
}

impl Gateway {
    /// A gateway over `cm` (built with the hub's tools as host tools and the hub as executor).
    pub fn new(cm: CodeMode, hub: Arc<McpHub>) -> Arc<Self> {
        Self::build(cm, hub, None, None)
    }

    /// A gateway whose runtime asks `approver` about gated calls (`cm` must have been built with
    /// `.approver(approver)`); each session's client is registered with it as it calls `exec`/`wait`.
    pub fn with_approver(cm: CodeMode, hub: Arc<McpHub>, approver: Arc<ElicitingApprover>) -> Arc<Self> {
        Self::build(cm, hub, Some(approver), None)
    }

    /// [`with_approver`](Self::with_approver) for one replica of a fleet sharing `cm`'s store:
    /// `fleet_key` is the fleet's shared secret (MRTR tags made by one replica check on another).
    pub fn fleet_replica(
        cm: CodeMode,
        hub: Arc<McpHub>,
        approver: Arc<ElicitingApprover>,
        fleet_key: [u8; 32],
    ) -> Arc<Self> {
        Self::build(cm, hub, Some(approver), Some(fleet_key))
    }

    /// Whether this gateway is a replica of a fleet.
    pub fn is_fleet(&self) -> bool {
        self.fleet
    }

    /// Sets which clients' runs are for which agent (the config's `clients`); only the first call
    /// counts. Returns whether it was set.
    pub fn set_clients(&self, clients: crate::clients::Clients) -> bool {
        self.clients.set(clients).is_ok()
    }

    /// The policy target of a request's client: `Ok(Some)` a configured client's, `Ok(None)` the
    /// gateway's default (no clients configured, a client not listed, or stdio), `Err` a client
    /// refused because known clients are required. Only the token decides: nothing the client
    /// says about itself is read.
    pub fn client_target(&self, authorization: Option<&[u8]>, http: bool) -> Result<Option<PolicyTarget>, String> {
        let Some(clients) = self.clients.get() else { return Ok(None) };
        match clients.identify(authorization) {
            crate::clients::Client::Known(_, target) => Ok(Some(target.clone())),
            crate::clients::Client::Unknown if http && clients.require_known => Err(
                "this gateway serves only the clients its configuration lists (clients.requireKnownClients): present \
                 a configured token in the Authorization header"
                    .to_string(),
            ),
            crate::clients::Client::Unknown => Ok(None),
        }
    }

    /// [`Self::guarded_tool_list`] for a client with its own target: the `exec` description lists
    /// that agent's tools.
    pub fn guarded_tool_list_for(&self, target: Option<&PolicyTarget>) -> Result<Vec<Tool>, codemode::CodeModeError> {
        let Some(target) = target else { return self.guarded_tool_list() };
        self.sync();
        let ctx = target_context(RunContext::default(), Some(target));
        let model = vec![self.cm.exec_tool_for(&ctx, &self.hub.server_names()), wait_tool()];
        let tools: Vec<Tool> = model.into_iter().map(rmcp_tool).collect();
        guard_payload(&tools)?;
        Ok(tools)
    }

    fn build(
        cm: CodeMode,
        hub: Arc<McpHub>,
        approver: Option<Arc<ElicitingApprover>>,
        fleet_key: Option<[u8; 32]>,
    ) -> Arc<Self> {
        let applied = AtomicU64::new(hub.generation());
        let debug = Arc::new(crate::debug::DebugSwitches::from_env());
        let late = approver.as_ref().and_then(|a| a.late_answers());
        let logs = hub.upstream_logs();
        let gateway = Arc::new(Gateway {
            cm,
            hub,
            approver,
            applied,
            stopping: Default::default(),
            debug,
            state_key: fleet_key.unwrap_or_else(|| {
                let mut key = [0u8; 32];
                key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
                key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
                key
            }),
            fleet: fleet_key.is_some(),
            clients: Default::default(),
            log_clients: Default::default(),
        });
        // Upstream servers' log messages reach the clients that asked for them, at their level.
        if let (Some(mut logs), Ok(rt)) = (logs, tokio::runtime::Handle::try_current()) {
            let weak = Arc::downgrade(&gateway);
            rt.spawn(async move {
                while let Some(log) = logs.recv().await {
                    let Some(gateway) = weak.upgrade() else { break };
                    gateway.relay_log(log).await;
                }
            });
        }
        // Answers that came after `approvals.timeoutMs` are recorded as they arrive (the next `wait`
        // of the run applies them); one whose run is gone is reported back to the client.
        if let (Some(mut late), Ok(rt)) = (late, tokio::runtime::Handle::try_current()) {
            let weak = Arc::downgrade(&gateway);
            rt.spawn(async move {
                while let Some(answer) = late.recv().await {
                    let Some(gateway) = weak.upgrade() else { break };
                    gateway.record_late(answer).await;
                }
            });
        }
        gateway
    }

    /// Sends an upstream server's log message to every client whose level admits it, under the
    /// logger `mcp:<server>` (or `mcp:<server>/<logger>`).
    #[allow(deprecated)]
    async fn relay_log(&self, log: crate::hub::UpstreamLog) {
        let crate::hub::UpstreamLog { server, mut message } = log;
        let rank = level_rank(message.level);
        message.logger = Some(match message.logger.take() {
            Some(l) => {
                format!("mcp:{server}/{}", codemode::text::for_display(&l.chars().take(100).collect::<String>()))
            }
            None => format!("mcp:{server}"),
        });
        let clients: Vec<rmcp::Peer<RoleServer>> = self
            .log_clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|(_, min)| rank >= level_rank(*min))
            .map(|(peer, _)| peer.clone())
            .collect();
        for peer in clients {
            let _ = peer.notify_logging_message(message.clone()).await;
        }
    }

    /// Records an answer that came after the runtime stopped waiting for it; tells the client when it
    /// came too late to matter (`notifications/message`, which SEP-2577 deprecates and clients
    /// still show).
    #[allow(deprecated)]
    async fn record_late(&self, answer: crate::approval::LateAnswer) {
        let crate::approval::LateAnswer { run_id, request_id, decision, peer } = answer;
        match self.cm.decide(&run_id, request_id, decision.clone()).await {
            Ok(()) => {
                tracing::info!(target: "codemode::approval", run = %run_id, request = request_id, ?decision, "late approval answer recorded; the next wait applies it")
            }
            Err(e) => {
                tracing::warn!(target: "codemode::approval", run = %run_id, request = request_id, error = %e.message, "an approval answer came too late");
                let note = rmcp::model::LoggingMessageNotificationParam::new(
                    rmcp::model::LoggingLevel::Warning,
                    serde_json::json!(format!(
                        "Your answer about request {request_id} of code mode run {run_id} came too late and was not applied: {}",
                        e.message
                    )),
                )
                .with_logger("codemode.approvals");
                let _ = peer.notify_logging_message(note).await;
            }
        }
    }

    /// The code-mode runtime.
    pub fn code_mode(&self) -> &CodeMode {
        &self.cm
    }

    /// The upstream connections.
    pub fn hub(&self) -> &Arc<McpHub> {
        &self.hub
    }

    /// Applies upstream tool-list changes; returns whether anything changed.
    pub fn sync(&self) -> bool {
        let current = self.hub.generation();
        if self.applied.swap(current, Ordering::SeqCst) == current {
            return false;
        }
        self.cm.set_upstream(self.hub.tool_definitions(), self.hub.unavailable_servers());
        true
    }

    /// The model-visible tools: exactly `exec` and `wait`.
    pub fn model_tools(&self) -> Vec<ModelTool> {
        self.sync();
        vec![self.cm.exec_tool(&self.hub.server_names()), wait_tool()]
    }

    /// The tool list as sent: [`Self::model_tools`] converted to the MCP payload, which then passes
    /// the contract §4 payload guard (exactly `exec` and `wait`, or the list fails closed) — the guard
    /// looks at the very list the server returns — and is logged as the debugging switches say.
    pub fn guarded_tool_list(&self) -> Result<Vec<Tool>, codemode::CodeModeError> {
        let tools: Vec<Tool> = self.model_tools().into_iter().map(rmcp_tool).collect();
        guard_payload(&tools)?;
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        self.debug.log_tool_list(&names, || serde_json::to_value(&tools).unwrap_or_default());
        Ok(tools)
    }

    /// The debugging switches in force.
    pub fn debug(&self) -> &crate::debug::DebugSwitches {
        &self.debug
    }

    /// Runs `exec` or `wait` for a session, reporting the run's events to `observer` (progress).
    /// `call_id` identifies the model's tool call (the trajectory's parent id for the nested calls
    /// this call drives).
    pub async fn call(
        &self,
        session: &str,
        call_id: Option<String>,
        tool: &str,
        args: &Value,
        observer: Option<Arc<dyn RunObserver>>,
    ) -> Option<CodeModeResult> {
        self.call_traced(session, call_id, None, tool, args, observer).await
    }

    /// [`Self::call_traced`] for a client whose runs are for `target` (see [`Self::client_target`]):
    /// its agent is part of the runs' scope, so no other client's request can resume them.
    #[allow(clippy::too_many_arguments)]
    pub async fn call_for(
        &self,
        session: &str,
        target: Option<&PolicyTarget>,
        call_id: Option<String>,
        trace_parent: Option<String>,
        tool: &str,
        args: &Value,
        observer: Option<Arc<dyn RunObserver>>,
    ) -> Option<CodeModeResult> {
        self.sync();
        let ctx = RunContext { tool_call_id: call_id, trace_parent, ..RunContext::session(session) };
        let ctx = target_context(ctx, target);
        match tool {
            EXEC => Some(self.cm.exec_json_observed(&ctx, args, observer).await),
            WAIT => Some(self.cm.wait_json_observed(&ctx, args, observer).await),
            _ => None,
        }
    }

    /// [`Self::call`] continuing the client's W3C trace context (`traceparent` from the request's
    /// `_meta`), see [`RunContext::trace_parent`].
    pub async fn call_traced(
        &self,
        session: &str,
        call_id: Option<String>,
        trace_parent: Option<String>,
        tool: &str,
        args: &Value,
        observer: Option<Arc<dyn RunObserver>>,
    ) -> Option<CodeModeResult> {
        self.call_for(session, None, call_id, trace_parent, tool, args, observer).await
    }

    /// Marks the server as stopping: sessions that close from now on keep their suspended runs.
    pub fn begin_shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Stops the upstream servers.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        self.hub.shutdown().await;
    }
}

/// `ctx` for a client's target: its agent (in the run's scope), provider and model.
fn target_context(mut ctx: RunContext, target: Option<&PolicyTarget>) -> RunContext {
    if let Some(t) = target {
        ctx.scope.agent_id = t.agent.clone();
        ctx.provider = t.provider.clone();
        ctx.model = t.model.clone();
    }
    ctx
}

/// The `Authorization` header of a request over HTTP (`None` on stdio or without one).
fn authorization(cx: &RequestContext<RoleServer>) -> Option<Vec<u8>> {
    cx.extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.headers.get(http::header::AUTHORIZATION))
        .map(|v| v.as_bytes().to_vec())
}

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

/// Prefix of the request keys of MRTR approval questions (`approval:<requestId>`).
const APPROVAL_KEY: &str = "approval:";

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
fn decision_of(answer: &Value) -> codemode::ApprovalDecision {
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
        // What the approver was told when the call parked (input, reason, cell line), if it still
        // knows; else what the result says.
        let known = gateway.approver.as_ref().and_then(|a| a.unasked(run_id, p.request_id));
        let request = match known {
            Some(r) => r,
            None => codemode::ApprovalRequest {
                run_id: codemode::RunId::parse(run_id).ok()?,
                request_id: p.request_id,
                tool_id: p.tool_id.clone(),
                input_preview: "(not shown)".into(),
                reason: "the approval policy or a hook gates this tool".into(),
                cell_line: None,
                context: RunContext::default(),
            },
        };
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: ElicitingApprover::message(&request),
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
}

/// The contract §4 payload guard on the tool list a `tools/list` answer carries: exactly `exec` and
/// `wait`, else an error (the list is not sent).
fn guard_payload(tools: &[Tool]) -> Result<(), codemode::CodeModeError> {
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    codemode::surface::guard_tool_names(&[EXEC, WAIT], &names)
}

fn rmcp_tool(t: ModelTool) -> Tool {
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
            ServerCapabilities::builder().enable_logging().enable_tools().enable_tool_list_changed().build(),
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
            .map_err(|e| ErrorData::invalid_request(e, None))?;
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
        // Runs belong to the client: on a sessionless HTTP request (MCP 2026-07-28) the
        // handler lives for this one request, so the run scope is the client's, not the handler's.
        let modern = modern(&cx);
        // So do a fleet's runs on every HTTP request: the client's next request may reach another
        // replica, in another MCP session or none.
        let session: String =
            if self.http && (modern || self.gateway.fleet) { sessionless_scope(&cx) } else { self.session.to_string() };
        // Which agent this client's runs are for: its configured token decides (never what the
        // client says about itself); an unlisted client gets the gateway's default, or is refused.
        let target = self
            .gateway
            .client_target(authorization(&cx).as_deref(), self.http)
            .map_err(|e| ErrorData::invalid_request(e, None))?;
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
        // A modern client that can answer form elicitations is asked about parked calls in the
        // result itself (MRTR); its retry brings the answers and resumes the run.
        let elicits = cx.client_capabilities().and_then(|c| c.elicitation).is_some();
        if modern
            && elicits
            && let Some(questions) = approval_questions(&self.gateway, &session, &result)
        {
            return Ok(questions.into());
        }
        let json = result.to_json();
        let out = match result {
            CodeModeResult::Failed { .. } => CallToolResult::structured_error(json),
            _ => CallToolResult::structured(json),
        };
        Ok(out.into())
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
mod tests {
    use super::*;

    /// The guard inspects the payload itself, and refuses anything but exactly `exec`
    /// and `wait` (an extra tool, a missing one, a renamed one).
    #[test]
    fn the_payload_guard_refuses_any_other_list() {
        let tool = |name: &str| {
            rmcp_tool(ModelTool { name: name.into(), description: String::new(), input_schema: serde_json::json!({}) })
        };
        assert!(guard_payload(&[tool("exec"), tool("wait")]).is_ok());
        assert!(guard_payload(&[tool("wait"), tool("exec")]).is_ok());
        for bad in [
            vec![tool("exec")],
            vec![tool("exec"), tool("wait"), tool("read_file")],
            vec![tool("exec"), tool("Wait")],
            vec![],
        ] {
            let e = guard_payload(&bad).unwrap_err();
            assert_eq!(e.code, Some(codemode::CodeModeErrorCode::InternalError));
            assert!(e.message.contains("failing closed"), "{}", e.message);
        }
    }
}
