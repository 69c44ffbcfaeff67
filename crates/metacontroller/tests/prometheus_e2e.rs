//! The chart's alerts and dashboard against a real Prometheus scraping the running binary.
//!
//! Two `metacontroller run` processes (one with `--leader-election`, one with `--sharding`,
//! since a process runs one or the other) sync a parent each; a Prometheus server from
//! Debian's `prometheus` package scrapes both every second as one job and evaluates the
//! chart's rules (rendered by Helm's engine, with 20 s windows and 2 s `for:`). When the
//! leader's sync hook starts failing, `MetacontrollerSyncErrors` fires for that controller
//! (read from Prometheus' `/api/v1/alerts`), as does `MetacontrollerHookErrors` for its
//! webhook runtime, and the parent is counted in `metacontroller_failing_parents`; after the
//! fix the alert resolves. Then every query of every panel of the chart's Grafana dashboard
//! returns series from that Prometheus.
//!
//! Runs on the embedded API server and, with `METACONTROLLER_E2E_KUBECONFIG`, on a real one.
//! Skipped without prometheus or the Helm SDK, except in CI (`CI=true`).

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::replicas::{run_args, sharding_args};
use metacontroller_testkit::{
    create_object, eventually_within, parent_name, unique_name, ControllerProcess, CrdBuilder,
    HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

mod helm;
mod prometheus;
use helm::{helm_chart, helm_sdk_available, repo_root};
use prometheus::{prometheus_available, PrometheusServer};

/// The scrape job of both processes; the rules select it.
const JOB: &str = "metacontroller-e2e";
/// How long an alert may take to fire or resolve (20 s windows, 1 s scrapes and evaluation).
const ALERT_TIMEOUT: Duration = Duration::from_secs(120);
/// The parent whose sync hook is made to fail.
const FAILING: &str = "failing";

/// The chart's rule groups with the windows of a test: 20 s rates, 2 s `for:`.
async fn test_rules() -> Value {
    let short = json!({"for": "2s"});
    let alerts: serde_json::Map<String, Value> = [
        "down",
        "syncErrors",
        "parentsNotSynced",
        "hookErrors",
        "hookLatency",
        "inProcessHookLimits",
        "queueDepth",
        "queueLatency",
        "noLeader",
        "shardsUnowned",
        "listError",
        "memoryNearLimit",
    ]
    .iter()
    .map(|name| (name.to_string(), short.clone()))
    .collect();
    let values = json!({
        "prometheusRule": {
            "enabled": true,
            "selector": format!("job=\"{JOB}\""),
            "rateWindow": "20s",
            "alerts": alerts,
        },
        "sharding": {"enabled": true, "shards": 4},
        "resources": {"limits": {"memory": "1Gi"}},
    });
    let out = helm_chart(&["render", "--set-json", &values.to_string()])
        .await
        .expect_ok("rendering the alerting rules");
    let objects: Vec<Value> = serde_json::from_str(&out).expect("JSON objects");
    objects
        .into_iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .map(|o| o["spec"].clone())
        .expect("a PrometheusRule")
}

/// Every panel query of the chart's dashboard, with Grafana's variables set for this test.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(
        repo_root().join("charts/metacontroller/dashboards/metacontroller.json"),
    )
    .expect("the dashboard JSON");
    let dashboard: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a target has an expr");
            let expr = expr.replace("$__rate_interval", "30s").replace("$job", JOB);
            queries.push((panel["title"].as_str().unwrap_or("").to_owned(), expr));
        }
    }
    queries
}

/// A controller over its own parent kind, with sync, customize and finalize webhooks.
async fn controller(cluster: &TestCluster, hook: &HookServer, label: &str) -> (String, CrdBuilder) {
    let parent = cluster.install_parent_crd("prom").await;
    let name = unique_name("prom");
    let _: CompositeController = cluster
        .create_controller(
            &name,
            label,
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
    (name, parent)
}

/// The hook: a ConfigMap child per parent; the sync of parent [`FAILING`] answers 500
/// while `failing` is set.
fn hook_handler(failing: bool) -> impl Fn(&str, &Value) -> HookReply + Send + Sync + 'static {
    move |path, req| match path {
        "/customize" => HookReply::json(json!({"relatedResources": []})),
        "/finalize" => HookReply::json(json!({"children": [], "finalized": true})),
        _ if failing && parent_name(req) == FAILING => HookReply::status(500, "hook broken"),
        _ => HookReply::json(json!({
            "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": format!("{}-cm", parent_name(req))},
                          "data": {"gen": req["parent"]["spec"]["gen"].to_string()}}],
            "status": {"ok": true},
        })),
    }
}

/// Creates parent `name` and waits for its child.
async fn parent_with_child(cluster: &TestCluster, ns: &str, parent: &CrdBuilder, name: &str) {
    let parents = parent.api(cluster.client(), Some(ns));
    create_object(
        &parents,
        json!({"apiVersion": parent.api_version(), "kind": "Parent",
               "metadata": {"name": name}, "spec": {"gen": 1}}),
    )
    .await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(cluster.client(), ns);
    let child = format!("{name}-cm");
    eventually_within(
        &format!("child {child}"),
        Duration::from_secs(60),
        || async { cms.get_opt(&child).await.unwrap().is_some() },
    )
    .await;
}

/// Sets `spec.gen` of parent `name`, so it syncs now.
async fn touch(parents: &Api<DynamicObject>, name: &str, gen: u32) {
    parents
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gen": gen}})),
        )
        .await
        .expect("patching the parent");
}

/// A `metacontroller run` for the controllers labelled `label`, metrics on a free port,
/// Leases in `ns`; waits for its metrics address.
async fn process(
    cluster: &TestCluster,
    ns: &str,
    label: &str,
    extra: Vec<String>,
) -> (ControllerProcess, String) {
    let mut args = run_args(cluster.kubeconfig_path(), label);
    args.extend([
        "--metrics-address=127.0.0.1:0".to_string(),
        "--health-probe-bind-address=0".to_string(),
    ]);
    args.extend(extra);
    let process = ControllerProcess::start_with_env(
        env!("CARGO_BIN_EXE_metacontroller"),
        args,
        [("POD_NAMESPACE", ns.to_string())],
    );
    let mut address = String::new();
    eventually_within("metrics address logged", Duration::from_secs(30), || {
        if let Some(a) = process.metrics_address() {
            address = a;
        }
        let done = !address.is_empty();
        async move { done }
    })
    .await;
    (process, address)
}

/// Waits until `expr` returns at least one series.
async fn until_series(prom: &PrometheusServer, what: &str, expr: &str) {
    eventually_within(what, Duration::from_secs(60), || async {
        !prom.query(expr).await.is_empty()
    })
    .await;
}

/// The running setup: the cluster, the hook, both processes and Prometheus scraping them.
struct Setup {
    cluster: TestCluster,
    ns: String,
    hook: HookServer,
    /// The leader-elected process's controller and its parent kind.
    leading: String,
    leading_parent: CrdBuilder,
    lease: String,
    prom: PrometheusServer,
    _processes: [ControllerProcess; 2],
}

impl Setup {
    /// Both controllers with a converged parent each, both processes scraped (targets up,
    /// the leader leading, all shards owned).
    async fn start() -> Setup {
        let rules = test_rules().await;
        let cluster = TestCluster::start().await;
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace("prom").await;
        let hook = HookServer::start(hook_handler(false)).await;
        // The leader-elected process syncs controller `leading`, the sharded one the other.
        let (leading_label, sharded_label) = (unique_name("team"), unique_name("team"));
        let (leading, leading_parent) = controller(&cluster, &hook, &leading_label).await;
        let (_, sharded_parent) = controller(&cluster, &hook, &sharded_label).await;
        let lease = unique_name("prom-leader");
        let election = vec![
            "--leader-election".into(),
            format!("--leader-election-id={lease}"),
        ];
        let (leader, leader_metrics) = process(&cluster, &ns, &leading_label, election).await;
        let sharding = sharding_args(&unique_name("prom-shards"), 4, Duration::from_secs(10));
        let (shards, shard_metrics) = process(&cluster, &ns, &sharded_label, sharding).await;
        parent_with_child(&cluster, &ns, &leading_parent, FAILING).await;
        parent_with_child(&cluster, &ns, &sharded_parent, "steady").await;
        let prom =
            PrometheusServer::start(JOB, &[leader_metrics, shard_metrics], Some(&rules)).await;
        let setup = Setup {
            cluster,
            ns,
            hook,
            leading,
            leading_parent,
            lease,
            prom,
            _processes: [leader, shards],
        };
        setup.wait_scraped().await;
        setup
    }

    /// Waits until Prometheus shows both targets up, the leader leading and all shards owned.
    async fn wait_scraped(&self) {
        let prom = &self.prom;
        eventually_within("both targets up", Duration::from_secs(60), || {
            prom.targets_up()
        })
        .await;
        let queue = self.queue();
        let reconciles =
            format!("controller_runtime_reconcile_total{{job=\"{JOB}\", controller=\"{queue}\"}}");
        until_series(prom, "the leader's reconciles scraped", &reconciles).await;
        let leads = format!(
            "leader_election_master_status{{name=\"{}\"}} == 1",
            self.lease
        );
        until_series(prom, "the leader leads", &leads).await;
        let owned = format!("sum(metacontroller_shards_owned{{job=\"{JOB}\"}}) == 4");
        until_series(prom, "all 4 shards owned", &owned).await;
    }

    /// The leader's controller's queue name (the `controller` label).
    fn queue(&self) -> String {
        format!("CompositeController-{}", self.leading)
    }

    /// Sets `spec.gen` of the leader's parent [`FAILING`], so it syncs now.
    async fn touch_failing(&self, gen: u32) {
        let parents = self
            .leading_parent
            .api(self.cluster.client(), Some(&self.ns));
        touch(&parents, FAILING, gen).await;
    }

    /// Waits until `metacontroller_failing_parents` of the leader's controller is `n`.
    async fn until_failing_parents(&self, n: u32) {
        let expr = format!(
            "metacontroller_failing_parents{{job=\"{JOB}\", controller=\"{}\"}} == {n}",
            self.queue()
        );
        until_series(&self.prom, &format!("{n} parents failing"), &expr).await;
    }
}

/// The hook breaks: both the sync alert (by controller) and the hook alert (by controller,
/// hook and runtime) fire. With backoff the failures thin out, so each is noted once seen.
async fn break_the_hook(setup: &Setup) {
    let queue = setup.queue();
    let sync_errors = [("controller", queue.as_str())];
    let hook_errors = [
        ("controller_name", setup.leading.as_str()),
        ("hook", "sync"),
        ("runtime", "webhook"),
    ];
    // The rate limit defers Events, it does not drop them: nothing is dropped here.
    let dropped = format!("sum(metacontroller_events_dropped_total{{job=\"{JOB}\"}}) == 0");
    until_series(&setup.prom, "the dropped Events counter scraped", &dropped).await;
    setup.hook.set_handler(hook_handler(true));
    setup.touch_failing(2).await;
    let seen = std::sync::Mutex::new((false, false));
    eventually_within(
        "MetacontrollerSyncErrors and MetacontrollerHookErrors firing",
        ALERT_TIMEOUT,
        || async {
            let prom = &setup.prom;
            let sync = prom
                .alert_state("MetacontrollerSyncErrors", &sync_errors)
                .await;
            let hook = prom
                .alert_state("MetacontrollerHookErrors", &hook_errors)
                .await;
            let mut seen = seen.lock().unwrap();
            seen.0 |= sync.as_deref() == Some("firing");
            seen.1 |= hook.as_deref() == Some("firing");
            seen.0 && seen.1
        },
    )
    .await;
    setup.until_failing_parents(1).await;
}

/// Fixed: the next sync succeeds and the alert resolves once its window has no error.
async fn fix_the_hook(setup: &Setup) {
    let queue = setup.queue();
    let sync_errors = [("controller", queue.as_str())];
    setup.hook.set_handler(hook_handler(false));
    setup.touch_failing(3).await;
    eventually_within(
        "MetacontrollerSyncErrors resolved",
        ALERT_TIMEOUT,
        || async {
            setup
                .prom
                .alert_state("MetacontrollerSyncErrors", &sync_errors)
                .await
                .is_none()
        },
    )
    .await;
    setup.until_failing_parents(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_failure_alert_fires_and_resolves_and_every_dashboard_query_has_data() {
    if !helm_sdk_available() || !prometheus_available() {
        return;
    }
    let setup = Setup::start().await;
    let prom = &setup.prom;
    let queue = setup.queue();
    assert_eq!(
        prom.alert_state(
            "MetacontrollerSyncErrors",
            &[("controller", queue.as_str())]
        )
        .await,
        None,
        "the alert holds before any failure"
    );
    break_the_hook(&setup).await;
    fix_the_hook(&setup).await;

    // Every panel of the dashboard has data.
    let queries = dashboard_queries();
    assert!(queries.len() >= 20, "{queries:?}");
    for (title, expr) in &queries {
        until_series(prom, &format!("panel {title:?}: {expr}"), expr).await;
    }
    // Once the failure's windows have passed, the healthy setup raises no alert at all
    // (MetacontrollerHookErrors, which the broken hook also raised, resolves with it).
    eventually_within("no alert firing", ALERT_TIMEOUT, || async {
        prom.alerts().await.iter().all(|a| a["state"] != "firing")
    })
    .await;
}
