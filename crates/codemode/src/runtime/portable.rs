//! Exporting a `waiting` run as bytes and importing it into another runtime
//! ([`codemode_snapshot::portable`] is the format).
//!
//! Export moves the run: it leaves this runtime's store, so it can never be resumed twice. The
//! nested calls this process started for it are awaited first (at most until the run expires) and
//! their results travel with it, so an exported run loses no call and repeats none; a call that
//! got parked for approval meanwhile travels parked.

use super::Inner;
use super::calls::Finished;
use codemode_core::engine::Delivery;
use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::scope::{RunId, RunScope};
use codemode_core::store::{StoreError, SuspendedRun};
use codemode_snapshot::portable::{self, PortableRun};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

/// Settles `d` in `run`: its request leaves `pending`, its outcome waits in `ready`.
fn settle(run: &mut SuspendedRun, d: Delivery) {
    if let Some(i) = run.pending.iter().position(|p| p.id == d.id) {
        run.pending.remove(i);
        run.ready.push(d);
    }
}

impl Inner {
    /// Takes a suspended run of `scope` out of the store as portable bytes (see the module docs).
    pub(crate) fn export_run(&self, rt: &Handle, scope: &RunScope, run_id: &RunId) -> Result<Vec<u8>, CodeModeError> {
        let mut run = rt.block_on(self.store.checkout(run_id, scope)).map_err(|e| e.to_code_mode_error())?;
        if !run.snapshot.is_serialized() {
            let engine = run.snapshot.engine.clone();
            // Back where it was: the run stays resumable here.
            rt.block_on(self.store.put(run)).map_err(|e| e.to_code_mode_error())?;
            return Err(CodeModeError::new(
                CodeModeErrorCode::InvalidInput,
                format!(
                    "run `{run_id}` cannot be exported: the `{engine}` engine keeps live in-process snapshots; use \
                     the `quickjs-wasi` engine for runs that leave their process"
                ),
            ));
        }
        if let Some(mut inflight) = self.inflight().remove(run_id) {
            let remaining_ms = run.expires_at_ms.saturating_sub(self.now_ms());
            let deadline = Instant::now() + Duration::from_millis(remaining_ms);
            while inflight.calls.running() > 0 {
                match inflight.calls.next_until(deadline) {
                    Some(Finished::Settled(d) | Finished::Denied(d)) => settle(&mut run, d),
                    Some(Finished::Parked(id)) => {
                        if let Some(p) = run.pending.iter_mut().find(|p| p.id == id) {
                            p.awaiting_approval = true;
                        }
                    }
                    Some(Finished::Asked(id, asked)) => {
                        if let Some(p) = run.pending.iter_mut().find(|p| p.id == id) {
                            p.awaiting_approval = true;
                            p.asked = Some(asked);
                        }
                    }
                    Some(Finished::Reissue(_)) => {}
                    // The run expired with calls still running: they are dropped (aborted) below.
                    None => break,
                }
            }
        }
        let recorded = match rt.block_on(self.store.take_results(run_id)) {
            Ok(recorded) => recorded,
            Err(e) => {
                // Back in the store with the results gathered so far: nothing is lost.
                if let Err(put) = rt.block_on(self.store.put(run)) {
                    tracing::warn!(run = %run_id, error = %put, "cannot put a run back after a failed export");
                }
                return Err(e.to_code_mode_error());
            }
        };
        for d in recorded {
            settle(&mut run, d);
        }
        let decisions = rt.block_on(self.store.take_decisions(run_id)).unwrap_or_default();
        let bytes =
            portable::encode(PortableRun { run, decisions }, &self.run_keys).map_err(|e| e.to_code_mode_error())?;
        rt.block_on(self.store.remove(run_id));
        tracing::info!(target: "codemode::snapshot", run = %run_id, bytes = bytes.len(), "run exported");
        Ok(bytes)
    }

    /// Puts an exported run into this runtime's store; returns its id (a `wait` in the run's scope
    /// resumes it).
    pub(crate) fn import_run(&self, rt: &Handle, bytes: &[u8]) -> Result<RunId, CodeModeError> {
        // The tag is checked before anything else is read: a forged decision, policy or expiry
        // never reaches the store.
        let PortableRun { run, decisions } =
            portable::decode(bytes, &self.run_keys, self.now_ms()).map_err(|e| match e {
                StoreError::Corrupt(m) | StoreError::Unauthenticated(m) => {
                    CodeModeError::new(CodeModeErrorCode::InvalidInput, m)
                }
                other => other.to_code_mode_error(),
            })?;
        let engine = self.engine()?.name();
        if run.snapshot.engine != engine {
            return Err(CodeModeError::new(
                CodeModeErrorCode::InvalidInput,
                format!(
                    "run `{}` was suspended by the `{}` engine; this runtime runs `{engine}`",
                    run.run_id, run.snapshot.engine
                ),
            ));
        }
        if run.expires_at_ms <= self.now_ms() {
            return Err(CodeModeError::new(
                CodeModeErrorCode::SnapshotExpired,
                format!("run `{}` expired before it was imported (past snapshotTtlSeconds)", run.run_id),
            ));
        }
        let stored = run.stored_bytes();
        if stored > self.config.max_snapshot_bytes {
            return Err(CodeModeError::new(
                CodeModeErrorCode::SnapshotLimitExceeded,
                format!(
                    "run of {stored} bytes exceeds this runtime's maxSnapshotBytes ({})",
                    self.config.max_snapshot_bytes
                ),
            ));
        }
        let id = run.run_id.clone();
        // A run this runtime holds or drives under this id is not replaced (the same bytes imported
        // twice while the first copy runs).
        let driven = self.active.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&id);
        if driven || self.inflight().contains_key(&id) {
            return Err(CodeModeError::new(
                CodeModeErrorCode::InvalidInput,
                format!("run `{id}` is already running in this runtime; an exported run is imported once"),
            ));
        }
        rt.block_on(self.store.put(run)).map_err(|e| e.to_code_mode_error())?;
        for (request, decision) in decisions {
            if let Err(e) = rt.block_on(self.store.record_decision(&id, request, &decision)) {
                tracing::warn!(run = %id, request, error = %e, "cannot carry an approval decision over into this store");
            }
        }
        tracing::info!(target: "codemode::snapshot", run = %id, bytes = bytes.len(), "run imported");
        Ok(id)
    }
}
