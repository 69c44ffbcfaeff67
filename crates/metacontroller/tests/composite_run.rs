//! The real binary runs a CompositeController end to end: the controller object exists
//! before its parent CRD (it starts after a discovery refresh), children are written with
//! `--apply-strategy server-side-apply` and the default field manager.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, events_about, eventually_within, unique_crd, unique_name, ControllerProcess,
    HookServer, TestCluster,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_starts_controller_once_its_crd_appears_and_applies_server_side() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("run").await;
    let hook = HookServer::one_configmap_child("run").await;
    let parent = unique_crd("run", "Parent", "parents");
    let label = unique_name("team");
    let controller: CompositeController = cluster
        .create_controller(
            &unique_name("run"),
            &label,
            parent.composite_spec(&hook.url("/sync")),
        )
        .await;
    let name = controller.metadata.name.clone().unwrap_or_default();

    let process = spawn_run(&cluster, &label, &["--apply-strategy", "server-side-apply"]);
    // The parent resource is not served yet: the binary must be seen failing to start the
    // controller (a CreateError Event and a log line) before the CRD appears.
    wait_warning(
        (&cluster, &name),
        "CreateError Event: parent resource not served",
        "CreateError",
        |m| m.starts_with("Cannot create new controller: ") && m.contains("is not served"),
    )
    .await;
    assert!(
        process.logs().contains("cannot start controller"),
        "{}",
        process.logs()
    );
    cluster.install_crd(&parent.build()).await;

    let parents = parent.api(cluster.client(), Some(&ns));
    create_object(
        &parents,
        json!({
            "apiVersion": parent.api_version(), "kind": "Parent",
            "metadata": {"name": "p"}, "spec": {"selector": {"matchLabels": {"app": "run"}}}
        }),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    eventually_within(
        "child applied by the binary",
        Duration::from_secs(60),
        || async {
            cms.get_opt("p-cm").await.unwrap().is_some_and(|cm| {
                cm.metadata.managed_fields.iter().flatten().any(|m| {
                    m.manager.as_deref() == Some("metacontroller")
                        && m.operation.as_deref() == Some("Apply")
                })
            })
        },
    )
    .await;
    eventually_within("parent status", Duration::from_secs(30), || async {
        parents
            .get("p")
            .await
            .is_ok_and(|p| p.data["status"]["ok"] == true)
    })
    .await;
}

/// Waits (60 s, `what` names it) for a Warning Event with `reason` on controller `name` whose
/// message `matches`.
async fn wait_warning(
    (cluster, name): (&TestCluster, &str),
    what: &str,
    reason: &str,
    matches: impl Fn(&str) -> bool,
) {
    eventually_within(what, Duration::from_secs(60), || async {
        controller_events(cluster, name)
            .await
            .iter()
            .any(|(t, r, m)| t == "Warning" && r == reason && matches(m))
    })
    .await;
}

/// Events recorded on the (cluster-scoped, so in `default`) controller object `name`:
/// `(type, reason, message)` in creation order.
async fn controller_events(cluster: &TestCluster, name: &str) -> Vec<(String, String, String)> {
    let mut events = events_about(cluster, "default", name).await;
    events.sort_by_key(|e| e.metadata.name.clone());
    events
        .into_iter()
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

fn composite_controller(
    name: &str,
    label: &str,
    parent: &metacontroller_testkit::CrdBuilder,
    url: String,
) -> CompositeController {
    serde_json::from_value(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": name, "labels": {"team": label}},
        "spec": {
            "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
            "hooks": {"sync": {"webhook": {"url": url}}},
        }
    }))
    .unwrap()
}

/// `metacontroller run` against `cluster`, for the controller objects labelled
/// `team=<label>`, with a fast discovery refresh and `extra` flags.
fn spawn_run(cluster: &TestCluster, label: &str, extra: &[&str]) -> ControllerProcess {
    let selector = format!("team={label}");
    let mut args = vec![
        "--discovery-interval",
        "500ms",
        "--target-label-selector",
        &selector,
    ];
    args.extend_from_slice(extra);
    ControllerProcess::run(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &args,
    )
}

/// A parent resource without `/status`: upstream records a Warning SyncError Event
/// "[<name>] Sync error - ignoring, parent resource <gvk> does not have subresource
/// 'Status' enabled" on the CompositeController.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_without_status_gives_a_sync_error_event_on_the_controller() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let parent = unique_crd("nostatus", "Parent", "parents").without_status_subresource();
    cluster.install_crd(&parent.build()).await;
    let label = unique_name("team");
    let name = unique_name("nostatus");
    let cc = composite_controller(&name, &label, &parent, "http://127.0.0.1:9/sync".into());
    Api::<CompositeController>::all(cluster.client())
        .create(&PostParams::default(), &cc)
        .await
        .unwrap();
    let _child = spawn_run(&cluster, &label, &[]);
    let expected = format!(
        "[{name}] Sync error - ignoring, parent resource {}, Kind=Parent does not have subresource 'Status' enabled",
        parent.api_version()
    );
    wait_warning(
        (&cluster, &name),
        "SyncError event on the controller",
        "SyncError",
        |m| m == expected,
    )
    .await;
    assert!(!controller_events(&cluster, &name)
        .await
        .iter()
        .any(|(_, r, _)| r == "CreateError"));
}

/// Upstream's lifecycle Events: Starting then Started when a controller starts, Stopping
/// then Stopped when its object is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_events_starting_started_stopping_stopped() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let parent = cluster.install_parent_crd("life").await;
    let label = unique_name("team");
    let name = unique_name("life");
    let cc = composite_controller(&name, &label, &parent, "http://127.0.0.1:9/sync".into());
    let ccs = Api::<CompositeController>::all(cluster.client());
    ccs.create(&PostParams::default(), &cc).await.unwrap();
    let _child = spawn_run(&cluster, &label, &[]);
    let reasons = || async {
        controller_events(&cluster, &name)
            .await
            .into_iter()
            .map(|(_, r, m)| (r, m))
            .collect::<Vec<_>>()
    };
    eventually_within("Started", Duration::from_secs(60), || async {
        reasons().await.iter().any(|(r, _)| r == "Started")
    })
    .await;
    ccs.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually_within("Stopped", Duration::from_secs(60), || async {
        reasons().await.iter().any(|(r, _)| r == "Stopped")
    })
    .await;
    assert_eq!(
        reasons().await,
        ["Starting", "Started", "Stopping", "Stopped"]
            .iter()
            .map(|r| (r.to_string(), format!("{r} controller: {name}")))
            .collect::<Vec<_>>()
    );
}
