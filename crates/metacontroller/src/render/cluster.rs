//! Where render resolves resources and reads objects: a live cluster (`--live`), or an
//! in-process API server (the embedded one `metacontroller dev` runs) serving the built-in
//! resources plus the CRDs given. Either way resources are resolved by the controller's
//! own discovery code, so a resource the controller could not use fails here too.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::DynamicObject;
use metacontroller_controllers::offline::to_value;
use metacontroller_dynamic::{ApiResource, ResourceMap};
use serde_json::{json, Value};

/// How long an offline CRD may take to be served.
const CRD_SERVED_TIMEOUT: Duration = Duration::from_secs(10);

/// A cluster to resolve resources and read objects from.
pub struct Cluster {
    /// The client.
    pub client: kube::Client,
    /// Discovery.
    pub resources: ResourceMap,
    /// The in-process API server (offline), kept running while in use.
    server: Option<crate::embedded::Server>,
}

impl Cluster {
    /// The cluster of `kubeconfig` (else $KUBECONFIG, ~/.kube/config or in-cluster).
    pub async fn live(kubeconfig: Option<&Path>) -> anyhow::Result<Cluster> {
        let config = match kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .with_context(|| format!("loading kubeconfig {}", path.display()))?
            }
            None => kube::Config::infer()
                .await
                .context("no kubeconfig found (set --kubeconfig or $KUBECONFIG)")?,
        };
        let client = kube::Client::try_from(config).context("building the Kubernetes client")?;
        let resources = discover(&client).await?;
        Ok(Cluster {
            client,
            resources,
            server: None,
        })
    }

    /// An in-process API server serving the built-in resources and `crds`.
    pub async fn offline(crds: &[Value]) -> anyhow::Result<Cluster> {
        let server = crate::embedded::start(0, None)
            .await
            .context("starting the in-process API server")?;
        let kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig_yaml())
            .context("the in-process API server's kubeconfig")?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .context("the in-process API server's kubeconfig")?;
        let client = kube::Client::try_from(config).context("building the Kubernetes client")?;
        let mut cluster = Cluster {
            client,
            resources: ResourceMap::default(),
            server: Some(server),
        };
        cluster.install_crds(crds).await?;
        cluster.resources = discover(&cluster.client).await?;
        Ok(cluster)
    }

    /// Offline, points a resource that is not served at `--crd`.
    pub fn explain(&self, error: anyhow::Error) -> anyhow::Error {
        if self.is_live() || !error.to_string().contains("is not served") {
            return error;
        }
        error.context("offline, only built-in resources and the CRDs given with --crd FILE (or in the --controller file) are served")
    }

    /// Whether objects are read from a real cluster.
    pub fn is_live(&self) -> bool {
        self.server.is_none()
    }

    async fn install_crds(&self, crds: &[Value]) -> anyhow::Result<()> {
        let res = ApiResource {
            api_version: "apiextensions.k8s.io/v1".into(),
            group: "apiextensions.k8s.io".into(),
            version: "v1".into(),
            name: "customresourcedefinitions".into(),
            singular_name: "customresourcedefinition".into(),
            kind: "CustomResourceDefinition".into(),
            namespaced: false,
            verbs: Default::default(),
            short_names: Vec::new(),
            subresources: Default::default(),
        };
        let api = self.api(&res, None);
        for crd in crds {
            let name = crd
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let body: DynamicObject = serde_json::from_value(crd.clone())
                .with_context(|| format!("CustomResourceDefinition {name}"))?;
            api.create(&PostParams::default(), &body)
                .await
                .with_context(|| format!("CustomResourceDefinition {name} is not valid"))?;
            let group = crd
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let plural = crd
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let versions: Vec<&str> = crd
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").and_then(Value::as_str))
                .collect();
            for version in versions {
                let gv = format!("{group}/{version}");
                let served = async {
                    loop {
                        let listed = self.client.list_api_group_resources(&gv).await;
                        if listed.is_ok_and(|l| l.resources.iter().any(|r| r.name == plural)) {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                };
                tokio::time::timeout(CRD_SERVED_TIMEOUT, served)
                    .await
                    .with_context(|| format!("{plural}.{gv} was not served in time"))?;
            }
        }
        Ok(())
    }

    /// A dynamic API for `res` (in `namespace` when namespaced and given).
    pub fn api(&self, res: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
        let kr = res.to_kube();
        match namespace {
            Some(ns) if res.namespaced => Api::namespaced_with(self.client.clone(), ns, &kr),
            _ => Api::all_with(self.client.clone(), &kr),
        }
    }

    /// The served resource of an object's apiVersion and kind.
    pub fn resource_of(&self, object: &Value) -> anyhow::Result<&ApiResource> {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match self.resources.get_kind(api_version, kind) {
            Some(res) => Ok(res),
            None if self.is_live() => bail!("{kind}.{api_version} is not served by the cluster"),
            None => bail!(
                "{kind}.{api_version} is not a built-in resource: pass its CustomResourceDefinition with --crd FILE"
            ),
        }
    }

    /// The parent as the controller reads it. Live: the object of that name from the
    /// cluster. Offline: as given, except that an object without `metadata.uid` is created
    /// first (its namespace too), so it carries what an API server adds.
    pub async fn parent(&self, given: &Value) -> anyhow::Result<Value> {
        let res = self.resource_of(given)?.clone();
        let name = given
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            bail!("the parent has no metadata.name");
        }
        let namespace = given
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty())
            .map(str::to_owned)
            .or_else(|| res.namespaced.then(|| "default".to_string()));
        let api = self.api(&res, namespace.as_deref());
        if self.is_live() {
            let found = api
                .get_opt(&name)
                .await
                .with_context(|| format!("reading {} {name}", res.kind))?;
            let Some(found) = found else {
                bail!(
                    "{} {}/{name} does not exist in the cluster",
                    res.kind,
                    namespace.unwrap_or_default()
                );
            };
            return Ok(to_value(&found, &res)?);
        }
        if given.pointer("/metadata/uid").is_some() {
            return Ok(given.clone());
        }
        if let Some(ns) = namespace.as_deref().filter(|ns| *ns != "default") {
            let namespaces = self
                .resources
                .get("v1", "namespaces")
                .context("namespaces are not served")?;
            let body: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))?;
            api_create(&self.api(namespaces, None), &body).await?;
        }
        let mut body = given.clone();
        if let (Some(ns), Some(meta)) = (
            namespace.as_deref(),
            body.get_mut("metadata").and_then(Value::as_object_mut),
        ) {
            meta.insert("namespace".into(), Value::String(ns.to_string()));
        }
        let body: DynamicObject = serde_json::from_value(body)?;
        let created = api
            .create(&PostParams::default(), &body)
            .await
            .with_context(|| format!("the parent {} {name} is not valid", res.kind))?;
        Ok(to_value(&created, &res)?)
    }

    /// Every object of `res` where a parent in `namespace` can have children (its
    /// namespace; every namespace for a cluster-scoped parent or child type).
    pub async fn list(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
    ) -> anyhow::Result<Vec<Value>> {
        let list = self
            .api(res, namespace)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing {}", res.name))?;
        list.items
            .iter()
            .map(|o| to_value(o, res).map_err(Into::into))
            .collect()
    }
}

impl Cluster {
    /// Every object of `res` in every namespace that carries `label_selector` (children
    /// elsewhere: the parent-uid label, selected by the server).
    pub async fn list_labelled(
        &self,
        res: &ApiResource,
        label_selector: &str,
    ) -> anyhow::Result<Vec<Value>> {
        let list = self
            .api(res, None)
            .list(&ListParams::default().labels(label_selector))
            .await
            .with_context(|| format!("listing {} labelled {label_selector}", res.name))?;
        list.items
            .iter()
            .map(|o| to_value(o, res).map_err(Into::into))
            .collect()
    }
}

/// Creates `body` unless it exists.
async fn api_create(api: &Api<DynamicObject>, body: &DynamicObject) -> anyhow::Result<()> {
    match api.create(&PostParams::default(), body).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The served resources, read with the controller's discovery code.
async fn discover(client: &kube::Client) -> anyhow::Result<ResourceMap> {
    let discovered = ResourceMap::discover(client, &ResourceMap::default())
        .await
        .context("discovery")?;
    for error in &discovered.errors {
        tracing::warn!(%error, "discovery: a group version could not be read");
    }
    match discovered.update {
        Some(map) => Ok(map),
        None => bail!("discovery found no resources"),
    }
}
