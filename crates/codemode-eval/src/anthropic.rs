//! The `anthropic` model: Anthropic's Messages API (`POST {base}/v1/messages`, tools with
//! `input_schema`, calls as `tool_use` blocks, results as `tool_result` blocks in a user message).
//! `ANTHROPIC_BASE_URL` (default `https://api.anthropic.com`), `ANTHROPIC_API_KEY` and
//! `ANTHROPIC_MODEL` come from the environment. Claude's tokenizer is not public: the report's
//! o200k counts are an approximation; the provider's own `usage` is reported beside them.

use crate::http::{RetryPolicy, post_json};
use crate::model::{Episode, Message, Model, ModelError, Reply, Request, ToolCall, Usage};
use serde_json::{Value, json};

/// The API version sent in `anthropic-version`.
pub const API_VERSION: &str = "2023-06-01";

/// Most output tokens a turn may use (`max_tokens`, which the API requires).
pub const MAX_TOKENS: u64 = 4096;

/// A Messages API client.
#[derive(Debug, Clone)]
pub struct Anthropic {
    base_url: String,
    key: String,
    model: String,
    /// Retries and time limits.
    pub retry: RetryPolicy,
    client: reqwest::Client,
}

impl Anthropic {
    /// A client of `base_url` (e.g. `https://api.anthropic.com`) for `model`.
    pub fn new(base_url: impl Into<String>, key: impl Into<String>, model: impl Into<String>) -> Anthropic {
        Anthropic {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            key: key.into(),
            model: model.into(),
            retry: RetryPolicy::default(),
            client: reqwest::Client::new(),
        }
    }

    /// The client the environment describes.
    pub fn from_env() -> Result<Anthropic, ModelError> {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
        let model = var("ANTHROPIC_MODEL")
            .ok_or_else(|| ModelError::Config("set ANTHROPIC_MODEL and ANTHROPIC_API_KEY".into()))?;
        let key = var("ANTHROPIC_API_KEY").ok_or_else(|| ModelError::Config("set ANTHROPIC_API_KEY".into()))?;
        Ok(Anthropic::new(var("ANTHROPIC_BASE_URL").unwrap_or_else(|| "https://api.anthropic.com".into()), key, model))
    }

    /// The request body of one turn: consecutive tool results go back in one user message.
    pub fn body(&self, request: &Request) -> Value {
        let mut messages: Vec<Value> = Vec::new();
        for m in &request.messages {
            match m {
                Message::User { text } => messages.push(json!({ "role": "user", "content": text })),
                Message::Assistant { text, calls } => {
                    let mut blocks = Vec::new();
                    if !text.is_empty() {
                        blocks.push(json!({ "type": "text", "text": text }));
                    }
                    for c in calls {
                        blocks.push(json!({ "type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments }));
                    }
                    messages.push(json!({ "role": "assistant", "content": blocks }));
                }
                Message::Tool { call_id, content, is_error, .. } => {
                    let block = json!({ "type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error });
                    match messages.last_mut() {
                        Some(last) if last["role"] == "user" && last["content"].is_array() => {
                            if let Some(a) = last["content"].as_array_mut() {
                                a.push(block);
                            }
                        }
                        _ => messages.push(json!({ "role": "user", "content": [block] })),
                    }
                }
            }
        }
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.input_schema }))
            .collect();
        json!({ "model": self.model, "max_tokens": MAX_TOKENS, "system": request.system, "tools": tools, "messages": messages })
    }
}

/// A Messages answer as a [`Reply`].
pub fn parse_reply(v: &Value) -> Result<Reply, ModelError> {
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return Err(ModelError::Protocol(format!("error: {}", v.get("error").unwrap_or(&Value::Null))));
    }
    let content = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ModelError::Protocol(format!("no content in {}", crate::model::excerpt(v))))?;
    let mut text = String::new();
    let mut calls = Vec::new();
    for (i, block) in content.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or_default()),
            Some("tool_use") => {
                let name = block
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ModelError::Protocol(format!("content[{i}]: tool_use without a name")))?;
                let id =
                    block.get("id").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| format!("toolu_{i}"));
                calls.push(ToolCall {
                    id,
                    name: name.to_string(),
                    arguments: block.get("input").cloned().unwrap_or(json!({})),
                });
            }
            // Thinking and other blocks do not enter the transcript here.
            _ => {}
        }
    }
    let usage = v.get("usage").map(|u| Usage {
        input_tokens: u.get("input_tokens").and_then(Value::as_u64).unwrap_or(0),
        output_tokens: u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
    });
    Ok(Reply { text, calls, usage })
}

#[async_trait::async_trait]
impl Model for Anthropic {
    fn describe(&self) -> String {
        format!("anthropic `{}` at {}", self.model, self.base_url)
    }

    async fn reply(&self, _episode: &Episode<'_>, request: &Request) -> Result<Reply, ModelError> {
        let headers = [("x-api-key", self.key.clone()), ("anthropic-version", API_VERSION.to_string())];
        let url = format!("{}/v1/messages", self.base_url);
        let v = post_json(&self.client, &url, &headers, &self.body(request), self.retry).await?;
        parse_reply(&v)
    }
}
