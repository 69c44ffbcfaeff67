//! `--workers` bounds the hook calls one controller makes at once; a sync whose hook has
//! answered gives its worker up while its API writes are in flight, so up to
//! `--parents-in-flight` (default 64) parents wait on the API server together. Upstream holds
//! a worker for the whole sync (`--parents-in-flight` equal to `--workers` restores that).
//! Observed on the embedded API server, whose ConfigMap creates are slowed by an injected
//! latency so that the writes of different parents are seen in flight together (skipped on a
//! real cluster, which cannot be slowed so).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, eventually_within, parent_name, unique_name, ControllerProcess, Fault,
    HookReply, HookServer, TestCluster,
};
use serde_json::json;

const PARENTS: usize = 6;
const HOOK_DELAY: Duration = Duration::from_millis(200);
const CREATE_LATENCY: Duration = Duration::from_millis(1500);

/// What one run saw.
struct Seen {
    /// The most ConfigMap creates in flight at once (each parent has one child).
    peak_creates: usize,
    /// The shortest time between two hook calls' arrivals; a call is answered after
    /// [`HOOK_DELAY`], so anything shorter means two calls overlapped.
    shortest_gap: Duration,
}

/// Runs the binary with `extra` flags on [`PARENTS`] parents that exist before it starts,
/// each wanting one ConfigMap whose create takes [`CREATE_LATENCY`].
async fn run(extra: &[&str]) -> Option<Seen> {
    if metacontroller_testkit::skip_on_real_cluster("parents_in_flight (injected create latency)") {
        return None;
    }
    let cluster = TestCluster::embedded().await;
    let control = cluster.control()?;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("flight").await;
    let arrivals = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let hook = HookServer::start({
        let arrivals = arrivals.clone();
        move |_, req| {
            arrivals.lock().unwrap().push(Instant::now());
            let name = parent_name(req);
            let observed = req["children"]["ConfigMap.v1"]
                .as_object()
                .map_or(0, |m| m.len());
            HookReply::json(json!({
                "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": format!("{name}-0")}, "data": {"a": "b"}}],
                "status": {"children": observed}
            }))
            .delayed(HOOK_DELAY)
        }
    })
    .await;
    let parent = cluster.install_parent_crd("flight").await;
    let mut spec = parent.composite_spec(&hook.url("/sync"));
    spec["generateSelector"] = json!(true);
    let _: CompositeController = cluster
        .create_controller(&unique_name("flight"), "any", spec)
        .await;
    let parents = parent.api(cluster.client(), Some(&ns));
    for i in 0..PARENTS {
        let p = json!({
            "apiVersion": parent.api_version(), "kind": parent.kind(),
            "metadata": {"name": format!("p{i}")}, "spec": {}
        });
        create_object(&parents, p).await;
    }
    control.inject(Fault::latency(
        Some("create"),
        Some("configmaps"),
        PARENTS,
        CREATE_LATENCY,
    ));
    let _process = ControllerProcess::run(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        extra,
    );
    eventually_within(
        "every parent's status counts its child",
        Duration::from_secs(90),
        || async {
            let list = parents.list(&Default::default()).await;
            list.is_ok_and(|l| {
                l.items.len() == PARENTS
                    && l.items.iter().all(|p| p.data["status"]["children"] == 1)
            })
        },
    )
    .await;
    assert_eq!(control.requests("create", "configmaps"), PARENTS as u64);
    let mut times = arrivals.lock().unwrap().clone();
    times.sort();
    let shortest_gap = times
        .windows(2)
        .map(|w| w[1] - w[0])
        .min()
        .unwrap_or(Duration::MAX);
    Some(Seen {
        peak_creates: control.peak_in_flight_writes("create", "configmaps"),
        shortest_gap,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_calls_hooks_one_at_a_time_while_writes_of_all_parents_overlap() {
    let Some(seen) = run(&["--workers", "1"]).await else {
        return;
    };
    assert!(
        seen.shortest_gap >= HOOK_DELAY - Duration::from_millis(10),
        "two hook calls overlapped with one worker: arrivals {:?} apart",
        seen.shortest_gap
    );
    assert_eq!(
        seen.peak_creates, PARENTS,
        "every parent's slow create in flight at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parents_in_flight_bounds_the_parents_waiting_on_writes() {
    let Some(seen) = run(&["--workers", "1", "--parents-in-flight", "3"]).await else {
        return;
    };
    assert_eq!(seen.peak_creates, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parents_in_flight_equal_to_workers_holds_a_worker_for_the_whole_sync() {
    let Some(seen) = run(&["--workers", "1", "--parents-in-flight", "1"]).await else {
        return;
    };
    assert_eq!(seen.peak_creates, 1, "upstream: one parent at a time");
}
