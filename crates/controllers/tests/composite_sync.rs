//! CompositeController end to end: embedded API server, a real HTTP hook server, the
//! in-process reconciler. Children are created with a controller ownerReference, the
//! parent status gets observedGeneration, and a resync of the converged parent writes
//! nothing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::{routing::post, Json, Router};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_dynamic::{InformerConfig, Informers, ResourceMap};
use metacontroller_hooks::{HookClient, HookClientConfig};
use serde_json::{json, Value};

async fn client(server: &embedded_apiserver::ApiServerHandle) -> kube::Client {
    server
        .client()
        .await
        .expect("a client of the embedded server")
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The hook: two ConfigMaps per parent carrying `spec.value`, status counts observed children.
async fn sync(calls: Arc<AtomicUsize>, Json(req): Json<Value>) -> Json<Value> {
    calls.fetch_add(1, Ordering::SeqCst);
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let value = req["parent"]["spec"]["value"].clone();
    let observed = req["children"]["ConfigMap.v1"]
        .as_object()
        .map_or(0, |m| m.len());
    let children: Vec<Value> = ["a", "b"]
        .iter()
        .map(|suffix| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("{name}-{suffix}"), "labels": {"app": "p"}},
                   "data": {"value": value}})
        })
        .collect();
    Json(json!({"status": {"children": observed}, "children": children}))
}

/// Installs the `parents.example.com` CRD and returns discovery once it serves the parents
/// (CRDs take a moment to be served).
async fn install_parent_crd(client: &kube::Client) -> ResourceMap {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "parents.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
          "names": {"plural": "parents", "singular": "parent", "kind": "Parent", "listKind": "ParentList"},
          "versions": [{"name": "v1", "served": true, "storage": true,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = ResourceMap::discover(client, &ResourceMap::default())
            .await
            .unwrap();
        if let Some(map) = found.update {
            if map.get("example.com/v1", "parents").is_some() {
                return map;
            }
        }
        assert!(Instant::now() < deadline, "parents never served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Serves [`sync`] at `/sync` on a local port; returns its call counter and address.
async fn start_hook_server() -> (Arc<AtomicUsize>, SocketAddr) {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = Router::new().route(
        "/sync",
        post({
            let calls = calls.clone();
            move |body| sync(calls.clone(), body)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (calls, hook_addr)
}

/// The CompositeController: parents own ConfigMaps (InPlace), resynced every second.
fn controller(hook_addr: SocketAddr) -> CompositeController {
    serde_json::from_value(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "parents"},
        "spec": {
          "parentResource": {"apiVersion": "example.com/v1", "resource": "parents"},
          "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                              "updateStrategy": {"method": "InPlace"}}],
          "resyncPeriodSeconds": 1,
          "hooks": {"sync": {"webhook": {"url": format!("http://{hook_addr}/sync")}}}
        }
    }))
    .unwrap()
}

/// The parents of the `default` namespace.
fn parents_api(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        "default",
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("example.com", "v1", "Parent"),
            "parents",
        ),
    )
}

/// Creates parent `p1` with `spec.value: one`; returns its uid.
async fn create_parent(parents: &Api<DynamicObject>) -> String {
    let parent: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Parent",
        "metadata": {"name": "p1", "namespace": "default"},
        "spec": {"value": "one", "selector": {"matchLabels": {"app": "p"}}}
    }))
    .unwrap();
    let created = parents
        .create(&PostParams::default(), &parent)
        .await
        .unwrap();
    created.metadata.uid.clone().unwrap()
}

/// Starts the reconciler (2 workers) for [`controller`].
fn start_reconciler(
    client: &kube::Client,
    resources: &ResourceMap,
    hook_addr: SocketAddr,
) -> metacontroller_controllers::composite::CompositeHandle {
    let informers = Informers::new(client.clone(), InformerConfig::default());
    let hooks = HookClient::new(HookClientConfig::default()).unwrap();
    metacontroller_controllers::composite::start(
        controller(hook_addr),
        client.clone(),
        &informers,
        resources,
        hooks,
        metacontroller_controllers::composite::Options {
            workers: 2,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Waits for p1's status, then checks its two children: controlled by `uid`, value `one`.
async fn assert_children_created(parents: &Api<DynamicObject>, cms: &Api<ConfigMap>, uid: &str) {
    eventually("status with observedGeneration and both children", || {
        let parents = parents.clone();
        async move {
            let p = parents.get("p1").await.unwrap();
            p.data["status"] == json!({"children": 2, "observedGeneration": 1})
        }
    })
    .await;
    let list = cms.list(&ListParams::default()).await.unwrap();
    let mut names: Vec<_> = list
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .filter(|n| n.starts_with("p1-"))
        .collect();
    names.sort();
    assert_eq!(names, ["p1-a", "p1-b"]);
    for cm in list
        .items
        .iter()
        .filter(|c| c.metadata.name.as_deref().unwrap_or("").starts_with("p1-"))
    {
        let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.uid, uid);
        assert_eq!(owner.kind, "Parent");
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
        assert_eq!(cm.data.as_ref().unwrap()["value"], "one");
    }
}

/// Waits until the hook has been called more than `after` times.
async fn wait_calls_above(calls: &Arc<AtomicUsize>, what: &str, after: usize) {
    eventually(what, || {
        let calls = calls.clone();
        async move { calls.load(Ordering::SeqCst) > after }
    })
    .await;
}

/// Converged: resyncs (resyncPeriodSeconds: 1) call the hook but write nothing. First one
/// more sync must start, so the one that wrote the status (and any follow-up its write
/// caused) has completed before the counters are reset.
async fn assert_resyncs_write_nothing(
    server: &embedded_apiserver::ApiServerHandle,
    calls: &Arc<AtomicUsize>,
) {
    let converged = calls.load(Ordering::SeqCst);
    wait_calls_above(calls, "a sync after convergence", converged).await;
    server.control().reset_counts();
    let before = calls.load(Ordering::SeqCst);
    wait_calls_above(calls, "two resyncs", before + 1).await;
    assert_eq!(
        server.control().writes(),
        0,
        "{:?}",
        server.control().request_counts()
    );
}

/// A spec change is carried to the children in place.
async fn assert_spec_change_reaches_children(parents: &Api<DynamicObject>, cms: &Api<ConfigMap>) {
    let mut p = parents.get("p1").await.unwrap();
    p.data["spec"]["value"] = json!("two");
    parents
        .replace("p1", &PostParams::default(), &p)
        .await
        .unwrap();
    eventually("children updated", || {
        let cms = cms.clone();
        async move {
            let a = cms.get("p1-a").await.unwrap();
            a.data.unwrap_or_default().get("value").map(String::as_str) == Some("two")
        }
    })
    .await;
    eventually("observedGeneration 2", || {
        let parents = parents.clone();
        async move { parents.get("p1").await.unwrap().data["status"]["observedGeneration"] == 2 }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_creates_children_sets_status_and_resync_writes_nothing() {
    let server = embedded_apiserver::ApiServer::start(Default::default())
        .await
        .unwrap();
    let client = client(&server).await;
    let resources = install_parent_crd(&client).await;
    let (calls, hook_addr) = start_hook_server().await;
    let parents = parents_api(&client);
    let uid = create_parent(&parents).await;
    let handle = start_reconciler(&client, &resources, hook_addr);

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert_children_created(&parents, &cms, &uid).await;
    assert_resyncs_write_nothing(&server, &calls).await;
    assert_spec_change_reaches_children(&parents, &cms).await;

    handle.stop().await;
    server.shutdown().await;
}
