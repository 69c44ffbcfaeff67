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
    crd, dynamic_api, eventually_within, unique_name, ControllerProcess, HookReply, HookServer,
};
use serde_json::{json, Value};

/// Starts `metacontroller dev` and waits until it is ready; returns a client for it.
async fn start_dev(kubeconfig: &Path, extra: &[&str]) -> (ControllerProcess, kube::Client) {
    let mut args: Vec<String> = [
        "dev",
        "--port",
        "0",
        "--metrics-address",
        "0",
        "--health-probe-bind-address",
        "0",
        "--discovery-interval",
        "500ms",
        "--dev-kubeconfig",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(kubeconfig.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    let process = ControllerProcess::start_with_env(
        env!("CARGO_BIN_EXE_metacontroller"),
        &args,
        [("RUST_LOG", "info")],
    );
    eventually_within("dev mode ready", Duration::from_secs(60), || async {
        process.logs().contains("press Ctrl-C")
    })
    .await;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig).expect("dev kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("kube config");
    (process, kube::Client::try_from(config).expect("client"))
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

    // The hook: a Deployment and a Service per parent; status from the Deployment's status.
    let hook = HookServer::start(|_, req| {
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
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
    })
    .await;
    let parent = crd(
        &format!("{}.example.com", unique_name("devapp")),
        "v1",
        "App",
        "apps",
    );
    let pcrd = parent.build();
    let crds: Api<DynamicObject> = dynamic_api(
        client.clone(),
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        None,
    );
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(pcrd).unwrap(),
    )
    .await
    .unwrap();
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
        || async {
            parents.get("shop").await.is_ok_and(|p| {
                p.data["status"]["readyReplicas"] == 3 && p.data["status"]["ready"] == true
            })
        },
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
        || async {
            slices
                .list(&ListParams::default().labels("kubernetes.io/service-name=shop"))
                .await
                .is_ok_and(|l| {
                    l.items.len() == 1
                        && l.items[0].data["endpoints"].as_array().is_some_and(|e| {
                            e.len() == 3 && e.iter().all(|e| e["conditions"]["ready"] == true)
                        })
                })
        },
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
    eventually_within("parent scaled down", Duration::from_secs(60), || async {
        parents.get("shop").await.is_ok_and(|p| {
            p.data["status"]["readyReplicas"] == 1 && p.data["status"]["ready"] == true
        })
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
