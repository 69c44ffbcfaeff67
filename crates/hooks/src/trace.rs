//! Trace context in hook requests: the binary installs a [`TracePropagator`] when
//! OpenTelemetry tracing is on, and every hook request then carries the context of its
//! `hook_call` span (W3C `traceparent`), so a hook server that traces joins the sync's
//! trace. Without one (the default) no header is added and nothing is computed.

use reqwest::header::HeaderMap;

/// Writes the current span's trace context into a hook request's headers.
pub trait TracePropagator: Send + Sync {
    /// Adds the trace headers (e.g. `traceparent`) of the current span to `headers`.
    fn inject(&self, headers: &mut HeaderMap);
}
