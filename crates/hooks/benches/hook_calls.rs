//! Hook call throughput over keep-alive against a local axum server answering 2 KB JSON:
//! one caller in sequence, and 32 concurrent callers. Criterion reports elements/s, i.e.
//! hook calls per second.
//!
//! Run: `cargo bench -p metacontroller-hooks --bench hook_calls`

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use metacontroller_api::hook::{Hook, Webhook};
use metacontroller_api::wire::CompositeHookResponse;
use metacontroller_hooks::{CallContext, HookClient, HookClientConfig};
use serde_json::json;

const CONCURRENCY: u64 = 32;

/// A sync-like response of about 2 KB.
fn response_body() -> String {
    let children: Vec<serde_json::Value> = (0..8)
        .map(|i| {
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": format!("child-{i}"), "labels": {"app": "bench"}},
                "data": {"key": "x".repeat(137)},
            })
        })
        .collect();
    let body = json!({"status": {"replicas": 8, "ready": true}, "children": children});
    let text = body.to_string();
    assert!((2000..2100).contains(&text.len()), "{}", text.len());
    text
}

/// The hook server runs on its own runtime (one worker thread), like a separate process.
fn start_server() -> String {
    let body: &'static str = Box::leak(response_body().into_boxed_str());
    let app = Router::new().route(
        "/sync",
        post(move || async move { ([("content-type", "application/json")], body) }),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    let addr = rx.recv().unwrap();
    format!("http://{addr}/sync")
}

fn bench(c: &mut Criterion) {
    let url = start_server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client = HookClient::new(HookClientConfig::default()).unwrap();
    let hook = Arc::new(Hook {
        version: None,
        webhook: Some(Webhook {
            url: Some(url),
            ..Webhook::default()
        }),
    });
    let request = Arc::new(json!({
        "controller": {"metadata": {"name": "bench"}},
        "parent": {"apiVersion": "example.com/v1", "kind": "Thing",
                   "metadata": {"name": "p", "namespace": "default", "uid": "1234"},
                   "spec": {"replicas": 8}},
        "children": {},
    }));
    let ctx = CallContext {
        controller: "bench",
        hook_name: "sync",
        parent_key: "default/p",
    };

    // Warm the keep-alive connection.
    rt.block_on(async {
        let _: CompositeHookResponse = client.call(&ctx, &hook, &[], &*request).await.unwrap();
    });

    let mut group = c.benchmark_group("hook_calls");
    group.throughput(Throughput::Elements(1));
    let seconds = std::env::var("HOOK_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    group.measurement_time(Duration::from_secs(seconds));

    // Baseline: the same POST with a bare reqwest client and serde_json, to show what the
    // hook layer (URL, credentials, timeout, status and size checks, metrics) adds.
    // reqwest is built without a default crypto provider; the baseline needs one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let raw = reqwest::Client::new();
    let raw_url = hook.webhook.as_ref().unwrap().url.clone().unwrap();
    let raw_body = serde_json::to_vec(&*request).unwrap();
    group.bench_function("raw_reqwest_baseline", |b| {
        b.to_async(&rt).iter(|| async {
            let response = raw
                .post(&raw_url)
                .header("content-type", "application/json")
                .body(raw_body.clone())
                .send()
                .await
                .unwrap();
            let bytes = response.bytes().await.unwrap();
            let _: CompositeHookResponse = serde_json::from_slice(&bytes).unwrap();
        })
    });

    group.bench_function("sequential", |b| {
        b.to_async(&rt).iter(|| async {
            let _: CompositeHookResponse = client.call(&ctx, &hook, &[], &*request).await.unwrap();
        })
    });

    group.bench_function("concurrent_32", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let client = client.clone();
            let hook = hook.clone();
            let request = request.clone();
            async move {
                let started = Instant::now();
                let mut tasks = Vec::new();
                for worker in 0..CONCURRENCY {
                    let share = iters / CONCURRENCY + u64::from(worker < iters % CONCURRENCY);
                    let client = client.clone();
                    let hook = hook.clone();
                    let request = request.clone();
                    tasks.push(tokio::spawn(async move {
                        let ctx = CallContext {
                            controller: "bench",
                            hook_name: "sync",
                            parent_key: "default/p",
                        };
                        for _ in 0..share {
                            let _: CompositeHookResponse =
                                client.call(&ctx, &hook, &[], &*request).await.unwrap();
                        }
                    }));
                }
                for task in tasks {
                    task.await.unwrap();
                }
                started.elapsed()
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
