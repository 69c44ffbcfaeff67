//! The child writes of one sync go out together (bounded by `child_write_concurrency`), the
//! parent's status after all of them, and a 409 Conflict in the middle of such a batch stops
//! the sync's further writes without losing the ones already sent. These tests observe the
//! embedded API server (in-flight gauges, injected latency and conflicts, event history);
//! against a real cluster they are skipped.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{configmap, configmap_rule, observed_configmaps, parent_crd, value_of, Env};
use metacontroller_controllers::composite::Options;
use metacontroller_testkit::{eventually, Control, Fault, HookReply, TestCluster};
use serde_json::{json, Value};

/// `n` ConfigMaps carrying `spec.value`; status counts the observed ones.
fn children(n: usize, req: &Value) -> HookReply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let children: Vec<Value> = (0..n)
        .map(|i| {
            configmap(
                &format!("{name}-{i:02}"),
                json!({}),
                json!({"value": parent["spec"]["value"]}),
            )
        })
        .collect();
    HookReply::json(
        json!({"children": children, "status": {"children": observed_configmaps(req).len()}}),
    )
}

/// Starts the reconciler (2 workers, generated selector, ConfigMap children in place) with
/// `concurrency` child writes of one sync in flight at most.
async fn start_bounded(env: &mut Env, concurrency: usize) {
    env.try_start(
        json!({"generateSelector": true,
               "childResources": [configmap_rule("InPlace")],
               "hooks": env.sync_hook()}),
        Options {
            workers: 2,
            child_write_concurrency: concurrency,
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

/// A parent with 12 children created while every create takes 300 ms; returns the peak of
/// creates in flight at once, after checking that the parent's first status write came
/// after all 12 creates.
async fn peak_creates(concurrency: usize) -> Option<usize> {
    if metacontroller_testkit::skip_on_real_cluster("peak_creates (300 ms injected create latency)")
    {
        return None;
    }
    let mut env = Env::new(TestCluster::embedded().await, parent_crd(), |_, req| {
        children(12, req)
    })
    .await;
    let control = env.cluster.control()?;
    start_bounded(&mut env, concurrency).await;
    control.inject(Fault::latency(
        Some("create"),
        Some("configmaps"),
        12,
        Duration::from_millis(300),
    ));
    control.reset_counts();
    env.create_parent("p", json!({"value": "a"})).await;
    env.wait_status("p", "12 children observed", |s| s["children"] == 12)
        .await;
    assert_eq!(control.requests("create", "configmaps"), 12);
    // Status after children: in the server's history every ConfigMap was added before the
    // parent's first change (its first status write).
    let history = control.history();
    let last_child = history
        .iter()
        .filter(|e| e.resource == "configmaps" && e.namespace == env.ns)
        .filter(|e| e.event_type == "ADDED" && e.name.starts_with("p-"))
        .map(|e| e.resource_version)
        .max()
        .expect("children in the history");
    let first_status = history
        .iter()
        .filter(|e| e.resource == env.parent.plural() && e.event_type == "MODIFIED")
        .filter(|e| e.namespace == env.ns && e.name == "p")
        .map(|e| e.resource_version)
        .min()
        .expect("a status write in the history");
    assert!(
        first_status > last_child,
        "the status was written (rv {first_status}) before the last child (rv {last_child})"
    );
    Some(control.peak_in_flight_writes("create", "configmaps"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_writes_of_one_sync_overlap_up_to_the_bound() {
    let Some(peak) = peak_creates(8).await else {
        return;
    };
    assert_eq!(peak, 8, "12 slow creates with a bound of 8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_of_one_writes_one_child_at_a_time() {
    let Some(peak) = peak_creates(1).await else {
        return;
    };
    assert_eq!(peak, 1);
}

/// An environment whose hook holds its answer for 2 s on the second sync after the spec
/// changes to `value: b`, so the test can count what the first (conflicting) sync sent
/// before anything else is sent; returns the count of syncs after the change too.
async fn env_holding_the_second_sync_after_the_change() -> (Env, Arc<AtomicUsize>) {
    let after_change = Arc::new(AtomicUsize::new(0));
    let counter = after_change.clone();
    let env = Env::new(
        TestCluster::embedded().await,
        parent_crd(),
        move |_, req| {
            let reply = children(12, req);
            if req["parent"]["spec"]["value"] == "b" && counter.fetch_add(1, Ordering::SeqCst) == 1
            {
                return reply.delayed(Duration::from_secs(2));
            }
            reply
        },
    )
    .await;
    (env, after_change)
}

/// The first ConfigMap update answers 409 at once; the next ones take 300 ms, so three of
/// them are in flight when the conflict comes back.
fn inject_conflict_among_slow_updates(control: &Control) {
    control.reset_counts();
    control.inject(Fault::status(Some("update"), Some("configmaps"), 1, 409));
    control.inject(Fault::latency(
        Some("update"),
        Some("configmaps"),
        100,
        Duration::from_millis(300),
    ));
}

/// What the conflicting sync sent: 4 updates (its bound) and no more, three of them
/// together, and the parent's status after them.
fn assert_the_conflicting_sync_stopped(env: &Env, control: &Control) {
    assert_eq!(
        control.requests("update", "configmaps"),
        4,
        "the conflicting sync sends 4 updates (its bound) and no more"
    );
    // The three slow ones were on their way together (the conflict may come back before
    // the last of the four arrives).
    assert!(control.peak_in_flight_writes("update", "configmaps") >= 3);
    assert_eq!(
        control.requests("update", &format!("{}/status", env.parent.plural())),
        1,
        "the status is written after a conflict too"
    );
}

/// Everything converges; each child was changed exactly once: the three written next to the
/// conflict were kept, not written again. (A later sync may still meet a 409 of its own
/// when the cache lags, which is retried like any conflict, so requests are not counted
/// exactly.)
async fn assert_each_child_changed_once(env: &Env, control: &Control) {
    for i in 0..12 {
        env.wait_configmap(&format!("p-{i:02}"), "updated child", |c| {
            value_of(c) == "b"
        })
        .await;
    }
    env.settle().await;
    let mut changed: Vec<String> = control
        .history()
        .into_iter()
        .filter(|e| e.resource == "configmaps" && e.namespace == env.ns)
        .filter(|e| e.event_type == "MODIFIED")
        .map(|e| e.name)
        .collect();
    changed.sort();
    let expected: Vec<String> = (0..12).map(|i| format!("p-{i:02}")).collect();
    assert_eq!(changed, expected);
}

/// A 409 Conflict on one update while three others are on their way: no further update is
/// sent by that sync, the three complete and are kept (never written again), the status is
/// still written, and the requeued sync updates the children still behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflict_in_a_concurrent_batch_stops_the_sync_and_loses_nothing() {
    if metacontroller_testkit::skip_on_real_cluster(
        "conflict_in_a_concurrent_batch_stops_the_sync_and_loses_nothing",
    ) {
        return;
    }
    let (mut env, after_change) = env_holding_the_second_sync_after_the_change().await;
    let Some(control) = env
        .cluster
        .control_or_skip("conflict_in_a_concurrent_batch_stops_the_sync_and_loses_nothing")
    else {
        return;
    };
    start_bounded(&mut env, 4).await;
    env.create_parent("p", json!({"value": "a"})).await;
    env.wait_status("p", "12 children observed", |s| s["children"] == 12)
        .await;
    env.settle().await;

    inject_conflict_among_slow_updates(&control);
    env.patch_parent_spec("p", json!({"value": "b"})).await;
    // The requeued sync has called the hook: the conflicting sync is over, writes included.
    eventually("the sync after the conflict", || async {
        after_change.load(Ordering::SeqCst) >= 2
    })
    .await;
    assert_the_conflicting_sync_stopped(&env, &control);
    assert_each_child_changed_once(&env, &control).await;
}
