//! The guest's view of MCP servers (contract §9): the `MCP.<server>.<tool>()` namespace, its name mapping,
//! the virtual `API` files (`mcp/index.d.ts`, `mcp/<server>.d.ts`) and `$api()` headers — all derived
//! from the MCP entries of the run's catalog (ids `mcp:<server>:<tool>`).
//!
//! **Name mapping (M8).** Every tool is reachable under its exact MCP name
//! (`MCP.everything["get-sum"]`); additionally it gets a camelCase alias (`getSum`: separators `-`,
//! `_`, `.`, ` ` and `/` are dropped and the next letter upper-cased; a leading digit gets a `_`) when
//! that alias is a new, unambiguous identifier: if two tools of a server map to the same alias, or an
//! alias would shadow `$api`, `resources`, `prompts`, `then` or an object-internal key, neither gets
//! the alias. Servers get the same treatment (`chrome-devtools` → `MCP.chromeDevtools`, always also
//! `MCP["chrome-devtools"]`). The mapping is a pure function of the names, so it is deterministic.
//!
//! **Resources and prompts (M6).** A server that supports them contributes two catalog entries with
//! the reserved names [`RESOURCES_READ`] and [`PROMPTS_GET`] (MCP tool names cannot contain `/`), so
//! `MCP.<server>.resources.read()` and `.prompts.get()` are catalog calls like any other.

use crate::Catalog;
use crate::hints::hint;
use codemode_core::catalog::ToolSource;
use codemode_core::guest::{JS_RESERVED_WORDS, MCP_NAMESPACE_HELPERS, is_js_internal_name};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Reserved catalog name of a server's `resources/read`.
pub const RESOURCES_READ: &str = "resources/read";
/// Reserved catalog name of a server's `prompts/get`.
pub const PROMPTS_GET: &str = "prompts/get";

/// Whether a name may not be a property of a namespace object: the language's own names
/// ([`codemode_core::guest::JS_INTERNAL_NAMES`]) and the namespace helpers ([`MCP_NAMESPACE_HELPERS`]).
pub fn is_reserved_member(name: &str) -> bool {
    is_js_internal_name(name) || MCP_NAMESPACE_HELPERS.contains(&name)
}

/// The camelCase alias of an MCP name, if it differs from the name and is an identifier.
pub fn js_alias(name: &str) -> Option<String> {
    let mut out = String::new();
    let mut upper = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.' | ' ' | '/') {
            upper = !out.is_empty();
            continue;
        }
        if !(c.is_ascii_alphanumeric() || c == '$') {
            return None;
        }
        if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    (!out.is_empty() && out != name).then_some(out)
}

/// `(name, alias)` pairs where the alias is unambiguous among `names` and not reserved.
fn aliases<'a>(names: impl Iterator<Item = &'a str> + Clone) -> BTreeMap<String, Option<String>> {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let all: Vec<&str> = names.clone().collect();
    for n in &all {
        if let Some(a) = js_alias(n) {
            *count.entry(a).or_default() += 1;
        }
    }
    all.iter()
        .map(|n| {
            let a = js_alias(n)
                .filter(|a| count.get(a) == Some(&1) && !all.contains(&a.as_str()) && !is_reserved_member(a));
            (n.to_string(), a)
        })
        .collect()
}

pub use codemode_core::guest::{McpServerView, McpToolView};

/// The MCP servers of a catalog, in name order.
pub fn mcp_views(catalog: &Catalog) -> Vec<McpServerView> {
    let mut by_server: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for t in catalog.tools().iter().filter(|t| t.def.source == ToolSource::Mcp) {
        by_server.entry(t.def.owner.as_str()).or_default().push(t.def.name.as_str());
    }
    // A server that is down keeps its place (with the tools it had, if it had any).
    let down = catalog.unavailable_mcp_servers();
    for name in down.keys() {
        by_server.entry(name.as_str()).or_default();
    }
    let server_alias = aliases(by_server.keys().copied());
    by_server
        .iter()
        .map(|(server, names)| {
            let tools: Vec<&str> =
                names.iter().copied().filter(|n| *n != RESOURCES_READ && *n != PROMPTS_GET).collect();
            let tool_alias = aliases(tools.iter().copied());
            McpServerView {
                name: server.to_string(),
                alias: server_alias.get(*server).cloned().flatten(),
                tools: tools
                    .iter()
                    .map(|n| McpToolView {
                        name: n.to_string(),
                        alias: tool_alias.get(*n).cloned().flatten(),
                        explicit: is_reserved_member(n),
                    })
                    .collect(),
                resources: names.contains(&RESOURCES_READ),
                prompts: names.contains(&PROMPTS_GET),
                down: down.get(*server).cloned(),
            }
        })
        .collect()
}

/// A JSON string literal that is also safe inside TypeScript source: U+2028 / U+2029 (line
/// terminators in JavaScript, not escaped by JSON) are escaped too.
fn ts_string(s: &str) -> String {
    Value::String(s.into()).to_string().replace('\u{2028}', "\\u2028").replace('\u{2029}', "\\u2029")
}

/// Text of the server's choosing made safe for a comment: it can neither end a block comment
/// (`*/`) nor a line comment (any line terminator).
fn comment_text(s: &str) -> String {
    s.replace("*/", "*\\/").replace(['\r', '\n', '\u{2028}', '\u{2029}'], " ")
}

/// The lines of a description, split at every JavaScript line terminator, trimmed, without empties.
fn comment_lines(s: &str) -> Vec<String> {
    s.split(['\r', '\n', '\u{2028}', '\u{2029}']).map(str::trim).filter(|l| !l.is_empty()).map(comment_text).collect()
}

/// How the guest writes a tool as a member of its namespace: `getSum`, `["get-sum"]`, or `None`
/// when it is reachable only through `$call`.
fn key(name: &str, alias: Option<&str>, explicit: bool) -> Option<String> {
    match alias {
        Some(a) => Some(a.to_string()),
        None if explicit => None,
        None if is_ident(name) => Some(name.to_string()),
        None => Some(format!("[{}]", ts_string(name))),
    }
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// The expression that calls a tool: `MCP.srv.getSum(input)`, `MCP.srv["get-sum"](input)` or
/// `MCP.srv.$call("then", input)`.
fn call_expr(ns: &str, name: &str, alias: Option<&str>, explicit: bool) -> String {
    match key(name, alias, explicit) {
        Some(k) if k.starts_with('[') => format!("{ns}{k}(input)"),
        Some(k) => format!("{ns}.{k}(input)"),
        None => format!("{ns}.$call({}, input)", ts_string(name)),
    }
}

fn member(parent: &str, name: &str, alias: Option<&str>) -> String {
    match key(name, alias, false) {
        Some(k) if k.starts_with('[') => format!("{parent}{k}"),
        Some(k) => format!("{parent}.{k}"),
        None => parent.to_string(),
    }
}

/// The output an MCP tool declares (its `outputSchema`, which describes the `structuredContent`
/// that `.value()` resolves to), as a one-line TypeScript type, and whether it is checked: only a
/// trusted server's declaration is a contract; any other is the server's unverified claim.
fn declared_output(def: &codemode_core::ToolDefinition) -> Option<(String, bool)> {
    let schema = def.output_schema.as_ref()?;
    let ty = crate::declarations::Declaration::of(schema).inline()?;
    Some((ty, def.output_is_trusted()))
}

/// The `@returns` line of a tool that declares its output; `ty` when the type is not declared on
/// `.value` itself (a tool reached through its call form only).
fn returns_line(ty: Option<&str>, verified: bool) -> String {
    let what = match ty {
        Some(ty) => format!("`.value()` resolves to {ty}"),
        None => "the type of `.value()`".to_string(),
    };
    if verified {
        format!("{what}: declared by the server, and results are checked against it")
    } else {
        format!("{what}: declared by the server, unverified (results are not checked against it)")
    }
}

fn doc_comment(
    out: &mut String,
    indent: &str,
    description: &str,
    params: &Value,
    returns: Option<&str>,
    observed: Option<&str>,
) {
    let desc = comment_lines(description);
    let props = params.get("properties").and_then(Value::as_object);
    let param_docs: Vec<(String, String)> = props
        .map(|p| {
            p.iter()
                .filter_map(|(k, v)| {
                    v.get("description").and_then(Value::as_str).map(|d| (comment_text(k), comment_text(d)))
                })
                .collect()
        })
        .unwrap_or_default();
    if desc.is_empty() && param_docs.is_empty() && returns.is_none() && observed.is_none() {
        return;
    }
    out.push_str(&format!("{indent}/**\n"));
    for l in desc {
        out.push_str(&format!("{indent} * {l}\n"));
    }
    for (k, d) in param_docs {
        out.push_str(&format!("{indent} * @param {k} {d}\n"));
    }
    if let Some(r) = returns {
        out.push_str(&format!("{indent} * @returns {}\n", comment_text(r)));
    }
    if let Some(o) = observed {
        out.push_str(&format!("{indent} * @observed {}\n", comment_text(o)));
    }
    out.push_str(&format!("{indent} */\n"));
}

/// The input type of a tool in a `.d.ts`: its hint, or `object` when the hint was cut short (a cut
/// hint is not valid TypeScript).
fn input_type(schema: &Value) -> String {
    let h = hint(schema);
    if h.ends_with('…') { "object".to_string() } else { h }
}

/// `mcp/index.d.ts`: the shared result type and one line per visible server.
pub fn render_index(views: &[McpServerView]) -> String {
    let mut s = String::from(
        "/** Result of every MCP tool call. Every tool function `f` also has `f.value(input)`: the same call with its result\n * unwrapped: `structuredContent` if the server sent it, else the text parsed as JSON when it is JSON, else the\n * text; a result with `isError` throws a ToolError (code nested_tool_failed) with the server's message. */\ntype McpToolResult = {\n  content?: unknown[];\n  structuredContent?: unknown;\n  isError?: boolean;\n  [key: string]: unknown;\n};\n\n/** Header returned by MCP.<server>.$api(). */\ntype McpApiHeader = {\n  server: string;\n  tools: { name: string; call: string; description: string; input: string; declaration?: string; inputSchema?: unknown;\n    declaredOutput?: { type: string; verified: boolean }; observedOutput?: { type: string; results: number; contradictsDeclaration?: number } }[];\n};\n\n",
    );
    for v in views {
        let state = match &v.down {
            Some(why) => format!(" DOWN ({}): calls fail until it is back", comment_text(why)),
            None => String::new(),
        };
        s.push_str(&format!(
            "/** {} tool(s){state}; read mcp/{}.d.ts */\ndeclare const {}: Record<string, (input?: object) => Promise<McpToolResult>>;\n",
            v.tools.len(),
            comment_text(&v.name),
            member("MCP", &v.name, v.alias.as_deref())
        ));
    }
    s
}

/// `mcp/<server>.d.ts`: every tool of one server with JSDoc from its description and parameter docs.
///
/// Everything of the server's choosing is escaped: descriptions and parameter names cannot end a
/// comment, names that are not identifiers are quoted, names that are reserved words or reserved
/// members are declared as constants with their call form in a comment.
pub fn render_server(catalog: &Catalog, view: &McpServerView) -> String {
    render_server_with(catalog, view, &ObservedDocs::new())
}

/// [`render_server`] with the result types learned so far in each tool's doc comment.
pub fn render_server_with(catalog: &Catalog, view: &McpServerView, observed: &ObservedDocs) -> String {
    let ns = member("MCP", &view.name, view.alias.as_deref());
    let state = match &view.down {
        Some(why) => format!(
            " It is DOWN ({}): codemode restarts it, and every call fails with nested_tool_failed until it is back.",
            comment_text(why)
        ),
        None => String::new(),
    };
    let mut s = format!(
        "/** MCP server `{}`.{state} Every function takes one object argument. */\ndeclare namespace {ns} {{\n",
        comment_text(&view.name)
    );
    s.push_str("  /** This API as data: one tool's header (and its JSON Schema with {schema: true}), or all. */\n");
    s.push_str("  function $api(toolName?: string, options?: { schema?: boolean }): Promise<McpApiHeader>;\n");
    s.push_str(
        "  /** Calls a tool by its exact MCP name (the only way to reach names like `then` or `toString`). */\n",
    );
    s.push_str("  function $call(toolName: string, input?: object): Promise<McpToolResult>;\n");
    for tool in &view.tools {
        let Some(t) = catalog.mcp_tool(&view.name, &tool.name) else { continue };
        s.push('\n');
        let call = call_expr(&ns, &tool.name, tool.alias.as_deref(), tool.explicit);
        if tool.alias.is_some() {
            let exact =
                if tool.explicit { call_expr(&ns, &tool.name, None, true) } else { member(&ns, &tool.name, None) };
            s.push_str(&format!(
                "  // MCP tool {}: also {}\n",
                comment_text(&ts_string(&tool.name)),
                comment_text(&exact)
            ));
        }
        // The full declaration of the input, its `$defs` as aliases named after the
        // tool; the compact hint when the declaration is over its size bound.
        let mut prefix: String =
            tool.alias.as_deref().unwrap_or(&tool.name).chars().filter(|c| c.is_ascii_alphanumeric()).collect();
        if let Some(f) = prefix.get_mut(0..1) {
            f.make_ascii_uppercase();
        }
        let declared =
            crate::declarations::Declaration::of(&t.def.parameters).render("  ", &format!("{prefix}_"), true);
        let input = match declared {
            Some((aliases, root)) => {
                for a in aliases {
                    s.push_str(&format!("  {a}\n"));
                }
                root
            }
            None => input_type(&t.def.parameters),
        };
        let output = declared_output(&t.def);
        let member_form = matches!(key(&tool.name, tool.alias.as_deref(), tool.explicit),
            Some(k) if !k.starts_with('[') && !JS_RESERVED_WORDS.contains(&k.as_str()));
        let returns =
            output.as_ref().map(|(ty, verified)| returns_line((!member_form).then_some(ty.as_str()), *verified));
        doc_comment(
            &mut s,
            "  ",
            &t.def.description,
            &t.def.parameters,
            returns.as_deref(),
            observed.get(&*t.id).map(String::as_str),
        );
        match key(&tool.name, tool.alias.as_deref(), tool.explicit) {
            Some(k) if !k.starts_with('[') && !JS_RESERVED_WORDS.contains(&k.as_str()) => {
                s.push_str(&format!("  function {k}(input: {input}): Promise<McpToolResult>;\n"));
                if let Some((ty, _)) = &output {
                    s.push_str(&format!(
                        "  namespace {k} {{ function value(input: Parameters<typeof {k}>[0]): Promise<{ty}>; }}\n"
                    ));
                }
            }
            _ => {
                let local: String =
                    tool.name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
                s.push_str(&format!(
                    "  // MCP tool {}: call as {}\n  const _{local}: (input: {input}) => Promise<McpToolResult>;\n",
                    comment_text(&ts_string(&tool.name)),
                    comment_text(&call)
                ));
            }
        }
    }
    if view.resources {
        s.push_str("\n  /** Read a resource by URI. */\n  const resources: { read(input: { uri: string }): Promise<{ contents: unknown[] }> };\n");
    }
    if view.prompts {
        s.push_str("\n  /** Get a prompt by name. */\n  const prompts: { get(input: { name: string; arguments?: Record<string, string> }): Promise<{ description?: string; messages: unknown[] }> };\n");
    }
    s.push_str("}\n");
    s
}

/// What was learned about tools' results, by tool id: the text the `.d.ts` adds to a
/// tool's doc comment (see [`crate::observed::Observed::doc_line`]).
pub type ObservedDocs = BTreeMap<String, String>;

/// The per-run boot data of the guest: `ALL_TOOLS`, the convenience names, the `API` files and the
/// MCP views, all from one catalog (the bridge carries it into the guest).
pub fn boot_data(catalog: &Catalog, max_depth: u32) -> codemode_core::guest::BootData {
    boot_data_with(catalog, max_depth, &ObservedDocs::new())
}

/// [`boot_data`] whose `.d.ts` files also state the result types learned so far.
pub fn boot_data_with(catalog: &Catalog, max_depth: u32, observed: &ObservedDocs) -> codemode_core::guest::BootData {
    let views = mcp_views(catalog);
    codemode_core::guest::BootData {
        tools: catalog.all_tools(),
        conveniences: catalog.conveniences().to_vec(),
        max_depth,
        api_files: api_files_with(catalog, &views, observed),
        mcp: views,
        // Set by the runtime from its approval policy.
        gated: Vec::new(),
        // Per run (scopes are created for each run).
        namespaces: Vec::new(),
    }
}

/// The virtual files of `API.list` / `API.read`: `mcp/index.d.ts` and one per server.
pub fn api_files(catalog: &Catalog) -> BTreeMap<String, String> {
    api_files_of(catalog, &mcp_views(catalog))
}

/// [`api_files`] for views already computed with [`mcp_views`].
pub fn api_files_of(catalog: &Catalog, views: &[McpServerView]) -> BTreeMap<String, String> {
    api_files_with(catalog, views, &ObservedDocs::new())
}

fn api_files_with(catalog: &Catalog, views: &[McpServerView], observed: &ObservedDocs) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    if views.is_empty() {
        return files;
    }
    files.insert("mcp/index.d.ts".to_string(), render_index(views));
    for v in views {
        files.insert(format!("mcp/{}.d.ts", v.name), render_server_with(catalog, v, observed));
    }
    files
}

/// `MCP.<server>.$api(toolName?, {schema?})` (contract M5): headers of one tool or of all of a server's
/// tools; `None` for an unknown server or tool.
pub fn api_header(catalog: &Catalog, server: &str, tool: Option<&str>, schema: bool) -> Option<Value> {
    let views = mcp_views(catalog);
    let view = views.iter().find(|v| v.name == server)?;
    let tools: Vec<&McpToolView> = match tool {
        Some(name) => vec![view.tools.iter().find(|t| t.name == name || t.alias.as_deref() == Some(name))?],
        None => view.tools.iter().collect(),
    };
    let ns = member("MCP", &view.name, view.alias.as_deref());
    let entries: Vec<Value> = tools
        .iter()
        .filter_map(|t| {
            let c = catalog.mcp_tool(&view.name, &t.name)?;
            let mut e = json!({
                "name": t.name,
                "call": call_expr(&ns, &t.name, t.alias.as_deref(), t.explicit),
                "description": c.def.description,
                "input": hint(&c.def.parameters),
            });
            if let Some(d) = crate::declarations::Declaration::of(&c.def.parameters).inline() {
                e["declaration"] = Value::String(d);
            }
            if let Some((ty, verified)) = declared_output(&c.def) {
                e["declaredOutput"] = json!({ "type": ty, "verified": verified });
            }
            if schema {
                e["inputSchema"] = c.def.parameters.clone();
            }
            Some(e)
        })
        .collect();
    Some(json!({ "server": view.name, "tools": entries }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode_core::catalog::ToolDefinition;

    fn mcp(server: &str, name: &str) -> ToolDefinition {
        ToolDefinition::new(ToolSource::Mcp, server, name)
            .with_description(format!("Does {name}."))
            .with_parameters(json!({"type": "object", "properties": {"a": {"type": "number", "description": "First"}}, "required": ["a"]}))
    }

    #[test]
    fn aliases_are_deterministic_and_collision_safe() {
        assert_eq!(js_alias("get-sum").as_deref(), Some("getSum"));
        assert_eq!(js_alias("create_issue").as_deref(), Some("createIssue"));
        assert_eq!(js_alias("chrome-devtools").as_deref(), Some("chromeDevtools"));
        assert_eq!(js_alias("echo"), None);
        assert_eq!(js_alias("2fa-check").as_deref(), Some("_2faCheck"));
        assert_eq!(js_alias("weird!name"), None);
        let cat = Catalog::build([
            mcp("srv", "get-sum"),
            mcp("srv", "get_sum"),
            mcp("srv", "echo"),
            mcp("srv", "read-file"),
            mcp("srv", "readFile"),
            mcp("srv", "$api"),
            mcp("chrome-devtools", "take_snapshot"),
            mcp("srv", RESOURCES_READ),
        ]);
        let views = mcp_views(&cat);
        assert_eq!(views[0].name, "chrome-devtools");
        assert_eq!(views[0].alias.as_deref(), Some("chromeDevtools"));
        let srv = &views[1];
        let alias = |n: &str| srv.tools.iter().find(|t| t.name == n).unwrap().alias.clone();
        assert_eq!(alias("get-sum"), None, "two tools map to getSum: neither gets it");
        assert_eq!(alias("get_sum"), None);
        assert_eq!(alias("read-file"), None, "readFile is already a real tool name");
        assert!(srv.resources && !srv.prompts);
        assert!(!srv.tools.iter().any(|t| t.name == RESOURCES_READ));
    }

    #[test]
    fn declarations_and_headers() {
        let cat = Catalog::build([mcp("everything", "get-sum"), mcp("everything", "echo")]);
        let files = api_files(&cat);
        assert_eq!(files.keys().collect::<Vec<_>>(), ["mcp/everything.d.ts", "mcp/index.d.ts"]);
        let dts = &files["mcp/everything.d.ts"];
        assert!(dts.contains("declare namespace MCP.everything {"), "{dts}");
        assert!(dts.contains("function getSum(input: {\n    a: number;\n  }): Promise<McpToolResult>;"), "{dts}");
        assert!(dts.contains(" * @param a First"), "{dts}");
        let h = api_header(&cat, "everything", Some("getSum"), true).unwrap();
        assert_eq!(h["tools"][0]["name"], "get-sum");
        assert_eq!(h["tools"][0]["call"], "MCP.everything.getSum(input)");
        assert_eq!(h["tools"][0]["declaration"], "{ a: number }");
        assert!(h["tools"][0]["inputSchema"].is_object());
        assert!(api_header(&cat, "everything", None, false).unwrap()["tools"][0].get("inputSchema").is_none());
        assert!(api_header(&cat, "nope", None, false).is_none());
        assert!(api_files(&Catalog::build([])).is_empty());
    }
}
