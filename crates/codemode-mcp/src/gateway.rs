//! The runtime behind the server ([`Gateway`]): code mode over the upstream servers and any local
//! tools, shared by every session; the tool list it serves (guarded to exactly `exec` and `wait`),
//! the catalog rebuilt when an upstream server's tools change, the clients it knows and the agent
//! each one runs as.

use crate::approval::ElicitingApprover;
use crate::hub::McpHub;
use crate::server::{guard_payload, rmcp_tool};
use codemode::PolicyTarget;
use codemode::surface::{EXEC, ModelTool, WAIT, wait_tool};
use codemode::{CodeMode, CodeModeResult, RunContext, RunObserver};
use rmcp::RoleServer;
use rmcp::model::Tool;
use rmcp::service::RequestContext;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The runtime behind the server: code mode over the upstream servers (and any local tools).
pub struct Gateway {
    pub(crate) cm: CodeMode,
    pub(crate) hub: Arc<McpHub>,
    /// Puts gated calls to the human behind each session (MCP elicitation), when `cm` uses it.
    pub(crate) approver: Option<Arc<ElicitingApprover>>,
    pub(crate) applied: AtomicU64,
    /// Set when the server stops: sessions closing then keep their runs (a directory store keeps
    /// them across the restart).
    pub(crate) stopping: std::sync::atomic::AtomicBool,
    /// The contract §18 debugging switches (read from the environment).
    pub(crate) debug: Arc<crate::debug::DebugSwitches>,
    /// The secret behind the tags of MRTR `requestState`s (random per process; shared by the
    /// fleet in fleet mode, so a retry may land on any replica).
    pub(crate) state_key: [u8; 32],
    /// Fleet mode (a store shared by replicas): runs belong to the client on every transport (its
    /// credential's digest, or the `runId` as capability), never to one replica's MCP session, and
    /// a session closing does not abort its runs (the client may continue on another replica).
    pub(crate) fleet: bool,
    /// The configured clients: which client's runs are for which agent (`clients`, set once).
    pub(crate) clients: std::sync::OnceLock<crate::clients::Clients>,
    /// The runs this process serves as MCP tasks (see [`crate::tasks`]).
    pub(crate) tasks: crate::tasks::Tasks,
    /// The operator console's ledger, when `serve --console` is on (see [`Self::set_console`]).
    pub(crate) console: std::sync::OnceLock<Arc<crate::console::ledger::Ledger>>,
    /// The clients that asked for log messages (`logging/setLevel`), by session, with their level.
    #[allow(deprecated)]
    pub(crate) log_clients:
        std::sync::Mutex<std::collections::HashMap<String, (rmcp::Peer<RoleServer>, rmcp::model::LoggingLevel)>>,
}

/// The rank of a log level (higher is more severe).
#[allow(deprecated)]
pub(crate) fn level_rank(level: rmcp::model::LoggingLevel) -> u8 {
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
    pub fn client_target(
        &self,
        authorization: Option<&[u8]>,
        http: bool,
    ) -> Result<Option<PolicyTarget>, crate::clients::ClientRefused> {
        let Some(clients) = self.clients.get() else { return Ok(None) };
        match clients.identify(authorization) {
            crate::clients::Client::Known(_, target) => Ok(Some(target.clone())),
            crate::clients::Client::Unknown if http && clients.require_known => Err(crate::clients::ClientRefused),
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

    pub(crate) fn build(
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
            state_key: fleet_key.unwrap_or_else(codemode_snapshot::signing::random_key),
            fleet: fleet_key.is_some(),
            clients: Default::default(),
            tasks: Default::default(),
            console: std::sync::OnceLock::new(),
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
        // Tasks whose driver died are taken over here too, polled or not (see `crate::tasks`).
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(Gateway::sweep_tasks_forever(Arc::downgrade(&gateway)));
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
        let Some(ledger) = self.console.get() else {
            return match tool {
                EXEC => Some(self.cm.exec_json_observed(&ctx, args, observer).await),
                WAIT => Some(self.cm.wait_json_observed(&ctx, args, observer).await),
                _ => None,
            };
        };
        if tool != EXEC && tool != WAIT {
            return None;
        }
        let tracked = ledger.begin(&ctx, tool, args).await;
        let started = std::time::Instant::now();
        let result = if tool == EXEC {
            self.cm.exec_json_observed(&ctx, args, observer).await
        } else {
            self.cm.wait_json_observed(&ctx, args, observer).await
        };
        ledger.end(tracked, tool, &result, started.elapsed());
        Some(result)
    }

    /// Reports every `exec`/`wait` to the operator console's `ledger` (its runtime must have it as
    /// trajectory sink, see [`crate::GatewayOptions::console`]); only the first call counts.
    pub fn set_console(&self, ledger: Arc<crate::console::ledger::Ledger>) -> bool {
        self.console.set(ledger).is_ok()
    }

    /// The operator console's ledger, when the console is on.
    pub fn console(&self) -> Option<&Arc<crate::console::ledger::Ledger>> {
        self.console.get()
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
pub(crate) fn target_context(mut ctx: RunContext, target: Option<&PolicyTarget>) -> RunContext {
    if let Some(t) = target {
        ctx.scope.agent_id = t.agent.clone();
        ctx.provider = t.provider.clone();
        ctx.model = t.model.clone();
    }
    ctx
}

/// The `Authorization` header of a request over HTTP (`None` on stdio or without one).
pub(crate) fn authorization(cx: &RequestContext<RoleServer>) -> Option<Vec<u8>> {
    cx.extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.headers.get(http::header::AUTHORIZATION))
        .map(|v| v.as_bytes().to_vec())
}
