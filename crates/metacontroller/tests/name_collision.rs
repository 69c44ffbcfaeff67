//! A child (or attachment) whose name is taken by an object the parent does not control,
//! through the real binary, for both controller kinds and both apply strategies: the binary records a SyncError Warning Event naming
//! the object, leaves the object alone (no ownerReference, data intact), does not send the
//! create again while the object is unchanged, and creates the child once the object is
//! deleted.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_testkit::{
    eventually_within, unique_name, ControllerProcess, HookReply, HookServer, TestCluster,
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// Warning Events on the parent `name` in `ns` whose message names `needle`.
async fn warnings_naming(cluster: &TestCluster, ns: &str, name: &str, needle: &str) -> Vec<Event> {
    Api::<Event>::namespaced(cluster.client(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(name)
                && e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some("SyncError")
                && e.message.as_deref().is_some_and(|m| m.contains(needle))
        })
        .collect()
}

/// POSTs (`create`) and PATCHes (server-side apply) of ConfigMaps seen by the embedded
/// server, or `None` against a real cluster.
fn configmap_writes(cluster: &TestCluster) -> Option<u64> {
    cluster
        .control()
        .map(|c| c.requests("create", "configmaps") + c.requests("patch", "configmaps"))
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Composite,
    Decorator,
}

async fn foreign_object_is_left_alone(kind: Kind, apply_strategy: &str) {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("taken").await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    let foreign: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "p-cm"}, "data": {"owner": "someone-else"}}))
    .unwrap();
    let foreign = cms.create(&PostParams::default(), &foreign).await.unwrap();

    let hook = HookServer::start(|path, req| {
        let (parent, field) = match path {
            "/composite" => (&req["parent"], "children"),
            _ => (&req["object"], "attachments"),
        };
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        HookReply::json(json!({
            field: [{"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": format!("{name}-cm"), "labels": {"app": "taken"}},
                     "data": {"k": "v"}}],
            "status": {"ok": true},
        }))
    })
    .await;
    let parent = cluster.install_parent_crd("taken").await;
    let label = unique_name("team");
    let metadata = json!({"name": unique_name("taken"), "labels": {"team": label}});
    if kind == Kind::Composite {
        let controller: CompositeController = serde_json::from_value(json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": metadata,
            "spec": {
                "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                    "updateStrategy": {"method": "InPlace"}}],
                "resyncPeriodSeconds": 1,
                "hooks": {"sync": {"webhook": {"url": hook.url("/composite")}}},
            }
        }))
        .unwrap();
        Api::<CompositeController>::all(cluster.client())
            .create(&PostParams::default(), &controller)
            .await
            .unwrap();
    } else {
        let controller: DecoratorController = serde_json::from_value(json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
            "metadata": metadata,
            "spec": {
                "resources": [{"apiVersion": parent.api_version(), "resource": parent.plural()}],
                "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
                "resyncPeriodSeconds": 1,
                "hooks": {"sync": {"webhook": {"url": hook.url("/decorator")}}},
            }
        }))
        .unwrap();
        Api::<DecoratorController>::all(cluster.client())
            .create(&PostParams::default(), &controller)
            .await
            .unwrap();
    }
    let sync_path = match kind {
        Kind::Composite => "/composite",
        Kind::Decorator => "/decorator",
    };
    let binary = ControllerProcess::start(
        env!("CARGO_BIN_EXE_metacontroller"),
        [
            "run",
            "--kubeconfig",
            cluster.kubeconfig_path().to_str().expect("utf-8 path"),
            "--apply-strategy",
            apply_strategy,
            "--target-label-selector",
            &format!("team={label}"),
        ],
    );
    let parents = parent.api(cluster.client(), Some(&ns));
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": parent.api_version(), "kind": "Parent",
        "metadata": {"name": "p"}, "spec": {"selector": {"matchLabels": {"app": "taken"}}}
    }))
    .unwrap();
    parents.create(&PostParams::default(), &obj).await.unwrap();

    let named = format!("ConfigMap {ns}/p-cm");
    eventually_within(
        "a SyncError Warning naming the taken name",
        WAIT,
        || async { !warnings_naming(&cluster, &ns, "p", &named).await.is_empty() },
    )
    .await;
    // Positive signal first: the controller keeps syncing the parent (resync every second,
    // backoff on the error) ...
    let writes_before = configmap_writes(&cluster);
    let calls_before = hook.calls(sync_path);
    eventually_within("three more syncs", WAIT, || async {
        hook.calls(sync_path) >= calls_before + 3
    })
    .await;
    // ... then the negative: no create / apply was sent again, the object is untouched.
    assert_eq!(
        configmap_writes(&cluster),
        writes_before,
        "the binary wrote to the taken name again\n{}",
        binary.logs()
    );
    let now = cms.get("p-cm").await.unwrap();
    assert_eq!(
        now.metadata.resource_version, foreign.metadata.resource_version,
        "the foreign object changed"
    );
    assert!(now.metadata.owner_references.is_none(), "adopted: {now:?}");
    assert_eq!(now.data, foreign.data);

    // Once the name is free, the child is created.
    cms.delete("p-cm", &DeleteParams::default()).await.unwrap();
    eventually_within(
        "the child created after the name was freed",
        WAIT,
        || async {
            cms.get_opt("p-cm").await.unwrap().is_some_and(|cm| {
                cm.data
                    .as_ref()
                    .and_then(|d| d.get("k"))
                    .map(String::as_str)
                    == Some("v")
                    && cm
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|r| r.controller == Some(true) && r.name == "p")
            })
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taken_child_name_is_reported_not_overwritten_dynamic_apply() {
    foreign_object_is_left_alone(Kind::Composite, "dynamic-apply").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taken_child_name_is_reported_not_overwritten_server_side_apply() {
    foreign_object_is_left_alone(Kind::Composite, "server-side-apply").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taken_attachment_name_is_reported_not_overwritten_dynamic_apply() {
    foreign_object_is_left_alone(Kind::Decorator, "dynamic-apply").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taken_attachment_name_is_reported_not_overwritten_server_side_apply() {
    foreign_object_is_left_alone(Kind::Decorator, "server-side-apply").await;
}
