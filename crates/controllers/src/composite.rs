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
    ApiResource, Change, HandlerId, Informer, Informers, Keep, Lease, NamespacedName, ObjectKey,
    ObjectMetaAccess, Origin, ResourceId, ResourceMap, Selector, WorkQueue, CONTROLLER_UID_LABEL,
};
use metacontroller_hooks::{HookClient, HookError};
use serde_json::{json, Value};

use crate::children::{self, ChildType, ParentRef};
use crate::claim::{self, Claim, Claimant};
use crate::events::EventRecorder;
use crate::finalizer::{self, HookChoice};
use crate::meta::{api_group, is_deleting};
use crate::reconcile::{self, priority, Reconciler, SyncFailure};
use crate::related::{ParentId, RelatedError};
use crate::rolling::{self, Desired, ParentRevision, RevisionParent, Rollout};
use crate::writer::{to_value, ApplyStrategy, WriteError};
use metacontroller_dynamic::Versioned;

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
    /// The parent or a child type is cluster-scoped and the process is limited to
    /// namespaces (`--watch-namespaces`).
    #[error(transparent)]
    OutOfScope(#[from] crate::scope::OutOfScope),
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

    /// True when the API server could not be reached (see [`WriteError::is_unreachable`]).
    pub fn is_unreachable(&self) -> bool {
        match self {
            SyncError::Write(e) => e.is_unreachable(),
            SyncError::Writes { errors, .. } => errors.iter().any(WriteError::is_unreachable),
            _ => false,
        }
    }
}

impl SyncFailure for SyncError {
    fn retry_after(&self) -> Option<Duration> {
        SyncError::retry_after(self)
    }

    fn is_conflict(&self) -> bool {
        SyncError::is_conflict(self)
    }

    fn is_unreachable(&self) -> bool {
        SyncError::is_unreachable(self)
    }
}

/// Default of [`Options::parents_in_flight`] (`--parents-in-flight`).
pub const DEFAULT_PARENTS_IN_FLIGHT: usize = 64;

/// How a controller runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Syncs of this controller that call hooks at once (`--workers`); at least one.
    pub workers: usize,
    /// Syncs of this controller in progress at once, including those past their hook
    /// calls that only wait on API writes (`--parents-in-flight`); never fewer than
    /// `workers`.
    pub parents_in_flight: usize,
    /// How children are written (`--apply-strategy`).
    pub apply_strategy: ApplyStrategy,
    /// Where Events about parents go (default: dropped).
    pub events: EventRecorder,
    /// Schemas to merge children with (`--apply-schema=auto`); `None`: conventions only.
    pub schemas: Option<metacontroller_dynamic::Schemas>,
    /// Passed by every sync (leader election, shutdown); default: always open.
    pub gate: metacontroller_dynamic::SyncGate,
    /// Where queue, reconcile and child write metrics go (default: not exported).
    pub metrics: crate::metrics::ControllerMetrics,
    /// Child writes of one sync in flight at once (`--max-concurrent-child-writes`; 1: one
    /// after another, as upstream).
    pub child_write_concurrency: usize,
}

impl Options {
    /// The work queue's limits: `workers` syncs calling hooks, `parents_in_flight` in all.
    pub fn concurrency(&self) -> metacontroller_dynamic::Concurrency {
        metacontroller_dynamic::Concurrency::new(self.workers, self.parents_in_flight)
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            workers: 5,
            parents_in_flight: DEFAULT_PARENTS_IN_FLIGHT,
            apply_strategy: ApplyStrategy::DynamicApply,
            events: EventRecorder::disabled(),
            schemas: None,
            gate: Default::default(),
            metrics: Default::default(),
            child_write_concurrency: crate::writer::DEFAULT_CHILD_WRITE_CONCURRENCY,
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
    /// The parent resourceVersion each parent's latest sync read (cache or own writes).
    read: std::sync::Mutex<std::collections::HashMap<NamespacedName, String>>,
}

fn has_finalizer(obj: &DynamicObject, name: &str) -> bool {
    obj.metadata.finalizers.iter().flatten().any(|f| f == name)
}

fn value_labels(obj: &Value) -> serde_json::Map<String, Value> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// The selector of a parent's children (upstream `makeSelector`).
pub fn parent_child_selector(parent: &Value, generate: bool) -> Result<Selector, SyncError> {
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

    fn read_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<NamespacedName, String>> {
        self.read.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A sync of `key` read the parent at `version`.
    fn record_read(&self, key: &NamespacedName, version: Option<&str>) {
        if let Some(version) = version {
            self.read_lock().insert(key.clone(), version.to_string());
        }
    }

    /// Whether a sync already read this version of the parent: the watch event of our own
    /// write (finalizer, status) that the next sync read from the own-writes overlay before
    /// the event came. Such an event brings the hook nothing it has not seen, and queueing
    /// it would cost one more sync. The event of a status write that no sync has read yet
    /// still queues the parent (as upstream, hooks see their status committed).
    fn already_read(&self, key: &NamespacedName, version: Option<&str>) -> bool {
        version.is_some_and(|v| self.read_lock().get(key).is_some_and(|r| r == v))
    }

    fn on_parent(&self, change: &Change<DynamicObject>, origin: Origin) {
        let obj = match change {
            // As upstream, a deleted parent is synced once more: the sync finds it gone and
            // drops what was cached for it (related objects, their informer leases, hook
            // responses) — also when it had stopped matching, as it may have matched before.
            Change::Deleted(obj) => {
                if let Some(key) = NamespacedName::of(obj.as_ref()) {
                    self.read_lock().remove(&key);
                    self.queue.add(key, priority(origin));
                }
                return;
            }
            Change::Added(new) => new,
            Change::Updated { old, new } => {
                if origin == Origin::Watch {
                    let key = NamespacedName::of(new.as_ref());
                    let version = new.metadata.resource_version.as_deref();
                    if key.is_some_and(|k| self.already_read(&k, version)) {
                        return;
                    }
                }
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
        if reconcile::is_unchanged_replay(change) {
            return;
        }
        let obj = change.object();
        let child_deleting =
            matches!(change, Change::Deleted(_)) || obj.metadata.deletion_timestamp.is_some();
        if reconcile::controller_ref(obj).is_some() {
            let resolved =
                reconcile::resolve_controller_ref(obj, &self.parent_resource, &self.parents);
            if let Some((key, parent)) = resolved {
                if self.interested(&parent) {
                    self.queue.add(key, priority(origin));
                }
            }
            return;
        }
        let namespace = obj.metadata.namespace.clone().unwrap_or_default();
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
    common: reconcile::Common<NamespacedName>,
    controller: CompositeController,
    parent_resource: Arc<ApiResource>,
    parent: Lease<ResourceId, Informer>,
    parent_handler: HandlerId,
    children: Vec<Child>,
    /// ControllerRevisions, when a child type uses a rolling update method.
    revisions: Option<Revisions>,
    mapper: Arc<Mapper>,
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
        self.common.hooks.forget_controller(&self.common.name);
    }
}

struct Revisions {
    resource: Arc<ApiResource>,
    informer: Lease<ResourceId, Informer>,
    handler: HandlerId,
}

/// Which hook one sync calls, and what it shows the hook besides the parent.
struct HookCall<'a> {
    hook: &'a Hook,
    /// `sync` or `finalize`.
    name: &'static str,
    finalizing: bool,
    types: &'a [ChildType],
    /// The claimed children.
    observed: &'a [Value],
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
    let resolved = Resolved::new(&controller, resources)?;
    resolved.check_scope(informers.scope())?;
    let spec = reconcile::ControllerSpec::from(CustomizableController::Composite(Box::new(
        controller.clone(),
    )));
    let queue = options.metrics.queue(spec.controller_type(), &spec.name);
    queue.set_gate(options.gate.clone());
    let enqueue = {
        let queue = queue.clone();
        Arc::new(move |parent: &ParentId, origin| queue.add(parent.key.clone(), priority(origin)))
    };
    let concurrency = options.concurrency();
    let ctx = reconcile::StartContext {
        client,
        informers,
        resources,
        hooks,
        options,
    };
    let common = reconcile::Common::new(spec, queue.clone(), &ctx, enqueue);
    let writer = &common.writer;
    let parent = informers.lease_keeping(&resolved.parent, Keep::Parents);
    let spec = &controller.spec;
    let mapper = Arc::new(Mapper {
        parents: parent.value().clone(),
        parent_resource: resolved.parent.clone(),
        parent_selector: resolved.parent_selector,
        finalizer: controller.finalizer_name(),
        generate_selector: spec.generate_selector == Some(true),
        ignore_status_changes: spec.parent_resource.ignore_status_changes == Some(true),
        queue: queue.clone(),
        read: Default::default(),
    });
    let parent_handler = {
        let mapper = mapper.clone();
        reconcile::watch_owners(
            &parent,
            writer.clone(),
            resolved.parent.clone(),
            move |change, origin| mapper.on_parent(change, origin),
        )
    };
    let revisions = resolved.revisions.map(|resource| {
        let informer = informers.lease_keeping(&resource, Keep::Children);
        let handler =
            reconcile::watch_owned(&informer, writer.clone(), resource.clone(), |_, _| {});
        Revisions {
            resource,
            informer,
            handler,
        }
    });
    let children = resolved
        .children
        .into_iter()
        .map(|(kind, status_checks, resource)| {
            let informer = informers.lease_keeping(&resource, Keep::Children);
            let mapper = mapper.clone();
            let handler = reconcile::watch_owned(
                &informer,
                writer.clone(),
                resource.clone(),
                move |change, origin| mapper.on_child(change, origin),
            );
            Child {
                kind,
                status_checks,
                resource,
                informer,
                handler,
            }
        })
        .collect();
    let inner = Arc::new(Inner {
        common,
        controller,
        parent_resource: resolved.parent,
        parent,
        parent_handler,
        children,
        revisions,
        mapper,
    });
    Ok(reconcile::run(inner, concurrency))
}

/// The resources a CompositeController's spec names, resolved through discovery (what
/// [`start`] checks before it starts anything; `metacontroller render` uses the same).
pub struct Resolved {
    /// The parent resource.
    pub parent: Arc<ApiResource>,
    /// `spec.parentResource.labelSelector` (everything when absent).
    pub parent_selector: Selector,
    /// Each declared child type, its status checks and its resource.
    pub children: Vec<(ChildType, Option<ChildUpdateStatusChecks>, Arc<ApiResource>)>,
    /// ControllerRevisions, when a child type uses a rolling update method.
    pub revisions: Option<Arc<ApiResource>>,
}

impl Resolved {
    /// Refuses cluster-scoped parent and child types when `scope` limits the process to
    /// namespaces (see [`crate::scope`]).
    pub fn check_scope(
        &self,
        scope: Option<&metacontroller_dynamic::WatchScope>,
    ) -> Result<(), crate::scope::OutOfScope> {
        crate::scope::check(scope, "parent", &self.parent)?;
        for (_, _, child) in &self.children {
            crate::scope::check(scope, "child", child)?;
        }
        Ok(())
    }

    /// Resolves `controller`'s resources in `resources`; fails as [`start`] does.
    pub fn new(
        controller: &CompositeController,
        resources: &ResourceMap,
    ) -> Result<Self, StartError> {
        let spec = &controller.spec;
        let lookup = |api_version: &str, resource: &str| {
            reconcile::resolve(resources, api_version, resource)
                .map_err(StartError::UnknownResource)
        };
        let parent = lookup(
            &spec.parent_resource.api_version,
            &spec.parent_resource.resource,
        )?;
        if !parent.has_subresource("status") {
            return Err(StartError::NoStatusSubresource {
                controller: controller.metadata.name.clone().unwrap_or_default(),
                gvk: format!("{}, Kind={}", parent.api_version, parent.kind),
            });
        }
        let parent_selector = Selector::from_label_selector_or_everything(
            spec.parent_resource.label_selector.as_ref(),
        )
        .map_err(|e| StartError::Invalid(format!("spec.parentResource.labelSelector: {e}")))?;
        let mut children = Vec::new();
        for rule in &spec.child_resources {
            let resource = lookup(&rule.api_version, &rule.resource)?;
            children.push((
                reconcile::child_type(&resource, rule.update_method()),
                rule.update_strategy
                    .as_ref()
                    .and_then(|s| s.status_checks.clone()),
                resource,
            ));
        }
        let revisions = if children.iter().any(|(t, _, _)| t.method.is_rolling()) {
            Some(lookup(
                metacontroller_api::API_VERSION,
                ControllerRevision::PLURAL,
            )?)
        } else {
            None
        };
        Ok(Resolved {
            parent,
            parent_selector,
            children,
            revisions,
        })
    }
}

impl Reconciler for Inner {
    type Key = NamespacedName;
    type Error = SyncError;

    fn common(&self) -> &reconcile::Common<NamespacedName> {
        &self.common
    }

    fn informers(&self) -> Vec<&Informer> {
        let children = self.children.iter().map(|c| &*c.informer);
        let revisions = self.revisions.iter().map(|r| &*r.informer);
        children
            .chain(revisions)
            .chain(std::iter::once(&*self.parent))
            .collect()
    }

    fn object(&self, key: &NamespacedName) -> Option<Value> {
        let cached = to_value(&*self.parent.get(key)?, &self.parent_resource).ok()?;
        self.common.writer.fresh(&self.parent_resource, cached)
    }

    /// Parents that neither match `parentResource.labelSelector` nor carry our finalizer
    /// are not ours.
    fn cares(&self, parent: &Value) -> bool {
        let matches = self.mapper.parent_selector.matches(&value_labels(parent));
        !finalizer::is_ignored(matches, parent, self.finalizer())
    }

    async fn sync(&self, key: &NamespacedName) -> Result<(), SyncError> {
        self.sync_key(key).await
    }

    fn forget_departed(&self) {
        let parent = &*self.parent;
        self.mapper
            .read_lock()
            .retain(|key, _| parent.contains(key));
        self.common.queue.retain(|key| parent.contains(key));
        let held = crate::departed::Held::new(vec![(&*self.parent_resource, parent)]);
        crate::departed::forget_departed(&self.common, &held, &|key| self.written(key));
    }

    fn state_entries(&self) -> Vec<(&'static str, usize)> {
        let mut entries = vec![("last_read", self.mapper.read_lock().len())];
        entries.extend(self.common.state_entries());
        entries
    }
}

/// A parent during one sync.
struct ParentState {
    key: NamespacedName,
    object: Value,
    uid: String,
    namespace: Option<String>,
}

impl Inner {
    fn finalizer(&self) -> &str {
        &self.mapper.finalizer
    }

    fn child_types(&self) -> Vec<ChildType> {
        self.children.iter().map(|c| c.kind.clone()).collect()
    }

    /// Whether the caches hold the written object `key` (parent, child or revision), for
    /// [`crate::departed`].
    fn written(&self, key: &ObjectKey) -> Option<bool> {
        let children = self.children.iter().map(|c| (&*c.resource, &*c.informer));
        let revisions = self.revisions.iter().map(|r| (&*r.resource, &*r.informer));
        let parent = std::iter::once((&*self.parent_resource, &*self.parent));
        crate::departed::cached(children.chain(revisions).chain(parent), key)
    }

    /// For expectations: whether the cache holds the child `key` (see
    /// [`reconcile::presence`]).
    fn cached(&self, key: &ObjectKey) -> Option<bool> {
        let watched = self.children.iter().map(|c| (&*c.resource, &*c.informer));
        reconcile::presence(watched, key)
    }

    /// Drops the hook responses and customize rules cached for the parent `key`.
    fn forget_parent(&self, key: &NamespacedName) {
        self.common
            .hooks
            .forget_parent(&self.common.name, &key.to_string());
        self.common.related.forget(&ParentId {
            api_version: self.parent_resource.api_version.clone(),
            kind: self.parent_resource.kind.clone(),
            key: key.clone(),
        });
    }

    /// One sync: the parent from the cache (own writes applied), its finalizer, then — once
    /// the cache has caught up with our last writes — hook and writes ([`Inner::sync_parent`]).
    async fn sync_key(&self, key: &NamespacedName) -> Result<(), SyncError> {
        let Some(cached) = self.parent.get(key) else {
            // Deleted; children go with the garbage collector. A sync that ran when the
            // deletion came may have recorded state since: this one runs after it.
            self.forget_parent(key);
            self.mapper.read_lock().remove(key);
            let held = crate::departed::Held::new(vec![(&*self.parent_resource, &*self.parent)]);
            crate::departed::forget_deleted_owners(&self.common, &held);
            return Ok(());
        };
        let cached = to_value(&cached, &self.parent_resource)?;
        let Some(object) = self.common.writer.fresh(&self.parent_resource, cached) else {
            return Ok(());
        };
        self.mapper.record_read(key, object.resource_version());
        if !self.cares(&object) {
            // Not ours (any more): nothing to keep for it.
            self.forget_parent(key);
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
        let finalize_hook = self.controller.spec.finalize_hook().is_some();
        let written = reconcile::sync_finalizer(
            &self.common.writer,
            &self.parent_resource,
            parent.object,
            self.finalizer(),
            finalize_hook,
        )
        .await?;
        let Some(written) = written else {
            return Ok(()); // the parent is gone
        };
        parent.object = written;
        self.mapper
            .record_read(key, parent.object.resource_version());
        // Check again: we may just have removed our finalizer.
        if !self.cares(&parent.object) {
            return Ok(());
        }
        if !self
            .common
            .own_writes_confirmed(key, &parent.uid, |k| self.cached(k))
        {
            return Ok(());
        }
        self.sync_parent(&mut parent).await
    }

    /// Claims children, calls the hook (once per revision with rolling updates), then
    /// writes: the finalizer removal after `finalized`, the children, the status.
    async fn sync_parent(&self, parent: &mut ParentState) -> Result<(), SyncError> {
        let selector = parent_child_selector(&parent.object, self.mapper.generate_selector)?;
        let observed = self.claim_children(parent, &selector).await?;
        let types = self.child_types();
        let (hook, name, finalizing) = self.choose_hook(&parent.object)?;
        let call = HookCall {
            hook,
            name,
            finalizing,
            types: &types,
            observed: &observed,
        };
        let use_revisions = self.revisions.is_some() && self.manages_children(&parent.object);
        let outcome = if use_revisions {
            self.sync_revisions(parent, &call).await?
        } else {
            self.sync_once(parent, &call).await?
        };
        reconcile::resync_after(
            &self.common.queue,
            &parent.key,
            outcome.resync_after_seconds,
        );
        // Only API writes remain: they need no worker (see `Concurrency`).
        metacontroller_dynamic::release_worker();

        let finalized_now = if finalizing && outcome.finalized {
            self.remove_finalizer(parent).await?
        } else {
            false
        };
        let mut desired = outcome.desired;
        self.label_desired(parent, &selector, &mut desired)?;
        let mut manage_result = Ok(());
        if self.manages_children(&parent.object) {
            // As upstream, the status is written even when a child write failed (a 409
            // Conflict included); the failure is returned afterwards, for a retry.
            manage_result = self
                .manage_children(parent, &types, &observed, &desired)
                .await;
        }
        self.write_status(parent, outcome.status, finalized_now)
            .await?;
        manage_result?;
        if outcome.refused.is_empty() {
            Ok(())
        } else {
            Err(SyncError::Refused(outcome.refused))
        }
    }

    /// The hook this sync calls (see [`finalizer::choose_hook`]): the finalize hook also
    /// once the parent stops matching `parentResource.labelSelector` (it still carries our
    /// finalizer, or we would not be here), so the hook can clean up before the parent is
    /// let go. A live parent needs a sync hook (SyncError, backoff), as upstream.
    fn choose_hook(&self, parent: &Value) -> Result<(&Hook, &'static str, bool), SyncError> {
        choose_hook(&self.controller, &self.mapper.parent_selector, parent)
    }

    /// Whether children are managed in this sync (see [`finalizer::manages_children`]).
    fn manages_children(&self, parent: &Value) -> bool {
        let finalize_hook = self.controller.spec.finalize_hook().is_some();
        finalizer::manages_children(parent, self.finalizer(), finalize_hook)
    }

    /// Without rolling updates: one hook call for the parent as it is.
    async fn sync_once(
        &self,
        parent: &ParentState,
        call: &HookCall<'_>,
    ) -> Result<HookOutcome, SyncError> {
        let response = self.call_hook(parent, &parent.object, call).await?;
        let (desired, refused) =
            children::validate_desired(call.types, parent.namespace.as_deref(), response.children);
        Ok(HookOutcome {
            desired,
            status: response.status,
            resync_after_seconds: response.resync_after_seconds,
            finalized: response.finalized,
            refused,
        })
    }

    /// Removes our finalizer after the finalize hook said `finalized`. True when it was
    /// removed now.
    async fn remove_finalizer(&self, parent: &mut ParentState) -> Result<bool, SyncError> {
        let Some(updated) = finalizer::with_finalizer(&parent.object, self.finalizer(), false)
        else {
            return Ok(false);
        };
        parent.object = self
            .common
            .writer
            .replace(&self.parent_resource, updated)
            .await?;
        Ok(true)
    }

    /// With `generateSelector`, labels each desired child `controller-uid: <parent uid>`;
    /// then every desired child must match the parent's selector (upstream refuses the
    /// sync otherwise).
    fn label_desired(
        &self,
        parent: &ParentState,
        selector: &Selector,
        desired: &mut Desired,
    ) -> Result<(), SyncError> {
        label_desired(
            self.mapper.generate_selector,
            &parent.uid,
            selector,
            desired,
        )
    }

    /// Writes the hook's status with `observedGeneration` through `/status` (only when it
    /// changed). A parent that is gone — or going, once we removed its last finalizer — is
    /// not an error.
    async fn write_status(
        &self,
        parent: &ParentState,
        status: Option<serde_json::Map<String, Value>>,
        finalized_now: bool,
    ) -> Result<(), SyncError> {
        let status = desired_status(&parent.object, status);
        match self
            .common
            .writer
            .write_status(&self.parent_resource, &parent.object, status)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) if finalized_now && e.is_conflict() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Calls `call.hook` with `parent_object` as the parent (the parent itself, or as one
    /// of its revisions sees it).
    async fn call_hook(
        &self,
        parent: &ParentState,
        parent_object: &Value,
        call: &HookCall<'_>,
    ) -> Result<CompositeHookResponse, SyncError> {
        let version = call.hook.effective_version();
        let related = self.common.related.related(&parent.object, version).await?;
        let request = hook_request(
            &self.controller,
            parent_object,
            version,
            call.types,
            call.observed,
            related,
            call.finalizing,
        );
        self.common
            .call_hook(call.name, &parent.key.to_string(), call.hook, &request)
            .await
            .map_err(|source| SyncError::Hook {
                hook: call.name,
                parent: self.describe(parent),
                source,
            })
    }

    /// `<Kind> <namespace>/<name>` of a parent (upstream's wording in errors).
    fn describe(&self, parent: &ParentState) -> String {
        describe_parent(
            &self.parent_resource.kind,
            parent.namespace.as_deref(),
            &parent.key.name,
        )
    }

    /// The controller ownerReference our children carry.
    fn parent_ref(&self, parent: &ParentState) -> ParentRef {
        ParentRef {
            api_version: self.parent_resource.api_version.clone(),
            kind: self.parent_resource.kind.clone(),
            name: parent.key.name.clone(),
            uid: parent.uid.clone(),
        }
    }

    /// Rolling updates: one hook call per parent revision, one child moved to the latest
    /// revision per sync, ControllerRevisions written before children (upstream
    /// `syncRevisions`).
    async fn sync_revisions(
        &self,
        parent: &ParentState,
        call: &HookCall<'_>,
    ) -> Result<HookOutcome, SyncError> {
        let Some(revs) = &self.revisions else {
            return Err(SyncError::Selector("no ControllerRevision informer".into()));
        };
        let observed_revisions = self.observed_revisions(revs, parent)?;
        let parents = self.revision_parents(parent, &observed_revisions);
        let (mut revisions, answers) = self.call_hook_per_revision(parent, call, parents).await?;
        // The same merge schemas as the child writes use, so "up to date" agrees with them.
        let schemas = self.common.writer.schemas_for(call.types).await;
        let condition = self.roll_out(parent, call, &schemas, &mut revisions);
        let mut status = answers.status.unwrap_or_default();
        rolling::set_condition(&mut status, "Updated", &condition);
        let revisions = rolling::prune(revisions);
        self.manage_revisions(&revs.resource, parent, &observed_revisions, &revisions)
            .await?;
        Ok(HookOutcome {
            status: Some(status),
            desired: rolling::merged_desired(&revisions, parent.namespace.as_deref()),
            resync_after_seconds: answers.resync_after_seconds,
            finalized: answers.finalized,
            refused: answers.refused,
        })
    }

    /// The parent's ControllerRevisions (cache + own writes). They are found by controller
    /// ownership plus the parent-type labels; upstream also requires the parent's selector
    /// to match labels copied from `spec.template.metadata.labels`, which parents without a
    /// template never satisfy.
    fn observed_revisions(
        &self,
        revs: &Revisions,
        parent: &ParentState,
    ) -> Result<Vec<ControllerRevision>, SyncError> {
        let label = |key: &str, value: &str| {
            metacontroller_dynamic::Requirement::new(
                "revision",
                key,
                metacontroller_dynamic::Operator::Equals,
                [value.to_string()],
            )
            .map_err(|e| SyncError::Selector(e.to_string()))
        };
        let selector = Selector::from_requirements(vec![
            label(LABEL_API_GROUP, &self.parent_resource.group)?,
            label(LABEL_RESOURCE, &self.parent_resource.name)?,
        ]);
        let mut observed = Vec::new();
        for obj in revs.informer.controlled_by(&parent.uid) {
            let value = to_value(&obj, &revs.resource)?;
            let Some(value) = self.common.writer.fresh(&revs.resource, value) else {
                continue;
            };
            if !selector.matches(&value_labels(&value)) {
                continue;
            }
            observed.push(serde_json::from_value::<ControllerRevision>(value)?);
        }
        Ok(observed)
    }

    /// The parent as each revision sees it, the latest first (a new revision when no
    /// observed one matches the parent's current fields); the others are the parent with
    /// the revision's patch applied.
    fn revision_parents(
        &self,
        parent: &ParentState,
        observed: &[ControllerRevision],
    ) -> Vec<(Value, ControllerRevision)> {
        let field_paths = self
            .controller
            .spec
            .parent_resource
            .revision_history
            .as_ref()
            .map(|h| h.effective_field_paths())
            .unwrap_or_else(|| vec!["spec".to_string()]);
        let latest_patch = rolling::make_patch(&parent.object, &field_paths);
        let mut latest = None;
        let mut others = Vec::new();
        for rev in observed {
            if crate::writer::json_equal(&rev.parent_patch, &latest_patch) {
                latest = Some(rev.clone());
            } else {
                let mut object = parent.object.clone();
                rolling::apply_patch(&mut object, &rev.parent_patch, &field_paths);
                others.push((object, rev.clone()));
            }
        }
        let latest = latest.unwrap_or_else(|| {
            rolling::new_revision(
                &RevisionParent {
                    plural: &self.parent_resource.name,
                    group: &self.parent_resource.group,
                    api_version: &self.parent_resource.api_version,
                    kind: &self.parent_resource.kind,
                    object: &parent.object,
                    generate_selector: self.mapper.generate_selector,
                },
                latest_patch,
            )
        });
        std::iter::once((parent.object.clone(), latest))
            .chain(others)
            .collect()
    }

    /// One hook call per revision. The latest revision's status counts; the earliest
    /// `resyncAfterSeconds` wins; finalized only when every revision says so.
    async fn call_hook_per_revision(
        &self,
        parent: &ParentState,
        call: &HookCall<'_>,
        parents: Vec<(Value, ControllerRevision)>,
    ) -> Result<(Vec<ParentRevision>, HookOutcome), SyncError> {
        let mut revisions = Vec::new();
        let mut answers = HookOutcome {
            status: None,
            desired: Desired::new(),
            resync_after_seconds: 0.0,
            finalized: true,
            refused: Vec::new(),
        };
        for (index, (object, revision)) in parents.into_iter().enumerate() {
            let response = self.call_hook(parent, &object, call).await?;
            let order = response
                .children
                .iter()
                .map(|c| {
                    let k = children::child_key(c);
                    (k.0, k.1, k.3)
                })
                .collect();
            let (mut desired, mut refused) = children::validate_desired(
                call.types,
                parent.namespace.as_deref(),
                response.children,
            );
            // Each revision's children as they are written (with the generated selector's
            // label), so "up to date" compares like with like; without this a child
            // recreated on the latest revision never counts as updated and the rollout
            // stalls after its first child.
            if self.mapper.generate_selector {
                for (_, child) in desired.values_mut() {
                    add_label_if_absent(child, CONTROLLER_UID_LABEL, &parent.uid);
                }
            }
            answers.refused.append(&mut refused);
            let r = response.resync_after_seconds;
            let resync = answers.resync_after_seconds;
            if r > 0.0 && (resync == 0.0 || r < resync) {
                answers.resync_after_seconds = r;
            }
            answers.finalized &= response.finalized;
            if index == 0 {
                answers.status = response.status;
            }
            revisions.push(ParentRevision {
                parent: object,
                revision,
                desired,
                order,
            });
        }
        Ok((revisions, answers))
    }

    /// Moves children between revisions (one per sync, gated by `statusChecks`) and
    /// returns the `Updated` condition.
    fn roll_out(
        &self,
        parent: &ParentState,
        call: &HookCall<'_>,
        schemas: &[Option<Arc<metacontroller_apply::Schema>>],
        revisions: &mut [ParentRevision],
    ) -> rolling::UpdatedCondition {
        let (observed, types) = (call.observed, call.types);
        let server_side = self.common.writer.strategy().is_server_side();
        let parent_ref = self.parent_ref(parent);
        let up_to_date = |obs: &Value, want: &Value| -> bool {
            if server_side {
                children::apply_body(want, &parent_ref)
                    .is_ok_and(|body| crate::writer::contains_all(obs, &body))
            } else {
                let key = children::child_key(obs);
                let schema = types
                    .iter()
                    .position(|t| t.api_version == key.0 && t.kind == key.1)
                    .and_then(|i| schemas.get(i)?.as_deref());
                matches!(
                    metacontroller_apply::plan(obs, want, schema),
                    Ok(metacontroller_apply::Plan::Unchanged)
                )
            }
        };
        let rolling_of = |group: &str, kind: &str| {
            self.children
                .iter()
                .find(|c| {
                    c.kind.kind == kind
                        && api_group(&c.kind.api_version) == group
                        && c.kind.method.is_rolling()
                })
                .map(|c| (c.kind.method.clone(), c.status_checks.clone()))
        };
        rolling::sync_rolling_update(
            revisions,
            &Rollout {
                observed,
                rolling: &rolling_of,
                up_to_date: &up_to_date,
                parent_namespace: parent.namespace.as_deref(),
            },
        )
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
                self.common.writer.delete(res, &parent.uid, &value).await?;
            }
        }
        for d in desired {
            let value = serde_json::to_value(&d.revision)?;
            match observed.iter().find(|o| name_of(o) == name_of(&d.revision)) {
                Some(old) if old == &d.revision => {}
                Some(_) => match self.common.writer.replace(res, value).await {
                    Err(e) if e.is_not_found() => {}
                    r => {
                        r?;
                    }
                },
                None => {
                    self.common.writer.create(res, &parent.uid, value).await?;
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
                let Some(value) = self.common.writer.fresh(&c.resource, value) else {
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
            .common
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
        let Some(fresh) = self.common.writer.get(res, ns, name).await? else {
            return Ok(None);
        };
        if claim::classify(claimant, &fresh) != Claim::Adopt {
            return Ok(None);
        }
        tracing::info!(controller = self.name(), parent = %parent.key, kind = %res.kind, %ns, %name, "adopting");
        let mut updated = fresh;
        children::set_controller_ref(&mut updated, &self.parent_ref(parent));
        match self.common.writer.replace(res, updated).await {
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
        let Some(mut fresh) = self.common.writer.get(res, ns, name).await? else {
            return Ok(());
        };
        if !claim::remove_owner(&mut fresh, uid) {
            return Ok(());
        }
        match self.common.writer.replace(res, fresh).await {
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
        let errors = self
            .common
            .manage_children(&self.parent_ref(parent), types, observed, desired, |i| {
                self.children[i].resource.as_ref()
            })
            .await?;
        if errors.is_empty() {
            Ok(())
        } else {
            Err(SyncError::Writes {
                parent: self.describe(parent),
                errors,
            })
        }
    }
}

/// `<Kind> <namespace>/<name>` of a parent, as upstream's errors name it (an empty
/// namespace when cluster-scoped).
pub fn describe_parent(kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{kind} {}/{name}", namespace.unwrap_or_default())
}

/// The sync or finalize hook request for `parent` (as it is, or as one of its revisions
/// sees it): the observed children keyed for `version`, related objects already keyed.
pub fn hook_request(
    controller: &CompositeController,
    parent: &Value,
    version: metacontroller_api::hook::HookVersion,
    types: &[ChildType],
    observed: &[Value],
    related: metacontroller_api::wire::ObjectMap,
    finalizing: bool,
) -> CompositeHookRequest {
    let parent_namespace = parent
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty());
    CompositeHookRequest {
        controller: controller.clone(),
        parent: parent.clone(),
        children: children::observed_map(
            version,
            parent_namespace,
            types,
            observed.iter().cloned(),
        ),
        related,
        finalizing,
    }
}

/// The hook a sync of `parent` calls, its name and `finalizing` (see
/// [`finalizer::choose_hook`]): the finalize hook while the parent is being deleted or
/// once it stops matching `parent_selector`; a live parent needs a sync hook.
pub fn choose_hook<'c>(
    controller: &'c CompositeController,
    parent_selector: &Selector,
    parent: &Value,
) -> Result<(&'c Hook, &'static str, bool), SyncError> {
    let spec = &controller.spec;
    let matches = parent_selector.matches(&value_labels(parent));
    match finalizer::choose_hook(parent, matches, spec.finalize_hook().is_some()) {
        HookChoice::Finalize => spec.finalize_hook().map(|h| (h, "finalize", true)),
        HookChoice::Sync => spec.sync_hook().map(|h| (h, "sync", false)),
    }
    .ok_or(SyncError::NoSyncHook)
}

/// With `generate_selector`, labels each desired child `controller-uid: <parent uid>`;
/// then every desired child must match the parent's child `selector` (upstream refuses
/// the sync otherwise).
pub fn label_desired(
    generate_selector: bool,
    parent_uid: &str,
    selector: &Selector,
    desired: &mut Desired,
) -> Result<(), SyncError> {
    for (key, (_, child)) in desired.iter_mut() {
        if generate_selector {
            add_label_if_absent(child, CONTROLLER_UID_LABEL, parent_uid);
        }
        if !selector.matches(&value_labels(child)) {
            return Err(SyncError::Selector(format!(
                "labels on desired child {} {}/{} don't match parent selector",
                key.1, key.2, key.3
            )));
        }
    }
    Ok(())
}

/// The status the controller writes for `parent`: the hook's (empty when it gave none)
/// with `observedGeneration` injected.
pub fn desired_status(parent: &Value, status: Option<serde_json::Map<String, Value>>) -> Value {
    let mut status = status.unwrap_or_default();
    if let Some(generation) = parent.pointer("/metadata/generation") {
        status.insert("observedGeneration".into(), generation.clone());
    }
    Value::Object(status)
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
    fn generated_selector_label_kept_when_set() {
        let mut child = json!({"metadata": {"name": "c"}});
        add_label_if_absent(&mut child, CONTROLLER_UID_LABEL, "u1");
        assert_eq!(child["metadata"]["labels"]["controller-uid"], "u1");
        add_label_if_absent(&mut child, CONTROLLER_UID_LABEL, "u2");
        assert_eq!(child["metadata"]["labels"]["controller-uid"], "u1");
    }
}
