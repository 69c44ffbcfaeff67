//! CompositeController under load and faults: zero writes on a converged resync, coalescing
//! of event bursts, and convergence through injected API errors. Counter and fault
//! assertions need the embedded API server; against a real cluster
//! (`METACONTROLLER_E2E_KUBECONFIG`) those parts are skipped.

mod common;

use std::time::Duration;

use common::{configmap_rule, observed_configmaps, parent_crd, value_configmaps, value_of, Env};
use futures::future::join_all;
use kube::api::{ListParams, Patch, PatchParams};
use metacontroller_testkit::{eventually, eventually_within, Fault, HookReply, TestCluster};
use serde_json::{json, Value};

/// Three ConfigMaps per parent carrying `spec.value`; status counts observed children.
fn three_children(_path: &str, req: &Value) -> HookReply {
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let children = value_configmaps(&format!("{name}-"), 3, json!({"app": "load"}), req);
    HookReply::json(
        json!({"children": children, "status": {"children": observed_configmaps(req).len()}}),
    )
}

fn spec(value: &str) -> Value {
    json!({"value": value, "selector": {"matchLabels": {"app": "load"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resync_of_100_converged_parents_writes_nothing() {
    let mut env = Env::new(TestCluster::start().await, parent_crd(), three_children).await;
    env.start(json!({
        "childResources": [configmap_rule("InPlace")],
        "resyncPeriodSeconds": 1,
        "hooks": env.sync_hook(),
    }))
    .await;
    let started = std::time::Instant::now();
    join_all((0..100).map(|i| env.create_parent_owned(format!("p{i}"), spec("1")))).await;
    eventually_within("100 parents converged", Duration::from_secs(90), || async {
        let list = env.parents().list(&ListParams::default()).await.unwrap();
        list.items.len() == 100
            && list
                .items
                .iter()
                .all(|p| p.data["status"] == json!({"children": 3, "observedGeneration": 1}))
    })
    .await;
    eprintln!(
        "100 parents x 3 children converged in {:?}",
        started.elapsed()
    );
    let Some(control) = env
        .cluster
        .control_or_skip("resync_of_100_converged_parents_writes_nothing")
    else {
        return;
    };
    env.settle().await;
    control.reset_counts();
    let before = env.hook.calls("/sync");
    // Two full resync rounds.
    eventually_within("two resync rounds", Duration::from_secs(60), || async {
        env.hook.calls("/sync") >= before + 200
    })
    .await;
    assert_eq!(control.writes(), 0, "{:?}", control.request_counts());
}

/// The burst test's hook answer time.
const HOOK_DELAY: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_of_50_events_on_one_parent_is_coalesced() {
    let mut env = Env::new(TestCluster::start().await, parent_crd(), |path, req| {
        // Slower than a real API server takes to apply one update of one object (updates of
        // one object are serialized there), so events do arrive while a sync runs.
        three_children(path, req).delayed(HOOK_DELAY)
    })
    .await;
    env.start(json!({"childResources": [configmap_rule("InPlace")], "hooks": env.sync_hook()}))
        .await;
    env.create_parent("p", spec("1")).await;
    env.wait_status("p", "converged", |s| s["children"] == 3)
        .await;
    env.settle().await;
    let before = env.hook.calls("/sync");
    // All at once: sent one after the other, the events of a busy real API server arrive
    // slower than a sync takes, and there is nothing to coalesce.
    let parents = env.parents();
    let sent = std::time::Instant::now();
    join_all((0..50).map(|i| {
        let parents = parents.clone();
        async move {
            parents
                .patch(
                    "p",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {"burst": i.to_string()}}})),
                )
                .await
                .unwrap()
        }
    }))
    .await;
    let span = sent.elapsed();
    let last = parents.get("p").await.unwrap();
    let last = last.metadata.annotations.unwrap_or_default()["burst"].clone();
    env.settle().await;
    eventually("the last event synced", || async {
        env.hook
            .last_request("/sync")
            .is_some_and(|r| r["parent"]["metadata"]["annotations"]["burst"] == last.as_str())
    })
    .await;
    let calls = env.hook.calls("/sync") - before;
    // Coalesced: while one sync runs, every event that arrives becomes one more sync at most,
    // so the hook is called at most once per hook answer time over the events' span (a
    // loaded server spreads 50 updates of one object over seconds), plus the sync in flight
    // and the one after the last event. Without coalescing there is one call per event.
    let windows = (span.as_secs_f64() / HOOK_DELAY.as_secs_f64()).ceil() as usize;
    eprintln!("50 parent events over {span:?} -> {calls} hook calls");
    assert!(
        calls < 50 && calls <= windows + 2,
        "{calls} hook calls for 50 events over {span:?} (at most {} when coalesced)",
        windows + 2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_conflicts_and_server_errors_converge_without_duplicates() {
    let mut env = Env::new(TestCluster::start().await, parent_crd(), three_children).await;
    env.start(json!({"childResources": [configmap_rule("InPlace")], "hooks": env.sync_hook()}))
        .await;
    if let Some(control) = env.cluster.control() {
        control.inject(Fault::status(Some("create"), Some("configmaps"), 2, 500));
        control.inject(Fault::status(
            Some("update"),
            Some("parents/status"),
            2,
            409,
        ));
    }
    for i in 0..5 {
        env.create_parent(&format!("p{i}"), spec("1")).await;
    }
    eventually("all children created", || async {
        env.child_configmaps().await.len() == 15
    })
    .await;
    if let Some(control) = env.cluster.control() {
        control.inject(Fault::status(Some("update"), Some("configmaps"), 4, 409));
        control.inject(Fault::status(Some("update"), Some("configmaps"), 2, 500));
    }
    for i in 0..5 {
        env.patch_parent_spec(&format!("p{i}"), json!({"value": "2"}))
            .await;
    }
    eventually("all children updated", || async {
        let items = env.child_configmaps().await;
        items.len() == 15 && items.iter().all(|c| value_of(c) == "2")
    })
    .await;
    for i in 0..5 {
        env.wait_status(&format!("p{i}"), "status converged", |s| {
            *s == json!({"children": 3, "observedGeneration": 2})
        })
        .await;
    }
    env.settle().await;
    let items = env.child_configmaps().await;
    assert_eq!(items.len(), 15, "no duplicate children");
}
