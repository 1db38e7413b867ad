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
//! | `P run:<runId>` | hash | `meta` (JSON: scope, engine, reason, pending and undelivered results, telemetry, positions, expiry), `snap` (the engine's serialized snapshot, whose header names the engine build), `parked` (JSON array of request ids parked for approval), `tag` (HMAC-SHA-256 of run id, `meta` and `snap`: a run whose tag no key verifies is refused on checkout), `fence` (checkouts so far), `holder` (replica id of the current checkout, `""` when suspended), `lease` (when that checkout's lease ends, Unix ms), `expires`, `scope` (the key of its scope set) |
//! | `P calls:<runId>` | hash | the call log: request id → JSON `{issuer, tool, digest, result?, raw?}`; `result` is the call's delivery JSON, written the moment the call finishes, `raw` what the tool returned before the after-call stages (a replaying replica runs its own) |
//! | `P decisions:<runId>` | hash | request id → `<hex tag>\n<decision JSON>`, until the resuming `wait` takes it |
//! | `P scope:<digest>` | sorted set | run ids of one scope (SHA-256 of the scope), scored by expiry: the 64-run cap per scope, counted across the fleet |
//! | `P expiry` | sorted set | every run id, scored by expiry (sweeps) |
//! | `P replica:<replicaId>` | string | present while that replica lives (set with a `PX` of the lease, renewed every third of it) |
//! | `P secret` | string | 32 random bytes shared by the fleet (tags of MRTR approval state; the run signing key is derived from it when none is configured) |
//! | `P session:<digest>:loops` | string | a session's loop-detection history (JSON), expiring with `snapshotTtlSeconds` |
//! | `P shared:observed` | string | the result types the fleet learned from observed results (JSON: tool id → shape and count) |
//!
//! Keys of a run expire (`PEXPIRE`) at the run's expiry plus a grace, so Redis cleans up runs no
//! replica sweeps.
//!
//! # Leases and fencing
//!
//! `checkout` runs [`CHECKOUT`]: a run held by a replica whose lease has not ended is busy;
//! otherwise the fence counter goes up by one and the caller becomes the holder with a lease of
//! `leaseMs`. The holder's heartbeat renews the lease (and its `replica:` key) every third of it.
//! Every later write for the run carries the holder's id and fence token and is refused
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
//! turns into a coded `internal_error` for the run that needed the store. [`RedisSnapshotStore::connect`]
//! fails when Redis cannot be reached at start.

use crate::clock::{Clock, SystemClock};
use crate::record::RunMeta;
use crate::signing::{self, RunKeys};
use codemode_core::approval::ApprovalDecision;
use codemode_core::engine::{Delivery, GuestError, RequestId};
use codemode_core::error::CodeModeErrorCode;
use codemode_core::scope::{RunId, RunScope};
use codemode_core::store::{
    CallIssue, CallStart, MAX_SUSPENDED_RUNS, SnapshotStore, StoreError, SuspendedRun, parked_ids,
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

/// Longest a call log of a run never stored lives (a run that completes without suspending never
/// writes `run:`; its log is deleted when it settles, this bounds it if the replica dies first).
const UNSTORED_LOG_MS: u64 = 24 * 3_600_000;

/// The token of a run whose lease this replica lost.
const LOST: i64 = -1;

/// How long one operation may take before Redis counts as unreachable.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

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

/// Stores a suspended run. KEYS: run, calls, decisions, scope set, expiry set. ARGV: run id, now,
/// replica, fence token (0: a new run), meta, snapshot, expires, max runs per scope, JSON object of
/// the pending request ids (their log entries stay), parked ids JSON, key lifetime (ms from now),
/// tag (the run's signature over its id, meta and snapshot).
pub const PUT: &str = r#"
local exists = redis.call('EXISTS', KEYS[1]) == 1
local token = tonumber(ARGV[4])
if exists then
  local holder = redis.call('HGET', KEYS[1], 'holder')
  local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
  if token == 0 or holder ~= ARGV[3] or fence ~= token then return 'TAKEN' end
else
  if token ~= 0 then return 'TAKEN' end
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ARGV[2])
  if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[8]) then return 'TOO_MANY' end
  redis.call('HSET', KEYS[1], 'fence', '0')
end
redis.call('HSET', KEYS[1], 'meta', ARGV[5], 'snap', ARGV[6], 'holder', '', 'lease', '0', 'expires', ARGV[7],
  'scope', KEYS[4], 'parked', ARGV[10], 'tag', ARGV[12])
redis.call('ZADD', KEYS[4], ARGV[7], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[7], ARGV[1])
local keep = cjson.decode(ARGV[9])
for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do
  if not keep[f] then redis.call('HDEL', KEYS[2], f) end
end
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[11]) end
if redis.call('PTTL', KEYS[4]) < tonumber(ARGV[11]) then redis.call('PEXPIRE', KEYS[4], ARGV[11]) end
return 'OK'
"#;

/// Takes a run out for a `wait`. KEYS: run. ARGV: now, replica, lease (ms). Returns `{status,
/// fence, meta, snap, tag}` (`tag` is `''` for a run written before runs were signed).
pub const CHECKOUT: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {'UNAVAILABLE', 0, '', '', ''} end
local now = tonumber(ARGV[1])
local f = redis.call('HMGET', KEYS[1], 'expires', 'holder', 'lease', 'fence', 'meta', 'snap', 'tag')
if tonumber(f[1]) <= now then return {'EXPIRED', 0, '', '', ''} end
if f[2] ~= '' and f[2] ~= false and tonumber(f[3]) > now then return {'BUSY', 0, '', '', ''} end
local fence = tonumber(f[4] or '0') + 1
redis.call('HSET', KEYS[1], 'fence', fence, 'holder', ARGV[2], 'lease', now + tonumber(ARGV[3]))
return {'OK', fence, f[5], f[6], f[7] or ''}
"#;

/// Gives back a checkout this replica took but will not use (the run's signature was refused).
/// KEYS: run. ARGV: replica, fence token.
pub const RELEASE: &str = r#"
local f = redis.call('HMGET', KEYS[1], 'holder', 'fence')
if f[1] == ARGV[1] and tonumber(f[2]) == tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'holder', '', 'lease', '0')
end
return 0
"#;

/// Deletes a run whatever its state (abort, expiry). KEYS: run, calls, decisions, expiry set.
/// ARGV: run id. Returns 1 when a run was there.
pub const REMOVE: &str = r#"
local scope = redis.call('HGET', KEYS[1], 'scope')
if scope then redis.call('ZREM', scope, ARGV[1]) end
redis.call('ZREM', KEYS[4], ARGV[1])
local n = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2], KEYS[3])
return n
"#;

/// Commits a settled run's end, fenced. KEYS: run, calls, decisions, expiry set. ARGV: run id,
/// replica, token. Returns `OK`, `GONE` (nothing stored) or `TAKEN`.
pub const SETTLE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then
  if tonumber(ARGV[3]) == 0 then redis.call('DEL', KEYS[2], KEYS[3]) end
  return 'GONE'
end
local holder = redis.call('HGET', KEYS[1], 'holder')
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if holder ~= ARGV[2] or fence ~= tonumber(ARGV[3]) then return 'TAKEN' end
local scope = redis.call('HGET', KEYS[1], 'scope')
if scope then redis.call('ZREM', scope, ARGV[1]) end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 'OK'
"#;

/// Renews this replica's liveness key and the leases of the runs it holds. KEYS: replica key,
/// then the runs. ARGV: now, replica, lease, then one fence token per run. Returns the indexes
/// (1-based among the runs) whose lease is lost.
pub const RENEW: &str = r#"
local now = tonumber(ARGV[1])
local lease = tonumber(ARGV[3])
redis.call('SET', KEYS[1], '1', 'PX', lease)
local lost = {}
for i = 2, #KEYS do
  local f = redis.call('HMGET', KEYS[i], 'holder', 'fence')
  if f[1] == ARGV[2] and tonumber(f[2]) == tonumber(ARGV[i + 2]) then
    redis.call('HSET', KEYS[i], 'lease', now + lease)
  else
    table.insert(lost, i - 1)
  end
end
return lost
"#;

/// Logs a nested call right before its tool runs. KEYS: run, calls. ARGV: request id, replica,
/// token, tool, input digest, read-only (1/0), delivery JSON of the failure to record for a lost
/// call, log lifetime (ms, for a run never stored). Returns `{status, result, raw}`. The caller holds the
/// run's lease, so whoever logged an unfinished call under the same id lost it (died, or was paused
/// past its lease): the call is lost to that replica whether or not it still lives.
pub const BEGIN_CALL: &str = r#"
local token = tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 1 then
  local holder = redis.call('HGET', KEYS[1], 'holder')
  local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
  if token == 0 or holder ~= ARGV[2] or fence ~= token then return {'TAKEN', '', ''} end
elseif token ~= 0 then
  return {'TAKEN', '', ''}
else
  redis.call('PEXPIRE', KEYS[2], ARGV[8])
end
local fresh = cjson.encode({issuer = ARGV[2], tool = ARGV[4], digest = ARGV[5]})
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then
  redis.call('HSET', KEYS[2], ARGV[1], fresh)
  return {'FRESH', '', ''}
end
local r = cjson.decode(rec)
local same = r.tool == ARGV[4] and r.digest == ARGV[5]
if same and r.result then return {'RECORDED', r.result, r.raw or ''} end
if same and r.issuer == ARGV[2] then return {'FRESH', '', ''} end
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[2], ARGV[1], fresh)
  return {'REISSUED', '', ''}
end
redis.call('HSET', KEYS[2], ARGV[1],
  cjson.encode({issuer = ARGV[2], tool = ARGV[4], digest = ARGV[5], result = ARGV[7]}))
if same then return {'LOST', r.issuer, ''} end
return {'DIVERGED', r.tool, ''}
"#;

/// Records a logged call's result. KEYS: calls. ARGV: request id, replica, delivery JSON, raw
/// outcome JSON (`''`: none). Returns 1 when recorded (the log names this replica and has no result
/// yet).
pub const FINISH_CALL: &str = r#"
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec then return 0 end
local r = cjson.decode(rec)
if r.issuer ~= ARGV[2] or r.result then return 0 end
r.result = ARGV[3]
if ARGV[4] ~= '' then r.raw = ARGV[4] end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(r))
return 1
"#;

/// Whether a live replica runs a call of the run that has no result yet. KEYS: calls. ARGV:
/// replica key prefix.
pub const CALLS_CLAIMED: &str = r#"
for _, rec in ipairs(redis.call('HVALS', KEYS[1])) do
  local r = cjson.decode(rec)
  if not r.result and redis.call('EXISTS', ARGV[1] .. r.issuer) == 1 then return 1 end
end
return 0
"#;

/// Records an approval decision. KEYS: run, decisions. ARGV: request id, decision JSON, now.
/// Returns `{status, parked}`.
pub const RECORD_DECISION: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {'UNAVAILABLE', '[]'} end
local f = redis.call('HMGET', KEYS[1], 'expires', 'parked')
if tonumber(f[1]) <= tonumber(ARGV[3]) then return {'EXPIRED', '[]'} end
local parked = cjson.decode(f[2] or '[]')
for _, id in ipairs(parked) do
  if tostring(id) == ARGV[1] then
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
    redis.call('PEXPIREAT', KEYS[2], redis.call('PEXPIRETIME', KEYS[1]))
    return {'OK', '[]'}
  end
end
return {'NOT_PARKED', f[2] or '[]'}
"#;

/// Takes (and deletes) a run's decisions. KEYS: decisions.
pub const TAKE_DECISIONS: &str = r#"
local all = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
return all
"#;

/// Deletes the runs of the expiry set whose expiry passed. KEYS: expiry set. ARGV: now, prefix.
/// Returns their ids.
pub const PURGE: &str = r#"
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
for _, id in ipairs(ids) do
  local run = ARGV[2] .. 'run:' .. id
  local scope = redis.call('HGET', run, 'scope')
  if scope then redis.call('ZREM', scope, id) end
  redis.call('ZREM', KEYS[1], id)
  redis.call('DEL', run, ARGV[2] .. 'calls:' .. id, ARGV[2] .. 'decisions:' .. id)
end
return ids
"#;

/// The scripts, loaded once (`EVALSHA`, falling back to `EVAL` after a Redis restart).
struct Scripts {
    put: redis::Script,
    checkout: redis::Script,
    release: redis::Script,
    remove: redis::Script,
    settle: redis::Script,
    renew: redis::Script,
    begin_call: redis::Script,
    finish_call: redis::Script,
    calls_claimed: redis::Script,
    record_decision: redis::Script,
    take_decisions: redis::Script,
    purge: redis::Script,
}

impl Scripts {
    fn new() -> Self {
        Scripts {
            put: redis::Script::new(PUT),
            checkout: redis::Script::new(CHECKOUT),
            release: redis::Script::new(RELEASE),
            remove: redis::Script::new(REMOVE),
            settle: redis::Script::new(SETTLE),
            renew: redis::Script::new(RENEW),
            begin_call: redis::Script::new(BEGIN_CALL),
            finish_call: redis::Script::new(FINISH_CALL),
            calls_claimed: redis::Script::new(CALLS_CLAIMED),
            record_decision: redis::Script::new(RECORD_DECISION),
            take_decisions: redis::Script::new(TAKE_DECISIONS),
            purge: redis::Script::new(PURGE),
        }
    }
}

/// How to reach Redis and name the keys.
#[derive(Debug, Clone)]
pub struct RedisStoreConfig {
    /// `redis://[user:password@]host:port[/db]` (or `rediss://` with TLS when the client supports
    /// it).
    pub url: String,
    /// Prefix of every key (several fleets can share one Redis).
    pub key_prefix: String,
    /// Lease of a checkout and of a replica's liveness (ms, at least [`MIN_LEASE_MS`]): how long
    /// after a replica stops renewing (dies, is paused) another may take its runs over.
    pub lease_ms: u64,
    /// The keys that sign the fleet's runs and decisions. `None`: `CODEMODE_RUN_SIGNING_KEY`, or
    /// else a key derived from the fleet's secret kept in Redis (which detects corruption only:
    /// whoever can write the store can read that key).
    pub keys: Option<RunKeys>,
    /// Until when (Unix ms) runs and decisions without a signature are accepted when `keys` is
    /// `None` (an upgrade window; configured keys carry their own).
    pub accept_unsigned_until_ms: Option<u64>,
}

impl RedisStoreConfig {
    /// A config for `url` with the default prefix and lease.
    pub fn new(url: impl Into<String>) -> Self {
        RedisStoreConfig {
            url: url.into(),
            key_prefix: DEFAULT_KEY_PREFIX.into(),
            lease_ms: DEFAULT_LEASE_MS,
            keys: None,
            accept_unsigned_until_ms: None,
        }
    }
}

/// Domains of the tags of a stored run and a decision.
const RUN_DOMAIN: &str = "codemode redis run/2";
const DECISION_DOMAIN: &str = "codemode redis decision/2";

/// The fleet's secret under `prefix` (created by the first replica that asks).
async fn fleet_secret_at(conn: &ConnectionManager, prefix: &str) -> Result<[u8; 32], StoreError> {
    let key = format!("{prefix}secret");
    let mut conn = conn.clone();
    // 244 random bits (two v4 UUIDs); only the first replica's value is kept.
    let mut fresh = Vec::with_capacity(32);
    fresh.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    fresh.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    let _: Option<String> =
        redis::cmd("SET").arg(&key).arg(fresh).arg("NX").query_async(&mut conn).await.map_err(unreachable)?;
    let stored: Vec<u8> = redis::cmd("GET").arg(&key).query_async(&mut conn).await.map_err(unreachable)?;
    <[u8; 32]>::try_from(stored.as_slice()).map_err(|_| StoreError::Corrupt(format!("{key} is not 32 bytes")))
}

struct Shared {
    conn: ConnectionManager,
    prefix: String,
    replica: String,
    lease_ms: u64,
    clock: Arc<dyn Clock>,
    scripts: Scripts,
    /// Fence tokens of the runs this replica holds (checked out and not yet stored or settled);
    /// [`LOST`] for a run whose lease the heartbeat found taken over or removed (every later write
    /// for it is refused, until the runtime gives it up).
    held: Mutex<HashMap<RunId, i64>>,
    max_runs: usize,
    keys: RunKeys,
}

/// Keeps suspended runs, the call log, decisions and leases in Redis: the store of a fleet of
/// gateways. See the module documentation for the key layout, the scripts and the guarantees.
///
/// Limits: at most 64 runs suspended per scope across the fleet (contract §6, counted atomically in
/// the put script); every key expires with its run.
pub struct RedisSnapshotStore {
    shared: Arc<Shared>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for RedisSnapshotStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSnapshotStore")
            .field("prefix", &self.shared.prefix)
            .field("replica", &self.shared.replica)
            .finish()
    }
}

/// Whether the connection broke before a command could be sent (the manager reconnects by itself;
/// a command that only reads may be sent again at once).
fn reconnecting(e: &redis::RedisError) -> bool {
    e.is_connection_dropped() || e.is_connection_refusal() || e.is_io_error()
}

/// A Redis failure as a store error: the connection's failures are [`StoreError::Unreachable`];
/// an error Redis answered (a script that met data it cannot read, a wrong type under a key) is
/// [`StoreError::Corrupt`].
fn unreachable(e: redis::RedisError) -> StoreError {
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        StoreError::Unreachable(e.to_string())
    } else {
        StoreError::Corrupt(format!("redis: {e}"))
    }
}

fn encode_err(e: serde_json::Error) -> StoreError {
    StoreError::Encode(e.to_string())
}

impl RedisSnapshotStore {
    /// `SET key value PX ttl` (at least 1 ms): session and fleet-wide state that expires by itself.
    async fn set_expiring(&self, key: String, value: &str, ttl_ms: u64) -> Result<(), StoreError> {
        let mut conn = self.shared.conn.clone();
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(ttl_ms.max(1))
            .query_async::<()>(&mut conn)
            .await
            .map_err(unreachable)
    }

    /// Connects (failing when Redis cannot be reached), registers this replica and starts its
    /// heartbeat. Must be called inside a tokio runtime.
    pub async fn connect(config: RedisStoreConfig) -> Result<Self, StoreError> {
        Self::connect_with_clock(config, Arc::new(SystemClock)).await
    }

    /// [`connect`](Self::connect) with a given clock (tests).
    pub async fn connect_with_clock(config: RedisStoreConfig, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        if config.lease_ms < MIN_LEASE_MS {
            return Err(StoreError::Unsupported(format!(
                "snapshotStore.leaseMs must be at least {MIN_LEASE_MS} (got {})",
                config.lease_ms
            )));
        }
        let client = redis::Client::open(config.url.as_str())
            .map_err(|e| StoreError::Unsupported(format!("invalid Redis URL: {e}")))?;
        let manager = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(RESPONSE_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = tokio::time::timeout(RESPONSE_TIMEOUT * 2, ConnectionManager::new_with_config(client, manager))
            .await
            .map_err(|_| StoreError::Unreachable(format!("no answer from {}", redacted(&config.url))))?
            .map_err(|e| StoreError::Unreachable(format!("{}: {e}", redacted(&config.url))))?;
        let replica = format!("r-{}", uuid::Uuid::new_v4().simple());
        let keys = match config.keys {
            Some(k) => k,
            None => match RunKeys::from_default_env() {
                Ok(Some(k)) => k,
                Ok(None) => {
                    // A key of its own, derived from the secret (never the MRTR key itself).
                    let secret = fleet_secret_at(&conn, &config.key_prefix).await?;
                    let derived = RunKeys::kept_in_store(&secret)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?
                        .sign("codemode run signing key", &[]);
                    RunKeys::kept_in_store(&derived)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?
                        .accept_unsigned_until(config.accept_unsigned_until_ms)
                }
                Err(e) => return Err(StoreError::Unsupported(e.to_string())),
            },
        };
        let shared = Arc::new(Shared {
            conn,
            prefix: config.key_prefix,
            replica,
            lease_ms: config.lease_ms,
            clock,
            scripts: Scripts::new(),
            held: Mutex::new(HashMap::new()),
            max_runs: MAX_SUSPENDED_RUNS,
            keys,
        });
        shared.renew().await?;
        let heartbeat = tokio::spawn(heartbeat(Arc::downgrade(&shared)));
        Ok(RedisSnapshotStore { shared, heartbeat })
    }

    /// This replica's id (the `issuer` of the call log entries it writes).
    pub fn replica_id(&self) -> &str {
        &self.shared.replica
    }

    /// Stops renewing this replica's leases and liveness, as a replica that is paused or cut off
    /// from Redis would (for tests of takeover and fencing).
    pub fn stop_heartbeat(&self) {
        self.heartbeat.abort();
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.shared.prefix
    }

    /// The fleet's shared 32-byte secret (created by the first replica that asks): lets every
    /// replica check tags another replica made (MRTR approval state).
    pub async fn fleet_secret(&self) -> Result<[u8; 32], StoreError> {
        fleet_secret_at(&self.shared.conn, &self.shared.prefix).await
    }

    /// The keys this store signs and verifies runs and decisions with.
    pub fn keys(&self) -> &RunKeys {
        &self.shared.keys
    }

    /// Bytes Redis uses for the run's keys (`MEMORY USAGE`), for sizing.
    pub async fn run_bytes(&self, run_id: &RunId) -> Result<u64, StoreError> {
        let mut conn = self.shared.conn.clone();
        let mut total = 0u64;
        for key in [self.shared.key("run", run_id), self.shared.key("calls", run_id)] {
            let n: Option<u64> =
                redis::cmd("MEMORY").arg("USAGE").arg(key).query_async(&mut conn).await.map_err(unreachable)?;
            total += n.unwrap_or(0);
        }
        Ok(total)
    }
}

impl Drop for RedisSnapshotStore {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// Hides a password in a Redis URL for messages.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

async fn heartbeat(shared: Weak<Shared>) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        let every = Duration::from_millis((s.lease_ms / 3).max(50));
        if let Err(e) = s.renew().await {
            tracing::warn!(error = %e, "cannot renew this replica's leases in Redis");
        }
        drop(s);
        tokio::time::sleep(every).await;
    }
}

impl Shared {
    fn key(&self, kind: &str, run: &RunId) -> String {
        format!("{}{kind}:{run}", self.prefix)
    }

    fn replica_prefix(&self) -> String {
        format!("{}replica:", self.prefix)
    }

    fn scope_key(&self, scope: &RunScope) -> String {
        use sha2::Digest;
        let text = serde_json::to_string(scope).unwrap_or_default();
        let digest: String =
            sha2::Sha256::digest(text.as_bytes()).iter().take(16).map(|b| format!("{b:02x}")).collect();
        format!("{}scope:{digest}", self.prefix)
    }

    fn session_key(&self, scope: &RunScope, kind: &str) -> String {
        let scope_key = self.scope_key(scope);
        let digest = scope_key.rsplit(':').next().unwrap_or_default();
        format!("{}session:{digest}:{kind}", self.prefix)
    }

    /// The fence token this replica holds for `run` (0: none, a run not checked out here).
    /// [`StoreError::TakenOver`] when the heartbeat found its lease lost (the mark is dropped: the
    /// runtime gives the run up on this answer).
    fn fenced_token(&self, run: &RunId) -> Result<i64, StoreError> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match held.get(run).copied() {
            Some(LOST) => {
                held.remove(run);
                Err(StoreError::TakenOver)
            }
            token => Ok(token.unwrap_or(0)),
        }
    }

    fn release(&self, run: &RunId) {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).remove(run);
    }

    async fn renew(&self) -> Result<(), StoreError> {
        let held: Vec<(RunId, i64)> =
            self.held.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(k, v)| (k.clone(), *v)).collect();
        let mut inv = self.scripts.renew.prepare_invoke();
        inv.key(format!("{}{}", self.replica_prefix(), self.replica));
        for (run, _) in &held {
            inv.key(self.key("run", run));
        }
        inv.arg(self.clock.now_ms()).arg(&self.replica).arg(self.lease_ms);
        for (_, token) in &held {
            inv.arg(*token);
        }
        let mut conn = self.conn.clone();
        let lost: Vec<usize> = inv.invoke_async(&mut conn).await.map_err(unreachable)?;
        for i in lost {
            if let Some((run, token)) = held.get(i.wrapping_sub(1)) {
                let mut map = self.held.lock().unwrap_or_else(|p| p.into_inner());
                if map.get(run) == Some(token) {
                    tracing::warn!(run = %run, "lease lost: another replica took the run over, or it was removed");
                    map.insert(run.clone(), LOST);
                }
            }
        }
        Ok(())
    }
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
        let mut conn = s.conn.clone();
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
        let mut conn = s.conn.clone();
        let key = s.key("run", run_id);
        // The scope is checked before anything changes: a caller of another scope never takes the
        // lease (nor learns more than that the run is not theirs).
        // A read: sent again once if the connection was found broken (the first command after a
        // Redis restart meets the dead connection).
        let read = redis::cmd("HGET").arg(&key).arg("meta").to_owned();
        let meta: Option<String> = match read.query_async(&mut conn).await {
            Err(e) if reconnecting(&e) => read.query_async(&mut conn).await.map_err(unreachable)?,
            other => other.map_err(unreachable)?,
        };
        let Some(meta) = meta else { return Err(StoreError::Unavailable) };
        let parsed = RunMeta::parse(meta.as_bytes())?;
        if parsed.run_id != *run_id {
            return Err(StoreError::Corrupt("stored run names another run".into()));
        }
        parsed.scope.check(scope).map_err(StoreError::WrongScope)?;
        let (status, fence, meta, snap, tag): (String, i64, String, Vec<u8>, Vec<u8>) = s
            .scripts
            .checkout
            .key(&key)
            .arg(s.clock.now_ms())
            .arg(&s.replica)
            .arg(s.lease_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        match status.as_str() {
            "OK" => {}
            "BUSY" => return Err(StoreError::Busy),
            "EXPIRED" => {
                self.remove(run_id).await;
                return Err(StoreError::Unavailable);
            }
            _ => return Err(StoreError::Unavailable),
        }
        let tag = (!tag.is_empty()).then_some(tag.as_slice());
        let parts: [&[u8]; 3] = [run_id.as_str().as_bytes(), meta.as_bytes(), &snap];
        if let Err(refusal) = s.keys.verify_optional(RUN_DOMAIN, &parts, tag, s.clock.now_ms()) {
            // Given back at once: a replica holding the right key may still resume it.
            let released: Result<i64, _> =
                s.scripts.release.key(&key).arg(&s.replica).arg(fence).invoke_async(&mut conn).await;
            if let Err(e) = released {
                tracing::warn!(run = %run_id, error = %e, "cannot give back a refused run's lease");
            }
            return Err(StoreError::Unauthenticated(refusal.describe("the stored run", s.keys.origin())));
        }
        let meta = RunMeta::parse(meta.as_bytes())?;
        s.held.lock().unwrap_or_else(|p| p.into_inner()).insert(run_id.clone(), fence);
        Ok(meta.into_run(snap))
    }

    async fn remove(&self, run_id: &RunId) -> bool {
        let s = &self.shared;
        s.release(run_id);
        let mut conn = s.conn.clone();
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
        let mut conn = s.conn.clone();
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
        let mut conn = s.conn.clone();
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
        let mut conn = s.conn.clone();
        redis::cmd("ZCARD").arg(format!("{}expiry", s.prefix)).query_async::<usize>(&mut conn).await.unwrap_or(0)
    }

    /// Every call of a fleet store records its own result the moment it finishes
    /// ([`finish_call`](SnapshotStore::finish_call)); this records one that was not yet, and says
    /// whether anyone can still collect it (the run or its call log is still there).
    async fn record_result(&self, run_id: &RunId, delivery: &Delivery) -> Result<bool, StoreError> {
        if self.finish_call(run_id, delivery, None).await? {
            return Ok(true);
        }
        let s = &self.shared;
        let mut conn = s.conn.clone();
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
        let mut conn = s.conn.clone();
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
        let mut conn = s.conn.clone();
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
        let mut conn = s.conn.clone();
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
        let mut conn = s.conn.clone();
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

    async fn record_decision(
        &self,
        run_id: &RunId,
        request_id: RequestId,
        decision: &ApprovalDecision,
    ) -> Result<(), StoreError> {
        let s = &self.shared;
        let json = serde_json::to_string(decision).map_err(encode_err)?;
        let tag =
            s.keys.sign(DECISION_DOMAIN, &[run_id.as_str().as_bytes(), &request_id.to_be_bytes(), json.as_bytes()]);
        let json = format!("{}\n{json}", signing::hex(&tag));
        let mut conn = s.conn.clone();
        let (status, parked): (String, String) = s
            .scripts
            .record_decision
            .key(s.key("run", run_id))
            .key(s.key("decisions", run_id))
            .arg(request_id)
            .arg(json)
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
        let mut conn = s.conn.clone();
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
        let mut conn = s.conn.clone();
        redis::cmd("GET").arg(format!("{}shared:{kind}", s.prefix)).query_async(&mut conn).await.map_err(unreachable)
    }

    async fn put_shared_state(&self, kind: &str, value: &str, ttl_ms: u64) -> Result<(), StoreError> {
        self.set_expiring(format!("{}shared:{kind}", self.shared.prefix), value, ttl_ms).await
    }

    async fn take_decisions(&self, run_id: &RunId) -> Result<Vec<(RequestId, ApprovalDecision)>, StoreError> {
        let s = &self.shared;
        let mut conn = s.conn.clone();
        let all: HashMap<String, String> = s
            .scripts
            .take_decisions
            .key(s.key("decisions", run_id))
            .invoke_async(&mut conn)
            .await
            .map_err(unreachable)?;
        let mut out = Vec::new();
        for (id, record) in all {
            let Ok(id) = id.parse::<RequestId>() else { continue };
            let (tag, json) = match record.split_once('\n') {
                Some((tag, json)) => (signing::unhex(tag), json),
                None => (None, record.as_str()),
            };
            let parts: [&[u8]; 3] = [run_id.as_str().as_bytes(), &id.to_be_bytes(), json.as_bytes()];
            if let Err(refusal) = s.keys.verify_optional(DECISION_DOMAIN, &parts, tag.as_deref(), s.clock.now_ms()) {
                tracing::warn!(run = %run_id, request = id, "ignoring {}", refusal.describe("an approval decision", s.keys.origin()));
                continue;
            }
            match serde_json::from_str::<ApprovalDecision>(json) {
                Ok(d) => out.push((id, d)),
                Err(_) => tracing::warn!(run = %run_id, "ignoring an unreadable approval decision"),
            }
        }
        out.sort_by_key(|(id, _)| *id);
        Ok(out)
    }
}
