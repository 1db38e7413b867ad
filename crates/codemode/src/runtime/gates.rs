//! The gates of a nested call: every check a call passes between the guest asking for it and its
//! result reaching the guest, declared once, in order.
//!
//! # The order
//!
//! Before the call starts (synchronous, on the guest worker; [`BEFORE_START`]):
//!
//! 0. **resolve** — the id (or `MCP.<server>.<tool>`, or a namespace path already turned into a
//!    catalog id) must name a tool of the run's own catalog ([`resolve_tool`]). Unknown, hidden and
//!    denied ids get the same answer, so a guessed id reveals nothing.
//! 1. [`Runnable`] — a tool whose declared output schema does not compile never runs.
//! 2. [`InputSchema`] — the input must match the tool's input schema (refused `invalid_input`,
//!    naming the place, the expectation and the given type; nothing is sent).
//! 3. [`RestartSafe`] — a `restartSafe` cell calls only read-only tools.
//! 4. [`LoopDetection`] — the session's loop detector (warn, refuse, or trip the breaker).
//! 5. [`PendingLimit`] — at most `maxPendingToolCalls` calls running or parked at once.
//! 6. [`Sandbox`] — a sandboxed run's calls meet the sandbox tool policy (contract P4).
//!
//! A gate that refuses answers the guest through [`Run::refuse`], the one refusal path: a catchable
//! `nested_tool_failed` error, a `denied` trajectory entry and one failed call in the telemetry.
//! Nothing after it runs: no hook, approver or tool sees a refused call. A gate may instead fail the
//! whole run (the pending limit, the loop breaker).
//!
//! While the call runs (asynchronous, on the host's executor; [`run_in_flight`]):
//!
//! 7. `before_tool_call` hooks — may rewrite the input or refuse.
//! 8. **approval** — the approval policy or a hook's `requires_approval` gates the call; the host's
//!    approver decides, or the call parks until a decision is recorded.
//! 9. the **call log** (fleet stores only, [`CallLog`]): the call is logged right before the tool
//!    runs; a call the log already finished gets its logged result instead of running again, and a
//!    call another replica started and lost runs again only if it is read-only.
//! 10. the **tool** itself (the executor).
//! 11. `after_tool_call` hooks — may inspect or replace the outcome.
//! 12. **output contract** — a declared output schema is checked before the value reaches the
//!     guest (contract D4); a mismatch fails the call and the value is never delivered. On a fleet
//!     store the outcome is then recorded in the call log the moment the call finishes.
//!
//! Which calls meet which gate: every call meets every gate, every time it starts, against the
//! tool's definition in the run's catalog now — a call the guest makes, a parked call a human
//! approved (which then skips only the approval step: its approval is the decision), and a
//! read-only call issued again after the process running it was lost (which is issued again only
//! if the tool's current definition is read-only). Nothing a stored run says about a call (that it
//! was read-only, or passed a gate before) is trusted. The pending limit counts an approved call
//! once (it was counted while parked), and loop detection counts a call once however often it is
//! checked.

use super::run::Run;
use super::{Inner, loop_key};
use crate::tools::ToolHook;
use codemode_catalog::loops::Verdict;
use codemode_catalog::{Catalog, CatalogTool};
use codemode_core::ToolSource;
use codemode_core::approval::{ApprovalDecision, ApprovalRequest, Approver};
use codemode_core::catalog::catalog_id;
use codemode_core::engine::{Delivery, GuestError, RequestId};
use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::executor::{NestedToolCall, ToolError, ToolErrorKind, ToolExecutor, ToolResult};
use codemode_core::guest::{CallMode, GuestRequest};
use codemode_core::scope::RunId;
use codemode_core::store::{CallIssue, CallStart, SnapshotStore, StoreError};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// A nested call at the gates before it starts.
pub(super) struct AtGate<'a> {
    /// The request id the guest gave the call.
    pub(super) id: RequestId,
    /// The catalog tool it resolved to.
    pub(super) tool: &'a CatalogTool,
    /// Its input (`{}` when the guest sent none).
    pub(super) input: &'a Value,
}

/// What a gate decides about a call.
pub(super) enum GateVerdict {
    /// The call goes on to the next gate.
    Pass,
    /// The call is refused: the guest gets this error (through [`Run::refuse`]).
    Refuse(GuestError),
    /// The whole run fails with this error (the call is not made).
    FailRun(CodeModeError),
}

/// One check a nested call passes before it starts. Each gate is a small type with this one method;
/// [`BEFORE_START`] lists them in order.
pub(super) trait StartGate: Sync {
    /// The gate's name, as the book's security model (docs/src/security.md) lists it.
    fn name(&self) -> &'static str;

    /// Decides about `call` of `run`. A gate may record what it saw (loop detection's history and
    /// warnings) but never starts, answers or refuses the call itself.
    fn check(&self, inner: &Inner, run: &mut Run, call: &AtGate<'_>) -> GateVerdict;
}

/// The gates before a call starts, in the order they run.
pub(super) const BEFORE_START: &[&dyn StartGate] =
    &[&Runnable, &InputSchema, &RestartSafe, &LoopDetection, &PendingLimit, &Sandbox];

/// Passes `call` through every gate of [`BEFORE_START`], whatever its origin. `Ok(true)`: the call
/// may start. `Ok(false)`: a gate refused it and the refusal is delivered (through
/// [`Run::refuse`]). `Err`: a gate failed the run.
pub(super) fn pass_before_start(inner: &Inner, run: &mut Run, call: &AtGate<'_>) -> Result<bool, CodeModeError> {
    for gate in BEFORE_START {
        match gate.check(inner, run, call) {
            GateVerdict::Pass => {}
            GateVerdict::Refuse(err) => {
                tracing::debug!(run = %run.id, request = call.id, tool = %call.tool.id, gate = gate.name(), "nested call refused");
                run.refuse(call.id, &call.tool.id, Some(call.input), err);
                return Ok(false);
            }
            GateVerdict::FailRun(err) => return Err(err),
        }
    }
    Ok(true)
}

/// Gate 0: finds the catalog tool a call request names — guest-visible tools for `tools.*`, MCP
/// entries for `MCP.*`. The error carries the id for telemetry and the trajectory.
pub(super) fn resolve_tool(
    catalog: &Catalog,
    request: &GuestRequest,
) -> Result<(Arc<CatalogTool>, CallMode), (String, GuestError)> {
    match request {
        GuestRequest::Mcp { server, tool, unwrap, .. } => match catalog.mcp_tool(server, tool) {
            Some(t) => Ok((t.clone(), if *unwrap { CallMode::McpValue } else { CallMode::Value })),
            None => {
                let err = super::guest_error(
                    CodeModeErrorCode::NestedToolFailed,
                    format!("unknown MCP tool `{tool}` of server `{server}`; see API.list(\"mcp\")"),
                );
                Err((catalog_id(ToolSource::Mcp, server, tool), err))
            }
        },
        GuestRequest::Call { id, mode, .. } => match catalog.guest_tool(id) {
            Some(t) => Ok((t.clone(), *mode)),
            None => Err((id.clone(), super::unknown_tool(id, CodeModeErrorCode::NestedToolFailed))),
        },
        other => Err((
            String::new(),
            super::guest_error(
                CodeModeErrorCode::InternalError,
                format!("`{}` is not a tool call", other.kind().as_str()),
            ),
        )),
    }
}

fn refuse(message: String) -> GateVerdict {
    GateVerdict::Refuse(super::guest_error(CodeModeErrorCode::NestedToolFailed, message))
}

/// Gate 1: a tool whose declared output schema does not compile is never run (its results could not
/// be checked, contract D4).
pub(super) struct Runnable;

impl StartGate for Runnable {
    fn name(&self) -> &'static str {
        "runnable"
    }

    fn check(&self, _: &Inner, _: &mut Run, call: &AtGate<'_>) -> GateVerdict {
        match call.tool.check_runnable() {
            Ok(()) => GateVerdict::Pass,
            Err(e) => refuse(e.to_string()),
        }
    }
}

/// Gate 2: the input must match the tool's input schema: a wrong argument fails in the
/// guest with `invalid_input` before anything leaves the sandbox, instead of costing a tool round
/// trip and an upstream error text. The message names the JSON pointer, what the schema expects and
/// the given JSON type, never the given value. A schema that does not compile leaves the tool's
/// calls unchecked (logged once); `validateInputs: false` on an MCP server turns the check off.
pub(super) struct InputSchema;

impl StartGate for InputSchema {
    fn name(&self) -> &'static str {
        "inputSchema"
    }

    fn check(&self, _: &Inner, _: &mut Run, call: &AtGate<'_>) -> GateVerdict {
        use codemode_catalog::input::Checked;
        match call.tool.check_input(call.input) {
            Checked::Valid => GateVerdict::Pass,
            Checked::Invalid(e) => GateVerdict::Refuse(GuestError::new(
                "ToolError",
                format!("{}: {e}", call.tool.id),
                Some(CodeModeErrorCode::InvalidInput),
            )),
            Checked::Unchecked { reason, first } => {
                if first {
                    tracing::warn!(tool = %call.tool.id, %reason, "input schema does not compile: calls to this tool are not checked");
                }
                GateVerdict::Pass
            }
        }
    }
}

/// Gate 3: a `restartSafe` cell may only call read-only tools (so that running it again can repeat
/// no side effect).
pub(super) struct RestartSafe;

impl StartGate for RestartSafe {
    fn name(&self) -> &'static str {
        "restartSafe"
    }

    fn check(&self, _: &Inner, run: &mut Run, call: &AtGate<'_>) -> GateVerdict {
        if run.restart_safe && !call.tool.def.read_only {
            refuse(format!("`{}` has side effects; a restartSafe cell may only call read-only tools", call.tool.id))
        } else {
            GateVerdict::Pass
        }
    }
}

/// Gate 4: the session's loop detector (contract §22). A warning is added to the call's output and the
/// call goes on; a critical repetition refuses the call; the breaker fails the run.
pub(super) struct LoopDetection;

impl StartGate for LoopDetection {
    fn name(&self) -> &'static str {
        "loopDetection"
    }

    fn check(&self, _: &Inner, run: &mut Run, call: &AtGate<'_>) -> GateVerdict {
        let Some((config, history)) = &run.loops else { return GateVerdict::Pass };
        let key = loop_key(&run.id, call.id);
        let verdict = history.lock().unwrap_or_else(|p| p.into_inner()).check(config, key, &call.tool.id, call.input);
        match verdict {
            Verdict::Ok => GateVerdict::Pass,
            Verdict::Warn(m) => {
                tracing::info!(run = %run.id, tool = %call.tool.id, "{m}");
                run.loop_warnings.push(m);
                GateVerdict::Pass
            }
            Verdict::Critical(m) => {
                tracing::warn!(run = %run.id, tool = %call.tool.id, "{m}");
                refuse(m)
            }
            Verdict::Breaker(m) => {
                tracing::warn!(run = %run.id, tool = %call.tool.id, "{m}");
                GateVerdict::FailRun(CodeModeError::new(CodeModeErrorCode::NestedToolFailed, m))
            }
        }
    }
}

/// Gate 5: at most `maxPendingToolCalls` nested calls outstanding at once. A call parked for
/// approval counts like a running one: without an approver every gated call parks,
/// and parked calls must not be a way around the limit. Exceeding it fails the run
/// (`too_many_pending_tool_calls`).
pub(super) struct PendingLimit;

impl StartGate for PendingLimit {
    fn name(&self) -> &'static str {
        "pendingLimit"
    }

    fn check(&self, inner: &Inner, run: &mut Run, call: &AtGate<'_>) -> GateVerdict {
        let max = inner.config.max_pending_tool_calls;
        // An approved call was counted while it was parked: it is the same call, counted once.
        let itself = usize::from(run.pending.get(&call.id).is_some_and(|p| p.awaiting_approval));
        if run.calls.running() + run.parked() - itself < max as usize {
            return GateVerdict::Pass;
        }
        run.telemetry.limit_failures.pending_calls += 1;
        GateVerdict::FailRun(CodeModeError::new(
            CodeModeErrorCode::TooManyPendingToolCalls,
            format!(
                "too many nested tool calls in flight at once (maxPendingToolCalls is {max}); await some before \
                 starting more"
            ),
        ))
    }
}

/// Gate 6: a sandboxed run's nested calls meet the sandbox tool policy (contract P4).
pub(super) struct Sandbox;

impl StartGate for Sandbox {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    fn check(&self, inner: &Inner, run: &mut Run, call: &AtGate<'_>) -> GateVerdict {
        if !run.context.sandboxed {
            return GateVerdict::Pass;
        }
        match inner.sandbox.refusal(&call.tool.def, call.input, run.context.scope.agent_id.as_deref()) {
            None => GateVerdict::Pass,
            Some(why) => GateVerdict::Refuse(tool_failure(&call.tool.id, &why)),
        }
    }
}

/// The guest error of a nested call that failed, was refused or was denied: a catchable
/// `ToolError` naming the tool, coded `nested_tool_failed`.
pub(super) fn tool_failure(tool_id: &str, message: &str) -> GuestError {
    GuestError::new("ToolError", format!("{tool_id}: {message}"), Some(CodeModeErrorCode::NestedToolFailed))
}

/// How a started call meets the approval step (stage 8).
#[derive(Clone)]
pub(super) struct Approval {
    /// Why the approval policy gates this tool (`None`: only a hook can gate it).
    pub(super) policy_reason: Option<String>,
    /// A human already approved this call (it was parked and is now resumed).
    pub(super) approved: bool,
    /// The host's approver, if any.
    pub(super) approver: Option<Arc<dyn Approver>>,
    /// Longest wait for the approver.
    pub(super) timeout: Duration,
    /// The cell line that made the call, if the guest sent it.
    pub(super) cell_line: Option<u32>,
}

/// How [`run_in_flight`] ended.
pub(super) enum InFlight {
    /// The call ran, or a hook, the approver or the output contract refused it.
    Done(Result<ToolResult, ToolError>),
    /// The call log answered (a logged result, or a lost call's failure): the tool did not run.
    Logged(Result<Value, GuestError>),
    /// The call needs a decision nobody gave yet: it is parked and did not run.
    Parked,
}

/// Stage 9 on a fleet store (see [`SnapshotStore::fleet`]): the call's entry in the store's call
/// log, written right before the tool runs and completed the moment it finishes.
pub(super) struct CallLog {
    pub(super) store: Arc<dyn SnapshotStore>,
    pub(super) run_id: RunId,
    pub(super) issue: CallIssue,
    /// The run is in the store, so a replica could replay it: a side-effecting call that cannot be
    /// logged (the store is unreachable) must not run.
    pub(super) stored: bool,
    /// What the tool returned, before the after-call stages (JSON), recorded with the result so a
    /// replaying replica takes it through its own stages.
    pub(super) raw: std::sync::Mutex<Option<String>>,
}

/// What the call log says instead of running the tool.
enum Logged {
    /// Deliver this as it is (a failure the log recorded, or a record without the raw outcome).
    Deliver(Result<Value, GuestError>),
    /// The tool already ran and returned this: it goes through the after-call stages here.
    Ran(Result<ToolResult, ToolError>),
    /// The call became a task on its server, started by a replica that died: the executor
    /// continues it from this note instead of running the tool again.
    Resume(String),
}

impl CallLog {
    /// Logs the call. `None`: run the tool. `Some`: what the log says instead.
    async fn begin(&self) -> Option<Logged> {
        let deliver = |answer| Some(Logged::Deliver(answer));
        match self.store.begin_call(&self.run_id, &self.issue).await {
            Ok(CallStart::Fresh | CallStart::Reissued) => None,
            Ok(CallStart::Recorded { outcome, raw }) => {
                match raw.as_deref().map(serde_json::from_str::<Result<ToolResult, ToolError>>) {
                    Some(Ok(ran)) => Some(Logged::Ran(ran)),
                    Some(Err(e)) => {
                        tracing::warn!(run = %self.run_id, tool = %self.issue.tool_id, error = %e, "unreadable raw outcome in the call log; delivering the recorded result");
                        deliver(outcome)
                    }
                    None => deliver(outcome),
                }
            }
            Ok(CallStart::Lost(why)) => deliver(Err(tool_failure(&self.issue.tool_id, &why))),
            Ok(CallStart::Resume(note)) => {
                tracing::info!(run = %self.run_id, tool = %self.issue.tool_id, request = self.issue.request_id, "continuing the task another replica started for this call");
                Some(Logged::Resume(note))
            }
            Err(StoreError::Unreachable(e)) if self.stored && !self.issue.read_only => deliver(Err(tool_failure(
                &self.issue.tool_id,
                &format!(
                    "not run: the snapshot store is unreachable ({e}), so the call could not be logged, and the tool has                      side effects"
                ),
            ))),
            Err(StoreError::Unreachable(e)) => {
                tracing::warn!(run = %self.run_id, tool = %self.issue.tool_id, error = %e, "call not logged: the snapshot store is unreachable");
                None
            }
            Err(e) => deliver(Err(tool_failure(&self.issue.tool_id, &e.to_string()))),
        }
    }

    /// Keeps what the tool returned, for [`finish`](Self::finish).
    fn keep_raw(&self, outcome: &Result<ToolResult, ToolError>) {
        match serde_json::to_string(outcome) {
            Ok(json) => *self.raw.lock().unwrap_or_else(|p| p.into_inner()) = Some(json),
            Err(e) => {
                tracing::warn!(run = %self.run_id, tool = %self.issue.tool_id, error = %e, "cannot record a nested call's raw outcome")
            }
        }
    }

    /// Records the call's outcome for any replica that resumes or replays the run.
    pub(super) async fn finish(&self, outcome: &Result<Value, GuestError>) {
        let delivery = Delivery { id: self.issue.request_id, outcome: outcome.clone() };
        let raw = self.raw.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Err(e) = self.store.finish_call(&self.run_id, &delivery, raw.as_deref()).await {
            tracing::warn!(run = %self.run_id, tool = %self.issue.tool_id, error = %e, "cannot record a nested call's result");
        }
    }
}

/// Stages 7–12 of a started call: `before` hooks (rewrite, refuse), the approval step (policy or
/// hook; the host's approver answers, or the call parks), the tool, `after` hooks, the output
/// contract.
pub(super) async fn run_in_flight(
    hooks: &[Arc<dyn ToolHook>],
    executor: &dyn ToolExecutor,
    call: NestedToolCall,
    approval: &Approval,
    contract: &CatalogTool,
    log: Option<&CallLog>,
) -> InFlight {
    // With no hook, no approval to ask for (already approved, or no policy reason: only a hook
    // could add one) and no call log (`only_the_tool`), the stages reduce to the tool and its
    // output contract. Their own future is boxed only when they have more to do: every call's
    // future is boxed once, and kept inline theirs (the approver's request and timer, the log's
    // round trip, the hooks' state) made it larger than the allocator's fast sizes.
    if only_the_tool(hooks, approval, log) {
        return InFlight::Done(checked_output(contract, executor.call(call).await));
    }
    Box::pin(through_the_stages(hooks, executor, call, approval, contract, log)).await
}

/// [`run_in_flight`]'s stages, in order.
async fn through_the_stages(
    hooks: &[Arc<dyn ToolHook>],
    executor: &dyn ToolExecutor,
    mut call: NestedToolCall,
    approval: &Approval,
    contract: &CatalogTool,
    log: Option<&CallLog>,
) -> InFlight {
    let mut refused = None;
    for h in hooks {
        if let Err(e) = h.before_tool_call(&mut call).await {
            refused = Some(e);
            break;
        }
    }
    if refused.is_none() && !approval.approved {
        let mut reason = approval.policy_reason.clone();
        for h in hooks {
            if reason.is_some() {
                break;
            }
            reason = h.requires_approval(&call).await;
        }
        if let Some(reason) = reason {
            let Some(approver) = &approval.approver else { return InFlight::Parked };
            // Boxed: the request and the timer live only on this path, and kept inline they made
            // every call's future (boxed once per call) larger than the allocator's fast sizes.
            match Box::pin(ask_approver(approver.as_ref(), &call, reason, approval)).await {
                Some(Ok(())) => {}
                Some(Err(e)) => refused = Some(e),
                None => return InFlight::Parked,
            }
        }
    }
    // A call the log says already ran (a replay after the replica driving the run died) is not
    // run again; what the tool returned then goes through this replica's after-call stages (hooks,
    // output contract) like a live result.
    let mut ran = None;
    if refused.is_none()
        && let Some(log) = log
    {
        match Box::pin(log.begin()).await {
            None => {}
            Some(Logged::Deliver(answer)) => return InFlight::Logged(answer),
            Some(Logged::Ran(outcome)) => ran = Some(outcome),
            // A call continued with a human's answer keeps its own note (it names the questions the
            // answer goes to).
            Some(Logged::Resume(note)) if call.resume.is_none() => call.resume = Some(note),
            Some(Logged::Resume(_)) => {}
        }
    }
    let run_tool = |call: NestedToolCall| async move {
        let outcome = executor.call(call).await;
        if let Some(log) = log {
            log.keep_raw(&outcome);
        }
        outcome
    };
    let outcome = if hooks.is_empty() {
        // Nothing looks at the call after the tool: it is handed over, not copied.
        match (refused, ran) {
            (Some(e), _) => Err(e),
            (None, Some(outcome)) => outcome,
            (None, None) => run_tool(call).await,
        }
    } else {
        let mut outcome = match (refused, ran) {
            (Some(e), _) => Err(e),
            (None, Some(outcome)) => outcome,
            (None, None) => run_tool(call.clone()).await,
        };
        // After a refusal too: an `after` hook sees every outcome (see `ToolHook::after_tool_call`).
        for h in hooks {
            h.after_tool_call(&call, &mut outcome).await;
        }
        outcome
    };
    InFlight::Done(checked_output(contract, outcome))
}

/// Whether the in-flight stages would do nothing but call the tool and check its output.
fn only_the_tool(hooks: &[Arc<dyn ToolHook>], approval: &Approval, log: Option<&CallLog>) -> bool {
    hooks.is_empty() && log.is_none() && (approval.approved || approval.policy_reason.is_none())
}

/// contract D4: the declared output contract is checked after the hooks, before the value reaches the
/// guest; a mismatch fails the call and the value is never delivered.
fn checked_output(contract: &CatalogTool, outcome: Result<ToolResult, ToolError>) -> Result<ToolResult, ToolError> {
    match &outcome {
        Ok(r) => match contract.check_output(&r.details) {
            Ok(()) => outcome,
            Err(m) => Err(ToolError::new(ToolErrorKind::OutputContract, m.to_string())),
        },
        Err(_) => outcome,
    }
}

/// Asks the approver about `call` within the approval timeout: `Some(Ok)` approved, `Some(Err)`
/// denied (the refusal the guest gets), `None` no decision in time (the call parks).
async fn ask_approver(
    approver: &dyn Approver,
    call: &NestedToolCall,
    reason: String,
    approval: &Approval,
) -> Option<Result<(), ToolError>> {
    let request = ApprovalRequest {
        run_id: call.run_id.clone(),
        request_id: call.request_id,
        tool_id: call.tool_id.to_string(),
        input_preview: ApprovalRequest::preview(&call.input),
        reason,
        cell_line: approval.cell_line,
        context: codemode_core::scope::RunContext::clone(&call.context),
    };
    match tokio::time::timeout(approval.timeout, approver.decide(&request)).await {
        Ok(Some(ApprovalDecision::Approve)) => Some(Ok(())),
        Ok(Some(ApprovalDecision::Deny { reason })) => {
            Some(Err(ToolError::new(ToolErrorKind::Denied, crate::tools::denial_message(&reason))))
        }
        Ok(None) | Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::BEFORE_START;
    use super::{Approval, CallLog, only_the_tool};
    use crate::tools::ToolHook;
    use codemode_core::scope::RunId;
    use codemode_core::store::CallIssue;
    use std::sync::Arc;
    use std::time::Duration;

    /// A hook with every default (it still makes the in-flight stages run).
    struct Watching;
    #[async_trait::async_trait]
    impl ToolHook for Watching {}

    /// A call skips the in-flight stages' own future only when they would do nothing but call the
    /// tool: any hook, an approval still to ask for, or a fleet's call log sends it through them.
    #[test]
    fn only_a_call_with_no_hook_approval_or_log_skips_the_in_flight_stages() {
        let approval = |policy_reason: Option<&str>, approved: bool| Approval {
            policy_reason: policy_reason.map(str::to_string),
            approved,
            approver: None,
            timeout: Duration::from_secs(1),
            cell_line: None,
        };
        let log = CallLog {
            store: Arc::new(codemode_snapshot::MemorySnapshotStore::new()),
            run_id: RunId::from_generated("cm_test".to_string()),
            issue: CallIssue { request_id: 1, tool_id: "t".to_string(), input_digest: String::new(), read_only: false },
            stored: false,
            raw: Default::default(),
        };
        let hooks: Vec<Arc<dyn ToolHook>> = vec![Arc::new(Watching)];
        assert!(only_the_tool(&[], &approval(None, false), None));
        assert!(only_the_tool(&[], &approval(Some("gated"), true), None), "approved already: nothing to ask");
        assert!(!only_the_tool(&[], &approval(Some("gated"), false), None), "the approver must be asked");
        assert!(!only_the_tool(&hooks, &approval(None, false), None), "a hook may refuse, gate or rewrite");
        assert!(!only_the_tool(&hooks, &approval(Some("gated"), true), None));
        assert!(!only_the_tool(&[], &approval(None, false), Some(&log)), "a fleet logs the call first");
    }

    /// The security model in the book lists the gates before a call starts, by name, in the order
    /// [`BEFORE_START`] runs them (the order is written once and documented).
    #[test]
    fn the_security_model_lists_the_gates_in_their_order() {
        let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/src/security.md"))
            .expect("docs/src/security.md");
        let list = page
            .split("**The checks of a nested call, in order.**")
            .nth(1)
            .and_then(|s| s.split("While it runs").next())
            .expect("the security model's list of checks");
        let documented: Vec<&str> = list
            .lines()
            .filter_map(|l| l.trim_start().split_once(". `"))
            .filter(|(n, _)| n.parse::<u32>().is_ok())
            .filter_map(|(_, rest)| rest.split('`').next())
            .collect();
        let declared: Vec<&str> = BEFORE_START.iter().map(|g| g.name()).collect();
        assert_eq!(documented, declared, "docs/src/security.md lists the gates in another order than gates.rs");
    }
}
