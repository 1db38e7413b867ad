//! The approval policy (top-level `approvals` of the config file): which nested calls wait for a
//! human before they run (contract P5). Patterns match like the tool policy's (see [`crate::policy`]):
//! case-insensitive, `*` wildcards, `group:<name>`, by tool name, exact catalog id or owner.
//!
//! ```json5
//! approvals: {
//!   require: ["plugin:demo:demo_invoice_send", "mcp:files:write_*", "group:fs"],
//!   requireUnlessReadOnly: false,   // true: every tool not declared read-only is gated
//!   timeoutMs: 60000,               // how long an approver may take before the call is parked
//! }
//! ```

use crate::policy::{expand, matches, string_list};
use codemode_core::catalog::{ToolDefinition, ToolSource};
use codemode_core::config::{ConfigError, type_name};
use serde_json::Value;

/// Default of `approvals.timeoutMs`.
pub const DEFAULT_APPROVAL_TIMEOUT_MS: u64 = 60_000;
/// Largest `approvals.timeoutMs` (a longer wait holds an `exec` open for nothing: the run parks and
/// resumes later anyway).
pub const MAX_APPROVAL_TIMEOUT_MS: u64 = 600_000;

/// Which nested calls need a human's approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// Patterns of gated tools.
    pub require: Vec<String>,
    /// Gate every tool not declared read-only (MCP `readOnlyHint` counts).
    pub require_unless_read_only: bool,
    /// How long an [`Approver`](codemode_core::approval::Approver) may take before the call is
    /// parked (clamped to `0..=`[`MAX_APPROVAL_TIMEOUT_MS`]).
    pub timeout_ms: u64,
    /// Every nested call carries the line of the cell that made it, not only gated ones (an
    /// operator's console marks each call's line in the cell's source). Gates nothing; costs a
    /// stack walk in the guest per call.
    pub lines_for_every_call: bool,
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        ApprovalPolicy {
            require: Vec::new(),
            require_unless_read_only: false,
            timeout_ms: DEFAULT_APPROVAL_TIMEOUT_MS,
            lines_for_every_call: false,
        }
    }
}

impl ApprovalPolicy {
    /// A policy gating the tools matching `patterns`.
    pub fn require(patterns: impl IntoIterator<Item = impl Into<String>>) -> Self {
        ApprovalPolicy { require: patterns.into_iter().map(Into::into).collect(), ..ApprovalPolicy::default() }
    }

    /// Whether nothing is gated.
    pub fn is_off(&self) -> bool {
        self.require.is_empty() && !self.require_unless_read_only
    }

    /// Why `def` needs approval, or `None` when it does not.
    pub fn reason(&self, def: &ToolDefinition) -> Option<String> {
        if self.require_unless_read_only && !def.read_only {
            return Some("approvals.requireUnlessReadOnly: the tool is not declared read-only".to_string());
        }
        for pattern in &self.require {
            if pattern.eq_ignore_ascii_case("group:openclaw") && def.source == ToolSource::Openclaw {
                return Some(format!("approvals.require matches `{pattern}`"));
            }
            let expanded = expand(std::slice::from_ref(pattern), &[]);
            if matches(&expanded, def).is_some() {
                return Some(format!("approvals.require matches `{pattern}`"));
            }
        }
        None
    }

    /// Parses `approvals` of a configuration document (absent: nothing gated).
    pub fn from_document(doc: &Value) -> Result<Self, ConfigError> {
        let mut policy = ApprovalPolicy::default();
        let Some(v) = doc.get("approvals") else { return Ok(policy) };
        let Some(obj) = v.as_object() else {
            return Err(ConfigError::new("approvals", format!("expected an object, got {}", type_name(v))));
        };
        for (key, value) in obj {
            let path = format!("approvals.{key}");
            match key.as_str() {
                "require" => policy.require = string_list(value, &path)?,
                "requireUnlessReadOnly" => {
                    policy.require_unless_read_only =
                        value.as_bool().ok_or_else(|| ConfigError::new(&path, "expected true or false"))?;
                }
                "timeoutMs" => {
                    let ms = value
                        .as_u64()
                        .ok_or_else(|| ConfigError::new(&path, "expected a non-negative integer (milliseconds)"))?;
                    policy.timeout_ms = ms.min(MAX_APPROVAL_TIMEOUT_MS);
                }
                _ => {
                    return Err(ConfigError::new(
                        &path,
                        "unknown field (expected require, requireUnlessReadOnly, timeoutMs)",
                    ));
                }
            }
        }
        Ok(policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(source: ToolSource, owner: &str, name: &str, read_only: bool) -> ToolDefinition {
        let d = ToolDefinition::new(source, owner, name).with_parameters(json!({"type": "object"}));
        if read_only { d.read_only() } else { d }
    }

    #[test]
    fn patterns_match_like_the_tool_policy() {
        let p = ApprovalPolicy::require(["plugin:demo:demo_invoice_send", "mcp:files:write_*", "group:fs"]);
        assert!(p.reason(&def(ToolSource::Plugin, "demo", "demo_invoice_send", false)).is_some());
        assert!(p.reason(&def(ToolSource::Plugin, "demo", "demo_echo", false)).is_none());
        assert!(p.reason(&def(ToolSource::Mcp, "files", "write_file", false)).is_some());
        assert!(p.reason(&def(ToolSource::Mcp, "files", "read_file", true)).is_none());
        assert!(p.reason(&def(ToolSource::Openclaw, "core", "write", false)).is_some(), "group:fs");
        let owner = ApprovalPolicy::require(["files"]);
        assert!(owner.reason(&def(ToolSource::Mcp, "files", "read_file", true)).is_some(), "by owner");
        let core = ApprovalPolicy::require(["group:openclaw"]);
        assert!(core.reason(&def(ToolSource::Openclaw, "core", "anything", true)).is_some());
        assert!(core.reason(&def(ToolSource::Plugin, "demo", "anything", true)).is_none());
        assert!(ApprovalPolicy::default().is_off());
    }

    #[test]
    fn read_only_rule() {
        let p = ApprovalPolicy { require_unless_read_only: true, ..ApprovalPolicy::default() };
        assert!(p.reason(&def(ToolSource::Mcp, "files", "write_file", false)).is_some());
        assert!(p.reason(&def(ToolSource::Mcp, "files", "read_file", true)).is_none());
        assert!(!p.is_off());
    }

    #[test]
    fn config_is_validated_and_clamped() {
        let p = ApprovalPolicy::from_document(&json!({"approvals": {"require": ["a"], "timeoutMs": 10_000_000}}));
        assert_eq!(p.map(|p| (p.require, p.timeout_ms)), Ok((vec!["a".to_string()], MAX_APPROVAL_TIMEOUT_MS)));
        assert_eq!(ApprovalPolicy::from_document(&json!({})), Ok(ApprovalPolicy::default()));
        for (bad, path) in [
            (json!({"approvals": []}), "approvals"),
            (json!({"approvals": {"require": "x"}}), "approvals.require"),
            (json!({"approvals": {"require": [1]}}), "approvals.require[0]"),
            (json!({"approvals": {"timeoutMs": -1}}), "approvals.timeoutMs"),
            (json!({"approvals": {"requireUnlessReadOnly": "yes"}}), "approvals.requireUnlessReadOnly"),
            (json!({"approvals": {"requier": []}}), "approvals.requier"),
        ] {
            assert_eq!(ApprovalPolicy::from_document(&bad).map_err(|e| e.path), Err(path.to_string()), "{bad}");
        }
    }
}
