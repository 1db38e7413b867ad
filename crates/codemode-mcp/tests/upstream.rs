//! End-to-end tests of the upstream side against real MCP servers nobody here wrote
//! (`@modelcontextprotocol/server-everything`, installed by `scripts/setup.sh` into
//! `tests/e2e/node_modules`), and against broken ones. contract §9 (M1–M8).

mod support;

use codemode::config_file::ConfigFile;
use codemode::{PolicyTarget, RunContext};
use codemode_mcp::build_gateway;
use codemode_mcp::server::Gateway;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{completed, run};

fn e2e_bin(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2e/node_modules/.bin").join(name);
    assert!(p.exists(), "{} is missing: run scripts/setup.sh (it installs the end-to-end MCP peers)", p.display());
    p
}

fn config(servers: Value, code_mode: Value) -> ConfigFile {
    let text = json!({ "tools": { "codeMode": code_mode }, "mcpServers": servers }).to_string();
    match ConfigFile::parse(&text) {
        Ok(c) => c,
        Err(e) => panic!("config: {e}"),
    }
}

async fn gateway(servers: Value) -> Arc<Gateway> {
    let file = config(servers, json!({ "enabled": true, "runtime": "quickjs-wasi", "timeoutMs": 4000 }));
    match build_gateway(&file, &PolicyTarget::default(), codemode_mcp::GatewayOptions::default()).await {
        Ok(g) => g,
        Err(e) => panic!("gateway: {e}"),
    }
}

fn everything() -> Value {
    json!({ "everything": { "command": e2e_bin("mcp-server-everything").to_string_lossy() } })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_server_through_the_mcp_namespace() {
    let gw = gateway(everything()).await;
    let statuses = gw.hub().statuses();
    assert_eq!(statuses[0].state, codemode_mcp::hub::ServerState::Connected, "{statuses:?}");
    assert!(statuses[0].tools >= 10, "{statuses:?}");

    // M1–M3: the virtual declaration files, rendered from tool metadata, read through `API` without a
    // bridge call (the run's telemetry shows no nested call).
    let v = run(
        &gw,
        "s",
        r#"return { list: (await API.list()).map(f => f.path), index: await API.read("mcp/index.d.ts"),
                   dts: await API.read("mcp/everything.d.ts") }"#,
    )
    .await;
    assert_eq!(v["telemetry"]["callCount"], 0, "API.read is no bridge call: {v:#}");
    let v = completed(&v);
    let list: Vec<&str> = v["list"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(list.contains(&"mcp/index.d.ts") && list.contains(&"mcp/everything.d.ts"), "{list:?}");
    let dts = v["dts"].as_str().unwrap_or_default();
    for needle in ["echo", "\"get-sum\"", "getSum", "/**", "trigger-long-running-operation"] {
        assert!(dts.contains(needle), "everything.d.ts lacks {needle}:\n{dts}");
    }
    assert!(v["index"].as_str().unwrap_or_default().contains("everything"));
    // The full declarations of a real server's real tool list (the version pinned by
    // tests/e2e/package-lock.json), reviewed as a snapshot.
    insta::assert_snapshot!("everything_dts", dts);

    // M7, M8: tool calls with the McpToolResult shape, by exact name and by the deterministic alias.
    let v = run(
        &gw,
        "s",
        r#"
        const echo = await MCP.everything.echo({ message: "hello from a cell" });
        const sum = await MCP.everything["get-sum"]({ a: 2, b: 40 });
        const sum2 = await MCP.everything.getSum({ a: 1, b: 1 });
        const structured = await MCP.everything.getStructuredContent({ location: "New York" });
        return { echo, sum, sum2, structured };
        "#,
    )
    .await;
    let v = completed(&v);
    assert!(v["echo"]["content"][0]["text"].as_str().unwrap_or_default().contains("hello from a cell"), "{v:#}");
    assert!(v["sum"]["content"][0]["text"].as_str().unwrap_or_default().contains("42"), "{v:#}");
    assert!(v["sum2"]["content"][0]["text"].as_str().unwrap_or_default().contains('2'), "{v:#}");
    assert!(v["structured"]["structuredContent"].is_object(), "structured content missing: {v:#}");
    assert_ne!(v["echo"]["isError"], true);

    // contract §9: `MCP` is the only way to MCP tools — not `tools.search`, `ALL_TOOLS` or `tools.call`.
    let v = run(
        &gw,
        "s",
        r#"return { hits: (await tools.search("echo")).length, all: ALL_TOOLS.filter(t => t.id.startsWith("mcp:")).length,
                   err: await tools.call("mcp:everything:echo", { message: "x" }).then(() => "reachable", e => String(e)) }"#,
    )
    .await;
    let v = completed(&v);
    assert_eq!(v["hits"], 0, "{v:#}");
    assert_eq!(v["all"], 0, "{v:#}");
    assert_ne!(v["err"], "reachable", "{v:#}");
    // M7: an `MCP.<server>.<tool>` call resolves to the exact catalog id and runs on the normal path of
    // nested calls: counted and named in the run's telemetry like any catalog call, under that id
    // (also when reached by its alias).
    let v = run(
        &gw,
        "s",
        r#"await MCP.everything.echo({ message: "a" }); await MCP.everything.getSum({ a: 1, b: 2 }); return 1"#,
    )
    .await;
    assert_eq!(v["status"], "completed", "{v:#}");
    assert_eq!(v["telemetry"]["callCount"], 2, "{v:#}");
    assert_eq!(v["telemetry"]["nestedToolIds"], json!(["mcp:everything:echo", "mcp:everything:get-sum"]), "{v:#}");

    // Resources and prompts where the server supports them (M6).
    let v = run(
        &gw,
        "s",
        r#"const p = await MCP.everything.prompts.get({ name: "simple-prompt" });
           return { messages: p.messages.length }"#,
    )
    .await;
    assert!(completed(&v)["messages"].as_u64().unwrap_or(0) >= 1, "{v:#}");

    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_upstream_call_suspends_and_resumes() {
    let gw = gateway(everything()).await;
    let ctx = RunContext::session("long");
    // `timeoutMs` is 4 s; the operation takes 6 s, so the first `exec` must come back `waiting`.
    let code = r#"const r = await MCP.everything.triggerLongRunningOperation({ duration: 6, steps: 2 });
                  text("done"); return r.content[0].text"#;
    let first = gw.code_mode().exec_json(&ctx, &json!({ "code": code })).await.to_json();
    assert_eq!(first["status"], "waiting", "{first:#}");
    assert_eq!(first["reason"], "pending_tools", "{first:#}");
    let run_id = first["runId"].as_str().unwrap_or_default().to_string();

    // Another session cannot resume it.
    let other = gw.code_mode().wait_json(&RunContext::session("intruder"), &json!({ "runId": run_id })).await.to_json();
    assert_eq!(other["status"], "failed", "{other:#}");

    let started = Instant::now();
    let mut last = first;
    while last["status"] == "waiting" && started.elapsed() < Duration::from_secs(60) {
        last = gw.code_mode().wait_json(&ctx, &json!({ "runId": last["runId"] })).await.to_json();
    }
    let v = completed(&last);
    assert!(v.as_str().unwrap_or_default().contains("Long running operation completed"), "{last:#}");
    gw.shutdown().await;
}

async fn broken(servers: Value, expect: &str) {
    let started = Instant::now();
    let gw = gateway(servers).await;
    let status = &gw.hub().statuses()[0];
    assert_eq!(status.state, codemode_mcp::hub::ServerState::Failed, "{status:?}");
    let error = status.error.clone().unwrap_or_default();
    assert!(error.contains(expect), "error `{error}` should mention `{expect}`");
    // The gateway still runs cells: the failed server keeps its name in `MCP`, and a
    // call to it is a coded nested tool failure that says it is down and why (it used to be a bare
    // `TypeError: cannot read property … of undefined`).
    let v = run(&gw, "s", r#"return Object.keys(MCP)"#).await;
    assert_eq!(completed(&v), &json!(["broken"]));
    let v = run(&gw, "s", r#"return await MCP.broken.anything({})"#).await;
    assert_eq!(v["status"], "failed", "{v:#}");
    assert_eq!(v["code"], "nested_tool_failed", "{v:#}");
    let message = v["error"].as_str().unwrap_or_default();
    assert!(message.contains("MCP server `broken` is down: ") && message.contains(expect), "{v:#}");
    // The exec description and the declarations say so too.
    let description = gw.model_tools()[0].description.clone();
    assert!(description.contains("broken (down: "), "{description}");
    let v = run(&gw, "s", r#"return await API.read("mcp/index.d.ts")"#).await;
    assert!(completed(&v).as_str().unwrap_or_default().contains("DOWN"), "{v:#}");
    assert!(started.elapsed() < Duration::from_secs(30), "a broken server must not hold the gateway up");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_upstream_command_does_not_exist() {
    broken(json!({ "broken": { "command": "/nonexistent/codemode-no-such-server" } }), "cannot start").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_upstream_exits_at_once() {
    broken(json!({ "broken": { "command": "sh", "args": ["-c", "exit 1"] } }), "initialization failed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_upstream_never_answers() {
    broken(
        json!({ "broken": { "command": "sh", "args": ["-c", "exec sleep 600"], "startupTimeoutMs": 1500 } }),
        "no answer to initialize within 1500 ms",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_upstream_prints_garbage() {
    broken(
        json!({ "broken": { "command": "sh", "args": ["-c", "while true; do echo 'this is not JSON-RPC'; sleep 0.1; done"],
                            "startupTimeoutMs": 3000 } }),
        // Lines that are not JSON-RPC are skipped; the server never answers `initialize`.
        "no answer to initialize within 3000 ms",
    )
    .await;
}

/// A server that answers `initialize` and `tools/list` and then dies on the first call: the call
/// fails with `nested_tool_failed`, the server is marked failed, and the gateway keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_crashing_mid_call() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/crash_on_call.js");
    let gw = gateway(json!({ "flaky": { "command": "node", "args": [script.to_string_lossy()] } })).await;
    assert_eq!(gw.hub().statuses()[0].state, codemode_mcp::hub::ServerState::Connected, "{:?}", gw.hub().statuses());
    let v = run(&gw, "s", r#"return await MCP.flaky.boom({})"#).await;
    assert_eq!(v["status"], "failed", "{v:#}");
    assert_eq!(v["code"], "nested_tool_failed", "{v:#}");
    assert_eq!(gw.hub().statuses()[0].state, codemode_mcp::hub::ServerState::Failed);
    let v = run(&gw, "s", "return 1 + 1").await;
    assert_eq!(completed(&v), &json!(2));
    gw.shutdown().await;
}

/// A server that fails to start is restarted with backoff; once it is up, its tools
/// are in the catalog and calls work, without restarting the gateway. A server that crashes
/// mid-session keeps its tools in `MCP` while it is down (calls fail saying so) and comes back too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_servers_are_restarted_with_backoff() {
    let dir = std::env::temp_dir().join(format!("codemode-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("started-once");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/crash_on_call.js");
    // Fails its first start (no marker yet), then runs the crash-on-call server.
    let shell = format!(
        "if [ -e '{m}' ]; then exec node '{s}'; else touch '{m}'; exit 1; fi",
        m = marker.display(),
        s = script.display()
    );
    let gw = gateway(json!({ "flaky": { "command": "sh", "args": ["-c", shell], "startupTimeoutMs": 5000 } })).await;
    assert_eq!(gw.hub().statuses()[0].state, codemode_mcp::hub::ServerState::Failed);
    let v = run(&gw, "s", r#"try { await MCP.flaky.boom({}) } catch (e) { return [e.code, e.message] }"#).await;
    assert_eq!(completed(&v)[0], "nested_tool_failed", "{v:#}");
    assert!(completed(&v)[1].as_str().unwrap_or_default().contains("is down"), "{v:#}");
    // The first restart is due after 1 s.
    let until = Instant::now() + Duration::from_secs(20);
    while gw.hub().statuses()[0].state != codemode_mcp::hub::ServerState::Connected && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(gw.hub().statuses()[0].state, codemode_mcp::hub::ServerState::Connected, "{:?}", gw.hub().statuses());
    // The gateway applies the hub's change at its next MCP request (as `codemode serve` does).
    assert!(gw.sync(), "the restart changed the catalog");
    let v = run(&gw, "s", r#"return Object.keys(MCP.flaky).filter((k) => !k.startsWith("$"))"#).await;
    assert_eq!(completed(&v), &json!(["boom"]));
    // Now it crashes on the call: the call fails coded, the tool stays, and the server comes back.
    let v = run(&gw, "s", r#"try { await MCP.flaky.boom({}) } catch (e) { return e.code }"#).await;
    assert_eq!(completed(&v), &json!("nested_tool_failed"));
    gw.sync();
    let v = run(&gw, "s", r#"return typeof MCP.flaky.boom"#).await;
    assert_eq!(completed(&v), &json!("function"), "the crashed server's tools stay in MCP");
    let until = Instant::now() + Duration::from_secs(20);
    while gw.hub().statuses()[0].state != codemode_mcp::hub::ServerState::Connected && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(gw.hub().statuses()[0].state, codemode_mcp::hub::ServerState::Connected, "{:?}", gw.hub().statuses());
    // Its history says what happened, in order: the failed start, the recovery, the crash, the
    // recovery (what the operator console shows as restarts with their reasons).
    let events: Vec<&str> = gw.hub().statuses()[0].history.iter().map(|e| e.event).collect();
    assert_eq!(events, ["failed", "connected", "failed", "connected"], "{:?}", gw.hub().statuses());
    assert!(gw.hub().statuses()[0].history.iter().all(|e| e.event == "connected" || e.reason.is_some()));
    gw.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A call to a server that hangs is bounded by the server's `timeoutMs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_hanging_call_times_out() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/crash_on_call.js");
    let gw = gateway(
        json!({ "flaky": { "command": "node", "args": [script.to_string_lossy(), "--hang"], "timeoutMs": 1000 } }),
    )
    .await;
    let v = run(&gw, "s", r#"try { await MCP.flaky.boom({}) } catch (e) { return String(e.message) }"#).await;
    assert!(completed(&v).as_str().unwrap_or_default().contains("did not answer within 1000 ms"), "{v:#}");
    gw.shutdown().await;
}

/// The full declarations of two more real servers' real tool lists (the versions
/// pinned by tests/e2e/package-lock.json): server-filesystem and server-memory, reviewed as
/// snapshots; the declarations are read through `API` like a cell would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_and_memory_server_declarations() {
    let dir = std::env::temp_dir().join(format!("codemode-upstream-dts-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let gw = gateway(json!({
        "files": { "command": e2e_bin("mcp-server-filesystem").to_string_lossy(), "args": [dir.to_string_lossy()] },
        "memory": { "command": e2e_bin("mcp-server-memory").to_string_lossy(),
                    "env": { "MEMORY_FILE_PATH": dir.join("memory.jsonl").to_string_lossy() } },
    }))
    .await;
    let v = run(&gw, "s", r#"return [await API.read("mcp/files.d.ts"), await API.read("mcp/memory.d.ts")]"#).await;
    let v = completed(&v);
    let files = v[0].as_str().unwrap_or_default();
    let memory = v[1].as_str().unwrap_or_default();
    assert!(files.contains("function readTextFile(input: {") || files.contains("read_text_file"), "{files}");
    insta::assert_snapshot!("filesystem_dts", files);
    insta::assert_snapshot!("memory_dts", memory);
    gw.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
