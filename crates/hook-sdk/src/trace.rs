//! Each hook request runs in a `hook_request` span. With the `opentelemetry` feature the span
//! continues the caller's trace: Metacontroller sends a W3C `traceparent` header when its
//! tracing is on, and the span takes it as its parent through the global text-map
//! propagator, so spans the handler opens join the controller's sync trace.
//!
//! Set the propagator once at startup, next to your tracer provider and
//! `tracing-opentelemetry` layer:
//! `opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new())`.

use axum::http::HeaderMap;
use tracing::Span;

/// The span a hook request's handler runs in.
pub(crate) fn request_span(hook: &str, headers: &HeaderMap) -> Span {
    let span = tracing::info_span!("hook_request", hook);
    continue_trace(&span, headers);
    span
}

#[cfg(feature = "opentelemetry")]
fn continue_trace(span: &Span, headers: &HeaderMap) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if span.is_disabled() || !headers.contains_key("traceparent") {
        return;
    }
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&Headers(headers))
    });
    // Fails only without an OpenTelemetry layer; the span then stays a plain span.
    let _ = span.set_parent(parent);
}

#[cfg(not(feature = "opentelemetry"))]
fn continue_trace(_span: &Span, _headers: &HeaderMap) {}

/// Request headers as an OpenTelemetry carrier.
#[cfg(feature = "opentelemetry")]
struct Headers<'a>(&'a HeaderMap);

#[cfg(feature = "opentelemetry")]
impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|name| name.as_str()).collect()
    }
}
