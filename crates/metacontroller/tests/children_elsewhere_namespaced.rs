//! Children elsewhere in a namespaced install (issue 53, extension
//! `childResources[].namespaces` under `--watch-namespaces`). With `namespaces: ["*"]` a child
//! in a watched namespace other than the parent's is created and label-tracked, and a child
//! in a namespace the process does not watch is refused on its own (a log line, and a
//! `SyncError` Warning Event on the parent naming the child and the watched namespaces),
//! never written, while the parent's other children converge and the process keeps running.
//! A controller the install can never serve is refused at start with a `CreateError` Event,
//! as upstream refuses a cluster-scoped child type: a cluster-scoped child type (opted in
//! or not), or a namespace list naming an unwatched namespace. Passes on the embedded server
//! and on a real one (`METACONTROLLER_E2E_KUBECONFIG`; the binary runs with the test's
//! credentials there, so this shows the scope rule, not RBAC).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, events_about, eventually_within, unique_name, ControllerProcess, HookReply,
    HookServer, TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);
const UID_LABEL: &str = "metacontroller.k8s.io/parent-uid";

/// ConfigMaps `own` (parent's namespace), `ok` in `spec.watched` and `lost` in
/// `spec.unwatched`.
fn reply(request: &Value) -> Value {
    let spec = &request["parent"]["spec"];
    let text = |field: &str| spec[field].as_str().unwrap_or_default().to_string();
    let cm = |name: &str, namespace: Option<String>| {
        let mut meta = json!({"name": name, "labels": {"app": "scoped"}});
        if let Some(ns) = namespace {
            meta["namespace"] = json!(ns);
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}})
    };
    json!({
        "children": [
            cm("own", None),
            cm("ok", Some(text("watched"))),
            cm("lost", Some(text("unwatched"))),
        ],
        "status": {"ok": true},
    })
}

/// Whether the parent `p` has a `SyncError` Warning for each of `refused` naming `scope`.
async fn refusals_reported(
    cluster: &TestCluster,
    parent_ns: &str,
    refused: &[String],
    scope: &str,
) -> bool {
    let events = events_about(cluster, parent_ns, "p").await;
    refused.iter().all(|child| {
        events.iter().any(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some("SyncError")
                && e.message.as_deref().is_some_and(|m| {
                    m.contains(&format!("{child} is not written")) && m.contains(scope)
                })
        })
    })
}

/// Three CompositeControllers with one label (returned): `cc` (ConfigMaps anywhere, runs),
/// and two the install cannot serve: `roles` (ClusterRoles anywhere) and `listed` (ConfigMaps
/// in `unwatched`); their names are returned too.
async fn install_controllers(
    cluster: &TestCluster,
    crd: &metacontroller_testkit::CrdBuilder,
    hook: &HookServer,
    unwatched: &str,
) -> (String, String, String) {
    let label = unique_name("team");
    let child = |api_version: &str, resource: &str, namespaces: Value| json!({"apiVersion": api_version, "resource": resource, "namespaces": namespaces});
    let spec = |children: Value| {
        json!({
            "parentResource": {"apiVersion": crd.api_version(), "resource": crd.plural()},
            "childResources": children,
            "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}},
        })
    };
    let anywhere = json!(["*"]);
    let configmaps = spec(json!([child("v1", "configmaps", anywhere.clone())]));
    let roles = spec(json!([child(
        "rbac.authorization.k8s.io/v1",
        "clusterroles",
        anywhere
    )]));
    let listed = spec(json!([child("v1", "configmaps", json!([unwatched]))]));
    let (roles_name, listed_name) = (unique_name("roles"), unique_name("listed"));
    for (name, spec) in [
        (unique_name("cc"), configmaps),
        (roles_name.clone(), roles),
        (listed_name.clone(), listed),
    ] {
        let _: CompositeController = cluster.create_controller(&name, &label, spec).await;
    }
    (label, roles_name, listed_name)
}

/// Whether controller `name` has a `CreateError` Event (in `default`) containing `text`.
async fn create_error(cluster: &TestCluster, name: &str, text: &str) -> bool {
    events_about(cluster, "default", name)
        .await
        .iter()
        .any(|e| {
            e.reason.as_deref() == Some("CreateError")
                && e.message.as_deref().is_some_and(|m| m.contains(text))
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwatched_children_elsewhere_are_refused_one_by_one() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let parent_ns = cluster.create_namespace("scoped-parent").await;
    let watched = cluster.create_namespace("scoped-watched").await;
    let unwatched = cluster.create_namespace("scoped-unwatched").await;
    let crd = cluster.install_parent_crd("elsewhere-scoped").await;
    let hook = HookServer::start(|_, request| HookReply::json(reply(request))).await;
    let (label, roles, listed) = install_controllers(&cluster, &crd, &hook, &unwatched).await;
    let parents = crd.api(cluster.client(), Some(&parent_ns));
    let parent = create_object(
        &parents,
        json!({"apiVersion": crd.api_version(), "kind": "Parent", "metadata": {"name": "p"},
               "spec": {"watched": watched, "unwatched": unwatched,
                        "selector": {"matchLabels": {"app": "scoped"}}}}),
    )
    .await;
    let uid = parent.metadata.uid.clone().expect("parent uid");
    let scope = format!("{parent_ns},{watched}");
    let mut process = ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &label,
        &["--watch-namespaces", &scope],
    );

    // The reachable children converge: `own` owned, `ok` label-tracked.
    let configmaps = |ns: &str| Api::<ConfigMap>::namespaced(cluster.client(), ns);
    eventually_within("the watched children exist", WAIT, || async {
        let own = configmaps(&parent_ns).get_opt("own").await.ok().flatten();
        let ok = configmaps(&watched).get_opt("ok").await.ok().flatten();
        own.is_some()
            && ok.is_some_and(|cm| {
                cm.metadata.labels.unwrap_or_default().get(UID_LABEL) == Some(&uid)
            })
    })
    .await;

    // The third: a Warning Event naming the child and the watched namespaces.
    let sorted_scope = {
        let mut names = [parent_ns.clone(), watched.clone()];
        names.sort();
        names.join(",")
    };
    let refused = [format!("ConfigMap {unwatched}/lost")];
    eventually_within("a Warning Event for the unwatched child", WAIT, || {
        refusals_reported(&cluster, &parent_ns, &refused, &sorted_scope)
    })
    .await;
    let lost = configmaps(&unwatched).get_opt("lost").await.expect("get");
    assert!(lost.is_none(), "the unwatched ConfigMap was written");

    // The controllers it can never serve are refused at start, as upstream refuses them.
    eventually_within(
        "CreateError for the cluster-scoped child type",
        WAIT,
        || create_error(&cluster, &roles, "is cluster-scoped"),
    )
    .await;
    let names_unwatched = format!("may have children in the namespaces {unwatched}");
    eventually_within("CreateError for the unwatched namespace list", WAIT, || {
        create_error(&cluster, &listed, &names_unwatched)
    })
    .await;
    let logs = process.logs();
    assert!(
        logs.contains("outside the watched namespaces"),
        "no log line\n{logs}"
    );
    assert_eq!(
        process.wait_exit(Duration::ZERO),
        None,
        "the process stopped\n{logs}"
    );
    // A real cluster outlives the test; other tests count label-tracked objects.
    drop(process);
    let _ = configmaps(&watched)
        .delete("ok", &kube::api::DeleteParams::default())
        .await;
}
