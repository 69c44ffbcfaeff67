//! The binary's metrics and probe endpoints, scraped from outside as Prometheus and the
//! kubelet do: upstream's metric families and labels while a controller syncs, `/readyz`
//! failing until the caches synced, `/healthz`, and `0` turning a server off.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    crd, eventually_within, unique_name, ControllerProcess, CrdBuilder, Fault, HookReply,
    HookServer, TestCluster,
};
use serde_json::json;

/// Every family a scrape must show once a controller with sync, customize and finalize
/// hooks has synced and finalized a parent, with its label names (`le` of histogram
/// buckets left out). Names and labels are upstream Metacontroller v4.17.2's (its hook
/// families, client-go's work queue, controller-runtime's reconcile metrics), then ours.
/// `rest_client_requests_total{code,method,host}` joins this list with the API client
/// stack that registers it.
const GOLDEN_FAMILIES: &[(&str, &[&str])] = &[
    ("rest_client_requests_total", &["code", "method", "host"]),
    (
        "metacontroller_sync_requests_total",
        &[
            "code",
            "method",
            "controller_name",
            "controller_type",
            "url",
        ],
    ),
    (
        "metacontroller_sync_request_duration_histogram_seconds",
        &["method", "controller_name", "controller_type", "url"],
    ),
    (
        "metacontroller_sync_in_flight_requests",
        &["controller_name", "controller_type", "url"],
    ),
    (
        "metacontroller_customize_requests_total",
        &[
            "code",
            "method",
            "controller_name",
            "controller_type",
            "url",
        ],
    ),
    (
        "metacontroller_customize_request_duration_histogram_seconds",
        &["method", "controller_name", "controller_type", "url"],
    ),
    (
        "metacontroller_customize_in_flight_requests",
        &["controller_name", "controller_type", "url"],
    ),
    (
        "metacontroller_finalize_requests_total",
        &[
            "code",
            "method",
            "controller_name",
            "controller_type",
            "url",
        ],
    ),
    (
        "metacontroller_finalize_request_duration_histogram_seconds",
        &["method", "controller_name", "controller_type", "url"],
    ),
    (
        "metacontroller_finalize_in_flight_requests",
        &["controller_name", "controller_type", "url"],
    ),
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
    (
        "metacontroller_hook_calls_total",
        &["controller_name", "controller_type", "hook", "outcome"],
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
        &["api_version", "resource"],
    ),
    (
        "metacontroller_informer_synced",
        &["api_version", "resource"],
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

fn parent_crd(prefix: &str) -> CrdBuilder {
    crd(
        &format!("{}.example.com", unique_name(prefix)),
        "v1",
        "Parent",
        "parents",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrape_shows_upstream_families_and_hook_counters_move_with_syncs() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("metrics").await;
    let hook = HookServer::start(|path, req| match path {
        "/customize" => HookReply::json(json!({"relatedResources": []})),
        "/finalize" => HookReply::json(json!({"children": [], "finalized": true})),
        _ => {
            let name = req["parent"]["metadata"]["name"]
                .as_str()
                .unwrap_or_default();
            HookReply::json(json!({
                "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": format!("{name}-cm")},
                              "data": {"gen": req["parent"]["spec"]["gen"].to_string()}}],
                "status": {"ok": true},
            }))
        }
    })
    .await;
    let parent = parent_crd("metrics");
    cluster.install_crd(&parent.build()).await;
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

    let parents = parent.api(cluster.client(), Some(&ns));
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": parent.api_version(), "kind": "Parent",
        "metadata": {"name": "p"}, "spec": {"gen": 1}
    }))
    .unwrap();
    parents.create(&PostParams::default(), &obj).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    eventually_within("child created", Duration::from_secs(60), || async {
        cms.get_opt("p-cm").await.unwrap().is_some()
    })
    .await;

    let sync_url = hook.url("/sync");
    let ours = [
        ("controller_name", name.as_str()),
        ("controller_type", "CompositeController"),
    ];
    let sync_ok = |samples: &[Sample]| {
        sum(
            samples,
            "metacontroller_sync_requests_total",
            &[
                ours[0],
                ours[1],
                ("code", "200"),
                ("method", "post"),
                ("url", &sync_url),
            ],
        )
    };
    // Counters move when the controller's calls return, which may trail what the API
    // server shows by a moment: poll the scrape.
    let queue = format!("CompositeController-{name}");
    let first_sync_counted = |samples: &[Sample]| {
        sync_ok(samples) >= 1.0
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
            && sum(
                samples,
                "metacontroller_child_writes_total",
                &[ours[0], ours[1], ("action", "create")],
            ) >= 1.0
            && sum(
                samples,
                "metacontroller_informer_cached_objects",
                &[("api_version", "v1"), ("resource", "configmaps")],
            ) >= 1.0
    };
    eventually_within("metrics of the first sync", Duration::from_secs(30), || {
        let metrics = metrics.clone();
        async move { first_sync_counted(&scrape(&metrics).await) }
    })
    .await;
    // The check held once; it holds from then on (counters only grow).
    let first = scrape(&metrics).await;
    assert!(first_sync_counted(&first));
    let before = sync_ok(&first);

    // A spec change syncs again: the counter moves.
    parents
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gen": 2}})),
        )
        .await
        .unwrap();
    eventually_within("child updated", Duration::from_secs(60), || async {
        cms.get_opt("p-cm")
            .await
            .unwrap()
            .and_then(|cm| cm.data)
            .is_some_and(|d| d.get("gen").map(String::as_str) == Some("2"))
    })
    .await;
    eventually_within(
        "metrics of the second sync",
        Duration::from_secs(30),
        || {
            let metrics = metrics.clone();
            async move {
                let second = scrape(&metrics).await;
                sync_ok(&second) > before
                    && sum(
                        &second,
                        "metacontroller_child_writes_total",
                        &[ours[0], ours[1], ("action", "update")],
                    ) >= 1.0
            }
        },
    )
    .await;

    // Deleting the parent runs the finalize hook.
    parents.delete("p", &DeleteParams::default()).await.unwrap();
    eventually_within(
        "parent finalized and gone",
        Duration::from_secs(60),
        || async { parents.get_opt("p").await.unwrap().is_none() },
    )
    .await;

    let hook_counted = |samples: &[Sample], hook_name: &str| {
        sum(
            samples,
            &format!("metacontroller_{hook_name}_requests_total"),
            &[
                ours[0],
                ours[1],
                ("code", "200"),
                ("url", &hook.url(&format!("/{hook_name}"))),
            ],
        ) >= 1.0
    };
    eventually_within("finalize counted", Duration::from_secs(30), || {
        let metrics = metrics.clone();
        async move { hook_counted(&scrape(&metrics).await, "finalize") }
    })
    .await;
    let last = scrape(&metrics).await;
    let mut labels_of: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for s in &last {
        let entry = labels_of.entry(s.family.as_str()).or_default();
        entry.extend(s.labels.keys().map(String::as_str).filter(|k| *k != "le"));
    }
    let mut problems = Vec::new();
    for (family, labels) in GOLDEN_FAMILIES {
        match labels_of.get(family) {
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
    assert!(hook_counted(&last, "customize"), "customize counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_until_caches_sync_and_healthz_is_ok() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let parent = parent_crd("ready");
    cluster.install_crd(&parent.build()).await;
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
