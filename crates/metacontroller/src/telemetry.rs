//! OpenTelemetry tracing (docs/src/tracing.md). Off unless the standard environment asks for
//! it: `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set (and neither
//! `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none`). Then spans of our crates go to
//! the collector over OTLP/HTTP with protobuf bodies, hook requests carry a W3C
//! `traceparent`, and log lines carry `trace_id`. The other `OTEL_*` variables (headers,
//! timeout, sampler, batch settings, resource attributes) are read by the SDK.
//!
//! Off, nothing of this is built: no layer, no propagator, no exporter thread.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The provider while tracing is on (flushed by [`shutdown`]).
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Whether the environment turns tracing on.
pub fn enabled_by_env() -> bool {
    enabled(|name| std::env::var(name).ok())
}

fn enabled(var: impl Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let no_exporter =
        var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
    (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        && !disabled
        && !no_exporter
}

/// Builds the exporter and provider (the export runs on `runtime`) and returns the layer
/// that turns our spans into OpenTelemetry spans. Call once, when [`enabled_by_env`].
pub fn layer<S>(
    runtime: tokio::runtime::Handle,
) -> anyhow::Result<Box<dyn Layer<S> + Send + Sync + 'static>>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let client = TokioClient {
        client: metacontroller_hooks::plain_client().context("OTLP HTTP client")?,
        runtime,
        timeout: export_timeout(),
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_http_client(client)
        .build()
        .context("OTLP trace exporter (OTEL_EXPORTER_OTLP_* settings)")?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("metacontroller");
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("metacontroller");
    let _ = PROVIDER.set(provider);
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(tracing_subscriber::filter::filter_fn(ours));
    Ok(Box::new(layer))
}

/// Which callsites become OpenTelemetry data: our crates' spans down to DEBUG (the sync and
/// write spans are DEBUG, so log filtering never hides them), and their INFO and more
/// severe events as span events.
fn ours(meta: &tracing::Metadata<'_>) -> bool {
    let target = meta.target();
    let our_crate =
        target.starts_with("metacontroller") || target.starts_with("embedded_apiserver");
    let floor = if meta.is_span() {
        tracing::Level::DEBUG
    } else {
        tracing::Level::INFO
    };
    our_crate && *meta.level() <= floor
}

/// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` or `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), else
/// the specification's 10 s. Our client enforces it.
fn export_timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok()?.trim().parse::<u64>().ok())
    .map_or(Duration::from_secs(10), Duration::from_millis)
}

/// The propagator hook requests use while tracing is on; `None` when off.
pub fn hook_propagator() -> Option<Arc<dyn metacontroller_hooks::TracePropagator>> {
    PROVIDER.get()?;
    Some(Arc::new(W3cHeaders(TraceContextPropagator::new())))
}

/// Writes the current span's context as `traceparent` (and `tracestate`).
struct W3cHeaders(TraceContextPropagator);

impl metacontroller_hooks::TracePropagator for W3cHeaders {
    fn inject(&self, headers: &mut http::HeaderMap) {
        let cx = tracing::Span::current().context();
        self.0
            .inject_context(&cx, &mut opentelemetry_http::HeaderInjector(headers));
        // The propagator writes `tracestate` even when there is none; send it only with content.
        if headers.get("tracestate").is_some_and(|v| v.is_empty()) {
            headers.remove("tracestate");
        }
    }
}

/// The trace id of the current span, when tracing is on and the span is part of a trace.
pub fn current_trace_id() -> Option<String> {
    PROVIDER.get()?;
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let context = span.span_context();
    context.is_valid().then(|| context.trace_id().to_string())
}

/// Flushes the spans still queued and stops the exporter (bounded); no-op when off.
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        if let Err(err) = provider.shutdown_with_timeout(Duration::from_secs(5)) {
            eprintln!("warning: flushing traces at exit failed: {err}");
        }
    }
}

/// The exporter's HTTP client: the SDK exports from its own thread without a Tokio context,
/// so each request is spawned on the process's runtime and awaited from there.
#[derive(Debug)]
struct TokioClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

#[async_trait::async_trait]
impl HttpClient for TokioClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let limit = self.timeout;
        let sent = self.runtime.spawn(async move {
            let exchange = async move {
                let response = client.execute(request).await?;
                let status = response.status();
                let body = response.bytes().await?;
                Ok::<_, reqwest::Error>((status, body))
            };
            tokio::time::timeout(limit, exchange).await
        });
        let (status, body) = sent.await???;
        let mut response = Response::new(body);
        *response.status_mut() = status;
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::enabled;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        assert!(!enabled(env(&[])));
        assert!(!enabled(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(enabled(env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://c:4318"
        )])));
        assert!(enabled(env(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c:4318/v1/traces"
        )])));
    }

    #[test]
    fn the_standard_switches_turn_it_off() {
        let on = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert!(!enabled(env(&[on, ("OTEL_SDK_DISABLED", "TRUE")])));
        assert!(!enabled(env(&[on, ("OTEL_TRACES_EXPORTER", "none")])));
        assert!(enabled(env(&[on, ("OTEL_SDK_DISABLED", "false")])));
    }
}
