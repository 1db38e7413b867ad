//! The snapshot store contract (docs/src/layout.md, contract §6).
//!
//! A store keeps [`SuspendedRun`]s between an `exec` that returned `waiting` and the `wait` that
//! resumes it. Implementations live in `codemode-snapshot` (memory, directory, and Redis for a
//! fleet of replicas — a store that says [`SnapshotStore::fleet`] also keeps the call log that
//! makes nested calls exactly-once, fences the writes of a replica that lost its lease, and shares
//! session state); its `conformance` module holds the contract tests every store passes.

use crate::engine::{Delivery, RequestId, RequestKind, Snapshot};
use crate::error::{CodeModeError, CodeModeErrorCode};
use crate::guest::GuestRequest;
use crate::result::WaitReason;
use crate::scope::{MSG_BUSY, MSG_TOO_MANY, MSG_UNAVAILABLE, RunId, RunScope, ScopeMismatch};
use crate::telemetry::CodeModeTelemetry;
use serde::{Deserialize, Serialize};

/// At most this many runs may be suspended at once per process (contract §6).
pub const MAX_SUSPENDED_RUNS: usize = 64;

/// A bridge request that was still outstanding when the run suspended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingRequest {
    /// The request id.
    pub id: RequestId,
    /// The nested tool's catalog id (tool calls only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<crate::catalog::ToolId>,
    /// The request (needed to re-issue a read-only call in another process).
    pub request: GuestRequest,
    /// The tool was read-only where the call was made. Informational only: whether a lost call is
    /// issued again is decided from the tool's definition where the run resumes, never from this
    /// stored flag (a stored byte must not make a side-effecting call run twice).
    #[serde(default)]
    pub read_only: bool,
    /// When the request was issued (Unix milliseconds).
    pub issued_at_ms: u64,
    /// The call is gated and parked until a human decides (it has not run).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_approval: bool,
    /// The call ran and asked a question (an upstream task's `input_required`); it is parked until
    /// a human answers, and continued from this (see `ToolErrorKind::InputRequired`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked: Option<AskedCall>,
}

/// A call that parked on a question its tool asked (see [`PendingRequest::asked`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AskedCall {
    /// The question, as the tool put it.
    pub question: String,
    /// What continues the call with the answer (the executor's note).
    pub resume: String,
}

impl PendingRequest {
    /// The request's kind.
    pub fn kind(&self) -> RequestKind {
        self.request.kind()
    }
}

/// The ids of the requests in `pending` that are parked for approval, in order.
pub fn parked_ids(pending: &[PendingRequest]) -> Vec<RequestId> {
    pending.iter().filter(|p| p.awaiting_approval).map(|p| p.id).collect()
}

/// The policy a run was started under, stored with it (the book's security model, "A run carries
/// its policy"): every `wait` — in any process, on any replica — is checked against it, and the
/// run's tools can only be narrowed by a later configuration, never widened.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// The agent whose tool policy applied (the context's, else the runtime's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The model provider whose `tools.byProvider` entry applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model, with the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The caller was sandboxed: its nested calls meet the sandbox tool policy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sandboxed: bool,
    /// The catalog version: a digest (hex SHA-256) of the effective tool definitions the run was
    /// checked against when it started.
    pub catalog: String,
    /// The tools the run may call: for each, the first 8 bytes of the SHA-256 of its catalog id, in
    /// hex, sorted and concatenated. A later process resumes the run with the tools of its own
    /// catalog (for this target) that are also in this set: a configuration that removed a tool
    /// takes it away, one that added a tool cannot give it to this run.
    pub tools: String,
}

impl RunPolicy {
    /// The tool hashes of [`RunPolicy::tools`] (none when the text is malformed: a stored byte can
    /// make a run's set smaller, never larger).
    pub fn tool_hashes(&self) -> impl Iterator<Item = &str> {
        let well_formed = self.tools.len().is_multiple_of(16) && self.tools.bytes().all(|b| b.is_ascii_hexdigit());
        let n = if well_formed { self.tools.len() / 16 } else { 0 };
        (0..n).map(move |i| &self.tools[i * 16..i * 16 + 16])
    }

    /// Whether `id_hash` (see [`RunPolicy::tools`]) is one of the run's tools.
    pub fn allows(&self, id_hash: &str) -> bool {
        self.tool_hashes().any(|h| h == id_hash)
    }
}

/// Everything a suspended run needs to be resumed.
#[derive(Debug)]
pub struct SuspendedRun {
    /// The run.
    pub run_id: RunId,
    /// Who may resume it.
    pub scope: RunScope,
    /// The VM state.
    pub snapshot: Snapshot,
    /// Why it suspended.
    pub reason: WaitReason,
    /// Requests still outstanding.
    pub pending: Vec<PendingRequest>,
    /// Requests already settled but not yet delivered into the VM.
    pub ready: Vec<Delivery>,
    /// The cell was declared `restartSafe`.
    pub restart_safe: bool,
    /// Counters so far.
    pub telemetry: CodeModeTelemetry,
    /// When the run was first suspended (Unix milliseconds).
    pub created_at_ms: u64,
    /// When it stops being resumable (Unix milliseconds).
    pub expires_at_ms: u64,
    /// How error positions map back to the cell's source (kept so that a resuming process reports
    /// the model's own lines).
    pub positions: crate::positions::CellPositions,
    /// The policy it was started under (`None`: a run stored by a version that did not keep it; it
    /// is not resumed).
    pub policy: Option<RunPolicy>,
}

impl SuspendedRun {
    /// The requests parked for approval (see [`PendingRequest::awaiting_approval`]).
    pub fn parked(&self) -> Vec<RequestId> {
        parked_ids(&self.pending)
    }

    /// Bytes the stored run takes: the snapshot plus its metadata as JSON (pending requests with
    /// their inputs, undelivered results, positions, telemetry). The runtime holds this to
    /// `maxSnapshotBytes`. Prevents: calls parked for approval or results waiting for delivery
    /// growing a stored run past the limit that the VM snapshot alone respects (100 parked calls
    /// with a 1 MB input each wrote a 105 MB run file against a 10 MiB limit).
    pub fn stored_bytes(&self) -> u64 {
        let meta = crate::result::serialized_len(&self.pending)
            + crate::result::serialized_len(&self.ready)
            + crate::result::serialized_len(&self.positions)
            + crate::result::serialized_len(&self.telemetry)
            + crate::result::serialized_len(&self.scope)
            + crate::result::serialized_len(&self.policy);
        self.snapshot.size_bytes().saturating_add(meta as u64)
    }
}

/// Why a store operation failed. More reasons may be added (a store over a network has its own).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The cap of suspended runs is reached (per process, per directory, or per client scope across
    /// a fleet).
    #[error("{MSG_TOO_MANY}")]
    TooMany,
    /// Unknown, expired or removed run.
    #[error("{MSG_UNAVAILABLE}")]
    Unavailable,
    /// The run is still known but past its TTL (`snapshotTtlSeconds`); its state was just deleted.
    /// Only paths other than a `wait` lookup report it (contract V22 makes an expired `runId` given to
    /// `wait` an `invalid_input` lookup failure); e.g. a late approval decision.
    #[error("code mode run expired (past snapshotTtlSeconds); its state is gone")]
    Expired,
    /// The caller is in another scope.
    #[error("{}", .0.message())]
    WrongScope(ScopeMismatch),
    /// Another `wait` holds the run.
    #[error("{MSG_BUSY}")]
    Busy,
    /// This store cannot hold a live (in-process) snapshot.
    #[error("this snapshot store keeps only serialized snapshots; engine `{0}` keeps live VMs (use the memory store)")]
    LiveNotSupported(String),
    /// The stored data could not be read back.
    #[error("stored run is corrupt: {0}")]
    Corrupt(String),
    /// The stored or exported run (or a record beside it) is not signed by any key this process
    /// holds: tampered, forged, written before runs were signed, or signed elsewhere. Prevents: a
    /// forged approval, policy or pending call taking effect (`docs/src/security.md`, "Signed runs").
    #[error("stored run refused: {0}")]
    Unauthenticated(String),
    /// An I/O failure, with the operating system's error as its source.
    #[error("snapshot store I/O failed: {0}")]
    Io(#[source] std::sync::Arc<std::io::Error>),
    /// A run or a record could not be encoded for storage.
    #[error("cannot encode for the snapshot store: {0}")]
    Encode(String),
    /// This store does not do what was asked (e.g. record approval decisions).
    #[error("{0}")]
    Unsupported(String),
    /// Another process took the run over (its lease expired: this process was paused, partitioned
    /// or too slow to renew it) — this process's write for the run is refused (fencing). Prevents: a
    /// replica that wakes up delivering, recording or running anything more for a run another
    /// replica now drives.
    #[error(
        "code mode run was taken over by another replica (or removed) after this one lost its lease; this replica's result is void (wait again to continue the run)"
    )]
    TakenOver,
    /// The store cannot be reached (a network store whose server is down or unreachable). The
    /// connection is retried by itself; the failed operation is not.
    #[error("snapshot store unreachable: {0}")]
    Unreachable(String),
    /// An approval decision names a request that is not parked for approval (a mistyped id, a call
    /// that already ran or was decided). Prevents: a human believing a call was approved when the
    /// decision went nowhere.
    #[error("{}", not_parked_message(*.request_id, .parked))]
    NotParked {
        /// The request the decision named.
        request_id: RequestId,
        /// The requests of the run that are parked for approval.
        parked: Vec<RequestId>,
    },
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError::Io(std::sync::Arc::new(e))
    }
}

/// Errors compare by reason; I/O errors by their kind and text (an `io::Error` has no equality).
impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        use StoreError as E;
        match (self, other) {
            (E::Io(a), E::Io(b)) => a.kind() == b.kind() && a.to_string() == b.to_string(),
            (E::WrongScope(a), E::WrongScope(b)) => a == b,
            (E::LiveNotSupported(a), E::LiveNotSupported(b))
            | (E::Corrupt(a), E::Corrupt(b))
            | (E::Encode(a), E::Encode(b))
            | (E::Unsupported(a), E::Unsupported(b))
            | (E::Unreachable(a), E::Unreachable(b)) => a == b,
            (E::NotParked { request_id: a, parked: pa }, E::NotParked { request_id: b, parked: pb }) => {
                a == b && pa == pb
            }
            (a, b) => {
                std::mem::discriminant(a) == std::mem::discriminant(b)
                    && matches!(a, E::TooMany | E::Unavailable | E::Expired | E::Busy | E::TakenOver)
            }
        }
    }
}

impl Eq for StoreError {}

fn not_parked_message(request_id: RequestId, parked: &[RequestId]) -> String {
    let parked = if parked.is_empty() {
        "no call of this run is waiting for approval".to_string()
    } else {
        let ids: Vec<String> = parked.iter().map(|id| id.to_string()).collect();
        format!("the calls waiting for approval are request {}", ids.join(", "))
    };
    format!("request {request_id} is not waiting for approval; {parked}")
}

impl StoreError {
    /// The `failed` error this store error becomes.
    pub fn to_code_mode_error(&self) -> CodeModeError {
        match self {
            StoreError::TooMany => CodeModeError::uncoded(MSG_TOO_MANY),
            StoreError::Unavailable
            | StoreError::Busy
            | StoreError::TakenOver
            | StoreError::WrongScope(_)
            | StoreError::NotParked { .. } => CodeModeError::new(CodeModeErrorCode::InvalidInput, self.to_string()),
            StoreError::Expired => CodeModeError::new(CodeModeErrorCode::SnapshotExpired, self.to_string()),
            StoreError::Corrupt(_) | StoreError::Unauthenticated(_) => {
                CodeModeError::new(CodeModeErrorCode::SnapshotRestoreFailed, self.to_string())
            }
            StoreError::LiveNotSupported(_)
            | StoreError::Io(_)
            | StoreError::Encode(_)
            | StoreError::Unreachable(_)
            | StoreError::Unsupported(_) => CodeModeError::new(CodeModeErrorCode::InternalError, self.to_string()),
        }
    }
}

/// Keeps suspended runs.
///
/// Lifecycle: [`put`](Self::put) after a suspension; [`checkout`](Self::checkout) at the start of a
/// `wait` (the run stays reserved, so a second concurrent `wait` gets [`StoreError::Busy`]); then either
/// `put` again (the run suspended again) or [`remove`](Self::remove) (it settled or failed).
#[async_trait::async_trait]
pub trait SnapshotStore: Send + Sync {
    /// A short name for logs (`"memory"`, `"directory"`).
    fn name(&self) -> &str;

    /// Whether live (non-serialized) snapshots can be stored.
    fn accepts_live(&self) -> bool;

    /// Stores a suspended run. A run that is not currently checked out counts against
    /// [`MAX_SUSPENDED_RUNS`] ([`StoreError::TooMany`]).
    async fn put(&self, run: SuspendedRun) -> Result<(), StoreError>;

    /// Takes a run out for resumption, after checking expiry and scope.
    async fn checkout(&self, run_id: &RunId, scope: &RunScope) -> Result<SuspendedRun, StoreError>;

    /// Deletes a run (or releases its checkout). Returns whether anything was removed.
    async fn remove(&self, run_id: &RunId) -> bool;

    /// Deletes expired runs and returns their ids.
    async fn purge_expired(&self) -> Vec<RunId>;

    /// Number of runs held (suspended or checked out).
    async fn count(&self) -> usize;

    /// Records the result of a nested call that settled after its run was suspended, for the
    /// process that will resume the run. Called by a process that started the call and is about to
    /// end (the `codemode exec` / `wait` commands). Returns `Ok(false)` when nothing was recorded:
    /// the store keeps runs in this process only (a resuming `wait` finds the call in the same
    /// process), or the run is gone (settled, aborted, expired).
    async fn record_result(&self, _run_id: &RunId, _delivery: &Delivery) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// Takes (and removes) the results recorded for a run with [`record_result`](Self::record_result).
    async fn take_results(&self, _run_id: &RunId) -> Result<Vec<Delivery>, StoreError> {
        Ok(Vec::new())
    }

    /// Declares that this process is running nested calls of a suspended run and will record their
    /// results. The claim lasts until the returned guard is dropped (or the process ends, however it
    /// ends). `None`: the store needs no claims (runs never leave this process).
    async fn claim_calls(&self, _run_id: &RunId) -> Result<Option<CallsClaim>, StoreError> {
        Ok(None)
    }

    /// Records a human's decision on a parked call of a suspended (or currently resumed) run, for
    /// whichever process resumes it. A later decision on the same call replaces an earlier one
    /// that was not collected yet. Fails with [`StoreError::Unavailable`] when the run is unknown,
    /// settled, and with [`StoreError::Expired`] when it is still known but past its TTL (its state is
    /// deleted then), and with [`StoreError::NotParked`] when the request is not parked for approval
    /// in the run as last stored. The default: this store cannot record decisions.
    async fn record_decision(
        &self,
        _run_id: &RunId,
        _request_id: RequestId,
        _decision: &crate::approval::ApprovalDecision,
    ) -> Result<(), StoreError> {
        Err(StoreError::Unsupported(format!("the `{}` snapshot store cannot record approval decisions", self.name())))
    }

    /// Whether decisions were recorded for `run_id` that no resume collected yet: a task waiting for
    /// an answer goes on once one came, by whichever path it came. The default: none.
    async fn has_decisions(&self, _run_id: &RunId) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// Takes (and removes) the decisions recorded for a run, by request id.
    async fn take_decisions(
        &self,
        _run_id: &RunId,
    ) -> Result<Vec<(RequestId, crate::approval::ApprovalDecision)>, StoreError> {
        Ok(Vec::new())
    }

    /// Whether a live process holds a [`claim_calls`](Self::claim_calls) claim on the run's calls:
    /// then a resuming process waits for their recorded results instead of issuing them again.
    async fn calls_claimed(&self, _run_id: &RunId) -> bool {
        false
    }

    /// Whether several live processes share this store's runs (a fleet of replicas): then any
    /// replica may resume a run at any time, so the runtime logs every nested call it starts
    /// ([`begin_call`](Self::begin_call)) and records every result as the call finishes
    /// ([`finish_call`](Self::finish_call)), and a settled run's end is committed through
    /// [`settle`](Self::settle). Stores of one process (memory) or of processes taking turns
    /// (directory) say `false`.
    fn fleet(&self) -> bool {
        false
    }

    /// Logs the start of a nested call of `run_id`, right before the tool runs (after the gates and
    /// the approval step), and says whether it may run. A fleet store answers from its call log:
    /// a call this request id already made (a replica that replays the run from its last snapshot,
    /// after the replica driving it died) gets its recorded result instead of running again; a call
    /// another replica started and never finished is [`CallStart::Lost`] unless it is read-only
    /// (then it runs again, [`CallStart::Reissued`]). The default (stores that are not fleet
    /// stores): [`CallStart::Fresh`].
    async fn begin_call(&self, _run_id: &RunId, _issue: &CallIssue) -> Result<CallStart, StoreError> {
        Ok(CallStart::Fresh)
    }

    /// Records the result of a nested call this process logged with
    /// [`begin_call`](Self::begin_call), as soon as it finishes: `delivery` as the guest got it, and
    /// `raw` what the tool returned before the after-call stages (see [`CallStart::Recorded`]).
    /// `Ok(false)`: not recorded (the run is gone, or another replica took the call over). The
    /// default records nothing.
    async fn finish_call(&self, _run_id: &RunId, _delivery: &Delivery, _raw: Option<&str>) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// Notes that a logged call of `run_id` became a long-running task on its server (`note`: what
    /// the executor needs to continue it, see `NestedToolCall::task_note`), for a replica that
    /// resumes the run after this one died. `Ok(false)`: not noted (no call log, the call finished,
    /// or another replica owns it now). The default notes nothing.
    async fn note_call(&self, _run_id: &RunId, _request_id: RequestId, _note: &str) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// Who owns logged call `request_id` of `run_id` now (see [`CallOwner`]). The default: this
    /// process (stores without a call log never hand a call over).
    async fn call_owner(&self, _run_id: &RunId, _request_id: RequestId) -> Result<CallOwner, StoreError> {
        Ok(CallOwner::Mine)
    }

    /// The notes of `run_id`'s logged calls that have not finished (see
    /// [`note_call`](Self::note_call)): a call lost with its replica but noted is continued, not
    /// failed. The default: none.
    async fn call_notes(&self, _run_id: &RunId) -> Result<Vec<(RequestId, String)>, StoreError> {
        Ok(Vec::new())
    }

    /// Commits the end of a run that settled (completed or failed) in this process: its state
    /// leaves the store. A fleet store refuses with [`StoreError::TakenOver`] when another replica
    /// took the run over meanwhile, and the runtime then reports that instead of the run's result
    /// (so a result is never delivered by two replicas). The default: [`remove`](Self::remove).
    async fn settle(&self, run_id: &RunId) -> Result<bool, StoreError> {
        Ok(self.remove(run_id).await)
    }

    /// State of a session (`scope`) that a fleet shares across replicas, by `kind` (the runtime
    /// keeps the session's loop-detection history here, kind `"loops"`). `None`: nothing stored,
    /// or a store that keeps no session state (the default: each process keeps its own).
    async fn session_state(&self, _scope: &RunScope, _kind: &str) -> Result<Option<String>, StoreError> {
        Ok(None)
    }

    /// State a fleet shares across replicas and sessions, by `kind` (the runtime keeps the result
    /// types learned from observed results here, kind `"observed"`). `None`: nothing stored, or a
    /// store that keeps none (the default).
    async fn shared_state(&self, _kind: &str) -> Result<Option<String>, StoreError> {
        Ok(None)
    }

    /// Stores shared state of `kind` for `ttl_ms` (last writer wins). The default keeps nothing.
    async fn put_shared_state(&self, _kind: &str, _value: &str, _ttl_ms: u64) -> Result<(), StoreError> {
        Ok(())
    }

    /// The record of task `task_id` (see [`crate::task`]). `None`: unknown, or past its expiry (then
    /// it is dropped), or a record no key of this process signed. The caller checks its scope.
    async fn task(&self, _task_id: &str) -> Result<Option<crate::task::TaskRecord>, StoreError> {
        Err(StoreError::Unsupported(format!("the `{}` snapshot store keeps no tasks", self.name())))
    }

    /// Writes a task's record, until its `expires_at_ms`. Refused (`Ok(false)`, nothing written)
    /// when the stored record is already terminal — a cancelled task stays cancelled, a finished one
    /// keeps its result — or when `driver` is given and another driver holds the task's claim
    /// ([`drive_task`](Self::drive_task)): a process that lost its claim never overwrites what the
    /// new driver reports.
    async fn put_task(&self, _task: &crate::task::TaskRecord, _driver: Option<&str>) -> Result<bool, StoreError> {
        Err(StoreError::Unsupported(format!("the `{}` snapshot store keeps no tasks", self.name())))
    }

    /// Takes or renews the claim to drive task `task_id` for `lease_ms`: granted (`true`) when nobody
    /// holds it, its holder's lease ended, or `driver` holds it already. Two processes never hold
    /// one task's claim at once, so two replicas never drive one task.
    async fn drive_task(&self, _task_id: &str, _driver: &str, _lease_ms: u64) -> Result<bool, StoreError> {
        Err(StoreError::Unsupported(format!("the `{}` snapshot store keeps no tasks", self.name())))
    }

    /// Working tasks whose drive claim has lapsed or was never taken (their driver died), at most
    /// `limit`: a process sweeping for them takes them over, so a task goes on without anyone
    /// polling it. The default: none.
    async fn orphaned_tasks(&self, _limit: usize) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }

    /// Gives the claim on `task_id` up, if `driver` holds it.
    async fn release_task(&self, _task_id: &str, _driver: &str) -> Result<(), StoreError> {
        Ok(())
    }

    /// One page of the suspended runs, of `scope` or of every scope, in the order of their expiry
    /// (then run id): at most `limit` (capped at [`MAX_LIST_PAGE`]) runs after `cursor` (a page's
    /// [`RunPage::next`]; `None`: the first page). What an operator's console lists; it never
    /// checks a run out, so listing does not disturb a `wait`. The default lists nothing.
    async fn list_runs(
        &self,
        _scope: Option<&RunScope>,
        _cursor: Option<&str>,
        _limit: usize,
    ) -> Result<RunPage, StoreError> {
        Ok(RunPage::default())
    }

    /// Keeps a console record (a run's journal, a replica's report) of `kind` under `key` for
    /// `ttl_ms`, replacing the previous one (last writer wins). A store keeps at most
    /// [`ConsoleKind::max_records`] records of a kind (the oldest updated go first) and refuses a
    /// record over [`MAX_CONSOLE_RECORD_BYTES`]. Display data only: nothing read back from here
    /// decides anything about a run. The default keeps nothing.
    async fn put_console_record(
        &self,
        _kind: ConsoleKind,
        _key: &str,
        _value: &str,
        _ttl_ms: u64,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// The console record of `kind` under `key`, if it is kept and not expired.
    async fn console_record(&self, _kind: ConsoleKind, _key: &str) -> Result<Option<String>, StoreError> {
        Ok(None)
    }

    /// The console records of `kind` not expired, most recently updated first, at most `limit`.
    async fn console_records(&self, _kind: ConsoleKind, _limit: usize) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }

    /// Stores a session's state of `kind` for `ttl_ms` (last writer wins). The default keeps
    /// nothing.
    async fn put_session_state(
        &self,
        _scope: &RunScope,
        _kind: &str,
        _value: &str,
        _ttl_ms: u64,
    ) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Most runs one [`SnapshotStore::list_runs`] page holds. Prevents: one listing request reading a
/// whole fleet's runs at once.
pub const MAX_LIST_PAGE: usize = 200;

/// Longest input of a listed call kept in a [`ListedCall`] (as compact JSON); a longer one is cut.
/// Prevents: a listing of runs whose calls carry megabyte inputs growing to the size of the store.
pub const MAX_LISTED_INPUT_CHARS: usize = 4_096;

/// A page of suspended runs (see [`SnapshotStore::list_runs`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunPage {
    /// The runs, in the order of their expiry, then run id.
    pub runs: Vec<RunListing>,
    /// The cursor of the next page, or `None` when this was the last.
    pub next: Option<String>,
}

/// A suspended run as a listing shows it: who owns it, why it waits and on what, without the
/// snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunListing {
    /// The run.
    pub run_id: RunId,
    /// Its scope (who may resume it).
    pub scope: RunScope,
    /// Why it suspended (`None` while a `wait` holds it and the store keeps nothing else).
    pub reason: Option<WaitReason>,
    /// When it was first suspended (Unix milliseconds; 0 when not known while checked out).
    pub created_at_ms: u64,
    /// When it stops being resumable (Unix milliseconds).
    pub expires_at_ms: u64,
    /// Bytes the stored run takes (see [`SuspendedRun::stored_bytes`]; 0 while checked out).
    pub stored_bytes: u64,
    /// A `wait` holds it now (on a fleet: the replica that holds it, when the store knows).
    pub checked_out: bool,
    /// The replica holding it (fleet stores), when checked out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Its outstanding calls (parked ones included).
    pub calls: Vec<ListedCall>,
}

/// An outstanding call of a listed run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedCall {
    /// The request id.
    pub request_id: RequestId,
    /// The catalog id of the tool, for tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// The input as compact JSON, cut to [`MAX_LISTED_INPUT_CHARS`].
    pub input: String,
    /// When it was issued (Unix milliseconds).
    pub issued_at_ms: u64,
    /// Parked until a human decides.
    pub awaiting_approval: bool,
    /// The line of the model's cell that made it, when the guest reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell_line: Option<u32>,
}

impl RunListing {
    /// The listing of a stored run.
    pub fn of(run: &SuspendedRun) -> Self {
        Self::from_parts(
            &run.run_id,
            &run.scope,
            run.reason,
            &run.pending,
            &run.positions,
            (run.created_at_ms, run.expires_at_ms),
            run.stored_bytes(),
        )
    }

    /// The listing of a stored run's parts (stores that keep the metadata apart from the snapshot).
    pub fn from_parts(
        run_id: &RunId,
        scope: &RunScope,
        reason: WaitReason,
        pending: &[PendingRequest],
        positions: &crate::positions::CellPositions,
        (created_at_ms, expires_at_ms): (u64, u64),
        stored_bytes: u64,
    ) -> Self {
        let calls = pending
            .iter()
            .map(|p| {
                let input = p.request.tool_input().map(|v| v.to_string()).unwrap_or_default();
                let input = crate::text::cut_chars(input, MAX_LISTED_INPUT_CHARS);
                ListedCall {
                    request_id: p.id,
                    tool_id: p.tool_id.as_ref().map(|t| t.to_string()),
                    input,
                    issued_at_ms: p.issued_at_ms,
                    awaiting_approval: p.awaiting_approval,
                    cell_line: p.request.call_line().map(|l| positions.map(l, None).0),
                }
            })
            .collect();
        RunListing {
            run_id: run_id.clone(),
            scope: scope.clone(),
            reason: Some(reason),
            created_at_ms,
            expires_at_ms,
            stored_bytes,
            checked_out: false,
            holder: None,
            calls,
        }
    }

    /// The listing of a run a `wait` holds, of which the store keeps only its scope and expiry.
    pub fn checked_out(run_id: &RunId, scope: &RunScope, expires_at_ms: u64) -> Self {
        RunListing {
            run_id: run_id.clone(),
            scope: scope.clone(),
            reason: None,
            created_at_ms: 0,
            expires_at_ms,
            stored_bytes: 0,
            checked_out: true,
            holder: None,
            calls: Vec::new(),
        }
    }

    /// The cursor after this run (see [`SnapshotStore::list_runs`]).
    pub fn cursor(&self) -> String {
        format!("{}-{}", self.expires_at_ms, self.run_id)
    }
}

impl RunPage {
    /// This page, with a `next` cursor after its last run when `more` (the caller knows more runs
    /// follow than it paged).
    pub fn with_more(mut self, more: bool) -> Self {
        if more && self.next.is_none() {
            self.next = self.runs.last().map(RunListing::cursor);
        }
        self
    }
}

/// Reads a [`RunListing::cursor`]: (expiry, run id). `None` for anything else.
pub fn parse_run_cursor(cursor: &str) -> Option<(u64, String)> {
    let (at, id) = cursor.split_once('-')?;
    Some((at.parse().ok()?, id.to_string()))
}

/// Pages `runs` (every run of the store, in any order) the way [`SnapshotStore::list_runs`] does:
/// sorted by (expiry, run id), those after `cursor`, at most `limit` (1 ..= [`MAX_LIST_PAGE`]).
pub fn page_runs(mut runs: Vec<RunListing>, cursor: Option<&str>, limit: usize) -> RunPage {
    let limit = limit.clamp(1, MAX_LIST_PAGE);
    runs.sort_by(|a, b| (a.expires_at_ms, a.run_id.as_str()).cmp(&(b.expires_at_ms, b.run_id.as_str())));
    let after = cursor.and_then(parse_run_cursor);
    let start = match &after {
        Some((at, id)) => runs.partition_point(|r| (r.expires_at_ms, r.run_id.as_str()) <= (*at, id.as_str())),
        None => 0,
    };
    let mut page: Vec<RunListing> = runs.into_iter().skip(start).take(limit + 1).collect();
    let next = if page.len() > limit {
        page.truncate(limit);
        page.last().map(RunListing::cursor)
    } else {
        None
    };
    RunPage { runs: page, next }
}

/// What a console record is (see [`SnapshotStore::put_console_record`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsoleKind {
    /// A run's summary: its status, scope, tools and times (what a list of runs shows), kept for
    /// the run's TTL so that any replica's console lists it.
    Run,
    /// A run's journal: its source, bounded trajectory and result (what one run's page shows),
    /// kept beside its summary.
    Journal,
    /// A replica's report: its counters, upstream servers and the runs it holds, renewed every
    /// second while it lives.
    Replica,
}

impl ConsoleKind {
    /// The record kind's name in keys and file names.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsoleKind::Run => "run",
            ConsoleKind::Journal => "journal",
            ConsoleKind::Replica => "replica",
        }
    }

    /// Most records of this kind a store keeps. Prevents: a flood of short runs (or of replicas
    /// started and killed) growing the store without bound before their TTL passes.
    pub fn max_records(self) -> usize {
        match self {
            ConsoleKind::Run | ConsoleKind::Journal => 2_000,
            ConsoleKind::Replica => 256,
        }
    }
}

/// Largest console record a store keeps. Prevents: a run whose trajectory carries huge inputs and
/// results filling the store (the console bounds its journals below this).
pub const MAX_CONSOLE_RECORD_BYTES: usize = 512 * 1024;

/// Whether `key` may name a console record: 1–128 characters of ASCII letters, digits, `_`, `-`,
/// `.` and `:` (run ids and replica ids are). Prevents: a key that walks out of a directory store's
/// folder or into another key's namespace.
pub fn console_key_ok(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 128
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
        && !key.starts_with('.')
}

/// A nested call about to run, as a fleet store's call log records it (see
/// [`SnapshotStore::begin_call`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallIssue {
    /// The request id the guest gave the call (deterministic: a run replayed from the same snapshot
    /// with the same results numbers its calls the same way).
    pub request_id: RequestId,
    /// The catalog tool.
    pub tool_id: String,
    /// A digest of the call's input: a replay whose call differs from the logged one (guest code
    /// that is not deterministic) does not get the other call's result.
    pub input_digest: String,
    /// The tool is read-only: a call lost with the replica that ran it may run again.
    pub read_only: bool,
}

/// What the call log says about a nested call about to run (see [`SnapshotStore::begin_call`]).
#[derive(Debug, Clone, PartialEq)]
pub enum CallStart {
    /// Never logged before: run it.
    Fresh,
    /// Logged by a replica that stopped before it finished, and the tool is read-only: run it again.
    Reissued,
    /// Already ran to the end: the tool is not run again. `raw` is what the tool returned, before
    /// any hook or output contract (the JSON of a `Result<ToolResult, ToolError>`, as the runtime
    /// recorded it): the replaying runtime takes it through its own after-call stages like a live
    /// result. `outcome` is what the guest got, delivered as it is when there is no `raw` (a
    /// failure the log itself recorded, or a record of an older version).
    Recorded {
        /// What the guest was delivered.
        outcome: Result<serde_json::Value, crate::engine::GuestError>,
        /// What the tool returned, unshaped.
        raw: Option<String>,
    },
    /// Logged by a replica that stopped before it finished (or, in a replay, logged with another
    /// tool or input), and the tool has side effects: it must not run again; the guest gets this
    /// failure. The log now records it as failed, so no replica runs it.
    Lost(String),
    /// Logged by a replica that stopped before it finished, with the note of the task the call
    /// became on its server ([`SnapshotStore::note_call`]): this process now owns the call and
    /// continues that task (the tool is not run again).
    Resume(String),
}

/// Who owns a logged nested call now (see [`SnapshotStore::call_owner`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOwner {
    /// This process: it goes on waiting for the call.
    Mine,
    /// Another replica took the call over (it resumed the run after this one lost it): this
    /// process stops waiting and leaves the call's task to that replica.
    Moved,
    /// The call's run is gone (aborted, expired, settled): nobody waits for the call any more.
    Gone,
}

/// A claim on a suspended run's nested calls (see [`SnapshotStore::claim_calls`]); released on drop.
pub struct CallsClaim {
    _guard: Box<dyn std::any::Any + Send + Sync>,
}

impl CallsClaim {
    /// Wraps a store's guard object (whatever releases the claim when dropped).
    pub fn new(guard: impl std::any::Any + Send + Sync) -> Self {
        CallsClaim { _guard: Box::new(guard) }
    }
}

impl std::fmt::Debug for CallsClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallsClaim")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_spec_messages() {
        let e = StoreError::TooMany.to_code_mode_error();
        assert_eq!(e.message, "too many suspended code mode runs.");
        assert_eq!(e.code, None);
        let e = StoreError::Unavailable.to_code_mode_error();
        assert_eq!((e.code, e.message.as_str()), (Some(CodeModeErrorCode::InvalidInput), MSG_UNAVAILABLE));
        let e = StoreError::WrongScope(ScopeMismatch::Session).to_code_mode_error();
        assert_eq!(e.message, "code mode run belongs to a different session.");
        assert_eq!(StoreError::Busy.to_code_mode_error().code, Some(CodeModeErrorCode::InvalidInput));
        // The operating system's error stays the source of an I/O failure.
        let io = StoreError::from(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "no access"));
        let source = std::error::Error::source(&io).unwrap();
        assert_eq!(source.to_string(), "no access");
        assert_eq!(io.to_code_mode_error().code, Some(CodeModeErrorCode::InternalError));
        assert_eq!(io.clone(), io);
        assert_ne!(io, StoreError::Encode("no access".into()));
    }
}
