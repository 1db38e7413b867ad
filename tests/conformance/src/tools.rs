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
    tools
}
