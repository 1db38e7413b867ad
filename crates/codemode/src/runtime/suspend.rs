//! How an `exec` / `wait` call ends: completed, failed, or suspended into the snapshot store (with
//! this process's claim on the calls it keeps running).

use super::run::Run;
use super::{Call, Inflight, Inner, MSG_ABORTED, discard};
use codemode_core::engine::{GuestInstance, Snapshot};
use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::result::{CodeModeResult, WaitReason, json_len};
use codemode_core::store::{RunPolicy, StoreError, SuspendedRun};
use codemode_core::telemetry::SnapshotEventKind;
use serde_json::Value;
use tokio::runtime::Handle;

impl Inner {
    pub(super) fn complete(&self, rt: &Handle, mut run: Run, mut call: Call, value: Value) -> CodeModeResult {
        let value_len = json_len(&value) as u64;
        if call.output_used + value_len > self.config.max_output_bytes {
            let err = CodeModeError::new(
                CodeModeErrorCode::OutputLimitExceeded,
                format!(
                    "output limit exceeded: output and return value take {} bytes; maxOutputBytes is {}",
                    call.output_used + value_len,
                    self.config.max_output_bytes
                ),
            );
            return self.fail(rt, run, call, err);
        }
        if let Err(taken) = self.release(rt, &mut run) {
            return self.failed(rt, run, call, taken);
        }
        self.save_loop_history(rt, &run);
        self.sync_observed(rt);
        run.telemetry.duration_ms += call.started.elapsed().as_millis() as u64;
        run.telemetry.returned_bytes += call.output_used + value_len;
        CodeModeResult::Completed { value, output: std::mem::take(&mut call.output), telemetry: run.telemetry }
    }

    pub(super) fn fail(&self, rt: &Handle, mut run: Run, call: Call, err: CodeModeError) -> CodeModeResult {
        // A run another replica took over reports that, not its own failure.
        let err = match self.release(rt, &mut run) {
            Err(taken) => taken,
            Ok(()) => err,
        };
        self.failed(rt, run, call, err)
    }

    /// The `failed` result of a released run.
    fn failed(&self, rt: &Handle, mut run: Run, call: Call, mut err: CodeModeError) -> CodeModeResult {
        self.save_loop_history(rt, &run);
        self.sync_observed(rt);
        err.message = run.positions.rewrite(&err.message);
        let limits = &mut run.telemetry.limit_failures;
        match err.code {
            Some(CodeModeErrorCode::Timeout) => limits.timeout += 1,
            Some(CodeModeErrorCode::MemoryLimitExceeded) => limits.memory += 1,
            Some(CodeModeErrorCode::OutputLimitExceeded) => limits.output += 1,
            Some(CodeModeErrorCode::SnapshotLimitExceeded) => limits.snapshot += 1,
            Some(CodeModeErrorCode::TooManyPendingToolCalls) if limits.pending_calls == 0 => limits.pending_calls += 1,
            _ => {}
        }
        tracing::debug!(run = %run.id, code = ?err.code, "code mode run failed");
        run.telemetry.duration_ms += call.started.elapsed().as_millis() as u64;
        run.telemetry.returned_bytes += call.output_used + err.message.len() as u64;
        CodeModeResult::failed(err, call.output, run.telemetry)
    }

    /// An aborted run (its caller went away, or [`abort`](Self::abort)): nested calls stop, its state
    /// leaves the store, and it fails with `aborted`.
    pub(super) fn aborted(&self, rt: &Handle, mut run: Run, call: Call) -> CodeModeResult {
        run.trace_cancelled();
        run.calls.abort_all();
        if run.stored {
            rt.block_on(self.store.remove(&run.id));
            run.stored = false;
        }
        self.inflight().remove(&run.id);
        run.telemetry.record_snapshot(SnapshotEventKind::Aborted, None);
        tracing::info!(run = %run.id, "code mode run aborted");
        self.fail(rt, run, call, CodeModeError::new(CodeModeErrorCode::Aborted, MSG_ABORTED))
    }

    /// A settled run: its snapshot leaves the store at once and its nested calls stop. On a fleet
    /// store the end is committed under the run's fence: `Err` when another replica took the run
    /// over meanwhile — then this replica's result is void and must not be delivered.
    pub(super) fn release(&self, rt: &Handle, run: &mut Run) -> Result<(), CodeModeError> {
        run.calls.abort_all();
        if !run.stored && !run.logged {
            return Ok(());
        }
        let was_stored = std::mem::replace(&mut run.stored, false);
        run.logged = false;
        match rt.block_on(self.store.settle(&run.id)) {
            Ok(true) if was_stored => run.telemetry.record_snapshot(SnapshotEventKind::Deleted, None),
            Ok(_) => {}
            Err(StoreError::TakenOver) => {
                tracing::warn!(run = %run.id, "run taken over by another replica: this replica's result is void");
                return Err(StoreError::TakenOver.to_code_mode_error());
            }
            // The run's state expires by itself.
            Err(e) => tracing::warn!(run = %run.id, error = %e, "cannot delete a settled run from the store"),
        }
        Ok(())
    }

    pub(super) fn suspend(
        &self,
        rt: &Handle,
        mut run: Run,
        instance: Box<dyn GuestInstance>,
        call: Call,
        reason: WaitReason,
    ) -> CodeModeResult {
        let snapshot = match instance.snapshot() {
            Ok(s) => s,
            Err(e) => return self.fail(rt, run, call, CodeModeError::new(e.code(), e.to_string())),
        };
        let size = snapshot.size_bytes();
        if size > self.config.max_snapshot_bytes {
            run.telemetry.record_snapshot(SnapshotEventKind::Rejected, Some(size));
            let err = CodeModeError::new(
                CodeModeErrorCode::SnapshotLimitExceeded,
                format!("snapshot of {size} bytes exceeds maxSnapshotBytes ({})", self.config.max_snapshot_bytes),
            );
            discard(snapshot);
            return self.fail(rt, run, call, err);
        }
        if !snapshot.is_serialized() && !self.store.accepts_live() {
            let err = StoreError::LiveNotSupported(snapshot.engine.clone()).to_code_mode_error();
            discard(snapshot);
            return self.fail(rt, run, call, err);
        }
        run.telemetry.record_snapshot(SnapshotEventKind::Created, Some(size));
        self.store_suspended(rt, run, snapshot, call, reason)
    }

    pub(super) fn store_suspended(
        &self,
        rt: &Handle,
        mut run: Run,
        snapshot: Snapshot,
        mut call: Call,
        reason: WaitReason,
    ) -> CodeModeResult {
        // Results another process recorded that this one already took from the store go back with
        // the run; the calls still missing stay pending for the next `wait`.
        for d in run.calls.stop_watching(rt) {
            run.accept(d);
        }
        let mut telemetry = run.telemetry.clone();
        telemetry.duration_ms += call.started.elapsed().as_millis() as u64;
        telemetry.returned_bytes += call.output_used;
        let now = self.now_ms();
        let expires_at_ms = now.saturating_add(self.config.snapshot_ttl_seconds.saturating_mul(1000));
        let suspended = SuspendedRun {
            run_id: run.id.clone(),
            scope: run.context.scope.clone(),
            snapshot,
            reason,
            pending: run.pending.values().cloned().collect(),
            ready: std::mem::take(&mut run.ready),
            restart_safe: run.restart_safe,
            telemetry: telemetry.clone(),
            created_at_ms: run.created_at_ms,
            expires_at_ms,
            positions: run.positions.clone(),
            policy: Some(match &run.policy {
                Some(stored) => RunPolicy::clone(stored),
                None => self.run_policy(&run.context, &run.catalog),
            }),
        };
        let pending_tool_calls = run.pending_tool_calls(now);
        // The whole stored run, not only the VM, stays within maxSnapshotBytes: the
        // inputs of parked calls and undelivered results are stored with it.
        let stored = suspended.stored_bytes();
        if stored > self.config.max_snapshot_bytes {
            let snapshot_bytes = suspended.snapshot.size_bytes();
            discard(suspended.snapshot);
            run.ready = suspended.ready;
            run.telemetry.record_snapshot(SnapshotEventKind::Rejected, Some(stored));
            let err = CodeModeError::new(
                CodeModeErrorCode::SnapshotLimitExceeded,
                format!(
                    "suspended run of {stored} bytes (snapshot {snapshot_bytes}, pending calls and undelivered results \
                     {}) exceeds maxSnapshotBytes ({}); park or await fewer or smaller calls",
                    stored - snapshot_bytes,
                    self.config.max_snapshot_bytes
                ),
            );
            return self.fail(rt, run, call, err);
        }
        if call.cancelled() {
            // The caller went away (or the run was aborted): nobody would ever resume it.
            discard(suspended.snapshot);
            return self.aborted(rt, run, call);
        }
        if let Err(e) = rt.block_on(self.store.put(suspended)) {
            run.telemetry.record_snapshot(SnapshotEventKind::Rejected, None);
            return self.fail(rt, run, call, e.to_code_mode_error());
        }
        run.telemetry = telemetry;
        run.stored = true;
        if call.cancelled() {
            // Cancelled while it was being stored: take it out again.
            return self.aborted(rt, run, call);
        }
        let claim = if run.calls.running() > 0 {
            match rt.block_on(self.store.claim_calls(&run.id)) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(run = %run.id, error = %e, "cannot claim nested calls in the store");
                    None
                }
            }
        } else {
            None
        };
        self.save_loop_history(rt, &run);
        self.sync_observed(rt);
        let Run { id, context, catalog, source, namespaces, calls, telemetry, restart_safe, .. } = run;
        self.inflight()
            .insert(id.clone(), Inflight { context, catalog, source, namespaces, calls, _claim: claim, expires_at_ms });
        CodeModeResult::Waiting {
            run_id: id.to_string(),
            reason,
            pending_tool_calls,
            output: std::mem::take(&mut call.output),
            rerunnable: restart_safe,
            telemetry,
        }
    }
}
