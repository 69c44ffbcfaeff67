//! Extension `childResources[].namespaces` (issue 53, upstream #236): a namespaced parent
//! whose child types opt in (`namespaces: ["*"]`) creates a Namespace, a RoleBinding in it,
//! a ConfigMap in another namespace and a ClusterRole. They carry no ownerReference but the
//! parent-uid label and the parent annotation; the hook sees them keyed `<namespace>/<name>`
//! (or `<name>` when cluster-scoped); a spec change updates them in place. Passes on the
//! embedded server and on a real one (`METACONTROLLER_E2E_KUBECONFIG`).

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Resource;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, eventually_within, unique_name, ControllerProcess, HookReply, HookServer,
    TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);
const UID_LABEL: &str = "metacontroller.k8s.io/parent-uid";
const PARENT_ANNOTATION: &str = "metacontroller.k8s.io/parent";

/// The four children, named after `spec.names`, carrying `spec.round` in their data.
fn reply(request: &Value) -> Value {
    let spec = &request["parent"]["spec"];
    let round = spec["round"].as_i64().unwrap_or(0).to_string();
    let (ns, other, role) = (
        spec["names"]["namespace"].as_str().unwrap_or_default(),
        spec["names"]["other"].as_str().unwrap_or_default(),
        spec["names"]["role"].as_str().unwrap_or_default(),
    );
    let labels = json!({"app": "elsewhere", "round": round});
    json!({
        "children": [
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": ns, "labels": labels}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": role, "labels": labels},
             "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "team", "namespace": ns, "labels": labels},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": role},
             "subjects": [{"kind": "User", "name": format!("user-{round}"),
                           "apiGroup": "rbac.authorization.k8s.io"}]},
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "shared", "namespace": other, "labels": labels},
             "data": {"round": round}},
        ],
        "status": {"ok": true},
    })
}

fn spec(sync_url: &str, parent_api_version: &str, plural: &str) -> Value {
    let anywhere = |api_version: &str, resource: &str| {
        json!({"apiVersion": api_version, "resource": resource, "namespaces": ["*"],
               "updateStrategy": {"method": "InPlace"}})
    };
    json!({
        "parentResource": {"apiVersion": parent_api_version, "resource": plural},
        "childResources": [
            anywhere("v1", "namespaces"),
            anywhere("rbac.authorization.k8s.io/v1", "clusterroles"),
            anywhere("rbac.authorization.k8s.io/v1", "rolebindings"),
            anywhere("v1", "configmaps"),
        ],
        "hooks": {"sync": {"webhook": {"url": sync_url}}},
    })
}

/// The parent-uid label and annotation of a child, and whether it has ownerReferences.
fn tracking<K: Resource>(obj: &K) -> (Option<String>, Option<String>, bool) {
    let meta = obj.meta();
    (
        meta.labels.as_ref().and_then(|l| l.get(UID_LABEL).cloned()),
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(PARENT_ANNOTATION).cloned()),
        meta.owner_references
            .as_ref()
            .is_some_and(|r| !r.is_empty()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaced_parent_creates_and_updates_children_elsewhere() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let parent_ns = cluster.create_namespace("elsewhere-parent").await;
    let other = cluster.create_namespace("elsewhere-other").await;
    let crd = cluster.install_parent_crd("elsewhere").await;
    let hook = HookServer::start(|_, request| HookReply::json(reply(request))).await;
    let label = unique_name("team");
    let _: CompositeController = cluster
        .create_controller(
            &unique_name("cc"),
            &label,
            spec(&hook.url("/sync"), &crd.api_version(), crd.plural()),
        )
        .await;
    let (child_ns, role) = (unique_name("elsewhere-made"), unique_name("elsewhere-role"));
    let parents = crd.api(cluster.client(), Some(&parent_ns));
    let parent = create_object(
        &parents,
        json!({"apiVersion": crd.api_version(), "kind": "Parent",
               "metadata": {"name": "team"},
               "spec": {"round": 1, "names": {"namespace": child_ns, "other": other, "role": role},
                        "selector": {"matchLabels": {"app": "elsewhere"}}}}),
    )
    .await;
    let uid = parent.metadata.uid.clone().expect("parent uid");
    let process = ControllerProcess::run(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &[
            "--target-label-selector",
            &format!("team={label}"),
            "--health-probe-bind-address",
            "0",
        ],
    );
    let client = cluster.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &child_ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &other);
    let want = (Some(uid.clone()), Some(format!("{parent_ns}/team")), false);

    let round_is = |round: &'static str| {
        let (namespaces, roles, bindings, configmaps) = (
            namespaces.clone(),
            roles.clone(),
            bindings.clone(),
            configmaps.clone(),
        );
        let (child_ns, role, want) = (child_ns.clone(), role.clone(), want.clone());
        move || {
            let (namespaces, roles, bindings, configmaps) = (
                namespaces.clone(),
                roles.clone(),
                bindings.clone(),
                configmaps.clone(),
            );
            let (child_ns, role, want) = (child_ns.clone(), role.clone(), want.clone());
            async move {
                let user = format!("user-{round}");
                let ns = namespaces.get_opt(&child_ns).await.ok().flatten();
                let cr = roles.get_opt(&role).await.ok().flatten();
                let rb = bindings.get_opt("team").await.ok().flatten();
                let cm = configmaps.get_opt("shared").await.ok().flatten();
                let round_label = |m: &kube::api::ObjectMeta| {
                    m.labels.as_ref().and_then(|l| l.get("round")).cloned()
                };
                ns.is_some_and(|o| {
                    tracking(&o) == want && round_label(&o.metadata).as_deref() == Some(round)
                }) && cr.is_some_and(|o| {
                    tracking(&o) == want && round_label(&o.metadata).as_deref() == Some(round)
                }) && rb.is_some_and(|o| {
                    tracking(&o) == want && o.subjects.as_ref().is_some_and(|s| s[0].name == user)
                }) && cm.is_some_and(|o| {
                    tracking(&o) == want
                        && o.data
                            .as_ref()
                            .and_then(|d| d.get("round"))
                            .map(String::as_str)
                            == Some(round)
                })
            }
        }
    };
    let check = round_is("1");
    eventually_within("the four children exist, label-tracked", WAIT, check).await;

    // The hook sees them, keyed `<namespace>/<name>` (v1), cluster-scoped ones by name.
    let seen = |request: &Value| {
        let children = &request["children"];
        children["Namespace.v1"].get(child_ns.as_str()).is_some()
            && children["ClusterRole.rbac.authorization.k8s.io/v1"]
                .get(role.as_str())
                .is_some()
            && children["RoleBinding.rbac.authorization.k8s.io/v1"]
                .get(format!("{child_ns}/team").as_str())
                .is_some()
            && children["ConfigMap.v1"]
                .get(format!("{other}/shared").as_str())
                .is_some()
    };
    eventually_within("the hook sees the children", WAIT, || async {
        hook.requests("/sync").iter().any(seen)
    })
    .await;

    // A spec change updates them in place.
    parents
        .patch(
            "team",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"round": 2}})),
        )
        .await
        .expect("patching the parent");
    let check = round_is("2");
    eventually_within("the four children are updated", WAIT, check).await;
    drop(process);

    // Cluster-scoped leftovers of this test (deletion with the parent is not in this test).
    let _ = namespaces.delete(&child_ns, &DeleteParams::default()).await;
    let _ = roles.delete(&role, &DeleteParams::default()).await;
}
