//! Human approval of nested calls (contract P5, V13): the decision types, the request a human is asked
//! about, and the [`Approver`] a host provides.
//!
//! A gated nested call (by the approval policy or by a hook) is put to the host's [`Approver`]. An
//! approver that can answer at once (an in-process UI, an MCP client's elicitation) returns a
//! decision; one that cannot returns `None` — then the call is *parked*: the run suspends as
//! `waiting`, the call is listed in `pendingToolCalls` with kind `approval`, and the host records
//! the decision later (`CodeMode::decide`, `codemode approve`), possibly in another process. The
//! next `wait` runs an approved call or rejects a denied one in the guest. The guest has no way to
//! approve its own calls: decisions enter only through the host.

use crate::engine::RequestId;
use crate::scope::{RunContext, RunId};
use serde::{Deserialize, Serialize};

/// A human's decision on a gated call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "camelCase")]
pub enum ApprovalDecision {
    /// The call may run.
    Approve,
    /// The call is refused; the guest sees a catchable `nested_tool_failed` error with the reason.
    Deny {
        /// Why (shown to the guest and the model).
        reason: String,
    },
}

impl ApprovalDecision {
    /// A denial with `reason`.
    pub fn deny(reason: impl Into<String>) -> Self {
        ApprovalDecision::Deny { reason: reason.into() }
    }
}

/// Longest rendering of a gated call's input shown to a human (the full input stays with the call).
pub const MAX_APPROVAL_PREVIEW_CHARS: usize = 2_000;

/// What a human is asked about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    /// The run making the call.
    pub run_id: RunId,
    /// The call's bridge request id (what a decision names).
    pub request_id: RequestId,
    /// The exact catalog id of the tool.
    pub tool_id: String,
    /// The call's input as compact JSON, cut to [`MAX_APPROVAL_PREVIEW_CHARS`] (a hostile cell cannot
    /// flood the human's screen).
    pub input_preview: String,
    /// Why approval is required (`approvals.require` pattern, read-only rule, or a hook).
    pub reason: String,
    /// The line of the cell (the model's own source) that made the call, when known: calls to tools
    /// the approval policy gates carry it (not calls a hook gates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell_line: Option<u32>,
    /// The caller's context (agent, session, sender, channel, model).
    pub context: RunContext,
}

impl ApprovalRequest {
    /// Renders `input` for [`input_preview`](Self::input_preview).
    pub fn preview(input: &serde_json::Value) -> String {
        crate::text::cut_chars(input.to_string(), MAX_APPROVAL_PREVIEW_CHARS)
    }
}

/// Decides gated calls for the host (an in-process prompt, an MCP client's elicitation, a policy
/// service). Called once per gated call, before it runs; the runtime waits for it at most the
/// policy's `approvals.timeoutMs` (and never past the run's own deadline, after which the call is
/// still in flight and the run suspends as for any slow call).
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// The decision, or `None` when it cannot be made now: the call is parked until the host
    /// records one with `CodeMode::decide`.
    async fn decide(&self, request: &ApprovalRequest) -> Option<ApprovalDecision>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decisions_have_a_stable_wire_form() {
        assert_eq!(serde_json::to_value(ApprovalDecision::Approve).unwrap_or_default(), json!({"decision": "approve"}));
        assert_eq!(
            serde_json::to_value(ApprovalDecision::deny("no")).unwrap_or_default(),
            json!({"decision": "deny", "reason": "no"})
        );
    }

    #[test]
    fn previews_are_bounded() {
        assert_eq!(ApprovalRequest::preview(&json!({"a": 1})), r#"{"a":1}"#);
        let long = ApprovalRequest::preview(&json!({"s": "x".repeat(10_000)}));
        assert_eq!(long.chars().count(), MAX_APPROVAL_PREVIEW_CHARS + 1);
    }
}
