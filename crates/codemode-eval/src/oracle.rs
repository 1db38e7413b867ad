//! The `oracle` model: per task and arm, the recorded minimal trajectory a competent agent would
//! take — the direct tool calls, or the code-mode cells — replayed against the real servers. Its
//! final answer is computed from the tool results it actually got (the task's `answer` function,
//! run in the sandbox), so a task whose fixtures or servers misbehave fails its checks; nothing is
//! answered from memory.
//!
//! It is stateless: the step it is at is read off the conversation (how many turns it has made,
//! and whether the last code-mode result is `waiting`). Its numbers are floors of each arm's
//! tokens, turns and time, never a model's accuracy.

use crate::js::Sandbox;
use crate::model::{Episode, Message, Model, ModelError, Reply, Request, ToolCall};
use crate::suite::{Arm, RecordedCall, RecordedTurn, substitute, substitute_value};
use serde_json::{Value, json};

/// The oracle.
#[derive(Debug, Default)]
pub struct Oracle {
    sandbox: Sandbox,
}

impl Oracle {
    /// The oracle, running the suite's functions in the process's shared sandbox.
    pub fn new() -> Oracle {
        Oracle { sandbox: Sandbox::shared() }
    }
}

/// Every tool result so far, each parsed as JSON when it is JSON, else its text.
fn results(request: &Request) -> Vec<Value> {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => {
                Some(serde_json::from_str::<Value>(content).unwrap_or_else(|_| Value::String(content.clone())))
            }
            _ => None,
        })
        .collect()
}

fn turns_made(request: &Request) -> usize {
    request.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count()
}

fn answer_text(v: Value) -> String {
    match v {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

impl Oracle {
    async fn answer(&self, function: &str, results: Vec<Value>) -> Result<Reply, ModelError> {
        let v = self
            .sandbox
            .call(function, &Value::Array(results), false)
            .await
            .map_err(|e| ModelError::Oracle(format!("answer function: {e}")))?;
        Ok(Reply { text: answer_text(v), calls: Vec::new(), usage: None })
    }

    async fn direct(&self, ep: &Episode<'_>, request: &Request) -> Result<Reply, ModelError> {
        let oracle = &ep.task.oracle.direct;
        let k = turns_made(request);
        let results = results(request);
        let Some(turn) = oracle.turns.get(k) else { return self.answer(&oracle.answer, results).await };
        let recorded: Vec<RecordedCall> = match turn {
            RecordedTurn::Calls(calls) => calls.clone(),
            RecordedTurn::Computed { js } => {
                let v = self
                    .sandbox
                    .call(js, &Value::Array(results), false)
                    .await
                    .map_err(|e| ModelError::Oracle(format!("turn {k}: {e}")))?;
                serde_json::from_value(v)
                    .map_err(|e| ModelError::Oracle(format!("turn {k}: not [{{tool, args}}]: {e}")))?
            }
        };
        let calls = recorded
            .into_iter()
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: format!("call_{k}_{i}"),
                name: c.tool,
                arguments: substitute_value(&c.args, ep.work, ep.suite_dir),
            })
            .collect();
        Ok(Reply { text: String::new(), calls, usage: None })
    }

    async fn cells(&self, ep: &Episode<'_>, request: &Request) -> Result<Reply, ModelError> {
        let oracle = &ep.task.oracle.codemode;
        let k = turns_made(request);
        let results = results(request);
        // A run still waiting is resumed with `wait` before anything else.
        if let Some(last) = results.last()
            && last.get("status").and_then(Value::as_str) == Some("waiting")
        {
            let run_id = last.get("runId").cloned().unwrap_or(Value::Null);
            let call =
                ToolCall { id: format!("call_{k}_0"), name: "wait".into(), arguments: json!({ "runId": run_id }) };
            return Ok(Reply { text: String::new(), calls: vec![call], usage: None });
        }
        let execs = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Assistant { calls, .. } => Some(calls.iter().filter(|c| c.name == "exec").count()),
                _ => None,
            })
            .sum::<usize>();
        // A model that has not seen the servers' tools looks them up first, in one cell, by the
        // cheapest documented way (`MCP.<server>.$api()`: every tool's header, smaller than the
        // `.d.ts` file); the direct arm has the schemas in its tool list instead.
        if oracle.discover && execs == 0 {
            {
                let servers = serde_json::to_string(&ep.task.servers).unwrap_or_default();
                let code = format!(
                    "const servers = {servers};\nconst d = {{}};\nfor (const s of servers) d[s] = await MCP[s].$api();\nreturn d;"
                );
                let call =
                    ToolCall { id: format!("call_{k}_0"), name: "exec".into(), arguments: json!({ "code": code }) };
                return Ok(Reply { text: String::new(), calls: vec![call], usage: None });
            }
        }
        let cell_index = execs - usize::from(oracle.discover);
        let Some(cell) = oracle.cells.get(cell_index) else { return self.answer(&oracle.answer, results).await };
        let code = substitute(cell, ep.work, ep.suite_dir);
        let call = ToolCall { id: format!("call_{k}_0"), name: "exec".into(), arguments: json!({ "code": code }) };
        Ok(Reply { text: String::new(), calls: vec![call], usage: None })
    }
}

#[async_trait::async_trait]
impl Model for Oracle {
    fn describe(&self) -> String {
        "oracle (recorded minimal trajectories: floors, not a model's accuracy)".into()
    }

    fn is_oracle(&self) -> bool {
        true
    }

    async fn reply(&self, episode: &Episode<'_>, request: &Request) -> Result<Reply, ModelError> {
        match episode.arm {
            Arm::Direct => self.direct(episode, request).await,
            Arm::CodeMode | Arm::CodeModeTasks => self.cells(episode, request).await,
        }
    }
}
