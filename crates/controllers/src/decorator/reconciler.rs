//! The DecoratorController reconciler for one controller object: informers on every
//! targeted resource and every attachment resource feed a work queue of target keys; a sync
//! reads the target and its attachments from the cache (through the writer's overlay of
//! our own writes), keeps the finalizer in place, calls the sync or finalize hook, writes
//! the target's labels/annotations/status and the attachment changes (only what changed),
//! and schedules resyncs.
//!
//! The order of a sync is upstream's: finalizer first (so there is always a chance to clean
//! up), then related objects (customize hook, [`crate::related`]), then the hook, then the
//! target update (which also drops the finalizer after `finalized: true`), then the
//! attachments. A failed sync records a `SyncError` Warning Event on the target
//! ([`crate::events`]), except 409 conflicts (stale cache: retried with backoff).

use std::sync::Arc;
use std::time::Duration;

use kube::core::DynamicObject;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_api::hook::Hook;
use metacontroller_api::wire::{
    CustomizableController, DecoratorHookRequest, DecoratorHookResponse,
};
use metacontroller_dynamic::{
    ApiResource, Change, HandlerId, Informer, Informers, Lease, NamespacedName, ObjectKey, Origin,
    Priority, ResourceId, ResourceMap, WorkQueue,
};
use metacontroller_hooks::{CallContext, HookClient};
use serde_json::Value;

use super::attachments::{self, is_own_attachment};
use super::select::{api_group, is_status_only_update, TargetSelector};
use super::target::{self, FinalizerSync, HookChoice};
use crate::children::{self, ChildError, ChildType, ParentRef};
use crate::composite::Options;
use crate::events::{self, EventRecorder};
use crate::metrics::DECORATOR;
use crate::related::{ParentId, RelatedConfig, RelatedError, RelatedManager};
use crate::writer::{to_value, WriteError, Writer};

/// Why a DecoratorController could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The spec is invalid.
    #[error("invalid DecoratorController: {0}")]
    Invalid(String),
    /// A resource named by the spec is not served.
    #[error("{0} is not served by the API server")]
    UnknownResource(String),
}

/// Why one sync failed (the key is requeued with backoff).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The hook failed.
    #[error("{hook} hook: {source}")]
    Hook {
        /// `sync` or `finalize`.
        hook: &'static str,
        /// The error.
        source: metacontroller_hooks::HookError,
    },
    /// Neither hook applies (no sync hook and the target is not being finalized).
    #[error("sync hook not defined")]
    NoSyncHook,
    /// The customize hook failed or related objects could not be read.
    #[error(transparent)]
    Related(#[from] RelatedError),
    /// An attachment could not be planned.
    #[error("invalid hook response: {0}")]
    Attachments(#[from] ChildError),
    /// Some of the hook's attachments were refused (skipped; the target and the other
    /// attachments were written).
    #[error("invalid hook response: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused(Vec<ChildError>),
    /// An API request failed (a 409 Conflict means the cache was stale: retried later).
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Some attachment writes failed (the others were done).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Writes(Vec<WriteError>),
    /// An object could not be converted.
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
}

impl SyncError {
    /// `Some(delay)` when the sync or customize hook answered 429 Too Many Requests: the
    /// key is retried after `Retry-After` (one second without it), with no Event.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            SyncError::Hook { source, .. } | SyncError::Related(RelatedError::Hook(source)) => {
                crate::handle::hook_retry_after(source)
            }
            _ => None,
        }
    }

    /// A 409 Conflict: the sync acted on stale data and is retried, without an Event.
    pub fn is_conflict(&self) -> bool {
        match self {
            SyncError::Write(e) => e.is_conflict(),
            SyncError::Writes(es) => es.iter().any(WriteError::is_conflict),
            _ => false,
        }
    }
}

/// A work queue key: which targeted resource (index into the controller's target types)
/// and which object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TargetKey {
    /// Index of the target type.
    pub resource: usize,
    /// `namespace/name` of the target.
    pub key: NamespacedName,
}

impl std::fmt::Display for TargetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.key)
    }
}

struct AttachmentType {
    kind: ChildType,
    resource: Arc<ApiResource>,
    informer: Lease<ResourceId, Informer>,
    handler: HandlerId,
}

/// What the informer handlers need (shared before the reconciler itself exists).
struct Routing {
    name: String,
    selector: TargetSelector,
    finalizer: String,
    /// Per target type: resource and informer (filled before handlers are added).
    targets: Vec<(Arc<ApiResource>, Lease<ResourceId, Informer>)>,
    queue: WorkQueue<TargetKey>,
}

fn priority(origin: Origin) -> Priority {
    match origin {
        Origin::Watch => Priority::Event,
        Origin::Relist => Priority::Bulk,
    }
}

impl Routing {
    /// The target type of an apiVersion and kind (version compared too: the key comes from
    /// an object we read through that resource).
    fn target_index(&self, api_version: &str, kind: &str) -> Option<usize> {
        self.targets
            .iter()
            .position(|(res, _)| res.api_version == api_version && res.kind == kind)
    }

    /// Whether the decorator cares about this object of target type `index`: it matches,
    /// or it still carries our finalizer (so it must be finalized).
    fn cares(&self, index: usize, obj: &DynamicObject) -> bool {
        let res = &self.targets[index].0;
        self.selector
            .matches_meta(&res.api_version, &res.kind, &obj.metadata)
            || obj
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| *f == self.finalizer)
    }

    fn on_target(&self, index: usize, change: &Change<DynamicObject>, origin: Origin) {
        let res = &self.targets[index].0;
        if let Change::Updated { old, new } = change {
            let ignore_status = self
                .selector
                .rule(&res.api_version, &res.kind)
                .is_some_and(|r| r.ignore_status_changes);
            if ignore_status && is_status_only_update(&old.metadata, &new.metadata) {
                return;
            }
        }
        let obj = change.object();
        // A deleted target is always synced once, so what was cached for it (related-object
        // rules) is dropped even if it had stopped matching.
        if !matches!(change, Change::Deleted(_)) && !self.cares(index, obj) {
            return;
        }
        if let Some(key) = NamespacedName::of(obj.as_ref()) {
            self.queue.add(
                TargetKey {
                    resource: index,
                    key,
                },
                priority(origin),
            );
        }
    }

    /// An attachment changed: sync the target named by its controller ownerReference, if
    /// that is a target of ours (group and kind compared; the version may differ).
    fn on_attachment(&self, change: &Change<DynamicObject>, origin: Origin) {
        if let Change::Updated { old, new } = change {
            // A relist replay of an unchanged object: the target resync covers it.
            if old.metadata.resource_version == new.metadata.resource_version {
                return;
            }
        }
        let obj = change.object();
        let Some(owner) = obj
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
        else {
            return;
        };
        let group = api_group(&owner.api_version);
        let Some(index) = self
            .targets
            .iter()
            .position(|(res, _)| res.group == group && res.kind == owner.kind)
        else {
            return;
        };
        let (res, informer) = &self.targets[index];
        let namespace = if res.namespaced {
            obj.metadata.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        };
        let key = NamespacedName::new(namespace, owner.name.clone());
        let Some(target) = informer.get(&key) else {
            return;
        };
        if target.metadata.uid.as_deref() != Some(owner.uid.as_str()) || !self.cares(index, &target)
        {
            return;
        }
        self.queue.add(
            TargetKey {
                resource: index,
                key,
            },
            priority(origin),
        );
    }
}

struct Inner {
    controller: DecoratorController,
    routing: Arc<Routing>,
    writer: Arc<Writer>,
    hooks: HookClient,
    related: RelatedManager,
    events: EventRecorder,
    /// Handler per target type (same order as `routing.targets`).
    target_handlers: Vec<HandlerId>,
    attachments: Vec<AttachmentType>,
}

impl Drop for Inner {
    // The handlers hold `routing`, which holds the informer leases: removing them breaks
    // the cycle so the informers are released.
    fn drop(&mut self) {
        for ((_, informer), h) in self.routing.targets.iter().zip(&self.target_handlers) {
            informer.remove_handler(*h);
        }
        for a in &self.attachments {
            a.informer.remove_handler(a.handler);
        }
    }
}

/// A running DecoratorController. Dropping it (or `stop`) stops it.
pub type DecoratorHandle = crate::handle::ControllerHandle<TargetKey>;

/// Starts the reconciler of `controller`. Must run inside tokio.
pub fn start(
    controller: DecoratorController,
    client: kube::Client,
    informers: &Informers,
    resources: &ResourceMap,
    hooks: HookClient,
    options: Options,
) -> Result<DecoratorHandle, StartError> {
    controller
        .validate()
        .map_err(|e| StartError::Invalid(e.to_string()))?;
    if controller.spec.hooks.is_none() {
        return Err(StartError::Invalid("spec.hooks: no hooks defined".into()));
    }
    let workers = options.workers.max(1);
    let name = controller.metadata.name.clone().unwrap_or_default();
    let spec = &controller.spec;
    let lookup = |api_version: &str, resource: &str| {
        resources
            .get(api_version, resource)
            .cloned()
            .ok_or_else(|| StartError::UnknownResource(format!("{resource}.{api_version}")))
    };
    let mut target_resources: Vec<Arc<ApiResource>> = Vec::new();
    let mut resolved = Vec::new();
    for rule in &spec.resources {
        let res = lookup(&rule.api_version, &rule.resource)?;
        resolved.push((res.group.clone(), res.kind.clone(), rule));
        if !target_resources.iter().any(|r| r.id() == res.id()) {
            target_resources.push(res);
        }
    }
    let selector = TargetSelector::new(
        resolved
            .iter()
            .map(|(group, kind, rule)| (group.as_str(), kind.as_str(), *rule)),
    )
    .map_err(|e| StartError::Invalid(e.to_string()))?;
    let mut attachment_resources = Vec::new();
    for rule in &spec.attachments {
        let res = lookup(&rule.api_version, &rule.resource)?;
        attachment_resources.push((
            ChildType {
                api_version: res.api_version.clone(),
                kind: res.kind.clone(),
                resource: res.name.clone(),
                namespaced: res.namespaced,
                method: rule.update_method(),
            },
            res,
        ));
    }

    let writer = Arc::new(
        Writer::new(client, options.apply_strategy)
            .with_metrics(options.metrics.child_writes(DECORATOR, &name)),
    );
    let queue: WorkQueue<TargetKey> = options.metrics.queue(DECORATOR, &name);
    let routing = Arc::new(Routing {
        name: name.clone(),
        selector,
        finalizer: controller.finalizer_name(),
        targets: target_resources
            .iter()
            .map(|res| (res.clone(), informers.lease(res)))
            .collect(),
        queue: queue.clone(),
    });
    let related = RelatedManager::new(RelatedConfig {
        controller: CustomizableController::Decorator(Box::new(controller.clone())),
        name: name.clone(),
        hook: spec.customize_hook().cloned(),
        endpoint_configs: spec.all_endpoint_configs().cloned().collect(),
        hooks: hooks.clone(),
        informers: informers.clone(),
        resources: resources.clone(),
        enqueue: {
            // Weak: the manager lives in the reconciler, which owns the routing.
            let routing = Arc::downgrade(&routing);
            Arc::new(move |target: &ParentId, origin| {
                let Some(routing) = routing.upgrade() else {
                    return;
                };
                if let Some(index) = routing.target_index(&target.api_version, &target.kind) {
                    routing.queue.add(
                        TargetKey {
                            resource: index,
                            key: target.key.clone(),
                        },
                        priority(origin),
                    );
                }
            })
        },
    });
    let mut target_handlers = Vec::new();
    for (index, (res, informer)) in routing.targets.iter().enumerate() {
        let routing = routing.clone();
        let writer = writer.clone();
        let res = res.clone();
        target_handlers.push(informer.add_handler(Arc::new(move |change, origin| {
            writer.observe(&res, change);
            if let Change::Deleted(obj) = change {
                if let Some(uid) = obj.metadata.uid.as_ref() {
                    writer.expectations().forget(uid);
                }
            }
            routing.on_target(index, change, origin);
        })));
    }
    let mut attachments = Vec::new();
    for (kind, resource) in attachment_resources {
        let informer = informers.lease(&resource);
        let handler = {
            let routing = routing.clone();
            let writer = writer.clone();
            let res = resource.clone();
            informer.add_handler(Arc::new(move |change, origin| {
                writer.observe(&res, change);
                routing.on_attachment(change, origin);
            }))
        };
        attachments.push(AttachmentType {
            kind,
            resource,
            informer,
            handler,
        });
    }
    let inner = Arc::new(Inner {
        controller,
        routing,
        writer,
        hooks,
        related,
        events: options.events,
        target_handlers,
        attachments,
    });
    let run_queue = queue.clone();
    let task = tokio::spawn(async move {
        for a in &inner.attachments {
            a.informer.wait_synced().await;
        }
        for (_, informer) in &inner.routing.targets {
            informer.wait_synced().await;
        }
        let worker_inner = inner.clone();
        run_queue
            .run(workers, move |key: TargetKey| {
                let inner = worker_inner.clone();
                async move { inner.sync_and_record(&key).await }
            })
            .await;
    });
    Ok(DecoratorHandle::new(queue, task))
}

impl Inner {
    fn name(&self) -> &str {
        &self.routing.name
    }

    fn finalize_hook(&self) -> Option<&Hook> {
        self.controller.spec.finalize_hook()
    }

    /// Whether the cache holds the attachment `key` (for expectations).
    fn cached(&self, key: &ObjectKey) -> Option<bool> {
        let a = self
            .attachments
            .iter()
            .find(|a| format!("{}/{}", a.resource.api_version, a.resource.name) == key.resource)?;
        let nn = NamespacedName::new(key.namespace.clone(), key.name.clone());
        // An accepted delete (deletionTimestamp set) counts as done: a finalizer or grace
        // period on the attachment must not hold up the target's syncs.
        Some(
            a.informer
                .get(&nn)
                .is_some_and(|o| o.metadata.deletion_timestamp.is_none()),
        )
    }

    /// One sync, with a `SyncError` Warning Event on the target when it fails (not for
    /// conflicts) and a delayed retry when the hook asked to slow down.
    async fn sync_and_record(&self, key: &TargetKey) -> Result<(), SyncError> {
        let result = self.sync(key).await;
        if let Some(delay) = result.as_ref().err().and_then(SyncError::retry_after) {
            tracing::info!(controller = self.name(), target = %key, ?delay, "hook asked to slow down; resyncing later");
            self.routing
                .queue
                .add_after(key.clone(), delay, Priority::Event);
            return Ok(());
        }
        if let Err(e) = &result {
            if !e.is_conflict() {
                if let Some((res, informer)) = self.routing.targets.get(key.resource) {
                    if let Some(Ok(target)) = informer.get(&key.key).map(|t| to_value(&t, res)) {
                        self.events.warning(
                            &target,
                            events::reason::SYNC_ERROR,
                            format!("Sync error: {e}"),
                        );
                    }
                }
            }
        }
        result
    }

    async fn sync(&self, key: &TargetKey) -> Result<(), SyncError> {
        let Some((res, informer)) = self.routing.targets.get(key.resource) else {
            return Ok(());
        };
        let Some(cached) = informer.get(&key.key) else {
            // Deleted; attachments go with the garbage collector.
            self.related.forget(&ParentId {
                api_version: res.api_version.clone(),
                kind: res.kind.clone(),
                key: key.key.clone(),
            });
            return Ok(());
        };
        let Some(mut object) = self.writer.fresh(res, to_value(&cached, res)?) else {
            return Ok(());
        };
        let selector = &self.routing.selector;
        let finalizer = self.routing.finalizer.as_str();
        let finalize_enabled = self.finalize_hook().is_some();
        if target::is_ignored(selector.matches(&object), &object, finalizer) {
            return Ok(());
        }

        // Finalizer first, so anything we do later can be cleaned up.
        let present = match target::finalizer_sync(&object, finalizer, finalize_enabled) {
            FinalizerSync::Keep => None,
            FinalizerSync::Add => Some(true),
            FinalizerSync::Remove => Some(false),
        };
        if let Some(updated) = present.and_then(|p| target::with_finalizer(&object, finalizer, p)) {
            match self.writer.replace(res, updated).await {
                Ok(written) => object = written,
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        let matches = selector.matches(&object);
        if target::is_ignored(matches, &object, finalizer) {
            return Ok(());
        }

        let uid_ref = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !self.writer.satisfied(uid_ref, |k| self.cached(k)) {
            // Our last attachment writes are not in the cache yet; their events requeue
            // the target.
            tracing::debug!(controller = self.name(), target = %key, "waiting for the cache to confirm our writes");
            self.routing
                .queue
                .add_after(key.clone(), Duration::from_secs(1), Priority::Event);
            return Ok(());
        }
        let uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let target_ns = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty())
            .map(str::to_string);
        let types: Vec<ChildType> = self.attachments.iter().map(|a| a.kind.clone()).collect();
        let mut observed = Vec::new();
        for a in &self.attachments {
            for obj in a.informer.controlled_by(&uid) {
                if !is_own_attachment(obj.as_ref(), &uid, self.name()) {
                    continue;
                }
                if let Some(fresh) = self.writer.fresh(&a.resource, to_value(&obj, &a.resource)?) {
                    observed.push(fresh);
                }
            }
        }

        let choice = target::choose_hook(&object, matches, finalize_enabled);
        let (hook, hook_name) = match choice {
            HookChoice::Finalize => (self.finalize_hook(), "finalize"),
            HookChoice::Sync => (self.controller.spec.sync_hook(), "sync"),
        };
        let Some(hook) = hook else {
            return Err(SyncError::NoSyncHook);
        };
        let version = hook.effective_version();
        let related = self.related.related(&object, version).await?;
        let request = DecoratorHookRequest::new(
            version,
            self.controller.clone(),
            object.clone(),
            attachments::observed_map(version, target_ns.as_deref(), &types, observed.clone()),
            related,
            choice == HookChoice::Finalize,
        );
        let key_text = format!("{}/{}/{}", res.api_version, res.kind, key.key);
        let ctx = CallContext {
            controller: self.name(),
            hook_name,
            parent_key: &key_text,
        };
        let endpoints: Vec<_> = self
            .controller
            .spec
            .all_endpoint_configs()
            .cloned()
            .collect();
        let response: DecoratorHookResponse = self
            .hooks
            .call(&ctx, hook, &endpoints, &request)
            .await
            .map_err(|source| SyncError::Hook {
                hook: hook_name,
                source,
            })?;
        let (desired, refused) = attachments::prepare_desired(
            &types,
            target_ns.as_deref(),
            self.name(),
            response.attachments,
        );

        if response.resync_after_seconds > 0.0 {
            let delay = Duration::from_secs_f64(response.resync_after_seconds.min(1e9));
            self.routing
                .queue
                .add_after(key.clone(), delay, Priority::Event);
        }

        let finalized =
            (response.finalized && target::has_finalizer(&object, finalizer)).then_some(finalizer);
        let update = target::apply_response(
            &object,
            response.labels.as_ref(),
            response.annotations.as_ref(),
            response.status.as_ref(),
            finalized,
        );
        let manage = target::manages_attachments(&object, finalizer, finalize_enabled);
        if !self.write_target(res, update).await? {
            return Ok(()); // the target is gone
        }

        if manage {
            let target_ref = ParentRef {
                api_version: res.api_version.clone(),
                kind: res.kind.clone(),
                name: key.key.name.clone(),
                uid: uid.clone(),
            };
            let actions = children::plan_children(
                &types,
                &target_ref,
                &observed,
                &desired,
                self.writer.strategy().is_server_side(),
            )?;
            // One bad attachment does not block the others; a conflict stops at once.
            let errors = self
                .writer
                .execute_all(&uid, actions, |i| &self.attachments[i].resource)
                .await;
            if !errors.is_empty() {
                return Err(SyncError::Writes(errors));
            }
        }

        if let Some(period) = self.controller.spec.resync_period_seconds {
            // Upstream raises any period below one second (0 and negatives too) to one.
            let delay = Duration::from_secs(period.max(1) as u64);
            self.routing
                .queue
                .add_after(key.clone(), delay, Priority::Bulk);
        }
        if refused.is_empty() {
            Ok(())
        } else {
            Err(SyncError::Refused(refused))
        }
    }

    /// Writes the target's new status (through `/status` when the resource has it) and
    /// metadata. Returns false when the target no longer exists.
    async fn write_target(
        &self,
        res: &ApiResource,
        update: target::TargetUpdate,
    ) -> Result<bool, SyncError> {
        let has_status = res.has_subresource("status");
        let mut object = update.object;
        if update.status_changed && has_status {
            match self.writer.replace_status(res, object.clone()).await {
                Ok(written) => {
                    // The metadata update below must carry the new resourceVersion.
                    if let (Some(meta), Some(rv)) = (
                        object.get_mut("metadata").and_then(Value::as_object_mut),
                        written.pointer("/metadata/resourceVersion").cloned(),
                    ) {
                        meta.insert("resourceVersion".into(), rv);
                    }
                }
                Err(e) if e.is_not_found() => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        if update.metadata_changed || (update.status_changed && !has_status) {
            match self.writer.replace(res, object).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }
}
