//! The tracing spans of `exec` and `wait` calls (`codemode.exec` / `codemode.wait`): opened with the
//! run's context, linked to the trace the run's `exec` started and to the caller's, closed with the
//! result's status and error (exported by [`crate::otel`] when the `otel` feature is on).

use crate::CodeMode;
#[cfg(feature = "otel")]
use crate::otel;
use codemode_core::error::CodeModeErrorCode;
use codemode_core::executor::RunObserver;
use codemode_core::result::CodeModeResult;
use codemode_core::scope::RunContext;
use std::sync::Arc;

/// The `tracing` span of one `exec` / `wait` call (exported by [`otel`] when enabled).
pub(crate) fn control_span(tool: &str, ctx: &RunContext, run_id: Option<&str>) -> tracing::Span {
    let span = tracing::info_span!(
        target: "codemode",
        "codemode.call",
        otel.name = %format_args!("codemode.{tool}"),
        tool,
        tool_call_id = ctx.tool_call_id.as_deref().unwrap_or(""),
        run_id = tracing::field::Empty,
        status = tracing::field::Empty,
        code = tracing::field::Empty,
    );
    if let Some(id) = run_id {
        span.record("run_id", id);
    }
    span
}

/// Closes the control record of an `exec` / `wait` call whose future is dropped before it ends (the
/// MCP request was cancelled: the run is aborted): the record ends `failed` / `aborted`, and the
/// span gets the error status.
pub(crate) struct ControlEnd<'a> {
    pub(crate) cm: &'a CodeMode,
    pub(crate) ctx: &'a RunContext,
    pub(crate) tool: &'static str,
    pub(crate) run_id: Option<String>,
    pub(crate) started: std::time::Instant,
    pub(crate) observer: Option<&'a Arc<dyn RunObserver>>,
    pub(crate) span: tracing::Span,
    pub(crate) done: bool,
}

impl Drop for ControlEnd<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if !self.span.is_disabled() {
            self.span.record("status", "failed");
            self.span.record("code", CodeModeErrorCode::Aborted.as_str());
            mark_span_error(&self.span, "the call was cancelled: its run is aborted");
        }
        let end = Some(("failed", Some(CodeModeErrorCode::Aborted.as_str()), self.started));
        self.cm.trace_control_record(self.ctx, self.tool, self.run_id.take(), end, self.observer);
    }
}

/// Parents `span` on the run's trace (`run_trace`, a `wait`) or else the caller's context
/// (`caller`, an `exec`), and links a `wait` to its caller's own context.
#[cfg(feature = "otel")]
pub(crate) fn link_span(span: &tracing::Span, run_trace: Option<&str>, caller: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    match (run_trace, caller) {
        (Some(run), caller) => {
            otel::set_parent(span, run);
            if let Some(c) = caller {
                otel::add_link(span, c);
            }
        }
        (None, Some(c)) => {
            otel::set_parent(span, c);
        }
        (None, None) => {}
    }
}

#[cfg(not(feature = "otel"))]
pub(crate) fn link_span(_span: &tracing::Span, _run_trace: Option<&str>, _caller: Option<&str>) {}

/// The `traceparent` of an exported span (`None` without the `otel` feature or exporter).
#[cfg(feature = "otel")]
pub(crate) fn span_traceparent(span: &tracing::Span) -> Option<String> {
    if span.is_disabled() { None } else { otel::traceparent_of(span) }
}

#[cfg(not(feature = "otel"))]
pub(crate) fn span_traceparent(_span: &tracing::Span) -> Option<String> {
    None
}

/// Gives an exported span the error status.
#[cfg(feature = "otel")]
pub(crate) fn mark_span_error(span: &tracing::Span, message: &str) {
    if !span.is_disabled() {
        otel::set_error(span, message);
    }
}

#[cfg(not(feature = "otel"))]
pub(crate) fn mark_span_error(_span: &tracing::Span, _message: &str) {}

/// Records a call's result on its span (and, when `learn_run_id`, the run id a `waiting` result
/// names: an `exec` learns it there).
pub(crate) fn record_result(span: &tracing::Span, result: &CodeModeResult, learn_run_id: bool) {
    if span.is_disabled() {
        return;
    }
    span.record("status", result.status());
    // An `exec` learns its run id from a `waiting` result (a `wait` set it at the start).
    if learn_run_id && let Some(id) = result.run_id() {
        span.record("run_id", id);
    }
    if let Some(code) = result.error_code() {
        span.record("code", code.as_str());
    }
    // Failed, timed-out and aborted calls carry the error status.
    if let CodeModeResult::Failed { error, .. } = result {
        let code = result.error_code().map(|c| c.as_str()).unwrap_or("failed");
        mark_span_error(span, &format!("{code}: {}", error.chars().take(200).collect::<String>()));
    }
}
