//! The binary across watch outages and cache flushes (embedded API server only: these tests
//! break watches, forget the event history and count requests).
//!
//! - A CompositeController deleted while the controller watch is down (the next watch gets
//!   410 Gone and relists) is stopped: Stopping/Stopped Events, and its new parents are not
//!   synced.
//! - `--cache-flush-interval` resyncs every parent from the cache (hook calls) without
//!   listing anything from the API server.

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    eventually_within, unique_name, ControllerProcess, CrdBuilder, Fault, HookReply, HookServer,
    TestCluster,
};
use serde_json::json;

fn controller(
    name: &str,
    label: &str,
    parent: &CrdBuilder,
    selector: serde_json::Value,
    url: String,
) -> CompositeController {
    serde_json::from_value(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": name, "labels": {"team": label}},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural(),
                               "labelSelector": selector},
            "hooks": {"sync": {"webhook": {"url": url}}},
        }
    }))
    .unwrap()
}

fn start(cluster: &TestCluster, label: &str, extra: &[&str]) -> ControllerProcess {
    let mut args = vec![
        "run".to_string(),
        "--kubeconfig".to_string(),
        cluster.kubeconfig_path().display().to_string(),
        "--discovery-interval=500ms".to_string(),
        format!("--target-label-selector=team={label}"),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    ControllerProcess::start(env!("CARGO_BIN_EXE_metacontroller"), args)
}

async fn events_of(cluster: &TestCluster, name: &str) -> Vec<String> {
    Api::<Event>::namespaced(cluster.client(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .filter_map(|e| e.reason)
        .collect()
}

fn parent_calls(hook: &HookServer, path: &str, parent: &str) -> usize {
    hook.requests(path)
        .iter()
        .filter(|r| r["parent"]["metadata"]["name"] == parent)
        .count()
}

async fn create_parent(api: &Api<DynamicObject>, parent: &CrdBuilder, name: &str, which: &str) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": parent.api_version(), "kind": "Parent",
        "metadata": {"name": name, "labels": {"which": which}}, "spec": {}
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_deleted_while_the_watch_is_down_is_stopped_after_the_relist() {
    let cluster = TestCluster::start().await;
    let Some(control) = cluster.control() else {
        eprintln!("skipped: needs the embedded API server (fault injection)");
        return;
    };
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("relist").await;
    let hook = HookServer::start(|_, _| HookReply::json(json!({"status": {"ok": true}}))).await;
    let parent = cluster.install_parent_crd("relist").await;
    let label = unique_name("team");
    // `doomed` is deleted during the outage; `witness` (same parent informer, other
    // parents) proves the process handled the parent events that follow.
    let doomed = unique_name("doomed");
    let witness = unique_name("witness");
    let controllers = Api::<CompositeController>::all(cluster.client());
    for (name, which, path) in [(&doomed, "one", "/one"), (&witness, "two", "/two")] {
        let cc = controller(
            name,
            &label,
            &parent,
            json!({"matchLabels": {"which": which}}),
            hook.url(path),
        );
        controllers
            .create(&PostParams::default(), &cc)
            .await
            .unwrap();
    }
    let _process = start(&cluster, &label, &[]);
    let parents = parent.api(cluster.client(), Some(&ns));
    create_parent(&parents, &parent, "before", "one").await;
    eventually_within(
        "doomed syncs its parent",
        Duration::from_secs(30),
        || async { parent_calls(&hook, "/one", "before") > 0 },
    )
    .await;

    // Watches of controller objects fail until the history is gone, so the deletion is
    // only learnt from a relist (410 Gone → list).
    control.inject(Fault::status(
        Some("watch"),
        Some("compositecontrollers"),
        10_000,
        500,
    ));
    control.close_watches();
    controllers
        .delete(&doomed, &DeleteParams::default())
        .await
        .unwrap();
    control.compact_history();
    control.clear_faults();

    eventually_within(
        "Stopped Event for the deleted controller",
        Duration::from_secs(30),
        || async {
            events_of(&cluster, &doomed)
                .await
                .iter()
                .any(|r| r == "Stopped")
        },
    )
    .await;
    let reasons = events_of(&cluster, &doomed).await;
    assert!(reasons.iter().any(|r| r == "Stopping"), "{reasons:?}");

    create_parent(&parents, &parent, "after", "one").await;
    create_parent(&parents, &parent, "seen", "two").await;
    // Positive signal: the witness synced the parent created after ours.
    eventually_within(
        "witness syncs its parent",
        Duration::from_secs(30),
        || async { parent_calls(&hook, "/two", "seen") > 0 },
    )
    .await;
    assert_eq!(
        parent_calls(&hook, "/one", "after"),
        0,
        "the deleted controller still syncs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_flush_resyncs_parents_from_the_cache_without_listing() {
    let cluster = TestCluster::start().await;
    let Some(control) = cluster.control() else {
        eprintln!("skipped: needs the embedded API server (request counts)");
        return;
    };
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("flush").await;
    let hook = HookServer::start(|_, _| HookReply::json(json!({"status": {"ok": true}}))).await;
    let parent = cluster.install_parent_crd("flush").await;
    let label = unique_name("team");
    let cc = controller(
        &unique_name("flush"),
        &label,
        &parent,
        json!({}),
        hook.url("/sync"),
    );
    Api::<CompositeController>::all(cluster.client())
        .create(&PostParams::default(), &cc)
        .await
        .unwrap();
    let _process = start(&cluster, &label, &["--cache-flush-interval=2s"]);
    let parents = parent.api(cluster.client(), Some(&ns));
    create_parent(&parents, &parent, "p", "any").await;
    eventually_within("parent status", Duration::from_secs(30), || async {
        parents
            .get("p")
            .await
            .is_ok_and(|p| p.data["status"]["ok"] == true)
    })
    .await;

    control.reset_counts();
    let before = parent_calls(&hook, "/sync", "p");
    // Three flush intervals: at least two resyncs of an unchanged parent.
    eventually_within(
        "parent resynced by the cache flush",
        Duration::from_secs(10),
        || async { parent_calls(&hook, "/sync", "p") >= before + 2 },
    )
    .await;
    let lists: Vec<_> = control
        .request_counts()
        .into_iter()
        .filter(|((verb, _), n)| verb == "list" && *n > 0)
        .collect();
    assert!(
        lists.is_empty(),
        "a cache flush listed from the API server: {lists:?}"
    );
    assert_eq!(
        control.requests("watch", parent.plural()),
        0,
        "the parent watch was restarted"
    );
}
