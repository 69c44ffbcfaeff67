//! With the `opentelemetry` feature a handler continues the trace of the `traceparent` the
//! controller sent: the request's `hook_request` span is that span's child, and spans the
//! handler opens sit below it, in the same trace. Real HTTP on 127.0.0.1.

use std::sync::{Arc, Mutex};

use metacontroller_hook::{serve, CompositeHookRequest, CompositeHookResponse, Error, Hooks};
use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tokio::sync::oneshot;
use tracing_subscriber::layer::SubscriberExt as _;

/// Keeps every exported span.
#[derive(Debug, Clone, Default)]
struct Collected(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Collected {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

impl Collected {
    fn named(&self, name: &str) -> Vec<SpanData> {
        let spans = self.0.lock().unwrap();
        spans.iter().filter(|s| s.name == name).cloned().collect()
    }
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn request_body() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../metacontroller/tests/golden/hooks/v1/composite-sync-request.json");
    std::fs::read_to_string(&path)
        .unwrap()
        .replace("<timestamp>", "2026-01-01T00:00:00Z")
}

async fn sync(_req: CompositeHookRequest) -> Result<CompositeHookResponse, Error> {
    let work = tracing::info_span!("handler_work");
    let _entered = work.enter();
    Ok(CompositeHookResponse::default())
}

#[tokio::test]
async fn handler_spans_continue_the_callers_trace() {
    let collected = Collected::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(collected.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("hook-test")));
    tracing::subscriber::set_global_default(subscriber).unwrap();
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/sync", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, Hooks::new().sync(sync), async {
        let _ = stopped.await;
    }));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let post = |traceparent: Option<String>| {
        let mut request = client
            .post(&url)
            .header("content-type", "application/json")
            .body(request_body());
        if let Some(value) = traceparent {
            request = request.header("traceparent", value);
        }
        request.send()
    };

    let answered = post(Some(format!("00-{TRACE}-{PARENT}-01"))).await.unwrap();
    assert_eq!(answered.status(), 200);
    let requests = collected.named("hook_request");
    assert_eq!(requests.len(), 1, "one request span: {requests:?}");
    let request = &requests[0];
    let trace = TraceId::from_hex(TRACE).unwrap();
    assert_eq!(
        request.span_context.trace_id(),
        trace,
        "same trace as the caller"
    );
    assert_eq!(request.parent_span_id, SpanId::from_hex(PARENT).unwrap());
    assert!(request.parent_span_is_remote);
    let work = collected.named("handler_work");
    assert_eq!(work.len(), 1);
    assert_eq!(work[0].span_context.trace_id(), trace);
    assert_eq!(work[0].parent_span_id, request.span_context.span_id());

    // Without the header the request starts a trace of its own.
    assert_eq!(post(None).await.unwrap().status(), 200);
    let requests = collected.named("hook_request");
    assert_eq!(requests.len(), 2);
    assert_ne!(requests[1].span_context.trace_id(), trace);
    assert_eq!(requests[1].parent_span_id, SpanId::INVALID);

    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
