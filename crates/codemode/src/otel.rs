//! OpenTelemetry export of the runtime's tracing spans (feature `otel`).
//!
//! The runtime opens one `tracing` span per `exec` / `wait` call (`codemode.exec`,
//! `codemode.wait`: tool call id, run id, status, code) and one per nested call
//! (`codemode.nested_call`: run id, request id, tool id, outcome), at INFO level under the
//! `codemode` target. [`layer`] turns them into OpenTelemetry spans for any tracer provider;
//! [`otlp_provider_from_env`] builds an OTLP/HTTP exporter when the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, so a collector sees
//! code-mode calls like any other service's. Without a subscriber that enables them, the spans cost
//! a disabled-callsite check.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

/// The `service.name` the spans are reported under.
pub const SERVICE_NAME: &str = "codemode";

/// The tracer provider type (the OpenTelemetry SDK's): call `shutdown` on it before exiting.
pub type Provider = SdkTracerProvider;

/// Environment variables that switch the OTLP exporter on.
pub const ENDPOINT_VARS: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("OpenTelemetry exporter: {0}")]
pub struct OtelError(String);

/// A tracer provider exporting every span to `exporter` as it ends (tests, custom exporters).
pub fn provider_with_exporter(exporter: impl SpanExporter + 'static) -> SdkTracerProvider {
    SdkTracerProvider::builder()
        .with_simple_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(SERVICE_NAME).build())
        .build()
}

/// An OTLP/HTTP (protobuf) exporting provider when an endpoint variable is set, else `None`. The
/// exporter reads the standard `OTEL_EXPORTER_OTLP_*` variables (endpoint, headers, timeout); spans
/// are sent in batches from a background thread. Call `shutdown` on the provider before exiting so
/// the last batch is sent.
pub fn otlp_provider_from_env() -> Result<Option<SdkTracerProvider>, OtelError> {
    if !ENDPOINT_VARS.iter().any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty())) {
        return Ok(None);
    }
    let exporter =
        opentelemetry_otlp::SpanExporter::builder().with_http().build().map_err(|e| OtelError(e.to_string()))?;
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(SERVICE_NAME).build())
            .build(),
    ))
}

/// A `tracing` layer sending the `codemode` spans (INFO and above) to `provider`; other targets
/// and levels are not exported (it filters itself, so it can sit beside a quieter log layer).
pub fn layer<S>(provider: &SdkTracerProvider) -> impl Layer<S> + Send + Sync + 'static
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let filter = Targets::new().with_target("codemode", tracing::Level::INFO);
    tracing_opentelemetry::layer().with_tracer(provider.tracer(SERVICE_NAME)).with_filter(filter)
}

/// The W3C `traceparent` of `span` (its trace id and its own span id), when it is exported.
/// Starts the span's OpenTelemetry context: set its parent first.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

/// The span context a W3C `traceparent` names (`None` when it is malformed).
fn remote(traceparent: &str) -> Option<opentelemetry::Context> {
    use opentelemetry::propagation::TextMapPropagator as _;
    use opentelemetry::trace::TraceContextExt as _;
    let carrier: std::collections::HashMap<String, String> =
        [("traceparent".to_string(), traceparent.to_string())].into_iter().collect();
    let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// Makes `span` a child of the W3C `traceparent` (before the span starts). Returns whether it took.
pub fn set_parent(span: &tracing::Span, traceparent: &str) -> bool {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    remote(traceparent).is_some_and(|cx| span.set_parent(cx).is_ok())
}

/// Links `span` to the span a W3C `traceparent` names (a related trace: the client's own context of
/// a `wait` whose run lives in the trace its `exec` started).
pub fn add_link(span: &tracing::Span, traceparent: &str) {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if let Some(cx) = remote(traceparent) {
        span.add_link(cx.span().span_context().clone());
    }
}

/// Gives `span` the error status, with `message` (failed, timed-out and aborted calls).
pub fn set_error(span: &tracing::Span, message: &str) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    span.set_status(opentelemetry::trace::Status::error(message.to_string()));
}
