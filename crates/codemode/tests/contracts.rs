//! Declared output contracts in nested calls (contract §8 D4, D6) and policy-filtered catalogs (E11).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CodeMode, CodeModeConfig, CodeModeExecInput, FnTool, LocalTools, NestedToolCall, RunContext, ToolDefinition,
    ToolError, ToolHook, ToolPolicy, ToolResult, ToolSource,
};
use serde_json::{Value, json};
use std::sync::Arc;

fn tools() -> LocalTools {
    let schema = json!({"type": "object", "additionalProperties": false, "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let mut t = LocalTools::new();
    t.add(Arc::new(FnTool::new(
        ToolDefinition::new(ToolSource::Plugin, "p", "good").with_output_schema(schema.clone()),
        |_| async { Ok(ToolResult::value(json!({"n": 1}))) },
    )));
    t.add(Arc::new(FnTool::new(
        ToolDefinition::new(ToolSource::Plugin, "p", "lying").with_output_schema(schema.clone()),
        |_| async { Ok(ToolResult::value(json!({"n": "secret-value-never-shown"}))) },
    )));
    t.add(Arc::new(FnTool::new(
        ToolDefinition::new(ToolSource::Plugin, "p", "broken_schema").with_output_schema(json!({"type": 7})),
        |_| async { Ok(ToolResult::value(json!({"n": 1}))) },
    )));
    t.add(Arc::new(FnTool::new(
        ToolDefinition::new(ToolSource::Client, "app", "loose").with_output_schema(schema),
        |_| async { Ok(ToolResult::value(json!("anything"))) },
    )));
    t.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Plugin, "p", "secret"), |_| async {
        Ok(ToolResult::value(json!("classified")))
    })));
    t
}

/// Fixes the lying tool's value: hooks run before validation (D4).
struct FixHook;

#[async_trait::async_trait]
impl ToolHook for FixHook {
    async fn after_tool_call(&self, call: &NestedToolCall, outcome: &mut Result<ToolResult, ToolError>) {
        if call.tool.name == "lying" && call.input.get("fix") == Some(&json!(true)) {
            *outcome = Ok(ToolResult::value(json!({"n": 2})));
        }
    }
}

async fn exec(cm: &CodeMode, code: &str) -> Value {
    cm.exec(&RunContext::session("c"), &CodeModeExecInput::code(code)).await.to_json()
}

const PROBE: &str = r#"
const out = {};
for (const [k, id, input] of [["good", "plugin:p:good", {}], ["lying", "plugin:p:lying", {}], ["fixed", "plugin:p:lying", {fix: true}],
                              ["broken", "plugin:p:broken_schema", {}], ["loose", "client:app:loose", {}], ["secret", "plugin:p:secret", {}]]) {
  try { out[k] = await tools.callValue(id, input); } catch (e) { out[k] = "ERR " + e.code + ": " + e.message; }
}
return out;
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contracts_are_enforced_after_hooks() {
    let cm = CodeMode::builder(CodeModeConfig::enabled()).local_tools(tools()).hook(Arc::new(FixHook)).build();
    let v = exec(&cm, PROBE).await;
    let out = &v["value"];
    assert_eq!(out["good"], json!({"n": 1}));
    let lying = out["lying"].as_str().unwrap();
    assert!(lying.starts_with("ERR nested_tool_failed") && lying.contains("/n"), "{lying}");
    assert!(!v.to_string().contains("secret-value-never-shown"), "a mismatching value is never emitted");
    assert_eq!(out["fixed"], json!({"n": 2}));
    assert!(out["broken"].as_str().unwrap().contains("cannot run"), "{}", out["broken"]);
    assert_eq!(out["loose"], json!("anything"), "D6: client metadata is not a contract");
    assert_eq!(out["secret"], json!("classified"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e11_denied_tools_fail_like_unknown_ids() {
    let policy = ToolPolicy::from_document(&json!({"tools": {"deny": ["secret"]}})).unwrap();
    let cm = CodeMode::builder(CodeModeConfig::enabled()).local_tools(tools()).policy(policy).build();
    let v = exec(
        &cm,
        r#"const r = {};
           for (const id of ["plugin:p:secret", "plugin:p:never_existed"]) {
             try { await tools.call(id, {}); } catch (e) { r[id.split(":")[2]] = e.message.replace(id, "<id>") + " / " + e.code; }
           }
           r.listed = ALL_TOOLS.some((t) => t.name === "secret");
           r.searched = (await tools.search("secret")).length;
           return r;"#,
    )
    .await;
    let r = &v["value"];
    assert_eq!(r["secret"], r["never_existed"], "no existence leak: {r}");
    assert_eq!(r["listed"], json!(false));
    assert_eq!(r["searched"], json!(0));
}
