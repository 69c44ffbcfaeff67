//! The binary's metrics and probe endpoints, scraped from outside as Prometheus and the
//! kubelet do: upstream's metric families and labels while a controller syncs, `/readyz`
//! failing until the caches synced, `/healthz`, and `0` turning a server off.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, eventually_within, parent_name, unique_name, ControllerProcess, CrdBuilder,
    Fault, HookReply, HookServer, TestCluster,
};
use serde_json::json;

/// Every family a scrape must show once a controller with sync, customize and finalize
/// hooks has synced and finalized a parent, with its label names (`le` of histogram
/// buckets left out). Names and labels are upstream Metacontroller v4.17.2's (its hook
/// families, client-go's work queue, controller-runtime's reconcile metrics), then ours.
/// `rest_client_requests_total{code,method,host}` joins this list with the API client
/// stack that registers it.
fn golden_families() -> Vec<(String, &'static [&'static str])> {
    let mut families = vec![(
        "rest_client_requests_total".to_string(),
        &["code", "method", "host"][..],
    )];
    for hook in ["sync", "customize", "finalize"] {
        for (suffix, labels) in HOOK_FAMILIES {
            families.push((format!("metacontroller_{hook}_{suffix}"), *labels));
        }
    }
    families.extend(
        OTHER_FAMILIES
            .iter()
            .map(|(family, labels)| (family.to_string(), *labels)),
    );
    families
}

/// The families upstream has per hook (`metacontroller_<hook>_<suffix>`).
const HOOK_FAMILIES: &[(&str, &[&str])] = &[
    (
        "requests_total",
        &[
            "code",
            "method",
            "controller_name",
            "controller_type",
            "url",
        ],
    ),
    (
        "request_duration_histogram_seconds",
        &["method", "controller_name", "controller_type", "url"],
    ),
    (
        "in_flight_requests",
        &["controller_name", "controller_type", "url"],
    ),
];

/// The work queue, reconcile, child write, informer and process families.
const OTHER_FAMILIES: &[(&str, &[&str])] = &[
    ("workqueue_adds_total", &["name", "controller"]),
    ("workqueue_depth", &["name", "controller", "priority"]),
    ("workqueue_queue_duration_seconds", &["name", "controller"]),
    ("workqueue_work_duration_seconds", &["name", "controller"]),
    ("workqueue_retries_total", &["name", "controller"]),
    ("workqueue_unfinished_work_seconds", &["name", "controller"]),
    (
        "workqueue_longest_running_processor_seconds",
        &["name", "controller"],
    ),
    (
        "controller_runtime_reconcile_total",
        &["controller", "result"],
    ),
    ("controller_runtime_reconcile_errors_total", &["controller"]),
    ("controller_runtime_reconcile_panics_total", &["controller"]),
    ("controller_runtime_reconcile_time_seconds", &["controller"]),
    (
        "controller_runtime_max_concurrent_reconciles",
        &["controller"],
    ),
    ("controller_runtime_active_workers", &["controller"]),
    ("metacontroller_failing_parents", &["controller"]),
    (
        "metacontroller_longest_failing_parent_seconds",
        &["controller"],
    ),
    ("metacontroller_events_dropped_total", &["reason"]),
    (
        "metacontroller_hook_calls_total",
        &[
            "controller_name",
            "controller_type",
            "hook",
            "runtime",
            "outcome",
        ],
    ),
    (
        "metacontroller_child_writes_total",
        &["controller_name", "controller_type", "action"],
    ),
    (
        "metacontroller_child_apply_skipped_total",
        &["controller_name", "controller_type"],
    ),
    (
        "metacontroller_informer_cached_objects",
        &["api_version", "resource", "label_selector"],
    ),
    (
        "metacontroller_informer_synced",
        &["api_version", "resource", "label_selector"],
    ),
    (
        "metacontroller_informer_listed_objects_total",
        &["api_version", "resource", "label_selector"],
    ),
    ("process_cpu_seconds_total", &[]),
    ("process_resident_memory_bytes", &[]),
    ("process_open_fds", &[]),
    ("process_start_time_seconds", &[]),
];

/// One sample: its family, labels and value.
#[derive(Debug, Clone)]
struct Sample {
    family: String,
    labels: BTreeMap<String, String>,
    value: f64,
    /// The sample name (`<family>_bucket`, `_sum`, `_count` for histograms).
    name: String,
}

/// Parses the Prometheus text format (as much as the tests need: no escaped quotes in
/// label values).
fn parse_exposition(text: &str) -> Vec<Sample> {
    let mut families: Vec<String> = Vec::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.split_whitespace().next() {
                families.push(name.to_owned());
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (head, value) = line.rsplit_once(' ').expect("sample line has a value");
        let (name, labels) = match head.split_once('{') {
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels end with }");
                let mut labels = BTreeMap::new();
                for pair in body.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").expect("label is k=\"v\"");
                    labels.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
                }
                (name.to_owned(), labels)
            }
            None => (head.to_owned(), BTreeMap::new()),
        };
        let family = families
            .iter()
            .rev()
            .find(|f| {
                name == **f
                    || ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|s| name == format!("{f}{s}"))
            })
            .cloned()
            .unwrap_or_else(|| name.clone());
        samples.push(Sample {
            family,
            labels,
            value: value.parse().expect("sample value is a number"),
            name,
        });
    }
    samples
}

/// The address the binary logged for `what` (`serving <what> address=...`).
async fn logged_address(process: &ControllerProcess, what: &str) -> String {
    let marker = format!("serving {what}");
    let mut found = String::new();
    eventually_within(&marker, Duration::from_secs(30), || {
        let logs = process.logs();
        let address = logs
            .lines()
            .find(|l| l.contains(&marker))
            .and_then(|l| l.split("address=").nth(1))
            .and_then(|a| a.split_whitespace().next())
            .map(str::to_owned);
        if let Some(a) = address {
            found = a;
        }
        let done = !found.is_empty();
        async move { done }
    })
    .await;
    found
}

async fn http_get(url: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

async fn scrape(address: &str) -> Vec<Sample> {
    let (status, body) = http_get(&format!("http://{address}/metrics")).await;
    assert_eq!(status, 200, "{body}");
    parse_exposition(&body)
}

/// Sum of the samples named `name` whose labels include all of `want`.
fn sum(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            want.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// The controller's flags for one test: endpoints on free local ports.
fn args(cluster: &TestCluster, label: &str, metrics: &str) -> Vec<String> {
    [
        "run",
        "--kubeconfig",
        &cluster.kubeconfig_path().display().to_string(),
        "--discovery-interval",
        "500ms",
        "--target-label-selector",
        &format!("team={label}"),
        "--metrics-address",
        metrics,
        "--health-probe-bind-address",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

async fn create_controller(
    cluster: &TestCluster,
    label: &str,
    name: &str,
    spec: serde_json::Value,
) {
    let _: CompositeController = cluster.create_controller(name, label, spec).await;
}

/// A controller with sync, customize and finalize hooks, run by the binary with metrics on,
/// and its parent kind: what the scrape test watches.
struct Scraped {
    cluster: TestCluster,
    ns: String,
    hook: HookServer,
    parent: CrdBuilder,
    /// The controller's name.
    name: String,
    _process: ControllerProcess,
    /// The address of the binary's metrics server.
    metrics: String,
}

impl Scraped {
    /// The cluster, the hook (a ConfigMap child carrying `spec.gen`), the controller and the
    /// binary, once it serves metrics.
    async fn start() -> Self {
        let cluster = TestCluster::start().await;
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace("metrics").await;
        let hook = HookServer::start(|path, req| match path {
            "/customize" => HookReply::json(json!({"relatedResources": []})),
            "/finalize" => HookReply::json(json!({"children": [], "finalized": true})),
            _ => HookReply::json(json!({
                "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": format!("{}-cm", parent_name(req))},
                              "data": {"gen": req["parent"]["spec"]["gen"].to_string()}}],
                "status": {"ok": true},
            })),
        })
        .await;
        let parent = cluster.install_parent_crd("metrics").await;
        let label = unique_name("team");
        let name = unique_name("metrics");
        create_controller(
            &cluster,
            &label,
            &name,
            json!({
                "generateSelector": true,
                "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                    "updateStrategy": {"method": "InPlace"}}],
                "hooks": {
                    "sync": {"webhook": {"url": hook.url("/sync")}},
                    "customize": {"webhook": {"url": hook.url("/customize")}},
                    "finalize": {"webhook": {"url": hook.url("/finalize")}},
                },
            }),
        )
        .await;
        let process = ControllerProcess::start(
            env!("CARGO_BIN_EXE_metacontroller"),
            args(&cluster, &label, "127.0.0.1:0"),
        );
        let metrics = logged_address(&process, "metrics").await;
        Scraped {
            cluster,
            ns,
            hook,
            parent,
            name,
            _process: process,
            metrics,
        }
    }

    /// The parents in the test's namespace.
    fn parents(&self) -> Api<DynamicObject> {
        self.parent.api(self.cluster.client(), Some(&self.ns))
    }

    /// Waits (60 s) until ConfigMap `p-cm` exists and `check` holds for it.
    async fn wait_child(&self, what: &str, check: impl Fn(&ConfigMap) -> bool) {
        let cms: Api<ConfigMap> = Api::namespaced(self.cluster.client(), &self.ns);
        eventually_within(what, Duration::from_secs(60), || async {
            cms.get_opt("p-cm")
                .await
                .unwrap()
                .is_some_and(|cm| check(&cm))
        })
        .await;
    }

    /// Waits (30 s) until a scrape passes `check`.
    async fn wait_scrape(&self, what: &str, check: impl Fn(&[Sample]) -> bool) {
        eventually_within(what, Duration::from_secs(30), || async {
            check(&scrape(&self.metrics).await)
        })
        .await;
    }

    /// This controller's `controller_name` and `controller_type` labels.
    fn ours(&self) -> [(&str, &str); 2] {
        [
            ("controller_name", self.name.as_str()),
            ("controller_type", "CompositeController"),
        ]
    }

    /// Successful sync hook requests counted.
    fn sync_ok(&self, samples: &[Sample]) -> f64 {
        let [name, kind] = self.ours();
        let url = self.hook.url("/sync");
        sum(
            samples,
            "metacontroller_sync_requests_total",
            &[
                name,
                kind,
                ("code", "200"),
                ("method", "post"),
                ("url", &url),
            ],
        )
    }

    /// Child writes with `action` counted.
    fn child_writes(&self, samples: &[Sample], action: &str) -> f64 {
        let [name, kind] = self.ours();
        sum(
            samples,
            "metacontroller_child_writes_total",
            &[name, kind, ("action", action)],
        )
    }

    /// The first sync shows in the hook, work queue, reconcile, child write and informer
    /// families.
    fn first_sync_counted(&self, samples: &[Sample]) -> bool {
        let queue = format!("CompositeController-{}", self.name);
        self.sync_ok(samples) >= 1.0
            && sum(
                samples,
                "workqueue_adds_total",
                &[("name", &queue), ("controller", &queue)],
            ) >= 1.0
            && sum(
                samples,
                "controller_runtime_reconcile_total",
                &[("controller", &queue), ("result", "success")],
            ) >= 1.0
            && self.child_writes(samples, "create") >= 1.0
            && sum(
                samples,
                "metacontroller_informer_cached_objects",
                &[("api_version", "v1"), ("resource", "configmaps")],
            ) >= 1.0
    }

    /// A successful call of hook `hook_name` is counted.
    fn hook_counted(&self, samples: &[Sample], hook_name: &str) -> bool {
        let [name, kind] = self.ours();
        let url = self.hook.url(&format!("/{hook_name}"));
        sum(
            samples,
            &format!("metacontroller_{hook_name}_requests_total"),
            &[name, kind, ("code", "200"), ("url", &url)],
        ) >= 1.0
    }
}

/// Every golden family is in `samples`, with exactly its label names.
fn assert_golden_families(samples: &[Sample]) {
    let mut labels_of: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for s in samples {
        let entry = labels_of.entry(s.family.as_str()).or_default();
        entry.extend(s.labels.keys().map(String::as_str).filter(|k| *k != "le"));
    }
    let mut problems = Vec::new();
    for (family, labels) in golden_families() {
        match labels_of.get(family.as_str()) {
            None => problems.push(format!("{family}: missing")),
            Some(found) => {
                let want: BTreeSet<&str> = labels.iter().copied().collect();
                if *found != want {
                    problems.push(format!("{family}: labels {found:?}, want {want:?}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrape_shows_upstream_families_and_hook_counters_move_with_syncs() {
    let scraped = Scraped::start().await;
    let parents = scraped.parents();
    let parent = json!({
        "apiVersion": scraped.parent.api_version(), "kind": "Parent",
        "metadata": {"name": "p"}, "spec": {"gen": 1}
    });
    create_object(&parents, parent).await;
    scraped.wait_child("child created", |_| true).await;

    // Counters move when the controller's calls return, which may trail what the API
    // server shows by a moment: poll the scrape.
    scraped
        .wait_scrape("metrics of the first sync", |s| {
            scraped.first_sync_counted(s)
        })
        .await;
    // The check held once; it holds from then on (counters only grow).
    let first = scrape(&scraped.metrics).await;
    assert!(scraped.first_sync_counted(&first));
    let before = scraped.sync_ok(&first);

    // A spec change syncs again: the counter moves.
    parents
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gen": 2}})),
        )
        .await
        .unwrap();
    scraped
        .wait_child("child updated", |cm| {
            cm.data
                .as_ref()
                .is_some_and(|d| d.get("gen").map(String::as_str) == Some("2"))
        })
        .await;
    scraped
        .wait_scrape("metrics of the second sync", |second| {
            scraped.sync_ok(second) > before && scraped.child_writes(second, "update") >= 1.0
        })
        .await;

    // Deleting the parent runs the finalize hook.
    parents.delete("p", &DeleteParams::default()).await.unwrap();
    eventually_within(
        "parent finalized and gone",
        Duration::from_secs(60),
        || async { parents.get_opt("p").await.unwrap().is_none() },
    )
    .await;
    scraped
        .wait_scrape("finalize counted", |s| scraped.hook_counted(s, "finalize"))
        .await;
    let last = scrape(&scraped.metrics).await;
    assert_golden_families(&last);
    assert!(
        scraped.hook_counted(&last, "customize"),
        "customize counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_until_caches_sync_and_healthz_is_ok() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let parent = cluster.install_parent_crd("ready").await;
    let hook = HookServer::start(|_, _| HookReply::json(json!({"children": []}))).await;
    let label = unique_name("team");
    create_controller(
        &cluster,
        &label,
        &unique_name("ready"),
        json!({
            "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}},
        }),
    )
    .await;
    // Hold the child informer's list (embedded API server only).
    let control = cluster.control();
    if let Some(control) = &control {
        control.inject(Fault::status(
            Some("list"),
            Some("configmaps"),
            1_000_000,
            500,
        ));
    }
    let process = ControllerProcess::start(
        env!("CARGO_BIN_EXE_metacontroller"),
        args(&cluster, &label, "0"),
    );
    let probes = logged_address(&process, "health probes").await;
    let healthz = http_get(&format!("http://{probes}/healthz")).await;
    assert_eq!(healthz, (200, "ok".to_owned()));

    if let Some(control) = &control {
        // The controller started and its configmaps informer tried to list (and failed).
        eventually_within(
            "configmaps list attempted",
            Duration::from_secs(30),
            || async { control.requests("list", "configmaps") >= 1 },
        )
        .await;
        let (status, body) = http_get(&format!("http://{probes}/readyz")).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(
            body,
            "[+]readyz ok\n[-]informer-sync failed: reason withheld\nhealthz check failed\n"
        );
        let (status, body) = http_get(&format!("http://{probes}/readyz/informer-sync")).await;
        assert_eq!(status, 503);
        assert!(
            body.contains("v1/configmaps"),
            "names the waiting informer: {body}"
        );
        control.clear_faults();
    }
    eventually_within(
        "ready once the caches synced",
        Duration::from_secs(60),
        || async { http_get(&format!("http://{probes}/readyz")).await == (200, "ok".to_owned()) },
    )
    .await;
    let (status, body) = http_get(&format!("http://{probes}/readyz?verbose")).await;
    assert_eq!(
        (status, body.as_str()),
        (
            200,
            "[+]readyz ok\n[+]informer-sync ok\nhealthz check passed\n"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_address_zero_serves_no_metrics() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let label = unique_name("team");
    let process = ControllerProcess::start(
        env!("CARGO_BIN_EXE_metacontroller"),
        args(&cluster, &label, "0"),
    );
    let probes = logged_address(&process, "health probes").await;
    // Positive signal: the process is fully up.
    eventually_within("ready", Duration::from_secs(60), || async {
        http_get(&format!("http://{probes}/readyz")).await.0 == 200
    })
    .await;
    let logs = process.logs();
    assert!(logs.contains("metrics disabled"), "{logs}");
    assert!(!logs.contains("serving metrics"), "{logs}");
    // Nor does the probe server answer for metrics.
    assert_eq!(http_get(&format!("http://{probes}/metrics")).await.0, 404);
}

/// docs/src/observability.md documents each of our families with the labels /metrics shows
/// (the list the scrape test above checks), and the in-process hooks' outcomes.
#[test]
fn the_metrics_reference_lists_the_labels_metrics_shows() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/src/observability.md"
    );
    let doc = std::fs::read_to_string(path).expect("read observability.md");
    let ours = OTHER_FAMILIES
        .iter()
        .filter(|(family, _)| family.starts_with("metacontroller_"));
    for (family, labels) in ours {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{family}` |")))
            .unwrap_or_else(|| panic!("{family} is not in observability.md"));
        let documented: Vec<&str> = row
            .split('|')
            .nth(2)
            .unwrap_or_default()
            .split(',')
            .map(|label| label.trim().trim_matches('`'))
            .filter(|label| !label.is_empty())
            .collect();
        assert_eq!(documented, *labels, "{row}");
        if *family == "metacontroller_hook_calls_total" {
            for outcome in [
                "`code_error`",
                "`hook_error`",
                "`webhook`",
                "`jsonnet`",
                "`wasm`",
            ] {
                assert!(row.contains(outcome), "{outcome} missing: {row}");
            }
        }
    }
}
