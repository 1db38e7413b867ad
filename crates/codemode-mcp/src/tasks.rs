//! Runs served as MCP tasks (the tasks extension, `io.modelcontextprotocol/tasks`; book: "Runs as MCP
//! tasks").
//!
//! When a client that declared the extension calls `exec` (or `wait`) and the run would come back
//! `waiting`, the answer is a task whose id is the run's id, and the gateway drives the run itself:
//! it resumes it with `wait` as its nested calls settle, until it completes, fails, is cancelled or
//! expires — no model turn in between. The task's record lives in the snapshot store
//! ([`codemode_core::task`]), so `tasks/get`, `tasks/update` and `tasks/cancel` work on every
//! replica of a fleet; one process at a time holds the task's drive claim (leased, renewed every
//! third of the lease), and a replica that finds a working task nobody drives — its driver died;
//! each replica sweeps for them once a lease — takes the claim and goes on driving it (the run's own lease and fencing keep two replicas from
//! resuming it at once).
//!
//! Map of this module:
//! - [`Tasks`]: this process's driver name, the claim's lease, and the tasks it drives now.
//! - `Gateway::start_task`: a `waiting` result becomes a task (or stays a plain result when the
//!   store cannot keep tasks).
//! - `Gateway::drive`: the loop that resumes a task's run and writes its record.
//! - `Gateway::task_get` / `task_update` / `task_cancel`: the three requests, scoped like runs.
//! - `Gateway::sweep_tasks`: every lease, working tasks whose driver died are taken over, polled or
//!   not.

use crate::gateway::Gateway;
use codemode::{CodeModeResult, PendingCallKind, RunContext, RunId, RunScope};
use codemode_core::task::{TaskQuestion, TaskRecord, TaskState};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, Task, TaskPayload};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_util::sync::CancellationToken;

/// The poll interval a task suggests to its client (`pollIntervalMs`), and how long a driver waits
/// before trying a run that another `wait` still holds (a dead driver's checkout, until its lease
/// ends).
pub const POLL_INTERVAL_MS: u64 = 200;

/// The drive claim's lease when the store names none (memory and directory stores; a Redis store
/// uses its `leaseMs`).
pub const DEFAULT_LEASE_MS: u64 = 10_000;

/// Most orphaned tasks one sweep takes over. Prevents: a replica that comes back after an outage
/// taking every task of the fleet in one sweep.
const SWEEP_BATCH: usize = 16;

/// Longest status message of a task (the pending calls it names are cut to fit).
const MAX_STATUS_CHARS: usize = 500;

/// The prefix of the input-request keys of approval questions (`approval:<requestId>`), shared with
/// the MRTR questions of `exec`.
pub(crate) const APPROVAL_KEY: &str = "approval:";

/// This process's side of the tasks it serves.
pub struct Tasks {
    /// Names this process in drive claims (unique per process start).
    driver: String,
    /// The drive claim's lease in milliseconds.
    lease_ms: AtomicU64,
    /// The tasks this process drives now, with the token that stops each.
    driving: std::sync::Mutex<HashMap<String, CancellationToken>>,
}

impl Default for Tasks {
    fn default() -> Self {
        Tasks {
            driver: format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()),
            lease_ms: AtomicU64::new(DEFAULT_LEASE_MS),
            driving: Default::default(),
        }
    }
}

impl Tasks {
    fn lease(&self) -> u64 {
        self.lease_ms.load(Ordering::Relaxed)
    }

    fn driving(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        // Every update is one insert or remove: a poisoned lock left nothing half-done.
        self.driving.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many tasks this process drives now.
    pub fn driven(&self) -> usize {
        self.driving().len()
    }
}

/// The unknown-task error: the same for a task that never existed, one that expired and one of
/// another client (which must not learn that it exists).
fn unknown_task() -> ErrorData {
    ErrorData::invalid_params("unknown or expired task (or one this client did not start)", None)
}

/// A store failure while serving a task request.
fn store_failed(e: codemode_core::store::StoreError) -> ErrorData {
    ErrorData::internal_error(format!("task state unavailable: {e}"), None)
}

/// ISO 8601 (UTC, milliseconds) of a Unix time in milliseconds.
pub(crate) fn iso8601(ms: u64) -> String {
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, (rem % 3600) / 60, rem % 60)
}

/// The status message of a `waiting` result: which calls are pending, and how many resumes so far.
fn status_of(result: &CodeModeResult, resumes: u64) -> String {
    let CodeModeResult::Waiting { pending_tool_calls, .. } = result else { return String::new() };
    let calls: Vec<String> = pending_tool_calls
        .iter()
        .map(|p| {
            let what = if p.kind == PendingCallKind::Approval { "awaiting approval" } else { "running" };
            format!("{} (request {}, {what}, {} ms)", p.tool_id, p.request_id, p.elapsed_ms)
        })
        .collect();
    let mut text = match calls.len() {
        0 => "suspended; resuming".to_string(),
        1 => format!("waiting on 1 call: {}", calls[0]),
        n => format!("waiting on {n} calls: {}", calls.join(", ")),
    };
    if resumes > 0 {
        text.push_str(&format!("; {resumes} resume{} so far", if resumes == 1 { "" } else { "s" }));
    }
    if text.chars().count() > MAX_STATUS_CHARS {
        text = text.chars().take(MAX_STATUS_CHARS).chain(std::iter::once('…')).collect();
    }
    text
}

/// The `tools/call` result of a run's final result, as `exec` answers it.
pub(crate) fn call_result(result: &CodeModeResult) -> CallToolResult {
    let json = result.to_json();
    match result {
        CodeModeResult::Failed { .. } => CallToolResult::structured_error(json),
        _ => CallToolResult::structured(json),
    }
}

/// Whether a `wait` failed because another `wait` holds the run (a dead driver's checkout, until
/// its lease ends).
fn busy(result: &CodeModeResult) -> bool {
    matches!(result, CodeModeResult::Failed { error, .. } if error == codemode_core::scope::MSG_BUSY)
}

/// Whether a `wait`'s result is void because another replica took the run over.
fn taken_over(result: &CodeModeResult) -> bool {
    matches!(result, CodeModeResult::Failed { error, .. } if *error == codemode_core::store::StoreError::TakenOver.to_string())
}

impl Gateway {
    /// Sets the drive claim's lease (a Redis store's `leaseMs`).
    pub fn set_task_lease(&self, lease_ms: u64) {
        self.tasks.lease_ms.store(lease_ms.max(1), Ordering::Relaxed);
    }

    /// This process's side of the tasks it serves.
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// The questions about the calls of `result` parked for approval.
    fn questions(&self, run_id: &str, result: &CodeModeResult) -> Vec<TaskQuestion> {
        let CodeModeResult::Waiting { pending_tool_calls, .. } = result else { return Vec::new() };
        pending_tool_calls
            .iter()
            .filter(|p| p.kind == PendingCallKind::Approval)
            .map(|p| TaskQuestion { request_id: p.request_id, message: self.question_for(run_id, p) })
            .collect()
    }

    /// What the human is asked about a parked call of `run_id`: the question its tool asked, or what
    /// the approver was told when the call was gated (if it still knows), or a plain question.
    pub(crate) fn question_for(&self, run_id: &str, p: &codemode_core::result::CodeModePendingToolCall) -> String {
        if let Some(q) = &p.question {
            return format!(
                "{q}\n(code mode run {run_id}, request {}, tool `{}`: accept to answer yes)",
                p.request_id, p.tool_id
            );
        }
        let known = self.approver.as_ref().and_then(|a| a.unasked(run_id, p.request_id));
        let request = match (known, RunId::parse(run_id)) {
            (Some(r), _) => r,
            (None, Ok(run_id)) => codemode::ApprovalRequest {
                run_id,
                request_id: p.request_id,
                tool_id: p.tool_id.clone(),
                input_preview: "(not shown)".into(),
                reason: "the approval policy or a hook gates this tool".into(),
                cell_line: None,
                context: RunContext::default(),
            },
            (None, Err(_)) => {
                return format!("Code mode wants to call `{}` (request {}). Approve?", p.tool_id, p.request_id);
            }
        };
        crate::approval::ElicitingApprover::message(&request)
    }

    /// The record's state after a non-final `result`.
    fn apply_waiting(&self, record: &mut TaskRecord, result: &mut CodeModeResult, resumes: u64) {
        record.carried.append(result.output_mut());
        let questions = self.questions(&record.task_id, result);
        record.state = if questions.is_empty() { TaskState::Working } else { TaskState::InputRequired };
        record.questions = questions;
        record.message = Some(status_of(result, resumes));
        record.updated_at_ms = self.cm.now_ms();
    }

    /// The record's state after a final `result` (completed, or failed as `exec` reports it).
    fn apply_final(&self, record: &mut TaskRecord, mut result: CodeModeResult) {
        let mut output = std::mem::take(&mut record.carried);
        output.append(result.output_mut());
        *result.output_mut() = output;
        record.is_error = matches!(result, CodeModeResult::Failed { .. });
        record.message = Some(match &result {
            CodeModeResult::Failed { error, .. } => format!("the run failed: {error}"),
            _ => "the run completed".to_string(),
        });
        record.result = Some(result.to_json());
        record.questions.clear();
        record.state = TaskState::Completed;
        record.updated_at_ms = self.cm.now_ms();
    }

    /// Turns a `waiting` result of `ctx`'s run into a task and starts driving it; `Err` gives the
    /// result back to be answered as it is (the store keeps no tasks, or could not write this one).
    pub(crate) async fn start_task(
        self: &Arc<Self>,
        ctx: &RunContext,
        mut result: CodeModeResult,
    ) -> Result<CreateTaskResult, CodeModeResult> {
        let Some(run_id) = result.run_id().map(str::to_string) else { return Err(result) };
        let now = self.cm.now_ms();
        let ttl_ms = self.cm.config().snapshot_ttl_seconds.saturating_mul(1000);
        let mut record = TaskRecord {
            task_id: run_id.clone(),
            scope: ctx.scope.clone(),
            state: TaskState::Working,
            message: None,
            carried: Vec::new(),
            result: None,
            is_error: false,
            questions: Vec::new(),
            created_at_ms: now,
            updated_at_ms: now,
            expires_at_ms: now.saturating_add(ttl_ms),
        };
        let carried_before = result.output_mut().clone();
        self.apply_waiting(&mut record, &mut result, 0);
        let store = self.cm.store().clone();
        match store.put_task(&record, None).await {
            Ok(true) => {}
            outcome => {
                tracing::warn!(task = %run_id, ?outcome, "cannot keep the run as a task; answering `waiting`");
                *result.output_mut() = carried_before;
                return Err(result);
            }
        }
        if record.state == TaskState::Working {
            self.take_and_drive(&record).await;
        }
        tracing::info!(task = %run_id, state = record.state.as_str(), "exec answered as a task");
        Ok(CreateTaskResult::new(self.task_of(&record)))
    }

    /// The base task fields of `record`.
    fn task_of(&self, record: &TaskRecord) -> Task {
        let mut task = Task::new(
            record.task_id.clone(),
            Default::default(),
            iso8601(record.created_at_ms),
            iso8601(record.updated_at_ms),
        )
        .with_ttl_ms(record.expires_at_ms.saturating_sub(record.created_at_ms));
        task.status = match record.state {
            TaskState::Working => rmcp::model::TaskStatus::Working,
            TaskState::InputRequired => rmcp::model::TaskStatus::InputRequired,
            TaskState::Completed => rmcp::model::TaskStatus::Completed,
            TaskState::Failed => rmcp::model::TaskStatus::Failed,
            TaskState::Cancelled => rmcp::model::TaskStatus::Cancelled,
        };
        if !record.state.is_terminal() {
            task = task.with_poll_interval_ms(POLL_INTERVAL_MS);
        }
        if let Some(m) = &record.message {
            task = task.with_status_message(m.clone());
        }
        task
    }

    /// `tasks/get`'s answer for `record`.
    fn detailed(&self, record: &TaskRecord) -> DetailedTask {
        use rmcp::model::{ElicitRequest, ElicitRequestParams, ElicitationSchema, InputRequest};
        let payload = match record.state {
            TaskState::Working => TaskPayload::Working,
            TaskState::InputRequired => {
                let schema: Option<ElicitationSchema> =
                    serde_json::from_value(serde_json::json!({ "type": "object", "properties": {} })).ok();
                let input_requests = record
                    .questions
                    .iter()
                    .filter_map(|q| {
                        let params = ElicitRequestParams::FormElicitationParams {
                            meta: None,
                            message: q.message.clone(),
                            requested_schema: schema.clone()?,
                        };
                        Some((
                            format!("{APPROVAL_KEY}{}", q.request_id),
                            InputRequest::Elicitation(ElicitRequest::new(params)),
                        ))
                    })
                    .collect();
                TaskPayload::InputRequired { input_requests }
            }
            TaskState::Completed => {
                let result = record.result.clone().unwrap_or(serde_json::Value::Null);
                let call = if record.is_error {
                    CallToolResult::structured_error(result)
                } else {
                    CallToolResult::structured(result)
                };
                let result = match serde_json::to_value(call) {
                    Ok(serde_json::Value::Object(mut m)) => {
                        // The task's own `resultType` is the answer's; the inlined result has none.
                        m.remove("resultType");
                        m
                    }
                    _ => serde_json::Map::new(),
                };
                TaskPayload::Completed { result }
            }
            TaskState::Failed => {
                let mut error = serde_json::Map::new();
                error.insert("code".into(), serde_json::json!(-32603));
                error.insert(
                    "message".into(),
                    serde_json::json!(record.message.clone().unwrap_or_else(|| "the task failed".into())),
                );
                TaskPayload::Failed { error }
            }
            TaskState::Cancelled => TaskPayload::Cancelled,
        };
        DetailedTask::new(self.task_of(record), payload)
    }

    /// The record of `task_id` if `scope` may see it.
    async fn scoped_record(&self, task_id: &str, scope: &RunScope) -> Result<TaskRecord, ErrorData> {
        let record = self.cm.store().task(task_id).await.map_err(store_failed)?;
        match record {
            Some(r) if r.scope == *scope => Ok(r),
            _ => Err(unknown_task()),
        }
    }

    /// `tasks/get` from a client in `scope`. A working task nobody drives any more (its driver
    /// died) is taken over here.
    pub(crate) async fn task_get(
        self: &Arc<Self>,
        task_id: &str,
        scope: &RunScope,
    ) -> Result<GetTaskResult, ErrorData> {
        let mut record = self.scoped_record(task_id, scope).await?;
        // A question answered by another path than `tasks/update` (the approval endpoint,
        // `codemode approve`, an MRTR retry): the task goes on.
        if record.state == TaskState::InputRequired
            && let Ok(run_id) = RunId::parse(task_id)
            && self.cm.store().has_decisions(&run_id).await.unwrap_or(false)
        {
            record.state = TaskState::Working;
            record.questions.clear();
            record.message = Some("answers received; resuming".into());
            record.updated_at_ms = self.cm.now_ms();
            if !self.cm.store().put_task(&record, None).await.map_err(store_failed)? {
                record = self.scoped_record(task_id, scope).await?;
            }
        }
        if record.state == TaskState::Working {
            self.take_and_drive(&record).await;
        }
        Ok(GetTaskResult::new(self.detailed(&record)))
    }

    /// `tasks/update` from a client in `scope`: its answers to the approval questions decide the
    /// parked calls, and the task goes on.
    pub(crate) async fn task_update(
        self: &Arc<Self>,
        task_id: &str,
        scope: &RunScope,
        responses: &rmcp::model::InputResponses,
    ) -> Result<(), ErrorData> {
        let mut record = self.scoped_record(task_id, scope).await?;
        if record.state != TaskState::InputRequired {
            // Eventually consistent (SEP-2663): answers to questions no longer asked are dropped.
            return Ok(());
        }
        let Ok(run_id) = RunId::parse(task_id) else { return Err(unknown_task()) };
        let asked: Vec<u64> = record.questions.iter().map(|q| q.request_id).collect();
        let mut answered = 0;
        for (key, answer) in responses {
            let Some(request_id) = key.strip_prefix(APPROVAL_KEY).and_then(|r| r.parse::<u64>().ok()) else {
                continue;
            };
            if !asked.contains(&request_id) {
                continue;
            }
            let decision = crate::server::decision_of(answer);
            tracing::info!(target: "codemode::approval", task = %task_id, request = request_id, ?decision, "approval decided through tasks/update");
            match self.cm.decide(&run_id, request_id, decision).await {
                Ok(()) => answered += 1,
                Err(e) => {
                    tracing::warn!(target: "codemode::approval", task = %task_id, request = request_id, error = %e.message, "cannot record the answer")
                }
            }
        }
        if answered == 0 {
            return Ok(());
        }
        record.state = TaskState::Working;
        record.questions.clear();
        record.message = Some("answers received; resuming".into());
        record.updated_at_ms = self.cm.now_ms();
        if self.cm.store().put_task(&record, None).await.map_err(store_failed)? {
            self.take_and_drive(&record).await;
        }
        Ok(())
    }

    /// `tasks/cancel` from a client in `scope`: the task becomes (and stays) cancelled, and its run
    /// is aborted with its nested calls, here or — through the record, at its next heartbeat — on
    /// the replica driving it.
    pub(crate) async fn task_cancel(&self, task_id: &str, scope: &RunScope) -> Result<(), ErrorData> {
        let mut record = self.scoped_record(task_id, scope).await?;
        if record.state.is_terminal() {
            return Ok(());
        }
        record.state = TaskState::Cancelled;
        record.message = Some("cancelled by the client".into());
        record.questions.clear();
        record.updated_at_ms = self.cm.now_ms();
        self.cm.store().put_task(&record, None).await.map_err(store_failed)?;
        self.stop_run(task_id).await;
        tracing::info!(task = %task_id, "task cancelled: its run is aborted");
        Ok(())
    }

    /// Takes over the working tasks whose driver died (their claim lapsed), so they go on without
    /// anyone polling them: called every lease by [`Gateway::sweep_tasks_forever`].
    pub(crate) async fn sweep_tasks(self: &Arc<Self>) {
        let orphans = match self.cm.store().orphaned_tasks(SWEEP_BATCH).await {
            Ok(o) => o,
            // A store without tasks, or one that is down: nothing to sweep now.
            Err(_) => return,
        };
        for id in orphans {
            if let Ok(Some(record)) = self.cm.store().task(&id).await
                && record.state == TaskState::Working
            {
                tracing::info!(task = %id, "taking over a task whose driver stopped");
                self.take_and_drive(&record).await;
            }
        }
    }

    /// Sweeps for orphaned tasks every lease while the gateway lives (see
    /// [`sweep_tasks`](Self::sweep_tasks)).
    pub(crate) async fn sweep_tasks_forever(gateway: std::sync::Weak<Gateway>) {
        loop {
            let Some(lease) = gateway.upgrade().map(|g| g.tasks.lease()) else { return };
            tokio::time::sleep(std::time::Duration::from_millis(lease.max(100))).await;
            let Some(g) = gateway.upgrade() else { return };
            if g.stopping.load(Ordering::SeqCst) {
                return;
            }
            g.sweep_tasks().await;
        }
    }

    /// Stops this process's driver of `task_id` (its `wait` is dropped) and aborts the run.
    async fn stop_run(&self, task_id: &str) {
        if let Some(token) = self.tasks.driving().get(task_id) {
            token.cancel();
        }
        if let Ok(run_id) = RunId::parse(task_id) {
            self.cm.abort(&run_id).await;
        }
    }

    /// Takes `record`'s drive claim and drives it from this process, unless this process drives it
    /// already or another process holds the claim.
    async fn take_and_drive(self: &Arc<Self>, record: &TaskRecord) {
        if self.tasks.driving().contains_key(&record.task_id) {
            return;
        }
        match self.cm.store().drive_task(&record.task_id, &self.tasks.driver, self.tasks.lease()).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(task = %record.task_id, error = %e, "cannot claim the task");
                return;
            }
        }
        let token = CancellationToken::new();
        {
            let mut driving = self.tasks.driving();
            if driving.contains_key(&record.task_id) {
                return;
            }
            driving.insert(record.task_id.clone(), token.clone());
        }
        let gateway = self.clone();
        let (task_id, scope) = (record.task_id.clone(), record.scope.clone());
        tokio::spawn(async move {
            gateway.drive(&task_id, scope, token).await;
            gateway.tasks.driving().remove(&task_id);
            if let Err(e) = gateway.cm.store().release_task(&task_id, &gateway.tasks.driver).await {
                tracing::warn!(task = %task_id, error = %e, "cannot release the task's claim");
            }
        });
    }

    /// Resumes the task's run until it ends, needs an answer, is cancelled, or this process loses
    /// the claim; writes the record after every resume.
    async fn drive(&self, task_id: &str, scope: RunScope, cancel: CancellationToken) {
        let store = self.cm.store().clone();
        let lost = CancellationToken::new();
        let heartbeat = {
            let (store, lost, cancel) = (store.clone(), lost.clone(), cancel.clone());
            let (task_id, driver, lease) = (task_id.to_string(), self.tasks.driver.clone(), self.tasks.lease());
            let cm = self.cm.clone();
            tokio::spawn(async move {
                let period = std::time::Duration::from_millis((lease / 3).max(1));
                loop {
                    tokio::time::sleep(period).await;
                    if !matches!(store.drive_task(&task_id, &driver, lease).await, Ok(true)) {
                        tracing::warn!(task = %task_id, "lost the task's claim: another process drives it");
                        lost.cancel();
                        return;
                    }
                    // A cancel answered by another replica reaches this one through the record.
                    if let Ok(Some(r)) = store.task(&task_id).await
                        && r.state == TaskState::Cancelled
                    {
                        cancel.cancel();
                        if let Ok(run_id) = RunId::parse(&task_id) {
                            cm.abort(&run_id).await;
                        }
                        return;
                    }
                }
            })
        };
        let ctx = RunContext { scope, tool_call_id: Some(format!("task:{task_id}")), ..RunContext::default() };
        let args = serde_json::json!({ "runId": task_id });
        let mut resumes = 0u64;
        loop {
            if lost.is_cancelled() || cancel.is_cancelled() {
                break;
            }
            let ledger = self.console.get();
            let tracked = match ledger {
                Some(l) => Some(l.begin(&ctx, "wait", &args).await),
                None => None,
            };
            let started = std::time::Instant::now();
            let mut result = tokio::select! {
                r = self.cm.wait_json_observed(&ctx, &args, None) => r,
                // Dropping the `wait` aborts the run and its nested calls.
                () = cancel.cancelled() => break,
            };
            if let (Some(l), Some(t)) = (ledger, tracked) {
                l.end(t, "wait", &result, started.elapsed());
            }
            if busy(&result) {
                // A dead driver's checkout: its lease ends, then the run is free.
                tokio::select! {
                    () = tokio::time::sleep(std::time::Duration::from_millis(POLL_INTERVAL_MS)) => continue,
                    () = cancel.cancelled() => break,
                }
            }
            if taken_over(&result) {
                tracing::warn!(task = %task_id, "the run was taken over by another replica");
                break;
            }
            resumes += 1;
            let mut record = match store.task(task_id).await {
                Ok(Some(r)) if !r.state.is_terminal() => r,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(task = %task_id, error = %e, "cannot read the task's record");
                    break;
                }
            };
            let waiting = matches!(result, CodeModeResult::Waiting { .. });
            if waiting {
                self.apply_waiting(&mut record, &mut result, resumes);
            } else {
                self.apply_final(&mut record, result);
            }
            match store.put_task(&record, Some(&self.tasks.driver)).await {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!(task = %task_id, error = %e, "cannot write the task's record");
                    break;
                }
            }
            if record.state != TaskState::Working {
                tracing::info!(task = %task_id, state = record.state.as_str(), resumes, "task driven to {}", record.state.as_str());
                break;
            }
        }
        heartbeat.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_of_known_instants() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(iso8601(1_796_428_800_000), "2026-12-05T00:00:00.000Z");
        assert_eq!(iso8601(1_796_601_599_999), "2026-12-06T23:59:59.999Z");
    }

    #[test]
    fn status_names_pending_calls_and_is_bounded() {
        let pending: Vec<codemode_core::result::CodeModePendingToolCall> = (0..100)
            .map(|i| codemode_core::result::CodeModePendingToolCall {
                request_id: i,
                kind: PendingCallKind::Call,
                tool_id: "plugin:demo:demo_sleep".into(),
                elapsed_ms: 5,
                question: None,
            })
            .collect();
        let r = CodeModeResult::Waiting {
            run_id: "cm_x".into(),
            reason: codemode_core::result::WaitReason::PendingTools,
            pending_tool_calls: pending[..1].to_vec(),
            output: Vec::new(),
            rerunnable: false,
            telemetry: Default::default(),
        };
        assert_eq!(
            status_of(&r, 2),
            "waiting on 1 call: plugin:demo:demo_sleep (request 0, running, 5 ms); 2 resumes so far"
        );
        let many = CodeModeResult::Waiting {
            run_id: "cm_x".into(),
            reason: codemode_core::result::WaitReason::PendingTools,
            pending_tool_calls: pending,
            output: Vec::new(),
            rerunnable: false,
            telemetry: Default::default(),
        };
        let text = status_of(&many, 0);
        assert!(text.starts_with("waiting on 100 calls"), "{text}");
        assert_eq!(text.chars().count(), MAX_STATUS_CHARS + 1);
    }
}
