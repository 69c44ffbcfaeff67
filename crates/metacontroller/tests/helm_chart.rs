//! The Helm chart through the real Helm engine: `hack/helm_chart.py` drives Helm v4's Go SDK
//! (the `helm-python-sdk` package) to lint and render `charts/metacontroller`, to compare its
//! default render with `deploy/`, and to install, upgrade and uninstall it in the API server.
//!
//! Without python3 or the package these tests skip with a message, except in CI (`CI=true`),
//! where `.ci/run` installs the package and a missing one is a failure.

use std::process::Stdio;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use metacontroller_testkit::{dynamic_api, eventually, unique_name, TestCluster};
use serde_json::{json, Value};

mod helm;
use helm::{helm_chart, helm_sdk_available, repo_root, STEP_TIMEOUT};

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the render has no {kind} {name}"))
}

/// `hack/helm_chart.py args` (a `render`), which must succeed (`what` names it when it does
/// not); the objects it rendered.
async fn render(args: &[&str], what: &str) -> Vec<Value> {
    let out = helm_chart(args).await.expect_ok(what);
    serde_json::from_str(&out).expect("JSON objects")
}

/// The container args of the rendered StatefulSet `metacontroller`.
fn default_sts_args(objects: &[Value]) -> &Value {
    &find(objects, "StatefulSet", "metacontroller")["spec"]["template"]["spec"]["containers"][0]
        ["args"]
}

#[tokio::test]
async fn chart_passes_helm_lint_strict_with_defaults_and_every_ci_values_file() {
    if !helm_sdk_available() {
        return;
    }
    let out = helm_chart(&["lint"]).await.expect_ok("helm lint");
    assert!(out.contains("lint default values"), "{out}");
    assert!(out.contains("upstream-all-keys-values.yaml"), "{out}");
}

#[tokio::test]
async fn deploy_kustomization_equals_the_default_render() {
    if !helm_sdk_available() {
        return;
    }
    let out = helm_chart(&["check-deploy"])
        .await
        .expect_ok("comparing deploy/ with the chart");
    assert!(out.contains("deploy/ matches the chart"), "{out}");
}

#[tokio::test]
async fn default_render_is_secure_and_single_replica() {
    if !helm_sdk_available() {
        return;
    }
    let objects = render(&["render"], "helm template").await;
    let sts = find(&objects, "StatefulSet", "metacontroller");
    assert_eq!(sts["metadata"]["namespace"], "metacontroller");
    assert_eq!(sts["spec"]["replicas"], 1);
    let pod = &sts["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"],
        "ghcr.io/metacontroller-rs/metacontroller:v0.1.0"
    );
    assert_eq!(c["command"], json!(["/usr/bin/metacontroller"]));
    assert!(
        !c["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().starts_with("--leader-election")),
        "one replica needs no leader election: {}",
        c["args"]
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": 8081})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": 8081})
    );
    assert_eq!(
        c["ports"],
        json!([
            {"name": "metrics", "containerPort": 9999, "protocol": "TCP"},
            {"name": "health", "containerPort": 8081, "protocol": "TCP"},
        ])
    );
    assert_eq!(
        c["securityContext"],
        json!({
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "runAsNonRoot": true,
            "capabilities": {"drop": ["ALL"]},
        })
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"],
        json!({"type": "RuntimeDefault"})
    );
    // What the binary itself needs, whatever clusterRole.rules say.
    let runtime = find(&objects, "ClusterRole", "metacontroller-runtime");
    assert_eq!(
        runtime["rules"][0],
        json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})
    );
    // ConfigMaps: hook credentials (get) and in-process hook code (a watch per ConfigMap).
    assert_eq!(
        runtime["rules"][1],
        json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]})
    );
    let lease = find(&objects, "Role", "metacontroller-leader-election");
    assert_eq!(lease["metadata"]["namespace"], "metacontroller");
    assert_eq!(lease["rules"][0]["resources"], json!(["leases"]));
    // Upstream's broad ClusterRole by default.
    let role = find(&objects, "ClusterRole", "metacontroller");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
    );
    assert!(!objects
        .iter()
        .any(|o| o["kind"] == "Service" || o["kind"] == "PodDisruptionBudget"));
}

/// A values file written for upstream's chart with every key set works unchanged, and each
/// key reaches the objects.
#[tokio::test]
async fn upstream_style_values_file_sets_every_key() {
    if !helm_sdk_available() {
        return;
    }
    let objects = render(
        &[
            "render",
            "--values",
            "charts/metacontroller/ci/upstream-all-keys-values.yaml",
        ],
        "rendering upstream-all-keys-values.yaml",
    )
    .await;
    let ns = "platform-controllers"; // namespaceOverride
    let full = "metacontroller-prod"; // fullnameOverride

    let sa = find(&objects, "ServiceAccount", "metacontroller-sa"); // serviceAccount.name
    assert_eq!(sa["metadata"]["namespace"], ns);
    assert_eq!(
        sa["metadata"]["annotations"],
        json!({"iam.example.com/role": "metacontroller"})
    );
    check_upstream_statefulset(find(&objects, "StatefulSet", full), ns);

    let role = find(&objects, "ClusterRole", full);
    assert_eq!(
        role["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"],
        json!({"rbac.example.com/aggregate-to-metacontroller": "true"})
    );
    assert_eq!(role["rules"], json!([]));
    let binding = find(&objects, "ClusterRoleBinding", full);
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "metacontroller-sa", "namespace": ns}])
    );

    let pdb = find(&objects, "PodDisruptionBudget", full);
    assert_eq!(pdb["apiVersion"], "policy/v1");
    // Kubernetes allows one of the two; minAvailable wins as in upstream's chart.
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert!(pdb["spec"].get("maxUnavailable").is_none());

    let svc = find(&objects, "Service", full);
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "metrics", "port": 9999, "protocol": "TCP", "targetPort": 9999}])
    );
}

/// The StatefulSet rendered from upstream-all-keys-values.yaml in namespace `ns`: each pod
/// and container key of the values file reached it.
fn check_upstream_statefulset(sts: &Value, ns: &str) {
    assert_eq!(sts["metadata"]["namespace"], ns);
    assert_eq!(sts["metadata"]["labels"]["app.kubernetes.io/name"], "mc"); // nameOverride
    assert_eq!(sts["spec"]["replicas"], 2);
    let tpl = &sts["spec"]["template"];
    assert_eq!(
        tpl["metadata"]["annotations"],
        json!({"example.com/team": "platform"})
    );
    let pod = &tpl["spec"];
    assert_eq!(pod["serviceAccountName"], "metacontroller-sa");
    assert_eq!(
        pod["imagePullSecrets"],
        json!([{"name": "registry-credentials"}])
    );
    assert_eq!(pod["securityContext"]["fsGroup"], 65532);
    assert_eq!(pod["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    assert!(pod["affinity"]["nodeAffinity"].is_object());
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"],
        "registry.example.com/mirror/metacontroller:v4.17.2-rs"
    );
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(c["command"], json!(["/usr/bin/metacontroller"]));
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args.first(), Some(&"--zap-log-level=4"));
    assert!(args.contains(&"--workers=50"));
    // replicas: 2 switches leader election on, once.
    assert_eq!(args.last(), Some(&"--leader-election"));
    assert_eq!(
        args.iter()
            .filter(|a| a.starts_with("--leader-election"))
            .count(),
        1
    );
    assert_eq!(c["env"][0], json!({"name": "RUST_BACKTRACE", "value": "1"}));
    assert_eq!(
        c["env"][1]["valueFrom"]["secretKeyRef"]["name"],
        "hook-token"
    );
    assert_eq!(c["resources"]["limits"]["memory"], "256Mi");
    assert_eq!(c["securityContext"]["runAsUser"], 65532);
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], 8082); // probes.port
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], 8082);
}

#[tokio::test]
async fn an_explicit_leader_election_flag_is_left_alone() {
    if !helm_sdk_available() {
        return;
    }
    let objects = render(
        &[
            "render",
            "--set-json",
            r#"{"replicas": 3, "commandArgs": ["--leader-election=false"]}"#,
        ],
        "rendering with --leader-election=false",
    )
    .await;
    assert_eq!(
        default_sts_args(&objects),
        &json!(["--leader-election=false"])
    );
}

#[tokio::test]
async fn sharding_makes_every_replica_active() {
    if !helm_sdk_available() {
        return;
    }
    let objects = render(
        &[
            "render",
            "--set-json",
            r#"{"replicas": 3, "commandArgs": [], "sharding": {"enabled": true, "shards": 32}}"#,
        ],
        "rendering with sharding on",
    )
    .await;
    let sts = find(&objects, "StatefulSet", "metacontroller");
    assert_eq!(sts["spec"]["replicas"], json!(3));
    assert_eq!(
        default_sts_args(&objects),
        &json!(["--sharding", "--shards=32"])
    );
    // The Leases (membership and shards) are in the release namespace, with the verbs the
    // coordinator uses.
    let role = find(&objects, "Role", "metacontroller-leader-election");
    let verbs = &role["rules"][0]["verbs"];
    for verb in ["get", "list", "create", "update", "delete"] {
        assert!(
            verbs.as_array().unwrap().contains(&json!(verb)),
            "{verb}: {verbs}"
        );
    }
    let bad = helm_chart(&[
        "render",
        "--set-json",
        r#"{"sharding": {"enabled": true, "shards": 0}}"#,
    ])
    .await;
    assert!(!bad.ok, "shards: 0 accepted");
    // Without a count the chart passes the binary's default (tests/cli.rs).
    let objects = render(
        &["render", "--set-json", r#"{"sharding": {"enabled": true}}"#],
        "rendering with sharding on, default shards",
    )
    .await;
    let args = default_sts_args(&objects);
    assert!(
        args.as_array()
            .is_some_and(|a| a.contains(&json!("--shards=60"))),
        "{args}"
    );
}

/// `watchNamespaces`: Roles in each namespace instead of the resource ClusterRoles, and a
/// minimal ClusterRole that only reads controller objects, CRDs and /openapi/v3.
#[tokio::test]
async fn watch_namespaces_renders_roles_and_a_minimal_cluster_role() {
    if !helm_sdk_available() {
        return;
    }
    let objects = render(
        &[
            "render",
            "--set-json",
            r#"{"watchNamespaces": ["team-a", "team-b"]}"#,
        ],
        "rendering with watchNamespaces",
    )
    .await;
    let args = default_sts_args(&objects);
    assert!(
        args.as_array()
            .is_some_and(|a| a.contains(&json!("--watch-namespaces=team-a,team-b"))),
        "{args}"
    );
    for name in ["metacontroller", "metacontroller-runtime"] {
        assert!(
            !objects
                .iter()
                .any(|o| o["metadata"]["name"] == name && o["kind"] == "ClusterRole"),
            "ClusterRole {name} rendered in a namespaced install"
        );
    }
    let cluster = find(&objects, "ClusterRole", "metacontroller-cluster");
    assert_eq!(
        cluster["rules"],
        json!([
            {"apiGroups": ["metacontroller.k8s.io"],
             "resources": ["compositecontrollers", "decoratorcontrollers"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
             "verbs": ["get", "list", "watch"]},
            {"nonResourceURLs": ["/openapi/v3", "/openapi/v3/*"], "verbs": ["get"]},
        ])
    );
    find(&objects, "ClusterRoleBinding", "metacontroller-cluster");
    for ns in ["team-a", "team-b"] {
        let role = objects
            .iter()
            .find(|o| {
                o["kind"] == "Role"
                    && o["metadata"]["name"] == "metacontroller"
                    && o["metadata"]["namespace"] == ns
            })
            .unwrap_or_else(|| panic!("no Role in {ns}"));
        assert_eq!(
            role["rules"][0],
            json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]})
        );
        assert!(objects.iter().any(|o| o["kind"] == "RoleBinding"
            && o["metadata"]["namespace"] == ns
            && o["subjects"][0]["namespace"] == "metacontroller"));
    }
    // Events about cluster-scoped controller objects are only accepted in `default`.
    let events = find(&objects, "Role", "metacontroller-events");
    assert_eq!(events["metadata"]["namespace"], "default");
    let bad = helm_chart(&["render", "--set-json", r#"{"watchNamespaces": ["Team_A"]}"#]).await;
    assert!(!bad.ok, "an invalid namespace name rendered");
}

#[tokio::test]
async fn invalid_values_fail_with_a_clear_schema_error() {
    if !helm_sdk_available() {
        return;
    }
    for (values, expected) in [
        (
            r#"{"replcas": 2}"#,
            "at '': additional properties 'replcas' not allowed",
        ),
        (
            r#"{"serviceAccount": {"create": true, "nmae": "x"}}"#,
            "at '/serviceAccount': additional properties 'nmae' not allowed",
        ),
        (
            r#"{"image": {"pullPolicy": "Sometimes"}}"#,
            "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'",
        ),
        (
            r#"{"replicas": "2"}"#,
            "at '/replicas': got string, want integer",
        ),
    ] {
        let run = helm_chart(&["render", "--set-json", values]).await;
        assert!(!run.ok, "{values} rendered:\n{}", run.stdout);
        assert!(
            run.stderr
                .contains("values don't meet the specifications of the schema")
                && run.stderr.contains(expected),
            "{values}: unclear error:\n{}",
            run.stderr
        );
    }
}

/// A minimal Prometheus Operator ServiceMonitor CRD: enough for the API server to serve
/// the kind.
fn service_monitor_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"plural": "servicemonitors", "singular": "servicemonitor",
                      "kind": "ServiceMonitor", "listKind": "ServiceMonitorList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {
                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }}],
        },
    })
}

async fn gone<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    matches!(api.get_opt(name).await, Ok(None))
}

/// The Metacontroller CRDs the chart ships in `crds/`.
const METACONTROLLER_CRDS: [&str; 3] = [
    "compositecontrollers",
    "decoratorcontrollers",
    "controllerrevisions",
];

/// One Helm release of the chart in a namespace of its own, driven by `hack/helm_chart.py`.
struct Release {
    cluster: TestCluster,
    client: kube::Client,
    ns: String,
    release: String,
    /// The objects' name, `<release>-metacontroller`.
    full: String,
}

impl Release {
    /// A release with unique names in a fresh [`TestCluster`] (nothing installed yet).
    async fn new() -> Self {
        let cluster = TestCluster::start().await;
        let client = cluster.client();
        let release = unique_name("mc");
        Release {
            cluster,
            client,
            ns: unique_name("helm"),
            full: format!("{release}-metacontroller"),
            release,
        }
    }

    /// `helm <action>` of this release with `extra` arguments.
    async fn helm(&self, action: &str, extra: &[&str]) -> helm::Run {
        let kubeconfig = self.cluster.kubeconfig_path().to_str().expect("UTF-8 path");
        let target = [
            action,
            "--kubeconfig",
            kubeconfig,
            "--release",
            &self.release,
            "--namespace",
            &self.ns,
        ];
        helm_chart(&[&target[..], extra].concat()).await
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Selects the release's Secrets (one per revision).
    fn release_secrets(&self) -> ListParams {
        ListParams::default().labels(&format!("owner=helm,name={}", self.release))
    }

    fn statefulsets(&self) -> Api<StatefulSet> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn service_monitors(&self) -> Api<DynamicObject> {
        dynamic_api(
            self.client.clone(),
            "monitoring.coreos.com/v1",
            "ServiceMonitor",
            "servicemonitors",
            Some(&self.ns),
        )
    }

    /// The names of the release's ClusterRoles.
    fn cluster_role_names(&self) -> [String; 4] {
        let full = &self.full;
        [
            full.clone(),
            format!("{full}-runtime"),
            format!("{full}-aggregate-view"),
            format!("{full}-aggregate-edit"),
        ]
    }
}

/// `helm install`: a typo in the values is refused first; then revision 1 with its release
/// Secret, the CRDs, a server-side applied single-replica StatefulSet and the RBAC objects.
async fn install_and_check(r: &Release) {
    // A typo is refused before anything is created.
    let typo = r
        .helm("install", &["--set-json", r#"{"replcas": 2}"#])
        .await;
    assert!(
        !typo.ok && typo.stderr.contains("'replcas' not allowed"),
        "{}",
        typo.stderr
    );
    r.helm("install", &[]).await.expect_ok("helm install");
    let secret = r
        .secrets()
        .get(&format!("sh.helm.release.v1.{}.v1", r.release))
        .await
        .expect("the release Secret of revision 1");
    assert_eq!(secret.type_.as_deref(), Some("helm.sh/release.v1"));
    let crds: Api<CustomResourceDefinition> = Api::all(r.client.clone());
    for crd in METACONTROLLER_CRDS {
        crds.get(&format!("{crd}.metacontroller.k8s.io"))
            .await
            .unwrap_or_else(|e| panic!("CRD {crd} from the chart's crds/: {e}"));
    }
    let sts = r
        .statefulsets()
        .get(&r.full)
        .await
        .expect("the StatefulSet");
    assert_eq!(sts.spec.replicas, Some(1));
    // Helm 4 writes with server-side apply.
    let managers = sts.metadata.managed_fields.clone().unwrap_or_default();
    assert!(
        managers
            .iter()
            .any(|m| m.operation.as_deref() == Some("Apply")),
        "not server-side applied: {managers:?}"
    );
    Api::<ServiceAccount>::namespaced(r.client.clone(), &r.ns)
        .get(&r.full)
        .await
        .expect("the ServiceAccount");
    Api::<Role>::namespaced(r.client.clone(), &r.ns)
        .get(&format!("{}-leader-election", r.full))
        .await
        .expect("the leader election Role");
    let cluster_roles: Api<ClusterRole> = Api::all(r.client.clone());
    for name in &r.cluster_role_names() {
        cluster_roles
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("ClusterRole {name}: {e}"));
    }
}

/// `helm upgrade` to two replicas with a PodDisruptionBudget and the metrics Service:
/// revision 2, leader election on, both new objects there.
async fn upgrade_and_check(r: &Release) {
    r.helm(
        "upgrade",
        &[
            "--values",
            "charts/metacontroller/ci/leader-election-values.yaml",
            "--set-json",
            r#"{"service": {"enabled": true}}"#,
        ],
    )
    .await
    .expect_ok("helm upgrade");
    r.secrets()
        .get(&format!("sh.helm.release.v1.{}.v2", r.release))
        .await
        .expect("the release Secret of revision 2");
    let sts = r
        .statefulsets()
        .get(&r.full)
        .await
        .expect("the StatefulSet");
    let spec = sts.spec;
    assert_eq!(spec.replicas, Some(2));
    let args = spec.template.spec.expect("pod spec").containers[0]
        .args
        .clone()
        .unwrap_or_default();
    assert!(args.contains(&"--leader-election".to_string()), "{args:?}");
    let pdb = Api::<PodDisruptionBudget>::namespaced(r.client.clone(), &r.ns)
        .get(&r.full)
        .await
        .expect("the PodDisruptionBudget");
    assert_eq!(
        serde_json::to_value(pdb.spec.and_then(|s| s.min_available)).unwrap(),
        json!(1)
    );
    let svc = Api::<Service>::namespaced(r.client.clone(), &r.ns)
        .get(&r.full)
        .await
        .expect("the metrics Service");
    assert_eq!(
        svc.spec.and_then(|s| s.ports).unwrap_or_default()[0].port,
        9999
    );
}

/// A ServiceMonitor needs the Prometheus Operator's CRD: without it Helm names the cause
/// (this goes through /openapi/v2); with it (installed here on the embedded server) the
/// upgrade creates the monitor. Returns whether it did.
async fn upgrade_with_a_service_monitor(r: &Release) -> bool {
    let monitor_values = [
        "--values",
        "charts/metacontroller/ci/service-monitor-values.yaml",
    ];
    let crds: Api<CustomResourceDefinition> = Api::all(r.client.clone());
    let crd_absent = crds
        .get_opt("servicemonitors.monitoring.coreos.com")
        .await
        .expect("reading CRDs")
        .is_none();
    if crd_absent {
        let refused = r.helm("upgrade", &monitor_values).await;
        assert!(!refused.ok, "installed a ServiceMonitor without its CRD");
        assert!(
            refused.stderr.contains(
                r#"no matches for kind "ServiceMonitor" in version "monitoring.coreos.com/v1""#
            ),
            "{}",
            refused.stderr
        );
        if r.cluster.is_embedded() {
            r.cluster.install_crd(&service_monitor_crd()).await;
        }
    }
    // A real cluster without the CRD keeps it that way: nothing to upgrade to.
    if crd_absent && !r.cluster.is_embedded() {
        return false;
    }
    r.helm("upgrade", &monitor_values)
        .await
        .expect_ok("helm upgrade with a ServiceMonitor");
    let monitor = r
        .service_monitors()
        .get(&r.full)
        .await
        .expect("the ServiceMonitor");
    assert_eq!(monitor.data["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(monitor.data["spec"]["endpoints"][0]["interval"], "30s");
    true
}

/// Whether every namespaced and cluster-scoped object of the release is gone (the
/// ServiceMonitor too when `monitor_created`).
async fn release_objects_gone(r: &Release, monitor_created: bool) -> bool {
    let (client, ns, full) = (&r.client, &r.ns, &r.full);
    let lease_role = format!("{full}-leader-election");
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let mut all_gone = gone(&r.statefulsets(), full).await
        && gone(
            &Api::<PodDisruptionBudget>::namespaced(client.clone(), ns),
            full,
        )
        .await
        && gone(&Api::<Service>::namespaced(client.clone(), ns), full).await
        && gone(&Api::<ServiceAccount>::namespaced(client.clone(), ns), full).await
        && gone(&Api::<Role>::namespaced(client.clone(), ns), &lease_role).await
        && gone(
            &Api::<RoleBinding>::namespaced(client.clone(), ns),
            &lease_role,
        )
        .await
        && gone(&bindings, full).await
        && gone(&bindings, &format!("{full}-runtime")).await;
    for name in &r.cluster_role_names() {
        all_gone = all_gone && gone(&cluster_roles, name).await;
    }
    if monitor_created {
        all_gone = all_gone && gone(&r.service_monitors(), full).await;
    }
    all_gone
}

/// `helm install`, `helm upgrade` with changed values, and `helm uninstall` of the chart,
/// with Helm's own client (server-side apply, release Secrets) against the API server.
#[tokio::test]
async fn helm_installs_upgrades_and_uninstalls_the_chart() {
    if !helm_sdk_available() {
        return;
    }
    let r = Release::new().await;
    install_and_check(&r).await;
    upgrade_and_check(&r).await;
    let monitor_created = upgrade_with_a_service_monitor(&r).await;

    // Uninstall leaves nothing of the release behind (CRDs stay, as Helm documents).
    r.helm("uninstall", &[]).await.expect_ok("helm uninstall");
    let (secrets, release_secrets) = (r.secrets(), r.release_secrets());
    eventually("the release Secrets to be purged", || async {
        secrets
            .list(&release_secrets)
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await;
    eventually("every object of the release to be deleted", || {
        release_objects_gone(&r, monitor_created)
    })
    .await;
    let crds: Api<CustomResourceDefinition> = Api::all(r.client.clone());
    assert!(
        crds.get_opt("compositecontrollers.metacontroller.k8s.io")
            .await
            .expect("reading CRDs")
            .is_some(),
        "Helm keeps crds/ on uninstall"
    );
}

/// `kubectl apply -k deploy/` creates everything the kustomization lists. Embedded API server
/// only (it would overwrite a real cluster's installation); skipped without kubectl.
#[tokio::test]
async fn kubectl_apply_k_deploy_creates_the_installation() {
    let kubectl_works = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !kubectl_works {
        metacontroller_testkit::missing_tool("kubectl", "`kubectl version --client` failed");
        return;
    }
    let cluster = TestCluster::embedded().await;
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .args(["apply", "-k"])
        .arg(repo_root().join("deploy"))
        .kill_on_drop(true);
    let out = tokio::time::timeout(STEP_TIMEOUT, cmd.output())
        .await
        .expect("kubectl apply -k finished in time")
        .expect("running kubectl");
    assert!(
        out.status.success(),
        "kubectl apply -k deploy/ failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let client = cluster.client();
    let sts = Api::<StatefulSet>::namespaced(client.clone(), "metacontroller")
        .get("metacontroller")
        .await
        .expect("the StatefulSet");
    let pod = sts.spec.template.spec.expect("pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some("metacontroller"));
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("ghcr.io/metacontroller-rs/metacontroller:v0.1.0")
    );
    Api::<ServiceAccount>::namespaced(client.clone(), "metacontroller")
        .get("metacontroller")
        .await
        .expect("the ServiceAccount");
    Api::<RoleBinding>::namespaced(client.clone(), "metacontroller")
        .get("metacontroller-leader-election")
        .await
        .expect("the leader election RoleBinding");
    for name in ["metacontroller", "metacontroller-runtime"] {
        Api::<ClusterRoleBinding>::all(client.clone())
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("ClusterRoleBinding {name}: {e}"));
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in METACONTROLLER_CRDS {
        crds.get(&format!("{crd}.metacontroller.k8s.io"))
            .await
            .unwrap_or_else(|e| panic!("CRD {crd}: {e}"));
    }
}

/// `inprocessHooks.memoryBudget` passes `--inprocess-hook-memory-budget`; unset, the binary's
/// default applies (no flag); a value that is not a quantity is refused by the schema.
#[tokio::test]
async fn inprocess_hook_memory_budget_reaches_the_flag() {
    if !helm_sdk_available() {
        return;
    }
    let objects = render(
        &[
            "render",
            "--set-json",
            r#"{"commandArgs": [], "inprocessHooks": {"memoryBudget": "512Mi"}}"#,
        ],
        "rendering with a memory budget",
    )
    .await;
    assert_eq!(
        default_sts_args(&objects),
        &json!(["--inprocess-hook-memory-budget=512Mi"])
    );
    let objects = render(
        &["render", "--set-json", r#"{"commandArgs": []}"#],
        "rendering without a memory budget",
    )
    .await;
    assert_eq!(default_sts_args(&objects), &json!([]));
    let bad = helm_chart(&[
        "render",
        "--set-json",
        r#"{"inprocessHooks": {"memoryBudget": "lots"}}"#,
    ])
    .await;
    assert!(!bad.ok, "memoryBudget: lots accepted");
}
