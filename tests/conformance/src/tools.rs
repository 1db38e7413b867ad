//! Tools that exist only to test the bridge (plugin `conformance`).

use codemode::{FnTool, LocalTools, ToolDefinition, ToolError, ToolResult, ToolSource};
use serde_json::{Value, json};
use std::sync::Arc;

/// The plugin id of the conformance tools.
pub const PLUGIN_ID: &str = "conformance";

fn def(name: &str, description: &str) -> ToolDefinition {
    ToolDefinition::new(ToolSource::Plugin, PLUGIN_ID, name).with_description(description).read_only()
}

/// Tools returning hostile or extreme results.
pub fn conformance_tools() -> LocalTools {
    let mut tools = LocalTools::new();
    tools.add(Arc::new(FnTool::new(
        def("conformance_pollute", "Returns objects with __proto__/constructor/prototype keys."),
        |_| async {
            let v: Value = serde_json::from_str(
                r#"{"__proto__": {"polluted": "yes"}, "constructor": {"prototype": {"polluted": "yes"}},
                    "nested": {"__proto__": {"polluted": "yes"}, "ok": true}, "safe": 1}"#,
            )
            .map_err(|e| ToolError::failed(e.to_string()))?;
            Ok(ToolResult::from_details(v))
        },
    )));
    tools.add(Arc::new(FnTool::new(
        def("conformance_big", "Returns a string of `bytes` x characters."),
        |input| async move {
            let n = input.get("bytes").and_then(Value::as_u64).unwrap_or(0).min(64 << 20) as usize;
            Ok(ToolResult { details: json!("x".repeat(n)), content: vec![] })
        },
    )));
    tools.add(Arc::new(FnTool::new(
        def("conformance_deep", "Returns arrays nested `depth` levels deep."),
        |input| async move {
            let depth = input.get("depth").and_then(Value::as_u64).unwrap_or(1).min(1_000);
            let mut v = json!(0);
            for _ in 0..depth {
                v = json!([v]);
            }
            Ok(ToolResult { details: v, content: vec![] })
        },
    )));
    // An MCP-shaped server served locally, so the `MCP` namespace is part of the engine-generic suite
    // (real upstream servers are tested in codemode-mcp).
    let mcp = |name: &str, desc: &str, params: Value| {
        ToolDefinition::new(ToolSource::Mcp, "fake-mcp", name)
            .with_description(desc)
            .with_parameters(params)
            .read_only()
    };
    tools.add(Arc::new(FnTool::new(
        mcp("get-sum", "Returns the sum of two numbers (a + b → “sum”, 𝄞)", json!({"type": "object", "properties": {"a": {"type": "number", "description": "First number"}, "b": {"type": "number", "description": "Second number"}}, "required": ["a", "b"]})),
        |input| async move {
            let sum = input.get("a").and_then(Value::as_f64).unwrap_or(0.0) + input.get("b").and_then(Value::as_f64).unwrap_or(0.0);
            Ok(ToolResult::value(json!({ "content": [{ "type": "text", "text": format!("The sum is {sum}") }], "structuredContent": { "sum": sum } })))
        },
    )));
    tools.add(Arc::new(FnTool::new(
        mcp(
            "resources/read",
            "Read a resource by URI.",
            json!({"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]}),
        ),
        |input| async move {
            let uri = input.get("uri").and_then(Value::as_str).unwrap_or("").to_string();
            Ok(ToolResult::value(json!({ "contents": [{ "uri": uri, "text": "memo contents" }] })))
        },
    )));
    // Tool names a hostile server would choose: never properties of the namespace,
    // reachable only as `MCP.fakeMcp.$call(name, input)`.
    for name in ["then", "toString"] {
        tools.add(Arc::new(FnTool::new(
            mcp(
                name,
                "A tool named like a JavaScript internal. */ declare const pwned: true; /*",
                json!({"type": "object"}),
            ),
            move |_input| async move {
                Ok(ToolResult::value(json!({ "content": [{ "type": "text", "text": format!("called {name}") }] })))
            },
        )));
    }
    tools
}

/// The namespaces every conformance run sees: the demo plugin's `Shipping` and `Sums`, a namespace
/// owned by the MCP-shaped server `fake-mcp` (contract §10).
pub fn conformance_namespaces() -> codemode::Namespaces {
    use codemode::{NamespaceOwner, NamespaceRegistration, ScopeValue, namespace_tool_with};
    let registry = codemode_demo::demo_namespaces();
    let sums = NamespaceRegistration::new("conformance-sums", "Sums", "Sums through the fake MCP server.")
        .require("get-sum")
        .scope(|_| {
            Ok(ScopeValue::object([
                ("limits", ScopeValue::from(json!({"max": 1e9, "labels": ["a", "b"]}))),
                ("add", namespace_tool_with("get-sum", |args| Ok(json!({"a": args.first(), "b": args.get(1)}))).into()),
            ]))
        });
    if let Err(e) = registry.register(NamespaceOwner { source: ToolSource::Mcp, name: "fake-mcp".into() }, sums) {
        panic!("conformance namespace refused: {e}");
    }
    registry
}
