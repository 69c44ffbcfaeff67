//! Upstream's `catset` shape (issue 33): a CompositeController whose Pod child (updateStrategy
//! RollingRecreate) has a downwardAPI volume and an env `fieldRef`, both without the
//! `fieldRef.apiVersion` the API server defaults. At default flags the Pod is created once and
//! kept across resyncs (its uid does not change, the binary deletes nothing), and a change of
//! the parent's spec rolls it exactly once. Passes on the embedded server and on a real one
//! (`METACONTROLLER_E2E_KUBECONFIG`).

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, dynamic_api, eventually_within, ControllerProcess, HookReply, HookServer,
    TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);
const RESYNCS: usize = 5;

/// The hook: one Pod per parent, its `VERSION` env from the parent's `spec.version`.
fn sync(_: &str, req: &Value) -> HookReply {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let version = parent["spec"]["version"].as_str().unwrap_or("1");
    HookReply::json(json!({"children": [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{name}-0"), "labels": {"catset": name}},
        "spec": {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9",
                "env": [{"name": "VERSION", "value": version},
                        {"name": "POD_NAME",
                         "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "volumeMounts": [{"name": "podinfo", "mountPath": "/etc/podinfo"}]}],
            "volumes": [{"name": "podinfo", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}]}}]}))
}

/// Lines of the binary's log that record a child write of `verb` (`creating child`,
/// `deleting child`) for a Pod.
fn pod_writes(logs: &str, message: &str) -> usize {
    logs.lines()
        .filter(|l| l.contains(message) && l.contains(" Pod "))
        .count()
}

fn env_version(pod: &DynamicObject) -> Option<String> {
    pod.data["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == "VERSION")
        .and_then(|e| e["value"].as_str())
        .map(str::to_owned)
}

struct Catset {
    hook: HookServer,
    process: ControllerProcess,
    pods: Api<DynamicObject>,
}

impl Catset {
    /// The Pod's uid after at least `RESYNCS` more hook calls, asserting it never changed.
    async fn uid_across_resyncs(&self, uid: &str) {
        let calls = self.hook.calls("/sync");
        eventually_within("resyncs call the hook", WAIT, || async {
            let pod = self.pods.get("cat-0").await.ok();
            let now = pod.as_ref().and_then(|p| p.metadata.uid.clone());
            assert_eq!(
                now.as_deref(),
                Some(uid),
                "the converged Pod was replaced\ncontroller logs:\n{}",
                self.process.logs()
            );
            self.hook.calls("/sync") >= calls + RESYNCS
        })
        .await;
    }
}

/// The `catset` controller (Pod children, RollingRecreate, resync every second) running in
/// the binary, and its parent `cat` (version 1) created in a fresh namespace.
async fn start_catset(cluster: &TestCluster) -> (Catset, Api<DynamicObject>) {
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_pod_namespace("catset").await;
    let parent_crd = cluster.install_parent_crd("catset").await;
    let hook = HookServer::start(sync).await;
    let mut spec = parent_crd.composite_spec(&hook.url("/sync"));
    spec["childResources"] = json!([{"apiVersion": "v1", "resource": "pods",
                                     "updateStrategy": {"method": "RollingRecreate"}}]);
    spec["resyncPeriodSeconds"] = json!(1);
    let label = cluster
        .create_labelled_controller::<CompositeController>("catset", spec)
        .await;
    let process = ControllerProcess::run(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &[
            "--discovery-interval",
            "1s",
            &format!("--target-label-selector=team={label}"),
        ],
    );
    let parents = parent_crd.api(cluster.client(), Some(&ns));
    create_object(
        &parents,
        json!({
            "apiVersion": parent_crd.api_version(), "kind": "Parent",
            "metadata": {"name": "cat"},
            "spec": {"version": "1", "selector": {"matchLabels": {"catset": "cat"}}}}),
    )
    .await;
    let catset = Catset {
        hook,
        process,
        pods: dynamic_api(cluster.client(), "v1", "Pod", "pods", Some(&ns)),
    };
    (catset, parents)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_recreate_pod_with_downward_api_is_created_once_and_rolled_once() {
    let cluster = TestCluster::start().await;
    let (s, parents) = start_catset(&cluster).await;

    eventually_within("the Pod is created", WAIT, || async {
        s.pods.get("cat-0").await.is_ok()
    })
    .await;
    let first = s.pods.get("cat-0").await.expect("the Pod");
    let uid = first.metadata.uid.clone().unwrap_or_default();
    s.uid_across_resyncs(&uid).await;
    let logs = s.process.logs();
    assert_eq!(pod_writes(&logs, "creating child"), 1, "logs:\n{logs}");
    assert_eq!(pod_writes(&logs, "deleting child"), 0, "logs:\n{logs}");

    // A spec change rolls the Pod once.
    parents
        .patch(
            "cat",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"version": "2"}})),
        )
        .await
        .expect("changing the parent");
    eventually_within("the Pod is rolled to version 2", WAIT, || async {
        s.pods.get("cat-0").await.is_ok_and(|p| {
            p.metadata.deletion_timestamp.is_none() && env_version(&p).as_deref() == Some("2")
        })
    })
    .await;
    let rolled = s.pods.get("cat-0").await.expect("the rolled Pod");
    let new_uid = rolled.metadata.uid.clone().unwrap_or_default();
    assert_ne!(new_uid, uid);
    s.uid_across_resyncs(&new_uid).await;
    let logs = s.process.logs();
    assert_eq!(pod_writes(&logs, "creating child"), 2, "logs:\n{logs}");
    assert_eq!(pod_writes(&logs, "deleting child"), 1, "logs:\n{logs}");
}
