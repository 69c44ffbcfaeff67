//! `metacontroller dev` runs workloads: a CompositeController whose children are a
//! Deployment and a Service, and whose hook computes the parent's status from the
//! Deployment's `readyReplicas`, converges — the simulated kubelet and Deployment
//! controller of dev mode make the children move as on a real cluster.
//!
//! Dev mode is by definition the embedded API server, so this test ignores
//! `METACONTROLLER_E2E_KUBECONFIG`.

use std::path::Path;
use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, dynamic_api, eventually_within, parent_name, unique_crd, unique_name,
    ControllerProcess, CrdBuilder, HookReply, HookServer,
};
use serde_json::{json, Value};

/// Starts `metacontroller dev` (discovery every 500 ms, `extra` flags) and waits until it is
/// ready; returns a client for it.
async fn start_dev(kubeconfig: &Path, extra: &[&str]) -> (ControllerProcess, kube::Client) {
    let flags = [&["--discovery-interval", "500ms"], extra].concat();
    ControllerProcess::start_dev(
        env!("CARGO_BIN_EXE_metacontroller"),
        kubeconfig,
        &flags,
        &[("RUST_LOG", "info")],
    )
    .await
}

/// The hook: a Deployment and a Service per parent; status from the Deployment's status.
fn app_sync(_: &str, req: &Value) -> HookReply {
    let name = parent_name(req).to_string();
    let replicas = req["parent"]["spec"]["replicas"].as_i64().unwrap_or(1);
    let ready = req["children"]["Deployment.apps/v1"][&name]["status"]["readyReplicas"]
        .as_i64()
        .unwrap_or(0);
    let endpoints = req["children"]["Service.v1"][&name]["spec"]["clusterIP"].is_string();
    HookReply::json(json!({
        "children": [
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": name, "labels": {"app": name}},
             "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                      "template": {"metadata": {"labels": {"app": name}},
                                   "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                                                            "ports": [{"containerPort": 80}]}]}}}},
            {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": name, "labels": {"app": name}},
             "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}},
        ],
        "status": {"readyReplicas": ready, "ready": ready == replicas, "serviceCreated": endpoints},
    }))
}

/// Installs the `App` CRD and a CompositeController with Deployment and Service children
/// calling `hook`, through dev mode's API server; returns the App kind.
async fn install_app_controller(client: &kube::Client, hook: &HookServer) -> CrdBuilder {
    let parent = unique_crd("devapp", "App", "apps");
    let crds: Api<DynamicObject> = dynamic_api(
        client.clone(),
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        None,
    );
    create_object(&crds, parent.build()).await;
    let controller: CompositeController = serde_json::from_value(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": unique_name("devapp")},
        "spec": {
            "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
            "childResources": [
                {"apiVersion": "apps/v1", "resource": "deployments", "updateStrategy": {"method": "InPlace"}},
                {"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": "InPlace"}},
            ],
            "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}},
        }
    }))
    .unwrap();
    Api::<CompositeController>::all(client.clone())
        .create(&PostParams::default(), &controller)
        .await
        .unwrap();
    parent
}

/// Whether App `shop` reports `ready` replicas ready, all of those wanted.
async fn app_ready(parents: &Api<DynamicObject>, ready: i64) -> bool {
    parents.get("shop").await.is_ok_and(|p| {
        p.data["status"]["readyReplicas"] == ready && p.data["status"]["ready"] == true
    })
}

/// Whether the Service `shop` has one EndpointSlice listing three ready endpoints.
async fn three_ready_endpoints(slices: &Api<DynamicObject>) -> bool {
    slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=shop"))
        .await
        .is_ok_and(|l| {
            l.items.len() == 1
                && l.items[0].data["endpoints"].as_array().is_some_and(|e| {
                    e.len() == 3 && e.iter().all(|e| e["conditions"]["ready"] == true)
                })
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_composite_with_deployment_child_converges_on_ready_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let (dev, client) =
        start_dev(&kubeconfig, &["--nodes", "2", "--pod-ready-after", "200ms"]).await;
    let logs = dev.logs();
    assert!(
        logs.contains("simulating 2 node(s)") && logs.contains("--simulate=false"),
        "dev mode does not say what it simulates: {logs}"
    );

    let hook = HookServer::start(app_sync).await;
    let parent = install_app_controller(&client, &hook).await;

    let parents = parent.api(client.clone(), Some("default"));
    let app: DynamicObject = serde_json::from_value(json!({
        "apiVersion": parent.api_version(), "kind": "App",
        "metadata": {"name": "shop"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "shop"}}}
    }))
    .unwrap();
    // The parent CRD may take a discovery refresh to be served to the controller.
    eventually_within("parent created", Duration::from_secs(30), || async {
        parents.create(&PostParams::default(), &app).await.is_ok()
    })
    .await;

    eventually_within(
        "parent status computed from the Deployment's readyReplicas",
        Duration::from_secs(90),
        || app_ready(&parents, 3),
    )
    .await;

    // The Service child lists the three ready pods in its EndpointSlice.
    let slices = dynamic_api(
        client.clone(),
        "discovery.k8s.io/v1",
        "EndpointSlice",
        "endpointslices",
        Some("default"),
    );
    eventually_within(
        "endpoints of the Service child",
        Duration::from_secs(30),
        || three_ready_endpoints(&slices),
    )
    .await;

    // Scaling the parent flows through the hook, the Deployment and the kubelet back into the
    // parent's status.
    parents
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    eventually_within("parent scaled down", Duration::from_secs(60), || {
        app_ready(&parents, 1)
    })
    .await;
    let deployments = dynamic_api(
        client.clone(),
        "apps/v1",
        "Deployment",
        "deployments",
        Some("default"),
    );
    let d: Value = serde_json::to_value(deployments.get("shop").await.unwrap()).unwrap();
    assert_eq!(d["status"]["replicas"], 1, "{d}");
    assert_eq!(d["status"]["availableReplicas"], 1, "{d}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_without_simulation_leaves_pods_pending() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let (dev, client) = start_dev(&kubeconfig, &["--simulate=false"]).await;
    assert!(dev.logs().contains("simulation off"), "{}", dev.logs());
    let nodes = dynamic_api(client.clone(), "v1", "Node", "nodes", None);
    assert!(nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
}
