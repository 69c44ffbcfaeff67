//! Related resources are resolved against current discovery, through the real binary: a
//! CRD installed after the controller started can be named in a customize hook's
//! `relatedResources` without restarting anything, and the sync request carries its
//! objects.

use std::time::Duration;

use kube::api::PostParams;
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    crd, eventually_within, unique_name, ControllerProcess, HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_installed_after_start_works_as_related_resource() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("reldisc").await;
    let parent = cluster.install_parent_crd("reldisc").await;
    let widget = crd(
        &format!("{}.example.com", unique_name("widgets")),
        "v1",
        "Widget",
        "widgets",
    );
    // Until the CRD exists, the customize hook names nothing.
    let hook = HookServer::start(|path, _| match path {
        "/customize" => HookReply::json(json!({"relatedResources": []})),
        _ => HookReply::json(json!({})),
    })
    .await;
    let label = unique_name("team");
    let controller: CompositeController = serde_json::from_value(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": unique_name("reldisc"), "labels": {"team": label}},
        "spec": {
            "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
            "hooks": {
                "customize": {"webhook": {"url": hook.url("/customize")}},
                "sync": {"webhook": {"url": hook.url("/sync")}},
            },
        }
    }))
    .unwrap();
    kube::Api::<CompositeController>::all(cluster.client())
        .create(&PostParams::default(), &controller)
        .await
        .unwrap();
    let binary = ControllerProcess::start(
        env!("CARGO_BIN_EXE_metacontroller"),
        [
            "run",
            "--kubeconfig",
            cluster.kubeconfig_path().to_str().expect("utf-8 path"),
            "--target-label-selector",
            &format!("team={label}"),
        ],
    );
    let parents = parent.api(cluster.client(), Some(&ns));
    let make_parent = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": parent.api_version(), "kind": "Parent",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": "reldisc"}}}
        }))
        .unwrap()
    };
    parents
        .create(&PostParams::default(), &make_parent("before"))
        .await
        .unwrap();
    // The controller is running (its discovery was read) before the CRD exists.
    eventually_within("the first parent synced", WAIT, || async {
        hook.requests("/sync")
            .iter()
            .any(|r| r["parent"]["metadata"]["name"] == "before")
    })
    .await;

    cluster.install_crd(&widget.build()).await;
    let widgets = widget.api(cluster.client(), Some(&ns));
    let w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": widget.api_version(), "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 3}
    }))
    .unwrap();
    widgets.create(&PostParams::default(), &w).await.unwrap();
    let rule = json!({"apiVersion": widget.api_version(), "resource": "widgets",
                      "namespace": ns, "names": ["w1"]});
    hook.set_handler(move |path, _| match path {
        "/customize" => HookReply::json(json!({"relatedResources": [rule.clone()]})),
        _ => HookReply::json(json!({})),
    });
    // A new parent gets a fresh customize call, which now names the new resource.
    parents
        .create(&PostParams::default(), &make_parent("after"))
        .await
        .unwrap();
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
