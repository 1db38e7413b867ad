//! # codemode-catalog
//!
//! The run-scoped hidden catalog (contract §7, §11): the effective tool list turned into entries with
//! stable ids `<source>:<owner>:<name>`, in source order (core → plugin → MCP → client), without the
//! control tools. It serves the guest's views — `ALL_TOOLS` (no MCP, no direct-only tools),
//! `tools.search` (BM25), `tools.describe` (full schemas on demand) and the convenience functions
//! `tools.<safeName>` (only for unambiguous names that shadow no helper) — and resolves the exact id of
//! every nested call. Also: the tool policy of contract §22 ([`policy`]), the approval policy ([`approval`]), loop detection of nested calls ([`loops`]), the sandbox tool policy of sandboxed runs ([`sandbox`]), the quick index and the `exec`
//! description ([`quick_index`]), declared output contracts (contract §8, [`OutputContract`]), and a
//! fixture catalog of realistic tools (`fixtures`, behind the `fixtures` feature).
//!
//! Layering (docs/src/layout.md): depends on `codemode-core` only (types, and the guest vocabulary of
//! `codemode_core::guest`: reserved names, boot data); knows no engine and not the bridge, which
//! carries the [`mcp_api::boot_data`] this crate produces.
#![forbid(unsafe_code)]

pub mod approval;
pub mod declarations;
#[cfg(feature = "fixtures")]
pub mod fixtures;
pub mod hints;
pub mod input;
pub mod loops;
pub mod mcp_api;
pub mod names;
pub mod nested;
pub mod observed;
pub mod policy;
pub mod quick_index;
pub mod sandbox;
pub mod search;

use codemode_core::catalog::{ToolCatalogEntry, ToolCatalogEntryWithSchema, ToolDefinition, ToolSource};
use search::{DocFields, SearchIndex};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

/// Names of Tool Search control tools, never catalogued (contract §11, T1, V12).
pub const TOOL_SEARCH_CONTROL_TOOLS: [&str; 4] = ["tool_search_code", "tool_search", "tool_describe", "tool_call"];

/// The owner of codemode's own control tools (`exec`, `wait`), never catalogued (contract B9, V15).
pub const CODEMODE_OWNER: &str = "codemode";

/// Whether a tool is a control tool that must never enter the catalog.
pub fn is_control_tool(def: &ToolDefinition) -> bool {
    TOOL_SEARCH_CONTROL_TOOLS.contains(&def.name.as_str()) || def.owner == CODEMODE_OWNER
}

/// A trusted tool's declared output contract (contract §8), compiled the first time it is needed (the
/// tool's first call), then kept for as long as the tool's catalog entry lives.
pub enum OutputContract {
    /// The schema compiled; results are validated against it.
    Valid(Box<jsonschema::Validator>),
    /// The schema is invalid: the tool cannot run (D4).
    Invalid(String),
}

impl std::fmt::Debug for OutputContract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutputContract::Valid(_) => f.write_str("OutputContract::Valid"),
            OutputContract::Invalid(e) => write!(f, "OutputContract::Invalid({e})"),
        }
    }
}

impl OutputContract {
    fn compile(schema: &Value) -> Self {
        match jsonschema::validator_for(schema) {
            Ok(v) => OutputContract::Valid(Box::new(v)),
            Err(e) => OutputContract::Invalid(e.to_string()),
        }
    }
}

/// One catalogued tool.
#[derive(Debug, Clone)]
pub struct CatalogTool {
    /// The exact id, shared: every nested call of the tool carries it (see
    /// [`NestedToolCall::tool_id`](codemode_core::executor::NestedToolCall::tool_id)) as a reference
    /// count, not a copy.
    pub id: codemode_core::catalog::ToolId,
    /// The definition.
    pub def: Arc<ToolDefinition>,
    /// The compact entry the guest sees.
    pub entry: ToolCatalogEntry,
    /// Whether the tool is in the guest's `ALL_TOOLS` / `tools.*` views (not MCP, not direct-only).
    pub guest_visible: bool,
    /// The declared output contract, compiled on first use: read it through
    /// [`CatalogTool::contract`]. Compiling a schema (and, the first time in a process, JSON
    /// Schema's meta-schema that checks it) took ~1 ms of a `codemode run` process that never
    /// called the tool. Shared by every catalog the entry is cloned into.
    contract: Arc<OnceLock<OutputContract>>,
    /// The check of call inputs against the input schema, compiled on the first call.
    pub input: Arc<input::InputCheck>,
}

/// Why a declared output contract refuses a tool or its result (contract D4).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContractError {
    /// The tool declares an output schema that does not compile: it may not run.
    #[error("`{tool}` declares an invalid output schema ({reason}); the tool cannot run")]
    InvalidSchema {
        /// The catalog id.
        tool: String,
        /// Why the schema is invalid.
        reason: String,
    },
    /// The result does not match the schema. Only locations are kept: the validator's message
    /// would quote the (withheld) value.
    #[error(
        "the result does not match the tool's declared output schema: the value at `{instance_path}` violates `{schema_path}`"
    )]
    Mismatch {
        /// JSON pointer into the result.
        instance_path: String,
        /// JSON pointer into the schema.
        schema_path: String,
    },
}

impl CatalogTool {
    /// The declared output contract (trusted sources with an `outputSchema` only), compiled the
    /// first time it is asked for.
    pub fn contract(&self) -> Option<&OutputContract> {
        let schema = self.def.output_schema.as_ref().filter(|_| self.def.output_is_trusted())?;
        Some(self.contract.get_or_init(|| OutputContract::compile(schema)))
    }

    /// Whether the tool may run: a trusted tool with an invalid output schema may not (contract D4).
    pub fn check_runnable(&self) -> Result<(), ContractError> {
        match self.contract() {
            Some(OutputContract::Invalid(e)) => {
                Err(ContractError::InvalidSchema { tool: self.id.to_string(), reason: e.to_string() })
            }
            _ => Ok(()),
        }
    }

    /// Checks a call's input against the tool's input schema; a tool marked
    /// `unchecked_input` is always [`input::Checked::Valid`].
    pub fn check_input(&self, input: &Value) -> input::Checked {
        if self.def.unchecked_input {
            return input::Checked::Valid;
        }
        self.input.check(&self.def.parameters, input)
    }

    /// Checks a result's `details` against the declared output schema (contract D4). The error names the
    /// first mismatch's location; the value itself must not be emitted. For an MCP tool (a trusted
    /// server's) the schema describes the result's `structuredContent`, which must be there; an
    /// `isError` result is not checked (it fails the call anyway).
    pub fn check_output(&self, details: &Value) -> Result<(), ContractError> {
        let checked = if self.def.source == ToolSource::Mcp {
            if details.get("isError").and_then(Value::as_bool) == Some(true) {
                return Ok(());
            }
            details.get("structuredContent").unwrap_or(&Value::Null)
        } else {
            details
        };
        match self.contract() {
            Some(OutputContract::Valid(v)) => match v.iter_errors(checked).next() {
                None => Ok(()),
                Some(e) => Err(ContractError::Mismatch {
                    instance_path: e.instance_path().to_string(),
                    schema_path: e.schema_path().to_string(),
                }),
            },
            Some(OutputContract::Invalid(e)) => {
                Err(ContractError::InvalidSchema { tool: self.id.to_string(), reason: e.to_string() })
            }
            None => Ok(()),
        }
    }
}

/// The run-scoped catalog.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Shared: a nested call holds its tool for as long as it runs (a reference count, not a copy).
    tools: Vec<Arc<CatalogTool>>,
    /// Looked up on every nested call (see [`codemode_core::hash`]).
    by_id: codemode_core::hash::ToolMap<usize>,
    guest: Vec<usize>,
    conveniences: Vec<(String, String)>,
    index: SearchIndex,
    dropped: Vec<String>,
    /// Upstream MCP servers that are down (failed to start or crashed), with the reason.
    mcp_down: std::collections::BTreeMap<String, String>,
    /// [`Catalog::version`], computed when first asked for (kept by clones: the tools are the same).
    version: std::sync::OnceLock<(String, String)>,
}

/// The first 8 bytes of the SHA-256 of a catalog id, in hex (16 characters whatever the id's
/// length): how a stored run lists the tools it may call (`RunPolicy::tools`).
pub fn tool_hash(id: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(id.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

impl Catalog {
    /// The catalog's version — a hex SHA-256 over its tools' ids and definitions, in id order — and
    /// its tool set (each id's [`tool_hash`], sorted and concatenated), as a stored run records
    /// them. Computed once per catalog, when a run first needs it (a run that suspends).
    pub fn version(&self) -> &(String, String) {
        self.version.get_or_init(|| {
            use sha2::Digest as _;
            let mut tools: Vec<&CatalogTool> = self.tools.iter().map(Arc::as_ref).collect();
            tools.sort_by(|a, b| a.id.cmp(&b.id));
            let mut digest = sha2::Sha256::new();
            for t in &tools {
                digest.update(t.id.as_bytes());
                digest.update([0]);
                digest.update(serde_json::to_vec(t.def.as_ref()).unwrap_or_default());
                digest.update([0]);
            }
            let version = digest.finalize().iter().map(|b| format!("{b:02x}")).collect();
            let mut hashes: Vec<String> = tools.iter().map(|t| tool_hash(&t.id)).collect();
            hashes.sort();
            hashes.dedup();
            (version, hashes.concat())
        })
    }

    /// Builds the catalog from the effective (already policy-filtered) tool list.
    ///
    /// Tools are ordered by source (stable within a source); control tools are left out; a second
    /// tool with an id already taken is left out and reported by [`Catalog::dropped`].
    pub fn build(defs: impl IntoIterator<Item = ToolDefinition>) -> Self {
        let mut defs: Vec<ToolDefinition> = defs.into_iter().filter(|d| !is_control_tool(d)).collect();
        defs.sort_by_key(|d| (d.source, d.source == ToolSource::Plugin && d.external));
        let mut cat = Catalog::default();
        for def in defs {
            let id = def.id();
            if cat.by_id.contains_key(&id) {
                cat.dropped.push(id);
                continue;
            }
            let guest_visible = def.source != ToolSource::Mcp && !def.direct_only;
            let output =
                if def.output_is_trusted() { def.output_schema.as_ref().and_then(hints::output_hint) } else { None };
            let entry = ToolCatalogEntry {
                id: id.clone(),
                name: def.name.clone(),
                label: def.label.clone(),
                description: def.description.clone(),
                source: def.source,
                source_name: Some(def.owner.clone()),
                input: hints::hint(&def.parameters),
                output,
            };
            cat.by_id.insert(id.clone(), cat.tools.len());
            if guest_visible {
                cat.guest.push(cat.tools.len());
            }
            let contract = Arc::default();
            let input = Arc::new(input::InputCheck::default());
            cat.tools.push(Arc::new(CatalogTool {
                id: id.into(),
                def: Arc::new(def),
                entry,
                guest_visible,
                contract,
                input,
            }));
        }
        cat.index = SearchIndex::build(cat.guest.iter().map(|&i| {
            let t = &cat.tools[i];
            DocFields {
                name: &t.def.name,
                id: &t.id,
                label: t.def.label.as_deref(),
                description: &t.def.description,
                owner: &t.def.owner,
            }
        }));
        let mut by_safe: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for &i in &cat.guest {
            let t = &cat.tools[i];
            by_safe.entry(names::safe_name(&t.def.name)).or_default().push(&t.id);
        }
        cat.conveniences = by_safe
            .into_iter()
            .filter(|(name, ids)| ids.len() == 1 && !name.is_empty() && !names::is_reserved(name))
            .map(|(name, ids)| (name, ids[0].to_string()))
            .collect();
        cat
    }

    /// Every catalogued tool, in catalog order (MCP and direct-only tools included).
    pub fn tools(&self) -> &[Arc<CatalogTool>] {
        &self.tools
    }

    /// Number of catalogued tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Catalogued tools per source.
    pub fn count_by_source(&self) -> BTreeMap<String, u32> {
        let mut m = BTreeMap::new();
        for t in &self.tools {
            *m.entry(t.def.source.as_str().to_string()).or_insert(0) += 1;
        }
        m
    }

    /// Ids left out because another tool already had them.
    pub fn dropped(&self) -> &[String] {
        &self.dropped
    }

    /// Marks upstream MCP servers as down, each with the reason (the host restarts them). They stay
    /// in the guest's `MCP` namespace (a call fails with a coded error that says why), in
    /// `API.list("mcp")` and in the model's `exec` description, instead of vanishing.
    pub fn with_unavailable_mcp_servers(mut self, down: impl IntoIterator<Item = (String, String)>) -> Self {
        self.mcp_down.extend(down);
        self
    }

    /// The upstream MCP servers that are down, with the reason.
    pub fn unavailable_mcp_servers(&self) -> &std::collections::BTreeMap<String, String> {
        &self.mcp_down
    }

    /// Any catalogued tool by exact id (MCP included).
    pub fn get(&self, id: &str) -> Option<&Arc<CatalogTool>> {
        self.by_id.get(id).map(|&i| &self.tools[i])
    }

    /// The catalog entry of MCP tool `tool` of server `server` (what `MCP.<server>.<tool>()` calls).
    pub fn mcp_tool(&self, server: &str, tool: &str) -> Option<&Arc<CatalogTool>> {
        self.get(&codemode_core::catalog::catalog_id(ToolSource::Mcp, server, tool))
            .filter(|t| t.def.source == ToolSource::Mcp)
    }

    /// A tool in the guest's views by exact id: what `tools.call` / `tools.describe` accept. MCP and
    /// direct-only tools, and ids that are not catalogued (unknown or denied alike), give `None`.
    pub fn guest_tool(&self, id: &str) -> Option<&Arc<CatalogTool>> {
        self.get(id).filter(|t| t.guest_visible)
    }

    /// A tool the guest can call by exact id: in the guest's views, or an MCP tool (`MCP.*`).
    /// Direct-only and uncatalogued (unknown or denied) ids give `None`.
    pub fn callable(&self, id: &str) -> Option<&Arc<CatalogTool>> {
        self.get(id).filter(|t| t.guest_visible || t.def.source == ToolSource::Mcp)
    }

    /// `ALL_TOOLS`.
    pub fn all_tools(&self) -> Vec<ToolCatalogEntry> {
        self.guest.iter().map(|&i| self.tools[i].entry.clone()).collect()
    }

    /// `(safeName, id)` pairs of the convenience functions.
    pub fn conveniences(&self) -> &[(String, String)] {
        &self.conveniences
    }

    /// `tools.search(query, {limit})`: best matches first.
    pub fn search(&self, query: &str, limit: usize) -> Vec<ToolCatalogEntry> {
        self.index.search(query, limit).into_iter().map(|k| self.tools[self.guest[k]].entry.clone()).collect()
    }

    /// `tools.describe(id)`: the entry with its full schemas (the output schema only for trusted
    /// sources, contract D6).
    pub fn describe(&self, id: &str) -> Option<ToolCatalogEntryWithSchema> {
        self.guest_tool(id).map(|t| ToolCatalogEntryWithSchema {
            entry: t.entry.clone(),
            parameters: t.def.parameters.clone(),
            output_schema: if t.def.output_is_trusted() { t.def.output_schema.clone() } else { None },
        })
    }
}

impl codemode_core::namespace::CallableTools for Catalog {
    fn callable(&self, id: &str) -> Option<&ToolDefinition> {
        Catalog::callable(self, id).map(|t| t.def.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(source: ToolSource, owner: &str, name: &str) -> ToolDefinition {
        ToolDefinition::new(source, owner, name).with_description(format!("The {name} tool."))
    }

    #[test]
    fn order_ids_and_views() {
        let mut direct = def(ToolSource::Openclaw, "core", "computer");
        direct.direct_only = true;
        let cat = Catalog::build([
            def(ToolSource::Client, "app", "select_file"),
            def(ToolSource::Mcp, "github", "create_issue"),
            def(ToolSource::Plugin, "demo", "demo_echo"),
            def(ToolSource::Openclaw, "core", "exec"),
            def(ToolSource::Openclaw, "core", "tool_search"),
            def(ToolSource::Openclaw, CODEMODE_OWNER, "wait"),
            direct,
            def(ToolSource::Plugin, "demo", "demo_echo"),
        ]);
        let ids: Vec<&str> = cat.tools().iter().map(|t| t.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "openclaw:core:exec",
                "openclaw:core:computer",
                "plugin:demo:demo_echo",
                "mcp:github:create_issue",
                "client:app:select_file"
            ]
        );
        assert_eq!(cat.dropped(), ["plugin:demo:demo_echo"]);
        let all: Vec<String> = cat.all_tools().into_iter().map(|e| e.id).collect();
        assert_eq!(all, ["openclaw:core:exec", "plugin:demo:demo_echo", "client:app:select_file"], "V5/V6/E10");
        assert!(cat.guest_tool("mcp:github:create_issue").is_none());
        assert!(cat.get("mcp:github:create_issue").is_some(), "MCP entries stay in the run catalog");
        assert!(cat.describe("openclaw:core:computer").is_none());
        assert_eq!(cat.count_by_source().get("plugin"), Some(&1));
    }

    #[test]
    fn k1_to_k5_convenience_names() {
        let cat = Catalog::build([
            def(ToolSource::Openclaw, "core", "exec"),
            def(ToolSource::Plugin, "a", "web-search"),
            def(ToolSource::Plugin, "b", "web_search"),
            def(ToolSource::Plugin, "a", "search"),
            def(ToolSource::Plugin, "a", "callValue"),
            def(ToolSource::Plugin, "a", "__proto__"),
            def(ToolSource::Plugin, "a", "constructor"),
            def(ToolSource::Plugin, "a", "then"),
            def(ToolSource::Mcp, "gh", "list_repos"),
            def(ToolSource::Plugin, "a", "demo_echo"),
        ]);
        let names: Vec<&str> = cat.conveniences().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["demo_echo", "exec"]);
        assert_eq!(cat.conveniences()[1].1, "openclaw:core:exec");
        // The colliding and reserved tools stay callable by id.
        assert!(cat.guest_tool("plugin:a:search").is_some());
        assert!(cat.guest_tool("plugin:a:__proto__").is_some());
    }

    #[test]
    fn describe_and_output_hints_only_for_trusted_sources() {
        let schema = json!({"type": "object", "additionalProperties": false, "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]});
        let trusted = def(ToolSource::Plugin, "p", "t").with_output_schema(schema.clone());
        let untrusted = def(ToolSource::Client, "c", "u").with_output_schema(schema);
        let cat = Catalog::build([trusted, untrusted]);
        assert_eq!(cat.get("plugin:p:t").unwrap().entry.output.as_deref(), Some("{ok: boolean}"));
        assert_eq!(cat.get("client:c:u").unwrap().entry.output, None);
        assert!(cat.describe("plugin:p:t").unwrap().output_schema.is_some());
        assert!(cat.describe("client:c:u").unwrap().output_schema.is_none());
        assert!(cat.describe("plugin:p:nope").is_none());
    }
}
