//! Nested code modes: an upstream tool that itself runs code — an
//! `exec` / `execute_code` / `run_code` / `eval`-style tool whose input takes a code string. Called
//! from a cell, it nests one sandbox inside another: the model writes code that writes code, errors
//! come back twice wrapped, and the inner sandbox's limits and policies are not codemode's. Such tools
//! are flagged (start log, `codemode catalog`) with advice, never removed silently.

use codemode_core::catalog::{ToolDefinition, ToolSource};
use serde_json::Value;

/// Input properties that carry a program.
const CODE_PROPERTIES: [&str; 7] = ["code", "script", "source", "program", "source_code", "sourceCode", "js"];

/// Words in a tool name that say it runs what it is given.
const RUN_WORDS: [&str; 6] = ["exec", "execute", "run", "eval", "interpret", "repl"];

/// The advice shown with a flagged tool.
pub const ADVICE: &str = "it runs code itself: a cell calling it nests one code sandbox inside another (code that \
     writes code, errors wrapped twice, another sandbox's limits). Prefer the server's other tools from the cell, or \
     hide this one with `deny` on its mcpServers entry";

/// Whether `def` is an upstream tool that runs code it is given (a nested code mode).
pub fn is_nested_code_mode(def: &ToolDefinition) -> bool {
    if def.source != ToolSource::Mcp {
        return false;
    }
    // Words of the name, camelCase split too (`runPython` → run, python).
    let mut words = String::with_capacity(def.name.len() + 4);
    let mut prev_lower = false;
    for c in def.name.chars() {
        if c.is_ascii_uppercase() && prev_lower {
            words.push(' ');
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        words.push(c.to_ascii_lowercase());
    }
    let runs = words.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| RUN_WORDS.contains(&w));
    if !runs {
        return false;
    }
    let Some(props) = def.parameters.get("properties").and_then(Value::as_object) else { return false };
    props.iter().any(|(k, v)| {
        CODE_PROPERTIES.contains(&k.as_str()) && v.get("type").and_then(Value::as_str).is_none_or(|t| t == "string")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mcp(name: &str, params: Value) -> ToolDefinition {
        ToolDefinition::new(ToolSource::Mcp, "up", name).with_parameters(params)
    }

    #[test]
    fn flags_tools_that_run_code_and_nothing_else() {
        let code = json!({ "type": "object", "properties": { "code": { "type": "string" } } });
        for name in ["exec", "execute_code", "run_code", "eval", "runPython", "python_repl", "execute"] {
            let params = if name == "runPython" {
                json!({ "properties": { "script": { "type": "string" } } })
            } else {
                code.clone()
            };
            assert!(is_nested_code_mode(&mcp(name, params)), "{name}");
        }
        // Names that do not run code, or no code input, or not upstream.
        assert!(!is_nested_code_mode(&mcp("echo", code.clone())));
        assert!(!is_nested_code_mode(&mcp("run_report", json!({ "properties": { "month": { "type": "string" } } }))));
        assert!(!is_nested_code_mode(&mcp("code_search", json!({ "properties": { "query": { "type": "string" } } }))));
        let plugin = ToolDefinition::new(ToolSource::Plugin, "p", "exec").with_parameters(code);
        assert!(!is_nested_code_mode(&plugin));
    }
}
