//! A child (or attachment) whose name is taken by an object the parent does not control,
//! through the real binary, for both controller kinds and both apply strategies: the binary records a SyncError Warning Event naming
//! the object, leaves the object alone (no ownerReference, data intact), does not send the
//! create again while the object is unchanged, and creates the child once the object is
//! deleted.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, DeleteParams, PostParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_testkit::{
    create_object, events_about, eventually_within, unique_name, ControllerProcess, CrdBuilder,
    HookReply, HookServer, TestCluster,
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// Warning Events on the parent `name` in `ns` whose message names `needle`.
async fn warnings_naming(cluster: &TestCluster, ns: &str, name: &str, needle: &str) -> Vec<Event> {
    events_about(cluster, ns, name)
        .await
        .into_iter()
        .filter(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some("SyncError")
                && e.message.as_deref().is_some_and(|m| m.contains(needle))
        })
        .collect()
}

/// POSTs (`create`) and PATCHes (server-side apply) of ConfigMaps seen by the embedded
/// server, or `None` against a real cluster.
fn configmap_writes(cluster: &TestCluster) -> Option<u64> {
    cluster
        .control()
        .map(|c| c.requests("create", "configmaps") + c.requests("patch", "configmaps"))
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Composite,
    Decorator,
}

impl Kind {
    /// The hook path of this kind's controller.
    fn sync_path(self) -> &'static str {
        match self {
            Kind::Composite => "/composite",
            Kind::Decorator => "/decorator",
        }
    }
}

/// A hook wanting one ConfigMap `<parent>-cm` (a child on `/composite`, an attachment
/// otherwise) and the status `{"ok": true}`.
async fn cm_hook() -> HookServer {
    HookServer::start(|path, req| {
        let (parent, field) = match path {
            "/composite" => (&req["parent"], "children"),
            _ => (&req["object"], "attachments"),
        };
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        HookReply::json(json!({
            field: [{"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": format!("{name}-cm"), "labels": {"app": "taken"}},
                     "data": {"k": "v"}}],
            "status": {"ok": true},
        }))
    })
    .await
}

/// Creates a controller of `kind` labelled `team=<label>` for `parent` that wants one
/// ConfigMap per parent from `hook` and resyncs every second.
async fn create_cm_controller(
    cluster: &TestCluster,
    kind: Kind,
    parent: &CrdBuilder,
    label: &str,
    hook: &HookServer,
) {
    let name = unique_name("taken");
    let resource = json!({"apiVersion": parent.api_version(), "resource": parent.plural()});
    let sync = json!({"sync": {"webhook": {"url": hook.url(kind.sync_path())}}});
    if kind == Kind::Composite {
        let _: CompositeController = cluster
            .create_controller(
                &name,
                label,
                json!({
                    "parentResource": resource,
                    "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                        "updateStrategy": {"method": "InPlace"}}],
                    "resyncPeriodSeconds": 1,
                    "hooks": sync,
                }),
            )
            .await;
    } else {
        let _: DecoratorController = cluster
            .create_controller(
                &name,
                label,
                json!({
                    "resources": [resource],
                    "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
                    "resyncPeriodSeconds": 1,
                    "hooks": sync,
                }),
            )
            .await;
    }
}

/// The binary with `--apply-strategy <apply_strategy>` for the controllers labelled
/// `team=<label>`.
fn start_binary(cluster: &TestCluster, apply_strategy: &str, label: &str) -> ControllerProcess {
    ControllerProcess::start(
        env!("CARGO_BIN_EXE_metacontroller"),
        [
            "run",
            "--kubeconfig",
            cluster.kubeconfig_path().to_str().expect("utf-8 path"),
            "--apply-strategy",
            apply_strategy,
            "--target-label-selector",
            &format!("team={label}"),
        ],
    )
}

/// After the SyncError, the binary keeps syncing (three more hook calls) but sends no
/// write to the taken name again, and `foreign` is unchanged and not adopted.
async fn assert_left_alone(
    cluster: &TestCluster,
    hook: &HookServer,
    kind: Kind,
    binary: &ControllerProcess,
    cms: &Api<ConfigMap>,
    foreign: &ConfigMap,
) {
    // Positive signal first: the controller keeps syncing the parent (resync every second,
    // backoff on the error) ...
    let writes_before = configmap_writes(cluster);
    let calls_before = hook.calls(kind.sync_path());
    eventually_within("three more syncs", WAIT, || async {
        hook.calls(kind.sync_path()) >= calls_before + 3
    })
    .await;
    // ... then the negative: no create / apply was sent again, the object is untouched.
    assert_eq!(
        configmap_writes(cluster),
        writes_before,
        "the binary wrote to the taken name again\n{}",
        binary.logs()
    );
    let now = cms.get("p-cm").await.unwrap();
    assert_eq!(
        now.metadata.resource_version, foreign.metadata.resource_version,
        "the foreign object changed"
    );
    assert!(now.metadata.owner_references.is_none(), "adopted: {now:?}");
    assert_eq!(now.data, foreign.data);
}

/// Deletes the foreign `p-cm` and waits until the parent's own child takes the name.
async fn wait_child_takes_freed_name(cms: &Api<ConfigMap>) {
    cms.delete("p-cm", &DeleteParams::default()).await.unwrap();
    eventually_within(
        "the child created after the name was freed",
        WAIT,
        || async {
            cms.get_opt("p-cm").await.unwrap().is_some_and(|cm| {
                cm.data
                    .as_ref()
                    .and_then(|d| d.get("k"))
                    .map(String::as_str)
                    == Some("v")
                    && cm
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|r| r.controller == Some(true) && r.name == "p")
            })
        },
    )
    .await;
}

async fn foreign_object_is_left_alone(kind: Kind, apply_strategy: &str) {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("taken").await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    let foreign: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "p-cm"}, "data": {"owner": "someone-else"}}))
    .unwrap();
    let foreign = cms.create(&PostParams::default(), &foreign).await.unwrap();

    let hook = cm_hook().await;
    let parent = cluster.install_parent_crd("taken").await;
    let label = unique_name("team");
    create_cm_controller(&cluster, kind, &parent, &label, &hook).await;
    let binary = start_binary(&cluster, apply_strategy, &label);
    let p = json!({
        "apiVersion": parent.api_version(), "kind": "Parent",
        "metadata": {"name": "p"}, "spec": {"selector": {"matchLabels": {"app": "taken"}}}
    });
    create_object(&parent.api(cluster.client(), Some(&ns)), p).await;

    let named = format!("ConfigMap {ns}/p-cm");
    eventually_within(
        "a SyncError Warning naming the taken name",
        WAIT,
        || async { !warnings_naming(&cluster, &ns, "p", &named).await.is_empty() },
    )
    .await;
    assert_left_alone(&cluster, &hook, kind, &binary, &cms, &foreign).await;
    // Once the name is free, the child is created.
    wait_child_takes_freed_name(&cms).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taken_child_name_is_reported_not_overwritten_dynamic_apply() {
    foreign_object_is_left_alone(Kind::Composite, "dynamic-apply").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taken_child_name_is_reported_not_overwritten_server_side_apply() {
    foreign_object_is_left_alone(Kind::Composite, "server-side-apply").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taken_attachment_name_is_reported_not_overwritten_dynamic_apply() {
    foreign_object_is_left_alone(Kind::Decorator, "dynamic-apply").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taken_attachment_name_is_reported_not_overwritten_server_side_apply() {
    foreign_object_is_left_alone(Kind::Decorator, "server-side-apply").await;
}
