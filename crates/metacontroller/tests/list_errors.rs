//! A controller whose child type the binary cannot list syncs nothing (a hook told about a
//! cache missing children would delete or recreate them) and says why: a Warning
//! `ListError` Event on the controller object naming the resource and the server's answer.
//! Once the resource can be listed the parent converges.
//!
//! On the embedded server lists of the child resource are refused with an injected 403. On a
//! real cluster (RBAC enforced) the binary runs with the token of a ServiceAccount whose
//! ClusterRole grants what it needs except the child's API group; a second ClusterRole
//! granting that group ends the failure. Safe beside other tests on a shared cluster: every
//! CRD, controller, ServiceAccount and RBAC object has a unique name, and the cluster-scoped
//! ones are deleted at the end.

use std::time::Duration;

use kube::api::{Api, DeleteParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, dynamic_api, eventually, service_account_token, unique_name, until_event,
    write_token_kubeconfig, ControllerProcess, CrdBuilder, Fault, HookReply, HookServer,
    TestCluster,
};
use serde_json::{json, Value};

/// How long the report may take: the first list fails at once, the report comes with the
/// next discovery tick (500 ms here); a real server answers more slowly.
const REPORT_WITHIN: Duration = Duration::from_secs(60);

/// A hook answering every sync with one `Widget` child `<parent>-w` of `child`'s kind.
async fn widget_hook(child: &CrdBuilder) -> HookServer {
    let api_version = child.api_version();
    HookServer::start(move |_, request| {
        let parent = metacontroller_testkit::parent_name(request);
        HookReply::json(json!({
            "children": [{"apiVersion": api_version, "kind": "Widget",
                          "metadata": {"name": format!("{parent}-w")}}],
            "status": {"widgets": 1},
        }))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_type_that_cannot_be_listed_is_reported_on_the_controller_and_nothing_syncs() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let parent = cluster.install_parent_crd("listerr").await;
    let child = cluster
        .install_unique_crd("listerr-child", "Widget", "widgets")
        .await;
    let ns = cluster.create_namespace("listerr").await;
    let hook = widget_hook(&child).await;
    let label = unique_name("team");
    let controller = unique_name("listerr");
    let _: CompositeController = cluster
        .create_controller(
            &controller,
            &label,
            json!({
                "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
                "childResources": [{"apiVersion": child.api_version(), "resource": child.plural()}],
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}},
                "generateSelector": true,
            }),
        )
        .await;
    let mut access = Access::without_child(&cluster, &parent, &child).await;
    let process = ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        &access.kubeconfig,
        &label,
        &["--discovery-interval", "500ms"],
    );
    let parents = parent.api(cluster.client(), Some(&ns));
    create_object(
        &parents,
        json!({"apiVersion": parent.api_version(), "kind": "Parent",
               "metadata": {"name": "p1", "namespace": ns}, "spec": {}}),
    )
    .await;

    let needle = format!("Cannot list widgets ({})", child.api_version());
    // Cluster-scoped objects' Events live in `default`.
    let reported = until_event(
        &cluster,
        ("default", &controller),
        "ListError",
        &needle,
        REPORT_WITHIN,
    )
    .await
    .message
    .unwrap_or_default();
    assert!(
        reported.contains("(403 Forbidden)") && !reported.contains("Status {"),
        "the Event carries the server's answer, without debug output: {reported}"
    );
    assert_eq!(
        hook.calls("/sync"),
        0,
        "no sync while the children cannot be listed"
    );

    access.grant_child(&cluster).await;
    let widgets = child.api(cluster.client(), Some(&ns));
    let deadline = tokio::time::Instant::now() + REPORT_WITHIN;
    while widgets.get("p1-w").await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Widget for p1 within {REPORT_WITHIN:?} of widgets becoming listable; binary log:\n{}",
            process.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually("the log saying the resources list again", || async {
        process
            .logs()
            .contains("every resource of the controller can be listed again")
    })
    .await;
    drop(process);
    access.delete(&cluster).await;
}

/// How the binary reaches the cluster: the admin kubeconfig with lists of the child resource
/// refused (embedded), or a ServiceAccount without access to the child's group (real).
struct Access {
    kubeconfig: std::path::PathBuf,
    child_group: String,
    service_account: Option<(String, String)>,
    /// Cluster-scoped RBAC objects to delete at the end: (kind, plural, name).
    cluster_objects: Vec<(String, String, String)>,
    _dir: tempfile::TempDir,
}

impl Access {
    async fn without_child(cluster: &TestCluster, parent: &CrdBuilder, child: &CrdBuilder) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let child_group = group_of(child);
        if let Some(control) = cluster.control() {
            control.inject(Fault::status(
                Some("list"),
                Some(child.plural()),
                1_000_000,
                403,
            ));
            return Access {
                kubeconfig: cluster.kubeconfig_path().to_path_buf(),
                child_group,
                service_account: None,
                cluster_objects: Vec::new(),
                _dir: dir,
            };
        }
        let namespace = cluster.create_namespace("listerr-sa").await;
        let account = unique_name("listerr-sa");
        create_object(
            &dynamic_api(
                cluster.client(),
                "v1",
                "ServiceAccount",
                "serviceaccounts",
                Some(&namespace),
            ),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": account, "namespace": namespace}}),
        )
        .await;
        let mut access = Access {
            kubeconfig: dir.path().join("kubeconfig"),
            child_group,
            service_account: Some((namespace.clone(), account.clone())),
            cluster_objects: Vec::new(),
            _dir: dir,
        };
        access
            .bind(cluster, "listerr-base", base_rules(&group_of(parent)))
            .await;
        let token = service_account_token(cluster, &namespace, &account).await;
        write_token_kubeconfig(cluster.kubeconfig_path(), &token, &access.kubeconfig);
        access
    }

    /// Lets the binary list the child resource from now on.
    async fn grant_child(&mut self, cluster: &TestCluster) {
        match cluster.control() {
            Some(control) => control.clear_faults(),
            None => {
                let group = self.child_group.clone();
                let rules = json!([{"apiGroups": [group], "resources": ["*"], "verbs": ["*"]}]);
                self.bind(cluster, "listerr-child", rules).await;
            }
        }
    }

    /// A ClusterRole `prefix-<unique>` with `rules`, bound to the ServiceAccount.
    async fn bind(&mut self, cluster: &TestCluster, prefix: &str, rules: Value) {
        let Some((namespace, account)) = &self.service_account else {
            return;
        };
        let name = unique_name(prefix);
        let rbac = |kind: &str, plural: &str| {
            dynamic_api(
                cluster.client(),
                "rbac.authorization.k8s.io/v1",
                kind,
                plural,
                None,
            )
        };
        create_object(
            &rbac("ClusterRole", "clusterroles"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": name}, "rules": rules}),
        )
        .await;
        create_object(
            &rbac("ClusterRoleBinding", "clusterrolebindings"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": name},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                   "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}),
        )
        .await;
        for (kind, plural) in [
            ("ClusterRole", "clusterroles"),
            ("ClusterRoleBinding", "clusterrolebindings"),
        ] {
            self.cluster_objects
                .push((kind.into(), plural.into(), name.clone()));
        }
    }

    /// Deletes the cluster-scoped RBAC objects.
    async fn delete(&self, cluster: &TestCluster) {
        for (kind, plural, name) in &self.cluster_objects {
            let api: Api<DynamicObject> = dynamic_api(
                cluster.client(),
                "rbac.authorization.k8s.io/v1",
                kind,
                plural,
                None,
            );
            let _ = api.delete(name, &DeleteParams::default()).await;
        }
    }
}

/// What the binary needs to run the controller, except anything of the child's group.
fn base_rules(parent_group: &str) -> Value {
    json!([
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["metacontroller.k8s.io"], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": [parent_group], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["*"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]},
    ])
}

/// The API group of a CRD's kind.
fn group_of(crd: &CrdBuilder) -> String {
    crd.api_version()
        .rsplit_once('/')
        .map(|(group, _)| group.to_string())
        .unwrap_or_default()
}
