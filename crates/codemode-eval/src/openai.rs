//! The `openai` model: any endpoint speaking OpenAI's Chat Completions API (`POST
//! {base}/chat/completions`, tools as `function` tools, calls as `tool_calls` whose `arguments`
//! is a JSON string, results as `tool` messages). `OPENAI_BASE_URL` (default
//! `https://api.openai.com/v1`), `OPENAI_API_KEY` (optional for local servers) and
//! `OPENAI_MODEL` (required) come from the environment.

use crate::http::{RetryPolicy, post_json};
use crate::model::{Episode, Message, Model, ModelError, Reply, Request, ToolCall, Usage};
use serde_json::{Value, json};

/// A Chat Completions client.
#[derive(Debug, Clone)]
pub struct OpenAi {
    base_url: String,
    key: Option<String>,
    model: String,
    /// Retries and time limits.
    pub retry: RetryPolicy,
    client: reqwest::Client,
}

impl OpenAi {
    /// A client of `base_url` (e.g. `https://api.openai.com/v1`) for `model`.
    pub fn new(base_url: impl Into<String>, key: Option<String>, model: impl Into<String>) -> OpenAi {
        OpenAi {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            key: key.filter(|k| !k.is_empty()),
            model: model.into(),
            retry: RetryPolicy::default(),
            client: reqwest::Client::new(),
        }
    }

    /// The client the environment describes.
    pub fn from_env() -> Result<OpenAi, ModelError> {
        let model = std::env::var("OPENAI_MODEL")
            .ok()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| ModelError::Config("set OPENAI_MODEL (and OPENAI_BASE_URL, OPENAI_API_KEY)".into()))?;
        let base = std::env::var("OPENAI_BASE_URL").ok().filter(|b| !b.is_empty());
        Ok(OpenAi::new(
            base.unwrap_or_else(|| "https://api.openai.com/v1".into()),
            std::env::var("OPENAI_API_KEY").ok(),
            model,
        ))
    }

    /// The request body of one turn.
    pub fn body(&self, request: &Request) -> Value {
        let mut messages = vec![json!({ "role": "system", "content": request.system })];
        for m in &request.messages {
            messages.push(match m {
                Message::User { text } => json!({ "role": "user", "content": text }),
                Message::Assistant { text, calls } => {
                    let mut msg = json!({ "role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) } });
                    if !calls.is_empty() {
                        msg["tool_calls"] = calls
                            .iter()
                            .map(|c| json!({ "id": c.id, "type": "function", "function": { "name": c.name, "arguments": c.arguments.to_string() } }))
                            .collect();
                    }
                    msg
                }
                Message::Tool { call_id, content, .. } => json!({ "role": "tool", "tool_call_id": call_id, "content": content }),
            });
        }
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({ "type": "function", "function": { "name": t.name, "description": t.description, "parameters": t.input_schema } }))
            .collect();
        let mut body = json!({ "model": self.model, "messages": messages });
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
        }
        body
    }
}

/// A Chat Completions answer as a [`Reply`].
pub fn parse_reply(v: &Value) -> Result<Reply, ModelError> {
    if let Some(e) = v.get("error") {
        return Err(ModelError::Protocol(format!("error: {e}")));
    }
    let msg = v
        .pointer("/choices/0/message")
        .ok_or_else(|| ModelError::Protocol(format!("no choices[0].message in {}", crate::model::excerpt(v))))?;
    let text = msg.get("content").and_then(Value::as_str).unwrap_or_default().to_string();
    let mut calls = Vec::new();
    for (i, c) in msg.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let name = c
            .pointer("/function/name")
            .and_then(Value::as_str)
            .ok_or_else(|| ModelError::Protocol(format!("tool_calls[{i}] has no function.name")))?;
        let raw = c.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("{}");
        // Arguments that are not JSON reach the tool as a string, which the surface refuses with
        // a message the model sees (as a real client would).
        let arguments = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()));
        let id = c.get("id").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| format!("call_{i}"));
        calls.push(ToolCall { id, name: name.to_string(), arguments });
    }
    let usage = v.get("usage").map(|u| Usage {
        input_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        output_tokens: u.get("completion_tokens").and_then(Value::as_u64).unwrap_or(0),
    });
    Ok(Reply { text, calls, usage })
}

#[async_trait::async_trait]
impl Model for OpenAi {
    fn describe(&self) -> String {
        format!("openai-compatible `{}` at {}", self.model, self.base_url)
    }

    async fn reply(&self, _episode: &Episode<'_>, request: &Request) -> Result<Reply, ModelError> {
        let mut headers = Vec::new();
        if let Some(k) = &self.key {
            headers.push(("authorization", format!("Bearer {k}")));
        }
        let url = format!("{}/chat/completions", self.base_url);
        let v = post_json(&self.client, &url, &headers, &self.body(request), self.retry).await?;
        parse_reply(&v)
    }
}
