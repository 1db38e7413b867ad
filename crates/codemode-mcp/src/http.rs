//! Streamable HTTP for `codemode serve --http`: the MCP endpoint at `/mcp` (DNS-rebinding
//! protection, the SSE replay window) and the approval endpoint `POST /approvals/{runId}/{requestId}`
//! (bearer token, the same Host/Origin checks).

use crate::server::{ExecWaitServer, Gateway, ServeError};
use axum::response::IntoResponse as _;
use std::net::SocketAddr;
use std::sync::Arc;

/// Hosts and origins accepted by the HTTP server (DNS-rebinding protection): the bound address,
/// and `localhost` forms of it for loopback binds.
pub fn allowed_hosts_and_origins(addr: SocketAddr) -> (Vec<String>, Vec<String>) {
    let port = addr.port();
    let mut hosts = vec![addr.to_string(), addr.ip().to_string()];
    let mut origins = vec![format!("http://{addr}")];
    if addr.ip().is_loopback() {
        for h in ["localhost", "127.0.0.1", "[::1]", "::1"] {
            hosts.push(h.to_string());
            hosts.push(format!("{h}:{port}"));
        }
        origins.push(format!("http://localhost:{port}"));
        origins.push(format!("http://127.0.0.1:{port}"));
    }
    hosts.sort();
    hosts.dedup();
    (hosts, origins)
}

/// Shortest token [`serve_http`] accepts for its approval endpoint (a guessable token would let
/// anyone on the network approve calls).
pub const MIN_APPROVAL_TOKEN_LEN: usize = 16;

/// Serves streamable HTTP at `/mcp` on `listener` until `shutdown` resolves; every MCP session gets
/// its own handler (and run scope), and its suspended runs are aborted when it closes.
///
/// With `approval_token` (at least [`MIN_APPROVAL_TOKEN_LEN`] characters), also
/// `POST /approvals/{runId}/{requestId}` with `Authorization: Bearer <token>` and a JSON body
/// `{"decision":"approve"}` or `{"decision":"deny","reason":"…"}` records a human's decision on a
/// parked call (see `CodeMode::decide`): 204 when recorded, 401 for a missing or wrong token, 400 for
/// a bad body, 404 for an unknown or settled run, 410 for a run past its TTL. Without a token the endpoint does not exist.
pub async fn serve_http(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    approval_token: Option<String>,
) -> Result<(), ServeError> {
    serve_http_with(gateway, listener, shutdown, HttpOptions { approval_token, console: None }).await
}

/// What [`serve_http_with`] serves besides `/mcp`.
#[derive(Default)]
pub struct HttpOptions {
    /// The approval endpoint's bearer token (see [`serve_http`]).
    pub approval_token: Option<String>,
    /// The operator console at `/console` (see [`crate::console`]); its ledger must be the
    /// gateway's (see [`crate::GatewayOptions::console`]).
    pub console: Option<crate::console::ConsoleSetup>,
}

/// [`serve_http`] with the approval endpoint and the operator console as `options` say.
pub async fn serve_http_with(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    options: HttpOptions,
) -> Result<(), ServeError> {
    let HttpOptions { approval_token, console } = options;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let addr = listener.local_addr().map_err(ServeError::Http)?;
    let (hosts, origins) = allowed_hosts_and_origins(addr);
    let ct = tokio_util::sync::CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts.clone())
        .with_allowed_origins(origins.clone())
        .with_cancellation_token(ct.child_token());
    let gw = gateway.clone();
    // Recent SSE events are kept (bounded) so a client whose stream dropped resumes it with
    // `Last-Event-ID` and still gets what was sent meanwhile, such as a long `exec`'s result.
    let sessions = LocalSessionManager::default().with_event_store(Arc::new(crate::replay::ReplayWindow::new()));
    let service: StreamableHttpService<ExecWaitServer, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(ExecWaitServer::aborting_on_close(gw.clone())),
        Arc::new(sessions),
        config,
    );
    let mcp = axum::Router::new().fallback_service(service).layer(axum::middleware::from_fn(name_task_requests));
    let mut app = axum::Router::new().nest_service("/mcp", mcp);
    if let Some(token) = approval_token {
        if token.chars().count() < MIN_APPROVAL_TOKEN_LEN {
            return Err(ServeError::WeakToken);
        }
        let endpoint = ApprovalEndpoint {
            gateway: gateway.clone(),
            token: Arc::from(token),
            hosts: hosts.into(),
            origins: origins.into(),
        };
        app = app.route("/approvals/{run}/{request}", axum::routing::post(approve_over_http).with_state(endpoint));
        tracing::info!(%addr, "approval endpoint at /approvals/{{runId}}/{{requestId}} (bearer token)");
    }
    if let Some(setup) = console {
        let console = crate::console::Console::new(gateway.clone(), setup, addr);
        app = app.merge(console.router());
        tokio::spawn(console.run_background(ct.child_token()));
        tracing::info!(%addr, "operator console at /console");
    }
    tracing::info!(%addr, "serving MCP (streamable HTTP) at /mcp");
    // TCP_NODELAY: a result is written as small SSE frames; with Nagle's algorithm a client that keeps
    // its connection alive waits for its own delayed ACK (~40 ms) before the last frame arrives.
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream: &mut tokio::net::TcpStream| {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
        }
    });
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(async move {
            shutdown.await;
            gateway.begin_shutdown();
            ct.cancel();
        })
        .await
        .map_err(ServeError::Http)
}

/// Largest body [`name_task_requests`] reads (rmcp's own limit of a POST body).
const MAX_TASK_REQUEST_BYTES: usize = 4 << 20;

/// Gives a `tasks/get`, `tasks/update` or `tasks/cancel` request that lacks the `Mcp-Name` header
/// the one its body says (`params.taskId`), as FastMCP's server does: the tasks extension asks
/// clients to send it, and FastMCP's `fastmcp-tasks` 4.1 client does not, so without this its polls
/// would all be refused. Only a plain task id (`cm_` and hex, the only ids this server issues) is
/// copied; a request with the header keeps it, and rmcp still checks it against the body.
async fn name_task_requests(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    const TASK_METHODS: [&str; 3] = ["tasks/get", "tasks/update", "tasks/cancel"];
    let headers = request.headers();
    let is_task = headers.get("mcp-method").and_then(|v| v.to_str().ok()).is_some_and(|m| TASK_METHODS.contains(&m));
    if !is_task || headers.contains_key("mcp-name") || request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_TASK_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(_) => return (axum::http::StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n").into_response(),
    };
    let task_id = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("params")?.get("taskId")?.as_str().map(str::to_string))
        .filter(|id| id.len() <= 64 && codemode::RunId::parse(id).is_ok());
    if let Some(value) = task_id.and_then(|id| axum::http::HeaderValue::from_str(&id).ok()) {
        parts.headers.insert("mcp-name", value);
    }
    next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))).await
}

/// State of the approval endpoint.
#[derive(Clone)]
struct ApprovalEndpoint {
    gateway: Arc<Gateway>,
    token: Arc<str>,
    /// Accepted `Host` values (as for `/mcp`).
    hosts: Arc<[String]>,
    /// Accepted `Origin` values (as for `/mcp`).
    origins: Arc<[String]>,
}

/// Compares two secrets in time that depends on neither their content nor their lengths: both are
/// hashed (SHA-256) and the fixed-size digests compared without an early exit. Prevents: timing
/// that hints at the token's bytes or, as a plain length check did, its length.
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    use sha2::Digest;
    let (x, y) = (sha2::Sha256::digest(a), sha2::Sha256::digest(b));
    x.iter().zip(y.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a request to the approval endpoint comes through an accepted `Host` and (when the
/// browser sent one) `Origin`: the same DNS-rebinding protection as `/mcp`. Prevents: a web page
/// the operator visits posting decisions to a loopback gateway through a rebound name.
pub(crate) fn approval_request_allowed(headers: &axum::http::HeaderMap, hosts: &[String], origins: &[String]) -> bool {
    let header = |name| headers.get(name).map(|v: &axum::http::HeaderValue| v.to_str().unwrap_or("\u{0}"));
    let host_ok = header(axum::http::header::HOST).is_some_and(|h| hosts.iter().any(|a| a.eq_ignore_ascii_case(h)));
    let origin_ok =
        header(axum::http::header::ORIGIN).is_none_or(|o| origins.iter().any(|a| a.eq_ignore_ascii_case(o)));
    host_ok && origin_ok
}

async fn approve_over_http(
    axum::extract::State(endpoint): axum::extract::State<ApprovalEndpoint>,
    axum::extract::Path((run, request)): axum::extract::Path<(String, u64)>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> (axum::http::StatusCode, String) {
    use axum::http::StatusCode;
    if !approval_request_allowed(&headers, &endpoint.hosts, &endpoint.origins) {
        tracing::warn!(%run, request, "approval endpoint: Host or Origin not accepted");
        return (StatusCode::FORBIDDEN, "Host or Origin not accepted (DNS-rebinding protection)\n".into());
    }
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !same_secret(presented.as_bytes(), endpoint.token.as_bytes()) {
        tracing::warn!(%run, request, "approval endpoint: missing or wrong token");
        return (StatusCode::UNAUTHORIZED, "missing or wrong bearer token\n".into());
    }
    let decision: codemode::ApprovalDecision = match serde_json::from_slice(&body) {
        Ok(d) => d,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("expected {{\"decision\":\"approve\"}} or {{\"decision\":\"deny\",\"reason\":\"…\"}}: {e}\n"),
            );
        }
    };
    let Ok(run_id) = codemode::RunId::parse(&run) else {
        return (StatusCode::NOT_FOUND, "code mode run is unavailable or expired.\n".into());
    };
    match endpoint.gateway.code_mode().decide(&run_id, request, decision.clone()).await {
        Ok(()) => {
            tracing::info!(target: "codemode::approval", %run, request, ?decision, "approval decision recorded over HTTP");
            (StatusCode::NO_CONTENT, String::new())
        }
        Err(e) if e.code == Some(codemode::CodeModeErrorCode::SnapshotExpired) => {
            (StatusCode::GONE, format!("{}\n", e.message))
        }
        Err(e) => (StatusCode::NOT_FOUND, format!("{}\n", e.message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_by_content_and_length() {
        assert!(same_secret(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!same_secret(b"0123456789abcdef", b"0123456789abcdeX"));
        assert!(!same_secret(b"0123456789abcdef", b"0123456789abcde"));
        assert!(!same_secret(b"", b"x"));
    }

    #[test]
    fn approval_requests_need_an_accepted_host_and_origin() {
        let (hosts, origins) = allowed_hosts_and_origins("127.0.0.1:8765".parse().unwrap());
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut h = axum::http::HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, v.parse().unwrap());
            }
            h
        };
        assert!(approval_request_allowed(&headers(&[("host", "127.0.0.1:8765")]), &hosts, &origins));
        assert!(approval_request_allowed(
            &headers(&[("host", "localhost:8765"), ("origin", "http://localhost:8765")]),
            &hosts,
            &origins
        ));
        // A rebound name, a foreign page, no Host at all.
        assert!(!approval_request_allowed(&headers(&[("host", "evil.example:8765")]), &hosts, &origins));
        assert!(!approval_request_allowed(
            &headers(&[("host", "127.0.0.1:8765"), ("origin", "http://evil.example")]),
            &hosts,
            &origins
        ));
        assert!(!approval_request_allowed(&headers(&[]), &hosts, &origins));
    }

    #[test]
    fn loopback_hosts() {
        let (hosts, origins) = allowed_hosts_and_origins("127.0.0.1:8765".parse().unwrap());
        assert!(hosts.contains(&"localhost:8765".to_string()) && hosts.contains(&"127.0.0.1:8765".to_string()));
        assert!(origins.contains(&"http://localhost:8765".to_string()));
        let (hosts, _) = allowed_hosts_and_origins("10.1.2.3:80".parse().unwrap());
        assert!(!hosts.iter().any(|h| h.starts_with("localhost")));
    }
}
