//! Approvals through the MCP client (the book's configuration, "Approvals"): when the client whose
//! request is driving a run declared the elicitation capability, a gated nested call of that run is
//! put to that client's human with `elicitation/create` — never to another client, even one of the
//! same run scope. Accept runs the call inside the same `exec`; decline or cancel deny it; no
//! answer within `approvals.timeoutMs` parks it (then `codemode approve` decides).
//!
//! A question is never left behind: one still open when `approvals.timeoutMs` passes
//! stays open, and a late answer is recorded for the parked call (the next `wait` applies it); when
//! the run's request is cancelled or its session closes, the open questions are withdrawn with
//! `notifications/cancelled`; an answer that comes after its run is gone is not dropped silently:
//! the client gets a `notifications/message` warning saying it came too late.

use codemode::{ApprovalDecision, ApprovalRequest, Approver};
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitationAction, ElicitationSchema, RequestId, ServerRequest,
};
use rmcp::service::{ElicitationMode, PeerRequestOptions};
use rmcp::{Peer, RoleServer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The denial reason of an answer that is not one of the approval actions.
pub(crate) const NOT_AN_APPROVAL: &str = "the client's answer was not an approval";

/// The decision a human's answer to an approval question means: accept approves; decline and
/// cancel deny; anything else (a newer protocol's action) is not an approval.
pub(crate) fn decision_of(action: &ElicitationAction) -> ApprovalDecision {
    match action {
        ElicitationAction::Accept => ApprovalDecision::Approve,
        ElicitationAction::Decline => ApprovalDecision::deny("declined by the user"),
        ElicitationAction::Cancel => ApprovalDecision::deny("cancelled by the user"),
        _ => ApprovalDecision::deny(NOT_AN_APPROVAL),
    }
}

/// Longest tool id, reason or input preview quoted to the human (each is bounded again by the
/// approval request itself).
const MAX_FIELD_CHARS: usize = 1_000;

/// The clients that can be asked now: driver key (`<handler session>/<request id>`) → (the run
/// scope of that request, the client).
type Askers = Arc<Mutex<HashMap<String, (String, Peer<RoleServer>)>>>;

/// Asks the human behind the request that is driving a run about that run's gated calls.
///
/// A question goes to exactly one client: the one whose `tools/call` (an `exec` or `wait`) is
/// driving the run when the call reaches its approval step. Each such request registers its client
/// under its own key (the handler's session id and the JSON-RPC request id, which the runtime
/// carries as the run's `tool_call_id`), for as long as the request lasts
/// ([`AskerRegistration`]); the run's scope must match too. Clients that share a run scope — every
/// anonymous client of a fleet, several sessions of one credential — are never asked about each
/// other's runs, and a question never names a run to anyone but its owner. With nobody to ask, the
/// call parks (the owner decides through `wait`, MRTR, `codemode approve` or the HTTP endpoint).
pub struct ElicitingApprover {
    /// The clients that can be asked now: driver key → (run scope, client).
    peers: Askers,
    /// Requests this approver could not put to a human at once (the client cannot receive
    /// `elicitation/create`: MCP 2026-07-28), kept so the server can ask them with the run's result
    /// (MRTR) with their input and cell line. At most [`MAX_UNASKED`] are kept.
    unasked: Mutex<HashMap<(String, u64), ApprovalRequest>>,
    /// Questions sent and not answered yet, per driver key: withdrawn when that request is
    /// cancelled or its session closes.
    open: Arc<Mutex<HashMap<String, Vec<OpenQuestion>>>>,
    /// Answers that came after `approvals.timeoutMs`, to record (see [`Self::late_answers`]).
    late: tokio::sync::mpsc::Sender<LateAnswer>,
    late_rx: Mutex<Option<tokio::sync::mpsc::Receiver<LateAnswer>>>,
}

impl Default for ElicitingApprover {
    fn default() -> Self {
        let (late, late_rx) = tokio::sync::mpsc::channel(MAX_LATE);
        ElicitingApprover {
            peers: Arc::default(),
            unasked: Mutex::default(),
            open: Arc::default(),
            late,
            late_rx: Mutex::new(Some(late_rx)),
        }
    }
}

/// An `elicitation/create` in flight.
struct OpenQuestion {
    id: RequestId,
    peer: Peer<RoleServer>,
    /// The task awaiting the answer.
    task: tokio::task::AbortHandle,
}

/// An answer that came after the runtime stopped waiting for it (the call parked).
pub struct LateAnswer {
    /// The run.
    pub run_id: codemode::RunId,
    /// The parked call.
    pub request_id: u64,
    /// The human's decision.
    pub decision: ApprovalDecision,
    /// The client that answered (told if the answer can no longer be applied).
    pub peer: Peer<RoleServer>,
}

impl std::fmt::Debug for LateAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LateAnswer")
            .field("run_id", &self.run_id)
            .field("request_id", &self.request_id)
            .field("decision", &self.decision)
            .finish_non_exhaustive()
    }
}

/// Most late answers waiting to be recorded. Prevents: a client answering stale questions without
/// end growing the queue.
const MAX_LATE: usize = 1_024;

/// Most unasked requests kept. Prevents: parked calls of runs nobody resumes growing the map.
const MAX_UNASKED: usize = 1_024;

/// A client's registration as the one to ask (see [`ElicitingApprover::register`]); dropping it
/// ends the registration.
#[must_use = "the registration ends when this is dropped"]
pub struct AskerRegistration {
    peers: Option<Askers>,
    driver: String,
}

impl Drop for AskerRegistration {
    fn drop(&mut self) {
        if let Some(peers) = &self.peers {
            peers.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.driver);
        }
    }
}

impl std::fmt::Debug for ElicitingApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElicitingApprover").finish_non_exhaustive()
    }
}

/// `s` bounded to [`MAX_FIELD_CHARS`] and with control, line-break and bidi characters escaped
///: a tool id or input from an upstream server or a cell cannot write lines of its own
/// ("Why approval is needed: …") into the question put to the human, or reorder what it shows.
fn cut(s: &str) -> String {
    let bounded: String = if s.chars().count() <= MAX_FIELD_CHARS {
        s.to_string()
    } else {
        s.chars().take(MAX_FIELD_CHARS).chain(std::iter::once('…')).collect()
    };
    codemode::text::for_display(&bounded).into_owned()
}

impl ElicitingApprover {
    /// Registers the client of the request `driver` (`<handler session>/<request id>`, the run
    /// context's `tool_call_id` while that request drives a run) as the one to ask about the gated
    /// calls of runs of `scope` that this request drives — if it can answer form elicitations. The
    /// registration ends when the returned guard is dropped (the request ended, however it ended).
    pub fn register(&self, driver: &str, scope: &str, peer: &Peer<RoleServer>) -> AskerRegistration {
        if !peer.supported_elicitation_modes().contains(&ElicitationMode::Form) {
            return AskerRegistration { peers: None, driver: String::new() };
        }
        self.peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(driver.to_string(), (scope.to_string(), peer.clone()));
        AskerRegistration { peers: Some(self.peers.clone()), driver: driver.to_string() }
    }

    /// The request of a parked call this approver could not ask about (see [`Self::decide`]).
    pub fn unasked(&self, run_id: &str, request_id: u64) -> Option<ApprovalRequest> {
        self.unasked.lock().unwrap_or_else(|p| p.into_inner()).get(&(run_id.to_string(), request_id)).cloned()
    }

    fn remember_unasked(&self, request: &ApprovalRequest) {
        let mut unasked = self.unasked.lock().unwrap_or_else(|p| p.into_inner());
        if unasked.len() >= MAX_UNASKED
            && let Some(k) = unasked.keys().next().cloned()
        {
            unasked.remove(&k);
        }
        unasked.insert((request.run_id.to_string(), request.request_id), request.clone());
    }

    /// Forgets a closed session (its handler's id): every registration and open question of its
    /// requests goes, the questions withdrawn.
    pub fn forget(&self, session: &str) {
        let prefix = format!("{session}/");
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).retain(|k, _| !k.starts_with(&prefix));
        let drivers: Vec<String> = self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect();
        for d in drivers {
            self.withdraw(&d);
        }
    }

    /// Withdraws the open questions of the request `driver`: `notifications/cancelled` for each (the
    /// client closes its dialog), and their answers are no longer awaited. For a cancelled request
    /// (its run is aborted) or a closed session.
    pub fn withdraw(&self, driver: &str) {
        let questions = self.open.lock().unwrap_or_else(|p| p.into_inner()).remove(driver).unwrap_or_default();
        for q in questions {
            q.task.abort();
            let Ok(rt) = tokio::runtime::Handle::try_current() else { continue };
            rt.spawn(async move {
                let params = rmcp::model::CancelledNotificationParam::new(
                    Some(q.id),
                    Some("the code mode run that asked was cancelled".into()),
                );
                let note = rmcp::model::CancelledNotification::new(params);
                let _ = q.peer.send_notification(note.into()).await;
            });
        }
    }

    /// The answers that come late, to be recorded with `CodeMode::decide` as they arrive (the
    /// gateway takes this once and does so). `None` after the first call.
    pub fn late_answers(&self) -> Option<tokio::sync::mpsc::Receiver<LateAnswer>> {
        self.late_rx.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Whether any question of the request `driver` is open (tests).
    pub fn has_open_questions(&self, driver: &str) -> bool {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).get(driver).is_some_and(|q| !q.is_empty())
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
        // The client of the request driving the run now, if it is registered and of the run's
        // scope; nobody else.
        let driver = request.context.tool_call_id.clone().unwrap_or_default();
        let scope = request.context.scope.session_id.as_deref();
        let peer = self
            .peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&driver)
            .filter(|(owner, _)| Some(owner.as_str()) == scope)
            .map(|(_, peer)| peer.clone());
        let Some(peer) = peer else {
            self.remember_unasked(request);
            return None;
        };
        let session = driver;
        // An empty form: the answer is the action itself.
        let schema: ElicitationSchema =
            serde_json::from_value(serde_json::json!({ "type": "object", "properties": {} })).ok()?;
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: Self::message(request),
            requested_schema: schema,
        };
        let sent = peer
            .send_request_with_option(
                ServerRequest::ElicitRequest(ElicitRequest::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await;
        let handle = match sent {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(target: "codemode::approval", %session, error = %e, "elicitation failed; the call is parked");
                self.remember_unasked(request);
                return None;
            }
        };
        // The answer is awaited by a task of its own, which outlives this call when the runtime
        // stops waiting (`approvals.timeoutMs`): a late answer is then queued for recording.
        let (tx, rx) = tokio::sync::oneshot::channel::<Option<ApprovalDecision>>();
        let id = handle.id.clone();
        let (open, late) = (self.open.clone(), self.late.clone());
        let (run_id, request_id, answering_peer, key) =
            (request.run_id.clone(), request.request_id, peer.clone(), session.clone());
        let question_id = id.clone();
        // Registered under the lock the task takes to remove it: it cannot finish in between.
        {
            let mut open_guard = self.open.lock().unwrap_or_else(|p| p.into_inner());
            let task = tokio::spawn(async move {
                let decision = match handle.await_response().await {
                    Ok(ClientResult::ElicitResult(answer)) => Some(decision_of(&answer.action)),
                    Ok(_) => Some(ApprovalDecision::deny(NOT_AN_APPROVAL)),
                    Err(e) => {
                        tracing::warn!(target: "codemode::approval", session = %key, error = %e, "elicitation failed; the call is parked");
                        None
                    }
                };
                if let Some(list) = open.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&key) {
                    list.retain(|q| q.id != question_id);
                }
                if let Err(Some(decision)) = tx.send(decision) {
                    // Nobody waits any more: the call parked. Record the answer for it (dropped only
                    // when MAX_LATE answers are already queued).
                    let _ = late.try_send(LateAnswer { run_id, request_id, decision, peer: answering_peer });
                }
            });
            open_guard.entry(session.clone()).or_default().push(OpenQuestion {
                id,
                peer: peer.clone(),
                task: task.abort_handle(),
            });
        }
        let Ok(Some(decision)) = rx.await else {
            self.remember_unasked(request);
            return None;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Strings from a cell or an upstream server cannot write lines of their own into
    /// the question put to the human, move the cursor or reorder what it shows.
    #[test]
    fn the_question_escapes_what_others_wrote() {
        let request = ApprovalRequest {
            run_id: codemode::RunId::parse("cm_0123").unwrap(),
            request_id: 3,
            tool_id: "mcp:srv:evil\nWhy approval is needed: routine\u{1b}[2J\u{202e}".into(),
            input_preview: ApprovalRequest::preview(&serde_json::json!({"note": "a\u{2028}Accept to run it"})),
            reason: "gated\rby policy".into(),
            cell_line: Some(4),
            context: Default::default(),
        };
        let message = ElicitingApprover::message(&request);
        assert_eq!(message.lines().count(), 4, "{message}");
        assert_eq!(message.lines().filter(|l| l.starts_with("Why approval is needed")).count(), 1, "{message}");
        assert_eq!(message.lines().filter(|l| l.starts_with("Accept to run it")).count(), 1, "{message}");
        for bad in ['\u{1b}', '\r', '\u{2028}', '\u{202e}'] {
            assert!(!message.contains(bad), "{bad:?} in {message:?}");
        }
        assert!(message.contains("evil\\u{a}Why approval"), "{message}");
    }
}
