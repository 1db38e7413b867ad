//! Human approval of nested calls (contract P5, V13): gated calls park the run as
//! `waiting` with a `kind: "approval"` pending entry, a decision recorded with `CodeMode::decide`
//! lets the next `wait` run or reject the call, an `Approver` may answer at once, hooks may gate
//! calls, and a parked call never runs before it is approved.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    ApprovalDecision, ApprovalPolicy, ApprovalRequest, Approver, CodeMode, CodeModeConfig, CodeModeErrorCode,
    CodeModeExecInput, CodeModeResult, CodeModeWaitInput, Engines, FnTool, LocalTools, NestedToolCall, PendingCallKind,
    RunContext, RunId, ToolDefinition, ToolHook, ToolResult, ToolSource,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// `pay` (gated in most tests, counts its runs), `look` (read-only), `note` (not read-only).
fn tools(paid: Arc<AtomicU32>) -> LocalTools {
    let mut t = LocalTools::new();
    t.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Plugin, "shop", "pay"), move |input| {
        let paid = paid.clone();
        async move {
            paid.fetch_add(1, Ordering::SeqCst);
            Ok(ToolResult::value(json!({ "paid": input.get("amount").cloned().unwrap_or(Value::Null) })))
        }
    })));
    t.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Plugin, "shop", "look").read_only(), |_| async {
        Ok(ToolResult::value(json!("looked")))
    })));
    t.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Plugin, "shop", "note"), |_| async {
        Ok(ToolResult::value(json!("noted")))
    })));
    t
}

/// The native engines compiled into this build (each test runs on every one of them).
fn engines() -> Vec<String> {
    let names: Vec<String> =
        ["quickjs-wasi", "quickjs"].into_iter().filter(|n| Engines::by_name(n).is_some()).map(String::from).collect();
    assert!(!names.is_empty(), "no quickjs engine compiled in");
    names
}

struct Setup {
    cm: CodeMode,
    paid: Arc<AtomicU32>,
}

fn setup(engine: &str, policy: ApprovalPolicy, approver: Option<Arc<dyn Approver>>) -> Setup {
    let paid = Arc::new(AtomicU32::new(0));
    let mut config = CodeModeConfig::enabled();
    config.timeout_ms = 500;
    let mut b = CodeMode::builder(config).engine_name(engine).local_tools(tools(paid.clone())).approvals(policy);
    if let Some(a) = approver {
        b = b.approver(a);
    }
    Setup { cm: b.build(), paid }
}

fn ctx() -> RunContext {
    RunContext::session("approvals")
}

async fn exec(cm: &CodeMode, code: &str) -> CodeModeResult {
    cm.exec(&ctx(), &CodeModeExecInput::code(code)).await
}

async fn wait(cm: &CodeMode, run_id: &str) -> CodeModeResult {
    cm.wait(&ctx(), &CodeModeWaitInput::new(run_id)).await
}

/// The run id and the parked calls of a `waiting` result.
fn parked(r: &CodeModeResult) -> (String, Vec<u64>) {
    match r {
        CodeModeResult::Waiting { run_id, pending_tool_calls, .. } => (
            run_id.clone(),
            pending_tool_calls.iter().filter(|p| p.kind == PendingCallKind::Approval).map(|p| p.request_id).collect(),
        ),
        other => panic!("expected waiting, got {}", other.to_json()),
    }
}

fn value(r: &CodeModeResult) -> Value {
    match r {
        CodeModeResult::Completed { value, .. } => value.clone(),
        other => panic!("expected completed, got {}", other.to_json()),
    }
}

fn pay_gated() -> ApprovalPolicy {
    ApprovalPolicy::require(["plugin:shop:pay"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_call_parks_then_runs_once_approved() {
    for engine in engines() {
        let s = setup(&engine, pay_gated(), None);
        let r = exec(&s.cm, "const a = await tools.look({}); const p = await tools.pay({ amount: 5 }); return [a, p]")
            .await;
        let (run_id, ids) = parked(&r);
        assert_eq!(ids.len(), 1, "{}", r.to_json());
        let json = r.to_json();
        assert_eq!(json["pendingToolCalls"][0]["kind"], json!("approval"));
        assert_eq!(json["pendingToolCalls"][0]["toolId"], json!("plugin:shop:pay"));
        assert_eq!(s.paid.load(Ordering::SeqCst), 0, "{engine}: a parked call has not run");
        // Waiting without a decision keeps the run parked (and the call unrun).
        let again = wait(&s.cm, &run_id).await;
        assert_eq!(parked(&again).1, ids, "{engine}: {}", again.to_json());
        assert_eq!(s.paid.load(Ordering::SeqCst), 0);
        let id = RunId::parse(&run_id).unwrap();
        s.cm.decide(&id, ids[0], ApprovalDecision::Approve).await.unwrap();
        let done = wait(&s.cm, &run_id).await;
        assert_eq!(value(&done), json!(["looked", {"paid": 5}]), "{engine}");
        assert_eq!(s.paid.load(Ordering::SeqCst), 1, "{engine}: ran exactly once");
        // The run is settled: a late decision has nothing to go to.
        let late = s.cm.decide(&id, ids[0], ApprovalDecision::Approve).await.unwrap_err();
        assert_eq!(late.code, Some(CodeModeErrorCode::InvalidInput), "{engine}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_is_a_catchable_coded_error() {
    for engine in engines() {
        let s = setup(&engine, pay_gated(), None);
        let r = exec(
            &s.cm,
            "try { await tools.pay({ amount: 1e6 }); return 'paid' } catch (e) { return [e.code, e.message] }",
        )
        .await;
        let (run_id, ids) = parked(&r);
        s.cm.decide(&RunId::parse(&run_id).unwrap(), ids[0], ApprovalDecision::deny("too expensive")).await.unwrap();
        let done = wait(&s.cm, &run_id).await;
        assert_eq!(
            value(&done),
            json!(["nested_tool_failed", "plugin:shop:pay: approval denied: too expensive"]),
            "{engine}"
        );
        assert_eq!(s.paid.load(Ordering::SeqCst), 0, "{engine}: a denied call never runs");
        assert_eq!(done.telemetry().failed_call_count, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_gated_calls_are_decided_one_by_one() {
    let s = setup(&engines()[0], pay_gated(), None);
    let r = exec(
        &s.cm,
        "const rs = await Promise.allSettled([tools.pay({ amount: 1 }), tools.pay({ amount: 2 }), tools.note({})]);
         return rs.map((x) => x.status === 'fulfilled' ? x.value : x.reason.message)",
    )
    .await;
    let (run_id, ids) = parked(&r);
    assert_eq!(ids.len(), 2, "{}", r.to_json());
    let id = RunId::parse(&run_id).unwrap();
    s.cm.decide(&id, ids[0], ApprovalDecision::Approve).await.unwrap();
    // One decided, one still parked: the run waits again, listing only the undecided call.
    let mid = wait(&s.cm, &run_id).await;
    assert_eq!(parked(&mid).1, vec![ids[1]], "{}", mid.to_json());
    s.cm.decide(&id, ids[1], ApprovalDecision::deny("no")).await.unwrap();
    let done = wait(&s.cm, &run_id).await;
    assert_eq!(value(&done), json!([{"paid": 1}, "plugin:shop:pay: approval denied: no", "noted"]));
    assert_eq!(s.paid.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_fire_and_forget_call_keeps_the_run_open() {
    let s = setup(&engines()[0], pay_gated(), None);
    let r = exec(&s.cm, "tools.pay({ amount: 3 }); return 'returned'").await;
    let (run_id, ids) = parked(&r);
    s.cm.decide(&RunId::parse(&run_id).unwrap(), ids[0], ApprovalDecision::Approve).await.unwrap();
    assert_eq!(value(&wait(&s.cm, &run_id).await), json!("returned"));
    assert_eq!(s.paid.load(Ordering::SeqCst), 1, "approved after the cell returned, and still run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_during_a_wait_is_picked_up() {
    let s = setup(&engines()[0], pay_gated(), None);
    let r = exec(&s.cm, "return await tools.pay({ amount: 4 })").await;
    let (run_id, ids) = parked(&r);
    let id = RunId::parse(&run_id).unwrap();
    let (done, decided) = tokio::join!(wait(&s.cm, &run_id), async {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        s.cm.decide(&id, ids[0], ApprovalDecision::Approve).await
    });
    decided.unwrap();
    assert_eq!(value(&done), json!({"paid": 4}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_for_unknown_runs_or_unparked_calls_change_nothing() {
    let s = setup(&engines()[0], pay_gated(), None);
    let unknown = RunId::parse("cm_00000000000000000000000000000000").unwrap();
    let e = s.cm.decide(&unknown, 1, ApprovalDecision::Approve).await.unwrap_err();
    assert_eq!(e.code, Some(CodeModeErrorCode::InvalidInput));
    // A run suspended on a slow, ungated call: approving its request id does not touch it.
    let r = exec(&s.cm, "await yield_control(); return await tools.pay({ amount: 1 })").await;
    let run_id = r.run_id().unwrap().to_string();
    let id = RunId::parse(&run_id).unwrap();
    // A decision for a request that is not parked is refused (a mistyped id must not
    // look approved), naming what is parked: here nothing.
    for request in [1, 999] {
        let e = s.cm.decide(&id, request, ApprovalDecision::Approve).await.unwrap_err();
        assert_eq!(e.code, Some(CodeModeErrorCode::InvalidInput), "{e:?}");
        assert_eq!(
            e.message,
            format!("request {request} is not waiting for approval; no call of this run is waiting for approval")
        );
    }
    // The yield resumes; the gated call then parks: the refused decisions did not approve it.
    let r = wait(&s.cm, &run_id).await;
    let (_, ids) = parked(&r);
    assert_eq!(ids.len(), 1, "{}", r.to_json());
    assert_eq!(s.paid.load(Ordering::SeqCst), 0);
    // Now a mistyped id is refused naming the parked call, and the real one is accepted.
    let e = s.cm.decide(&id, ids[0] + 7, ApprovalDecision::Approve).await.unwrap_err();
    assert_eq!(
        e.message,
        format!(
            "request {} is not waiting for approval; the calls waiting for approval are request {}",
            ids[0] + 7,
            ids[0]
        )
    );
    s.cm.decide(&id, ids[0], ApprovalDecision::Approve).await.unwrap();
    assert_eq!(value(&wait(&s.cm, &run_id).await), json!({"paid": 1}));
    assert_eq!(s.paid.load(Ordering::SeqCst), 1);
}

/// Answers every request the same way, after `delay`, and remembers what it was asked.
struct Fixed {
    answer: Option<ApprovalDecision>,
    delay: std::time::Duration,
    asked: std::sync::Mutex<Vec<ApprovalRequest>>,
}

#[async_trait::async_trait]
impl Approver for Fixed {
    async fn decide(&self, request: &ApprovalRequest) -> Option<ApprovalDecision> {
        self.asked.lock().unwrap().push(request.clone());
        tokio::time::sleep(self.delay).await;
        self.answer.clone()
    }
}

fn fixed(answer: Option<ApprovalDecision>, delay_ms: u64) -> Arc<Fixed> {
    Arc::new(Fixed { answer, delay: std::time::Duration::from_millis(delay_ms), asked: Default::default() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_may_answer_at_once() {
    let engine = &engines()[0];
    let yes = fixed(Some(ApprovalDecision::Approve), 0);
    let s = setup(engine, pay_gated(), Some(yes.clone()));
    let mut r = RunContext::session("approvals");
    r.scope.agent_id = Some("agent-7".into());
    r.sender = Some("alice".into());
    let done =
        s.cm.exec(&r, &CodeModeExecInput::code("return await tools.pay({ amount: 9, note: 'x'.repeat(5000) })")).await;
    assert_eq!(value(&done)["paid"], json!(9));
    let asked = yes.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].tool_id, "plugin:shop:pay");
    assert!(asked[0].reason.contains("plugin:shop:pay"), "{}", asked[0].reason);
    assert!(asked[0].input_preview.chars().count() <= codemode_core::approval::MAX_APPROVAL_PREVIEW_CHARS + 1);
    assert_eq!(asked[0].context.scope.agent_id.as_deref(), Some("agent-7"), "P1 reaches the approver");
    assert_eq!(asked[0].context.sender.as_deref(), Some("alice"), "P3 reaches the approver");

    let no = fixed(Some(ApprovalDecision::deny("policy says no")), 0);
    let s = setup(engine, pay_gated(), Some(no));
    let r = exec(&s.cm, "try { await tools.pay({}) } catch (e) { return e.message }").await;
    assert_eq!(value(&r), json!("plugin:shop:pay: approval denied: policy says no"));
    assert_eq!(s.paid.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_without_an_answer_parks_the_call() {
    let engine = &engines()[0];
    for (approver, policy) in [
        // No answer at all.
        (fixed(None, 0), pay_gated()),
        // An answer that comes too late (after approvals.timeoutMs).
        (fixed(Some(ApprovalDecision::Approve), 2_000), ApprovalPolicy { timeout_ms: 50, ..pay_gated() }),
    ] {
        let s = setup(engine, policy, Some(approver));
        let r = exec(&s.cm, "return await tools.pay({ amount: 2 })").await;
        let (run_id, ids) = parked(&r);
        assert_eq!(s.paid.load(Ordering::SeqCst), 0);
        s.cm.decide(&RunId::parse(&run_id).unwrap(), ids[0], ApprovalDecision::Approve).await.unwrap();
        assert_eq!(value(&wait(&s.cm, &run_id).await), json!({"paid": 2}));
        assert_eq!(s.paid.load(Ordering::SeqCst), 1, "an approved call is not put to the approver again");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_unless_read_only_gates_every_tool_with_side_effects() {
    let policy = ApprovalPolicy { require_unless_read_only: true, ..ApprovalPolicy::default() };
    let s = setup(&engines()[0], policy, None);
    let r = exec(&s.cm, "const a = await tools.look({}); const b = await tools.note({}); return [a, b]").await;
    let (run_id, ids) = parked(&r);
    assert_eq!(r.to_json()["pendingToolCalls"][0]["toolId"], json!("plugin:shop:note"));
    s.cm.decide(&RunId::parse(&run_id).unwrap(), ids[0], ApprovalDecision::Approve).await.unwrap();
    assert_eq!(value(&wait(&s.cm, &run_id).await), json!(["looked", "noted"]));
}

/// Gates calls whose input names a large amount, and counts what it sees.
struct BigSpender {
    before: AtomicU32,
    after: AtomicU32,
}

#[async_trait::async_trait]
impl ToolHook for BigSpender {
    async fn before_tool_call(&self, _call: &mut NestedToolCall) -> Result<(), codemode::ToolError> {
        self.before.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn requires_approval(&self, call: &NestedToolCall) -> Option<String> {
        let amount = call.input.get("amount").and_then(Value::as_f64).unwrap_or(0.0);
        (amount > 100.0).then(|| format!("amount {amount} is over 100"))
    }

    async fn after_tool_call(&self, _call: &NestedToolCall, _outcome: &mut Result<ToolResult, codemode::ToolError>) {
        self.after.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_may_require_approval() {
    let hook = Arc::new(BigSpender { before: AtomicU32::new(0), after: AtomicU32::new(0) });
    let paid = Arc::new(AtomicU32::new(0));
    let cm = CodeMode::builder(CodeModeConfig::enabled())
        .engine_name(&engines()[0])
        .local_tools(tools(paid.clone()))
        .hook(hook.clone())
        .build();
    let r = exec(&cm, "const small = await tools.pay({ amount: 10 }); const big = await tools.pay({ amount: 500 }); return [small, big]").await;
    let (run_id, ids) = parked(&r);
    assert_eq!(paid.load(Ordering::SeqCst), 1, "the small payment ran, the big one waits");
    assert_eq!(hook.after.load(Ordering::SeqCst), 1, "after-hooks do not see a parked call");
    cm.decide(&RunId::parse(&run_id).unwrap(), ids[0], ApprovalDecision::Approve).await.unwrap();
    assert_eq!(value(&wait(&cm, &run_id).await), json!([{"paid": 10}, {"paid": 500}]));
    assert_eq!(paid.load(Ordering::SeqCst), 2);
    assert_eq!(hook.after.load(Ordering::SeqCst), 2);
    // The approved call went through the before-hooks again when it finally ran.
    assert_eq!(hook.before.load(Ordering::SeqCst), 3);
}

/// The human sees where the call comes from: the cell line (the model's own, also for TypeScript).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approver_is_told_the_cell_line() {
    for engine in engines() {
        let asker = fixed(Some(ApprovalDecision::Approve), 0);
        let s = setup(&engine, pay_gated(), Some(asker.clone()));
        let js = "const a = 1;\nconst b = 2;\nreturn await tools.pay({ amount: a + b })";
        assert_eq!(value(&exec(&s.cm, js).await), json!({"paid": 3}), "{engine}");
        let ts = CodeModeExecInput {
            language: Some("typescript".into()),
            ..CodeModeExecInput::code(
                "interface P { amount: number }\n\nconst p: P = { amount: 4 };\nreturn await tools.callValue('plugin:shop:pay', p)",
            )
        };
        let r = s.cm.exec(&ctx(), &ts).await;
        assert_eq!(value(&r), json!({"paid": 4}), "{engine}");
        let lines: Vec<Option<u32>> = asker.asked.lock().unwrap().iter().map(|a| a.cell_line).collect();
        assert_eq!(lines, [Some(3), Some(4)], "{engine}");
    }
}

/// MCP namespace functions tell the approver the cell line on every call, `.value` too: they
/// learn whether their tool is gated on their first call and keep it (an ungated tool's calls take
/// the short path, which sends no line, and still return their results).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approver_is_told_the_cell_line_of_mcp_calls() {
    for engine in engines() {
        let asker = fixed(Some(ApprovalDecision::Approve), 0);
        let mut t = tools(Arc::new(AtomicU32::new(0)));
        for name in ["transfer", "balance"] {
            t.add(Arc::new(FnTool::new(ToolDefinition::new(ToolSource::Mcp, "bank", name), move |input| async move {
                Ok(ToolResult::value(json!({ "structuredContent": { "tool": name, "input": input } })))
            })));
        }
        let mut config = CodeModeConfig::enabled();
        config.timeout_ms = 2_000;
        let cm = CodeMode::builder(config)
            .engine_name(&engine)
            .local_tools(t)
            .approvals(ApprovalPolicy::require(["mcp:bank:transfer"]))
            .approver(asker.clone())
            .build();
        let js = "const t = MCP.bank.transfer;\nconst a = await t.value({ n: 1 });\nconst b = await t.value({ n: 2 });\n\
                  const c = await t({ n: 3 });\nconst d = await MCP.bank.balance.value({ n: 4 });\n\
                  const e = await MCP.bank.balance.value({ n: 5 });\nreturn [a, b, c.structuredContent, d, e]";
        let r = exec(&cm, js).await;
        let expected = json!([
            { "tool": "transfer", "input": { "n": 1 } },
            { "tool": "transfer", "input": { "n": 2 } },
            { "tool": "transfer", "input": { "n": 3 } },
            { "tool": "balance", "input": { "n": 4 } },
            { "tool": "balance", "input": { "n": 5 } },
        ]);
        assert_eq!(value(&r), expected, "{engine}: {}", r.to_json());
        let asked: Vec<(String, Option<u32>)> =
            asker.asked.lock().unwrap().iter().map(|a| (a.tool_id.clone(), a.cell_line)).collect();
        let transfer = || "mcp:bank:transfer".to_string();
        assert_eq!(asked, [(transfer(), Some(2)), (transfer(), Some(3)), (transfer(), Some(4))], "{engine}");
    }
}

/// Calls parked for approval count against `maxPendingToolCalls` like running ones —
/// without an approver every gated call parks, and a cell parking 300 of them is stopped at the
/// limit exactly as it is when an approver holds them — and the whole stored run (snapshot plus the
/// parked calls' inputs) stays within `maxSnapshotBytes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_calls_are_bounded_like_running_ones() {
    for engine in engines() {
        for approver in [None, Some(fixed(None, 5_000) as Arc<dyn Approver>)] {
            let with_approver = approver.is_some();
            let s = setup(&engine, pay_gated(), approver);
            let r = exec(&s.cm, "for (let i = 0; i < 300; i++) tools.pay({ amount: i }); return 'parked 300'").await;
            assert_eq!(
                r.error_code(),
                Some(CodeModeErrorCode::TooManyPendingToolCalls),
                "{engine} (approver: {with_approver}): {}",
                r.to_json()
            );
            assert_eq!(s.paid.load(Ordering::SeqCst), 0);
            assert_eq!(s.cm.store().count().await, 0, "nothing is stored");
        }
        // 12 parked calls of 1 MB each: far past a 4 MiB limit that the snapshot alone respects.
        let paid = Arc::new(AtomicU32::new(0));
        let mut config = CodeModeConfig::enabled();
        config.timeout_ms = 500;
        config.max_snapshot_bytes = 4 << 20;
        let cm = CodeMode::builder(config)
            .engine_name(&engine)
            .local_tools(tools(paid.clone()))
            .approvals(pay_gated())
            .build();
        let r =
            exec(&cm, "const big = 'x'.repeat(1 << 20); for (let i = 0; i < 12; i++) tools.pay({ big, i }); return 1")
                .await;
        assert_eq!(r.error_code(), Some(CodeModeErrorCode::SnapshotLimitExceeded), "{engine}: {}", r.to_json());
        assert!(
            r.to_json()["error"].as_str().unwrap().contains("pending calls and undelivered results"),
            "{}",
            r.to_json()
        );
        assert_eq!(cm.store().count().await, 0, "nothing is stored");
        // Under the limit the same shape suspends.
        let r =
            exec(&cm, "const big = 'x'.repeat(1 << 18); for (let i = 0; i < 4; i++) tools.pay({ big, i }); return 1")
                .await;
        assert_eq!(parked(&r).1.len(), 4, "{engine}: {}", r.to_json());
        assert_eq!(paid.load(Ordering::SeqCst), 0);
    }
}

/// `wait` verifies the run before an approved call starts: a run file that is cut off or altered
/// fails with `snapshot_restore_failed` (its signature no longer verifies, security.md "Signed
/// runs"), and the approved call never runs. The file stays, refused on every `wait`, until it
/// expires: a process holding another key cannot tell an altered run from one signed with a key it
/// lacks, so it deletes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_never_runs_for_a_run_that_cannot_resume() {
    let dir = std::env::temp_dir().join(format!("codemode-approvals-verify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for damage in ["truncate", "flip"] {
        let paid = Arc::new(AtomicU32::new(0));
        let mut config = CodeModeConfig::enabled();
        config.timeout_ms = 500;
        let cm = CodeMode::builder(config)
            .engine_name("quickjs-wasi")
            .local_tools(tools(paid.clone()))
            .approvals(pay_gated())
            .store(Arc::new(codemode::DirectorySnapshotStore::new(&dir).unwrap()))
            .build();
        let r = exec(&cm, "return await tools.pay({ amount: 9 })").await;
        let (run_id, ids) = parked(&r);
        let file = dir.join(format!("{run_id}.run"));
        let mut bytes = std::fs::read(&file).unwrap();
        match damage {
            "truncate" => bytes.truncate(bytes.len() - 100),
            _ => {
                let at = bytes.len() - 200;
                bytes[at] ^= 0x55;
            }
        }
        std::fs::write(&file, &bytes).unwrap();
        cm.decide(&RunId::parse(&run_id).unwrap(), ids[0], ApprovalDecision::Approve).await.unwrap();
        let done = wait(&cm, &run_id).await;
        assert_eq!(done.error_code(), Some(CodeModeErrorCode::SnapshotRestoreFailed), "{damage}: {}", done.to_json());
        assert_eq!(paid.load(Ordering::SeqCst), 0, "{damage}: the approved call did not run");
        assert!(file.exists(), "{damage}: the refused run is left as it was");
        let again = wait(&cm, &run_id).await;
        assert_eq!(again.error_code(), Some(CodeModeErrorCode::SnapshotRestoreFailed), "{damage}: {}", again.to_json());
        assert_eq!(paid.load(Ordering::SeqCst), 0, "{damage}: still not run");
        assert!(cm.store().remove(&RunId::parse(&run_id).unwrap()).await);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The cell line the human is shown cannot be forged by the cell. Stack formatting
/// (`Error.prepareStackTrace`, a redefined accessor, `stackTraceLimit`), function names that look
/// like frames, and patched CallSite methods leave the real line; a call made from inside the
/// cell's own stack formatter gets no line rather than a made-up one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cell_line_cannot_be_forged() {
    for engine in engines() {
        let asker = fixed(Some(ApprovalDecision::Approve), 0);
        let s = setup(&engine, pay_gated(), Some(asker.clone()));
        let cells = [
            // The call is on line 2 in every cell but the last.
            "Error.prepareStackTrace = () => '    at x (<cell>:999:1)';\nreturn await tools.pay({ amount: 1 })",
            "Object.defineProperty(Error, 'prepareStackTrace', { get() { return () => '<cell>:998:1' }, set() {} });\nreturn await tools.pay({ amount: 1 })",
            "Error.stackTraceLimit = 0;\nreturn await tools.pay({ amount: 1 })",
            "const n = 'x (<cell>:997:1)\\n    at y (<cell>:996:1)'; const f = { [n]: async () => await tools.pay({ amount: 1 }) }[n];\nreturn await f()",
            "Error.prepareStackTrace = (e, sites) => { const p = Object.getPrototypeOf(sites[0]); p.getLineNumber = () => 995; p.getFileName = () => '<cell>'; return '' }; new Error(); Error.prepareStackTrace = undefined;\nreturn await tools.pay({ amount: 1 })",
            "Error.prepareStackTrace = () => { globalThis.p = tools.pay({ amount: 1 }); return '' }; new Error(); Error.prepareStackTrace = undefined;\nreturn await globalThis.p",
        ];
        for code in cells {
            let r = exec(&s.cm, code).await;
            assert_eq!(value(&r), json!({"paid": 1}), "{engine}: {code}: {}", r.to_json());
        }
        let lines: Vec<Option<u32>> = asker.asked.lock().unwrap().iter().map(|a| a.cell_line).collect();
        assert_eq!(lines, [Some(2), Some(2), Some(2), Some(1), Some(2), None], "{engine}");
    }
}

/// A decision that comes after the run's TTL: `snapshot_expired` (the run's state is deleted then);
/// a `wait` on it stays the contract V22 lookup failure, `invalid_input`. Memory and directory stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_decision_finds_the_run_expired() {
    let dir = std::env::temp_dir().join(format!("codemode-approvals-expiry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let clock = codemode::ManualClock::at(1_000_000);
    let stores: Vec<Arc<dyn codemode::SnapshotStore>> = vec![
        Arc::new(codemode::MemorySnapshotStore::with_clock(Arc::new(clock.clone()))),
        Arc::new(codemode::DirectorySnapshotStore::with_clock(&dir, Arc::new(clock.clone())).unwrap()),
    ];
    for store in stores {
        let mut config = CodeModeConfig::enabled();
        config.snapshot_ttl_seconds = 5;
        let cm = CodeMode::builder(config)
            .engine_name("quickjs-wasi")
            .local_tools(tools(Arc::new(AtomicU32::new(0))))
            .approvals(pay_gated())
            .store(store.clone())
            .clock(Arc::new(clock.clone()))
            .build();
        let r = exec(&cm, "return await tools.pay({ amount: 1 })").await;
        let (run_id, ids) = parked(&r);
        clock.advance_ms(5_001);
        let e = cm.decide(&RunId::parse(&run_id).unwrap(), ids[0], ApprovalDecision::Approve).await.unwrap_err();
        assert_eq!(e.code, Some(CodeModeErrorCode::SnapshotExpired), "{} store: {}", store.name(), e.message);
        let w = wait(&cm, &run_id).await;
        assert_eq!(w.error_code(), Some(CodeModeErrorCode::InvalidInput), "{}", w.to_json());
        assert_eq!(store.count().await, 0, "{} store: the expired run is gone", store.name());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
