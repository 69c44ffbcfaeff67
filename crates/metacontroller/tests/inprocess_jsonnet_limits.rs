//! Jsonnet hooks under their limits, with the real binary: a looping hook is stopped at its
//! timeout (its worker process killed and replaced), a hook building a huge string fails
//! naming its memory limit, recursion of depth 400 evaluates (as jsonnetd), runtime errors
//! name `<key>:<line>:<column>`, `std.trace` goes to the controller's log, and SIGTERM ends
//! the process while a hook loops. Runs on the embedded server and, with
//! METACONTROLLER_E2E_KUBECONFIG, on a real one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, eventually_within, unique_name, until_sync_error, ControllerProcess, CrdBuilder,
    TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);

/// Constant memory, about a billion steps: never ends within any timeout here.
const LOOP: &str =
    "function(request) { status: {n: std.foldl(function(a, b) a + b, std.range(1, 1e9), 0)} }";
/// Doubles a string 32 times (4 GiB) unless stopped.
const HOG: &str = "local grow(s, n) = if n == 0 then s else grow(s + s, n - 1);\nfunction(request) { status: {n: std.length(grow('x', 32))} }";
/// Recursion 400 calls deep, a child named after the parent, and a `std.trace`.
const GOOD: &str = "local depth(n) = if n == 0 then 0 else 1 + depth(n - 1);\nfunction(request) std.trace('tracing ' + request.parent.metadata.name, {\n  children: [{apiVersion: 'v1', kind: 'ConfigMap', metadata: {name: request.parent.metadata.name}, data: {depth: std.toString(depth(400))}}],\n})";
/// A field of null, on line 2.
const NULL_FIELD: &str =
    "function(request) {\n  status: {r: request.parent.spec.missing.replicas},\n}";

async fn create_code(api: &Api<ConfigMap>) {
    let files = [
        ("loop.jsonnet", LOOP),
        ("hog.jsonnet", HOG),
        ("good.jsonnet", GOOD),
        ("null.jsonnet", NULL_FIELD),
    ];
    let data: BTreeMap<String, String> = files
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let code = ConfigMap {
        metadata: kube::core::ObjectMeta {
            name: Some("code".into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    api.create(&Default::default(), &code).await.unwrap();
}

/// A CompositeController syncing parents labelled `case=<case>` with `jsonnet` (extra
/// fields merged into the hook).
async fn create_controller(
    cluster: &TestCluster,
    parent: &CrdBuilder,
    (ns, label): (&str, &str),
    case: &str,
    jsonnet: Value,
) {
    let mut spec = parent.composite_spec("http://unused.invalid/");
    spec["generateSelector"] = json!(true);
    spec["parentResource"]["labelSelector"] = json!({"matchLabels": {"case": case}});
    let mut hook = json!({"configMapRef": {"namespace": ns, "name": "code"}});
    for (k, v) in jsonnet.as_object().into_iter().flatten() {
        hook[k] = v.clone();
    }
    spec["hooks"] = json!({"sync": {"jsonnet": hook}});
    let _: CompositeController = cluster
        .create_controller(&unique_name(case), label, spec)
        .await;
}

async fn create_parent(
    cluster: &TestCluster,
    parent: &CrdBuilder,
    ns: &str,
    name: &str,
    case: &str,
) {
    let parents = parent.api(cluster.client(), Some(ns));
    let object = json!({"apiVersion": parent.api_version(), "kind": parent.kind(),
        "metadata": {"name": name, "namespace": ns, "labels": {"case": case}}});
    create_object(&parents, object).await;
}

/// The controller's Jsonnet worker processes (`jsonnet-worker` children of `pid`) and
/// whether each is running (state `R`) rather than waiting for work.
fn workers_of(pid: u32) -> BTreeMap<u32, bool> {
    let mut workers = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return workers;
    };
    for entry in entries.flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // Fields after the command name (which may hold spaces): state, ppid, ...
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
        let is_worker = cmdline
            .split(|b| *b == 0)
            .any(|arg| arg == b"jsonnet-worker");
        if fields.get(1) == Some(&pid.to_string().as_str()) && is_worker {
            workers.insert(child, fields.first() == Some(&"R"));
        }
    }
    workers
}

/// The four controllers of the limits test (loop, hog, good, null), all on `code`.
async fn create_four_controllers(cluster: &TestCluster, parent: &CrdBuilder, at: (&str, &str)) {
    let hooks = [
        ("loop", json!({"key": "loop.jsonnet", "timeout": "2s"})),
        (
            "hog",
            json!({"key": "hog.jsonnet", "memoryLimit": "128Mi", "timeout": "60s"}),
        ),
        ("good", json!({"key": "good.jsonnet"})),
        ("null", json!({"key": "null.jsonnet"})),
    ];
    for (case, hook) in hooks {
        create_controller(cluster, parent, at, case, hook).await;
    }
}

/// Looping parents get timeout SyncErrors and their worker processes are killed (each
/// running worker seen is gone later), never more workers than parents; a memory
/// hog fails naming its limit; meanwhile another controller's hook syncs its parent with a
/// recursion of depth 400 and its `std.trace` reaches the log; a field of null names
/// `null.jsonnet:2:`. Once the looping parents are gone, no worker keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looping_and_hogging_hooks_are_stopped_and_others_go_on() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("jsonnet-limits").await;
    cluster.install_metacontroller_crds().await;
    let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    create_code(&config_maps).await;
    let label = unique_name("team");
    create_four_controllers(&cluster, &parent, (ns.as_str(), label.as_str())).await;
    let controller = ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &label,
        &[],
    );
    let looping = ["loop-1", "loop-2", "loop-3"];
    for name in looping {
        create_parent(&cluster, &parent, &ns, name, "loop").await;
    }
    create_parent(&cluster, &parent, &ns, "hog", "hog").await;
    create_parent(&cluster, &parent, &ns, "good", "good").await;
    create_parent(&cluster, &parent, &ns, "null", "null").await;

    // Running workers seen now are killed at their timeout (2 s), not left to run.
    let mut running = BTreeSet::new();
    eventually_within("a running Jsonnet worker", WAIT, || {
        running = workers_of(controller.pid())
            .into_iter()
            .filter(|(_, r)| *r)
            .map(|(p, _)| p)
            .collect();
        std::future::ready(!running.is_empty())
    })
    .await;
    for name in looping {
        until_sync_error(&cluster, &ns, name, "no response within 2s", WAIT).await;
    }
    eventually_within("the running workers killed", WAIT, || {
        let now = workers_of(controller.pid());
        // Killed workers are replaced, not piled up: at most one per parent.
        assert!(now.len() <= 6, "more workers than parents: {now:?}");
        std::future::ready(running.iter().all(|pid| !now.contains_key(pid)))
    })
    .await;
    until_sync_error(&cluster, &ns, "hog", "exceeded memoryLimit 128Mi", WAIT).await;
    // The hog's memory was its worker's, not the controller's (a figure, not an assertion).
    let peak = metacontroller_testkit::metrics::rss_kib(controller.pid(), true);
    eprintln!("figure: controller peak RSS after the 4 GiB hog failed: {peak:?} KiB");
    until_sync_error(&cluster, &ns, "null", "null.jsonnet:2:", WAIT).await;
    eventually_within(
        "the good parent's child (recursion 400 deep)",
        WAIT,
        || async {
            let child = config_maps.get_opt("good").await.ok().flatten();
            child
                .and_then(|c| c.data)
                .and_then(|d| d.get("depth").cloned())
                == Some("400".into())
        },
    )
    .await;
    eventually_within("std.trace in the log", WAIT, || {
        let logs = controller.logs();
        std::future::ready(logs.lines().any(|l| {
            l.contains("std.trace") && l.contains("tracing good") && l.contains("good.jsonnet")
        }))
    })
    .await;

    // With the looping and hogging parents gone, every worker ends up waiting for work.
    let parents = parent.api(cluster.client(), Some(&ns));
    for name in looping.into_iter().chain(["hog"]) {
        parents.delete(name, &Default::default()).await.unwrap();
    }
    eventually_within("no Jsonnet worker running", WAIT, || {
        std::future::ready(
            workers_of(controller.pid())
                .values()
                .all(|running| !running),
        )
    })
    .await;
    assert!(controller.logs().contains("std.trace"));
}

/// SIGTERM while a hook loops (timeout 60 s): the process exits within the grace period,
/// and its worker goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_process_while_a_hook_loops() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("jsonnet-sigterm").await;
    cluster.install_metacontroller_crds().await;
    let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    create_code(&config_maps).await;
    let label = unique_name("team");
    let at = (ns.as_str(), label.as_str());
    create_controller(
        &cluster,
        &parent,
        at,
        "loop",
        json!({"key": "loop.jsonnet", "timeout": "60s"}),
    )
    .await;
    let mut controller = ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &label,
        &[],
    );
    create_parent(&cluster, &parent, &ns, "loop", "loop").await;
    // The only hook loops: any worker there is is evaluating it (or about to).
    let mut running = Vec::new();
    eventually_within("a Jsonnet worker", WAIT, || {
        running = workers_of(controller.pid()).into_keys().collect();
        std::future::ready(!running.is_empty())
    })
    .await;
    controller.terminate();
    // The kubelet's default grace period.
    let status = controller.wait_exit(Duration::from_secs(30));
    assert!(
        status.is_some(),
        "still running 30 s after SIGTERM:\n{}",
        controller.logs()
    );
    eventually_within(
        "the worker gone with its controller",
        Duration::from_secs(10),
        || {
            std::future::ready(running.iter().all(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // Gone, or a zombie waiting for a reaper.
                stat.is_empty()
                    || stat
                        .rsplit_once(')')
                        .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            }))
        },
    )
    .await;
}
