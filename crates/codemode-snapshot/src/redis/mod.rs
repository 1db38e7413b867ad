//! The Redis snapshot store: the shared state of a fleet of gateways, so any replica resumes any
//! run, a dead replica loses nothing, and nothing runs twice (feature `redis`; Redis ≥ 7 or
//! Valkey, standalone — not Redis Cluster, since one script touches a run's keys and its scope's).
//!
//! # What is in Redis
//!
//! Every key starts with the store's prefix `P` (`keyPrefix`, default `codemode:`):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P run:<runId>` | hash | `meta` (JSON: scope, engine, reason, pending and undelivered results, telemetry, positions, expiry), `snap` (the engine's serialized snapshot, whose header names the engine build), `parked` (JSON array of request ids parked for approval), `tag` (HMAC-SHA-256 of run id, `meta` and `snap`: a run whose tag no key verifies is refused on checkout), `fence` (checkouts so far), `holder` (replica id of the current checkout, `""` when suspended), `lease` (when that checkout's lease ends, Unix ms), `expires`, `scope` (the key of its scope set), `oagent` `osession` `okey` `orun` (its scope's fields as [`CHECKOUT`] compares them: a shortcut, not signed — the signed `meta` decides), `nonce` (the current checkout's, which makes resending it safe) |
//! | `P calls:<runId>` | hash | the call log: request id → JSON `{issuer, tool, digest, result?, raw?, note?}` (`note`: the task the call became on its server, continued by the replica that resumes the run); `result` is the call's delivery JSON, written the moment the call finishes, `raw` what the tool returned before the after-call stages (a replaying replica runs its own) |
//! | `P decisions:<runId>` | hash | request id → `<hex tag>\n<decision JSON>`, until the resuming `wait` takes it |
//! | `P scope:<digest>` | sorted set | run ids of one scope (SHA-256 of the scope), scored by expiry: the 64-run cap per scope, counted across the fleet |
//! | `P expiry` | sorted set | every run id, scored by expiry (sweeps) |
//! | `P replica:<replicaId>` | string | present while that replica lives (set with a `PX` of the lease, renewed every third of it) |
//! | `P secret` | string | 32 random bytes shared by the fleet (tags of MRTR approval state; the run signing key is derived from it when none is configured) |
//! | `P session:<digest>:loops` | string | a session's loop-detection history (JSON), expiring with `snapshotTtlSeconds` |
//! | `P task:<taskId>` | hash | a run served as an MCP task: `state` and `rec` (`<hex tag>\n<record JSON>`, signed like a decision), expiring with the record |
//! | `P tasks` | set | the ids of unfinished tasks (swept for tasks whose driver died; an id whose record expired leaves it at the next sweep) |
//! | `P taskdriver:<taskId>` | hash | `holder` (the process driving the task) and `until` (when its claim ends, Unix ms; renewed every third of the lease) |
//! | `P console:run:<runId>`, `P console:journal:<runId>`, `P console:replica:<replicaId>` | string | the operator console's records (a run's summary and journal, a replica's report): `<expiry ms>\n<JSON>`, expiring by themselves (`PX`) |
//! | `P console:run`, `P console:journal`, `P console:replica` | sorted set | the console records' keys scored by when they were last written, at most 2,000 runs and 256 replicas (the oldest go) |
//! | `P shared:observed` | string | the result types the fleet learned from observed results (JSON: tool id → shape and count) |
//!
//! Keys of a run expire (`PEXPIRE`) at the run's expiry plus a grace, so Redis cleans up runs no
//! replica sweeps.
//!
//! # Leases and fencing
//!
//! `checkout` runs [`CHECKOUT`], one round trip: a caller of another scope is refused before
//! anything changes; a run held by a replica whose lease has not ended is busy; otherwise the fence
//! counter goes up by one and the caller becomes the holder with a lease of `leaseMs`. The scope is
//! checked again on the signed meta the script returns (a refused checkout gives its lease back).
//! The holder's heartbeat renews the lease (and its `replica:` key) every third of it. Every later
//! write for the run carries the holder's id and fence token and is refused
//! ([`StoreError::TakenOver`]) once another replica took the run over — so a replica that was paused
//! (SIGSTOP) or partitioned past its lease can never store, settle, log or run anything for that run
//! again.
//!
//! # Exactly-once nested calls
//!
//! Every nested call is logged right before its tool runs ([`BEGIN_CALL`], fenced) and its result
//! recorded the moment it finishes ([`FINISH_CALL`], only by the replica the log names). A replica
//! that resumes a run finds the results in the log; a call whose replica died (its `replica:` key
//! expired) without a result is re-issued when the tool is read-only and otherwise fails with
//! `nested_tool_failed` naming the tool (and the log records that failure, so no replica runs it).
//! A replica that replays a run from its last snapshot (the replica driving it died after the
//! snapshot) gets the logged result of every call the dead replica finished instead of running it
//! again. A stored run keeps the log entries of its pending calls only.
//!
//! # Failures of Redis
//!
//! The connection manager reconnects by itself; while Redis is unreachable every operation fails
//! fast with [`StoreError::Unreachable`] (connection and response timeouts), which the runtime
//! turns into a coded `internal_error` for the run that needed the store. A Redis that answers but
//! cannot serve yet (reloading its data after a restart, failing over) counts as unreachable too,
//! never as a corrupt run. [`RedisSnapshotStore::connect`] fails when Redis cannot be reached at
//! start.

mod connection;
mod scripts;

pub use connection::{RedisSnapshotStore, RedisStoreConfig};
use connection::{encode_err, reconnecting, unreachable};

use crate::clock::{Clock, SystemClock};
use crate::record::RunMeta;
use crate::signing::RunKeys;
use codemode_core::approval::ApprovalDecision;
use codemode_core::engine::{Delivery, GuestError, RequestId};
use codemode_core::error::CodeModeErrorCode;
use codemode_core::scope::{RunId, RunScope, ScopeMismatch};
use codemode_core::store::{
    CallIssue, CallStart, ConsoleKind, MAX_LIST_PAGE, MAX_SUSPENDED_RUNS, RunPage, SnapshotStore, StoreError,
    SuspendedRun, page_runs, parked_ids, parse_run_cursor,
};
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// Default prefix of every key.
pub const DEFAULT_KEY_PREFIX: &str = "codemode:";

/// Default lease of a checkout (and of a replica's liveness key).
pub const DEFAULT_LEASE_MS: u64 = 10_000;

/// Shortest lease accepted. Prevents: a lease so short that a busy replica loses runs it is
/// driving between two heartbeats.
pub const MIN_LEASE_MS: u64 = 300;

/// How long a run's keys outlive its expiry in Redis (a `wait` in progress at the expiry still
/// finds them; a sweep deletes them before).
const KEY_GRACE_MS: u64 = 120_000;
/// Largest task note of a logged call (an upstream server and task id). Prevents: an executor's
/// note growing every replay's call log read.
const MAX_CALL_NOTE_BYTES: usize = 1_024;

/// Longest a call log of a run never stored lives (a run that completes without suspending never
/// writes `run:`; its log is deleted when it settles, this bounds it if the replica dies first).
const UNSTORED_LOG_MS: u64 = 24 * 3_600_000;

/// The token of a run whose lease this replica lost.
const LOST: i64 = -1;

/// How long one operation may take before Redis counts as unreachable.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// A console record's value as kept (`<expiry ms>\n<value>`: Redis expires the key by its own
/// clock, the store answers by its clock), if not expired at `now`.
fn unexpired_console_value(stored: String, now: u64) -> Option<String> {
    let (at, value) = stored.split_once('\n')?;
    (at.parse::<u64>().ok()? > now).then(|| value.to_string())
}

/// One entry of the call log.
#[derive(Serialize, Deserialize)]
struct CallRecord {
    issuer: String,
    tool: String,
    digest: String,
    /// The delivery JSON (`{id, ok|error}`), once the call finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<String>,
    /// What the tool returned before the after-call stages (see `CallStart::Recorded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    raw: Option<String>,
}

pub use scripts::*;

/// Domains of the tags of a stored run and a decision.
const RUN_DOMAIN: &str = "codemode redis run/2";
const TASK_DOMAIN: &str = "codemode redis task/1";
const DECISION_DOMAIN: &str = "codemode redis decision/2";

/// A scope as the Redis scripts compare it ([`CHECKOUT`]): agent, session id, session key and
/// agent run, each `=value`, or `-` when absent (so that no value reads as an absent one).
fn owner_fields(scope: &RunScope) -> [String; 4] {
    let field = |v: &Option<String>| v.as_ref().map_or_else(|| "-".to_string(), |v| format!("={v}"));
    [field(&scope.agent_id), field(&scope.session_id), field(&scope.session_key), field(&scope.agent_run_id)]
}

/// A stored meta, once it is known to be the meta of `run_id`.
fn meta_of(run_id: &RunId, meta: &[u8]) -> Result<RunMeta, StoreError> {
    let parsed = RunMeta::parse(meta)?;
    if parsed.run_id != *run_id {
        return Err(StoreError::Corrupt("stored run names another run".into()));
    }
    Ok(parsed)
}

#[async_trait::async_trait]
impl SnapshotStore for RedisSnapshotStore {
    fn name(&self) -> &str {
        "redis"
    }

    fn accepts_live(&self) -> bool {
        false
    }

    fn fleet(&self) -> bool {
        true
    }

    async fn put(&self, run: SuspendedRun) -> Result<(), StoreError> {
        let s = &self.shared;
        let (meta, bytes) = RunMeta::split(run)?;
        let id = &meta.run_id;
        let token = s.fenced_token(id)?;
        let keep: serde_json::Map<String, serde_json::Value> =
            meta.pending.iter().map(|p| (p.id.to_string(), serde_json::Value::Bool(true))).collect();
        let parked = serde_json::to_string(&parked_ids(&meta.pending)).map_err(encode_err)?;
        let (scope_key, expires_at_ms) = (s.scope_key(&meta.scope), meta.expires_at_ms);
        let meta_json = serde_json::to_string(&meta).map_err(encode_err)?;
        let tag = s.keys.sign(RUN_DOMAIN, &[id.as_str().as_bytes(), meta_json.as_bytes(), &bytes]);
        let owner = owner_fields(&meta.scope);
        let mut conn = s.link();
        let status: String = s
            .scripts
            .put
            .key(s.key("run", id))
            .key(s.key("calls", id))
            .key(s.key("decisions", id))
            .key(scope_key)
            .key(format!("{}expiry", s.prefix))
            .arg(id.as_str())
            .arg(s.clock.now_ms())
            .arg(&s.replica)
            .arg(token)
            .arg(meta_json)
            .arg(bytes.as_slice())
            .arg(expires_at_ms)
            .arg(s.max_runs)
            .arg(serde_json::Value::Object(keep).to_string())
            .arg(parked)
            .arg(expires_at_ms.saturating_sub(s.clock.now_ms()).saturating_add(KEY_GRACE_MS))
            .arg(&tag[..])
            .arg(&owner[0])
            .arg(&owner[1])
            .arg(&owner[2])
            .arg(&owner[3])
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        match status.as_str() {
            "OK" => {
                s.release(id);
                Ok(())
            }
            "TOO_MANY" => Err(StoreError::TooMany),
            _ => {
                s.release(id);
                Err(StoreError::TakenOver)
            }
        }
    }

    async fn checkout(&self, run_id: &RunId, scope: &RunScope) -> Result<SuspendedRun, StoreError> {
        let s = &self.shared;
        let mut conn = s.link();
        let key = s.key("run", run_id);
        // One round trip: the script compares the scope before anything changes, so a caller of
        // another scope never takes the lease (nor learns more than that the run is not theirs).
        let owner = owner_fields(scope);
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let mut checked = false;
        let mut resent = false;
        let (fence, meta, snap, tag) = loop {
            let reply: Result<(String, i64, String, Vec<u8>, Vec<u8>), _> = s
                .scripts
                .checkout
                .key(&key)
                .arg(s.clock.now_ms())
                .arg(&s.replica)
                .arg(s.lease_ms)
                .arg(if checked { "1" } else { "0" })
                .arg(&owner[0])
                .arg(&owner[1])
                .arg(&owner[2])
                .arg(&owner[3])
                .arg(&nonce)
                .invoke_async(&mut conn)
                .await;
            let (status, fence, meta, snap, tag) = match reply {
                // Sent again once if the connection was found broken (the first command after a
                // Redis restart meets the dead connection); the nonce makes that safe even if the
                // first one ran.
                Err(e) if reconnecting(&e) && !resent => {
                    resent = true;
                    continue;
                }
                other => other.map_err(unreachable)?,
            };
            match status.as_str() {
                "OK" => break (fence, meta, snap, tag),
                "BUSY" => return Err(StoreError::Busy),
                "EXPIRED" => {
                    self.remove(run_id).await;
                    return Err(StoreError::Unavailable);
                }
                "SCOPE_SESSION" => return Err(StoreError::WrongScope(ScopeMismatch::Session)),
                "SCOPE_AGENT_RUN" => return Err(StoreError::WrongScope(ScopeMismatch::AgentRun)),
                // A run stored without its scope's fields: checked here from its meta.
                "CHECK" if !checked => {
                    meta_of(run_id, meta.as_bytes())?.scope.check(scope).map_err(StoreError::WrongScope)?;
                    checked = true;
                }
                _ => return Err(StoreError::Unavailable),
            }
        };
        let tag = (!tag.is_empty()).then_some(tag.as_slice());
        let parts: [&[u8]; 3] = [run_id.as_str().as_bytes(), meta.as_bytes(), &snap];
        let verified = s
            .keys
            .verify_optional(RUN_DOMAIN, &parts, tag, s.clock.now_ms())
            .map_err(|refusal| StoreError::Unauthenticated(refusal.describe("the stored run", s.keys.origin())))
            // The signed meta is the authority: its scope is checked again (the fields the script
            // compared are not signed).
            .and_then(|()| {
                let parsed = meta_of(run_id, meta.as_bytes())?;
                parsed.scope.check(scope).map_err(StoreError::WrongScope)?;
                Ok(parsed)
            });
        let meta = match verified {
            Ok(meta) => meta,
            Err(refused) => {
                // Given back at once: a replica holding the right key (or the right caller) may
                // still resume it.
                let released: Result<i64, _> =
                    s.scripts.release.key(&key).arg(&s.replica).arg(fence).invoke_async(&mut conn).await;
                if let Err(e) = released {
                    tracing::warn!(run = %run_id, error = %e, "cannot give back a refused run's lease");
                }
                return Err(refused);
            }
        };
        s.held.lock().unwrap_or_else(|p| p.into_inner()).insert(run_id.clone(), fence);
        Ok(meta.into_run(snap))
    }

    async fn remove(&self, run_id: &RunId) -> bool {
        let s = &self.shared;
        s.release(run_id);
        let mut conn = s.link();
        let removed: Result<i64, _> = s
            .scripts
            .remove
            .key(s.key("run", run_id))
            .key(s.key("calls", run_id))
            .key(s.key("decisions", run_id))
            .key(format!("{}expiry", s.prefix))
            .arg(run_id.as_str())
            .invoke_async(&mut conn)
            .await;
        match removed {
            Ok(n) => n > 0,
            Err(e) => {
                tracing::warn!(run = %run_id, error = %e, "cannot remove a run from Redis (its keys expire by themselves)");
                false
            }
        }
    }

    async fn settle(&self, run_id: &RunId) -> Result<bool, StoreError> {
        let s = &self.shared;
        let token = s.fenced_token(run_id)?;
        let mut conn = s.link();
        let status: String = s
            .scripts
            .settle
            .key(s.key("run", run_id))
            .key(s.key("calls", run_id))
            .key(s.key("decisions", run_id))
            .key(format!("{}expiry", s.prefix))
            .arg(run_id.as_str())
            .arg(&s.replica)
            .arg(token)
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        s.release(run_id);
        match status.as_str() {
            "OK" => Ok(true),
            "GONE" => Ok(false),
            _ => Err(StoreError::TakenOver),
        }
    }

    async fn purge_expired(&self) -> Vec<RunId> {
        let s = &self.shared;
        let mut conn = s.link();
        let ids: Result<Vec<String>, _> = s
            .scripts
            .purge
            .key(format!("{}expiry", s.prefix))
            .arg(s.clock.now_ms())
            .arg(&s.prefix)
            .invoke_async(&mut conn)
            .await;
        match ids {
            Ok(ids) => ids.into_iter().filter_map(|i| RunId::parse(&i).ok()).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot sweep expired runs in Redis");
                Vec::new()
            }
        }
    }

    async fn count(&self) -> usize {
        let s = &self.shared;
        let mut conn = s.link();
        redis::cmd("ZCARD").arg(format!("{}expiry", s.prefix)).query_async::<usize>(&mut conn).await.unwrap_or(0)
    }

    /// Pages the scope's sorted set (or the fleet's `expiry` set), both scored by expiry, then reads
    /// each run's `meta`, `holder` and snapshot length in one pipeline. Runs of one scope number
    /// at most 64; the `expiry` set is paged by score, skipping the ids at the cursor's score that
    /// came before it (a page whose runs all share one millisecond of expiry with more than
    /// [`MAX_LIST_PAGE`] others may repeat some).
    async fn list_runs(
        &self,
        scope: Option<&RunScope>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        let s = &self.shared;
        let mut conn = s.link();
        let limit = limit.clamp(1, MAX_LIST_PAGE);
        let index = match scope {
            Some(scope) => s.scope_key(scope),
            None => format!("{}expiry", s.prefix),
        };
        let now = s.clock.now_ms();
        let after = cursor.and_then(parse_run_cursor);
        let min = after.as_ref().map_or(now, |(at, _)| (*at).max(now));
        let fetched: Vec<(String, u64)> = redis::cmd("ZRANGE")
            .arg(&index)
            .arg(min)
            .arg("+inf")
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(0)
            .arg(limit + 1 + MAX_LIST_PAGE)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .map_err(unreachable)?;
        let ids: Vec<RunId> = fetched
            .into_iter()
            .filter(|(id, at)| after.as_ref().is_none_or(|(a, i)| (*at, id.as_str()) > (*a, i.as_str())))
            .filter_map(|(id, _)| RunId::parse(&id).ok())
            .take(limit + 1)
            .collect();
        if ids.is_empty() {
            return Ok(RunPage::default());
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HMGET").arg(s.key("run", id)).arg("meta").arg("holder");
            pipe.cmd("HSTRLEN").arg(s.key("run", id)).arg("snap");
        }
        let answers: Vec<redis::Value> = pipe.query_async(&mut conn).await.map_err(unreachable)?;
        let mut runs = Vec::new();
        for (id, pair) in ids.iter().zip(answers.chunks(2)) {
            let [fields, snap] = pair else { continue };
            let Ok((Some(meta), holder)) = redis::from_redis_value::<(Option<Vec<u8>>, Option<String>)>(fields.clone())
            else {
                continue;
            };
            let meta_len = meta.len() as u64;
            let Ok(meta) = crate::record::RunMeta::parse(&meta) else { continue };
            if meta.run_id != *id || scope.is_some_and(|sc| *sc != meta.scope) {
                continue;
            }
            let snap_len: u64 = redis::from_redis_value(snap.clone()).unwrap_or(0);
            let mut listing = meta.listing(snap_len + meta_len);
            if let Some(h) = holder.filter(|h| !h.is_empty()) {
                listing.checked_out = true;
                listing.holder = Some(h);
            }
            runs.push(listing);
        }
        Ok(page_runs(runs, None, limit).with_more(ids.len() > limit))
    }

    async fn put_console_record(
        &self,
        kind: ConsoleKind,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<(), StoreError> {
        crate::console::check_record(key, value)?;
        let s = &self.shared;
        let mut conn = s.link();
        let records = format!("{}console:{}:", s.prefix, kind.as_str());
        s.scripts
            .put_console
            .key(format!("{records}{key}"))
            .key(format!("{}console:{}", s.prefix, kind.as_str()))
            .arg(key)
            .arg(format!("{}\n{value}", s.clock.now_ms().saturating_add(ttl_ms)))
            .arg(ttl_ms.max(1))
            .arg(s.clock.now_ms())
            .arg(kind.max_records())
            .arg(records)
            .invoke_async::<i64>(&mut conn)
            .await
            .map_err(unreachable)?;
        Ok(())
    }

    async fn console_record(&self, kind: ConsoleKind, key: &str) -> Result<Option<String>, StoreError> {
        if !codemode_core::store::console_key_ok(key) {
            return Ok(None);
        }
        let s = &self.shared;
        let mut conn = s.link();
        let value: Option<String> = redis::cmd("GET")
            .arg(format!("{}console:{}:{key}", s.prefix, kind.as_str()))
            .query_async(&mut conn)
            .await
            .map_err(unreachable)?;
        Ok(value.and_then(|v| unexpired_console_value(v, s.clock.now_ms())))
    }

    async fn console_records(&self, kind: ConsoleKind, limit: usize) -> Result<Vec<String>, StoreError> {
        let s = &self.shared;
        let mut conn = s.link();
        let index = format!("{}console:{}", s.prefix, kind.as_str());
        let limit = limit.min(kind.max_records());
        if limit == 0 {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = redis::cmd("ZREVRANGE")
            .arg(&index)
            .arg(0)
            .arg(limit.saturating_sub(1))
            .query_async(&mut conn)
            .await
            .map_err(unreachable)?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let full: Vec<String> = keys.iter().map(|k| format!("{}console:{}:{k}", s.prefix, kind.as_str())).collect();
        let values: Vec<Option<String>> =
            redis::cmd("MGET").arg(&full).query_async(&mut conn).await.map_err(unreachable)?;
        // Records that expired leave the index here.
        let gone: Vec<&String> = keys.iter().zip(&values).filter(|(_, v)| v.is_none()).map(|(k, _)| k).collect();
        if !gone.is_empty() {
            let _: Result<i64, _> = redis::cmd("ZREM").arg(&index).arg(gone).query_async(&mut conn).await;
        }
        let now = s.clock.now_ms();
        Ok(values.into_iter().flatten().filter_map(|v| unexpired_console_value(v, now)).collect())
    }

    /// Every call of a fleet store records its own result the moment it finishes
    /// ([`finish_call`](SnapshotStore::finish_call)); this records one that was not yet, and says
    /// whether anyone can still collect it (the run or its call log is still there).
    async fn record_result(&self, run_id: &RunId, delivery: &Delivery) -> Result<bool, StoreError> {
        if self.finish_call(run_id, delivery, None).await? {
            return Ok(true);
        }
        let s = &self.shared;
        let mut conn = s.link();
        let n: u64 = redis::cmd("EXISTS")
            .arg(s.key("run", run_id))
            .arg(s.key("calls", run_id))
            .query_async(&mut conn)
            .await
            .map_err(unreachable)?;
        Ok(n > 0)
    }

    async fn take_results(&self, run_id: &RunId) -> Result<Vec<Delivery>, StoreError> {
        let s = &self.shared;
        let mut conn = s.link();
        let all: HashMap<String, String> =
            redis::cmd("HGETALL").arg(s.key("calls", run_id)).query_async(&mut conn).await.map_err(unreachable)?;
        let mut out: Vec<Delivery> = all
            .into_values()
            .filter_map(|rec| serde_json::from_str::<CallRecord>(&rec).ok()?.result)
            .filter_map(|d| serde_json::from_str::<Delivery>(&d).ok())
            .collect();
        out.sort_by_key(|d| d.id);
        Ok(out)
    }

    async fn calls_claimed(&self, run_id: &RunId) -> bool {
        let s = &self.shared;
        let mut conn = s.link();
        s.scripts
            .calls_claimed
            .key(s.key("calls", run_id))
            .arg(s.replica_prefix())
            .invoke_async::<i64>(&mut conn)
            .await
            .map(|n| n == 1)
            .unwrap_or(false)
    }

    async fn begin_call(&self, run_id: &RunId, issue: &CallIssue) -> Result<CallStart, StoreError> {
        let s = &self.shared;
        let lost = |why: String| Delivery {
            id: issue.request_id,
            outcome: Err(GuestError::new(
                "ToolError",
                format!("{}: {why}", issue.tool_id),
                Some(CodeModeErrorCode::NestedToolFailed),
            )),
        };
        let lost_text = "the call was started by a replica that stopped before it finished (its side effect may or \
                         may not have happened); it is not repeated"
            .to_string();
        let lost_json = serde_json::to_string(&lost(lost_text.clone())).map_err(encode_err)?;
        let token = s.fenced_token(run_id)?;
        let mut conn = s.link();
        let (status, detail, raw): (String, String, String) = s
            .scripts
            .begin_call
            .key(s.key("run", run_id))
            .key(s.key("calls", run_id))
            .arg(issue.request_id)
            .arg(&s.replica)
            .arg(token)
            .arg(&issue.tool_id)
            .arg(&issue.input_digest)
            .arg(if issue.read_only { "1" } else { "0" })
            .arg(lost_json)
            .arg(UNSTORED_LOG_MS)
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        match status.as_str() {
            "FRESH" => Ok(CallStart::Fresh),
            "REISSUED" => Ok(CallStart::Reissued),
            "RECORDED" => {
                let d: Delivery = serde_json::from_str(&detail).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                Ok(CallStart::Recorded { outcome: d.outcome, raw: (!raw.is_empty()).then_some(raw) })
            }
            "LOST" => Ok(CallStart::Lost(lost_text)),
            "RESUME" => Ok(CallStart::Resume(detail)),
            "DIVERGED" => Ok(CallStart::Lost(format!(
                "a replay of this run made request {} a call of `{}` with this input, but the call log has another \
                 call under that id (the cell is not deterministic); it is not run",
                issue.request_id, issue.tool_id
            ))),
            _ => Err(StoreError::TakenOver),
        }
    }

    async fn finish_call(&self, run_id: &RunId, delivery: &Delivery, raw: Option<&str>) -> Result<bool, StoreError> {
        let s = &self.shared;
        let json = serde_json::to_string(delivery).map_err(encode_err)?;
        let mut conn = s.link();
        let n: i64 = s
            .scripts
            .finish_call
            .key(s.key("calls", run_id))
            .arg(delivery.id)
            .arg(&s.replica)
            .arg(json)
            .arg(raw.unwrap_or(""))
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        Ok(n == 1)
    }

    async fn note_call(&self, run_id: &RunId, request_id: RequestId, note: &str) -> Result<bool, StoreError> {
        if note.len() > MAX_CALL_NOTE_BYTES {
            return Err(StoreError::Encode(format!("a call's task note is over {MAX_CALL_NOTE_BYTES} bytes")));
        }
        let s = &self.shared;
        let mut conn = s.link();
        let n: i64 = s
            .scripts
            .note_call
            .key(s.key("calls", run_id))
            .arg(request_id)
            .arg(&s.replica)
            .arg(note)
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        Ok(n == 1)
    }

    async fn call_owner(
        &self,
        run_id: &RunId,
        request_id: RequestId,
    ) -> Result<codemode_core::store::CallOwner, StoreError> {
        use codemode_core::store::CallOwner;
        #[derive(serde::Deserialize)]
        struct Entry {
            issuer: String,
        }
        let s = &self.shared;
        let mut conn = s.link();
        let entry: Option<String> = redis::cmd("HGET")
            .arg(s.key("calls", run_id))
            .arg(request_id)
            .query_async(&mut conn)
            .await
            .map_err(unreachable)?;
        Ok(match entry.and_then(|e| serde_json::from_str::<Entry>(&e).ok()) {
            None => CallOwner::Gone,
            Some(e) if e.issuer == s.replica => CallOwner::Mine,
            Some(_) => CallOwner::Moved,
        })
    }

    async fn call_notes(&self, run_id: &RunId) -> Result<Vec<(RequestId, String)>, StoreError> {
        #[derive(serde::Deserialize)]
        struct Entry {
            #[serde(default)]
            note: Option<String>,
            #[serde(default)]
            result: Option<serde_json::Value>,
        }
        let s = &self.shared;
        let mut conn = s.link();
        let all: HashMap<String, String> =
            redis::cmd("HGETALL").arg(s.key("calls", run_id)).query_async(&mut conn).await.map_err(unreachable)?;
        let mut notes: Vec<(RequestId, String)> = all
            .into_iter()
            .filter_map(|(id, json)| {
                let entry: Entry = serde_json::from_str(&json).ok()?;
                let note = entry.note.filter(|_| entry.result.is_none())?;
                Some((id.parse().ok()?, note))
            })
            .collect();
        notes.sort();
        Ok(notes)
    }

    async fn record_decision(
        &self,
        run_id: &RunId,
        request_id: RequestId,
        decision: &ApprovalDecision,
    ) -> Result<(), StoreError> {
        let s = &self.shared;
        let json = serde_json::to_string(decision).map_err(encode_err)?;
        let record = s.keys.seal_record(DECISION_DOMAIN, run_id.as_str(), request_id, json.as_bytes());
        let mut conn = s.link();
        let (status, parked): (String, String) = s
            .scripts
            .record_decision
            .key(s.key("run", run_id))
            .key(s.key("decisions", run_id))
            .arg(request_id)
            .arg(record)
            .arg(s.clock.now_ms())
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        match status.as_str() {
            "OK" => Ok(()),
            "EXPIRED" => {
                self.remove(run_id).await;
                Err(StoreError::Expired)
            }
            "NOT_PARKED" => {
                Err(StoreError::NotParked { request_id, parked: serde_json::from_str(&parked).unwrap_or_default() })
            }
            _ => Err(StoreError::Unavailable),
        }
    }

    async fn session_state(&self, scope: &RunScope, kind: &str) -> Result<Option<String>, StoreError> {
        let s = &self.shared;
        let mut conn = s.link();
        redis::cmd("GET").arg(s.session_key(scope, kind)).query_async(&mut conn).await.map_err(unreachable)
    }

    async fn put_session_state(
        &self,
        scope: &RunScope,
        kind: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<(), StoreError> {
        self.set_expiring(self.shared.session_key(scope, kind), value, ttl_ms).await
    }

    async fn shared_state(&self, kind: &str) -> Result<Option<String>, StoreError> {
        let s = &self.shared;
        let mut conn = s.link();
        redis::cmd("GET").arg(format!("{}shared:{kind}", s.prefix)).query_async(&mut conn).await.map_err(unreachable)
    }

    async fn put_shared_state(&self, kind: &str, value: &str, ttl_ms: u64) -> Result<(), StoreError> {
        self.set_expiring(format!("{}shared:{kind}", self.shared.prefix), value, ttl_ms).await
    }

    async fn task(&self, task_id: &str) -> Result<Option<codemode_core::task::TaskRecord>, StoreError> {
        let Ok(id) = RunId::parse(task_id) else { return Ok(None) };
        let s = &self.shared;
        let mut conn = s.link();
        let rec: Option<Vec<u8>> =
            redis::cmd("HGET").arg(s.key("task", &id)).arg("rec").query_async(&mut conn).await.map_err(unreachable)?;
        let Some(rec) = rec else { return Ok(None) };
        let json = match s.keys.open_record(TASK_DOMAIN, id.as_str(), 0, &rec, s.clock.now_ms()) {
            Ok(json) => json,
            Err(refusal) => {
                tracing::warn!(task = %id, "ignoring {}", refusal.describe("a task record", s.keys.origin()));
                return Ok(None);
            }
        };
        Ok(crate::tasks::decode(id.as_str(), json).filter(|t| !t.expired(s.clock.now_ms())))
    }

    async fn put_task(&self, task: &codemode_core::task::TaskRecord, driver: Option<&str>) -> Result<bool, StoreError> {
        let Ok(id) = RunId::parse(&task.task_id) else {
            return Err(StoreError::Encode(format!("`{}` is not a task id", task.task_id)));
        };
        let s = &self.shared;
        let json = crate::tasks::encode(task)?;
        let rec = s.keys.seal_record(TASK_DOMAIN, id.as_str(), 0, &json);
        let now = s.clock.now_ms();
        let mut conn = s.link();
        let n: i64 = s
            .scripts
            .put_task
            .key(s.key("task", &id))
            .key(s.key("taskdriver", &id))
            .key(format!("{}tasks", s.prefix))
            .arg(task.state.as_str())
            .arg(rec)
            .arg(driver.unwrap_or(""))
            .arg(now)
            .arg(task.expires_at_ms.saturating_sub(now).saturating_add(KEY_GRACE_MS))
            .arg(id.as_str())
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        Ok(n == 1)
    }

    async fn drive_task(&self, task_id: &str, driver: &str, lease_ms: u64) -> Result<bool, StoreError> {
        let Ok(id) = RunId::parse(task_id) else { return Ok(false) };
        let s = &self.shared;
        let mut conn = s.link();
        let n: i64 = s
            .scripts
            .drive_task
            .key(s.key("taskdriver", &id))
            .arg(driver)
            .arg(s.clock.now_ms())
            .arg(s.clock.now_ms().saturating_add(lease_ms))
            .arg(lease_ms.saturating_add(KEY_GRACE_MS))
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        Ok(n == 1)
    }

    async fn orphaned_tasks(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        let s = &self.shared;
        let mut conn = s.link();
        let ids: Vec<String> = s
            .scripts
            .orphaned_tasks
            .key(format!("{}tasks", s.prefix))
            .arg(&s.prefix)
            .arg(limit.max(1))
            .arg(s.clock.now_ms())
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        Ok(ids)
    }

    async fn release_task(&self, task_id: &str, driver: &str) -> Result<(), StoreError> {
        let Ok(id) = RunId::parse(task_id) else { return Ok(()) };
        let s = &self.shared;
        let mut conn = s.link();
        let _: i64 = s
            .scripts
            .release_task
            .key(s.key("taskdriver", &id))
            .arg(driver)
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        Ok(())
    }

    async fn has_decisions(&self, run_id: &RunId) -> Result<bool, StoreError> {
        let s = &self.shared;
        let mut conn = s.link();
        let n: i64 =
            redis::cmd("EXISTS").arg(s.key("decisions", run_id)).query_async(&mut conn).await.map_err(unreachable)?;
        Ok(n > 0)
    }

    async fn take_decisions(&self, run_id: &RunId) -> Result<Vec<(RequestId, ApprovalDecision)>, StoreError> {
        let s = &self.shared;
        let mut conn = s.link();
        let all: HashMap<String, Vec<u8>> = s
            .scripts
            .take_decisions
            .key(s.key("decisions", run_id))
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        let mut out = Vec::new();
        for (id, record) in all {
            let Ok(id) = id.parse::<RequestId>() else { continue };
            let json = match s.keys.open_record(DECISION_DOMAIN, run_id.as_str(), id, &record, s.clock.now_ms()) {
                Ok(json) => json,
                Err(refusal) => {
                    tracing::warn!(run = %run_id, request = id, "ignoring {}", refusal.describe("an approval decision", s.keys.origin()));
                    continue;
                }
            };
            match serde_json::from_slice::<ApprovalDecision>(json) {
                Ok(d) => out.push((id, d)),
                Err(_) => tracing::warn!(run = %run_id, "ignoring an unreadable approval decision"),
            }
        }
        out.sort_by_key(|(id, _)| *id);
        Ok(out)
    }
}
