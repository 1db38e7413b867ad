//! The lifecycle of runs outside an `exec` / `wait` step: expiry sweeps, aborts (of one run or of
//! a whole scope), lifecycle records, and the registry of runs being driven right now (so an abort
//! reaches a run mid-call).

use super::{Call, Inner, SWEEP_INTERVAL_MS};
use codemode_core::executor::RunEvent;
use codemode_core::scope::RunId;
use codemode_core::telemetry::SnapshotEventKind;
use codemode_core::trajectory::TraceRecord;

impl Inner {
    /// Sweeps unless the last automatic sweep was less than [`SWEEP_INTERVAL_MS`] ago.
    pub(super) async fn sweep_if_due(&self) {
        use std::sync::atomic::Ordering;
        let now = self.now_ms();
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= SWEEP_INTERVAL_MS;
        if due && self.last_sweep_ms.compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            self.sweep().await;
        }
    }

    /// Drops expired runs and stops their nested calls.
    pub(crate) async fn sweep(&self) {
        let expired = self.store.purge_expired().await;
        if !expired.is_empty() {
            let mut inflight = self.inflight();
            for id in &expired {
                inflight.remove(id);
                // Lifecycle event: the run passed its TTL; its snapshot and nested calls are gone.
                tracing::info!(target: "codemode::lifecycle", run = %id, event = "expired", "suspended code mode run expired");
                self.lifecycle(id, SnapshotEventKind::Expired);
            }
        }
    }

    pub(crate) async fn abort(&self, run_id: &RunId) -> bool {
        // A run being driven right now stops at its next step and deletes itself.
        let driven = match self.active.lock().unwrap_or_else(|p| p.into_inner()).get(run_id) {
            Some(flag) => {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                true
            }
            None => false,
        };
        let local = self.inflight().remove(run_id).is_some() || driven;
        let aborted = self.store.remove(run_id).await || local;
        // A driven run reports its abort in its call's result and trajectory; a suspended one here.
        if aborted && !driven {
            self.lifecycle(run_id, SnapshotEventKind::Aborted);
        }
        aborted
    }

    /// Sends a lifecycle record (expiry, out-of-band abort) to the trajectory sink.
    fn lifecycle(&self, run_id: &RunId, event: SnapshotEventKind) {
        if let Some(sink) = &self.trajectory {
            let record = TraceRecord::Lifecycle(codemode_core::trajectory::LifecycleRecord {
                run_id: run_id.to_string(),
                event,
                at_ms: self.now_ms(),
            });
            sink.on_event(RunEvent::Trace(Box::new(record)));
        }
    }

    pub(crate) async fn abort_scope(&self, scope: &codemode_core::RunScope) -> usize {
        let ids: Vec<RunId> =
            self.inflight().iter().filter(|(_, r)| r.context.scope == *scope).map(|(id, _)| id.clone()).collect();
        let mut aborted = 0;
        for id in ids {
            if self.abort(&id).await {
                aborted += 1;
            }
        }
        aborted
    }

    /// How many runs an `exec` / `wait` is driving right now.
    pub(crate) fn driven(&self) -> usize {
        self.active.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Registers `run` as driven by `call` until the returned guard drops, so that
    /// [`abort`](Self::abort) reaches it.
    pub(super) fn activate(&self, run: &RunId, call: &Call) -> ActiveRun<'_> {
        self.active.lock().unwrap_or_else(|p| p.into_inner()).insert(run.clone(), call.cancel.clone());
        ActiveRun { inner: self, run: run.clone() }
    }
}

/// Removes a run from [`Inner::active`] when its `exec` / `wait` ends.
pub(super) struct ActiveRun<'a> {
    inner: &'a Inner,
    run: RunId,
}

impl Drop for ActiveRun<'_> {
    fn drop(&mut self) {
        self.inner.active.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.run);
    }
}
