//! End-to-end tests of the `codemode` binary (the same build the tests run with).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_codemode"));
    c.env_remove("CODEMODE_CONFIG").env_remove("CODEMODE_SNAPSHOT_DIR").env("RUST_LOG", "warn");
    c
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("codemode-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn last_json(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line =
        stdout.lines().last().unwrap_or_else(|| panic!("no output; stderr: {}", String::from_utf8_lossy(&out.stderr)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

fn run_stdin(args: &[&str], code: &str) -> Output {
    let mut child =
        bin().args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(code.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn run_completes_and_sets_exit_status() {
    let out = run_stdin(
        &["run", "-"],
        "const s = await tools.demo_shipping_list({}); return s.filter((x) => !x.paid).length",
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = last_json(&out);
    assert_eq!(v["status"], "completed");
    assert_eq!(v["value"], 6);
    assert_eq!(v["telemetry"]["engine"], "quickjs-wasi", "the default engine");
    let out = run_stdin(&["run", "--engine", "quickjs", "-"], "throw new Error('nope')");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(last_json(&out)["status"], "failed");
}

#[test]
fn run_steps_prints_every_result() {
    let dir = tempdir("steps");
    let cell = write(&dir, "cell.js", "text('a'); await yield_control(); text('b'); return 2");
    let out = bin().args(["run", "--steps"]).arg(&cell).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["status"], "waiting");
    assert_eq!(lines[0]["reason"], "yield");
    assert_eq!(lines[1]["value"], 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_and_config_errors_exit_2() {
    let dir = tempdir("usage");
    let bad = write(&dir, "bad.json5", "{ tools: { codeMode: { enabled: true, timeout: 5 } } }");
    let out = bin().args(["run", "--config"]).arg(&bad).arg("-").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tools.codeMode.timeout"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let disabled = write(&dir, "off.json5", "{ tools: { codeMode: { timeoutMs: 500 } } }");
    let out = bin().args(["run", "--config"]).arg(&disabled).arg("-").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("disabled"));
    let out = bin().args(["run", "--engine", "v8", "-"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not available"));
    let out = bin().args(["run", "--no-such-flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `serve --console` refuses what would expose it (the book's "The operator console"): a
/// non-loopback address without operators, no `--http`, a bad `console` section (named by path).
#[test]
fn the_console_refuses_to_start_unprotected() {
    let dir = tempdir("console-refusals");
    let plain = write(&dir, "plain.json5", "{ tools: { codeMode: true } }");
    let out = bin().args(["serve", "--console", "--http", "0.0.0.0:0", "--config"]).arg(&plain).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("non-loopback") && err.contains("console.operators"), "{err}");
    let out = bin().args(["serve", "--console", "--config"]).arg(&plain).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "--console needs --http");
    let short = write(
        &dir,
        "short.json5",
        "{ tools: { codeMode: true }, console: { operators: [{ name: 'ana', token: 'short' }] } }",
    );
    let out = bin().args(["serve", "--console", "--http", "127.0.0.1:0", "--config"]).arg(&short).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("console.operators[0].token"), "{err}");
    let unset = write(
        &dir,
        "unset.json5",
        "{ tools: { codeMode: true }, console: { operators: [{ name: 'bo', tokenEnv: 'CODEMODE_TEST_UNSET_OPERATOR' }] } }",
    );
    let out = bin()
        .args(["serve", "--console", "--http", "127.0.0.1:0", "--config"])
        .arg(&unset)
        .env_remove("CODEMODE_TEST_UNSET_OPERATOR")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("CODEMODE_TEST_UNSET_OPERATOR"));
    let _ = std::fs::remove_dir_all(&dir);
}

fn exec_then_wait(dir: &Path, config: &Path, code: &str) -> (Value, Value) {
    let snaps = dir.join("runs");
    let out = run_stdin(
        &["exec", "--config", config.to_str().unwrap(), "--snapshot-dir", snaps.to_str().unwrap(), "-"],
        code,
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let first = last_json(&out);
    let id = first["runId"].as_str().unwrap_or_else(|| panic!("expected waiting: {first}")).to_string();
    let out = bin().args(["wait", "--config"]).arg(config).arg("--snapshot-dir").arg(&snaps).arg(&id).output().unwrap();
    (first, last_json(&out))
}

#[test]
fn exec_and_wait_resume_in_another_process() {
    let dir = tempdir("xproc");
    let config = write(&dir, "c.json5", "{ tools: { codeMode: { enabled: true, timeoutMs: 300 } } }");
    // State built before the suspension is used after it, in a different process.
    let (first, second) = exec_then_wait(
        &dir,
        &config,
        "const big = Array.from({length: 1000}, (_, i) => i * 2); const m = new Map([['k', big]]); text('pid-independent');
         await yield_control('checkpoint');
         return { sum: m.get('k').reduce((a, b) => a + b, 0), last: big[999] }",
    );
    assert_eq!(first["reason"], "yield");
    assert_eq!(first["output"][0]["text"], "pid-independent");
    assert_eq!(second["status"], "completed", "{second}");
    assert_eq!(second["value"], json!({ "sum": 999000, "last": 1998 }));
    assert_eq!(second["telemetry"]["waitCount"], 1);
    // A read-only call that was in flight when the exec process exited is issued again by the wait
    // process (the second sleep starts ~250 ms in and is cut off by the 300 ms limit).
    let (first, second) = exec_then_wait(
        &dir,
        &config,
        "await tools.demo_sleep({ ms: 250 }); const r = await tools.demo_sleep({ ms: 200 }); return r.slept + 1",
    );
    assert_eq!(first["reason"], "pending_tools");
    assert_eq!(first["pendingToolCalls"][0]["toolId"], "plugin:demo:demo_sleep");
    let mut last = second;
    for _ in 0..20 {
        if last["status"] != "waiting" {
            break;
        }
        let id = last["runId"].as_str().unwrap().to_string();
        let out = bin()
            .args(["wait", "--config"])
            .arg(&config)
            .arg("--snapshot-dir")
            .arg(dir.join("runs"))
            .arg(&id)
            .output()
            .unwrap();
        last = last_json(&out);
    }
    assert_eq!(last["value"], 201, "{last}");
    assert_eq!(last["telemetry"]["callCount"], 2, "the re-issued call is not counted twice: {last}");
    // A side-effecting call in flight when `exec` printed its result is finished by that process
    // (which stays until then) and its result recorded: it runs exactly once, and `wait` gets it.
    let (first, second) = exec_then_wait(
        &dir,
        &config,
        "const inv = await tools.demo_invoice_send({ shipmentId: 'SHP-1001', amount: 5, delayMs: 700 }); return inv",
    );
    assert_eq!(first["status"], "waiting");
    assert_eq!(second["status"], "completed", "{second}");
    assert!(second["value"]["invoiceId"].is_string(), "{second}");
    // Runs are scoped: another session cannot resume them.
    let snaps = dir.join("runs");
    let out = run_stdin(
        &[
            "exec",
            "--config",
            config.to_str().unwrap(),
            "--snapshot-dir",
            snaps.to_str().unwrap(),
            "--session",
            "alice",
            "-",
        ],
        "await yield_control(); return 1",
    );
    let id = last_json(&out)["runId"].as_str().unwrap().to_string();
    let out = bin()
        .args(["wait", "--session", "mallory", "--config"])
        .arg(&config)
        .arg("--snapshot-dir")
        .arg(&snaps)
        .arg(&id)
        .output()
        .unwrap();
    let v = last_json(&out);
    assert_eq!(v["code"], "invalid_input");
    assert_eq!(v["error"], "code mode run belongs to a different session.");
    let out = bin()
        .args(["wait", "--session", "alice", "--config"])
        .arg(&config)
        .arg("--snapshot-dir")
        .arg(&snaps)
        .arg(&id)
        .output()
        .unwrap();
    assert_eq!(last_json(&out)["value"], 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn demo_runs_to_completion() {
    let out = bin().arg("demo").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("waiting (pending_tools)"), "{stdout}");
    assert!(stdout.contains("module_access_denied"), "{stdout}");
    assert!(stdout.contains("\"stillUnpaid\": 4"), "the namespace scene: {stdout}");
}

/// contract §22 per-agent overrides and `byProvider`, applied to the runtime's catalog by `--agent` /
/// `--provider` / `--model`; a denied tool fails like an unknown one; an unknown agent is a usage error.
#[test]
fn agent_and_provider_policy_narrow_the_catalog() {
    let dir = tempdir("agent-policy");
    let config = write(
        &dir,
        "c.json5",
        r#"{ tools: { codeMode: true, byProvider: { "acme/small": { deny: ["demo_sleep"] } } },
             agents: { list: [{ id: "support", tools: { deny: ["demo_echo"] } }] } }"#,
    );
    let cfg = config.to_str().unwrap();
    let probe = r#"return { echo: ALL_TOOLS.some(t => t.name === "demo_echo"), sleep: ALL_TOOLS.some(t => t.name === "demo_sleep"),
                            call: await tools.callValue("plugin:demo:demo_echo", {}).then(() => "ok", e => e.message) }"#;

    let out = run_stdin(&["run", "--config", cfg, "-"], probe);
    assert_eq!(last_json(&out)["value"], json!({ "echo": true, "sleep": true, "call": "ok" }));

    let out = run_stdin(&["run", "--config", cfg, "--agent", "support", "-"], probe);
    let v = last_json(&out);
    assert_eq!(v["value"]["echo"], false, "{v}");
    assert_eq!(v["value"]["sleep"], true, "{v}");
    assert!(v["value"]["call"].as_str().unwrap().contains("unknown tool id"), "{v}");

    let out = run_stdin(&["run", "--config", cfg, "--provider", "acme", "--model", "small", "-"], probe);
    assert_eq!(last_json(&out)["value"]["sleep"], false);

    let out = run_stdin(&["run", "--config", cfg, "--agent", "nobody", "-"], "return 1");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown agent `nobody` (agents.list ids: support)"));
}

/// Spawns `codemode exec` and returns the child (still running: it stays while its nested calls
/// finish) and its first printed result.
fn spawn_exec(config: &Path, snaps: &Path, code: &str) -> (std::process::Child, Value) {
    use std::io::{BufRead, Write};
    let mut child = bin()
        .args(["exec", "--config"])
        .arg(config)
        .arg("--snapshot-dir")
        .arg(snaps)
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(code.as_bytes()).unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    (child, serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")))
}

/// `codemode wait` for the run `result` names, in another process.
fn wait_for(config: &Path, snaps: &Path, result: &Value) -> Command {
    let mut c = bin();
    c.args(["wait", "--config"]).arg(config).arg("--snapshot-dir").arg(snaps).arg(result["runId"].as_str().unwrap());
    c
}

fn wait_until_settled(config: &Path, snaps: &Path, first: &Value) -> (Value, usize) {
    let mut last = first.clone();
    let mut waits = 0;
    while last["status"] == "waiting" && waits < 20 {
        last = last_json(&wait_for(config, snaps, &last).output().unwrap());
        waits += 1;
    }
    (last, waits)
}

/// A read-only call slower than `timeoutMs` used to be re-issued by every
/// `wait` process and never finish. The process that started a call now keeps it to completion and
/// records the result, so the call runs once and the next `wait` delivers it.
#[test]
fn a_nested_call_slower_than_the_time_limit_finishes_across_processes() {
    let dir = tempdir("livelock");
    let config = write(&dir, "c.json5", "{ tools: { codeMode: { enabled: true, timeoutMs: 800 } } }");
    let snaps = dir.join("runs");
    let cell = "const r = await tools.demo_sleep({ ms: 1500 }); return r.slept";
    // Sequential: exec (prints `waiting`, stays ~0.7 s more to finish the call), then wait.
    let (first, second) = exec_then_wait(&dir, &config, cell);
    assert_eq!(first["status"], "waiting", "{first}");
    assert_eq!(second["status"], "completed", "{second}");
    assert_eq!(second["value"], 1500);
    // Concurrent: `wait` while the exec process is still running the call: it waits for the
    // recorded result instead of issuing the call again.
    let (mut child, first) = spawn_exec(&config, &snaps, cell);
    assert_eq!(first["status"], "waiting", "{first}");
    let (last, _) = wait_until_settled(&config, &snaps, &first);
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(last["value"], 1500);
    assert_eq!(last["telemetry"]["callCount"], 1, "{last}");
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// When the process running a nested call dies (SIGKILL: no chance to record anything), its claim
/// dies with it: a read-only call is issued again, a side-effecting one fails naming the tool.
#[test]
fn a_killed_process_loses_its_calls_honestly() {
    let dir = tempdir("killed");
    let config = write(&dir, "c.json5", "{ tools: { codeMode: { enabled: true, timeoutMs: 300 } } }");
    let snaps = dir.join("runs");
    let (mut child, first) =
        spawn_exec(&config, &snaps, "const r = await tools.demo_sleep({ ms: 600 }); return r.slept");
    child.kill().unwrap();
    let _ = child.wait();
    let (last, _) = wait_until_settled(&config, &snaps, &first);
    assert_eq!(last["value"], 600, "read-only: issued again: {last}");
    let (mut child, first) = spawn_exec(
        &config,
        &snaps,
        "return await tools.demo_invoice_send({ shipmentId: 'SHP-1001', amount: 5, delayMs: 2000 })",
    );
    child.kill().unwrap();
    let _ = child.wait();
    let (last, _) = wait_until_settled(&config, &snaps, &first);
    assert_eq!(last["status"], "failed", "{last}");
    assert_eq!(last["code"], "nested_tool_failed");
    assert!(last["error"].as_str().unwrap().contains("plugin:demo:demo_invoice_send"), "{last}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// 90 `codemode exec` processes, 16 at a time, suspending into one directory:
/// exactly 64 runs are admitted; the others fail with the contract's message (contract V25).
#[test]
fn the_run_cap_holds_across_concurrent_processes() {
    let dir = tempdir("cap");
    let config = write(&dir, "c.json5", "{ tools: { codeMode: { enabled: true } } }");
    let snaps = dir.join("runs");
    let results: Vec<Value> = std::thread::scope(|scope| {
        let mut all = Vec::new();
        for batch in 0..6 {
            let handles: Vec<_> = (0..16)
                .filter(|i| batch * 16 + i < 90)
                .map(|_| {
                    let (config, snaps) = (config.clone(), snaps.clone());
                    scope.spawn(move || {
                        let out = run_stdin(
                            &[
                                "exec",
                                "--config",
                                config.to_str().unwrap(),
                                "--snapshot-dir",
                                snaps.to_str().unwrap(),
                                "-",
                            ],
                            "await yield_control(); return 1",
                        );
                        last_json(&out)
                    })
                })
                .collect();
            all.extend(handles.into_iter().map(|h| h.join().unwrap()));
        }
        all
    });
    assert_eq!(results.len(), 90);
    let waiting = results.iter().filter(|r| r["status"] == "waiting").count();
    assert_eq!(waiting, 64, "exactly 64 runs admitted");
    for r in results.iter().filter(|r| r["status"] != "waiting") {
        assert_eq!(r["error"], "too many suspended code mode runs.", "{r}");
    }
    let runs =
        std::fs::read_dir(&snaps).unwrap().flatten().filter(|e| e.path().extension().is_some_and(|x| x == "run"));
    assert_eq!(runs.count(), 64);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `wait` that resumes while another process still runs the run's call, and whose own time
/// limit passes first, suspends the run again without taking the call over: no re-issue (a
/// side-effecting call would refuse), no result lost, and it leaves no claim behind.
#[test]
fn waits_that_outlast_nothing_hand_the_call_back() {
    let dir = tempdir("handback");
    let config = write(&dir, "c.json5", "{ tools: { codeMode: { enabled: true, timeoutMs: 200 } } }");
    let snaps = dir.join("runs");
    let (mut child, first) = spawn_exec(
        &config,
        &snaps,
        "return await tools.demo_invoice_send({ shipmentId: 'SHP-1001', amount: 5, delayMs: 1500 })",
    );
    assert_eq!(first["status"], "waiting", "{first}");
    // One wait while the exec process still runs the call: it runs out of time, suspends the run
    // again, and exits at once — it does not stay to finish a call it does not run.
    let out = wait_for(&config, &snaps, &first).env("RUST_LOG", "info").output().unwrap();
    let second = last_json(&out);
    assert_eq!(second["status"], "waiting", "{second}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("finishing nested calls"), "the wait process took the call over: {stderr}");
    let (last, _) = wait_until_settled(&config, &snaps, &second);
    assert_eq!(last["status"], "completed", "{last}");
    assert!(last["value"]["invoiceId"].is_string(), "{last}");
    assert!(child.wait().unwrap().success());
    let claims: Vec<_> = std::fs::read_dir(&snaps)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".calls-"))
        .collect();
    assert!(claims.is_empty(), "claims left behind: {claims:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gated call parks the run in one process, `codemode approve` (another process)
/// records the decision, and `codemode wait` (a third) runs or rejects the call.
#[test]
fn approvals_across_processes() {
    let dir = tempdir("approve");
    let snaps = dir.join("runs");
    let config = write(
        &dir,
        "c.json5",
        "{ tools: { codeMode: { enabled: true, timeoutMs: 300 } }, approvals: { require: ['demo_invoice_send'] } }",
    );
    let exec = |code: &str| {
        let out = run_stdin(
            &["exec", "--config", config.to_str().unwrap(), "--snapshot-dir", snaps.to_str().unwrap(), "-"],
            code,
        );
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        last_json(&out)
    };
    let approve = |run: &Value, request: &Value, deny: Option<&str>| {
        let mut c = bin();
        c.args(["approve", "--snapshot-dir"])
            .arg(&snaps)
            .arg(run.as_str().unwrap())
            .arg(request.as_u64().unwrap().to_string());
        if let Some(reason) = deny {
            c.args(["--deny", reason]);
        }
        c.output().unwrap()
    };
    let cell = "try { const r = await tools.demo_invoice_send({ shipmentId: 'SHP-1001', amount: 1200 }); \
                return 'sent ' + r.invoiceId.slice(0, 4) } catch (e) { return e.code + ': ' + e.message }";
    // Approved.
    let first = exec(cell);
    assert_eq!(first["status"], "waiting", "{first}");
    let pending = &first["pendingToolCalls"][0];
    assert_eq!(pending["kind"], "approval", "{first}");
    assert_eq!(pending["toolId"], "plugin:demo:demo_invoice_send");
    // A mistyped request id is refused (exit 1) naming what is parked.
    let out = approve(&first["runId"], &json!(978), None);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "request 978 is not waiting for approval; the calls waiting for approval are request {}",
            pending["requestId"]
        )),
        "{stderr}"
    );
    let out = approve(&first["runId"], &pending["requestId"], None);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(last_json(&out)["decision"], json!({"decision": "approve"}));
    assert!(String::from_utf8_lossy(&out.stderr).contains("approval decision recorded"), "an audit line");
    let (done, _) = wait_until_settled(&config, &snaps, &first);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["value"], "sent INV-");
    // Denied.
    let first = exec(cell);
    let pending = &first["pendingToolCalls"][0];
    let out = approve(&first["runId"], &pending["requestId"], Some("over budget"));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (done, _) = wait_until_settled(&config, &snaps, &first);
    assert_eq!(
        done["value"], "nested_tool_failed: plugin:demo:demo_invoice_send: approval denied: over budget",
        "{done}"
    );
    // A settled run (or one that never existed) takes no decision.
    let out = approve(&first["runId"], &pending["requestId"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unavailable or expired"));
    let out = bin().args(["approve", "--snapshot-dir"]).arg(&snaps).args(["../etc", "1"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `codemode run` keeps its run in memory, where nobody can approve it: at the first
/// `waiting` whose calls all wait for approval it stops (exit 1) and says how to approve, instead of
/// polling `wait` until the run expires.
#[test]
fn run_stops_at_calls_nobody_can_approve() {
    let dir = tempdir("run-approval");
    let config = write(
        &dir,
        "c.json5",
        "{ tools: { codeMode: { enabled: true, timeoutMs: 300 } }, approvals: { require: ['demo_invoice_send'] } }",
    );
    let started = std::time::Instant::now();
    let out = run_stdin(
        &["run", "--config", config.to_str().unwrap(), "-"],
        "return await tools.demo_invoice_send({ shipmentId: 'SHP-1001', amount: 1 })",
    );
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let v = last_json(&out);
    assert_eq!(v["status"], "waiting", "{v}");
    assert_eq!(v["pendingToolCalls"][0]["kind"], "approval", "{v}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("codemode approve --snapshot-dir"), "{stderr}");
    // It did not poll: well under the 28 hours a poll could last (a generous bound, not a timing).
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The config files other MCP clients keep work as they are: Claude Code's `type`,
/// other programs' keys (ignored with one warning), and code mode on without `tools.codeMode`.
#[test]
fn other_clients_config_files_work_as_they_are() {
    let dir = tempdir("foreign-config");
    let claude_code = write(
        &dir,
        "claude.json",
        r#"{ "numStartups": 4, "theme": "dark",
             "mcpServers": { "gone": { "type": "stdio", "command": "/nonexistent/codemode-no-such-server", "autoApprove": [] } } }"#,
    );
    let out = run_stdin(&["run", "--config", claude_code.to_str().unwrap(), "-"], "return Object.keys(MCP)");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(last_json(&out)["value"], json!(["gone"]), "the server that cannot start keeps its name in MCP");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> =
        stderr.lines().filter(|l| l.contains("ignoring settings codemode does not use")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    for key in ["numStartups", "theme", "mcpServers.gone.autoApprove"] {
        assert!(warnings[0].contains(key), "{stderr}");
    }
    // Colours only on a terminal: this stderr is a pipe.
    assert!(!stderr.contains('\u{1b}'), "ANSI escapes in a piped log: {stderr:?}");
    // codemode's own keys stay strict; a typo of one of them is an error.
    let typo = write(&dir, "typo.json", r#"{ "mcpServer": {} }"#);
    let out = bin().args(["run", "--config"]).arg(&typo).arg("-").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("did you mean `mcpServers`"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A hostile upstream server cannot clear the operator's screen, forge log lines or
/// hide entries: names with control, line-break or bidi characters (or longer than 128 characters)
/// are refused at ingestion, and what `codemode catalog` and the log print is escaped.
#[test]
fn hostile_upstream_names_reach_no_terminal_raw() {
    let dir = tempdir("hostile-names");
    let server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2e/hostile_server.js");
    let config = write(
        &dir,
        "c.json5",
        &format!("{{ mcpServers: {{ hostile: {{ command: 'node', args: [{:?}] }} }} }}", server.to_string_lossy()),
    );
    let out = bin().args(["catalog", "--config"]).arg(&config).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (what, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        for bad in ['\u{1b}', '\u{2028}', '\u{2029}', '\u{202e}', '\r'] {
            assert!(!text.contains(bad), "{what} holds {bad:?}:\n{text}");
        }
        assert!(
            !text.lines().any(|l| l.trim_start().starts_with("Why approval is needed")),
            "{what} has a forged line:\n{text}"
        );
    }
    // Ordinary names are listed; the refused ones are not, and the log says why (escaped).
    assert!(stdout.contains("mcp:hostile:echo"), "{stdout}");
    assert!(!stdout.contains("Hclear") && !stdout.contains("gnp.exe") && !stdout.contains("xxxxxxxxxx"), "{stdout}");
    assert!(stderr.contains("left out of the catalog"), "{stderr}");
    assert!(stderr.contains("\\u{1b}[2J"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A FIFO or a huge sparse file named like a run file neither hangs nor bloats the
/// `exec` / `wait` of that directory.
#[cfg(unix)]
#[test]
fn hostile_files_in_the_snapshot_directory() {
    let dir = tempdir("hostile-files");
    let snaps = dir.join("runs");
    std::fs::create_dir_all(&snaps).unwrap();
    let fifo = snaps.join("cm_0000000000000000000000000000fifo.run");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let sparse = std::fs::File::create(snaps.join("cm_000000000000000000000000000sparse.run")).unwrap();
    sparse.set_len(1 << 40).unwrap();
    drop(sparse);
    let config = write(&dir, "c.json5", "{ tools: { codeMode: { enabled: true, timeoutMs: 300 } } }");
    // Resuming one of them fails at once (it is not a run file), and the store removes both as garbage.
    for id in ["cm_0000000000000000000000000000fifo", "cm_000000000000000000000000000sparse"] {
        let out = bin().args(["wait", "--snapshot-dir"]).arg(&snaps).arg(id).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
        let code = last_json(&out)["code"].clone();
        assert!(code == "snapshot_restore_failed" || code == "invalid_input", "{code}");
    }
    assert!(!fifo.exists(), "the FIFO is removed as garbage");
    let (first, last) = exec_then_wait(&dir, &config, "await yield_control(); return 7");
    assert_eq!(first["status"], "waiting", "{first}");
    assert_eq!(last["value"], 7, "{last}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C during `codemode run` aborts the run cleanly and prints the `aborted` result.
#[test]
fn ctrl_c_aborts_a_run() {
    use std::io::{BufRead, Write};
    let mut child = bin()
        .args(["run", "--steps", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"text('started'); await yield_control(); return await tools.demo_sleep({ ms: 20000 })")
        .unwrap();
    // The first step (the yield) is printed once the cell really runs; then interrupt the wait.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.contains("\"waiting\""), "{first}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let started = std::time::Instant::now();
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let last: Value = serde_json::from_str(rest.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(status.code(), Some(1));
    assert_eq!(last["status"], "failed", "{last}");
    assert_eq!(last["code"], "aborted", "{last}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "it did not wait for the 20 s call");
}

/// contract §10 N9 across processes, with a namespace declared in the config file: a namespace call
/// slower than `timeoutMs` suspends the run in one `codemode exec` process; `codemode wait` in
/// another process resumes it, and the cell's next namespace calls (declared and the demo plugin's
/// `Shipping`) resolve there. `codemode catalog` lists the namespaces and the `exec` description.
#[test]
fn namespace_calls_resume_across_processes() {
    let dir = tempdir("namespaces");
    let config = write(
        &dir,
        "c.json5",
        r#"{ tools: { codeMode: { enabled: true, timeoutMs: 800 } },
             namespaces: [{ owner: "plugin:demo", globalName: "Ops", description: "Operations helpers.",
                            prompt: "Ops.nap(ms) sleeps; Ops.heavy(tons) lists shipments over tons.",
                            data: { team: "logistics" },
                            members: { nap: { tool: "demo_sleep", input: { ms: "$1" } },
                                       "shipments.heavy": { tool: "demo_shipping_list", input: { minTons: "$1" } } } }] }"#,
    );
    let cell = "const n = await Ops.nap(1500);\n\
                const heavy = await Ops.shipments.heavy(20);\n\
                const unpaid = await Shipping.unpaidOver(20);\n\
                return { n, heavy: heavy.map((s) => s.id), unpaid: unpaid.map((s) => s.id), team: Ops.team,
                         root: Object.keys(namespaces), same: namespaces.Ops === Ops };";
    let (first, second) = exec_then_wait(&dir, &config, cell);
    assert_eq!(first["status"], "waiting", "{first}");
    assert_eq!(first["pendingToolCalls"][0]["toolId"], "plugin:demo:demo_sleep", "{first}");
    let (last, _) = wait_until_settled(&config, &dir.join("runs"), &second);
    assert_eq!(
        last["value"],
        json!({"n": {"slept": 1500}, "heavy": ["SHP-1005", "SHP-1010"], "unpaid": ["SHP-1005", "SHP-1010"],
               "team": "logistics", "root": ["Ops", "Shipping"], "same": true}),
        "{last}"
    );
    let out = bin().args(["catalog", "--json", "--config"]).arg(&config).output().unwrap();
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> =
        listed["namespaces"].as_array().unwrap().iter().map(|n| n["globalName"].as_str().unwrap()).collect();
    assert_eq!(names, ["Ops", "Shipping"], "{listed}");
    // Denying a backing tool hides the declared namespace (and says why in the text listing).
    let denied = write(
        &dir,
        "d.json5",
        &std::fs::read_to_string(&config)
            .unwrap()
            .replace("timeoutMs: 800 }", "timeoutMs: 800 }, deny: [\"demo_sleep\"]"),
    );
    let out = bin().args(["catalog", "--config"]).arg(&denied).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("namespace Ops (config:Ops, owner plugin:demo): hidden"), "{text}");
    assert!(text.contains("namespace Shipping (demo-shipping"), "{text}");
    // A bad declaration is a config error naming its path.
    let bad = write(
        &dir,
        "bad.json5",
        r#"{ namespaces: [{ owner: "plugin:demo", globalName: "tools", description: "x", members: { a: { tool: "demo_echo" } } }] }"#,
    );
    let out = bin().args(["catalog", "--config"]).arg(&bad).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("namespaces[0]"), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `codemode run --trace=FILE`: the run's `exec` and `wait` calls and the nested
/// calls each drove, as JSON lines; `--trace` alone writes them to stderr, never to stdout.
#[test]
fn run_trace_writes_the_trajectory() {
    let dir = tempdir("trace");
    let config = write(&dir, "c.json5", "{ tools: { codeMode: { enabled: true, timeoutMs: 400 } } }");
    let trace = dir.join("trace.jsonl");
    let cell = "const a = await tools.demo_sleep({ ms: 700 });\nconst b = await Shipping.unpaidOver(20);\nreturn [a.slept, b.length];";
    let trace_arg = format!("--trace={}", trace.display());
    let out = run_stdin(&["run", "--config", config.to_str().unwrap(), &trace_arg, "-"], cell);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(last_json(&out)["value"], json!([700, 2]));
    let lines: Vec<Value> =
        std::fs::read_to_string(&trace).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let summary: Vec<(String, String, String)> = lines
        .iter()
        .map(|l| {
            let who = l["toolCallId"].as_str().or(l["parentToolCallId"].as_str()).unwrap_or("").to_string();
            let what = l["tool"].as_str().or(l["toolId"].as_str()).unwrap_or("").to_string();
            let state = l["status"].as_str().or(l["outcome"].as_str()).unwrap_or("").to_string();
            (who, what, state)
        })
        .collect();
    let s = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
    assert_eq!(
        summary[..3],
        [
            s("exec-1", "exec", "started"),
            s("exec-1", "plugin:demo:demo_sleep", "issued"),
            s("exec-1", "exec", "waiting")
        ]
    );
    assert!(
        summary.contains(&s("wait-2", "plugin:demo:demo_sleep", "completed"))
            || summary.contains(&s("wait-3", "plugin:demo:demo_sleep", "completed")),
        "{summary:?}"
    );
    // The namespace call is an entry of its backing catalog tool.
    assert!(
        summary.iter().any(|(_, what, state)| what == "plugin:demo:demo_shipping_list" && state == "completed"),
        "{summary:?}"
    );
    assert_eq!(summary.last().unwrap().2, "completed");
    // To stderr: stdout stays the result only.
    let out = run_stdin(
        &["run", "--config", config.to_str().unwrap(), "--trace", "-"],
        "return (await tools.demo_echo({ secret: 'x' })).secret",
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1, "{}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\"type\":\"nested\"") && stderr.contains("\"secret\":\"[redacted]\""), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// With the OTLP exporter switched on and no collector listening, runs still complete; the export
/// failure stays on stderr.
#[test]
fn an_unreachable_collector_never_fails_a_run() {
    let mut c = bin();
    c.args(["run", "-"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "500");
    let mut child = c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"return (await tools.demo_echo({ n: 41 })).n + 1").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(last_json(&out)["value"], json!(42));
}

/// contract §18 debugging switches on `codemode serve --stdio`: the tool names sent,
/// the MCP requests served and the start-up report go to stderr; stdout carries nothing but
/// protocol messages.
#[test]
fn serve_debug_switches_log_to_stderr_only() {
    let messages = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"cli-test","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"exec","arguments":{"code":"return 6 * 7"}}}"#,
    ];
    for (payload, expect) in
        [("tools", "model payload: tool names sent"), ("full-redacted", "model payload: tool list sent (redacted)")]
    {
        let mut child = bin()
            .args(["serve", "--demo-tools"])
            .env("OPENCLAW_DEBUG_MODEL_PAYLOAD", payload)
            .env("CODEMODE_DEBUG_TRANSPORT", "1")
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let reader = std::thread::spawn({
            let stdout = child.stdout.take().unwrap();
            move || {
                use std::io::BufRead;
                // The server answers requests concurrently: the `exec` (id 3) may be answered
                // before `tools/list` (id 2), so read until both responses are in (or stdout ends).
                let mut lines = Vec::new();
                let (mut list_seen, mut exec_seen) = (false, false);
                for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                    list_seen |= line.contains("\"id\":2");
                    exec_seen |= line.contains("\"id\":3");
                    lines.push(line);
                    if list_seen && exec_seen {
                        break;
                    }
                }
                lines
            }
        });
        for m in messages {
            writeln!(stdin, "{m}").unwrap();
        }
        let lines = reader.join().unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        for l in &lines {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("stdout must be protocol only: {l}: {e}"));
            assert_eq!(v["jsonrpc"], "2.0", "{l}");
        }
        let list = lines.iter().find(|l| l.contains("\"id\":2"));
        let list: Value =
            serde_json::from_str(list.unwrap_or_else(|| panic!("no tools/list response: {lines:?}\n{stderr}")))
                .unwrap();
        let names: Vec<&str> =
            list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["exec", "wait"]);
        assert!(stderr.contains(expect), "{payload}: {stderr}");
        assert!(stderr.contains("request received") && stderr.contains("response sent"), "{stderr}");
        assert!(stderr.contains("catalog of") && stderr.contains("smaller"), "start-up report: {stderr}");
    }
}

/// A fleet store that cannot be reached at start is a clear error with exit status 2
/// (not a hang, not a server that fails later); so are a Redis store without a URL and a bad
/// `snapshotStore` section.
#[test]
fn serve_refuses_an_unreachable_or_misconfigured_redis_store() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = bin()
        .args(["serve", "--http", "127.0.0.1:0", "--store", &format!("redis://127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unreachable") && stderr.contains(&port.to_string()), "{stderr}");
    let out = bin()
        .args(["serve", "--store", "redis"])
        .env_remove("CODEMODE_REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("CODEMODE_REDIS_URL"), "{stderr}");
    let dir = tempdir("bad-store");
    let config = write(&dir, "c.json5", "{ snapshotStore: { kind: 'redis', leaseMs: 5 } }");
    let out = bin().args(["serve", "--config"]).arg(&config).stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("snapshotStore.leaseMs"), "{stderr}");
}

/// An upstream tool that runs code itself (a nested code mode) is flagged by
/// `codemode catalog` (table and JSON) and in the start log, with advice; it is not removed.
#[test]
fn catalog_flags_nested_code_modes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let server = root.join("tests/e2e/ledger_server.js");
    let dir = tempdir("nested-code-mode");
    let config = write(
        &dir,
        "c.json5",
        &format!(
            "{{ mcpServers: {{ ledger: {{ command: 'node', args: [{:?}, {:?}] }} }} }}",
            server.to_string_lossy(),
            dir.join("ledger.txt").to_string_lossy()
        ),
    );
    let out = bin().args(["catalog", "--json", "--config"]).arg(&config).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["nestedCodeModes"], json!(["mcp:ledger:run_code"]), "{v}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nested code mode"), "start log");
    let out = bin().args(["catalog", "--config"]).arg(&config).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("nested code mode: mcp:ledger:run_code") && text.contains("deny"), "{text}");
    assert!(text.contains("mcp:ledger:pay"), "the other tools stay: {text}");
}

/// The `d_tag`s of an ELF64 little-endian file's dynamic segment, or `None` if `bytes` is not such
/// a file or has no dynamic segment.
fn elf_dynamic_tags(bytes: &[u8]) -> Option<Vec<u64>> {
    let u16_at = |o: usize| bytes.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| bytes.get(o..o + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    let u64_at = |o: usize| bytes.get(o..o + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    // Magic, 64-bit class, little-endian data.
    if bytes.get(0..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let (phoff, phentsize, phnum) = (u64_at(0x20)? as usize, u16_at(0x36)? as usize, u16_at(0x38)? as usize);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(ph)? != 2 {
            continue; // not PT_DYNAMIC
        }
        let (offset, size) = (u64_at(ph + 8)? as usize, u64_at(ph + 32)? as usize);
        let mut tags = Vec::new();
        for entry in (offset..offset + size).step_by(16) {
            match u64_at(entry)? {
                0 => break, // DT_NULL
                tag => tags.push(tag),
            }
        }
        return Some(tags);
    }
    None
}

/// Cold start: the binary carries its relative relocations packed (`DT_RELR`, tag 36) exactly when
/// the build script's probe found a linker and a glibc that support them (see `build.rs`), and it
/// starts either way.
#[test]
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64", target_endian = "little"))]
fn relative_relocations_are_packed_when_the_toolchain_supports_it() {
    let bytes = std::fs::read(env!("CARGO_BIN_EXE_codemode")).unwrap();
    let tags = elf_dynamic_tags(&bytes).expect("the binary is an ELF64 executable with a dynamic segment");
    const DT_RELR: u64 = 36;
    const DT_RELA: u64 = 7;
    assert!(tags.contains(&DT_RELA) || tags.contains(&DT_RELR), "a position-independent binary has relocations");
    assert_eq!(
        tags.contains(&DT_RELR),
        option_env!("CODEMODE_RELR_LINKED").is_some(),
        "DT_RELR present iff the build script linked with -z pack-relative-relocs"
    );
    let out = bin().arg("--version").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The guest module is loaded on a thread of its own from the start of the process, racing the
/// first cell: an artifact cut off in the cache (a full disk, a crash while copying a cache
/// directory) is refused by whichever of the two gets to it first, rebuilt and written back whole,
/// and the run completes on either path (the engine known before the config file is read, or only
/// after it).
#[test]
fn a_cut_off_module_cache_is_rebuilt_by_the_early_load() {
    let dir = tempdir("cut-cache");
    let cache = dir.join("cache");
    let config = write(&dir, "codemode.json", r#"{ "tools": { "codeMode": { "enabled": true } } }"#);
    let run = |args: &[&str]| {
        let out = bin()
            .env("CODEMODE_CACHE_DIR", &cache)
            .env_remove("CODEMODE_NO_MODULE_CACHE")
            .args(["run"])
            .args(args)
            .arg("-")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().unwrap().write_all(b"return 6 * 7")?;
                c.wait_with_output()
            })
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let v = last_json(&out);
        assert_eq!((v["status"].as_str(), v["value"].as_i64()), (Some("completed"), Some(42)), "{args:?}: {v}");
        assert_eq!(v["telemetry"]["engine"], "quickjs-wasi");
    };
    let artifacts = || -> Vec<(PathBuf, u64)> {
        std::fs::read_dir(&cache)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
                    .map(|e| (e.path(), e.metadata().unwrap().len()))
                    .collect()
            })
            .unwrap_or_default()
    };
    run(&["--engine", "quickjs-wasi"]);
    let built = artifacts();
    assert_eq!(built.len(), 1, "one artifact written: {built:?}");
    for args in [&["--engine", "quickjs-wasi"][..], &["--config", config.to_str().unwrap()][..]] {
        let (path, len) = &built[0];
        std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len / 2).unwrap();
        run(args);
        assert_eq!(artifacts(), built, "{args:?}: the artifact is rebuilt whole");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every command that touches a store takes the config file's store settings: a fleet's
/// `snapshotStore` with its own `keyPrefix` is where `exec` parks a call, where `approve
/// --config` finds it (an `approve` that knows only the Redis URL looks under the default prefix
/// and finds nothing), and where `wait` resumes it; a `--store` URL keeps the file's prefix. See
/// the book's Snapshot store section.
#[test]
fn every_store_command_takes_the_fleets_key_prefix_from_the_config() {
    let redis = codemode_snapshot::conformance::RedisServer::start().expect("redis-server (scripts/setup.sh)");
    let dir = tempdir("fleet-prefix");
    let config = write(
        &dir,
        "fleet.json5",
        &format!(
            "{{ tools: {{ codeMode: {{ enabled: true, timeoutMs: 2000 }} }}, \
             approvals: {{ require: ['demo_invoice_send'] }}, \
             snapshotStore: {{ kind: 'redis', url: '{}', keyPrefix: 'team-a:' }} }}",
            redis.url()
        ),
    );
    let cfg = config.to_str().unwrap();
    let cell = "const r = await tools.demo_invoice_send({ shipmentId: 'SHP-1001', amount: 1200 }); \
                return 'sent ' + r.invoiceId.slice(0, 4)";
    let keys = || {
        let out = Command::new("redis-cli")
            .args(["-p", &redis.port().to_string(), "--scan", "--pattern", "*"])
            .output()
            .expect("redis-cli (installed with redis-server)");
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect::<Vec<_>>()
    };
    for store_flag in [None, Some(redis.url())] {
        let mut args = vec!["exec", "--config", cfg];
        if let Some(url) = &store_flag {
            args.extend(["--store", url.as_str()]);
        }
        args.push("-");
        let out = run_stdin(&args, cell);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let first = last_json(&out);
        assert_eq!(first["status"], "waiting", "{first}");
        let run = first["runId"].as_str().unwrap().to_string();
        let request = first["pendingToolCalls"][0]["requestId"].as_u64().unwrap().to_string();
        let stored: Vec<String> = keys().into_iter().filter(|k| k.contains(&run)).collect();
        assert!(!stored.is_empty(), "the run is in Redis");
        assert!(stored.iter().all(|k| k.starts_with("team-a:")), "the run under the fleet's prefix: {stored:?}");
        // Knowing only the URL, `approve` reads the default prefix: the run is not there.
        let out = bin().args(["approve", "--store", &redis.url(), &run, &request]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
        // With the fleet's config it decides the parked call.
        let out = bin().args(["approve", "--config", cfg, &run, &request]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let out = bin().args(["wait", "--config", cfg, &run]).output().unwrap();
        let done = last_json(&out);
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["value"], "sent INV-");
    }
}

/// A run carries its policy across processes (the book's configuration, "A run carries its
/// policy"): `exec --config strict` (a tool denied) then `wait --config wide` cannot call the
/// denied tool; `exec --agent locked` then `wait --agent open` (or no `--agent`) is refused, and
/// the run stays for `wait --agent locked`.
#[test]
fn a_wait_under_a_broader_policy_cannot_widen_the_run() {
    let dir = tempdir("run-policy");
    let snaps = dir.join("runs");
    let strict = write(&dir, "strict.json5", "{ tools: { codeMode: { enabled: true }, deny: ['demo_echo'] } }");
    let wide = write(&dir, "wide.json5", "{ tools: { codeMode: { enabled: true } } }");
    let agents = write(
        &dir,
        "agents.json5",
        "{ tools: { codeMode: { enabled: true } }, agents: { list: [{ id: 'locked', tools: { deny: ['demo_echo'] } }, \
         { id: 'open', tools: {} }] } }",
    );
    let cell = "await yield_control(); try { const r = await tools.callValue('plugin:demo:demo_echo', { n: 1 }); \
                return 'called' } catch (e) { return e.code }";
    let exec = |extra: &[&str]| {
        let mut args = vec!["exec", "--snapshot-dir", snaps.to_str().unwrap()];
        args.extend_from_slice(extra);
        args.push("-");
        let out = run_stdin(&args, cell);
        let first = last_json(&out);
        assert_eq!(first["status"], "waiting", "{first}");
        first["runId"].as_str().unwrap().to_string()
    };
    let wait = |run: &str, extra: &[&str]| {
        let out =
            bin().args(["wait", "--snapshot-dir", snaps.to_str().unwrap()]).args(extra).arg(run).output().unwrap();
        last_json(&out)
    };
    let run = exec(&["--config", strict.to_str().unwrap()]);
    let done = wait(&run, &["--config", wide.to_str().unwrap()]);
    assert_eq!(done["value"], "nested_tool_failed", "the wide config gave the run a denied tool: {done}");

    let cfg = agents.to_str().unwrap();
    let run = exec(&["--config", cfg, "--agent", "locked"]);
    for other in [&["--config", cfg, "--agent", "open"][..], &["--config", cfg][..]] {
        let refused = wait(&run, other);
        assert_eq!(refused["code"], "invalid_input", "{refused}");
    }
    let done = wait(&run, &["--config", cfg, "--agent", "locked"]);
    assert_eq!(done["value"], "nested_tool_failed", "{done}");
}
