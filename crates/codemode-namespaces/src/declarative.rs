//! Namespaces declared in the configuration file (the top-level `namespaces` array), for gateway
//! users who front MCP servers or plugins they did not write.
//!
//! ```json5
//! namespaces: [{
//!   id: "github-issues",                 // optional; default "config:<globalName>"
//!   owner: "mcp:github",                 // "mcp:<server>" or "plugin:<plugin id>"
//!   globalName: "Issues",
//!   description: "GitHub issues of this repository.",
//!   prompt: "Issues.list(state) and Issues.get(number).",
//!   data: { repository: "acme/web" },    // optional plain data
//!   members: {
//!     list: { tool: "list_issues", input: { repo: "acme/web", state: "$1" } },
//!     get:  { tool: "get_issue", input: { repo: "acme/web", number: "$1" } },
//!     "comments.add": { tool: "add_comment" }   // no template: the first argument is the input
//!   },
//! }]
//! ```
//!
//! An input template is JSON in which a string that is exactly `"$1"` … `"$9"` stands for that
//! positional argument (`null` when it is missing) and `"$args"` for the array of all of them. The
//! members' tools are the namespace's required tools: it is visible only when all of them are. The
//! same rules as for registered namespaces apply, checked when the file is loaded.

use crate::registry::NamespaceRegistration;
use crate::scope::{ScopeValue, namespace_tool, namespace_tool_with, serialize_scope};
use codemode_core::catalog::ToolSource;
use codemode_core::config::{ConfigError, type_name};
use codemode_core::namespace::{NamespaceOwner, PATH_SEPARATOR};
use serde_json::Value;
use std::collections::BTreeSet;

/// Keys of one declared namespace.
pub const NAMESPACE_KEYS: [&str; 7] = ["id", "owner", "globalName", "description", "prompt", "data", "members"];
/// Keys of one member.
pub const MEMBER_KEYS: [&str; 2] = ["tool", "input"];

/// Parses the top-level `namespaces` value (an array) into registrations with their owners.
pub fn from_config(value: &Value, path: &str) -> Result<Vec<(NamespaceOwner, NamespaceRegistration)>, ConfigError> {
    let Value::Array(items) = value else {
        return Err(ConfigError::new(path, format!("expected an array, got {}", type_name(value))));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        out.push(one(item, &format!("{path}[{i}]"))?);
    }
    Ok(out)
}

fn string<'a>(obj: &'a serde_json::Map<String, Value>, key: &str, path: &str) -> Result<Option<&'a str>, ConfigError> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => {
            Err(ConfigError::new(format!("{path}.{key}"), format!("expected a string, got {}", type_name(other))))
        }
    }
}

fn one(item: &Value, path: &str) -> Result<(NamespaceOwner, NamespaceRegistration), ConfigError> {
    let Value::Object(obj) = item else {
        return Err(ConfigError::new(path, format!("expected an object, got {}", type_name(item))));
    };
    if let Some(k) = obj.keys().find(|k| !NAMESPACE_KEYS.contains(&k.as_str())) {
        return Err(ConfigError::new(
            format!("{path}.{k}"),
            format!("unknown key `{k}` (known keys: {})", NAMESPACE_KEYS.join(", ")),
        ));
    }
    let required = |key: &str| -> Result<&str, ConfigError> {
        string(obj, key, path)?.ok_or_else(|| ConfigError::new(format!("{path}.{key}"), "is required"))
    };
    let owner_text = required("owner")?;
    let owner = match owner_text.split_once(':') {
        Some(("mcp", name)) if !name.is_empty() => NamespaceOwner { source: ToolSource::Mcp, name: name.into() },
        Some(("plugin", name)) if !name.is_empty() => NamespaceOwner::plugin(name),
        _ => {
            return Err(ConfigError::new(
                format!("{path}.owner"),
                format!("`{owner_text}` is not `mcp:<server>` or `plugin:<plugin id>`"),
            ));
        }
    };
    let global_name = required("globalName")?;
    let description = required("description")?;
    let id = match string(obj, "id", path)? {
        Some(id) => id.to_string(),
        None => format!("config:{global_name}"),
    };
    let Some(Value::Object(members)) = obj.get("members") else {
        return Err(ConfigError::new(format!("{path}.members"), "is required: an object of member paths"));
    };
    if members.is_empty() {
        return Err(ConfigError::new(format!("{path}.members"), "declares no member"));
    }
    let mut scope = match obj.get("data") {
        None => ScopeValue::Object(Vec::new()),
        Some(Value::Object(data)) => json_object(data),
        Some(other) => {
            return Err(ConfigError::new(
                format!("{path}.data"),
                format!("expected an object, got {}", type_name(other)),
            ));
        }
    };
    let mut tools = BTreeSet::new();
    for (member_path, member) in members {
        let at = format!("{path}.members.{member_path}");
        let Value::Object(m) = member else {
            return Err(ConfigError::new(at, format!("expected an object, got {}", type_name(member))));
        };
        if let Some(k) = m.keys().find(|k| !MEMBER_KEYS.contains(&k.as_str())) {
            return Err(ConfigError::new(
                format!("{at}.{k}"),
                format!("unknown key `{k}` (known keys: {})", MEMBER_KEYS.join(", ")),
            ));
        }
        let tool = match m.get("tool") {
            Some(Value::String(t)) if !t.is_empty() => t.clone(),
            _ => return Err(ConfigError::new(format!("{at}.tool"), "is required: the backing tool's name")),
        };
        tools.insert(tool.clone());
        let marker = match m.get("input") {
            None => namespace_tool(tool),
            Some(template) => {
                let template = template.clone();
                namespace_tool_with(tool, move |args| Ok(fill(&template, args)))
            }
        };
        let segments: Vec<&str> = member_path.split(PATH_SEPARATOR).collect();
        insert(&mut scope, &segments, ScopeValue::Tool(marker)).map_err(|e| ConfigError::new(at.clone(), e))?;
    }
    let mut reg = NamespaceRegistration::new(id, global_name, description);
    if let Some(p) = string(obj, "prompt", path)? {
        reg = reg.prompt(p);
    }
    for t in &tools {
        reg = reg.require(t.clone());
    }
    // The same rules as a registered namespace, now rather than at the first run.
    crate::registry::check_registration(&reg).map_err(|e| ConfigError::new(path, e.to_string()))?;
    serialize_scope(global_name, &scope, &owner, &tools).map_err(|e| ConfigError::new(path, e))?;
    let reg = reg.scope(move |_| Ok(scope.clone()));
    Ok((owner, reg))
}

fn json_object(map: &serde_json::Map<String, Value>) -> ScopeValue {
    ScopeValue::Object(map.iter().map(|(k, v)| (k.clone(), ScopeValue::Json(v.clone()))).collect())
}

/// Puts `value` at `segments` below `scope` (an object), creating objects on the way.
fn insert(scope: &mut ScopeValue, segments: &[&str], value: ScopeValue) -> Result<(), String> {
    let Some((first, rest)) = segments.split_first() else {
        return Err("empty member path".into());
    };
    let entries = match scope {
        ScopeValue::Object(entries) => entries,
        ScopeValue::Json(Value::Object(map)) => {
            *scope = json_object(map);
            return insert(scope, segments, value);
        }
        _ => return Err(format!("`{first}` is below a value that is not an object")),
    };
    let pos = entries.iter().position(|(k, _)| k == first);
    if rest.is_empty() {
        if pos.is_some() {
            return Err(format!("member `{first}` is already defined (in `data` or another member)"));
        }
        entries.push(((*first).to_string(), value));
        return Ok(());
    }
    let index = match pos {
        Some(i) => i,
        None => {
            entries.push(((*first).to_string(), ScopeValue::Object(Vec::new())));
            entries.len() - 1
        }
    };
    insert(&mut entries[index].1, rest, value)
}

/// An input template with its placeholders replaced by `args`.
fn fill(template: &Value, args: &[Value]) -> Value {
    match template {
        Value::String(s) if s == "$args" => Value::Array(args.to_vec()),
        Value::String(s) if s.len() == 2 && s.starts_with('$') => match s.as_bytes()[1] {
            d @ b'1'..=b'9' => args.get(usize::from(d - b'1')).cloned().unwrap_or(Value::Null),
            _ => template.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(|v| fill(v, args)).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), fill(v, args))).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_fill_positional_arguments() {
        let t = json!({"paid": false, "minTons": "$1", "all": "$args", "nested": ["$2", "$x", "$10"]});
        assert_eq!(
            fill(&t, &[json!(10), json!("b")]),
            json!({"paid": false, "minTons": 10, "all": [10, "b"], "nested": ["b", "$x", "$10"]})
        );
        assert_eq!(fill(&json!("$3"), &[]), Value::Null);
    }

    #[test]
    fn declared_namespaces_are_checked_at_load() {
        let ok = json!([{
            "owner": "plugin:demo", "globalName": "Ship", "description": "Shipments.",
            "data": {"unit": "t"},
            "members": {"unpaid": {"tool": "demo_shipping_list", "input": {"paid": false}}, "orders.get": {"tool": "demo_echo"}}
        }]);
        let parsed = from_config(&ok, "namespaces").unwrap();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].0, NamespaceOwner::plugin("demo"));
        assert_eq!(parsed[0].1.id(), "config:Ship");
        for (bad, at, why) in [
            (json!({}), "namespaces", "expected an array"),
            (
                json!([{"owner": "demo", "globalName": "X", "description": "d", "members": {"a": {"tool": "t"}}}]),
                "namespaces[0].owner",
                "mcp:<server>",
            ),
            (
                json!([{"owner": "mcp:s", "globalName": "tools", "description": "d", "members": {"a": {"tool": "t"}}}]),
                "namespaces[0]",
                "code-mode global",
            ),
            (
                json!([{"owner": "mcp:s", "globalName": "X", "description": "d", "members": {}}]),
                "namespaces[0].members",
                "no member",
            ),
            (
                json!([{"owner": "mcp:s", "globalName": "X", "description": "d", "members": {"__proto__": {"tool": "t"}}}]),
                "namespaces[0]",
                "__proto__",
            ),
            (
                json!([{"owner": "mcp:s", "globalName": "X", "description": "d", "members": {"a": {"tool": "t", "extra": 1}}}]),
                "namespaces[0].members.a.extra",
                "unknown key",
            ),
            (
                json!([{"owner": "mcp:s", "globalName": "X", "description": "d", "data": {"a": 1}, "members": {"a": {"tool": "t"}}}]),
                "namespaces[0].members.a",
                "already defined",
            ),
            (
                json!([{"owner": "mcp:s", "globalName": "X", "description": "d", "data": {"a": 1}, "members": {"a.b": {"tool": "t"}}}]),
                "namespaces[0].members.a.b",
                "not an object",
            ),
            (
                json!([{"owner": "mcp:s", "globalName": "X", "description": "d", "colour": 1, "members": {"a": {"tool": "t"}}}]),
                "namespaces[0].colour",
                "unknown key",
            ),
        ] {
            let e = from_config(&bad, "namespaces").unwrap_err();
            assert_eq!(e.path, at, "{bad}: {e}");
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }
}
