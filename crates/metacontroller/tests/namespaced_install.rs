//! A namespaced install (`--watch-namespaces`, or `WATCH_NAMESPACE` as the embedded run names
//! them): the real binary converges parents in the
//! namespaces it is given, ignores a parent in another one, and refuses a controller whose
//! child type is cluster-scoped with a CreateError Event (in `default`, the only namespace the
//! API server takes Events about cluster-scoped objects in).
//!
//! On a real cluster (RBAC enforced) the binary runs with the token of a ServiceAccount that
//! holds exactly what the Helm chart renders for `watchNamespaces` (Roles in those namespaces
//! and the minimal ClusterRole), and its log must hold no 403. On the embedded server, which
//! enforces no RBAC, the request counts per namespace show that nothing namespaced was listed
//! or watched outside the namespaces (that part is embedded-only).
//!
//! Safe beside other tests on a shared cluster: every namespace, CRD, controller object,
//! ServiceAccount and RBAC object has a unique name, and those outside the test's namespaces
//! (cluster-wide, or in `default`) are deleted at the end.

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, dynamic_api, events_about, eventually, service_account_token, unique_crd,
    unique_name, write_token_kubeconfig, ControllerProcess, CrdBuilder, HookServer, TestCluster,
};
use serde_json::{json, Value};

mod helm;

/// What the binary may list or watch cluster-wide in a namespaced install.
const CLUSTER_WIDE_READS: &[&str] = &[
    "compositecontrollers",
    "decoratorcontrollers",
    "customresourcedefinitions",
];

/// The namespaces of the test: where the binary runs, the two it watches, one it does not.
struct Namespaces {
    install: String,
    team_a: String,
    team_b: String,
    team_c: String,
}

impl Namespaces {
    /// Creates the four namespaces.
    async fn create(cluster: &TestCluster) -> Self {
        Namespaces {
            install: cluster.create_namespace("mc-install").await,
            team_a: cluster.create_namespace("team-a").await,
            team_b: cluster.create_namespace("team-b").await,
            team_c: cluster.create_namespace("team-c").await,
        }
    }

    /// `team-a,team-b`.
    fn watched(&self) -> String {
        format!("{},{}", self.team_a, self.team_b)
    }
}

/// Installs the parent kind and two CompositeControllers labelled `team=<label>`: one with
/// ConfigMap children (hook: one ConfigMap per parent), one whose child type is a
/// cluster-scoped kind. Returns the parent kind, the hook, the label and the refused
/// controller's name.
async fn install_controllers(cluster: &TestCluster) -> (CrdBuilder, HookServer, String, String) {
    let parent = cluster.install_parent_crd("nsinstall").await;
    let things = unique_crd("nsthing", "Thing", "things").cluster_scoped();
    cluster.install_crd(&things.build()).await;
    let hook = HookServer::one_configmap_child("nsinstall").await;
    let label = unique_name("team");
    let sync = json!({"sync": {"webhook": {"url": hook.url("/sync")}}});
    let parent_ref = json!({"apiVersion": parent.api_version(), "resource": parent.plural()});
    let _: CompositeController = cluster
        .create_controller(
            &unique_name("nsinstall"),
            &label,
            json!({"parentResource": parent_ref, "hooks": sync,
                   "childResources": [{"apiVersion": "v1", "resource": "configmaps"}]}),
        )
        .await;
    let refused = unique_name("nsrefused");
    let _: CompositeController = cluster
        .create_controller(
            &refused,
            &label,
            json!({"parentResource": parent_ref, "hooks": sync,
                   "childResources": [{"apiVersion": things.api_version(), "resource": "things"}]}),
        )
        .await;
    (parent, hook, label, refused)
}

/// The binary for the controllers labelled `team=<label>`, installed in `ns.install` and
/// scoped to team-a and team-b, with `credentials`.
fn start_namespaced(
    cluster: &TestCluster,
    ns: &Namespaces,
    credentials: &Credentials,
    label: &str,
) -> ControllerProcess {
    let selector = format!("team={label}");
    let watched = ns.watched();
    let kubeconfig = credentials.kubeconfig.to_string_lossy().into_owned();
    let mut args = vec![
        "run",
        "--kubeconfig",
        kubeconfig.as_str(),
        "--discovery-interval",
        "500ms",
        "--target-label-selector",
        selector.as_str(),
    ];
    let mut env = vec![("POD_NAMESPACE", ns.install.as_str())];
    // Both ways of naming the namespaces: the operator SDKs' environment variable on the
    // embedded server, the flag (as the chart renders it) on a real one.
    if cluster.is_embedded() {
        env.push(("WATCH_NAMESPACE", watched.as_str()));
    } else {
        args.extend(["--watch-namespaces", watched.as_str()]);
    }
    ControllerProcess::start_with_env(env!("CARGO_BIN_EXE_metacontroller"), args, env)
}

/// Creates parent `p` in team-a, team-b and team-c; waits until the first two converged,
/// then checks team-c's was never synced and the hook saw only team-a and team-b.
async fn assert_only_watched_parents_sync(
    cluster: &TestCluster,
    ns: &Namespaces,
    parent: &CrdBuilder,
    hook: &HookServer,
) {
    for namespace in [&ns.team_a, &ns.team_b, &ns.team_c] {
        let p = json!({
            "apiVersion": parent.api_version(), "kind": "Parent", "metadata": {"name": "p"},
            "spec": {"selector": {"matchLabels": {"app": "nsinstall"}}},
        });
        create_object(&parent.api(cluster.client(), Some(namespace)), p).await;
    }
    for namespace in [&ns.team_a, &ns.team_b] {
        let parents = parent.api(cluster.client(), Some(namespace));
        let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), namespace);
        eventually(&format!("parent in {namespace} converged"), || async {
            let status = parents
                .get("p")
                .await
                .is_ok_and(|p| p.data["status"]["ok"] == true);
            status && cms.get_opt("p-cm").await.ok().flatten().is_some()
        })
        .await;
    }
    // team-c is outside the scope: never seen, so never synced.
    let cms_c: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns.team_c);
    assert!(cms_c.get_opt("p-cm").await.unwrap().is_none());
    let parent_c = parent
        .api(cluster.client(), Some(&ns.team_c))
        .get("p")
        .await;
    assert!(parent_c.unwrap().data.get("status").is_none());
    let synced: BTreeSet<String> = hook
        .requests("/sync")
        .iter()
        .filter_map(|r| {
            r["parent"]["metadata"]["namespace"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(
        synced,
        BTreeSet::from([ns.team_a.clone(), ns.team_b.clone()])
    );
}

/// Embedded-only: the binary listed and watched nothing namespaced outside team-a and
/// team-b, and nothing cluster-wide but [`CLUSTER_WIDE_READS`].
fn assert_no_reads_outside(cluster: &TestCluster, ns: &Namespaces) {
    let Some(control) = cluster.control() else {
        return;
    };
    let outside: Vec<_> = control
        .request_counts_by_namespace()
        .into_keys()
        .filter(|(verb, resource, namespace)| {
            matches!(verb.as_str(), "list" | "watch")
                && if namespace.is_empty() {
                    !CLUSTER_WIDE_READS.contains(&resource.as_str())
                } else {
                    *namespace != ns.team_a && *namespace != ns.team_b
                }
        })
        .collect();
    assert!(
        outside.is_empty(),
        "listed/watched outside the scope: {outside:?}"
    );
}

/// The refused controller gets a CreateError Event (in `default`) naming its cluster-scoped
/// child type, the binary logs it, and (on a real cluster) no request was refused.
async fn assert_cluster_scoped_child_refused(
    cluster: &TestCluster,
    process: &ControllerProcess,
    refused: &str,
) {
    eventually(
        "CreateError Event for the cluster-scoped child type",
        || async {
            controller_events(cluster, "default", refused)
                .await
                .iter()
                .any(|(reason, message)| {
                    reason == "CreateError"
                        && message.contains("child resource things.")
                        && message.contains("is cluster-scoped")
                })
        },
    )
    .await;
    let logs = process.logs();
    assert!(logs.contains("is cluster-scoped"), "{logs}");
    if !cluster.is_embedded() {
        // kube's errors read `... "forbidden" ... reason: "Forbidden", code: 403`; unique
        // names may contain the digits 403, so look for the status, not the number.
        let refused = ["Forbidden", "forbidden", "code: 403", "403 Forbidden"];
        assert!(
            !refused.iter().any(|r| logs.contains(r)),
            "a request was refused (403):\n{logs}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaced_install_syncs_only_its_namespaces() {
    let cluster = TestCluster::start().await;
    if !cluster.is_embedded() && !helm::helm_sdk_available() {
        return;
    }
    cluster.install_metacontroller_crds().await;
    let ns = Namespaces::create(&cluster).await;
    let (parent, hook, label, refused) = install_controllers(&cluster).await;

    let credentials =
        Credentials::for_install(&cluster, &ns.install, &[&ns.team_a, &ns.team_b]).await;
    if let Some(control) = cluster.control() {
        control.reset_counts();
    }
    let process = start_namespaced(&cluster, &ns, &credentials, &label);

    assert_only_watched_parents_sync(&cluster, &ns, &parent, &hook).await;
    assert_no_reads_outside(&cluster, &ns);
    assert_cluster_scoped_child_refused(&cluster, &process, &refused).await;
    drop(process);
    credentials.delete_cluster_objects(&cluster).await;
}

/// `(reason, message)` of the Events about controller object `name` in `namespace`.
async fn controller_events(
    cluster: &TestCluster,
    namespace: &str,
    name: &str,
) -> Vec<(String, String)> {
    events_about(cluster, namespace, name)
        .await
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// An RBAC object outside the test's namespaces: kind, plural, namespace, name.
type Shared = (String, String, Option<String>, String);

/// The credentials the binary runs with: the admin kubeconfig on the embedded server; on a
/// real cluster the token of the chart's ServiceAccount, bound to the RBAC objects the chart
/// renders for `watchNamespaces`.
struct Credentials {
    kubeconfig: PathBuf,
    /// Objects created outside the test's namespaces (kind, plural, namespace, name),
    /// deleted at the end.
    cluster_objects: Vec<Shared>,
    _dir: Option<tempfile::TempDir>,
}

impl Credentials {
    async fn for_install(cluster: &TestCluster, install: &str, namespaces: &[&str]) -> Self {
        if cluster.is_embedded() {
            return Credentials {
                kubeconfig: cluster.kubeconfig_path().to_path_buf(),
                cluster_objects: Vec::new(),
                _dir: None,
            };
        }
        let release = unique_name("mcns");
        let values = json!({"watchNamespaces": namespaces}).to_string();
        let out = helm::helm_chart(&[
            "render",
            "--release",
            &release,
            "--namespace",
            install,
            "--set-json",
            &values,
        ])
        .await
        .expect_ok("helm template with watchNamespaces");
        let objects: Vec<Value> = serde_json::from_str(&out).expect("rendered objects");
        let (service_account, cluster_objects) = apply_rbac(cluster, &objects).await;
        let token = service_account_token(cluster, install, &service_account).await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        write_token_kubeconfig(cluster.kubeconfig_path(), &token, &kubeconfig);
        Credentials {
            kubeconfig,
            cluster_objects,
            _dir: Some(dir),
        }
    }

    async fn delete_cluster_objects(&self, cluster: &TestCluster) {
        for (kind, plural, namespace, name) in &self.cluster_objects {
            let api = dynamic_api(
                cluster.client(),
                "rbac.authorization.k8s.io/v1",
                kind,
                plural,
                namespace.as_deref(),
            );
            let _ = api.delete(name, &DeleteParams::default()).await;
        }
    }
}

/// Creates the ServiceAccount and RBAC objects of a chart render (not the workload) and
/// returns the ServiceAccount's name and the cluster-scoped objects created.
async fn apply_rbac(cluster: &TestCluster, objects: &[Value]) -> (String, Vec<Shared>) {
    let mut service_account = None;
    let mut cluster_objects = Vec::new();
    for obj in objects {
        let kind = obj["kind"].as_str().unwrap_or_default();
        let plural = match kind {
            "ServiceAccount" => "serviceaccounts",
            "Role" => "roles",
            "RoleBinding" => "rolebindings",
            "ClusterRole" => "clusterroles",
            "ClusterRoleBinding" => "clusterrolebindings",
            _ => continue,
        };
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        // The aggregated view/edit roles grant the binary nothing.
        if name.contains("-aggregate-") {
            continue;
        }
        let namespace = obj["metadata"]["namespace"].as_str();
        if kind == "ServiceAccount" {
            service_account = Some(name.clone());
        } else if namespace.is_none_or(|ns| ns == "default") {
            cluster_objects.push((
                kind.to_string(),
                plural.to_string(),
                namespace.map(String::from),
                name.clone(),
            ));
        }
        let api_version = obj["apiVersion"].as_str().unwrap_or_default();
        let api = dynamic_api(cluster.client(), api_version, kind, plural, namespace);
        let typed: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
        api.create(&PostParams::default(), &typed)
            .await
            .unwrap_or_else(|e| panic!("creating {kind} {name}: {e}"));
    }
    let service_account = service_account.expect("the render has a ServiceAccount");
    (service_account, cluster_objects)
}
