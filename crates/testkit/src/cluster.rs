//! The API server a test talks to: embedded in-process, or a real cluster.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use embedded_apiserver::{ApiServer, ApiServerHandle, Control};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::core::DynamicObject;
use serde_json::{json, Value};

use crate::poll::{eventually, unique_name};

/// Set to a kubeconfig path to run the e2e suites against a real cluster instead of the
/// embedded API server.
pub const E2E_KUBECONFIG_ENV: &str = "METACONTROLLER_E2E_KUBECONFIG";

/// Whether the end-to-end tests run against a real cluster (`METACONTROLLER_E2E_KUBECONFIG`
/// names a kubeconfig).
pub fn real_cluster_requested() -> bool {
    std::env::var(E2E_KUBECONFIG_ENV).is_ok_and(|p| !p.trim().is_empty())
}

/// For a test that only means something on the embedded API server (fault injection, request
/// counts): on a real cluster it says so on stderr and returns true, so the caller returns.
pub fn skip_on_real_cluster(test: &str) -> bool {
    let real = real_cluster_requested();
    if real {
        eprintln!(
            "SKIPPED on a real cluster: {test} needs the embedded API server's fault injection \
             or request counts (embedded-only)"
        );
    }
    real
}

/// A controller object kind (CompositeController or DecoratorController): cluster-scoped,
/// typed and (de)serializable.
pub trait ControllerKind:
    kube::Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
    + Clone
    + std::fmt::Debug
    + k8s_openapi::serde::Serialize
    + k8s_openapi::serde::de::DeserializeOwned
{
}

impl<K> ControllerKind for K where
    K: kube::Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::Serialize
        + k8s_openapi::serde::de::DeserializeOwned
{
}

/// A Kubernetes API for one test. Dropping it stops the embedded server (a real cluster is
/// left alone; tests use unique names so leftovers do not collide).
pub struct TestCluster {
    client: kube::Client,
    kubeconfig_path: PathBuf,
    server: Option<ApiServerHandle>,
}

impl TestCluster {
    /// The real cluster named by `METACONTROLLER_E2E_KUBECONFIG`, else a fresh embedded API
    /// server on a random loopback port. Panics (it is test code) when neither works.
    pub async fn start() -> Self {
        match std::env::var(E2E_KUBECONFIG_ENV) {
            Ok(path) if !path.trim().is_empty() => Self::real(PathBuf::from(path)).await,
            _ => Self::embedded().await,
        }
    }

    /// [`TestCluster::start`] ready for a controller test: the Metacontroller CRDs installed,
    /// a namespace `<prefix>-<unique>` and a parent kind of its own
    /// ([`TestCluster::install_parent_crd`]). Returns the cluster, the namespace and the kind.
    pub async fn start_with_parent(prefix: &str) -> (Self, String, crate::CrdBuilder) {
        let cluster = Self::start().await;
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace(prefix).await;
        let parent = cluster.install_parent_crd(prefix).await;
        (cluster, ns, parent)
    }

    /// Always the embedded API server (for tests that need its counters or faults).
    pub async fn embedded() -> Self {
        Self::embedded_with(Default::default()).await
    }

    /// The embedded API server with `config` (e.g. realistic write latency for a benchmark).
    pub async fn embedded_with_config(config: embedded_apiserver::Config) -> Self {
        Self::embedded_with(config).await
    }

    /// Like [`TestCluster::start`], but the embedded API server runs the dev-mode simulation
    /// (nodes, kubelets, workload controllers), so Deployments, StatefulSets, Jobs and
    /// Services get running pods and status as on a real cluster.
    pub async fn start_simulated(simulation: embedded_apiserver::SimulationConfig) -> Self {
        match std::env::var(E2E_KUBECONFIG_ENV) {
            Ok(path) if !path.trim().is_empty() => Self::real(PathBuf::from(path)).await,
            _ => {
                Self::embedded_with(embedded_apiserver::Config {
                    simulation: Some(simulation),
                    ..Default::default()
                })
                .await
            }
        }
    }

    async fn embedded_with(config: embedded_apiserver::Config) -> Self {
        let server = ApiServer::start(config)
            .await
            .expect("starting the embedded API server");
        let kubeconfig_path =
            std::env::temp_dir().join(format!("{}.kubeconfig", unique_name("testkit")));
        server
            .write_kubeconfig(&kubeconfig_path)
            .expect("writing the embedded kubeconfig");
        let client = server
            .client()
            .await
            .expect("a client of the embedded server");
        TestCluster {
            client,
            kubeconfig_path,
            server: Some(server),
        }
    }

    /// The real cluster of kubeconfig `path` (a test that runs its own cluster directory,
    /// e.g. one it crashes on purpose).
    pub async fn real(path: PathBuf) -> Self {
        let kubeconfig = kube::config::Kubeconfig::read_from(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("using {}: {e}", path.display()));
        let client = kube::Client::try_from(config).expect("building the client");
        TestCluster {
            client,
            kubeconfig_path: path,
            server: None,
        }
    }

    /// A client for the cluster.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// A kubeconfig file for the cluster (for kubectl or the `metacontroller` binary).
    pub fn kubeconfig_path(&self) -> &std::path::Path {
        &self.kubeconfig_path
    }

    /// Request counters and fault injection; `None` on a real cluster.
    pub fn control(&self) -> Option<Control> {
        self.server.as_ref().map(ApiServerHandle::control)
    }

    /// [`TestCluster::control`] for a test (named `test`) that is embedded-only: on a real
    /// cluster it prints that the test is skipped and why.
    pub fn control_or_skip(&self, test: &str) -> Option<Control> {
        let control = self.control();
        if control.is_none() {
            eprintln!(
                "SKIPPED on a real cluster: {test} needs the embedded API server's fault \
                 injection or request counts (embedded-only)"
            );
        }
        control
    }

    /// Whether this is the embedded API server.
    pub fn is_embedded(&self) -> bool {
        self.server.is_some()
    }

    /// Write requests served so far (create, update, patch, delete); `None` on a real cluster.
    pub fn writes(&self) -> Option<u64> {
        self.control().map(|c| c.writes())
    }

    /// Creates a namespace `prefix-<unique>` and returns its name.
    pub async fn create_namespace(&self, prefix: &str) -> String {
        let name = unique_name(prefix);
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
        Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        name
    }

    /// Creates `crd` (JSON) unless it exists, then waits until it is Established and its
    /// resource is listed by discovery.
    pub async fn install_crd(&self, crd: &Value) {
        let crd: CustomResourceDefinition =
            serde_json::from_value(crd.clone()).expect("a valid CRD");
        let name = crd.metadata.name.clone().unwrap_or_default();
        let group = crd.spec.group.clone();
        let plural = crd.spec.names.plural.clone();
        let versions: Vec<String> = crd
            .spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.clone())
            .collect();
        let api = Api::<CustomResourceDefinition>::all(self.client());
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("creating CRD {name}: {e}"),
        }
        eventually(&format!("CRD {name} Established"), || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let Ok(crd) = api.get(&name).await else {
                    return false;
                };
                crd.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            }
        })
        .await;
        for version in versions {
            let gv = format!("{group}/{version}");
            eventually(&format!("{plural} served at {gv}"), || {
                let client = self.client();
                let gv = gv.clone();
                let plural = plural.clone();
                async move {
                    client
                        .list_api_group_resources(&gv)
                        .await
                        .is_ok_and(|list| list.resources.iter().any(|r| r.name == plural))
                }
            })
            .await;
        }
    }

    /// Deletes the CRD `name` and waits until it is gone (its resource no longer served).
    pub async fn delete_crd(&self, name: &str) {
        let api = Api::<CustomResourceDefinition>::all(self.client());
        match api.delete(name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            Err(e) => panic!("deleting CRD {name}: {e}"),
        }
        eventually(&format!("CRD {name} deleted"), || {
            let api = api.clone();
            async move { matches!(api.get_opt(name).await, Ok(None)) }
        })
        .await;
    }

    /// Installs the CompositeController, DecoratorController and ControllerRevision CRDs.
    pub async fn install_metacontroller_crds(&self) {
        for crd in metacontroller_api::crds::all() {
            self.install_crd(&crd).await;
        }
    }

    /// Installs a namespaced `Parent` kind (`parents`, version `v1`, status subresource) in a
    /// group of its own (`<prefix>-<unique>.example.com`) and returns it.
    pub async fn install_parent_crd(&self, prefix: &str) -> crate::CrdBuilder {
        self.install_unique_crd(prefix, "Parent", "parents").await
    }

    /// Installs a namespaced `kind` (`plural`, version `v1`, status subresource) in a group
    /// of its own (`<prefix>-<unique>.example.com`, [`crate::unique_crd`]) and returns it.
    pub async fn install_unique_crd(
        &self,
        prefix: &str,
        kind: &str,
        plural: &str,
    ) -> crate::CrdBuilder {
        let crd = crate::unique_crd(prefix, kind, plural);
        self.install_crd(&crd.build()).await;
        crd
    }

    /// Creates a namespace `prefix-<unique>` in which pods can be created, and returns its
    /// name: on a real cluster pod admission needs the namespace's default ServiceAccount,
    /// which a controller makes some time after the namespace, so this waits for it
    /// ([`REAL_CLUSTER_TIMEOUT`](crate::REAL_CLUSTER_TIMEOUT)).
    pub async fn create_pod_namespace(&self, prefix: &str) -> String {
        let ns = self.create_namespace(prefix).await;
        if !self.is_embedded() {
            let accounts = dynamic_api(
                self.client(),
                "v1",
                "ServiceAccount",
                "serviceaccounts",
                Some(&ns),
            );
            crate::eventually_within(
                "default ServiceAccount",
                crate::REAL_CLUSTER_TIMEOUT,
                || async { accounts.get("default").await.is_ok() },
            )
            .await;
        }
        ns
    }

    /// Creates a controller object (`K`: CompositeController or DecoratorController) named
    /// `name` with `spec`, labelled `team=<label>`: only a process started with
    /// `--target-label-selector=team=<label>` runs it, so tests sharing a real cluster never
    /// run each other's controllers.
    pub async fn create_controller<K: ControllerKind>(
        &self,
        name: &str,
        label: &str,
        spec: Value,
    ) -> K {
        self.create_controller_object(json!({
            "apiVersion": K::api_version(&()), "kind": K::kind(&()),
            "metadata": {"name": name, "labels": {"team": label}},
            "spec": spec,
        }))
        .await
    }

    /// Creates the controller object `object` (`K`: CompositeController or
    /// DecoratorController, as JSON with its metadata) as it is.
    pub async fn create_controller_object<K: ControllerKind>(&self, object: Value) -> K {
        create_typed(&Api::<K>::all(self.client()), object).await
    }

    /// [`TestCluster::create_controller`] named `<prefix>-<unique>` with a fresh label; returns
    /// the label (a process started with `--target-label-selector=team=<label>` runs it).
    pub async fn create_labelled_controller<K: ControllerKind>(
        &self,
        prefix: &str,
        spec: Value,
    ) -> String {
        let label = unique_name("team");
        let _: K = self
            .create_controller(&unique_name(prefix), &label, spec)
            .await;
        label
    }

    /// Waits up to `timeout` for ConfigMap `namespace/name` (a child the controller `process`
    /// creates); on timeout the panic shows the controller's logs.
    pub async fn wait_for_configmap(
        &self,
        namespace: &str,
        name: &str,
        process: &crate::ControllerProcess,
        timeout: Duration,
    ) {
        let api: Api<ConfigMap> = Api::namespaced(self.client(), namespace);
        let deadline = tokio::time::Instant::now() + timeout;
        while api
            .get_opt(name)
            .await
            .unwrap_or_else(|e| panic!("reading ConfigMap {namespace}/{name}: {e}"))
            .is_none()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for ConfigMap {namespace}/{name}; controller logs:\n{}",
                process.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The names of the ConfigMaps in `namespace` now.
    pub async fn configmap_names(&self, namespace: &str) -> BTreeSet<String> {
        Api::<ConfigMap>::namespaced(self.client(), namespace)
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("listing ConfigMaps in {namespace}: {e}"))
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect()
    }

    /// Waits until in-flight writes have settled — the write counter has not moved for
    /// `quiet` — and returns the write count. `None` on a real cluster.
    ///
    /// # Panics
    /// When writes are still going on after `timeout`: a controller that never stops
    /// writing is a failure, not a state to assert on.
    pub async fn settle(&self, quiet: Duration, timeout: Duration) -> Option<u64> {
        let control = self.control()?;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last = control.writes();
        let mut since = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(25)).await;
            let now = control.writes();
            if now != last {
                last = now;
                since = tokio::time::Instant::now();
            } else if since.elapsed() >= quiet {
                return Some(last);
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "writes did not settle within {timeout:?}: the API server's write counter \
                     never stayed still for {quiet:?} (now at {last} writes)"
                );
            }
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if self.server.is_some() {
            let _ = std::fs::remove_file(&self.kubeconfig_path);
        }
    }
}

/// Creates `object` (JSON with apiVersion, kind and metadata) through `api` and returns it as
/// the server stored it.
///
/// # Panics
/// When the JSON is not an object or the server refuses it (this is test code).
pub async fn create_object(api: &Api<DynamicObject>, object: Value) -> DynamicObject {
    create_typed(api, object).await
}

/// Creates `object` (JSON with its metadata) through `api` as a `K`; panics naming it when it
/// is no `K` or the server refuses it.
async fn create_typed<K>(api: &Api<K>, object: Value) -> K
where
    K: Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize
        + std::fmt::Debug,
{
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let object: K = serde_json::from_value(object).unwrap_or_else(|e| panic!("object {name}: {e}"));
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {name}: {e}"))
}

/// An `Api<DynamicObject>` for `plural` of `kind` at `api_version` (`v1` or `group/version`),
/// namespaced when `namespace` is given.
pub fn dynamic_api(
    client: kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(group, version, kind),
        plural,
    );
    match namespace {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    }
}
