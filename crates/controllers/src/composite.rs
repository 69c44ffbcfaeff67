//! The CompositeController reconciler for one controller object: parent and child
//! informers feed a work queue of parent keys; a sync reads the parent and its owned
//! children from the cache, calls the sync hook, writes the child changes and the parent
//! status (only what changed), and schedules resyncs.
//!
//! Not yet here: customize hook / related objects, finalize hook, claim/adopt by selector,
//! Events, expectations/overlay, server-side apply.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_api::wire::{CompositeHookRequest, CompositeHookResponse};
use metacontroller_dynamic::{
    ApiResource, HandlerId, Informer, Informers, Lease, NamespacedName, Origin, Priority,
    ResourceId, ResourceMap, WorkQueue,
};
use metacontroller_hooks::{CallContext, HookClient};
use serde_json::Value;

use crate::children::{self, Action, ChildType, ParentRef};

/// Why a controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The spec is invalid.
    #[error("invalid CompositeController: {0}")]
    Invalid(String),
    /// A resource named by the spec is not served.
    #[error("{0} is not served by the API server")]
    UnknownResource(String),
}

/// Why one sync failed (the key is requeued with backoff).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The hook failed.
    #[error("sync hook: {0}")]
    Hook(#[from] metacontroller_hooks::HookError),
    /// The hook's children were refused.
    #[error("invalid sync hook response: {0}")]
    Children(#[from] children::ChildError),
    /// An API request failed.
    #[error("{what}: {source}")]
    Api {
        /// What was attempted.
        what: String,
        /// The error.
        source: kube::Error,
    },
    /// An object could not be converted.
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
}

fn kube_resource(r: &ApiResource) -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: r.group.clone(),
        version: r.version.clone(),
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        plural: r.name.clone(),
    }
}

/// A cached object as JSON with apiVersion/kind filled in (list items lack them).
fn to_value(obj: &DynamicObject, res: &ApiResource) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(obj)?;
    if let Some(map) = v.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(res.api_version.clone()));
        map.insert("kind".into(), Value::String(res.kind.clone()));
    }
    Ok(v)
}

struct Child {
    kind: ChildType,
    resource: Arc<ApiResource>,
    informer: Lease<ResourceId, Informer>,
    handler: HandlerId,
}

struct Inner {
    controller: CompositeController,
    client: kube::Client,
    hooks: HookClient,
    parent_resource: Arc<ApiResource>,
    parent: Lease<ResourceId, Informer>,
    parent_handler: HandlerId,
    children: Vec<Child>,
    queue: WorkQueue<NamespacedName>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.parent.remove_handler(self.parent_handler);
        for c in &self.children {
            c.informer.remove_handler(c.handler);
        }
    }
}

/// A running CompositeController. Dropping it (or [`CompositeHandle::stop`]) stops it.
pub struct CompositeHandle {
    queue: WorkQueue<NamespacedName>,
    task: tokio::task::JoinHandle<()>,
}

impl CompositeHandle {
    /// Stops the workers and releases the informers.
    pub async fn stop(self) {
        self.queue.shut_down();
        self.task.abort();
        let _ = (&mut { self }.task).await;
    }
}

impl Drop for CompositeHandle {
    fn drop(&mut self) {
        self.queue.shut_down();
        self.task.abort();
    }
}

fn priority(origin: Origin) -> Priority {
    match origin {
        Origin::Watch => Priority::Event,
        Origin::Relist => Priority::Bulk,
    }
}

/// Starts the reconciler of `controller` with `workers` workers. Must run inside tokio.
pub fn start(
    controller: CompositeController,
    client: kube::Client,
    informers: &Informers,
    resources: &ResourceMap,
    hooks: HookClient,
    workers: usize,
) -> Result<CompositeHandle, StartError> {
    controller
        .validate()
        .map_err(|e| StartError::Invalid(e.to_string()))?;
    let name = controller.metadata.name.clone().unwrap_or_default();
    let spec = &controller.spec;
    let lookup = |api_version: &str, resource: &str| {
        resources
            .get(api_version, resource)
            .cloned()
            .ok_or_else(|| StartError::UnknownResource(format!("{resource}.{api_version}")))
    };
    let parent_resource = lookup(
        &spec.parent_resource.api_version,
        &spec.parent_resource.resource,
    )?;
    let mut child_resources = Vec::new();
    for rule in &spec.child_resources {
        let resource = lookup(&rule.api_version, &rule.resource)?;
        child_resources.push((
            ChildType {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
                resource: resource.name.clone(),
                namespaced: resource.namespaced,
                method: rule.update_method(),
            },
            resource,
        ));
    }
    let queue = WorkQueue::new(format!("composite-{name}"));

    let parent = informers.lease(&parent_resource);
    let parent_handler = {
        let queue = queue.clone();
        parent.add_handler(Arc::new(move |change, origin| {
            if let Some(key) = NamespacedName::of(change.object().as_ref()) {
                queue.add(key, priority(origin));
            }
        }))
    };
    let mut children = Vec::new();
    for (kind, resource) in child_resources {
        let informer = informers.lease(&resource);
        let queue = queue.clone();
        let parent_api_version = parent_resource.api_version.clone();
        let parent_kind = parent_resource.kind.clone();
        let parent_namespaced = parent_resource.namespaced;
        let handler = informer.add_handler(Arc::new(move |change, origin| {
            let obj = change.object();
            let owner = obj
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|r| r.controller == Some(true));
            let Some(owner) = owner else { return };
            if owner.kind != parent_kind || owner.api_version != parent_api_version {
                return;
            }
            let namespace = if parent_namespaced {
                obj.metadata.namespace.clone().unwrap_or_default()
            } else {
                String::new()
            };
            queue.add(
                NamespacedName::new(namespace, owner.name.clone()),
                priority(origin),
            );
        }));
        children.push(Child {
            kind,
            resource,
            informer,
            handler,
        });
    }
    let inner = Arc::new(Inner {
        controller,
        client,
        hooks,
        parent_resource,
        parent,
        parent_handler,
        children,
        queue: queue.clone(),
    });
    let run_queue = queue.clone();
    let task = tokio::spawn(async move {
        for c in &inner.children {
            c.informer.wait_synced().await;
        }
        inner.parent.wait_synced().await;
        let worker_inner = inner.clone();
        run_queue
            .run(workers, move |key: NamespacedName| {
                let inner = worker_inner.clone();
                async move { inner.sync(&key).await }
            })
            .await;
    });
    Ok(CompositeHandle { queue, task })
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

impl Inner {
    fn name(&self) -> &str {
        self.controller.metadata.name.as_deref().unwrap_or_default()
    }

    async fn sync(&self, key: &NamespacedName) -> Result<(), SyncError> {
        let Some(cached) = self.parent.get(key) else {
            return Ok(()); // deleted; children go with the garbage collector
        };
        if cached.metadata.deletion_timestamp.is_some() {
            return Ok(()); // finalize hook: not yet supported
        }
        let Some(hook) = self.controller.spec.sync_hook() else {
            return Ok(());
        };
        let parent = to_value(&cached, &self.parent_resource)?;
        let uid = cached.metadata.uid.clone().unwrap_or_default();
        let parent_ns = cached.metadata.namespace.clone();
        let parent_ns = parent_ns.as_deref().filter(|ns| !ns.is_empty());
        let types: Vec<ChildType> = self.children.iter().map(|c| c.kind.clone()).collect();
        let mut observed = Vec::new();
        for c in &self.children {
            for obj in c.informer.controlled_by(&uid) {
                observed.push(to_value(&obj, &c.resource)?);
            }
        }
        let version = hook.effective_version();
        let request = CompositeHookRequest {
            controller: self.controller.clone(),
            parent: parent.clone(),
            children: children::observed_map(version, parent_ns, &types, observed.clone()),
            related: Default::default(),
            finalizing: false,
        };
        let key_text = key.to_string();
        let ctx = CallContext {
            controller: self.name(),
            hook_name: "sync",
            parent_key: &key_text,
        };
        let endpoints: Vec<_> = self
            .controller
            .spec
            .all_endpoint_configs()
            .cloned()
            .collect();
        let response: CompositeHookResponse =
            self.hooks.call(&ctx, hook, &endpoints, &request).await?;

        let desired = children::validate_desired(&types, parent_ns, response.children)?;
        let parent_ref = ParentRef {
            api_version: self.parent_resource.api_version.clone(),
            kind: self.parent_resource.kind.clone(),
            name: key.name.clone(),
            uid,
        };
        let actions = children::plan_children(&types, &parent_ref, &observed, &desired)?;
        for action in actions {
            self.write_child(action).await?;
        }
        if let Some(status) = response.status {
            self.write_status(&cached, &parent, status).await?;
        }
        if response.resync_after_seconds > 0.0 {
            let delay = Duration::from_secs_f64(response.resync_after_seconds.min(1e9));
            self.queue.add_after(key.clone(), delay, Priority::Event);
        }
        if let Some(period) = self
            .controller
            .spec
            .resync_period_seconds
            .filter(|p| *p > 0)
        {
            let delay = Duration::from_secs(period as u64);
            self.queue.add_after(key.clone(), delay, Priority::Bulk);
        }
        Ok(())
    }

    fn child_api(&self, type_index: usize, namespace: &str) -> Api<DynamicObject> {
        let res = &self.children[type_index].resource;
        let kr = kube_resource(res);
        if res.namespaced {
            Api::namespaced_with(self.client.clone(), namespace, &kr)
        } else {
            Api::all_with(self.client.clone(), &kr)
        }
    }

    async fn write_child(&self, action: Action) -> Result<(), SyncError> {
        let api_err = |what: String| move |source| SyncError::Api { what, source };
        match action {
            Action::Create { type_index, object } => {
                let (_, kind, ns, name) = children::child_key(&object);
                let obj: DynamicObject = serde_json::from_value(object)?;
                tracing::info!(controller = self.name(), %kind, %ns, %name, "creating child");
                match self
                    .child_api(type_index, &ns)
                    .create(&PostParams::default(), &obj)
                    .await
                {
                    Err(e) if is_already_exists(&e) => Ok(()),
                    r => r
                        .map(drop)
                        .map_err(api_err(format!("create {kind} {ns}/{name}"))),
                }
            }
            Action::Update { type_index, object } => {
                let (_, kind, ns, name) = children::child_key(&object);
                let obj: DynamicObject = serde_json::from_value(object)?;
                tracing::info!(controller = self.name(), %kind, %ns, %name, "updating child");
                self.child_api(type_index, &ns)
                    .replace(&name, &PostParams::default(), &obj)
                    .await
                    .map(drop)
                    .map_err(api_err(format!("update {kind} {ns}/{name}")))
            }
            Action::Delete {
                type_index,
                key,
                uid,
            } => {
                let (_, kind, ns, name) = key;
                tracing::info!(controller = self.name(), %kind, %ns, %name, "deleting child");
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                match self.child_api(type_index, &ns).delete(&name, &dp).await {
                    Err(e) if is_not_found(&e) => Ok(()),
                    r => r
                        .map(drop)
                        .map_err(api_err(format!("delete {kind} {ns}/{name}"))),
                }
            }
        }
    }

    async fn write_status(
        &self,
        cached: &DynamicObject,
        parent: &Value,
        mut status: serde_json::Map<String, Value>,
    ) -> Result<(), SyncError> {
        if let Some(generation) = cached.metadata.generation {
            status.insert("observedGeneration".into(), Value::from(generation));
        }
        let status = Value::Object(status);
        if parent.get("status") == Some(&status) {
            return Ok(());
        }
        let mut updated = parent.clone();
        if let Some(map) = updated.as_object_mut() {
            map.insert("status".into(), status);
        }
        let obj: DynamicObject = serde_json::from_value(updated)?;
        let name = cached.metadata.name.clone().unwrap_or_default();
        let ns = cached.metadata.namespace.clone().unwrap_or_default();
        let kr = kube_resource(&self.parent_resource);
        let api: Api<DynamicObject> = if self.parent_resource.namespaced {
            Api::namespaced_with(self.client.clone(), &ns, &kr)
        } else {
            Api::all_with(self.client.clone(), &kr)
        };
        api.replace_status(&name, &PostParams::default(), &obj)
            .await
            .map(drop)
            .map_err(|source| SyncError::Api {
                what: format!("update status of {ns}/{name}"),
                source,
            })
    }
}
