//! Upstream tasks as suspend points (book: "Runs as MCP tasks", upstream tasks): a server that
//! answers a nested `tools/call` with a task (the tasks extension, which the hub declares to every
//! server whose `tasks` setting is on) is polled with `tasks/get` at its poll interval until the task
//! ends; the run that made the call suspends meanwhile like for any slow call. The task is noted in a
//! fleet's call log ([`NestedToolCall::task_note`]), so the replica that resumes the run after this
//! one died continues polling the same task ([`NestedToolCall::resume`]) instead of running the tool
//! again. A call whose run was aborted or expired cancels the task upstream with `tasks/cancel` (see
//! [`poll`] for who sends it). A task that asks for input (`input_required`) parks its call on the
//! question ([`Polled::Ask`]); the human's answer goes to the task with `tasks/update` ([`answer`]).

use super::*;
use codemode_core::executor::TaskNoteSink;
use codemode_core::store::CallOwner;
use rmcp::model::{CancelTaskParams, GetTaskParams, TaskPayload};

/// Shortest poll interval honoured. Prevents: a server answering `pollIntervalMs: 0` making the
/// hub poll it in a tight loop.
pub(super) const MIN_POLL_MS: u64 = 50;
/// Longest poll interval honoured (a task that ends is noticed within this).
pub(super) const MAX_POLL_MS: u64 = 10_000;
/// The poll interval of a task whose server suggests none.
pub(super) const DEFAULT_POLL_MS: u64 = 500;
/// Longest upstream task id kept in a note. Prevents: a server's huge id growing the call log.
const MAX_TASK_ID_BYTES: usize = 512;
/// Longest status message of an upstream task relayed as progress.
const MAX_STATUS_CHARS: usize = 500;

/// Most input requests of one `input_required` answered (each gets the human's one answer).
const MAX_INPUT_KEYS: usize = 16;
/// Longest key of an input request kept.
const MAX_INPUT_KEY_BYTES: usize = 128;
/// Longest question put to the human.
const MAX_QUESTION_CHARS: usize = 1_000;

/// What a call's note says: which server runs which task (and, for a task that asked for input,
/// the keys of the input requests the answer goes to).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Note {
    server: String,
    pub(super) task_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) keys: Vec<String>,
}

/// The note of `task_id` on `server` (with the `keys` of the input it asks for).
pub(super) fn note_of(server: &str, task_id: &str, keys: Vec<String>) -> Option<String> {
    if task_id.len() > MAX_TASK_ID_BYTES {
        return None;
    }
    serde_json::to_string(&Note { server: server.to_string(), task_id: task_id.to_string(), keys }).ok()
}

/// The note a stored text gives for `server`; `Err` when it is unreadable or names another
/// server (a stored byte cannot make this call poll another server's task).
pub(super) fn task_of_note(server: &str, note: &str) -> Result<Note, ToolError> {
    match serde_json::from_str::<Note>(note) {
        Ok(n) if n.server == server && n.task_id.len() <= MAX_TASK_ID_BYTES && n.keys.len() <= MAX_INPUT_KEYS => Ok(n),
        Ok(_) => Err(ToolError::failed(format!(
            "the call log names a task of another server for this call of `{server}`; it is not continued"
        ))),
        Err(_) => Err(ToolError::failed("the call log's note of this call's upstream task is unreadable")),
    }
}

/// Sends `tasks/cancel` for a task whose call was given up before it ended (dropped with its run).
pub(super) struct CancelTaskOnDrop {
    pub(super) peer: Peer<RoleClient>,
    pub(super) task_id: Option<String>,
}

impl Drop for CancelTaskOnDrop {
    fn drop(&mut self) {
        let (Some(id), Ok(rt)) = (self.task_id.take(), tokio::runtime::Handle::try_current()) else { return };
        let peer = self.peer.clone();
        rt.spawn(async move {
            match peer.cancel_task(CancelTaskParams::new(id.clone())).await {
                Ok(()) => tracing::info!(task = %id, "upstream task cancelled: its code mode run was aborted"),
                Err(e) => tracing::warn!(task = %id, error = %e, "cannot cancel an upstream task"),
            }
        });
    }
}

/// A semantic failure of an upstream task, as the hub reports any server error.
fn failed(message: String) -> Polled {
    Polled::Failed(ServiceError::McpError(rmcp::model::ErrorData::internal_error(message, None)))
}

/// How polling an upstream task ended without a result.
pub(super) enum Polled {
    /// The task (or the server) failed.
    Failed(ServiceError),
    /// The task asks for input: `question` goes to the human, whose answer goes to `keys`.
    Ask {
        /// What the task asks, for the human.
        question: String,
        /// The keys of the input requests the answer goes to.
        keys: Vec<String>,
    },
}

impl From<ServiceError> for Polled {
    fn from(e: ServiceError) -> Self {
        Polled::Failed(e)
    }
}

/// Sends a human's answer to the input requests `keys` of task `task_id` (`tasks/update`): accept
/// (with empty content: codemode relays confirmations, not form fields) or decline.
pub(super) async fn answer(
    peer: &Peer<RoleClient>,
    task_id: &str,
    keys: &[String],
    accept: bool,
    limit: Duration,
) -> Result<(), ServiceError> {
    let action = if accept { json!({ "action": "accept", "content": {} }) } else { json!({ "action": "decline" }) };
    let responses: rmcp::model::InputResponses = keys.iter().map(|k| (k.clone(), action.clone())).collect();
    let params = rmcp::model::UpdateTaskParams::new(task_id.to_string(), responses);
    tokio::time::timeout(limit, peer.update_task(params)).await.map_err(|_| {
        ServiceError::McpError(rmcp::model::ErrorData::internal_error("tasks/update did not answer in time", None))
    })?
}

/// The question an `input_required` task puts to the human: the messages of its input requests.
fn question_of(requests: &rmcp::model::InputRequests) -> String {
    let messages: Vec<String> = requests
        .values()
        .filter_map(|r| serde_json::to_value(r).ok()?.pointer("/params/message")?.as_str().map(str::to_string))
        .collect();
    let text = if messages.is_empty() { "(the task gave no message)".to_string() } else { messages.join(" / ") };
    let text: String = text.chars().take(MAX_QUESTION_CHARS).collect();
    codemode_core::text::for_display(&text).into_owned()
}

/// Polls `task_id` on `peer` until it ends: its result (the `CallToolResult` it inlines), or the
/// failure. `interval_ms` is the first poll interval (then the server's latest suggestion, clamped
/// to [`MIN_POLL_MS`]..=[`MAX_POLL_MS`]); each `tasks/get` must answer within `limit`. Status
/// messages go to `progress`.
///
/// Who cancels the task upstream: in one process (`fleet` is `None`), a call dropped before its
/// task ended (its run aborted or expired) cancels it. On a fleet, a dropped call does not — the
/// process may be stopping while the run goes on elsewhere — but before each poll the call log is
/// asked whether the call is still wanted: a run aborted anywhere ([`CallOwner::Gone`]) cancels the
/// task, a call another replica took over ([`CallOwner::Moved`]) leaves it to that replica.
pub(super) async fn poll(
    peer: &Peer<RoleClient>,
    task_id: String,
    mut interval_ms: u64,
    limit: Duration,
    progress: Option<&ProgressSink>,
    fleet: Option<&TaskNoteSink>,
) -> Result<Value, Polled> {
    let armed = fleet.is_none().then(|| task_id.clone());
    let mut guard = CancelTaskOnDrop { peer: peer.clone(), task_id: armed };
    let mut last_status: Option<String> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(interval_ms.clamp(MIN_POLL_MS, MAX_POLL_MS))).await;
        if let Some(sink) = fleet {
            match sink.owner().await {
                CallOwner::Mine => {}
                CallOwner::Gone => {
                    guard.task_id = Some(task_id.clone());
                    return Err(failed("its run is gone (aborted or expired); the task was cancelled".into()));
                }
                CallOwner::Moved => {
                    return Err(failed("another replica took the call over; it waits on the task now".into()));
                }
            }
        }
        let got = tokio::time::timeout(limit, peer.get_task(GetTaskParams::new(task_id.clone())))
            .await
            .map_err(|_| failed(format!("tasks/get of upstream task `{task_id}` did not answer in time")))??;
        let detailed = got.task;
        if let Some(ms) = detailed.task.poll_interval_ms {
            interval_ms = ms;
        }
        if let (Some(sink), Some(m)) = (progress, &detailed.task.status_message)
            && last_status.as_ref() != Some(m)
        {
            sink.report(format!("upstream task: {}", m.chars().take(MAX_STATUS_CHARS).collect::<String>()));
            last_status = Some(m.clone());
        }
        match detailed.payload {
            TaskPayload::Working => continue,
            TaskPayload::Completed { mut result } => {
                guard.task_id = None;
                result.remove("resultType");
                return Ok(Value::Object(result));
            }
            TaskPayload::Failed { error } => {
                guard.task_id = None;
                let why = error.get("message").and_then(Value::as_str).unwrap_or("no reason given").to_string();
                return Err(failed(format!("its task failed: {why}")));
            }
            TaskPayload::Cancelled => {
                guard.task_id = None;
                return Err(failed("its task was cancelled by the server".into()));
            }
            // The task asks for input: the call parks on the question (the task stays), and is
            // continued with the human's answer.
            TaskPayload::InputRequired { input_requests } => {
                let keys: Vec<String> = input_requests.keys().take(MAX_INPUT_KEYS).cloned().collect();
                if keys.is_empty() || keys.iter().any(|k| k.len() > MAX_INPUT_KEY_BYTES) {
                    return Err(failed("its task asks for input it does not name; the task was cancelled".into()));
                }
                guard.task_id = None;
                return Err(Polled::Ask { question: question_of(&input_requests), keys });
            }
            _ => return Err(failed("its task reported a status this client does not know".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_name_their_server() {
        let note = note_of("jobs", "t-1", vec!["k".into()]).unwrap();
        let read = task_of_note("jobs", &note).unwrap();
        assert_eq!((read.task_id.as_str(), read.keys.as_slice()), ("t-1", &["k".to_string()][..]));
        assert!(task_of_note("other", &note).is_err(), "a note never moves a call to another server");
        assert!(task_of_note("jobs", "{not json").is_err());
        assert!(note_of("jobs", &"x".repeat(MAX_TASK_ID_BYTES + 1), Vec::new()).is_none());
        let many = note_of("jobs", "t", (0..=MAX_INPUT_KEYS).map(|i| i.to_string()).collect()).unwrap();
        assert!(task_of_note("jobs", &many).is_err(), "a stored note cannot name more keys than are answered");
    }
}
