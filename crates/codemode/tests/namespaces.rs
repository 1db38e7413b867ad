//! Plugin namespaces through the runtime (contract §10): N1–N10 as the guest sees them, on both QuickJS
//! engines. Registry-level rules (ownership, forged ids, serialization) are also tested in
//! `crates/codemode-namespaces/tests/registry.rs`; across processes in `codemode-cli`'s tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    ApprovalPolicy, CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, CodeModeWaitInput,
    NamespaceRegistration, Namespaces, NestedToolCall, RunContext, ScopeValue, ToolError, ToolHook, ToolPolicy,
    namespace_tool, namespace_tool_with,
};
use codemode_demo::{PLUGIN_ID, demo_tools, shipping_namespace};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

const ENGINES: [&str; 2] = ["quickjs-wasi", "quickjs"];

fn config(timeout_ms: u64, pending: u64) -> CodeModeConfig {
    CodeModeConfig::from_value(
        Some(&json!({"enabled": true, "timeoutMs": timeout_ms, "maxPendingToolCalls": pending})),
        "tools.codeMode",
    )
    .unwrap()
}

/// The demo registry plus `Slow.nap(ms)` over `demo_sleep`, to make namespace calls suspend.
fn registry() -> Namespaces {
    let r = Namespaces::new();
    r.register_for_plugin(PLUGIN_ID, shipping_namespace()).unwrap();
    r.register_for_plugin(
        PLUGIN_ID,
        NamespaceRegistration::new("demo-slow", "Slow", "Slow demo calls.").require("demo_sleep").scope(|_| {
            Ok(ScopeValue::object([(
                "nap",
                namespace_tool_with("demo_sleep", |a| Ok(json!({"ms": a.first().cloned().unwrap_or(json!(0))}))),
            )]))
        }),
    )
    .unwrap();
    r
}

fn runtime(engine: &str, registry: &Namespaces, config: CodeModeConfig) -> CodeMode {
    codemode_testing::builder(engine, config).namespaces(Arc::new(registry.clone())).build()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn ctx() -> RunContext {
    RunContext::session("ns-tests")
}

async fn exec(cm: &CodeMode, code: &str) -> CodeModeResult {
    cm.exec(&ctx(), &CodeModeExecInput::code(code)).await
}

/// `wait` until the run is no longer `waiting`.
fn wait_to_end(rt: &tokio::runtime::Runtime, cm: &CodeMode, run_id: &str) -> CodeModeResult {
    let mut r = rt.block_on(cm.wait(&ctx(), &CodeModeWaitInput::new(run_id.to_string())));
    while let CodeModeResult::Waiting { run_id, .. } = &r {
        r = rt.block_on(cm.wait(&ctx(), &CodeModeWaitInput::new(run_id.clone())));
    }
    r
}

fn value(r: &CodeModeResult) -> Value {
    match r {
        CodeModeResult::Completed { value, .. } => value.clone(),
        other => panic!("expected completed, got {}", other.to_json()),
    }
}

#[test]
fn n7_namespace_calls_are_catalog_calls_on_both_engines() {
    let rt = rt();
    for engine in ENGINES {
        let cm = runtime(engine, &registry(), config(10_000, 16));
        let r = rt.block_on(exec(
            &cm,
            r#"
            const over = await Shipping.unpaidOver(15);
            const same = namespaces.Shipping === Shipping;
            const marked = await Shipping.markPaid(over[0].id);
            const after = await Shipping.unpaid();
            return {
              over: over.map((s) => s.id), marked, same, unit: Shipping.unit,
              stillUnpaid: after.some((s) => s.id === over[0].id), unpaidCount: after.length,
              frozen: Object.isFrozen(Shipping) && Object.isFrozen(namespaces) && Object.isFrozen(Shipping.unpaid),
              keys: Object.keys(namespaces), members: Object.keys(Shipping),
            };
            "#,
        ));
        assert_eq!(
            value(&r),
            json!({
                "over": ["SHP-1003", "SHP-1005", "SHP-1010"],
                "marked": {"id": "SHP-1003", "paid": true},
                "same": true, "unit": "tons", "stillUnpaid": false, "unpaidCount": 5, "frozen": true,
                "keys": ["Shipping", "Slow"], "members": ["unit", "unpaid", "unpaidOver", "markPaid"],
            }),
            "{engine}"
        );
        // The calls are counted as the catalog tools they are.
        let t = r.telemetry();
        assert_eq!(t.call_count, 3, "{engine}");
        assert_eq!(
            t.nested_tool_ids,
            ["plugin:demo:demo_shipping_list", "plugin:demo:demo_shipping_mark_paid", "plugin:demo:demo_shipping_list"]
        );
    }
}

#[test]
fn n1_prompt_and_globals_only_when_backing_tools_are_visible() {
    let rt = rt();
    let reg = registry();
    let cm = runtime("quickjs", &reg, config(10_000, 16));
    let desc = cm.exec_tool(&[]).description;
    assert!(desc.contains("Shipping: Shipment helpers of the demo plugin. Use await Shipping.unpaid()"), "{desc}");
    assert!(desc.contains("Slow: Slow demo calls."), "{desc}");
    // The policy removes one backing tool: the namespace leaves the description and the guest.
    let policy = ToolPolicy::from_document(&json!({"tools": {"deny": ["demo_shipping_mark_paid"]}})).unwrap();
    let cm = CodeMode::builder(config(10_000, 16))
        .engine_name("quickjs")
        .local_tools(demo_tools())
        .policy(policy)
        .namespaces(Arc::new(reg.clone()))
        .build();
    assert_eq!(cm.visible_namespaces().iter().map(|n| n.global_name.as_str()).collect::<Vec<_>>(), ["Slow"]);
    let desc = cm.exec_tool(&[]).description;
    assert!(!desc.contains("Shipping"), "{desc}");
    let r = rt.block_on(exec(&cm, "return { t: typeof Shipping, keys: Object.keys(namespaces) };"));
    assert_eq!(value(&r), json!({"t": "undefined", "keys": ["Slow"]}));
}

/// `namespaces` is one non-configurable global accessor, defined with the prelude, on every engine:
/// a run without namespaces sees a frozen, empty, null-prototype root, a run with them its own
/// root; no cell can replace, extend or delete either (contract L5, N4). (`boot` once defined the
/// global per run; now it only points the accessor at the run's root, or leaves the empty one.)
#[test]
fn the_namespaces_global_is_one_accessor_whose_root_no_cell_can_replace() {
    let cell = r#""use strict";
      const errors = [];
      const attempt = (f) => { try { f(); errors.push("allowed"); } catch (e) { errors.push(e.name); } };
      const before = namespaces;
      attempt(() => { namespaces = {}; });
      attempt(() => { globalThis.namespaces = {}; });
      attempt(() => { delete globalThis.namespaces; });
      attempt(() => { Object.defineProperty(globalThis, "namespaces", { value: {} }); });
      attempt(() => { namespaces.Extra = {}; });
      const d = Object.getOwnPropertyDescriptor(globalThis, "namespaces");
      return {
        errors,
        same: namespaces === before && d.get.call(undefined) === before && d.get.call(42) === before,
        keys: Object.keys(namespaces),
        proto: Object.getPrototypeOf(namespaces) === null,
        frozen: Object.isFrozen(namespaces),
        descriptor: [typeof d.get, d.set, d.enumerable, d.configurable, "value" in d],
        listed: Object.keys(globalThis).includes("namespaces"),
      };
    "#;
    let rt = rt();
    for engine in ["quickjs-wasi", "quickjs", "boa"] {
        let without = CodeMode::builder(config(10_000, 16)).engine_name(engine).local_tools(demo_tools()).build();
        let with = runtime(engine, &registry(), config(10_000, 16));
        for (cm, keys) in [(&without, json!([])), (&with, json!(["Shipping", "Slow"])), (&without, json!([]))] {
            let r = rt.block_on(exec(cm, cell));
            assert_eq!(
                value(&r),
                json!({
                    "errors": ["TypeError", "TypeError", "TypeError", "TypeError", "TypeError"],
                    "same": true, "keys": keys, "proto": true, "frozen": true,
                    "descriptor": ["function", null, false, false, false], "listed": false,
                }),
                "{engine}"
            );
        }
    }
}

#[test]
fn n2_a_same_named_tool_of_another_plugin_does_not_expose_it() {
    let rt = rt();
    let reg = Namespaces::new();
    // Plugin `evil` registers a namespace over tool names that only plugin `demo` has.
    reg.register_for_plugin(
        "evil",
        NamespaceRegistration::new("evil-ship", "Ship", "d")
            .require("demo_shipping_list")
            .scope(|_| Ok(ScopeValue::object([("all", namespace_tool("demo_shipping_list"))]))),
    )
    .unwrap();
    let cm = runtime("quickjs", &reg, config(10_000, 16));
    assert!(cm.visible_namespaces().is_empty());
    assert_eq!(value(&rt.block_on(exec(&cm, "return typeof Ship;"))), json!("undefined"));
}

/// Runs `cell` after a strict-mode `attempt(f)` helper (which records `"allowed"` or the error's
/// name in `errors`) on both engines, and checks its value.
fn assert_tampering(cell: &str, expected: Value) {
    const ATTEMPT: &str = r#""use strict";
const errors = [];
const attempt = (f) => { try { f(); errors.push("allowed"); } catch (e) { errors.push(e.name); } };"#;
    let rt = rt();
    for engine in ENGINES {
        let cm = runtime(engine, &registry(), config(10_000, 16));
        let r = rt.block_on(exec(&cm, &format!("{ATTEMPT}\n{cell}")));
        assert_eq!(value(&r), expected, "{engine}");
    }
}

#[test]
fn n4_guest_code_cannot_tamper_with_or_forge_namespace_members() {
    assert_tampering(
        r#"
            attempt(() => { Shipping.unpaid = () => "forged"; });
            attempt(() => { Shipping.extra = 1; });
            attempt(() => { delete Shipping.markPaid; });
            attempt(() => { namespaces.Other = {}; });
            attempt(() => { globalThis.Shipping = {}; });
            attempt(() => { Object.defineProperty(globalThis, "Shipping", { value: {} }); });
            attempt(() => { Shipping.unpaid.name = "x"; });
            let notCallable;
            try { await Shipping.unit(); } catch (e) { notCallable = e.name; }
            // A member called with another `this` still calls only its own tool.
            const viaCall = (await Shipping.unpaid.call({ path: "markPaid" })).length;
            return { errors, notCallable, viaCall, proto: Object.getPrototypeOf(Shipping) === Object.prototype };
            "#,
        json!({
            "errors": ["TypeError", "TypeError", "TypeError", "TypeError", "TypeError", "TypeError", "TypeError"],
            "notCallable": "TypeError", "viaCall": 6, "proto": true,
        }),
    );
}

/// Each namespace object is built when the cell first reads it (a run that never touches one does
/// not pay for it). Before that, the cell can already run code: none of it may replace, delete or
/// poison what the build makes (contract L5, N4).
#[test]
fn n4_namespaces_built_on_first_read_cannot_be_tampered_with_before_it() {
    assert_tampering(
        r#"
            // Before any read of Shipping: every way to swap it out fails.
            attempt(() => { delete globalThis.Shipping; });
            attempt(() => { Object.defineProperty(globalThis, "Shipping", { value: {} }); });
            attempt(() => { globalThis.Shipping = {}; });
            attempt(() => { delete namespaces.Shipping; });
            attempt(() => { Object.defineProperty(namespaces, "Shipping", { value: {} }); });
            // Poisoned built-ins and prototypes the build must not use.
            let stolen = 0;
            JSON.parse = () => { stolen++; return {}; };
            Object.freeze = (o) => { stolen++; return o; };
            Array.isArray = () => { stolen++; return false; };
            String.prototype.split = function () { stolen++; return []; };
            Object.defineProperty(Object.prototype, "markPaid", { set() { stolen++; }, configurable: true });
            // Inherited by any descriptor written as an object literal: the build must use none.
            for (const key of ["get", "set"]) {
              Object.defineProperty(Object.prototype, key, { get() { stolen++; return () => ({}); }, configurable: true });
            }
            const d = Object.getOwnPropertyDescriptor(globalThis, "Shipping");
            const getterAgain = d.get.call({ not: "the global" });
            const rows = await Shipping.unpaid();
            return {
              errors, stolen, rows: rows.length,
              same: Shipping === namespaces.Shipping && getterAgain === Shipping,
              frozen: Object.isFrozen(Shipping) && Object.isFrozen(Shipping.markPaid),
              members: Object.keys(Shipping), markPaid: typeof Shipping.markPaid,
              descriptor: [typeof d.get, d.set, d.configurable, "value" in d],
            };
            "#,
        json!({
            "errors": ["TypeError", "TypeError", "TypeError", "TypeError", "TypeError"],
            "stolen": 0, "rows": 6, "same": true, "frozen": true,
            "members": ["unit", "unpaid", "unpaidOver", "markPaid"], "markPaid": "function",
            "descriptor": ["function", null, false, false],
        }),
    );
}

#[test]
fn n8_failures_are_catchable_and_coded() {
    let rt = rt();
    for engine in ENGINES {
        let cm = runtime(engine, &registry(), config(10_000, 16));
        let r = rt.block_on(exec(
            &cm,
            r#"
            const out = [];
            for (const f of [() => Shipping.markPaid("SHP-0000"), () => Shipping.unpaidOver("heavy"), () => Shipping.markPaid()]) {
              try { await f(); out.push("ok"); } catch (e) { out.push([e.code, e.message]); }
            }
            return out;
            "#,
        ));
        assert_eq!(
            value(&r),
            json!([
                ["nested_tool_failed", "plugin:demo:demo_shipping_mark_paid: no shipment `SHP-0000`"],
                ["nested_tool_failed", "Shipping.unpaidOver: unpaidOver(tons): `tons` must be a number"],
                ["nested_tool_failed", "Shipping.markPaid: markPaid(id): `id` must be a shipment id string"],
            ]),
            "{engine}"
        );
        // Uncaught, the failure fails the run with the same code.
        let r = rt.block_on(exec(&cm, r#"await Shipping.markPaid("SHP-0000");"#));
        assert_eq!(r.error_code(), Some(codemode::CodeModeErrorCode::NestedToolFailed), "{engine}");
    }
}

#[test]
fn n9_suspended_namespace_calls_resume_through_wait() {
    let rt = rt();
    for engine in ENGINES {
        let cm = runtime(engine, &registry(), config(1_000, 16));
        let r = rt.block_on(exec(
            &cm,
            // `Shipping` and the root `namespaces` are first read after the resume (quickjs-wasi
            // makes both from what its boot kept, restored with the snapshot).
            "const a = await Slow.nap(1500); const b = await Shipping.unpaidOver(20);\n\
             return [a, b.length, Object.keys(namespaces), namespaces.Shipping === Shipping, Object.isFrozen(namespaces)];",
        ));
        let CodeModeResult::Waiting { run_id, pending_tool_calls, .. } = &r else { panic!("{}", r.to_json()) };
        assert_eq!(pending_tool_calls[0].tool_id, "plugin:demo:demo_sleep", "{engine}");
        let r = wait_to_end(&rt, &cm, run_id);
        assert_eq!(value(&r), json!([{"slept": 1500}, 2, ["Shipping", "Slow"], true, true]), "{engine}");
    }
}

#[test]
fn n10_rollback_hides_namespaces_from_new_runs_and_stops_stale_globals() {
    let rt = rt();
    for engine in ENGINES {
        let reg = registry();
        let cm = runtime(engine, &reg, config(1_000, 16));
        let r = rt.block_on(exec(
            &cm,
            r#"
            const first = await Slow.nap(1500);
            let second;
            try { await Slow.nap(1); second = "ran"; } catch (e) { second = [e.code, e.message]; }
            return { first, second };
            "#,
        ));
        let CodeModeResult::Waiting { run_id, .. } = &r else { panic!("{}", r.to_json()) };
        // The plugin is rolled back while the run is suspended on its namespace call.
        assert_eq!(reg.clear_for_plugin(PLUGIN_ID), 2);
        assert!(cm.visible_namespaces().is_empty());
        assert!(!cm.exec_tool(&[]).description.contains("Slow"));
        let fresh = rt.block_on(exec(&cm, "return [typeof Slow, typeof Shipping, Object.keys(namespaces)];"));
        assert_eq!(value(&fresh), json!(["undefined", "undefined", []]), "{engine}");
        // The suspended run: its call already running completes; its next call through the stale
        // global fails (catchable) instead of running a tool of an uninstalled plugin.
        let r = wait_to_end(&rt, &cm, run_id);
        assert_eq!(
            value(&r),
            json!({"first": {"slept": 1500}, "second": ["nested_tool_failed",
                "namespace `Slow` was removed after this run started (its plugin was rolled back or uninstalled)"]}),
            "{engine}"
        );
    }
}

#[test]
fn namespace_calls_pass_hooks_approvals_restart_safe_and_the_pending_limit() {
    struct Seen(Mutex<Vec<(String, Value)>>);
    #[async_trait::async_trait]
    impl ToolHook for Seen {
        async fn before_tool_call(&self, call: &mut NestedToolCall) -> Result<(), ToolError> {
            self.0.lock().unwrap().push((call.tool_id.to_string(), call.input.clone()));
            if call.input.get("id").and_then(Value::as_str) == Some("SHP-1002") {
                return Err(ToolError::new(codemode::ToolErrorKind::Denied, "hook says no"));
            }
            Ok(())
        }
    }
    let rt = rt();
    let seen = Arc::new(Seen(Mutex::new(Vec::new())));
    let cm = CodeMode::builder(config(10_000, 2))
        .engine_name("quickjs")
        .local_tools(demo_tools())
        .hook(seen.clone())
        .namespaces(Arc::new(registry()))
        .build();
    let r = rt.block_on(exec(
        &cm,
        r#"try { await Shipping.markPaid("SHP-1002"); return "ran"; } catch (e) { return [e.code, e.message]; }"#,
    ));
    assert_eq!(value(&r)[0], json!("nested_tool_failed"));
    assert!(value(&r)[1].as_str().unwrap().contains("hook says no"), "{}", value(&r));
    assert_eq!(
        *seen.0.lock().unwrap(),
        vec![("plugin:demo:demo_shipping_mark_paid".to_string(), json!({"id": "SHP-1002"}))]
    );
    // restartSafe (contract R1): a namespace member over a side-effecting tool is refused before it runs.
    let input = CodeModeExecInput::from_json(&json!({"code": "try { await Shipping.markPaid('SHP-1007'); } catch (e) { return e.message; }", "restartSafe": true})).unwrap();
    let r = rt.block_on(cm.exec(&ctx(), &input));
    assert!(value(&r).as_str().unwrap().contains("has side effects"), "{}", value(&r));
    // The pending limit counts namespace calls like any other.
    let r = rt.block_on(exec(&cm, "await Promise.all([Slow.nap(50), Slow.nap(50), Slow.nap(50)]);"));
    assert_eq!(r.error_code(), Some(codemode::CodeModeErrorCode::TooManyPendingToolCalls));
    // Approvals: a gated backing tool parks the namespace call, with the cell line.
    let approvals =
        ApprovalPolicy::from_document(&json!({"approvals": {"require": ["demo_shipping_mark_paid"]}})).unwrap();
    let cm = CodeMode::builder(config(10_000, 16))
        .engine_name("quickjs-wasi")
        .local_tools(demo_tools())
        .approvals(approvals)
        .namespaces(Arc::new(registry()))
        .build();
    let r = rt.block_on(exec(&cm, "const n = 1;\nreturn await Shipping.markPaid('SHP-1007');"));
    let CodeModeResult::Waiting { pending_tool_calls, .. } = &r else { panic!("{}", r.to_json()) };
    assert_eq!(pending_tool_calls[0].kind, codemode::PendingCallKind::Approval);
    assert_eq!(pending_tool_calls[0].tool_id, "plugin:demo:demo_shipping_mark_paid");
}

#[test]
fn bad_scopes_fail_the_exec_before_guest_code_runs() {
    let rt = rt();
    for (name, reg) in [
        (
            "factory error",
            NamespaceRegistration::new("bad", "Bad", "d").require("demo_echo").scope(|_| Err("no token".into())),
        ),
        (
            "factory panic",
            NamespaceRegistration::new("bad", "Bad", "d").require("demo_echo").scope(|_| panic!("plugin bug")),
        ),
        (
            "unsafe key",
            NamespaceRegistration::new("bad", "Bad", "d").require("demo_echo").scope(|_| {
                Ok(ScopeValue::Json(serde_json::from_str(r#"{"x": {"__proto__": {"polluted": 1}}}"#).unwrap()))
            }),
        ),
    ] {
        let registry = Namespaces::new();
        registry.register_for_plugin(PLUGIN_ID, reg).unwrap();
        let cm = runtime("quickjs", &registry, config(10_000, 16));
        // The cell would mark a shipment paid first thing: it must never run.
        let r = rt.block_on(exec(&cm, "await tools.demo_shipping_mark_paid({id: 'SHP-1002'}); return 1;"));
        let CodeModeResult::Failed { error, code, .. } = &r else { panic!("{name}: {}", r.to_json()) };
        assert_eq!(*code, Some(codemode::CodeModeErrorCode::InvalidConfig), "{name}");
        assert!(error.starts_with("namespace `bad`"), "{name}: {error}");
        let again = rt.block_on(exec(&cm, "return 1;"));
        assert_eq!(again.status(), "failed", "{name}: every exec fails while the namespace is broken");
        // The other tools were not called: the demo's marks are per runtime, check through a fresh run
        // without the broken namespace.
        registry.clear_for_plugin(PLUGIN_ID);
        let paid = rt.block_on(exec(
            &cm,
            "return (await tools.demo_shipping_list({paid: false})).some((s) => s.id === 'SHP-1002');",
        ));
        assert_eq!(value(&paid), json!(true), "{name}: SHP-1002 still unpaid");
    }
}

/// `v` with every number as a double: the guest is JavaScript, where `5.0` and `5` are one value (a
/// whole float crosses back as an integer), so numbers compare by value.
fn as_doubles(v: &Value) -> Value {
    match v {
        Value::Number(n) => n.as_f64().map(Value::from).unwrap_or(Value::Null),
        Value::Array(a) => Value::Array(a.iter().map(as_doubles).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), as_doubles(v))).collect()),
        other => other.clone(),
    }
}

/// A random JSON value with safe keys.
fn json_tree() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(|f| json!((f * 1000.0).round() / 1000.0)),
        "\\PC{0,6}".prop_map(Value::from),
    ];
    let key =
        "[a-zA-Z_$][a-zA-Z0-9_$ -]{0,5}".prop_filter("safe", |k| codemode::namespaces::names::check_key(k).is_ok());
    leaf.prop_recursive(4, 40, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// N6: random data with a marker beside it reaches the guest unchanged, on both engines.
    #[test]
    fn random_scope_data_reaches_the_guest_unchanged(data in json_tree()) {
        let rt = rt();
        let registry = Namespaces::new();
        let scope_data = data.clone();
        registry.register_for_plugin(PLUGIN_ID, NamespaceRegistration::new("r", "R", "d").require("demo_echo").scope(move |_| {
            Ok(ScopeValue::object([("data", ScopeValue::Json(scope_data.clone())), ("echo", namespace_tool("demo_echo").into())]))
        })).unwrap();
        for engine in ENGINES {
            let cm = runtime(engine, &registry, config(10_000, 16));
            let r = rt.block_on(exec(&cm, "return { data: R.data, echoed: await R.echo({ v: R.data }) };"));
            let want = json!({"data": data.clone(), "echoed": {"v": data.clone()}});
            prop_assert_eq!(as_doubles(&value(&r)), as_doubles(&want), "{}", engine);
        }
    }
}

/// L5 at boot, on every engine compiled in: the two QuickJS engines define a run's namespaces with
/// their native `defineNamespaces` primitive (reading the boot text's index as bytes), Boa with the
/// prelude's own loop (the reference). A boot text the host would never send (it validates names
/// first) checks the guest's second guard alike on each: a duplicate name, a reserved one and an
/// empty one are skipped (each still consuming its text), a non-ASCII name is kept as it is, a
/// global the VM refuses to redefine (`Infinity`) is reachable under `namespaces` only, a bad
/// length (each of several kinds) or a name without one stops the list, lengths count UTF-16
/// units, both accessors share one getter (of length 0, ignoring `this`) and the object it builds
/// once. The getter's `name` is not compared: quickjs-wasi's getters have no own `name` (giving
/// each one cost two property definitions per namespace and run), the others' are `get`.
#[test]
fn boot_entries_are_defined_alike_on_every_engine() {
    use codemode::Engines;
    use codemode_core::engine::{DriveInput, DriveOutcome, GuestLimits, GuestProgram};
    use std::time::{Duration, Instant};

    let text = |id: &str, data: Value| json!({"id": id, "globalName": id, "data": data, "calls": []}).to_string();
    let entries: Vec<(&str, String)> = vec![
        ("A", text("a", json!({"x": "é𝄞"}))),
        ("A", text("a2", json!({"x": "duplicate"}))),
        ("tools", text("t", json!({"x": "reserved"}))),
        ("", text("empty", json!({"x": "no name"}))),
        ("B", text("b", json!({"y": 2}))),
        // A non-ASCII identifier: the native readers turn the index's UTF-8 back into the same name.
        ("Ŝhip", text("s", json!({"s": 5}))),
        ("Infinity", text("inf", json!({"z": 3}))),
    ];
    let units = |s: &str| s.encode_utf16().count();
    let d = text("d", json!({"w": 4}));
    // Each of these ends the list before `C`: `D`, after it, is never defined. The last runs past
    // the texts by one UTF-16 unit, though not past their UTF-8 bytes (`é𝄞` is 3 units, 6 bytes):
    // the length is checked in units, as JavaScript counts them.
    let past_the_end = format!("C {}", units(&d) + 1);
    let stoppers = ["C -1", "C 01", "C 1e1", "C x", "C 1.0", "C", "C  D", past_the_end.as_str()];
    let boots: Vec<String> = stoppers
        .iter()
        .map(|stop| {
            let pairs: Vec<String> = entries.iter().map(|(name, t)| format!("{name} {}", units(t))).collect();
            // `C` alone ends the index: a name without a length. Past the end, `C`'s text would be
            // `d` and `D`'s nothing.
            let tail = match *stop {
                "C" => String::new(),
                s if s == past_the_end => " D 0".to_string(),
                _ => format!(" D {}", units(&d)),
            };
            let mut boot = format!("{{\"maxDepth\":64}}\n{} {stop}{tail}\n", pairs.join(" "));
            for (_, t) in &entries {
                boot.push_str(t);
            }
            boot.push_str(&d);
            boot
        })
        .collect();

    let cell = r#"
      const g = Object.getOwnPropertyDescriptor(globalThis, "A");
      const r = Object.getOwnPropertyDescriptor(namespaces, "A");
      const shape = (d) => [d.enumerable, d.configurable, d.set === undefined, typeof d.get, d.get.length];
      return {
        keys: Object.keys(namespaces),
        values: [A.x, B.y, namespaces.Infinity.z, globalThis["Ŝhip"].s],
        infinity: [typeof Infinity, Infinity === 1 / 0],
        absent: [typeof globalThis.C, typeof globalThis.D, "C" in namespaces, "D" in namespaces, "" in namespaces],
        tools: typeof tools,
        same: A === namespaces.A && r.get === g.get && g.get.call(null) === A && g.get.call(42) === A,
        global: shape(g),
        root: shape(r),
        frozen: [Object.isFrozen(namespaces), Object.isFrozen(A)],
        hidden: Object.keys(globalThis).includes("A"),
      };
    "#;
    let want = json!({
        "keys": ["A", "B", "Ŝhip", "Infinity"],
        "values": ["é𝄞", 2, 3, 5],
        "infinity": ["number", true],
        "absent": ["undefined", "undefined", false, false, false],
        "tools": "object",
        "same": true,
        "global": [false, false, true, "function", 0],
        "root": [true, false, true, "function", 0],
        "frozen": [true, true],
        "hidden": false,
    });
    let mut engines = vec!["quickjs-wasi", "quickjs"];
    if Engines::by_name("boa").is_some() {
        engines.push("boa");
    }
    for name in engines {
        let engine = Engines::by_name(name).unwrap_or_else(|| panic!("{name} is compiled in"));
        for (boot, stop) in boots.iter().zip(stoppers) {
            let program = GuestProgram { code: cell.into(), boot: boot.as_str().into() };
            let mut instance = engine.start(&program, &GuestLimits::default()).unwrap();
            let report =
                instance.drive(DriveInput::new(vec![], Instant::now() + Duration::from_secs(20), 1 << 16)).unwrap();
            assert_eq!(report.outcome, DriveOutcome::Completed(want.clone()), "{name}, index ending `{stop}`");
        }
    }
}

/// The boot text reaches each engine's guest whole, whatever its bytes: a namespace's text whose
/// only non-ASCII character sits at any offset (quickjs-wasi's string maker looks for such bytes
/// eight at a time, then one at a time for the rest), and the head in both of the forms `boot`
/// takes (the QuickJS engines pass the usual `{"maxDepth":N}` as its number, anything else as
/// text): a depth limit of 3 applies in either form.
#[test]
fn boot_texts_arrive_whole_and_the_head_applies_in_both_forms() {
    use codemode::Engines;
    use codemode_core::engine::{DriveInput, DriveOutcome, GuestLimits, GuestProgram};
    use std::time::{Duration, Instant};

    let mut engines = vec!["quickjs-wasi", "quickjs"];
    if Engines::by_name("boa").is_some() {
        engines.push("boa");
    }
    let drive = |name: &str, boot: &str, cell: &str| {
        let engine = Engines::by_name(name).unwrap_or_else(|| panic!("{name} is compiled in"));
        let program = GuestProgram { code: cell.into(), boot: boot.into() };
        let mut instance = engine.start(&program, &GuestLimits::default()).unwrap();
        instance.drive(DriveInput::new(vec![], Instant::now() + Duration::from_secs(20), 1 << 16)).unwrap().outcome
    };
    for name in &engines {
        for k in 0..=24 {
            let s = format!("{}é{}", "x".repeat(k), "y".repeat(24 - k));
            let text = json!({"id": "a", "globalName": "A", "data": {"s": s}, "calls": []}).to_string();
            let boot = format!("{{\"maxDepth\":64}}\nA {}\n{text}", text.encode_utf16().count());
            let outcome = drive(name, &boot, "return A.s;");
            assert_eq!(outcome, DriveOutcome::Completed(json!(s)), "{name}, é at {k}");
        }
        // Nested four levels deep: over a limit of 3, within the usual 64.
        let cell = "return { a: { b: { c: { d: 1 } } } };";
        for head in [r#"{"maxDepth":3}"#, r#"{"maxDepth": 3}"#, r#"{ "maxDepth":3 }"#] {
            let outcome = drive(name, &format!("{head}\n\n"), cell);
            let DriveOutcome::Failed(f) = &outcome else { panic!("{name}, head {head}: {outcome:?}") };
            assert!(f.message.contains("deeper than 3 levels"), "{name}, head {head}: {}", f.message);
        }
        let outcome = drive(name, "{\"maxDepth\":64}\n\n", cell);
        assert_eq!(outcome, DriveOutcome::Completed(json!({"a": {"b": {"c": {"d": 1}}}})), "{name}");
    }
}
