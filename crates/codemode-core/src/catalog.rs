//! Tool definitions and catalog entries (contract §7, §11).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// Where a tool comes from, in catalog order (contract §11): core → plugin → MCP → client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolSource {
    /// Core tools of the host (ids `openclaw:core:<name>`).
    Openclaw,
    /// Bundled or external plugin tools (ids `plugin:<plugin-id>:<name>`).
    Plugin,
    /// Tools of upstream MCP servers (ids `mcp:<server>:<name>`); never in the guest's `tools.*` views.
    Mcp,
    /// Tools provided by the client for the current run (ids `client:<owner>:<name>`).
    Client,
}

impl ToolSource {
    /// The wire spelling, also the first segment of catalog ids.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolSource::Openclaw => "openclaw",
            ToolSource::Plugin => "plugin",
            ToolSource::Mcp => "mcp",
            ToolSource::Client => "client",
        }
    }

    /// Whether tools of this source are trusted local code whose output schemas may enable hints and
    /// contracts (contract D6): core and plugin tools are; MCP and client tools are not.
    pub fn is_trusted(self) -> bool {
        matches!(self, ToolSource::Openclaw | ToolSource::Plugin)
    }
}

impl fmt::Display for ToolSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a host declares about one tool it can run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDefinition {
    /// The tool's name as the model would see it in direct mode (e.g. `web_search`).
    pub name: String,
    /// A short human label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// What the tool does.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the input object.
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
    /// JSON Schema of the result's `details` value (contract §8); only honoured for trusted sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Where the tool comes from.
    pub source: ToolSource,
    /// The owner: `core` for core tools, the plugin id, the MCP server name, or the client name.
    pub owner: String,
    /// The tool has no side effects, so repeating a call is harmless. A resuming process may re-issue
    /// such a call if the original was lost, `restartSafe` cells may call it (contract R1), and
    /// `approvals.requireUnlessReadOnly` does not gate it. A host declares it for its own tools; for
    /// an upstream MCP tool it comes from the configuration (an upstream server's `readOnlyHint` is
    /// believed only for a server the configuration trusts), see
    /// [`read_only_source`](Self::read_only_source).
    #[serde(default)]
    pub read_only: bool,
    /// Where [`read_only`](Self::read_only) came from, for the operator (`codemode catalog`): a
    /// configuration key, a trusted server's annotation, or why an annotation was not believed.
    /// `None`: declared by the host with the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_source: Option<String>,
    /// The tool's declared output schema is trusted although its source is not (an upstream server
    /// the configuration trusts): it becomes a contract that refuses results that do not match it,
    /// like a host tool's. See [`output_is_trusted`](Self::output_is_trusted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trusted_output: bool,
    /// The tool stays model-visible in code mode and never enters `ALL_TOOLS` (contract §1, V6).
    #[serde(default)]
    pub direct_only: bool,
    /// For plugin tools: the plugin is external (installed), not bundled. External plugin tools come
    /// after bundled ones in the catalog (contract §11).
    #[serde(default)]
    pub external: bool,
    /// The input schema is not enforced at the bridge: calls go to the tool whatever their input
    /// (`validateInputs: false` on an MCP server whose schemas do not describe what it accepts).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unchecked_input: bool,
}

fn empty_object_schema() -> Value {
    serde_json::json!({ "type": "object", "properties": {} })
}

impl ToolDefinition {
    /// A definition with an empty object input schema.
    pub fn new(source: ToolSource, owner: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            label: None,
            description: String::new(),
            parameters: empty_object_schema(),
            output_schema: None,
            source,
            owner: owner.into(),
            read_only: false,
            read_only_source: None,
            trusted_output: false,
            direct_only: false,
            external: false,
            unchecked_input: false,
        }
    }

    /// Sets the description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets the label.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Sets the input schema.
    pub fn with_parameters(mut self, schema: Value) -> Self {
        self.parameters = schema;
        self
    }

    /// Sets the output schema.
    pub fn with_output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Marks the tool read-only / idempotent.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Says where [`read_only`](Self::read_only) came from (see
    /// [`read_only_source`](Self::read_only_source)).
    pub fn with_read_only_source(mut self, source: impl Into<String>) -> Self {
        self.read_only_source = Some(source.into());
        self
    }

    /// Lets calls through whatever their input (see [`unchecked_input`](Self::unchecked_input)).
    pub fn without_input_check(mut self) -> Self {
        self.unchecked_input = true;
        self
    }

    /// Whether the declared output schema is a contract (checked before a result reaches the guest)
    /// and a type the catalog states as the tool's: for trusted sources, and for tools marked
    /// [`trusted_output`](Self::trusted_output). Otherwise it is shown as the server's unverified
    /// claim only.
    pub fn output_is_trusted(&self) -> bool {
        self.source.is_trusted() || self.trusted_output
    }

    /// The catalog id `<source>:<owner>:<name>` (contract §11).
    pub fn id(&self) -> String {
        catalog_id(self.source, &self.owner, &self.name)
    }
}

/// The catalog id `<source>:<owner>:<name>` of a tool (contract §11): the one place the scheme is spelled.
pub fn catalog_id(source: ToolSource, owner: &str, name: &str) -> String {
    format!("{source}:{owner}:{name}")
}

/// A tool's catalog id (see [`catalog_id`]), as the catalog and every nested call of the tool
/// carry it: shared text, so a call's copy is a reference count, not an allocation. Reads as a
/// `&str` (`Deref`, [`ToolId::as_str`]), compares with string types, serializes as the string.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ToolId(std::sync::Arc<str>);

impl ToolId {
    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for ToolId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for ToolId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for ToolId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<String> for ToolId {
    fn from(s: String) -> Self {
        ToolId(s.into())
    }
}

impl From<&str> for ToolId {
    fn from(s: &str) -> Self {
        ToolId(s.into())
    }
}

impl From<ToolId> for String {
    fn from(id: ToolId) -> Self {
        id.0.to_string()
    }
}

impl fmt::Display for ToolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ToolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl PartialEq<str> for ToolId {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for ToolId {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for ToolId {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<ToolId> for str {
    fn eq(&self, other: &ToolId) -> bool {
        self == &*other.0
    }
}

impl PartialEq<ToolId> for &str {
    fn eq(&self, other: &ToolId) -> bool {
        *self == &*other.0
    }
}

impl PartialEq<ToolId> for String {
    fn eq(&self, other: &ToolId) -> bool {
        **self == *other.0
    }
}

/// A compact catalog entry as the guest sees it in `ALL_TOOLS` and `tools.search` (contract §7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCatalogEntry {
    /// Exact catalog id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Human label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Description.
    pub description: String,
    /// Source.
    pub source: ToolSource,
    /// Owner (plugin id, server name, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_name: Option<String>,
    /// Compact input hint, e.g. `{query: string, count?: number}`.
    pub input: String,
    /// Compact declared-output hint (trusted tools with a closed output schema only, contract §8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// A catalog entry with its full schemas, as returned by `tools.describe` (contract §7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCatalogEntryWithSchema {
    /// The compact entry.
    #[serde(flatten)]
    pub entry: ToolCatalogEntry,
    /// Full input schema.
    pub parameters: Value,
    /// Full output schema (trusted tools only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared id reads, compares, prints and serializes as the plain string it replaced (stored
    /// runs and events written before keep their form), and a clone shares the text.
    #[test]
    fn a_tool_id_is_its_string_in_every_form() {
        let id = ToolId::from(catalog_id(ToolSource::Plugin, "demo", "demo_echo"));
        assert_eq!(id, "plugin:demo:demo_echo");
        assert_eq!("plugin:demo:demo_echo", id);
        assert_eq!(id, String::from("plugin:demo:demo_echo"));
        assert_ne!(id, "plugin:demo:demo_ech");
        assert_eq!(id.as_str().len(), 21);
        assert_eq!(format!("{id} {id:?}"), r#"plugin:demo:demo_echo "plugin:demo:demo_echo""#);
        assert_eq!(serde_json::to_value(&id).unwrap(), serde_json::json!("plugin:demo:demo_echo"));
        assert_eq!(serde_json::from_str::<ToolId>(r#""mcp:gh:list""#).unwrap(), "mcp:gh:list");
        assert!(serde_json::from_str::<ToolId>("7").is_err());
        let copy = id.clone();
        assert!(std::ptr::eq(copy.as_str(), id.as_str()), "a clone shares the text");
        let map: std::collections::HashMap<ToolId, u8> = [(id, 1)].into();
        assert_eq!(map.get("plugin:demo:demo_echo"), Some(&1), "looked up by &str");
    }

    #[test]
    fn ids_follow_source_owner_name() {
        let d = ToolDefinition::new(ToolSource::Plugin, "demo", "demo_echo");
        assert_eq!(d.id(), "plugin:demo:demo_echo");
        let d = ToolDefinition::new(ToolSource::Openclaw, "core", "exec");
        assert_eq!(d.id(), "openclaw:core:exec");
        assert!(ToolSource::Plugin.is_trusted() && !ToolSource::Mcp.is_trusted());
        assert!(ToolSource::Openclaw < ToolSource::Plugin && ToolSource::Mcp < ToolSource::Client);
    }
}
