//! Hooks around the outer call (contract X8), the caller's context on every nested call (P1–P4) and run
//! events (P8): what a host's policy sees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CODE_MODE_TOOL_KIND, CodeMode, CodeModeCallEvent, CodeModeConfig, CodeModeExecInput, CodeModeWaitInput,
    NestedToolCall, RunContext, ToolDefinition, ToolError, ToolErrorKind, ToolExecutor, ToolHook, ToolResult,
    ToolSource,
};
use serde_json::json;
use std::sync::{Arc, Mutex};

/// Records the outer events; refuses TypeScript cells when `refuse_ts`.
#[derive(Default)]
struct Outer {
    events: Mutex<Vec<CodeModeCallEvent>>,
    refuse_ts: bool,
}

#[async_trait::async_trait]
impl ToolHook for Outer {
    async fn before_code_mode_call(&self, event: &CodeModeCallEvent) -> Result<(), ToolError> {
        self.events.lock().unwrap().push(event.clone());
        if self.refuse_ts && event.tool_input_kind.as_deref() == Some("typescript") {
            return Err(ToolError::new(ToolErrorKind::Denied, "no TypeScript for this agent"));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x8_outer_calls_carry_the_code_mode_tool_kind() {
    let hook = Arc::new(Outer::default());
    let cm = CodeMode::builder(CodeModeConfig::enabled()).hook(hook.clone()).build();
    let ctx = RunContext::session("x8");
    let input = CodeModeExecInput {
        language: Some("typescript".into()),
        ..CodeModeExecInput::code("const n: number = 1; await yield_control(); return n")
    };
    let r = cm.exec(&ctx, &input).await;
    let run_id = r.run_id().unwrap().to_string();
    let done = cm.wait(&ctx, &CodeModeWaitInput::new(&run_id)).await;
    assert_eq!(done.to_json()["value"], json!(1));
    cm.exec(&ctx, &CodeModeExecInput::code("return 2")).await;
    let events = hook.events.lock().unwrap().clone();
    assert_eq!(events.len(), 3);
    let wire: Vec<_> = events.iter().map(|e| serde_json::to_value(e).unwrap()).collect();
    assert_eq!(wire[0]["toolName"], "exec");
    assert_eq!(wire[0]["toolKind"], "code_mode_exec");
    assert_eq!(wire[0]["toolInputKind"], "typescript");
    assert_eq!(wire[0]["context"]["scope"]["sessionId"], "x8");
    assert_eq!(wire[1]["toolName"], "wait");
    assert_eq!(wire[1]["toolKind"], CODE_MODE_TOOL_KIND);
    assert_eq!(wire[1]["runId"], json!(run_id));
    assert!(wire[1].get("toolInputKind").is_none());
    assert_eq!(wire[2]["toolInputKind"], "javascript", "the default language is known");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_may_refuse_the_outer_call() {
    let hook = Arc::new(Outer { refuse_ts: true, ..Outer::default() });
    let cm = CodeMode::builder(CodeModeConfig::enabled()).hook(hook).build();
    let ctx = RunContext::session("x8");
    let ts = CodeModeExecInput { language: Some("typescript".into()), ..CodeModeExecInput::code("return 1") };
    let r = cm.exec(&ctx, &ts).await.to_json();
    assert_eq!(r["status"], "failed");
    assert_eq!(r["error"], "exec refused by a hook: no TypeScript for this agent");
    assert_eq!(cm.store().count().await, 0, "no run started");
    assert_eq!(cm.exec(&ctx, &CodeModeExecInput::code("return 1")).await.to_json()["value"], json!(1));
}

/// A host executor (like an agent runtime's tool path) that records the context of each call.
#[derive(Default)]
struct Host {
    seen: Mutex<Vec<NestedToolCall>>,
}

#[async_trait::async_trait]
impl ToolExecutor for Host {
    async fn call(&self, call: NestedToolCall) -> Result<ToolResult, ToolError> {
        self.seen.lock().unwrap().push(call);
        Ok(ToolResult::value(json!("ok")))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p1_p4_nested_calls_reach_the_executor_with_the_callers_context() {
    let host = Arc::new(Host::default());
    let cm = CodeMode::builder(CodeModeConfig::enabled())
        .tool_definitions([ToolDefinition::new(ToolSource::Client, "app", "notify")])
        .executor(host.clone())
        .build();
    let mut ctx = RunContext::session("s-1");
    ctx.scope.agent_id = Some("agent-a".into());
    ctx.scope.session_key = Some("key-1".into());
    ctx.sender = Some("+15550100".into());
    ctx.channel = Some("sms".into());
    ctx.provider = Some("openai".into());
    ctx.model = Some("gpt-5".into());
    ctx.sandboxed = true;
    let r = cm
        .exec(&ctx, &CodeModeExecInput::code("await yield_control(); return await tools.notify({ text: 'hi' })"))
        .await;
    // Across a suspension too: the resuming `wait` comes from the same caller.
    let done = cm.wait(&ctx, &CodeModeWaitInput::new(r.run_id().unwrap())).await;
    assert_eq!(done.to_json()["value"], json!("ok"), "{}", done.to_json());
    let seen = host.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let c = &seen[0].context;
    assert_eq!(c.scope.agent_id.as_deref(), Some("agent-a"), "P1");
    assert_eq!((c.scope.session_id.as_deref(), c.scope.session_key.as_deref()), (Some("s-1"), Some("key-1")), "P2");
    assert_eq!((c.sender.as_deref(), c.channel.as_deref()), (Some("+15550100"), Some("sms")), "P3");
    assert!(c.sandboxed, "P4");
    assert_eq!((c.provider.as_deref(), c.model.as_deref()), (Some("openai"), Some("gpt-5")));
    assert_eq!(seen[0].tool_id, "client:app:notify");
    assert_eq!(seen[0].input, json!({ "text": "hi" }));
}

/// Collects events.
#[derive(Default)]
struct Events(Mutex<Vec<codemode::RunEvent>>);

impl codemode::RunObserver for Events {
    fn on_event(&self, event: codemode::RunEvent) {
        self.0.lock().unwrap().push(event);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p8_run_events_reach_the_observer() {
    let host = Arc::new(Host::default());
    let cm = CodeMode::builder(CodeModeConfig::enabled())
        .tool_definitions([ToolDefinition::new(ToolSource::Client, "app", "notify")])
        .executor(host)
        .approvals(codemode::ApprovalPolicy::require(["client:app:notify"]))
        .build();
    let ctx = RunContext::session("p8");
    let events = Arc::new(Events::default());
    let r = cm
        .exec_observed(
            &ctx,
            &CodeModeExecInput::code(
                "text('one'); try { await tools.callValue('client:app:missing', {}) } catch (e) {} \
                 json({ two: 2 }); return await tools.notify({})",
            ),
            Some(events.clone()),
        )
        .await;
    let run_id = r.run_id().unwrap().to_string();
    // Trajectory records (`trace`) are tested in tests/trajectory.rs; here the other events.
    let all: Vec<serde_json::Value> =
        events.0.lock().unwrap().iter().map(|e| serde_json::to_value(e).unwrap()).collect();
    // Control start and end, the call to the unknown id (a `denied` attempt), the
    // notify call issued and parked.
    assert_eq!(all.iter().filter(|e| e["event"] == "trace").count(), 5, "{all:?}");
    let denied: Vec<&serde_json::Value> = all.iter().filter(|e| e["outcome"] == "denied").collect();
    assert_eq!(denied.len(), 1, "{all:?}");
    assert_eq!(denied[0]["toolId"], "client:app:missing");
    let seen: Vec<serde_json::Value> = all.into_iter().filter(|e| e["event"] != "trace").collect();
    let kinds: Vec<&str> = seen.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["output", "output", "callStarted", "callParked"], "{seen:?}");
    assert_eq!(seen[0]["item"], json!({"type": "text", "text": "one"}));
    assert_eq!(seen[2]["toolId"], "client:app:notify");
    assert_eq!(seen[3]["runId"], json!(run_id));
    // The wait brings its own observer: the approved call starts and finishes there.
    cm.decide(
        &codemode::RunId::parse(&run_id).unwrap(),
        seen[3]["requestId"].as_u64().unwrap(),
        codemode::ApprovalDecision::Approve,
    )
    .await
    .unwrap();
    let later = Arc::new(Events::default());
    let done = cm.wait_observed(&ctx, &CodeModeWaitInput::new(&run_id), Some(later.clone())).await;
    assert_eq!(done.to_json()["value"], json!("ok"));
    let kinds: Vec<String> = later
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap()["event"].as_str().unwrap().to_string())
        .filter(|k| k != "trace")
        .collect();
    assert_eq!(kinds, ["callStarted", "callFinished"]);
    assert!(events.0.lock().unwrap().len() == 9, "the exec's observer saw nothing of the wait");
}

/// P4, contract §22: nested calls of a sandboxed caller meet the sandbox tool policy; others do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4_sandboxed_runs_meet_the_sandbox_tool_policy() {
    let defs = || {
        [
            ToolDefinition::new(ToolSource::Client, "app", "notify"),
            ToolDefinition::new(ToolSource::Mcp, "files", "read_file"),
            ToolDefinition::new(ToolSource::Openclaw, "core", "exec"),
        ]
    };
    let cell = "const out = {};
        for (const [k, f] of [
          ['notify', () => tools.notify({})],
          ['mcp', () => MCP.files.read_file({})],
          ['exec', () => tools.call('openclaw:core:exec', { command: 'id' })],
          ['elevated', () => tools.call('openclaw:core:exec', { command: 'id', elevated: true })],
        ]) { try { await f(); out[k] = 'ok' } catch (e) { out[k] = e.code + ': ' + e.message } }
        return out";
    let run = |policy: codemode::SandboxPolicy, sandboxed: bool| {
        let host = Arc::new(Host::default());
        let cm = CodeMode::builder(CodeModeConfig::enabled())
            .tool_definitions(defs())
            .executor(host.clone())
            .sandbox(policy)
            .build();
        async move {
            let mut ctx = RunContext::session("p4");
            ctx.scope.agent_id = Some("ops".into());
            ctx.sandboxed = sandboxed;
            let r = cm.exec(&ctx, &CodeModeExecInput::code(cell)).await.to_json();
            (r["value"].clone(), host.seen.lock().unwrap().iter().map(|c| c.tool_id.clone()).collect::<Vec<_>>())
        }
    };
    // Sandboxed, default policy: no MCP without the bundle, no elevated exec.
    let (v, seen) = run(codemode::SandboxPolicy::default(), true).await;
    assert_eq!(v["notify"], "ok");
    assert_eq!(v["exec"], "ok");
    assert!(
        v["mcp"]
            .as_str()
            .unwrap()
            .starts_with("nested_tool_failed: mcp:files:read_file: MCP tools are not allowed in a sandbox"),
        "{v}"
    );
    assert!(v["elevated"].as_str().unwrap().contains("elevated execution needs tools.elevated"), "{v}");
    assert_eq!(seen, ["client:app:notify", "openclaw:core:exec"], "refused calls never reach the executor");
    // Not sandboxed: the sandbox policy does not apply.
    let (v, _) = run(codemode::SandboxPolicy::default(), false).await;
    assert_eq!(v, json!({"notify": "ok", "mcp": "ok", "exec": "ok", "elevated": "ok"}));
    // The bundle and both elevated switches.
    let doc = json!({
        "tools": { "sandbox": { "tools": { "alsoAllow": ["bundle-mcp"] } }, "elevated": true },
        "agents": { "list": [{ "id": "ops", "tools": { "elevated": true } }] },
    });
    let (v, _) = run(codemode::SandboxPolicy::from_document(&doc).unwrap(), true).await;
    assert_eq!(v, json!({"notify": "ok", "mcp": "ok", "exec": "ok", "elevated": "ok"}));
    // An allowlist narrows the rest.
    let doc = json!({ "tools": { "sandbox": { "tools": { "allow": ["notify"], "deny": ["exec"] } } } });
    let (v, _) = run(codemode::SandboxPolicy::from_document(&doc).unwrap(), true).await;
    assert_eq!(v["notify"], "ok");
    assert!(v["exec"].as_str().unwrap().contains("tools.sandbox.tools.deny"), "{v}");
}
