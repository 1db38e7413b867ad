//! Requests answered while the guest waits in the host primitive (the runtime's
//! [`Answerer`]): a nested call whose tool returns at once, a search, a refusal settle inside the
//! primitive, and the drive step goes on, instead of ending so that the host can handle the
//! request and starting again to deliver its outcome.
//!
//! The request gets exactly the handling a reported one gets ([`Inner::handle_request`]: the gate
//! pipeline, the pending table, events, trajectory, telemetry, loop detection); only the moment
//! differs. For that, the run is lent to the step's answerer while the guest runs and taken back
//! when the step ends ([`InlineAnswers::take_run`]). Requests the bridge does not pass (a yield,
//! anything after the step's first output or first reported request) and requests made after the
//! call was cancelled go to the step's report, as before; an outcome there only past the call's
//! deadline is left for the step's end.

use super::Inner;
use super::run::Run;
use codemode_core::engine::{Answer, Answerer, BridgeRequest, GuestFailure};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use tokio::runtime::Handle;

/// The answerer of an `exec` / `wait` call's drive steps: the run, lent for each step, and what
/// handling a request needs.
pub(super) struct InlineAnswers {
    inner: Arc<Inner>,
    rt: Handle,
    /// The `exec` / `wait` call's deadline: an outcome there only past it is left to the step's
    /// end, which decides between suspending and `timeout` as it always has.
    deadline: Instant,
    /// The call's cancel flag: once set, requests are left to the step's end (which aborts).
    cancel: Arc<AtomicBool>,
    /// The run, while a step runs (`None` between steps).
    run: Mutex<Option<Run>>,
}

impl std::fmt::Debug for InlineAnswers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineAnswers").field("deadline", &self.deadline).finish_non_exhaustive()
    }
}

impl InlineAnswers {
    /// The answerer of the steps of one `exec` / `wait` call (its deadline and cancel flag).
    pub(super) fn new(inner: Arc<Inner>, rt: &Handle, deadline: Instant, cancel: &Arc<AtomicBool>) -> Self {
        InlineAnswers { inner, rt: rt.clone(), deadline, cancel: cancel.clone(), run: Mutex::new(None) }
    }

    /// Lends `run` for a step.
    pub(super) fn lend(&self, run: Run) {
        *self.run.lock().unwrap_or_else(PoisonError::into_inner) = Some(run);
    }

    /// Takes the run back after the step. A request handled in a panic leaves the lock poisoned,
    /// not the run lost; `None` only if it was taken back already.
    pub(super) fn take_run(&self) -> Option<Run> {
        self.run.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl Answerer for InlineAnswers {
    fn answer(&self, request: BridgeRequest, notes: &mut Vec<String>) -> Answer {
        // After an abort the step's end aborts the run without handling its requests.
        if self.cancel.load(Ordering::Relaxed) {
            return Answer::Declined(request);
        }
        let mut slot = self.run.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(run) = slot.as_mut() else { return Answer::Declined(request) };
        let id = request.id;
        match self.inner.handle_request(&self.rt, run, request) {
            // What ends the run after a step (a limit, the loop breaker) ends it here.
            Err(e) => Answer::Stop(GuestFailure { code: e.code, message: e.message }),
            Ok(_) => {
                notes.append(&mut run.loop_warnings);
                // An outcome there only past the call's deadline (a tool that held the worker
                // thread, like a Python inline tool) stays ready for the step's end, which decides
                // between suspending and `timeout` as for any outcome that arrives then.
                if Instant::now() >= self.deadline {
                    return Answer::Started;
                }
                // A step starts with nothing ready (its deliveries were taken), and only a request
                // handled here adds to it before the step ends: what is there for `id` is its outcome.
                match run.ready.iter().rposition(|d| d.id == id) {
                    Some(at) => Answer::Settled(run.ready.remove(at)),
                    None => Answer::Started,
                }
            }
        }
    }
}
