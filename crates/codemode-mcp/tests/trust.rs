//! What an upstream server says about its tools is believed only as far as the configuration trusts
//! the server (the book's security model, "Trust boundaries"): its `readOnlyHint` does not make a
//! tool read-only, and its declared output schema is shown as an unverified claim, compared with
//! what the tool returns, and made a contract only for a trusted server. Against real servers: one
//! written with the official Python SDK (`tests/e2e/py_upstream.py`) and a hostile one
//! (`tests/e2e/ledger_server.js`: `erase` has a side effect and claims to be read-only, `tally`
//! returns what its declaration does not describe).

mod support;

use codemode::config_file::ConfigFile;
use codemode::{PolicyTarget, RunContext};
use codemode_mcp::build_gateway;
use codemode_mcp::server::Gateway;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use support::{completed, run};

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
}

fn python() -> String {
    let p = repo(".venv/bin/python");
    assert!(p.exists(), "{} is missing: run scripts/setup.sh", p.display());
    p.to_string_lossy().into_owned()
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("codemode-trust-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
    d
}

/// The hostile ledger server writing to `ledger`, with extra keys for its entry.
fn ledger_server(ledger: &Path, extra: Value) -> Value {
    let mut entry = json!({ "command": "node", "args": [repo("tests/e2e/ledger_server.js"), ledger] });
    if let (Some(e), Some(x)) = (entry.as_object_mut(), extra.as_object()) {
        e.extend(x.clone());
    }
    json!({ "ledger": entry })
}

async fn gateway_with(file: Value) -> Arc<Gateway> {
    let file = match ConfigFile::parse(&file.to_string()) {
        Ok(c) => c,
        Err(e) => panic!("config: {e}"),
    };
    match build_gateway(&file, &PolicyTarget::default(), codemode_mcp::GatewayOptions::default()).await {
        Ok(g) => g,
        Err(e) => panic!("gateway: {e}"),
    }
}

async fn gateway(servers: Value, approvals: Value) -> Arc<Gateway> {
    gateway_with(json!({
        "tools": { "codeMode": { "enabled": true, "timeoutMs": 8000 } },
        "approvals": approvals,
        "mcpServers": servers,
    }))
    .await
}

async fn exec(gw: &Gateway, args: Value) -> Value {
    gw.code_mode().exec_json(&RunContext::session("trust"), &args).await.to_json()
}

fn ledger_lines(ledger: &Path) -> Vec<String> {
    std::fs::read_to_string(ledger)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').next().unwrap_or("").into())
        .collect()
}

fn definition(gw: &Gateway, id: &str) -> codemode::ToolDefinition {
    match gw.hub().tool_definitions().into_iter().find(|d| d.id() == id) {
        Some(d) => d,
        None => panic!("no {id} in {:?}", gw.hub().statuses()),
    }
}

/// A hostile server's `readOnlyHint` on a deleting tool: still gated under
/// `requireUnlessReadOnly`, refused in a `restartSafe` cell — unless the configuration trusts the
/// server (`trustAnnotations`) or names the tool (`readOnly`); `sideEffects` wins over both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mislabelled_tool_is_side_effecting_unless_the_config_trusts_its_server() {
    let dir = tempdir("mislabelled");
    let ledger = dir.join("ledger.txt");
    let gated = json!({ "requireUnlessReadOnly": true, "timeoutMs": 100 });
    let erase =
        |key: &str| format!("const r = await MCP.ledger.erase({{ key: '{key}' }}); return r.structuredContent.key");

    // Not trusted: the hint is ignored (and the catalog says so).
    let gw = gateway(ledger_server(&ledger, json!({})), gated.clone()).await;
    let def = definition(&gw, "mcp:ledger:erase");
    assert!(!def.read_only, "{def:?}");
    assert!(def.read_only_source.as_deref().unwrap_or("").contains("readOnlyHint is not trusted"), "{def:?}");
    let first = exec(&gw, json!({ "code": erase("untrusted") })).await;
    assert_eq!(first["status"], "waiting", "the call is gated: {first:#}");
    assert_eq!(first["pendingToolCalls"][0]["kind"], "approval", "{first:#}");
    assert_eq!(first["pendingToolCalls"][0]["toolId"], "mcp:ledger:erase", "{first:#}");
    let safe = exec(&gw, json!({ "code": format!("try {{ {} }} catch (e) {{ return e.code + ': ' + e.message }}", erase("restart-safe")), "restartSafe": true })).await;
    let refused = completed(&safe).as_str().unwrap_or_default().to_string();
    assert!(refused.starts_with("nested_tool_failed") && refused.contains("read-only"), "{refused}");
    assert!(ledger_lines(&ledger).iter().all(|l| !l.starts_with("erased:")), "{:?}", ledger_lines(&ledger));
    gw.shutdown().await;

    // Trusted: the hint counts; no approval, allowed in a restartSafe cell.
    let gw = gateway(ledger_server(&ledger, json!({ "trustAnnotations": true })), gated.clone()).await;
    assert!(definition(&gw, "mcp:ledger:erase").read_only);
    assert_eq!(completed(&run(&gw, "trust", &erase("trusted")).await), "trusted");
    let safe = exec(&gw, json!({ "code": erase("trusted-safe"), "restartSafe": true })).await;
    assert_eq!(completed(&safe), "trusted-safe");
    gw.shutdown().await;

    // Named by the configuration: `readOnly` makes a tool read-only, `sideEffects` wins over a
    // trusted hint and over `readOnly`.
    let gw = gateway(
        ledger_server(
            &ledger,
            json!({ "trustAnnotations": true, "readOnly": ["pay"], "sideEffects": ["erase", "PAY"] }),
        ),
        gated.clone(),
    )
    .await;
    let (erase_def, pay_def, read_def) =
        (definition(&gw, "mcp:ledger:erase"), definition(&gw, "mcp:ledger:pay"), definition(&gw, "mcp:ledger:read"));
    assert!(!erase_def.read_only && !pay_def.read_only && read_def.read_only);
    assert!(erase_def.read_only_source.as_deref().unwrap_or("").contains("sideEffects `erase`"), "{erase_def:?}");
    assert!(pay_def.read_only_source.as_deref().unwrap_or("").contains("sideEffects `PAY`"), "{pay_def:?}");
    assert_eq!(exec(&gw, json!({ "code": erase("side-effects") })).await["status"], "waiting");
    gw.shutdown().await;
    let gw = gateway(ledger_server(&ledger, json!({ "readOnly": ["er*"] })), gated).await;
    let def = definition(&gw, "mcp:ledger:erase");
    assert!(def.read_only && def.read_only_source.as_deref().unwrap_or("").contains("readOnly `er*`"), "{def:?}");
    gw.shutdown().await;
    assert_eq!(
        ledger_lines(&ledger).iter().filter(|l| l.starts_with("erased:")).cloned().collect::<Vec<_>>(),
        ["erased:trusted", "erased:trusted-safe"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Python-SDK server's `slow_read(ms: int) -> int`: its declared output (`{result: integer}`)
/// is shown as `.value`'s type, marked unverified, from the first run; what the tool returns is
/// learned too, and agrees with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_output_is_shown_unverified_and_compared_with_results() {
    let gw =
        gateway(json!({ "py": { "command": python(), "args": [repo("tests/e2e/py_upstream.py")] } }), json!({})).await;
    let before = completed(
        &run(&gw, "trust", r#"return { dts: await API.read("mcp/py.d.ts"), api: await MCP.py.$api("slow_read") }"#)
            .await,
    )
    .clone();
    let dts = before["dts"].as_str().unwrap_or_default();
    assert!(
        dts.contains(
            "namespace slowRead { function value(input: Parameters<typeof slowRead>[0]): Promise<{ result: number }>; }"
        ),
        "{dts}"
    );
    assert!(dts.contains("@returns the type of `.value()`: declared by the server, unverified"), "{dts}");
    assert_eq!(before["api"]["tools"][0]["declaredOutput"], json!({ "type": "{ result: number }", "verified": false }));
    assert!(before["api"]["tools"][0].get("observedOutput").is_none(), "{before:#}");
    // Its readOnlyHint is not believed either.
    assert!(!definition(&gw, "mcp:py:slow_read").read_only);

    let v = run(&gw, "trust", "const a = await MCP.py.slowRead.value({ ms: 5 }); const b = await MCP.py.slow_read.value({ ms: 1 }); return a.result + b.result").await;
    assert_eq!(completed(&v), 6);
    let after = completed(
        &run(&gw, "trust", r#"return { dts: await API.read("mcp/py.d.ts"), api: await MCP.py.$api("slow_read") }"#)
            .await,
    )
    .clone();
    let dts = after["dts"].as_str().unwrap_or_default();
    assert!(
        dts.contains("@observed `.value()` has returned { result: number } (2 results; learned from results, all as the declared output says)"),
        "{dts}"
    );
    assert_eq!(
        after["api"]["tools"][0]["observedOutput"],
        json!({ "type": "{ result: number }", "results": 2, "observed": true, "contradictsDeclaration": 0 })
    );
    gw.shutdown().await;
}

/// A server whose results contradict its declared output: the declaration and `$api` say so; the
/// results still reach the cell (an untrusted declaration refuses nothing) — unless the
/// configuration trusts the server, whose declaration is then a contract.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_that_contradict_the_declaration_are_shown_and_refused_only_when_trusted() {
    let dir = tempdir("contradict");
    let ledger = dir.join("ledger.txt");
    let gw = gateway(ledger_server(&ledger, json!({})), json!({})).await;
    let v = run(&gw, "trust", "const a = await MCP.ledger.tally.value({ key: 'abc' }); const b = await MCP.ledger.tally.value({ key: 'lie' }); return [a.result, b.result]").await;
    assert_eq!(completed(&v), &json!([3, "seven"]));
    let after = completed(
        &run(&gw, "trust", r#"return { dts: await API.read("mcp/ledger.d.ts"), api: await MCP.ledger.$api("tally") }"#)
            .await,
    )
    .clone();
    let dts = after["dts"].as_str().unwrap_or_default();
    assert!(dts.contains("1 of them CONTRADICT the output the server declares"), "{dts}");
    assert_eq!(after["api"]["tools"][0]["observedOutput"]["contradictsDeclaration"], 1, "{after:#}");
    assert_eq!(after["api"]["tools"][0]["declaredOutput"]["verified"], false);
    gw.shutdown().await;

    let gw = gateway(ledger_server(&ledger, json!({ "trustAnnotations": true })), json!({})).await;
    let v = run(&gw, "trust", "const a = await MCP.ledger.tally.value({ key: 'abc' }); try { await MCP.ledger.tally.value({ key: 'lie' }); return 'delivered' } catch (e) { return [a.result, e.code, e.message] }").await;
    let v = completed(&v);
    assert_eq!(v[0], 3, "{v}");
    assert_eq!(v[1], "nested_tool_failed", "{v}");
    assert!(v[2].as_str().unwrap_or_default().contains("declared output schema"), "{v}");
    let api = completed(&run(&gw, "trust", r#"return await MCP.ledger.$api("tally")"#).await).clone();
    assert_eq!(api["tools"][0]["declaredOutput"]["verified"], true, "{api:#}");
    gw.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
