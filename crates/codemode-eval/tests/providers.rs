//! The `openai` and `anthropic` clients against a local mock endpoint serving hand-written answers
//! in each provider's documented format (there is no network here): a full episode per arm on the
//! real `server-everything` (the bundled suite's server, installed by scripts/setup.sh), rate
//! limits and server errors retried, a refused request and a garbled answer ending the episode
//! with the reason. The mock records every request, so the tests also check what each client sent
//! back: tool definitions, calls and results in the provider's own shapes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use codemode_eval::anthropic::Anthropic;
use codemode_eval::http::RetryPolicy;
use codemode_eval::openai::OpenAi;
use codemode_eval::suite::{Arm, Suite, Task};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One scripted answer: status, extra headers, body.
type Scripted = (u16, Vec<(&'static str, &'static str)>, String);

#[derive(Default)]
struct Mock {
    answers: Mutex<VecDeque<Scripted>>,
    requests: Mutex<Vec<(HeaderMap, Value)>>,
}

async fn answer(State(mock): State<Arc<Mock>>, headers: HeaderMap, body: String) -> impl IntoResponse {
    let parsed = serde_json::from_str(&body).unwrap_or(Value::Null);
    mock.requests.lock().unwrap().push((headers, parsed));
    let (status, extra, body) =
        mock.answers.lock().unwrap().pop_front().unwrap_or((500, vec![], "{\"error\":\"script exhausted\"}".into()));
    let mut h = HeaderMap::new();
    h.insert("content-type", "application/json".parse().unwrap());
    for (k, v) in extra {
        h.insert(k, v.parse().unwrap());
    }
    (StatusCode::from_u16(status).unwrap(), h, body)
}

/// Starts the mock on a free loopback port; it stops when the test's runtime ends.
async fn start(answers: Vec<Scripted>) -> (String, Arc<Mock>) {
    let mock = Arc::new(Mock { answers: Mutex::new(answers.into()), requests: Mutex::default() });
    let app = axum::Router::new().fallback(answer).with_state(mock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), mock)
}

fn quick() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        base_delay: Duration::ZERO,
        max_delay: Duration::from_millis(50),
        timeout: Duration::from_secs(30),
    }
}

/// The bundled suite's servers with one task: add 17 and 25 with `get-sum`.
fn suite() -> Suite {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../eval");
    let mut suite = Suite::load(&dir).expect("the bundled suite loads");
    let task: Task = serde_json::from_value(json!({
        "id": "sum", "kind": "lookup", "servers": ["everything"],
        "prompt": "What is 17 + 25? Use the get-sum tool. Answer with the number only.",
        "verify": [{ "answerEquals": "42" }],
        "oracle": { "direct": { "turns": [], "answer": "() => ''" }, "codemode": { "cells": [], "answer": "() => ''" } }
    }))
    .unwrap();
    suite.tasks = vec![task];
    suite
}

const CELL: &str = "return (await MCP.everything['get-sum'].value({ a: 17, b: 25 })).match(/is (\\d+)/)[1]";

fn openai_call(name: &str, args: &str) -> String {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{ "index": 0, "finish_reason": "tool_calls", "message": { "role": "assistant", "content": null,
            "tool_calls": [{ "id": "call_abc", "type": "function", "function": { "name": name, "arguments": args } }] } }],
        "usage": { "prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110 }
    })
    .to_string()
}

fn openai_text(text: &str) -> String {
    json!({
        "id": "chatcmpl-2", "object": "chat.completion",
        "choices": [{ "index": 0, "finish_reason": "stop", "message": { "role": "assistant", "content": text } }],
        "usage": { "prompt_tokens": 120, "completion_tokens": 2, "total_tokens": 122 }
    })
    .to_string()
}

fn anthropic_call(name: &str, input: Value) -> String {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "stop_reason": "tool_use",
        "content": [{ "type": "text", "text": "Let me add them." }, { "type": "tool_use", "id": "toolu_01", "name": name, "input": input }],
        "usage": { "input_tokens": 90, "output_tokens": 20 }
    })
    .to_string()
}

fn anthropic_text(text: &str) -> String {
    json!({
        "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-test", "stop_reason": "end_turn",
        "content": [{ "type": "text", "text": text }], "usage": { "input_tokens": 130, "output_tokens": 3 }
    })
    .to_string()
}

/// The call each arm makes: `get-sum` directly, or a cell.
fn call_for(arm: Arm) -> (&'static str, Value) {
    match arm {
        Arm::Direct => ("get-sum", json!({ "a": 17, "b": 25 })),
        _ => ("exec", json!({ "code": CELL })),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_episode_per_arm_with_retries() {
    let suite = suite();
    for arm in Arm::ALL {
        let (name, args) = call_for(arm);
        // A rate limit (Retry-After: 0) and a server error before the first real answer.
        let (url, mock) = start(vec![
            (429, vec![("retry-after", "0")], r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#.into()),
            (503, vec![], r#"{"error":{"message":"overloaded"}}"#.into()),
            (200, vec![], openai_call(name, &args.to_string())),
            (200, vec![], openai_text("42")),
        ])
        .await;
        let mut model = OpenAi::new(format!("{url}/v1"), Some("sk-test".into()), "gpt-test");
        model.retry = quick();
        let r = codemode_eval::episode::run(&suite, &suite.tasks[0], arm, &model, false).await;
        assert!(r.passed, "{arm:?}: {r:?}");
        assert_eq!((r.turns, r.tool_calls), (2, 1), "{arm:?}");
        let reported = r.reported.unwrap();
        assert_eq!((reported.input_tokens, reported.output_tokens), (220, 12));
        let requests = mock.requests.lock().unwrap();
        assert_eq!(requests.len(), 4, "two retried attempts, then two turns");
        let (headers, first) = &requests[2];
        assert_eq!(headers["authorization"], "Bearer sk-test");
        assert_eq!(first["model"], "gpt-test");
        assert_eq!(first["messages"][0]["role"], "system");
        let tools: Vec<&str> =
            first["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
        match arm {
            Arm::Direct => assert!(tools.contains(&"get-sum") && !tools.contains(&"exec"), "{tools:?}"),
            _ => assert_eq!(tools, ["exec", "wait"]),
        }
        // The second turn carries the call and its result in Chat Completions' shapes.
        let second = &requests[3].1["messages"];
        let n = second.as_array().unwrap().len();
        assert_eq!(second[n - 2]["tool_calls"][0]["id"], "call_abc");
        assert!(second[n - 2]["tool_calls"][0]["function"]["arguments"].is_string());
        assert_eq!(second[n - 1]["role"], "tool");
        assert_eq!(second[n - 1]["tool_call_id"], "call_abc");
        assert!(second[n - 1]["content"].as_str().unwrap().contains("42"), "{}", second[n - 1]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_episode_per_arm_with_retries() {
    let suite = suite();
    for arm in Arm::ALL {
        let (name, args) = call_for(arm);
        let (url, mock) = start(vec![
            (529, vec![], r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into()),
            (200, vec![], anthropic_call(name, args)),
            (
                429,
                vec![("retry-after", "0")],
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#.into(),
            ),
            (200, vec![], anthropic_text("42")),
        ])
        .await;
        let mut model = Anthropic::new(url, "sk-ant-test", "claude-test");
        model.retry = quick();
        let r = codemode_eval::episode::run(&suite, &suite.tasks[0], arm, &model, false).await;
        assert!(r.passed, "{arm:?}: {r:?}");
        assert_eq!((r.turns, r.tool_calls), (2, 1));
        let requests = mock.requests.lock().unwrap();
        assert_eq!(requests.len(), 4);
        let (headers, first) = &requests[1];
        assert_eq!(headers["x-api-key"], "sk-ant-test");
        assert_eq!(headers["anthropic-version"], codemode_eval::anthropic::API_VERSION);
        assert!(first["max_tokens"].as_u64().unwrap() > 0);
        assert!(first["system"].as_str().unwrap().contains("agent"));
        assert!(first["tools"].as_array().unwrap().iter().all(|t| t["input_schema"].is_object()));
        // The result goes back as a tool_result block in a user message, after the tool_use turn.
        let msgs = requests[3].1["messages"].as_array().unwrap().clone();
        let last = msgs.last().unwrap();
        assert_eq!(last["role"], "user");
        assert_eq!(last["content"][0]["type"], "tool_result");
        assert_eq!(last["content"][0]["tool_use_id"], "toolu_01");
        assert!(last["content"][0]["content"].as_str().unwrap().contains("42"));
        let assistant = &msgs[msgs.len() - 2];
        assert_eq!(assistant["content"][1]["type"], "tool_use");
        assert_eq!(assistant["content"][0]["text"], "Let me add them.");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_garbage_end_the_episode_with_the_reason() {
    let suite = suite();
    let task = &suite.tasks[0];
    // 400: not retried; the endpoint's message is in the episode's error.
    let (url, mock) =
        start(vec![(400, vec![], r#"{"error":{"message":"Invalid schema for function 'get-sum'"}}"#.into())]).await;
    let mut model = OpenAi::new(url, None, "gpt-test");
    model.retry = quick();
    let r = codemode_eval::episode::run(&suite, task, Arm::Direct, &model, false).await;
    assert!(!r.passed);
    let error = r.error.unwrap();
    assert!(error.contains("400") && error.contains("Invalid schema"), "{error}");
    assert_eq!(mock.requests.lock().unwrap().len(), 1, "a 400 is not retried");
    assert!(!mock.requests.lock().unwrap()[0].0.contains_key("authorization"), "no key: no header");

    // Not the provider's format.
    let (url, _) = start(vec![(200, vec![], "<html>gateway</html>".into())]).await;
    let mut model = Anthropic::new(url, "k", "m");
    model.retry = quick();
    let r = codemode_eval::episode::run(&suite, task, Arm::CodeMode, &model, false).await;
    assert!(r.error.unwrap().contains("not JSON"));

    // An endless answer is cut at the cap, not buffered.
    let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(codemode_eval::http::MAX_RESPONSE_BYTES + 1));
    let (url, _) = start(vec![(200, vec![], huge)]).await;
    let mut model = OpenAi::new(url, None, "gpt-test");
    model.retry = quick();
    let r = codemode_eval::episode::run(&suite, task, Arm::Direct, &model, false).await;
    assert!(r.error.unwrap().contains("larger than"));

    // Rate limited past the retries: the episode fails saying so.
    let limited: Vec<Scripted> = (0..4).map(|_| (429, vec![("retry-after", "0")], "{}".to_string())).collect();
    let (url, mock) = start(limited).await;
    let mut model = OpenAi::new(url, None, "gpt-test");
    model.retry = quick();
    let r = codemode_eval::episode::run(&suite, task, Arm::Direct, &model, false).await;
    assert!(r.error.unwrap().contains("429"));
    assert_eq!(mock.requests.lock().unwrap().len(), 4, "one attempt and three retries");

    // A call whose arguments are not JSON reaches the surface as a refused input, which the model
    // sees as an error result; its next answer ends the episode (wrongly, so the check fails).
    let (url, mock) = start(vec![
        (200, vec![], openai_call("get-sum", "{not json")),
        (200, vec![], openai_text("I could not add them")),
    ])
    .await;
    let mut model = OpenAi::new(url, None, "gpt-test");
    model.retry = quick();
    let r = codemode_eval::episode::run(&suite, task, Arm::Direct, &model, false).await;
    assert!(!r.passed && r.error.is_none(), "{r:?}");
    let msgs = mock.requests.lock().unwrap()[1].1["messages"].clone();
    let last = msgs.as_array().unwrap().last().unwrap().clone();
    assert!(last["content"].as_str().unwrap().contains("must be an object"), "{last}");
}
