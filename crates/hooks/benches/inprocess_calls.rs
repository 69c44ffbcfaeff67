//! Per-call latency of the same hook in the three runtimes, through [`HookClient::call`] as a
//! controller makes it: the hello-world sync hook (`examples/hello-world`: a ConfigMap child
//! holding the greeting, a status counting the owned ConfigMaps) as Jsonnet
//! (`examples/hello-world-jsonnet`, from an in-memory ConfigMap), as WebAssembly
//! (`examples/hello-world-wasm`, built here for `wasm32-wasip1`) and as a Rust webhook (axum
//! on 127.0.0.1, keep-alive) answering the same JSON. The request is a steady-state sync of a
//! HelloWorld that owns its ConfigMap, with the metadata a real API server returns (about
//! 2.2 KB).
//!
//! Variants: calls in sequence from one task (`<runtime>/sequential`: the latency of one call),
//! and shared among 5 concurrent tasks (`<runtime>/concurrent_5`, the controller's default
//! `--workers`: time per call at that concurrency). The WASM variants are skipped when the
//! `wasm32-wasip1` target is missing.
//!
//! Group `jsonnet_engine`: the Jsonnet evaluation alone, as it ran before worker processes
//! (`in_thread`: a fresh evaluation state per call on a blocking thread, so every call parses
//! the code) and in the pool (`pool`: a worker process that keeps the parsed code by digest),
//! for the hello-world hook and for a hook importing a ~500 KB library.
//!
//! Run: `cargo bench -p metacontroller-hooks --bench inprocess_calls`
//! (`INPROCESS_BENCH_SECONDS=N` sets the measurement time; default 5).
//!
//! Measured 2026-11-27 on the shared 2-core dev machine (load average 3–10 from other builds),
//! medians of two runs per call in sequence: webhook 86–90 µs, Jsonnet 255–269 µs, WASM
//! 618–688 µs; 5 concurrent callers: 88–109, 187–223 and 349–460 µs. Details: docs/src/benchmarks.md, "In-process hooks (2026-11-27)".

use std::sync::Arc;
use std::time::Instant;

use axum::routing::post;
use axum::{Json, Router};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use metacontroller_api::hook::Hook;
use metacontroller_api::wire::CompositeHookResponse;
use metacontroller_hooks::inprocess::jsonnet_pool::{JsonnetLimits, JsonnetPool};
use metacontroller_hooks::{
    CallContext, CodeObject, HookClient, HookClientConfig, JsonnetPoolConfig, MemoryCode,
    WorkerCommand,
};
use serde_json::{json, Value};

mod support;

use support::shared_among;

/// The controller's default `--workers`.
const CONCURRENCY: u64 = 5;

const SYNC_JSONNET: &str = include_str!("../../../examples/hello-world-jsonnet/sync.jsonnet");
const GREETING_LIBSONNET: &str =
    include_str!("../../../examples/hello-world-jsonnet/greeting.libsonnet");

const CTX: CallContext<'static> = CallContext {
    controller: "hello-controller",
    hook_name: "sync",
    parent_key: "default/hello",
};

/// The hello-world sync hook in Rust (what `sync.py`, the Jsonnet file and the WASM module
/// answer), served by the webhook variant.
fn hello_sync(request: &Value) -> Value {
    let parent = &request["parent"];
    let who = match &parent["spec"]["who"] {
        Value::Null => "World".to_string(),
        Value::String(who) => who.clone(),
        other => other.to_string(),
    };
    let observed = request["children"]["ConfigMap.v1"]
        .as_object()
        .map_or(0, serde_json::Map::len);
    json!({
        "status": {"greetings": observed},
        "children": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": parent["metadata"]["name"]},
            "data": {"greeting": format!("Hello, {who}!")},
        }],
    })
}

/// Metadata as the API server returns it: uid, resourceVersion, timestamps, managedFields.
fn server_metadata(name: &str, uid: &str, manager: &str, fields: Value) -> Value {
    json!({
        "name": name, "namespace": "default", "uid": uid,
        "resourceVersion": "48213", "generation": 1,
        "creationTimestamp": "2026-11-27T06:00:00Z",
        "managedFields": [{
            "manager": manager, "operation": "Update", "apiVersion": "v1",
            "time": "2026-11-27T06:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields,
        }],
    })
}

/// A steady-state sync request: the HelloWorld (with its status) owns its ConfigMap.
fn request() -> Value {
    let mut parent_meta = server_metadata(
        "hello",
        "6f1c2a9e-3b7d-4e0a-9c51-2d8e4f7a1b60",
        "kubectl-client-side-apply",
        json!({"f:metadata": {"f:annotations": {".": {},
               "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
               "f:spec": {".": {}, "f:who": {}}}),
    );
    parent_meta["annotations"] = json!({"kubectl.kubernetes.io/last-applied-configuration":
        "{\"apiVersion\":\"example.com/v1\",\"kind\":\"HelloWorld\",\"metadata\":{\"annotations\":{},\"name\":\"hello\",\"namespace\":\"default\"},\"spec\":{\"who\":\"World\"}}\n"});
    let mut child_meta = server_metadata(
        "hello",
        "0a4d7e2c-5f81-4b93-8e6a-c1d2e3f4a5b6",
        "metacontroller",
        json!({"f:data": {".": {}, "f:greeting": {}},
               "f:metadata": {"f:labels": {".": {}, "f:controller-uid": {}},
               "f:ownerReferences": {".": {}, "k:{\"uid\":\"6f1c2a9e-3b7d-4e0a-9c51-2d8e4f7a1b60\"}": {}}}}),
    );
    child_meta["labels"] = json!({"controller-uid": "6f1c2a9e-3b7d-4e0a-9c51-2d8e4f7a1b60"});
    child_meta["ownerReferences"] = json!([{
        "apiVersion": "example.com/v1", "kind": "HelloWorld", "name": "hello",
        "uid": "6f1c2a9e-3b7d-4e0a-9c51-2d8e4f7a1b60", "controller": true,
        "blockOwnerDeletion": true,
    }]);
    json!({
        "controller": {
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "hello-controller", "uid": "c3b1d2e4-0f5a-4c6b-8d7e-9f0a1b2c3d4e",
                         "resourceVersion": "48001", "generation": 1},
            "spec": {"generateSelector": true,
                     "parentResource": {"apiVersion": "example.com/v1", "resource": "helloworlds"},
                     "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                         "updateStrategy": {"method": "InPlace"}}],
                     "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:8080/sync"}}}},
        },
        "parent": {
            "apiVersion": "example.com/v1", "kind": "HelloWorld", "metadata": parent_meta,
            "spec": {"who": "World"}, "status": {"greetings": 1},
        },
        "children": {"ConfigMap.v1": {"hello": {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": child_meta,
            "data": {"greeting": "Hello, World!"},
        }}},
        "related": {},
        "finalizing": false,
    })
}

/// The webhook: the same hook answering on 127.0.0.1; returns its URL.
fn start_webhook(rt: &tokio::runtime::Runtime) -> String {
    let app = Router::new().route(
        "/sync",
        post(|Json(request): Json<Value>| async move { Json(hello_sync(&request)) }),
    );
    support::serve_sync(rt, app)
}

/// The hook code ConfigMaps: the Jsonnet files, and the module when there is one.
fn code(module: Option<Vec<u8>>) -> Arc<MemoryCode> {
    let memory = Arc::new(MemoryCode::new());
    let files = [
        ("sync.jsonnet", SYNC_JSONNET),
        ("greeting.libsonnet", GREETING_LIBSONNET),
    ];
    memory.set("hooks", "hello-jsonnet", CodeObject::from_text(&files));
    if let Some(module) = module {
        let binary_data = [("hello.wasm".to_string(), module)].into();
        memory.set(
            "hooks",
            "hello-wasm",
            CodeObject {
                binary_data,
                ..CodeObject::default()
            },
        );
    }
    memory
}

fn hook(spec: Value) -> Arc<Hook> {
    Arc::new(serde_json::from_value(spec).unwrap())
}

/// `calls` hook calls in sequence.
async fn hook_calls(client: HookClient, hook: Arc<Hook>, request: Arc<Value>, calls: u64) {
    for _ in 0..calls {
        let _: CompositeHookResponse = client.call(&CTX, &hook, &[], &*request).await.unwrap();
    }
}

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// What every variant shares.
struct Fixture {
    rt: tokio::runtime::Runtime,
    client: HookClient,
    request: Arc<Value>,
}

impl Fixture {
    /// One answer of `hook` must be the hello-world answer (the runtimes answer alike).
    fn check(&self, hook: &Arc<Hook>) {
        let response: Value = self
            .rt
            .block_on(self.client.call(&CTX, hook, &[], &*self.request))
            .unwrap();
        assert_eq!(response, hello_sync(&self.request), "{hook:?}");
    }

    /// Calls `hook` in sequence from one task (as a controller worker: a task on the runtime).
    fn sequential(&self, group: &mut Group<'_>, name: &str, hook: &Arc<Hook>) {
        group.bench_function(format!("{name}/sequential"), |b| {
            b.iter_custom(|iters| {
                let call = hook_calls(
                    self.client.clone(),
                    hook.clone(),
                    self.request.clone(),
                    iters,
                );
                let started = Instant::now();
                self.rt.block_on(self.rt.spawn(call)).unwrap();
                started.elapsed()
            })
        });
    }

    /// The calls shared among [`CONCURRENCY`] tasks.
    fn concurrent(&self, group: &mut Group<'_>, name: &str, hook: &Arc<Hook>) {
        group.bench_function(format!("{name}/concurrent_{CONCURRENCY}"), |b| {
            b.iter_custom(|iters| {
                let started = Instant::now();
                self.rt.block_on(shared_among(CONCURRENCY, iters, |share| {
                    let (client, hook) = (self.client.clone(), hook.clone());
                    hook_calls(client, hook, self.request.clone(), share)
                }));
                started.elapsed()
            })
        });
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = start_webhook(&rt);
    let module = metacontroller_testkit::wasm::hello_world_module();
    let has_module = module.is_some();
    let client = HookClient::new(HookClientConfig {
        code: Some(code(module)),
        jsonnet: pool_config(),
        ..HookClientConfig::default()
    })
    .unwrap()
    .for_controller_type("CompositeController");
    let fixture = Fixture {
        rt,
        client,
        request: Arc::new(request()),
    };
    let mut hooks = vec![
        (
            "jsonnet",
            hook(json!({"jsonnet": {
            "configMapRef": {"namespace": "hooks", "name": "hello-jsonnet"},
            "key": "sync.jsonnet"}})),
        ),
        ("webhook", hook(json!({"webhook": {"url": url}}))),
    ];
    if has_module {
        hooks.insert(
            1,
            (
                "wasm",
                hook(json!({"wasm": {
            "configMapRef": {"namespace": "hooks", "name": "hello-wasm"},
            "key": "hello.wasm"}})),
            ),
        );
    }
    // Also compiles the module and opens the keep-alive connection before measuring.
    for (_, hook) in &hooks {
        fixture.check(hook);
    }

    let mut group = c.benchmark_group("inprocess_calls");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(support::measurement_time("INPROCESS_BENCH_SECONDS", 5));
    for (name, hook) in &hooks {
        fixture.sequential(&mut group, name, hook);
    }
    for (name, hook) in &hooks {
        fixture.concurrent(&mut group, name, hook);
    }
    group.finish();
}

/// This crate's worker program (the binary runs itself as `jsonnet-worker`).
fn pool_config() -> JsonnetPoolConfig {
    JsonnetPoolConfig {
        command: WorkerCommand {
            program: env!("CARGO_BIN_EXE_jsonnet-worker").into(),
            args: vec![],
        },
        ..JsonnetPoolConfig::default()
    }
}

/// A library of about 500 KB: 6,000 fields with a small object each.
fn big_library() -> String {
    let mut text = String::from("{\n");
    for i in 0..6000 {
        text.push_str(&format!(
            "  item{i}: {{ name: 'item-{i}', value: {i}, tags: ['alpha', 'beta', 'gamma'], ratio: {i} / 7 }},\n"
        ));
    }
    text.push_str("}\n");
    text
}

/// The evaluation alone: in a thread with a fresh state (before) and in the pool (after).
fn bench_engines(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let request = Arc::new(serde_json::to_vec(&request()).unwrap());
    let library = big_library();
    let hello = Arc::new(CodeObject::from_text(&[
        ("sync.jsonnet", SYNC_JSONNET),
        ("greeting.libsonnet", GREETING_LIBSONNET),
    ]));
    let big = Arc::new(CodeObject::from_text(&[
        ("sync.jsonnet", "local lib = import 'lib.libsonnet';\nfunction(request) { status: {value: lib.item42.value, name: request.parent.metadata.name} }"),
        ("lib.libsonnet", &library),
    ]));
    let pool = Arc::new(JsonnetPool::new(pool_config()));
    let limits = JsonnetLimits {
        timeout: std::time::Duration::from_secs(30),
        memory_bytes: 256 << 20,
    };
    let mut group = c.benchmark_group("jsonnet_engine");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(support::measurement_time("INPROCESS_BENCH_SECONDS", 5));
    for (name, code) in [("hello", &hello), ("lib_500k", &big)] {
        group.bench_function(format!("in_thread/{name}"), |b| {
            b.iter(|| {
                let (code, request) = (code.clone(), request.clone());
                // As the controller ran it: on a blocking thread of the runtime.
                let call = async move {
                    tokio::task::spawn_blocking(move || {
                        metacontroller_hooks::inprocess::jsonnet::evaluate(
                            code,
                            "sync.jsonnet",
                            &request,
                        )
                    })
                    .await
                };
                rt.block_on(call).unwrap().unwrap()
            })
        });
        group.bench_function(format!("pool/{name}"), |b| {
            b.iter(|| {
                let call = pool.evaluate(code, "sync.jsonnet", &request, limits);
                rt.block_on(call).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench, bench_engines);
criterion_main!(benches);
