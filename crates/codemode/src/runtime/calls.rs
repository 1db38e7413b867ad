//! Nested calls of a run: started on the host's executor (polled once inline, else spawned),
//! collected as they settle, and handed over between processes through the snapshot store.

use super::gates::{self, Approval, AtGate, CallLog, InFlight, resolve_tool, tool_failure};
use super::run::Run;
use super::{Inflight, Inner, MSG_PARKED_TOO_LATE, RECORDED_POLL, guest_error};
use codemode_catalog::CatalogTool;
use codemode_core::approval::ApprovalDecision;
use codemode_core::engine::{Delivery, GuestError, RequestId};
use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::executor::{NestedToolCall, RunEvent, ToolError, ToolErrorKind};
use codemode_core::guest::{CallMode, GuestRequest};
use codemode_core::scope::RunId;
use codemode_core::store::{AskedCall, CallIssue, PendingRequest, SnapshotStore};
use codemode_core::trajectory::CallOutcome;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::task::AbortHandle;

/// How a started call ended.
pub(super) enum CallEnd {
    /// It settled with this outcome (for the guest).
    Settled(Result<Value, GuestError>),
    /// A hook or the approver refused it (for the guest, a failure like any other).
    Denied(GuestError),
    /// It is gated and nobody decided yet: parked until a decision is recorded.
    Parked,
    /// Another process ran it and died before recording its result, and the tool is read-only:
    /// it is to be issued again (by whoever drives the run).
    Reissue,
    /// Its tool asked a question (`ToolErrorKind::InputRequired`): parked until a human answers,
    /// then continued with the answer.
    Asked(AskedCall),
}

/// A call that stopped running.
pub(super) enum Finished {
    /// Its result, to deliver.
    Settled(Delivery),
    /// It was refused (hook, approver, human, sandbox policy); the delivery is the failure.
    Denied(Delivery),
    /// It was parked for approval (see [`CallEnd::Parked`]).
    Parked(RequestId),
    /// It is to be issued again (see [`CallEnd::Reissue`]).
    Reissue(RequestId),
    /// Its tool asked a question (see [`CallEnd::Asked`]).
    Asked(RequestId, AskedCall),
}

/// How long a guest worker waiting for a call's answer (an inline wait, see
/// [`crate::CodeModeBuilder::inline_wait`]) spins before it parks. On a virtual machine the wake-up
/// of a parked thread is an inter-processor interrupt through the hypervisor (~25 µs here), more
/// than a quick host function's whole round trip; spinning costs at most this much of a core that
/// is idle ([`codemode_workers::core_idle`]) per call that answers later.
const INLINE_SPIN: Duration = Duration::from_micros(100);

/// The nested calls of one run that are still executing on the host.
pub(super) struct NestedCalls {
    tx: mpsc::Sender<(RequestId, CallEnd)>,
    rx: mpsc::Receiver<(RequestId, CallEnd)>,
    running: HashMap<RequestId, AbortHandle>,
    /// The task waiting for results another process records (see [`Self::watch_recorded`]) and
    /// the requests it waits for.
    watcher: Option<(tokio::task::JoinHandle<()>, Vec<RequestId>)>,
}

impl NestedCalls {
    pub(super) fn new() -> Self {
        let (tx, rx) = mpsc::channel();
        NestedCalls { tx, rx, running: HashMap::new(), watcher: None }
    }

    pub(super) fn running(&self) -> usize {
        self.running.len()
    }

    /// Starts a call: polled inline (a call that is ready at once is returned without any thread
    /// switch; with `inline_wait`, a call that becomes ready within that time wakes this thread
    /// directly and is returned too), otherwise handed to the tokio runtime, its result arriving on
    /// the channel later.
    pub(super) fn start(
        &mut self,
        rt: &Handle,
        id: RequestId,
        inline_wait: Duration,
        fut: impl Future<Output = CallEnd> + Send + 'static,
    ) -> Option<Finished> {
        let mut fut = Box::pin(fut);
        let _in_runtime = rt.enter();
        // Only a guest worker waits (never a runtime thread); the default (no wait) asks nothing.
        if inline_wait.is_zero() || std::thread::current().name() != Some(codemode_workers::THREAD_NAME) {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            if let Poll::Ready(end) = fut.as_mut().poll(&mut cx) {
                return Some(finished(id, end));
            }
        } else {
            let woken = Arc::new(ThreadWaker { thread: std::thread::current(), woken: AtomicBool::new(false) });
            let waker = std::task::Waker::from(woken.clone());
            let mut cx = Context::from_waker(&waker);
            let deadline = Instant::now() + inline_wait;
            loop {
                if let Poll::Ready(end) = fut.as_mut().poll(&mut cx) {
                    return Some(finished(id, end));
                }
                // Parked until the call's future is woken (or spuriously), at most to the deadline;
                // first spinning up to `INLINE_SPIN` while a core is idle: an answer that comes
                // within it needs no wake-up of this thread.
                let spin_until = (Instant::now() + INLINE_SPIN).min(deadline);
                loop {
                    if woken.woken.swap(false, Ordering::AcqRel) {
                        break;
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    if now < spin_until && codemode_workers::core_idle() {
                        std::hint::spin_loop();
                        continue;
                    }
                    std::thread::park_timeout(deadline - now);
                }
                if Instant::now() >= deadline && !woken.woken.load(Ordering::Acquire) {
                    break;
                }
            }
        }
        let tx = self.tx.clone();
        let handle = rt.spawn(async move {
            let end = fut.await;
            let _ = tx.send((id, end));
        });
        self.running.insert(id, handle.abort_handle());
        None
    }

    /// Waits for results another live process records in the store for calls it started (see
    /// [`SnapshotStore::claim_calls`]). Each id counts as running until its result arrives. If the
    /// claim goes away with results still missing (that process died), those calls fail.
    pub(super) fn watch_recorded(
        &mut self,
        rt: &Handle,
        store: Arc<dyn SnapshotStore>,
        run_id: RunId,
        calls: Vec<RequestId>,
    ) {
        if calls.is_empty() {
            return;
        }
        let tx = self.tx.clone();
        let mut missing: std::collections::BTreeSet<RequestId> = calls.iter().copied().collect();
        let handle = rt.spawn(async move {
            loop {
                let claimed = store.calls_claimed(&run_id).await;
                for d in store.take_results(&run_id).await.unwrap_or_default() {
                    if missing.remove(&d.id) {
                        let _ = tx.send((d.id, CallEnd::Settled(d.outcome)));
                    }
                }
                if missing.is_empty() {
                    return;
                }
                if !claimed {
                    // Lost with their process: the driver decides, from the tools' current
                    // definitions, which run again (read-only) and which fail
                    // (`Inner::start_reissues`).
                    for id in std::mem::take(&mut missing) {
                        let _ = tx.send((id, CallEnd::Reissue));
                    }
                    return;
                }
                tokio::time::sleep(RECORDED_POLL).await;
            }
        });
        let ids: Vec<RequestId> = calls;
        for &id in &ids {
            self.running.insert(id, handle.abort_handle());
        }
        self.watcher = Some((handle, ids));
    }

    /// Stops waiting for another process's results (the run suspends again: the next `wait` picks
    /// them up from the store) and returns those the watcher had already taken out of the store,
    /// so they are stored with the run instead of being lost. Afterwards only calls this process
    /// runs itself count as running.
    pub(super) fn stop_watching(&mut self, rt: &Handle) -> Vec<Finished> {
        let Some((watcher, watched)) = self.watcher.take() else { return Vec::new() };
        watcher.abort();
        // Wait until it has really stopped: an abort lands at its next await, after a poll that may
        // still be taking results out of the store.
        let _ = rt.block_on(watcher);
        for id in watched {
            self.running.remove(&id);
        }
        std::iter::from_fn(|| self.try_next()).collect()
    }

    pub(super) fn try_next(&mut self) -> Option<Finished> {
        let (id, end) = self.rx.try_recv().ok()?;
        self.running.remove(&id);
        Some(finished(id, end))
    }

    /// The next call to settle or park, waiting at most until `deadline` (with this guest worker's
    /// place handed to queued runs meanwhile).
    pub(super) fn next_until(&mut self, deadline: Instant) -> Option<Finished> {
        if let Some(done) = self.try_next() {
            return Some(done);
        }
        let rx = &self.rx;
        let (id, end) =
            codemode_workers::blocking(|| rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok())?;
        self.running.remove(&id);
        Some(finished(id, end))
    }

    /// Lets the calls run on without this handle: they are no longer aborted when it drops (on a
    /// fleet store each records its own result in the call log, for whichever replica resumes the
    /// run).
    pub(super) fn detach(mut self) {
        self.running.clear();
        if let Some((watcher, _)) = self.watcher.take() {
            watcher.abort();
        }
    }

    pub(super) fn abort_all(&mut self) {
        for (_, h) in self.running.drain() {
            h.abort();
        }
    }
}

fn finished(id: RequestId, end: CallEnd) -> Finished {
    match end {
        CallEnd::Settled(outcome) => Finished::Settled(Delivery { id, outcome }),
        CallEnd::Denied(e) => Finished::Denied(Delivery { id, outcome: Err(e) }),
        CallEnd::Parked => Finished::Parked(id),
        CallEnd::Reissue => Finished::Reissue(id),
        CallEnd::Asked(asked) => Finished::Asked(id, asked),
    }
}

impl Drop for NestedCalls {
    fn drop(&mut self) {
        self.abort_all();
    }
}

/// A nested call about to start: the request, the catalog tool it resolved to, and how its result
/// reaches the guest.
pub(super) struct CallSpec {
    pub(super) id: RequestId,
    pub(super) request: GuestRequest,
    pub(super) tool: Arc<CatalogTool>,
    pub(super) mode: CallMode,
    /// Why it starts now.
    pub(super) origin: CallOrigin,
}

/// Wakes the guest worker that waits for a call inline (see [`NestedCalls::start`]). A wake that
/// comes after the call was handed to the runtime only unparks the thread spuriously.
struct ThreadWaker {
    thread: std::thread::Thread,
    woken: AtomicBool,
}

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// Why a nested call starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CallOrigin {
    /// The guest made it.
    New,
    /// A human approved it (it was parked): the approval gate lets it through.
    Approved,
    /// A resuming process issues it again: the process running it was lost (tools read-only by
    /// their current definition only).
    Reissued,
    /// A human answered the question the call's tool asked (`true`: accept): the call is continued
    /// with the answer (the approval gate lets it through: the human just decided).
    Answered(bool),
}

impl Inner {
    /// A run resumed in a process that did not start its outstanding calls: results another process
    /// recorded are delivered; calls a live process still runs are awaited (their results will be
    /// recorded); the rest are lost and handled by [`reissue_lost_calls`](Self::reissue_lost_calls).
    pub(super) fn adopt_calls_from_elsewhere(&self, rt: &Handle, run: &mut Run) -> Result<(), CodeModeError> {
        // Nothing to adopt without outstanding tool calls (a run suspended by `yield_control`, or
        // on parked calls only): no store round trips.
        if !run.pending.values().any(|p| p.kind().is_tool_call() && !p.awaiting_approval) {
            return Ok(());
        }
        let claimed = rt.block_on(self.store.calls_claimed(&run.id));
        let recorded = rt.block_on(self.store.take_results(&run.id)).map_err(|e| e.to_code_mode_error())?;
        for d in recorded {
            if run.pending.contains_key(&d.id) {
                run.accept(Finished::Settled(d));
            }
        }
        if claimed {
            let outstanding: Vec<RequestId> = run
                .pending
                .values()
                .filter(|p| p.kind().is_tool_call() && !p.awaiting_approval)
                .map(|p| p.id)
                .collect();
            run.calls.watch_recorded(rt, self.store.clone(), run.id.clone(), outstanding);
            return Ok(());
        }
        self.reissue_lost_calls(rt, run)
    }

    /// Keeps this process's nested calls of suspended runs to completion and records their results
    /// in the store, for a process that will resume the runs (used before a short-lived process
    /// such as `codemode exec` exits). Each run's calls are awaited at most until the run expires.
    /// Returns how many results were recorded.
    pub(crate) fn finish_inflight(&self, rt: &Handle) -> usize {
        if self.store.accepts_live() {
            // A store for live VMs keeps runs in this process: nobody elsewhere can resume them.
            return 0;
        }
        let runs: Vec<(RunId, Inflight)> = self.inflight().drain().collect();
        let mut recorded = 0;
        for (id, mut inflight) in runs {
            let remaining_ms = inflight.expires_at_ms.saturating_sub(self.now_ms());
            let deadline = Instant::now() + Duration::from_millis(remaining_ms);
            while inflight.calls.running() > 0 {
                let d = match inflight.calls.next_until(deadline) {
                    Some(Finished::Settled(d) | Finished::Denied(d)) => d,
                    // The approver gave no answer in time, and this process is ending: the call
                    // cannot be parked in a run that is already stored. It fails; the cell may
                    // make it again.
                    Some(Finished::Parked(request) | Finished::Asked(request, _)) => Delivery {
                        id: request,
                        outcome: Err(guest_error(CodeModeErrorCode::NestedToolFailed, MSG_PARKED_TOO_LATE)),
                    },
                    // Only a watcher of another process's calls asks for a re-issue, and a stored
                    // run has none (the next `wait` re-issues from the stored pending call).
                    Some(Finished::Reissue(_)) => continue,
                    None => break,
                };
                match rt.block_on(self.store.record_result(&id, &d)) {
                    Ok(true) => recorded += 1,
                    // The run is gone (settled, aborted, expired): nobody will collect its results.
                    Ok(false) => break,
                    Err(e) => tracing::warn!(run = %id, error = %e, "cannot record a nested call's result"),
                }
            }
            // Dropping `inflight` aborts what is still running and releases the claim.
        }
        recorded
    }

    /// Whether this process holds nested calls of suspended runs.
    pub(crate) fn has_inflight_calls(&self) -> bool {
        self.inflight().values().any(|r| r.calls.running() > 0)
    }

    /// After a resume in a process that did not issue them, outstanding calls are gone. A call of a
    /// tool whose current definition in the run's catalog is read-only is issued again (through
    /// every gate); any other fails the run, since its side effect may or may not have happened —
    /// whatever the stored run says the tool was. A result is never delivered twice: the old call's
    /// result died with its process.
    pub(super) fn reissue_lost_calls(&self, rt: &Handle, run: &mut Run) -> Result<(), CodeModeError> {
        let lost: Vec<PendingRequest> =
            run.pending.values().filter(|p| p.kind().is_tool_call() && !p.awaiting_approval).cloned().collect();
        // A lost call that had become a task on its server (noted in the call log) is continued,
        // whatever the tool: its server still runs it, once.
        let noted = if lost.is_empty() { Vec::new() } else { self.noted_calls(rt, run) };
        let mut again = Vec::with_capacity(lost.len());
        for p in lost {
            match resolve_tool(&run.catalog, &p.request) {
                Ok((tool, mode)) if tool.def.read_only || noted.contains(&p.id) => again.push((p, tool, mode)),
                _ => {
                    return Err(CodeModeError::new(
                        CodeModeErrorCode::NestedToolFailed,
                        format!(
                            "nested call to `{}` was still running when the process that suspended this run ended; the \
                             tool is not read-only, so it is not repeated (its side effect may or may not have happened)",
                            p.tool_id.as_deref().unwrap_or("?")
                        ),
                    ));
                }
            }
        }
        for (p, tool, mode) in again {
            self.start_call(
                rt,
                run,
                CallSpec { id: p.id, request: p.request, tool, mode, origin: CallOrigin::Reissued },
            )?;
        }
        Ok(())
    }

    /// The run's calls that became tasks on their servers (noted in a fleet's call log): lost with
    /// the replica that ran them, they are continued (see `CallStart::Resume`), not failed.
    fn noted_calls(&self, rt: &Handle, run: &Run) -> Vec<RequestId> {
        match rt.block_on(self.store.call_notes(&run.id)) {
            Ok(notes) => notes.into_iter().map(|(id, _)| id).collect(),
            Err(e) => {
                tracing::warn!(run = %run.id, error = %e, "cannot read the call log's task notes");
                Vec::new()
            }
        }
    }

    /// Starts a nested call of a catalog tool on the host's executor, through the gates (`gates.rs`):
    /// those before the start here, the in-flight stages on the executor. A refused call is answered
    /// at once; a gate that fails the run returns the error.
    pub(super) fn start_call(&self, rt: &Handle, run: &mut Run, spec: CallSpec) -> Result<(), CodeModeError> {
        let CallSpec { id, request, tool, mode, origin } = spec;
        let input = request.tool_input().cloned().unwrap_or_else(|| json!({}));
        if !gates::pass_before_start(self, run, &AtGate { id, tool: &tool, input: &input })? {
            return Ok(());
        }
        let approved = matches!(origin, CallOrigin::Approved | CallOrigin::Answered(_));
        // A call continued with a human's answer: what continues it (its tool's note).
        let asked = match origin {
            CallOrigin::Answered(_) => run.pending.get(&id).and_then(|p| p.asked.clone()),
            _ => None,
        };
        let raw = mode == CallMode::Raw;
        // The guest reports engine lines of the wrapped (or transpiled) cell: map to the model's own.
        let cell_line = request.call_line().map(|l| run.positions.map(l, None).0);
        run.pending.insert(PendingRequest {
            id,
            tool_id: Some(tool.id.clone()),
            request,
            read_only: tool.def.read_only,
            issued_at_ms: self.now_ms(),
            awaiting_approval: false,
            asked: None,
        });
        run.emit(|| RunEvent::CallStarted { run_id: run.id.to_string(), request_id: id, tool_id: tool.id.to_string() });
        if run.traced() {
            let outcome = match origin {
                CallOrigin::New => CallOutcome::Issued,
                CallOrigin::Approved | CallOrigin::Answered(_) => CallOutcome::Approved,
                CallOrigin::Reissued => CallOutcome::Reissued,
            };
            let issued = run.pending.get(&id).map(|p| p.issued_at_ms);
            run.entry(id, &tool.id, outcome, issued, Some(&input), None, None);
        }
        let progress = run.observer.clone().map(|observer| {
            let (run_id, tool_id) = (run.id.to_string(), tool.id.clone());
            codemode_core::executor::ProgressSink::new(move |message| {
                observer.on_event(RunEvent::CallProgress {
                    run_id: run_id.clone(),
                    request_id: id,
                    tool_id: tool_id.to_string(),
                    message,
                })
            })
        });
        // On a fleet, a call that becomes a task on its server is noted in the call log, so the
        // replica that resumes the run after this one died continues that task.
        let task_note = self.store.fleet().then(|| {
            let (store, run_id, handle) = (self.store.clone(), run.id.clone(), rt.clone());
            let (probe_store, probe_run) = (store.clone(), run_id.clone());
            codemode_core::executor::TaskNoteSink::new(move |note| {
                let (store, run_id) = (store.clone(), run_id.clone());
                handle.spawn(async move {
                    match store.note_call(&run_id, id, &note).await {
                        Ok(true) => {}
                        Ok(false) => tracing::warn!(run = %run_id, request = id, "the call's task could not be noted"),
                        Err(e) => {
                            tracing::warn!(run = %run_id, request = id, error = %e, "cannot note the call's task")
                        }
                    }
                });
            })
            // A fleet's suspended run lets its calls run on detached: whether the call is still
            // wanted (its run not aborted elsewhere, not taken over) is asked of the call log.
            .with_owner(move || {
                let (store, run_id) = (probe_store.clone(), probe_run.clone());
                async move { store.call_owner(&run_id, id).await.unwrap_or(codemode_core::store::CallOwner::Mine) }
            })
        });
        let nested = NestedToolCall {
            run_id: run.id.clone(),
            request_id: id,
            tool_id: tool.id.clone(),
            tool: tool.def.clone(),
            input,
            context: run.context.clone(),
            progress,
            task_note,
            resume: asked.map(|a| a.resume),
            answer: match origin {
                CallOrigin::Answered(a) => Some(a),
                _ => None,
            },
        };
        let approval = Approval {
            policy_reason: self.approvals.reason(&tool.def),
            approved,
            approver: self.approver.clone(),
            timeout: Duration::from_millis(self.approvals.timeout_ms),
            cell_line,
        };
        // Boxed: a fleet store's call log only, and inline it made every call's future larger.
        let log = self.store.fleet().then(|| {
            run.logged = true;
            Box::new(CallLog {
                store: self.store.clone(),
                run_id: run.id.clone(),
                issue: CallIssue {
                    request_id: id,
                    tool_id: tool.id.to_string(),
                    input_digest: codemode_snapshot::input_digest(&nested.input),
                    read_only: tool.def.read_only,
                },
                stored: run.stored,
                raw: Default::default(),
            })
        });
        let executor = self.executor.clone();
        let hooks = self.hooks.clone();
        let observed = self.observed.clone();
        // The resolved tool moves into the call's future, its id with it (no copy of the id).
        let contract = tool;
        // One span per nested call (exported by `codemode::otel` when enabled; a disabled callsite
        // check otherwise). Its parent is the `exec` / `wait` span driving the run.
        let span = tracing::info_span!(
            target: "codemode",
            "codemode.nested_call",
            run_id = %run.id,
            request_id = id,
            tool_id = %contract.id,
            outcome = tracing::field::Empty,
        );
        let call_span = span.clone();
        let call = async move {
            let outcome =
                match gates::run_in_flight(&hooks, executor.as_ref(), nested, &approval, &contract, log.as_deref())
                    .await
                {
                    InFlight::Parked => return CallEnd::Parked,
                    InFlight::Logged(outcome) => return CallEnd::Settled(outcome),
                    InFlight::Done(outcome) => outcome,
                };
            // Learn the result's shape (every tool's, also one that declares its output: what it
            // returns is compared with the declaration; for MCP tools, the unwrapped value `.value`
            // returns).
            // Recorded from a borrow: cloning each result only to read its shape cost ~0.9k
            // instructions a call (the copy and its drop).
            if let (Some(observed), Ok(r)) = (&observed, &outcome) {
                if contract.def.source != codemode_core::ToolSource::Mcp {
                    observed.record(&contract.id, &contract.def, &r.details);
                } else if let Ok(v) = codemode_core::guest::unwrap_mcp_result(&r.details) {
                    observed.record(&contract.id, &contract.def, &v);
                }
            }
            let end = match outcome {
                Ok(r) if raw => {
                    let content = if r.content.is_empty() {
                        vec![json!({ "type": "text", "text": r.details.to_string() })]
                    } else {
                        r.content
                    };
                    CallEnd::Settled(Ok(json!({ "details": r.details, "content": content })))
                }
                Ok(r) if mode == CallMode::McpValue => match codemode_core::guest::unwrap_mcp_result(&r.details) {
                    Ok(v) => CallEnd::Settled(Ok(v)),
                    Err(e) => CallEnd::Settled(Err(tool_failure(&contract.id, &e.0))),
                },
                Ok(r) => CallEnd::Settled(Ok(r.details)),
                Err(e) if e.kind == ToolErrorKind::Denied => CallEnd::Denied(tool_failure(&contract.id, &e.message)),
                Err(ToolError { kind: ToolErrorKind::InputRequired, message, resume: Some(resume) }) => {
                    CallEnd::Asked(AskedCall {
                        question: codemode_core::text::for_display(&message).into_owned(),
                        resume,
                    })
                }
                Err(e) => CallEnd::Settled(Err(tool_failure(&contract.id, &e.message))),
            };
            if let Some(log) = &log {
                match &end {
                    // Boxed (fleet stores only): kept inline, the store's round trip made every
                    // call's future larger.
                    CallEnd::Settled(outcome) => Box::pin(log.finish(outcome)).await,
                    CallEnd::Denied(e) => Box::pin(log.finish(&Err(e.clone()))).await,
                    CallEnd::Parked | CallEnd::Reissue | CallEnd::Asked(_) => {}
                }
            }
            if !call_span.is_disabled() {
                call_span.record(
                    "outcome",
                    match &end {
                        CallEnd::Settled(Ok(_)) => "completed",
                        CallEnd::Denied(_) => "denied",
                        _ => "failed",
                    },
                );
            }
            end
        };
        let finished = run.calls.start(rt, id, self.inline_wait, tracing::Instrument::instrument(call, span));
        if let Some(f) = finished {
            run.accept(f);
        }
        Ok(())
    }

    /// Handles the calls a watcher found lost with the process that ran them (see
    /// [`CallEnd::Reissue`]): a call of a tool whose current definition is read-only is issued
    /// again (through every gate); any other fails in the guest, saying it was lost.
    pub(super) fn start_reissues(&self, rt: &Handle, run: &mut Run) -> Result<(), CodeModeError> {
        let lost = std::mem::take(&mut run.reissue);
        if lost.is_empty() {
            return Ok(());
        }
        let noted = self.noted_calls(rt, run);
        for id in lost {
            let Some(p) = run.pending.get(&id).cloned() else { continue };
            match resolve_tool(&run.catalog, &p.request) {
                Ok((tool, mode)) if tool.def.read_only || noted.contains(&id) => self.start_call(
                    rt,
                    run,
                    CallSpec { id, request: p.request, tool, mode, origin: CallOrigin::Reissued },
                )?,
                _ => {
                    let tool_id = p.tool_id.as_deref().unwrap_or("?");
                    let message = format!(
                        "nested call to `{tool_id}` was lost: the process running it ended before it finished (its side \
                         effect may or may not have happened); call it again if that is safe"
                    );
                    run.accept(Finished::Settled(Delivery {
                        id,
                        outcome: Err(guest_error(CodeModeErrorCode::NestedToolFailed, message)),
                    }));
                }
            }
        }
        Ok(())
    }

    /// Applies the decisions recorded for the run's parked calls: an approved call starts (past the
    /// gate), a denied one rejects in the guest. Decisions on calls that are not parked are
    /// ignored.
    pub(super) fn apply_decisions(&self, rt: &Handle, run: &mut Run) -> Result<(), CodeModeError> {
        let decisions = rt.block_on(self.store.take_decisions(&run.id)).map_err(|e| e.to_code_mode_error())?;
        for (id, decision) in decisions {
            let Some(p) = run.pending.get(&id).filter(|p| p.awaiting_approval).cloned() else {
                tracing::warn!(run = %run.id, request = id, "ignoring an approval decision for a call that is not parked");
                continue;
            };
            let tool_id = p.tool_id.clone().unwrap_or_default();
            tracing::info!(target: "codemode::approval", run = %run.id, request = id, tool = %tool_id, ?decision, "approval decision applied");
            // A call whose tool asked a question is continued with the answer either way: its tool
            // decides what a declined question means.
            if p.asked.is_some() {
                let answer = matches!(decision, ApprovalDecision::Approve);
                match resolve_tool(&run.catalog, &p.request) {
                    Ok((tool, mode)) => self.start_call(
                        rt,
                        run,
                        CallSpec { id, request: p.request, tool, mode, origin: CallOrigin::Answered(answer) },
                    )?,
                    Err((_, err)) => {
                        run.pending.remove(&id);
                        run.ready.push(Delivery { id, outcome: Err(err) });
                    }
                }
                continue;
            }
            match decision {
                ApprovalDecision::Approve => match resolve_tool(&run.catalog, &p.request) {
                    Ok((tool, mode)) => self.start_call(
                        rt,
                        run,
                        CallSpec { id, request: p.request, tool, mode, origin: CallOrigin::Approved },
                    )?,
                    Err((_, err)) => {
                        run.pending.remove(&id);
                        run.ready.push(Delivery { id, outcome: Err(err) });
                    }
                },
                ApprovalDecision::Deny { reason } => {
                    let outcome = Err(tool_failure(&tool_id, &crate::tools::denial_message(&reason)));
                    run.accept(Finished::Denied(Delivery { id, outcome }));
                }
            }
        }
        Ok(())
    }
}
