//! One episode: a task in one arm with one model. A fresh work directory, the arm's surface in
//! front of the task's servers, the agent loop (model turn, tool calls, results into the context)
//! until the model answers without calls, then the task's checks.

use crate::model::{Episode, Message, Model, Reply, Request, ToolSpec, Usage};
use crate::suite::{Arm, Kind, Suite, Task};
use crate::surface::Surface;
use crate::tokens;
use crate::verify::{CheckOutcome, verify};
use serde::Serialize;
use std::time::Instant;

/// Most model turns of an episode when the task sets none. Prevents: a model that never stops
/// calling tools running forever.
pub const DEFAULT_MAX_TURNS: u32 = 20;

/// The system text every arm gets, before its server's own instructions.
pub const SYSTEM: &str = "You are an agent with tools. Complete the user's task with them. When you are done, reply \
with the final answer only, exactly as the task asks for it, and no tool calls.";

/// What one episode measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EpisodeResult {
    /// The task's id.
    pub task: String,
    /// The task's kind.
    pub kind: Kind,
    /// The arm.
    pub arm: Arm,
    /// Every check passed (and the episode ended with an answer).
    pub passed: bool,
    /// The checks.
    pub checks: Vec<CheckOutcome>,
    /// The final answer.
    pub answer: String,
    /// Why the episode stopped without an answer (model or surface failure, turn limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Tokens of every turn's whole request, summed (o200k_base).
    pub input_tokens: u64,
    /// Tokens of every reply, summed (o200k_base).
    pub output_tokens: u64,
    /// Tokens of the tool definitions alone (sent with every turn).
    pub tool_list_tokens: u64,
    /// What the provider reported, summed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported: Option<Usage>,
    /// Model turns.
    pub turns: u32,
    /// Tool calls the model made.
    pub tool_calls: u32,
    /// Bytes of tool results that entered the context.
    pub result_bytes: u64,
    /// `tasks/get` polls the host made instead of model turns (`codemode-tasks`).
    pub task_polls: u32,
    /// Milliseconds from the first model turn to the answer.
    pub wall_ms: u64,
    /// Milliseconds to make the work directory, start the servers and connect.
    pub startup_ms: u64,
    /// The whole conversation (recorded with `keep_work`, for looking into a failure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transcript: Option<Vec<Message>>,
}

/// Runs one episode (`keep_work`: keep its work directory and record its transcript). Failures
/// of the model, the surface or the setup end the episode as failed, with the reason; they never
/// end the evaluation.
pub async fn run(suite: &Suite, task: &Task, arm: Arm, model: &dyn Model, keep_work: bool) -> EpisodeResult {
    let started = Instant::now();
    let mut r = EpisodeResult {
        task: task.id.clone(),
        kind: task.kind,
        arm,
        passed: false,
        checks: Vec::new(),
        answer: String::new(),
        error: None,
        input_tokens: 0,
        output_tokens: 0,
        tool_list_tokens: 0,
        reported: None,
        turns: 0,
        tool_calls: 0,
        result_bytes: 0,
        task_polls: 0,
        wall_ms: 0,
        startup_ms: 0,
        transcript: None,
    };
    let work = match tempfile::Builder::new().prefix("codemode-eval-").tempdir() {
        Ok(w) => w,
        Err(e) => {
            r.error = Some(format!("work directory: {e}"));
            return r;
        }
    };
    let path = work.path().to_path_buf();
    if let Err(e) = crate::setup::materialize(&task.setup, &path, &crate::js::Sandbox::shared()).await {
        r.error = Some(e.to_string());
        return r;
    }
    let surface = match Surface::start(suite, task, arm, &path).await {
        Ok(s) => s,
        Err(e) => {
            r.error = Some(e.to_string());
            return r;
        }
    };
    r.startup_ms = started.elapsed().as_millis() as u64;
    if !surface.down.is_empty() {
        let why: Vec<String> = surface.down.iter().map(|(s, e)| format!("{s}: {e}")).collect();
        r.error = Some(format!("MCP servers down: {}", why.join("; ")));
    } else {
        let answer = agent_loop(suite, task, arm, model, &surface, &path, keep_work, &mut r).await;
        if let Some(answer) = answer {
            r.answer = answer;
            r.checks = verify(&task.verify, &r.answer, &path).await;
            r.passed = r.checks.iter().all(|c| c.passed);
        }
    }
    surface.close().await;
    if keep_work {
        let kept = work.keep();
        tracing::info!(task = %task.id, arm = arm.name(), dir = %kept.display(), "work directory kept");
    }
    r
}

#[allow(clippy::too_many_arguments)]
async fn agent_loop(
    suite: &Suite,
    task: &Task,
    arm: Arm,
    model: &dyn Model,
    surface: &Surface,
    work: &std::path::Path,
    record: bool,
    r: &mut EpisodeResult,
) -> Option<String> {
    let work_str = &work.display().to_string();
    let system = if surface.instructions.is_empty() {
        SYSTEM.to_string()
    } else {
        format!("{SYSTEM}\n\n{}", surface.instructions)
    };
    let tools: Vec<ToolSpec> = surface.tools.clone();
    r.tool_list_tokens = tokens::count(&serde_json::to_string(&tools).unwrap_or_default());
    let prompt = crate::suite::substitute(&task.prompt, work, &suite.dir);
    let mut request = Request { system, tools, messages: vec![Message::User { text: prompt }] };
    let episode = Episode { task, arm, work, suite_dir: &suite.dir };
    let max_turns = task.max_turns.unwrap_or(DEFAULT_MAX_TURNS);
    let started = Instant::now();
    let mut answer = None;
    while r.turns < max_turns {
        r.input_tokens += tokens::request_tokens(&request, work_str);
        let reply: Reply = match model.reply(&episode, &request).await {
            Ok(reply) => reply,
            Err(e) => {
                r.error = Some(e.to_string());
                break;
            }
        };
        r.turns += 1;
        r.output_tokens += tokens::reply_tokens(&reply, work_str);
        if let Some(u) = reply.usage {
            let sum = r.reported.get_or_insert_default();
            sum.input_tokens += u.input_tokens;
            sum.output_tokens += u.output_tokens;
        }
        if reply.calls.is_empty() {
            answer = Some(reply.text);
            break;
        }
        request.messages.push(Message::Assistant { text: reply.text.clone(), calls: reply.calls.clone() });
        for call in &reply.calls {
            r.tool_calls += 1;
            let outcome = surface.call(call).await;
            r.result_bytes += outcome.content.len() as u64;
            r.task_polls += outcome.task_polls;
            request.messages.push(Message::Tool {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content: outcome.content,
                is_error: outcome.is_error,
            });
        }
    }
    if answer.is_none() && r.error.is_none() {
        r.error = Some(format!("no answer within {max_turns} turns"));
    }
    r.wall_ms = started.elapsed().as_millis() as u64;
    if record {
        r.transcript = Some(request.messages);
    }
    answer
}
