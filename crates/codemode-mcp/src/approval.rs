//! Approvals through the MCP client (issue 11 §2): when the client of an MCP session declared the
//! elicitation capability, a gated nested call made by that session's cell is put to the human with
//! `elicitation/create`. Accept runs the call inside the same `exec`; decline or cancel deny it; no
//! answer within `approvals.timeoutMs` parks it (then `codemode approve` decides).

use codemode::{ApprovalDecision, ApprovalRequest, Approver};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::ElicitationMode;
use rmcp::{Peer, RoleServer};
use std::collections::HashMap;
use std::sync::Mutex;

/// Longest tool id, reason or input preview quoted to the human (each is bounded again by the
/// approval request itself).
const MAX_FIELD_CHARS: usize = 1_000;

/// Asks the human behind each MCP session about that session's gated calls.
#[derive(Default)]
pub struct ElicitingApprover {
    peers: Mutex<HashMap<String, Peer<RoleServer>>>,
}

impl std::fmt::Debug for ElicitingApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElicitingApprover").finish_non_exhaustive()
    }
}

fn cut(s: &str) -> String {
    if s.chars().count() <= MAX_FIELD_CHARS {
        return s.to_string();
    }
    s.chars().take(MAX_FIELD_CHARS).chain(std::iter::once('…')).collect()
}

impl ElicitingApprover {
    /// Remembers the client of `session` if it can answer form elicitations (else forgets it: its
    /// gated calls park).
    pub fn register(&self, session: &str, peer: &Peer<RoleServer>) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if peer.supported_elicitation_modes().contains(&ElicitationMode::Form) {
            peers.insert(session.to_string(), peer.clone());
        } else {
            peers.remove(session);
        }
    }

    /// Forgets a closed session.
    pub fn forget(&self, session: &str) {
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).remove(session);
    }

    /// The question put to the human.
    pub fn message(request: &ApprovalRequest) -> String {
        let line = request.cell_line.map(|l| format!(" at line {l} of the cell")).unwrap_or_default();
        format!(
            "Code mode wants to call `{}`{line} from inside a running cell (run {}, request {}).\nWhy approval is needed: {}\nInput: {}\nAccept to run it, decline to refuse it.",
            cut(&request.tool_id),
            request.run_id,
            request.request_id,
            cut(&request.reason),
            cut(&request.input_preview),
        )
    }
}

#[async_trait::async_trait]
impl Approver for ElicitingApprover {
    async fn decide(&self, request: &ApprovalRequest) -> Option<ApprovalDecision> {
        let session = request.context.scope.session_id.as_deref()?;
        let peer = self.peers.lock().unwrap_or_else(|p| p.into_inner()).get(session).cloned()?;
        // An empty form: the answer is the action itself.
        let schema: ElicitationSchema =
            serde_json::from_value(serde_json::json!({ "type": "object", "properties": {} })).ok()?;
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: Self::message(request),
            requested_schema: schema,
        };
        let decision = match peer.create_elicitation(params).await {
            Ok(answer) => match answer.action {
                ElicitationAction::Accept => ApprovalDecision::Approve,
                ElicitationAction::Decline => ApprovalDecision::deny("declined by the user"),
                ElicitationAction::Cancel => ApprovalDecision::deny("cancelled by the user"),
                // A newer protocol's action: not an approval.
                _ => ApprovalDecision::deny("the client's answer was not an approval"),
            },
            Err(e) => {
                tracing::warn!(target: "codemode::approval", %session, error = %e, "elicitation failed; the call is parked");
                return None;
            }
        };
        tracing::info!(
            target: "codemode::approval",
            run = %request.run_id,
            request = request.request_id,
            tool = %request.tool_id,
            ?decision,
            "approval decided through MCP elicitation"
        );
        Some(decision)
    }
}
