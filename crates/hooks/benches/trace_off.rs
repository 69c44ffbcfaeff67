//! What tracing costs the sync path while it is off (docs/src/tracing.md,
//! docs/src/benchmarks.md): the process's subscriber is set up as the binary's is without
//! `OTEL_*` (a log layer at `info`, here writing to a sink), then
//!
//! - `sync_spans_off` opens the spans one sync with three child writes opens (the DEBUG
//!   `sync` span and three `write` spans of metacontroller-controllers, same targets and
//!   fields, around ready futures) and `no_spans` runs the same futures bare: the
//!   difference is what a sync pays;
//! - `hook_call_off` is one hook call (2 KB JSON answer, keep-alive, 127.0.0.1) with no
//!   trace propagator (tracing off), `hook_call_traceparent` the same with a propagator that
//!   adds a fixed `traceparent` (the header work a traced call adds, without the SDK).
//!
//! Run: `cargo bench -p metacontroller-hooks --bench trace_off`
//! (`HOOK_BENCH_SECONDS=N` sets the measurement time; default 5).

use std::future::ready;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use futures::executor::block_on;
use metacontroller_api::hook::Hook;
use metacontroller_api::wire::CompositeHookResponse;
use metacontroller_hooks::{HookClient, HookClientConfig, TracePropagator};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::json;
use support::CTX;
use tracing::field::Empty;
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::Layer as _;

mod support;

/// The binary's subscriber with tracing off and the default log level.
fn install_binary_like_subscriber() {
    let filter = tracing_subscriber::EnvFilter::new(
        "warn,metacontroller_hooks=info,metacontroller_controllers=info,metacontroller_dynamic=info",
    );
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::sink)
        .with_filter(filter);
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(fmt)).unwrap();
}

/// The spans of one sync with three child writes, as metacontroller-controllers opens them.
async fn sync_with_spans(key: &str) {
    let sync = tracing::debug_span!(
        target: "metacontroller_controllers::spans",
        "sync",
        controller_type = "CompositeController",
        controller = "bench",
        parent = %key,
        trigger = Empty,
        outcome = Empty,
        error = Empty,
        otel.status_code = Empty,
    );
    if !sync.is_disabled() {
        sync.record("trigger", "change");
    }
    let writes = async {
        for name in ["a", "b", "c"] {
            let write = tracing::debug_span!(
                target: "metacontroller_controllers::spans",
                "write",
                verb = "create",
                kind = %"ConfigMap",
                namespace = %"default",
                name = %name,
                outcome = Empty,
                http.response.status_code = Empty,
                otel.status_code = Empty,
            );
            if write.is_disabled() {
                black_box(ready(name).await);
            } else {
                black_box(ready(name).instrument(write.clone()).await);
                write.record("outcome", "success");
            }
        }
    };
    writes.instrument(sync.clone()).await;
    if !sync.is_disabled() {
        sync.record("outcome", "success");
    }
}

/// The same work without spans.
async fn sync_without_spans(key: &str) {
    black_box(key);
    for name in ["a", "b", "c"] {
        black_box(ready(name).await);
    }
}

/// Adds a fixed `traceparent`, as the binary's propagator does for a sampled span.
struct FixedTraceparent;

impl TracePropagator for FixedTraceparent {
    fn inject(&self, headers: &mut HeaderMap) {
        let value = format!(
            "00-{}-{}-01",
            "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        );
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert("traceparent", value);
        }
    }
}

/// The hook server: eight ConfigMap children and a status.
fn start_server(rt: &tokio::runtime::Runtime) -> String {
    let children: Vec<serde_json::Value> = (0..8)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("child-{i}")},
                        "data": {"key": "x".repeat(137)}})
        })
        .collect();
    let body = json!({"status": {"ready": true}, "children": children});
    support::serve_body(rt, body.to_string())
}

async fn hook_calls(client: HookClient, hook: Arc<Hook>, calls: u64) {
    let request = json!({"controller": {"metadata": {"name": "bench"}},
                         "parent": {"metadata": {"name": "p", "namespace": "default"}},
                         "children": {}});
    for _ in 0..calls {
        let _: CompositeHookResponse = client.call(&CTX, &hook, &[], &request).await.unwrap();
    }
}

fn bench(c: &mut Criterion) {
    install_binary_like_subscriber();
    let mut group = c.benchmark_group("trace_off");
    group.measurement_time(support::measurement_time("HOOK_BENCH_SECONDS", 5));
    group.bench_function("sync_spans_off", |b| {
        b.iter(|| block_on(sync_with_spans(black_box("default/p"))))
    });
    group.bench_function("no_spans", |b| {
        b.iter(|| block_on(sync_without_spans(black_box("default/p"))))
    });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let hook = support::webhook(start_server(&rt));
    let off = HookClient::new(HookClientConfig::default()).unwrap();
    let traced = HookClient::new(HookClientConfig {
        trace: Some(Arc::new(FixedTraceparent)),
        ..HookClientConfig::default()
    })
    .unwrap();
    for (name, client) in [("hook_call_off", off), ("hook_call_traceparent", traced)] {
        rt.block_on(hook_calls(client.clone(), hook.clone(), 100));
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let (client, hook) = (client.clone(), hook.clone());
                let started = Instant::now();
                rt.block_on(rt.spawn(hook_calls(client, hook, iters)))
                    .unwrap();
                started.elapsed()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
