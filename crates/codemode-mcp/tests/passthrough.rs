//! The passthrough surface (contract V1, E1–E3): with code mode disabled, `codemode serve` lists the
//! upstream servers' tools exactly as a client connected to them would see them, and answers each
//! call with the server's own result. Checked against the real `server-everything` (installed by
//! `scripts/setup.sh`), compared with an rmcp client connected to the same server directly; a name
//! two servers share is prefixed; a server that crashes is reported in a result, never by ending
//! the session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::config_file::ConfigFile;
use codemode_mcp::passthrough::PassthroughServer;
use rmcp::model::{CallToolRequestParams, ClientConfig, Implementation};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::path::PathBuf;

fn e2e_bin(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2e/node_modules/.bin").join(name);
    assert!(p.exists(), "{} is missing: run scripts/setup.sh", p.display());
    p
}

fn crash_server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/crash_on_call.js")
}

type Client = RunningService<RoleClient, ClientConfig>;

/// A passthrough session over `servers`, with code mode disabled in the config.
async fn passthrough(servers: Value) -> (Client, std::sync::Arc<codemode_mcp::McpHub>) {
    let text = json!({ "tools": { "codeMode": { "enabled": false } }, "mcpServers": servers }).to_string();
    let file = ConfigFile::parse(&text).unwrap();
    assert!(!file.code_mode.enabled);
    let hub = codemode_mcp::connect_servers(&file).await.unwrap();
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let server = PassthroughServer::new(hub.clone());
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = ClientConfig::new(Default::default(), Implementation::new("passthrough-test", "0"))
        .serve(client_io)
        .await
        .unwrap();
    (client, hub)
}

fn call(name: &str, args: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_string()).with_arguments(args.as_object().unwrap().clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tools_are_served_unchanged() {
    let everything = e2e_bin("mcp-server-everything");
    let (client, hub) =
        passthrough(json!({ "everything": { "command": everything.to_string_lossy(), "args": ["stdio"] } })).await;
    // The same server, connected directly.
    let direct: Client = ClientConfig::new(Default::default(), Implementation::new("direct", "0"))
        .serve(TokioChildProcess::new(tokio::process::Command::new(&everything).tap_arg("stdio")).unwrap())
        .await
        .unwrap();
    let served = client.peer().list_all_tools().await.unwrap();
    let upstream = direct.peer().list_all_tools().await.unwrap();
    assert!(served.len() >= 10);
    assert_eq!(
        serde_json::to_value(&served).unwrap(),
        serde_json::to_value(&upstream).unwrap(),
        "names, descriptions, schemas and annotations as the server lists them"
    );
    assert!(!served.iter().any(|t| t.name == "exec" || t.name == "wait"));
    let through = client.peer().call_tool(call("get-sum", json!({ "a": 2, "b": 40 }))).await.unwrap();
    let straight = direct.peer().call_tool(call("get-sum", json!({ "a": 2, "b": 40 }))).await.unwrap();
    assert_eq!(serde_json::to_value(&through).unwrap(), serde_json::to_value(&straight).unwrap());
    assert!(super_text(&through).contains("42"));
    // A server-side input error stays the server's error result.
    let bad = client.peer().call_tool(call("get-sum", json!({ "a": "2" }))).await.unwrap();
    assert_eq!(bad.is_error, Some(true));
    // An unknown tool is a protocol error naming it.
    let e = client.peer().call_tool(call("no-such-tool", json!({}))).await.unwrap_err();
    assert!(e.to_string().contains("no-such-tool"), "{e}");
    let _ = direct.cancel().await;
    let _ = client.cancel().await;
    hub.shutdown().await;
}

fn super_text(r: &rmcp::model::CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_names_are_prefixed_and_a_crashed_server_is_an_error_result() {
    let everything = e2e_bin("mcp-server-everything").to_string_lossy().to_string();
    let (client, hub) = passthrough(json!({
        "a": { "command": everything, "args": ["stdio"] },
        "b": { "command": everything, "args": ["stdio"] },
        "crashy": { "command": "node", "args": [crash_server().to_string_lossy()] },
    }))
    .await;
    let names: Vec<String> =
        client.peer().list_all_tools().await.unwrap().into_iter().map(|t| t.name.to_string()).collect();
    assert!(names.contains(&"a_get-sum".to_string()) && names.contains(&"b_get-sum".to_string()), "{names:?}");
    assert!(!names.contains(&"get-sum".to_string()));
    let r = client.peer().call_tool(call("b_get-sum", json!({ "a": 1, "b": 2 }))).await.unwrap();
    assert!(super_text(&r).contains('3'));
    // The crashing server's tool: its call kills it; the client gets an error result and the
    // session goes on.
    assert!(names.contains(&"boom".to_string()), "{names:?}");
    let r = client.peer().call_tool(call("boom", json!({}))).await.unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(super_text(&r).contains("crashy"), "the error names the server: {r:?}");
    let again = client.peer().call_tool(call("a_get-sum", json!({ "a": 1, "b": 1 }))).await.unwrap();
    assert!(super_text(&again).contains('2'));
    let _ = client.cancel().await;
    hub.shutdown().await;
}

/// `Command::arg` returning the command, for building one in an expression.
trait TapArg {
    fn tap_arg(self, arg: &str) -> Self;
}

impl TapArg for tokio::process::Command {
    fn tap_arg(mut self, arg: &str) -> Self {
        self.arg(arg);
        self
    }
}
