//! The passthrough surface: `codemode serve` with code mode disabled (contract V1, the book's
//! "The contract: checklist") serves the upstream servers' tools as they are, the way a client
//! configured with those servers would see them: same names, descriptions, input and output
//! schemas and annotations, and each call answered with the server's own `CallToolResult`.
//! (`execution`, the tasks extension's `taskSupport`, is not forwarded: rmcp's `Tool` does not
//! model it, and this surface makes plain calls.) No `exec`, no `wait`, no sandbox: a team switches
//! one gateway between the two surfaces (`tools.codeMode.enabled`) and compares them
//! (`codemode eval`'s `direct` arm).
//!
//! A name listed by two servers is served as `<server>_<name>` for each of them (the one change a
//! merged list forces), with a warning. A down server's tools stay listed and a call to one is
//! answered with an error result saying the server is down, as in code mode. A cancelled request
//! cancels the upstream call.

use crate::McpHub;
use crate::server::ServeError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One served tool: what the client sees, and the server and upstream name a call goes to.
struct Route {
    tool: Tool,
    server: String,
    upstream: String,
}

/// The served tools: every server's listed tools, renamed `<server>_<name>` where two servers list
/// the same name.
fn routes(hub: &McpHub) -> Vec<Route> {
    let listed = hub.listed_tools();
    let mut count: HashMap<String, usize> = HashMap::new();
    for (_, tools) in &listed {
        for t in tools {
            *count.entry(t.name.to_string()).or_default() += 1;
        }
    }
    let mut routes = Vec::new();
    for (server, tools) in listed {
        for mut tool in tools {
            let upstream = tool.name.to_string();
            if count.get(&upstream).copied().unwrap_or(0) > 1 {
                tool.name = format!("{server}_{upstream}").into();
            }
            routes.push(Route { tool, server: server.clone(), upstream });
        }
    }
    routes
}

/// Logs each tool name two servers share, with the names it is served under.
fn warn_collisions(hub: &McpHub) {
    for r in routes(hub).iter().filter(|r| r.tool.name != r.upstream.as_str()) {
        tracing::warn!(
            server = %codemode::text::for_display(&r.server),
            tool = %codemode::text::for_display(&r.upstream),
            served = %codemode::text::for_display(&r.tool.name),
            "another MCP server lists a tool of this name: it is served under its server's prefix"
        );
    }
}

/// One MCP session of the passthrough surface (a client over stdio, or one HTTP session).
pub struct PassthroughServer {
    hub: Arc<McpHub>,
    /// The hub's tool generation this session last listed: a change is announced with
    /// `notifications/tools/list_changed` after the next call.
    listed: AtomicU64,
}

impl PassthroughServer {
    /// A session over `hub`'s servers.
    pub fn new(hub: Arc<McpHub>) -> Self {
        let listed = AtomicU64::new(hub.generation());
        PassthroughServer { hub, listed }
    }
}

/// A failed call as the client sees it: an error result carrying the reason (as a server's own
/// failed call would be), never a protocol error that would end an agent's turn.
fn error_result(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

impl ServerHandler for PassthroughServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_server_info(Implementation::new("codemode", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.listed.store(self.hub.generation(), Ordering::SeqCst);
        Ok(ListToolsResult::with_all_items(routes(&self.hub).into_iter().map(|r| r.tool).collect()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let Some(route) = routes(&self.hub).into_iter().find(|r| r.tool.name == name.as_str()) else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{}`", codemode::text::for_display(&name)),
                None,
            ));
        };
        let input = request.arguments.unwrap_or_default();
        // A cancelled request drops the call, which cancels it upstream.
        let answered = tokio::select! {
            r = self.hub.call_passthrough(&route.server, &route.upstream, input) => r,
            () = cx.ct.cancelled() => return Err(ErrorData::internal_error("the request was cancelled", None)),
        };
        let result = match answered {
            Ok(value) => serde_json::from_value::<CallToolResult>(value).unwrap_or_else(|e| {
                error_result(format!(
                    "MCP server `{}` answered with a result that is not a CallToolResult: {e}",
                    route.server
                ))
            }),
            Err(e) => error_result(e.message),
        };
        let now = self.hub.generation();
        if self.listed.swap(now, Ordering::SeqCst) != now {
            let _ = cx.peer.notify_tool_list_changed().await;
        }
        Ok(CallToolResponse::Complete(result))
    }
}

/// Serves the passthrough surface over stdin/stdout until the client disconnects (stdout carries
/// nothing but protocol messages).
pub async fn serve_stdio_passthrough(hub: Arc<McpHub>) -> Result<(), ServeError> {
    warn_collisions(&hub);
    let running = PassthroughServer::new(hub)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ServeError::Initialize(e.to_string()))?;
    running.waiting().await.map_err(|e| ServeError::Session(e.to_string()))?;
    Ok(())
}

/// Serves the passthrough surface as streamable HTTP at `/mcp` on `listener` until `shutdown`
/// resolves, with the same Host/Origin checks as code mode's endpoint (see
/// [`crate::http::serve_http`]).
pub async fn serve_http_passthrough(
    hub: Arc<McpHub>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    warn_collisions(&hub);
    let addr = listener.local_addr().map_err(ServeError::Http)?;
    let (hosts, origins) = crate::http::allowed_hosts_and_origins(addr);
    let ct = tokio_util::sync::CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .with_cancellation_token(ct.child_token());
    let service: StreamableHttpService<PassthroughServer, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(PassthroughServer::new(hub.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    tracing::info!(%addr, "serving the upstream tools unchanged (code mode disabled) at /mcp");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            ct.cancel();
        })
        .await
        .map_err(ServeError::Http)
}
