//! The operator console (the book's "Console" page): `codemode serve --http ADDR --console` serves a
//! browser UI at `/console` on the same listener as `/mcp` — runs and their journals, the queue of
//! calls parked for approval (approve or deny, audited with the operator's name), the upstream
//! servers, and the fleet's replicas and metrics, updated live over server-sent events.
//!
//! Map of this module:
//! - [`auth`]: operators from the config's `console`, signed session cookies, CSRF tokens, the
//!   limit on failed logins.
//! - [`ledger`]: where the console's data comes from — run journals and replica reports kept in
//!   the snapshot store (so every replica of a fleet shows the same), counters and latencies.
//! - this file: [`Console`], the HTTP routes (`/console`, `/console/assets/*`, `/console/api/*`)
//!   and their guard (the `/mcp` Host/Origin check, security headers, sessions, CSRF).
//! - `assets/`: `index.html`, `app.js`, `app.css`, compiled into the binary (no CDN, no build step).
//!
//! Security (see the book's "Console", "Security"): everything a cell, a client or an upstream
//! server wrote reaches the browser only as JSON string values, which the front end renders as text
//! (never markup); the Content-Security-Policy allows no inline script or style and nothing from
//! elsewhere; every state-changing request needs the session cookie (`HttpOnly`,
//! `SameSite=Strict`), the session's CSRF token in `X-CSRF-Token` and a JSON body.

pub mod auth;
pub mod ledger;

use crate::now_ms;
use crate::server::Gateway;
use auth::{Auth, ConsoleConfig, LoginRefused, Session};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use codemode::trajectory::{DecisionRecord, TraceRecord};
use codemode_core::store::{ConsoleKind, MAX_SUSPENDED_RUNS, RunListing};
use ledger::{Journal, Ledger, ReplicaReport, RunSummary, quantile, scope_label};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The Content-Security-Policy of every console response: scripts and styles only from the
/// console's own files (no inline script or style, no `eval`), connections only to itself, no
/// framing. Prevents: a string that slipped past escaping running as script.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Runs one `GET /console/api/runs` page shows.
pub const RUNS_PAGE: usize = 50;

/// Most suspended runs the approval queue reads (pages of the store's listing). Prevents: one
/// request reading an unbounded fleet.
const MAX_QUEUE_RUNS: usize = 2_000;

/// Largest request body the console reads. Prevents: a huge body held in memory for a login or a
/// decision.
const MAX_BODY_BYTES: usize = 16 * 1024;

/// What `serve_http` needs to serve the console.
pub struct ConsoleSetup {
    /// Operators and session lifetime.
    pub config: ConsoleConfig,
    /// The ledger installed as the runtime's trajectory sink (see [`Ledger`]).
    pub ledger: Arc<Ledger>,
}

/// The console of one gateway (see the module documentation).
pub struct Console {
    gateway: Arc<Gateway>,
    ledger: Arc<Ledger>,
    auth: Auth,
    hosts: Arc<[String]>,
    origins: Arc<[String]>,
    addr: String,
    ticks: tokio::sync::watch::Sender<String>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console").field("addr", &self.addr).finish_non_exhaustive()
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn error(status: StatusCode, message: &str) -> Response {
    json_response(status, &json!({ "error": message }))
}

impl Console {
    /// A console for `gateway` serving at `addr` (whose Host/Origin forms it accepts).
    pub fn new(gateway: Arc<Gateway>, setup: ConsoleSetup, addr: SocketAddr) -> Arc<Self> {
        let (hosts, origins) = crate::http::allowed_hosts_and_origins(addr);
        let (ticks, _) = tokio::sync::watch::channel(String::new());
        Arc::new(Console {
            auth: Auth::new(&setup.config, &gateway.state_key),
            gateway,
            ledger: setup.ledger,
            hosts: hosts.into(),
            origins: origins.into(),
            addr: addr.to_string(),
            ticks,
        })
    }

    /// The routes under `/console`.
    pub fn router(self: &Arc<Self>) -> axum::Router {
        use axum::routing::{get, post};
        axum::Router::new()
            .route("/console", get(index))
            .route("/console/", get(index))
            .route("/console/assets/app.js", get(|| async { asset(APP_JS, "text/javascript; charset=utf-8") }))
            .route("/console/assets/app.css", get(|| async { asset(APP_CSS, "text/css; charset=utf-8") }))
            .route("/console/api/login", post(login))
            .route("/console/api/logout", post(logout))
            .route("/console/api/session", get(session))
            .route("/console/api/overview", get(overview))
            .route("/console/api/runs", get(runs))
            .route("/console/api/runs/{run}", get(run))
            .route("/console/api/runs/{run}/abort", post(abort))
            .route("/console/api/approvals", get(approvals))
            .route("/console/api/approvals/{run}/{request}", post(decide))
            .route("/console/api/servers", get(servers))
            .route("/console/api/fleet", get(fleet))
            .route("/console/api/events", get(events))
            .route("/console/{*rest}", axum::routing::any(|| async { error(StatusCode::NOT_FOUND, "not found") }))
            .layer(axum::middleware::from_fn_with_state(self.clone(), guard))
            .with_state(self.clone())
    }

    /// Writes journals and this replica's report as they change, and the live tick every second
    /// while anyone listens, until `stop` is cancelled.
    pub async fn run_background(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let mut last_report = std::time::Instant::now() - std::time::Duration::from_secs(2);
        let mut previous: Option<(u64, Vec<u64>)> = None;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.ledger.changed() => {}
            }
            self.ledger.flush().await;
            if last_report.elapsed() >= std::time::Duration::from_millis(ledger::FLUSH_MS) {
                last_report = std::time::Instant::now();
                self.ledger.report(&self.addr, servers_of(&self.gateway)).await;
                if self.ticks.receiver_count() > 0 {
                    let tick = self.tick(&mut previous).await;
                    self.ticks.send_replace(tick.to_string());
                }
            }
        }
        self.ledger.flush().await;
    }

    fn session_of(&self, headers: &HeaderMap) -> Option<Session> {
        let cookies = headers.get_all(header::COOKIE);
        for value in cookies.iter().filter_map(|v| v.to_str().ok()) {
            for pair in value.split(';') {
                if let Some((k, v)) = pair.trim().split_once('=')
                    && k == auth::COOKIE
                    && let Some(s) = self.auth.session(v, now_ms())
                {
                    return Some(s);
                }
            }
        }
        None
    }

    /// The session of a read request, or 401.
    fn reader(&self, headers: &HeaderMap) -> Result<Session, Box<Response>> {
        self.session_of(headers).ok_or_else(|| Box::new(error(StatusCode::UNAUTHORIZED, "not logged in")))
    }

    /// The session of a state-changing request: logged in, a JSON body, the session's CSRF token.
    fn writer(&self, headers: &HeaderMap) -> Result<Session, Box<Response>> {
        let session = self.reader(headers)?;
        if !is_json(headers) {
            return Err(Box::new(error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "expected Content-Type: application/json")));
        }
        let presented = headers.get("x-csrf-token").and_then(|v| v.to_str().ok()).unwrap_or("");
        if !self.auth.csrf_ok(&session, presented) {
            tracing::warn!(operator = %session.operator, "console: a request without the session's CSRF token was refused");
            return Err(Box::new(error(StatusCode::FORBIDDEN, "missing or wrong CSRF token")));
        }
        Ok(session)
    }

    /// Every run summary: the store's, with this process's fresher copies.
    async fn summaries(&self) -> Vec<RunSummary> {
        let mut by_id: HashMap<String, RunSummary> = HashMap::new();
        if let Some(store) = self.ledger.store() {
            for text in
                store.console_records(ConsoleKind::Run, ConsoleKind::Run.max_records()).await.unwrap_or_default()
            {
                if let Ok(s) = serde_json::from_str::<RunSummary>(&text) {
                    by_id.insert(s.run_id.clone(), s);
                }
            }
        }
        for s in self.ledger.local_summaries() {
            match by_id.get(&s.run_id) {
                Some(old) if old.updated_at_ms > s.updated_at_ms => {}
                _ => {
                    by_id.insert(s.run_id.clone(), s);
                }
            }
        }
        by_id.into_values().collect()
    }

    /// The suspended runs (pages of the store's listing, at most [`MAX_QUEUE_RUNS`]).
    async fn suspended(&self) -> Vec<RunListing> {
        let store = self.gateway.code_mode().store();
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        while out.len() < MAX_QUEUE_RUNS {
            let Ok(page) = store.list_runs(None, cursor.as_deref(), codemode_core::store::MAX_LIST_PAGE).await else {
                break;
            };
            out.extend(page.runs);
            match page.next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        out
    }

    /// The replicas' reports (this one's as it is now, the others' from the store).
    async fn replicas(&self) -> Vec<(ReplicaReport, bool)> {
        let mut out = Vec::new();
        let now = now_ms();
        if let Some(store) = self.ledger.store() {
            for text in store.console_records(ConsoleKind::Replica, 256).await.unwrap_or_default() {
                if let Ok(r) = serde_json::from_str::<ReplicaReport>(&text)
                    && r.id != self.ledger.replica()
                {
                    let alive = r.reported_at_ms + ledger::REPLICA_TTL_MS > now;
                    out.push((r, alive));
                }
            }
        }
        out.insert(0, (self.ledger.own_report(&self.addr, servers_of(&self.gateway)), true));
        out
    }

    async fn tick(&self, previous: &mut Option<(u64, Vec<u64>)>) -> Value {
        let summaries = self.summaries().await;
        let replicas = self.replicas().await;
        let (totals, buckets) = totals_of(&replicas);
        let now = now_ms();
        // p50/p99 of the calls since the last tick.
        let window: Vec<u64> = match previous.as_ref() {
            Some((_, before)) => buckets.iter().zip(before).map(|(a, b)| a.saturating_sub(*b)).collect(),
            None => vec![0; buckets.len()],
        };
        *previous = Some((now, buckets));
        let servers_down = replicas
            .iter()
            .filter(|(_, alive)| *alive)
            .flat_map(|(r, _)| r.servers.iter())
            .filter(|s| s.get("state").and_then(Value::as_str) == Some("failed"))
            .count();
        json!({
            "atMs": now,
            "totals": totals,
            "latency": { "p50Ms": quantile(&window, 0.5), "p99Ms": quantile(&window, 0.99), "count": window.iter().sum::<u64>() },
            "runs": status_counts(&summaries),
            "approvals": summaries.iter().filter(|s| s.status == "parked").map(|s| u64::from(s.parked)).sum::<u64>(),
            "serversDown": servers_down,
        })
    }
}

fn totals_of(replicas: &[(ReplicaReport, bool)]) -> (ledger::Counters, Vec<u64>) {
    let mut totals = ledger::Counters::default();
    let mut buckets = vec![0u64; ledger::LATENCY_BUCKETS_MS.len() + 1];
    for (r, _) in replicas {
        totals.add(&r.counters);
        for (b, n) in buckets.iter_mut().zip(&r.latency) {
            *b += n;
        }
    }
    (totals, buckets)
}

fn status_counts(summaries: &[RunSummary]) -> Value {
    let mut counts: BTreeMap<&str, u64> = ledger::STATUSES.iter().map(|s| (*s, 0)).collect();
    for s in summaries {
        if let Some(n) = counts.get_mut(s.status.as_str()) {
            *n += 1;
        }
    }
    json!(counts)
}

/// The upstream servers of this gateway, as the console shows them.
fn servers_of(gateway: &Gateway) -> Vec<Value> {
    let learned = gateway.code_mode().learned_result_types();
    gateway
        .hub()
        .statuses()
        .into_iter()
        .map(|s| {
            let prefix = format!("mcp:{}:", s.name);
            let types: Vec<Value> = learned
                .iter()
                .filter(|(id, _)| id.starts_with(&prefix))
                .map(|(id, ty)| json!({ "toolId": id, "type": ty }))
                .collect();
            let restarts: Vec<Value> = s
                .history
                .iter()
                .filter(|e| e.event == "failed")
                .map(|e| json!({ "atMs": e.at_ms, "reason": e.reason }))
                .collect();
            json!({
                "name": s.name,
                "state": s.state,
                "error": s.error,
                "tools": s.tools,
                "filtered": s.filtered,
                "restartAttempts": s.restarts,
                "restarts": restarts,
                "history": s.history,
                "learnedTypes": types,
            })
        })
        .collect()
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// Every console request: the `/mcp` Host/Origin check (DNS-rebinding protection), then the
/// security headers on whatever is answered.
async fn guard(
    State(console): State<Arc<Console>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut response = if crate::http::approval_request_allowed(request.headers(), &console.hosts, &console.origins) {
        next.run(request).await
    } else {
        tracing::warn!("console: Host or Origin not accepted");
        error(StatusCode::FORBIDDEN, "Host or Origin not accepted (DNS-rebinding protection)")
    };
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    h.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
    response
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

async fn index() -> Response {
    asset(INDEX_HTML, "text/html; charset=utf-8")
}

fn session_json(console: &Console, session: &Session) -> Value {
    let store = console.gateway.code_mode().store();
    json!({
        "operator": session.operator,
        "csrf": console.auth.csrf(session),
        "replica": console.ledger.replica(),
        "fleet": console.gateway.is_fleet(),
        "store": store.name(),
        "expiresAtMs": session.expires_at_ms,
    })
}

async fn login(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !is_json(&headers) {
        return error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "expected Content-Type: application/json");
    }
    if body.len() > MAX_BODY_BYTES {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "request body too large");
    }
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let name = parsed.get("name").and_then(Value::as_str).unwrap_or("");
    let token = parsed.get("token").and_then(Value::as_str).unwrap_or("");
    match console.auth.login(peer.ip(), name, token, now_ms()) {
        Ok(session) => {
            tracing::info!(operator = %session.operator, client = %peer.ip(), "console: operator logged in");
            let cookie = format!(
                "{}={}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}",
                auth::COOKIE,
                console.auth.cookie_value(&session),
                console.auth.ttl_ms() / 1_000
            );
            let mut r = json_response(StatusCode::OK, &session_json(&console, &session));
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(LoginRefused::Wrong) => {
            tracing::warn!(client = %peer.ip(), "console: failed login");
            error(StatusCode::UNAUTHORIZED, "wrong operator name or token")
        }
        Err(LoginRefused::Limited(wait)) => {
            tracing::warn!(client = %peer.ip(), "console: login refused, too many failures");
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, &format!("too many failed logins; try again in {wait} s"));
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(wait));
            r
        }
    }
}

async fn logout(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let session = match console.writer(&headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    console.auth.logout(&session, now_ms());
    let mut r = StatusCode::NO_CONTENT.into_response();
    let clear = format!("{}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0", auth::COOKIE);
    if let Ok(v) = HeaderValue::from_str(&clear) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

async fn session(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    match console.reader(&headers) {
        Ok(s) => json_response(StatusCode::OK, &session_json(&console, &s)),
        Err(r) => *r,
    }
}

async fn overview(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Err(r) = console.reader(&headers) {
        return *r;
    }
    let summaries = console.summaries().await;
    let suspended = console.suspended().await;
    let mut scopes: BTreeMap<String, u64> = BTreeMap::new();
    for r in &suspended {
        *scopes.entry(scope_label(&r.scope)).or_default() += 1;
    }
    let replicas = console.replicas().await;
    let approvals: usize = suspended.iter().map(|r| r.calls.iter().filter(|c| c.awaiting_approval).count()).sum();
    let servers_down = servers_of(&console.gateway)
        .iter()
        .filter(|s| s.get("state").and_then(Value::as_str) == Some("failed"))
        .count();
    json_response(
        StatusCode::OK,
        &json!({
            "replica": console.ledger.replica(),
            "fleet": console.gateway.is_fleet(),
            "store": console.gateway.code_mode().store().name(),
            "runs": status_counts(&summaries),
            "scopes": scopes.into_iter().map(|(scope, n)| json!({ "scope": scope, "suspended": n, "cap": MAX_SUSPENDED_RUNS })).collect::<Vec<_>>(),
            "approvals": approvals,
            "replicas": replicas.iter().filter(|(_, alive)| *alive).count(),
            "serversDown": servers_down,
        }),
    )
}

fn query(uri: &axum::http::Uri) -> HashMap<String, String> {
    form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()).into_owned().collect()
}

/// The console's view of a suspended run it has no journal of (suspended before the console
/// started, or its journal expired first).
fn summary_of_listing(r: &RunListing) -> RunSummary {
    let parked = r.calls.iter().filter(|c| c.awaiting_approval).count() as u32;
    let mut tools: Vec<String> = r.calls.iter().filter_map(|c| c.tool_id.clone()).collect();
    tools.dedup();
    RunSummary {
        run_id: r.run_id.to_string(),
        status: if r.checked_out {
            "running"
        } else if parked > 0 {
            "parked"
        } else {
            "waiting"
        }
        .into(),
        scope_label: scope_label(&r.scope),
        scope: r.scope.clone(),
        replica: r.holder.clone().unwrap_or_default(),
        started_at_ms: r.created_at_ms,
        updated_at_ms: r.created_at_ms,
        tools,
        calls: r.calls.len() as u32,
        parked,
        source_preview: String::new(),
        task: false,
    }
}

async fn runs(State(console): State<Arc<Console>>, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    if let Err(r) = console.reader(&headers) {
        return *r;
    }
    let q = query(&uri);
    let mut all = console.summaries().await;
    let listed = console.suspended().await;
    let sizes: HashMap<String, u64> = listed.iter().map(|r| (r.run_id.to_string(), r.stored_bytes)).collect();
    for r in &listed {
        if !all.iter().any(|s| s.run_id == r.run_id.as_str()) {
            all.push(summary_of_listing(r));
        }
    }
    let status = q.get("status").filter(|s| !s.is_empty());
    let scope = q.get("scope").filter(|s| !s.is_empty());
    let tool = q.get("tool").filter(|s| !s.is_empty());
    all.retain(|s| {
        status.is_none_or(|st| s.status == *st)
            && scope.is_none_or(|sc| s.scope_label.contains(sc.as_str()))
            && tool.is_none_or(|t| s.tools.iter().any(|x| x.contains(t.as_str())))
    });
    all.sort_by(|a, b| b.updated_at_ms.cmp(&a.updated_at_ms).then_with(|| a.run_id.cmp(&b.run_id)));
    let start: usize = q.get("cursor").and_then(|c| c.parse().ok()).unwrap_or(0);
    let page: Vec<Value> = all
        .iter()
        .skip(start)
        .take(RUNS_PAGE)
        .map(|s| {
            let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
            if let Some(o) = v.as_object_mut() {
                o.insert("scope".into(), Value::String(s.scope_label.clone()));
                o.insert("snapshotBytes".into(), json!(sizes.get(&s.run_id)));
            }
            v
        })
        .collect();
    let next = (start + RUNS_PAGE < all.len()).then(|| (start + RUNS_PAGE).to_string());
    json_response(StatusCode::OK, &json!({ "runs": page, "next": next }))
}

/// The nested calls of a journal, one per request id: tool, line, last status, timing, input,
/// output, and who decided it.
fn calls_of(journal: &Journal) -> Vec<Value> {
    #[derive(Default)]
    struct Call {
        tool: String,
        line: Option<u32>,
        status: Value,
        started: Option<u64>,
        duration: Option<u64>,
        input: Option<Value>,
        result: Option<Value>,
        error: Option<String>,
        decided_by: Option<String>,
    }
    let mut calls: BTreeMap<u64, Call> = BTreeMap::new();
    for r in &journal.records {
        match r {
            TraceRecord::Nested(e) => {
                let c = calls.entry(e.request_id).or_default();
                c.tool.clone_from(&e.tool_id);
                c.line = c.line.or(e.line);
                c.status = serde_json::to_value(e.outcome).unwrap_or(Value::Null);
                c.started = c.started.or(Some(e.at_ms));
                if e.duration_ms.is_some() {
                    c.duration = e.duration_ms;
                }
                if c.input.is_none() {
                    c.input.clone_from(&e.input);
                }
                if e.result.is_some() {
                    c.result.clone_from(&e.result);
                }
                if e.error.is_some() {
                    c.error.clone_from(&e.error);
                }
            }
            TraceRecord::Decision(d) if d.decision != "abort" => {
                calls.entry(d.request_id).or_default().decided_by = Some(format!("{} ({})", d.by, d.decision));
            }
            _ => {}
        }
    }
    calls
        .into_iter()
        .map(|(id, c)| {
            json!({
                "requestId": id, "toolId": c.tool, "line": c.line, "status": c.status,
                "startedAtMs": c.started, "durationMs": c.duration, "input": c.input,
                "result": c.result, "error": c.error, "decidedBy": c.decided_by,
            })
        })
        .collect()
}

fn run_id_of(text: &str) -> Option<codemode::RunId> {
    (text.len() <= 64).then(|| codemode::RunId::parse(text).ok()).flatten()
}

async fn run(State(console): State<Arc<Console>>, headers: HeaderMap, Path(run): Path<String>) -> Response {
    if let Err(r) = console.reader(&headers) {
        return *r;
    }
    let Some(run_id) = run_id_of(&run) else { return error(StatusCode::NOT_FOUND, "no such run") };
    let journal = console.ledger.journal(run_id.as_str()).await;
    let store = console.gateway.code_mode().store();
    let scope = journal.as_ref().map(|j| j.summary.scope.clone());
    // The run's own scope holds at most 64 suspended runs: one page.
    let listing = match &scope {
        Some(scope) => store.list_runs(Some(scope), None, MAX_SUSPENDED_RUNS).await.map(|p| p.runs).unwrap_or_default(),
        None => console.suspended().await,
    }
    .into_iter()
    .find(|r| r.run_id == run_id);
    let (summary, body) = match (journal, &listing) {
        (Some(j), _) => {
            let calls = calls_of(&j);
            let body = json!({
                "language": j.language, "source": j.source, "sourceTruncated": j.source_truncated,
                "calls": calls, "trajectory": j.records, "truncated": j.truncated,
                "result": j.result, "error": j.error,
            });
            (j.summary, body)
        }
        (None, Some(l)) => {
            let calls: Vec<Value> = l
                .calls
                .iter()
                .map(|c| {
                    json!({
                        "requestId": c.request_id, "toolId": c.tool_id, "line": c.cell_line,
                        "status": if c.awaiting_approval { "parked" } else { "issued" },
                        "startedAtMs": c.issued_at_ms, "input": serde_json::from_str::<Value>(&c.input).unwrap_or(Value::String(c.input.clone())),
                    })
                })
                .collect();
            (
                summary_of_listing(l),
                json!({ "language": "javascript", "source": "", "calls": calls, "trajectory": [], "truncated": true }),
            )
        }
        (None, None) => return error(StatusCode::NOT_FOUND, "no such run (or its journal expired)"),
    };
    let mut v = serde_json::to_value(&summary).unwrap_or(Value::Null);
    if let (Some(o), Some(extra)) = (v.as_object_mut(), body.as_object()) {
        o.insert("scope".into(), Value::String(summary.scope_label.clone()));
        o.extend(extra.clone());
        o.insert("store".into(), Value::String(store.name().to_string()));
        o.insert("snapshotBytes".into(), json!(listing.as_ref().map(|l| l.stored_bytes)));
        o.insert("expiresAtMs".into(), json!(listing.as_ref().map(|l| l.expires_at_ms)));
        o.insert("heldBy".into(), json!(listing.as_ref().and_then(|l| l.holder.clone())));
    }
    json_response(StatusCode::OK, &v)
}

fn read_body(body: &Bytes) -> Result<Value, Box<Response>> {
    if body.len() > MAX_BODY_BYTES {
        return Err(Box::new(error(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")));
    }
    serde_json::from_slice(body)
        .map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, &format!("expected a JSON body: {e}"))))
}

async fn abort(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(run): Path<String>,
    body: Bytes,
) -> Response {
    let session = match console.writer(&headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if let Err(r) = read_body(&body) {
        return *r;
    }
    let Some(run_id) = run_id_of(&run) else { return error(StatusCode::NOT_FOUND, "no such run") };
    console.ledger.refresh(run_id.as_str()).await;
    if !console.gateway.code_mode().abort(&run_id).await {
        return error(StatusCode::NOT_FOUND, "code mode run is unavailable or expired.");
    }
    tracing::info!(target: "codemode::approval", operator = %session.operator, run = %run_id, "run aborted in the console");
    console.ledger.decided(DecisionRecord {
        run_id: run_id.to_string(),
        request_id: 0,
        decision: "abort".into(),
        reason: None,
        by: session.operator,
        at_ms: now_ms(),
    });
    StatusCode::NO_CONTENT.into_response()
}

async fn approvals(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Err(r) = console.reader(&headers) {
        return *r;
    }
    let now = now_ms();
    let mut queue = Vec::new();
    for run in console.suspended().await {
        if !run.calls.iter().any(|c| c.awaiting_approval) {
            continue;
        }
        // Decisions recorded and not applied yet (the run's next `wait` applies them).
        let mut decided: HashMap<u64, String> = HashMap::new();
        if let Some(j) = console.ledger.journal(run.run_id.as_str()).await {
            for r in &j.records {
                if let TraceRecord::Decision(d) = r
                    && d.decision != "abort"
                {
                    decided.insert(d.request_id, format!("{} ({})", d.by, d.decision));
                }
            }
        }
        for c in run.calls.iter().filter(|c| c.awaiting_approval) {
            let asked = console.gateway.approver.as_ref().and_then(|a| a.unasked(run.run_id.as_str(), c.request_id));
            queue.push(json!({
                "runId": run.run_id.as_str(),
                "requestId": c.request_id,
                "toolId": c.tool_id,
                "input": serde_json::from_str::<Value>(&c.input).unwrap_or(Value::String(c.input.clone())),
                "inputPreview": c.input,
                "cellLine": c.cell_line.or(asked.as_ref().and_then(|a| a.cell_line)),
                "reason": asked.map(|a| a.reason),
                "scope": scope_label(&run.scope),
                "parkedAtMs": c.issued_at_ms,
                "waitingMs": now.saturating_sub(c.issued_at_ms),
                "decidedBy": decided.get(&c.request_id),
            }));
        }
    }
    json_response(StatusCode::OK, &json!({ "approvals": queue }))
}

async fn decide(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path((run, request)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let session = match console.writer(&headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let value = match read_body(&body) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let decision: codemode::ApprovalDecision = match serde_json::from_value(value) {
        Ok(d) => d,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("expected {{\"decision\":\"approve\"}} or {{\"decision\":\"deny\",\"reason\":\"…\"}}: {e}"),
            );
        }
    };
    let (Some(run_id), Ok(request_id)) = (run_id_of(&run), request.parse::<u64>()) else {
        return error(StatusCode::NOT_FOUND, "no such run or request");
    };
    console.ledger.refresh(run_id.as_str()).await;
    match console.gateway.code_mode().decide(&run_id, request_id, decision.clone()).await {
        Ok(()) => {
            let (word, reason) = match &decision {
                codemode::ApprovalDecision::Approve => ("approve", None),
                codemode::ApprovalDecision::Deny { reason } => ("deny", Some(reason.clone())),
                #[allow(unreachable_patterns)]
                _ => ("other", None),
            };
            tracing::info!(target: "codemode::approval", operator = %session.operator, run = %run_id, request = request_id, decision = word, "approval decision recorded in the console");
            console.ledger.decided(DecisionRecord {
                run_id: run_id.to_string(),
                request_id,
                decision: word.into(),
                reason,
                by: session.operator,
                at_ms: now_ms(),
            });
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) if e.code == Some(codemode::CodeModeErrorCode::SnapshotExpired) => error(StatusCode::GONE, &e.message),
        Err(e) => error(StatusCode::NOT_FOUND, &e.message),
    }
}

async fn servers(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Err(r) = console.reader(&headers) {
        return *r;
    }
    let mut list = Vec::new();
    for (r, alive) in console.replicas().await {
        if !alive {
            continue;
        }
        for mut s in r.servers {
            if let Some(o) = s.as_object_mut() {
                o.insert("replica".into(), Value::String(r.id.clone()));
            }
            list.push(s);
        }
    }
    json_response(StatusCode::OK, &json!({ "servers": list }))
}

async fn fleet(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Err(r) = console.reader(&headers) {
        return *r;
    }
    let replicas = console.replicas().await;
    let (totals, buckets) = totals_of(&replicas);
    let me = console.ledger.replica().to_string();
    // A fleet store names the holder of a checked-out run by its own replica id.
    let mut held: HashMap<String, Vec<String>> = HashMap::new();
    for run in console.suspended().await {
        if let Some(h) = run.holder {
            held.entry(h).or_default().push(run.run_id.to_string());
        }
    }
    let rows: Vec<Value> = replicas
        .iter()
        .map(|(r, alive)| {
            let mut runs = r.runs_held.clone();
            if let Some(extra) = r.store_replica.as_ref().and_then(|s| held.get(s)) {
                runs.extend(extra.iter().cloned());
                runs.sort();
                runs.dedup();
            }
            json!({
                "id": r.id, "self": r.id == me, "alive": alive, "addr": r.addr,
                "storeReplica": r.store_replica,
                "startedAtMs": r.started_at_ms, "reportedAtMs": r.reported_at_ms,
                "runsHeld": runs, "storeLatencyMs": r.store_latency_ms, "counters": r.counters,
                "latency": { "p50Ms": quantile(&r.latency, 0.5), "p99Ms": quantile(&r.latency, 0.99) },
            })
        })
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "store": console.gateway.code_mode().store().name(),
            "fleet": console.gateway.is_fleet(),
            "replicas": rows,
            "totals": totals,
            "latency": { "p50Ms": quantile(&buckets, 0.5), "p99Ms": quantile(&buckets, 0.99), "count": buckets.iter().sum::<u64>() },
        }),
    )
}

async fn events(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let session = match console.reader(&headers) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    use axum::response::sse::{Event, KeepAlive, Sse};
    let rx = console.ticks.subscribe();
    // The stream ends when the session does (the browser reconnects and is asked to log in).
    let until = session.expires_at_ms;
    let stream = futures::stream::unfold(rx, move |mut rx| async move {
        let left = until.saturating_sub(now_ms());
        tokio::select! {
            changed = rx.changed() => {
                changed.ok()?;
                let data = rx.borrow_and_update().clone();
                Some((Ok::<_, std::convert::Infallible>(Event::default().event("tick").data(data)), rx))
            }
            () = tokio::time::sleep(std::time::Duration::from_millis(left)) => None,
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}
