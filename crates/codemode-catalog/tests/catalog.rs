//! Catalog views, the quick index and the exec description on a fixture catalog of 200+ realistic
//! tools (contract V5–V8, V12, D3–D6, K1–K5).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode_catalog::fixtures::{realistic, realistic_with_special_tools};
use codemode_catalog::policy::{PolicyContext, ToolPolicy};
use codemode_catalog::quick_index::{QUICK_INDEX_MAX_CHARS, exec_description, quick_index};
use codemode_catalog::{Catalog, OutputContract};
use codemode_core::catalog::{ToolDefinition, ToolSource};
use codemode_core::namespace::{NamespaceInfo, NamespaceOwner};
use serde_json::json;

#[test]
fn fixture_has_every_source_and_is_deterministic() {
    let a = realistic(224);
    assert_eq!(a.len(), 224);
    assert_eq!(realistic(224), a);
    for s in [ToolSource::Openclaw, ToolSource::Plugin, ToolSource::Mcp, ToolSource::Client] {
        assert!(a.iter().any(|t| t.source == s));
    }
    assert_eq!(realistic(1000).len(), 1000);
}

#[test]
fn v5_v6_v12_views_and_order() {
    let tools = realistic_with_special_tools(224);
    let cat = Catalog::build(tools.clone());
    let all = cat.all_tools();
    // V5: every eligible non-MCP tool; V6: no direct-only; V12: no Tool Search control tools.
    let eligible =
        tools.iter().filter(|t| t.source != ToolSource::Mcp && !t.direct_only && t.name != "tool_search").count();
    assert_eq!(all.len(), eligible);
    assert!(all.iter().all(|e| e.source != ToolSource::Mcp && e.name != "computer" && e.name != "tool_search"));
    assert!(cat.get("mcp:figma:figma_get").is_some(), "MCP entries stay in the run catalog");
    // Source order: core, bundled plugins, external plugins, MCP, client.
    let order: Vec<(ToolSource, bool)> = cat.tools().iter().map(|t| (t.def.source, t.def.external)).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    let first_external = cat.tools().iter().position(|t| t.def.external).unwrap();
    assert_eq!(cat.tools()[first_external].id, "plugin:zendesk:zendesk_list");
    // Ids are stable across equal tool sets built in another order.
    let mut shuffled = tools.clone();
    shuffled.reverse();
    let again = Catalog::build(shuffled);
    let ids = |c: &Catalog| c.tools().iter().map(|t| t.id.clone()).collect::<std::collections::BTreeSet<_>>();
    assert_eq!(ids(&cat), ids(&again));
}

#[test]
fn v7_denied_tools_are_absent() {
    let policy =
        ToolPolicy::from_document(&json!({"tools": {"deny": ["group:runtime", "github", "*_delete"]}})).unwrap();
    let out = policy.apply(realistic(224), PolicyContext::default());
    let cat = Catalog::build(out.kept);
    let ids: Vec<String> = cat.all_tools().into_iter().map(|e| e.id).collect();
    assert!(!ids.iter().any(|i| i == "openclaw:core:exec" || i.contains(":github:") || i.ends_with("_delete")));
    assert!(cat.guest_tool("openclaw:core:exec").is_none(), "E11: not reachable by a guessed id");
    assert!(ids.contains(&"openclaw:core:read".to_string()));
}

#[test]
fn v8_search_ranks_and_describes() {
    let cat = Catalog::build(realistic(224));
    let hits: Vec<String> = cat.search("create jira ticket", 3).into_iter().map(|e| e.id).collect();
    assert_eq!(hits[0], "plugin:jira:jira_create");
    let hits: Vec<String> = cat.search("read a file", 2).into_iter().map(|e| e.id).collect();
    assert_eq!(hits[0], "openclaw:core:read");
    assert!(cat.search("figma", 5).is_empty(), "MCP tools are not searchable from tools.*");
    let d = cat.describe("plugin:github:github_get").unwrap();
    assert_eq!(d.parameters["required"], json!(["id"]));
    assert!(d.output_schema.is_some());
    assert!(cat.describe("client:postgres:postgres_get").unwrap().output_schema.is_none(), "D6: untrusted sources");
}

#[test]
fn quick_index_snapshot() {
    let cat = Catalog::build(realistic(224));
    let index = quick_index(&cat, QUICK_INDEX_MAX_CHARS);
    assert!(index.text.chars().count() <= QUICK_INDEX_MAX_CHARS);
    // Declared-output tools come first.
    assert!(index.text.lines().next().unwrap().contains(" → "));
    assert!(!index.text.contains("mcp:") && !index.text.contains("client:"));
    assert!(index.omitted > 0);
    insta::assert_snapshot!(
        "quick_index_224",
        format!("listed {} / omitted {}\n{}", index.listed.len(), index.omitted, index.text)
    );
}

#[test]
fn exec_description_snapshot() {
    let cat = Catalog::build(realistic(224));
    let ns = [NamespaceInfo {
        id: "github-issues".into(),
        global_name: "Issues".into(),
        description: "GitHub issue helpers.".into(),
        prompt: Some("Use Issues.list(params).".into()),
        owner: NamespaceOwner::plugin("github"),
        required_tools: vec!["github_list_issues".into()],
    }];
    let text = exec_description(&cat, &ns, &["figma".to_string(), "sentry".to_string()]);
    assert_eq!(
        text,
        exec_description(&Catalog::build(realistic(224)), &ns, &["figma".into(), "sentry".into()]),
        "deterministic"
    );
    insta::assert_snapshot!("exec_description_224", text);
}

/// With only upstream MCP servers (the common `codemode serve` case) the exec
/// description leads with what the run can reach — `MCP.<server>` — not with `tools.search`, which
/// would find nothing; a server that is down is listed with its state, escaped.
#[test]
fn exec_description_of_an_mcp_only_catalog() {
    let cat = Catalog::build([
        ToolDefinition::new(ToolSource::Mcp, "files", "read_file"),
        ToolDefinition::new(ToolSource::Mcp, "files", "list_dir"),
    ])
    .with_unavailable_mcp_servers([("github".to_string(), "cannot start `gh-mcp`\n\u{1b}[2J".to_string())]);
    let text = exec_description(&cat, &[], &["files".to_string()]);
    assert!(text.starts_with("Run a JavaScript program") && text.contains("to use the MCP servers' tools"), "{text}");
    assert!(!text.contains("tools.search"), "{text}");
    assert!(
        text.contains(
            "MCP servers (files, github (down: cannot start `gh-mcp`\\u{a}\\u{1b}[2J; calls fail until it is back))"
        ),
        "{text}"
    );
    // With catalog tools, tools.search leads as before.
    let mixed = Catalog::build(realistic(12));
    assert!(exec_description(&mixed, &[], &[]).contains("tools.search(query"));
}

#[test]
fn d4_output_contracts() {
    let good = ToolDefinition::new(ToolSource::Plugin, "p", "good").with_output_schema(json!({"type": "object", "additionalProperties": false, "properties": {"n": {"type": "integer"}}, "required": ["n"]}));
    let bad = ToolDefinition::new(ToolSource::Plugin, "p", "bad").with_output_schema(json!({"type": 12}));
    let client = ToolDefinition::new(ToolSource::Client, "c", "loose").with_output_schema(json!({"type": 12}));
    let cat = Catalog::build([good, bad, client]);
    let g = cat.get("plugin:p:good").unwrap();
    assert!(g.check_runnable().is_ok());
    assert!(g.check_output(&json!({"n": 1})).is_ok());
    let e = g.check_output(&json!({"n": "one-secret"})).unwrap_err().to_string();
    assert!(e.contains("/n") && e.contains("/properties/n/type"), "{e}");
    assert!(!e.contains("one-secret"), "the withheld value is not quoted: {e}");
    let b = cat.get("plugin:p:bad").unwrap();
    assert!(matches!(b.contract(), Some(OutputContract::Invalid(_))));
    assert!(b.check_runnable().unwrap_err().to_string().contains("cannot run"));
    assert!(cat.get("client:c:loose").unwrap().contract().is_none(), "D6: untrusted metadata never becomes a contract");
}

/// A hostile MCP server's names and descriptions. Tools named like JavaScript internals
/// are reachable only through `$call`; descriptions and parameter names cannot leave their comments;
/// names that are not identifiers (or are reserved words) are never declared as functions.
#[test]
fn hostile_mcp_server_renders_safely() {
    use codemode_catalog::mcp_api::{api_files, api_header, mcp_views};
    let breakout = "*/ declare const pwned: true; /*";
    let names = [
        "then",
        "toString",
        "valueOf",
        "toJSON",
        "constructor",
        "__proto__",
        "$api",
        "$call",
        "delete",
        "get-sum",
        "to-string",
        "line\u{2028}break",
        "echo",
    ];
    let tools = names.iter().map(|n| {
        ToolDefinition::new(ToolSource::Mcp, "hostile", *n)
            .with_description(format!("Tool {n}. {breakout}\nSecond\r{breakout}\u{2028}{breakout}"))
            .with_parameters(json!({"type": "object", "properties": {
                format!("x{breakout}"): {"type": "string", "description": format!("param {breakout}")},
                "ok": {"enum": [breakout, "fine"]},
            }}))
    });
    let cat = Catalog::build(tools);
    let views = mcp_views(&cat);
    let explicit: Vec<&str> = views[0].tools.iter().filter(|t| t.explicit).map(|t| t.name.as_str()).collect();
    assert_eq!(explicit, ["then", "toString", "valueOf", "toJSON", "constructor", "__proto__", "$api", "$call"]);
    let alias = |n: &str| views[0].tools.iter().find(|t| t.name == n).unwrap().alias.clone();
    assert_eq!(alias("to-string"), None, "an alias never becomes an internal name");
    assert_eq!(alias("get-sum").as_deref(), Some("getSum"));
    let files = api_files(&cat);
    let dts = &files["mcp/hostile.d.ts"];
    assert!(!dts.contains('\u{2028}') && !dts.contains('\r'));
    let code = code_outside_comments_and_strings(dts);
    assert!(!code.contains("pwned"), "hostile text outside comments and string literals:\n{code}");
    assert!(code.contains("declare namespace MCP.hostile {"), "{code}");
    assert_eq!(
        api_header(&cat, "hostile", Some("then"), false).unwrap()["tools"][0]["call"],
        "MCP.hostile.$call(\"then\", input)"
    );
    insta::assert_snapshot!("hostile_server_dts", dts);
}

/// The TypeScript source with comments and string literals removed (a lexer, as a TypeScript
/// parser would read it): what is left is what would be declared.
fn code_outside_comments_and_strings(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let (mut i, mut out) = (0, String::new());
    while i < b.len() {
        match (b[i], b.get(i + 1).copied()) {
            ('/', Some('*')) => {
                i += 2;
                while i < b.len() && !(b[i] == '*' && b.get(i + 1) == Some(&'/')) {
                    i += 1;
                }
                i += 2;
            }
            ('/', Some('/')) => {
                while i < b.len() && !matches!(b[i], '\n' | '\r' | '\u{2028}' | '\u{2029}') {
                    i += 1;
                }
            }
            ('"' | '\'', _) => {
                let q = b[i];
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}
