//! Garbage collection of a three-level owner chain in the three propagation modes.

mod common;

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use serde_json::json;

async fn chain(api: &Api<ConfigMap>) -> (String, String) {
    let a = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap(),
        )
        .await
        .unwrap();
    let owner = |o: &ConfigMap| json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": o.metadata.name, "uid": o.metadata.uid, "blockOwnerDeletion": true, "controller": true}]);
    let b = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "b", "ownerReferences": owner(&a)}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "c", "ownerReferences": owner(&b)}}))
            .unwrap(),
    )
    .await
    .unwrap();
    (a.metadata.uid.unwrap(), b.metadata.uid.unwrap())
}

async fn gone(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name).await.unwrap().is_none()
}

#[tokio::test]
async fn background_deletes_dependents() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        chain(&api).await;
        api.delete("a", &DeleteParams::background()).await.unwrap();
        assert!(gone(&api, "a").await, "owner goes at once");
        eventually(5, || async {
            gone(&api, "b").await && gone(&api, "c").await
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn foreground_waits_for_dependents() {
    let (s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        chain(&api).await;
        let res = api.delete("a", &DeleteParams::foreground()).await.unwrap();
        let a = res.left().expect("owner still present");
        assert!(a.metadata.deletion_timestamp.is_some());
        assert_eq!(a.metadata.finalizers.unwrap(), ["foregroundDeletion"]);
        eventually(5, || async { gone(&api, "a").await }).await;
        assert!(gone(&api, "b").await && gone(&api, "c").await);
        // Deletion order: c before b before a.
        let deleted: Vec<String> = s
            .control()
            .history()
            .into_iter()
            .filter(|h| h.event_type == "DELETED")
            .map(|h| h.name)
            .collect();
        assert_eq!(deleted, ["c", "b", "a"]);
    })
    .await;
}

#[tokio::test]
async fn orphan_keeps_dependents() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let (_, b_uid) = chain(&api).await;
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Orphan),
            ..Default::default()
        };
        api.delete("a", &dp).await.unwrap();
        eventually(5, || async { gone(&api, "a").await }).await;
        let b = api.get("b").await.unwrap();
        assert!(
            b.metadata.owner_references.unwrap_or_default().is_empty(),
            "reference to the deleted owner stripped"
        );
        let c = api.get("c").await.unwrap();
        assert_eq!(
            c.metadata.owner_references.unwrap()[0].uid,
            b_uid,
            "grandchild untouched"
        );
    })
    .await;
}

#[tokio::test]
async fn dependent_of_missing_owner_is_collected() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "stray", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "00000000-0000-0000-0000-000000000000"}]}})).unwrap()).await.unwrap();
        eventually(5, || async { gone(&api, "stray").await }).await;
    })
    .await;
}
