//! Shared set-up of the DecoratorController end-to-end tests: a cluster (embedded API
//! server, or the real one named by `METACONTROLLER_E2E_KUBECONFIG`), a namespace and CRDs
//! unique to the test, and an in-process decorator reconciler with real informers and a
//! real hook client.

#![allow(dead_code)] // each test binary uses a different subset

#[path = "../shared/cache.rs"]
mod cache;

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_controllers::composite::Options;
use metacontroller_controllers::decorator::{self, DecoratorHandle};
use metacontroller_controllers::events::EventRecorder;
pub use metacontroller_controllers::ApplyStrategy;
use metacontroller_dynamic::{InformerConfig, Informers, ResourceMap};
use metacontroller_hooks::{HookClient, HookClientConfig};
use metacontroller_testkit::{
    crd, dynamic_api, eventually, unique_name, CrdBuilder, HookServer, TestCluster,
};
use serde_json::{json, Value};

/// One test's world.
pub struct Env {
    pub cluster: TestCluster,
    pub ns: String,
    pub group: String,
    pub informers: Informers,
    pub hooks: HookClient,
    pub events: EventRecorder,
}

impl Env {
    /// A cluster, a fresh namespace and a CRD group nobody else uses.
    pub async fn start(prefix: &str) -> Env {
        let cluster = TestCluster::start().await;
        let ns = cluster.create_namespace(prefix).await;
        let informers = Informers::new(cluster.client(), InformerConfig::default());
        let hooks = HookClient::new(HookClientConfig::default()).unwrap();
        let events = EventRecorder::new(cluster.client(), 0.0, 25).unwrap();
        Env {
            cluster,
            ns,
            group: format!("{}.example.com", unique_name(prefix)),
            informers,
            hooks,
            events,
        }
    }

    pub fn client(&self) -> kube::Client {
        self.cluster.client()
    }

    /// A namespaced CRD `kind` in this test's group (status subresource on), installed.
    pub async fn crd(&self, kind: &str) -> CrdBuilder {
        self.install(self.crd_builder(kind)).await
    }

    /// The CRD builder for `kind` (not installed).
    pub fn crd_builder(&self, kind: &str) -> CrdBuilder {
        let plural = format!("{}s", kind.to_lowercase());
        crd(&self.group, "v1", kind, &plural)
    }

    /// Installs a CRD.
    pub async fn install(&self, crd: CrdBuilder) -> CrdBuilder {
        self.cluster.install_crd(&crd.build()).await;
        crd
    }

    /// A namespaced API for objects of `crd` in the test namespace.
    pub fn api(&self, crd: &CrdBuilder) -> Api<DynamicObject> {
        crd.api(self.client(), Some(&self.ns))
    }

    /// A namespaced API for a built-in type in the test namespace.
    pub fn builtin(&self, api_version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        dynamic_api(self.client(), api_version, kind, plural, Some(&self.ns))
    }

    /// Discovery, once every `(apiVersion, plural)` in `needs` is served.
    pub async fn resources(&self, needs: &[(String, String)]) -> ResourceMap {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(found) = ResourceMap::discover(&self.client(), &ResourceMap::default()).await
            {
                if let Some(map) = found.update {
                    if needs.iter().all(|(av, r)| map.get(av, r).is_some()) {
                        return map;
                    }
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{needs:?} never served"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts a decorator from its JSON (`metadata.name` and `spec`), after discovery
    /// serves every resource it names.
    pub async fn start_decorator(&self, controller: Value) -> DecoratorHandle {
        self.start_decorator_with(controller, ApplyStrategy::DynamicApply)
            .await
    }

    /// [`Env::start_decorator`] with an explicit `--apply-strategy`.
    pub async fn start_decorator_with(
        &self,
        controller: Value,
        apply_strategy: ApplyStrategy,
    ) -> DecoratorHandle {
        let dc: DecoratorController = serde_json::from_value(json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1",
            "kind": "DecoratorController",
            "metadata": controller["metadata"],
            "spec": controller["spec"],
        }))
        .unwrap();
        let needs: Vec<(String, String)> = dc
            .spec
            .resources
            .iter()
            .map(|r| (r.api_version.clone(), r.resource.clone()))
            .chain(
                dc.spec
                    .attachments
                    .iter()
                    .map(|r| (r.api_version.clone(), r.resource.clone())),
            )
            .collect();
        let resources = self.resources(&needs).await;
        decorator::start(
            dc,
            self.client(),
            &self.informers,
            &resources,
            self.hooks.clone(),
            Options {
                workers: 2,
                events: self.events.clone(),
                apply_strategy,
                ..Default::default()
            },
        )
        .unwrap()
    }

    /// Waits until the reconciler's informer for `crd` (shared with this `Env`) holds
    /// object `name` as the API server has it now: every watch event for it up to here has
    /// been handed to the reconciler's event handlers.
    pub async fn wait_cache_caught_up(&self, crd: &CrdBuilder, name: &str) {
        let needs = [(crd.api_version(), crd.plural().to_string())];
        let resources = self.resources(&needs).await;
        let res = resources.get(&crd.api_version(), crd.plural()).unwrap();
        let ns = Some(self.ns.as_str());
        cache::wait_informer_caught_up(&self.informers, self.client(), res, ns, name).await;
    }

    /// Creates an object (JSON) through `api`.
    pub async fn create(&self, api: &Api<DynamicObject>, obj: Value) -> DynamicObject {
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap()
    }
}

/// Events in the test namespace about the object `name` with `reason`.
pub async fn events_for(env: &Env, name: &str, reason: &str) -> Vec<Value> {
    let api = dynamic_api(env.client(), "v1", "Event", "events", Some(&env.ns));
    api.list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == reason)
        .collect()
}

/// The positive signal before a negative check ("nothing else happened"): touches target
/// `name` with a fresh annotation and waits until a request to `hook` carries it. Syncs of
/// one target never overlap, so every sync of it that started before has completed,
/// writes included, when this returns.
pub async fn sync_barrier(api: &Api<DynamicObject>, name: &str, hook: &HookServer) {
    let token = unique_name("barrier");
    let patch = json!({"metadata": {"annotations": {"test/barrier": token}}});
    merge_patch(api, name, patch).await;
    eventually("a sync that saw the barrier annotation", || async {
        hook.all_calls()
            .iter()
            .any(|c| c.body["object"]["metadata"]["annotations"]["test/barrier"] == token.as_str())
    })
    .await;
}

/// A JSON merge patch.
pub async fn merge_patch(api: &Api<DynamicObject>, name: &str, patch: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Waits until `api` has `name` and returns it.
pub async fn wait_for(api: &Api<DynamicObject>, name: &str) -> DynamicObject {
    eventually(&format!("{name} to exist"), || async {
        matches!(api.get_opt(name).await, Ok(Some(_)))
    })
    .await;
    api.get(name).await.unwrap()
}

/// Waits until `api` no longer has `name`.
pub async fn wait_gone(api: &Api<DynamicObject>, name: &str) {
    eventually(&format!("{name} to be gone"), || async {
        matches!(api.get_opt(name).await, Ok(None))
    })
    .await;
}

/// Waits until the object satisfies `check`.
pub async fn wait_until(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    eventually(what, || async {
        match api.get_opt(name).await {
            Ok(Some(obj)) => check(&serde_json::to_value(&obj).unwrap()),
            _ => false,
        }
    })
    .await;
    serde_json::to_value(api.get(name).await.unwrap()).unwrap()
}

/// A minimal object of `crd`.
pub fn object(crd: &CrdBuilder, name: &str, meta: Value) -> Value {
    let mut obj = json!({"apiVersion": crd.api_version(), "kind": crd.kind(),
                         "metadata": {"name": name}, "spec": {}});
    if let (Some(m), Some(extra)) = (obj["metadata"].as_object_mut(), meta.as_object()) {
        m.extend(extra.clone());
    }
    obj
}

/// A DecoratorController `name` over the objects of `target` with its sync hook at
/// `sync_url`; the fields of `extra` are added to (or replace those of) its spec:
/// attachments, resyncPeriodSeconds, other hooks.
pub fn sync_decorator(name: &str, target: &CrdBuilder, sync_url: &str, extra: Value) -> Value {
    let mut spec = json!({
        "resources": [{"apiVersion": target.api_version(), "resource": target.plural()}],
        "hooks": {"sync": {"webhook": {"url": sync_url}}},
    });
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(extra.clone());
    }
    json!({"metadata": {"name": name}, "spec": spec})
}

/// The name of the target a hook request is about ("" when it has none).
pub fn target_name(req: &Value) -> &str {
    req["object"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
}

/// The `<Kind>.<apiVersion>` map key of a CRD's objects.
pub fn group_key(crd: &CrdBuilder) -> String {
    format!("{}.{}", crd.kind(), crd.api_version())
}
