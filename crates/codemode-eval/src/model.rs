//! What a model sees and says, independent of any provider: a [`Request`] (system text, tool
//! definitions, messages) and a [`Reply`] (text and tool calls). The providers ([`crate::openai`],
//! [`crate::anthropic`]) translate these to and from their wire formats; the [`crate::oracle`]
//! answers them from a recorded trajectory.

use crate::suite::{Arm, Task};
use serde::Serialize;
use serde_json::Value;

/// A tool the model may call, as the surface under test lists it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its input JSON Schema.
    pub input_schema: Value,
}

/// One tool call the model asked for.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ToolCall {
    /// The call's id (the provider's, or one the oracle makes up), echoed with its result.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its input.
    pub arguments: Value,
}

/// One message of the conversation.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// The task's prompt.
    User {
        /// The text.
        text: String,
    },
    /// A model turn: text and the tool calls it made.
    Assistant {
        /// The text (may be empty).
        text: String,
        /// The calls (none: the turn is the final answer).
        calls: Vec<ToolCall>,
    },
    /// A tool call's result, as it enters the context.
    Tool {
        /// The call's id.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The result's text.
        content: String,
        /// The result is an error.
        is_error: bool,
    },
}

/// Everything a model turn is asked with: the whole context, every turn.
#[derive(Debug, Clone, Serialize)]
pub struct Request {
    /// The system text.
    pub system: String,
    /// The tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// The conversation so far.
    pub messages: Vec<Message>,
}

/// Tokens as a provider reported them for one turn.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens the provider billed.
    pub input_tokens: u64,
    /// Output tokens the provider billed.
    pub output_tokens: u64,
}

/// A model turn's answer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Reply {
    /// Text (the final answer when there are no calls).
    pub text: String,
    /// Tool calls to run before the next turn.
    pub calls: Vec<ToolCall>,
    /// What the provider reported, when it did.
    pub usage: Option<Usage>,
}

/// Why a model turn failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The endpoint could not be reached or kept failing after the retries.
    #[error("model endpoint: {0}")]
    Transport(String),
    /// The endpoint refused the request (4xx other than rate limits) or answered something that
    /// is not the provider's format.
    #[error("model endpoint refused or garbled the turn: {0}")]
    Protocol(String),
    /// The oracle has no trajectory for this task and arm, or its trajectory failed.
    #[error("oracle: {0}")]
    Oracle(String),
    /// The model's configuration is incomplete (a key or model name missing).
    #[error("model configuration: {0}")]
    Config(String),
}

/// The episode a turn belongs to.
#[derive(Debug, Clone, Copy)]
pub struct Episode<'a> {
    /// The task.
    pub task: &'a Task,
    /// The arm.
    pub arm: Arm,
    /// The work directory.
    pub work: &'a std::path::Path,
    /// The suite's directory.
    pub suite_dir: &'a std::path::Path,
}

/// A model: asked once per turn with the whole context.
#[async_trait::async_trait]
pub trait Model: Send + Sync {
    /// What the report says produced it (`oracle`, or the provider and model name).
    fn describe(&self) -> String;

    /// Whether token counts of this model are floors rather than a model's behaviour (the oracle).
    fn is_oracle(&self) -> bool {
        false
    }

    /// One turn of an episode.
    async fn reply(&self, episode: &Episode<'_>, request: &Request) -> Result<Reply, ModelError>;
}

/// The start of a JSON value, for error messages.
pub(crate) fn excerpt(v: &Value) -> String {
    let s = v.to_string();
    let mut t: String = s.chars().take(300).collect();
    if t.len() < s.len() {
        t.push('…');
    }
    t
}
