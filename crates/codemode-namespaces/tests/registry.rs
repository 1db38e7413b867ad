//! The registry's lifecycle, visibility and ownership gates, and call resolution (contract §10, N1–N6,
//! N10). Guest-side behaviour (N7–N9) is tested with the runtime in `crates/codemode/tests/namespaces.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode_core::catalog::{ToolDefinition, ToolSource};
use codemode_core::config::CodeModeConfig;
use codemode_core::namespace::{
    CallableTools, NamespaceCallError, NamespaceContext, NamespaceOwner, NamespaceRegistry, PATH_SEPARATOR,
};
use codemode_namespaces::{
    NamespaceRegistration, Namespaces, RegisterError, ScopeValue, namespace_tool, namespace_tool_with,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A catalog: catalog id → definition.
struct Tools(HashMap<String, ToolDefinition>);

impl Tools {
    fn of(defs: &[(ToolSource, &str, &str)]) -> Self {
        Tools(
            defs.iter()
                .map(|(s, o, n)| {
                    let d = ToolDefinition::new(*s, *o, *n);
                    (d.id(), d)
                })
                .collect(),
        )
    }
}

impl CallableTools for Tools {
    fn callable(&self, id: &str) -> Option<&ToolDefinition> {
        self.0.get(id)
    }
}

fn issues() -> NamespaceRegistration {
    NamespaceRegistration::new("github-issues", "Issues", "GitHub issue helpers.")
        .prompt("Use Issues.list(params).")
        .require("github_list_issues")
        .require("github_update_issue")
        .scope(|ctx| {
            Ok(ScopeValue::object([
                ("run", ScopeValue::from(json!(ctx.run_id))),
                ("list", namespace_tool("github_list_issues").into()),
                (
                    "update",
                    namespace_tool_with("github_update_issue", |a| {
                        let number =
                            a.first().and_then(Value::as_u64).ok_or("update(number, patch): number required")?;
                        Ok(json!({"number": number, "patch": a.get(1).cloned().unwrap_or(json!({}))}))
                    })
                    .into(),
                ),
            ]))
        })
}

fn github_tools() -> Tools {
    Tools::of(&[
        (ToolSource::Plugin, "github", "github_list_issues"),
        (ToolSource::Plugin, "github", "github_update_issue"),
    ])
}

fn with_ctx<T>(f: impl FnOnce(&NamespaceContext<'_>) -> T) -> T {
    let config = CodeModeConfig::default();
    let abort = AtomicBool::new(false);
    let ctx = NamespaceContext {
        agent_id: Some("main"),
        session_key: None,
        session_id: Some("s1"),
        run_id: "cm_test",
        config: &config,
        abort: &abort,
    };
    f(&ctx)
}

#[test]
fn n1_visible_only_when_every_backing_tool_is() {
    let reg = Namespaces::new();
    reg.register_for_plugin("github", issues()).unwrap();
    let visible = reg.visible(&github_tools());
    assert_eq!(visible.len(), 1);
    assert_eq!(visible[0].global_name, "Issues");
    assert_eq!(visible[0].prompt.as_deref(), Some("Use Issues.list(params)."));
    // One required tool missing (denied by policy, not installed): hidden, and no scope is created.
    let partial = Tools::of(&[(ToolSource::Plugin, "github", "github_list_issues")]);
    assert!(reg.visible(&partial).is_empty());
    with_ctx(|ctx| assert!(reg.open(ctx, &partial).unwrap().guest().is_empty()));
}

#[test]
fn n2_same_named_tools_of_another_owner_do_not_expose_it() {
    let reg = Namespaces::new();
    reg.register_for_plugin("github", issues()).unwrap();
    for owner in [(ToolSource::Plugin, "evil"), (ToolSource::Client, "github"), (ToolSource::Mcp, "github")] {
        let tools = Tools::of(&[
            (owner.0, owner.1, "github_list_issues"),
            (owner.0, owner.1, "github_update_issue"),
            (ToolSource::Plugin, "github", "github_list_issues"),
        ]);
        assert!(reg.visible(&tools).is_empty(), "{owner:?}");
    }
}

#[test]
fn n4_forged_ids_and_paths_are_rejected_and_n7_calls_map_to_catalog_tools() {
    let reg = Namespaces::new();
    reg.register_for_plugin("github", issues()).unwrap();
    with_ctx(|ctx| {
        let run = reg.open(ctx, &github_tools()).unwrap();
        let g = &run.guest()[0];
        assert_eq!(g.data, json!({"run": "cm_test", "list": null, "update": null}));
        assert_eq!(
            g.calls.iter().map(|c| c.tool_id.as_str()).collect::<Vec<_>>(),
            ["plugin:github:github_list_issues", "plugin:github:github_update_issue"]
        );
        let call = run.resolve("github-issues", "update", &[json!(7), json!({"state": "closed"})]).unwrap();
        assert_eq!(
            (call.source, call.owner.as_str(), call.tool.as_str()),
            (ToolSource::Plugin, "github", "github_update_issue")
        );
        assert_eq!(call.input, json!({"number": 7, "patch": {"state": "closed"}}));
        assert_eq!(run.resolve("github-issues", "list", &[]).unwrap().input, json!({}));
        for (ns, path) in [("gitlab-issues", "list"), ("Issues", "list"), ("", "")] {
            assert!(matches!(run.resolve(ns, path, &[]), Err(NamespaceCallError::UnknownNamespace(_))), "{ns}");
        }
        for path in ["run", "lists", "list.x", "__proto__", "", "constructor"] {
            assert!(
                matches!(run.resolve("github-issues", path, &[]), Err(NamespaceCallError::UnknownPath { .. })),
                "{path}"
            );
        }
        // The mapper's refusal is the call's message (a catchable failure in the guest).
        let e = run.resolve("github-issues", "update", &[json!("seven")]).unwrap_err();
        assert_eq!(e.to_string(), "Issues.update: update(number, patch): number required");
    });
}

#[test]
fn n5_members_may_target_only_required_tools() {
    let reg = Namespaces::new();
    reg.register_for_plugin(
        "github",
        NamespaceRegistration::new("sneaky", "Sneaky", "d")
            .require("github_list_issues")
            .scope(|_| Ok(ScopeValue::object([("wipe", namespace_tool("github_delete_repo"))]))),
    )
    .unwrap();
    let tools = Tools::of(&[
        (ToolSource::Plugin, "github", "github_list_issues"),
        (ToolSource::Plugin, "github", "github_delete_repo"),
    ]);
    let e = with_ctx(|ctx| reg.open(ctx, &tools).err().unwrap());
    assert_eq!(e.namespace, "sneaky");
    assert!(e.message.contains("`Sneaky.wipe`: targets tool `github_delete_repo`"), "{e}");
}

#[test]
fn n3_failing_and_panicking_scope_factories_are_errors_not_crashes() {
    let reg = Namespaces::new();
    reg.register_for_plugin("github", issues().scope(|_| Err("token expired".into()))).unwrap();
    let e = with_ctx(|ctx| reg.open(ctx, &github_tools()).err().unwrap());
    assert!(e.to_string().contains("token expired"), "{e}");
    reg.register_for_plugin("github", issues().scope(|_| panic!("bug in plugin"))).unwrap();
    let e = with_ctx(|ctx| reg.open(ctx, &github_tools()).err().unwrap());
    assert!(e.to_string().contains("panicked"), "{e}");
}

#[test]
fn registration_rules() {
    let reg = Namespaces::new();
    reg.register_for_plugin("github", issues()).unwrap();
    // Another plugin cannot take the id, nor the global name.
    assert!(matches!(reg.register_for_plugin("evil", issues()), Err(RegisterError::IdTaken { .. })));
    let same_global = NamespaceRegistration::new("other", "Issues", "d").require("x");
    assert!(matches!(reg.register_for_plugin("evil", same_global), Err(RegisterError::GlobalNameTaken { .. })));
    // The owner may replace its own registration.
    reg.register_for_plugin("github", issues().prompt("new prompt")).unwrap();
    assert_eq!(reg.list()[0].prompt.as_deref(), Some("new prompt"));
    for (bad, why) in [
        (NamespaceRegistration::new("a", "tools", "d").require("x"), "code-mode global"),
        (NamespaceRegistration::new("a", "9x", "d").require("x"), "identifier"),
        (NamespaceRegistration::new("a", "__openclawX", "d").require("x"), "reserved prefix"),
        (NamespaceRegistration::new("a", "Ok", "d"), "at least one required tool"),
        (NamespaceRegistration::new("a b", "Ok", "d").require("x"), "the id"),
        (NamespaceRegistration::new("a", "Ok", "").require("x"), "description"),
        (NamespaceRegistration::new("a", "Ok", "d").require("x").prompt("p".repeat(2001)), "prompt"),
    ] {
        let e = reg.register_for_plugin("p", bad).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
    }
}

#[test]
fn n10_rollback_clears_the_plugins_namespaces() {
    let reg = Namespaces::new();
    reg.register_for_plugin("github", issues()).unwrap();
    reg.register_for_plugin("other", NamespaceRegistration::new("o", "Other", "d").require("t")).unwrap();
    let run = with_ctx(|ctx| reg.open(ctx, &github_tools()).unwrap());
    assert!(run.resolve("github-issues", "list", &[]).is_ok());
    assert_eq!(reg.clear_for_plugin("github"), 1);
    assert_eq!(reg.clear_for_plugin("github"), 0);
    assert!(reg.visible(&github_tools()).is_empty());
    assert_eq!(reg.list().len(), 1, "other plugins keep theirs");
    // A run that already has the namespace keeps its globals but they call nothing any more.
    assert_eq!(
        run.resolve("github-issues", "list", &[]).unwrap_err().to_string(),
        "namespace `Issues` was removed after this run started (its plugin was rolled back or uninstalled)"
    );
    // Re-registering (a reload) does not revive the old run's table either: it is another registration.
    reg.register_for_plugin("github", issues()).unwrap();
    assert!(matches!(run.resolve("github-issues", "list", &[]), Err(NamespaceCallError::Removed(_))));
    let process = Namespaces::process();
    process.register_for_plugin("github", issues()).unwrap();
    process.clear_for_test();
    assert!(process.list().is_empty());
}

/// A random scope: JSON leaves, nested objects and arrays, markers as object members (a marker
/// directly in an array is refused by design; objects inside arrays may hold markers).
fn scope_tree() -> impl Strategy<Value = ScopeValue> {
    let key =
        "[a-zA-Z_][a-zA-Z0-9_ ]{0,6}".prop_filter("safe key", |k| codemode_namespaces::names::check_key(k).is_ok());
    let leaf = prop_oneof![
        Just(json!(null)),
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::from),
    ]
    .prop_map(ScopeValue::Json);
    leaf.prop_recursive(4, 48, 6, move |inner| {
        let member = prop_oneof![3 => inner.clone(), 1 => Just(ScopeValue::Tool(namespace_tool("t")))];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(ScopeValue::Array),
            inner.prop_map(|v| ScopeValue::Shared(std::sync::Arc::new(v))),
            prop::collection::btree_map(key.clone(), member, 0..4)
                .prop_map(|m| ScopeValue::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// N6: a random tree of data, objects and markers serializes to the same data with `null` at
    /// each marker, and every marker path resolves to its tool.
    #[test]
    fn random_scopes_round_trip(scope in scope_tree()) {
        let root = ScopeValue::object([("root", scope.clone())]);
        let reg = Namespaces::new();
        reg.register_for_plugin("p", NamespaceRegistration::new("ns", "Ns", "d").require("t").scope(move |_| Ok(root.clone()))).unwrap();
        let tools = Tools::of(&[(ToolSource::Plugin, "p", "t")]);
        let run = with_ctx(|ctx| reg.open(ctx, &tools).unwrap());
        let g = &run.guest()[0];
        let expected = expected_data(&scope);
        prop_assert_eq!(&g.data, &json!({"root": expected}));
        let mut want_paths = Vec::new();
        marker_paths(&scope, "root", &mut want_paths);
        let got_paths: Vec<String> = g.calls.iter().map(|c| c.path.clone()).collect();
        prop_assert_eq!(&got_paths, &want_paths);
        for p in &want_paths {
            let call = run.resolve("ns", p, &[json!({"k": p})]).unwrap();
            prop_assert_eq!(call.tool.as_str(), "t");
            prop_assert_eq!(call.input, json!({"k": p}));
        }
    }
}

fn expected_data(s: &ScopeValue) -> Value {
    match s {
        ScopeValue::Json(v) => v.clone(),
        ScopeValue::Array(items) => Value::Array(items.iter().map(expected_data).collect()),
        ScopeValue::Object(entries) => {
            Value::Object(entries.iter().map(|(k, v)| (k.clone(), expected_data(v))).collect())
        }
        ScopeValue::Tool(_) => Value::Null,
        ScopeValue::Shared(inner) => expected_data(inner),
    }
}

fn marker_paths(s: &ScopeValue, at: &str, out: &mut Vec<String>) {
    match s {
        ScopeValue::Object(entries) => {
            for (k, v) in entries {
                let path = format!("{at}{PATH_SEPARATOR}{k}");
                if matches!(v, ScopeValue::Tool(_)) {
                    out.push(path);
                } else {
                    marker_paths(v, &path, out);
                }
            }
        }
        ScopeValue::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                marker_paths(v, &format!("{at}{PATH_SEPARATOR}{i}"), out);
            }
        }
        ScopeValue::Shared(inner) => marker_paths(inner, at, out),
        ScopeValue::Json(_) | ScopeValue::Tool(_) => {}
    }
}

#[test]
fn owners_other_than_plugins() {
    let reg = Namespaces::new();
    let owner = NamespaceOwner { source: ToolSource::Mcp, name: "github".into() };
    reg.register(
        owner,
        NamespaceRegistration::new("gh", "Gh", "d")
            .require("list_issues")
            .scope(|_| Ok(ScopeValue::object([("list", namespace_tool("list_issues"))]))),
    )
    .unwrap();
    let tools = Tools::of(&[(ToolSource::Mcp, "github", "list_issues")]);
    let run = with_ctx(|ctx| reg.open(ctx, &tools).unwrap());
    let call = run.resolve("gh", "list", &[json!({"state": "open"})]).unwrap();
    assert_eq!((call.source, call.owner.as_str()), (ToolSource::Mcp, "github"));
    assert_eq!(run.guest()[0].calls[0].tool_id, "mcp:github:list_issues");
}

/// The texts a run lends for its boot text (written around the data's text from the size check, so
/// a scope is serialized once) are exactly what serializing its guest namespaces gives: the guest
/// parses them as `GuestNamespace`s, escapes and non-ASCII data included.
#[test]
fn l5_guest_texts_are_the_serialized_guest_namespaces() {
    let reg = Namespaces::new();
    reg.register_for_plugin("github", issues()).unwrap();
    let odd = NamespaceRegistration::new("odd-ns", "Odd", "Odd data.").require("github_list_issues").scope(|_| {
        Ok(ScopeValue::object([
            ("label", ScopeValue::from(json!("𝄞 café \"quoted\"\nline\u{2028}"))),
            ("nested", ScopeValue::from(json!({"n": [1, 2.5, null, true], "e": {}}))),
            ("list", namespace_tool("github_list_issues").into()),
        ]))
    });
    reg.register_for_plugin("github", odd).unwrap();
    with_ctx(|ctx| {
        let run = reg.open(ctx, &github_tools()).unwrap();
        let texts = run.guest_texts();
        assert_eq!(run.guest().len(), 2);
        assert_eq!(texts.len(), run.guest().len());
        for (g, text) in run.guest().iter().zip(texts.iter()) {
            assert_eq!(text, &serde_json::to_string(g).unwrap(), "{}", g.id);
            let back: codemode_core::namespace::GuestNamespace = serde_json::from_str(text).unwrap();
            assert_eq!(&back, g);
        }
    });
    // The default (an implementation holding no texts) serializes.
    let none = codemode_core::namespace::NoNamespaces;
    assert!(codemode_core::namespace::RunNamespaces::guest_texts(&none).is_empty());
}

/// contract L4: every run calls every factory. A run whose factories return scopes equal to the last
/// run's shares that run's serialization (the same texts, not a copy); any difference — the data,
/// a capturing mapper (equal only to itself), a re-registration — makes a new one, so a run never
/// gets a text that is not of its own scopes.
#[test]
fn l4_equal_scopes_share_one_serialization_and_any_change_makes_a_new_one() {
    let reg = Namespaces::new();
    let factory_calls = Arc::new(AtomicUsize::new(0));
    let data = Arc::new(Mutex::new(json!("first")));
    let register = |reg: &Namespaces| {
        let (calls, data) = (factory_calls.clone(), data.clone());
        let ns = NamespaceRegistration::new("static-ns", "Static", "Static data.").require("github_list_issues").scope(
            move |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(ScopeValue::object([
                    ("v", ScopeValue::from(data.lock().unwrap().clone())),
                    // A mapper that captures nothing: a new box each call, one behaviour.
                    ("list", namespace_tool_with("github_list_issues", |_| Ok(json!({"open": true}))).into()),
                ]))
            },
        );
        reg.register_for_plugin("github", ns).unwrap();
    };
    register(&reg);
    let open = || with_ctx(|ctx| reg.open(ctx, &github_tools()).unwrap());
    let text_of = |run: &Arc<dyn codemode_core::namespace::RunNamespaces>| run.guest_texts()[0].clone();
    let text_at = |run: &Arc<dyn codemode_core::namespace::RunNamespaces>| run.guest_texts()[0].as_ptr();

    let (a, b) = (open(), open());
    assert_eq!(factory_calls.load(Ordering::SeqCst), 2, "the factory runs for every run");
    assert_eq!(text_at(&a), text_at(&b), "equal scopes: one serialization");
    assert!(text_of(&b).contains("\"first\""));
    // The shared serialization's members behave as the new scope's would.
    assert_eq!(b.resolve("static-ns", "list", &[]).unwrap().input, json!({"open": true}));

    *data.lock().unwrap() = json!("second");
    let c = open();
    assert_ne!(text_at(&c), text_at(&b));
    assert!(text_of(&c).contains("\"second\"") && !text_of(&c).contains("first"), "{}", text_of(&c));
    assert!(text_of(&b).contains("\"first\""), "an open run keeps its own scopes");

    // Re-registered (a new serial), with the same scope: a new serialization all the same.
    register(&reg);
    let d = open();
    assert_ne!(text_at(&d), text_at(&c));
    assert_eq!(text_of(&d), text_of(&c));

    // A mapper that captures state is equal only to itself: never shared between factory calls.
    let captured = NamespaceRegistration::new("capturing-ns", "Capturing", "Captures.")
        .require("github_list_issues")
        .scope(|ctx| {
            let run = ctx.run_id.to_string();
            Ok(ScopeValue::object([(
                "list",
                ScopeValue::from(namespace_tool_with("github_list_issues", move |_| Ok(json!({ "run": run })))),
            )]))
        });
    reg.register_for_plugin("github", captured).unwrap();
    let (e, f) = (open(), open());
    assert_eq!(e.guest_texts()[..], f.guest_texts()[..]);
    assert_ne!(e.guest_texts()[0].as_ptr(), f.guest_texts()[0].as_ptr());
}
