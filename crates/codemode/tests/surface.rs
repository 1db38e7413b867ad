//! Activation and the model surface (contract §4, V1–V4, V12, V14, C4, X4).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::surface::{Activation, ActivationRequest, EXEC, WAIT, activate, exec_input_schema, guard_payload};
use codemode::{CodeModeConfig, CodeModeErrorCode, ToolDefinition, ToolPolicy};
use codemode_catalog::fixtures::{realistic, realistic_with_special_tools};
use serde_json::json;

fn names(a: &Activation) -> Vec<String> {
    a.tools().iter().map(|t| t.name.clone()).collect()
}

fn request(tools: Vec<ToolDefinition>) -> ActivationRequest<'static> {
    ActivationRequest { tools, engine_available: true, ..ActivationRequest::default() }
}

fn policy(doc: serde_json::Value) -> ToolPolicy {
    ToolPolicy::from_document(&doc).unwrap()
}

#[test]
fn v1_v2_disabled_leaves_exposure_unchanged() {
    let tools = realistic(40);
    for config in [
        CodeModeConfig::default(),
        CodeModeConfig::from_value(Some(&json!({"timeoutMs": 5000})), "tools.codeMode").unwrap(),
    ] {
        let a = activate(&config, &ToolPolicy::default(), request(tools.clone())).unwrap();
        assert!(!a.is_code_mode());
        assert_eq!(names(&a), tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>());
        assert_eq!(a.tools()[2].input_schema, tools[2].parameters, "schemas are passed through");
    }
}

#[test]
fn v3_v6_enabled_exposes_exec_wait_and_direct_only_tools() {
    let tools = realistic_with_special_tools(224);
    let a = activate(&CodeModeConfig::enabled(), &ToolPolicy::default(), request(tools)).unwrap();
    assert_eq!(names(&a), [EXEC, WAIT, "computer"]);
    let Activation::CodeMode { catalog, .. } = &a else { panic!() };
    // V12: Tool Search control tools are in neither the surface nor the catalog; V14: shell exec is
    // hidden from the model but catalogued (callable by id).
    assert!(catalog.get("openclaw:core:tool_search").is_none());
    assert!(catalog.guest_tool("openclaw:core:exec").is_some());
    assert!(guard_payload(&a, &["wait", "exec", "computer"]).is_ok());
    for bad in
        [&["exec", "wait", "computer", "web_search"][..], &["exec", "wait"], &["exec", "exec", "wait", "computer"]]
    {
        let e = guard_payload(&a, bad).unwrap_err();
        assert_eq!(e.code, Some(CodeModeErrorCode::InternalError), "{bad:?}");
    }
}

#[test]
fn v4_tool_less_runs_do_not_activate() {
    let cfg = CodeModeConfig::enabled();
    let tools = realistic(30);
    let raw =
        activate(&cfg, &ToolPolicy::default(), ActivationRequest { raw: true, ..request(tools.clone()) }).unwrap();
    assert!(!raw.is_code_mode() && raw.tools().is_empty());
    let off =
        activate(&cfg, &ToolPolicy::default(), ActivationRequest { disable_tools: true, ..request(tools.clone()) })
            .unwrap();
    assert!(!off.is_code_mode() && off.tools().is_empty());
    let empty = activate(&cfg, &policy(json!({"tools": {"allow": []}})), request(tools.clone())).unwrap();
    assert!(!empty.is_code_mode() && empty.tools().is_empty());
    assert!(guard_payload(&empty, &[]).is_ok(), "no payload enforcement for tool-less runs");
    let none = activate(&cfg, &ToolPolicy::default(), request(Vec::new())).unwrap();
    assert!(!none.is_code_mode());
}

#[test]
fn c4_enabled_without_runtime_fails_closed() {
    let e = activate(
        &CodeModeConfig::enabled(),
        &ToolPolicy::default(),
        ActivationRequest { engine_available: false, ..request(realistic(10)) },
    )
    .unwrap_err();
    assert_eq!(e.code, Some(CodeModeErrorCode::RuntimeUnavailable));
}

#[test]
fn x4_exec_schema_uses_a_flat_enum() {
    let s = exec_input_schema();
    assert_eq!(s["properties"]["language"]["enum"], json!(["javascript", "typescript"]));
    let text = s.to_string();
    assert!(!text.contains("oneOf") && !text.contains("anyOf"));
}

#[test]
fn surface_is_over_90_percent_smaller_at_200_tools() {
    let tools = realistic(200);
    let off = activate(&CodeModeConfig::default(), &ToolPolicy::default(), request(tools.clone())).unwrap();
    let on = activate(&CodeModeConfig::enabled(), &ToolPolicy::default(), request(tools)).unwrap();
    let (a, b) = (serde_json::to_string(off.tools()).unwrap().len(), serde_json::to_string(on.tools()).unwrap().len());
    // The real figure, without slack: 54,268 bytes direct, 4,662 with code mode, 91.4 %
    // smaller. The exec description carries a size-capped quick index, so the code-mode side stays
    // flat as the catalog grows, and 95 % is passed by 400 tools.
    assert!(b * 10 < a, "direct {a} bytes, code mode {b} bytes: {:.1} % smaller", 100.0 - 100.0 * b as f64 / a as f64);
    let tools = realistic(400);
    let off = activate(&CodeModeConfig::default(), &ToolPolicy::default(), request(tools.clone())).unwrap();
    let on = activate(&CodeModeConfig::enabled(), &ToolPolicy::default(), request(tools)).unwrap();
    let (a, b) = (serde_json::to_string(off.tools()).unwrap().len(), serde_json::to_string(on.tools()).unwrap().len());
    assert!(b * 20 < a, "400 tools: direct {a} bytes, code mode {b} bytes");
}

/// The README's embedding snippet is the `embed` example's own code (which `make test`
/// compiles), line for line, so it cannot drift into a fragment that does not compile.
#[test]
fn the_readme_embedding_snippet_is_the_compiled_example() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../../README.md")).unwrap();
    let example = std::fs::read_to_string(root.join("examples/embed.rs")).unwrap();
    let section = readme.split("## Embedding").nth(1).unwrap();
    let snippet = section.split("```rust\n").nth(1).unwrap().split("```").next().unwrap();
    let lines: Vec<&str> = snippet.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    assert!(lines.len() >= 10, "{snippet}");
    let body: Vec<&str> = example.lines().map(str::trim).collect();
    let at = body.iter().position(|l| *l == lines[0]).unwrap_or_else(|| panic!("`{}` is not in embed.rs", lines[0]));
    assert_eq!(&body[at..at + lines.len()], &lines[..], "the README snippet differs from examples/embed.rs");
}
