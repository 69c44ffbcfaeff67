//! WebAssembly hooks run by the controller itself, on the embedded server and (with
//! METACONTROLLER_E2E_KUBECONFIG) a real one: a module in a ConfigMap gives parents their
//! children and status; new code in the ConfigMap resyncs every parent with it; hostile
//! modules (a loop, unbounded memory, garbage on stdout, a non-zero exit, an unknown import,
//! a megabyte of garbage as the module, an output over the body cap) each fail their own
//! parents with a SyncError Event while the other parents keep syncing, and the process's
//! memory stays below the module's limit + 100 MiB.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::metrics::rss_kib;
use metacontroller_testkit::wasm::{hello_world_module, patched, wat};
use metacontroller_testkit::{
    create_object, events_about, eventually_within, until_event, until_sync_error,
    ControllerProcess, CrdBuilder, TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../hooks/tests/fixtures/wasm/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    wat(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
}

/// Grows memory a page at a time and writes to every new page, until refused: without the
/// limit it would take all the memory it can get.
const GREEDY: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "_start")
    (local $page i32)
    (loop $more
      (local.set $page (memory.grow (i32.const 1)))
      (if (i32.eq (local.get $page) (i32.const -1)) (then unreachable))
      (i32.store (i32.mul (local.get $page) (i32.const 65536)) (i32.const 7))
      (br $more))))"#;

/// Writes "this is not JSON" to stdout and exits 0.
const GARBAGE: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "this is not JSON")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 16))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

/// A module answering every sync with no children, a status and one Warning Event.
fn eventful_module() -> Vec<u8> {
    let answer = json!({
        "status": {"ok": true},
        "events": [{"type": "Warning", "reason": "FromWasm", "message": "said by a wasm hook"}],
    })
    .to_string();
    let escaped = answer.replace('\\', "\\\\").replace('"', "\\\"");
    wat(&format!(
        r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "{escaped}")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const {len}))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#,
        len = answer.len()
    ))
}

async fn put_module(cluster: &TestCluster, namespace: &str, name: &str, module: Vec<u8>) {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client(), namespace);
    let cm = ConfigMap {
        metadata: kube::core::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            "hook.wasm".to_string(),
            ByteString(module),
        )])),
        ..Default::default()
    };
    match api.get_opt(name).await.unwrap() {
        Some(old) => {
            let mut cm = cm;
            cm.metadata.resource_version = old.metadata.resource_version;
            api.replace(name, &PostParams::default(), &cm)
                .await
                .unwrap();
        }
        None => {
            api.create(&PostParams::default(), &cm).await.unwrap();
        }
    }
}

/// A CompositeController for the parents labelled `case=<case>`, whose sync hook is the
/// module in ConfigMap `<namespace>/<case>`.
fn wasm_spec(parent: &CrdBuilder, namespace: &str, case: &str, extra: Value) -> Value {
    let mut spec = parent.composite_spec("http://unused.invalid/");
    spec["parentResource"]["labelSelector"] = json!({"matchLabels": {"case": case}});
    spec["generateSelector"] = json!(true);
    let mut wasm =
        json!({"configMapRef": {"namespace": namespace, "name": case}, "key": "hook.wasm"});
    if let (Some(wasm), Some(extra)) = (wasm.as_object_mut(), extra.as_object()) {
        wasm.extend(extra.clone());
    }
    spec["hooks"] = json!({"sync": {"wasm": wasm}});
    spec
}

async fn create_parent(
    cluster: &TestCluster,
    parent: &CrdBuilder,
    ns: &str,
    name: &str,
    case: &str,
) {
    let api = parent.api(cluster.client(), Some(ns));
    create_object(
        &api,
        json!({"apiVersion": parent.api_version(), "kind": parent.kind(),
               "metadata": {"name": name, "namespace": ns, "labels": {"case": case}},
               "spec": {"who": name}}),
    )
    .await;
}

async fn greeting(cluster: &TestCluster, ns: &str, name: &str) -> Option<String> {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client(), ns);
    let cm = api.get_opt(name).await.ok()??;
    cm.data?.get("greeting").cloned()
}

async fn until_greetings(cluster: &TestCluster, ns: &str, names: &[&str], prefix: &str) {
    eventually_within(
        &format!("{names:?} greeted with {prefix:?}"),
        WAIT,
        || async {
            for name in names {
                let want = format!("{prefix}, {name}!");
                if greeting(cluster, ns, name).await.as_deref() != Some(want.as_str()) {
                    return false;
                }
            }
            true
        },
    )
    .await;
}

fn run(cluster: &TestCluster, label: &str) -> ControllerProcess {
    ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        label,
        &[],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasm_hook_syncs_parents_and_new_code_reaches_every_parent() {
    let Some(module) = hello_world_module() else {
        return;
    };
    let (cluster, ns, parent) = TestCluster::start_with_parent("wasm-hello").await;
    cluster.install_metacontroller_crds().await;
    put_module(&cluster, &ns, "hello", module.clone()).await;
    let spec = wasm_spec(&parent, &ns, "hello", json!({"timeout": "5s"}));
    let label = cluster
        .create_labelled_controller::<CompositeController>("wasm-hello", spec)
        .await;
    let _controller = run(&cluster, &label);
    let names = ["alpha", "beta", "gamma"];
    for name in names {
        create_parent(&cluster, &parent, &ns, name, "hello").await;
    }
    until_greetings(&cluster, &ns, &names, "Hello").await;
    let api = parent.api(cluster.client(), Some(&ns));
    eventually_within("status.greetings = 1", WAIT, || async {
        let p = api.get("alpha").await.unwrap();
        p.data["status"]["greetings"] == json!(1)
    })
    .await;

    // New code (the same module saying "Howdy"): every parent is synced with it, although
    // no parent changed.
    put_module(
        &cluster,
        &ns,
        "hello",
        patched(&module, b"Hello, ", b"Howdy, "),
    )
    .await;
    until_greetings(&cluster, &ns, &names, "Howdy").await;
}

/// A test cluster and the binary running one CompositeController.
struct OneModule {
    cluster: TestCluster,
    ns: String,
    controller: ControllerProcess,
}

/// A CompositeController whose sync hook is `module` (from ConfigMap `case`, default limits)
/// run by the binary, and one parent `parent_name` of it.
async fn one_module(case: &str, module: Vec<u8>, parent_name: &str) -> OneModule {
    let (cluster, ns, parent) = TestCluster::start_with_parent(&format!("wasm-{case}")).await;
    cluster.install_metacontroller_crds().await;
    put_module(&cluster, &ns, case, module).await;
    let spec = wasm_spec(&parent, &ns, case, json!({}));
    let label = cluster
        .create_labelled_controller::<CompositeController>(&format!("wasm-{case}"), spec)
        .await;
    let controller = run(&cluster, &label);
    create_parent(&cluster, &parent, &ns, parent_name, case).await;
    OneModule {
        cluster,
        ns,
        controller,
    }
}

/// The Events a wasm hook returns land on its parent, as a webhook's do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_hooks_events_land_on_its_parent() {
    // The process stops when `_controller` drops, at the end.
    let OneModule {
        cluster,
        ns,
        controller: _controller,
    } = one_module("eventful", eventful_module(), "loud").await;
    let event = until_event(
        &cluster,
        (&ns, "loud"),
        "FromWasm",
        "said by a wasm hook",
        WAIT,
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
}

/// One hostile module per case: the parent of each fails with a SyncError naming why.
const HOSTILE: &[(&str, &str)] = &[
    ("spin", "no response within 1s"),
    ("greedy", "memory limit of 32Mi"),
    ("garbage", "can't decode response"),
    ("exit", "exited with status 3"),
    ("unknown-import", "env"),
    ("noise", "can't load its code"),
    ("flood", "response body larger than the limit"),
];

fn hostile_module(case: &str) -> Vec<u8> {
    match case {
        "spin" => fixture("spin.wat"),
        "greedy" => wat(GREEDY),
        "garbage" => wat(GARBAGE),
        "exit" => fixture("exit_stderr.wat"),
        "unknown-import" => fixture("import_env.wat"),
        "flood" => fixture("flood.wat"),
        // A megabyte of garbage where a module should be.
        _ => (0..1024 * 1024u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_modules_fail_only_their_own_parents() {
    let Some(hello) = hello_world_module() else {
        return;
    };
    let (cluster, ns, parent) = TestCluster::start_with_parent("wasm-hostile").await;
    cluster.install_metacontroller_crds().await;
    let label = metacontroller_testkit::unique_name("team");
    put_module(&cluster, &ns, "hello", hello).await;
    let limits = json!({"timeout": "1s", "memoryLimit": "32Mi"});
    let hello_spec = wasm_spec(&parent, &ns, "hello", json!({"timeout": "10s"}));
    let _: CompositeController = cluster
        .create_controller(
            &metacontroller_testkit::unique_name("hello"),
            &label,
            hello_spec,
        )
        .await;
    for (case, _) in HOSTILE {
        put_module(&cluster, &ns, case, hostile_module(case)).await;
        let spec = wasm_spec(&parent, &ns, case, limits.clone());
        let _: CompositeController = cluster
            .create_controller(&metacontroller_testkit::unique_name(case), &label, spec)
            .await;
    }
    let _controller = run(&cluster, &label);
    for (case, _) in HOSTILE {
        create_parent(&cluster, &parent, &ns, case, case).await;
    }
    // While the hostile parents fail and are retried, parents of a good module converge.
    let good = ["one", "two", "three", "four"];
    for name in good {
        create_parent(&cluster, &parent, &ns, name, "hello").await;
    }
    until_greetings(&cluster, &ns, &good, "Hello").await;
    for (case, needle) in HOSTILE {
        until_sync_error(&cluster, &ns, case, needle, WAIT).await;
    }
    // And it still serves: a new good parent converges after all of that.
    create_parent(&cluster, &parent, &ns, "five", "hello").await;
    until_greetings(&cluster, &ns, &["five"], "Hello").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_hungry_module_is_refused_at_its_limit_and_rss_stays_below_limit_plus_100_mib() {
    // The default memoryLimit (64Mi), and one parent: the limit is per call (concurrent
    // calls each have their own).
    let OneModule {
        cluster,
        ns,
        controller,
    } = one_module("greedy", wat(GREEDY), "a").await;
    until_sync_error(&cluster, &ns, "a", "memory limit of 64Mi", WAIT).await;
    // Retried with backoff: a few more refusals, none of them raising the peak.
    eventually_within("three refusals", WAIT, || async {
        let refusals: i32 = events_about(&cluster, &ns, "a")
            .await
            .iter()
            .filter(|e| e.reason.as_deref() == Some("SyncError"))
            .map(|e| e.count.unwrap_or(1))
            .sum();
        refusals >= 3
    })
    .await;
    let peak = rss_kib(controller.pid(), true).expect("the controller's peak RSS");
    eprintln!("peak RSS of the controller: {peak} KiB");
    assert!(
        peak < (64 + 100) * 1024,
        "peak RSS {peak} KiB is not below the memory limit (64 MiB) + 100 MiB"
    );
}
