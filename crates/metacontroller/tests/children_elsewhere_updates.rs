//! Update methods for children elsewhere (issue 53, extension `childResources[].namespaces`):
//! a namespaced parent's ConfigMaps in another namespace and its ClusterRole are updated as
//! owned children would be. `Recreate` replaces a ConfigMap elsewhere whose desired form
//! changed (a new uid), `OnDelete` leaves a ClusterRole as it is until someone deletes it
//! (then it comes back in the desired form), and `RollingRecreate` moves two ConfigMaps
//! elsewhere to the parent's new revision one by one. Passes on the embedded server and on a
//! real one (`METACONTROLLER_E2E_KUBECONFIG`).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, eventually_within, unique_name, ControllerProcess, HookReply, HookServer,
    TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);
const UID_LABEL: &str = "metacontroller.k8s.io/parent-uid";

/// The desired children: ConfigMaps `spec.configmaps` in `spec.other`, and (when
/// `spec.role` is set) that ClusterRole, each carrying `spec.round`.
fn reply(request: &Value) -> Value {
    let spec = &request["parent"]["spec"];
    let round = spec["round"].as_i64().unwrap_or(0).to_string();
    let other = spec["other"].as_str().unwrap_or_default();
    let labels = json!({"app": "updates", "round": round});
    let mut children: Vec<Value> = spec["configmaps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|name| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": other, "labels": labels},
                   "data": {"round": round}})
        })
        .collect();
    let widget_api_version = spec["widgetApiVersion"].as_str().unwrap_or_default();
    for name in spec["widgets"].as_array().into_iter().flatten() {
        children.push(json!({"apiVersion": widget_api_version, "kind": "Widget",
                             "metadata": {"name": name, "namespace": other, "labels": labels},
                             "spec": {"round": round}}));
    }
    if let Some(role) = spec["role"].as_str() {
        children.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": role, "labels": labels},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}));
    }
    json!({"children": children, "status": {"ok": true}})
}

/// A cluster, a parent CRD, a hook and a controller with `children` as childResources.
struct Setup {
    cluster: TestCluster,
    parent_ns: String,
    other: String,
    parents: Api<DynamicObject>,
    /// Widgets (a namespaced CRD with a status subresource) in the other namespace.
    widgets: Api<DynamicObject>,
    uid: String,
    process: ControllerProcess,
    _hook: HookServer,
}

/// `children(other namespace, Widget apiVersion)` are the childResources.
async fn setup(prefix: &str, children: impl FnOnce(&str, &str) -> Value, spec: Value) -> Setup {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let parent_ns = cluster.create_namespace(&format!("{prefix}-parent")).await;
    let other = cluster.create_namespace(&format!("{prefix}-other")).await;
    let crd = cluster.install_parent_crd(prefix).await;
    let widgets = cluster
        .install_unique_crd(prefix, "Widget", "widgets")
        .await;
    let hook = HookServer::start(|_, request| HookReply::json(reply(request))).await;
    let label = unique_name("team");
    let _: CompositeController = cluster
        .create_controller(
            &unique_name("cc"),
            &label,
            json!({
                "parentResource": {"apiVersion": crd.api_version(), "resource": crd.plural()},
                "childResources": children(&other, &widgets.api_version()),
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}},
            }),
        )
        .await;
    let parents = crd.api(cluster.client(), Some(&parent_ns));
    let mut spec = spec;
    spec["other"] = json!(other);
    spec["widgetApiVersion"] = json!(widgets.api_version());
    spec["selector"] = json!({"matchLabels": {"app": "updates"}});
    let parent = create_object(
        &parents,
        json!({"apiVersion": crd.api_version(), "kind": "Parent",
               "metadata": {"name": "p"}, "spec": spec}),
    )
    .await;
    let process = ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &label,
        &[],
    );
    let widgets = widgets.api(cluster.client(), Some(&other));
    Setup {
        cluster,
        parent_ns,
        other,
        parents,
        widgets,
        uid: parent.metadata.uid.clone().expect("parent uid"),
        process,
        _hook: hook,
    }
}

impl Setup {
    fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.cluster.client(), &self.other)
    }

    /// `(uid, round)` of ConfigMap `name` elsewhere when it is label-tracked by the parent.
    async fn configmap(&self, name: &str) -> Option<(String, String)> {
        let cm = self.configmaps().get_opt(name).await.ok().flatten()?;
        let labels = cm.metadata.labels.clone().unwrap_or_default();
        if labels.get(UID_LABEL) != Some(&self.uid) || cm.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let round = cm.data.unwrap_or_default().get("round").cloned()?;
        Some((cm.metadata.uid.unwrap_or_default(), round))
    }

    /// Stops the controller, then deletes the label-tracked ConfigMaps (a real cluster
    /// outlives the test; other tests count label-tracked objects).
    async fn finish(self, names: &[&str]) {
        let Setup {
            cluster,
            other,
            process,
            ..
        } = self;
        drop(process);
        let configmaps: Api<ConfigMap> = Api::namespaced(cluster.client(), &other);
        for name in names {
            let _ = configmaps.delete(name, &DeleteParams::default()).await;
        }
    }

    async fn set_round(&self, round: i64) {
        let patch = json!({"spec": {"round": round}});
        self.parents
            .patch("p", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patching the parent");
    }
}

/// `(uid, round label)` of a ClusterRole tracked by `uid`.
async fn role(roles: &Api<ClusterRole>, name: &str, uid: &str) -> Option<(String, String)> {
    let r = roles.get_opt(name).await.ok().flatten()?;
    let labels = r.metadata.labels.clone().unwrap_or_default();
    if labels.get(UID_LABEL).map(String::as_str) != Some(uid)
        || r.metadata.deletion_timestamp.is_some()
    {
        return None;
    }
    Some((
        r.metadata.uid.unwrap_or_default(),
        labels.get("round")?.clone(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_and_on_delete_apply_to_children_elsewhere() {
    let role_name = unique_name("updates-role");
    let s = setup(
        "elsewhere-upd",
        |other, _| {
            json!([
                {"apiVersion": "v1", "resource": "configmaps", "namespaces": [other],
                 "updateStrategy": {"method": "Recreate"}},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "resource": "clusterroles",
                 "namespaces": ["*"], "updateStrategy": {"method": "OnDelete"}},
            ])
        },
        json!({"round": 1, "configmaps": ["shared"], "role": role_name}),
    )
    .await;
    let roles: Api<ClusterRole> = Api::all(s.cluster.client());
    eventually_within("both children exist at round 1", WAIT, || async {
        s.configmap("shared").await.is_some_and(|(_, r)| r == "1")
            && role(&roles, &role_name, &s.uid)
                .await
                .is_some_and(|(_, r)| r == "1")
    })
    .await;
    let (cm_uid, _) = s.configmap("shared").await.expect("configmap");
    let (role_uid, _) = role(&roles, &role_name, &s.uid).await.expect("role");

    s.set_round(2).await;
    // Recreate: a new ConfigMap (another uid) at round 2.
    eventually_within("the ConfigMap elsewhere is recreated", WAIT, || async {
        s.configmap("shared")
            .await
            .is_some_and(|(uid, r)| uid != cm_uid && r == "2")
    })
    .await;
    // OnDelete: the sync that recreated the ConfigMap left the ClusterRole as it was.
    assert_eq!(
        role(&roles, &role_name, &s.uid).await,
        Some((role_uid.clone(), "1".to_string())),
        "OnDelete updated the ClusterRole\n{}",
        s.process.logs()
    );
    roles
        .delete(&role_name, &DeleteParams::default())
        .await
        .expect("deleting the ClusterRole");
    eventually_within(
        "the deleted ClusterRole comes back at round 2",
        WAIT,
        || async {
            role(&roles, &role_name, &s.uid)
                .await
                .is_some_and(|(uid, r)| uid != role_uid && r == "2")
        },
    )
    .await;
    s.finish(&["shared"]).await;
    let _ = roles.delete(&role_name, &DeleteParams::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_recreate_moves_children_elsewhere_one_by_one() {
    let s = setup(
        "elsewhere-roll",
        |other, _| {
            json!([{"apiVersion": "v1", "resource": "configmaps", "namespaces": [other],
                    "updateStrategy": {"method": "RollingRecreate"}}])
        },
        json!({"round": 1, "configmaps": ["a", "b"]}),
    )
    .await;
    let both_at = |round: &'static str| {
        let s = &s;
        move || async move {
            let a = s.configmap("a").await;
            let b = s.configmap("b").await;
            a.is_some_and(|(_, r)| r == round) && b.is_some_and(|(_, r)| r == round)
        }
    };
    eventually_within("both ConfigMaps exist at round 1", WAIT, both_at("1")).await;
    let (a_uid, _) = s.configmap("a").await.expect("a");
    let (b_uid, _) = s.configmap("b").await.expect("b");
    s.set_round(2).await;
    eventually_within(
        "both ConfigMaps elsewhere are recreated at round 2",
        WAIT,
        both_at("2"),
    )
    .await;
    let (a_now, _) = s.configmap("a").await.expect("a");
    let (b_now, _) = s.configmap("b").await.expect("b");
    assert!(
        a_now != a_uid && b_now != b_uid,
        "recreated, not updated\n{}",
        s.process.logs()
    );
    // The rollout went through revisions naming the children `<namespace>/<name>`.
    let revisions: Api<DynamicObject> = Api::namespaced_with(
        s.cluster.client(),
        &s.parent_ns,
        &kube::api::ApiResource {
            group: "metacontroller.k8s.io".into(),
            version: "v1alpha1".into(),
            api_version: "metacontroller.k8s.io/v1alpha1".into(),
            kind: "ControllerRevision".into(),
            plural: "controllerrevisions".into(),
        },
    );
    let listed = revisions
        .list(&Default::default())
        .await
        .expect("listing ControllerRevisions");
    let named = format!("{}/a", s.other);
    assert!(
        listed
            .items
            .iter()
            .any(|r| r.data.to_string().contains(&named)),
        "no revision names {named}: {:?}",
        listed.items.iter().map(|r| &r.data).collect::<Vec<_>>()
    );
    s.finish(&["a", "b"]).await;
}

/// `(uid, spec.round)` of Widget `name` elsewhere when it is label-tracked by `uid`.
async fn widget(s: &Setup, name: &str) -> Option<(String, i64)> {
    let w = s.widgets.get_opt(name).await.ok().flatten()?;
    let labels = w.metadata.labels.clone().unwrap_or_default();
    if labels.get(UID_LABEL) != Some(&s.uid) || w.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let round = w.data["spec"]["round"].as_str()?.parse().ok()?;
    Some((w.metadata.uid.unwrap_or_default(), round))
}

/// RollingRecreate with a status check: after the first Widget elsewhere moved to the new
/// revision the rollout pauses (the parent's `Updated` condition names the failed check)
/// until that Widget reports `Ready`, then the second one moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_recreate_waits_for_the_status_check_of_a_child_elsewhere() {
    let s = setup(
        "elsewhere-ready",
        |other, widgets| {
            json!([{"apiVersion": widgets, "resource": "widgets", "namespaces": [other],
                    "updateStrategy": {"method": "RollingRecreate",
                        "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}}}])
        },
        json!({"round": 1, "widgets": ["a", "b"]}),
    )
    .await;
    let rounds = || async {
        let a = widget(&s, "a").await.map(|w| w.1);
        let b = widget(&s, "b").await.map(|w| w.1);
        (a, b)
    };
    eventually_within("both Widgets exist at round 1", WAIT, || async {
        rounds().await == (Some(1), Some(1))
    })
    .await;
    s.set_round(2).await;
    let paused = || async {
        let parent = s.parents.get("p").await.ok()?;
        let conditions = parent.data["status"]["conditions"].as_array()?.clone();
        let updated = conditions.iter().find(|c| c["type"] == "Updated")?;
        let message = updated["message"].as_str().unwrap_or_default().to_string();
        message.contains("failed status check").then_some(message)
    };
    eventually_within("the rollout pauses on the status check", WAIT, || async {
        paused().await.is_some()
    })
    .await;
    // One Widget moved, the other waits for it.
    let (a, b) = rounds().await;
    let moved = match (a, b) {
        (Some(2), Some(1)) => "a",
        (Some(1), Some(2)) => "b",
        other => panic!(
            "not one moved, one waiting: {other:?}\n{}",
            s.process.logs()
        ),
    };
    let message = paused().await.unwrap_or_default();
    assert!(message.contains(moved), "{message}");
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    s.widgets
        .patch_status(moved, &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .expect("setting the moved Widget Ready");
    eventually_within(
        "the second Widget moves after the first is Ready",
        WAIT,
        || async { rounds().await == (Some(2), Some(2)) },
    )
    .await;
    let _ = s.widgets.delete("a", &DeleteParams::default()).await;
    let _ = s.widgets.delete("b", &DeleteParams::default()).await;
}
