//! Rolling updates end to end: ControllerRevisions record which revision owns which child,
//! one child moves per sync, gated by the child type's statusChecks.

mod common;

use common::{configmap_rule, parent_crd, value_configmaps, value_of, Env};
use kube::api::{Api, ListParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_testkit::{
    crd, dynamic_api, eventually, unique_name, CrdBuilder, HookReply, TestCluster,
};
use serde_json::{json, Value};

fn revisions(env: &Env) -> kube::Api<kube::core::DynamicObject> {
    dynamic_api(
        env.cluster.client(),
        "metacontroller.k8s.io/v1alpha1",
        "ControllerRevision",
        "controllerrevisions",
        Some(&env.ns),
    )
}

async fn revision_count(env: &Env) -> usize {
    revisions(env)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len()
}

fn updated_condition(status: &Value) -> Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Updated").cloned())
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_recreate_replaces_children_and_prunes_revisions() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let mut env = Env::new(cluster, parent_crd(), |_, req| {
        let children = value_configmaps("c-", 3, json!({"app": "r"}), req);
        HookReply::json(json!({"children": children, "status": {}}))
    })
    .await;
    env.start(json!({
        "childResources": [configmap_rule("RollingRecreate")],
        "hooks": env.sync_hook(),
    }))
    .await;
    env.create_parent(
        "p",
        json!({"value": "1", "selector": {"matchLabels": {"app": "r"}}}),
    )
    .await;
    for i in 0..3 {
        env.wait_configmap(&format!("c-{i}"), "created", |_| true)
            .await;
    }
    env.wait_status("p", "on latest revision", |s| {
        updated_condition(s)["reason"] == "OnLatestRevision"
    })
    .await;
    assert_eq!(revision_count(&env).await, 1);
    let old: Vec<String> = {
        let mut v = Vec::new();
        for i in 0..3 {
            v.push(
                env.configmap(&format!("c-{i}"))
                    .await
                    .unwrap()
                    .metadata
                    .uid
                    .unwrap(),
            );
        }
        v
    };
    env.patch_parent_spec("p", json!({"value": "2"})).await;
    for (i, old_uid) in old.iter().enumerate() {
        env.wait_configmap(&format!("c-{i}"), "recreated with value 2", |cm| {
            value_of(cm) == "2" && cm.metadata.uid.as_deref() != Some(old_uid.as_str())
        })
        .await;
    }
    env.wait_status("p", "rollout done", |s| {
        updated_condition(s)["reason"] == "OnLatestRevision" && s["observedGeneration"] == 2
    })
    .await;
    eventually("old revision pruned", || async {
        revision_count(&env).await == 1
    })
    .await;
}

/// Installs a `Child` CRD in a group of its own.
async fn install_child_crd(cluster: &TestCluster) -> CrdBuilder {
    let child_crd = crd(
        &format!("{}.example.com", unique_name("c")),
        "v1",
        "Child",
        "children",
    );
    cluster.install_crd(&child_crd.build()).await;
    child_crd
}

/// The hook: three `Child` objects of `api_version` carrying `spec.value`, phase `ok`.
fn three_child_objects(
    api_version: String,
) -> impl Fn(&str, &Value) -> HookReply + Send + Sync + 'static {
    move |_, req| {
        let parent = &req["parent"];
        let children: Vec<Value> = (0..3)
            .map(|i| {
                json!({"apiVersion": api_version, "kind": "Child",
                       "metadata": {"name": format!("c-{i}"), "labels": {"app": "r"}},
                       "spec": {"value": parent["spec"]["value"]}})
            })
            .collect();
        HookReply::json(json!({"children": children, "status": {"phase": "ok"}}))
    }
}

/// Sets child `name`'s Ready condition to `ready` (retried until the child exists and the
/// status write goes through).
async fn set_ready(children: &Api<DynamicObject>, name: &str, ready: &str) {
    eventually(&format!("{name} ready={ready}"), || async {
        let Ok(mut c) = children.get(name).await else {
            return false;
        };
        c.data["status"] = json!({"conditions": [{"type": "Ready", "status": ready}]});
        children
            .replace_status(name, &PostParams::default(), &c)
            .await
            .is_ok()
    })
    .await;
}

/// Child `name`'s `spec.value`, if it exists.
async fn child_value(children: &Api<DynamicObject>, name: &str) -> Option<Value> {
    children
        .get(name)
        .await
        .ok()
        .map(|c| c.data["spec"]["value"].clone())
}

/// Waits until child `name`'s `spec.value` is "2".
async fn wait_updated(children: &Api<DynamicObject>, name: &str) {
    eventually(&format!("{name} updated"), || async {
        child_value(children, name).await == Some(json!("2"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_in_place_waits_for_status_checks() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let child_crd = install_child_crd(&cluster).await;
    let child_api_version = child_crd.api_version();
    let hook = three_child_objects(child_api_version.clone());
    let mut env = Env::new(cluster, parent_crd(), hook).await;
    env.start(json!({
        "childResources": [{
            "apiVersion": child_api_version, "resource": "children",
            "updateStrategy": {"method": "RollingInPlace",
                               "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}},
        }],
        "hooks": env.sync_hook(),
    }))
    .await;
    let children = child_crd.api(env.cluster.client(), Some(&env.ns));
    env.create_parent(
        "p",
        json!({"value": "1", "selector": {"matchLabels": {"app": "r"}}}),
    )
    .await;
    set_ready(&children, "c-0", "False").await;
    set_ready(&children, "c-1", "True").await;
    set_ready(&children, "c-2", "True").await;

    env.patch_parent_spec("p", json!({"value": "2"})).await;
    // c-0 moves first, then the rollout waits for it to be Ready.
    wait_updated(&children, "c-0").await;
    env.wait_status("p", "rollout waiting", |s| {
        updated_condition(s)["reason"] == "RolloutWaiting"
    })
    .await;
    assert_eq!(child_value(&children, "c-1").await, Some(json!("1")));
    assert_eq!(child_value(&children, "c-2").await, Some(json!("1")));
    assert_eq!(revision_count(&env).await, 2);

    set_ready(&children, "c-0", "True").await;
    for name in ["c-1", "c-2"] {
        wait_updated(&children, name).await;
    }
    env.wait_status("p", "rollout done", |s| {
        updated_condition(s)["reason"] == "OnLatestRevision" && s["phase"] == "ok"
    })
    .await;
    eventually("old revision pruned", || async {
        revision_count(&env).await == 1
    })
    .await;
}
