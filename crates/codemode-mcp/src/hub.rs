//! The upstream side: connections to the configured MCP servers, their tools as catalog entries
//! (`mcp:<server>:<tool>`), and a [`ToolExecutor`] that runs `MCP.<server>.<tool>()` calls on them.
//!
//! Failure is contained per server: a server that cannot start, never answers, answers garbage, or
//! crashes is recorded as failed and restarted with exponential backoff (1 s, 2 s, 4 s, … at most
//! 60 s). While it is down it stays in the guest's `MCP` namespace with the tools it last listed:
//! calls to it fail with a message saying it is down and why, which the guest sees as
//! `nested_tool_failed`. Every request has a time limit, so no `exec` ever
//! hangs on an upstream server; dropping a call cancels it upstream. Child processes are shut down
//! (stdin closed, then SIGTERM, then killed) by [`McpHub::shutdown`], and killed if dropped.

mod notifications;
mod tasks;
mod tools;

use crate::config::{ServerConfig, Transport};
use crate::now_ms;
use codemode_catalog::mcp_api::{PROMPTS_GET, RESOURCES_READ};
use codemode_catalog::policy::{PolicyContext, ToolPolicy};
use codemode_core::catalog::{ToolDefinition, ToolSource};
use codemode_core::executor::{NestedToolCall, ProgressSink, ToolError, ToolErrorKind, ToolExecutor, ToolResult};
pub use notifications::UpstreamLog;
use notifications::*;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, GetPromptRequestParams, Implementation, NumberOrString,
    ProgressNotificationParam, ProgressToken, ReadResourceRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RunningService, ServiceError};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tools::*;
pub use tools::{MAX_TOOL_NAME_CHARS, read_only_from, tool_name_refusal};

/// Longest graceful shutdown of one server before its process is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(8);
/// How often the hub looks for servers that went away and for restarts that are due.
const SUPERVISE_EVERY: Duration = Duration::from_millis(250);
/// First restart delay after a failure; it doubles with each failed attempt.
const RESTART_FIRST: Duration = Duration::from_secs(1);
/// Longest delay between two restart attempts. Prevents: a server that can never start (a wrong
/// command) being spawned in a tight loop.
const RESTART_MAX: Duration = Duration::from_secs(60);
/// Longest failure reason kept for a server (it is shown to the model and the operator).
const MAX_REASON_CHARS: usize = 500;

/// The delay before restart attempt `attempt` (1 for the first).
fn restart_delay(attempt: u32) -> Duration {
    RESTART_FIRST.saturating_mul(1u32 << attempt.saturating_sub(1).min(16)).min(RESTART_MAX)
}

/// The state of one upstream server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ServerState {
    /// Start-up in progress.
    Connecting,
    /// Connected; its tools are in the catalog.
    Connected,
    /// It could not start, answer or list its tools (see the status's `error`).
    Failed,
    /// `disabled: true` in the config.
    Disabled,
}

impl std::fmt::Display for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServerState::Connecting => "connecting",
            ServerState::Connected => "connected",
            ServerState::Failed => "failed",
            ServerState::Disabled => "disabled",
        })
    }
}

/// What the hub reports about one server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    /// Server name.
    pub name: String,
    /// Its state.
    pub state: ServerState,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Tools it contributes (after its allow/deny).
    pub tools: usize,
    /// Tools dropped by its allow/deny.
    pub filtered: usize,
    /// Restart attempts since it last failed (0 while it is connected).
    pub restarts: u32,
    /// Its last failures and recoveries, oldest first (at most [`MAX_SERVER_HISTORY`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<ServerEvent>,
}

/// Most events a server's [`ServerStatus::history`] keeps. Prevents: a server that crashes in a
/// loop growing its status without bound.
pub const MAX_SERVER_HISTORY: usize = 16;

/// A server went down or came back (see [`ServerStatus::history`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerEvent {
    /// Unix milliseconds.
    pub at_ms: u64,
    /// `failed` or `connected` (after a failure: a restart that worked).
    pub event: &'static str,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ServerStatus {
    fn note(&mut self, event: &'static str, reason: Option<String>) {
        if self.history.len() >= MAX_SERVER_HISTORY {
            self.history.remove(0);
        }
        self.history.push(ServerEvent { at_ms: now_ms(), event, reason });
    }
}

struct Live {
    service: RunningService<RoleClient, Handler>,
    peer: Peer<RoleClient>,
}

struct Server {
    config: ServerConfig,
    live: tokio::sync::Mutex<Option<Live>>,
    peer: Mutex<Option<Peer<RoleClient>>>,
    tools: Mutex<Vec<ToolDefinition>>,
    /// The server's tools as it listed them (after its allow/deny), for the passthrough surface.
    listed: Mutex<Vec<rmcp::model::Tool>>,
    status: Mutex<ServerStatus>,
    restart: Mutex<Restart>,
}

/// When a failed server is tried again.
#[derive(Default)]
struct Restart {
    /// Failed attempts since the last success.
    attempts: u32,
    /// When the next attempt is due (`None`: not failed).
    due: Option<std::time::Instant>,
    /// An attempt is running.
    running: bool,
}

/// The connections to every configured upstream server.
pub struct McpHub {
    servers: Vec<Arc<Server>>,
    generation: Arc<AtomicU64>,
    /// Where connections report `tools/list_changed` and log messages (handed to every
    /// (re)connection).
    senders: Senders,
    /// The upstream log messages, until taken by [`McpHub::upstream_logs`].
    logs: Mutex<Option<mpsc::Receiver<UpstreamLog>>>,
    /// Set by [`McpHub::shutdown`]: connections closing then are not failures.
    closing: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub").field("servers", &self.statuses()).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn unavailable(msg: impl Into<String>) -> ToolError {
    ToolError::new(ToolErrorKind::Unavailable, msg)
}

impl Server {
    /// Records a failure: the server is down until a restart succeeds. The tools it last listed stay
    /// (calls to them fail saying it is down), and the next restart is scheduled with backoff.
    fn set_failed(&self, error: String) {
        let error: String = error.chars().take(MAX_REASON_CHARS).collect();
        tracing::warn!(server = %self.config.name, error = %codemode::text::for_display(&error), "MCP server failed");
        *lock(&self.peer) = None;
        let attempts = {
            let mut r = lock(&self.restart);
            r.due = Some(std::time::Instant::now() + restart_delay(r.attempts + 1));
            r.attempts
        };
        let mut st = lock(&self.status);
        st.state = ServerState::Failed;
        st.note("failed", Some(error.clone()));
        st.error = Some(error);
        st.restarts = attempts;
    }

    /// Installs a (re)established connection and its tools.
    async fn set_connected(&self, live: Live, tools: Vec<rmcp::model::Tool>, resources: bool, prompts: bool) {
        *lock(&self.peer) = Some(live.peer.clone());
        // The previous connection, if any, is dropped here (its child process is killed).
        *self.live.lock().await = Some(live);
        *lock(&self.restart) = Restart::default();
        let mut st = lock(&self.status);
        st.restarts = 0;
        if st.history.last().is_some_and(|e| e.event == "failed") {
            st.note("connected", None);
        }
        drop(st);
        self.set_tools(tools, resources, prompts);
    }

    /// Connects and lists the tools; a failure is recorded (see [`Self::set_failed`]).
    async fn start(self: &Arc<Self>, senders: Senders) -> bool {
        match connect(&self.config, senders).await {
            Ok(live) => match list(&self.config, &live.peer).await {
                Ok((tools, resources, prompts)) => {
                    self.set_connected(live, tools, resources, prompts).await;
                    true
                }
                Err(e) => {
                    let _ = live.service.cancel().await;
                    self.set_failed(e.to_string());
                    false
                }
            },
            Err(e) => {
                self.set_failed(e.to_string());
                false
            }
        }
    }

    fn set_tools(&self, tools: Vec<rmcp::model::Tool>, resources: bool, prompts: bool) {
        let name = &self.config.name;
        let mut defs: Vec<ToolDefinition> = Vec::with_capacity(tools.len());
        let mut listed = Vec::with_capacity(tools.len());
        for t in tools {
            let raw = t.clone();
            match tool_name_refusal(&t.name) {
                None => {
                    let def = tool_definition(&self.config, t);
                    if codemode_catalog::nested::is_nested_code_mode(&def) {
                        tracing::warn!(
                            server = %codemode::text::for_display(name),
                            tool = %codemode::text::for_display(&def.name),
                            "MCP tool is a nested code mode: {}",
                            codemode_catalog::nested::ADVICE
                        );
                    }
                    let checked = self.config.validate_inputs
                        && codemode_catalog::policy::matching_pattern(&self.config.unchecked_tools, &def).is_none();
                    defs.push(if checked { def } else { def.without_input_check() });
                    listed.push(raw);
                }
                Some(why) => tracing::warn!(
                    server = %codemode::text::for_display(name),
                    tool = %codemode::text::for_display(&t.name),
                    "MCP tool left out of the catalog: its name {why}"
                ),
            }
        }
        if resources {
            defs.push(
                ToolDefinition::new(ToolSource::Mcp, name.clone(), RESOURCES_READ)
                    .with_description("Read a resource of this server by URI.")
                    .with_parameters(
                        json!({"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]}),
                    )
                    .read_only()
                    .with_read_only_source("read-only: resources/read reads (MCP)"),
            );
        }
        if prompts {
            defs.push(
                ToolDefinition::new(ToolSource::Mcp, name.clone(), PROMPTS_GET)
                    .with_description("Get a prompt of this server by name, with its arguments.")
                    .with_parameters(json!({"type": "object", "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}}, "required": ["name"]}))
                    .read_only()
                    .with_read_only_source("read-only: prompts/get reads (MCP)"),
            );
        }
        // The server's own allow/deny, as tool-name patterns.
        let policy = ToolPolicy {
            global: codemode_catalog::policy::PolicyLayer {
                profile: None,
                allow: self.config.allow.clone(),
                deny: self.config.deny.clone(),
            },
            ..ToolPolicy::default()
        };
        let outcome = policy.apply(defs, PolicyContext::default());
        let mut st = lock(&self.status);
        st.state = ServerState::Connected;
        st.error = None;
        st.tools = outcome.kept.len();
        st.filtered = outcome.removed.len();
        listed.retain(|t| outcome.kept.iter().any(|d| d.name == t.name.as_ref()));
        *lock(&self.listed) = listed;
        *lock(&self.tools) = outcome.kept;
    }
}

/// Why an upstream server could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The child process could not be started.
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        /// The configured command.
        command: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A configured header is not a valid HTTP header.
    #[error("header `{name}`: {reason}")]
    Header {
        /// The header name.
        name: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The MCP handshake failed.
    #[error("initialization failed: {0}")]
    Initialize(String),
    /// A request failed.
    #[error("{request} failed: {reason}")]
    Request {
        /// The MCP method (`tools/list`).
        request: &'static str,
        /// The error.
        reason: String,
    },
    /// No answer within `startupTimeoutMs`.
    #[error("no answer to {request} within {ms} ms")]
    Timeout {
        /// The MCP method.
        request: &'static str,
        /// The limit.
        ms: u64,
    },
}

async fn connect(config: &ServerConfig, senders: Senders) -> Result<Live, ConnectError> {
    let handler = Handler { server: config.name.clone(), senders, tasks: config.tasks };
    let startup = Duration::from_millis(config.startup_timeout_ms);
    let service = match &config.transport {
        Transport::Stdio { command, args, env, cwd } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env).kill_on_drop(true);
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|source| ConnectError::Spawn { command: command.clone(), source })?;
            if let Some(stderr) = stderr {
                let server = config.name.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncBufReadExt;
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::debug!(target: "codemode::mcp::stderr", %server, "{}", codemode::text::for_display(&line));
                    }
                });
            }
            tokio::time::timeout(startup, serve_upstream(handler, transport, config.tasks)).await
        }
        Transport::Http { url, headers } => {
            let mut map = std::collections::HashMap::new();
            for (k, v) in headers {
                let header =
                    |e: &dyn std::fmt::Display| ConnectError::Header { name: k.clone(), reason: e.to_string() };
                let name = http::HeaderName::from_bytes(k.as_bytes()).map_err(|e| header(&e))?;
                let value = http::HeaderValue::from_str(v).map_err(|e| header(&e))?;
                map.insert(name, value);
            }
            let cfg =
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.clone())
                    .custom_headers(map);
            let transport = rmcp::transport::StreamableHttpClientTransport::from_config(cfg);
            tokio::time::timeout(startup, serve_upstream(handler, transport, config.tasks)).await
        }
    };
    let service = match service {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(ConnectError::Initialize(e.to_string())),
        Err(_) => return Err(ConnectError::Timeout { request: "initialize", ms: config.startup_timeout_ms }),
    };
    let peer = service.peer().clone();
    Ok(Live { service, peer })
}

/// Connects `handler` over `transport`: with `tasks`, on the 2026-07-28 protocol where the server
/// speaks it (`server/discover`; the tasks extension exists only there), else — and for a server
/// that does not — with the `initialize` handshake.
async fn serve_upstream<T, E, A>(
    handler: Handler,
    transport: T,
    tasks: bool,
) -> Result<RunningService<RoleClient, Handler>, rmcp::service::ClientInitializeError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    use rmcp::model::ProtocolVersion;
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
    if !tasks {
        return handler.serve(transport).await;
    }
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    };
    handler.serve_with_lifecycle(transport, lifecycle).await
}

async fn list(
    config: &ServerConfig,
    peer: &Peer<RoleClient>,
) -> Result<(Vec<rmcp::model::Tool>, bool, bool), ConnectError> {
    let startup = Duration::from_millis(config.startup_timeout_ms);
    let caps = peer.peer_info().map(|i| i.capabilities.clone());
    let resources = caps.as_ref().is_some_and(|c| c.resources.is_some());
    let prompts = caps.as_ref().is_some_and(|c| c.prompts.is_some());
    let tools = if caps.as_ref().is_none_or(|c| c.tools.is_some()) {
        match tokio::time::timeout(startup, peer.list_all_tools()).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return Err(ConnectError::Request { request: "tools/list", reason: e.to_string() }),
            Err(_) => return Err(ConnectError::Timeout { request: "tools/list", ms: config.startup_timeout_ms }),
        }
    } else {
        Vec::new()
    };
    Ok((tools, resources, prompts))
}

impl McpHub {
    /// Connects to every configured server (in parallel, each within its startup time limit). Servers
    /// that fail are recorded, never fatal.
    pub async fn connect(configs: Vec<ServerConfig>) -> Arc<Self> {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let (logs_tx, logs_rx) = mpsc::channel::<UpstreamLog>(MAX_QUEUED_LOGS);
        let senders = Senders { changed: tx, logs: logs_tx };
        let servers: Vec<Arc<Server>> = configs
            .into_iter()
            .map(|config| {
                let status = ServerStatus {
                    name: config.name.clone(),
                    state: if config.disabled { ServerState::Disabled } else { ServerState::Connecting },
                    error: None,
                    tools: 0,
                    filtered: 0,
                    restarts: 0,
                    history: Vec::new(),
                };
                Arc::new(Server {
                    config,
                    live: tokio::sync::Mutex::new(None),
                    peer: Mutex::new(None),
                    tools: Mutex::new(Vec::new()),
                    listed: Mutex::new(Vec::new()),
                    status: Mutex::new(status),
                    restart: Mutex::new(Restart::default()),
                })
            })
            .collect();
        let mut joins = tokio::task::JoinSet::new();
        for s in servers.iter().filter(|s| !s.config.disabled) {
            let (s, senders) = (Arc::clone(s), senders.clone());
            joins.spawn(async move {
                s.start(senders).await;
            });
        }
        while joins.join_next().await.is_some() {}
        let hub = Arc::new(McpHub {
            servers,
            generation: Arc::new(AtomicU64::new(1)),
            senders,
            logs: Mutex::new(Some(logs_rx)),
            closing: Default::default(),
        });
        // Tool-list changes: list the server's tools again and bump the generation.
        let weak = Arc::downgrade(&hub);
        tokio::spawn(async move {
            while let Some(name) = rx.recv().await {
                let Some(hub) = weak.upgrade() else { break };
                hub.refresh(&name).await;
            }
        });
        // Servers that went away are noticed, and failed ones restarted with backoff.
        let weak = Arc::downgrade(&hub);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SUPERVISE_EVERY).await;
                let Some(hub) = weak.upgrade() else { break };
                if hub.closing.load(Ordering::SeqCst) {
                    break;
                }
                hub.supervise();
            }
        });
        hub
    }

    /// One supervision pass: a connected server whose connection closed (its process exited) is
    /// marked failed; a failed server whose restart is due is started again, in a task of its own.
    fn supervise(&self) {
        let now = std::time::Instant::now();
        for server in self.servers.iter().filter(|s| !s.config.disabled) {
            let state = lock(&server.status).state;
            if state == ServerState::Connected {
                let closed = lock(&server.peer).as_ref().is_some_and(|p| p.is_transport_closed());
                if closed {
                    server.set_failed("the server closed the connection (its process exited or crashed)".into());
                    self.generation.fetch_add(1, Ordering::SeqCst);
                }
                continue;
            }
            if state != ServerState::Failed {
                continue;
            }
            {
                let mut r = lock(&server.restart);
                if r.running || r.due.is_none_or(|due| due > now) {
                    continue;
                }
                r.running = true;
                r.attempts += 1;
            }
            let (server, senders, generation) = (server.clone(), self.senders.clone(), self.generation.clone());
            let closing = self.closing.clone();
            let name = server.config.name.clone();
            tokio::spawn(async move {
                tracing::info!(server = %name, attempt = lock(&server.restart).attempts, "restarting MCP server");
                let ok = server.start(senders).await;
                lock(&server.restart).running = false;
                if closing.load(Ordering::SeqCst) {
                    // The hub shut down meanwhile: the new connection must not outlive it.
                    *lock(&server.peer) = None;
                    if let Some(live) = server.live.lock().await.take() {
                        let _ = tokio::time::timeout(SHUTDOWN_GRACE, live.service.cancel()).await;
                    }
                    return;
                }
                if ok {
                    tracing::info!(server = %name, "MCP server is back");
                }
                // Either way the catalog changes: its tools are back, or its reason is new.
                generation.fetch_add(1, Ordering::SeqCst);
            });
        }
    }

    /// The log messages upstream servers send (`notifications/message`), for relaying; `None` after
    /// the first call.
    pub fn upstream_logs(&self) -> Option<mpsc::Receiver<UpstreamLog>> {
        lock(&self.logs).take()
    }

    /// The servers that are down (failed to start or crashed, being restarted), with the reason.
    pub fn unavailable_servers(&self) -> Vec<(String, String)> {
        self.servers
            .iter()
            .filter_map(|s| {
                let st = lock(&s.status);
                (st.state == ServerState::Failed).then(|| {
                    let why = st.error.clone().unwrap_or_else(|| "not connected".into());
                    (st.name.clone(), why)
                })
            })
            .collect()
    }

    /// Lists one server's tools again (after a `tools/list_changed` notification).
    pub async fn refresh(&self, name: &str) {
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        let Some(server) = self.servers.iter().find(|s| s.config.name == name) else { return };
        let peer = lock(&server.peer).clone();
        let Some(peer) = peer else { return };
        let listed = list(&server.config, &peer).await;
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        match listed {
            Ok((tools, resources, prompts)) => server.set_tools(tools, resources, prompts),
            Err(e) => server.set_failed(e.to_string()),
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        tracing::info!(server = name, "MCP tool list changed");
    }

    /// Increases whenever the set of upstream tools changes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The catalog definitions of every connected server's tools (after each server's allow/deny).
    pub fn tool_definitions(&self) -> Vec<ToolDefinition> {
        self.servers.iter().flat_map(|s| lock(&s.tools).clone()).collect()
    }

    /// Every server's tools exactly as the server listed them (after its allow/deny), by server, in
    /// the config's order: what the passthrough surface serves (see [`crate::passthrough`]).
    pub fn listed_tools(&self) -> Vec<(String, Vec<rmcp::model::Tool>)> {
        self.servers.iter().map(|s| (s.config.name.clone(), lock(&s.listed).clone())).collect()
    }

    /// Calls `tool` of `server` as a plain MCP client would, with the server's time limit, and
    /// returns the server's `CallToolResult` unchanged (`_meta` dropped). Used by the passthrough
    /// surface; a down server, a time-out or a protocol error is a [`ToolError`].
    pub async fn call_passthrough(
        &self,
        server: &str,
        tool: &str,
        input: serde_json::Map<String, Value>,
    ) -> Result<Value, ToolError> {
        let s = self
            .servers
            .iter()
            .find(|s| s.config.name == server)
            .ok_or_else(|| unavailable(format!("no MCP server `{server}`")))?;
        let result = self.call_upstream(s, tool, Value::Object(input), None, None, UpstreamTask::default()).await?;
        Ok(result.details)
    }

    /// Names of the connected servers.
    pub fn server_names(&self) -> Vec<String> {
        self.servers.iter().filter(|s| lock(&s.peer).is_some()).map(|s| s.config.name.clone()).collect()
    }

    /// The state of every configured server.
    pub fn statuses(&self) -> Vec<ServerStatus> {
        self.servers.iter().map(|s| lock(&s.status).clone()).collect()
    }

    /// Closes every connection; child processes get their stdin closed, then SIGTERM, then are killed.
    pub async fn shutdown(&self) {
        self.closing.store(true, Ordering::SeqCst);
        let mut joins = tokio::task::JoinSet::new();
        for s in &self.servers {
            *lock(&s.peer) = None;
            if let Some(live) = s.live.lock().await.take() {
                joins.spawn(async move {
                    let _ = tokio::time::timeout(SHUTDOWN_GRACE, live.service.cancel()).await;
                });
            }
        }
        while joins.join_next().await.is_some() {}
    }

    /// One upstream request; a `tools/call` answered with a task is polled to its end (see
    /// `hub::tasks`), and one whose `task` names a task an earlier process started continues it.
    async fn call_upstream(
        &self,
        server: &Arc<Server>,
        tool: &str,
        input: Value,
        progress: Option<ProgressSink>,
        idempotency_key: Option<String>,
        task: UpstreamTask,
    ) -> Result<ToolResult, ToolError> {
        let name = &server.config.name;
        let peer = lock(&server.peer).clone().ok_or_else(|| {
            let st = lock(&server.status).clone();
            let why = st.error.unwrap_or_else(|| "not connected".into());
            unavailable(format!(
                "MCP server `{name}` is down: {why}. codemode restarts it ({} attempt(s) so far); call it again in a later cell",
                st.restarts
            ))
        })?;
        let args = match input {
            Value::Object(m) => m,
            Value::Null => serde_json::Map::new(),
            other => {
                return Err(ToolError::new(
                    ToolErrorKind::InvalidInput,
                    format!("MCP tools take one object argument, got {other}"),
                ));
            }
        };
        let limit = Duration::from_millis(server.config.timeout_ms);
        let timed_out =
            || unavailable(format!("MCP server `{name}` did not answer within {} ms", server.config.timeout_ms));
        let result: Result<Value, ServiceError> = match tool {
            RESOURCES_READ => {
                let uri = args.get("uri").and_then(Value::as_str).unwrap_or("").to_string();
                as_json(
                    tokio::time::timeout(limit, peer.read_resource(ReadResourceRequestParams::new(uri)))
                        .await
                        .map_err(|_| timed_out())?,
                )
            }
            PROMPTS_GET => {
                let prompt = args.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                let mut params = GetPromptRequestParams::new(prompt);
                if let Some(Value::Object(a)) = args.get("arguments") {
                    params = params.with_arguments(a.clone());
                }
                as_json(tokio::time::timeout(limit, peer.get_prompt(params)).await.map_err(|_| timed_out())?)
            }
            _ if task.resume.is_some() => {
                let note = tasks::task_of_note(name, task.resume.as_deref().unwrap_or_default())?;
                if let Some(accept) = task.answer {
                    // The human answered the question the task asked: the answer goes to it.
                    tracing::info!(server = %name, task = %note.task_id, accept, "answering an upstream task's input request");
                    if let Err(e) = tasks::answer(&peer, &note.task_id, &note.keys, accept, limit).await {
                        return Err(ToolError::failed(format!("MCP server `{name}`: cannot answer its task: {e}")));
                    }
                } else {
                    tracing::info!(server = %name, task = %note.task_id, "continuing an upstream task another replica started");
                }
                let polled = tasks::poll(
                    &peer,
                    note.task_id.clone(),
                    tasks::MIN_POLL_MS,
                    limit,
                    progress.as_ref(),
                    task.note.as_ref(),
                )
                .await;
                asked(name, &note.task_id, polled)?
            }
            _ => {
                let params = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
                let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
                // The call's idempotency key, the same when it is issued again or replayed (see
                // `codemode::idempotency_key`), for a server that makes its side effects once.
                let mut options = rmcp::service::PeerRequestOptions::no_options();
                if let Some(key) = idempotency_key {
                    let mut meta = serde_json::Map::new();
                    meta.insert(codemode::IDEMPOTENCY_META_KEY.to_string(), Value::String(key));
                    options = options.with_meta(rmcp::model::RequestMetaObject::from(meta));
                }
                let call = async {
                    let handle = peer.send_request_with_option(request, options).await?;
                    // The request carries rmcp's progress token: progress the server reports for it
                    // goes to whoever watches the run.
                    let _route = progress.clone().map(|sink| {
                        let key = route_key(&handle.progress_token);
                        lock(progress_routes()).insert(key.clone(), sink);
                        ProgressRoute(key)
                    });
                    let mut abandoned = CancelOnDrop { peer: peer.clone(), id: Some(handle.id.clone()) };
                    let response = handle.await_response().await;
                    abandoned.id = None;
                    match response? {
                        rmcp::model::ServerResult::CallToolResult(r) => Ok(Answer::Result(r)),
                        // The server runs the call as a task (tasks extension): poll it below.
                        rmcp::model::ServerResult::CreateTaskResult(t) => Ok(Answer::Task(t.task)),
                        _ => Err(ServiceError::UnexpectedResponse),
                    }
                };
                match tokio::time::timeout(limit, call).await.map_err(|_| timed_out())? {
                    Ok(Answer::Result(r)) => as_json(Ok(r)),
                    Ok(Answer::Task(t)) => {
                        tracing::debug!(server = %name, task = %t.task_id, "the nested call runs as an upstream task");
                        match (&task.note, tasks::note_of(name, &t.task_id, Vec::new())) {
                            (Some(sink), Some(note)) => sink.note(note),
                            (Some(_), None) => {
                                tracing::warn!(server = %name, "an upstream task id too long to note: a replica that takes the run over cannot continue it")
                            }
                            _ => {}
                        }
                        let first = t.poll_interval_ms.unwrap_or(tasks::DEFAULT_POLL_MS);
                        let polled =
                            tasks::poll(&peer, t.task_id.clone(), first, limit, progress.as_ref(), task.note.as_ref())
                                .await;
                        asked(name, &t.task_id, polled)?
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match result {
            Ok(value) => {
                let content = value.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
                Ok(ToolResult { details: mcp_result(value), content })
            }
            Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                server.set_failed(format!("the connection closed: {e}"));
                self.generation.fetch_add(1, Ordering::SeqCst);
                Err(unavailable(format!("MCP server `{name}` closed the connection ({e})")))
            }
            Err(ServiceError::McpError(e)) => Err(ToolError::failed(format!("MCP server `{name}`: {}", e.message))),
            Err(e) => Err(unavailable(format!("MCP server `{name}`: {e}"))),
        }
    }
}

/// A polled task's end as the call's result: a failure stays a server error; a task asking for
/// input becomes the call's question (`ToolErrorKind::InputRequired`), continued from its note.
fn asked(
    server: &str,
    task_id: &str,
    polled: Result<Value, tasks::Polled>,
) -> Result<Result<Value, ServiceError>, ToolError> {
    match polled {
        Ok(v) => Ok(Ok(v)),
        Err(tasks::Polled::Failed(e)) => Ok(Err(e)),
        Err(tasks::Polled::Ask { question, keys }) => match tasks::note_of(server, task_id, keys) {
            Some(note) => Err(ToolError::input_required(format!("MCP server `{server}` asks: {question}"), note)),
            None => Err(ToolError::failed(format!(
                "MCP server `{server}`: its task asks for input under an id too long to keep"
            ))),
        },
    }
}

/// How an upstream `tools/call` was answered.
enum Answer {
    /// With its result.
    Result(rmcp::model::CallToolResult),
    /// With a task that runs the call (tasks extension).
    Task(rmcp::model::Task),
}

/// A nested call's side of upstream tasks: where to note a task it starts, and the note of one an
/// earlier process started (see `NestedToolCall::task_note` / `resume`).
#[derive(Default)]
struct UpstreamTask {
    note: Option<codemode_core::executor::TaskNoteSink>,
    resume: Option<String>,
    answer: Option<bool>,
}

/// An upstream answer as JSON.
fn as_json<T: Serialize>(r: Result<T, ServiceError>) -> Result<Value, ServiceError> {
    r.map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
}

/// The `McpToolResult` shape of contract §9: `content`, `structuredContent`, `isError` and whatever else
/// the server returned (`_meta` dropped).
fn mcp_result(mut value: Value) -> Value {
    if let Value::Object(m) = &mut value {
        m.remove("_meta");
    }
    value
}

#[async_trait::async_trait]
impl ToolExecutor for McpHub {
    async fn call(&self, call: NestedToolCall) -> Result<ToolResult, ToolError> {
        let server = self
            .servers
            .iter()
            .find(|s| s.config.name == call.tool.owner)
            .ok_or_else(|| unavailable(format!("no MCP server `{}`", call.tool.owner)))?;
        let key = codemode::idempotency_key(&call);
        let task = UpstreamTask { note: call.task_note, resume: call.resume, answer: call.answer };
        self.call_upstream(server, &call.tool.name, call.input, call.progress, Some(key), task).await
    }
}
