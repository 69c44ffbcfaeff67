//! CompositeController scenarios, end to end: the in-process reconciler against the test
//! cluster (embedded API server unless `METACONTROLLER_E2E_KUBECONFIG` is set) with a real
//! HTTP hook server. One scenario per test; they run in parallel on unique names.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{
    configmap, configmap_rule, controlled_by, observed_configmaps, parent_crd, value_of, Env,
};
use kube::api::{DeleteParams, PostParams};
use metacontroller_controllers::composite::{Options, StartError};
use metacontroller_controllers::ApplyStrategy;
use metacontroller_testkit::{assert_no_status_only_syncs, eventually, HookReply, TestCluster};
use serde_json::{json, Value};

/// A hook creating one ConfigMap `<parent>-cm` labelled `app: <spec.app>` with
/// `data.value = spec.value`, unless `spec.replicas` is 0.
fn one_child(_path: &str, req: &Value) -> HookReply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let mut children = Vec::new();
    if parent["spec"]["replicas"].as_i64() != Some(0) {
        children.push(configmap(
            &format!("{name}-cm"),
            json!({"app": parent["spec"]["app"]}),
            json!({"value": parent["spec"]["value"]}),
        ));
    }
    HookReply::json(json!({
        "children": children,
        "status": {"observed": observed_configmaps(req).len()},
    }))
}

fn selector_spec(app: &str, value: &str) -> Value {
    json!({"app": app, "value": value, "selector": {"matchLabels": {"app": app}}})
}

async fn env_with(handler: fn(&str, &Value) -> HookReply) -> Env {
    Env::new(TestCluster::start().await, parent_crd(), handler).await
}

/// The spec of most tests: ConfigMap children updated in place, the sync hook.
fn in_place(env: &Env) -> Value {
    json!({"childResources": [configmap_rule("InPlace")], "hooks": env.sync_hook()})
}

/// [`env_with`] `handler`, the reconciler started with [`in_place`].
async fn started_with(handler: fn(&str, &Value) -> HookReply) -> Env {
    let mut env = env_with(handler).await;
    env.start(in_place(&env)).await;
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_creates_children_with_controller_ref_and_status() {
    let env = started_with(one_child).await;
    let uid = env.create_parent("p", selector_spec("a", "1")).await;
    env.wait_configmap("p-cm", "child created", |cm| {
        controlled_by(cm, &uid) && cm.data.as_ref().unwrap()["value"] == "1"
    })
    .await;
    env.wait_status("p", "status with observedGeneration", |s| {
        *s == json!({"observed": 1, "observedGeneration": 1})
    })
    .await;
    let req = env.hook.last_request("/sync").unwrap();
    assert_eq!(req["finalizing"], false);
    assert_eq!(req["controller"]["metadata"]["name"], env.name.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwanted_children_are_deleted_and_parent_deletion_cascades() {
    let env = started_with(one_child).await;
    let mut spec = selector_spec("a", "1");
    spec["replicas"] = json!(1);
    env.create_parent("p", spec).await;
    env.wait_configmap("p-cm", "child created", |_| true).await;
    env.patch_parent_spec("p", json!({"replicas": 0})).await;
    env.wait_configmap_gone("p-cm").await;

    env.patch_parent_spec("p", json!({"replicas": 1})).await;
    env.wait_configmap("p-cm", "child created again", |_| true)
        .await;
    env.parents()
        .delete("p", &DeleteParams::default())
        .await
        .unwrap();
    // The garbage collector follows the controller ownerReference.
    env.wait_configmap_gone("p-cm").await;
}

/// Starts a controller whose hook always answers `reply`, with `spec` (the sync hook
/// added), on parent `p`; once its first status is written, waits until `more` further
/// hook calls came although nothing changes.
async fn hook_called_again_without_changes(reply: Value, mut spec: Value, more: usize, what: &str) {
    let env_calls = Arc::new(AtomicUsize::new(0));
    let calls = env_calls.clone();
    let cluster = TestCluster::start().await;
    let mut env = Env::new(cluster, parent_crd(), move |_, _| {
        calls.fetch_add(1, Ordering::SeqCst);
        HookReply::json(reply.clone())
    })
    .await;
    spec["hooks"] = env.sync_hook();
    env.start(spec).await;
    env.create_parent("p", selector_spec("a", "1")).await;
    env.wait_status("p", "first status", |s| s["observedGeneration"] == 1)
        .await;
    let before = env_calls.load(Ordering::SeqCst);
    eventually(what, || {
        let calls = env_calls.clone();
        async move { calls.load(Ordering::SeqCst) >= before + more }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resync_after_seconds_resyncs_without_changes() {
    // Nothing changes any more; only the requested resyncs call the hook.
    let reply = json!({"status": {}, "resyncAfterSeconds": 0.1});
    hook_called_again_without_changes(reply, json!({}), 5, "five more syncs").await;
}

/// Upstream raises a `resyncPeriodSeconds` below one second (0 here) to one second: the
/// converged parent is still resynced periodically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resync_period_zero_means_one_second() {
    let spec = json!({"resyncPeriodSeconds": 0});
    let (reply, what) = (json!({"status": {}}), "two periodic resyncs");
    hook_called_again_without_changes(reply, spec, 2, what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_without_status_subresource_is_refused() {
    let cluster = TestCluster::start().await;
    let mut env = Env::new(
        cluster,
        parent_crd().without_status_subresource(),
        one_child,
    )
    .await;
    let spec = json!({"childResources": [configmap_rule("InPlace")], "hooks": env.sync_hook()});
    let err = env
        .try_start(spec, Options::default())
        .await
        .expect_err("start must fail");
    assert!(matches!(err, StartError::NoStatusSubresource { .. }));
    assert!(
        err.to_string()
            .contains("does not have subresource 'Status' enabled"),
        "{err}"
    );
    // No reconciler runs (start returned an error, not a handle): there is no sync to
    // wait for or to rule out.
}

/// Echoes the observed ConfigMaps back as desired (so adopted children are kept).
fn echo_children(_path: &str, req: &Value) -> HookReply {
    let children: Vec<Value> = req["children"]["ConfigMap.v1"]
        .as_object()
        .map(|m| {
            m.values()
                .map(|c| {
                    configmap(
                        c["metadata"]["name"].as_str().unwrap_or_default(),
                        c["metadata"]["labels"].clone(),
                        c["data"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    HookReply::json(json!({"children": children}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matching_orphan_is_adopted_and_relabelled_child_is_orphaned() {
    let env = started_with(echo_children).await;
    let uid = env.create_parent("p", selector_spec("a", "1")).await;
    env.wait_status("p", "first sync", |s| s["observedGeneration"] == 1)
        .await;
    let orphan: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "orphan", "labels": {"app": "a"}}, "data": {"k": "v"}
    }))
    .unwrap();
    env.configmaps()
        .create(&PostParams::default(), &orphan)
        .await
        .unwrap();
    let stranger: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "stranger", "labels": {"app": "b"}}
    }))
    .unwrap();
    env.configmaps()
        .create(&PostParams::default(), &stranger)
        .await
        .unwrap();
    env.wait_configmap("orphan", "orphan adopted", |cm| controlled_by(cm, &uid))
        .await;
    eventually("the hook sees the adopted child", || async {
        env.hook
            .last_request("/sync")
            .is_some_and(|r| observed_configmaps(&r) == ["orphan"])
    })
    .await;

    // Relabel it out of the selector: released (our ownerReference removed), not deleted.
    env.patch_configmap(
        "orphan",
        json!({"metadata": {"labels": {"app": "elsewhere"}}}),
    )
    .await;
    env.wait_configmap("orphan", "child orphaned", |cm| {
        cm.metadata
            .owner_references
            .iter()
            .flatten()
            .all(|r| r.uid != uid)
    })
    .await;
    eventually("the hook no longer sees it", || async {
        env.hook
            .last_request("/sync")
            .is_some_and(|r| observed_configmaps(&r).is_empty())
    })
    .await;
    assert!(env.configmap("orphan").await.is_some());
    let stranger = env.configmap("stranger").await.unwrap();
    assert!(
        stranger.metadata.owner_references.is_none(),
        "non-matching object left alone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_selector_labels_children_with_controller_uid() {
    let mut env = env_with(one_child).await;
    env.start(json!({
        "generateSelector": true,
        "childResources": [configmap_rule("InPlace")],
        "hooks": env.sync_hook(),
    }))
    .await;
    // No spec.selector: the generated one is used.
    let uid = env
        .create_parent("p", json!({"app": "a", "value": "1"}))
        .await;
    env.wait_configmap("p-cm", "child with controller-uid", |cm| {
        let labels = cm.metadata.labels.clone().unwrap_or_default();
        controlled_by(cm, &uid)
            && labels.get("controller-uid") == Some(&uid)
            && labels.get("app").map(String::as_str) == Some("a")
    })
    .await;
    env.wait_status("p", "status", |s| s["observed"] == 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desired_child_outside_the_selector_is_refused() {
    let env = started_with(one_child).await;
    let mut spec = selector_spec("a", "1");
    spec["app"] = json!("not-a");
    env.create_parent("p", spec).await;
    eventually("a few sync attempts", || async {
        env.hook.calls("/sync") >= 2
    })
    .await;
    assert!(env.configmap("p-cm").await.is_none());
    assert!(env.parent_value("p").await.unwrap().get("status").is_none());
}

/// Finalize hook: keeps `finalized: false` for the first two calls, then true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalize_hook_runs_before_the_parent_goes_and_finalizer_follows_the_spec() {
    let finalize_calls = Arc::new(AtomicUsize::new(0));
    let counter = finalize_calls.clone();
    let cluster = TestCluster::start().await;
    let mut env = Env::new(cluster, parent_crd(), move |path, req| {
        if path == "/finalize" {
            assert_eq!(req["finalizing"], true);
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            return HookReply::json(json!({
                "status": {"finalizeCalls": n},
                "finalized": n >= 3,
                "resyncAfterSeconds": 0.1,
            }));
        }
        one_child(path, req)
    })
    .await;
    let hooks = json!({
        "sync": {"webhook": {"url": env.hook.url("/sync")}},
        "finalize": {"webhook": {"url": env.hook.url("/finalize")}},
    });
    env.start(json!({"childResources": [configmap_rule("InPlace")], "hooks": hooks}))
        .await;
    let finalizer = format!("metacontroller.io/compositecontroller-{}", env.name);
    env.create_parent("p", selector_spec("a", "1")).await;
    eventually("finalizer added", || async {
        env.parent_value("p")
            .await
            .is_some_and(|p| p["metadata"]["finalizers"] == json!([finalizer.clone()]))
    })
    .await;
    env.wait_configmap("p-cm", "child", |_| true).await;
    assert_eq!(finalize_calls.load(Ordering::SeqCst), 0);

    env.parents()
        .delete("p", &DeleteParams::default())
        .await
        .unwrap();
    eventually("parent gone after finalized", || async {
        env.parent_value("p").await.is_none()
    })
    .await;
    assert!(finalize_calls.load(Ordering::SeqCst) >= 3);

    // Removing the finalize hook from the spec removes the finalizer from parents.
    env.create_parent("q", selector_spec("a", "1")).await;
    eventually("finalizer on q", || async {
        env.parent_value("q")
            .await
            .is_some_and(|p| p["metadata"]["finalizers"] == json!([finalizer.clone()]))
    })
    .await;
    env.start(in_place(&env)).await;
    eventually("finalizer removed from q", || async {
        env.parent_value("q")
            .await
            .is_some_and(|p| p["metadata"].get("finalizers").is_none())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_without_finalize_hook_gets_no_finalizer_and_children_are_collected() {
    let env = started_with(one_child).await;
    env.create_parent("p", selector_spec("a", "1")).await;
    env.wait_configmap("p-cm", "child", |_| true).await;
    assert!(env.parent_value("p").await.unwrap()["metadata"]
        .get("finalizers")
        .is_none());
    env.parents()
        .delete("p", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_configmap_gone("p-cm").await;
    assert!(env.parent_value("p").await.is_none());
}

/// Runs one update strategy: create, change `spec.value`, return (old uid, new ConfigMap).
async fn change_value_with(method: &str) -> (String, Env) {
    let cluster = TestCluster::start().await;
    if method.starts_with("Rolling") {
        // Rolling methods keep ControllerRevisions.
        cluster.install_metacontroller_crds().await;
    }
    let mut env = Env::new(cluster, parent_crd(), one_child).await;
    env.start(json!({"childResources": [configmap_rule(method)], "hooks": env.sync_hook()}))
        .await;
    env.create_parent("p", selector_spec("a", "1")).await;
    env.wait_configmap("p-cm", "child", |_| true).await;
    let old_uid = env.configmap("p-cm").await.unwrap().metadata.uid.unwrap();
    env.patch_parent_spec("p", json!({"value": "2"})).await;
    env.wait_status("p", "synced generation 2", |s| s["observedGeneration"] == 2)
        .await;
    (old_uid, env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_strategy_on_delete_never_updates() {
    let (old_uid, env) = change_value_with("OnDelete").await;
    env.settle().await;
    let cm = env.configmap("p-cm").await.unwrap();
    assert_eq!(value_of(&cm), "1");
    assert_eq!(cm.metadata.uid.unwrap(), old_uid);
    // Deleted by someone else: recreated with the new content.
    env.configmaps()
        .delete("p-cm", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_configmap("p-cm", "recreated with value 2", |cm| {
        value_of(cm) == "2" && cm.metadata.uid.as_deref() != Some(old_uid.as_str())
    })
    .await;
}

async fn assert_recreated(method: &str) {
    let (old_uid, env) = change_value_with(method).await;
    env.wait_configmap("p-cm", "recreated with value 2", |cm| {
        value_of(cm) == "2" && cm.metadata.uid.as_deref() != Some(old_uid.as_str())
    })
    .await;
}

async fn assert_updated_in_place(method: &str) {
    let (old_uid, env) = change_value_with(method).await;
    env.wait_configmap("p-cm", "updated in place", |cm| {
        value_of(cm) == "2" && cm.metadata.uid.as_deref() == Some(old_uid.as_str())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_strategy_recreate_deletes_then_creates() {
    assert_recreated("Recreate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_strategy_in_place_updates() {
    assert_updated_in_place("InPlace").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_strategy_rolling_recreate_recreates_the_single_child() {
    assert_recreated("RollingRecreate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_strategy_rolling_in_place_updates_the_single_child() {
    assert_updated_in_place("RollingInPlace").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scoped_parent_with_namespaced_children() {
    let cluster = TestCluster::start().await;
    let mut env = Env::new(cluster, parent_crd().cluster_scoped(), |_, req| {
        let parent = &req["parent"];
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        let mut child = configmap(&format!("{name}-cm"), json!({"app": "a"}), json!({}));
        // Children of a cluster-scoped parent name their namespace.
        child["metadata"]["namespace"] = parent["spec"]["targetNamespace"].clone();
        HookReply::json(
            json!({"children": [child], "status": {"n": observed_configmaps(req).len()}}),
        )
    })
    .await;
    env.start(in_place(&env)).await;
    let mut spec = selector_spec("a", "1");
    spec["targetNamespace"] = json!(env.ns);
    let uid = env.create_parent(&env.ns.clone(), spec).await;
    let name = format!("{}-cm", env.ns);
    env.wait_configmap(&name, "namespaced child", |cm| controlled_by(cm, &uid))
        .await;
    env.wait_status(&env.ns.clone(), "status sees the child", |s| s["n"] == 1)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scoped_parent_child_without_namespace_is_refused() {
    let cluster = TestCluster::start().await;
    let mut env = Env::new(cluster, parent_crd().cluster_scoped(), one_child).await;
    env.start(in_place(&env)).await;
    let name = env.ns.clone();
    env.create_parent(&name, selector_spec("a", "1")).await;
    eventually("a few sync attempts", || async {
        env.hook.calls("/sync") >= 2
    })
    .await;
    // As upstream, only that child is skipped: the status is still written.
    env.wait_status(&name, "status despite the refused child", |s| {
        s["observedGeneration"] == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_status_changes_does_not_resync_on_own_status_writes() {
    let counter = Arc::new(AtomicUsize::new(0));
    let calls = counter.clone();
    let cluster = TestCluster::start().await;
    // An anti-pattern hook: a different status every call. Without ignoreStatusChanges each
    // status write triggers the next sync.
    let mut env = Env::new(cluster, parent_crd(), move |_, _| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        HookReply::json(json!({"status": {"n": n}}))
    })
    .await;
    let mut spec = json!({"hooks": env.sync_hook()});
    spec["parentResource"] = json!({
        "apiVersion": env.parent.api_version(), "resource": env.parent.plural(),
        "ignoreStatusChanges": true,
    });
    env.start(spec).await;
    env.create_parent("p", selector_spec("a", "1")).await;
    env.wait_status("p", "status written", |s| s["observedGeneration"] == 1)
        .await;
    // The reconciler has been handed the event of its own status write, and a later sync
    // (the barrier) has started, so a sync that event caused would have come before it.
    env.wait_cache_caught_up("p").await;
    env.sync_barrier("p").await;
    // A sync caused by a status write sees the parent changed in its status only.
    let parents: Vec<Value> = env
        .hook
        .requests("/sync")
        .into_iter()
        .map(|r| r["parent"].clone())
        .collect();
    assert_no_status_only_syncs(&parents);
    assert!(counter.load(Ordering::SeqCst) >= 2);
    // A spec change still syncs.
    env.patch_parent_spec("p", json!({"value": "2"})).await;
    env.wait_status("p", "generation 2", |s| s["observedGeneration"] == 2)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_creates_updates_and_keeps_foreign_fields() {
    let mut env = env_with(one_child).await;
    env.try_start(
        json!({"childResources": [configmap_rule("InPlace")], "hooks": env.sync_hook()}),
        Options {
            workers: 2,
            apply_strategy: ApplyStrategy::ServerSideApply {
                field_manager: "mc-test".into(),
            },
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let uid = env.create_parent("p", selector_spec("a", "1")).await;
    env.wait_configmap("p-cm", "applied child", |cm| {
        controlled_by(cm, &uid) && value_of(cm) == "1"
    })
    .await;
    let cm = env.configmap("p-cm").await.unwrap();
    assert!(cm
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .any(
            |m| m.manager.as_deref() == Some("mc-test") && m.operation.as_deref() == Some("Apply")
        ));
    // Someone else adds a label: it survives our next apply.
    env.patch_configmap("p-cm", json!({"metadata": {"labels": {"foreign": "yes"}}}))
        .await;
    env.patch_parent_spec("p", json!({"value": "2"})).await;
    env.wait_configmap("p-cm", "updated by apply", |cm| {
        value_of(cm) == "2"
            && cm
                .metadata
                .labels
                .as_ref()
                .unwrap()
                .get("foreign")
                .map(String::as_str)
                == Some("yes")
    })
    .await;
    // Converged: a resync sends nothing.
    if let Some(control) = env.cluster.control() {
        env.settle().await;
        control.reset_counts();
        env.patch_parent_spec("p", json!({"unrelated": "x"})).await;
        env.wait_status("p", "generation 3", |s| s["observedGeneration"] == 3)
            .await;
        env.settle().await;
        let counts = control.request_counts();
        let child_writes: u64 = counts
            .iter()
            .filter(|((verb, res), _)| {
                res == "configmaps" && verb != "get" && verb != "list" && verb != "watch"
            })
            .map(|(_, n)| *n)
            .sum();
        assert_eq!(child_writes, 0, "{counts:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_held_by_a_finalizer_does_not_block_the_parent() {
    let env = started_with(one_child).await;
    let mut spec = selector_spec("a", "1");
    spec["replicas"] = json!(1);
    env.create_parent("p", spec).await;
    env.wait_configmap("p-cm", "child", |_| true).await;
    env.patch_configmap(
        "p-cm",
        json!({"metadata": {"finalizers": ["example.com/hold"]}}),
    )
    .await;
    // The child is no longer wanted: its deletion is accepted but the finalizer keeps it.
    env.patch_parent_spec("p", json!({"replicas": 0})).await;
    env.wait_configmap("p-cm", "child being deleted", |cm| {
        cm.metadata.deletion_timestamp.is_some()
    })
    .await;
    // The parent keeps syncing meanwhile.
    env.patch_parent_spec("p", json!({"value": "3"})).await;
    env.wait_status("p", "generation 3 synced", |s| s["observedGeneration"] == 3)
        .await;
    env.patch_configmap("p-cm", json!({"metadata": {"finalizers": null}}))
        .await;
    env.wait_configmap_gone("p-cm").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_leaving_the_label_selector_is_finalized_and_released() {
    let cluster = TestCluster::start().await;
    let mut env = Env::new(cluster, parent_crd(), |path, req| {
        if path == "/finalize" {
            return HookReply::json(json!({"finalized": true}));
        }
        one_child(path, req)
    })
    .await;
    let mut spec = json!({
        "childResources": [configmap_rule("InPlace")],
        "hooks": {
            "sync": {"webhook": {"url": env.hook.url("/sync")}},
            "finalize": {"webhook": {"url": env.hook.url("/finalize")}},
        },
    });
    spec["parentResource"] = json!({
        "apiVersion": env.parent.api_version(), "resource": env.parent.plural(),
        "labelSelector": {"matchLabels": {"managed": "yes"}},
    });
    env.start(spec).await;
    let finalizer = format!("metacontroller.io/compositecontroller-{}", env.name);

    // Never selected: never synced.
    env.create_parent("ignored", selector_spec("b", "1")).await;
    env.create_parent("p", selector_spec("a", "1")).await;
    env.patch_parent("p", json!({"metadata": {"labels": {"managed": "yes"}}}))
        .await;
    env.wait_configmap("p-cm", "child of the selected parent", |_| true)
        .await;
    eventually("finalizer added", || async {
        env.parent_value("p")
            .await
            .is_some_and(|p| p["metadata"]["finalizers"] == json!([finalizer.clone()]))
    })
    .await;
    assert_eq!(env.hook.calls("/finalize"), 0);

    env.patch_parent("p", json!({"metadata": {"labels": {"managed": "no"}}}))
        .await;
    eventually("finalizer removed after finalize", || async {
        env.parent_value("p")
            .await
            .is_some_and(|p| p["metadata"].get("finalizers").is_none())
    })
    .await;
    assert!(env.hook.calls("/finalize") >= 1);
    let req = env.hook.last_request("/finalize").unwrap();
    assert_eq!(req["finalizing"], true);
    env.wait_configmap_gone("p-cm").await;
    assert!(env.configmap("ignored-cm").await.is_none());
    assert!(env
        .hook
        .requests("/sync")
        .iter()
        .all(|r| r["parent"]["metadata"]["name"] != "ignored"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_hook_sees_children_by_namespace_and_name() {
    let mut env = env_with(one_child).await;
    let hooks = json!({"sync": {"version": "v2", "webhook": {"url": env.hook.url("/sync")}}});
    env.start(json!({"childResources": [configmap_rule("InPlace")], "hooks": hooks}))
        .await;
    env.create_parent("p", selector_spec("a", "1")).await;
    env.wait_configmap("p-cm", "child", |_| true).await;
    let key = format!("{}/p-cm", env.ns);
    eventually("v2 children key", || async {
        env.hook
            .last_request("/sync")
            .is_some_and(|r| r["children"]["ConfigMap.v1"].get(&key).is_some())
    })
    .await;
}
