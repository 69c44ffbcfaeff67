//! The CompositeController reconciler for one controller object: parent and child
//! informers feed a work queue of parent keys; a sync reads the parent and its owned
//! children from the cache, calls the sync hook, writes the child changes and the parent
//! status (only what changed), and schedules resyncs.
//!
//! Not yet here: customize hook / related objects, finalize hook, claim/adopt by selector,
//! Events, expectations/overlay, server-side apply.

use std::sync::Arc;
use std::time::Duration;

use metacontroller_api::composite::CompositeController;
use metacontroller_api::wire::{CompositeHookRequest, CompositeHookResponse};
use metacontroller_dynamic::{
    ApiResource, HandlerId, Informer, Informers, Lease, NamespacedName, Origin, Priority,
    ResourceId, ResourceMap, WorkQueue,
};
use metacontroller_hooks::{CallContext, HookClient};
use serde_json::Value;

use crate::children::{self, ChildType, ParentRef};
use crate::writer::{to_value, ApplyStrategy, WriteError, Writer};

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
    #[error(transparent)]
    Write(#[from] WriteError),
    /// An object could not be converted.
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
}

struct Child {
    kind: ChildType,
    resource: Arc<ApiResource>,
    informer: Lease<ResourceId, Informer>,
    handler: HandlerId,
}

struct Inner {
    controller: CompositeController,
    writer: Arc<Writer>,
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

/// How a controller runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Concurrent syncs (`--workers`); at least one runs.
    pub workers: usize,
    /// How children are written (`--apply-strategy`).
    pub apply_strategy: ApplyStrategy,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            workers: 5,
            apply_strategy: ApplyStrategy::DynamicApply,
        }
    }
}

/// Starts the reconciler of `controller`. Must run inside tokio.
pub fn start(
    controller: CompositeController,
    client: kube::Client,
    informers: &Informers,
    resources: &ResourceMap,
    hooks: HookClient,
    options: Options,
) -> Result<CompositeHandle, StartError> {
    let workers = options.workers.max(1);
    let writer = Arc::new(Writer::new(client, options.apply_strategy));
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
        let writer = writer.clone();
        let res = parent_resource.clone();
        parent.add_handler(Arc::new(move |change, origin| {
            writer.observe(&res, change);
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
        let writer = writer.clone();
        let res = resource.clone();
        let handler = informer.add_handler(Arc::new(move |change, origin| {
            writer.observe(&res, change);
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
        writer,
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
        let actions = children::plan_children(
            &types,
            &parent_ref,
            &observed,
            &desired,
            self.writer.strategy().is_server_side(),
        )?;
        for action in actions {
            let res = &self.children[action.type_index()].resource;
            self.writer.execute(res, &parent_ref.uid, action).await?;
        }
        if let Some(mut status) = response.status {
            if let Some(generation) = cached.metadata.generation {
                status.insert("observedGeneration".into(), Value::from(generation));
            }
            self.writer
                .write_status(&self.parent_resource, &parent, Value::Object(status))
                .await?;
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
}
