//! Runs served as MCP tasks (book: "Runs as MCP tasks"): the record a store keeps for each, so that any
//! replica of a fleet can answer `tasks/get`, `tasks/update` and `tasks/cancel` for it.
//!
//! A task is a run that a gateway drives itself instead of handing `waiting` back to the model. Its
//! id is the run's id (122 random bits: the capability, next to the client's scope). The record
//! holds what a poll reports — state, a short status message, the output carried over from the
//! resumes so far, and at the end the result exactly as `exec` would have returned it — and lives
//! until its expiry (`snapshotTtlSeconds` from the task's creation). Which process drives the task
//! is a separate, leased claim ([`crate::store::SnapshotStore::drive_task`]).

use crate::result::CodeModeOutput;
use crate::scope::RunScope;
use serde::{Deserialize, Serialize};

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// The run is being driven (or waits for a driver to take it over).
    Working,
    /// A nested call is parked for approval: the task waits for the client's answer.
    InputRequired,
    /// The run ended (completed, or failed with a code-mode error: the result says which).
    Completed,
    /// The task could not be carried to an end (its run vanished, the store failed).
    Failed,
    /// The client cancelled the task; the run was aborted.
    Cancelled,
}

impl TaskState {
    /// Whether nothing can change the task any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Failed | TaskState::Cancelled)
    }

    /// The state's wire name (`working`, `input_required`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Working => "working",
            TaskState::InputRequired => "input_required",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }
}

/// What a store keeps of one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    /// The task's id: its run's id.
    pub task_id: String,
    /// Who may see, answer or cancel the task: the scope of the client that started the run.
    pub scope: RunScope,
    /// Where it stands.
    pub state: TaskState,
    /// A short status message (which calls are pending; why it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The output of the run's earlier resumes, carried into the final result (as one `exec` that
    /// never returned `waiting` would have shown it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<CodeModeOutput>,
    /// The final result (state `completed`): the `exec` result JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// The final result is a failed run (`status: "failed"`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// The calls parked for approval, as the human is asked about them (state `input_required`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub questions: Vec<TaskQuestion>,
    /// The task's first record (Unix milliseconds).
    pub created_at_ms: u64,
    /// The latest change (Unix milliseconds).
    pub updated_at_ms: u64,
    /// When the record is dropped (Unix milliseconds).
    pub expires_at_ms: u64,
}

/// A call parked for approval, as a task's client is asked about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskQuestion {
    /// The parked call's request id (what the answer decides).
    pub request_id: u64,
    /// What the human is told: the tool, its input, why it is gated, the cell line.
    pub message: String,
}

impl TaskRecord {
    /// Whether the record is past its expiry at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        now_ms >= self.expires_at_ms
    }
}
