//! The CompositeController reconciler for one controller object, following upstream
//! Metacontroller's `parentController`:
//!
//! - **Events → keys.** Parent events queue the parent (skipped when the parent neither
//!   matches `parentResource.labelSelector` nor carries our finalizer, and — with
//!   `ignoreStatusChanges` — when only the status changed). Child events queue the parent
//!   named by the child's controller ownerReference; an orphan's events queue every parent
//!   whose selector matches it (so it can be adopted). Watch events are served before bulk
//!   (relist / resync) keys.
//! - **Sync.** Read the parent (cache + own-writes overlay); add or remove the
//!   `metacontroller.io/compositecontroller-<name>` finalizer depending on whether a finalize
//!   hook exists; wait while our creates/deletes are unconfirmed; claim children (owned and
//!   matching → child; matching orphan → adopt after re-reading it from the API server; owned
//!   but no longer matching → release); call the sync hook, or the finalize hook
//!   (`finalizing: true`) while the parent is being deleted; write children per update
//!   strategy; remove the finalizer once the finalize hook says `finalized`; write the status
//!   (with `observedGeneration`) only when it changed; schedule `resyncAfterSeconds` and
//!   `resyncPeriodSeconds`.
//! - **Failures** are values: a failed sync is requeued with backoff; a 409 Conflict on a
//!   child stops the child writes, the status is still written, and the next sync
//!   recomputes from fresher state.
//!
//! Rolling update methods (`RollingRecreate`, `RollingInPlace`) keep ControllerRevisions and
//! move one child per sync, gated by `statusChecks` (see [`crate::rolling`]). The customize
//! hook and `related` objects come from [`crate::related`]; a failed sync records a
//! `SyncError` Warning Event on the parent through [`crate::events`] (except 409 conflicts,
//! which are expected stale-cache retries).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::core::DynamicObject;
use metacontroller_api::composite::{ChildUpdateStatusChecks, CompositeController};
use metacontroller_api::hook::Hook;
use metacontroller_api::revision::{ControllerRevision, LABEL_API_GROUP, LABEL_RESOURCE};
use metacontroller_api::wire::{
    CompositeHookRequest, CompositeHookResponse, CustomizableController,
};
use metacontroller_dynamic::{
    ApiResource, Change, HandlerId, Informer, Informers, Lease, NamespacedName, ObjectKey,
    ObjectMetaAccess, Origin, Priority, ResourceId, ResourceMap, Selector, WorkQueue,
    CONTROLLER_UID_LABEL,
};
use metacontroller_hooks::{CallContext, HookClient, HookError};
use serde_json::{json, Value};

use crate::children::{self, ChildType, ParentRef};
use crate::claim::{self, Claim, Claimant};
use crate::events::{self, EventRecorder};
use crate::metrics::COMPOSITE;
use crate::related::{ParentId, RelatedConfig, RelatedError, RelatedManager};
use crate::rolling::{self, Desired, ParentRevision, RevisionParent, Rollout};
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
    /// The parent resource has no `/status` subresource (upstream refuses such parents).
    #[error("[{controller}] Sync error - ignoring, parent resource {gvk} does not have subresource 'Status' enabled")]
    NoStatusSubresource {
        /// The CompositeController's name.
        controller: String,
        /// `group/version, Kind=kind` of the parent.
        gvk: String,
    },
}

/// Why one sync failed (the key is requeued with backoff).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The hook failed. Upstream's wording, also for the finalize hook (upstream calls both
    /// through the same path): `sync hook failed for <Kind> <namespace>/<name>: <error>`.
    #[error("sync hook failed for {parent}: {source}")]
    Hook {
        /// `sync` or `finalize`.
        hook: &'static str,
        /// `<Kind> <namespace>/<name>` of the parent (empty namespace when cluster-scoped).
        parent: String,
        /// The error.
        source: HookError,
    },
    /// The parent is not being finalized and there is no sync hook.
    #[error("sync hook not defined")]
    NoSyncHook,
    /// A child could not be planned.
    #[error("invalid sync hook response: {0}")]
    Children(#[from] children::ChildError),
    /// Some of the hook's children were refused (skipped; the others and the status were
    /// written).
    #[error("invalid sync hook response: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused(Vec<children::ChildError>),
    /// The parent's selector is unusable, or a desired child does not match it.
    #[error("{0}")]
    Selector(String),
    /// An API request failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Several child writes failed (the others were done).
    #[error("can't reconcile children for {parent}: {}", .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Writes {
        /// `<Kind> <namespace>/<name>` of the parent (upstream's wording).
        parent: String,
        /// The failed writes.
        errors: Vec<WriteError>,
    },
    /// An object could not be converted.
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
    /// The customize hook failed or related objects could not be read.
    #[error(transparent)]
    Related(#[from] RelatedError),
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

    /// True when the failure is a 409 Conflict (stale data).
    pub fn is_conflict(&self) -> bool {
        match self {
            SyncError::Write(e) => e.is_conflict(),
            SyncError::Writes { errors, .. } => errors.iter().any(WriteError::is_conflict),
            _ => false,
        }
    }
}

/// How a controller runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Concurrent syncs (`--workers`); at least one runs.
    pub workers: usize,
    /// How children are written (`--apply-strategy`).
    pub apply_strategy: ApplyStrategy,
    /// Where Events about parents go (default: dropped).
    pub events: EventRecorder,
    /// Where queue, reconcile and child write metrics go (default: not exported).
    pub metrics: crate::metrics::ControllerMetrics,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            workers: 5,
            apply_strategy: ApplyStrategy::DynamicApply,
            events: EventRecorder::disabled(),
            metrics: Default::default(),
        }
    }
}

struct Child {
    kind: ChildType,
    status_checks: Option<ChildUpdateStatusChecks>,
    resource: Arc<ApiResource>,
    informer: Lease<ResourceId, Informer>,
    handler: HandlerId,
}

/// Maps informer events to parent keys (shared by the handlers).
struct Mapper {
    parents: Arc<Informer>,
    parent_resource: Arc<ApiResource>,
    parent_selector: Selector,
    finalizer: String,
    generate_selector: bool,
    ignore_status_changes: bool,
    queue: WorkQueue<NamespacedName>,
}

fn priority(origin: Origin) -> Priority {
    match origin {
        Origin::Watch => Priority::Event,
        Origin::Relist => Priority::Bulk,
    }
}

fn has_finalizer(obj: &DynamicObject, name: &str) -> bool {
    obj.metadata.finalizers.iter().flatten().any(|f| f == name)
}

fn value_has_finalizer(obj: &Value, name: &str) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|fs| fs.iter().any(|f| f.as_str() == Some(name)))
}

fn value_labels(obj: &Value) -> serde_json::Map<String, Value> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// The selector of a parent's children (upstream `makeSelector`).
fn parent_child_selector(parent: &Value, generate: bool) -> Result<Selector, SyncError> {
    Selector::for_composite_parent(parent, generate, &Default::default())
        .map_err(|e| SyncError::Selector(format!("can't make the child selector: {e}")))
}

impl Mapper {
    /// Parents that neither match `parentResource.labelSelector` nor carry our finalizer are
    /// not ours.
    fn interested(&self, parent: &DynamicObject) -> bool {
        let empty = Default::default();
        let labels = parent.metadata.labels.as_ref().unwrap_or(&empty);
        has_finalizer(parent, &self.finalizer) || self.parent_selector.matches(labels)
    }

    fn on_parent(&self, change: &Change<DynamicObject>, origin: Origin) {
        let obj = match change {
            // As upstream, a deleted parent is synced once more: the sync finds it gone and
            // drops what was cached for it (related objects, their informer leases).
            Change::Deleted(obj) => obj,
            Change::Added(new) => new,
            Change::Updated { old, new } => {
                if self.ignore_status_changes
                    && origin == Origin::Watch
                    && old.metadata.generation == new.metadata.generation
                    && old.metadata.labels == new.metadata.labels
                    && old.metadata.annotations == new.metadata.annotations
                    && new.metadata.deletion_timestamp.is_none()
                {
                    return;
                }
                new
            }
        };
        if !self.interested(obj) {
            return;
        }
        if let Some(key) = NamespacedName::of(obj.as_ref()) {
            self.queue.add(key, priority(origin));
        }
    }

    fn on_child(&self, change: &Change<DynamicObject>, origin: Origin) {
        if let Change::Updated { old, new } = change {
            // A relist replays unchanged objects: parents have their own resync.
            if old.metadata.resource_version == new.metadata.resource_version {
                return;
            }
        }
        let obj = change.object();
        let child_deleting =
            matches!(change, Change::Deleted(_)) || obj.metadata.deletion_timestamp.is_some();
        let owner = obj
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true));
        let namespace = obj.metadata.namespace.clone().unwrap_or_default();
        if let Some(owner) = owner {
            let group = owner.api_version.rsplit_once('/').map_or("", |(g, _)| g);
            if owner.kind != self.parent_resource.kind || group != self.parent_resource.group {
                return;
            }
            let parent_ns = if self.parent_resource.namespaced {
                namespace
            } else {
                String::new()
            };
            let key = NamespacedName::new(parent_ns, owner.name.clone());
            let Some(parent) = self.parents.get(&key) else {
                return;
            };
            if parent.metadata.uid.as_deref() != Some(owner.uid.as_str())
                || !self.interested(&parent)
            {
                return;
            }
            self.queue.add(key, priority(origin));
            return;
        }
        // An orphan: we never adopt orphans that are being deleted. A relist needs no mapping:
        // it also replays every parent, whose sync claims matching orphans.
        if child_deleting || origin == Origin::Relist {
            return;
        }
        let candidates = if self.parent_resource.namespaced {
            self.parents.list_namespace(&namespace)
        } else {
            self.parents.list()
        };
        let empty = Default::default();
        let labels = obj.metadata.labels.as_ref().unwrap_or(&empty);
        for parent in candidates {
            if !self.interested(&parent) {
                continue;
            }
            // Only the fields the selector needs, not the whole parent.
            let value = json!({
                "metadata": {"uid": parent.metadata.uid},
                "spec": {"selector": parent.data.pointer("/spec/selector")},
            });
            let Ok(selector) = parent_child_selector(&value, self.generate_selector) else {
                continue;
            };
            if selector.matches(labels) {
                if let Some(key) = NamespacedName::of(parent.as_ref()) {
                    self.queue.add(key, priority(origin));
                }
            }
        }
    }
}

struct Inner {
    controller: CompositeController,
    writer: Arc<Writer>,
    hooks: HookClient,
    parent_resource: Arc<ApiResource>,
    parent: Lease<ResourceId, Informer>,
    parent_handler: HandlerId,
    children: Vec<Child>,
    /// ControllerRevisions, when a child type uses a rolling update method.
    revisions: Option<Revisions>,
    /// `apiVersion/plural` → index in `children`.
    child_index: HashMap<String, usize>,
    mapper: Arc<Mapper>,
    queue: WorkQueue<NamespacedName>,
    related: RelatedManager,
    events: EventRecorder,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.parent.remove_handler(self.parent_handler);
        for c in &self.children {
            c.informer.remove_handler(c.handler);
        }
        if let Some(r) = &self.revisions {
            r.informer.remove_handler(r.handler);
        }
    }
}

struct Revisions {
    resource: Arc<ApiResource>,
    informer: Lease<ResourceId, Informer>,
    handler: HandlerId,
}

/// The outcome of the hook call(s) of one sync.
struct HookOutcome {
    status: Option<serde_json::Map<String, Value>>,
    desired: Desired,
    resync_after_seconds: f64,
    finalized: bool,
    /// Children refused by validation (skipped).
    refused: Vec<children::ChildError>,
}

/// A running CompositeController. Dropping it (or `stop`) stops it.
pub type CompositeHandle = crate::handle::ControllerHandle<NamespacedName>;

/// Starts the reconciler of `controller`. Must run inside tokio.
pub fn start(
    controller: CompositeController,
    client: kube::Client,
    informers: &Informers,
    resources: &ResourceMap,
    hooks: HookClient,
    options: Options,
) -> Result<CompositeHandle, StartError> {
    controller
        .validate()
        .map_err(|e| StartError::Invalid(e.to_string()))?;
    let workers = options.workers.max(1);
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
    if !parent_resource.has_subresource("status") {
        return Err(StartError::NoStatusSubresource {
            controller: name,
            gvk: format!(
                "{}, Kind={}",
                parent_resource.api_version, parent_resource.kind
            ),
        });
    }
    let parent_selector =
        Selector::from_label_selector_or_everything(spec.parent_resource.label_selector.as_ref())
            .map_err(|e| StartError::Invalid(format!("spec.parentResource.labelSelector: {e}")))?;
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
            rule.update_strategy
                .as_ref()
                .and_then(|s| s.status_checks.clone()),
            resource,
        ));
    }
    let any_rolling = child_resources
        .iter()
        .any(|(t, _, _)| t.method.is_rolling());
    let revision_resource = if any_rolling {
        Some(lookup(
            metacontroller_api::API_VERSION,
            ControllerRevision::PLURAL,
        )?)
    } else {
        None
    };
    let writer = Arc::new(
        Writer::new(client, options.apply_strategy)
            .with_metrics(options.metrics.child_writes(COMPOSITE, &name)),
    );
    let queue = options.metrics.queue(COMPOSITE, &name);
    let related = RelatedManager::new(RelatedConfig {
        controller: CustomizableController::Composite(Box::new(controller.clone())),
        name: name.clone(),
        hook: spec.customize_hook().cloned(),
        endpoint_configs: spec.all_endpoint_configs().cloned().collect(),
        hooks: hooks.clone(),
        informers: informers.clone(),
        resources: resources.clone(),
        enqueue: {
            let queue = queue.clone();
            Arc::new(move |parent: &ParentId, origin| {
                queue.add(parent.key.clone(), priority(origin))
            })
        },
    });

    let parent = informers.lease(&parent_resource);
    let mapper = Arc::new(Mapper {
        parents: parent.value().clone(),
        parent_resource: parent_resource.clone(),
        parent_selector,
        finalizer: controller.finalizer_name(),
        generate_selector: spec.generate_selector == Some(true),
        ignore_status_changes: spec.parent_resource.ignore_status_changes == Some(true),
        queue: queue.clone(),
    });
    let parent_handler = {
        let writer = writer.clone();
        let mapper = mapper.clone();
        let res = parent_resource.clone();
        parent.add_handler(Arc::new(move |change, origin| {
            writer.observe(&res, change);
            if let Change::Deleted(obj) = change {
                if let Some(uid) = obj.metadata.uid.as_ref() {
                    writer.expectations().forget(uid);
                }
            }
            mapper.on_parent(change, origin);
        }))
    };
    let mut children = Vec::new();
    let mut child_index = HashMap::new();
    let revisions = revision_resource.map(|resource| {
        let informer = informers.lease(&resource);
        let writer = writer.clone();
        let res = resource.clone();
        let handler = informer.add_handler(Arc::new(move |change, _| writer.observe(&res, change)));
        Revisions {
            resource,
            informer,
            handler,
        }
    });
    for (kind, status_checks, resource) in child_resources {
        let informer = informers.lease(&resource);
        let writer = writer.clone();
        let mapper = mapper.clone();
        let res = resource.clone();
        let handler = informer.add_handler(Arc::new(move |change, origin| {
            writer.observe(&res, change);
            mapper.on_child(change, origin);
        }));
        child_index.insert(
            format!("{}/{}", resource.api_version, resource.name),
            children.len(),
        );
        children.push(Child {
            kind,
            status_checks,
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
        revisions,
        child_index,
        mapper,
        queue: queue.clone(),
        related,
        events: options.events,
    });
    let run_queue = queue.clone();
    let task = tokio::spawn(async move {
        for c in &inner.children {
            c.informer.wait_synced().await;
        }
        if let Some(r) = &inner.revisions {
            r.informer.wait_synced().await;
        }
        inner.parent.wait_synced().await;
        let worker_inner = inner.clone();
        run_queue
            .run(workers, move |key: NamespacedName| {
                let inner = worker_inner.clone();
                async move { inner.sync_and_record(&key).await }
            })
            .await;
    });
    Ok(CompositeHandle::new(queue, task))
}

/// A parent during one sync.
struct ParentState {
    key: NamespacedName,
    object: Value,
    uid: String,
    namespace: Option<String>,
}

impl Inner {
    fn name(&self) -> &str {
        self.controller.metadata.name.as_deref().unwrap_or_default()
    }

    fn finalizer(&self) -> &str {
        &self.mapper.finalizer
    }

    fn child_types(&self) -> Vec<ChildType> {
        self.children.iter().map(|c| c.kind.clone()).collect()
    }

    /// Whether the cache holds the object `key`, not being deleted (for expectations: a
    /// delete is confirmed once accepted, even while finalizers keep the object).
    fn cached(&self, key: &ObjectKey) -> Option<bool> {
        let index = self.child_index.get(&key.resource)?;
        let nn = NamespacedName::new(key.namespace.clone(), key.name.clone());
        Some(
            self.children[*index]
                .informer
                .get(&nn)
                .is_some_and(|o| o.metadata.deletion_timestamp.is_none()),
        )
    }

    /// [`Inner::sync`], recording a `SyncError` Event on the parent when it fails (upstream
    /// `Sync error: <error>`), except for conflicts.
    async fn sync_and_record(&self, key: &NamespacedName) -> Result<(), SyncError> {
        let result = self.sync(key).await;
        if let Err(e) = &result {
            if !e.is_conflict() {
                if let Some(parent) = self.parent.get(key) {
                    if let Ok(parent) = to_value(&parent, &self.parent_resource) {
                        self.events.warning(
                            &parent,
                            events::reason::SYNC_ERROR,
                            format!("Sync error: {e}"),
                        );
                    }
                }
            }
        }
        result
    }

    async fn sync(&self, key: &NamespacedName) -> Result<(), SyncError> {
        let Some(cached) = self.parent.get(key) else {
            // Deleted; children go with the garbage collector.
            self.related.forget(&ParentId {
                api_version: self.parent_resource.api_version.clone(),
                kind: self.parent_resource.kind.clone(),
                key: key.clone(),
            });
            return Ok(());
        };
        let cached = to_value(&cached, &self.parent_resource)?;
        let Some(object) = self.writer.fresh(&self.parent_resource, cached) else {
            return Ok(());
        };
        let labels = value_labels(&object);
        if !value_has_finalizer(&object, self.finalizer())
            && !self.mapper.parent_selector.matches(&labels)
        {
            return Ok(());
        }
        let uid = object.uid().unwrap_or_default().to_string();
        let namespace = object.namespace().map(str::to_owned);
        let mut parent = ParentState {
            key: key.clone(),
            object,
            uid,
            namespace,
        };
        self.sync_finalizer(&mut parent).await?;
        if !value_has_finalizer(&parent.object, self.finalizer())
            && !self.mapper.parent_selector.matches(&labels)
        {
            return Ok(());
        }
        if !self.writer.satisfied(&parent.uid, |k| self.cached(k)) {
            // Our last writes are not in the cache yet; their events requeue the parent.
            tracing::debug!(controller = self.name(), parent = %key, "waiting for the cache to confirm our writes");
            self.queue
                .add_after(key.clone(), Duration::from_secs(1), Priority::Event);
            return Ok(());
        }
        let result = self.sync_parent(&mut parent).await;
        if let Some(delay) = result.as_ref().err().and_then(SyncError::retry_after) {
            tracing::info!(controller = self.name(), parent = %key, ?delay, "hook asked to slow down; resyncing later");
            self.queue.add_after(key.clone(), delay, Priority::Event);
            return Ok(());
        }
        result
    }

    /// Adds our finalizer when a finalize hook exists (unless the parent is already being
    /// deleted), removes it when the hook was removed from the spec.
    async fn sync_finalizer(&self, parent: &mut ParentState) -> Result<(), SyncError> {
        let wanted = self.controller.spec.finalize_hook().is_some();
        let present = value_has_finalizer(&parent.object, self.finalizer());
        if present == wanted || (wanted && is_deleting(&parent.object)) {
            return Ok(());
        }
        let mut updated = parent.object.clone();
        edit_finalizers(&mut updated, self.finalizer(), wanted);
        parent.object = self.writer.replace(&self.parent_resource, updated).await?;
        Ok(())
    }

    /// Whether children are managed while the parent is being deleted (upstream
    /// `ShouldFinalize`): only with our finalizer and a finalize hook, and never while a
    /// garbage-collector finalizer is working on the children.
    fn should_finalize(&self, parent: &Value) -> bool {
        let gc = ["foregroundDeletion", "orphan"]
            .iter()
            .any(|f| value_has_finalizer(parent, f));
        !gc && value_has_finalizer(parent, self.finalizer())
            && self.controller.spec.finalize_hook().is_some()
    }

    async fn sync_parent(&self, parent: &mut ParentState) -> Result<(), SyncError> {
        let generate = self.mapper.generate_selector;
        let selector = parent_child_selector(&parent.object, generate)?;
        let observed = self.claim_children(parent, &selector).await?;

        let types = self.child_types();
        let deleting = is_deleting(&parent.object);
        // As upstream: finalize while being deleted, and also once the parent stops matching
        // `parentResource.labelSelector` (it still carries our finalizer, or we would not be
        // here), so the hook can clean up before the parent is let go.
        let unselected = !self
            .mapper
            .parent_selector
            .matches(&value_labels(&parent.object));
        let (hook, hook_name, finalizing) =
            match (deleting || unselected, self.controller.spec.finalize_hook()) {
                (true, Some(h)) => (h, "finalize", true),
                _ => match self.controller.spec.sync_hook() {
                    Some(h) => (h, "sync", false),
                    // As upstream: a live parent needs a sync hook (SyncError, backoff).
                    None => return Err(SyncError::NoSyncHook),
                },
            };
        let use_revisions =
            self.revisions.is_some() && (!deleting || self.should_finalize(&parent.object));
        let outcome = if use_revisions {
            self.sync_revisions(parent, hook, hook_name, finalizing, &types, &observed)
                .await?
        } else {
            let response = self
                .call_hook(
                    parent,
                    &parent.object,
                    hook,
                    hook_name,
                    finalizing,
                    &types,
                    &observed,
                )
                .await?;
            let (desired, refused) =
                children::validate_desired(&types, parent.namespace.as_deref(), response.children);
            HookOutcome {
                desired,
                status: response.status,
                resync_after_seconds: response.resync_after_seconds,
                finalized: response.finalized,
                refused,
            }
        };

        if outcome.resync_after_seconds > 0.0 {
            let delay = Duration::from_secs_f64(outcome.resync_after_seconds.min(1e9));
            self.queue
                .add_after(parent.key.clone(), delay, Priority::Event);
        }
        if let Some(period) = self.controller.spec.resync_period_seconds {
            // Upstream raises any period below one second (0 and negatives too) to one.
            let delay = Duration::from_secs(period.max(1) as u64);
            self.queue
                .add_after(parent.key.clone(), delay, Priority::Bulk);
        }

        let mut finalized_now = false;
        if finalizing && outcome.finalized && value_has_finalizer(&parent.object, self.finalizer())
        {
            let mut updated = parent.object.clone();
            edit_finalizers(&mut updated, self.finalizer(), false);
            parent.object = self.writer.replace(&self.parent_resource, updated).await?;
            finalized_now = true;
        }

        let mut desired = outcome.desired;
        let refused = outcome.refused;
        for (key, (_, child)) in desired.iter_mut() {
            if generate {
                add_label_if_absent(child, CONTROLLER_UID_LABEL, &parent.uid);
            }
            if !selector.matches(&value_labels(child)) {
                return Err(SyncError::Selector(format!(
                    "labels on desired child {} {}/{} don't match parent selector",
                    key.1, key.2, key.3
                )));
            }
        }

        let mut manage_result = Ok(());
        if !is_deleting(&parent.object) || self.should_finalize(&parent.object) {
            // As upstream, the status is written even when a child write failed (a 409
            // Conflict included); the failure is returned afterwards, for a retry.
            manage_result = self
                .manage_children(parent, &types, &observed, &desired)
                .await;
        }

        let mut status = outcome.status.unwrap_or_default();
        if let Some(generation) = parent.object.pointer("/metadata/generation") {
            status.insert("observedGeneration".into(), generation.clone());
        }
        match self
            .writer
            .write_status(&self.parent_resource, &parent.object, Value::Object(status))
            .await
        {
            Ok(_) => {}
            // The parent is gone (or going, once its last finalizer was removed).
            Err(e) if e.is_not_found() => {}
            Err(e) if finalized_now && e.is_conflict() => {}
            Err(e) => return Err(e.into()),
        }
        manage_result?;
        if refused.is_empty() {
            Ok(())
        } else {
            Err(SyncError::Refused(refused))
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn call_hook(
        &self,
        parent: &ParentState,
        parent_object: &Value,
        hook: &Hook,
        hook_name: &'static str,
        finalizing: bool,
        types: &[ChildType],
        observed: &[Value],
    ) -> Result<CompositeHookResponse, SyncError> {
        let related = self
            .related
            .related(&parent.object, hook.effective_version())
            .await?;
        let request = CompositeHookRequest {
            controller: self.controller.clone(),
            parent: parent_object.clone(),
            children: children::observed_map(
                hook.effective_version(),
                parent.namespace.as_deref(),
                types,
                observed.iter().cloned(),
            ),
            related,
            finalizing,
        };
        let key_text = parent.key.to_string();
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
        self.hooks
            .call(&ctx, hook, &endpoints, &request)
            .await
            .map_err(|source| SyncError::Hook {
                hook: hook_name,
                parent: format!(
                    "{} {}/{}",
                    self.parent_resource.kind,
                    parent.namespace.as_deref().unwrap_or_default(),
                    parent.key.name
                ),
                source,
            })
    }

    /// Rolling updates: one hook call per parent revision, one child moved to the latest
    /// revision per sync, ControllerRevisions written before children (upstream
    /// `syncRevisions`).
    #[allow(clippy::too_many_arguments)]
    async fn sync_revisions(
        &self,
        parent: &ParentState,
        hook: &Hook,
        hook_name: &'static str,
        finalizing: bool,
        types: &[ChildType],
        observed: &[Value],
    ) -> Result<HookOutcome, SyncError> {
        let Some(revs) = &self.revisions else {
            return Err(SyncError::Selector("no ControllerRevision informer".into()));
        };
        let generate = self.mapper.generate_selector;
        // Revisions are found by controller ownership plus the parent-type labels; upstream
        // also requires the parent's selector to match labels copied from
        // `spec.template.metadata.labels`, which parents without a template never satisfy.
        let selector = Selector::from_requirements(vec![
            metacontroller_dynamic::Requirement::new(
                "revision",
                LABEL_API_GROUP,
                metacontroller_dynamic::Operator::Equals,
                [self.parent_resource.group.clone()],
            )
            .map_err(|e| SyncError::Selector(e.to_string()))?,
            metacontroller_dynamic::Requirement::new(
                "revision",
                LABEL_RESOURCE,
                metacontroller_dynamic::Operator::Equals,
                [self.parent_resource.name.clone()],
            )
            .map_err(|e| SyncError::Selector(e.to_string()))?,
        ]);
        let mut observed_revisions = Vec::new();
        for obj in revs.informer.controlled_by(&parent.uid) {
            let value = to_value(&obj, &revs.resource)?;
            let Some(value) = self.writer.fresh(&revs.resource, value) else {
                continue;
            };
            if !selector.matches(&value_labels(&value)) {
                continue;
            }
            observed_revisions.push(serde_json::from_value::<ControllerRevision>(value)?);
        }

        let field_paths = self
            .controller
            .spec
            .parent_resource
            .revision_history
            .as_ref()
            .map(|h| h.effective_field_paths())
            .unwrap_or_else(|| vec!["spec".to_string()]);
        let latest_patch = rolling::make_patch(&parent.object, &field_paths);
        let mut latest_revision = None;
        let mut others = Vec::new();
        for rev in &observed_revisions {
            if crate::writer::json_equal(&rev.parent_patch, &latest_patch) {
                latest_revision = Some(rev.clone());
            } else {
                let mut object = parent.object.clone();
                rolling::apply_patch(&mut object, &rev.parent_patch, &field_paths);
                others.push((object, rev.clone()));
            }
        }
        let rp = RevisionParent {
            plural: &self.parent_resource.name,
            group: &self.parent_resource.group,
            api_version: &self.parent_resource.api_version,
            kind: &self.parent_resource.kind,
            object: &parent.object,
            generate_selector: generate,
        };
        let latest_revision =
            latest_revision.unwrap_or_else(|| rolling::new_revision(&rp, latest_patch));

        let mut revisions = Vec::new();
        let mut statuses = Vec::new();
        let mut resync = 0.0_f64;
        let mut finalized = true;
        let mut refused = Vec::new();
        for (object, revision) in
            std::iter::once((parent.object.clone(), latest_revision)).chain(others)
        {
            let response = self
                .call_hook(
                    parent, &object, hook, hook_name, finalizing, types, observed,
                )
                .await?;
            let order = response
                .children
                .iter()
                .map(|c| {
                    let k = children::child_key(c);
                    (k.0, k.1, k.3)
                })
                .collect();
            let (desired, mut refused_here) =
                children::validate_desired(types, parent.namespace.as_deref(), response.children);
            refused.append(&mut refused_here);
            let r = response.resync_after_seconds;
            if r > 0.0 && (resync == 0.0 || r < resync) {
                resync = r;
            }
            finalized &= response.finalized;
            statuses.push(response.status);
            revisions.push(ParentRevision {
                parent: object,
                revision,
                desired,
                order,
            });
        }

        let server_side = self.writer.strategy().is_server_side();
        let parent_ref = ParentRef {
            api_version: self.parent_resource.api_version.clone(),
            kind: self.parent_resource.kind.clone(),
            name: parent.key.name.clone(),
            uid: parent.uid.clone(),
        };
        let up_to_date = |obs: &Value, want: &Value| -> bool {
            if server_side {
                children::apply_body(want, &parent_ref)
                    .is_ok_and(|body| crate::writer::contains_all(obs, &body))
            } else {
                matches!(
                    metacontroller_apply::plan(obs, want, None),
                    Ok(metacontroller_apply::Plan::Unchanged)
                )
            }
        };
        let rolling_of = |group: &str, kind: &str| {
            self.children
                .iter()
                .find(|c| {
                    c.kind.kind == kind
                        && c.kind.api_version.rsplit_once('/').map_or("", |(g, _)| g) == group
                        && c.kind.method.is_rolling()
                })
                .map(|c| (c.kind.method.clone(), c.status_checks.clone()))
        };
        let condition = rolling::sync_rolling_update(
            &mut revisions,
            &Rollout {
                observed,
                rolling: &rolling_of,
                up_to_date: &up_to_date,
                parent_namespace: parent.namespace.as_deref(),
            },
        );
        let mut status = statuses.into_iter().next().flatten().unwrap_or_default();
        rolling::set_condition(&mut status, "Updated", &condition);
        let revisions = rolling::prune(revisions);
        self.manage_revisions(&revs.resource, parent, &observed_revisions, &revisions)
            .await?;
        Ok(HookOutcome {
            status: Some(status),
            desired: rolling::merged_desired(&revisions, parent.namespace.as_deref()),
            resync_after_seconds: resync,
            finalized,
            refused,
        })
    }

    /// Creates, updates and deletes ControllerRevisions so they match `desired`; all of it
    /// before any child is touched, so the rollout state is persisted first.
    async fn manage_revisions(
        &self,
        res: &ApiResource,
        parent: &ParentState,
        observed: &[ControllerRevision],
        desired: &[ParentRevision],
    ) -> Result<(), SyncError> {
        let name_of = |r: &ControllerRevision| r.metadata.name.clone().unwrap_or_default();
        for old in observed {
            if !desired.iter().any(|d| name_of(&d.revision) == name_of(old)) {
                let value = serde_json::to_value(old)?;
                self.writer.delete(res, &parent.uid, &value).await?;
            }
        }
        for d in desired {
            let value = serde_json::to_value(&d.revision)?;
            match observed.iter().find(|o| name_of(o) == name_of(&d.revision)) {
                Some(old) if old == &d.revision => {}
                Some(_) => match self.writer.replace(res, value).await {
                    Err(e) if e.is_not_found() => {}
                    r => {
                        r?;
                    }
                },
                None => {
                    self.writer.create(res, &parent.uid, value).await?;
                }
            }
        }
        Ok(())
    }

    /// The parent's children after orphaning and adoption: owned children (from the cache,
    /// owned-writes overlay applied) plus matching orphans adopted now.
    async fn claim_children(
        &self,
        parent: &ParentState,
        selector: &Selector,
    ) -> Result<Vec<Value>, SyncError> {
        let claimant = Claimant {
            uid: &parent.uid,
            namespace: parent.namespace.as_deref(),
            deleting: is_deleting(&parent.object),
            selector,
        };
        let mut claimed = Vec::new();
        let mut can_adopt: Option<bool> = None;
        for c in &self.children {
            let orphan_scope = parent
                .namespace
                .as_deref()
                .filter(|_| c.resource.namespaced);
            let orphans = if claimant.deleting {
                Vec::new()
            } else if !c.resource.namespaced && parent.namespace.is_some() {
                // A namespaced parent cannot own cluster-scoped objects.
                Vec::new()
            } else {
                c.informer.orphans(orphan_scope)
            };
            let candidates = c
                .informer
                .controlled_by(&parent.uid)
                .into_iter()
                .chain(orphans);
            let empty = Default::default();
            for obj in candidates {
                // Most orphans (e.g. every namespace's kube-root-ca.crt) do not match: skip
                // them before converting anything.
                if obj.controller_uid().is_none()
                    && !selector.matches(obj.metadata.labels.as_ref().unwrap_or(&empty))
                {
                    continue;
                }
                let value = to_value(&obj, &c.resource)?;
                let Some(value) = self.writer.fresh(&c.resource, value) else {
                    continue;
                };
                match claim::classify(&claimant, &value) {
                    Claim::Owned => claimed.push(value),
                    Claim::Ignore => {}
                    Claim::Release => self.release(&c.resource, &parent.uid, &value).await?,
                    Claim::Adopt => {
                        if can_adopt.is_none() {
                            can_adopt = Some(self.can_adopt(parent).await?);
                        }
                        if can_adopt == Some(true) {
                            if let Some(adopted) =
                                self.adopt(&c.resource, parent, &claimant, &value).await?
                            {
                                claimed.push(adopted);
                            }
                        }
                    }
                }
            }
        }
        Ok(claimed)
    }

    /// Re-reads the parent from the API server: adopt only if it still exists with the same
    /// uid and is not being deleted.
    async fn can_adopt(&self, parent: &ParentState) -> Result<bool, SyncError> {
        let fresh = self
            .writer
            .get(
                &self.parent_resource,
                parent.namespace.as_deref().unwrap_or_default(),
                &parent.key.name,
            )
            .await?;
        Ok(fresh.is_some_and(|p| p.uid() == Some(parent.uid.as_str()) && !is_deleting(&p)))
    }

    /// Adopts an orphan after re-reading it from the API server (the cache may be stale).
    async fn adopt(
        &self,
        res: &ApiResource,
        parent: &ParentState,
        claimant: &Claimant<'_>,
        cached: &Value,
    ) -> Result<Option<Value>, SyncError> {
        let ns = cached.namespace().unwrap_or_default();
        let name = cached.name().unwrap_or_default();
        let Some(fresh) = self.writer.get(res, ns, name).await? else {
            return Ok(None);
        };
        if claim::classify(claimant, &fresh) != Claim::Adopt {
            return Ok(None);
        }
        tracing::info!(controller = self.name(), parent = %parent.key, kind = %res.kind, %ns, %name, "adopting");
        let mut updated = fresh;
        children::set_controller_ref(
            &mut updated,
            &ParentRef {
                api_version: self.parent_resource.api_version.clone(),
                kind: self.parent_resource.kind.clone(),
                name: parent.key.name.clone(),
                uid: parent.uid.clone(),
            },
        );
        match self.writer.replace(res, updated).await {
            Ok(adopted) => Ok(Some(adopted)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes our ownerReference from a child that no longer matches the selector.
    async fn release(&self, res: &ApiResource, uid: &str, cached: &Value) -> Result<(), SyncError> {
        let ns = cached.namespace().unwrap_or_default();
        let name = cached.name().unwrap_or_default();
        tracing::info!(controller = self.name(), kind = %res.kind, %ns, %name, "releasing");
        let Some(mut fresh) = self.writer.get(res, ns, name).await? else {
            return Ok(());
        };
        if !claim::remove_owner(&mut fresh, uid) {
            return Ok(());
        }
        match self.writer.replace(res, fresh).await {
            Err(e) if e.is_not_found() => Ok(()),
            r => r.map(drop).map_err(Into::into),
        }
    }

    /// Creates, updates and deletes children. Keeps going after a failed write (so one bad
    /// child does not block the others), except on a conflict, which aborts.
    async fn manage_children(
        &self,
        parent: &ParentState,
        types: &[ChildType],
        observed: &[Value],
        desired: &std::collections::BTreeMap<children::ChildKey, (usize, Value)>,
    ) -> Result<(), SyncError> {
        let parent_ref = ParentRef {
            api_version: self.parent_resource.api_version.clone(),
            kind: self.parent_resource.kind.clone(),
            name: parent.key.name.clone(),
            uid: parent.uid.clone(),
        };
        let actions = children::plan_children(
            types,
            &parent_ref,
            observed,
            desired,
            self.writer.strategy().is_server_side(),
        )?;
        let errors = self
            .writer
            .execute_all(&parent.uid, actions, |i| self.children[i].resource.as_ref())
            .await;
        if errors.is_empty() {
            Ok(())
        } else {
            Err(SyncError::Writes {
                parent: format!(
                    "{} {}/{}",
                    self.parent_resource.kind,
                    parent.namespace.as_deref().unwrap_or_default(),
                    parent.key.name
                ),
                errors,
            })
        }
    }
}

/// Adds (`add`) or removes `name` in `metadata.finalizers`.
fn edit_finalizers(obj: &mut Value, name: &str, add: bool) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let list = meta
        .entry("finalizers")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    if let Some(items) = list.as_array_mut() {
        items.retain(|f| f.as_str() != Some(name));
        if add {
            items.push(Value::String(name.to_string()));
        }
        if items.is_empty() {
            meta.remove("finalizers");
        }
    }
}

/// Sets `metadata.labels[key] = value` unless the label is already set (upstream keeps a
/// hook-provided `controller-uid`).
fn add_label_if_absent(obj: &mut Value, key: &str, value: &str) {
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let meta = root.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    if let Some(labels) = labels.as_object_mut() {
        labels
            .entry(key)
            .or_insert_with(|| Value::String(value.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizers_added_once_and_removed() {
        let mut obj = json!({"metadata": {"name": "p", "finalizers": ["other"]}});
        edit_finalizers(&mut obj, "mine", true);
        edit_finalizers(&mut obj, "mine", true);
        assert_eq!(obj["metadata"]["finalizers"], json!(["other", "mine"]));
        edit_finalizers(&mut obj, "mine", false);
        assert_eq!(obj["metadata"]["finalizers"], json!(["other"]));
        edit_finalizers(&mut obj, "other", false);
        assert!(obj["metadata"].get("finalizers").is_none());
    }

    #[test]
    fn generated_selector_label_kept_when_set() {
        let mut child = json!({"metadata": {"name": "c"}});
        add_label_if_absent(&mut child, CONTROLLER_UID_LABEL, "u1");
        assert_eq!(child["metadata"]["labels"]["controller-uid"], "u1");
        add_label_if_absent(&mut child, CONTROLLER_UID_LABEL, "u2");
        assert_eq!(child["metadata"]["labels"]["controller-uid"], "u1");
    }
}
