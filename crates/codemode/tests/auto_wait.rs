//! Zero-token waiting for hosts (book: "Zero-token waiting"): with an auto-wait budget, `exec`
//! resumes a `waiting` run itself until it ends or the budget runs out, carries the output of the
//! results it did not hand back, stops at once for a parked approval, and reports what stayed out
//! of the model's context (`toolResultBytes` against `returnedBytes`). Slow tools are mocks the
//! test answers through handles, after the trajectory says the run suspended — no sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    AutoWait, CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, LocalTools, RunContext,
    RunEvent, RunObserver, ToolDefinition, ToolSource,
};
use codemode_core::result::CodeModeOutput;
use codemode_core::trajectory::TraceRecord;
use codemode_testing::mock::{Handle, mock};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

const PATIENCE: Duration = Duration::from_secs(60);

/// Sends the status of every `exec` / `wait` call that ended (`waiting`, `completed`, …).
struct Ends(mpsc::UnboundedSender<String>);

impl RunObserver for Ends {
    fn on_event(&self, event: RunEvent) {
        if let RunEvent::Trace(record) = event
            && let TraceRecord::Control(c) = *record
            && c.status != "started"
        {
            let _ = self.0.send(c.status);
        }
    }
}

/// A runtime on quickjs-wasi with a 100 ms run timeout, the demo catalog, `plugin:t:slow` (a mock
/// whose calls the test answers), `plugin:t:pay` (gated: each call waits for approval), the given
/// auto-wait budget, and a channel of call ends.
fn runtime(budget: AutoWait) -> (CodeMode, Handle, mpsc::UnboundedReceiver<String>) {
    let (slow, handle) = mock(ToolDefinition::new(ToolSource::Plugin, "t", "slow"));
    let (pay, _) = mock(ToolDefinition::new(ToolSource::Plugin, "t", "pay"));
    let mut tools = LocalTools::new();
    tools.add(slow);
    tools.add(pay);
    let (tx, rx) = mpsc::unbounded_channel();
    let cm = codemode_testing::builder("quickjs-wasi", CodeModeConfig { timeout_ms: 100, ..CodeModeConfig::enabled() })
        .local_tools(tools)
        .approvals(codemode::ApprovalPolicy::require(["plugin:t:pay"]))
        .trajectory(Arc::new(Ends(tx)))
        .auto_wait(budget)
        .build();
    (cm, handle, rx)
}

fn texts(r: &CodeModeResult) -> Vec<String> {
    r.output()
        .iter()
        .map(|o| match o {
            CodeModeOutput::Text { text } => text.clone(),
            other => panic!("not text: {other:?}"),
        })
        .collect()
}

/// Answers the slow tool's next call once the run has suspended on it (a call ended `waiting`).
async fn answer_after_suspension(
    calls: &mut Handle,
    ends: &mut mpsc::UnboundedReceiver<String>,
    value: serde_json::Value,
) {
    let call = tokio::time::timeout(PATIENCE, calls.next_call()).await.expect("the cell calls slow").expect("a call");
    loop {
        let status = tokio::time::timeout(PATIENCE, ends.recv()).await.expect("a call ends").expect("open");
        if status == "waiting" {
            break;
        }
    }
    call.respond(value);
}

const THREE_SLOW: &str =
    "text('a'); const x = await tools.slow({ n: 1 }); text('b'); const y = await tools.slow({ n: 2 });
    text('c'); const z = await tools.slow({ n: 3 }); return x.big.length + y.big.length + z.big.length";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_suspended_on_three_slow_calls_completes_in_one_exec() {
    let (cm, mut calls, mut ends) = runtime(AutoWait::new(PATIENCE, 100));
    let exec = {
        let cm = cm.clone();
        tokio::spawn(async move { cm.exec(&RunContext::session("s"), &CodeModeExecInput::code(THREE_SLOW)).await })
    };
    let big = "x".repeat(10_000);
    for _ in 0..3 {
        answer_after_suspension(&mut calls, &mut ends, json!({ "big": big })).await;
    }
    let r = exec.await.unwrap();
    assert_eq!(r.status(), "completed", "{}", r.to_json());
    assert_eq!(r.to_json()["value"], 30_000);
    assert_eq!(texts(&r), ["a", "b", "c"], "the output of the results not handed back is carried, in order");
    let t = r.telemetry();
    assert!(t.wait_count >= 3, "resumed at least once per slow call: {}", t.wait_count);
    // What stayed out of the model's context: three results of 10 KB read by the cell, against the
    // three letters and the five-digit value the caller got.
    let one = serde_json::to_string(&json!({ "big": big })).unwrap().len() as u64;
    assert_eq!(t.tool_result_bytes, 3 * one);
    assert_eq!(t.returned_bytes, 3 + 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_budget_every_waiting_result_is_handed_back() {
    let (cm, mut calls, mut ends) = runtime(AutoWait::OFF);
    let ctx = RunContext::session("s");
    let r = cm.exec(&ctx, &CodeModeExecInput::code("text('a'); await yield_control(); return 1")).await;
    assert_eq!(r.status(), "waiting", "{}", r.to_json());
    assert_eq!(texts(&r), ["a"]);
    let done = cm.wait(&ctx, &CodeModeWaitInput::new(r.run_id().unwrap())).await;
    assert_eq!(done.to_json()["value"], 1);
    // The same runtime with a budget, for one call.
    let auto = cm.with_auto_wait(AutoWait::new(PATIENCE, 10));
    let exec = {
        let ctx = ctx.clone();
        tokio::spawn(async move { auto.exec(&ctx, &CodeModeExecInput::code("return (await tools.slow({})).ok")).await })
    };
    answer_after_suspension(&mut calls, &mut ends, json!({ "ok": true })).await;
    assert_eq!(exec.await.unwrap().to_json()["value"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_bounds_the_resumes_and_the_run_stays_resumable() {
    let (cm, _calls, _ends) = runtime(AutoWait::new(PATIENCE, 2));
    let ctx = RunContext::session("s");
    let cell = "for (let i = 0; i < 5; i++) { text(String(i)); await yield_control(); } return 'done'";
    let r = cm.exec(&ctx, &CodeModeExecInput::code(cell)).await;
    assert_eq!(r.status(), "waiting", "two resumes do not finish five yields: {}", r.to_json());
    assert_eq!(texts(&r), ["0", "1", "2"]);
    assert_eq!(r.telemetry().wait_count, 2);
    // A `wait` of the same runtime resumes with a fresh budget.
    let again = cm.wait(&ctx, &CodeModeWaitInput::new(r.run_id().unwrap())).await;
    assert_eq!(again.to_json()["value"], "done", "{}", again.to_json());
    assert_eq!(texts(&again), ["3", "4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_approval_is_handed_back_at_once() {
    let (cm, _calls, _ends) = runtime(AutoWait::new(PATIENCE, 100));
    let ctx = RunContext::session("s");
    let r = cm.exec(&ctx, &CodeModeExecInput::code("return await tools.pay({ amount: 5 })")).await;
    assert_eq!(r.status(), "waiting", "{}", r.to_json());
    assert_eq!(r.to_json()["pendingToolCalls"][0]["kind"], "approval", "{}", r.to_json());
    assert_eq!(r.telemetry().wait_count, 0, "not resumed: a human decides first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_that_fails_after_a_resume_reports_its_output_and_the_error() {
    let (cm, _calls, _ends) = runtime(AutoWait::new(PATIENCE, 10));
    let r = cm
        .exec(
            &RunContext::session("s"),
            &CodeModeExecInput::code("text('before'); await yield_control(); throw new Error('boom')"),
        )
        .await;
    assert_eq!(r.status(), "failed", "{}", r.to_json());
    assert_eq!(texts(&r), ["before"]);
    assert!(r.to_json()["error"].as_str().unwrap().contains("boom"));
}
