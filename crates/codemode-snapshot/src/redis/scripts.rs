//! The Lua scripts of the Redis store, each run atomically by Redis: what makes a fleet's state
//! changes exclusive (leases, fencing, the per-scope cap, the call log). Each script's doc says its
//! `KEYS` and `ARGV`; the module documentation of [`super`] says what the keys hold.

/// Stores a suspended run. KEYS: run, calls, decisions, scope set, expiry set. ARGV: run id, now,
/// replica, fence token (0: a new run), meta, snapshot, expires, max runs per scope, JSON object of
/// the pending request ids (their log entries stay), parked ids JSON, key lifetime (ms from now),
/// tag (the run's signature over its id, meta and snapshot), then the scope's four fields as
/// [`CHECKOUT`] compares them (agent, session id, session key, agent run; see `owner_fields`).
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
  'scope', KEYS[4], 'parked', ARGV[10], 'tag', ARGV[12],
  'oagent', ARGV[13], 'osession', ARGV[14], 'okey', ARGV[15], 'orun', ARGV[16])
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

/// Takes a run out for a `wait`, in one round trip. KEYS: run. ARGV: now, replica, lease (ms),
/// `1` when the caller checked the scope itself (else `0`), the caller's scope as four fields
/// (agent, session id, session key, agent run: `=value`, or `-` when absent), and a nonce unique
/// to this checkout. Returns `{status, fence, meta, snap, tag}` (`tag` is `''` for a run written
/// before runs were signed).
///
/// The scope is compared first, from the fields [`PUT`] stored with the run, as
/// `RunScope::check` does: agent, session id and session key exactly, the agent run only when
/// both sides have one. A caller of another scope gets `SCOPE_SESSION` or `SCOPE_AGENT_RUN` and
/// never takes the lease. A run stored without these fields answers `CHECK` with its meta (the
/// caller checks the scope and asks again with `1`). The nonce makes the checkout idempotent: sent
/// again after the connection broke, it answers `OK` with the same fence if the first one took
/// the lease.
pub const CHECKOUT: &str = r#"
local now = tonumber(ARGV[1])
local f = redis.call('HMGET', KEYS[1], 'expires', 'holder', 'lease', 'fence', 'meta', 'snap', 'tag',
  'oagent', 'osession', 'okey', 'orun', 'nonce')
-- No field of a run at all: no run (one HMGET, not EXISTS and then HMGET). A hash with some of
-- them is a damaged run, refused below.
if not (f[1] or f[2] or f[4] or f[5]) then return {'UNAVAILABLE', 0, '', '', ''} end
if ARGV[4] ~= '1' then
  if not f[9] then return {'CHECK', 0, f[5] or '', '', ''} end
  if f[8] ~= ARGV[5] or f[9] ~= ARGV[6] or f[10] ~= ARGV[7] then return {'SCOPE_SESSION', 0, '', '', ''} end
  if f[11] ~= '-' and ARGV[8] ~= '-' and f[11] ~= ARGV[8] then return {'SCOPE_AGENT_RUN', 0, '', '', ''} end
end
if tonumber(f[1]) <= now then return {'EXPIRED', 0, '', '', ''} end
if f[2] ~= '' and f[2] ~= false and tonumber(f[3]) > now then
  if f[2] == ARGV[2] and f[12] == ARGV[9] then return {'OK', tonumber(f[4]), f[5], f[6], f[7] or ''} end
  return {'BUSY', 0, '', '', ''}
end
local fence = tonumber(f[4] or '0') + 1
redis.call('HSET', KEYS[1], 'fence', fence, 'holder', ARGV[2], 'lease', now + tonumber(ARGV[3]), 'nonce', ARGV[9])
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
/// replica, token. Returns `OK`, `GONE` (nothing stored and no checkout held) or `TAKEN` (another
/// replica holds the run, or took it over and ended it).
pub const SETTLE: &str = r#"
local f = redis.call('HMGET', KEYS[1], 'holder', 'fence', 'scope')
-- Neither holder nor fence (PUT writes both): no run.
if not (f[1] or f[2]) then
  -- Held by this replica (a fence token) yet gone: another replica took it over and ended it.
  if tonumber(ARGV[3]) ~= 0 then return 'TAKEN' end
  redis.call('DEL', KEYS[2], KEYS[3])
  return 'GONE'
end
if f[1] ~= ARGV[2] or tonumber(f[2] or '0') ~= tonumber(ARGV[3]) then return 'TAKEN' end
if f[3] then redis.call('ZREM', f[3], ARGV[1]) end
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

/// Logs a nested call right before its tool runs (a call another replica logged, left unfinished
/// and noted as a task on its server, passes to this replica: `RESUME` with the note). KEYS: run, calls. ARGV: request id, replica,
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
if same and r.note then
  r.issuer = ARGV[2]
  redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(r))
  return {'RESUME', r.note, ''}
end
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[2], ARGV[1], fresh)
  return {'REISSUED', '', ''}
end
redis.call('HSET', KEYS[2], ARGV[1],
  cjson.encode({issuer = ARGV[2], tool = ARGV[4], digest = ARGV[5], result = ARGV[7]}))
if same then return {'LOST', r.issuer, ''} end
return {'DIVERGED', r.tool, ''}
"#;

/// Notes that a logged, unfinished call became a task on its server. KEYS: calls. ARGV: request id,
/// replica, note. Returns 1 when noted (the log names this replica and has no result yet).
pub const NOTE_CALL: &str = r#"
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec then return 0 end
local r = cjson.decode(rec)
if r.issuer ~= ARGV[2] or r.result then return 0 end
r.note = ARGV[3]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(r))
return 1
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
/// Writes a task's record unless it is terminal, or another driver holds its claim, and keeps the
/// set of unfinished tasks (swept for orphans). KEYS: task, drive claim, unfinished set. ARGV:
/// state, sealed record, driver (`''`: any writer), now, key lifetime (ms), task id. Returns 1 when
/// written.
pub const PUT_TASK: &str = r#"
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'completed' or state == 'failed' or state == 'cancelled' then return 0 end
if ARGV[3] ~= '' then
  local c = redis.call('HMGET', KEYS[2], 'holder', 'until')
  if c[1] and c[1] ~= ARGV[3] and tonumber(c[2]) > tonumber(ARGV[4]) then return 0 end
end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'rec', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
if ARGV[1] == 'completed' or ARGV[1] == 'failed' or ARGV[1] == 'cancelled' then
  redis.call('SREM', KEYS[3], ARGV[6])
else
  redis.call('SADD', KEYS[3], ARGV[6])
end
return 1
"#;

/// Working tasks whose drive claim has lapsed, from a random sample of the unfinished set (ids whose
/// record expired leave the set). KEYS: unfinished set. ARGV: key prefix, sample size, now.
pub const ORPHANED_TASKS: &str = r#"
local out = {}
for _, id in ipairs(redis.call('SRANDMEMBER', KEYS[1], tonumber(ARGV[2]))) do
  local state = redis.call('HGET', ARGV[1] .. 'task:' .. id, 'state')
  if not state then
    redis.call('SREM', KEYS[1], id)
  elseif state == 'working' then
    local c = redis.call('HMGET', ARGV[1] .. 'taskdriver:' .. id, 'holder', 'until')
    if not c[1] or tonumber(c[2]) <= tonumber(ARGV[3]) then table.insert(out, id) end
  end
end
return out
"#;

/// Takes or renews the claim to drive a task. KEYS: drive claim. ARGV: driver, now, lease end,
/// key lifetime (ms). Returns 1 when `driver` holds the claim afterwards.
pub const DRIVE_TASK: &str = r#"
local c = redis.call('HMGET', KEYS[1], 'holder', 'until')
if c[1] and c[1] ~= ARGV[1] and tonumber(c[2]) > tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'until', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"#;

/// Gives a task's drive claim up. KEYS: drive claim. ARGV: driver.
pub const RELEASE_TASK: &str = r#"
if redis.call('HGET', KEYS[1], 'holder') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"#;

/// Keeps a console record and indexes it, keeping at most `max` of its kind (the least recently
/// updated go). KEYS: record, index. ARGV: record key, value, ttl (ms), now, max, prefix of the
/// kind's record keys.
pub const PUT_CONSOLE: &str = r"
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
local n = redis.call('ZCARD', KEYS[2])
local max = tonumber(ARGV[5])
if n > max then
  for _, k in ipairs(redis.call('ZRANGE', KEYS[2], 0, n - max - 1)) do redis.call('DEL', ARGV[6] .. k) end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - max - 1)
end
return n
";

pub(super) struct Scripts {
    pub(super) put: redis::Script,
    pub(super) checkout: redis::Script,
    pub(super) release: redis::Script,
    pub(super) remove: redis::Script,
    pub(super) settle: redis::Script,
    pub(super) renew: redis::Script,
    pub(super) begin_call: redis::Script,
    pub(super) finish_call: redis::Script,
    pub(super) calls_claimed: redis::Script,
    pub(super) record_decision: redis::Script,
    pub(super) take_decisions: redis::Script,
    pub(super) purge: redis::Script,
    pub(super) put_task: redis::Script,
    pub(super) note_call: redis::Script,
    pub(super) orphaned_tasks: redis::Script,
    pub(super) drive_task: redis::Script,
    pub(super) release_task: redis::Script,
    pub(super) put_console: redis::Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
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
            put_task: redis::Script::new(PUT_TASK),
            note_call: redis::Script::new(NOTE_CALL),
            orphaned_tasks: redis::Script::new(ORPHANED_TASKS),
            drive_task: redis::Script::new(DRIVE_TASK),
            release_task: redis::Script::new(RELEASE_TASK),
            put_console: redis::Script::new(PUT_CONSOLE),
        }
    }
}
