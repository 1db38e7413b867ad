//! The tools an arm gives the model, reached the way an agent's MCP client reaches them: the
//! episode's own `codemode` gateway (passthrough for `direct`, `exec`/`wait` for the code-mode
//! arms) in this process, over the real MCP protocol on an in-memory transport, in front of the
//! task's real upstream servers (child processes started for the episode and stopped after it).

use crate::model::{ToolCall, ToolSpec};
use crate::suite::{Arm, Suite, Task, substitute, substitute_value};
use codemode::config_file::ConfigFile;
use codemode_mcp::passthrough::PassthroughServer;
use codemode_mcp::server::{ExecWaitServer, Gateway};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig, GetTaskParams,
    Implementation, TaskPayload,
};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Longest the host polls one task of the `codemode-tasks` arm. Prevents: a run that never ends
/// holding the evaluation (a run's own limits end it far sooner).
pub const MAX_TASK_WAIT: Duration = Duration::from_secs(300);

/// How often the host polls a task when the server suggests no interval.
pub const TASK_POLL: Duration = Duration::from_millis(20);

/// Why a surface could not be started.
#[derive(Debug, thiserror::Error)]
#[error("surface: {0}")]
pub struct SurfaceError(pub String);

/// One tool call's result as it enters the model's context.
#[derive(Debug, Clone)]
pub struct ToolOutcome {
    /// The text the model sees (the result's text content; its structured content as JSON when it
    /// has no text).
    pub content: String,
    /// The result is an error.
    pub is_error: bool,
    /// Tasks polled by the host for this call (`codemode-tasks`), each poll costing no tokens.
    pub task_polls: u32,
}

enum Backend {
    Passthrough(Arc<codemode_mcp::McpHub>),
    Gateway(Arc<Gateway>),
}

/// An arm's surface for one episode.
pub struct Surface {
    arm: Arm,
    client: RunningService<RoleClient, ClientConfig>,
    backend: Backend,
    /// The tools the surface lists.
    pub tools: Vec<ToolSpec>,
    /// The server's `instructions`, given to the model with the system text.
    pub instructions: String,
    /// Upstream servers that failed to start (the episode then fails with their reasons).
    pub down: Vec<(String, String)>,
}

/// The `codemode` config of an episode: the task's servers as `mcpServers`, code mode on for the
/// code-mode arms (with the task's overrides), off for `direct`.
pub fn episode_config(suite: &Suite, task: &Task, arm: Arm, work: &Path) -> Value {
    let mut servers = serde_json::Map::new();
    for name in &task.servers {
        let Some(spec) = suite.servers.get(name) else { continue };
        let mut s = json!({
            "command": substitute(&spec.command, work, &suite.dir),
            "args": spec.args.iter().map(|a| substitute(a, work, &suite.dir)).collect::<Vec<_>>(),
            "env": substitute_value(&serde_json::to_value(&spec.env).unwrap_or_default(), work, &suite.dir),
            "cwd": work.display().to_string(),
        });
        if let Some(t) = spec.timeout_ms {
            s["timeoutMs"] = json!(t);
        }
        servers.insert(name.clone(), s);
    }
    let mut code_mode = json!({ "enabled": arm != Arm::Direct });
    if arm != Arm::Direct
        && let Some(Value::Object(overrides)) = &task.code_mode
    {
        for (k, v) in overrides {
            code_mode[k] = v.clone();
        }
    }
    json!({ "mcpServers": servers, "tools": { "codeMode": code_mode } })
}

fn spec(t: rmcp::model::Tool) -> ToolSpec {
    ToolSpec {
        name: t.name.to_string(),
        description: t.description.map(|d| d.to_string()).unwrap_or_default(),
        input_schema: Value::Object((*t.input_schema).clone()),
    }
}

/// Serves one MCP session of `server` on `io` until the client closes it.
fn serve_in_background<S: rmcp::ServerHandler>(server: S, io: tokio::io::DuplexStream) {
    tokio::spawn(async move {
        if let Ok(running) = server.serve(io).await {
            let _ = running.waiting().await;
        }
    });
}

impl ToolOutcome {
    fn error(content: String, task_polls: u32) -> ToolOutcome {
        ToolOutcome { content, is_error: true, task_polls }
    }

    fn of(r: &CallToolResult, task_polls: u32) -> ToolOutcome {
        ToolOutcome { content: result_text(r), is_error: r.is_error.unwrap_or(false), task_polls }
    }
}

/// The text a result puts in the model's context.
pub fn result_text(r: &CallToolResult) -> String {
    let texts: Vec<&str> = r.content.iter().filter_map(|c| c.as_text().map(|t| t.text.as_str())).collect();
    if texts.is_empty() {
        r.structured_content.as_ref().map(|v| v.to_string()).unwrap_or_default()
    } else {
        texts.join("\n")
    }
}

impl Surface {
    /// Starts the episode's gateway for `arm` (its upstream servers included) and connects a
    /// client to it.
    pub async fn start(suite: &Suite, task: &Task, arm: Arm, work: &Path) -> Result<Surface, SurfaceError> {
        let text = episode_config(suite, task, arm, work).to_string();
        let file = ConfigFile::parse(&text).map_err(|e| SurfaceError(format!("config: {e}")))?;
        let (server_io, client_io) = tokio::io::duplex(1 << 22);
        let backend = match arm {
            Arm::Direct => {
                let hub = codemode_mcp::connect_servers(&file).await.map_err(|e| SurfaceError(e.to_string()))?;
                serve_in_background(PassthroughServer::new(hub.clone()), server_io);
                Backend::Passthrough(hub)
            }
            Arm::CodeMode | Arm::CodeModeTasks => {
                let gw = codemode_mcp::build_gateway(
                    &file,
                    &codemode::PolicyTarget::default(),
                    codemode_mcp::GatewayOptions::default(),
                )
                .await
                .map_err(|e| SurfaceError(e.to_string()))?;
                gw.code_mode().prepare_engine().await.map_err(|e| SurfaceError(e.message))?;
                serve_in_background(ExecWaitServer::new(gw.clone()), server_io);
                Backend::Gateway(gw)
            }
        };
        let down = match &backend {
            Backend::Passthrough(h) => h.unavailable_servers(),
            Backend::Gateway(g) => g.hub().unavailable_servers(),
        };
        let caps = if arm == Arm::CodeModeTasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        let client = ClientConfig::new(caps, Implementation::new("codemode-eval", env!("CARGO_PKG_VERSION")))
            .serve(client_io)
            .await
            .map_err(|e| SurfaceError(format!("MCP handshake: {e}")))?;
        let instructions = client.peer_info().and_then(|i| i.instructions.clone()).unwrap_or_default();
        let tools = client.peer().list_all_tools().await.map_err(|e| SurfaceError(format!("tools/list: {e}")))?;
        Ok(Surface { arm, client, backend, tools: tools.into_iter().map(spec).collect(), instructions, down })
    }

    /// Runs one tool call the model made.
    pub async fn call(&self, call: &ToolCall) -> ToolOutcome {
        let arguments = match &call.arguments {
            Value::Object(m) => m.clone(),
            Value::Null => serde_json::Map::new(),
            other => return ToolOutcome::error(format!("tool input must be an object, got {other}"), 0),
        };
        let params = CallToolRequestParams::new(call.name.clone()).with_arguments(arguments);
        match self.client.peer().call_tool_once(params).await {
            Err(e) => ToolOutcome::error(format!("MCP error: {e}"), 0),
            Ok(CallToolResponse::Complete(r)) => ToolOutcome::of(&r, 0),
            Ok(CallToolResponse::Task(created)) if self.arm == Arm::CodeModeTasks => {
                self.drive(created.task.task_id.to_string(), created.task.poll_interval_ms).await
            }
            Ok(other) => ToolOutcome::error(format!("unexpected answer to tools/call: {other:?}"), 0),
        }
    }

    /// The host's side of the tasks extension: polls `tasks/get` until the task ends, and returns
    /// its result as the call's.
    async fn drive(&self, id: String, interval_ms: Option<u64>) -> ToolOutcome {
        let interval =
            interval_ms.map(Duration::from_millis).unwrap_or(TASK_POLL).clamp(TASK_POLL, Duration::from_secs(1));
        let started = tokio::time::Instant::now();
        let mut polls = 0u32;
        loop {
            polls += 1;
            let task = match self.client.peer().get_task(GetTaskParams::new(id.clone())).await {
                Ok(t) => t.task,
                Err(e) => return ToolOutcome::error(format!("tasks/get: {e}"), polls),
            };
            match task.payload {
                TaskPayload::Completed { result } => {
                    return match serde_json::from_value::<CallToolResult>(Value::Object(result)) {
                        Ok(r) => ToolOutcome::of(&r, polls),
                        Err(e) => {
                            ToolOutcome::error(format!("a completed task's result is not a CallToolResult: {e}"), polls)
                        }
                    };
                }
                TaskPayload::Working => {}
                other => return ToolOutcome::error(format!("task ended: {other:?}"), polls),
            }
            if started.elapsed() > MAX_TASK_WAIT {
                return ToolOutcome::error(format!("task {id} still working after {MAX_TASK_WAIT:?}"), polls);
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// Closes the client and stops the gateway and its upstream servers.
    pub async fn close(self) {
        let _ = self.client.cancel().await;
        match self.backend {
            Backend::Passthrough(hub) => hub.shutdown().await,
            Backend::Gateway(gw) => gw.shutdown().await,
        }
    }
}
