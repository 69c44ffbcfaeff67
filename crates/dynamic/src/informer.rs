//! Shared informers: one list+watch per resource feeding a [`Store`] and calling registered
//! handlers with every change.
//!
//! An [`Informer`] runs kube-runtime's `watcher` for `DynamicObject`s of one resource. A
//! (re)list replaces the store content atomically at `InitDone` (so handlers see deletions
//! that happened while the watch was down, e.g. after a 410 Gone), watch events update it one
//! by one. After a watch error the handlers see every listed object, as upstream's informers
//! do; a relist asked for ([`Informers::relist_filtered`], [`Informer::widen`]) tells them
//! only what changed. Every `flush_interval` (`--cache-flush-interval`) the cache is replayed to the
//! handlers (upstream's informer resync): an unchanged `Updated` for every object with
//! [`Origin::Relist`], which controllers queue as bulk work. No API request is made for it;
//! a full relist happens only when the watch fails.
//!
//! # Memory
//!
//! The store keeps every object as a [`CompactObject`] (its JSON plus the metadata the
//! indexes read), about a fifth to a sixth of a decoded `DynamicObject` (see [`crate::compact`]).
//! Reads (`get`, `list`, `controlled_by`, ...) decode the objects they return; handlers get
//! the object the watch just decoded as the new state and a decoded copy of the cached one as
//! the old state. A (re)list keeps the listed objects compact until the list completes, and an
//! unchanged object (same resourceVersion) is kept as the cached copy, so a relist never holds
//! two copies of the cache; the changes are decoded one at a time while handlers run.
//! Lists are read [`LIST_PAGE_SIZE`] objects at a time: kube-runtime decodes a whole page
//! before handing on its first object, so a smaller page keeps less decoded at once while a
//! replica lists (figures: docs/src/benchmarks.md, "List page size"; peak RSS by number of
//! parents: "Peak RSS by number of parents").
//!
//! [`Informers`] shares them per resource through a [`SharedRegistry`]: the watch starts
//! with the first lease and stops when the last lease is dropped. A user that needs only the
//! objects with some labels (a parent type's `labelSelector`) leases the informer of that
//! resource *and selector* ([`Informers::lease_selected`], keyed by [`InformerKey`]): the API
//! server applies the selector to its lists and watches, so the objects that do not match
//! are never sent, decoded or cached, and an object whose labels stop matching arrives as a
//! deletion. Users of the same resource without that selector share the unfiltered informer.
//!
//! # Retention (sharded replicas)
//!
//! With `--sharding` each replica syncs only the parents of the shards it owns (the sync
//! gate of `metacontroller-workqueue`), so its caches need only those parents and their
//! children. The watches stay unfiltered — the API server cannot select "the children of
//! the parents whose key hashes to shard 7" — but every object is checked against a
//! *retention filter* ([`InformerConfig::keep_keys`], the gate's `SyncGate::retains_key`)
//! before it is stored, and dropped at once if refused. The trade-off: each replica still
//! receives and decodes the full watch stream (network and CPU as one replica), but only the
//! objects it keeps cost memory, which is what grows with the number of parents.
//!
//! What a replica pays above its share of one replica's memory: the process's fixed cost,
//! the transient decode of the objects it drops, and its share being up to
//! ceil(shards / replicas) shards (`hack/load-shards.sh` measures it; figures:
//! docs/src/benchmarks.md, "Sharding").
//!
//! What a shared informer keeps is the union of what its users lease it for ([`Keep`]):
//! - [`Keep::Parents`] (parent / target types): an object whose own key
//!   (`namespace/name`, or `name` when cluster-scoped) is in a retained shard;
//! - [`Keep::Children`] (child / attachment / revision types): an object whose
//!   controller owner's key is in a retained shard (the owner is the parent: in the child's
//!   namespace, or cluster-scoped — known from the parent resources leased, see
//!   [`KeepKeys::add_cluster_parent`]); a child tracked by label instead (outside its
//!   namespaced parent's namespace, [`crate::PARENT_UID_LABEL`]) whose parent's key, from
//!   its [`crate::PARENT_ANNOTATION`], is in a retained shard; and every other object without
//!   a controller owner (orphans: candidates for adoption by any parent);
//! - [`Keep::All`] (related objects of the customize hook, CRDs, any other use): everything.
//!
//! A resource leased for a new use keeps more from then on; widening a running informer
//! relists it and marks it unsynced until that list completes, so its new user waits for it.
//!
//! Shard handoff rests on two operations the shard coordinator calls:
//! - **Acquire**: the objects of a newly acquired shard were dropped, so after reserving the
//!   shard in the gate the coordinator calls [`Informers::relist_filtered`], which restarts
//!   the watch of every filtered informer and returns once a list *started after the call*
//!   has completed (lists are quorum reads: they see every write the previous owner made
//!   before releasing the shard). Only then are the shard's keys admitted; a sync admitted
//!   earlier would see no children and create them again.
//!   A list that fails instead answers the request as [`Relisted::Failed`] and leaves that
//!   informer unsynced until a list completes: the shard is admitted, and only the controllers
//!   using that informer wait (they check that their caches are synced before each sync).
//!   A request made while a list runs does not restart it; one more list follows it.
//! - **Release**: once a released shard's syncs drained, [`Informers::prune_filtered`] drops
//!   the objects no longer retained, silently: nothing happened to them, and a delete event
//!   would tell controllers their children vanished. It then rings [`Informers::pruned`], so
//!   controllers drop what they kept for the parents that left.
//!
//! A watch event for a stored object that is no longer retained (e.g. a child re-owned to a
//! parent of another shard) removes it and is reported as `Deleted`: from this replica's
//! view the object left.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::watcher;

use crate::compact::CompactObject;
use crate::discovery::{ApiResource, ResourceId};
use crate::object::{ControllerOwner, NamespacedName, ObjectMetaAccess, Versioned};
use crate::registry::{Lease, SharedRegistry};
use crate::scope::Watched;
use crate::store::{Change, Store};

/// Where a change came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A watch event: a real change.
    Watch,
    /// A (re)list: initial list, relist after a watch error, periodic flush or handler replay.
    Relist,
}

/// A change handler. Called synchronously on the informer task: it must be quick (enqueue a
/// key, never await or block on I/O).
pub type Handler = Arc<dyn Fn(&Change<DynamicObject>, Origin) + Send + Sync>;

/// Identifies a registered handler, to remove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HandlerId(u64);

/// What a user of a shared informer needs it to keep when the process caches only its
/// share (see the module docs). An informer keeps the union of its users' needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Objects whose own key is retained (parents, decorator targets).
    Parents,
    /// Objects whose controller owner's key is retained, and orphans (children).
    Children,
    /// Every object (related objects, CRDs, anything else).
    All,
}

impl Keep {
    fn bit(self) -> u8 {
        match self {
            Keep::Parents => 1,
            Keep::Children => 2,
            Keep::All => 4,
        }
    }
}

/// The retention filter of a sharded replica: whether the caches keep the objects of a
/// queue key (`namespace/name` or `name`), and which parent kinds are cluster-scoped (a
/// namespaced child of such a parent is kept by the owner's bare name; trying the bare name
/// for every child would keep about one more replica's share of children in each replica).
#[derive(Clone)]
pub struct KeepKeys {
    key: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// `group/Kind` of the cluster-scoped resources leased as [`Keep::Parents`].
    /// A handful of entries at most: a scan compares slices and allocates nothing, which
    /// matters because every watched child is checked against it.
    cluster_parents: Arc<RwLock<Vec<(String, String)>>>,
}

impl KeepKeys {
    /// A filter from a predicate on keys.
    pub fn new(f: impl Fn(&str) -> bool + Send + Sync + 'static) -> KeepKeys {
        KeepKeys {
            key: Arc::new(f),
            cluster_parents: Default::default(),
        }
    }

    /// Records that objects of `group`/`kind` (cluster-scoped) are parents. Returns `true`
    /// if that is new (children of it may have been dropped: the caller relists).
    pub(crate) fn add_cluster_parent(&self, group: &str, kind: &str) -> bool {
        if self.is_cluster_parent(group, kind) {
            return false;
        }
        let mut parents = self
            .cluster_parents
            .write()
            .unwrap_or_else(|p| p.into_inner());
        // Checked again under the write lock: another lease may have added it meanwhile.
        if parents.iter().any(|(g, k)| g == group && k == kind) {
            return false;
        }
        parents.push((group.to_owned(), kind.to_owned()));
        true
    }

    fn is_cluster_parent(&self, group: &str, kind: &str) -> bool {
        self.cluster_parents
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|(g, k)| g == group && k == kind)
    }

    fn cluster_parent(&self, api_version: &str, kind: &str) -> bool {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        self.is_cluster_parent(group, kind)
    }

    /// Whether `obj` is kept for the use `keep`.
    #[cfg(test)]
    pub(crate) fn retains<T: ObjectMetaAccess + ControllerOwner>(
        &self,
        keep: Keep,
        obj: &T,
    ) -> bool {
        self.retains_any(keep.bit(), obj)
    }

    /// Whether `obj` is kept for one of the uses in `uses` ([`Keep::bit`]s). Generic so the
    /// same rule runs on watched objects and on cached (compact) ones when pruning.
    fn retains_any<T: ObjectMetaAccess + ControllerOwner>(&self, uses: u8, obj: &T) -> bool {
        if uses & Keep::All.bit() != 0 {
            return true;
        }
        let Some(key) = NamespacedName::of(obj) else {
            // Not storable anyway; the store reports it.
            return true;
        };
        if uses & Keep::Parents.bit() != 0 && (self.key)(&key.to_string()) {
            return true;
        }
        if uses & Keep::Children.bit() == 0 {
            return false;
        }
        let Some(owner) = obj.controller_ref() else {
            // A child tracked by label (extension: outside its parent's namespace) goes with
            // its parent's key, like an owned child; a true orphan is kept by every replica.
            return obj
                .tracking_parent()
                .is_none_or(|parent| (self.key)(parent));
        };
        // A namespaced owner is in the child's namespace; a cluster-scoped child can only
        // have cluster-scoped owners.
        if key.namespace.is_empty() || self.cluster_parent(owner.api_version, owner.kind) {
            return (self.key)(owner.name);
        }
        (self.key)(&NamespacedName::new(key.namespace.as_str(), owner.name).to_string())
    }
}

impl std::fmt::Debug for KeepKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeepKeys")
    }
}

struct Shared {
    store: RwLock<Store<CompactObject>>,
    handlers: Mutex<Vec<(HandlerId, Handler)>>,
    next_handler: AtomicU64,
    synced: tokio::sync::watch::Sender<bool>,
    /// The retention filter (`None`: keep everything).
    keep_keys: Option<KeepKeys>,
    /// The uses leased ([`Keep::bit`]s); only ever added to.
    keep: AtomicU8,
    /// Relists asked for (a counter); the task restarts the watch on each change.
    relist_requested: tokio::sync::watch::Sender<u64>,
    /// The last request whose relist completed.
    relisted: tokio::sync::watch::Sender<u64>,
    /// The last request whose list failed (an error before it completed): it is retried,
    /// but whoever waits for it is told at once (see [`Relisted::Failed`]).
    relist_failed: tokio::sync::watch::Sender<u64>,
    /// The last error of a list the cache waits for; cleared when the cache is synced.
    list_error: Mutex<Option<String>>,
    /// Objects the API server returned to this informer's lists, since it started.
    listed: AtomicU64,
}

/// How a relist asked for ([`Informers::relist_filtered`], and an informer's own relists) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relisted {
    /// A list started after the request completed: the cache holds what the retention
    /// filter kept at the request.
    Listed,
    /// The list failed before completing (e.g. the resource cannot be listed: no permission,
    /// its CRD deleted). The watch keeps retrying; until a list completes the informer reads
    /// as not synced, so its users wait for it instead of syncing from a partial cache.
    Failed,
}

impl Shared {
    fn uses(&self) -> u8 {
        self.keep.load(Ordering::Acquire)
    }

    /// Whether the store keeps `obj`.
    fn retains<T: ObjectMetaAccess + ControllerOwner>(&self, obj: &T) -> bool {
        match &self.keep_keys {
            None => true,
            Some(keys) => keys.retains_any(self.uses(), obj),
        }
    }

    /// Whether some objects may be refused.
    fn filtered(&self) -> bool {
        self.keep_keys.is_some() && self.uses() & Keep::All.bit() == 0
    }

    /// Asks for a list started after this call; resolves once one has completed, or once
    /// a list answering this request has failed.
    fn relist(&self) -> impl std::future::Future<Output = Relisted> + Send + 'static {
        let mut wanted = 0;
        self.relist_requested.send_modify(|n| {
            *n += 1;
            wanted = *n;
        });
        let mut done = self.relisted.subscribe();
        let mut failed = self.relist_failed.subscribe();
        async move {
            tokio::select! {
                // A list that completed after failing once counts as listed.
                biased;
                _ = done.wait_for(|n| *n >= wanted) => Relisted::Listed,
                _ = failed.wait_for(|n| *n >= wanted) => Relisted::Failed,
            }
        }
    }

    /// A list failed while requests up to `requested` wait for one: the cache cannot vouch
    /// for what they retained, so it reads as not synced until a list completes, and they are
    /// told now rather than when (if ever) the resource can be listed again.
    fn list_failed(&self, requested: u64) {
        if *self.relisted.borrow() >= requested || *self.relist_failed.borrow() >= requested {
            return;
        }
        self.synced.send_replace(false);
        self.relist_failed.send_replace(requested);
    }

    fn list_error(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.list_error.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn handlers(&self) -> std::sync::MutexGuard<'_, Vec<(HandlerId, Handler)>> {
        self.handlers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn store(&self) -> std::sync::RwLockReadGuard<'_, Store<CompactObject>> {
        self.store.read().unwrap_or_else(|p| p.into_inner())
    }

    fn store_mut(&self) -> std::sync::RwLockWriteGuard<'_, Store<CompactObject>> {
        self.store.write().unwrap_or_else(|p| p.into_inner())
    }

    fn handler_list(&self) -> Vec<Handler> {
        self.handlers().iter().map(|(_, h)| h.clone()).collect()
    }

    fn notify(&self, change: &Change<DynamicObject>, origin: Origin) {
        call_all(&self.handler_list(), change, origin);
    }

    /// Hands stored changes to the handlers, decoding one change at a time so a relist or
    /// resync never holds the whole cache decoded.
    fn notify_cached(
        &self,
        changes: impl IntoIterator<Item = Change<CompactObject>>,
        origin: Origin,
    ) {
        let handlers = self.handler_list();
        for change in changes {
            if let Some(change) = decode_change(&change) {
                call_all(&handlers, &change, origin);
            }
        }
    }
}

fn call_all(handlers: &[Handler], change: &Change<DynamicObject>, origin: Origin) {
    for h in handlers {
        // A panicking handler is a bug in one controller: log it and keep the watch
        // (and every other controller sharing it) running.
        let call = std::panic::AssertUnwindSafe(|| h(change, origin));
        if std::panic::catch_unwind(call).is_err() {
            let key = NamespacedName::of(change.object().as_ref());
            tracing::error!(object = ?key, "informer handler panicked; event skipped for it");
        }
    }
}

/// The cached object decoded. It was encoded from a decoded object, so this fails only on a
/// bug: logged, and the object reads as absent.
fn decode(obj: &CompactObject) -> Option<Arc<DynamicObject>> {
    match obj.decode() {
        Ok(decoded) => Some(Arc::new(decoded)),
        Err(error) => {
            let key = NamespacedName::of(obj);
            tracing::error!(object = ?key, %error, "cached object does not decode; skipped");
            None
        }
    }
}

fn decode_all(objects: Vec<Arc<CompactObject>>) -> Vec<Arc<DynamicObject>> {
    objects.iter().filter_map(|o| decode(o)).collect()
}

/// A stored change decoded; an unchanged replay (`old` and `new` the same stored object)
/// stays one shared object.
fn decode_change(change: &Change<CompactObject>) -> Option<Change<DynamicObject>> {
    Some(match change {
        Change::Added(o) => Change::Added(decode(o)?),
        Change::Deleted(o) => Change::Deleted(decode(o)?),
        Change::Updated { old, new } if Arc::ptr_eq(old, new) => {
            let obj = decode(new)?;
            Change::Updated {
                old: obj.clone(),
                new: obj,
            }
        }
        Change::Updated { old, new } => Change::Updated {
            old: decode(old)?,
            new: decode(new)?,
        },
    })
}

/// `obj` in the stored form; `None` (logged) if it cannot be encoded.
fn encode(obj: &DynamicObject, id: &ResourceId) -> Option<CompactObject> {
    match CompactObject::encode(obj) {
        Ok(compact) => Some(compact),
        Err(error) => {
            let key = NamespacedName::of(obj);
            tracing::error!(resource = ?id, object = ?key, %error, "object not cached");
            None
        }
    }
}

/// Informer settings.
#[derive(Debug, Clone, Default)]
pub struct InformerConfig {
    /// Resync period (`--cache-flush-interval`): the cache is replayed to the handlers, no
    /// API request is made; `None` never resyncs.
    pub flush_interval: Option<Duration>,
    /// The retention filter of a sharded replica (`None`: keep every object).
    pub keep_keys: Option<KeepKeys>,
    /// Runs the informer drivers, so that one ending or panicking stops the process
    /// (`None`: plain tasks, as in tests and one-shot commands).
    pub supervisor: Option<crate::Supervisor>,
    /// `--watch-namespaces`: namespaced resources are watched in these namespaces only, and
    /// cluster-scoped ones only where the scope allows (`None`: everything, cluster-wide).
    pub scope: Option<Arc<crate::WatchScope>>,
    /// Cuts reconnect waits short once the API server is back (`None`: one per informer;
    /// [`Informers`] shares one among its informers).
    pub reconnect: Option<crate::ReconnectProbe>,
}

/// A running list+watch of one resource (all namespaces, or one watch per namespace of
/// [`InformerConfig::scope`]). Dropping it stops the watch.
pub struct Informer {
    resource: Arc<ApiResource>,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Informer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("resource", &self.resource.id())
            .finish_non_exhaustive()
    }
}

impl Drop for Informer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Informer {
    /// Starts watching `resource`, keeping what `keep` says when `config` has a retention
    /// filter; with `label_selector` (the server's string form) only the objects it matches:
    /// the API server filters lists and watches, and an object whose labels stop matching
    /// arrives as deleted.
    pub(crate) fn start_selected(
        client: kube::Client,
        resource: Arc<ApiResource>,
        config: InformerConfig,
        keep: Keep,
        label_selector: Option<String>,
    ) -> Self {
        let (synced, _) = tokio::sync::watch::channel(false);
        let shared = Arc::new(Shared {
            store: RwLock::new(Store::default()),
            handlers: Mutex::new(Vec::new()),
            next_handler: AtomicU64::new(0),
            synced,
            keep_keys: config.keep_keys.clone(),
            keep: AtomicU8::new(keep.bit()),
            relist_requested: tokio::sync::watch::channel(0).0,
            relisted: tokio::sync::watch::channel(0).0,
            relist_failed: tokio::sync::watch::channel(0).0,
            list_error: Mutex::new(None),
            listed: AtomicU64::new(0),
        });
        let id = resource.id();
        let apis = match crate::scope::watched(config.scope.as_deref(), &resource) {
            Watched::All => vec![(String::new(), Api::all_with(client, &resource.to_kube()))],
            Watched::Namespaces(namespaces) => namespaces
                .into_iter()
                .map(|ns| {
                    let api = Api::namespaced_with(client.clone(), &ns, &resource.to_kube());
                    (ns, api)
                })
                .collect(),
            Watched::Nothing => {
                // Cluster-scoped and outside the scope: listing it would only be refused. Its
                // users see an empty, synced cache.
                tracing::warn!(resource = ?id, "cluster-scoped resource not watched: the process is limited to --watch-namespaces");
                shared.synced.send_replace(true);
                Vec::new()
            }
        };
        let task = match (config.supervisor.clone(), apis.is_empty()) {
            // Nothing to drive; a task that never ends keeps `Drop` uniform.
            (_, true) => tokio::spawn(std::future::pending()),
            (Some(supervisor), false) => {
                let name = match &label_selector {
                    None => format!("informer/{}/{}", id.api_version, id.resource),
                    Some(s) => format!("informer/{}/{}?{s}", id.api_version, id.resource),
                };
                let driver = run(apis, shared.clone(), id, config, label_selector);
                supervisor.spawn(name, driver)
            }
            (None, false) => tokio::spawn(run(apis, shared.clone(), id, config, label_selector)),
        };
        Informer {
            resource,
            shared,
            task,
        }
    }

    /// The resource watched.
    pub fn resource(&self) -> &Arc<ApiResource> {
        &self.resource
    }

    /// Replays to the handlers, as [`resync`](Self::resync) does, only the cached objects
    /// leased as parents ([`Keep::Parents`]) whose own key satisfies `key`. After a replica
    /// admits newly acquired shards it queues their parents this way; replaying everything
    /// would queue every parent it already syncs again (one hook call each).
    pub(crate) fn resync_parents(&self, key: &dyn Fn(&str) -> bool) {
        if self.shared.uses() & Keep::Parents.bit() == 0 {
            return;
        }
        let cached: Vec<Arc<CompactObject>> = self
            .shared
            .store()
            .iter()
            .filter(|obj| NamespacedName::of(obj.as_ref()).is_some_and(|k| key(&k.to_string())))
            .cloned()
            .collect();
        let changes = cached.into_iter().map(|obj| Change::Updated {
            old: obj.clone(),
            new: obj,
        });
        self.shared.notify_cached(changes, Origin::Relist);
    }

    /// Whether this informer keeps what the use `keep` needs.
    #[cfg(test)]
    pub(crate) fn keeps(&self, keep: Keep) -> bool {
        self.shared.uses() & (keep.bit() | Keep::All.bit()) != 0
    }

    /// Keeps what `keep` needs too from now on. If that is new and a retention filter
    /// applies, the dropped objects are listed again: the informer reads as not synced until
    /// that list completes, so a new user waiting for it sees them all.
    pub(crate) fn widen(&self, keep: Keep) {
        let before = self.shared.keep.fetch_or(keep.bit(), Ordering::AcqRel);
        let new = before & (keep.bit() | Keep::All.bit()) == 0;
        if new && self.shared.keep_keys.is_some() {
            self.shared.synced.send_replace(false);
            // Completion shows in `synced`.
            drop(self.shared.relist());
        }
    }

    /// Asks for a list started after this call (restarting the watch, or after the list
    /// running now); resolves once one has completed or failed.
    pub(crate) fn relist(&self) -> impl std::future::Future<Output = Relisted> + Send + 'static {
        self.shared.relist()
    }

    /// Drops the cached objects the retention filter refuses now, without telling the
    /// handlers (see the module docs). Returns how many were dropped.
    pub(crate) fn prune(&self) -> usize {
        if !self.shared.filtered() {
            return 0;
        }
        let shared = &self.shared;
        shared.store_mut().retain(|obj| shared.retains(obj))
    }

    /// Whether the first list has completed.
    pub fn has_synced(&self) -> bool {
        *self.shared.synced.borrow()
    }

    /// Why the cache is not synced: the last error of the list it waits for (no permission
    /// to list, the resource no longer served, ...). `None` once synced, and while a list
    /// runs without having failed.
    pub fn list_error(&self) -> Option<String> {
        if self.has_synced() {
            return None;
        }
        self.shared.list_error().clone()
    }

    /// Waits until the first list has completed.
    pub async fn wait_synced(&self) {
        let mut rx = self.shared.synced.subscribe();
        // The sender lives in `shared`, which we hold, so this cannot fail.
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Registers `handler` and replays the current content to it as `Added` / `Relist`, so a
    /// late subscriber sees every object once.
    pub fn add_handler(&self, handler: Handler) -> HandlerId {
        let id = HandlerId(self.shared.next_handler.fetch_add(1, Ordering::Relaxed));
        // Hold the handler list while replaying so no change slips between replay and
        // registration (a change may be seen twice, which handlers tolerate).
        let mut handlers = self.shared.handlers();
        let existing: Vec<Arc<CompactObject>> = self.store().iter().cloned().collect();
        for obj in existing {
            if let Some(obj) = decode(&obj) {
                handler(&Change::Added(obj), Origin::Relist);
            }
        }
        handlers.push((id, handler));
        id
    }

    /// Unregisters a handler.
    pub fn remove_handler(&self, id: HandlerId) {
        self.shared.handlers().retain(|(h, _)| *h != id);
    }

    fn store(&self) -> std::sync::RwLockReadGuard<'_, Store<CompactObject>> {
        self.shared.store()
    }

    // Reads copy the stored `Arc`s under the lock and decode after releasing it.

    /// The cached object `key` (decoded: each call returns a fresh copy).
    pub fn get(&self, key: &NamespacedName) -> Option<Arc<DynamicObject>> {
        let cached = self.store().get(key).cloned()?;
        decode(&cached)
    }

    /// The resourceVersion of the cached object `key`, without decoding it (to skip work
    /// already done for that version).
    pub(crate) fn resource_version(&self, key: &NamespacedName) -> Option<String> {
        let store = self.store();
        store.get(key)?.resource_version().map(str::to_string)
    }

    /// Cached objects whose controller owner reference has `uid`.
    pub fn controlled_by(&self, uid: &str) -> Vec<Arc<DynamicObject>> {
        let cached = self.store().controlled_by(uid);
        decode_all(cached)
    }

    /// Cached objects without a controller owner reference in `namespace` (`None`: all).
    pub fn orphans(&self, namespace: Option<&str>) -> Vec<Arc<DynamicObject>> {
        let cached = self.store().orphans(namespace);
        decode_all(cached)
    }

    /// Cached objects of one namespace (`""` for cluster-scoped objects).
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<DynamicObject>> {
        let cached = self.store().list_namespace(namespace);
        decode_all(cached)
    }

    /// All cached objects.
    pub fn list(&self) -> Vec<Arc<DynamicObject>> {
        let cached: Vec<Arc<CompactObject>> = self.store().iter().cloned().collect();
        decode_all(cached)
    }

    /// Whether the cache holds `key` (no decoding).
    pub fn contains(&self, key: &NamespacedName) -> bool {
        self.store().get(key).is_some()
    }

    /// The uids of the cached objects (no decoding).
    pub fn uids(&self) -> std::collections::HashSet<String> {
        self.store()
            .iter()
            .filter_map(|obj| obj.uid().map(str::to_owned))
            .collect()
    }

    /// Number of cached objects.
    pub(crate) fn len(&self) -> usize {
        self.store().len()
    }

    /// Objects the API server returned to this informer's lists so far (every page of the
    /// first list and of each relist).
    pub fn listed_objects(&self) -> u64 {
        self.shared.listed.load(Ordering::Relaxed)
    }

    /// True if nothing is cached.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.store().is_empty()
    }
}

/// Objects per list request. kube-runtime's default (500) decodes a whole page before the
/// first object is handed on, and a decoded object costs about seven times its JSON (see
/// [`crate::CompactObject`]), so every informer that lists would hold five times as many
/// decoded objects at once.
pub(crate) const LIST_PAGE_SIZE: u32 = 100;

/// One watch event and the scope it came from: a namespace, or `""` for a cluster-wide watch.
type Scoped = (
    String,
    Result<watcher::Event<DynamicObject>, watcher::Error>,
);

/// The lists in progress: the listed objects of each watch until its list is complete
/// (compact; an object the cache already holds at the same resourceVersion is kept as the
/// cached `Arc` and the decoded copy dropped at once, so a relist does not hold a second copy
/// of every unchanged object beside the store), and the watches whose list a relist request
/// (or the first list) still waits for.
struct Lists {
    buffers: std::collections::HashMap<String, Vec<Arc<CompactObject>>>,
    waiting: std::collections::HashSet<String>,
    /// The relist request these lists answer once all are complete.
    answers: u64,
    /// Whether these lists were asked for (shards acquired, a use widened) rather than
    /// forced by a watch error. Such a list tells the handlers only what changed:
    /// replaying every unchanged object would queue every parent this replica already syncs
    /// (one hook call each) whenever it takes over a shard. After a watch error every object
    /// is replayed, as upstream's informers do.
    asked_for: bool,
    /// Another relist was asked for while these lists ran: one more list follows them.
    more: bool,
}

impl Lists {
    fn new(scopes: &[String], answers: u64, asked_for: bool) -> Lists {
        Lists {
            buffers: Default::default(),
            waiting: scopes.iter().cloned().collect(),
            answers,
            asked_for,
            more: false,
        }
    }
}

/// The informer's driver: feeds the watch events into the cache and the handlers, replays
/// the cache every flush interval, and restarts the watch when a relist is asked for.
async fn run(
    apis: Vec<(String, Api<DynamicObject>)>,
    shared: Arc<Shared>,
    id: ResourceId,
    config: InformerConfig,
    label_selector: Option<String>,
) {
    let watch_config = match &label_selector {
        None => watcher::Config::default(),
        Some(selector) => watcher::Config::default().labels(selector),
    }
    .page_size(LIST_PAGE_SIZE);
    // The watch is restarted only when a relist is asked for (a sharded replica acquired
    // shards): kube-runtime's watcher relists by itself after an error (410 Gone included).
    // The flush interval only replays the cache.
    let scopes: Vec<String> = apis.iter().map(|(scope, _)| scope.clone()).collect();
    let probe = match (&config.reconnect, apis.first()) {
        (Some(probe), _) => probe.clone(),
        (None, Some((_, api))) => crate::ReconnectProbe::new(api.clone().into_client()),
        (None, None) => return,
    };
    let mut stream = watch_all(&apis, &watch_config, &probe);
    let mut requests = shared.relist_requested.subscribe();
    let mut lists = Lists::new(&scopes, *requests.borrow_and_update(), false);
    let mut flush = flush_timer(config.flush_interval);
    loop {
        let event = tokio::select! {
            _ = next_tick(flush.as_mut()) => {
                if *shared.synced.borrow() {
                    resync(&shared);
                }
                continue;
            }
            changed = requests.changed() => {
                if changed.is_ok() {
                    if lists.waiting.is_empty() {
                        let answers = *requests.borrow_and_update();
                        stream = watch_all(&apis, &watch_config, &probe);
                        lists = Lists::new(&scopes, answers, true);
                    } else {
                        // The running lists started before this request, so they may lack
                        // what it needs kept: one more list follows them. Restarting them
                        // instead would never complete under a stream of requests.
                        requests.borrow_and_update();
                        lists.more = true;
                    }
                } else {
                    // The informer is gone (the sender lives in `shared`): cannot happen
                    // while we hold `shared`.
                    std::future::pending::<()>().await;
                }
                continue;
            }
            event = stream.next() => event,
        };
        let Some((scope, event)) = event else {
            // The backoff watchers never end; if they did, nothing more would arrive.
            tracing::error!(resource = ?id, "watch stream ended");
            return;
        };
        handle_event(&shared, &id, &mut lists, scope, event);
        if lists.more && lists.waiting.is_empty() {
            let answers = *requests.borrow_and_update();
            stream = watch_all(&apis, &watch_config, &probe);
            lists = Lists::new(&scopes, answers, true);
        }
    }
}

/// A fresh watch of every scope (with --watch-namespaces there is one watch per namespace),
/// each listing in pages and retrying with backoff, merged into one stream.
fn watch_all(
    apis: &[(String, Api<DynamicObject>)],
    config: &watcher::Config,
    probe: &crate::ReconnectProbe,
) -> BoxStream<'static, Scoped> {
    let streams = apis.iter().map(|(scope, api)| {
        let scope = scope.clone();
        probe
            .clone()
            .with_backoff(watcher(api.clone(), config.clone()).boxed())
            .map(move |event| (scope.clone(), event))
            .boxed()
    });
    futures::stream::select_all(streams).boxed()
}

/// The timer of the cache replays: first tick one period from now; a late tick delays the
/// following ones rather than bursting.
fn flush_timer(period: Option<Duration>) -> Option<tokio::time::Interval> {
    period.map(|period| {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick
    })
}

/// Waits for the next flush tick; forever without a flush interval.
async fn next_tick(flush: Option<&mut tokio::time::Interval>) {
    match flush {
        Some(tick) => {
            tick.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Applies one watch event of `scope` to the cache and hands the changes to the handlers.
fn handle_event(
    shared: &Shared,
    id: &ResourceId,
    lists: &mut Lists,
    scope: String,
    event: Result<watcher::Event<DynamicObject>, watcher::Error>,
) {
    match event {
        Ok(watcher::Event::Init) => {
            lists.buffers.insert(scope, Vec::new());
        }
        Ok(watcher::Event::InitApply(obj)) => listed(shared, id, lists, scope, obj),
        Ok(watcher::Event::InitDone) => scope_listed(shared, id, lists, &scope),
        Ok(watcher::Event::Apply(obj)) => applied(shared, id, obj),
        Ok(watcher::Event::Delete(obj)) => {
            let removed = NamespacedName::of(&obj).and_then(|k| shared.store_mut().remove(&k));
            // As client-go's informers: the deleted object is the one the watch delivered.
            if removed.is_some() {
                shared.notify(&Change::Deleted(Arc::new(obj)), Origin::Watch);
            }
        }
        Err(e) => {
            tracing::warn!(resource = ?id, error = %e, "watch failed; retrying");
            if !lists.waiting.is_empty() {
                *shared.list_error() = Some(list_error_text(&e));
                shared.list_failed(*shared.relist_requested.borrow());
            }
        }
    }
}

/// What a failed list says to a user: the API server's own message, code and reason when it
/// answered (the error's `Display` adds the whole `Status` as debug output), else the error.
fn list_error_text(error: &watcher::Error) -> String {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status,
        _ => return error.to_string(),
    };
    format!("{} ({} {})", status.message, status.code, status.reason)
}

/// A list of `scope` delivered `obj`: buffered (as the cached `Arc` when unchanged) until
/// the list is complete, unless the retention filter drops it.
fn listed(shared: &Shared, id: &ResourceId, lists: &mut Lists, scope: String, obj: DynamicObject) {
    shared.listed.fetch_add(1, Ordering::Relaxed);
    if !shared.retains(&obj) {
        return;
    }
    let cached = shared.store().unchanged(&obj).cloned();
    let buffer = lists.buffers.entry(scope).or_default();
    match cached {
        Some(cached) => buffer.push(cached),
        None => buffer.extend(encode(&obj, id).map(Arc::new)),
    }
}

/// The list of `scope` is complete: its objects replace the cached ones. Once every
/// awaited list is complete the cache counts as synced and the relist request is answered
/// (after the handlers got the changes).
fn scope_listed(shared: &Shared, id: &ResourceId, lists: &mut Lists, scope: &str) {
    let buffer = lists.buffers.remove(scope).unwrap_or_default();
    let changes = list_done(shared, id, scope, buffer, lists.asked_for);
    lists.waiting.remove(scope);
    let complete = lists.waiting.is_empty();
    if complete {
        lists.asked_for = false;
        // With another list to follow, what was asked for meanwhile is not in yet.
        if !lists.more {
            *shared.list_error() = None;
            shared.synced.send_replace(true);
        }
    }
    shared.notify_cached(changes, Origin::Relist);
    if complete {
        shared.relisted.send_replace(lists.answers);
    }
}

/// A watch's list is complete: its objects replace the cached ones of its scope (a namespace,
/// or everything for `""`). Returns the changes to hand to the handlers.
fn list_done(
    shared: &Shared,
    id: &ResourceId,
    scope: &str,
    mut buffer: Vec<Arc<CompactObject>>,
    asked_for: bool,
) -> Vec<Change<CompactObject>> {
    let (mut changes, skipped) = {
        let mut store = shared.store_mut();
        // Objects of shards released meanwhile go silently; whatever else the list lacks
        // was deleted.
        store.retain(|obj| shared.retains(obj));
        buffer.retain(|obj| shared.retains(obj.as_ref()));
        let namespace = Some(scope).filter(|s| !s.is_empty());
        store.replace_shared_in(namespace, buffer)
    };
    if asked_for {
        // An unchanged object is the cached `Arc` itself (see `Lists`).
        changes.retain(|c| !matches!(c, Change::Updated { old, new } if Arc::ptr_eq(old, new)));
    }
    if skipped > 0 {
        tracing::warn!(resource = ?id, skipped, "listed objects without a name");
    }
    changes
}

/// A watch event added or changed `obj`.
fn applied(shared: &Shared, id: &ResourceId, obj: DynamicObject) {
    if !shared.retains(&obj) {
        // Not ours (any more): forget it if we held it; from this replica's view it left, and
        // handlers see the object the watch delivered.
        let removed = NamespacedName::of(&obj).and_then(|k| shared.store_mut().remove(&k));
        if removed.is_some() {
            shared.notify(&Change::Deleted(Arc::new(obj)), Origin::Watch);
        }
        return;
    }
    let Some(compact) = encode(&obj, id) else {
        return;
    };
    let change = shared.store_mut().upsert(compact);
    // Handlers get the object just decoded by the watch as the new state.
    let new = Arc::new(obj);
    let change = match change {
        Ok(Change::Updated { old, .. }) => match decode(&old) {
            Some(old) => Change::Updated { old, new },
            None => Change::Added(new),
        },
        Ok(_) => Change::Added(new),
        Err(_) => return,
    };
    shared.notify(&change, Origin::Watch);
}

/// Upstream's informer resync: every cached object is handed to the handlers again as an
/// unchanged `Updated` (`old` and `new` are the same object) with [`Origin::Relist`], from
/// the cache and without any API request. Controllers resync parents from it as bulk work.
fn resync(shared: &Shared) {
    let cached: Vec<Arc<CompactObject>> = shared.store().iter().cloned().collect();
    let changes = cached.into_iter().map(|obj| Change::Updated {
        old: obj.clone(),
        new: obj,
    });
    shared.notify_cached(changes, Origin::Relist);
}

/// What identifies a shared informer: its resource and the label selector the API server
/// applies to its lists and watches (`None`: every object of the resource). Controllers
/// whose parents are selected by the same labels share one; everyone else shares the
/// unfiltered one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InformerKey {
    /// The resource watched.
    pub resource: ResourceId,
    /// The `labelSelector=` sent with every list and watch, in the server's string form.
    pub label_selector: Option<String>,
}

/// A lease on a shared informer.
pub type InformerLease = Lease<InformerKey, Informer>;

/// What one running informer holds (metrics, readiness).
#[derive(Debug, Clone)]
pub struct CacheStats {
    /// Which informer.
    pub key: InformerKey,
    /// Objects in its cache.
    pub cached: usize,
    /// Objects its lists returned so far.
    pub listed: u64,
    /// Whether its first list completed.
    pub synced: bool,
}

/// The process-wide informers, one per resource and server-side label selector, shared by
/// all controllers.
#[derive(Clone)]
pub struct Informers {
    client: kube::Client,
    config: InformerConfig,
    registry: SharedRegistry<InformerKey, Informer>,
    /// Counts [`Informers::prune_filtered`] calls, for [`Informers::pruned`].
    pruned: Arc<tokio::sync::watch::Sender<u64>>,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers")
            .field("resources", &self.registry.keys())
            .finish_non_exhaustive()
    }
}

impl Informers {
    /// The supervisor of the process's background tasks, if any (see
    /// [`InformerConfig::supervisor`]): the controllers run their own tasks under it.
    pub fn supervisor(&self) -> Option<&crate::Supervisor> {
        self.config.supervisor.as_ref()
    }

    /// A factory using `client`.
    pub fn new(client: kube::Client, mut config: InformerConfig) -> Self {
        if config.reconnect.is_none() {
            config.reconnect = Some(crate::ReconnectProbe::new(client.clone()));
        }
        Informers {
            client,
            config,
            registry: SharedRegistry::new(),
            pruned: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }

    /// The client the informers use (also fit for discovery requests).
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The reconnect probe the informers share, for other watches of the same server.
    pub fn reconnect_probe(&self) -> crate::ReconnectProbe {
        match &self.config.reconnect {
            Some(probe) => probe.clone(),
            None => crate::ReconnectProbe::new(self.client.clone()),
        }
    }

    /// The namespaces the informers are limited to (`--watch-namespaces`; `None`: all).
    pub fn scope(&self) -> Option<&crate::WatchScope> {
        self.config.scope.as_deref()
    }

    /// A lease on the informer of `resource` keeping every object, starting it if none runs.
    /// Must be called inside a tokio runtime.
    pub fn lease(&self, resource: &Arc<ApiResource>) -> InformerLease {
        self.lease_keeping(resource, Keep::All)
    }

    /// A lease on the informer of `resource` for a user that needs only what `keep` says
    /// (see the module docs; without a retention filter everything is kept).
    pub fn lease_keeping(&self, resource: &Arc<ApiResource>, keep: Keep) -> InformerLease {
        self.lease_selected(resource, keep, None)
    }

    /// A lease on the informer of the objects of `resource` that `label_selector` (the
    /// server's string form, e.g. [`crate::Selector::server_query`]) matches, as
    /// [`lease_keeping`](Self::lease_keeping) otherwise. The API server filters: the cache
    /// holds only matching objects, and one whose labels stop matching is seen as deleted.
    pub fn lease_selected(
        &self,
        resource: &Arc<ApiResource>,
        keep: Keep,
        label_selector: Option<String>,
    ) -> InformerLease {
        let key = InformerKey {
            resource: resource.id(),
            label_selector,
        };
        let result: Result<_, std::convert::Infallible> = self.registry.acquire(key, |key| {
            Ok(Informer::start_selected(
                self.client.clone(),
                resource.clone(),
                self.config.clone(),
                keep,
                key.label_selector.clone(),
            ))
        });
        let lease = match result {
            Ok(lease) => lease,
            Err(never) => match never {},
        };
        lease.widen(keep);
        if let (Keep::Parents, false, Some(keys)) =
            (keep, resource.namespaced, self.config.keep_keys.as_ref())
        {
            if keys.add_cluster_parent(&resource.group, &resource.kind) {
                // Children of these parents may have been dropped by a running informer.
                for informer in self.filtered() {
                    informer.shared.synced.send_replace(false);
                    drop(informer.relist());
                }
            }
        }
        lease
    }

    fn filtered(&self) -> Vec<Arc<Informer>> {
        self.registry
            .keys()
            .into_iter()
            .filter_map(|id| self.registry.get(&id))
            .filter(|informer| informer.shared.filtered())
            .collect()
    }

    /// Asks every informer with a retention filter for a list started after this call (a
    /// sharded replica acquired shards, see the module docs); resolves once each has
    /// completed one, or failed to: [`Relisted::Failed`] if any failed (that informer reads
    /// as not synced until it lists, so only its users wait, not every shard takeover).
    pub fn relist_filtered(&self) -> impl std::future::Future<Output = Relisted> + Send + 'static {
        let waits: Vec<_> = self
            .filtered()
            .iter()
            .map(|informer| {
                let id = informer.resource().id();
                let relist = informer.relist();
                async move { (id, relist.await) }
            })
            .collect();
        async move {
            let mut outcome = Relisted::Listed;
            for (id, relisted) in futures::future::join_all(waits).await {
                if relisted == Relisted::Failed {
                    tracing::warn!(resource = ?id, "relist failed: the controllers using this resource wait until it can be listed");
                    outcome = Relisted::Failed;
                }
            }
            outcome
        }
    }

    /// Drops from every filtered informer the objects no longer retained, silently (a
    /// sharded replica released shards), then tells [`Informers::pruned`] subscribers.
    /// Returns how many were dropped.
    pub fn prune_filtered(&self) -> usize {
        let pruned = self.filtered().iter().map(|i| i.prune()).sum();
        self.pruned.send_modify(|n| *n = n.wrapping_add(1));
        pruned
    }

    /// Changes after every [`Informers::prune_filtered`]: the objects of released shards
    /// left the caches without events, so whoever keeps state about them (controllers'
    /// per-parent caches) drops it then.
    pub fn pruned(&self) -> tokio::sync::watch::Receiver<u64> {
        self.pruned.subscribe()
    }

    /// Cached objects of the resources leased as parents ([`Keep::Parents`]) whose own key
    /// (`namespace/name`, or `name`) satisfies `key`: a sharded replica's parents in its
    /// owned shards. Read from the caches, so deletions and pruned shards count at once.
    pub fn count_parents(&self, key: impl Fn(&str) -> bool) -> usize {
        self.registry
            .keys()
            .into_iter()
            .filter_map(|id| self.registry.get(&id))
            .filter(|informer| informer.shared.uses() & Keep::Parents.bit() != 0)
            .map(|informer| {
                informer
                    .store()
                    .iter()
                    .filter(|obj| {
                        NamespacedName::of(obj.as_ref()).is_some_and(|k| key(&k.to_string()))
                    })
                    .count()
            })
            .sum()
    }

    /// Resources with a running informer (once per informer: a resource watched unfiltered
    /// and with a label selector is listed twice).
    pub fn running(&self) -> Vec<ResourceId> {
        self.registry
            .keys()
            .into_iter()
            .map(|k| k.resource)
            .collect()
    }

    /// `Informer::resync_parents` on every running informer.
    pub fn resync_parents(&self, key: impl Fn(&str) -> bool) {
        for id in self.registry.keys() {
            if let Some(informer) = self.registry.get(&id) {
                informer.resync_parents(&key);
            }
        }
    }

    /// What every running informer holds (metrics, readiness).
    pub fn cache_stats(&self) -> Vec<CacheStats> {
        self.registry
            .keys()
            .into_iter()
            .filter_map(|key| {
                let informer = self.registry.get(&key)?;
                Some(CacheStats {
                    cached: informer.len(),
                    listed: informer.listed_objects(),
                    synced: informer.has_synced(),
                    key,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(namespace: Option<&str>, name: &str, owner: Option<&str>) -> DynamicObject {
        let mut v = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": name}});
        if let Some(ns) = namespace {
            v["metadata"]["namespace"] = json!(ns);
        }
        if let Some(owner) = owner {
            v["metadata"]["ownerReferences"] = json!([
                {"apiVersion": "v1", "kind": "Y", "name": "not-the-controller", "uid": "u0"},
                {"apiVersion": "v1", "kind": "P", "name": owner, "uid": "u1", "controller": true}
            ]);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn retention_rules_per_use() {
        let keys = KeepKeys::new(|key| matches!(key, "ns/mine" | "cluster-mine" | "mine"));
        let parent = object(Some("ns"), "mine", None);
        let other_parent = object(Some("ns"), "theirs", None);
        let child = object(Some("ns"), "c", Some("mine"));
        let other_child = object(Some("ns"), "c", Some("theirs"));
        // A namespaced child of a cluster-scoped parent: the owner's bare name.
        let child_of_cluster_parent = object(Some("ns"), "c", Some("cluster-mine"));
        // The bare name of a namespaced owner is another parent's key (another shard).
        let child_of_theirs = object(Some("other"), "c", Some("mine"));
        let cluster_child = object(None, "c", Some("cluster-mine"));
        let orphan = object(Some("ns"), "o", None);
        let tracked = |annotation: &str| -> DynamicObject {
            serde_json::from_value(json!({"metadata": {"name": "t", "namespace": "other",
                "labels": {crate::PARENT_UID_LABEL: "u1"},
                "annotations": {crate::PARENT_ANNOTATION: annotation}}}))
            .unwrap()
        };

        assert!(keys.retains(Keep::Parents, &parent));
        assert!(!keys.retains(Keep::Parents, &other_parent));
        assert!(
            !keys.retains(Keep::Parents, &child),
            "parents keep no children"
        );
        assert!(!keys.retains(Keep::Parents, &orphan));

        assert!(keys.retains(Keep::Children, &parent), "an orphan");
        assert!(keys.retains(Keep::Children, &child));
        // A child's own key says nothing about its parent's shard.
        let own_key_mine = object(Some("ns"), "mine", Some("theirs"));
        assert!(!keys.retains(Keep::Children, &own_key_mine));
        assert!(keys.retains_any(Keep::Children.bit() | Keep::Parents.bit(), &own_key_mine));
        assert!(!keys.retains(Keep::Children, &other_child));
        assert!(
            !keys.retains(Keep::Children, &child_of_cluster_parent),
            "P is not known to be cluster-scoped"
        );
        assert!(keys.retains(Keep::Children, &cluster_child));
        assert!(!keys.retains(Keep::Children, &child_of_theirs));
        assert!(keys.add_cluster_parent("", "P"));
        assert!(!keys.add_cluster_parent("", "P"));
        assert!(keys.retains(Keep::Children, &child_of_cluster_parent));
        assert!(
            keys.retains(Keep::Children, &orphan),
            "orphans may be adopted"
        );
        // Children elsewhere go with their parent's shard, by the annotation's key.
        assert!(keys.retains(Keep::Children, &tracked("ns/mine")));
        assert!(!keys.retains(Keep::Children, &tracked("ns/theirs")));
        assert!(!keys.retains(Keep::Parents, &tracked("ns/mine")));
        assert!(
            keys.retains(Keep::Children, &tracked("mine")),
            "not a namespaced parent's key: an orphan"
        );

        for o in [&other_parent, &other_child] {
            assert!(keys.retains(Keep::All, o));
        }
    }
}

#[cfg(test)]
mod server_tests;
