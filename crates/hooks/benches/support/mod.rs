//! What the hook benches and the `hook_load` example share: the call context, the local
//! axum hook server, the ~2 KB sync answer, the request, the call loop and the measurement
//! time. Each target uses a part of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use axum::Router;
use metacontroller_api::hook::{Hook, Webhook};
use metacontroller_api::wire::CompositeHookResponse;
use metacontroller_hooks::{CallContext, HookClient};
use serde_json::{json, Value};

/// The context of every bench call (names only, for metrics and logs).
pub const CTX: CallContext<'static> = CallContext {
    controller: "bench",
    hook_name: "sync",
    parent_key: "default/p",
};

/// Serves `app` on 127.0.0.1 (a free port) from a task on `rt`; returns the URL of its
/// `/sync` route. The hook server shares the client's runtime, as in the load harness.
pub fn serve_sync(rt: &tokio::runtime::Runtime, app: Router) -> String {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/sync")
}

/// [`serve_sync`] with a server answering every POST to `/sync` with `body` as JSON.
pub fn serve_body(rt: &tokio::runtime::Runtime, body: String) -> String {
    let body: &'static str = Box::leak(body.into_boxed_str());
    let app = Router::new().route(
        "/sync",
        post(move || async move { ([("content-type", "application/json")], body) }),
    );
    serve_sync(rt, app)
}

/// A sync-like response of about 2 KB: eight labelled ConfigMap children and a status.
pub fn response_body() -> String {
    let children: Vec<Value> = (0..8)
        .map(|i| {
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": format!("child-{i}"), "labels": {"app": "bench"}},
                "data": {"key": "x".repeat(137)},
            })
        })
        .collect();
    json!({"status": {"replicas": 8, "ready": true}, "children": children}).to_string()
}

/// A webhook hook calling `url`.
pub fn webhook(url: String) -> Arc<Hook> {
    Arc::new(Hook {
        version: None,
        webhook: Some(Webhook {
            url: Some(url),
            ..Webhook::default()
        }),
        ..Hook::default()
    })
}

/// The sync request of the webhook benches: parent `default/p` with no children.
pub fn request() -> Value {
    json!({
        "controller": {"metadata": {"name": "bench"}},
        "parent": {"apiVersion": "example.com/v1", "kind": "Thing",
                   "metadata": {"name": "p", "namespace": "default", "uid": "1234"},
                   "spec": {"replicas": 8}},
        "children": {},
    })
}

/// `calls` hook calls in sequence.
pub async fn hook_calls(client: HookClient, hook: Arc<Hook>, request: Arc<Value>, calls: u64) {
    for _ in 0..calls {
        let _: CompositeHookResponse = client.call(&CTX, &hook, &[], &*request).await.unwrap();
    }
}

/// The measurement time: `var` seconds when set to a number, else `default` seconds.
pub fn measurement_time(var: &str, default: u64) -> Duration {
    let seconds = std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    Duration::from_secs(seconds)
}

/// The baseline's `calls` POSTs of `body` to `url` in sequence with a bare reqwest client,
/// each answer decoded as the hook client does.
pub async fn raw_calls(client: reqwest::Client, url: String, body: bytes::Bytes, calls: u64) {
    for _ in 0..calls {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let bytes = response.bytes().await.unwrap();
        let _: CompositeHookResponse = serde_json::from_slice(&bytes).unwrap();
    }
}

/// `calls` calls shared among `tasks` concurrent tasks: `start(share)` is the future of one
/// task making `share` of them. Returns when all are done.
pub async fn shared_among<F>(tasks: u64, calls: u64, start: impl Fn(u64) -> F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let mut running = Vec::new();
    for worker in 0..tasks {
        let share = calls / tasks + u64::from(worker < calls % tasks);
        running.push(tokio::spawn(start(share)));
    }
    for task in running {
        task.await.unwrap();
    }
}
