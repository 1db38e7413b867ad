//! The store conformance suite (feature `conformance`): the contract of
//! [`SnapshotStore`] as tests any store runs, like the engine conformance suite for engines. The
//! memory, directory and Redis stores run it (`tests/store_conformance.rs`); a later store (Postgres,
//! NATS) proves itself the same way, with one call per check or [`run_all`].
//!
//! Each check gets a [`StoreUnderTest`]: a factory of store instances over one shared backend (two
//! instances are two processes or replicas; for the memory store, the same instance) and the
//! manual clock those instances read.
//!
//! Also here: [`RedisServer`], a real `redis-server` started on a free loopback port with its own
//! temporary directory and stopped on drop, whatever the test's outcome.

use crate::clock::{Clock as _, ManualClock};
use codemode_core::approval::ApprovalDecision;
use codemode_core::engine::{Delivery, GuestError, Snapshot, SnapshotBody};
use codemode_core::guest::GuestRequest;
use codemode_core::result::WaitReason;
use codemode_core::scope::{RunId, RunScope, ScopeMismatch};
use codemode_core::store::{
    CallIssue, CallOwner, CallStart, MAX_SUSPENDED_RUNS, PendingRequest, SnapshotStore, StoreError, SuspendedRun,
};
use codemode_core::task::TaskRecord;
use codemode_core::telemetry::CodeModeTelemetry;
use serde_json::json;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed future of a new store instance.
pub type NewStore = Pin<Box<dyn Future<Output = Arc<dyn SnapshotStore>> + Send>>;

/// A store under test: instances over one backend, all reading [`clock`](Self::clock).
pub struct StoreUnderTest {
    /// The clock every instance reads (starts at [`T0`]).
    pub clock: Arc<ManualClock>,
    /// Makes another instance over the same backend (another process or replica).
    pub instance: Box<dyn Fn() -> NewStore + Send + Sync>,
}

impl StoreUnderTest {
    async fn store(&self) -> Arc<dyn SnapshotStore> {
        (self.instance)().await
    }
}

/// The clock's start.
pub const T0: u64 = 1_000_000;

/// A suspended run of `session` expiring at `expires_at_ms`, with a serialized snapshot `body`
/// and `pending` tool calls (request ids; those in `parked` are parked for approval).
pub fn suspended(id: &str, session: &str, expires_at_ms: u64, body: Vec<u8>, pending: &[(u64, bool)]) -> SuspendedRun {
    SuspendedRun {
        run_id: RunId::parse(id).unwrap_or_else(|_| RunId::from_generated(id.to_string())),
        scope: RunScope::session(session),
        snapshot: Snapshot { engine: "quickjs-wasi".into(), body: SnapshotBody::Serialized(body) },
        reason: WaitReason::PendingTools,
        pending: pending
            .iter()
            .map(|&(id, parked)| PendingRequest {
                id,
                tool_id: Some("plugin:t:pay".into()),
                request: GuestRequest::Call {
                    id: "plugin:t:pay".into(),
                    input: json!({ "n": id }),
                    mode: codemode_core::guest::CallMode::Value,
                    line: None,
                },
                read_only: false,
                issued_at_ms: T0,
                awaiting_approval: parked,
                asked: None,
            })
            .collect(),
        ready: vec![Delivery { id: 99, outcome: Ok(json!({ "x": 1 })) }],
        restart_safe: false,
        telemetry: CodeModeTelemetry { exec_count: 1, ..Default::default() },
        created_at_ms: T0,
        expires_at_ms,
        positions: Default::default(),
        policy: Some(codemode_core::store::RunPolicy::default()),
    }
}

fn id(s: &str) -> RunId {
    RunId::parse(s).unwrap_or_else(|_| RunId::from_generated(s.to_string()))
}

/// What a store did against the contract: which check failed, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Failure(pub String);

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure(s)
    }
}

fn check(ok: bool, what: &str) -> Result<(), Failure> {
    if ok { Ok(()) } else { Err(Failure(what.to_string())) }
}

fn eq<T: PartialEq + std::fmt::Debug>(got: T, want: T, what: &str) -> Result<(), Failure> {
    if got == want { Ok(()) } else { Err(Failure(format!("{what}: got {got:?}, want {want:?}"))) }
}

/// put → checkout gives back every field; a second checkout is busy; remove releases.
pub async fn put_checkout_roundtrip(t: &StoreUnderTest) -> Result<(), Failure> {
    let s = t.store().await;
    let run = suspended("cm_roundtrip", "s1", T0 + 60_000, vec![1, 2, 3, 4], &[(1, false), (2, true)]);
    s.put(run).await.map_err(|e| format!("put: {e}"))?;
    let back = s.checkout(&id("cm_roundtrip"), &RunScope::session("s1")).await.map_err(|e| format!("checkout: {e}"))?;
    let bytes = match &back.snapshot.body {
        SnapshotBody::Serialized(b) => b.clone(),
        SnapshotBody::Live { .. } => Vec::new(),
    };
    eq(bytes, vec![1, 2, 3, 4], "snapshot")?;
    eq(back.pending.len(), 2, "pending")?;
    eq(back.parked(), vec![2], "parked")?;
    eq(back.ready.clone(), vec![Delivery { id: 99, outcome: Ok(json!({ "x": 1 })) }], "ready")?;
    eq(back.telemetry.exec_count, 1, "telemetry")?;
    eq(back.expires_at_ms, T0 + 60_000, "expiry")?;
    let again = s.checkout(&id("cm_roundtrip"), &RunScope::session("s1")).await;
    eq(again.err(), Some(StoreError::Busy), "second checkout")?;
    check(s.remove(&id("cm_roundtrip")).await, "remove reports the run")?;
    let gone = s.checkout(&id("cm_roundtrip"), &RunScope::session("s1")).await;
    eq(gone.err(), Some(StoreError::Unavailable), "after remove")
}

/// Lookup failures: unknown id, another scope (which leaves the run resumable by its owner).
pub async fn lookup_failures(t: &StoreUnderTest) -> Result<(), Failure> {
    let s = t.store().await;
    eq(s.checkout(&id("cm_nobody"), &RunScope::session("s1")).await.err(), Some(StoreError::Unavailable), "unknown")?;
    s.put(suspended("cm_scoped", "owner", T0 + 60_000, vec![7], &[])).await.map_err(|e| e.to_string())?;
    let other = s.checkout(&id("cm_scoped"), &RunScope::session("intruder")).await;
    check(matches!(other, Err(StoreError::WrongScope(_))), "another scope is refused")?;
    s.checkout(&id("cm_scoped"), &RunScope::session("owner"))
        .await
        .map_err(|e| format!("owner after intruder: {e}"))?;
    s.remove(&id("cm_scoped")).await;
    // The scope's rules (`RunScope::check`): agent, session id and session key exactly (absent
    // matches only absent), the agent run only when both sides name one.
    let owner = RunScope {
        agent_id: Some("ops".into()),
        session_key: Some("k".into()),
        agent_run_id: Some("run-1".into()),
        ..RunScope::session("owner")
    };
    let mut run = suspended("cm_scope_rules", "owner", T0 + 60_000, vec![8], &[]);
    run.scope = owner.clone();
    s.put(run).await.map_err(|e| e.to_string())?;
    let refusals = [
        (RunScope { agent_run_id: Some("run-2".into()), ..owner.clone() }, ScopeMismatch::AgentRun),
        (RunScope { agent_id: None, ..owner.clone() }, ScopeMismatch::Session),
        (RunScope { agent_id: Some("=ops".into()), ..owner.clone() }, ScopeMismatch::Session),
        (RunScope { session_key: None, ..owner.clone() }, ScopeMismatch::Session),
        (RunScope { session_key: Some("-".into()), ..owner.clone() }, ScopeMismatch::Session),
        (RunScope { agent_id: None, session_key: None, agent_run_id: None, ..owner.clone() }, ScopeMismatch::Session),
    ];
    for (caller, why) in refusals {
        eq(
            s.checkout(&id("cm_scope_rules"), &caller).await.err(),
            Some(StoreError::WrongScope(why)),
            &format!("{caller:?}"),
        )?;
    }
    // Without an agent run the caller matches any; each refusal above left the run resumable.
    let back = s
        .checkout(&id("cm_scope_rules"), &RunScope { agent_run_id: None, ..owner.clone() })
        .await
        .map_err(|e| format!("owner without an agent run: {e}"))?;
    s.put(back).await.map_err(|e| e.to_string())?;
    s.checkout(&id("cm_scope_rules"), &owner).await.map_err(|e| format!("owner: {e}"))?;
    s.remove(&id("cm_scope_rules")).await;
    Ok(())
}

/// An expired run cannot be resumed and is purged.
pub async fn expiry(t: &StoreUnderTest) -> Result<(), Failure> {
    let s = t.store().await;
    s.put(suspended("cm_old", "s1", T0 + 1_000, vec![1], &[])).await.map_err(|e| e.to_string())?;
    s.put(suspended("cm_young", "s1", T0 + 100_000, vec![1], &[])).await.map_err(|e| e.to_string())?;
    t.clock.advance_ms(2_000);
    let purged = s.purge_expired().await;
    eq(purged, vec![id("cm_old")], "purged")?;
    eq(s.checkout(&id("cm_old"), &RunScope::session("s1")).await.err(), Some(StoreError::Unavailable), "expired")?;
    eq(s.count().await, 1, "count after purge")?;
    s.remove(&id("cm_young")).await;
    Ok(())
}

/// At most 64 suspended runs (per process for local stores, per scope for a fleet store); a
/// removed run makes room; re-suspending a checked-out run never counts twice.
pub async fn capacity(t: &StoreUnderTest) -> Result<(), Failure> {
    let s = t.store().await;
    for i in 0..MAX_SUSPENDED_RUNS {
        s.put(suspended(&format!("cm_cap{i}"), "cap", T0 + 60_000, vec![1], &[]))
            .await
            .map_err(|e| format!("{i}: {e}"))?;
    }
    let over = s.put(suspended("cm_capover", "cap", T0 + 60_000, vec![1], &[])).await;
    eq(over.err(), Some(StoreError::TooMany), "65th")?;
    let out = s.checkout(&id("cm_cap0"), &RunScope::session("cap")).await.map_err(|e| e.to_string())?;
    s.put(out).await.map_err(|e| format!("re-suspension at the cap: {e}"))?;
    s.remove(&id("cm_cap1")).await;
    s.put(suspended("cm_capover", "cap", T0 + 60_000, vec![1], &[])).await.map_err(|e| format!("after remove: {e}"))?;
    for i in 0..MAX_SUSPENDED_RUNS {
        s.remove(&id(&format!("cm_cap{i}"))).await;
    }
    s.remove(&id("cm_capover")).await;
    Ok(())
}

/// Concurrent `wait`s on one run (from several instances when the store is shared): exactly one
/// takes it.
pub async fn concurrent_checkouts(t: &StoreUnderTest) -> Result<(), Failure> {
    let s = t.store().await;
    s.put(suspended("cm_race", "s1", T0 + 60_000, vec![1], &[])).await.map_err(|e| e.to_string())?;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let inst = if s.accepts_live() { s.clone() } else { t.store().await };
        tasks.push(tokio::spawn(async move { inst.checkout(&id("cm_race"), &RunScope::session("s1")).await.is_ok() }));
    }
    let mut won = 0;
    for task in tasks {
        if task.await.map_err(|e| e.to_string())? {
            won += 1;
        }
    }
    eq(won, 1, "checkouts that won")?;
    s.remove(&id("cm_race")).await;
    Ok(())
}

/// Approval decisions: recorded for a parked call and taken once; refused for a call that is not
/// parked (naming what is) and for an unknown run.
pub async fn decisions(t: &StoreUnderTest) -> Result<(), Failure> {
    let s = t.store().await;
    s.put(suspended("cm_dec", "s1", T0 + 60_000, vec![1], &[(1, false), (2, true)]))
        .await
        .map_err(|e| e.to_string())?;
    let other = t.store().await;
    check(!s.has_decisions(&id("cm_dec")).await.map_err(|e| e.to_string())?, "no decision yet")?;
    other.record_decision(&id("cm_dec"), 2, &ApprovalDecision::Approve).await.map_err(|e| format!("record: {e}"))?;
    check(s.has_decisions(&id("cm_dec")).await.map_err(|e| e.to_string())?, "a decision is waiting")?;
    let not_parked = other.record_decision(&id("cm_dec"), 1, &ApprovalDecision::Approve).await;
    eq(not_parked.err(), Some(StoreError::NotParked { request_id: 1, parked: vec![2] }), "not parked")?;
    let unknown = other.record_decision(&id("cm_nodec"), 1, &ApprovalDecision::Approve).await;
    eq(unknown.err(), Some(StoreError::Unavailable), "unknown run")?;
    eq(
        s.take_decisions(&id("cm_dec")).await.map_err(|e| e.to_string())?,
        vec![(2, ApprovalDecision::Approve)],
        "taken",
    )?;
    eq(s.take_decisions(&id("cm_dec")).await.map_err(|e| e.to_string())?, vec![], "taken once")?;
    check(!other.has_decisions(&id("cm_dec")).await.map_err(|e| e.to_string())?, "none left once taken")?;
    s.remove(&id("cm_dec")).await;
    Ok(())
}

/// Stores shared across processes (every store that keeps only serialized snapshots): a result
/// recorded by one instance is taken by another; nothing is recorded for a run that is gone.
pub async fn recorded_results(t: &StoreUnderTest) -> Result<(), Failure> {
    let s = t.store().await;
    if s.accepts_live() {
        return Ok(());
    }
    let d = Delivery { id: 1, outcome: Ok(json!({ "paid": true })) };
    s.put(suspended("cm_res", "s1", T0 + 60_000, vec![1], &[(1, false)])).await.map_err(|e| e.to_string())?;
    let runner = t.store().await;
    if s.fleet() {
        // A fleet store records only calls it logged (every call is logged before it runs).
        let issue =
            CallIssue { request_id: 1, tool_id: "plugin:t:pay".into(), input_digest: "d".into(), read_only: false };
        // The call was issued while the run was held: check it out on the runner, log, store.
        let out = runner.checkout(&id("cm_res"), &RunScope::session("s1")).await.map_err(|e| e.to_string())?;
        eq(runner.begin_call(&id("cm_res"), &issue).await.map_err(|e| e.to_string())?, CallStart::Fresh, "begin")?;
        runner.put(out).await.map_err(|e| e.to_string())?;
    }
    check(runner.record_result(&id("cm_res"), &d).await.map_err(|e| e.to_string())?, "recorded")?;
    let taken = s.take_results(&id("cm_res")).await.map_err(|e| e.to_string())?;
    eq(taken, vec![d.clone()], "taken by another instance")?;
    s.remove(&id("cm_res")).await;
    eq(runner.record_result(&id("cm_res"), &d).await.unwrap_or(false), false, "run gone: not recorded")
}

/// Fleet stores only: leases and fencing. A replica that stopped renewing loses the run to
/// another; its later writes (store, settle, log a call, record a result of a call the new holder
/// took over) are refused, and nothing it does reaches the run.
pub async fn fencing(
    t: &StoreUnderTest,
    pause: &(dyn Fn(&Arc<dyn SnapshotStore>) + Send + Sync),
) -> Result<(), Failure> {
    let a = t.store().await;
    if !a.fleet() {
        return Ok(());
    }
    let b = t.store().await;
    let scope = RunScope::session("s1");
    a.put(suspended("cm_fence", "s1", T0 + 600_000, vec![1], &[(1, false)])).await.map_err(|e| e.to_string())?;
    let held = a.checkout(&id("cm_fence"), &scope).await.map_err(|e| e.to_string())?;
    eq(b.checkout(&id("cm_fence"), &scope).await.err(), Some(StoreError::Busy), "held by a live replica")?;
    let issue = CallIssue { request_id: 2, tool_id: "plugin:t:pay".into(), input_digest: "x".into(), read_only: false };
    eq(a.begin_call(&id("cm_fence"), &issue).await.map_err(|e| e.to_string())?, CallStart::Fresh, "a logs call 2")?;
    // A is paused past its lease: B takes the run over.
    pause(&a);
    t.clock.advance_ms(60_000);
    let taken = b.checkout(&id("cm_fence"), &scope).await.map_err(|e| format!("takeover: {e}"))?;
    // Everything A does for the run now is refused.
    eq(a.put(held).await.err(), Some(StoreError::TakenOver), "a's store after takeover")?;
    eq(a.settle(&id("cm_fence")).await.err(), Some(StoreError::TakenOver), "a's settle after takeover")?;
    let issue3 = CallIssue { request_id: 3, ..issue.clone() };
    eq(a.begin_call(&id("cm_fence"), &issue3).await.err(), Some(StoreError::TakenOver), "a logs a new call")?;
    // B replays: call 2 was A's, unfinished; A counts as dead (its liveness expired with the lease),
    // and the tool has side effects: lost, never run again.
    let start = b.begin_call(&id("cm_fence"), &issue).await.map_err(|e| e.to_string())?;
    check(matches!(start, CallStart::Lost(_)), &format!("b meets a's unfinished call: {start:?}"))?;
    let late = Delivery { id: 2, outcome: Ok(json!("paid by a")) };
    eq(a.finish_call(&id("cm_fence"), &late, None).await.map_err(|e| e.to_string())?, false, "a's late result")?;
    let results = b.take_results(&id("cm_fence")).await.map_err(|e| e.to_string())?;
    check(
        results.iter().all(|d| d.id != 2 || d.outcome.is_err()),
        "the log holds the lost call's failure, not a's late result",
    )?;
    // B stores the run again and settles it; the fence holds for B's own writes.
    b.put(taken).await.map_err(|e| format!("b's store: {e}"))?;
    let _ = b.checkout(&id("cm_fence"), &scope).await.map_err(|e| e.to_string())?;
    eq(b.settle(&id("cm_fence")).await.map_err(|e| e.to_string())?, true, "b settles")?;
    // A run taken over and already settled by the new holder: the old holder's settle finds it
    // gone, and is still refused (its result is void, never delivered as the run's end).
    a.put(suspended("cm_fence2", "s1", T0 + 600_000, vec![1], &[(1, false)])).await.map_err(|e| e.to_string())?;
    let _ = a.checkout(&id("cm_fence2"), &scope).await.map_err(|e| e.to_string())?;
    pause(&a);
    t.clock.advance_ms(60_000);
    let _ = b.checkout(&id("cm_fence2"), &scope).await.map_err(|e| format!("takeover: {e}"))?;
    eq(b.settle(&id("cm_fence2")).await.map_err(|e| e.to_string())?, true, "b settles the run it took over")?;
    eq(a.settle(&id("cm_fence2")).await.err(), Some(StoreError::TakenOver), "a's settle after b settled")?;
    Ok(())
}

/// Fleet stores only: the call log gives exactly-once calls. A finished call's result is returned
/// instead of running it again (a replay from the last snapshot); a read-only call lost with its
/// replica runs again; a replay that makes another call under a logged id does not get its result.
pub async fn call_log(
    t: &StoreUnderTest,
    pause: &(dyn Fn(&Arc<dyn SnapshotStore>) + Send + Sync),
) -> Result<(), Failure> {
    let a = t.store().await;
    if !a.fleet() {
        return Ok(());
    }
    let b = t.store().await;
    let scope = RunScope::session("s1");
    let run = id("cm_log");
    a.put(suspended("cm_log", "s1", T0 + 600_000, vec![1], &[])).await.map_err(|e| e.to_string())?;
    let _held = a.checkout(&run, &scope).await.map_err(|e| e.to_string())?;
    let pay = CallIssue { request_id: 1, tool_id: "plugin:t:pay".into(), input_digest: "p".into(), read_only: false };
    let read = CallIssue { request_id: 2, tool_id: "plugin:t:get".into(), input_digest: "g".into(), read_only: true };
    let job = CallIssue { request_id: 3, tool_id: "mcp:s:job".into(), input_digest: "j".into(), read_only: false };
    eq(a.begin_call(&run, &pay).await.map_err(|e| e.to_string())?, CallStart::Fresh, "pay")?;
    eq(a.begin_call(&run, &read).await.map_err(|e| e.to_string())?, CallStart::Fresh, "read")?;
    eq(a.begin_call(&run, &job).await.map_err(|e| e.to_string())?, CallStart::Fresh, "job")?;
    // The side-effecting `job` became a task on its server: noted, only by its issuer.
    check(!b.note_call(&run, 3, "task-9").await.map_err(|e| e.to_string())?, "b cannot note a's call")?;
    check(a.note_call(&run, 3, "task-9").await.map_err(|e| e.to_string())?, "a notes its call's task")?;
    check(!a.note_call(&run, 99, "x").await.map_err(|e| e.to_string())?, "an unlogged call is not noted")?;
    eq(a.call_notes(&run).await.map_err(|e| e.to_string())?, vec![(3, "task-9".to_string())], "notes")?;
    eq(a.call_owner(&run, 3).await.map_err(|e| e.to_string())?, CallOwner::Mine, "a owns its call")?;
    let paid = Delivery { id: 1, outcome: Ok(json!({ "receipt": 7 })) };
    check(
        a.finish_call(&run, &paid, Some(r#"{"Ok":{"details":{"receipt":7}}}"#)).await.map_err(|e| e.to_string())?,
        "a records pay's result",
    )?;
    // A dies (no store of the new state): B replays from the stored snapshot.
    pause(&a);
    t.clock.advance_ms(60_000);
    let _taken = b.checkout(&run, &scope).await.map_err(|e| e.to_string())?;
    eq(
        b.begin_call(&run, &pay).await.map_err(|e| e.to_string())?,
        CallStart::Recorded {
            outcome: Ok(json!({ "receipt": 7 })),
            raw: Some(r#"{"Ok":{"details":{"receipt":7}}}"#.into()),
        },
        "replayed pay gets its recorded result, and what the tool returned",
    )?;
    eq(b.begin_call(&run, &read).await.map_err(|e| e.to_string())?, CallStart::Reissued, "lost read-only call")?;
    // The noted call passes to b, which continues its task: once (a second begin is b's own).
    eq(
        b.begin_call(&run, &job).await.map_err(|e| e.to_string())?,
        CallStart::Resume("task-9".into()),
        "lost noted call",
    )?;
    eq(b.begin_call(&run, &job).await.map_err(|e| e.to_string())?, CallStart::Fresh, "b owns the call now")?;
    check(!a.note_call(&run, 3, "task-10").await.map_err(|e| e.to_string())?, "a no longer owns it")?;
    eq(a.call_owner(&run, 3).await.map_err(|e| e.to_string())?, CallOwner::Moved, "a's call moved to b")?;
    let done = Delivery { id: 3, outcome: Ok(json!("worked")) };
    check(b.finish_call(&run, &done, None).await.map_err(|e| e.to_string())?, "b records the job's result")?;
    eq(b.call_notes(&run).await.map_err(|e| e.to_string())?, Vec::new(), "a finished call's note is spent")?;
    let other = CallIssue { request_id: 1, tool_id: "plugin:t:refund".into(), ..pay.clone() };
    let diverged = b.begin_call(&run, &other).await.map_err(|e| e.to_string())?;
    check(matches!(diverged, CallStart::Lost(_)), &format!("a different call under a logged id: {diverged:?}"))?;
    let failed: Result<serde_json::Value, GuestError> = match b.begin_call(&run, &other).await {
        Ok(CallStart::Recorded { outcome, raw: None }) => outcome,
        other => return Err(format!("the divergent call's failure is logged: {other:?}").into()),
    };
    check(failed.is_err(), "logged as failed")?;
    b.settle(&run).await.map_err(|e| e.to_string())?;
    eq(a.call_owner(&run, 3).await.map_err(|e| e.to_string())?, CallOwner::Gone, "the run is gone")?;
    Ok(())
}

fn task_record(
    task_id: &str,
    scope: &str,
    state: codemode_core::task::TaskState,
    now: u64,
) -> codemode_core::task::TaskRecord {
    codemode_core::task::TaskRecord {
        task_id: task_id.to_string(),
        scope: RunScope::session(scope),
        state,
        message: Some("waiting on 1 call".into()),
        carried: Vec::new(),
        result: None,
        is_error: false,
        questions: Vec::new(),
        created_at_ms: now,
        updated_at_ms: now,
        expires_at_ms: now + 10_000,
    }
}

/// Task records (runs served as MCP tasks): written and read back by another instance; a terminal
/// record is never overwritten (a cancelled task stays cancelled); one drive claim at a time, taken
/// over only after its lease, and a writer that lost the claim cannot overwrite the record; records
/// expire.
pub async fn tasks(t: &StoreUnderTest) -> Result<(), Failure> {
    use codemode_core::task::TaskState;
    let (a, b) = (t.store().await, t.store().await);
    let task = "cm_task_1";
    eq(a.task(task).await.map_err(|e| e.to_string())?, None, "unknown task")?;
    let working = task_record(task, "owner", TaskState::Working, t.clock.now_ms());
    check(a.put_task(&working, None).await.map_err(|e| e.to_string())?, "first write")?;
    eq(b.task(task).await.map_err(|e| e.to_string())?, Some(working.clone()), "read by another instance")?;

    // A working task nobody drives is an orphan, swept by any instance; a driven one is not.
    eq(b.orphaned_tasks(16).await.map_err(|e| e.to_string())?, vec![task.to_string()], "an undriven task")?;
    // One driver at a time; the claim moves after its lease, and the old holder's writes are refused.
    check(a.drive_task(task, "replica-a", 1_000).await.map_err(|e| e.to_string())?, "a takes the claim")?;
    eq(b.orphaned_tasks(16).await.map_err(|e| e.to_string())?, Vec::<String>::new(), "a driven task")?;
    check(!b.drive_task(task, "replica-b", 1_000).await.map_err(|e| e.to_string())?, "b is refused while a holds it")?;
    check(a.drive_task(task, "replica-a", 1_000).await.map_err(|e| e.to_string())?, "a renews its claim")?;
    let mut by_b = working.clone();
    by_b.message = Some("b".into());
    check(!b.put_task(&by_b, Some("replica-b")).await.map_err(|e| e.to_string())?, "b cannot write as a driver")?;
    t.clock.advance_ms(1_001);
    eq(b.orphaned_tasks(16).await.map_err(|e| e.to_string())?, vec![task.to_string()], "its driver's lease lapsed")?;
    check(b.drive_task(task, "replica-b", 1_000).await.map_err(|e| e.to_string())?, "b takes over after the lease")?;
    let mut by_a = working.clone();
    by_a.message = Some("a".into());
    check(!a.put_task(&by_a, Some("replica-a")).await.map_err(|e| e.to_string())?, "a lost the claim: refused")?;
    check(b.put_task(&by_b, Some("replica-b")).await.map_err(|e| e.to_string())?, "b writes as the driver")?;
    eq(a.task(task).await.map_err(|e| e.to_string())?.and_then(|t| t.message), Some("b".into()), "b's record")?;
    b.release_task(task, "replica-a").await.map_err(|e| e.to_string())?;
    check(!a.drive_task(task, "replica-a", 1_000).await.map_err(|e| e.to_string())?, "release by a non-holder")?;
    b.release_task(task, "replica-b").await.map_err(|e| e.to_string())?;
    check(a.drive_task(task, "replica-a", 1_000).await.map_err(|e| e.to_string())?, "released claim is free")?;

    // Terminal records stay.
    let cancelled = TaskRecord { state: TaskState::Cancelled, ..working.clone() };
    check(b.put_task(&cancelled, None).await.map_err(|e| e.to_string())?, "cancel over working")?;
    let mut done = working.clone();
    done.state = TaskState::Completed;
    done.result = Some(json!({ "status": "completed" }));
    check(!a.put_task(&done, Some("replica-a")).await.map_err(|e| e.to_string())?, "completed over cancelled")?;
    eq(a.task(task).await.map_err(|e| e.to_string())?.map(|t| t.state), Some(TaskState::Cancelled), "stays cancelled")?;
    b.release_task(task, "replica-a").await.map_err(|e| e.to_string())?;
    eq(a.orphaned_tasks(16).await.map_err(|e| e.to_string())?, Vec::<String>::new(), "a finished task is no orphan")?;

    // A record under another task's id is not that task's.
    let other = task_record("cm_task_2", "owner", TaskState::Working, t.clock.now_ms());
    check(a.put_task(&other, None).await.map_err(|e| e.to_string())?, "second task")?;
    eq(b.task("cm_task_2").await.map_err(|e| e.to_string())?.map(|t| t.task_id), Some("cm_task_2".into()), "ids")?;

    // Expiry.
    t.clock.advance_ms(10_000);
    eq(a.task(task).await.map_err(|e| e.to_string())?, None, "expired record")?;
    eq(b.task("cm_task_2").await.map_err(|e| e.to_string())?, None, "expired record elsewhere")?;
    Ok(())
}

/// `list_runs`: every suspended run once, paged in expiry order, of one scope or of all; a run a
/// `wait` holds is listed as checked out; parked calls show their input; expired runs are not
/// listed; a cursor that is not one starts at the beginning.
pub async fn listing(t: &StoreUnderTest) -> Result<(), Failure> {
    let s = t.store().await;
    let other = t.store().await;
    let now = t.clock.now_ms();
    s.put(suspended("cm_list_a", "s1", now + 10_000, vec![1], &[(1, true), (2, false)]))
        .await
        .map_err(|e| e.to_string())?;
    s.put(suspended("cm_list_b", "s2", now + 20_000, vec![2], &[])).await.map_err(|e| e.to_string())?;
    s.put(suspended("cm_list_c", "s1", now + 30_000, vec![3], &[])).await.map_err(|e| e.to_string())?;
    s.put(suspended("cm_list_old", "s1", now + 500, vec![4], &[])).await.map_err(|e| e.to_string())?;
    t.clock.advance_ms(1_000);
    let first = other.list_runs(None, None, 2).await.map_err(|e| format!("list: {e}"))?;
    let names = |p: &codemode_core::store::RunPage| p.runs.iter().map(|r| r.run_id.to_string()).collect::<Vec<_>>();
    eq(names(&first), vec!["cm_list_a".to_string(), "cm_list_b".to_string()], "first page")?;
    let next = first.next.clone().ok_or_else(|| Failure("a first page of 2 of 3 runs has a next cursor".into()))?;
    let second = other.list_runs(None, Some(&next), 2).await.map_err(|e| format!("second page: {e}"))?;
    eq(names(&second), vec!["cm_list_c".to_string()], "second page")?;
    eq(second.next, None, "last page's cursor")?;
    let a = &first.runs[0];
    eq(a.scope.clone(), RunScope::session("s1"), "scope")?;
    eq(a.calls.len(), 2, "listed calls")?;
    eq(a.calls[0].awaiting_approval, true, "parked call")?;
    eq(a.calls[0].input.clone(), r#"{"n":1}"#.to_string(), "parked call's input")?;
    eq(a.calls[0].tool_id.clone(), Some("plugin:t:pay".to_string()), "parked call's tool")?;
    check(a.stored_bytes > 0, "stored bytes")?;
    let scoped = other.list_runs(Some(&RunScope::session("s1")), None, 10).await.map_err(|e| e.to_string())?;
    eq(names(&scoped), vec!["cm_list_a".to_string(), "cm_list_c".to_string()], "one scope's runs")?;
    let nobody = other.list_runs(Some(&RunScope::session("nobody")), None, 10).await.map_err(|e| e.to_string())?;
    eq(nobody.runs.len(), 0, "a scope without runs")?;
    let _held = s.checkout(&id("cm_list_b"), &RunScope::session("s2")).await.map_err(|e| format!("checkout: {e}"))?;
    let all = other.list_runs(None, Some("not a cursor"), 10).await.map_err(|e| e.to_string())?;
    eq(names(&all).len(), 3, "a bad cursor starts at the beginning")?;
    let b = all.runs.iter().find(|r| r.run_id.as_str() == "cm_list_b");
    check(b.is_some_and(|b| b.checked_out), "a checked-out run is listed as such")?;
    for run in ["cm_list_a", "cm_list_b", "cm_list_c", "cm_list_old"] {
        s.remove(&id(run)).await;
    }
    eq(other.list_runs(None, None, 10).await.map_err(|e| e.to_string())?.runs.len(), 0, "after remove")?;
    Ok(())
}

/// Console records: last writer wins, read by another instance, newest first, gone at their
/// TTL, at most `max_records` of a kind (the least recently updated go); bad keys and oversized
/// records are refused.
pub async fn console_records(t: &StoreUnderTest) -> Result<(), Failure> {
    use codemode_core::store::{ConsoleKind, MAX_CONSOLE_RECORD_BYTES};
    let s = t.store().await;
    let other = t.store().await;
    s.put_console_record(ConsoleKind::Run, "cm_journal_1", "one", 5_000).await.map_err(|e| format!("put: {e}"))?;
    t.clock.advance_ms(1);
    s.put_console_record(ConsoleKind::Run, "cm_journal_2", "two", 60_000).await.map_err(|e| e.to_string())?;
    t.clock.advance_ms(1);
    s.put_console_record(ConsoleKind::Run, "cm_journal_1", "one again", 5_000).await.map_err(|e| e.to_string())?;
    eq(
        other.console_record(ConsoleKind::Run, "cm_journal_1").await.map_err(|e| e.to_string())?,
        Some("one again".to_string()),
        "last writer wins",
    )?;
    eq(
        other.console_records(ConsoleKind::Run, 10).await.map_err(|e| e.to_string())?,
        vec!["one again".to_string(), "two".to_string()],
        "newest first",
    )?;
    eq(other.console_records(ConsoleKind::Replica, 10).await.map_err(|e| e.to_string())?.len(), 0, "kinds apart")?;
    t.clock.advance_ms(10_000);
    eq(other.console_record(ConsoleKind::Run, "cm_journal_1").await.map_err(|e| e.to_string())?, None, "expired")?;
    eq(
        other.console_records(ConsoleKind::Run, 10).await.map_err(|e| e.to_string())?,
        vec!["two".to_string()],
        "expired records are not listed",
    )?;
    for bad in ["", "../escape", "a/b", ".hidden", "x y"] {
        check(
            s.put_console_record(ConsoleKind::Run, bad, "v", 1_000).await.is_err(),
            &format!("key {bad:?} is refused"),
        )?;
    }
    let huge = "x".repeat(MAX_CONSOLE_RECORD_BYTES + 1);
    check(s.put_console_record(ConsoleKind::Run, "cm_huge", &huge, 1_000).await.is_err(), "oversized record")?;
    let max = ConsoleKind::Replica.max_records();
    for i in 0..max + 2 {
        t.clock.advance_ms(1);
        s.put_console_record(ConsoleKind::Replica, &format!("r{i}"), &format!("replica {i}"), 60_000)
            .await
            .map_err(|e| format!("put replica {i}: {e}"))?;
    }
    let kept = other.console_records(ConsoleKind::Replica, max + 10).await.map_err(|e| e.to_string())?;
    eq(kept.len(), max, "at most max_records")?;
    eq(kept.first().cloned(), Some(format!("replica {}", max + 1)), "the newest is kept")?;
    check(!kept.contains(&"replica 0".to_string()), "the oldest went")?;
    Ok(())
}

/// Runs every check; the error names the first that failed. `pause` stops a fleet store instance
/// from renewing its leases (a paused or partitioned replica); other stores ignore it.
pub async fn run_all(
    t: &StoreUnderTest,
    pause: &(dyn Fn(&Arc<dyn SnapshotStore>) + Send + Sync),
) -> Result<(), Failure> {
    put_checkout_roundtrip(t).await.map_err(|e| format!("put_checkout_roundtrip: {e}"))?;
    lookup_failures(t).await.map_err(|e| format!("lookup_failures: {e}"))?;
    expiry(t).await.map_err(|e| format!("expiry: {e}"))?;
    capacity(t).await.map_err(|e| format!("capacity: {e}"))?;
    concurrent_checkouts(t).await.map_err(|e| format!("concurrent_checkouts: {e}"))?;
    decisions(t).await.map_err(|e| format!("decisions: {e}"))?;
    recorded_results(t).await.map_err(|e| format!("recorded_results: {e}"))?;
    fencing(t, pause).await.map_err(|e| format!("fencing: {e}"))?;
    call_log(t, pause).await.map_err(|e| format!("call_log: {e}"))?;
    tasks(t).await.map_err(|e| format!("tasks: {e}"))?;
    listing(t).await.map_err(|e| format!("listing: {e}"))?;
    console_records(t).await.map_err(|e| format!("console_records: {e}"))?;
    Ok(())
}

/// A real `redis-server` on a free loopback port, with its own temporary directory (AOF on, so a
/// restart keeps what was written), stopped when dropped.
pub struct RedisServer {
    child: Option<std::process::Child>,
    port: u16,
    dir: std::path::PathBuf,
}

impl RedisServer {
    /// Starts one; `None` when `redis-server` is not installed (the caller decides whether that
    /// skips or fails).
    pub fn start() -> Option<RedisServer> {
        let dir = std::env::temp_dir().join(format!("codemode-redis-{}-{}", std::process::id(), uuid_like()));
        std::fs::create_dir_all(&dir).ok()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let mut server = RedisServer { child: None, port, dir };
        server.spawn().then_some(server)
    }

    fn spawn(&mut self) -> bool {
        self.spawn_with(&[])
    }

    fn spawn_with(&mut self, extra: &[&str]) -> bool {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes"])
            .args(["--appendfsync", "always", "--protected-mode", "yes"])
            .args(extra)
            .arg("--dir")
            .arg(&self.dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        let Ok(child) = child else { return false };
        self.child = Some(child);
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        false
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server (SIGKILL: whatever the AOF holds survives).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and directory (reloading the AOF).
    pub fn restart(&mut self) -> bool {
        self.stop();
        self.spawn()
    }

    /// Adds 16 keys of 4 KiB (`filler:*`, outside any store's prefix), compacts the AOF into its
    /// snapshot base (`BGREWRITEAOF`, uncompressed, waited for), then restarts with every key's
    /// reload delayed by `per_key` (`key-load-delay`) and clients served every KiB loaded: for
    /// about `per_key × keys` after it accepts connections Redis answers `LOADING` at once, as a
    /// Redis reloading a large dataset does. `false` when the rewrite or the start failed.
    pub fn restart_loading_slowly(&mut self, per_key: std::time::Duration) -> bool {
        let cli = |args: &[&str]| {
            std::process::Command::new("redis-cli")
                .arg("-p")
                .arg(self.port.to_string())
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        };
        let filler = "f".repeat(4096);
        let written = cli(&["CONFIG", "SET", "rdbcompression", "no"]).is_some()
            && (0..16).all(|i| cli(&["SET", &format!("filler:{i}"), &filler]).is_some());
        if !written || cli(&["BGREWRITEAOF"]).is_none() {
            return false;
        }
        let mut rewritten = false;
        for _ in 0..400 {
            let info = cli(&["INFO", "persistence"]).unwrap_or_default();
            if info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0") {
                rewritten = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.stop();
        let delay = per_key.as_micros().to_string();
        rewritten && self.spawn_with(&["--key-load-delay", &delay, "--loading-process-events-interval-bytes", "1024"])
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{nanos:x}-{}", N.fetch_add(1, Ordering::Relaxed))
}
