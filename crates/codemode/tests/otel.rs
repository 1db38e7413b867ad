//! Code-mode spans reach an OpenTelemetry exporter: one span per `exec` / `wait`
//! call and one per nested call, with the run id, tool id and outcome, the nested ones children of
//! the call that drove them. (One test in this binary: it installs the global subscriber.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, RunContext};
use codemode_demo::demo_tools;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use std::sync::{Arc, Mutex};
use tracing_subscriber::layer::SubscriberExt as _;

/// An exporter that keeps the spans in memory (a collector's stand-in).
#[derive(Debug, Clone, Default)]
struct Collected(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Collected {
    fn export(&self, batch: Vec<SpanData>) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        self.0.lock().unwrap().extend(batch);
        std::future::ready(Ok(()))
    }
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.as_str().to_string())
}

#[test]
fn spans_reach_an_in_process_exporter() {
    let exporter = Collected::default();
    let provider = codemode::otel::provider_with_exporter(exporter.clone());
    let subscriber = tracing_subscriber::registry().with(codemode::otel::layer(&provider));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let config =
        CodeModeConfig::from_value(Some(&serde_json::json!({"enabled": true, "timeoutMs": 1000})), "tools.codeMode")
            .unwrap();
    let cm = CodeMode::builder(config).engine_name("quickjs").local_tools(demo_tools()).build();
    let ctx = |id: &str| RunContext { tool_call_id: Some(id.into()), ..RunContext::session("otel") };
    // The exec continues the client's trace context (an MCP request's `traceparent`).
    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let traced = RunContext { trace_parent: Some(format!("00-{client_trace}-{client_span}-01")), ..ctx("call-1") };
    let first = rt.block_on(cm.exec(
        &traced,
        &CodeModeExecInput::code(
            "await tools.demo_echo({ a: 1 }); const r = await tools.demo_sleep({ ms: 1300 }); return r.slept",
        ),
    ));
    let CodeModeResult::Waiting { run_id, .. } = &first else { panic!("{}", first.to_json()) };
    let mut last = rt.block_on(cm.wait(&ctx("call-2"), &CodeModeWaitInput::new(run_id.clone())));
    while let CodeModeResult::Waiting { run_id, .. } = &last {
        last = rt.block_on(cm.wait(&ctx("call-3"), &CodeModeWaitInput::new(run_id.clone())));
    }
    assert_eq!(last.status(), "completed");
    // A failing run, a timed-out one: their spans carry the error status.
    let failed = rt.block_on(cm.exec(&ctx("call-fail"), &CodeModeExecInput::code("throw new Error('boom')")));
    assert_eq!(failed.status(), "failed");
    let slow = rt.block_on(cm.exec(&ctx("call-timeout"), &CodeModeExecInput::code("while (true) {}")));
    assert_eq!(slow.error_code().map(|c| c.as_str()), Some("timeout"));
    provider.force_flush().unwrap();
    let spans = exporter.0.lock().unwrap().clone();
    let named = |n: &str| spans.iter().filter(|s| s.name == n).collect::<Vec<_>>();
    let all_exec = named("codemode.exec");
    assert_eq!(all_exec.len(), 3, "{:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    let exec: Vec<&SpanData> =
        all_exec.iter().copied().filter(|s| attr(s, "tool_call_id").as_deref() == Some("call-1")).collect();
    assert_eq!(exec.len(), 1);
    assert_eq!(exec[0].span_context.trace_id().to_string(), client_trace, "the exec joins the client's trace");
    assert_eq!(exec[0].parent_span_id.to_string(), client_span);
    assert_eq!(exec[0].status, opentelemetry::trace::Status::Unset, "a waiting exec is not an error");
    for id in ["call-fail", "call-timeout"] {
        let span = all_exec.iter().find(|s| attr(s, "tool_call_id").as_deref() == Some(id)).unwrap();
        assert!(matches!(span.status, opentelemetry::trace::Status::Error { .. }), "{id}: {:?}", span.status);
    }
    assert_eq!(attr(exec[0], "tool_call_id").as_deref(), Some("call-1"));
    assert_eq!(attr(exec[0], "status").as_deref(), Some("waiting"));
    assert_eq!(attr(exec[0], "run_id").as_deref(), Some(run_id.as_str()));
    let waits = named("codemode.wait");
    assert!(!waits.is_empty());
    for w in &waits {
        assert_eq!(w.span_context.trace_id(), exec[0].span_context.trace_id(), "a wait joins its run's trace");
        assert_eq!(w.parent_span_id, exec[0].span_context.span_id(), "a wait is a child of its run's exec");
    }
    assert_eq!(attr(waits.last().unwrap(), "status").as_deref(), Some("completed"));
    let nested = named("codemode.nested_call");
    let echo = nested.iter().find(|s| attr(s, "tool_id").as_deref() == Some("plugin:demo:demo_echo")).unwrap();
    assert_eq!(attr(echo, "outcome").as_deref(), Some("completed"));
    assert_eq!(attr(echo, "run_id").as_deref(), Some(run_id.as_str()));
    assert_eq!(echo.parent_span_id, exec[0].span_context.span_id(), "a nested call is a child of its exec");
    assert_eq!(echo.span_context.trace_id(), exec[0].span_context.trace_id());
    let sleep = nested.iter().find(|s| attr(s, "tool_id").as_deref() == Some("plugin:demo:demo_sleep")).unwrap();
    assert_eq!(attr(sleep, "outcome").as_deref(), Some("completed"));
    assert_eq!(sleep.parent_span_id, exec[0].span_context.span_id(), "started under the exec");
    let _ = provider.shutdown();
}
