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
use metacontroller_api::wire::{CustomizableController, DecoratorHookResponse};
use metacontroller_dynamic::{
    ApiResource, Change, HandlerId, Informer, Informers, Keep, NamespacedName, ObjectKey, Origin,
    ResourceMap,
};
use metacontroller_hooks::HookClient;
use metacontroller_workqueue::WorkQueue;
use serde_json::Value;

use super::attachments::is_own_attachment;
use super::plan;
use super::select::{api_group, is_status_only_update, TargetSelector};
use crate::children::{self, ChildError, ChildType, ParentRef};
use crate::composite::Options;
use crate::finalizer;
use crate::reconcile::{self, priority, Plan, Reconciler, SyncFailure};
use crate::related::{Enqueue, ParentId, RelatedError};
use crate::writer::{to_value, WriteError};

/// Why a DecoratorController could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The spec is invalid.
    #[error("invalid DecoratorController: {0}")]
    Invalid(String),
    /// A resource named by the spec is not served.
    #[error("{0} is not served by the API server")]
    UnknownResource(String),
    /// A target or attachment type is cluster-scoped and the process is limited to
    /// namespaces (`--watch-namespaces`).
    #[error(transparent)]
    OutOfScope(#[from] crate::scope::OutOfScope),
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
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            SyncError::Hook { source, .. } | SyncError::Related(RelatedError::Hook(source)) => {
                crate::handle::hook_retry_after(source)
            }
            _ => None,
        }
    }

    /// A 409 Conflict: the sync acted on stale data and is retried, without an Event.
    pub(crate) fn is_conflict(&self) -> bool {
        match self {
            SyncError::Write(e) => e.is_conflict(),
            SyncError::Writes(es) => es.iter().any(WriteError::is_conflict),
            _ => false,
        }
    }

    /// The API server could not be reached (see [`WriteError::is_unreachable`]).
    pub(crate) fn is_unreachable(&self) -> bool {
        match self {
            SyncError::Write(e) => e.is_unreachable(),
            SyncError::Writes(es) => es.iter().any(WriteError::is_unreachable),
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
    informer: metacontroller_dynamic::InformerLease,
    handler: HandlerId,
}

/// What the informer handlers need (shared before the reconciler itself exists).
struct Routing {
    selector: TargetSelector,
    finalizer: String,
    /// Per target type: resource and informer (filled before handlers are added).
    targets: Vec<(Arc<ApiResource>, metacontroller_dynamic::InformerLease)>,
    queue: WorkQueue<TargetKey>,
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
        if reconcile::is_unchanged_replay(change) {
            return;
        }
        let obj = change.object();
        let Some(owner) = reconcile::controller_ref(obj) else {
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
        let Some((key, target)) = reconcile::resolve_controller_ref(obj, res, informer) else {
            return;
        };
        if self.cares(index, &target) {
            self.queue.add(
                TargetKey {
                    resource: index,
                    key,
                },
                priority(origin),
            );
        }
    }
}

struct Inner {
    common: reconcile::Common<TargetKey>,
    controller: DecoratorController,
    routing: Arc<Routing>,
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
        self.common.hooks.forget_controller(&self.common.name);
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
    let resolved = Resolved::new(&controller, resources)?;
    resolved.check_scope(informers.scope())?;
    let spec = reconcile::ControllerSpec::from(CustomizableController::Decorator(Box::new(
        controller.clone(),
    )));
    let queue: WorkQueue<TargetKey> = options.metrics.queue(spec.controller_type(), &spec.name);
    queue.set_gate(options.gate.clone());
    let targets = resolved
        .targets
        .iter()
        .map(|res| {
            let labels = server_selector(&controller, &resolved.selector, res);
            let lease = informers.lease_selected(res, Keep::Parents, labels);
            (res.clone(), lease)
        })
        .collect();
    let routing = Arc::new(Routing {
        selector: resolved.selector,
        finalizer: controller.finalizer_name(),
        targets,
        queue: queue.clone(),
    });
    let concurrency = options.concurrency();
    let ctx = reconcile::StartContext {
        client,
        informers,
        resources,
        hooks,
        options,
    };
    let enqueue = enqueue_related(&routing);
    let common = reconcile::Common::new(spec, queue, &ctx, enqueue);
    let writer = &common.writer;
    let target_handlers = routing
        .targets
        .iter()
        .enumerate()
        .map(|(index, (res, informer))| {
            let routing = routing.clone();
            reconcile::watch_owners(
                informer,
                writer.clone(),
                res.clone(),
                move |change, origin| routing.on_target(index, change, origin),
            )
        })
        .collect();
    let attachments = resolved
        .attachments
        .into_iter()
        .map(|(kind, resource)| watch_attachments(informers, writer, &routing, kind, resource))
        .collect();
    let inner = Arc::new(Inner {
        common,
        controller,
        routing,
        target_handlers,
        attachments,
    });
    Ok(reconcile::run(inner, concurrency))
}

/// Leases the informer of one attachment type; its events queue the targets that control
/// them.
fn watch_attachments(
    informers: &Informers,
    writer: &Arc<crate::writer::Writer>,
    routing: &Arc<Routing>,
    kind: ChildType,
    resource: Arc<ApiResource>,
) -> AttachmentType {
    let routing = routing.clone();
    let route = move |change: &_, origin| routing.on_attachment(change, origin);
    let (informer, handler) = reconcile::lease_owned(informers, writer, &resource, route);
    AttachmentType {
        kind,
        resource,
        informer,
        handler,
    }
}

/// The resources a DecoratorController's spec names, resolved through discovery (what
/// [`start`] checks before it starts anything; `metacontroller render` uses the same).
pub struct Resolved {
    /// Targeted resources, each once.
    pub targets: Vec<Arc<ApiResource>>,
    /// Which objects are targets.
    pub selector: TargetSelector,
    /// Each declared attachment type and its resource.
    pub attachments: Vec<(ChildType, Arc<ApiResource>)>,
}

impl Resolved {
    /// Refuses cluster-scoped target and attachment types when `scope` limits the process
    /// to namespaces (see [`crate::scope`]).
    pub(crate) fn check_scope(
        &self,
        scope: Option<&metacontroller_dynamic::WatchScope>,
    ) -> Result<(), crate::scope::OutOfScope> {
        for target in &self.targets {
            crate::scope::check(scope, "target", target)?;
        }
        for (_, attachment) in &self.attachments {
            crate::scope::check(scope, "attachment", attachment)?;
        }
        Ok(())
    }

    /// Resolves `controller`'s resources in `resources`; fails as [`start`] does.
    pub fn new(
        controller: &DecoratorController,
        resources: &ResourceMap,
    ) -> Result<Self, StartError> {
        let spec = &controller.spec;
        let lookup = |api_version: &str, resource: &str| {
            reconcile::resolve(resources, api_version, resource)
                .map_err(StartError::UnknownResource)
        };
        let mut targets: Vec<Arc<ApiResource>> = Vec::new();
        let mut rules = Vec::new();
        for rule in &spec.resources {
            let res = lookup(&rule.api_version, &rule.resource)?;
            rules.push((res.group.clone(), res.kind.clone(), rule));
            if !targets.iter().any(|r| r.id() == res.id()) {
                targets.push(res);
            }
        }
        let selector = TargetSelector::new(
            rules
                .iter()
                .map(|(group, kind, rule)| (group.as_str(), kind.as_str(), *rule)),
        )
        .map_err(|e| StartError::Invalid(e.to_string()))?;
        let mut attachments = Vec::new();
        for rule in &spec.attachments {
            let res = lookup(&rule.api_version, &rule.resource)?;
            attachments.push((reconcile::child_type(&res, rule.update_method()), res));
        }
        Ok(Resolved {
            targets,
            selector,
            attachments,
        })
    }
}

/// The `labelSelector` the API server applies to the informer of target type `res`: the
/// label selector of its `resources[]` rule. Annotation selectors stay client-side (the API
/// server cannot filter on annotations). With a finalize hook the informer stays unfiltered:
/// a target that carries our finalizer is managed after its labels stop matching (upstream's
/// rule), which no server-side selector can express.
fn server_selector(
    controller: &DecoratorController,
    selector: &TargetSelector,
    res: &ApiResource,
) -> Option<String> {
    if controller.spec.finalize_hook().is_some() {
        return None;
    }
    selector
        .rule(&res.api_version, &res.kind)
        .and_then(|rule| rule.selector.labels.server_query())
}

/// Related-object changes queue the target (by type and key).
fn enqueue_related(routing: &Arc<Routing>) -> Enqueue {
    // Weak: the manager lives in the reconciler, which owns the routing.
    let routing = Arc::downgrade(routing);
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
}

impl Reconciler for Inner {
    type Key = TargetKey;
    type Error = SyncError;
    type Writes = TargetWrites;

    fn common(&self) -> &reconcile::Common<TargetKey> {
        &self.common
    }

    fn informers(&self) -> Vec<&Informer> {
        let attachments = self.attachments.iter().map(|a| &*a.informer);
        let targets = self.routing.targets.iter().map(|(_, i)| &**i);
        attachments.chain(targets).collect()
    }

    fn parent_resources(&self) -> Vec<Arc<ApiResource>> {
        self.routing
            .targets
            .iter()
            .map(|(r, _)| r.clone())
            .collect()
    }

    fn object(&self, key: &TargetKey) -> Option<Value> {
        let (res, informer) = self.routing.targets.get(key.resource)?;
        let cached = to_value(&*informer.get(&key.key)?, res).ok()?;
        self.common.writer.fresh(res, cached)
    }

    /// Targets that neither match the `resources` rules nor carry our finalizer are not
    /// ours.
    fn cares(&self, target: &Value) -> bool {
        let matches = self.routing.selector.matches(target);
        !finalizer::is_ignored(matches, target, &self.routing.finalizer)
    }

    fn cached_keys(&self) -> Vec<TargetKey> {
        let mut keys = Vec::new();
        for (resource, (_, informer)) in self.routing.targets.iter().enumerate() {
            keys.extend(informer.list().iter().filter_map(|target| {
                NamespacedName::of(target.as_ref()).map(|key| TargetKey { resource, key })
            }));
        }
        keys
    }

    async fn plan(&self, key: &TargetKey) -> Result<Plan<TargetWrites>, SyncError> {
        self.plan_key(key).await
    }

    async fn write(&self, writes: TargetWrites) -> Result<(), SyncError> {
        self.write_target_and_attachments(writes).await
    }

    fn forget_departed(&self) {
        self.common.queue.retain(|key| {
            self.routing
                .targets
                .get(key.resource)
                .is_some_and(|(_, informer)| informer.contains(&key.key))
        });
        let targets = self.routing.targets.iter().map(|(r, i)| (&**r, &**i));
        let held = crate::departed::Held::new(targets.collect());
        crate::departed::forget_departed(&self.common, &held, &|key| self.written(key));
    }

    fn state_entries(&self) -> Vec<(&'static str, usize)> {
        self.common.state_entries()
    }
}

/// A target during one sync, once its finalizer is right and our writes are confirmed.
struct TargetState {
    res: Arc<ApiResource>,
    key: TargetKey,
    object: Value,
    uid: String,
}

/// What the hook's answer for a target asks to write (phase two of its sync).
pub(super) struct TargetWrites {
    target: TargetState,
    types: Vec<ChildType>,
    /// The attachments the hook saw.
    observed: Vec<Value>,
    response: DecoratorHookResponse,
}

impl Inner {
    fn finalize_hook(&self) -> Option<&Hook> {
        self.controller.spec.finalize_hook()
    }

    /// Whether the caches hold the written object `key` (target or attachment), for
    /// [`crate::departed`].
    fn written(&self, key: &ObjectKey) -> Option<bool> {
        let attachments = self
            .attachments
            .iter()
            .map(|a| (&*a.resource, &*a.informer));
        let targets = self.routing.targets.iter().map(|(r, i)| (&**r, &**i));
        crate::departed::cached(attachments.chain(targets), key)
    }

    /// For expectations: whether the cache holds the attachment `key` (see
    /// [`reconcile::presence`]).
    fn cached(&self, key: &ObjectKey) -> Option<bool> {
        let watched = self
            .attachments
            .iter()
            .map(|a| (&*a.resource, &*a.informer));
        reconcile::presence(watched, key)
    }

    /// One sync, in upstream's order: the target from the cache (own writes applied), its
    /// finalizer first (so anything done later can be cleaned up), then — once the cache
    /// has caught up with our last attachment writes — hook and writes
    /// ([`Inner::plan_target`]).
    async fn plan_key(&self, key: &TargetKey) -> Result<Plan<TargetWrites>, SyncError> {
        let Some((res, informer)) = self.routing.targets.get(key.resource) else {
            return Ok(Plan::done());
        };
        let Some(cached) = informer.get(&key.key) else {
            // Deleted; attachments go with the garbage collector.
            let etag_key = format!("{}/{}/{}", res.api_version, res.kind, key.key);
            self.common
                .hooks
                .forget_parent(&self.common.name, &etag_key);
            // Customize calls name the target by `namespace/name` alone.
            self.common
                .hooks
                .forget_parent(&self.common.name, &key.key.to_string());
            let targets = self.routing.targets.iter().map(|(r, i)| (&**r, &**i));
            let held = crate::departed::Held::new(targets.collect());
            crate::departed::forget_deleted_owners(&self.common, &held, &|key| self.written(key));
            self.common.related.forget(&ParentId {
                api_version: res.api_version.clone(),
                kind: res.kind.clone(),
                key: key.key.clone(),
            });
            return Ok(Plan::done());
        };
        let Some(object) = self.common.writer.fresh(res, to_value(&cached, res)?) else {
            return Ok(Plan::done());
        };
        if !self.cares(&object) {
            return Ok(Plan::done());
        }
        let finalizer = &self.routing.finalizer;
        let finalize_hook = self.finalize_hook().is_some();
        let written =
            reconcile::sync_finalizer(&self.common.writer, res, object, finalizer, finalize_hook)
                .await?;
        let Some(object) = written else {
            return Ok(Plan::done()); // the target is gone
        };
        // Check again: we may just have removed our finalizer.
        if !self.cares(&object) {
            return Ok(Plan::done());
        }
        let uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !self
            .common
            .own_writes_confirmed(key, &uid, |k| self.cached(k))
        {
            return Ok(Plan::await_own_writes());
        }
        let target = TargetState {
            res: res.clone(),
            key: key.clone(),
            object,
            uid,
        };
        self.plan_target(target).await
    }

    /// The hook call for the target, with the attachments it controls.
    async fn plan_target(&self, target: TargetState) -> Result<Plan<TargetWrites>, SyncError> {
        let types: Vec<ChildType> = self.attachments.iter().map(|a| a.kind.clone()).collect();
        let observed = self.observed_attachments(&target.uid)?;
        let response = self.call_hook(&target, &types, &observed).await?;
        let requeue = reconcile::requeue_after_seconds(response.resync_after_seconds);
        let writes = TargetWrites {
            target,
            types,
            observed,
            response,
        };
        Ok(Plan::write(writes, requeue))
    }

    /// Phase two: the target update (which also drops the finalizer after
    /// `finalized: true`), then the attachments.
    async fn write_target_and_attachments(&self, writes: TargetWrites) -> Result<(), SyncError> {
        let TargetWrites {
            target,
            types,
            observed,
            response,
        } = writes;
        let target = &target;
        let planned = plan::plan_sync(&self.controller, &target.object, &types, response);
        if !self.write_target(&target.res, planned.update).await? {
            return Ok(()); // the target is gone
        }
        if planned.manages_attachments {
            self.manage_attachments(target, &types, &observed, &planned.desired)
                .await?;
        }
        if planned.refused.is_empty() {
            Ok(())
        } else {
            Err(SyncError::Refused(planned.refused))
        }
    }

    /// The attachments of the target with uid `uid`: controlled by it and annotated with
    /// this decorator's name (cache + own writes).
    fn observed_attachments(&self, uid: &str) -> Result<Vec<Value>, SyncError> {
        let mut observed = Vec::new();
        for a in &self.attachments {
            for obj in a.informer.controlled_by(uid) {
                if !is_own_attachment(obj.as_ref(), uid, self.name()) {
                    continue;
                }
                if let Some(fresh) = self
                    .common
                    .writer
                    .fresh(&a.resource, to_value(&obj, &a.resource)?)
                {
                    observed.push(fresh);
                }
            }
        }
        Ok(observed)
    }

    /// Calls the sync hook, or the finalize hook while the target is being deleted or no
    /// longer matches.
    async fn call_hook(
        &self,
        target: &TargetState,
        types: &[ChildType],
        observed: &[Value],
    ) -> Result<DecoratorHookResponse, SyncError> {
        let object = &target.object;
        let (hook, hook_name, finalizing) =
            plan::choose_hook(&self.controller, &self.routing.selector, object)?;
        let version = hook.effective_version();
        let related = self.common.related.related(object, version).await?;
        let request = plan::hook_request(
            &self.controller,
            object,
            version,
            types,
            observed,
            related,
            finalizing,
        );
        let res = &target.res;
        let key_text = format!("{}/{}/{}", res.api_version, res.kind, target.key.key);
        let answer = self
            .common
            .call_hook(hook_name, &key_text, hook, &request)
            .await
            .map_err(|source| SyncError::Hook {
                hook: hook_name,
                source,
            })?;
        let mut response: DecoratorHookResponse = answer.response;
        let events = std::mem::take(&mut response.events);
        // A cached answer's Events were recorded when the hook sent them.
        if !answer.cached {
            self.common.record_hook_events(hook_name, object, events);
        }
        Ok(response)
    }

    /// Creates, updates and deletes attachments. One bad attachment does not block the
    /// others; a conflict stops at once.
    async fn manage_attachments(
        &self,
        target: &TargetState,
        types: &[ChildType],
        observed: &[Value],
        desired: &std::collections::BTreeMap<children::ChildKey, (usize, Value)>,
    ) -> Result<(), SyncError> {
        let target_ref = ParentRef {
            api_version: target.res.api_version.clone(),
            kind: target.res.kind.clone(),
            name: target.key.key.name.clone(),
            uid: target.uid.clone(),
            // Attachments always carry an ownerReference.
            namespace: String::new(),
        };
        let errors = self
            .common
            .manage_children(&target_ref, types, observed, desired, |i| {
                &self.attachments[i].resource
            })
            .await?;
        if errors.is_empty() {
            Ok(())
        } else {
            Err(SyncError::Writes(errors))
        }
    }

    /// Writes the target's new status (through `/status` when the resource has it) and
    /// metadata. Returns false when the target no longer exists.
    async fn write_target(
        &self,
        res: &ApiResource,
        update: super::target::TargetUpdate,
    ) -> Result<bool, SyncError> {
        let has_status = res.has_subresource("status");
        let mut object = update.object;
        if update.status_changed && has_status {
            match self.common.writer.replace_status(res, object.clone()).await {
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
            match self.common.writer.replace(res, object).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }
}
