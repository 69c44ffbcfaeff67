//! The skeleton both controller kinds run on. A CompositeController and a
//! DecoratorController differ in what one sync does (claim children vs. decorate a target);
//! everything around a sync is the same and lives here, once:
//!
//! - **Events → queue.** Watch events are served before relist replays ([`priority`]);
//!   the informer of the synced objects feeds the own-writes overlay and drops expectations
//!   of deleted owners ([`watch_owners`]); informers of written objects feed the overlay
//!   ([`watch_owned`]).
//! - **Workers.** [`run`] waits for every informer to sync, then runs syncs: `--workers`
//!   at a time up to their hook calls, `--parents-in-flight` in all.
//! - **A sync is two phases and a value.** [`Reconciler::plan`] holds the queue's
//!   [`Worker`]: reads, the writes that must precede the hook, the hook calls; it returns a
//!   [`Plan`] (the writes, and when to come back). [`Reconciler::write`] runs the writes
//!   without a worker. The sync ends as an [`Outcome`] the queue applies (requeue, backoff,
//!   forget); no sync queues its own key.
//! - **Around a sync** ([`sync_and_record`]), each rule one step: a cache not synced
//!   comes back in a second; the span; `resyncPeriodSeconds` requeues every object the
//!   controller cares about, whatever the outcome (upstream's informer resync); a hook's 429
//!   comes back after `Retry-After` with no Event; any other failure except a 409 Conflict
//!   records a `SyncError` Warning Event on the object ([`on_failure`]).
//! - **Inside a sync**, the shared steps: end with [`Plan::await_own_writes`] while our own
//!   writes are unconfirmed ([`Common::own_writes_confirmed`]), put the finalizer in place
//!   first ([`sync_finalizer`]) and honour the hook's `resyncAfterSeconds`
//!   ([`requeue_after_seconds`]).
//!
//! The kind-specific part is the [`Reconciler`] trait.

use std::fmt::Display;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::DynamicObject;
use metacontroller_api::hook::{EndpointConfig, Hook};
use metacontroller_api::wire::CustomizableController;
use metacontroller_api::ChildUpdateMethod;
use metacontroller_dynamic::{
    ApiResource, Change, HandlerId, Informer, Informers, NamespacedName, ObjectKey, Origin,
    ResourceMap, Supervisor,
};
use metacontroller_hooks::{CallContext, CodeChange, HookClient, HookError};
use metacontroller_workqueue::{Outcome, Priority, Requeue, WorkQueue, Worker};
use serde_json::Value;

use crate::children::{ChildError, ChildType, ParentRef};
use crate::composite::Options;
use crate::events::{self, EventRecorder};
use crate::finalizer::{self, FinalizerSync};
use crate::handle::ControllerHandle;
use crate::related::{Enqueue, RelatedConfig, RelatedManager};
use crate::rolling::Desired;
use crate::spans;
use crate::writer::{WriteError, Writer};
use tracing::Instrument as _;

/// The queue priority of an informer event: watch events go before relist replays, so a
/// cache flush never starves real changes.
pub(crate) fn priority(origin: Origin) -> Priority {
    match origin {
        Origin::Watch => Priority::Event,
        Origin::Relist => Priority::Bulk,
    }
}

/// How the skeleton treats a failed sync.
pub(crate) trait SyncFailure: Display {
    /// `Some(delay)` when a hook asked to slow down (429): retried after `delay`, no Event.
    fn retry_after(&self) -> Option<Duration>;
    /// A 409 Conflict (stale cache): retried with backoff, no Event.
    fn is_conflict(&self) -> bool;
    /// The API server was unreachable: retried with backoff of at most
    /// [`UNREACHABLE_RETRY_MAX`], so keys that failed during an outage follow soon after it.
    fn is_unreachable(&self) -> bool {
        false
    }
}

/// How soon a key found with a cache not synced is tried again (see [`sync_and_record`]).
const UNSYNCED_RETRY: Duration = Duration::from_secs(1);

/// The longest backoff of a key whose sync failed because the API server was unreachable.
/// Only keys with work pending fail so (an idle parent is not synced while the watches are
/// down), so the retries stay few; the hook is called again on each.
pub(crate) const UNREACHABLE_RETRY_MAX: Duration = Duration::from_secs(2);

/// The parts of a controller object the skeleton reads, whatever its kind.
pub(crate) struct ControllerSpec {
    /// The controller object, as customize requests carry it.
    pub(crate) controller: CustomizableController,
    /// Its name.
    pub(crate) name: String,
    /// `spec.hooks.customize`.
    pub(crate) customize_hook: Option<Hook>,
    /// The endpoint settings of its hooks.
    pub(crate) endpoints: Vec<EndpointConfig>,
    /// `spec.resyncPeriodSeconds`.
    pub(crate) resync_period_seconds: Option<i32>,
    /// Every hook of the controller (sync, finalize, customize), for the ConfigMaps that
    /// hold in-process hook code.
    pub(crate) hooks: Vec<Hook>,
}

impl ControllerSpec {
    /// The `controller_type` metric label: upstream's kind name.
    pub(crate) fn controller_type(&self) -> &'static str {
        match self.controller {
            CustomizableController::Composite(_) => crate::metrics::COMPOSITE,
            CustomizableController::Decorator(_) => crate::metrics::DECORATOR,
        }
    }
}

impl From<CustomizableController> for ControllerSpec {
    fn from(controller: CustomizableController) -> Self {
        let (name, customize_hook, endpoints, resync_period_seconds, hooks) = match &controller {
            CustomizableController::Composite(c) => {
                let s = &c.spec;
                let endpoints = s.all_endpoint_configs().cloned().collect();
                let hooks = s
                    .hooks
                    .as_ref()
                    .map(|h| present_hooks([&h.sync, &h.finalize, &h.customize]));
                (
                    &c.metadata.name,
                    s.customize_hook(),
                    endpoints,
                    s.resync_period_seconds,
                    hooks,
                )
            }
            CustomizableController::Decorator(c) => {
                let s = &c.spec;
                let endpoints = s.all_endpoint_configs().cloned().collect();
                let hooks = s
                    .hooks
                    .as_ref()
                    .map(|h| present_hooks([&h.sync, &h.finalize, &h.customize]));
                (
                    &c.metadata.name,
                    s.customize_hook(),
                    endpoints,
                    s.resync_period_seconds,
                    hooks,
                )
            }
        };
        ControllerSpec {
            name: name.clone().unwrap_or_default(),
            customize_hook: customize_hook.cloned(),
            endpoints,
            resync_period_seconds,
            hooks: hooks.unwrap_or_default(),
            controller,
        }
    }
}

/// The hooks of a controller object that are set (sync, finalize, customize).
fn present_hooks(hooks: [&Option<Hook>; 3]) -> Vec<Hook> {
    hooks.into_iter().flatten().cloned().collect()
}

/// What every reconciler holds, whatever its kind.
pub(crate) struct Common<K>
where
    K: Clone + Eq + Hash + Send + 'static,
{
    /// The controller object's name (logs, metrics).
    pub(crate) name: String,
    /// Upstream's kind name (metrics label, sync span).
    pub(crate) controller_type: &'static str,
    /// The work queue of keys.
    pub(crate) queue: WorkQueue<K>,
    /// Every write goes through it (own-writes overlay, expectations).
    pub(crate) writer: Arc<Writer>,
    /// The customize hook and related objects.
    pub(crate) related: RelatedManager,
    /// Where Events about synced objects go.
    pub(crate) events: EventRecorder,
    /// The keys whose last sync failed with a `SyncError` (for `SyncRecovered`).
    failing: crate::recovery::Failing<K>,
    /// The hook client (also told when parents and controllers go, for its ETag cache).
    pub(crate) hooks: HookClient,
    /// The shared informers (their prunes trigger [`Reconciler::forget_departed`]).
    informers: Informers,
    /// Where the per-parent state gauge reads this controller.
    metrics: crate::metrics::ControllerMetrics,
    endpoints: Vec<EndpointConfig>,
    resync_period_seconds: Option<i32>,
    /// The ConfigMaps holding this controller's in-process hook code.
    code: Vec<CodeChange>,
    /// Its hooks whose code is in one of them.
    code_hooks: Vec<Hook>,
}

/// What `start` of either kind is given, besides the controller object.
pub(crate) struct StartContext<'a> {
    pub(crate) client: kube::Client,
    pub(crate) informers: &'a Informers,
    pub(crate) resources: &'a ResourceMap,
    pub(crate) hooks: HookClient,
    pub(crate) options: Options,
}

impl<K> Drop for Common<K>
where
    K: Clone + Eq + Hash + Send + 'static,
{
    /// The controller is gone: its ConfigMaps of hook code are watched for it no more.
    fn drop(&mut self) {
        for hook in &self.code_hooks {
            self.hooks.unwatch_code(hook);
        }
    }
}

impl<K> Common<K>
where
    K: Clone + Eq + Hash + Send + 'static,
{
    /// Builds the common part; related-object changes are sent to `enqueue`.
    pub(crate) fn new(
        spec: ControllerSpec,
        queue: WorkQueue<K>,
        ctx: &StartContext<'_>,
        enqueue: Enqueue,
    ) -> Self {
        let controller_type = spec.controller_type();
        let child_writes = ctx
            .options
            .metrics
            .child_writes(controller_type, &spec.name);
        let code = code_config_maps(&spec.hooks, &ctx.hooks);
        let code_hooks: Vec<Hook> = spec
            .hooks
            .iter()
            .filter(|hook| metacontroller_hooks::code_config_map(hook).is_some())
            .cloned()
            .collect();
        let related = RelatedManager::new(RelatedConfig {
            controller: spec.controller,
            name: spec.name.clone(),
            hook: spec.customize_hook,
            endpoint_configs: spec.endpoints.clone(),
            hooks: ctx.hooks.clone(),
            informers: ctx.informers.clone(),
            resources: ctx.resources.clone(),
            enqueue,
        });
        Common {
            name: spec.name,
            controller_type,
            queue,
            writer: Arc::new(
                Writer::new(ctx.client.clone(), ctx.options.apply_strategy.clone())
                    .with_schemas(ctx.options.schemas.clone())
                    .with_metrics(child_writes)
                    .with_write_concurrency(ctx.options.child_write_concurrency),
            ),
            related,
            events: ctx.options.events.clone(),
            failing: crate::recovery::Failing::default(),
            hooks: ctx.hooks.clone(),
            informers: ctx.informers.clone(),
            metrics: ctx.options.metrics.clone(),
            endpoints: spec.endpoints,
            resync_period_seconds: spec.resync_period_seconds,
            code,
            code_hooks,
        }
    }

    /// Whether the cache has caught up with our last creates/deletes for the object with
    /// uid `owner` (`present` answers for one written object, see [`presence`]). If not, the
    /// sync must not act on the stale cache and ends with [`Plan::await_own_writes`]: the
    /// watch events that confirm our writes queue the key again (each maps to its owner).
    pub(crate) fn own_writes_confirmed(
        &self,
        key: &K,
        owner: &str,
        present: impl Fn(&ObjectKey) -> Option<bool>,
    ) -> bool
    where
        K: Display,
    {
        let confirmed = self.writer.satisfied(owner, present);
        if !confirmed {
            tracing::debug!(controller = %self.name, object = %key, "waiting for the cache to confirm our writes");
        }
        confirmed
    }

    /// Entries per structure this controller keeps per parent (for
    /// `metacontroller_parent_state_entries`): customize rules and the related informers
    /// they lease, hook responses, and the writer's (see [`Writer::state_entries`]).
    pub(crate) fn state_entries(&self) -> Vec<(&'static str, usize)> {
        let mut entries = vec![
            ("related_rules", self.related.parents()),
            ("related_informers", self.related.watched().len()),
            ("hook_responses", self.hooks.etag_entries_of(&self.name)),
        ];
        entries.extend(self.writer.state_entries());
        entries
    }

    /// Creates, updates and deletes the children (attachments) of `owner` so they match
    /// `desired`, several at once ([`Writer::execute_all`]). One bad child does not block
    /// the others; a conflict stops further writes. Returns once every write has finished,
    /// with the failed ones.
    pub(crate) async fn manage_children<'a>(
        &self,
        owner: &ParentRef,
        types: &[ChildType],
        observed: &[Value],
        desired: &Desired,
        resource: impl Fn(usize) -> &'a ApiResource,
    ) -> Result<Vec<WriteError>, ChildError> {
        let actions = self
            .writer
            .plan_children(types, owner, observed, desired)
            .await?;
        Ok(self.writer.execute_all(&owner.uid, actions, resource).await)
    }

    /// Records the Events a `hook_name` response asked for on `object` (see
    /// [`crate::hook_events`]).
    pub(crate) fn record_hook_events(
        &self,
        hook_name: &str,
        object: &Value,
        events: Vec<metacontroller_api::wire::HookEvent>,
    ) {
        crate::hook_events::record(&self.events, &self.name, hook_name, object, events);
    }

    /// Calls `hook` (`hook_name` is `sync` or `finalize`) for the object `key_text`; the
    /// answer says whether it came from the ETag cache (its Events were recorded then).
    pub(crate) async fn call_hook<Req, Resp>(
        &self,
        hook_name: &str,
        key_text: &str,
        hook: &Hook,
        request: &Req,
    ) -> Result<metacontroller_hooks::Answer<Resp>, HookError>
    where
        Req: k8s_openapi::serde::Serialize,
        Resp: k8s_openapi::serde::de::DeserializeOwned + Default,
    {
        let ctx = CallContext {
            controller: &self.name,
            hook_name,
            parent_key: key_text,
        };
        self.hooks
            .answer(&ctx, hook, &self.endpoints, request)
            .await
    }
}

/// The served resource `resource` of `api_version`; the error names it as
/// `<resource>.<apiVersion>` (for the kind's `StartError::UnknownResource`).
pub(crate) fn resolve(
    resources: &ResourceMap,
    api_version: &str,
    resource: &str,
) -> Result<Arc<ApiResource>, String> {
    resources
        .get(api_version, resource)
        .cloned()
        .ok_or_else(|| format!("{resource}.{api_version}"))
}

/// A declared child (attachment) type: the resolved resource and its update method.
pub(crate) fn child_type(res: &ApiResource, method: ChildUpdateMethod) -> ChildType {
    ChildType {
        api_version: res.api_version.clone(),
        kind: res.kind.clone(),
        resource: res.name.clone(),
        namespaced: res.namespaced,
        method,
        namespaces: Vec::new(),
    }
}

/// What phase one of a sync ([`Reconciler::plan`]) hands on.
pub(crate) struct Plan<W> {
    /// The writes the hook's answer asks for; `None` ends the sync here.
    pub(crate) writes: Option<W>,
    /// When the key comes back, whatever the writes do (the hook's `resyncAfterSeconds`).
    pub(crate) requeue: Requeue,
}

impl<W> Plan<W> {
    /// Nothing to write, nothing to come back for (the object is gone, or not ours).
    pub(crate) fn done() -> Self {
        Plan {
            writes: None,
            requeue: Requeue::OnChange,
        }
    }

    /// The cache has not caught up with our own writes ([`Common::own_writes_confirmed`]):
    /// the watch events that confirm them bring the key back. A second later it comes
    /// back anyway unless a sync of it has started since (the confirming event may have
    /// been handled, and its sync run, just before the expectations caught up); a fixed
    /// requeue would cost a whole extra sync (a hook call) per wait.
    pub(crate) fn await_own_writes() -> Self {
        Plan {
            writes: None,
            requeue: Requeue::UnlessSyncedWithin(OWN_WRITES_FALLBACK),
        }
    }

    /// `writes` to run in phase two, then `requeue`.
    pub(crate) fn write(writes: W, requeue: Requeue) -> Self {
        Plan {
            writes: Some(writes),
            requeue,
        }
    }
}

/// How soon a sync that waited for its own writes comes back if no event brought it back.
const OWN_WRITES_FALLBACK: Duration = Duration::from_secs(1);

/// What one controller kind plugs into the skeleton.
pub(crate) trait Reconciler: Send + Sync + 'static {
    /// A work queue key (one synced object).
    type Key: Clone + Eq + Hash + Display + Send + Sync + 'static;
    /// Why one sync failed.
    type Error: SyncFailure + Send + 'static;
    /// What phase one of a sync leaves for phase two to write.
    type Writes: Send + 'static;

    /// What every kind holds.
    fn common(&self) -> &Common<Self::Key>;
    /// The controller object's name (for logs).
    fn name(&self) -> &str {
        &self.common().name
    }
    /// Every informer the reconciler reads; syncs start once all of them have synced.
    fn informers(&self) -> Vec<&Informer>;
    /// The object `key` names, as the reconciler currently sees it (cache + own writes).
    fn object(&self, key: &Self::Key) -> Option<Value>;
    /// Whether the controller cares about `object`: it is selected, or it still carries
    /// the controller's finalizer (so it must be finalized).
    fn cares(&self, object: &Value) -> bool;
    /// The key of every cached object the controller might sync (before [`Self::cares`]).
    fn cached_keys(&self) -> Vec<Self::Key>;
    /// Phase one of a sync of `key`, holding a worker: reads, the writes that must come
    /// before the hook (finalizer, adoption), the hook calls. Returns what the answer asks
    /// to write.
    fn plan(
        &self,
        key: &Self::Key,
    ) -> impl Future<Output = Result<Plan<Self::Writes>, Self::Error>> + Send;
    /// Phase two, without a worker (under the sync's in-flight slot only): the writes.
    fn write(&self, writes: Self::Writes) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Drops what is kept for parents no longer cached (see [`crate::departed`]).
    fn forget_departed(&self);
    /// Entries per structure kept per parent (see [`Common::state_entries`]).
    fn state_entries(&self) -> Vec<(&'static str, usize)>;
}

impl<R: Reconciler> crate::metrics::ParentStates for R {
    fn state_entries(&self) -> Vec<(&'static str, usize)> {
        Reconciler::state_entries(self)
    }
}

/// Starts the workers of `reconciler` once its informers have synced. Must run inside tokio.
/// Parents that leave the caches silently (pruned shards) are swept from every per-parent
/// structure after each prune ([`Reconciler::forget_departed`]).
pub(crate) fn run<R: Reconciler>(
    reconciler: Arc<R>,
    concurrency: metacontroller_workqueue::Concurrency,
) -> ControllerHandle<R::Key> {
    let common = reconciler.common();
    let queue = common.queue.clone();
    let run_queue = queue.clone();
    let states: std::sync::Weak<R> = Arc::downgrade(&reconciler);
    let unlistable = unlistable_probe(&reconciler);
    common
        .metrics
        .track_states(common.controller_type, &common.name, states);
    let mut pruned = common.informers.pruned();
    let task_name = format!(
        "controller/{}/{}",
        common.controller_type,
        reconciler.name()
    );
    let supervisor = common.informers.supervisor().cloned();
    let stopped = queue.clone();
    // Supervised: a panic outside a sync (a sync's own is caught and retried) would stop
    // this controller's work for good while the process looks healthy; it stops the process.
    let task = Supervisor::spawn_with(supervisor.as_ref(), task_name, async move {
        for informer in reconciler.informers() {
            informer.wait_synced().await;
        }
        let sweeper = {
            let reconciler = reconciler.clone();
            async move {
                while pruned.changed().await.is_ok() {
                    reconciler.forget_departed();
                }
                std::future::pending::<()>().await
            }
        };
        let code_changes = resync_on_code_changes(reconciler.clone());
        let workers = run_queue.run(concurrency, move |key: R::Key, worker: Worker| {
            let reconciler = reconciler.clone();
            async move { sync_and_record(&*reconciler, &key, worker).await }
        });
        tokio::select! {
            _ = workers => {}
            _ = sweeper => {}
            _ = code_changes => {}
        }
        if stopped.is_shutting_down() {
            // Stopped by its handle, which aborts this task next: not a failure.
            std::future::pending::<()>().await;
        }
    });
    ControllerHandle::new(queue, task, unlistable)
}

/// The informers of `reconciler` whose cache waits for a list that failed, one entry per
/// resource. Holds the reconciler weakly: the handle must not keep it alive.
fn unlistable_probe<R: Reconciler>(reconciler: &Arc<R>) -> crate::handle::UnlistableProbe {
    let reconciler = Arc::downgrade(reconciler);
    Box::new(move || {
        let Some(reconciler) = reconciler.upgrade() else {
            return Vec::new();
        };
        let mut found: Vec<(metacontroller_dynamic::ResourceId, String)> = Vec::new();
        for informer in reconciler.informers() {
            let id = informer.resource().id();
            if let Some(error) = informer.list_error() {
                if !found.iter().any(|(seen, _)| *seen == id) {
                    found.push((id, error));
                }
            }
        }
        found
    })
}

/// The ConfigMaps holding the code of `hooks` (in-process hooks), each watched from now on
/// so a change is seen before the next call.
fn code_config_maps(hooks: &[Hook], client: &HookClient) -> Vec<CodeChange> {
    let mut maps: Vec<CodeChange> = Vec::new();
    for hook in hooks {
        client.watch_code(hook);
        if let Some(reference) = metacontroller_hooks::code_config_map(hook) {
            let map = CodeChange {
                namespace: reference.namespace.clone(),
                name: reference.name.clone(),
                keys: None,
            };
            if !maps.contains(&map) {
                maps.push(map);
            }
        }
    }
    maps
}

/// Queues every object the controller cares about whenever a key its hooks use (WebAssembly:
/// the module's key; Jsonnet: the entry and the files it imports) changes in a ConfigMap
/// holding its hook code (a missed notification counts as a change), so the new code reaches
/// every parent within seconds; a change of other keys resyncs nothing. Never ends for a
/// controller without such ConfigMaps.
async fn resync_on_code_changes<R: Reconciler>(reconciler: Arc<R>) {
    use tokio::sync::broadcast::error::RecvError;
    let common = reconciler.common();
    let changes = match common.hooks.code_changes() {
        Some(changes) if !common.code.is_empty() => changes,
        _ => return std::future::pending().await,
    };
    let mut changes = changes;
    loop {
        let changed = match changes.recv().await {
            Ok(change) => code_change_affects(common, &change).await,
            Err(RecvError::Lagged(_)) => true,
            Err(RecvError::Closed) => return std::future::pending().await,
        };
        if changed {
            let keys: Vec<R::Key> = reconciler
                .cached_keys()
                .into_iter()
                .filter(|key| reconciler.object(key).is_some_and(|o| reconciler.cares(&o)))
                .collect();
            tracing::info!(controller = %common.name, objects = keys.len(), "hook code changed; resyncing");
            for key in keys {
                common.queue.add(key, Priority::Event);
            }
        }
    }
}

/// Whether `change` touches code a hook of the controller runs (logged when it is one of
/// the controller's ConfigMaps but none of the keys its hooks use).
async fn code_change_affects<K>(common: &Common<K>, change: &CodeChange) -> bool
where
    K: Clone + Eq + Hash + Send + 'static,
{
    if !common
        .code
        .iter()
        .any(|map| change.is_of(&map.namespace, &map.name))
    {
        return false;
    }
    for hook in &common.code_hooks {
        if common.hooks.code_change_affects(hook, change).await {
            return true;
        }
    }
    tracing::info!(controller = %common.name, namespace = %change.namespace, name = %change.name, keys = ?change.keys, "hook code ConfigMap changed in keys this controller does not use; not resyncing");
    false
}

/// One sync of `key` with the rules every kind shares around it (see the module doc), each
/// a step here: caches synced, the span, the two phases, the resync period, failures.
pub(crate) async fn sync_and_record<R: Reconciler>(
    reconciler: &R,
    key: &R::Key,
    worker: Worker,
) -> Outcome<R::Error> {
    if let Some(informer) = reconciler.informers().into_iter().find(|i| !i.has_synced()) {
        // A relist failed (or a wider one runs): the cache may lack objects of this key,
        // and a hook would be told they are gone. Retried until the informer lists again.
        tracing::debug!(controller = reconciler.name(), object = %key, resource = ?informer.resource().id(), "cache not synced; syncing later");
        return Outcome::done(Requeue::After(UNSYNCED_RETRY));
    }
    let common = reconciler.common();
    let span = spans::sync_span(common.controller_type, reconciler.name(), key);
    if !span.is_disabled() {
        let retry = common.queue.num_requeues(key) > 0;
        span.record("trigger", if retry { "retry" } else { "change" });
    }
    let outcome = two_phases(reconciler, key, worker)
        .instrument(span.clone())
        .await;
    spans::record_sync(&span, &outcome.result);
    schedule_resync_period(reconciler, key);
    common
        .failing
        .observe(key, &outcome, || reconciler.object(key), &common.events);
    on_failure(reconciler, key, outcome)
}

/// Phase one with the worker, phase two without it (see [`Reconciler::plan`]).
async fn two_phases<R: Reconciler>(
    reconciler: &R,
    key: &R::Key,
    worker: Worker,
) -> Outcome<R::Error> {
    let plan = match reconciler.plan(key).await {
        Ok(plan) => plan,
        Err(error) => return Outcome::from(Err(error)),
    };
    // Only API writes remain: they need no worker (see `Concurrency`).
    worker.release();
    let Some(writes) = plan.writes else {
        return Outcome::done(plan.requeue);
    };
    Outcome {
        result: reconciler.write(writes).await,
        requeue: plan.requeue,
    }
}

/// A failed sync: a hook's 429 comes back after `Retry-After` as a success (no backoff, no
/// Event); an unreachable API server bounds the backoff; any failure but a 409 Conflict is
/// recorded as a `SyncError` Event on the object.
fn on_failure<R: Reconciler>(
    reconciler: &R,
    key: &R::Key,
    outcome: Outcome<R::Error>,
) -> Outcome<R::Error> {
    let Err(error) = &outcome.result else {
        return outcome;
    };
    let common = reconciler.common();
    if let Some(delay) = error.retry_after() {
        tracing::info!(controller = reconciler.name(), object = %key, ?delay, "hook asked to slow down; resyncing later");
        return Outcome::done(Requeue::After(delay));
    }
    if error.is_unreachable() {
        common.queue.limit_next_retry(key, UNREACHABLE_RETRY_MAX);
    }
    if !error.is_conflict() {
        if let Some(object) = reconciler.object(key) {
            common.events.warning(
                &object,
                events::reason::SYNC_ERROR,
                format!("Sync error: {error}"),
            );
            common.failing.failed(key);
        }
    }
    outcome
}

/// `resyncPeriodSeconds`: like upstream's informer resync, every object the controller
/// cares about comes back after the period, whether its last sync succeeded or not (a
/// failure is also retried with backoff, whichever comes first). Upstream raises any period
/// below one second (0 and negatives too) to one.
fn schedule_resync_period<R: Reconciler>(reconciler: &R, key: &R::Key) {
    let Some(period) = reconciler.common().resync_period_seconds else {
        return;
    };
    if !reconciler
        .object(key)
        .is_some_and(|object| reconciler.cares(&object))
    {
        return;
    }
    let delay = Duration::from_secs(period.max(1) as u64);
    reconciler
        .common()
        .queue
        .add_after(key.clone(), delay, Priority::Bulk);
}

/// The hook's `resyncAfterSeconds`: sync again after that many seconds (0 = no).
pub(crate) fn requeue_after_seconds(seconds: f64) -> Requeue {
    if seconds > 0.0 {
        Requeue::After(Duration::from_secs_f64(seconds.min(1e9)))
    } else {
        Requeue::OnChange
    }
}

/// The informer among `watched` of the resource the written object `key` names, and the
/// object's `namespace/name`; `None` when that resource is not watched.
pub(crate) fn watching_informer<'a>(
    watched: impl IntoIterator<Item = (&'a ApiResource, &'a Informer)>,
    key: &ObjectKey,
) -> Option<(&'a Informer, NamespacedName)> {
    // Keys are `<apiVersion>/<plural>` (see `writer::object_key`).
    let (api_version, plural) = key.resource.rsplit_once('/')?;
    let (_, informer) = watched
        .into_iter()
        .find(|(res, _)| res.api_version == api_version && res.name == plural)?;
    Some((
        informer,
        NamespacedName::new(key.namespace.clone(), key.name.clone()),
    ))
}

/// For expectations: whether the informer of `key`'s resource (among `watched`) holds it.
/// An accepted delete (deletionTimestamp set) counts as done, so a finalizer or grace period
/// on a written object does not hold up its owner's syncs. `None` when `key`'s resource is
/// not watched.
pub(crate) fn presence<'a>(
    watched: impl IntoIterator<Item = (&'a ApiResource, &'a Informer)>,
    key: &ObjectKey,
) -> Option<bool> {
    let (informer, name) = watching_informer(watched, key)?;
    Some(
        informer
            .get(&name)
            .is_some_and(|o| o.metadata.deletion_timestamp.is_none()),
    )
}

/// A relist replays unchanged objects: for written objects (children, attachments) that is
/// no reason to sync their owner, whose own resync covers it.
pub(crate) fn is_unchanged_replay(change: &Change<DynamicObject>) -> bool {
    matches!(change, Change::Updated { old, new }
        if old.metadata.resource_version == new.metadata.resource_version)
}

/// The controller ownerReference of `obj`, if any.
pub(crate) fn controller_ref(obj: &DynamicObject) -> Option<&OwnerReference> {
    obj.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// Upstream `resolveControllerRef`: the object of `owners` (the informer of `res`) that
/// `obj`'s controller ownerReference names — same group and kind (any version), same uid.
pub(crate) fn resolve_controller_ref(
    obj: &DynamicObject,
    res: &ApiResource,
    owners: &Informer,
) -> Option<(NamespacedName, Arc<DynamicObject>)> {
    let owner = controller_ref(obj)?;
    if owner.kind != res.kind || crate::meta::api_group(&owner.api_version) != res.group {
        return None;
    }
    let namespace = if res.namespaced {
        obj.metadata.namespace.clone().unwrap_or_default()
    } else {
        String::new()
    };
    let key = NamespacedName::new(namespace, owner.name.clone());
    let found = owners.get(&key)?;
    (found.metadata.uid.as_deref() == Some(owner.uid.as_str())).then_some((key, found))
}

/// Before anything else in a sync, puts the controller's finalizer in place (present iff
/// a finalize hook is configured, see [`finalizer::finalizer_sync`]), so whatever the sync
/// does later can be cleaned up. Returns the object as written, or `None` when it is gone.
pub(crate) async fn sync_finalizer(
    writer: &Writer,
    res: &ApiResource,
    object: Value,
    name: &str,
    finalize_hook: bool,
) -> Result<Option<Value>, WriteError> {
    let present = match finalizer::finalizer_sync(&object, name, finalize_hook) {
        FinalizerSync::Keep => return Ok(Some(object)),
        FinalizerSync::Add => true,
        FinalizerSync::Remove => false,
    };
    let Some(updated) = finalizer::with_finalizer(&object, name, present) else {
        return Ok(Some(object));
    };
    match writer.replace(res, updated).await {
        Ok(written) => Ok(Some(written)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Watches the informer of synced objects (parents / targets): changes feed the own-writes
/// overlay, a deleted object's expectations are dropped, then `route` queues keys.
pub(crate) fn watch_owners(
    informer: &Informer,
    writer: Arc<Writer>,
    res: Arc<ApiResource>,
    route: impl Fn(&Change<DynamicObject>, Origin) + Send + Sync + 'static,
) -> HandlerId {
    informer.add_handler(Arc::new(move |change, origin| {
        writer.observe(&res, change);
        if let Change::Deleted(obj) = change {
            if let Some(uid) = obj.metadata.uid.as_ref() {
                writer.expectations().forget(uid);
            }
        }
        route(change, origin);
    }))
}

/// Leases the informer of a resource a controller writes (retained as children) and
/// watches it with [`watch_owned`].
pub(crate) fn lease_owned(
    informers: &Informers,
    writer: &Arc<Writer>,
    res: &Arc<ApiResource>,
    route: impl Fn(&Change<DynamicObject>, Origin) + Send + Sync + 'static,
) -> (metacontroller_dynamic::InformerLease, HandlerId) {
    let informer = informers.lease_keeping(res, metacontroller_dynamic::Keep::Children);
    let handler = watch_owned(&informer, writer.clone(), res.clone(), route);
    (informer, handler)
}

/// Watches the informer of objects a controller writes (children, attachments, revisions):
/// changes feed the own-writes overlay, then `route` queues keys — also for the objects
/// whose name a foreign object has just freed (a foreign object's own events map to no
/// parent, so their parents are queued here).
pub(crate) fn watch_owned(
    informer: &Informer,
    writer: Arc<Writer>,
    res: Arc<ApiResource>,
    route: impl Fn(&Change<DynamicObject>, Origin) + Send + Sync + 'static,
) -> HandlerId {
    informer.add_handler(Arc::new(move |change, origin| {
        let released = writer.observe(&res, change);
        route(change, origin);
        released.iter().for_each(|c| route(c, origin));
    }))
}
