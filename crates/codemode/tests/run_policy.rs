//! A run carries its policy (the book's security model, "A run carries its policy"): a `wait` whose
//! target (agent, provider, model) or sandbox flag is not the run's is refused with `invalid_input`
//! and leaves the run as it was; a run resumed in a process with another configuration keeps only
//! the tools it started with that the new configuration still gives it — never one the new
//! configuration adds; a run stored without its policy is not resumed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CodeMode, CodeModeConfig, CodeModeErrorCode, CodeModeExecInput, CodeModeResult, CodeModeWaitInput,
    DirectorySnapshotStore, FnTool, PolicyTarget, RunContext, RunScope, SnapshotStore, ToolDefinition, ToolPolicy,
    ToolResult, ToolSource,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("codemode-run-policy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A runtime on the directory store `dir` (one per "process"), with this tool policy and default
/// target.
fn runtime(dir: &Path, policy: Value, target: PolicyTarget) -> CodeMode {
    codemode_testing::builder("quickjs-wasi", CodeModeConfig::enabled())
        .policy(ToolPolicy::from_document(&policy).unwrap())
        .policy_target(target)
        .store(Arc::new(DirectorySnapshotStore::new(dir).unwrap()))
        .build()
}

fn ctx(provider: Option<&str>, sandboxed: bool) -> RunContext {
    RunContext { provider: provider.map(String::from), sandboxed, ..RunContext::session("policy") }
}

/// A cell that yields, then calls `demo_echo` by id and reports what happened.
const CALL_AFTER_YIELD: &str = "await yield_control();
    try { const r = await tools.callValue('plugin:demo:demo_echo', { n: 2 }); return 'called ' + r.n; }
    catch (e) { return e.code + (String(e.message).includes('unknown tool id') ? ': unknown tool id' : ': ' + e.message); }";

async fn waiting(cm: &CodeMode, ctx: &RunContext, code: &str) -> String {
    let first = cm.exec(ctx, &CodeModeExecInput::code(code)).await;
    let CodeModeResult::Waiting { run_id, .. } = &first else { panic!("{}", first.to_json()) };
    run_id.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_under_another_target_or_sandbox_is_refused_and_the_run_stays() {
    let dir = tempdir("mismatch");
    let cm = runtime(
        &dir,
        json!({ "tools": { "byProvider": { "openai": { "deny": ["demo_echo"] } } } }),
        Default::default(),
    );
    let run = waiting(&cm, &ctx(Some("anthropic"), false), CALL_AFTER_YIELD).await;
    for (other, what) in [
        (ctx(Some("openai"), false), "provider differs"),
        (ctx(None, false), "provider differs"),
        (ctx(Some("anthropic"), true), "sandbox differs"),
    ] {
        let refused = cm.wait(&other, &CodeModeWaitInput::new(run.clone())).await;
        assert_eq!(refused.error_code(), Some(CodeModeErrorCode::InvalidInput), "{}", refused.to_json());
        let message = refused.to_json()["error"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(what) && !message.contains("anthropic"), "{message}");
    }
    // Untouched by the refused waits: its own target resumes it.
    let done = cm.wait(&ctx(Some("anthropic"), false), &CodeModeWaitInput::new(run)).await;
    assert_eq!(done.to_json()["value"], "called 2", "{}", done.to_json());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `exec --agent locked` in one process, `wait` in another whose default agent differs (or that
/// names none): refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_for_one_agent_is_refused_to_a_process_of_another() {
    let dir = tempdir("agents");
    let agents = json!({ "agents": { "list": [
        { "id": "locked", "tools": { "deny": ["demo_echo"] } }, { "id": "open", "tools": {} } ] } });
    let target = |a: &str| PolicyTarget { agent: Some(a.into()), ..Default::default() };
    let locked = runtime(&dir, agents.clone(), target("locked"));
    let run = waiting(&locked, &ctx(None, false), CALL_AFTER_YIELD).await;
    for other in [runtime(&dir, agents.clone(), target("open")), runtime(&dir, agents.clone(), Default::default())] {
        let refused = other.wait(&ctx(None, false), &CodeModeWaitInput::new(run.clone())).await;
        assert_eq!(refused.error_code(), Some(CodeModeErrorCode::InvalidInput), "{}", refused.to_json());
        assert!(refused.to_json()["error"].as_str().unwrap_or_default().contains("agent differs"));
    }
    let done = runtime(&dir, agents, target("locked")).wait(&ctx(None, false), &CodeModeWaitInput::new(run)).await;
    assert_eq!(done.to_json()["value"], "nested_tool_failed: unknown tool id", "{}", done.to_json());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `exec --config strict` (a tool denied), `wait --config wide` in another process: the denied tool
/// stays out of the run. And the other way round: a tool the new configuration denies is taken
/// away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_under_another_configuration_narrows_and_never_widens() {
    let dir = tempdir("configs");
    let strict = json!({ "tools": { "deny": ["demo_echo"] } });
    let wide = json!({});
    let run = waiting(&runtime(&dir, strict.clone(), Default::default()), &ctx(None, false), CALL_AFTER_YIELD).await;
    let done =
        runtime(&dir, wide.clone(), Default::default()).wait(&ctx(None, false), &CodeModeWaitInput::new(run)).await;
    assert_eq!(done.to_json()["value"], "nested_tool_failed: unknown tool id", "widened: {}", done.to_json());

    let run = waiting(&runtime(&dir, wide.clone(), Default::default()), &ctx(None, false), CALL_AFTER_YIELD).await;
    let done = runtime(&dir, strict, Default::default()).wait(&ctx(None, false), &CodeModeWaitInput::new(run)).await;
    assert_eq!(done.to_json()["value"], "nested_tool_failed: unknown tool id", "not narrowed: {}", done.to_json());

    // The same configuration in another process: the call goes through.
    let run = waiting(&runtime(&dir, wide.clone(), Default::default()), &ctx(None, false), CALL_AFTER_YIELD).await;
    let done = runtime(&dir, wide, Default::default()).wait(&ctx(None, false), &CodeModeWaitInput::new(run)).await;
    assert_eq!(done.to_json()["value"], "called 2", "{}", done.to_json());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run whose stored policy is missing (written by an older version, or a stored byte removed it)
/// is not resumed, and nothing of it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stored_without_its_policy_is_not_resumed() {
    let dir = tempdir("legacy");
    let cm = runtime(&dir, json!({}), Default::default());
    let run = waiting(&cm, &ctx(None, false), CALL_AFTER_YIELD).await;
    let store = DirectorySnapshotStore::new(&dir).unwrap();
    let id = codemode::RunId::parse(&run).unwrap();
    let mut stored = store.checkout(&id, &RunScope::session("policy")).await.unwrap();
    stored.policy = None;
    store.put(stored).await.unwrap();
    let refused = cm.wait(&ctx(None, false), &CodeModeWaitInput::new(run)).await;
    assert_eq!(refused.error_code(), Some(CodeModeErrorCode::InvalidInput), "{}", refused.to_json());
    assert!(refused.to_json()["error"].as_str().unwrap_or_default().contains("without the policy"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tool `plugin:t:<name>` with this input schema, read-only or not, that counts its calls and
/// answers `{ ok: true }` — or never answers (`hang`).
fn counted(name: &str, schema: Value, read_only: bool, hang: bool, calls: Arc<AtomicU32>) -> codemode::LocalTools {
    let mut def = ToolDefinition::new(ToolSource::Plugin, "t", name).with_parameters(schema);
    if read_only {
        def = def.read_only();
    }
    let mut tools = codemode::LocalTools::new();
    tools.add(Arc::new(FnTool::new(def, move |_input| {
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            if hang {
                std::future::pending::<()>().await;
            }
            Ok(ToolResult::value(json!({ "ok": true })))
        }
    })));
    tools
}

fn runtime_with(dir: &Path, tools: codemode::LocalTools, max_pending: u64) -> CodeMode {
    let mut config = CodeModeConfig::enabled();
    config.timeout_ms = 300;
    config.max_pending_tool_calls = max_pending;
    CodeMode::builder(config)
        .engine_name("quickjs-wasi")
        .local_tools(tools)
        .approvals(codemode::ApprovalPolicy::require(["plugin:t:pay"]))
        .store(Arc::new(DirectorySnapshotStore::new(dir).unwrap()))
        .build()
}

const PAY: &str = "try { const r = await tools.callValue('plugin:t:pay', { amount: 5 }); return 'paid ' + r.ok }
    catch (e) { return e.code + ': ' + e.message }";

/// An approved call meets every gate again, against the tool's definition where it finally runs:
/// a process whose `pay` now needs a `currency` refuses it (`invalid_input`) and the tool never
/// runs; where the definition is unchanged it runs — counted once against `maxPendingToolCalls`
/// (a limit of 1 lets the one parked call through).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_meets_every_gate_against_the_tools_current_definition() {
    let dir = tempdir("approved");
    let amount = json!({ "type": "object", "properties": { "amount": { "type": "number" } }, "required": ["amount"] });
    let stricter = json!({ "type": "object", "properties": { "amount": { "type": "number" }, "currency": { "type": "string" } },
        "required": ["amount", "currency"] });
    for (schema, want, runs) in [(stricter, "invalid_input: ", 0), (amount.clone(), "paid true", 1)] {
        let parking = runtime_with(&dir, counted("pay", amount.clone(), false, false, Arc::default()), 1);
        let first = parking.exec(&ctx(None, false), &CodeModeExecInput::code(PAY)).await;
        assert_eq!(first.to_json()["pendingToolCalls"][0]["kind"], "approval", "{}", first.to_json());
        let run = first.run_id().unwrap().to_string();
        parking.decide(&codemode::RunId::parse(&run).unwrap(), 1, codemode::ApprovalDecision::Approve).await.unwrap();
        let calls = Arc::new(AtomicU32::new(0));
        let resuming = runtime_with(&dir, counted("pay", schema, false, false, calls.clone()), 1);
        let done = resuming.wait(&ctx(None, false), &CodeModeWaitInput::new(run)).await;
        let value = done.to_json()["value"].as_str().unwrap_or_default().to_string();
        assert!(value.starts_with(want), "{}", done.to_json());
        assert_eq!(calls.load(Ordering::SeqCst), runs, "{value}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A call lost with the process running it is issued again only if the tool's definition where
/// the run resumes says it is read-only — the stored run's own flag (it was read-only where the
/// call was made) is not believed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_call_is_issued_again_only_if_the_tool_is_read_only_now() {
    let dir = tempdir("lost");
    let cell = "const r = await tools.callValue('plugin:t:look', {}); return 'looked ' + r.ok";
    for (read_only_now, want, runs) in [(false, None, 0), (true, Some("looked true"), 1)] {
        let run = {
            let first = runtime_with(&dir, counted("look", json!({}), true, true, Arc::default()), 4);
            let r = first.exec(&ctx(None, false), &CodeModeExecInput::code(cell)).await;
            assert_eq!(r.status(), "waiting", "{}", r.to_json());
            r.run_id().unwrap().to_string()
            // The first runtime goes away with its call.
        };
        let calls = Arc::new(AtomicU32::new(0));
        let resuming = runtime_with(&dir, counted("look", json!({}), read_only_now, false, calls.clone()), 4);
        let done = resuming.wait(&ctx(None, false), &CodeModeWaitInput::new(run)).await;
        match want {
            Some(v) => assert_eq!(done.to_json()["value"], v, "{}", done.to_json()),
            None => {
                assert_eq!(done.error_code(), Some(CodeModeErrorCode::NestedToolFailed), "{}", done.to_json());
                assert!(done.to_json()["error"].as_str().unwrap_or_default().contains("not read-only"));
            }
        }
        assert_eq!(calls.load(Ordering::SeqCst), runs);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same in one process: a parked call approved after the host's definition of the tool
/// changed (`set_host_tools`, as an upstream server's new tool list does) meets the input-schema
/// gate against the new definition, and the executor never sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_meets_the_definition_the_host_has_now() {
    struct Counting(Arc<AtomicU32>);
    #[async_trait::async_trait]
    impl codemode::ToolExecutor for Counting {
        async fn call(&self, _call: codemode::NestedToolCall) -> Result<ToolResult, codemode::ToolError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(ToolResult::value(json!({ "ok": true })))
        }
    }
    let def = |schema: Value| ToolDefinition::new(ToolSource::Plugin, "t", "pay").with_parameters(schema);
    let amount = json!({ "type": "object", "properties": { "amount": { "type": "number" } }, "required": ["amount"] });
    let stricter = json!({ "type": "object", "properties": { "amount": { "type": "number" }, "currency": { "type": "string" } },
        "required": ["amount", "currency"] });
    let calls = Arc::new(AtomicU32::new(0));
    let cm = CodeMode::builder(CodeModeConfig::enabled())
        .engine_name("quickjs-wasi")
        .tool_definitions([def(amount)])
        .executor(Arc::new(Counting(calls.clone())))
        .approvals(codemode::ApprovalPolicy::require(["plugin:t:pay"]))
        .build();
    let first = cm.exec(&ctx(None, false), &CodeModeExecInput::code(PAY)).await;
    assert_eq!(first.to_json()["pendingToolCalls"][0]["kind"], "approval", "{}", first.to_json());
    let run = first.run_id().unwrap().to_string();
    cm.set_host_tools(vec![def(stricter)]);
    cm.decide(&codemode::RunId::parse(&run).unwrap(), 1, codemode::ApprovalDecision::Approve).await.unwrap();
    let done = cm.wait(&ctx(None, false), &CodeModeWaitInput::new(run)).await;
    let value = done.to_json()["value"].as_str().unwrap_or_default().to_string();
    assert!(value.starts_with("invalid_input: "), "{}", done.to_json());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}
