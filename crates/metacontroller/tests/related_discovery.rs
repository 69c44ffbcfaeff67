//! Related resources are resolved against current discovery, through the real binary: a
//! CRD installed after the controller started can be named in a customize hook's
//! `relatedResources` without restarting anything, and the sync request carries its
//! objects.

use std::time::Duration;

use kube::api::Api;
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, eventually_within, unique_crd, unique_name, ControllerProcess, CrdBuilder,
    HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// A hook whose customize answer names `related` and whose sync answers nothing.
fn relating(related: Vec<Value>) -> impl Fn(&str, &Value) -> HookReply + Send + Sync + 'static {
    move |path, _| match path {
        "/customize" => HookReply::json(json!({"relatedResources": related})),
        _ => HookReply::json(json!({})),
    }
}

/// Creates a CompositeController for `parent` with customize and sync hooks on `hook`, and
/// starts the binary for it.
async fn start_controller(
    cluster: &TestCluster,
    parent: &CrdBuilder,
    hook: &HookServer,
) -> ControllerProcess {
    let label = unique_name("team");
    let _: CompositeController = cluster
        .create_controller(
            &unique_name("reldisc"),
            &label,
            json!({
                "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
                "hooks": {
                    "customize": {"webhook": {"url": hook.url("/customize")}},
                    "sync": {"webhook": {"url": hook.url("/sync")}},
                },
            }),
        )
        .await;
    ControllerProcess::start(
        env!("CARGO_BIN_EXE_metacontroller"),
        [
            "run",
            "--kubeconfig",
            cluster.kubeconfig_path().to_str().expect("utf-8 path"),
            "--target-label-selector",
            &format!("team={label}"),
        ],
    )
}

/// Creates parent `name` through `parents`.
async fn create_parent(parents: &Api<DynamicObject>, parent: &CrdBuilder, name: &str) {
    let p = json!({
        "apiVersion": parent.api_version(), "kind": "Parent",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": "reldisc"}}}
    });
    create_object(parents, p).await;
}

/// Installs the `widget` CRD and creates Widget `w1` (`spec.size: 3`) in `ns`; returns the
/// related-resource rule naming it.
async fn install_widget(cluster: &TestCluster, widget: &CrdBuilder, ns: &str) -> Value {
    cluster.install_crd(&widget.build()).await;
    let w = json!({
        "apiVersion": widget.api_version(), "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 3}
    });
    create_object(&widget.api(cluster.client(), Some(ns)), w).await;
    json!({"apiVersion": widget.api_version(), "resource": "widgets",
           "namespace": ns, "names": ["w1"]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_installed_after_start_works_as_related_resource() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("reldisc").await;
    let parent = cluster.install_parent_crd("reldisc").await;
    let widget = unique_crd("widgets", "Widget", "widgets");
    // Until the CRD exists, the customize hook names nothing.
    let hook = HookServer::start(relating(vec![])).await;
    let binary = start_controller(&cluster, &parent, &hook).await;
    let parents = parent.api(cluster.client(), Some(&ns));
    create_parent(&parents, &parent, "before").await;
    // The controller is running (its discovery was read) before the CRD exists.
    eventually_within("the first parent synced", WAIT, || async {
        hook.requests("/sync")
            .iter()
            .any(|r| r["parent"]["metadata"]["name"] == "before")
    })
    .await;

    let rule = install_widget(&cluster, &widget, &ns).await;
    hook.set_handler(relating(vec![rule]));
    // A new parent gets a fresh customize call, which now names the new resource.
    create_parent(&parents, &parent, "after").await;
    let group = format!("Widget.{}", widget.api_version());
    eventually_within(
        "a sync request carrying the related widget",
        WAIT,
        || async {
            hook.requests("/sync").iter().any(|r: &Value| {
                r["parent"]["metadata"]["name"] == "after"
                    && r["related"][&group]["w1"]["spec"]["size"] == 3
            })
        },
    )
    .await;
    assert!(
        !binary.logs().contains("panicked"),
        "the binary panicked:\n{}",
        binary.logs()
    );
}
