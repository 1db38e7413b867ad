//! What the console shows, kept where every replica reads it (the book's "Console" page, "Where
//! the console's data lives"):
//!
//! - **a journal per run**: the cell's source, its status, the trajectory records the runtime
//!   emitted for it (bounded: [`MAX_JOURNAL_RECORDS`], [`MAX_JOURNAL_BYTES`]), its result or error
//!   and who decided its parked calls — written to the snapshot store as two console records (a
//!   small summary for lists, the journal for the run's page) that live for the run's TTL;
//! - **a report per replica**: its counters (cells, failed cells, waits, nested calls, decisions),
//!   a histogram of `exec`/`wait` latencies, its upstream servers and the runs it drives, renewed
//!   every second with a TTL of [`REPLICA_TTL_MS`] (so a replica that died drops out).
//!
//! The [`Ledger`] is the runtime's trajectory sink while the console is on (it sees every record on
//! the guest worker threads and only appends to memory there) and the gateway tells it where each
//! `exec`/`wait` starts and ends ([`Ledger::begin`], [`Ledger::end`]). A background task writes
//! what changed: every change wakes it, and what changes while it writes goes in its next pass
//! (under load one pass carries many runs); the replica's report goes every [`FLUSH_MS`]. With
//! the console off there is no ledger and the
//! gateway's hooks cost one empty `OnceLock` read per call.

use crate::now_ms;
use codemode::trajectory::{CallOutcome, DecisionRecord, TraceRecord};
use codemode::{CodeModeResult, RunContext, RunEvent, RunObserver};
use codemode_core::scope::RunScope;
use codemode_core::store::{ConsoleKind, SnapshotStore};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Most trajectory records a journal keeps (the oldest go first, and the journal says so).
/// Prevents: a cell making thousands of calls growing its journal without bound.
pub const MAX_JOURNAL_RECORDS: usize = 400;

/// Most bytes (JSON) of trajectory records a journal keeps. Prevents: records carrying large
/// (redacted, but still up to 2 KiB each) inputs and results filling the store.
pub const MAX_JOURNAL_BYTES: usize = 256 * 1024;

/// Longest cell source a journal keeps (the rest is cut and marked). Prevents: a huge cell copied
/// into every journal write.
pub const MAX_SOURCE_BYTES: usize = 64 * 1024;

/// Runs whose journals this process keeps in memory (those not running go first). Prevents: a
/// stream of runs growing the ledger; their journals stay in the store.
pub const MAX_LIVE_JOURNALS: usize = 512;

/// `exec`/`wait` calls in progress the ledger tracks at once. Prevents: a flood of concurrent calls
/// growing the call table (a call over the limit is not journaled; it still runs).
pub const MAX_TRACKED_CALLS: usize = 4_096;

/// How often this replica's report (and the live tick) is written; the longest a changed journal
/// waits when no change wakes the writer.
pub const FLUSH_MS: u64 = 1_000;

/// How long a replica's report lives unless renewed: a replica not heard from for this long is
/// shown as gone.
pub const REPLICA_TTL_MS: u64 = 5_000;

/// Upper bounds (ms) of the latency histogram's buckets; the last bucket is everything slower.
pub const LATENCY_BUCKETS_MS: [f64; 16] =
    [0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0, 60_000.0];

/// A short label of a scope for people: `agent:…`, `session:…`, `key:<digest>` (a session key is a
/// credential's digest; only 12 hex digits of its SHA-256 are shown), `run:…`.
pub fn scope_label(scope: &RunScope) -> String {
    use sha2::Digest;
    let mut parts = Vec::new();
    if let Some(a) = &scope.agent_id {
        parts.push(format!("agent:{a}"));
    }
    if let Some(s) = &scope.session_id {
        parts.push(format!("session:{s}"));
    }
    if let Some(k) = &scope.session_key {
        let d = sha2::Sha256::digest(k.as_bytes());
        parts.push(format!("key:{}", d.iter().take(6).map(|b| format!("{b:02x}")).collect::<String>()));
    }
    if let Some(r) = &scope.agent_run_id {
        parts.push(format!("run:{r}"));
    }
    if parts.is_empty() { "(anonymous)".to_string() } else { parts.join(" ") }
}

/// A run's status as the console shows it.
pub const STATUSES: [&str; 7] = ["running", "waiting", "parked", "completed", "failed", "aborted", "expired"];

/// A run's summary (console record [`ConsoleKind::Run`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    /// The run.
    pub run_id: String,
    /// One of [`STATUSES`].
    pub status: String,
    /// Who may resume it.
    pub scope: RunScope,
    /// [`scope_label`] of it.
    pub scope_label: String,
    /// The replica that last drove it.
    pub replica: String,
    /// When its `exec` started.
    pub started_at_ms: u64,
    /// When anything last happened to it.
    pub updated_at_ms: u64,
    /// The tools it called (catalog ids).
    pub tools: Vec<String>,
    /// Nested calls it made.
    pub calls: u32,
    /// Calls parked for approval now.
    pub parked: u32,
    /// The first line of its source (at most 120 characters).
    pub source_preview: String,
    /// It is served as an MCP task (the gateway resumes it; see the book's "Runs as MCP tasks").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub task: bool,
}

/// A run's failure, as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunError {
    /// The contract §16 code, when one applies.
    pub code: Option<String>,
    /// The message.
    pub message: String,
}

/// A run's journal (console record [`ConsoleKind::Journal`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Journal {
    /// The summary.
    #[serde(flatten)]
    pub summary: RunSummary,
    /// `javascript` or `typescript`.
    pub language: String,
    /// The cell's source (cut at [`MAX_SOURCE_BYTES`]).
    pub source: String,
    /// The source was cut.
    #[serde(default)]
    pub source_truncated: bool,
    /// Trajectory records, oldest first (bounded).
    pub records: VecDeque<TraceRecord>,
    /// Older records were dropped.
    #[serde(default)]
    pub truncated: bool,
    /// The final result (`completed`: `{value, output}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// Bytes of `records` as JSON (kept to bound them without re-serializing).
    #[serde(skip)]
    record_bytes: usize,
    /// Request ids of the calls counted in `summary.calls` (at most [`MAX_COUNTED_CALLS`]).
    #[serde(skip)]
    seen: HashSet<u64>,
    /// Request ids whose last event is `parked`.
    #[serde(skip)]
    parked: BTreeSet<u64>,
}

/// Most calls of one run a journal counts. Prevents: a cell making millions of calls growing the
/// set of counted ids (its count stops there; its records are bounded anyway).
pub const MAX_COUNTED_CALLS: usize = 100_000;

impl Journal {
    fn new(run_id: &str, scope: RunScope, replica: &str, code: &str, language: &str, now: u64) -> Self {
        let (source, cut) = if code.len() > MAX_SOURCE_BYTES {
            let mut end = MAX_SOURCE_BYTES;
            while !code.is_char_boundary(end) {
                end -= 1;
            }
            (code[..end].to_string(), true)
        } else {
            (code.to_string(), false)
        };
        let preview: String = code.lines().find(|l| !l.trim().is_empty()).unwrap_or("").chars().take(120).collect();
        Journal {
            summary: RunSummary {
                run_id: run_id.to_string(),
                status: "running".into(),
                scope_label: scope_label(&scope),
                scope,
                replica: replica.to_string(),
                started_at_ms: now,
                updated_at_ms: now,
                tools: Vec::new(),
                calls: 0,
                parked: 0,
                source_preview: preview,
                task: false,
            },
            language: language.to_string(),
            source,
            source_truncated: cut,
            records: VecDeque::new(),
            truncated: false,
            result: None,
            error: None,
            record_bytes: 0,
            seen: HashSet::new(),
            parked: BTreeSet::new(),
        }
    }

    /// Appends a record: O(1) apart from measuring a nested entry that carries an input or a
    /// result (the counts and parked calls are kept as records come, not recomputed).
    fn push(&mut self, record: TraceRecord) {
        let size = record_size(&record);
        if let TraceRecord::Nested(e) = &record {
            if !self.summary.tools.contains(&e.tool_id) && self.summary.tools.len() < 64 {
                self.summary.tools.push(e.tool_id.clone());
            }
            self.index(e);
        }
        self.records.push_back(record);
        self.record_bytes += size;
        while self.records.len() > MAX_JOURNAL_RECORDS
            || (self.record_bytes > MAX_JOURNAL_BYTES && self.records.len() > 1)
        {
            let Some(old) = self.records.pop_front() else { break };
            self.record_bytes = self.record_bytes.saturating_sub(record_size(&old));
            self.truncated = true;
        }
        self.summary.parked = self.parked.len() as u32;
    }

    /// Counts a call the first time it is issued or parked, and tracks whether it is parked now.
    fn index(&mut self, e: &codemode::trajectory::TranscriptEntry) {
        if matches!(e.outcome, CallOutcome::Issued | CallOutcome::Parked)
            && self.seen.len() < MAX_COUNTED_CALLS
            && self.seen.insert(e.request_id)
        {
            self.summary.calls += 1;
        }
        if e.outcome == CallOutcome::Parked {
            self.parked.insert(e.request_id);
        } else {
            self.parked.remove(&e.request_id);
        }
    }

    /// Rebuilds what is kept beside the records (a journal read from the store): their size, the
    /// calls seen and the parked ones. `summary.calls` is the store's count, kept as it is.
    fn reindex(&mut self) {
        self.record_bytes = self.records.iter().map(record_size).sum();
        let calls = self.summary.calls;
        self.seen.clear();
        self.parked.clear();
        let entries: Vec<codemode::trajectory::TranscriptEntry> = self
            .records
            .iter()
            .filter_map(|r| if let TraceRecord::Nested(e) = r { Some(e.clone()) } else { None })
            .collect();
        for e in &entries {
            self.index(e);
        }
        self.summary.calls = calls;
        self.summary.parked = self.parked.len() as u32;
    }
}

/// Bytes a record counts for against [`MAX_JOURNAL_BYTES`]: a nested entry's JSON (it carries
/// inputs and results, up to 2 KiB each after redaction); every other record, whose fields are ids,
/// times and short words, a fixed 256 (not serialized on the guest thread to be measured).
fn record_size(record: &TraceRecord) -> usize {
    match record {
        TraceRecord::Nested(e) if e.input.is_some() || e.result.is_some() || e.error.is_some() => {
            serde_json::to_string(record).map_or(256, |s| s.len())
        }
        _ => 256,
    }
}

/// An `exec`/`wait` the ledger tracks (see [`Ledger::begin`]).
#[must_use = "give it to Ledger::end when the call ends"]
pub struct Tracked<'a> {
    ledger: &'a Ledger,
    call: Option<String>,
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.ledger.state().calls.remove(&call);
        }
    }
}

/// What the gateway said about an `exec`/`wait` in progress.
struct CallNote {
    scope: RunScope,
    code: String,
    language: String,
    run_id: Option<String>,
}

#[derive(Default)]
struct State {
    journals: HashMap<String, Journal>,
    calls: HashMap<String, CallNote>,
    dirty: HashSet<String>,
}

/// Counters of one replica (cumulative since it started).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counters {
    /// `exec` calls.
    pub cells: u64,
    /// `exec`/`wait` calls that ended `failed`.
    pub cells_failed: u64,
    /// `wait` calls.
    pub waits: u64,
    /// Nested calls issued.
    pub nested_calls: u64,
    /// Decisions operators made in the console.
    pub decisions: u64,
}

impl Counters {
    /// Element-wise sum.
    pub fn add(&mut self, o: &Counters) {
        self.cells += o.cells;
        self.cells_failed += o.cells_failed;
        self.waits += o.waits;
        self.nested_calls += o.nested_calls;
        self.decisions += o.decisions;
    }
}

#[derive(Default)]
struct AtomicCounters {
    cells: AtomicU64,
    cells_failed: AtomicU64,
    waits: AtomicU64,
    nested_calls: AtomicU64,
    decisions: AtomicU64,
    latency: [AtomicU64; LATENCY_BUCKETS_MS.len() + 1],
}

/// The bucket of a latency.
fn bucket(ms: f64) -> usize {
    LATENCY_BUCKETS_MS.iter().position(|b| ms <= *b).unwrap_or(LATENCY_BUCKETS_MS.len())
}

/// The latency at quantile `q` (0..1) of a histogram (the upper bound of its bucket; the slowest
/// bucket reports its lower bound), or `None` when it is empty.
pub fn quantile(buckets: &[u64], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let want = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= want {
            return Some(
                LATENCY_BUCKETS_MS.get(i).copied().unwrap_or(LATENCY_BUCKETS_MS[LATENCY_BUCKETS_MS.len() - 1]),
            );
        }
    }
    None
}

/// A replica's report (console record [`ConsoleKind::Replica`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaReport {
    /// The console's id of the replica.
    pub id: String,
    /// The store's id of it (what a fleet store names as a run's holder), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_replica: Option<String>,
    /// Where it serves.
    pub addr: String,
    /// When it started.
    pub started_at_ms: u64,
    /// When it wrote this report.
    pub reported_at_ms: u64,
    /// Its counters.
    pub counters: Counters,
    /// Its latency histogram (counts per [`LATENCY_BUCKETS_MS`] bucket, then the slowest).
    pub latency: Vec<u64>,
    /// Runs it is driving now.
    pub runs_held: Vec<String>,
    /// How long its last write to the store took (ms).
    pub store_latency_ms: f64,
    /// Its upstream servers.
    pub servers: Vec<Value>,
}

/// The console's ledger (see the module documentation).
pub struct Ledger {
    replica: String,
    store_replica: Option<String>,
    started_at_ms: u64,
    ttl_ms: u64,
    store: OnceLock<Arc<dyn SnapshotStore>>,
    state: Mutex<State>,
    counters: AtomicCounters,
    /// The audit sink (`serve --audit`), which also receives the decisions recorded here.
    audit: OnceLock<Arc<dyn RunObserver>>,
    wake: tokio::sync::Notify,
    /// Last store write latency, in microseconds.
    store_latency_us: AtomicU64,
    /// Journal ids given so far to cells that never showed a run id (see [`Ledger::end`]).
    own_ids: AtomicU64,
    /// How results and errors are redacted in journals (the trajectory's default policy).
    redaction: codemode::trajectory::Redaction,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").field("replica", &self.replica).finish_non_exhaustive()
    }
}

impl Ledger {
    /// A ledger for this replica (`store_replica`: the store's id of it, on a fleet), keeping
    /// journals for `ttl_ms` (the runs' `snapshotTtlSeconds`), passing every record on to `audit`.
    pub fn new(store_replica: Option<String>, ttl_ms: u64, audit: Option<Arc<dyn RunObserver>>) -> Arc<Self> {
        Arc::new(Ledger {
            replica: format!("r-{}", &super::auth::random_token()[..8]),
            store_replica,
            started_at_ms: now_ms(),
            ttl_ms: ttl_ms.max(60_000),
            store: OnceLock::new(),
            state: Mutex::default(),
            counters: AtomicCounters::default(),
            audit: audit.map(OnceLock::from).unwrap_or_default(),
            wake: tokio::sync::Notify::new(),
            store_latency_us: AtomicU64::new(0),
            own_ids: AtomicU64::new(0),
            redaction: codemode::trajectory::Redaction::default(),
        })
    }

    /// Passes every record on to `audit` (set once, before the runtime is built).
    pub fn set_audit(&self, audit: Option<Arc<dyn RunObserver>>) {
        if let Some(a) = audit {
            let _ = self.audit.set(a);
        }
    }

    /// This replica's console id.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The store the journals go to (set once the runtime is built).
    pub fn attach(&self, store: Arc<dyn SnapshotStore>) {
        let _ = self.store.set(store);
    }

    /// The store, once attached.
    pub fn store(&self) -> Option<&Arc<dyn SnapshotStore>> {
        self.store.get()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This replica's counters.
    pub fn counters(&self) -> Counters {
        let c = &self.counters;
        Counters {
            cells: c.cells.load(Ordering::Relaxed),
            cells_failed: c.cells_failed.load(Ordering::Relaxed),
            waits: c.waits.load(Ordering::Relaxed),
            nested_calls: c.nested_calls.load(Ordering::Relaxed),
            decisions: c.decisions.load(Ordering::Relaxed),
        }
    }

    /// This replica's latency histogram.
    pub fn latency(&self) -> Vec<u64> {
        self.counters.latency.iter().map(|b| b.load(Ordering::Relaxed)).collect()
    }

    /// An `exec` or `wait` starts (before the runtime sees it): the call's scope and, for `exec`,
    /// its source. For a `wait` on a run whose journal another replica wrote, the journal is read
    /// from the store first, so this replica's records continue it.
    ///
    /// The returned guard forgets the call if it is dropped before [`Self::end`] took it (the
    /// caller's future was dropped: a cancelled request), so abandoned calls never fill the table.
    pub async fn begin<'a>(&'a self, ctx: &RunContext, tool: &str, args: &Value) -> Tracked<'a> {
        let tracked = Tracked { ledger: self, call: ctx.tool_call_id.clone() };
        self.note(ctx, tool, args).await;
        tracked
    }

    async fn note(&self, ctx: &RunContext, tool: &str, args: &Value) {
        let Some(call) = ctx.tool_call_id.clone() else { return };
        let run_id = args.get("runId").and_then(Value::as_str).map(str::to_string);
        if tool == "wait"
            && let Some(id) = &run_id
        {
            self.refresh(id).await;
        }
        let code = args.get("code").or_else(|| args.get("command")).and_then(Value::as_str).unwrap_or("");
        let language = args.get("language").and_then(Value::as_str).unwrap_or("javascript");
        let mut st = self.state();
        if st.calls.len() >= MAX_TRACKED_CALLS {
            return;
        }
        if let Some(id) = &run_id
            && let Some(j) = st.journals.get_mut(id)
            && !settled(&j.summary.status)
        {
            j.summary.status = "running".into();
            j.summary.replica = self.replica.clone();
            j.summary.updated_at_ms = now_ms();
            j.summary.task |= call.starts_with("task:");
        }
        let note = CallNote {
            scope: ctx.scope.clone(),
            code: if tool == "exec" { code.to_string() } else { String::new() },
            language: language.to_string(),
            run_id,
        };
        st.calls.insert(call, note);
    }

    /// An `exec` or `wait` ended with `result` after `elapsed`: counters, the latency histogram,
    /// and the run's status and result.
    pub fn end(&self, mut tracked: Tracked<'_>, tool: &str, result: &CodeModeResult, elapsed: std::time::Duration) {
        let call = tracked.call.take();
        let c = &self.counters;
        if tool == "exec" {
            c.cells.fetch_add(1, Ordering::Relaxed);
        } else {
            c.waits.fetch_add(1, Ordering::Relaxed);
        }
        if matches!(result, CodeModeResult::Failed { .. }) {
            c.cells_failed.fetch_add(1, Ordering::Relaxed);
        }
        c.latency[bucket(elapsed.as_secs_f64() * 1_000.0)].fetch_add(1, Ordering::Relaxed);
        let Some(call) = &call else { return };
        let mut st = self.state();
        let Some(note) = st.calls.remove(call) else { return };
        let run_id = match result {
            CodeModeResult::Waiting { run_id, .. } => Some(run_id.clone()),
            _ => note.run_id.clone(),
        };
        // A cell that settled within its `exec` without a nested call never showed its run id to
        // anyone (no record or result carries it): its journal gets an id of its own.
        let run_id = match run_id {
            Some(id) => id,
            None if tool == "exec" => {
                let n = self.own_ids.fetch_add(1, Ordering::Relaxed);
                format!("cm_{}{n:024x}", &self.replica[2..])
            }
            None => return,
        };
        // A `wait` on a run that already settled (completed, failed, aborted, expired) is refused
        // by the runtime: that refusal is the caller's, not the run's.
        if tool == "wait" && st.journals.get(&run_id).is_some_and(|j| settled(&j.summary.status)) {
            return;
        }
        if !st.journals.contains_key(&run_id) {
            evict(&mut st);
        }
        let journal = st.journals.entry(run_id.clone()).or_insert_with(|| {
            Journal::new(&run_id, note.scope.clone(), &self.replica, &note.code, &note.language, now_ms())
        });
        let now = now_ms();
        journal.summary.updated_at_ms = now;
        match result {
            CodeModeResult::Completed { value, output, .. } => {
                journal.summary.status = "completed".into();
                // Under the trajectory's redaction: secret-looking keys and environment values
                // masked, each value cut to 2 KiB (the journal stays within a console record).
                journal.result = Some(self.redaction.value(&json!({ "value": value, "output": output })));
            }
            CodeModeResult::Waiting { pending_tool_calls, .. } => {
                let parked = pending_tool_calls.iter().any(|p| p.kind == codemode::PendingCallKind::Approval);
                journal.summary.status = if parked { "parked" } else { "waiting" }.into();
            }
            CodeModeResult::Failed { error, code, .. } => {
                journal.summary.status = "failed".into();
                let message = self.redaction.message(error);
                journal.error = Some(RunError { code: code.map(|c| c.as_str().to_string()), message });
            }
            _ => {}
        }
        st.dirty.insert(run_id);
        drop(st);
        self.wake.notify_one();
    }

    /// A human decided a parked call (or aborted a run) in the console: recorded in the run's
    /// journal and passed to the audit sink.
    pub fn decided(&self, record: DecisionRecord) {
        self.counters.decisions.fetch_add(1, Ordering::Relaxed);
        if let Some(a) = self.audit.get() {
            a.on_event(RunEvent::Trace(Box::new(TraceRecord::Decision(record.clone()))));
        }
        let run_id = record.run_id.clone();
        let mut st = self.state();
        if let Some(j) = st.journals.get_mut(&run_id) {
            if record.decision == "abort" {
                j.summary.status = "aborted".into();
            }
            j.summary.updated_at_ms = now_ms();
            j.push(TraceRecord::Decision(record));
            st.dirty.insert(run_id);
        }
        drop(st);
        self.wake.notify_one();
    }

    /// A run's journal as it is now: the more recently updated of this process's copy and the
    /// store's, with the records only the other has (two replicas may both have written to it: one
    /// drove the run while an operator decided on the other). When this process keeps a copy, the
    /// merge replaces it, and is written back if the store lacked some of it (so journals converge).
    pub async fn journal(&self, run_id: &str) -> Option<Journal> {
        self.merge(run_id, false).await
    }

    /// [`Self::journal`], keeping the result in this process (a `wait`, a decision or an abort here
    /// continues the journal another replica wrote).
    pub async fn refresh(&self, run_id: &str) {
        self.merge(run_id, true).await;
    }

    async fn merge(&self, run_id: &str, keep: bool) -> Option<Journal> {
        let stored = match self.store() {
            Some(store) => match store.console_record(ConsoleKind::Journal, run_id).await {
                Ok(Some(text)) => serde_json::from_str::<Journal>(&text).ok().filter(|j| j.summary.run_id == run_id),
                _ => None,
            },
            None => None,
        };
        let mut st = self.state();
        let local = st.journals.get(run_id);
        let (merged, store_lacks) = match (local, stored) {
            (None, None) => return None,
            (None, Some(mut s)) => {
                if !keep {
                    return Some(s);
                }
                s.reindex();
                evict(&mut st);
                (s, false)
            }
            (Some(l), None) => return Some(l.clone()),
            (Some(l), Some(s)) if s.summary.updated_at_ms > l.summary.updated_at_ms => {
                let store_lacks = l.records.iter().any(|r| !s.records.contains(r));
                (merged(s, l).0, store_lacks)
            }
            (Some(l), Some(s)) => {
                let store_lacks = l.summary != s.summary || l.records.iter().any(|r| !s.records.contains(r));
                (merged(l.clone(), &s).0, store_lacks)
            }
        };
        st.journals.insert(run_id.to_string(), merged.clone());
        if store_lacks {
            st.dirty.insert(run_id.to_string());
        }
        drop(st);
        if store_lacks {
            self.wake.notify_one();
        }
        Some(merged)
    }

    /// The runs this process is driving now.
    pub fn running(&self) -> Vec<String> {
        let st = self.state();
        let mut v: Vec<String> = st
            .journals
            .values()
            .filter(|j| j.summary.status == "running" && j.summary.replica == self.replica)
            .map(|j| j.summary.run_id.clone())
            .collect();
        v.sort();
        v
    }

    /// This process's summaries of the runs it keeps in memory (fresher than the store's).
    pub fn local_summaries(&self) -> Vec<RunSummary> {
        self.state().journals.values().map(|j| j.summary.clone()).collect()
    }

    /// Writes the changed journals (their summary and journal records) now.
    pub async fn flush(&self) {
        let Some(store) = self.store().cloned() else { return };
        let batch: Vec<(String, String, String)> = {
            let mut st = self.state();
            let dirty: Vec<String> = st.dirty.drain().collect();
            dirty
                .into_iter()
                .filter_map(|id| {
                    let j = st.journals.get(&id)?;
                    let summary = serde_json::to_string(&j.summary).ok()?;
                    let journal = serde_json::to_string(j).ok()?;
                    Some((id, summary, journal))
                })
                .collect()
        };
        for (id, summary, journal) in batch {
            let started = std::time::Instant::now();
            let a = store.put_console_record(ConsoleKind::Journal, &id, &journal, self.ttl_ms).await;
            let b = store.put_console_record(ConsoleKind::Run, &id, &summary, self.ttl_ms).await;
            self.store_latency_us.store(started.elapsed().as_micros() as u64 / 2, Ordering::Relaxed);
            if let Err(e) = a.and(b) {
                tracing::warn!(run = %id, error = %e, "console: cannot write a run's journal");
            }
        }
    }

    /// Writes this replica's report.
    pub async fn report(&self, addr: &str, servers: Vec<Value>) {
        let Some(store) = self.store().cloned() else { return };
        let Ok(text) = serde_json::to_string(&self.own_report(addr, servers)) else { return };
        let started = std::time::Instant::now();
        if let Err(e) = store.put_console_record(ConsoleKind::Replica, &self.replica, &text, REPLICA_TTL_MS).await {
            tracing::warn!(error = %e, "console: cannot write this replica's report");
        }
        self.store_latency_us.store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// This replica's report as it is now (serving at `addr`, with its upstream `servers`).
    pub fn own_report(&self, addr: &str, servers: Vec<Value>) -> ReplicaReport {
        ReplicaReport {
            id: self.replica.clone(),
            store_replica: self.store_replica.clone(),
            addr: addr.to_string(),
            started_at_ms: self.started_at_ms,
            reported_at_ms: now_ms(),
            counters: self.counters(),
            latency: self.latency(),
            runs_held: self.running(),
            store_latency_ms: self.store_latency_us.load(Ordering::Relaxed) as f64 / 1_000.0,
            servers,
        }
    }

    /// Waits until something changed or [`FLUSH_MS`] passed.
    pub async fn changed(&self) {
        let _ = tokio::time::timeout(std::time::Duration::from_millis(FLUSH_MS), self.wake.notified()).await;
    }

    fn on_record(&self, record: TraceRecord) {
        let mut st = self.state();
        let (run_id, call) = match &record {
            TraceRecord::Control(c) => (c.run_id.clone(), c.tool_call_id.clone()),
            TraceRecord::Nested(e) => {
                if e.outcome == CallOutcome::Issued {
                    self.counters.nested_calls.fetch_add(1, Ordering::Relaxed);
                }
                (Some(e.run_id.clone()), e.parent_tool_call_id.clone())
            }
            TraceRecord::Lifecycle(l) => (Some(l.run_id.clone()), None),
            TraceRecord::Decision(d) => (Some(d.run_id.clone()), None),
        };
        let Some(run_id) = run_id else { return };
        // The call that drives the run: its note knows the scope and source of a new run.
        let note = call.as_ref().and_then(|c| st.calls.get_mut(c));
        let fresh = note.map(|n| {
            n.run_id.get_or_insert_with(|| run_id.clone());
            (n.scope.clone(), n.code.clone(), n.language.clone())
        });
        if !st.journals.contains_key(&run_id) {
            let Some((scope, code, language)) = fresh else { return };
            evict(&mut st);
            let j = Journal::new(&run_id, scope, &self.replica, &code, &language, now_ms());
            st.journals.insert(run_id.clone(), j);
        }
        let Some(j) = st.journals.get_mut(&run_id) else { return };
        j.summary.updated_at_ms = now_ms();
        if let TraceRecord::Lifecycle(l) = &record {
            j.summary.status = match l.event {
                codemode::SnapshotEventKind::Expired => "expired".into(),
                _ => "aborted".into(),
            };
        }
        j.push(record);
        st.dirty.insert(run_id);
    }
}

/// `newer` with the records only `older` has, in time order (counts and parked calls recomputed);
/// whether it gained any.
fn merged(mut newer: Journal, older: &Journal) -> (Journal, bool) {
    let extra: Vec<TraceRecord> = older.records.iter().filter(|r| !newer.records.contains(r)).cloned().collect();
    if extra.is_empty() {
        newer.reindex();
        return (newer, false);
    }
    let mut records = std::mem::take(&mut newer.records);
    records.extend(extra);
    records.make_contiguous().sort_by_key(record_at);
    newer.record_bytes = 0;
    newer.summary.calls = 0;
    newer.seen.clear();
    newer.parked.clear();
    for r in records {
        newer.push(r);
    }
    (newer, true)
}

/// When a record happened (Unix milliseconds).
fn record_at(record: &TraceRecord) -> u64 {
    match record {
        TraceRecord::Control(c) => c.at_ms,
        TraceRecord::Nested(e) => e.at_ms,
        TraceRecord::Lifecycle(l) => l.at_ms,
        TraceRecord::Decision(d) => d.at_ms,
    }
}

/// Whether a status is final.
fn settled(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "aborted" | "expired")
}

/// Makes room for more journals when the table is full: an eighth of it goes at once (settled
/// runs first, then the least recently updated), so a stream of runs pays one sort per
/// [`MAX_LIVE_JOURNALS`]` / 8` of them. Journals changed since the last flush go last (one that
/// goes anyway keeps, in the store, what its last flush wrote).
fn evict(st: &mut State) {
    if st.journals.len() < MAX_LIVE_JOURNALS {
        return;
    }
    let mut order: Vec<(bool, bool, u64, String)> = st
        .journals
        .values()
        .map(|j| {
            let id = &j.summary.run_id;
            (j.summary.status == "running", st.dirty.contains(id), j.summary.updated_at_ms, id.clone())
        })
        .collect();
    order.sort();
    for (_, _, _, id) in order.into_iter().take(MAX_LIVE_JOURNALS / 8) {
        st.journals.remove(&id);
        st.dirty.remove(&id);
    }
}

impl RunObserver for Ledger {
    fn on_event(&self, event: RunEvent) {
        if let RunEvent::Trace(record) = event {
            if let Some(a) = self.audit.get() {
                a.on_event(RunEvent::Trace(record.clone()));
            }
            self.on_record(*record);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode::trajectory::TranscriptEntry;

    fn entry(req: u64, outcome: CallOutcome, input: Option<Value>) -> TraceRecord {
        TraceRecord::Nested(TranscriptEntry {
            parent_tool_call_id: Some("s/1".into()),
            parent_tool: "exec".into(),
            run_id: "cm_1".into(),
            request_id: req,
            tool_id: "mcp:x:y".into(),
            outcome,
            at_ms: 0,
            duration_ms: None,
            input,
            result: None,
            error: None,
            line: Some(2),
        })
    }

    #[test]
    fn journals_are_bounded_and_count_calls_and_parked_ones() {
        let mut j = Journal::new("cm_1", RunScope::session("s"), "r-1", "\n  let a = 1;\nrest", "javascript", 5);
        assert_eq!(j.summary.source_preview, "  let a = 1;");
        j.push(entry(1, CallOutcome::Issued, None));
        j.push(entry(1, CallOutcome::Completed, None));
        j.push(entry(2, CallOutcome::Parked, None));
        assert_eq!((j.summary.calls, j.summary.parked), (2, 1));
        j.push(entry(2, CallOutcome::Approved, None));
        assert_eq!(j.summary.parked, 0);
        let big = Value::String("x".repeat(2_000));
        for i in 0..1_000 {
            j.push(entry(10 + i, CallOutcome::Issued, Some(big.clone())));
        }
        assert!(j.truncated);
        assert!(j.records.len() <= MAX_JOURNAL_RECORDS);
        let bytes: usize = j.records.iter().map(|r| serde_json::to_string(r).unwrap().len()).sum();
        assert!(bytes <= MAX_JOURNAL_BYTES, "{bytes}");
        assert_eq!(j.summary.tools, vec!["mcp:x:y".to_string()]);
        let huge = "y".repeat(MAX_SOURCE_BYTES + 10);
        let j = Journal::new("cm_2", RunScope::default(), "r", &huge, "javascript", 0);
        assert!(j.source_truncated && j.source.len() == MAX_SOURCE_BYTES);
    }

    #[tokio::test]
    async fn an_abandoned_call_is_forgotten_and_a_settled_run_keeps_its_status() {
        let ledger = Ledger::new(None, 60_000, None);
        let ctx = RunContext { tool_call_id: Some("s/1".into()), ..RunContext::session("s") };
        // A request dropped mid-call (its future dropped): nothing stays behind.
        drop(ledger.begin(&ctx, "exec", &json!({ "code": "return 1" })).await);
        assert_eq!(ledger.state().calls.len(), 0);
        // A cell that completes within its exec gets a journal of its own.
        let t = ledger.begin(&ctx, "exec", &json!({ "code": "return 1" })).await;
        let done = CodeModeResult::Completed { value: json!(1), output: vec![], telemetry: Default::default() };
        ledger.end(t, "exec", &done, std::time::Duration::from_millis(3));
        let summaries = ledger.local_summaries();
        assert_eq!(summaries.len(), 1);
        assert_eq!(summaries[0].status, "completed");
        let id = summaries[0].run_id.clone();
        assert!(codemode::RunId::parse(&id).is_ok(), "{id}");
        // A `wait` on it afterwards is refused by the runtime; the journal still says completed.
        let ctx2 = RunContext { tool_call_id: Some("s/2".into()), ..RunContext::session("s") };
        let t = ledger.begin(&ctx2, "wait", &json!({ "runId": id })).await;
        let refused = CodeModeResult::failed(
            codemode::CodeModeError::new(codemode::CodeModeErrorCode::InvalidInput, "unavailable"),
            vec![],
            Default::default(),
        );
        ledger.end(t, "wait", &refused, std::time::Duration::from_millis(1));
        assert_eq!(ledger.local_summaries()[0].status, "completed");
        let c = ledger.counters();
        assert_eq!((c.cells, c.waits, c.cells_failed), (1, 1, 1), "the abandoned call never ended");
    }

    #[test]
    fn quantiles_of_the_histogram() {
        let mut b = vec![0u64; LATENCY_BUCKETS_MS.len() + 1];
        assert_eq!(quantile(&b, 0.5), None);
        b[bucket(0.8)] += 98; // ≤ 1 ms
        b[bucket(40.0)] += 1; // ≤ 50 ms
        b[bucket(1e9)] += 1; // slowest bucket
        assert_eq!(quantile(&b, 0.5), Some(1.0));
        assert_eq!(quantile(&b, 0.99), Some(50.0));
        assert_eq!(quantile(&b, 1.0), Some(60_000.0));
    }

    #[test]
    fn scope_labels_hide_session_keys() {
        let scope = RunScope {
            agent_id: Some("ops".into()),
            session_key: Some("secret-credential-digest".into()),
            ..RunScope::default()
        };
        let label = scope_label(&scope);
        assert!(label.starts_with("agent:ops key:"), "{label}");
        assert!(!label.contains("secret"));
        assert_eq!(scope_label(&RunScope::default()), "(anonymous)");
    }
}
