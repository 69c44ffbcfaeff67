//! The binary sends the child writes of one sync together, at most
//! `--max-concurrent-child-writes` (default 8) at once; `=1` writes them one after another as
//! upstream does. Observed on the embedded API server, whose creates are slowed by an injected
//! latency so that overlapping writes are seen in flight together (skipped on a real cluster).

use std::time::Duration;

use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, eventually_within, parent_name, unique_name, ControllerProcess, Fault,
    HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

/// Runs the binary with `extra` flags on a parent wanting 10 ConfigMaps whose creates take
/// 300 ms each; returns the most creates in flight at once.
async fn peak_creates(extra: &[&str]) -> Option<usize> {
    if metacontroller_testkit::skip_on_real_cluster("peak_creates (300 ms injected create latency)")
    {
        return None;
    }
    let cluster = TestCluster::embedded().await;
    let control = cluster.control()?;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("conc").await;
    let hook = HookServer::start(|_, req| {
        let name = parent_name(req);
        let observed = req["children"]["ConfigMap.v1"]
            .as_object()
            .map_or(0, |m| m.len());
        let children: Vec<Value> = (0..10)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": format!("{name}-{i}")}, "data": {"i": i.to_string()}})
            })
            .collect();
        HookReply::json(json!({"children": children, "status": {"children": observed}}))
    })
    .await;
    let parent = cluster.install_parent_crd("conc").await;
    let mut spec = parent.composite_spec(&hook.url("/sync"));
    spec["generateSelector"] = json!(true);
    let _: CompositeController = cluster
        .create_controller(&unique_name("conc"), "any", spec)
        .await;
    control.inject(Fault::latency(
        Some("create"),
        Some("configmaps"),
        10,
        Duration::from_millis(300),
    ));
    let _process = ControllerProcess::run(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        extra,
    );
    let parents = parent.api(cluster.client(), Some(&ns));
    create_object(
        &parents,
        json!({
            "apiVersion": parent.api_version(), "kind": parent.kind(),
            "metadata": {"name": "p"}, "spec": {}
        }),
    )
    .await;
    eventually_within(
        "10 children observed in the status",
        Duration::from_secs(60),
        || async {
            parents
                .get_opt("p")
                .await
                .ok()
                .flatten()
                .is_some_and(|p| p.data["status"]["children"] == 10)
        },
    )
    .await;
    assert_eq!(control.requests("create", "configmaps"), 10);
    Some(control.peak_in_flight_writes("create", "configmaps"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_writes_of_one_sync_go_out_together() {
    let Some(peak) = peak_creates(&[]).await else {
        return;
    };
    assert_eq!(peak, 8, "10 slow creates, 8 at once by default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_child_writes_1_writes_one_at_a_time() {
    let Some(peak) = peak_creates(&["--max-concurrent-child-writes", "1"]).await else {
        return;
    };
    assert_eq!(peak, 1);
}
