//! Tool policy (contract §22): which tools a run may use at all, before code mode catalogues them (A4).
//!
//! Order of evaluation, each step only ever narrowing the set:
//! 1. `profile` — the agent's (`agents.list[].tools.profile`) or else the global one; `full` or unset
//!    means no restriction;
//! 2. `byProvider` — the entry for `provider/model`, else for `provider` (the agent's entry wins over
//!    the global one for the same key): its own profile, allow and deny, intersected with step 1;
//! 3. `allow` — the agent's list, or else the global one. An allowlist that names only unknown or
//!    not-loaded tools is ignored with a warning (so core tools stay available); an intentionally empty
//!    list (`allow: []`) means no tools at all;
//! 4. `deny` — global and agent lists together; deny always wins.
//!
//! Patterns are case-insensitive, `*` matches any run of characters (`"*"` matches everything), and
//! `group:<name>` expands to the group's members. A pattern matches a tool by its name, its exact
//! catalog id, or — for plugin, MCP and client tools — its owner (a plugin id or server name selects
//! all of that owner's tools).

use codemode_core::catalog::{ToolDefinition, ToolSource};
use codemode_core::config::{ConfigError, type_name};
use serde_json::Value;
use std::collections::BTreeMap;

/// The tool groups of contract §22 (`group:openclaw` is computed: every core tool).
pub const GROUPS: [(&str, &[&str]); 9] = [
    ("runtime", &["exec", "bash", "process"]),
    ("fs", &["read", "write", "edit", "apply_patch"]),
    ("sessions", &["sessions_list", "sessions_history", "sessions_send", "sessions_spawn", "session_status"]),
    ("memory", &["memory_search", "memory_get"]),
    ("web", &["web_search", "web_fetch"]),
    ("ui", &["browser", "canvas"]),
    ("automation", &["cron", "gateway"]),
    ("messaging", &["message"]),
    ("nodes", &["nodes"]),
];

/// The profiles of contract §22 (`full` is no restriction).
pub const PROFILES: [(&str, &[&str]); 3] = [
    ("minimal", &["session_status"]),
    ("coding", &["group:fs", "group:runtime", "group:sessions", "group:memory", "image"]),
    ("messaging", &["group:messaging", "sessions_list", "sessions_history", "sessions_send", "session_status"]),
];

/// A profile name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `session_status` only.
    Minimal,
    /// Files, runtime, sessions, memory, image.
    Coding,
    /// Messaging and session tools.
    Messaging,
    /// No restriction.
    Full,
}

impl Profile {
    fn parse(s: &str) -> Option<Self> {
        [Profile::Minimal, Profile::Coding, Profile::Messaging, Profile::Full].into_iter().find(|p| p.name() == s)
    }

    /// The profile's name in config.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Minimal => "minimal",
            Profile::Coding => "coding",
            Profile::Messaging => "messaging",
            Profile::Full => "full",
        }
    }

    /// The allow patterns of the profile; `None` for `full`.
    pub fn patterns(self) -> Option<Vec<String>> {
        PROFILES.iter().find(|(n, _)| *n == self.name()).map(|(_, p)| p.iter().map(|s| s.to_string()).collect())
    }
}

/// One policy layer: profile, allow, deny.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyLayer {
    /// `profile`.
    pub profile: Option<Profile>,
    /// `allow` (`Some(vec![])` is an intentionally empty allowlist).
    pub allow: Option<Vec<String>>,
    /// `deny`.
    pub deny: Vec<String>,
}

/// The whole tool policy of a configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolPolicy {
    /// `tools.profile` / `tools.allow` / `tools.deny`.
    pub global: PolicyLayer,
    /// `tools.byProvider`.
    pub by_provider: BTreeMap<String, PolicyLayer>,
    /// `agents.list[]`: agent id → its `tools` policy.
    pub agents: BTreeMap<String, AgentPolicy>,
}

/// `agents.list[].tools`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentPolicy {
    /// The agent's profile, allow and deny.
    pub layer: PolicyLayer,
    /// The agent's `byProvider`.
    pub by_provider: BTreeMap<String, PolicyLayer>,
}

/// Who is asking: selects the agent overrides and the `byProvider` entry.
#[derive(Debug, Clone, Copy, Default)]
pub struct PolicyContext<'a> {
    /// Agent id.
    pub agent: Option<&'a str>,
    /// Model provider (e.g. `openai`).
    pub provider: Option<&'a str>,
    /// Model id (e.g. `gpt-5.2`).
    pub model: Option<&'a str>,
}

/// An owned [`PolicyContext`]: which agent, provider and model a runtime serves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PolicyTarget {
    /// Agent id (`agents.list[].id`).
    pub agent: Option<String>,
    /// Model provider.
    pub provider: Option<String>,
    /// Model id.
    pub model: Option<String>,
}

impl PolicyTarget {
    /// The borrowed context for [`ToolPolicy::apply`].
    pub fn context(&self) -> PolicyContext<'_> {
        PolicyContext { agent: self.agent.as_deref(), provider: self.provider.as_deref(), model: self.model.as_deref() }
    }
}

/// Why a tool was removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// Not in the profile.
    Profile(String),
    /// Narrowed away by a `byProvider` entry.
    ByProvider(String),
    /// Not in the allowlist.
    NotAllowed,
    /// Matched a deny pattern.
    Denied(String),
}

impl std::fmt::Display for Removal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Removal::Profile(p) => write!(f, "not in profile `{p}`"),
            Removal::ByProvider(k) => write!(f, "narrowed by tools.byProvider[\"{k}\"]"),
            Removal::NotAllowed => write!(f, "not in tools.allow"),
            Removal::Denied(p) => write!(f, "denied by `{p}`"),
        }
    }
}

/// The outcome of applying a policy to a tool list.
#[derive(Debug, Clone, Default)]
pub struct PolicyOutcome {
    /// Tools that stay, in input order.
    pub kept: Vec<ToolDefinition>,
    /// Tools removed, with the reason.
    pub removed: Vec<(String, Removal)>,
    /// Warnings for the operator (an ignored allowlist).
    pub warnings: Vec<String>,
    /// The allowlist was intentionally empty: the run is tool-less (code mode does not activate).
    pub intentionally_empty: bool,
}

fn lower(s: &str) -> String {
    s.to_lowercase()
}

/// `*` wildcard match, case-insensitive (both sides already lowercase).
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti, mut star, mut mark) = (0usize, 0usize, None::<usize>, 0usize);
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            pi += 1;
            mark = ti;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Expands `group:` patterns (recursively for profiles that name groups) into plain patterns.
pub(crate) fn expand(patterns: &[String], core_names: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for p in patterns {
        let p = lower(p);
        match p.strip_prefix("group:") {
            Some("openclaw") => out.extend(core_names.iter().map(|n| lower(n))),
            // An unknown group matches nothing.
            Some(g) => {
                if let Some((_, members)) = GROUPS.iter().find(|(name, _)| *name == g) {
                    out.extend(members.iter().map(|m| m.to_string()));
                }
            }
            None => out.push(p),
        }
    }
    out
}

/// The first of `patterns` (tool-name patterns as in `tools.allow`: `*` wildcards, matched against
/// the name, the catalog id and the owner, case-insensitively) that `def` matches, as written.
pub fn matching_pattern(patterns: &[String], def: &ToolDefinition) -> Option<String> {
    let lowered: Vec<String> = patterns.iter().map(|p| lower(p)).collect();
    let hit = matches(&lowered, def)?;
    lowered.iter().position(|p| *p == hit).map(|i| patterns[i].clone())
}

pub(crate) fn matches(patterns: &[String], def: &ToolDefinition) -> Option<String> {
    let name = lower(&def.name);
    let id = lower(&def.id());
    let owner = (def.source != ToolSource::Openclaw).then(|| lower(&def.owner));
    patterns.iter().find(|p| glob(p, &name) || glob(p, &id) || owner.as_deref().is_some_and(|o| glob(p, o))).cloned()
}

impl ToolPolicy {
    /// Whether the policy restricts anything at all.
    pub fn is_unrestricted(&self) -> bool {
        *self == ToolPolicy::default()
    }

    /// Applies the policy to `tools` for a caller.
    pub fn apply(&self, tools: Vec<ToolDefinition>, cx: PolicyContext<'_>) -> PolicyOutcome {
        let core: Vec<String> =
            tools.iter().filter(|t| t.source == ToolSource::Openclaw).map(|t| t.name.clone()).collect();
        let agent = cx.agent.and_then(|a| self.agents.get(a));
        let profile = agent.and_then(|a| a.layer.profile).or(self.global.profile);
        let profile_patterns = profile.and_then(Profile::patterns).map(|p| expand(&p, &core));
        let provider_key = cx.provider.map(|p| match cx.model {
            Some(m) => vec![format!("{p}/{m}"), p.to_string()],
            None => vec![p.to_string()],
        });
        // The byProvider layer, its patterns expanded once: (key, profile, allow, deny).
        let provider_layer = provider_key
            .and_then(|keys| {
                keys.into_iter().find_map(|k| {
                    agent
                        .and_then(|a| a.by_provider.get(&k))
                        .or_else(|| self.by_provider.get(&k))
                        .map(|layer| (k, layer))
                })
            })
            .map(|(key, layer)| {
                let profile = layer.profile.and_then(Profile::patterns).map(|p| expand(&p, &core));
                let allow = layer.allow.as_ref().map(|a| expand(a, &core));
                (key, profile, allow, expand(&layer.deny, &core))
            });
        let allow = agent.and_then(|a| a.layer.allow.clone()).or_else(|| self.global.allow.clone());
        let mut deny: Vec<String> = self.global.deny.clone();
        if let Some(a) = agent {
            deny.extend(a.layer.deny.iter().cloned());
        }
        let deny = expand(&deny, &core);

        let mut out = PolicyOutcome::default();
        // An allowlist that names only unknown tools is ignored (contract §22); an empty one is not.
        let allow = match allow {
            Some(list) if list.is_empty() => {
                out.intentionally_empty = true;
                Some(Vec::new())
            }
            Some(list) => {
                let expanded = expand(&list, &core);
                if tools.iter().any(|t| matches(&expanded, t).is_some()) {
                    Some(expanded)
                } else {
                    out.warnings.push(format!(
                        "tools.allow names only unknown or not-loaded tools ({}); ignoring the allowlist",
                        list.join(", ")
                    ));
                    None
                }
            }
            None => None,
        };
        for def in tools {
            let id = def.id();
            let removal = (|| {
                if let Some(p) = &profile_patterns
                    && matches(p, &def).is_none()
                {
                    return Some(Removal::Profile(profile.unwrap_or(Profile::Full).name().to_string()));
                }
                if let Some((key, p_profile, p_allow, p_deny)) = &provider_layer {
                    let narrowed = p_profile.as_ref().is_some_and(|p| matches(p, &def).is_none())
                        || p_allow.as_ref().is_some_and(|a| matches(a, &def).is_none())
                        || matches(p_deny, &def).is_some();
                    if narrowed {
                        return Some(Removal::ByProvider(key.clone()));
                    }
                }
                if let Some(a) = &allow
                    && matches(a, &def).is_none()
                {
                    return Some(Removal::NotAllowed);
                }
                matches(&deny, &def).map(Removal::Denied)
            })();
            match removal {
                Some(r) => out.removed.push((id, r)),
                None => out.kept.push(def),
            }
        }
        out
    }

    /// Parses the policy parts of a configuration document (`tools.*` and `agents.list`).
    pub fn from_document(doc: &Value) -> Result<Self, ConfigError> {
        let mut policy = ToolPolicy::default();
        if let Some(tools) = doc.get("tools") {
            policy.global = parse_layer(tools, "tools")?;
            if let Some(bp) = tools.get("byProvider") {
                policy.by_provider = parse_by_provider(bp, "tools.byProvider")?;
            }
        }
        if let Some(agents) = doc.get("agents") {
            let list = match agents.get("list") {
                None | Some(Value::Null) => return Ok(policy),
                Some(Value::Array(l)) => l,
                Some(other) => {
                    return Err(ConfigError::new(
                        "agents.list",
                        format!("expected an array, got {}", type_name(other)),
                    ));
                }
            };
            for (i, agent) in list.iter().enumerate() {
                let path = format!("agents.list[{i}]");
                let Some(id) = agent.get("id").and_then(Value::as_str) else {
                    return Err(ConfigError::new(format!("{path}.id"), "every agent needs a string `id`"));
                };
                let Some(tools) = agent.get("tools") else { continue };
                let tpath = format!("{path}.tools");
                let mut ap = AgentPolicy { layer: parse_layer(tools, &tpath)?, ..AgentPolicy::default() };
                if let Some(bp) = tools.get("byProvider") {
                    ap.by_provider = parse_by_provider(bp, &format!("{tpath}.byProvider"))?;
                }
                policy.agents.insert(id.to_string(), ap);
            }
        }
        Ok(policy)
    }
}

/// An array of strings from config at `path` (errors name the path and the index).
pub fn string_list(v: &Value, path: &str) -> Result<Vec<String>, ConfigError> {
    let items = v
        .as_array()
        .ok_or_else(|| ConfigError::new(path, format!("expected an array of strings, got {}", type_name(v))))?;
    items
        .iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_str().map(str::to_string).ok_or_else(|| ConfigError::new(format!("{path}[{i}]"), "expected a string"))
        })
        .collect()
}

fn parse_layer(v: &Value, path: &str) -> Result<PolicyLayer, ConfigError> {
    let Some(obj) = v.as_object() else {
        return Err(ConfigError::new(path, format!("expected an object, got {}", type_name(v))));
    };
    let mut layer = PolicyLayer::default();
    if let Some(p) = obj.get("profile") {
        let name = p.as_str().unwrap_or("");
        layer.profile = Some(Profile::parse(name).ok_or_else(|| {
            ConfigError::new(
                format!("{path}.profile"),
                format!("unknown profile {p} (minimal, coding, messaging, full)"),
            )
        })?);
    }
    if let Some(a) = obj.get("allow") {
        layer.allow = Some(string_list(a, &format!("{path}.allow"))?);
    }
    if let Some(d) = obj.get("deny") {
        layer.deny = string_list(d, &format!("{path}.deny"))?;
    }
    Ok(layer)
}

fn parse_by_provider(v: &Value, path: &str) -> Result<BTreeMap<String, PolicyLayer>, ConfigError> {
    let Some(obj) = v.as_object() else {
        return Err(ConfigError::new(path, format!("expected an object, got {}", type_name(v))));
    };
    let mut out = BTreeMap::new();
    for (key, layer) in obj {
        let lpath = format!("{path}[\"{key}\"]");
        if let Some(bad) =
            layer.as_object().and_then(|o| o.keys().find(|k| !["profile", "allow", "deny"].contains(&k.as_str())))
        {
            return Err(ConfigError::new(
                format!("{lpath}.{bad}"),
                format!("unknown key `{bad}` (profile, allow, deny)"),
            ));
        }
        out.insert(key.clone(), parse_layer(layer, &lpath)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn core(name: &str) -> ToolDefinition {
        ToolDefinition::new(ToolSource::Openclaw, "core", name)
    }

    fn tools() -> Vec<ToolDefinition> {
        let mut v: Vec<ToolDefinition> = [
            "exec",
            "process",
            "read",
            "write",
            "edit",
            "apply_patch",
            "web_search",
            "web_fetch",
            "browser",
            "canvas",
            "message",
            "cron",
            "gateway",
            "image",
            "sessions_list",
            "sessions_history",
            "sessions_send",
            "sessions_spawn",
            "session_status",
            "memory_search",
            "memory_get",
        ]
        .into_iter()
        .map(core)
        .collect();
        v.push(ToolDefinition::new(ToolSource::Plugin, "slack", "slack_post"));
        v.push(ToolDefinition::new(ToolSource::Plugin, "discord", "discord_send"));
        v.push(ToolDefinition::new(ToolSource::Mcp, "github", "create_issue"));
        v
    }

    fn names(out: &PolicyOutcome) -> Vec<String> {
        out.kept.iter().map(|t| t.name.clone()).collect()
    }

    fn policy(doc: Value) -> ToolPolicy {
        ToolPolicy::from_document(&doc).unwrap()
    }

    #[test]
    fn profiles_expand_exactly() {
        let p = policy(json!({"tools": {"profile": "minimal"}}));
        assert_eq!(names(&p.apply(tools(), PolicyContext::default())), ["session_status"]);
        let p = policy(json!({"tools": {"profile": "coding"}}));
        assert_eq!(
            names(&p.apply(tools(), PolicyContext::default())),
            [
                "exec",
                "process",
                "read",
                "write",
                "edit",
                "apply_patch",
                "image",
                "sessions_list",
                "sessions_history",
                "sessions_send",
                "sessions_spawn",
                "session_status",
                "memory_search",
                "memory_get"
            ]
        );
        let p = policy(json!({"tools": {"profile": "messaging", "allow": ["slack", "discord"]}}));
        let out = p.apply(tools(), PolicyContext::default());
        // The messaging profile keeps no plugin tools, so the allowlist cannot add them back.
        assert_eq!(names(&out), Vec::<String>::new());
        let p = policy(json!({"tools": {"profile": "full"}}));
        assert_eq!(p.apply(tools(), PolicyContext::default()).kept.len(), tools().len());
    }

    #[test]
    fn deny_wins_and_groups_expand() {
        let p = policy(json!({"tools": {"profile": "coding", "deny": ["group:runtime"]}}));
        let out = p.apply(tools(), PolicyContext::default());
        assert!(!names(&out).contains(&"exec".to_string()) && !names(&out).contains(&"process".to_string()));
        assert!(out.removed.iter().any(|(id, r)| id == "openclaw:core:exec" && matches!(r, Removal::Denied(_))));
        let p = policy(json!({"tools": {"allow": ["*"], "deny": ["WEB_*", "github"]}}));
        let out = p.apply(tools(), PolicyContext::default());
        assert!(!names(&out).iter().any(|n| n.starts_with("web_") || n == "create_issue"));
        let p = policy(json!({"tools": {"allow": ["group:openclaw"]}}));
        let out = p.apply(tools(), PolicyContext::default());
        assert_eq!(out.kept.len(), 21, "group:openclaw is every core tool");
    }

    #[test]
    fn by_provider_narrows_per_agent() {
        let doc = json!({
            "tools": {"profile": "coding", "byProvider": {"google-antigravity": {"profile": "minimal"}, "openai/gpt-5.2": {"allow": ["group:fs", "sessions_list"]}}},
            "agents": {"list": [{"id": "support", "tools": {"profile": "messaging", "allow": ["message"], "byProvider": {"google-antigravity": {"allow": ["message", "sessions_list"]}}}}]}
        });
        let p = policy(doc);
        let g = p.apply(tools(), PolicyContext { provider: Some("google-antigravity"), ..Default::default() });
        assert_eq!(names(&g), ["session_status"]);
        let o =
            p.apply(tools(), PolicyContext { provider: Some("openai"), model: Some("gpt-5.2"), ..Default::default() });
        assert_eq!(names(&o), ["read", "write", "edit", "apply_patch", "sessions_list"]);
        let other_model =
            p.apply(tools(), PolicyContext { provider: Some("openai"), model: Some("gpt-4"), ..Default::default() });
        assert_eq!(other_model.kept.len(), 14, "no entry for this model: the profile alone");
        let s = p.apply(
            tools(),
            PolicyContext { agent: Some("support"), provider: Some("google-antigravity"), model: None },
        );
        assert_eq!(names(&s), ["message"]);
    }

    #[test]
    fn unknown_allowlist_is_ignored_but_empty_allowlist_is_not() {
        let p = policy(json!({"tools": {"allow": ["not_loaded_plugin_tool"]}}));
        let out = p.apply(tools(), PolicyContext::default());
        assert_eq!(out.kept.len(), tools().len());
        assert_eq!(out.warnings.len(), 1);
        let p = policy(json!({"tools": {"allow": []}}));
        let out = p.apply(tools(), PolicyContext::default());
        assert!(out.kept.is_empty() && out.intentionally_empty);
    }

    #[test]
    fn bad_config_names_the_path() {
        let e = ToolPolicy::from_document(&json!({"tools": {"profile": "nope"}})).unwrap_err();
        assert_eq!(e.path, "tools.profile");
        let e = ToolPolicy::from_document(&json!({"tools": {"allow": ["a", 3]}})).unwrap_err();
        assert_eq!(e.path, "tools.allow[1]");
        let e = ToolPolicy::from_document(&json!({"tools": {"byProvider": {"x": {"alow": []}}}})).unwrap_err();
        assert_eq!(e.path, "tools.byProvider[\"x\"].alow");
        let e = ToolPolicy::from_document(&json!({"agents": {"list": [{"tools": {}}]}})).unwrap_err();
        assert_eq!(e.path, "agents.list[0].id");
    }

    #[test]
    fn glob_semantics() {
        assert!(glob("*", "anything") && glob("web_*", "web_search") && glob("*_get", "memory_get"));
        assert!(glob("a*b*c", "axxbyyc") && !glob("a*b*c", "axxbyy") && glob("exec", "exec") && !glob("exec", "exec2"));
        assert!(glob("**", "") && !glob("x", ""));
    }

    fn arb_pattern() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("*".to_string()),
            Just("group:fs".to_string()),
            Just("group:runtime".to_string()),
            Just("group:openclaw".to_string()),
            "[a-z_]{1,6}\\*?",
            "(EXEC|Read|web_\\*|SLACK|github)",
        ]
    }

    fn arb_layer() -> impl Strategy<Value = Value> {
        (
            prop::option::of(prop_oneof![Just("minimal"), Just("coding"), Just("messaging"), Just("full")]),
            prop::option::of(prop::collection::vec(arb_pattern(), 0..4)),
            prop::collection::vec(arb_pattern(), 0..3),
        )
            .prop_map(|(profile, allow, deny)| {
                let mut o = serde_json::Map::new();
                if let Some(p) = profile {
                    o.insert("profile".into(), json!(p));
                }
                if let Some(a) = allow {
                    o.insert("allow".into(), json!(a));
                }
                o.insert("deny".into(), json!(deny));
                Value::Object(o)
            })
    }

    proptest! {
        #[test]
        fn deny_always_wins(global in arb_layer(), deny in prop::collection::vec(arb_pattern(), 1..3)) {
            let mut g = global;
            g["deny"] = json!(deny);
            let p = policy(json!({"tools": g}));
            let out = p.apply(tools(), PolicyContext::default());
            let expanded = expand(&deny, &tools().iter().filter(|t| t.source == ToolSource::Openclaw).map(|t| t.name.clone()).collect::<Vec<_>>());
            for t in &out.kept {
                prop_assert!(matches(&expanded, t).is_none(), "{} survived deny {:?}", t.name, deny);
            }
        }

        #[test]
        fn by_provider_never_widens(global in arb_layer(), narrow in arb_layer()) {
            let base = policy(json!({"tools": global.clone()}));
            let mut with = global;
            with["byProvider"] = json!({"p": narrow});
            let narrowed = policy(json!({"tools": with}));
            let cx = PolicyContext { provider: Some("p"), ..Default::default() };
            let a: Vec<String> = base.apply(tools(), cx).kept.iter().map(|t| t.id()).collect();
            let b: Vec<String> = narrowed.apply(tools(), cx).kept.iter().map(|t| t.id()).collect();
            for id in &b {
                prop_assert!(a.contains(id), "byProvider widened to {id}");
            }
        }

        #[test]
        fn matching_ignores_case(name in "[a-z_]{1,10}") {
            let list = vec![core(&name), core("zzz_other")];
            let upper = policy(json!({"tools": {"allow": [name.to_uppercase()]}}));
            prop_assert!(upper.apply(list.clone(), PolicyContext::default()).kept.iter().any(|t| t.name == name));
            let star = policy(json!({"tools": {"deny": ["*"]}}));
            prop_assert!(star.apply(list, PolicyContext::default()).kept.is_empty());
        }
    }
}
