//! The real binary runs DecoratorControllers: only those matching
//! `--target-label-selector` are started, a spec change restarts the reconciler with the new
//! spec, and deleting the controller object stops it.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_testkit::{
    crd, eventually_within, unique_name, ControllerProcess, HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

/// Whether an Event with `reason` was recorded on the (cluster-scoped, so in `default`)
/// controller object `name`.
async fn has_event(cluster: &TestCluster, name: &str, reason: &str) -> bool {
    Api::<Event>::namespaced(cluster.client(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .any(|e| {
            e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason)
        })
}

fn decorator(
    name: &str,
    labels: Value,
    target: &metacontroller_testkit::CrdBuilder,
    url: &str,
) -> DecoratorController {
    serde_json::from_value(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "resources": [{"apiVersion": target.api_version(), "resource": target.plural()}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"webhook": {"url": url}}},
        }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_runs_selected_decorators_restarts_on_change_and_stops_on_delete() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("decrun").await;
    let target = crd(
        &format!("{}.example.com", unique_name("decrun")),
        "v1",
        "Target",
        "targets",
    );
    cluster.install_crd(&target.build()).await;
    let hook = HookServer::start(|path, req| {
        let name = req["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        let suffix = path.trim_start_matches('/');
        HookReply::json(json!({
            "labels": {format!("seen-{suffix}"): "yes"},
            "attachments": [{"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": format!("{name}-{suffix}")}}],
        }))
    })
    .await;
    let label = unique_name("team");
    let selected = unique_name("selected");
    let dcs = Api::<DecoratorController>::all(cluster.client());
    // A second selected decorator on the same targets: once it has decorated a target, the
    // process has handled that target's events (the positive signal before checking that
    // a stopped controller did nothing).
    let witness = unique_name("witness");
    for (name, path) in [(&selected, "/one"), (&witness, "/witness")] {
        let dc = decorator(name, json!({"team": label}), &target, &hook.url(path));
        dcs.create(&PostParams::default(), &dc).await.unwrap();
    }
    let other = unique_name("other");
    dcs.create(
        &PostParams::default(),
        &decorator(
            &other,
            json!({"team": "nobody"}),
            &target,
            &hook.url("/other"),
        ),
    )
    .await
    .unwrap();

    let selector = format!("team={label}");
    let _process = ControllerProcess::run(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &[
            "--discovery-interval",
            "500ms",
            "--target-label-selector",
            &selector,
        ],
    );

    let targets = target.api(cluster.client(), Some(&ns));
    let create = |name: &str| {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": target.api_version(), "kind": "Target",
            "metadata": {"name": name}, "spec": {}
        }))
        .unwrap();
        let targets = targets.clone();
        async move { targets.create(&PostParams::default(), &obj).await.unwrap() }
    };
    create("t1").await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    eventually_within(
        "t1 decorated by the selected controller",
        Duration::from_secs(60),
        || async {
            cms.get_opt("t1-one").await.unwrap().is_some()
                && targets.get("t1").await.is_ok_and(|t| {
                    t.metadata
                        .labels
                        .unwrap_or_default()
                        .contains_key("seen-one")
                })
        },
    )
    .await;
    assert_eq!(
        hook.calls("/other"),
        0,
        "a controller outside the selector ran"
    );

    // A spec change restarts the reconciler with the new hook.
    let patch = json!({"spec": {"hooks": {"sync": {"webhook": {"url": hook.url("/two")}}}}});
    dcs.patch(&selected, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually_within(
        "t1 decorated by the new spec",
        Duration::from_secs(60),
        || async { cms.get_opt("t1-two").await.unwrap().is_some() },
    )
    .await;

    // Deleted: the reconciler is stopped (Stopped Event) and new targets are no longer
    // decorated by it, while the witness still decorates them.
    dcs.delete(&selected, &Default::default()).await.unwrap();
    eventually_within("Stopped Event", Duration::from_secs(60), || {
        has_event(&cluster, &selected, "Stopped")
    })
    .await;
    create("t2").await;
    eventually_within(
        "t2 decorated by the witness",
        Duration::from_secs(60),
        || async {
            targets.get("t2").await.is_ok_and(|t| {
                t.metadata
                    .labels
                    .unwrap_or_default()
                    .contains_key("seen-witness")
            })
        },
    )
    .await;
    assert!(cms.get_opt("t2-two").await.unwrap().is_none());
    // A sync of t1 that was in flight when the controller stopped may still reach the hook
    // server after the Stopped Event (it was sent before); a target created afterwards must
    // never reach the stopped controller's hook.
    let synced_t2 = hook
        .all_calls()
        .iter()
        .any(|c| c.path == "/two" && c.body["object"]["metadata"]["name"] == "t2");
    assert!(!synced_t2, "a stopped controller synced a new target");
}
