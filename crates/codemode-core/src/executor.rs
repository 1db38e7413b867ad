//! The tool execution contract (contract §12): every nested call reaches the host through a
//! [`ToolExecutor`], the host's normal execution path with its hooks, approvals and audit.

use crate::catalog::ToolDefinition;
use crate::engine::RequestId;
use crate::scope::{RunContext, RunId};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// One nested call, with the context it must preserve (contract P1–P9).
#[derive(Debug, Clone)]
pub struct NestedToolCall {
    /// The code-mode run making the call.
    pub run_id: RunId,
    /// The bridge request id (unique within the run).
    pub request_id: RequestId,
    /// The exact catalog id (shared with the catalog's entry: a reference count a call, not a copy).
    pub tool_id: crate::catalog::ToolId,
    /// The tool's definition.
    pub tool: Arc<ToolDefinition>,
    /// The input object (JSON-safe, sanitised).
    pub input: Value,
    /// The caller's context (agent, session, sender, channel, model), shared by every call of the
    /// run (one reference count a call, not a copy of its strings).
    pub context: Arc<RunContext>,
    /// Where the tool may report progress while it runs (contract P8; an upstream MCP server's own
    /// progress notifications go here). `None` when nobody watches the run.
    pub progress: Option<ProgressSink>,
    /// Where the executor notes that the call became a long-running task on its server (an opaque
    /// note, such as an upstream MCP task's id): a fleet's call log keeps it, so the replica that
    /// resumes the run after this one died continues that task instead of starting the call again
    /// (book: "Runs as MCP tasks", upstream tasks). `None` when the store keeps no call log (one process).
    pub task_note: Option<TaskNoteSink>,
    /// The note of a task an earlier process started for this call (see `task_note`): the
    /// executor continues that task instead of running the call again. Read from the store, so an
    /// executor only accepts a note naming the call's own server.
    pub resume: Option<String>,
    /// The human's answer to the question the call parked on (`true`: accept, `false`: decline),
    /// given with the `resume` of a call that asked (see [`ToolErrorKind::InputRequired`]).
    pub answer: Option<bool>,
}

/// Asks the store who owns a logged call now (see [`TaskNoteSink::with_owner`]).
type OwnerProbe =
    Arc<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = crate::store::CallOwner> + Send>> + Send + Sync>;

/// Receives the note of a call that became a task (see [`NestedToolCall::task_note`]), and tells
/// the executor whether the call is still this process's to wait on.
#[derive(Clone)]
pub struct TaskNoteSink {
    note: Arc<dyn Fn(String) + Send + Sync>,
    owner: Option<OwnerProbe>,
}

impl TaskNoteSink {
    /// A sink calling `f` with the note (it must not block: it runs on the tool's task).
    pub fn new(f: impl Fn(String) + Send + Sync + 'static) -> Self {
        TaskNoteSink { note: Arc::new(f), owner: None }
    }

    /// The sink with a probe of the call's owner: a call whose run was aborted elsewhere is
    /// [`Gone`](crate::store::CallOwner::Gone) (its task is cancelled), one another replica took
    /// over is [`Moved`](crate::store::CallOwner::Moved) (its task is left to that replica).
    pub fn with_owner<F, Fut>(mut self, probe: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = crate::store::CallOwner> + Send + 'static,
    {
        self.owner = Some(Arc::new(move || Box::pin(probe())));
        self
    }

    /// Records the note.
    pub fn note(&self, note: impl Into<String>) {
        (self.note)(note.into());
    }

    /// Who owns the call now ([`Mine`](crate::store::CallOwner::Mine) without a probe).
    pub async fn owner(&self) -> crate::store::CallOwner {
        match &self.owner {
            Some(probe) => probe().await,
            None => crate::store::CallOwner::Mine,
        }
    }
}

impl std::fmt::Debug for TaskNoteSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TaskNoteSink")
    }
}

/// Receives a running tool's progress messages (see [`NestedToolCall::progress`]).
#[derive(Clone)]
pub struct ProgressSink(Arc<dyn Fn(String) + Send + Sync>);

impl ProgressSink {
    /// A sink calling `f` with each message (keep it cheap: it runs on the tool's task).
    pub fn new(f: impl Fn(String) + Send + Sync + 'static) -> Self {
        ProgressSink(Arc::new(f))
    }

    /// Reports one progress message.
    pub fn report(&self, message: impl Into<String>) {
        (self.0)(message.into());
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressSink")
    }
}

/// The `toolKind` of the outer `exec` / `wait` call in hook events (contract X8): policies use it to tell
/// code-mode cells apart from shell-style `exec` calls with the same name.
pub const CODE_MODE_TOOL_KIND: &str = "code_mode_exec";

/// The outer `exec` / `wait` call, as hooks see it before it runs (contract X8).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CodeModeCallEvent {
    /// `exec` or `wait`.
    pub tool_name: String,
    /// Always [`CODE_MODE_TOOL_KIND`].
    pub tool_kind: &'static str,
    /// The cell's language (`javascript` | `typescript`) for `exec`; `None` for `wait`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_input_kind: Option<String>,
    /// The run a `wait` resumes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The caller's context.
    pub context: RunContext,
}

/// Something that happened inside a run while an `exec` / `wait` drove it (contract P8): what a host
/// shows as progress (`codemode serve` relays it as MCP progress notifications).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "camelCase", rename_all_fields = "camelCase")]
#[non_exhaustive]
pub enum RunEvent {
    /// A nested call started (or was put to the approval gate).
    CallStarted {
        /// The run.
        run_id: String,
        /// The call's request id.
        request_id: RequestId,
        /// The exact catalog id.
        tool_id: String,
    },
    /// A nested call settled.
    CallFinished {
        /// The run.
        run_id: String,
        /// The call's request id.
        request_id: RequestId,
        /// The exact catalog id.
        tool_id: String,
        /// Whether it succeeded.
        ok: bool,
    },
    /// A running nested call reported progress (an upstream MCP server's progress notification).
    CallProgress {
        /// The run.
        run_id: String,
        /// The call's request id.
        request_id: RequestId,
        /// The exact catalog id.
        tool_id: String,
        /// What the tool said (progress, total and message, as text).
        message: String,
    },
    /// A gated call was parked until a human decides.
    CallParked {
        /// The run.
        run_id: String,
        /// The call's request id.
        request_id: RequestId,
        /// The exact catalog id.
        tool_id: String,
    },
    /// A trajectory record: an `exec` / `wait` call started or ended, or a nested call event with
    /// its parent call id, input / result (redacted) and timing.
    Trace(Box<crate::trajectory::TraceRecord>),
    /// The cell produced output (`text`, `json`, `console.log`), delivered with the drive step
    /// that produced it.
    Output {
        /// The run.
        run_id: String,
        /// The item (also part of the call's final result).
        item: crate::result::CodeModeOutput,
    },
}

/// Receives a run's [`RunEvent`]s as they happen. Called on the guest worker thread: keep it
/// cheap (hand the event to a channel).
pub trait RunObserver: Send + Sync {
    /// One event.
    fn on_event(&self, event: RunEvent);
}

/// A tool's successful result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The JSON-compatible `details` value: what `tools.callValue` returns and what an output schema
    /// describes (contract D1).
    pub details: Value,
    /// Rendered content blocks (e.g. `[{type: "text", text}]`), part of the raw `tools.call` result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Value>,
}

impl ToolResult {
    /// A result with only `details`; a raw `tools.call` shows it as one text block of its JSON.
    pub fn value(details: Value) -> Self {
        Self { details, content: Vec::new() }
    }

    /// A result whose content is the compact JSON text of `details`.
    pub fn from_details(details: Value) -> Self {
        let text = serde_json::to_string(&details).unwrap_or_default();
        Self { details, content: vec![serde_json::json!({ "type": "text", "text": text })] }
    }
}

/// Why a nested call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// The tool ran and reported an error.
    Failed,
    /// Policy, a hook or an approval refused the call.
    Denied,
    /// The input did not satisfy the tool's schema.
    InvalidInput,
    /// The call was cancelled (abort, shutdown).
    Cancelled,
    /// The tool's result broke its declared output contract (contract D4).
    OutputContract,
    /// The host could not run the tool (upstream down, crashed, timed out).
    Unavailable,
    /// The tool is waiting for a human's answer to a question it asked (an upstream MCP task in
    /// `input_required`): the call parks like one gated for approval, and the human's decision is
    /// its answer ([`NestedToolCall::answer`]); [`ToolError::resume`] is what continues it.
    InputRequired,
}

/// A nested call's failure, delivered to the guest as a plain `Error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{message}")]
pub struct ToolError {
    /// What kind of failure.
    pub kind: ToolErrorKind,
    /// A message for the guest (and the model); for [`ToolErrorKind::InputRequired`], the question.
    pub message: String,
    /// For [`ToolErrorKind::InputRequired`]: the note that continues the call once answered (see
    /// [`NestedToolCall::resume`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
}

impl ToolError {
    /// A tool-reported failure.
    pub fn failed(message: impl Into<String>) -> Self {
        Self { kind: ToolErrorKind::Failed, message: message.into(), resume: None }
    }

    /// A failure of the given kind.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), resume: None }
    }

    /// A call waiting for a human's answer to `question`, continued later from `resume`.
    pub fn input_required(question: impl Into<String>, resume: String) -> Self {
        Self { kind: ToolErrorKind::InputRequired, message: question.into(), resume: Some(resume) }
    }
}

/// Runs nested tool calls on the host's normal path.
#[async_trait::async_trait]
pub trait ToolExecutor: Send + Sync {
    /// Runs one call. Dropping the future cancels the call.
    async fn call(&self, call: NestedToolCall) -> Result<ToolResult, ToolError>;
}
