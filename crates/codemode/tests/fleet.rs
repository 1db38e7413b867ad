//! Runtimes of a fleet sharing a Redis snapshot store (a real `redis-server` each test
//! starts on a free loopback port, in its own temporary directory, and stops whatever the
//! outcome). Each `CodeMode` here is a replica: its own store connection, replica id and
//! heartbeat. The tools count their own calls, so "nothing runs twice" is checked from the tool's
//! side.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CodeMode, CodeModeConfig, CodeModeErrorCode, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, FnTool,
    LocalTools, RunContext, ToolDefinition, ToolResult, ToolSource,
};
use codemode_snapshot::conformance::RedisServer;
use codemode_snapshot::{Clock as _, RedisSnapshotStore, RedisStoreConfig};
use codemode_testing::mock::{Call, Handle, mock};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The tools of a replica: `slow` (read-only, sleeps `ms`) and `pay` (side effect; counts its runs
/// in `paid` and, when `on_pay` is set, runs it — a test's way to stop a replica mid-run).
fn tools(paid: Arc<AtomicU32>, on_pay: Option<Arc<dyn Fn() + Send + Sync>>) -> LocalTools {
    let mut t = LocalTools::new();
    let slow = ToolDefinition::new(ToolSource::Plugin, "t", "slow").read_only();
    t.add(Arc::new(FnTool::new(slow, |input| async move {
        let ms = input["ms"].as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(ToolResult::value(json!({ "slept": ms })))
    })));
    let pay = ToolDefinition::new(ToolSource::Plugin, "t", "pay");
    t.add(Arc::new(FnTool::new(pay, move |_| {
        let (paid, on_pay) = (paid.clone(), on_pay.clone());
        async move {
            let n = paid.fetch_add(1, Ordering::SeqCst) + 1;
            if let Some(f) = on_pay {
                f();
            }
            Ok(ToolResult::value(json!({ "receipt": n })))
        }
    })));
    t
}

async fn store(server: &RedisServer, lease_ms: u64) -> Arc<RedisSnapshotStore> {
    store_with_clock(server, lease_ms, Arc::new(codemode::SystemClock)).await
}

async fn store_with_clock(
    server: &RedisServer,
    lease_ms: u64,
    clock: Arc<dyn codemode::Clock>,
) -> Arc<RedisSnapshotStore> {
    let config = RedisStoreConfig { lease_ms, ..RedisStoreConfig::new(server.url()) };
    Arc::new(RedisSnapshotStore::connect_with_clock(config, clock).await.unwrap())
}

fn replica(store: Arc<RedisSnapshotStore>, timeout_ms: u64, tools: LocalTools) -> CodeMode {
    let config = CodeModeConfig { timeout_ms, ..CodeModeConfig::enabled() };
    CodeMode::builder(config).engine_name("quickjs-wasi").local_tools(tools).store(store).build()
}

fn run_id(r: &CodeModeResult) -> String {
    r.run_id().unwrap_or_else(|| panic!("not waiting: {}", r.to_json())).to_string()
}

/// exec on one replica, wait on another: the nested call the first replica ran is recorded in
/// the call log the moment it finishes, and the second delivers it. Another client's `wait` is
/// refused on any replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_on_one_replica_wait_on_another() {
    let server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let paid = Arc::new(AtomicU32::new(0));
    let a = replica(store(&server, 2_000).await, 300, tools(paid.clone(), None));
    let b = replica(store(&server, 2_000).await, 3_000, tools(paid.clone(), None));
    let ctx = RunContext::session("client-1");
    let r = a
        .exec(
            &ctx,
            &CodeModeExecInput::code(
                "const s = await tools.slow({ ms: 700 }); const p = await tools.pay({}); return [s, p]",
            ),
        )
        .await;
    let id = run_id(&r);
    let other = b.wait(&RunContext::session("client-2"), &CodeModeWaitInput::new(id.clone())).await;
    assert_eq!(other.error_code(), Some(CodeModeErrorCode::InvalidInput), "{}", other.to_json());
    let done = b.wait(&ctx, &CodeModeWaitInput::new(id.clone())).await;
    assert_eq!(done.to_json()["value"], json!([{ "slept": 700 }, { "receipt": 1 }]), "{}", done.to_json());
    assert_eq!(paid.load(Ordering::SeqCst), 1);
    // Settled: gone on every replica.
    let again = a.wait(&ctx, &CodeModeWaitInput::new(id)).await;
    assert_eq!(again.error_code(), Some(CodeModeErrorCode::InvalidInput), "{}", again.to_json());
}

/// An after-call hook that marks `pay`'s results as seen by this replica and counts them.
struct Marks(Arc<AtomicU32>);

#[async_trait::async_trait]
impl codemode::ToolHook for Marks {
    async fn after_tool_call(
        &self,
        call: &codemode::NestedToolCall,
        outcome: &mut Result<ToolResult, codemode::ToolError>,
    ) {
        if call.tool_id.ends_with(":pay")
            && let Ok(r) = outcome
        {
            self.0.fetch_add(1, Ordering::SeqCst);
            r.details["checkedBy"] = json!("b");
        }
    }
}

/// A replica stops (its heartbeat stopped, the fleet's clock moved past its lease) right after a
/// side-effecting call ran, before it stored the run's new state. Another replica takes the run
/// over and replays it from the last snapshot: the side-effecting call gets its logged result
/// instead of running again — through the replaying replica's own after-call stages (its hook marks
/// the result), like a live result — the read-only call the stopped replica left unfinished runs
/// again, and the stopped replica's later result is void — its client gets a coded error, never a
/// second delivery. Events are ordered by the slow tool's handle (each call held until the test
/// answers it) and a clock the test moves, not by sleeping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_stops_mid_run_runs_nothing_twice() {
    let server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let paid = Arc::new(AtomicU32::new(0));
    let clock = codemode_testing::ManualClock::at(codemode::SystemClock.now_ms());
    let (slow, mut calls) = mock(ToolDefinition::new(ToolSource::Plugin, "t", "slow").read_only());
    let store_a = store_with_clock(&server, 500, Arc::new(clock.clone())).await;
    let stop_a: Arc<dyn Fn() + Send + Sync> = {
        let s = store_a.clone();
        Arc::new(move || s.stop_heartbeat())
    };
    let with_slow = |on_pay| {
        let mut t = tools(paid.clone(), on_pay);
        t.add(slow.clone());
        t
    };
    // Replica A: one store (one replica id), a short budget for exec and a long one for wait.
    let a = replica(store_a.clone(), 300, with_slow(Some(stop_a.clone())));
    let a_long = replica(store_a.clone(), 60_000, with_slow(Some(stop_a)));
    let marked = Arc::new(AtomicU32::new(0));
    let b = CodeMode::builder(CodeModeConfig { timeout_ms: 60_000, ..CodeModeConfig::enabled() })
        .engine_name("quickjs-wasi")
        .local_tools(with_slow(None))
        .store(store_with_clock(&server, 500, Arc::new(clock.clone())).await)
        .hook(Arc::new(Marks(marked.clone())))
        .build();
    let ctx = RunContext::session("client-1");
    let cell = "await tools.slow({}); const p = await tools.pay({}); await tools.slow({}); return p";
    let r = a.exec(&ctx, &CodeModeExecInput::code(cell)).await;
    let id = run_id(&r);
    // A's first slow call finishes after exec returned: its result goes to the call log.
    next(&mut calls).await.respond(json!({ "slow": 1 }));
    // A resumes with a long budget: it delivers the first result, pays (and stops renewing its
    // lease), then waits on the second slow call — held, so A is stuck right there.
    let a_wait = {
        let (a, ctx, id) = (a_long.clone(), ctx.clone(), id.clone());
        tokio::spawn(async move { a.wait(&ctx, &CodeModeWaitInput::new(id)).await })
    };
    let held_by_a = next(&mut calls).await;
    assert_eq!(paid.load(Ordering::SeqCst), 1, "A paid before its second slow call");
    // Past A's lease: B takes over, replays, and runs the unfinished read-only call again.
    clock.advance_ms(501);
    let b_wait = {
        let (b, ctx, id) = (b.clone(), ctx.clone(), id.clone());
        tokio::spawn(async move { b.wait(&ctx, &CodeModeWaitInput::new(id)).await })
    };
    next(&mut calls).await.respond(json!({ "slow": 3 }));
    let b_result = b_wait.await.unwrap();
    assert_eq!(b_result.to_json()["value"], json!({ "receipt": 1, "checkedBy": "b" }), "{}", b_result.to_json());
    assert_eq!(paid.load(Ordering::SeqCst), 1, "the side effect ran once");
    assert_eq!(marked.load(Ordering::SeqCst), 1, "the replayed result went through B's after-call hook");
    // A's call ends now: everything A would write for the run is refused.
    held_by_a.respond(json!({ "slow": 2 }));
    let a_result = a_wait.await.unwrap();
    assert_eq!(a_result.status(), "failed", "{}", a_result.to_json());
    assert_eq!(a_result.error_code(), Some(CodeModeErrorCode::InvalidInput), "{}", a_result.to_json());
    assert!(a_result.to_json()["error"].as_str().unwrap().contains("taken over"), "{}", a_result.to_json());
    assert_eq!(calls.calls_made(), 3, "the slow tool: A's two calls and B's re-run of the unfinished one");
}

/// The next call of a mock tool, once a cell makes it.
async fn next(calls: &mut Handle) -> Call {
    tokio::time::timeout(Duration::from_secs(60), calls.next_call())
        .await
        .expect("a cell calls the tool")
        .expect("a call")
}

/// Redis lost while serving: a cell that completes without suspending still works; one that must
/// suspend fails with a coded error naming the unreachable store; nothing crashes; once Redis is
/// back (AOF on: nothing lost) runs suspend and resume again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_fails_only_what_needs_the_store() {
    let mut server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let paid = Arc::new(AtomicU32::new(0));
    let cm = replica(store(&server, 2_000).await, 300, tools(paid.clone(), None));
    let ctx = RunContext::session("client-1");
    let parked = cm.exec(&ctx, &CodeModeExecInput::code("await yield_control(); return 'kept'")).await;
    let kept = run_id(&parked);
    server.stop();
    let plain = cm.exec(&ctx, &CodeModeExecInput::code("return 1 + 1")).await;
    assert_eq!(plain.to_json()["value"], 2, "{}", plain.to_json());
    let suspending = cm.exec(&ctx, &CodeModeExecInput::code("await yield_control(); return 1")).await;
    assert_eq!(suspending.error_code(), Some(CodeModeErrorCode::InternalError), "{}", suspending.to_json());
    assert!(suspending.to_json()["error"].as_str().unwrap().contains("unreachable"), "{}", suspending.to_json());
    assert!(server.restart());
    let mut resumed = None;
    for _ in 0..40 {
        let r = cm.wait(&ctx, &CodeModeWaitInput::new(kept.clone())).await;
        if r.status() == "completed" {
            resumed = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let resumed = resumed.expect("the run suspended before the outage resumes once Redis is back");
    assert_eq!(resumed.to_json()["value"], "kept");
}

/// Loop detection sees a session's calls across replicas: its history travels through the store,
/// so a session that spreads the same call over replicas is stopped as if it stayed on one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_detection_history_is_shared_by_the_fleet() {
    let server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let loops = codemode::LoopPolicy::from_document(&json!({ "tools": { "loopDetection": {
        "enabled": true, "warningThreshold": 2, "criticalThreshold": 3, "globalCircuitBreakerThreshold": 9
    } } }))
    .unwrap();
    let paid = Arc::new(AtomicU32::new(0));
    let make = |store: Arc<RedisSnapshotStore>| {
        CodeMode::builder(CodeModeConfig::enabled())
            .engine_name("quickjs-wasi")
            .local_tools(tools(paid.clone(), None))
            .store(store)
            .loop_detection(loops.clone())
            .build()
    };
    let a = make(store(&server, 2_000).await);
    let b = make(store(&server, 2_000).await);
    let ctx = RunContext::session("looping");
    let cell = "try { await tools.slow({ ms: 1 }); return 'ran' } catch (e) { return e.code }";
    for (cm, want) in [(&a, "ran"), (&a, "ran"), (&b, "nested_tool_failed")] {
        let r = cm.exec(&ctx, &CodeModeExecInput::code(cell)).await;
        assert_eq!(r.to_json()["value"], want, "{}", r.to_json());
    }
    // Another session starts from a clean history on any replica.
    let other = b.exec(&RunContext::session("fresh"), &CodeModeExecInput::code(cell)).await;
    assert_eq!(other.to_json()["value"], "ran", "{}", other.to_json());
}

/// contract R2 fleet-wide: a suspended `restartSafe` run says it can be re-run (`rerunnable`), on the
/// replica that suspended it and on the one that suspends it again; another run does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_restart_safe_runs_are_marked_rerunnable_on_every_replica() {
    let server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let paid = Arc::new(AtomicU32::new(0));
    let a = replica(store(&server, 2_000).await, 3_000, tools(paid.clone(), None));
    let b = replica(store(&server, 2_000).await, 3_000, tools(paid.clone(), None));
    let ctx = RunContext::session("r2");
    let cell = "await yield_control(); await yield_control(); return 1";
    let safe = CodeModeExecInput::from_json(&json!({ "code": cell, "restartSafe": true })).unwrap();
    let first = a.exec(&ctx, &safe).await;
    assert_eq!(first.to_json()["rerunnable"], true, "{}", first.to_json());
    let second = b.wait(&ctx, &CodeModeWaitInput::new(run_id(&first))).await;
    assert_eq!(second.to_json()["rerunnable"], true, "{}", second.to_json());
    assert_eq!(a.wait(&ctx, &CodeModeWaitInput::new(run_id(&second))).await.to_json()["value"], 1);
    let plain = a.exec(&ctx, &CodeModeExecInput::code(cell)).await;
    assert!(plain.to_json().get("rerunnable").is_none(), "{}", plain.to_json());
    let _ = b.abort(&codemode::RunId::parse(&run_id(&plain)).unwrap()).await;
}

/// Learned result types across a fleet: the result types one replica learned reach the others through the
/// store (joined, never narrowed), so `describe` on a replica that never called the tool shows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learned_result_types_are_shared_by_the_fleet() {
    let server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let paid = Arc::new(AtomicU32::new(0));
    let a = replica(store(&server, 2_000).await, 3_000, tools(paid.clone(), None));
    let b = replica(store(&server, 2_000).await, 3_000, tools(paid.clone(), None));
    let ctx = RunContext::session("types");
    let describe = "return (await tools.describe('plugin:t:slow')).observedOutput ?? null";
    let r = a
        .exec(&ctx, &CodeModeExecInput::code("await tools.slow({ ms: 1 }); await tools.slow({ ms: 2 }); return 1"))
        .await;
    assert_eq!(r.to_json()["value"], 1, "{}", r.to_json());
    // B learns the fleet's view at the end of its next call, and shows it from then on.
    let _ = b.exec(&ctx, &CodeModeExecInput::code("return 0")).await;
    let shown = b.exec(&ctx, &CodeModeExecInput::code(describe)).await;
    assert_eq!(
        shown.to_json()["value"],
        json!({ "type": "{ slept: number }", "results": 2, "observed": true }),
        "{}",
        shown.to_json()
    );
}

/// Answers a host tool call with `{ "n": 1 }`, or `{ "s": "x" }` when the tool's description says
/// it was reworded (a new definition returning a new type).
struct Ones;

#[async_trait::async_trait]
impl codemode::ToolExecutor for Ones {
    async fn call(&self, call: codemode::NestedToolCall) -> Result<ToolResult, codemode::ToolError> {
        let reworded = call.tool.description.contains("reworded");
        Ok(ToolResult::value(if reworded { json!({ "s": "x" }) } else { json!({ "n": 1 }) }))
    }
}

/// Learned result types across a fleet, with a tool redefined: the fleet joins only what its replicas
/// learned from the same definition. A replica that redefines the tool does not get the old
/// definition's type back from the store, a replica of the old definition does not take the new
/// one's, and replicas agreeing on a definition still share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redefined_tool_does_not_take_what_its_old_definition_returned_from_the_fleet() {
    let server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let def = |description: &str| ToolDefinition::new(ToolSource::Client, "app", "a").with_description(description);
    let host = async |description: &str| {
        let config = CodeModeConfig { timeout_ms: 3_000, ..CodeModeConfig::enabled() };
        CodeMode::builder(config)
            .engine_name("quickjs-wasi")
            .tool_definitions([def(description)])
            .executor(Arc::new(Ones))
            .store(store(&server, 2_000).await)
            .build()
    };
    let ctx = RunContext::session("types");
    // What a replica shows for the tool after its next run ends (a run's end syncs with the fleet).
    let learned = async |cm: &CodeMode| {
        let code =
            "const o = (await tools.describe('client:app:a'))?.observedOutput; return o ? [o.type, o.results] : null";
        let _ = cm.exec(&ctx, &CodeModeExecInput::code("return 0")).await;
        cm.exec(&ctx, &CodeModeExecInput::code(code)).await.to_json()["value"].clone()
    };
    let calls = |n: usize| {
        CodeModeExecInput::code(format!(
            "for (let i = 0; i < {n}; i++) await tools.call('client:app:a', {{}}); return 1"
        ))
    };
    let a = host("first").await;
    let b = host("first").await;
    assert_eq!(a.exec(&ctx, &calls(2)).await.to_json()["value"], 1);
    assert_eq!(learned(&b).await, json!(["{ n: number }", 2]), "a replica of the same definition shares");
    // A redefines the tool: it starts over, and the fleet's entry of the old definition stays out.
    a.set_host_tools(vec![def("first, reworded")]);
    assert_eq!(learned(&a).await, json!(null));
    assert_eq!(a.exec(&ctx, &calls(1)).await.to_json()["value"], 1);
    assert_eq!(learned(&a).await, json!(["{ s: string }", 1]));
    // A fresh replica of each definition: each takes only its own definition's type.
    assert_eq!(learned(&host("first, reworded").await).await, json!(["{ s: string }", 1]));
    assert_eq!(learned(&host("first").await).await, json!(null), "the fleet's entry is the new definition's now");
    // B keeps what it learned from its own definition, and learns on.
    assert_eq!(b.exec(&ctx, &calls(3)).await.to_json()["value"], 1);
    assert_eq!(learned(&b).await, json!(["{ n: number }", 5]));
}
