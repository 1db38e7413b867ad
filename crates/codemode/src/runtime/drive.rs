//! The drive loop of one `exec` / `wait` call: step the guest, answer its requests, deliver settled
//! nested calls, until the cell completes, fails, suspends or is cancelled; and the budget of the
//! call ([`Call`]: deadline, output, cancel flag).

use super::calls::Finished;
use super::run::Run;
use super::{Inner, MSG_RUN_LOST, MSG_STALLED, dispose, failure_error, inline};
use codemode_bridge::driver::TIMEOUT_MESSAGE;
use codemode_core::engine::{DriveInput, DriveOutcome, GuestInstance};
use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::executor::{RunEvent, RunObserver};
use codemode_core::result::{CodeModeOutput, CodeModeResult, WaitReason};
use codemode_core::telemetry::CodeModeTelemetry;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

/// Budget and output of one `exec` / `wait` call.
pub(super) struct Call {
    pub(super) started: Instant,
    pub(super) deadline: Instant,
    pub(super) output: Vec<CodeModeOutput>,
    pub(super) output_used: u64,
    /// Set when the call is cancelled: its caller went away, or the run was aborted.
    pub(super) cancel: Arc<AtomicBool>,
}

/// What an `exec` / `wait` call brings besides its input: its cancel flag and who watches it.
pub(crate) struct CallHandles {
    pub(crate) cancel: Arc<AtomicBool>,
    pub(crate) observer: Option<Arc<dyn RunObserver>>,
}

impl Call {
    pub(super) fn new(timeout_ms: u64, cancel: Arc<AtomicBool>) -> Self {
        let started = Instant::now();
        Call {
            started,
            deadline: started + Duration::from_millis(timeout_ms),
            output: Vec::new(),
            output_used: 0,
            cancel,
        }
    }

    pub(super) fn cancelled(&self) -> bool {
        self.cancel.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// How often a call waiting on nested calls looks at its cancel flag.
pub(super) const CANCEL_POLL: Duration = Duration::from_millis(20);

/// What waiting for the next settled call found.
pub(super) enum Next {
    Finished(Finished),
    Deadline,
    Cancelled,
}

/// How [`Inner::drive_steps`] ended.
pub(super) enum StepsEnd {
    /// The cell returned this value and nothing is outstanding.
    Complete(Value),
    /// The run fails.
    Fail(CodeModeError),
    /// The run is to be snapshotted and stored.
    Suspend(WaitReason),
    /// The call was cancelled: the run is aborted.
    Abort,
}

/// Waits until a nested call settles or parks, `until` passes, or the call is cancelled (looked at
/// every [`CANCEL_POLL`]).
pub(super) fn next_settled(run: &mut Run, call: &Call, until: Instant) -> Next {
    loop {
        if call.cancelled() {
            return Next::Cancelled;
        }
        let now = Instant::now();
        if now >= until {
            return Next::Deadline;
        }
        if let Some(f) = run.calls.next_until((now + CANCEL_POLL).min(until)) {
            return Next::Finished(f);
        }
    }
}

impl Inner {
    pub(super) fn drive_loop(
        &self,
        rt: &Handle,
        run: Run,
        mut instance: Box<dyn GuestInstance>,
        mut call: Call,
    ) -> CodeModeResult {
        let (run, end) = match self.drive_steps(rt, run, instance.as_mut(), &mut call) {
            Ok(driven) => driven,
            Err(lost) => {
                // Never expected (see `InlineAnswers::take_run`): the run's state is gone, so
                // there is nothing to store or release; the call fails rather than hang.
                dispose(instance);
                let output = std::mem::take(&mut call.output);
                return CodeModeResult::failed(lost, output, CodeModeTelemetry::default());
            }
        };
        match end {
            StepsEnd::Abort => {
                dispose(instance);
                self.aborted(rt, run, call)
            }
            StepsEnd::Suspend(reason) => self.suspend(rt, run, instance, call, reason),
            StepsEnd::Complete(value) => {
                dispose(instance);
                self.complete(rt, run, call, value)
            }
            StepsEnd::Fail(err) => {
                dispose(instance);
                self.fail(rt, run, call, err)
            }
        }
    }

    /// Drives the guest until it completes, fails, yields, or waits past the deadline.
    ///
    /// The run is handed back with how the steps ended; `Err` only if a step's answerer did not
    /// give it back (never expected).
    pub(super) fn drive_steps(
        &self,
        rt: &Handle,
        mut run: Run,
        instance: &mut dyn GuestInstance,
        call: &mut Call,
    ) -> Result<(Run, StepsEnd), CodeModeError> {
        let end = |run: Run, end: StepsEnd| Ok((run, end));
        let max_out = self.config.max_output_bytes;
        let mut completed: Option<Value> = None;
        // The answerer of every step of this call; the run is lent to it while the guest runs
        // (see `inline`).
        let answers =
            self.me.upgrade().map(|me| Arc::new(inline::InlineAnswers::new(me, rt, call.deadline, &call.cancel)));
        loop {
            if call.cancelled() {
                return end(run, StepsEnd::Abort);
            }
            let mut input = DriveInput {
                deliveries: std::mem::take(&mut run.ready),
                deadline: call.deadline,
                output_budget: max_out.saturating_sub(call.output_used),
                cancel: Some(call.cancel.clone()),
                boot_source: Some(run.source.clone()),
                answerer: None,
            };
            let (driven, back) = match &answers {
                Some(answers) => {
                    answers.lend(run);
                    input.answerer = Some(answers.clone());
                    let driven = instance.drive(input);
                    (driven, answers.take_run())
                }
                None => (instance.drive(input), Some(run)),
            };
            run = match back {
                Some(run) => run,
                None => return Err(CodeModeError::new(CodeModeErrorCode::InternalError, MSG_RUN_LOST)),
            };
            let report = match driven {
                Ok(report) => report,
                Err(e) => return end(run, StepsEnd::Fail(CodeModeError::new(e.code(), e.to_string()))),
            };
            // Interrupted because the run was aborted, not because time ran out.
            if call.cancelled() {
                return end(run, StepsEnd::Abort);
            }
            for item in report.output {
                call.output_used += item.cost() as u64;
                run.emit(|| RunEvent::Output { run_id: run.id.to_string(), item: item.clone() });
                call.output.push(item);
            }
            match report.outcome {
                DriveOutcome::Failed(f) => return end(run, StepsEnd::Fail(failure_error(f))),
                DriveOutcome::Completed(v) => completed = Some(v),
                DriveOutcome::Pending => {}
            }
            let mut yielded = false;
            for req in report.requests {
                match self.handle_request(rt, &mut run, req) {
                    Ok(y) => yielded |= y,
                    Err(e) => return end(run, StepsEnd::Fail(e)),
                }
            }
            // Loop-detection warnings are output the model sees (contract §22).
            for text in std::mem::take(&mut run.loop_warnings) {
                let item = CodeModeOutput::Text { text };
                call.output_used += item.cost() as u64;
                run.emit(|| RunEvent::Output { run_id: run.id.to_string(), item: item.clone() });
                call.output.push(item);
            }
            run.collect_finished();
            if let Err(e) = self.start_reissues(rt, &mut run) {
                return end(run, StepsEnd::Fail(e));
            }
            // A parked call is outstanding like a running one: the run completes only once it has
            // been decided (and, if approved, has run).
            let outstanding = run.calls.running() + run.parked();
            if completed.is_some() && outstanding == 0 && run.ready.is_empty() {
                return end(run, StepsEnd::Complete(completed.take().unwrap_or(Value::Null)));
            }
            if yielded {
                return end(run, StepsEnd::Suspend(WaitReason::Yield));
            }
            if !run.ready.is_empty() {
                if Instant::now() < call.deadline {
                    continue;
                }
                if outstanding == 0 {
                    // Only instant answers are left (searches, lookups, calls that returned at
                    // once): the cell was busy, not waiting on slow tools. A `waiting` result must
                    // always name what it waits for.
                    return end(run, StepsEnd::Fail(CodeModeError::new(CodeModeErrorCode::Timeout, TIMEOUT_MESSAGE)));
                }
                return end(run, StepsEnd::Suspend(WaitReason::PendingTools));
            }
            if run.calls.running() == 0 {
                if run.parked() > 0 {
                    // Only calls waiting for a human are left: suspend now (the decision comes
                    // through `decide`, and the next `wait` applies it).
                    return end(run, StepsEnd::Suspend(WaitReason::PendingTools));
                }
                return end(run, StepsEnd::Fail(CodeModeError::uncoded(MSG_STALLED)));
            }
            match next_settled(&mut run, call, call.deadline) {
                Next::Finished(f) => {
                    run.accept(f);
                    run.collect_finished();
                    if let Err(e) = self.start_reissues(rt, &mut run) {
                        return end(run, StepsEnd::Fail(e));
                    }
                }
                Next::Cancelled => return end(run, StepsEnd::Abort),
                Next::Deadline => return end(run, StepsEnd::Suspend(WaitReason::PendingTools)),
            }
        }
    }
}
