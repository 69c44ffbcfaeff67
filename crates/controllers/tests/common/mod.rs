//! Shared set-up of the CompositeController end-to-end tests: a cluster (embedded API server
//! or `METACONTROLLER_E2E_KUBECONFIG`), a unique parent CRD and namespace, a reprogrammable
//! hook server, and the in-process reconciler.

#![allow(dead_code)]

#[path = "../shared/cache.rs"]
mod cache;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_controllers::composite::{self, CompositeHandle, Options, StartError};
use metacontroller_controllers::events::EventRecorder;
use metacontroller_dynamic::{InformerConfig, Informers, ResourceMap};
use metacontroller_hooks::{HookClient, HookClientConfig};
use metacontroller_testkit::{
    crd, events_about, eventually, unique_name, CrdBuilder, HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

/// One test's world.
pub struct Env {
    pub cluster: TestCluster,
    pub ns: String,
    pub parent: CrdBuilder,
    pub hook: HookServer,
    pub name: String,
    informers: Informers,
    handle: Option<CompositeHandle>,
}

/// A parent CRD with a unique group (tests run in parallel, also against a real cluster).
pub fn parent_crd() -> CrdBuilder {
    crd(
        &format!("{}.example.com", unique_name("t")),
        "v1",
        "Parent",
        "parents",
    )
}

impl Env {
    /// Installs `parent` and a namespace, starts a hook server answering with `handler`.
    pub async fn new(
        cluster: TestCluster,
        parent: CrdBuilder,
        handler: impl Fn(&str, &Value) -> HookReply + Send + Sync + 'static,
    ) -> Env {
        cluster.install_crd(&parent.build()).await;
        let ns = cluster.create_namespace("cc").await;
        let hook = HookServer::start(handler).await;
        let informers = Informers::new(cluster.client(), InformerConfig::default());
        Env {
            cluster,
            ns,
            parent,
            hook,
            name: unique_name("cc"),
            informers,
            handle: None,
        }
    }

    /// The CompositeController for `spec` (parentResource filled in when absent).
    pub fn controller(&self, mut spec: Value) -> CompositeController {
        if spec.get("parentResource").is_none() {
            spec["parentResource"] =
                json!({"apiVersion": self.parent.api_version(), "resource": self.parent.plural()});
        }
        serde_json::from_value(json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": self.name},
            "spec": spec,
        }))
        .unwrap()
    }

    /// Starts (or restarts) the reconciler.
    pub async fn try_start(&mut self, spec: Value, options: Options) -> Result<(), StartError> {
        if let Some(h) = self.handle.take() {
            h.stop().await;
        }
        let client = self.cluster.client();
        let resources = self.discovered().await;
        let hooks = HookClient::new(HookClientConfig::default()).unwrap();
        let handle = composite::start(
            self.controller(spec),
            client,
            &self.informers,
            &resources,
            hooks,
            options,
        )?;
        self.handle = Some(handle);
        Ok(())
    }

    /// Starts with 2 workers and a real Event recorder (no rate limit, no burst cap).
    pub async fn start_with_events(&mut self, spec: Value) {
        let events = EventRecorder::new(self.cluster.client(), 0.0, 0).unwrap();
        let options = Options {
            workers: 2,
            events,
            ..Options::default()
        };
        self.try_start(spec, options).await.unwrap()
    }

    /// The Events in `ns` about the object `name` with `reason`.
    pub async fn events_for(&self, ns: &str, name: &str, reason: &str) -> Vec<Event> {
        let mut events = events_about(&self.cluster, ns, name).await;
        events.retain(|e| e.reason.as_deref() == Some(reason));
        events
    }

    /// Starts with default options (2 workers, dynamic apply).
    pub async fn start(&mut self, spec: Value) {
        self.try_start(
            spec,
            Options {
                workers: 2,
                ..Default::default()
            },
        )
        .await
        .unwrap()
    }

    pub async fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.stop().await;
        }
    }

    /// The informer factory the reconciler uses.
    pub fn informers(&self) -> &Informers {
        &self.informers
    }

    /// A sync hook spec pointing at `/sync` of the hook server.
    pub fn sync_hook(&self) -> Value {
        json!({"sync": {"webhook": {"url": self.hook.url("/sync")}}})
    }

    pub fn parents(&self) -> Api<DynamicObject> {
        let ns = self.parent.is_namespaced().then_some(self.ns.as_str());
        self.parent.api(self.cluster.client(), ns)
    }

    pub fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.cluster.client(), &self.ns)
    }

    /// Creates a parent with `spec`; returns its uid.
    pub async fn create_parent(&self, name: &str, spec: Value) -> String {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": self.parent.api_version(), "kind": self.parent.kind(),
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        let created = self
            .parents()
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
        created.metadata.uid.unwrap()
    }

    /// [`Env::create_parent`] taking the name by value (for `join_all`).
    pub async fn create_parent_owned(&self, name: String, spec: Value) -> String {
        self.create_parent(&name, spec).await
    }

    /// Merge-patches parent `name` with `patch`.
    pub async fn patch_parent(&self, name: &str, patch: Value) {
        self.parents()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }

    /// Merge-patches ConfigMap `name` of the test's namespace with `patch`.
    pub async fn patch_configmap(&self, name: &str, patch: Value) {
        self.configmaps()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }

    /// Merge-patches the parent's spec.
    pub async fn patch_parent_spec(&self, name: &str, spec: Value) {
        self.patch_parent(name, json!({"spec": spec})).await;
    }

    pub async fn parent_value(&self, name: &str) -> Option<Value> {
        self.parents()
            .get_opt(name)
            .await
            .unwrap()
            .map(|o| serde_json::to_value(o).unwrap())
    }

    /// The ConfigMaps of the test's namespace that the cluster did not publish itself (a real
    /// cluster puts `kube-root-ca.crt` in every namespace).
    pub async fn child_configmaps(&self) -> Vec<ConfigMap> {
        let mut items = self
            .configmaps()
            .list(&kube::api::ListParams::default())
            .await
            .unwrap()
            .items;
        items.retain(|c| c.metadata.name.as_deref() != Some("kube-root-ca.crt"));
        items
    }

    pub async fn configmap(&self, name: &str) -> Option<ConfigMap> {
        self.configmaps().get_opt(name).await.unwrap()
    }

    /// Waits until ConfigMap `name` exists and `check` holds for it.
    pub async fn wait_configmap(&self, name: &str, what: &str, check: impl Fn(&ConfigMap) -> bool) {
        eventually(what, || async {
            self.configmap(name).await.is_some_and(|c| check(&c))
        })
        .await;
    }

    /// Waits until ConfigMap `name` is gone.
    pub async fn wait_configmap_gone(&self, name: &str) {
        eventually(&format!("ConfigMap {name} gone"), || async {
            self.configmap(name).await.is_none()
        })
        .await;
    }

    /// Waits until the parent's status satisfies `check`.
    pub async fn wait_status(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) {
        eventually(what, || async {
            self.parent_value(name)
                .await
                .is_some_and(|p| check(&p["status"]))
        })
        .await;
    }

    /// Waits until the reconciler's parent informer (shared with this `Env`) holds parent
    /// `name` as the API server has it now: every watch event for it up to here has been
    /// handed to the reconciler's event handlers.
    pub async fn wait_cache_caught_up(&self, name: &str) {
        let ns = self.parent.is_namespaced().then_some(self.ns.as_str());
        let (api_version, plural) = (self.parent.api_version(), self.parent.plural());
        self.wait_informer_caught_up(&api_version, plural, ns, name)
            .await;
    }

    /// [`Env::wait_cache_caught_up`] for any object the reconciler watches (children,
    /// related objects): `plural` of `api_version`, in `namespace` (None: cluster-scoped).
    pub async fn wait_informer_caught_up(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) {
        let resources = self.discovered().await;
        let res = resources
            .get(api_version, plural)
            .expect("resource served")
            .clone();
        let client = self.cluster.client();
        cache::wait_informer_caught_up(&self.informers, client, &res, namespace, name).await;
    }

    /// The resources the API server serves now.
    /// Discovery once it lists the parent resource: a real API server can serve a new CRD's
    /// group-version before its aggregated group list (`/apis`) names the group.
    async fn discovered(&self) -> ResourceMap {
        let (api_version, plural) = (self.parent.api_version(), self.parent.plural());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let found =
                ResourceMap::discover(&self.cluster.client(), &ResourceMap::default()).await;
            let map = found.unwrap().update.unwrap();
            if map.get(&api_version, plural).is_some() {
                return map;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "discovery never listed {plural} of {api_version}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The positive signal before a negative check ("nothing else happened"): touches
    /// parent `name` with a fresh annotation and waits until a hook request carries it.
    /// Syncs of one parent never overlap, so every sync of it that started before has
    /// completed, writes included, when this returns.
    pub async fn sync_barrier(&self, name: &str) {
        let token = unique_name("barrier");
        let patch = json!({"metadata": {"annotations": {"test/barrier": token}}});
        self.patch_parent(name, patch).await;
        eventually("a sync that saw the barrier annotation", || async {
            self.hook.all_calls().iter().any(|c| {
                c.body["parent"]["metadata"]["annotations"]["test/barrier"] == token.as_str()
            })
        })
        .await;
    }

    /// Waits for write quiescence (embedded only) and returns the write count.
    pub async fn settle(&self) -> Option<u64> {
        self.cluster
            .settle(Duration::from_millis(500), Duration::from_secs(20))
            .await
    }
}

/// The ConfigMap children a test hook returns: `{name, labels, data}`.
pub fn configmap(name: &str, labels: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": labels}, "data": data})
}

/// Names of the ConfigMaps in a hook request's `children` (v1 keys).
pub fn observed_configmaps(req: &Value) -> Vec<String> {
    let mut names: Vec<String> = req["children"]["ConfigMap.v1"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Whether `cm` has a controller ownerReference to `uid`.
pub fn controlled_by(cm: &ConfigMap, uid: &str) -> bool {
    cm.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.uid == uid && r.controller == Some(true) && r.block_owner_deletion == Some(true))
}

/// A ConfigMap's `data.value` ("" without one).
pub fn value_of(cm: &ConfigMap) -> String {
    cm.data
        .clone()
        .unwrap_or_default()
        .get("value")
        .cloned()
        .unwrap_or_default()
}

/// `n` ConfigMap children `<prefix><i>` labelled `labels`, each carrying the parent's
/// `spec.value` of hook request `req`.
pub fn value_configmaps(prefix: &str, n: usize, labels: Value, req: &Value) -> Vec<Value> {
    let value = &req["parent"]["spec"]["value"];
    (0..n)
        .map(|i| {
            configmap(
                &format!("{prefix}{i}"),
                labels.clone(),
                json!({"value": value}),
            )
        })
        .collect()
}

/// A ConfigMap child rule with `method`.
pub fn configmap_rule(method: &str) -> Value {
    json!({"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": method}})
}
