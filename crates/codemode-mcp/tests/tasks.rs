//! Runs served as MCP tasks (the book's "Runs as MCP tasks"), driven by rmcp's own client declaring the
//! tasks extension, over an in-memory transport: the gateway answers a `waiting` `exec` with a task
//! and drives the run with no `wait` from the client; `tasks/get` reports the pending calls;
//! `tasks/update` answers a parked approval; `tasks/cancel` aborts the run and its nested calls and
//! stays cancelled; another client's task id is refused; records expire. The slow tool is a mock
//! whose calls the test answers through its handle, and the TTL moves with a manual clock: events
//! are ordered by handles and clocks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    ApprovalPolicy, CodeModeConfig, LocalTools, ManualClock, MemorySnapshotStore, ToolDefinition, ToolSource,
};
use codemode_mcp::McpHub;
use codemode_mcp::approval::ElicitingApprover;
use codemode_mcp::server::{ExecWaitServer, Gateway};
use codemode_testing::mock::{Handle, mock};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig, GetTaskParams,
    Implementation, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

type Client = RunningService<RoleClient, ClientConfig>;

/// A gateway whose runs wait on `plugin:t:slow` (a mock) and may call `plugin:t:pay` (gated),
/// with a 50 ms run timeout and a 60 s TTL on `clock`.
async fn gateway(clock: Arc<ManualClock>) -> (Arc<Gateway>, Handle) {
    let (slow, handle) = mock(ToolDefinition::new(ToolSource::Plugin, "t", "slow"));
    let pay = codemode::FnTool::new(ToolDefinition::new(ToolSource::Plugin, "t", "pay"), |input: Value| async move {
        Ok(codemode::ToolResult::value(json!({ "paid": input["amount"] })))
    });
    let mut tools = LocalTools::new();
    tools.add(slow);
    tools.add(Arc::new(pay));
    let config = CodeModeConfig { timeout_ms: 50, snapshot_ttl_seconds: 60, ..CodeModeConfig::enabled() };
    let approver = Arc::new(ElicitingApprover::default());
    let cm = codemode_testing::builder("quickjs-wasi", config)
        .local_tools(tools)
        .store(Arc::new(MemorySnapshotStore::with_clock(clock.clone())))
        .clock(clock)
        .approvals(ApprovalPolicy { require: vec!["plugin:t:pay".into()], timeout_ms: 0, ..Default::default() })
        .approver(approver.clone())
        .build();
    let hub = McpHub::connect(Vec::new()).await;
    (Gateway::with_approver(cm, hub, approver), handle)
}

/// A client session of its own (its own run scope) with the gateway, declaring the tasks extension
/// when `tasks`.
async fn client(gateway: &Arc<Gateway>, tasks: bool) -> Client {
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let server = ExecWaitServer::new(gateway.clone());
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let caps = if tasks { ClientCapabilities::builder().enable_tasks().build() } else { ClientCapabilities::default() };
    ClientConfig::new(caps, Implementation::new("tasks-test", "0")).serve(client_io).await.unwrap()
}

fn exec(code: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("exec").with_arguments(json!({ "code": code }).as_object().unwrap().clone())
}

/// Polls `tasks/get` until the task leaves `working` (the gateway drives it meanwhile).
async fn settled(c: &Client, id: &str) -> rmcp::model::DetailedTask {
    for _ in 0..2_000 {
        let t = c.peer().get_task(GetTaskParams::new(id)).await.unwrap().task;
        if t.status() != TaskStatus::Working {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("task {id} still working");
}

fn completed_json(t: &rmcp::model::DetailedTask) -> Value {
    match &t.payload {
        TaskPayload::Completed { result } => result.get("structuredContent").cloned().unwrap(),
        other => panic!("not completed: {other:?}"),
    }
}

const THREE_SLOW: &str =
    "let n = 0; for (const i of [1, 2, 3]) { n += (await tools.slow({ i })).v; text('call ' + i) } return n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_exec_becomes_a_task_the_gateway_drives_to_its_end() {
    let (gw, mut slow) = gateway(Arc::new(ManualClock::at(1_000_000))).await;
    let c = client(&gw, true).await;
    let CallToolResponse::Task(created) = c.peer().call_tool_once(exec(THREE_SLOW)).await.unwrap() else {
        panic!("a waiting run of a tasks client is a task");
    };
    let id = created.task.task_id.clone();
    assert!(id.starts_with("cm_"), "{id}");
    assert_eq!(created.task.status, TaskStatus::Working);
    assert_eq!(created.task.ttl_ms, Some(60_000));
    assert!(created.task.poll_interval_ms.is_some());
    for i in 1..=3 {
        let call = slow.next_call().await.unwrap();
        assert_eq!(call.input, json!({ "i": i }));
        // While the call is held, the task is working and names it.
        let t = c.peer().get_task(GetTaskParams::new(&id)).await.unwrap().task;
        assert_eq!(t.status(), TaskStatus::Working);
        if i > 1 {
            let message = t.task.status_message.clone().unwrap_or_default();
            assert!(message.contains("plugin:t:slow"), "{message}");
        }
        call.respond(json!({ "v": i * 10 }));
    }
    let done = settled(&c, &id).await;
    let result = completed_json(&done);
    assert_eq!(result["status"], "completed");
    assert_eq!(result["value"], 60);
    let texts: Vec<&str> = result["output"].as_array().unwrap().iter().filter_map(|o| o["text"].as_str()).collect();
    assert_eq!(texts, ["call 1", "call 2", "call 3"], "every resume's output, in order");
    assert!(result["telemetry"]["waitCount"].as_u64().unwrap() >= 1, "the gateway resumed the run: {result}");
    assert_eq!(gw.tasks().driven(), 0, "nothing is driven any more");
    // Completed stays completed, with the same result.
    let again = c.peer().get_task(GetTaskParams::new(&id)).await.unwrap().task;
    assert_eq!(completed_json(&again), result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_the_extension_and_quick_cells_see_plain_results() {
    let (gw, mut slow) = gateway(Arc::new(ManualClock::at(1_000_000))).await;
    let tasks = client(&gw, true).await;
    let CallToolResponse::Complete(quick) = tasks.peer().call_tool_once(exec("return 6 * 7")).await.unwrap() else {
        panic!("a cell that finishes within timeoutMs answers directly");
    };
    assert_eq!(quick.structured_content.unwrap()["value"], 42);
    let plain = client(&gw, false).await;
    let CallToolResponse::Complete(waiting) =
        plain.peer().call_tool_once(exec("return (await tools.slow({})).v")).await.unwrap()
    else {
        panic!("a client without the tasks extension gets `waiting`");
    };
    assert_eq!(waiting.structured_content.unwrap()["status"], "waiting");
    slow.next_call().await.unwrap().respond(json!({ "v": 1 }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_aborts_the_run_and_its_calls_and_stays_cancelled() {
    let (gw, mut slow) = gateway(Arc::new(ManualClock::at(1_000_000))).await;
    let c = client(&gw, true).await;
    let CallToolResponse::Task(created) = c.peer().call_tool_once(exec(THREE_SLOW)).await.unwrap() else { panic!() };
    let id = created.task.task_id;
    let mut call = slow.next_call().await.unwrap();
    c.peer().cancel_task(CancelTaskParams::new(&id)).await.unwrap();
    // The held call is given up: the tool's future was dropped.
    tokio::time::timeout(Duration::from_secs(10), call.cancelled()).await.expect("the nested call is cancelled");
    let t = c.peer().get_task(GetTaskParams::new(&id)).await.unwrap().task;
    assert_eq!(t.status(), TaskStatus::Cancelled);
    // The run is gone: `wait` on it fails, and a second cancel changes nothing.
    let CallToolResponse::Complete(w) = c
        .peer()
        .call_tool_once(
            CallToolRequestParams::new("wait").with_arguments(json!({ "runId": id }).as_object().unwrap().clone()),
        )
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(w.structured_content.unwrap()["status"], "failed");
    c.peer().cancel_task(CancelTaskParams::new(&id)).await.unwrap();
    assert_eq!(c.peer().get_task(GetTaskParams::new(&id)).await.unwrap().task.status(), TaskStatus::Cancelled);
    assert_eq!(slow.calls_made(), 1, "no later call was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_approval_is_input_required_and_answered_through_tasks_update() {
    let (gw, _slow) = gateway(Arc::new(ManualClock::at(1_000_000))).await;
    let c = client(&gw, true).await;
    let cell = "try { return (await tools.pay({ amount: 5 })).paid } catch (e) { return e.code }";
    let CallToolResponse::Task(created) = c.peer().call_tool_once(exec(cell)).await.unwrap() else { panic!() };
    assert_eq!(created.task.status, TaskStatus::InputRequired);
    let id = created.task.task_id;
    let t = c.peer().get_task(GetTaskParams::new(&id)).await.unwrap().task;
    let TaskPayload::InputRequired { input_requests } = &t.payload else { panic!("{t:?}") };
    let keys: Vec<&String> = input_requests.keys().collect();
    assert_eq!(keys.len(), 1);
    assert!(keys[0].starts_with("approval:"), "{keys:?}");
    // Hostile answers change nothing: a key never asked, a request id never parked.
    let bogus = [("approval:999".to_string(), json!({ "action": "accept" })), ("x".to_string(), json!(1))];
    c.peer().update_task(UpdateTaskParams::new(&id, bogus.into_iter().collect())).await.unwrap();
    assert_eq!(c.peer().get_task(GetTaskParams::new(&id)).await.unwrap().task.status(), TaskStatus::InputRequired);
    let answer = [(keys[0].clone(), json!({ "action": "accept" }))];
    c.peer().update_task(UpdateTaskParams::new(&id, answer.into_iter().collect())).await.unwrap();
    let done = settled(&c, &id).await;
    assert_eq!(completed_json(&done)["value"], 5);
}

/// An approval decided by another path than `tasks/update` (the approval endpoint and `codemode
/// approve` call `decide`): the next `tasks/get` sees the answer and the task goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_answered_elsewhere_resumes_the_task_at_its_next_poll() {
    let (gw, _slow) = gateway(Arc::new(ManualClock::at(1_000_000))).await;
    let c = client(&gw, true).await;
    let cell = "try { return (await tools.pay({ amount: 8 })).paid } catch (e) { return e.code }";
    let CallToolResponse::Task(created) = c.peer().call_tool_once(exec(cell)).await.unwrap() else { panic!() };
    assert_eq!(created.task.status, TaskStatus::InputRequired);
    let id = created.task.task_id;
    let request = match &c.peer().get_task(GetTaskParams::new(&id)).await.unwrap().task.payload {
        TaskPayload::InputRequired { input_requests } => {
            input_requests.keys().next().unwrap().trim_start_matches("approval:").parse::<u64>().unwrap()
        }
        other => panic!("{other:?}"),
    };
    let run = codemode::RunId::parse(&id).unwrap();
    gw.code_mode().decide(&run, request, codemode::ApprovalDecision::Approve).await.unwrap();
    assert_eq!(completed_json(&settled(&c, &id).await)["value"], 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_approval_fails_the_call_in_the_cell() {
    let (gw, _slow) = gateway(Arc::new(ManualClock::at(1_000_000))).await;
    let c = client(&gw, true).await;
    let cell = "try { return (await tools.pay({ amount: 5 })).paid } catch (e) { return e.code }";
    let CallToolResponse::Task(created) = c.peer().call_tool_once(exec(cell)).await.unwrap() else { panic!() };
    let id = created.task.task_id;
    let key = format!(
        "approval:{}",
        match &c.peer().get_task(GetTaskParams::new(&id)).await.unwrap().task.payload {
            TaskPayload::InputRequired { input_requests } =>
                input_requests.keys().next().unwrap().trim_start_matches("approval:").to_string(),
            other => panic!("{other:?}"),
        }
    );
    let answer = [(key, json!({ "action": "decline" }))];
    c.peer().update_task(UpdateTaskParams::new(&id, answer.into_iter().collect())).await.unwrap();
    assert_eq!(completed_json(&settled(&c, &id).await)["value"], "nested_tool_failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_task_is_refused_and_records_expire() {
    let clock = Arc::new(ManualClock::at(1_000_000));
    let (gw, mut slow) = gateway(clock.clone()).await;
    let (owner, intruder) = (client(&gw, true).await, client(&gw, true).await);
    let CallToolResponse::Task(created) = owner.peer().call_tool_once(exec(THREE_SLOW)).await.unwrap() else {
        panic!()
    };
    let id = created.task.task_id;
    let refused = |e: rmcp::service::ServiceError| match e {
        rmcp::service::ServiceError::McpError(e) => assert!(e.message.contains("unknown or expired task"), "{e:?}"),
        other => panic!("{other:?}"),
    };
    refused(intruder.peer().get_task(GetTaskParams::new(&id)).await.unwrap_err());
    refused(intruder.peer().cancel_task(CancelTaskParams::new(&id)).await.unwrap_err());
    refused(intruder.peer().update_task(UpdateTaskParams::new(&id, Default::default())).await.unwrap_err());
    for bad in ["cm_00000000000000000000000000000000", "../../etc/passwd", "", &"x".repeat(10_000)] {
        refused(owner.peer().get_task(GetTaskParams::new(bad)).await.unwrap_err());
    }
    for i in 1..=3 {
        slow.next_call().await.unwrap().respond(json!({ "v": i }));
    }
    assert_eq!(completed_json(&settled(&owner, &id).await)["value"], 6, "the intruder changed nothing");
    // Past the TTL (from the task's creation) the record is gone.
    clock.advance_ms(60_000);
    refused(owner.peer().get_task(GetTaskParams::new(&id)).await.unwrap_err());
}
