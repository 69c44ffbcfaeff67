//! In-process hooks of many controllers in one process, on the embedded server and (with
//! METACONTROLLER_E2E_KUBECONFIG) a real one:
//! * fairness: a controller whose WebAssembly or Jsonnet hook loops until its timeout on 6
//!   parents does not delay another controller's Jsonnet and WebAssembly parents; its own
//!   parents get Warning Events;
//! * the memory budget: 8 hooks each filling 60 MiB at once under a 128 MiB budget wait for
//!   room and fail naming the budget, the process stays up and its peak RSS stays under its
//!   RSS before the hogs + the budget + slack;
//! * downloads: a URL whose module does not match its pinned sha256, used by 100 parents,
//!   is downloaded once per backoff period (counted by the test's own HTTP server);
//! * code changes: changing a key of the hook's ConfigMap that its Jsonnet neither is nor
//!   imports calls no hook (recordings counted), changing a file it imports resyncs every
//!   parent; the ConfigMap is no longer watched once its last controller is deleted.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, PostParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::metrics::{rss_kib, tree_cpu_seconds};
use metacontroller_testkit::wasm::wat;
use metacontroller_testkit::{
    create_object, eventually_within, unique_name, ControllerProcess, CrdBuilder, TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);

/// Never ends: only the timeout stops it.
const SPIN: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "_start")
    (loop $forever
      (i32.store (i32.const 0) (i32.add (i32.load (i32.const 0)) (i32.const 1)))
      (br $forever))))"#;

/// Grows its memory by 960 pages (60 MiB), filling each new page so it is resident, then
/// loops until its timeout: it holds 60 MiB for as long as it may run.
const HOG: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "_start")
    (local $page i32)
    (local $n i32)
    (loop $more
      (local.set $page (memory.grow (i32.const 1)))
      (if (i32.eq (local.get $page) (i32.const -1)) (then unreachable))
      (memory.fill (i32.mul (local.get $page) (i32.const 65536)) (i32.const 7) (i32.const 65536))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br_if $more (i32.lt_u (local.get $n) (i32.const 960))))
    (loop $forever (br $forever))))"#;

/// A module answering every sync with `{"status": {"ok": true}}`.
fn ok_module() -> Vec<u8> {
    let answer = r#"{\"status\":{\"ok\":true}}"#;
    let len = answer.len() - answer.matches('\\').count();
    wat(&format!(
        r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "{answer}")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const {len}))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#
    ))
}

/// Creates or replaces ConfigMap `namespace/name` with `binary` and `text` keys.
async fn put_code(
    cluster: &TestCluster,
    namespace: &str,
    name: &str,
    binary: &[(&str, Vec<u8>)],
    text: &[(&str, &str)],
) {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client(), namespace);
    let mut cm = ConfigMap {
        metadata: kube::core::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        binary_data: Some(
            binary
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.clone())))
                .collect(),
        ),
        data: Some(
            text.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    };
    match api.get_opt(name).await.unwrap() {
        Some(old) => {
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

/// A CompositeController (labelled `team=<label>`) for the parents labelled `case=<case>`
/// whose sync hook is `hook`.
async fn controller(
    cluster: &TestCluster,
    parent: &CrdBuilder,
    label: &str,
    case: &str,
    hook: Value,
) -> String {
    let mut spec = parent.composite_spec("http://unused.invalid/");
    spec["parentResource"]["labelSelector"] = json!({"matchLabels": {"case": case}});
    spec["generateSelector"] = json!(true);
    spec["hooks"] = json!({ "sync": hook });
    let name = unique_name(case);
    let _: CompositeController = cluster.create_controller(&name, label, spec).await;
    name
}

async fn create_parents(
    cluster: &TestCluster,
    parent: &CrdBuilder,
    ns: &str,
    case: &str,
    n: usize,
) -> Vec<String> {
    let api = parent.api(cluster.client(), Some(ns));
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("{case}-{i}");
        create_object(
            &api,
            json!({"apiVersion": parent.api_version(), "kind": parent.kind(),
                   "metadata": {"name": name, "namespace": ns, "labels": {"case": case}}}),
        )
        .await;
        names.push(name);
    }
    names
}

/// The `SyncError` Events in `ns`: (object name, message).
async fn sync_errors(cluster: &TestCluster, ns: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(cluster.client(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("SyncError"))
        .map(|e| {
            (
                e.involved_object.name.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits until every parent in `names` has `status.ok == true`.
async fn until_ok(cluster: &TestCluster, parent: &CrdBuilder, ns: &str, names: &[String]) {
    let api = parent.api(cluster.client(), Some(ns));
    eventually_within(&format!("{names:?} synced"), WAIT, || async {
        for name in names {
            match api.get(name).await {
                Ok(p) if p.data["status"]["ok"] == json!(true) => {}
                _ => return false,
            }
        }
        true
    })
    .await;
}

fn run(cluster: &TestCluster, label: &str, extra: &[&str]) -> ControllerProcess {
    ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        label,
        extra,
    )
}

/// Constant memory, about a billion steps: a Jsonnet loop no timeout here lets end.
const JSONNET_LOOP: &str =
    "function(request) { status: {n: std.foldl(function(a, b) a + b, std.range(1, 1e9), 0)} }";

/// Controller A's WebAssembly hook loops until its 2 s timeout on 6 parents (its share: 2
/// calls at once, so its other syncs wait for it); controller B's Jsonnet and WebAssembly
/// parents, created once A's first failure shows it is saturated, converge all the same, and
/// A's parents get Warning Events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_controller_does_not_delay_another_controllers_hooks() {
    looping_controller_case("hook-fair", |code| {
        let mut spin = code("spin.wasm");
        spin["timeout"] = json!("2s");
        json!({ "wasm": spin })
    })
    .await;
}

/// The same with a looping Jsonnet hook (`std.foldl` over `std.range`, constant memory, the
/// default per-controller share of 4): B's parents converge, A's get Warning Events, and
/// the stopped evaluations leave the CPU (controller and its Jsonnet workers) near idle
/// between A's retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_jsonnet_controller_does_not_delay_another_controllers_hooks() {
    looping_controller_case("jsonnet-fair", |code| {
        let mut looping = code("loop.jsonnet");
        looping["timeout"] = json!("2s");
        json!({ "jsonnet": looping })
    })
    .await;
}

/// Controller A (sync hook `looping_hook`, given a function naming a key of the code
/// ConfigMap) loops on 6 parents; controller B's Jsonnet and WebAssembly parents converge
/// before A's parents exist and again once A is saturated (both times printed), A's parents
/// get Warning Events, and the CPU used by the controller and its workers is printed 20 s
/// after A's first timeouts (A's parents deleted by then, so no new evaluation starts).
async fn looping_controller_case(
    name: &str,
    looping_hook: impl Fn(&dyn Fn(&str) -> Value) -> Value,
) {
    let (cluster, ns, parent) = TestCluster::start_with_parent(name).await;
    let label = unique_name("team");
    put_code(
        &cluster,
        &ns,
        "code",
        &[("spin.wasm", wat(SPIN)), ("ok.wasm", ok_module())],
        &[
            ("ok.jsonnet", "function(request) {status: {ok: true}}"),
            ("loop.jsonnet", JSONNET_LOOP),
        ],
    )
    .await;
    let code = |key: &str| json!({"configMapRef": {"namespace": ns, "name": "code"}, "key": key});
    controller(&cluster, &parent, &label, "looping", looping_hook(&code)).await;
    for runtime in ["jsonnet", "wasm"] {
        let hook = json!({ runtime: code(&format!("ok.{runtime}")) });
        controller(&cluster, &parent, &label, runtime, hook).await;
    }
    let controller = run(
        &cluster,
        &label,
        &["--inprocess-hook-concurrency-per-controller=2"],
    );
    let before = converge_others(&cluster, &parent, &ns, "before").await;
    let looping = create_parents(&cluster, &parent, &ns, "looping", 6).await;
    eventually_within("the looping hook's first timeout", WAIT, || async {
        sync_errors(&cluster, &ns)
            .await
            .iter()
            .any(|(name, _)| looping.contains(name))
    })
    .await;
    let first_timeout = Instant::now();
    let during = converge_others(&cluster, &parent, &ns, "during").await;
    eprintln!("figure: other controllers' 6 parents converged in {before:?} before the loop, {during:?} during it");
    eventually_within("a Warning Event on every looping parent", WAIT, || async {
        let errors = sync_errors(&cluster, &ns).await;
        looping.iter().all(|name| {
            errors.iter().any(|(n, m)| {
                n == name
                    && (m.contains("no response within 2s")
                        || m.contains("waited for its controller's share"))
            })
        })
    })
    .await;
    // Deleting the parents ends their retries; what still runs after that is only what a
    // timeout left running.
    let api = parent.api(cluster.client(), Some(&ns));
    for name in &looping {
        api.delete(name, &Default::default()).await.unwrap();
    }
    print_cpu_after(controller.pid(), first_timeout + Duration::from_secs(20)).await;
}

/// Creates 3 Jsonnet and 3 WebAssembly parents of B (names prefixed `batch`) and waits
/// until they are synced; how long that took.
async fn converge_others(
    cluster: &TestCluster,
    parent: &CrdBuilder,
    ns: &str,
    batch: &str,
) -> Duration {
    let started = Instant::now();
    let api = parent.api(cluster.client(), Some(ns));
    let mut names = Vec::new();
    for (runtime, i) in ["jsonnet", "wasm"]
        .iter()
        .flat_map(|r| (0..3).map(move |i| (*r, i)))
    {
        let name = format!("{batch}-{runtime}-{i}");
        create_object(
            &api,
            json!({"apiVersion": parent.api_version(), "kind": parent.kind(),
                   "metadata": {"name": name, "namespace": ns, "labels": {"case": runtime}}}),
        )
        .await;
        names.push(name);
    }
    until_ok(cluster, parent, ns, &names).await;
    started.elapsed()
}

/// Prints the cores used by `pid` and its children over 5 s from `from` (a figure for the
/// closing note, not an assertion: it depends on the machine).
async fn print_cpu_after(pid: u32, from: Instant) {
    tokio::time::sleep_until(from.into()).await;
    let (Some(start), begun) = (tree_cpu_seconds(pid), Instant::now()) else {
        return;
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    if let Some(end) = tree_cpu_seconds(pid) {
        let cores = (end - start) / begun.elapsed().as_secs_f64();
        eprintln!(
            "figure: 20 s after the first timeouts, controller + workers used {cores:.2} cores"
        );
    }
}

/// 8 hooks filling 60 MiB each (memoryLimit 64Mi), 2 parents of each of 4 controllers, 8
/// calls allowed at once per controller, under a 128 MiB budget: at most 2 run (a
/// controller's share is half the budget, one hog; the budget holds back the other
/// controllers' third and fourth), the others wait and fail naming the budget; the process
/// stays up and its peak RSS stays under its RSS before + the budget + 64 MiB of slack
/// (without the budget, 8 × 60 MiB would be resident at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_hogs_wait_for_the_budget_and_peak_rss_stays_under_it() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("hook-budget").await;
    let label = unique_name("team");
    put_code(&cluster, &ns, "code", &[("hog.wasm", wat(HOG))], &[]).await;
    let hog = json!({"configMapRef": {"namespace": ns, "name": "code"}, "key": "hog.wasm",
                     "timeout": "3s", "memoryLimit": "64Mi"});
    for case in ["hog-a", "hog-b", "hog-c", "hog-d"] {
        controller(&cluster, &parent, &label, case, json!({ "wasm": hog })).await;
    }
    let controller = run(
        &cluster,
        &label,
        &[
            "--inprocess-hook-memory-budget=128Mi",
            "--inprocess-hook-concurrency-per-controller=8",
            "--workers=8",
        ],
    );
    // Its RSS once running, before any hook ran.
    eventually_within("the controller's RSS", WAIT, || async {
        rss_kib(controller.pid(), false).is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let base = rss_kib(controller.pid(), false).expect("the controller's RSS");
    let mut hogs = Vec::new();
    for case in ["hog-a", "hog-b", "hog-c", "hog-d"] {
        hogs.extend(create_parents(&cluster, &parent, &ns, case, 2).await);
    }
    eventually_within("a budget refusal", WAIT, || async {
        sync_errors(&cluster, &ns).await.iter().any(|(name, m)| {
            hogs.contains(name) && m.contains("in-process hook memory budget 128Mi exhausted")
        })
    })
    .await;
    // A few rounds of retries, each as greedy.
    eventually_within("every hog refused or timed out", WAIT, || async {
        let errors = sync_errors(&cluster, &ns).await;
        hogs.iter().all(|h| errors.iter().any(|(n, _)| n == h))
    })
    .await;
    assert!(
        std::path::Path::new(&format!("/proc/{}", controller.pid())).exists(),
        "the controller is still running"
    );
    let peak = rss_kib(controller.pid(), true).expect("the controller's peak RSS");
    eprintln!("controller RSS before the hogs: {base} KiB; peak: {peak} KiB; budget 131072 KiB");
    assert!(
        peak < base + (128 + 64) * 1024,
        "peak RSS {peak} KiB is not under {base} KiB + the budget (128 MiB) + 64 MiB"
    );
}

/// A loopback HTTP server answering every request with `body`; counts the requests.
async fn counting_server(body: &'static [u8]) -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook.wasm", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body).await;
            });
        }
    });
    (url, count)
}

/// 100 parents of a hook whose URL serves a module that does not match its pinned sha256:
/// every parent fails naming the mismatch, and the server sees one download per backoff
/// period (30 s at first), not one per parent or per sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_sha256_download_for_100_parents_is_fetched_once_per_backoff() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("hook-sha").await;
    let label = unique_name("team");
    let (url, requests) = counting_server(b"\0asm\x01\0\0\0").await;
    let hook = json!({"url": url, "sha256": "ab".repeat(32)});
    controller(&cluster, &parent, &label, "pinned", json!({ "wasm": hook })).await;
    let _controller = run(&cluster, &label, &[]);
    let started = Instant::now();
    let parents = create_parents(&cluster, &parent, &ns, "pinned", 100).await;
    eventually_within("a sha256 SyncError on every parent", WAIT, || async {
        let errors = sync_errors(&cluster, &ns).await;
        parents.iter().all(|p| {
            errors
                .iter()
                .any(|(n, m)| n == p && m.contains("not the pinned"))
        })
    })
    .await;
    let elapsed = started.elapsed();
    let downloads = requests.load(Ordering::SeqCst);
    eprintln!("{downloads} download(s) in {elapsed:?} for 100 parents");
    let periods = 1 + (elapsed.as_secs() / 30) as usize;
    assert!(
        downloads >= 1 && downloads <= periods,
        "{downloads} downloads in {elapsed:?}: more than one per 30 s backoff period"
    );
}

/// Hook calls recorded in `dir` so far.
fn recordings(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
                .count()
        })
        .unwrap_or(0)
}

const KEYS_ENTRY: &str = "local lib = import 'lib.libsonnet';\nfunction(request) {status: {ok: true, version: lib.version}}";

/// ConfigMap `code` with the entry, `lib.libsonnet` of `version` and `notes.txt` of `notes`.
async fn put_keys_code(cluster: &TestCluster, ns: &str, version: &str, notes: &str) {
    let lib = format!("{{version: '{version}'}}");
    let files = [
        ("main.jsonnet", KEYS_ENTRY),
        ("lib.libsonnet", lib.as_str()),
        ("notes.txt", notes),
    ];
    put_code(cluster, ns, "code", &[], &files).await;
}

/// Waits until the number of recorded hook calls stays the same over a 2 s poll (the syncs
/// that followed the status writes are done); that number.
async fn settled_recordings(dir: &std::path::Path) -> usize {
    let mut last = usize::MAX;
    eventually_within("hook calls settled", WAIT, || {
        let now = recordings(dir);
        let settled = now == last;
        last = now;
        async move {
            if !settled {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            settled
        }
    })
    .await;
    recordings(dir)
}

/// A Jsonnet hook importing `lib.libsonnet` from a ConfigMap that also holds an unrelated
/// key: changing that key calls no hook; changing the imported file resyncs every parent;
/// deleting the controller releases the ConfigMap's watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_change_to_a_key_the_hook_uses_resyncs_its_parents() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("hook-keys").await;
    let label = unique_name("team");
    put_keys_code(&cluster, &ns, "one", "a").await;
    let hook = json!({"configMapRef": {"namespace": ns, "name": "code"}, "key": "main.jsonnet"});
    let hook = json!({ "jsonnet": hook });
    let keys_controller = controller(&cluster, &parent, &label, "keys", hook).await;
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().to_string_lossy().to_string();
    let mut process = run(&cluster, &label, &["--record-hooks", &record]);
    let names = create_parents(&cluster, &parent, &ns, "keys", 3).await;
    until_ok(&cluster, &parent, &ns, &names).await;
    let before = settled_recordings(dir.path()).await;

    put_keys_code(&cluster, &ns, "one", "b").await;
    process.wait_for_line("the skipped resync", WAIT, |line| {
        line.contains("not resyncing") && line.contains("notes.txt")
    });
    assert!(
        !process.logs().contains("hook code changed; resyncing"),
        "an unrelated key resynced the parents:\n{}",
        process.logs()
    );
    let after = recordings(dir.path());
    assert_eq!(after, before, "no hook call for an unrelated key");

    put_keys_code(&cluster, &ns, "two", "b").await;
    let api = parent.api(cluster.client(), Some(&ns));
    eventually_within("every parent synced with the new import", WAIT, || async {
        for name in &names {
            match api.get(name).await {
                Ok(p) if p.data["status"]["version"] == json!("two") => {}
                _ => return false,
            }
        }
        true
    })
    .await;
    assert!(recordings(dir.path()) >= before + names.len());

    // The controller goes: so does the watch of its ConfigMap.
    let controllers: Api<CompositeController> = Api::all(cluster.client());
    controllers
        .delete(&keys_controller, &Default::default())
        .await
        .unwrap();
    process.wait_for_line("the released watch", WAIT, |line| {
        line.contains("stopped watching it") && line.contains(&ns)
    });
}
