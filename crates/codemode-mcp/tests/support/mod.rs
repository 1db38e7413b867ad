//! Helpers the gateway's integration tests share.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use codemode::{CodeModeResult, RunContext};
use codemode_mcp::server::Gateway;
use serde_json::{Value, json};

/// Runs a cell in `session` to its end, calling `wait` while it is waiting.
pub async fn run(gw: &Gateway, session: &str, code: &str) -> Value {
    let ctx = RunContext::session(session);
    let mut result = gw.code_mode().exec_json(&ctx, &json!({ "code": code })).await;
    for _ in 0..100 {
        let CodeModeResult::Waiting { run_id, .. } = &result else { break };
        let run_id = run_id.to_string();
        result = gw.code_mode().wait_json(&ctx, &json!({ "runId": run_id })).await;
    }
    result.to_json()
}

/// The value of a completed run (the test fails on any other status).
pub fn completed(v: &Value) -> &Value {
    assert_eq!(v["status"], "completed", "expected a completed run: {v:#}");
    &v["value"]
}
