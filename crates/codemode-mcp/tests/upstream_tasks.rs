//! Upstream tasks from a hostile server (the book's "Runs as MCP tasks", upstream tasks): an rmcp
//! server over streamable HTTP, in this process, that answers `job` with tasks built to stall or
//! flood the hub — a poll interval of 0, a task that never ends, `tasks/get` errors, a task that
//! asks for input. Every case ends the call (or the run) cleanly, the server stays up, and the hub
//! never polls faster than its floor. Events are ordered by the server's own channel of requests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use codemode::config_file::ConfigFile;
use codemode::{PolicyTarget, RunContext};
use codemode_mcp::build_gateway;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CreateTaskResult, DetailedTask,
    GetTaskParams, GetTaskResult, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Task, TaskPayload, TaskStatus, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// What the hostile server saw.
#[derive(Debug)]
enum Seen {
    Get(String, Instant),
    Cancel(String),
}

#[derive(Clone)]
struct Hostile {
    seen: mpsc::UnboundedSender<Seen>,
    /// The answers `tasks/update` brought, by task id.
    answers: Arc<std::sync::Mutex<std::collections::HashMap<String, Value>>>,
}

fn now() -> String {
    "2026-12-06T00:00:00.000Z".into()
}

impl ServerHandler for Hostile {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tasks().build())
            .with_server_info(Implementation::new("hostile-tasks", "0"))
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({ "type": "object", "properties": { "kind": { "type": "string" } } });
        let schema = schema.as_object().cloned().unwrap_or_default();
        let tools = vec![
            Tool::new("job", "Runs as a task of the given kind.", Arc::new(schema.clone())),
            Tool::new("ping", "Answers at once.", Arc::new(schema)),
        ];
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        if request.name == "ping" {
            return Ok(CallToolResult::structured(json!({ "pong": true })).into());
        }
        let kind = args.get("kind").and_then(Value::as_str).unwrap_or("forever").to_string();
        // A poll interval of 0: the hub must not take it literally.
        let task = Task::new(format!("t-{kind}"), TaskStatus::Working, now(), now()).with_poll_interval_ms(0);
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let _ = self.seen.send(Seen::Get(request.task_id.clone(), Instant::now()));
        let task = Task::new(request.task_id.clone(), TaskStatus::Working, now(), now()).with_poll_interval_ms(0);
        let answer = self.answers.lock().unwrap().get(&request.task_id).cloned();
        let payload = match request.task_id.as_str() {
            "t-error" => return Err(ErrorData::invalid_params("no such task", None)),
            // Asks until answered; then completes with the answer, or fails when declined.
            id if id.starts_with("t-ask") => match answer {
                None => {
                    let params = rmcp::model::ElicitRequestParams::FormElicitationParams {
                        meta: None,
                        message: "Deploy build 7 to prod?".into(),
                        requested_schema: serde_json::from_value(json!({ "type": "object", "properties": {} }))
                            .unwrap(),
                    };
                    let ask = rmcp::model::InputRequest::Elicitation(rmcp::model::ElicitRequest::new(params));
                    TaskPayload::InputRequired { input_requests: [("deploy".to_string(), ask)].into_iter().collect() }
                }
                Some(a) if a["action"] == "accept" => {
                    let result = CallToolResult::structured(json!({ "deployed": 7 }));
                    let Value::Object(result) = serde_json::to_value(result).unwrap() else { panic!() };
                    TaskPayload::Completed { result }
                }
                Some(_) => {
                    let mut error = serde_json::Map::new();
                    error.insert("code".into(), json!(-32603));
                    error.insert("message".into(), json!("the deploy was declined"));
                    TaskPayload::Failed { error }
                }
            },
            "t-input" => TaskPayload::InputRequired { input_requests: Default::default() },
            "t-failed" => {
                let mut error = serde_json::Map::new();
                error.insert("code".into(), json!(-32603));
                error.insert("message".into(), json!("disk full"));
                TaskPayload::Failed { error }
            }
            _ => TaskPayload::Working,
        };
        Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let Some(answer) = request.input_responses.get("deploy") {
            self.answers.lock().unwrap().insert(request.task_id, answer.clone());
        }
        Ok(())
    }

    async fn cancel_task(&self, request: CancelTaskParams, _cx: RequestContext<RoleServer>) -> Result<(), ErrorData> {
        let _ = self.seen.send(Seen::Cancel(request.task_id));
        Ok(())
    }
}

/// Serves [`Hostile`] on a free loopback port; returns its URL and what it sees.
async fn hostile_server() -> (String, mpsc::UnboundedReceiver<Seen>) {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handler = Hostile { seen: tx, answers: Arc::default() };
    let service: StreamableHttpService<Hostile, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::default(),
        StreamableHttpServerConfig::default()
            .with_allowed_hosts(vec![addr.to_string(), "127.0.0.1".into()])
            .with_allowed_origins(vec![format!("http://{addr}")]),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/mcp"), rx)
}

async fn gateway(url: &str) -> Arc<codemode_mcp::server::Gateway> {
    let text = json!({
        "tools": { "codeMode": { "enabled": true, "runtime": "quickjs-wasi", "timeoutMs": 200 } },
        "mcpServers": { "h": { "url": url } },
    })
    .to_string();
    let file = ConfigFile::parse(&text).unwrap();
    build_gateway(&file, &PolicyTarget::default(), codemode_mcp::GatewayOptions::default()).await.unwrap()
}

/// The next `tasks/get` of `task`, skipping others.
async fn next_get(seen: &mut mpsc::UnboundedReceiver<Seen>, task: &str) -> Instant {
    loop {
        match tokio::time::timeout(Duration::from_secs(20), seen.recv()).await.expect("the hub polls").unwrap() {
            Seen::Get(id, at) if id == task => return at,
            _ => {}
        }
    }
}

/// Waits for the `tasks/cancel` of `task`, skipping everything else.
async fn next_cancel(seen: &mut mpsc::UnboundedReceiver<Seen>, task: &str) {
    loop {
        match tokio::time::timeout(Duration::from_secs(20), seen.recv()).await.expect("a cancel").unwrap() {
            Seen::Cancel(id) if id == task => return,
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_upstream_tasks_end_cleanly_and_are_never_polled_in_a_tight_loop() {
    let (url, mut seen) = hostile_server().await;
    let gw = gateway(&url).await;
    assert_eq!(gw.hub().statuses()[0].state, codemode_mcp::hub::ServerState::Connected);

    // `tasks/get` errors, a failed task, a task asking for input: each fails its call in the cell.
    for (kind, says) in [("error", "no such task"), ("failed", "disk full"), ("input", "asks for input")] {
        let code = format!(
            "try {{ await MCP.h.job({{ kind: '{kind}' }}); return 'ran' }} catch (e) {{ return e.code + ': ' + e.message }}"
        );
        let v = support::run(&gw, "s", &code).await;
        let text = support::completed(&v).as_str().unwrap_or_default().to_string();
        assert!(text.starts_with("nested_tool_failed") && text.contains(says), "{kind}: {text}");
    }
    // The task that asked for input is cancelled upstream.
    next_cancel(&mut seen, "t-input").await;

    // A task that never ends, polled with interval 0: the polls are at least the floor apart, and
    // aborting the run cancels the task upstream.
    let ctx = RunContext::session("s");
    let r = gw.code_mode().exec_json(&ctx, &json!({ "code": "await MCP.h.job({ kind: 'forever' }); return 1" })).await;
    let run_id = r.run_id().expect("the run suspends on the task").to_string();
    let mut at = next_get(&mut seen, "t-forever").await;
    for _ in 0..4 {
        let next = next_get(&mut seen, "t-forever").await;
        // A lower bound (the hub sleeps at least this long between polls); load only lengthens it.
        assert!(next.duration_since(at) >= Duration::from_millis(40), "polled {:?} apart", next.duration_since(at));
        at = next;
    }
    assert!(gw.code_mode().abort(&codemode::RunId::parse(&run_id).unwrap()).await);
    next_cancel(&mut seen, "t-forever").await;
    // The server is still up and answers plain calls.
    let v = support::run(&gw, "s", "return (await MCP.h.ping({})).structuredContent.pong").await;
    assert_eq!(support::completed(&v), &json!(true));
}

/// Runs `code` until it is parked on a question, and returns the run id, the parked call and its
/// question.
async fn parked_question(gw: &codemode_mcp::server::Gateway, code: &str) -> (String, u64, String) {
    let ctx = RunContext::session("ask");
    let mut r = gw.code_mode().exec_json(&ctx, &json!({ "code": code })).await;
    for _ in 0..200 {
        let codemode::CodeModeResult::Waiting { run_id, pending_tool_calls, .. } = &r else { panic!("{r:?}") };
        if let Some(p) = pending_tool_calls.iter().find(|p| p.kind == codemode::PendingCallKind::Approval) {
            return (run_id.clone(), p.request_id, p.question.clone().unwrap_or_default());
        }
        let id = run_id.clone();
        r = gw.code_mode().wait_json(&ctx, &json!({ "runId": id })).await;
    }
    panic!("the call never parked on its question");
}

/// Resumes `run_id` until it ends.
async fn finish(gw: &codemode_mcp::server::Gateway, run_id: String) -> Value {
    let ctx = RunContext::session("ask");
    let mut r = gw.code_mode().wait_json(&ctx, &json!({ "runId": run_id })).await;
    for _ in 0..200 {
        let codemode::CodeModeResult::Waiting { run_id, .. } = &r else { break };
        let id = run_id.clone();
        r = gw.code_mode().wait_json(&ctx, &json!({ "runId": id })).await;
    }
    r.to_json()
}

/// An upstream task that asks for input parks its call like an approval: the question reaches the
/// human (here `decide`, what `tasks/update`, the approval endpoint and `codemode approve` call), and
/// the answer goes to the task (`tasks/update`), which then ends as it decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_task_asking_for_input_parks_its_call_until_a_human_answers() {
    let (url, _seen) = hostile_server().await;
    let gw = gateway(&url).await;
    let cell = |kind: &str| {
        format!(
            "try {{ return (await MCP.h.job({{ kind: '{kind}' }})).structuredContent }} catch (e) {{ return e.code + ': ' + e.message }}"
        )
    };
    let (run, request, question) = parked_question(&gw, &cell("ask1")).await;
    assert!(question.contains("MCP server `h` asks: Deploy build 7 to prod?"), "{question}");
    let id = codemode::RunId::parse(&run).unwrap();
    gw.code_mode().decide(&id, request, codemode::ApprovalDecision::Approve).await.unwrap();
    let v = finish(&gw, run).await;
    assert_eq!(support::completed(&v), &json!({ "deployed": 7 }));

    let (run, request, _) = parked_question(&gw, &cell("ask2")).await;
    let id = codemode::RunId::parse(&run).unwrap();
    gw.code_mode().decide(&id, request, codemode::ApprovalDecision::deny("not today")).await.unwrap();
    let v = finish(&gw, run).await;
    let text = support::completed(&v).as_str().unwrap_or_default().to_string();
    assert!(text.starts_with("nested_tool_failed") && text.contains("the deploy was declined"), "{text}");
}

/// The same question through `codemode serve` to a client that declared the tasks extension: its
/// `exec` is a task that goes `input_required` with the upstream server's question, and its answer
/// (`tasks/update`) reaches the upstream task, which completes the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_question_reaches_a_task_client_and_its_answer_goes_upstream() {
    use rmcp::ServiceExt as _;
    use rmcp::model::{ClientCapabilities, ClientConfig, UpdateTaskParams};
    let (url, _seen) = hostile_server().await;
    let gw = gateway(&url).await;
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let server = codemode_mcp::server::ExecWaitServer::new(gw.clone());
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let caps = ClientCapabilities::builder().enable_tasks().build();
    let client = ClientConfig::new(caps, Implementation::new("t", "0")).serve(client_io).await.unwrap();
    let code = "return (await MCP.h.job({ kind: 'ask3' })).structuredContent.deployed";
    let exec = CallToolRequestParams::new("exec").with_arguments(json!({ "code": code }).as_object().unwrap().clone());
    let CallToolResponse::Task(created) = client.peer().call_tool_once(exec).await.unwrap() else { panic!() };
    let id = created.task.task_id;
    // The gateway drives the run until the upstream question parks it.
    let key = loop {
        let t = client.peer().get_task(GetTaskParams::new(id.clone())).await.unwrap().task;
        if let TaskPayload::InputRequired { input_requests } = &t.payload {
            let (key, ask) = input_requests.iter().next().unwrap();
            let text = serde_json::to_value(ask).unwrap().to_string();
            assert!(text.contains("MCP server `h` asks: Deploy build 7 to prod?"), "{text}");
            break key.clone();
        }
        assert_eq!(t.status(), TaskStatus::Working, "{t:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let answer = [(key, json!({ "action": "accept" }))].into_iter().collect();
    client.peer().update_task(UpdateTaskParams::new(id.clone(), answer)).await.unwrap();
    let done = loop {
        let t = client.peer().get_task(GetTaskParams::new(id.clone())).await.unwrap().task;
        if t.status() != TaskStatus::Working {
            break t;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let TaskPayload::Completed { result } = &done.payload else { panic!("{done:?}") };
    assert_eq!(result["structuredContent"]["value"], 7, "{result:?}");
}
