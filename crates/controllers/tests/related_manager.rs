//! `RelatedManager` on its own (as the DecoratorController uses it): related informers are
//! leased when a customize response first names their resource and released when no
//! cached parent needs them; a related change calls the enqueue callback for the parents
//! whose rules select the object; the customize response is cached per uid + generation.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_api::hook::HookVersion;
use metacontroller_api::wire::CustomizableController;
use metacontroller_controllers::{ParentId, RelatedConfig, RelatedManager};
use metacontroller_dynamic::{InformerConfig, Informers, ResourceId, ResourceMap};
use metacontroller_hooks::{HookClient, HookClientConfig};
use metacontroller_testkit::{eventually, unique_name, HookReply, HookServer, TestCluster};
use serde_json::{json, Value};

/// The parents enqueued by the manager's callback.
type Enqueued = Arc<Mutex<Vec<ParentId>>>;

/// A RelatedManager for a CompositeController over Secrets whose customize hook is
/// `hook`'s `/customize`; enqueued parents are pushed to the returned list.
async fn manager(
    client: &kube::Client,
    informers: &Informers,
    hook: &HookServer,
) -> (RelatedManager, Enqueued) {
    let resources = ResourceMap::discover(client, &ResourceMap::default())
        .await
        .unwrap()
        .update
        .unwrap();
    let controller: CompositeController = serde_json::from_value(json!({
        "metadata": {"name": "c"},
        "spec": {"parentResource": {"apiVersion": "v1", "resource": "secrets"}}
    }))
    .unwrap();
    let enqueued = Enqueued::default();
    let manager = RelatedManager::new(RelatedConfig {
        controller: CustomizableController::Composite(Box::new(controller)),
        name: "c".into(),
        hook: Some(
            serde_json::from_value(json!({"webhook": {"url": hook.url("/customize")}})).unwrap(),
        ),
        endpoint_configs: Vec::new(),
        hooks: HookClient::new(HookClientConfig::default()).unwrap(),
        informers: informers.clone(),
        resources,
        enqueue: {
            let enqueued = enqueued.clone();
            Arc::new(move |p: &ParentId, _| enqueued.lock().unwrap().push(p.clone()))
        },
    });
    (manager, enqueued)
}

/// Secret `p` of namespace `ns` (uid `uid-p`) at `generation`, as a parent.
fn parent(ns: &str, generation: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "p", "namespace": ns, "uid": "uid-p", "generation": generation}})
}

/// A change of a selected object (ConfigMap `a`) enqueues the parent.
async fn assert_change_enqueues_the_parent(cms: &Api<ConfigMap>, enqueued: &Enqueued) {
    enqueued.lock().unwrap().clear();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .unwrap();
    eventually("parent enqueued", || async {
        enqueued
            .lock()
            .unwrap()
            .iter()
            .any(|p| p.key.name == "p" && p.kind == "Secret")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_follow_the_rules_and_changes_enqueue_parents() {
    let cluster = TestCluster::start().await;
    let ns = cluster.create_namespace("rel").await;
    let label = unique_name("rel");
    let rules = json!({"relatedResources": [{"apiVersion": "v1", "resource": "configmaps",
        "labelSelector": {"matchLabels": {"related": label}}}]});
    let hook = HookServer::start(move |_, _| HookReply::json(rules.clone())).await;
    let client = cluster.client();
    let informers = Informers::new(client.clone(), InformerConfig::default());
    let (manager, enqueued) = manager(&client, &informers, &hook).await;
    let configmaps = ResourceId {
        api_version: "v1".into(),
        resource: "configmaps".into(),
    };
    assert!(
        manager.watched().is_empty(),
        "nothing watched before a customize call"
    );

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "a", "labels": {"related": label}}, "data": {"v": "1"}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    let related = manager
        .related(&parent(&ns, 1), HookVersion::V2)
        .await
        .unwrap();
    let key = format!("{ns}/a");
    assert_eq!(
        related.get("v1", "ConfigMap", &key).unwrap()["data"]["v"],
        "1"
    );
    assert_eq!(manager.watched(), vec![configmaps.clone()]);
    assert!(informers.running().contains(&configmaps));

    // Cached per generation; v1 keys are relative names.
    let related = manager
        .related(&parent(&ns, 1), HookVersion::V1)
        .await
        .unwrap();
    assert!(related.get("v1", "ConfigMap", "a").is_some());
    assert_eq!(hook.calls("/customize"), 1);
    manager
        .related(&parent(&ns, 2), HookVersion::V1)
        .await
        .unwrap();
    assert_eq!(hook.calls("/customize"), 2, "new generation asks again");

    assert_change_enqueues_the_parent(&cms, &enqueued).await;

    // Forgetting the only parent releases the informer.
    manager.forget(&ParentId::of(&parent(&ns, 2)));
    assert!(manager.watched().is_empty());
    assert!(!informers.running().contains(&configmaps));
}
