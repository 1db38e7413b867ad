//! [`Run`]: one run while an `exec` or `wait` call holds it — its catalog, namespaces, outstanding
//! requests and ready results, telemetry and trajectory target — and what happens to it as nested
//! calls settle or park.

use super::calls::{Finished, NestedCalls};
use super::{MSG_ABORTED, TraceTarget, loop_key};
use codemode_catalog::Catalog;
use codemode_catalog::loops::History;
use codemode_core::engine::{BootSource, Delivery, GuestError, RequestId};
use codemode_core::executor::{RunEvent, RunObserver};
use codemode_core::namespace::RunNamespaces;
use codemode_core::positions::CellPositions;
use codemode_core::result::{CodeModePendingToolCall, PendingCallKind, json_len};
use codemode_core::scope::{RunContext, RunId};
use codemode_core::store::PendingRequest;
use codemode_core::telemetry::CodeModeTelemetry;
use codemode_core::trajectory::{CallOutcome, TraceRecord, TranscriptEntry};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// One run while an `exec` or `wait` call holds it.
pub(super) struct Run {
    pub(super) id: RunId,
    /// The policy the run was started under, as stored with it (see `policy.rs`); `None` for a run
    /// not stored yet (made from its context and catalog when it first suspends).
    pub(super) policy: Option<Arc<codemode_core::store::RunPolicy>>,
    pub(super) context: Arc<RunContext>,
    pub(super) catalog: Arc<Catalog>,
    /// The catalog data the guest pulls on demand (`ALL_TOOLS`, `tools.<name>`, `API`, `MCP`).
    pub(super) source: Arc<dyn BootSource>,
    /// The run's namespaces and how their calls resolve (contract §10).
    pub(super) namespaces: Arc<dyn RunNamespaces>,
    pub(super) restart_safe: bool,
    pub(super) telemetry: CodeModeTelemetry,
    pub(super) pending: PendingTable,
    pub(super) ready: Vec<Delivery>,
    pub(super) calls: NestedCalls,
    pub(super) created_at_ms: u64,
    /// The run is in the store (suspended at least once).
    pub(super) stored: bool,
    /// A nested call of the run was logged in a fleet store's call log (its log must go when the
    /// run settles, even if the run was never stored).
    pub(super) logged: bool,
    /// Maps error positions back to the cell's own source.
    pub(super) positions: CellPositions,
    /// Who watches this call's events (not kept across suspensions: each call brings its own).
    pub(super) observer: Option<Arc<dyn RunObserver>>,
    /// The trajectory of the current `exec` / `wait` call: its call id, its tool, where records go
    /// besides the observer (the runtime's trajectory sink) and how values are redacted.
    pub(super) trace: TraceTarget,
    /// The session's loop-detection history (when loop detection is on for the run's agent).
    pub(super) loops: Option<(codemode_catalog::loops::LoopConfig, Arc<Mutex<History>>)>,
    /// Loop-detection warnings not yet added to the call's output.
    pub(super) loop_warnings: Vec<String>,
    /// Read-only calls to issue again (their process died; see `CallEnd::Reissue`).
    pub(super) reissue: Vec<RequestId>,
}

/// A run's outstanding requests, in id order: a vector kept sorted by id. A run has a few at a
/// time; the `BTreeMap` this replaced moved each ~200-byte request into its node and out again,
/// ~0.7k instructions a nested call. Ids only grow, so a request is filed at the end; removing one
/// shifts the later ones, and the `pendingLimit` gate keeps the tool calls among them below
/// `maxPendingToolCalls` (at most 128), so no cell can make that quadratic cost large.
#[derive(Default)]
pub(super) struct PendingTable(Vec<PendingRequest>);

impl PendingTable {
    fn position(&self, id: RequestId) -> Result<usize, usize> {
        self.0.binary_search_by_key(&id, |p| p.id)
    }

    /// Files `p` under its id, replacing (and returning) what was filed under it.
    pub(super) fn insert(&mut self, p: PendingRequest) -> Option<PendingRequest> {
        match self.position(p.id) {
            Ok(at) => Some(std::mem::replace(&mut self.0[at], p)),
            Err(at) => {
                self.0.insert(at, p);
                None
            }
        }
    }

    pub(super) fn remove(&mut self, id: &RequestId) -> Option<PendingRequest> {
        self.position(*id).ok().map(|at| self.0.remove(at))
    }

    pub(super) fn get(&self, id: &RequestId) -> Option<&PendingRequest> {
        self.position(*id).ok().and_then(|at| self.0.get(at))
    }

    pub(super) fn get_mut(&mut self, id: &RequestId) -> Option<&mut PendingRequest> {
        self.position(*id).ok().and_then(|at| self.0.get_mut(at))
    }

    pub(super) fn contains_key(&self, id: &RequestId) -> bool {
        self.position(*id).is_ok()
    }

    /// The requests in id order.
    pub(super) fn values(&self) -> std::slice::Iter<'_, PendingRequest> {
        self.0.iter()
    }
}

impl FromIterator<PendingRequest> for PendingTable {
    fn from_iter<I: IntoIterator<Item = PendingRequest>>(iter: I) -> Self {
        let mut table = PendingTable::default();
        for p in iter {
            table.insert(p);
        }
        table
    }
}

impl Run {
    /// Parks call `id` until a human decides: gated before it ran, or (`asked`) its tool asked a
    /// question.
    fn park(&mut self, id: RequestId, asked: Option<codemode_core::store::AskedCall>) {
        let traced = self.traced();
        if let Some(p) = self.pending.get_mut(&id) {
            p.awaiting_approval = true;
            p.asked = asked;
            let tool_id = p.tool_id.clone().unwrap_or_default();
            // The input is copied only when a record is made (not on the plain path).
            let record = traced.then(|| (p.issued_at_ms, p.request.tool_input().cloned()));
            if let Some((issued, input)) = record {
                self.entry(id, &tool_id, CallOutcome::Parked, Some(issued), input.as_ref(), None, None);
            }
            self.emit(|| RunEvent::CallParked {
                run_id: self.id.to_string(),
                request_id: id,
                tool_id: tool_id.to_string(),
            });
        }
    }

    pub(super) fn accept(&mut self, f: Finished) {
        let (d, denied) = match f {
            Finished::Settled(d) => (d, false),
            Finished::Denied(d) => (d, true),
            Finished::Reissue(id) => {
                self.reissue.push(id);
                return;
            }
            Finished::Parked(id) => {
                self.park(id, None);
                return;
            }
            Finished::Asked(id, asked) => {
                self.park(id, Some(asked));
                return;
            }
        };
        if let Some(p) = self.pending.remove(&d.id)
            && p.kind().is_tool_call()
        {
            if d.outcome.is_err() {
                self.telemetry.failed_call_count += 1;
            }
            let received = match &d.outcome {
                Ok(v) => json_len(v),
                Err(e) => e.message.len(),
            };
            self.telemetry.tool_result_bytes = self.telemetry.tool_result_bytes.saturating_add(received as u64);
            let tool_id = p.tool_id.unwrap_or_default();
            if let (Some((_, history)), Ok(v)) = (&self.loops, &d.outcome) {
                history.lock().unwrap_or_else(|p| p.into_inner()).record_output(loop_key(&self.id, d.id), v);
            }
            if self.traced() {
                let (outcome, result, error) = match &d.outcome {
                    Ok(v) => (CallOutcome::Completed, Some(v), None),
                    Err(e) => {
                        (if denied { CallOutcome::Denied } else { CallOutcome::Failed }, None, Some(e.message.as_str()))
                    }
                };
                self.entry(d.id, &tool_id, outcome, Some(p.issued_at_ms), None, result, error);
            }
            self.emit(|| RunEvent::CallFinished {
                run_id: self.id.to_string(),
                request_id: d.id,
                tool_id: tool_id.to_string(),
                ok: d.outcome.is_ok(),
            });
        }
        self.ready.push(d);
    }

    /// Sends an event to the run's observer. The event is built only when there is one (the
    /// nested-call path would otherwise copy ids into events nobody receives).
    pub(super) fn emit(&self, event: impl FnOnce() -> RunEvent) {
        if let Some(o) = &self.observer {
            o.on_event(event());
        }
    }

    /// Whether anyone receives trajectory records (building them is skipped otherwise).
    pub(super) fn traced(&self) -> bool {
        self.observer.is_some() || self.trace.sink.is_some()
    }

    /// Emits a nested-call transcript entry under the call driving the run.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn entry(
        &self,
        request_id: RequestId,
        tool_id: &str,
        outcome: CallOutcome,
        issued_at_ms: Option<u64>,
        input: Option<&Value>,
        result: Option<&Value>,
        error: Option<&str>,
    ) {
        let t = &self.trace;
        let at_ms = t.clock.now_ms();
        let record = TraceRecord::Nested(TranscriptEntry {
            parent_tool_call_id: t.parent.clone(),
            parent_tool: t.parent_tool.to_string(),
            run_id: self.id.to_string(),
            request_id,
            tool_id: tool_id.to_string(),
            outcome,
            at_ms,
            duration_ms: issued_at_ms.map(|i| at_ms.saturating_sub(i)),
            input: input.map(|v| t.redaction.value(v)),
            result: result.map(|v| t.redaction.value(v)),
            error: error.map(|e| t.redaction.message(e)),
            line: self
                .pending
                .get(&request_id)
                .and_then(|p| p.request.call_line())
                .map(|l| self.positions.map(l, None).0),
        });
        if let Some(sink) = &t.sink {
            sink.on_event(RunEvent::Trace(Box::new(record.clone())));
        }
        self.emit(|| RunEvent::Trace(Box::new(record)));
    }

    /// Refuses a nested call before it starts — the one refusal path of the gates a call meets
    /// before it runs (`gates.rs`: unknown or hidden id, forged namespace path, a tool that cannot
    /// run here, `restartSafe`, loop detection, sandbox policy): the guest gets `err`, the trajectory a `denied` entry with the
    /// reason, the telemetry one failed call.
    pub(super) fn refuse(&mut self, id: RequestId, tool_id: &str, input: Option<&Value>, err: GuestError) {
        // An approved call refused when it starts at last was parked: it is outstanding no more.
        self.pending.remove(&id);
        self.telemetry.failed_call_count += 1;
        if self.traced() {
            let now = Some(self.trace.clock.now_ms());
            self.entry(id, tool_id, CallOutcome::Denied, now, input, None, Some(&err.message));
        }
        self.ready.push(Delivery { id, outcome: Err(err) });
    }

    /// Emits a `cancelled` entry for every nested call still outstanding (the run is aborted).
    pub(super) fn trace_cancelled(&self) {
        if !self.traced() {
            return;
        }
        for p in self.pending.values().filter(|p| p.kind().is_tool_call()) {
            let tool_id = p.tool_id.clone().unwrap_or_default();
            self.entry(p.id, &tool_id, CallOutcome::Cancelled, Some(p.issued_at_ms), None, None, Some(MSG_ABORTED));
        }
    }

    /// Calls parked until a human decides.
    pub(super) fn parked(&self) -> usize {
        self.pending.values().filter(|p| p.awaiting_approval).count()
    }

    pub(super) fn collect_finished(&mut self) {
        while let Some(d) = self.calls.try_next() {
            self.accept(d);
        }
    }

    pub(super) fn pending_tool_calls(&self, now: u64) -> Vec<CodeModePendingToolCall> {
        self.pending
            .values()
            .filter(|p| p.kind().is_tool_call())
            .map(|p| CodeModePendingToolCall {
                request_id: p.id,
                kind: if p.awaiting_approval { PendingCallKind::Approval } else { PendingCallKind::running(p.kind()) },
                tool_id: p.tool_id.as_deref().unwrap_or_default().to_string(),
                elapsed_ms: now.saturating_sub(p.issued_at_ms),
                question: p.asked.as_ref().map(|a| a.question.clone()),
            })
            .collect()
    }
}
