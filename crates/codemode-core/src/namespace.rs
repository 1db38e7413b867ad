//! The namespace registry contract (SPEC §10). Minimal for now: the registry decides which namespaces
//! are visible in a run and hands the prelude plain descriptors; the full lifecycle (registration per
//! plugin, scope serialization, ownership gates) lives in `codemode-namespaces`.

use crate::catalog::ToolDefinition;
use serde_json::Value;

/// A namespace visible in one run, already serialized to plain data (SPEC L5).
#[derive(Debug, Clone, PartialEq)]
pub struct NamespaceDescriptor {
    /// The global name (`Issues`).
    pub global_name: String,
    /// Description appended to the `exec` description.
    pub description: String,
    /// Optional prompt appended to the `exec` description.
    pub prompt: Option<String>,
    /// The serialized scope (JSON values plus callable markers).
    pub scope: Value,
}

/// Decides which namespaces a run sees.
pub trait NamespaceRegistry: Send + Sync {
    /// The namespaces visible for a run whose catalog holds `catalog`.
    fn visible(&self, catalog: &[ToolDefinition]) -> Vec<NamespaceDescriptor>;
}

/// A registry with no namespaces.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoNamespaces;

impl NamespaceRegistry for NoNamespaces {
    fn visible(&self, _catalog: &[ToolDefinition]) -> Vec<NamespaceDescriptor> {
        Vec::new()
    }
}
