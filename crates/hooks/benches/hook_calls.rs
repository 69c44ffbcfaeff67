//! Hook call throughput over keep-alive against a local axum server answering 2 KB JSON:
//! one caller in sequence, and 32 concurrent callers. Criterion reports elements/s, i.e.
//! hook calls per second.
//!
//! Run: `cargo bench -p metacontroller-hooks --bench hook_calls`
//! (`HOOK_BENCH_SECONDS=N` sets the measurement time; default 8).
//!
//! Measured 2026-11-21 on the shared 2-core dev machine (load average 7–13 from other
//! builds): sequential ≈ 6.4k calls/s, 32 concurrent ≈ 5.5k calls/s, bare reqwest
//! baseline 5.6k–9.3k calls/s. The `hook_load` example (rounds alternating variants)
//! gave 8.4k–10.7k sequential and 7.3k–15.6k concurrent at load ≈ 7.
//!
//! `--record-hooks` (2026-11-23, same machine, load from 3 other helpers' builds):
//! sequential 107–139 µs per call; `sequential_recording_handoff_only` (the call path
//! builds the record and hands it over, nothing written) 129 µs, within the run-to-run
//! noise; `sequential_recording` (files written by the writer thread, max 1000 files)
//! 321–426 µs: in this tight loop the writer thread (parse, redact, pretty JSON,
//! create/write/rename/unlink per record) competes with the calls for the 2 cores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use metacontroller_api::hook::Hook;
use metacontroller_hooks::{HookClient, HookClientConfig};
use support::{hook_calls, raw_calls, request, shared_among};

mod support;

const CONCURRENCY: u64 = 32;

/// A sync-like response of about 2 KB (checked, so the measured numbers stay comparable).
fn response_body() -> String {
    let text = support::response_body();
    assert!((2000..2100).contains(&text.len()), "{}", text.len());
    text
}

/// The runtime, the hook server and the call every variant makes.
struct Fixture {
    rt: tokio::runtime::Runtime,
    url: String,
    hook: Arc<Hook>,
    request: Arc<serde_json::Value>,
}

impl Fixture {
    /// Starts the runtime and the hook server.
    fn start() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = support::serve_body(&rt, response_body());
        let hook = support::webhook(url.clone());
        Self {
            rt,
            url,
            hook,
            request: Arc::new(request()),
        }
    }

    /// 100 calls with `client`: its keep-alive connection is open before measuring.
    fn warm(&self, client: &HookClient) {
        self.rt.block_on(hook_calls(
            client.clone(),
            self.hook.clone(),
            self.request.clone(),
            100,
        ));
    }

    /// How long `calls` takes, run as a task on the runtime (as controller workers run), not
    /// on the bench thread, so each call does not pay an extra thread hand-off.
    fn time(&self, calls: impl std::future::Future<Output = ()> + Send + 'static) -> Duration {
        let started = Instant::now();
        self.rt.block_on(self.rt.spawn(calls)).unwrap();
        started.elapsed()
    }
}

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// A recorder that drops what it gets: what the call path pays for building the record,
/// without the writer thread competing for the CPU.
struct Discard;

impl metacontroller_hooks::HookRecorder for Discard {
    fn record(&self, exchange: metacontroller_hooks::RecordedExchange) {
        std::hint::black_box(exchange);
    }
}

fn bench(c: &mut Criterion) {
    let fixture = Fixture::start();
    let client = HookClient::new(HookClientConfig::default()).unwrap();
    // Warm the keep-alive connection.
    fixture.warm(&client);

    let mut group = c.benchmark_group("hook_calls");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(support::measurement_time("HOOK_BENCH_SECONDS", 8));

    bench_sequential(&mut group, "sequential", &fixture, &client);
    bench_concurrent(&mut group, &fixture, &client);

    // The same sequential calls with --record-hooks on: what recording adds per call (the
    // hot path hands buffers to the writer thread; the file write is off the path).
    let record_dir = std::env::temp_dir().join(format!("hook-bench-record-{}", std::process::id()));
    let recorder = metacontroller_hooks::DirectoryRecorder::new(&record_dir, Some(1000)).unwrap();
    let recording = HookClient::new(HookClientConfig {
        recorder: Some(Arc::new(recorder)),
        ..HookClientConfig::default()
    })
    .unwrap();
    fixture.warm(&recording);
    bench_sequential(&mut group, "sequential_recording", &fixture, &recording);

    // The hot-path share alone (see `Discard`).
    let handoff = HookClient::new(HookClientConfig {
        recorder: Some(Arc::new(Discard)),
        ..HookClientConfig::default()
    })
    .unwrap();
    fixture.warm(&handoff);
    let name = "sequential_recording_handoff_only";
    bench_sequential(&mut group, name, &fixture, &handoff);

    bench_raw_baseline(&mut group, &fixture);
    group.finish();
    let _ = std::fs::remove_dir_all(&record_dir);
}

/// Calls in sequence from one task ([`Fixture::time`]).
fn bench_sequential(group: &mut Group<'_>, name: &str, fixture: &Fixture, client: &HookClient) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let (client, hook, request) = (
                client.clone(),
                fixture.hook.clone(),
                fixture.request.clone(),
            );
            fixture.time(hook_calls(client, hook, request, iters))
        })
    });
}

/// The calls shared among [`CONCURRENCY`] concurrent tasks.
fn bench_concurrent(group: &mut Group<'_>, fixture: &Fixture, client: &HookClient) {
    group.bench_function("concurrent_32", |b| {
        b.iter_custom(|iters| {
            let started = Instant::now();
            fixture
                .rt
                .block_on(shared_among(CONCURRENCY, iters, |share| {
                    let (client, hook, request) = (
                        client.clone(),
                        fixture.hook.clone(),
                        fixture.request.clone(),
                    );
                    hook_calls(client, hook, request, share)
                }));
            started.elapsed()
        })
    });
}

/// Baseline: the same POST with a bare reqwest client and serde_json, to show what the
/// hook layer (URL, credentials, timeout, status and size checks, metrics) adds.
fn bench_raw_baseline(group: &mut Group<'_>, fixture: &Fixture) {
    // reqwest is built without a default crypto provider; the baseline needs one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let raw = reqwest::Client::new();
    let raw_body = bytes::Bytes::from(serde_json::to_vec(&*fixture.request).unwrap());
    group.bench_function("raw_reqwest_baseline", |b| {
        b.iter_custom(|iters| {
            let (raw, url, body) = (raw.clone(), fixture.url.clone(), raw_body.clone());
            fixture.time(raw_calls(raw, url, body, iters))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
