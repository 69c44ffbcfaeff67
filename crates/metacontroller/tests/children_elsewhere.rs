//! Extension `childResources[].namespaces` (issue 53, upstream #236): a namespaced parent
//! whose child types opt in (`namespaces: ["*"]`) creates a Namespace, a RoleBinding in it,
//! a ConfigMap in another namespace and a ClusterRole. They carry no ownerReference but the
//! parent-uid label and the parent annotation; the hook sees them keyed `<namespace>/<name>`
//! (or `<name>` when cluster-scoped); a spec change updates them in place. Deleting the
//! parent runs the finalize hook first, then deletes them through the parent's
//! `children-elsewhere.metacontroller.io/...` finalizer — also when the controller was
//! killed -9 in between and a child was deleted or relabelled meanwhile (the relabelled one
//! is no longer ours and stays). Passes on the
//! embedded server and on a real one (`METACONTROLLER_E2E_KUBECONFIG`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::Resource;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, events_about, eventually_within, unique_name, ControllerProcess, HookReply,
    HookServer, TestCluster,
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

fn spec(hook: &HookServer, parent_api_version: &str, plural: &str) -> Value {
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
        "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}},
                  "finalize": {"webhook": {"url": hook.url("/finalize")}}},
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

struct Setup {
    cluster: TestCluster,
    parent_ns: String,
    other: String,
    child_ns: String,
    role: String,
    uid: String,
    label: String,
    hook: HookServer,
    finalized: Arc<AtomicBool>,
    parents: Api<DynamicObject>,
    process: ControllerProcess,
}

impl Setup {
    fn run(&self) -> ControllerProcess {
        run(&self.cluster, &self.label)
    }

    fn apis(
        &self,
    ) -> (
        Api<Namespace>,
        Api<ClusterRole>,
        Api<RoleBinding>,
        Api<ConfigMap>,
    ) {
        let client = self.cluster.client();
        (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::namespaced(client.clone(), &self.child_ns),
            Api::namespaced(client, &self.other),
        )
    }

    /// The four children exist, label-tracked, at `round`.
    async fn at_round(&self, round: &str) -> bool {
        let (namespaces, roles, bindings, configmaps) = self.apis();
        let want = (
            Some(self.uid.clone()),
            Some(format!("{}/team", self.parent_ns)),
            false,
        );
        let round_label =
            |m: &kube::api::ObjectMeta| m.labels.as_ref().and_then(|l| l.get("round")).cloned();
        let ns = namespaces.get_opt(&self.child_ns).await.ok().flatten();
        let cr = roles.get_opt(&self.role).await.ok().flatten();
        let rb = bindings.get_opt("team").await.ok().flatten();
        let cm = configmaps.get_opt("shared").await.ok().flatten();
        let user = format!("user-{round}");
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

    /// How many of the four children are left (a Namespace being deleted counts as gone:
    /// on a real server it waits for its content controller).
    async fn left(&self) -> usize {
        let (namespaces, roles, bindings, configmaps) = self.apis();
        let ns = namespaces.get_opt(&self.child_ns).await.ok().flatten();
        let live_ns = ns.is_some_and(|n| n.metadata.deletion_timestamp.is_none());
        [
            live_ns,
            roles.get_opt(&self.role).await.ok().flatten().is_some(),
            bindings.get_opt("team").await.ok().flatten().is_some(),
            configmaps.get_opt("shared").await.ok().flatten().is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count()
    }

    async fn parent_exists(&self) -> bool {
        self.parents.get_opt("team").await.ok().flatten().is_some()
    }

    /// Deletes what a test left behind (cluster-scoped objects outlive its namespaces).
    async fn cleanup(&self) {
        let (namespaces, roles, _, _) = self.apis();
        let _ = namespaces
            .delete(&self.child_ns, &DeleteParams::default())
            .await;
        let _ = roles.delete(&self.role, &DeleteParams::default()).await;
    }
}

fn run(cluster: &TestCluster, label: &str) -> ControllerProcess {
    ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        label,
        &[],
    )
}

/// Polls `check` until it holds or `limit` passes; whether it held.
async fn poll_until<F, Fut>(limit: Duration, check: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    check().await
}

/// The controller, its parent `team` and (unless `taken`) the four children at round 1.
/// With `taken`, a ConfigMap of someone else already has the ConfigMap child's name.
async fn setup(prefix: &str, taken: bool) -> Setup {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let parent_ns = cluster.create_namespace(&format!("{prefix}-parent")).await;
    let other = cluster.create_namespace(&format!("{prefix}-other")).await;
    let crd = cluster.install_parent_crd(prefix).await;
    let finalized = Arc::new(AtomicBool::new(false));
    let flag = finalized.clone();
    let hook = HookServer::start(move |path, request| {
        if path == "/finalize" {
            // Children still there while the finalize hook says "not yet".
            let mut out = reply(request);
            out["finalized"] = json!(flag.load(Ordering::SeqCst));
            out["resyncAfterSeconds"] = json!(0.5);
            HookReply::json(out)
        } else {
            HookReply::json(reply(request))
        }
    })
    .await;
    let label = unique_name("team");
    let _: CompositeController = cluster
        .create_controller(
            &unique_name("cc"),
            &label,
            spec(&hook, &crd.api_version(), crd.plural()),
        )
        .await;
    let (child_ns, role) = (unique_name("elsewhere-made"), unique_name("elsewhere-role"));
    if taken {
        let foreign: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "shared", "labels": {"app": "elsewhere"}},
            "data": {"owner": "someone else"}}))
        .expect("configmap");
        Api::<ConfigMap>::namespaced(cluster.client(), &other)
            .create(&Default::default(), &foreign)
            .await
            .expect("creating the foreign configmap");
    }
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
    let process = run(&cluster, &label);
    let s = Setup {
        cluster,
        parent_ns,
        other,
        child_ns,
        role,
        uid,
        label,
        hook,
        finalized,
        parents,
        process,
    };
    if !taken {
        eventually_within("the four children exist, label-tracked", WAIT, || {
            s.at_round("1")
        })
        .await;
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_elsewhere_are_created_updated_and_deleted_with_the_parent() {
    let s = setup("elsewhere", false).await;
    // The hook sees them, keyed `<namespace>/<name>` (v1), cluster-scoped ones by name.
    let (child_ns, role, other) = (&s.child_ns, &s.role, &s.other);
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
        s.hook.requests("/sync").iter().any(seen)
    })
    .await;

    // A spec change updates them in place.
    let patch = json!({"spec": {"round": 2}});
    s.parents
        .patch("team", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patching the parent");
    eventually_within("the four children are updated", WAIT, || s.at_round("2")).await;

    // Deletion: the finalize hook first (children stay while it says "not yet") ...
    s.parents
        .delete("team", &DeleteParams::default())
        .await
        .expect("deleting the parent");
    eventually_within("the finalize hook is called", WAIT, || async {
        !s.hook.requests("/finalize").is_empty()
    })
    .await;
    assert_eq!(
        s.left().await,
        4,
        "children stay until the finalize hook is done"
    );
    assert!(s.parent_exists().await);
    // ... then the children elsewhere are deleted and the parent goes.
    s.finalized.store(true, Ordering::SeqCst);
    let gone = poll_until(WAIT, || async {
        s.left().await == 0 && !s.parent_exists().await
    })
    .await;
    assert!(
        gone,
        "left: {}, parent: {}\n{}",
        s.left().await,
        s.parent_exists().await,
        s.process.logs()
    );
    s.cleanup().await;
}

/// Killed -9 between the parent's deletion and the cleanup, with one child deleted and one
/// relabelled by someone else meanwhile: the finalizer keeps the parent until the restarted
/// controller deletes what is still its own; the relabelled child is not ours any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_survives_kill_9_and_children_changed_meanwhile() {
    let mut s = setup("elsewhere-kill", false).await;
    s.finalized.store(true, Ordering::SeqCst);
    s.process.kill9();
    s.parents
        .delete("team", &DeleteParams::default())
        .await
        .expect("deleting the parent");
    let (_, roles, _, configmaps) = s.apis();
    configmaps
        .delete("shared", &DeleteParams::default())
        .await
        .expect("deleting a child by hand");
    let unlabel = json!({"metadata": {"labels": {UID_LABEL: null}}});
    roles
        .patch(&s.role, &PatchParams::default(), &Patch::Merge(&unlabel))
        .await
        .expect("relabelling a child by hand");
    assert!(s.parent_exists().await, "the finalizer holds the parent");
    let restarted = s.run();
    let done = poll_until(WAIT, || async {
        !s.parent_exists().await && s.left().await == 1
    })
    .await;
    assert!(
        done,
        "left: {}, parent: {}\n{}",
        s.left().await,
        s.parent_exists().await,
        restarted.logs()
    );
    let role = roles
        .get(&s.role)
        .await
        .expect("the relabelled child stays");
    assert_eq!(tracking(&role).0, None);
    s.cleanup().await;
}

/// A child name taken by someone else's object in another namespace: a SyncError Warning
/// Event on the parent; the object is never adopted or overwritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_name_taken_elsewhere_is_reported_never_adopted() {
    let s = setup("elsewhere-taken", true).await;
    let named = format!("ConfigMap {}/shared", s.other);
    eventually_within(
        "a SyncError Warning naming the taken name",
        WAIT,
        || async {
            events_about(&s.cluster, &s.parent_ns, "team")
                .await
                .iter()
                .any(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some("SyncError")
                        && e.message.as_deref().is_some_and(|m| m.contains(&named))
                })
        },
    )
    .await;
    // The other children were written meanwhile (the sync went on past the taken name).
    eventually_within("the other children exist", WAIT, || async {
        s.left().await == 4
    })
    .await;
    let (_, _, _, configmaps) = s.apis();
    let foreign = configmaps
        .get("shared")
        .await
        .expect("the foreign configmap");
    assert_eq!(tracking(&foreign), (None, None, false), "never adopted");
    let data = foreign.data.unwrap_or_default();
    assert_eq!(data.get("owner").map(String::as_str), Some("someone else"));
    assert!(!data.contains_key("round"), "never overwritten");
    s.cleanup().await;
}

/// Deleted with `propagationPolicy: Orphan`: the parent goes (finalize hook first) and its
/// children elsewhere stay, as owned children would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_propagation_leaves_children_elsewhere() {
    let s = setup("elsewhere-orphan", false).await;
    s.finalized.store(true, Ordering::SeqCst);
    let orphan = DeleteParams {
        propagation_policy: Some(kube::api::PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    s.parents
        .delete("team", &orphan)
        .await
        .expect("deleting the parent");
    let gone = poll_until(WAIT, || async { !s.parent_exists().await }).await;
    assert!(gone, "the parent goes\n{}", s.process.logs());
    assert_eq!(
        s.left().await,
        4,
        "an orphaned child was deleted\n{}",
        s.process.logs()
    );
    let (_, _, _, configmaps) = s.apis();
    let _ = configmaps.delete("shared", &DeleteParams::default()).await;
    s.cleanup().await;
}
