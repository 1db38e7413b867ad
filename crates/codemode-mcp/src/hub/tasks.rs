//! Upstream tasks as suspend points (book: "Runs as MCP tasks", upstream tasks): a server that answers a nested
//! `tools/call` with a task (the tasks extension, which the hub declares to every server whose
//! `tasks` setting is on) is polled with `tasks/get` at its poll interval until the task ends; the
//! run that made the call suspends meanwhile like for any slow call. The task is noted in a fleet's
//! call log ([`NestedToolCall::task_note`]), so the replica that resumes the run after this one died
//! continues polling the same task ([`NestedToolCall::resume`]) instead of running the tool again;
//! a call given up (its run aborted or expired) cancels the task upstream with `tasks/cancel`.

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

/// What a call's note says: which server runs which task.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Note {
    server: String,
    task_id: String,
}

/// The note of `task_id` on `server`.
pub(super) fn note_of(server: &str, task_id: &str) -> Option<String> {
    if task_id.len() > MAX_TASK_ID_BYTES {
        return None;
    }
    serde_json::to_string(&Note { server: server.to_string(), task_id: task_id.to_string() }).ok()
}

/// The task id a stored note names for `server`; `Err` when the note is unreadable or names another
/// server (a stored byte cannot make this call poll another server's task).
pub(super) fn task_of_note(server: &str, note: &str) -> Result<String, ToolError> {
    match serde_json::from_str::<Note>(note) {
        Ok(n) if n.server == server && n.task_id.len() <= MAX_TASK_ID_BYTES => Ok(n.task_id),
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
fn failed(message: String) -> ServiceError {
    ServiceError::McpError(rmcp::model::ErrorData::internal_error(message, None))
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
) -> Result<Value, ServiceError> {
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
            // Input a task asks for is not relayed to the human yet: the task is cancelled (by
            // the guard) and the call fails with the reason.
            TaskPayload::InputRequired { .. } => {
                return Err(failed(
                    "its task asks for input (tasks `input_required`), which codemode does not relay to the human yet; \
                     the task was cancelled"
                        .into(),
                ));
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
        let note = note_of("jobs", "t-1").unwrap();
        assert_eq!(task_of_note("jobs", &note).unwrap(), "t-1");
        assert!(task_of_note("other", &note).is_err(), "a note never moves a call to another server");
        assert!(task_of_note("jobs", "{not json").is_err());
        assert!(note_of("jobs", &"x".repeat(MAX_TASK_ID_BYTES + 1)).is_none());
    }
}
