//! A policy per run (contract §4, §22: the tool policy is per agent, and code mode never
//! leaks tools across agents): one runtime serving several agents resolves each run's catalog from
//! its context (agent, provider, model) — what `ALL_TOOLS`, `tools.*`, calls by id, namespaces and
//! the `exec` description show — and a run suspended by one agent cannot be resumed by another.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, RunContext, RunScope, ToolPolicy,
};
use codemode_demo::{demo_namespaces, demo_tools};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;

fn runtime(policy: Value) -> CodeMode {
    codemode_testing::builder("quickjs", CodeModeConfig::enabled())
        .namespaces(Arc::new(demo_namespaces()))
        .policy(ToolPolicy::from_document(&policy).unwrap())
        .build()
}

fn ctx(agent: Option<&str>, provider: Option<&str>) -> RunContext {
    RunContext {
        scope: RunScope { agent_id: agent.map(String::from), ..RunScope::session("agents") },
        provider: provider.map(String::from),
        ..RunContext::default()
    }
}

const DEMO: [&str; 8] = [
    "demo_customer_get",
    "demo_echo",
    "demo_fail",
    "demo_invoice_send",
    "demo_shipping_list",
    "demo_shipping_mark_paid",
    "demo_sleep",
    "demo_customer_get",
];

/// What a cell of `ctx` sees and reaches: `ALL_TOOLS`, the ids that calls by id do not refuse as
/// unknown, whether the `Shipping` namespace exists.
async fn probe(cm: &CodeMode, ctx: &RunContext) -> Value {
    let code = format!(
        "const ids = {ids};
         const reached = [];
         for (const id of ids) {{
           try {{ await tools.callValue(id, id.endsWith('sleep') ? {{ ms: 1 }} : {{}}); reached.push(id); }}
           catch (e) {{ if (!String(e.message).includes('unknown tool id')) reached.push(id); }}
         }}
         return {{ all: ALL_TOOLS.map((t) => t.id).sort(), reached: reached.sort(), shipping: typeof Shipping }};",
        ids = json!(DEMO.iter().map(|n| format!("plugin:demo:{n}")).collect::<BTreeSet<_>>())
    );
    let r = cm.exec(ctx, &CodeModeExecInput::code(code)).await;
    assert_eq!(r.status(), "completed", "{}", r.to_json());
    r.to_json()["value"].clone()
}

fn ids(names: &[&str]) -> Value {
    json!(names.iter().map(|n| format!("plugin:demo:{n}")).collect::<BTreeSet<_>>())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_agent_sees_and_calls_only_its_own_tools() {
    let cm = runtime(json!({
        "tools": { "byProvider": { "openai": { "deny": ["demo_echo"] } } },
        "agents": { "list": [
            { "id": "support", "tools": { "allow": ["demo_customer_get", "demo_echo"] } },
            { "id": "ops", "tools": { "deny": ["demo_customer_get", "demo_invoice_*"] } },
        ] },
    }));
    // Concurrently, on one runtime.
    let contexts =
        [ctx(Some("support"), None), ctx(Some("ops"), None), ctx(Some("support"), Some("openai")), ctx(None, None)];
    let (support, ops, support_openai, anyone) = tokio::join!(
        probe(&cm, &contexts[0]),
        probe(&cm, &contexts[1]),
        probe(&cm, &contexts[2]),
        probe(&cm, &contexts[3]),
    );
    assert_eq!(support["all"], ids(&["demo_customer_get", "demo_echo"]), "{support}");
    assert_eq!(support["reached"], support["all"], "{support}");
    assert_eq!(support["shipping"], "undefined", "its backing tools are not the agent's: {support}");
    let ops_tools = ["demo_echo", "demo_fail", "demo_shipping_list", "demo_shipping_mark_paid", "demo_sleep"];
    assert_eq!(ops["all"], ids(&ops_tools), "{ops}");
    assert_eq!(ops["reached"], ops["all"], "{ops}");
    assert_eq!(ops["shipping"], "object", "{ops}");
    assert_eq!(support_openai["all"], ids(&["demo_customer_get"]), "byProvider narrows: {support_openai}");
    assert_eq!(support_openai["reached"], support_openai["all"]);
    assert_eq!(anyone["all"].as_array().unwrap().len(), 7, "no agent: the global policy: {anyone}");
    // The exec description of each agent's model lists its own tools only.
    let d = cm.exec_tool_for(&ctx(Some("support"), None), &[]).description;
    assert!(d.contains("demo_customer_get") && !d.contains("demo_shipping_list"), "{d}");
    let d = cm.exec_tool_for(&ctx(Some("ops"), None), &[]).description;
    assert!(d.contains("demo_shipping_list") && !d.contains("demo_customer_get"), "{d}");
    assert!(d.contains("Shipping:"), "the ops agent's namespace: {d}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cannot_be_resumed_under_another_agent() {
    let cm = runtime(json!({ "agents": { "list": [{ "id": "a", "tools": {} }, { "id": "b", "tools": {} }] } }));
    let first = cm.exec(&ctx(Some("a"), None), &CodeModeExecInput::code("await yield_control(); return 1")).await;
    let CodeModeResult::Waiting { run_id, .. } = &first else { panic!("{}", first.to_json()) };
    let other = cm.wait(&ctx(Some("b"), None), &CodeModeWaitInput::new(run_id.clone())).await;
    assert_eq!(other.status(), "failed", "{}", other.to_json());
    let mine = cm.wait(&ctx(Some("a"), None), &CodeModeWaitInput::new(run_id.clone())).await;
    assert_eq!(mine.to_json()["value"], 1, "{}", mine.to_json());
}

/// A run resumes only under the policy it was started with: a `wait` naming another provider is
/// refused (`invalid_input`) and leaves the run as it was; its own provider resumes it. (Across
/// processes and configurations: `run_policy.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_under_another_provider_is_refused() {
    let cm = runtime(json!({ "tools": { "byProvider": { "openai": { "deny": ["demo_echo"] } } } }));
    let code = "const a = await tools.demo_echo({ n: 1 }); await yield_control();
                const b = await tools.callValue('plugin:demo:demo_echo', { n: 2 }); return [a.n, b.n];";
    let first = cm.exec(&ctx(None, Some("anthropic")), &CodeModeExecInput::code(code)).await;
    let CodeModeResult::Waiting { run_id, .. } = &first else { panic!("{}", first.to_json()) };
    let refused = cm.wait(&ctx(None, Some("openai")), &CodeModeWaitInput::new(run_id.clone())).await;
    assert_eq!(refused.error_code(), Some(codemode::CodeModeErrorCode::InvalidInput), "{}", refused.to_json());
    let done = cm.wait(&ctx(None, Some("anthropic")), &CodeModeWaitInput::new(run_id.clone())).await;
    assert_eq!(done.to_json()["value"], json!([1, 2]), "{}", done.to_json());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(12))]

    /// Whatever the agents' allow and deny lists, what a run of an agent can call is exactly its
    /// own catalog: never a tool another agent was given.
    #[test]
    fn runs_reach_exactly_their_agents_catalog(
        allow_a in proptest::collection::btree_set(0usize..7, 0..5),
        deny_a in proptest::collection::btree_set(0usize..7, 0..3),
        deny_b in proptest::collection::btree_set(0usize..7, 0..4),
    ) {
        let name = |i: &usize| DEMO[*i].to_string();
        let mut a = json!({ "deny": deny_a.iter().map(name).collect::<Vec<_>>() });
        if !allow_a.is_empty() {
            a["allow"] = json!(allow_a.iter().map(name).collect::<Vec<_>>());
        }
        let policy = json!({ "agents": { "list": [
            { "id": "a", "tools": a },
            { "id": "b", "tools": { "deny": deny_b.iter().map(name).collect::<Vec<_>>() } },
        ] } });
        let cm = runtime(policy);
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        for agent in ["a", "b"] {
            let c = ctx(Some(agent), None);
            let seen = rt.block_on(probe(&cm, &c));
            let catalog: BTreeSet<String> = cm.catalog_for(&c).all_tools().iter().map(|t| t.id.clone()).collect();
            proptest::prop_assert_eq!(&seen["reached"], &json!(catalog), "agent {}", agent);
            proptest::prop_assert_eq!(&seen["all"], &json!(catalog), "agent {}", agent);
        }
    }
}

/// `CodeModeBuilder::config_file` gives an embedder the CLI's semantics of a config
/// file: `tools.codeMode`, the tool policy, approvals, loop detection and declared namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_applies_a_config_file_as_the_cli_does() {
    let file = codemode::config_file::ConfigFile::parse(
        "{ tools: { codeMode: { enabled: true, timeoutMs: 2000 }, deny: ['demo_fail'],
                    loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3, globalCircuitBreakerThreshold: 4 } },
           approvals: { require: ['plugin:demo:demo_invoice_send'] },
           namespaces: [{ owner: 'plugin:demo', globalName: 'Echo', description: 'Echo helpers.',
                          members: { say: { tool: 'demo_echo', input: { text: '$1' } } } }] }",
    )
    .unwrap();
    let cm = CodeMode::builder(CodeModeConfig::default())
        .engine_name("quickjs")
        .local_tools(demo_tools())
        .config_file(&file, codemode::Namespaces::new())
        .unwrap()
        .build();
    assert!(cm.config().enabled && cm.config().timeout_ms == 2000, "tools.codeMode applies");
    assert_eq!(cm.engine_name(), "quickjs", "an engine chosen on the builder stays");
    let ctx = RunContext::session("config-file");
    let run = |code: &'static str| {
        let (cm, ctx) = (cm.clone(), ctx.clone());
        async move { cm.exec(&ctx, &CodeModeExecInput::code(code)).await }
    };
    let denied = run("return await tools.callValue('plugin:demo:demo_fail', {}).then(() => 'ran', (e) => String(e.message).includes('unknown tool id'))").await;
    assert_eq!(denied.to_json()["value"], true, "the policy applies: {}", denied.to_json());
    let echoed = run("return (await Echo.say('hi')).text").await;
    assert_eq!(echoed.to_json()["value"], "hi", "the declared namespace applies: {}", echoed.to_json());
    let gated = run("return await tools.demo_invoice_send({ shipmentId: 'SHP-1001', amount: 1 })").await;
    assert_eq!(gated.to_json()["pendingToolCalls"][0]["kind"], "approval", "approvals apply: {}", gated.to_json());
    let looped =
        run("for (let i = 0; i < 6; i++) { try { await tools.demo_echo({ q: 1 }) } catch (e) {} } return 'ran'").await;
    assert_eq!(
        looped.error_code().map(|c| c.as_str()),
        Some("nested_tool_failed"),
        "loop detection applies: {}",
        looped.to_json()
    );
    // A declared namespace that clashes with a registered one is an error naming `namespaces`.
    let taken = codemode::Namespaces::new();
    file.register_namespaces(&taken).unwrap();
    let other = codemode::config_file::ConfigFile::parse(
        "{ namespaces: [{ owner: 'plugin:other', globalName: 'Echo', description: 'd', members: { a: { tool: 'demo_echo' } } }] }",
    )
    .unwrap();
    let e = CodeMode::builder(CodeModeConfig::enabled()).config_file(&other, taken).err().unwrap();
    assert_eq!(e.path, "namespaces");
}

/// The order of the checks a nested call passes (the book's security model (docs/src/security.md) lists
/// it): resolution in the run's catalog → runnable / `restartSafe` → loop detection → pending limit
/// → sandbox policy → `before_tool_call` hooks → the approval gate → the tool → `after_tool_call`
/// hooks → the output contract. A call refused by an earlier check never reaches a later one (the
/// hooks and the approver never see it); an approval is asked after the hooks and before the tool.
/// (That such refusals are `denied` trajectory entries is tested in `hooks.rs` and `loops.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_meet_their_checks_in_the_documented_order() {
    use codemode::{ApprovalDecision, ApprovalRequest, Approver, NestedToolCall, ToolError, ToolHook, ToolResult};
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen(Mutex<Vec<String>>);
    impl SeenLog for Seen {
        fn log(&self, what: &str) {
            self.0.lock().unwrap().push(what.to_string());
        }
    }
    struct Hook(Arc<Seen>);
    #[async_trait::async_trait]
    impl ToolHook for Hook {
        async fn before_tool_call(&self, call: &mut NestedToolCall) -> Result<(), ToolError> {
            self.0.0.lock().unwrap().push(format!("before {}", call.tool_id));
            Ok(())
        }
        async fn after_tool_call(&self, call: &NestedToolCall, _: &mut Result<ToolResult, ToolError>) {
            self.0.0.lock().unwrap().push(format!("after {}", call.tool_id));
        }
    }
    struct Asker(Arc<Seen>);
    #[async_trait::async_trait]
    impl Approver for Asker {
        async fn decide(&self, request: &ApprovalRequest) -> Option<ApprovalDecision> {
            self.0.0.lock().unwrap().push(format!("approve {}", request.tool_id));
            Some(ApprovalDecision::Approve)
        }
    }
    let seen = Arc::new(Seen::default());
    let mut tools = codemode::LocalTools::new();
    let log = seen.clone();
    let def = codemode::ToolDefinition::new(codemode::ToolSource::Plugin, "order", "pay");
    tools.add(Arc::new(codemode::FnTool::new(def, move |_| {
        let log = log.clone();
        async move {
            log.0.lock().unwrap().push("tool plugin:order:pay".into());
            Ok(ToolResult::value(json!("paid")))
        }
    })));
    let echo = codemode::ToolDefinition::new(codemode::ToolSource::Plugin, "order", "echo").read_only();
    tools.add(Arc::new(codemode::FnTool::new(echo, |input| async move { Ok(ToolResult::value(input)) })));
    let cm = CodeMode::builder(CodeModeConfig::enabled())
        .engine_name("quickjs")
        .local_tools(tools)
        .hook(Arc::new(Hook(seen.clone())))
        .approvals(codemode::ApprovalPolicy::require(["plugin:order:pay"]))
        .approver(Arc::new(Asker(seen.clone())))
        .sandbox(codemode::SandboxPolicy::from_document(&json!({ "tools": { "sandbox": { "tools": { "deny": ["pay"] } } } })).unwrap())
        .loop_detection(codemode::LoopPolicy::from_document(&json!({ "tools": { "loopDetection": { "enabled": true, "warningThreshold": 1, "criticalThreshold": 2, "globalCircuitBreakerThreshold": 9 } } })).unwrap())
        .build();
    // 1. The whole path of an allowed, gated call: hooks before, then the approval, the tool, hooks after.
    let r = cm.exec(&ctx(None, None), &CodeModeExecInput::code("return await tools.pay({})")).await;
    assert_eq!(r.to_json()["value"], "paid", "{}", r.to_json());
    assert_eq!(
        std::mem::take(&mut *seen.0.lock().unwrap()),
        ["before plugin:order:pay", "approve plugin:order:pay", "tool plugin:order:pay", "after plugin:order:pay"]
    );
    // 2. Refused before the hooks: an unknown id, the sandbox policy, loop detection.
    let sandboxed = RunContext { sandboxed: true, ..ctx(None, None) };
    let refused = cm
        .exec(
            &sandboxed,
            &CodeModeExecInput::code(
                "const out = [];
                 for (const f of [() => tools.callValue('plugin:order:nope', {}), () => tools.pay({}),
                                  () => tools.echo({ a: 1 }), () => tools.echo({ a: 1 })]) {
                   try { await f(); out.push('ok'); } catch (e) { out.push(e.code); }
                 }
                 return out;",
            ),
        )
        .await;
    assert_eq!(
        refused.to_json()["value"],
        json!(["nested_tool_failed", "nested_tool_failed", "ok", "nested_tool_failed"]),
        "{}",
        refused.to_json()
    );
    // Only the one echo call that passed every check reached the hooks; nothing reached the approver.
    assert_eq!(std::mem::take(&mut *seen.0.lock().unwrap()), ["before plugin:order:echo", "after plugin:order:echo"]);
    // 3. A call parked for approval and approved later meets every check again, then the stages
    // while it runs without asking again. Loop detection counts it once (criticalThreshold 2 would
    // refuse a call counted twice); across processes and changed definitions: `run_policy.rs`.
    let parking = CodeMode::builder(CodeModeConfig::enabled())
        .engine_name("quickjs")
        .local_tools(tools_again(seen.clone()))
        .hook(Arc::new(Hook(seen.clone())))
        .approvals(codemode::ApprovalPolicy::require(["plugin:order:pay"]))
        .loop_detection(codemode::LoopPolicy::from_document(&json!({ "tools": { "loopDetection": { "enabled": true, "warningThreshold": 1, "criticalThreshold": 2, "globalCircuitBreakerThreshold": 9 } } })).unwrap())
        .build();
    let first = parking.exec(&ctx(None, None), &CodeModeExecInput::code("return await tools.pay({})")).await;
    assert_eq!(first.to_json()["pendingToolCalls"][0]["kind"], "approval", "{}", first.to_json());
    assert_eq!(std::mem::take(&mut *seen.0.lock().unwrap()), ["before plugin:order:pay"]);
    let run = codemode::RunId::parse(first.run_id().unwrap()).unwrap();
    parking.decide(&run, 1, ApprovalDecision::Approve).await.unwrap();
    let done = parking.wait(&ctx(None, None), &CodeModeWaitInput::new(run.as_str())).await;
    assert_eq!(done.to_json()["value"], "paid", "{}", done.to_json());
    assert_eq!(
        std::mem::take(&mut *seen.0.lock().unwrap()),
        ["before plugin:order:pay", "tool plugin:order:pay", "after plugin:order:pay"]
    );
}

/// The gate-order test's `pay` tool, logging its calls to `seen`.
fn tools_again(seen: Arc<impl SeenLog + 'static>) -> codemode::LocalTools {
    let mut tools = codemode::LocalTools::new();
    let def = codemode::ToolDefinition::new(codemode::ToolSource::Plugin, "order", "pay");
    tools.add(Arc::new(codemode::FnTool::new(def, move |_| {
        let seen = seen.clone();
        async move {
            seen.log("tool plugin:order:pay");
            Ok(codemode::ToolResult::value(json!("paid")))
        }
    })));
    tools
}

/// Where the gate-order test writes what it saw.
trait SeenLog: Send + Sync {
    fn log(&self, what: &str);
}

/// Inputs are checked at the bridge — a wrong input never reaches the tool (counted on
/// the tool's side), through `tools.*` and by id; a tool that opted out
/// (`validateInputs: false` → `ToolDefinition::without_input_check`) gets every input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_inputs_never_reach_the_tool() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let reached = Arc::new(AtomicU32::new(0));
    let schema = json!({ "type": "object", "properties": { "n": { "type": "integer" } }, "required": ["n"] });
    let mut tools = codemode::LocalTools::new();
    for (name, checked) in [("strict", true), ("lax", false)] {
        let def =
            codemode::ToolDefinition::new(codemode::ToolSource::Plugin, "inputs", name).with_parameters(schema.clone());
        let def = if checked { def } else { def.without_input_check() };
        let reached = reached.clone();
        tools.add(Arc::new(codemode::FnTool::new(def, move |input| {
            let reached = reached.clone();
            async move {
                reached.fetch_add(1, Ordering::SeqCst);
                Ok(codemode::ToolResult::value(input))
            }
        })));
    }
    let cm = CodeMode::builder(CodeModeConfig::enabled()).engine_name("quickjs").local_tools(tools).build();
    let cell = "const out = [];
        for (const f of [() => tools.strict({ n: 'x' }), () => tools.callValue('plugin:inputs:strict', {}),
                         () => tools.strict({ n: 1 }), () => tools.lax({ n: 'x' })]) {
          try { out.push(await f()); } catch (e) { out.push(e.code); }
        }
        return out;";
    let r = cm.exec(&ctx(None, None), &CodeModeExecInput::code(cell)).await;
    assert_eq!(
        r.to_json()["value"],
        json!(["invalid_input", "invalid_input", { "n": 1 }, { "n": "x" }]),
        "{}",
        r.to_json()
    );
    assert_eq!(reached.load(Ordering::SeqCst), 2, "only the valid call and the opted-out tool ran");
}

/// The result type of a tool without an output schema is learned from the results
/// runs see — shown by `tools.describe` marked observed with how many results it is based on,
/// widened by a result that does not fit, never failing a call; `observe_result_types(false)`
/// turns it off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_types_are_learned_from_observed_results() {
    let mut tools = codemode::LocalTools::new();
    let def = codemode::ToolDefinition::new(codemode::ToolSource::Plugin, "shapes", "lookup")
        .with_parameters(json!({ "type": "object", "properties": { "n": { "type": "integer" } } }));
    tools.add(Arc::new(codemode::FnTool::new(def, |input| async move {
        let n = input["n"].as_i64().unwrap_or(0);
        Ok(codemode::ToolResult::value(if n < 2 {
            json!({ "id": n, "name": format!("item-{n}") })
        } else {
            json!({ "id": n, "tags": ["x"], "name": null })
        }))
    })));
    let describe = "return (await tools.describe('plugin:shapes:lookup')).observedOutput ?? null";
    for (on, expected) in [
        (
            true,
            json!([null, { "type": "{ id: number; name: string }", "results": 2, "observed": true },
                      { "type": "{ id: number; name: null | string; tags?: string[] }", "results": 3, "observed": true }]),
        ),
        (false, json!([null, null, null])),
    ] {
        let cm = CodeMode::builder(CodeModeConfig::enabled())
            .engine_name("quickjs")
            .local_tools(tools.clone())
            .observe_result_types(on)
            .build();
        let ctx = ctx(None, None);
        let mut seen = Vec::new();
        seen.push(cm.exec(&ctx, &CodeModeExecInput::code(describe)).await.to_json()["value"].clone());
        let two = "await tools.lookup({ n: 0 }); await tools.lookup({ n: 1 });";
        seen.push(
            cm.exec(&ctx, &CodeModeExecInput::code(format!("{two} {describe}"))).await.to_json()["value"].clone(),
        );
        let third = format!("const r = await tools.lookup({{ n: 5 }}); {describe}");
        seen.push(cm.exec(&ctx, &CodeModeExecInput::code(third)).await.to_json()["value"].clone());
        assert_eq!(Value::Array(seen), expected, "observe_result_types({on})");
        // The quick index shows the learned type when the tools are next listed, marked observed.
        let description = cm.exec_tool(&[]).description;
        let line =
            "plugin:shapes:lookup({n?: number}) → { id: number; name: null | string; tags?: string[] } (observed)";
        assert_eq!(description.contains(line), on, "{description}");
    }
}

/// Answers every host-executed call with `{ ok: true }`.
struct AlwaysOk;

#[async_trait::async_trait]
impl codemode::ToolExecutor for AlwaysOk {
    async fn call(&self, _call: codemode::NestedToolCall) -> Result<codemode::ToolResult, codemode::ToolError> {
        Ok(codemode::ToolResult::value(json!({ "ok": true })))
    }
}

/// A tool-list change forgets what was learned about a tool only when that tool's
/// definition changed or it went away. (An upstream MCP server that registers tools after the
/// handshake announces them with `tools/list_changed`; that used to erase every learned type, so a
/// client's second call could see one result where it had made two.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learned_result_types_survive_a_tool_list_change_that_leaves_the_tool_alone() {
    let def = |name: &str, description: &str| {
        codemode::ToolDefinition::new(codemode::ToolSource::Client, "app", name).with_description(description)
    };
    let cm = CodeMode::builder(CodeModeConfig::enabled())
        .engine_name("quickjs")
        .tool_definitions([def("a", "first"), def("b", "second")])
        .executor(Arc::new(AlwaysOk))
        .build();
    let ctx = ctx(None, None);
    let learned = |cm: &CodeMode, ids: &'static [&'static str]| {
        let code = format!(
            "const out = []; for (const id of {ids:?}) out.push((await tools.describe(id))?.observedOutput?.results ?? null); return out"
        );
        let cm = cm.clone();
        let ctx = ctx.clone();
        async move { cm.exec(&ctx, &CodeModeExecInput::code(code)).await.to_json()["value"].clone() }
    };
    let calls = "await tools.call('client:app:a', {}); await tools.call('client:app:b', {}); return 1";
    assert_eq!(cm.exec(&ctx, &CodeModeExecInput::code(calls)).await.to_json()["value"], json!(1));
    assert_eq!(learned(&cm, &["client:app:a", "client:app:b"]).await, json!([1, 1]));
    // A tool added, the others as they were: everything learned stays.
    cm.set_host_tools(vec![def("a", "first"), def("b", "second"), def("c", "added")]);
    assert_eq!(learned(&cm, &["client:app:a", "client:app:b"]).await, json!([1, 1]));
    // `a` redefined: only `a` starts over.
    cm.set_host_tools(vec![def("a", "first, reworded"), def("b", "second"), def("c", "added")]);
    assert_eq!(learned(&cm, &["client:app:a", "client:app:b"]).await, json!([null, 1]));
    assert_eq!(cm.exec(&ctx, &CodeModeExecInput::code(calls)).await.to_json()["value"], json!(1));
    assert_eq!(learned(&cm, &["client:app:a", "client:app:b"]).await, json!([1, 2]));
    // `b` gone: its entry goes; back again, it starts over.
    cm.set_host_tools(vec![def("a", "first, reworded")]);
    cm.set_host_tools(vec![def("a", "first, reworded"), def("b", "second")]);
    assert_eq!(learned(&cm, &["client:app:a", "client:app:b"]).await, json!([1, null]));
}
