//! Load harness (ignored by default; it reports figures, it asserts only the zero-write
//! resync): N parents (`LOAD_PARENTS`, default 1000) × 3 ConfigMap children against the
//! embedded API server with a local hook answering after 1 ms. Prints: time to converge from
//! a cold start, API requests and hook calls per parent, peak RSS of the process (embedded
//! server included), then a full resync (controller restarted: every parent relisted and
//! synced) with its writes (must be 0) and duration.
//!
//! `cargo test -p metacontroller-controllers --test load_harness -- --ignored --nocapture`

mod common;

use std::time::{Duration, Instant};

use common::{configmap, configmap_rule, observed_configmaps, parent_crd, Env};
use futures::stream::{self, StreamExt};
use kube::api::ListParams;
use metacontroller_controllers::composite::Options;
use metacontroller_testkit::{eventually_within, HookReply, TestCluster};
use serde_json::{json, Value};

fn three_children(_path: &str, req: &Value) -> HookReply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let children: Vec<Value> = (0..3)
        .map(|i| {
            configmap(
                &format!("{name}-{i}"),
                json!({"app": "load"}),
                json!({"value": parent["spec"]["value"]}),
            )
        })
        .collect();
    HookReply::json(
        json!({"children": children, "status": {"children": observed_configmaps(req).len()}}),
    )
    .delayed(Duration::from_millis(1))
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

async fn converged(env: &Env, n: usize) -> bool {
    let Ok(list) = env.parents().list(&ListParams::default()).await else {
        return false;
    };
    list.items.len() == n && list.items.iter().all(|p| p.data["status"]["children"] == 3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load harness: run explicitly"]
async fn load_parents_with_three_children() {
    let n: usize = std::env::var("LOAD_PARENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let mut env = Env::new(TestCluster::embedded().await, parent_crd(), three_children).await;
    let control = env.cluster.control().expect("embedded");
    let spec = json!({"childResources": [configmap_rule("InPlace")], "hooks": env.sync_hook()});
    // Parents exist before the controller starts: a cold start.
    let creating = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let env = &env;
            async move {
                env.create_parent(
                    &format!("p{i}"),
                    json!({"value": "1", "selector": {"matchLabels": {"app": "load"}}}),
                )
                .await;
            }
        })
        .await;
    println!(
        "creating {n} parents (32 concurrent requests): {:?}",
        creating.elapsed()
    );
    control.reset_counts();
    env.hook.clear_calls();
    let started = Instant::now();
    env.try_start(spec.clone(), Options::default())
        .await
        .unwrap();
    eventually_within("all parents converged", Duration::from_secs(1800), || {
        let env = &env;
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            converged(env, n).await
        }
    })
    .await;
    let converge = started.elapsed();
    env.settle().await;
    let requests: u64 = control.request_counts().values().sum();
    let writes = control.writes();
    let hook_calls = env.hook.calls("/sync");
    println!("parents: {n} x 3 ConfigMap children, hook delay 1 ms, 5 workers");
    println!("cold start to converged: {converge:?}");
    println!(
        "API requests: {requests} ({:.2}/parent), writes {writes} ({:.2}/parent)",
        requests as f64 / n as f64,
        writes as f64 / n as f64
    );
    println!(
        "hook calls: {hook_calls} ({:.2}/parent)",
        hook_calls as f64 / n as f64
    );
    println!(
        "peak RSS (process, embedded API server included): {} MiB",
        peak_rss_kib() / 1024
    );

    // Full resync: a restarted controller relists and syncs every parent.
    env.stop().await;
    control.reset_counts();
    env.hook.clear_calls();
    let started = Instant::now();
    env.try_start(spec, Options::default()).await.unwrap();
    eventually_within("every parent resynced", Duration::from_secs(1800), || {
        let env = &env;
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            env.hook.calls("/sync") >= n
        }
    })
    .await;
    let resync = started.elapsed();
    env.settle().await;
    println!(
        "full resync: {resync:?}, hook calls {}, writes {}",
        env.hook.calls("/sync"),
        control.writes()
    );
    assert_eq!(control.writes(), 0, "{:?}", control.request_counts());
}

/// Baseline for the harness: the same writes without the controller (owned ConfigMap creates
/// and status updates straight to the API server), to tell controller cost from API cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load harness: run explicitly"]
async fn load_baseline_writes_without_controller() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;
    let n: usize = std::env::var("LOAD_PARENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let env = Env::new(TestCluster::embedded().await, parent_crd(), three_children).await;
    let mut uids = Vec::new();
    for i in 0..n {
        uids.push(
            env.create_parent(&format!("p{i}"), json!({"value": "1"}))
                .await,
        );
    }
    let started = Instant::now();
    stream::iter(0..n * 3)
        .for_each_concurrent(5, |j| {
            let env = &env;
            let uid = uids[j / 3].clone();
            let api_version = env.parent.api_version();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("p{}-{}", j / 3, j % 3),
                        "ownerReferences": [{"apiVersion": api_version, "kind": "Parent",
                            "name": format!("p{}", j / 3), "uid": uid,
                            "controller": true, "blockOwnerDeletion": true}]},
                    "data": {"value": "1"}
                }))
                .unwrap();
                env.configmaps()
                    .create(&PostParams::default(), &cm)
                    .await
                    .unwrap();
            }
        })
        .await;
    println!(
        "{} owned ConfigMap creates (5 concurrent): {:?}",
        n * 3,
        started.elapsed()
    );
}
