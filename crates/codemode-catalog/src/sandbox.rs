//! The sandbox tool policy for nested calls of sandboxed runs (contract §22, C5, P4): what a run whose
//! caller is sandboxed (`RunContext::sandboxed`) may call from inside its code. A run that is not
//! sandboxed is not affected.
//!
//! ```json5
//! {
//!   tools: {
//!     sandbox: { tools: { allow: ["group:fs", "plugin:demo:*"], alsoAllow: ["bundle-mcp"], deny: ["write"] } },
//!     elevated: true,                 // or { enabled: true }: elevated exec is allowed at all
//!   },
//!   agents: { list: [{ id: "ops", tools: { elevated: false } }] },   // and per agent (both must allow)
//! }
//! ```
//!
//! Rules, in order (patterns match like the tool policy's: names, ids, owners, `*`, `group:`):
//! 1. `deny` wins;
//! 2. MCP tools come from the bundled MCP plugin: a sandboxed run reaches them only when `allow` or
//!    `alsoAllow` names `bundle-mcp` (or matches the tool);
//! 3. with an `allow` list, only tools matching `allow` ∪ `alsoAllow` (without one, every tool the
//!    catalog holds, minus rules 1–2);
//! 4. an elevated shell call (`exec`/`bash`/`process` with `elevated: true`, or its alias
//!    `host: "gateway"` + `security: "full"`) needs `tools.elevated` and, when the agent sets it,
//!    `agents.list[].tools.elevated`.

use crate::policy::{expand, matches, string_list};
use codemode_core::catalog::{ToolDefinition, ToolSource};
use codemode_core::config::{ConfigError, type_name};
use serde_json::Value;
use std::collections::BTreeMap;

/// The name that stands for every MCP tool in `tools.sandbox.tools.*` (the bundled MCP plugin).
pub const BUNDLE_MCP: &str = "bundle-mcp";

/// Core tools whose `elevated` input runs on the host instead of the sandbox.
pub const ELEVATABLE: [&str; 3] = ["exec", "bash", "process"];

/// What sandboxed runs may call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// `tools.sandbox.tools.allow` (`None`: no allowlist).
    pub allow: Option<Vec<String>>,
    /// `tools.sandbox.tools.alsoAllow`.
    pub also_allow: Vec<String>,
    /// `tools.sandbox.tools.deny`.
    pub deny: Vec<String>,
    /// `tools.elevated`: elevated shell calls are allowed at all.
    pub elevated: bool,
    /// `agents.list[].tools.elevated`, by agent id.
    pub agent_elevated: BTreeMap<String, bool>,
}

fn bool_or_enabled(v: &Value, path: &str) -> Result<bool, ConfigError> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Object(o) => match o.get("enabled") {
            Some(Value::Bool(b)) => Ok(*b),
            None => Ok(true),
            Some(other) => Err(ConfigError::new(
                format!("{path}.enabled"),
                format!("expected true or false, got {}", type_name(other)),
            )),
        },
        other => {
            Err(ConfigError::new(path, format!("expected true, false or {{ enabled }}, got {}", type_name(other))))
        }
    }
}

impl SandboxPolicy {
    /// Parses `tools.sandbox.tools`, `tools.elevated` and `agents.list[].tools.elevated`.
    pub fn from_document(doc: &Value) -> Result<Self, ConfigError> {
        let mut p = SandboxPolicy::default();
        if let Some(tools) = doc.get("tools").and_then(|t| t.get("sandbox")).and_then(|s| s.get("tools")) {
            let obj = tools.as_object().ok_or_else(|| {
                ConfigError::new("tools.sandbox.tools", format!("expected an object, got {}", type_name(tools)))
            })?;
            for (k, v) in obj {
                let path = format!("tools.sandbox.tools.{k}");
                match k.as_str() {
                    "allow" => p.allow = Some(string_list(v, &path)?),
                    "alsoAllow" => p.also_allow = string_list(v, &path)?,
                    "deny" => p.deny = string_list(v, &path)?,
                    _ => return Err(ConfigError::new(path, "unknown key (expected allow, alsoAllow, deny)")),
                }
            }
        }
        if let Some(v) = doc.get("tools").and_then(|t| t.get("elevated")) {
            p.elevated = bool_or_enabled(v, "tools.elevated")?;
        }
        for (i, agent) in
            doc.get("agents").and_then(|a| a.get("list")).and_then(Value::as_array).into_iter().flatten().enumerate()
        {
            if let (Some(id), Some(v)) =
                (agent.get("id").and_then(Value::as_str), agent.get("tools").and_then(|t| t.get("elevated")))
            {
                p.agent_elevated
                    .insert(id.to_string(), bool_or_enabled(v, &format!("agents.list[{i}].tools.elevated"))?);
            }
        }
        Ok(p)
    }

    /// Why a sandboxed run of `agent` may not call `def` with `input`; `None` when it may.
    pub fn refusal(&self, def: &ToolDefinition, input: &Value, agent: Option<&str>) -> Option<String> {
        let lower = |v: &[String]| expand(v, &[]);
        if let Some(p) = matches(&lower(&self.deny), def) {
            return Some(format!("denied in a sandbox by tools.sandbox.tools.deny (`{p}`)"));
        }
        let mut allowed: Vec<String> = self.allow.clone().unwrap_or_default();
        allowed.extend(self.also_allow.iter().cloned());
        let allowed = lower(&allowed);
        if def.source == ToolSource::Mcp {
            let bundle = allowed.iter().any(|p| p.eq_ignore_ascii_case(BUNDLE_MCP));
            if !bundle && matches(&allowed, def).is_none() {
                return Some(format!(
                    "MCP tools are not allowed in a sandbox: add `{BUNDLE_MCP}` to tools.sandbox.tools.alsoAllow"
                ));
            }
        } else if self.allow.is_some() && matches(&allowed, def).is_none() {
            return Some("not allowed in a sandbox by tools.sandbox.tools.allow / alsoAllow".to_string());
        }
        let elevated_input = input.get("elevated") == Some(&Value::Bool(true))
            || (input.get("host").and_then(Value::as_str) == Some("gateway")
                && input.get("security").and_then(Value::as_str) == Some("full"));
        if def.source == ToolSource::Openclaw && ELEVATABLE.contains(&def.name.as_str()) && elevated_input {
            let agent_allows = agent.and_then(|a| self.agent_elevated.get(a)).copied().unwrap_or(true);
            if !(self.elevated && agent_allows) {
                return Some(
                    "elevated execution needs tools.elevated and the agent's tools.elevated to allow it".to_string(),
                );
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(source: ToolSource, owner: &str, name: &str) -> ToolDefinition {
        ToolDefinition::new(source, owner, name)
    }

    #[test]
    fn mcp_tools_need_the_bundle() {
        let none = SandboxPolicy::default();
        let mcp = def(ToolSource::Mcp, "files", "read_file");
        assert!(none.refusal(&mcp, &json!({}), None).is_some_and(|r| r.contains("bundle-mcp")));
        assert_eq!(none.refusal(&def(ToolSource::Plugin, "demo", "demo_echo"), &json!({}), None), None);
        let bundled = SandboxPolicy { also_allow: vec!["bundle-mcp".into()], ..SandboxPolicy::default() };
        assert_eq!(bundled.refusal(&mcp, &json!({}), None), None);
        let by_server = SandboxPolicy { also_allow: vec!["files".into()], ..SandboxPolicy::default() };
        assert_eq!(by_server.refusal(&mcp, &json!({}), None), None);
    }

    #[test]
    fn allow_also_allow_and_deny() {
        let p = SandboxPolicy {
            allow: Some(vec!["group:fs".into()]),
            also_allow: vec!["plugin:demo:*".into()],
            deny: vec!["write".into()],
            ..SandboxPolicy::default()
        };
        assert_eq!(p.refusal(&def(ToolSource::Openclaw, "core", "read"), &json!({}), None), None);
        assert!(p.refusal(&def(ToolSource::Openclaw, "core", "write"), &json!({}), None).is_some(), "deny wins");
        assert_eq!(p.refusal(&def(ToolSource::Plugin, "demo", "demo_echo"), &json!({}), None), None);
        assert!(p.refusal(&def(ToolSource::Openclaw, "core", "exec"), &json!({}), None).is_some());
    }

    #[test]
    fn elevated_needs_both_switches() {
        let exec = def(ToolSource::Openclaw, "core", "exec");
        let elevated = json!({ "command": "id", "elevated": true });
        let alias = json!({ "command": "id", "host": "gateway", "security": "full" });
        let off = SandboxPolicy::default();
        assert!(off.refusal(&exec, &elevated, None).is_some());
        assert!(off.refusal(&exec, &alias, None).is_some());
        assert_eq!(off.refusal(&exec, &json!({ "command": "id" }), None), None);
        let on = SandboxPolicy { elevated: true, agent_elevated: [("ops".to_string(), false)].into(), ..off };
        assert_eq!(on.refusal(&exec, &elevated, Some("dev")), None);
        assert!(on.refusal(&exec, &elevated, Some("ops")).is_some(), "the agent's switch must allow it too");
    }

    #[test]
    fn config_is_read_and_checked() {
        let doc = json!({
            "tools": { "sandbox": { "tools": { "alsoAllow": ["bundle-mcp"] } }, "elevated": { "enabled": true } },
            "agents": { "list": [{ "id": "ops", "tools": { "elevated": false } }] },
        });
        let p = SandboxPolicy::from_document(&doc).unwrap_or_default();
        assert_eq!(p.also_allow, vec!["bundle-mcp".to_string()]);
        assert!(p.elevated);
        assert_eq!(p.agent_elevated.get("ops"), Some(&false));
        for (bad, path) in [
            (json!({"tools": {"sandbox": {"tools": {"alsoAlow": []}}}}), "tools.sandbox.tools.alsoAlow"),
            (json!({"tools": {"sandbox": {"tools": {"allow": "x"}}}}), "tools.sandbox.tools.allow"),
            (json!({"tools": {"elevated": "yes"}}), "tools.elevated"),
        ] {
            assert_eq!(SandboxPolicy::from_document(&bad).map_err(|e| e.path), Err(path.to_string()), "{bad}");
        }
    }
}
