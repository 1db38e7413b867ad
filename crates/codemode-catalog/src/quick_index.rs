//! The quick index and the `exec` description (contract §5.1, A): what the model learns about the hidden
//! catalog without seeing any schema.
//!
//! The index lists exact core and plugin catalog ids with compact input hints and, for trusted tools
//! with a closed output schema, compact declared-output hints. Tools with declared outputs come first
//! (they let one cell call a tool and use its fields); the rest follow in catalog order; lines are
//! packed greedily under [`QUICK_INDEX_MAX_CHARS`]. MCP and client entries, descriptions and schemas
//! never appear; `tools.search` finds everything else. The text is deterministic for a given catalog,
//! so it is stable for prompt caching.

use crate::Catalog;
use codemode_core::catalog::ToolSource;
use codemode_core::namespace::NamespaceInfo;
use std::sync::Arc;

/// Character budget of the quick index.
pub const QUICK_INDEX_MAX_CHARS: usize = 3000;

/// The rendered quick index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuickIndex {
    /// The lines, joined by newlines.
    pub text: String,
    /// Catalog ids listed.
    pub listed: Vec<String>,
    /// Eligible ids that did not fit.
    pub omitted: usize,
}

/// One index line: `id(input) → output`.
pub fn line(id: &str, input: &str, output: Option<&str>) -> String {
    match output {
        Some(o) => format!("{id}({input}) → {o}"),
        None => format!("{id}({input})"),
    }
}

/// Builds the quick index of `catalog` under `max_chars`.
pub fn quick_index(catalog: &Catalog, max_chars: usize) -> QuickIndex {
    quick_index_with(catalog, max_chars, &std::collections::BTreeMap::new())
}

/// [`quick_index`] with the result types learned so far, by tool id: a tool without
/// a declared output shows `→ <type> (observed)`. Tools with a declared output come first, then
/// those with an observed one.
pub fn quick_index_with(
    catalog: &Catalog,
    max_chars: usize,
    observed: &std::collections::BTreeMap<String, String>,
) -> QuickIndex {
    let eligible: Vec<_> = catalog
        .tools()
        .iter()
        .filter(|t| t.guest_visible && matches!(t.def.source, ToolSource::Openclaw | ToolSource::Plugin))
        .collect();
    let (with_output, without): (Vec<&Arc<crate::CatalogTool>>, Vec<&Arc<crate::CatalogTool>>) =
        eligible.iter().copied().partition(|t| t.entry.output.is_some());
    let (with_observed, without): (Vec<&Arc<crate::CatalogTool>>, Vec<&Arc<crate::CatalogTool>>) =
        without.into_iter().partition(|t| observed.contains_key(&*t.id));
    let mut used = 0usize;
    let mut lines = Vec::new();
    let mut listed = Vec::new();
    for t in with_output.into_iter().chain(with_observed).chain(without) {
        let learned = observed.get(&*t.id).map(|o| format!("{o} (observed)"));
        let l = line(&t.id, &t.entry.input, t.entry.output.as_deref().or(learned.as_deref()));
        let cost = l.chars().count() + 1;
        if used + cost > max_chars {
            continue;
        }
        used += cost;
        listed.push(t.id.to_string());
        lines.push(l);
    }
    let omitted = eligible.len() - listed.len();
    QuickIndex { text: lines.join("\n"), listed, omitted }
}

/// Longest reason shown for a server that is down.
const MAX_DOWN_REASON_CHARS: usize = 200;

/// The `exec` tool's description: how to use the guest API, the `API` hint when MCP servers are
/// visible, each visible namespace's description and prompt, and the quick index.
pub fn exec_description(catalog: &Catalog, namespaces: &[NamespaceInfo], mcp_servers: &[String]) -> String {
    exec_description_with(catalog, namespaces, mcp_servers, &std::collections::BTreeMap::new())
}

/// [`exec_description`] whose quick index also shows result types learned so far (see
/// [`quick_index_with`]).
pub fn exec_description_with(
    catalog: &Catalog,
    namespaces: &[NamespaceInfo],
    mcp_servers: &[String],
    observed: &std::collections::BTreeMap<String, String>,
) -> String {
    // What the run can reach leads: with only upstream MCP servers (the common
    // `codemode serve` case), `tools.search` would find nothing, so the description starts from `MCP`.
    let down = catalog.unavailable_mcp_servers();
    let mut servers: Vec<String> = mcp_servers.iter().filter(|n| !down.contains_key(*n)).cloned().collect();
    for (name, why) in down {
        let why: String = why.chars().take(MAX_DOWN_REASON_CHARS).collect();
        servers.push(format!("{name} (down: {}; calls fail until it is back)", codemode_core::text::for_display(&why)));
    }
    let mcp_only = catalog.all_tools().is_empty() && !servers.is_empty();
    let mut s = format!(
        "Run a JavaScript program (or TypeScript, with language: \"typescript\") in a sandbox to use {}: loops, joins, \
         parallel calls (Promise.all) and transforms in one step. The code is the body of an async function: use await \
         and return; the return value is the result.",
        if mcp_only { "the MCP servers' tools" } else { "tools" }
    );
    if !mcp_only {
        s.push_str(
            " Tools are functions on `tools`: tools.search(query, {limit}) finds catalog entries, tools.describe(id) \
             gives full schemas, tools.callValue(id, input) returns a tool's value, tools.call(id, input) its raw \
             result, and tools.<name>(input) calls a tool by name. ALL_TOOLS lists the catalog.",
        );
    }
    s.push_str(
        " text(value) and json(value) add output. No imports, files, network or timers. If the result is `waiting`, \
         call `wait` with its runId.",
    );
    if !servers.is_empty() {
        s.push_str(&format!(
            "\n\nMCP servers ({}): read their TypeScript declarations with API.list(\"mcp\") and \
             API.read(\"mcp/<server>.d.ts\"), then call MCP.<server>.<tool>({{...}}) with one object argument; \
             MCP.<server>.$api(tool) shows one tool's schema.",
            servers.join(", ")
        ));
    }
    // contract §10 "Prompts": only namespaces visible in this catalog (the caller passes
    // `NamespaceRegistry::visible` of this very catalog).
    for ns in namespaces {
        s.push_str(&format!("\n\n{}: {}", ns.global_name, ns.description));
        if let Some(p) = &ns.prompt {
            s.push(' ');
            s.push_str(p);
        }
    }
    let index = quick_index_with(catalog, QUICK_INDEX_MAX_CHARS, observed);
    if !index.listed.is_empty() {
        let any_observed = index.listed.iter().any(|id| observed.contains_key(id));
        s.push_str(if any_observed {
            "\n\nQuick index (exact ids; input → declared output, or the output observed so far):\n"
        } else {
            "\n\nQuick index (exact ids; input → declared output):\n"
        });
        s.push_str(&index.text);
        if index.omitted > 0 {
            s.push_str(&format!("\n(+{} more: use tools.search)", index.omitted));
        }
    }
    s
}
