//! A tiny OTLP/HTTP trace receiver: `POST /v1/traces` with a protobuf
//! `ExportTraceServiceRequest`, decoded and kept for the test to inspect. Enough of a
//! collector to check what the controller exports; 127.0.0.1 only.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;

/// One received span, flattened.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// Lower-case hex, 32 digits.
    pub trace_id: String,
    /// Lower-case hex, 16 digits.
    pub span_id: String,
    /// Lower-case hex; empty for a root span.
    pub parent_span_id: String,
    /// The span name (`sync`, `hook_call`, ...).
    pub name: String,
    /// Attributes with their values as text.
    pub attributes: BTreeMap<String, String>,
    /// OTLP status code: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    /// The resource's `service.name`.
    pub service_name: String,
}

impl ReceivedSpan {
    /// The attribute `key` as text.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Default)]
struct State {
    spans: Vec<ReceivedSpan>,
    requests: usize,
    bad_requests: usize,
}

/// The receiver; stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    /// Starts on a random port of 127.0.0.1.
    pub async fn start() -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the OTLP receiver");
        let addr = listener.local_addr().expect("OTLP receiver address");
        let app = axum::Router::new().route(
            "/v1/traces",
            post({
                let state = state.clone();
                move |headers: HeaderMap, body: Bytes| receive(state.clone(), headers, body)
            }),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        OtlpReceiver { addr, state, task }
    }

    /// The value for `OTEL_EXPORTER_OTLP_ENDPOINT`: `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.lock().spans.clone()
    }

    /// Export requests received, and how many of them could not be decoded.
    pub fn requests(&self) -> (usize, usize) {
        let state = self.lock();
        (state.requests, state.bad_requests)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(state: Arc<Mutex<State>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let protobuf = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-protobuf"));
    let decoded = ExportTraceServiceRequest::decode(body.as_ref());
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    state.requests += 1;
    let request = match decoded {
        Ok(request) if protobuf => request,
        _ => {
            state.bad_requests += 1;
            return StatusCode::BAD_REQUEST;
        }
    };
    for resource_spans in request.resource_spans {
        let service_name = resource_spans
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .map(text)
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                state.spans.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(kv)))
                        .collect(),
                    status_code: span.status.map_or(0, |s| s.code),
                    service_name: service_name.clone(),
                });
            }
        }
    }
    StatusCode::OK
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
