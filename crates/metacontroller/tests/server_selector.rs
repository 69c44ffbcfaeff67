//! `parentResource.labelSelector` is applied by the API server (issue 53, upstream #1033):
//! the parent informer of a CompositeController without a finalize hook lists and watches
//! only the matching parents, so its cache (the `metacontroller_informer_cached_objects`
//! series with the selector as `label_selector`) holds those alone; only they are synced;
//! a parent relabelled out of the selection is no longer managed (upstream's rule for a
//! parent without our finalizer: ignored, its children left as they are). Passes on the
//! embedded server and on a real one (`METACONTROLLER_E2E_KUBECONFIG`).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_testkit::{
    configmap_child_reply, create_object, eventually_within, parent_name, unique_name,
    ControllerProcess, CrdBuilder, HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);
/// What the controller sends as `labelSelector=` (requirements sorted by key).
const SERVER_SELECTOR: &str = "pick=yes,tier notin (skip)";

struct Setup {
    cluster: TestCluster,
    ns: String,
    crd: CrdBuilder,
    hook: HookServer,
    process: ControllerProcess,
}

impl Setup {
    fn parents(&self) -> Api<DynamicObject> {
        self.crd.api(self.cluster.client(), Some(&self.ns))
    }

    /// The parents the hook was called for, with the `spec.round` each call saw.
    fn synced(&self) -> Vec<(String, i64)> {
        self.hook
            .requests("/sync")
            .iter()
            .map(|r| {
                let round = r["parent"]["spec"]["round"].as_i64().unwrap_or(0);
                (parent_name(r).to_string(), round)
            })
            .collect()
    }

    async fn wait_synced(&self, parent: &str, round: i64) {
        eventually_within(
            &format!("{parent} synced at round {round}"),
            WAIT,
            || async { self.synced().contains(&(parent.to_string(), round)) },
        )
        .await;
    }

    /// `metacontroller_informer_<name>` of the parent informer filtered by `selector`.
    async fn informer_metric(&self, name: &str, selector: &str) -> Option<f64> {
        let labels = format!(
            "api_version=\"{}\",label_selector=\"{selector}\",resource=\"parents\"",
            self.crd.api_version()
        );
        let name = format!("metacontroller_informer_{name}");
        self.process.metric(&name, &labels).await
    }

    async fn patch(&self, parent: &str, patch: Value) {
        self.parents()
            .patch(parent, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patching a parent");
    }
}

async fn setup() -> Setup {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("server-selector").await;
    let crd = cluster.install_parent_crd("srvsel").await;
    let hook =
        HookServer::start(|_, request| HookReply::json(configmap_child_reply(request))).await;
    let mut spec = crd.composite_spec(&hook.url("/sync"));
    spec["parentResource"]["labelSelector"] = json!({
        "matchLabels": {"pick": "yes"},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["skip"]}],
    });
    let label = unique_name("team");
    let _: CompositeController = cluster
        .create_controller(&unique_name("cc"), &label, spec)
        .await;
    let parents = crd.api(cluster.client(), Some(&ns));
    for (name, labels) in [
        ("in-a", json!({"pick": "yes"})),
        ("in-b", json!({"pick": "yes", "tier": "gold"})),
        ("out-label", json!({"pick": "no"})),
        ("out-expr", json!({"pick": "yes", "tier": "skip"})),
    ] {
        create_object(
            &parents,
            json!({"apiVersion": crd.api_version(), "kind": "Parent",
                   "metadata": {"name": name, "labels": labels},
                   "spec": {"round": 1, "selector": {"matchLabels": {"app": name}}}}),
        )
        .await;
    }
    let process = run(&cluster, &label);
    Setup {
        cluster,
        ns,
        crd,
        hook,
        process,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_label_selector_is_applied_by_the_api_server() {
    let s = setup().await;
    s.wait_synced("in-a", 1).await;
    s.wait_synced("in-b", 1).await;
    s.cluster
        .wait_for_configmap(&s.ns, "in-b-cm", &s.process, WAIT)
        .await;
    eventually_within("the metrics address is logged", WAIT, || async {
        s.process.metrics_address().is_some()
    })
    .await;
    // The cache holds what the server listed: the matching parents only, and there is no
    // unfiltered informer of the parents at all.
    assert_eq!(
        s.informer_metric("cached_objects", SERVER_SELECTOR).await,
        Some(2.0),
        "{}",
        s.process.scrape_metrics().await
    );
    let listed = s
        .informer_metric("listed_objects_total", SERVER_SELECTOR)
        .await;
    assert!(listed.is_some_and(|n| n >= 2.0), "listed: {listed:?}");
    assert_eq!(s.informer_metric("cached_objects", "").await, None);

    // A parent relabelled out of the selection is no longer managed: later changes of it
    // reach no hook, and its child stays.
    s.patch("in-b", json!({"metadata": {"labels": {"tier": "skip"}}}))
        .await;
    eventually_within("in-b leaves the cache", WAIT, || async {
        s.informer_metric("cached_objects", SERVER_SELECTOR).await == Some(1.0)
    })
    .await;
    s.patch("in-b", json!({"spec": {"round": 2}})).await;
    // Barrier: a later change of a selected parent was synced.
    s.patch("in-a", json!({"spec": {"round": 2}})).await;
    s.wait_synced("in-a", 2).await;
    let synced = s.synced();
    assert!(!synced.contains(&("in-b".into(), 2)), "{synced:?}");
    for never in ["out-label", "out-expr"] {
        assert!(
            !synced.iter().any(|(p, _)| p == never),
            "{never}: {synced:?}"
        );
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(s.cluster.client(), &s.ns);
    let child = configmaps
        .get_opt("in-b-cm")
        .await
        .expect("reading in-b's child");
    assert!(child.is_some(), "the relabelled parent's child stays");

    // Relabelled back into the selection, it is synced again.
    s.patch(
        "in-b",
        json!({"metadata": {"labels": {"tier": "gold"}}, "spec": {"round": 3}}),
    )
    .await;
    s.wait_synced("in-b", 3).await;
}

/// The binary running the controllers labelled `team=<label>`, metrics on a free port.
fn run(cluster: &TestCluster, label: &str) -> ControllerProcess {
    ControllerProcess::run(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &[
            "--target-label-selector",
            &format!("team={label}"),
            "--metrics-address",
            "127.0.0.1:0",
            "--health-probe-bind-address",
            "0",
        ],
    )
}

/// ConfigMaps with the decorator's label (`decorate=<mark>`) and/or annotation
/// (`decorate=yes`): `both-a`, `both-b`, `labels-only`, `annotations-only`.
async fn create_targets(configmaps: &Api<ConfigMap>, mark: &str) {
    for (name, labelled, annotated) in [
        ("both-a", true, true),
        ("both-b", true, true),
        ("labels-only", true, false),
        ("annotations-only", false, true),
    ] {
        let labels = if labelled {
            json!({"decorate": mark})
        } else {
            json!({})
        };
        let annotations = if annotated {
            json!({"decorate": "yes"})
        } else {
            json!({})
        };
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {
            "name": name, "labels": labels, "annotations": annotations}}))
        .expect("configmap");
        configmaps
            .create(&Default::default(), &cm)
            .await
            .expect("creating a configmap");
    }
}

/// A DecoratorController rule's `labelSelector` goes to the API server too; its
/// `annotationSelector` cannot (Kubernetes does not select by annotation) and is applied by
/// the controller: the cache holds the objects with matching labels, the hook sees only those
/// whose annotations match as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decorator_label_selector_is_applied_by_the_api_server() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("server-selector-dc").await;
    let hook = HookServer::start(|_, _| HookReply::json(json!({"labels": {}}))).await;
    let mark = unique_name("mark");
    let spec = json!({"resources": [{"apiVersion": "v1", "resource": "configmaps",
            "labelSelector": {"matchLabels": {"decorate": mark}},
            "annotationSelector": {"matchAnnotations": {"decorate": "yes"}}}],
        "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}}});
    let label = unique_name("team");
    let _: DecoratorController = cluster
        .create_controller(&unique_name("dc"), &label, spec)
        .await;
    let configmaps: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    create_targets(&configmaps, &mark).await;
    let process = run(&cluster, &label);
    let decorated = || -> Vec<String> {
        hook.requests("/sync")
            .iter()
            .filter_map(|r| r["object"]["metadata"]["name"].as_str().map(str::to_string))
            .collect()
    };
    eventually_within("both targets synced", WAIT, || async {
        let seen = decorated();
        seen.iter().any(|n| n == "both-a") && seen.iter().any(|n| n == "both-b")
    })
    .await;
    eventually_within("the metrics address is logged", WAIT, || async {
        process.metrics_address().is_some()
    })
    .await;
    let labels =
        format!("api_version=\"v1\",label_selector=\"decorate={mark}\",resource=\"configmaps\"");
    let cached = process
        .metric("metacontroller_informer_cached_objects", &labels)
        .await;
    assert_eq!(cached, Some(3.0), "{}", process.scrape_metrics().await);
    let unfiltered = "api_version=\"v1\",label_selector=\"\",resource=\"configmaps\"";
    let all = process
        .metric("metacontroller_informer_cached_objects", unfiltered)
        .await;
    assert_eq!(all, None, "no informer of every ConfigMap");
    // Barrier: a later change of a target was synced; the others were never sent.
    let patch = json!({"metadata": {"annotations": {"round": "2"}}});
    configmaps
        .patch("both-a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patching both-a");
    eventually_within("both-a synced again", WAIT, || async {
        hook.requests("/sync")
            .iter()
            .any(|r| r["object"]["metadata"]["annotations"]["round"] == "2")
    })
    .await;
    let seen = decorated();
    for never in ["labels-only", "annotations-only"] {
        assert!(!seen.iter().any(|n| n == never), "{never}: {seen:?}");
    }
}
