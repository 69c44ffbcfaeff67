//! Children elsewhere of a parent whose CompositeController was deleted while no process
//! ran (issue 53, extension `childResources[].namespaces`): the parent, deleted meanwhile,
//! is held by the children-elsewhere finalizer. The next process's start sweep finds its
//! label-tracked children by a server-side label selector, deletes them, removes the
//! finalizer and lets the parent go; an object labelled for another parent stays. Passes on
//! the embedded server and on a real one (`METACONTROLLER_E2E_KUBECONFIG`).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, DynamicObject};
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, eventually_within, unique_name, ControllerProcess, HookReply, HookServer,
    TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);
const UID_LABEL: &str = "metacontroller.k8s.io/parent-uid";

/// ConfigMap `shared` in `spec.other` and ClusterRole `spec.role`.
fn reply(request: &Value) -> Value {
    let spec = &request["parent"]["spec"];
    let text = |field: &str| spec[field].as_str().unwrap_or_default().to_string();
    json!({
        "children": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "shared", "namespace": text("other"),
                          "labels": {"app": "stranded"}}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": text("role"), "labels": {"app": "stranded"}},
             "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
        ],
        "status": {"ok": true},
    })
}

fn run(cluster: &TestCluster, label: &str) -> ControllerProcess {
    ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        label,
        &[],
    )
}

struct Setup {
    cluster: TestCluster,
    parents: Api<DynamicObject>,
    other: String,
    role: String,
    uid: String,
    label: String,
    controller_name: String,
    _hook: HookServer,
}

/// The controller, its parent `p` and a ConfigMap labelled for another parent.
async fn setup() -> Setup {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let parent_ns = cluster.create_namespace("stranded-parent").await;
    let other = cluster.create_namespace("stranded-other").await;
    let role = unique_name("stranded-role");
    let crd = cluster.install_parent_crd("elsewhere-stranded").await;
    let hook = HookServer::start(|_, request| HookReply::json(reply(request))).await;
    let label = unique_name("team");
    let controller_name = unique_name("cc");
    let anywhere = |api_version: &str, resource: &str| json!({"apiVersion": api_version, "resource": resource, "namespaces": ["*"]});
    let _: CompositeController = cluster
        .create_controller(
            &controller_name,
            &label,
            json!({
                "parentResource": {"apiVersion": crd.api_version(), "resource": crd.plural()},
                "childResources": [anywhere("v1", "configmaps"),
                                   anywhere("rbac.authorization.k8s.io/v1", "clusterroles")],
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}},
            }),
        )
        .await;
    let parents = crd.api(cluster.client(), Some(&parent_ns));
    let parent = create_object(
        &parents,
        json!({"apiVersion": crd.api_version(), "kind": "Parent", "metadata": {"name": "p"},
               "spec": {"other": other, "role": role,
                        "selector": {"matchLabels": {"app": "stranded"}}}}),
    )
    .await;
    let uid = parent.metadata.uid.clone().expect("parent uid");
    // Someone else's label-tracked object: the sweep must leave it.
    let configmaps: Api<ConfigMap> = Api::namespaced(cluster.client(), &other);
    let foreign: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "foreign", "labels": {UID_LABEL: "another-parent"}}}))
    .expect("configmap");
    configmaps
        .create(&Default::default(), &foreign)
        .await
        .expect("creating the foreign configmap");
    Setup {
        cluster,
        parents,
        other,
        role,
        uid,
        label,
        controller_name,
        _hook: hook,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_sweep_deletes_children_elsewhere_of_a_parent_whose_controller_is_gone() {
    let Setup {
        cluster,
        parents,
        other,
        role,
        uid,
        label,
        controller_name,
        _hook,
    } = setup().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(cluster.client(), &other);

    let mut process = run(&cluster, &label);
    let roles: Api<ClusterRole> = Api::all(cluster.client());
    let tracked = |labels: Option<&std::collections::BTreeMap<String, String>>| {
        labels.and_then(|l| l.get(UID_LABEL)) == Some(&uid)
    };
    eventually_within("the children elsewhere exist", WAIT, || async {
        let cm = configmaps.get_opt("shared").await.ok().flatten();
        let cr = roles.get_opt(&role).await.ok().flatten();
        cm.is_some_and(|o| tracked(o.metadata.labels.as_ref()))
            && cr.is_some_and(|o| tracked(o.metadata.labels.as_ref()))
    })
    .await;
    eventually_within(
        "the parent holds the children-elsewhere finalizer",
        WAIT,
        || async {
            parents.get_opt("p").await.ok().flatten().is_some_and(|p| {
                p.metadata
                    .finalizers
                    .unwrap_or_default()
                    .iter()
                    .any(|f| f.starts_with("children-elsewhere.metacontroller.io/"))
            })
        },
    )
    .await;

    // No process runs while the controller object and then the parent are deleted.
    process.kill9();
    Api::<CompositeController>::all(cluster.client())
        .delete(&controller_name, &DeleteParams::default())
        .await
        .expect("deleting the controller");
    parents
        .delete("p", &DeleteParams::default())
        .await
        .expect("deleting the parent");
    assert!(
        parents.get_opt("p").await.expect("get").is_some(),
        "the finalizer holds the parent"
    );

    let restarted = run(&cluster, &label);
    eventually_within(
        "the start sweep deletes the children and lets the parent go",
        WAIT,
        || async {
            let cm = configmaps.get_opt("shared").await.ok().flatten();
            let cr = roles.get_opt(&role).await.ok().flatten();
            let gone = |deleting: Option<bool>| deleting.is_none_or(|d| d);
            parents.get_opt("p").await.ok().flatten().is_none()
                && gone(cm.map(|o| o.metadata.deletion_timestamp.is_some()))
                && gone(cr.map(|o| o.metadata.deletion_timestamp.is_some()))
        },
    )
    .await;
    assert!(
        configmaps.get_opt("foreign").await.expect("get").is_some(),
        "another parent's object was deleted\n{}",
        restarted.logs()
    );
    let _ = roles.delete(&role, &DeleteParams::default()).await;
    let _ = configmaps.delete("foreign", &DeleteParams::default()).await;
}
