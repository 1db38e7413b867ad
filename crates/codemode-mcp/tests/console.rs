//! The operator console on a fleet (the book's "The operator console", "Where the console's data
//! lives"): two replicas over one real `redis-server`, each serving `/console`. A run parked on
//! replica A is in replica B's approval queue, journal and fleet view; an operator logged in on A
//! decides on B with the same cookie; A's `wait` applies the decision and B shows who made it.
//! Requests go over real HTTP to the real listeners; events are ordered by polling with deadlines.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::config_file::ConfigFile;
use codemode::trajectory::TraceRecord;
use codemode::{CodeModeResult, LocalTools, PolicyTarget, ToolDefinition, ToolSource};
use codemode_mcp::console::ConsoleSetup;
use codemode_mcp::console::auth::{ConsoleConfig, Operator};
use codemode_mcp::console::ledger::Ledger;
use codemode_mcp::server::{Gateway, HttpOptions, serve_http_with};
use codemode_snapshot::conformance::RedisServer;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

struct Replica {
    gateway: Arc<Gateway>,
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    /// What the replica's audit sink received (as `serve --audit` would write it).
    audit: Arc<Audit>,
}

#[derive(Default)]
struct Audit(std::sync::Mutex<Vec<TraceRecord>>);

impl codemode::RunObserver for Audit {
    fn on_event(&self, event: codemode::RunEvent) {
        if let codemode::RunEvent::Trace(r) = event {
            self.0.lock().unwrap().push(*r);
        }
    }
}

async fn replica(redis: &str) -> Replica {
    let pay = codemode::FnTool::new(ToolDefinition::new(ToolSource::Plugin, "t", "pay"), |input: Value| async move {
        Ok(codemode::ToolResult::value(json!({ "paid": input["amount"] })))
    });
    let mut local = LocalTools::new();
    local.add(Arc::new(pay));
    let file = ConfigFile::parse(
        r#"{ tools: { codeMode: { enabled: true, timeoutMs: 2000 } },
             approvals: { require: ["plugin:t:pay"], timeoutMs: 0 } }"#,
    )
    .unwrap();
    let choice = codemode::config_file::SnapshotStoreConfig::Redis {
        url: Some(redis.to_string()),
        key_prefix: None,
        lease_ms: Some(1_000),
    };
    let opened = codemode_mcp::open_store(Some(choice), &file.run_signing).await.unwrap();
    let audit = Arc::new(Audit::default());
    let ledger = Ledger::new(opened.replica.clone(), 60_000, None);
    let options = codemode_mcp::GatewayOptions {
        local,
        store: opened.store,
        fleet_key: opened.fleet_key,
        task_lease_ms: opened.lease_ms,
        console: Some(ledger.clone()),
        // The audit sink (`serve --audit`) still gets every record, through the ledger.
        trajectory: Some(audit.clone() as Arc<dyn codemode::RunObserver>),
        ..Default::default()
    };
    let gateway = codemode_mcp::build_gateway(&file, &PolicyTarget::default(), options).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ConsoleConfig {
        operators: vec![Operator::new("ana", "ana-token-0123456789"), Operator::new("bo", "bo-token-0123456789")],
        ..ConsoleConfig::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = HttpOptions { approval_token: None, console: Some(ConsoleSetup { config, ledger }) };
    let gw = gateway.clone();
    tokio::spawn(async move {
        let _ = serve_http_with(gw, listener, async move { drop(stopped.await) }, options).await;
    });
    Replica { gateway, addr, stop, audit }
}

/// One HTTP/1.1 request over a fresh connection: (status, headers, body).
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

async fn login(addr: SocketAddr, name: &str, token: &str) -> (String, String) {
    let (status, head, body) =
        http(addr, "POST", "/console/api/login", &[], Some(&json!({ "name": name, "token": token }))).await;
    assert_eq!(status, 200, "{head}\n{body}");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .unwrap()
        .to_string();
    let csrf = serde_json::from_str::<Value>(&body).unwrap()["csrf"].as_str().unwrap().to_string();
    (cookie, csrf)
}

async fn get(addr: SocketAddr, path: &str, cookie: &str) -> Value {
    let (status, head, body) = http(addr, "GET", path, &[("Cookie", cookie)], None).await;
    assert_eq!(status, 200, "GET {path}: {head}\n{body}");
    serde_json::from_str(&body).unwrap()
}

/// Polls `f` until it gives `Some`, for at most 20 s.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(what: &str, mut f: impl FnMut() -> F) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_shows_the_fleet_and_decides_for_it() {
    let redis = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let a = replica(&redis.url()).await;
    let b = replica(&redis.url()).await;

    // A run parks on replica A.
    let ctx = codemode::RunContext { tool_call_id: Some("s1/1".into()), ..codemode::RunContext::session("client-1") };
    let code = "const note = 'first line';\nconst r = await tools.pay({ amount: 42 });\nreturn r.paid;";
    let parked =
        a.gateway.call_for("client-1", None, Some("s1/1".into()), None, "exec", &json!({ "code": code }), None).await;
    let run_id = match parked.unwrap() {
        CodeModeResult::Waiting { run_id, .. } => run_id,
        other => panic!("expected a parked run: {other:?}"),
    };

    // An operator logged in on A uses the same cookie on B (the fleet's key signs it).
    let (cookie, csrf) = login(a.addr, "ana", "ana-token-0123456789").await;
    let queue = eventually("the parked call in B's queue", || {
        let (cookie, run_id) = (cookie.clone(), run_id.clone());
        async move {
            let q = get(b.addr, "/console/api/approvals", &cookie).await;
            q["approvals"].as_array().unwrap().iter().find(|x| x["runId"] == run_id.as_str()).cloned()
        }
    })
    .await;
    assert_eq!(queue["toolId"], "plugin:t:pay");
    assert_eq!(queue["input"], json!({ "amount": 42 }));
    assert_eq!(queue["cellLine"], 2, "the model's own line: {queue}");

    // B shows A's journal: the source with the call's line, the replica that drove it.
    let journal = eventually("A's journal on B", || {
        let (cookie, run_id) = (cookie.clone(), run_id.clone());
        async move {
            let (status, _, body) =
                http(b.addr, "GET", &format!("/console/api/runs/{run_id}"), &[("Cookie", &cookie)], None).await;
            let v: Value = serde_json::from_str(&body).ok()?;
            (status == 200 && v["source"] == code).then_some(v)
        }
    })
    .await;
    assert_eq!(journal["status"], "parked", "{journal:#}");
    assert_eq!(journal["calls"][0]["line"], 2, "{journal:#}");
    assert_ne!(journal["replica"], Value::Null);
    assert_eq!(journal["store"], "redis");

    // Decided on B: without the CSRF token refused, with it recorded.
    let path = format!("/console/api/approvals/{run_id}/{}", queue["requestId"]);
    let (status, _, _) =
        http(b.addr, "POST", &path, &[("Cookie", &cookie)], Some(&json!({ "decision": "approve" }))).await;
    assert_eq!(status, 403, "no CSRF token");
    let headers = [("Cookie", cookie.as_str()), ("X-CSRF-Token", csrf.as_str())];
    let (status, head, body) = http(b.addr, "POST", &path, &headers, Some(&json!({ "decision": "approve" }))).await;
    assert_eq!(status, 204, "{head}\n{body}");

    // A's `wait` applies it; B shows the run completed and who approved.
    let ctx2 = codemode::RunContext { tool_call_id: Some("s1/2".into()), ..ctx };
    let done = a
        .gateway
        .call_for("client-1", None, ctx2.tool_call_id.clone(), None, "wait", &json!({ "runId": run_id }), None)
        .await
        .unwrap();
    assert!(matches!(done, CodeModeResult::Completed { ref value, .. } if *value == json!(42)), "{done:?}");
    let settled = eventually("the completed run on B", || {
        let (cookie, run_id) = (cookie.clone(), run_id.clone());
        async move {
            let v = get(b.addr, &format!("/console/api/runs/{run_id}"), &cookie).await;
            (v["status"] == "completed").then_some(v)
        }
    })
    .await;
    assert_eq!(settled["calls"][0]["decidedBy"], "ana (approve)", "{settled:#}");
    // B's audit has the decision with who made it; A's has the run's own records.
    let decisions: Vec<(String, String)> = b
        .audit
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|r| match r {
            TraceRecord::Decision(d) if d.run_id == run_id => Some((d.decision.clone(), d.by.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(decisions, [("approve".to_string(), "ana".to_string())]);
    assert!(a.audit.0.lock().unwrap().iter().any(|r| matches!(r, TraceRecord::Nested(e) if e.run_id == run_id)));
    assert_eq!(settled["result"]["value"], 42);

    // Both replicas are in each one's fleet view, with A's cells counted.
    let fleet = eventually("both replicas in B's fleet view", || {
        let cookie = cookie.clone();
        async move {
            let f = get(b.addr, "/console/api/fleet", &cookie).await;
            let alive = f["replicas"].as_array()?.iter().filter(|r| r["alive"] == true).count();
            (alive == 2 && f["totals"]["cells"].as_u64()? >= 1 && f["totals"]["waits"].as_u64()? >= 1).then_some(f)
        }
    })
    .await;
    assert_eq!(fleet["store"], "redis");
    assert_eq!(fleet["fleet"], true);

    // A run nobody can resume any more (aborted on B) leaves the queue and says who aborted it.
    let parked =
        a.gateway.call_for("client-1", None, Some("s1/3".into()), None, "exec", &json!({ "code": code }), None).await;
    let CodeModeResult::Waiting { run_id: second, .. } = parked.unwrap() else { panic!("parked") };
    // Once A's journal of it reached the store (A writes journals in the background; an abort on
    // B before that is not recorded in the journal — the book's console page, "Where the
    // console's data lives", says so).
    eventually("A's journal of the second run on B", || {
        let (cookie, second) = (cookie.clone(), second.clone());
        async move {
            let (status, _, body) =
                http(b.addr, "GET", &format!("/console/api/runs/{second}"), &[("Cookie", &cookie)], None).await;
            (status == 200 && body.contains("\"parked\"")).then_some(())
        }
    })
    .await;
    let (status, _, _) =
        http(b.addr, "POST", &format!("/console/api/runs/{second}/abort"), &headers, Some(&json!({}))).await;
    assert_eq!(status, 204);
    let q = get(b.addr, "/console/api/approvals", &cookie).await;
    assert!(q["approvals"].as_array().unwrap().iter().all(|x| x["runId"] != second.as_str()), "{q}");
    let aborted = get(b.addr, &format!("/console/api/runs/{second}"), &cookie).await;
    assert_eq!(aborted["status"], "aborted", "{aborted:#}");
    let (status, _, _) =
        http(b.addr, "POST", &format!("/console/api/runs/{second}/abort"), &headers, Some(&json!({}))).await;
    assert_eq!(status, 404, "nothing left to abort");

    let _ = a.stop.send(());
    let _ = b.stop.send(());
}
