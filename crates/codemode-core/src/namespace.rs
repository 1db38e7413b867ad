//! The namespace registry contract (contract §10): short domain APIs in the guest (`Shipping.unpaid()`)
//! whose every call is a catalog tool call.
//!
//! The runtime asks a [`NamespaceRegistry`] two things:
//! - [`visible`](NamespaceRegistry::visible): which namespaces a catalog makes visible (their
//!   description and prompt enter the `exec` description; nothing else is computed);
//! - [`open`](NamespaceRegistry::open): for one run, the visible namespaces serialized to plain data
//!   ([`GuestNamespace`], carried into the guest with the boot data) plus a [`RunNamespaces`] that maps
//!   each guest call `(namespace id, path, arguments)` to a catalog tool and its input.
//!
//! The implementation (registration per plugin, scope serialization, the ownership gate) lives in
//! `codemode-namespaces`; this module holds only what the runtime and the bridge agree on.

use crate::catalog::{ToolDefinition, ToolSource};
use crate::config::CodeModeConfig;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Who owns a namespace: the source and owner its backing tools must have (contract §10 "Ownership").
/// A plugin registering namespaces owns them as `plugin:<pluginId>`; a namespace declared in the
/// config file may also be owned by an MCP server (`mcp:<server>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NamespaceOwner {
    /// The source every backing tool must come from.
    pub source: ToolSource,
    /// The owner every backing tool must have (`ToolDefinition::owner`: plugin id, server name).
    pub name: String,
}

impl NamespaceOwner {
    /// A plugin owner.
    pub fn plugin(id: impl Into<String>) -> Self {
        Self { source: ToolSource::Plugin, name: id.into() }
    }

    /// Whether `tool` belongs to this owner.
    pub fn owns(&self, tool: &ToolDefinition) -> bool {
        tool.source == self.source && tool.owner == self.name
    }
}

impl std::fmt::Display for NamespaceOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.source, self.name)
    }
}

/// What a catalog shows of a visible namespace: enough for the `exec` description and listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceInfo {
    /// The registry key.
    pub id: String,
    /// The guest global (`Shipping`).
    pub global_name: String,
    /// One line for the `exec` description.
    pub description: String,
    /// Optional usage prompt for the `exec` description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The owner.
    pub owner: NamespaceOwner,
    /// The backing tools (names; all owned by `owner`).
    pub required_tools: Vec<String>,
}

/// One callable member of a guest namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestNamespaceCall {
    /// The member's path below the namespace, segments joined by [`PATH_SEPARATOR`] (`orders.list`).
    pub path: String,
    /// The backing tool's catalog id (calls to ids the approval policy gates carry the cell line).
    pub tool_id: String,
}

/// A namespace as the guest receives it (contract L5): plain JSON data, with a `null` at each callable
/// path, and the list of callable paths. The prelude installs a function at each path and freezes
/// the result; it is reachable as the global `globalName` and as `namespaces.<globalName>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestNamespace {
    /// The registry key, sent back with every call.
    pub id: String,
    /// The guest global.
    pub global_name: String,
    /// The scope's data (an object).
    pub data: Value,
    /// Its callable members.
    pub calls: Vec<GuestNamespaceCall>,
}

/// Separator of path segments in [`GuestNamespaceCall::path`]; scope keys may not contain it
/// (contract S3).
pub const PATH_SEPARATOR: char = '.';

/// What a namespace call resolves to: a catalog tool (by source, owner and name) and its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceCall {
    /// The backing tool's source.
    pub source: ToolSource,
    /// Its owner.
    pub owner: String,
    /// Its name.
    pub tool: String,
    /// The tool input built from the guest's arguments.
    pub input: Value,
}

/// Why a namespace call was refused before any tool ran. The message is meant for the guest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamespaceCallError {
    /// The id is not a namespace of this run (forged, or never visible to it) (contract N4).
    #[error("unknown namespace `{0}`")]
    UnknownNamespace(String),
    /// The namespace's registration was cleared (plugin rollback or uninstall, contract L8) after the
    /// run started: its globals stay in the run but no longer call anything.
    #[error("namespace `{0}` was removed after this run started (its plugin was rolled back or uninstalled)")]
    Removed(String),
    /// The path names no callable member (contract N4).
    #[error("namespace `{namespace}` has no callable member `{path}`")]
    UnknownPath {
        /// The namespace's global name.
        namespace: String,
        /// The path the guest sent.
        path: String,
    },
    /// The member's input mapper refused the arguments.
    #[error("{0}")]
    BadArguments(String),
}

/// The run a namespace scope is created for (contract L4).
#[derive(Debug, Clone, Copy)]
pub struct NamespaceContext<'a> {
    /// The active agent.
    pub agent_id: Option<&'a str>,
    /// The session key.
    pub session_key: Option<&'a str>,
    /// The session id.
    pub session_id: Option<&'a str>,
    /// The code-mode run id.
    pub run_id: &'a str,
    /// The code-mode configuration in force.
    pub config: &'a CodeModeConfig,
    /// Set when the `exec` / `wait` call that creates the scope is cancelled.
    pub abort: &'a AtomicBool,
}

impl NamespaceContext<'_> {
    /// Whether the call creating the scope was aborted (a scope factory doing slow work may stop).
    pub fn is_aborted(&self) -> bool {
        self.abort.load(Ordering::SeqCst)
    }
}

/// Why the namespaces of a run could not be opened (a scope failed serialization, contract S1–S5). The
/// `exec` fails with `invalid_config` before guest code runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("namespace `{namespace}`: {message}")]
pub struct NamespaceError {
    /// The namespace id.
    pub namespace: String,
    /// What is wrong, naming the path.
    pub message: String,
}

/// The namespaces of one run: what the guest gets and how its calls resolve.
pub trait RunNamespaces: Send + Sync {
    /// The serialized namespaces for the boot data.
    fn guest(&self) -> &[GuestNamespace];

    /// Each of [`guest`](Self::guest)'s namespaces as its JSON text, in the same order: what the
    /// run's boot text carries. The default serializes them; an implementation that already wrote
    /// the texts (checking a scope's size takes its text) lends them, so a run's scopes are
    /// serialized once.
    fn guest_texts(&self) -> std::borrow::Cow<'_, [String]> {
        std::borrow::Cow::Owned(
            self.guest().iter().map(|g| serde_json::to_string(g).unwrap_or_else(|_| "null".to_string())).collect(),
        )
    }

    /// Resolves a guest call. `args` are the guest's arguments, already JSON-safe.
    fn resolve(&self, namespace: &str, path: &str, args: &[Value]) -> Result<NamespaceCall, NamespaceCallError>;
}

/// The tools a run's guest can call, by catalog id: what namespace visibility is checked against.
pub trait CallableTools {
    /// The tool with catalog id `id` (`<source>:<owner>:<name>`), if the run's guest can call it
    /// (through `tools.*` or `MCP.*`): catalogued, not denied by policy, not direct-only.
    fn callable(&self, id: &str) -> Option<&ToolDefinition>;
}

/// Decides which namespaces a run sees and resolves their calls.
pub trait NamespaceRegistry: Send + Sync {
    /// The namespaces `catalog` makes visible (contract L3): every required tool callable and owned by
    /// the namespace's owner (the catalog id spells source and owner, so a same-named tool of another
    /// owner never counts, N2).
    fn visible(&self, catalog: &dyn CallableTools) -> Vec<NamespaceInfo>;

    /// Creates the scopes of the visible namespaces for one run (contract L4, L5).
    fn open(
        &self,
        ctx: &NamespaceContext<'_>,
        catalog: &dyn CallableTools,
    ) -> Result<Arc<dyn RunNamespaces>, NamespaceError>;
}

/// A registry with no namespaces.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoNamespaces;

impl RunNamespaces for NoNamespaces {
    fn guest(&self) -> &[GuestNamespace] {
        &[]
    }

    fn resolve(&self, namespace: &str, _path: &str, _args: &[Value]) -> Result<NamespaceCall, NamespaceCallError> {
        Err(NamespaceCallError::UnknownNamespace(namespace.to_string()))
    }
}

impl NamespaceRegistry for NoNamespaces {
    fn visible(&self, _catalog: &dyn CallableTools) -> Vec<NamespaceInfo> {
        Vec::new()
    }

    fn open(
        &self,
        _ctx: &NamespaceContext<'_>,
        _catalog: &dyn CallableTools,
    ) -> Result<Arc<dyn RunNamespaces>, NamespaceError> {
        Ok(Arc::new(NoNamespaces))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_match_source_and_name() {
        let owner = NamespaceOwner::plugin("github");
        assert!(owner.owns(&ToolDefinition::new(ToolSource::Plugin, "github", "x")));
        // N2: the same owner name under another source, or another owner, does not own the tool.
        assert!(!owner.owns(&ToolDefinition::new(ToolSource::Client, "github", "x")));
        assert!(!owner.owns(&ToolDefinition::new(ToolSource::Plugin, "gitlab", "x")));
        assert_eq!(owner.to_string(), "plugin:github");
        struct Empty;
        impl CallableTools for Empty {
            fn callable(&self, _id: &str) -> Option<&ToolDefinition> {
                None
            }
        }
        let none = NoNamespaces;
        assert!(none.visible(&Empty).is_empty());
        assert_eq!(none.resolve("x", "y", &[]).unwrap_err(), NamespaceCallError::UnknownNamespace("x".to_string()));
    }

    /// An implementation that holds no texts gets each namespace serialized, in order.
    #[test]
    fn guest_texts_default_to_the_serialized_namespaces() {
        struct Two(Vec<GuestNamespace>);
        impl RunNamespaces for Two {
            fn guest(&self) -> &[GuestNamespace] {
                &self.0
            }
            fn resolve(&self, namespace: &str, _: &str, _: &[Value]) -> Result<NamespaceCall, NamespaceCallError> {
                Err(NamespaceCallError::UnknownNamespace(namespace.to_string()))
            }
        }
        let ns = |id: &str, data: Value| GuestNamespace {
            id: id.to_string(),
            global_name: id.to_uppercase(),
            data,
            calls: vec![GuestNamespaceCall { path: "run".into(), tool_id: "plugin:p:t".into() }],
        };
        let two = Two(vec![ns("a", serde_json::json!({"x": "é\n"})), ns("b", serde_json::json!({}))]);
        let texts = two.guest_texts();
        assert_eq!(texts.len(), 2);
        for (g, text) in two.guest().iter().zip(texts.iter()) {
            assert_eq!(serde_json::from_str::<GuestNamespace>(text).unwrap(), *g);
        }
    }
}
