//! Shared informers: one list+watch per resource feeding a [`Store`] and calling registered
//! handlers with every change.
//!
//! An [`Informer`] runs kube-runtime's `watcher` for `DynamicObject`s of one resource. A
//! (re)list replaces the store content atomically at `InitDone` (so handlers see deletions
//! that happened while the watch was down, e.g. after a 410 Gone), watch events update it one
//! by one. Every `flush_interval` (`--cache-flush-interval`) the cache is replayed to the
//! handlers (upstream's informer resync): an unchanged `Updated` for every object with
//! [`Origin::Relist`], which controllers queue as bulk work. No API request is made for it;
//! a full relist happens only when the watch fails.
//!
//! # Memory
//!
//! The store keeps every object as a [`CompactObject`] (its JSON plus the metadata the
//! indexes read), about a seventh of a decoded `DynamicObject` (see [`crate::compact`]).
//! Reads (`get`, `list`, `controlled_by`, ...) decode the objects they return; handlers get
//! the object the watch just decoded as the new state and a decoded copy of the cached one as
//! the old state. A (re)list keeps the listed objects compact until the list completes, and an
//! unchanged object (same resourceVersion) is kept as the cached copy, so a relist never holds
//! two copies of the cache; the changes are decoded one at a time while handlers run.
//!
//! Peak RSS of the release binary in `hack/load-composite.sh` (N parents x 3 ConfigMaps,
//! cold start): 33.5 MiB at 1,000, 40.0 MiB at 2,000, 62.4 MiB at 5,000, 99.8 MiB at
//! 10,000 (383.7 MiB before compact objects). glibc's malloc arenas are not a factor here
//! (`MALLOC_ARENA_MAX=2` changed the 10,000-parent peak by less than 1%).
//!
//! [`Informers`] shares them per resource through a [`SharedRegistry`]: the watch starts
//! with the first lease and stops when the last lease is dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;

use crate::compact::CompactObject;
use crate::discovery::{ApiResource, ResourceId};
use crate::object::{NamespacedName, Versioned};
use crate::registry::{Lease, SharedRegistry};
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

struct Shared {
    store: RwLock<Store<CompactObject>>,
    handlers: Mutex<Vec<(HandlerId, Handler)>>,
    next_handler: AtomicU64,
    synced: tokio::sync::watch::Sender<bool>,
}

impl Shared {
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
}

/// A running list+watch of one resource (all namespaces). Dropping it stops the watch.
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

fn kube_resource(r: &ApiResource) -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: r.group.clone(),
        version: r.version.clone(),
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        plural: r.name.clone(),
    }
}

impl Informer {
    /// Starts watching `resource`. Must be called inside a tokio runtime; returns at once.
    pub fn start(client: kube::Client, resource: Arc<ApiResource>, config: InformerConfig) -> Self {
        let (synced, _) = tokio::sync::watch::channel(false);
        let shared = Arc::new(Shared {
            store: RwLock::new(Store::new()),
            handlers: Mutex::new(Vec::new()),
            next_handler: AtomicU64::new(0),
            synced,
        });
        let api: Api<DynamicObject> = Api::all_with(client, &kube_resource(&resource));
        let task = tokio::spawn(run(api, shared.clone(), resource.id(), config));
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

    /// Replays the cache to the handlers as the periodic flush does (no API request).
    pub fn resync(&self) {
        resync(&self.shared);
    }

    /// Whether the first list has completed.
    pub fn has_synced(&self) -> bool {
        *self.shared.synced.borrow()
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
    pub fn resource_version(&self, key: &NamespacedName) -> Option<String> {
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

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.store().len()
    }

    /// True if nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.store().is_empty()
    }
}

async fn run(api: Api<DynamicObject>, shared: Arc<Shared>, id: ResourceId, config: InformerConfig) {
    // The watch is never restarted on purpose: kube-runtime's watcher relists by itself after
    // an error (410 Gone included). The flush interval only replays the cache.
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut flush = config.flush_interval.map(|period| {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick
    });
    // Listed objects until the list is complete, compact. An object the cache already holds at
    // the same resourceVersion is kept as the cached `Arc` and the decoded copy dropped at
    // once, so a relist does not hold a second copy of every unchanged object beside the store.
    let mut buffer: Vec<Arc<CompactObject>> = Vec::new();
    loop {
        let event = tokio::select! {
            _ = async {
                match flush.as_mut() {
                    Some(tick) => tick.tick().await,
                    None => std::future::pending().await,
                }
            } => {
                if *shared.synced.borrow() {
                    resync(&shared);
                }
                continue;
            }
            event = stream.next() => event,
        };
        let Some(event) = event else {
            // The backoff watcher never ends; if it did, nothing more would arrive.
            tracing::error!(resource = ?id, "watch stream ended");
            return;
        };
        match event {
            Ok(watcher::Event::Init) => buffer.clear(),
            Ok(watcher::Event::InitApply(obj)) => {
                let cached = shared.store().unchanged(&obj).cloned();
                match cached {
                    Some(cached) => buffer.push(cached),
                    None => buffer.extend(encode(&obj, &id).map(Arc::new)),
                }
            }
            Ok(watcher::Event::InitDone) => {
                let (changes, skipped) = shared.store_mut().replace_shared(buffer.drain(..));
                // Do not keep the list's capacity next to the store until the next relist.
                buffer = Vec::new();
                if skipped > 0 {
                    tracing::warn!(resource = ?id, skipped, "listed objects without a name");
                }
                shared.synced.send_replace(true);
                shared.notify_cached(changes, Origin::Relist);
            }
            Ok(watcher::Event::Apply(obj)) => {
                let Some(compact) = encode(&obj, &id) else {
                    continue;
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
                    Err(_) => continue,
                };
                shared.notify(&change, Origin::Watch);
            }
            Ok(watcher::Event::Delete(obj)) => {
                let removed = NamespacedName::of(&obj).and_then(|k| shared.store_mut().remove(&k));
                // As client-go's informers: the deleted object is the one the watch delivered.
                if removed.is_some() {
                    shared.notify(&Change::Deleted(Arc::new(obj)), Origin::Watch);
                }
            }
            Err(e) => tracing::warn!(resource = ?id, error = %e, "watch failed; retrying"),
        }
    }
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

/// The process-wide informers, one per resource, shared by all controllers.
#[derive(Clone)]
pub struct Informers {
    client: kube::Client,
    config: InformerConfig,
    registry: SharedRegistry<ResourceId, Informer>,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers")
            .field("resources", &self.registry.keys())
            .finish_non_exhaustive()
    }
}

impl Informers {
    /// A factory using `client`.
    pub fn new(client: kube::Client, config: InformerConfig) -> Self {
        Informers {
            client,
            config,
            registry: SharedRegistry::new(),
        }
    }

    /// The client the informers use (also fit for discovery requests).
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// A lease on the informer of `resource`, starting it if none runs. Must be called inside
    /// a tokio runtime.
    pub fn lease(&self, resource: &Arc<ApiResource>) -> Lease<ResourceId, Informer> {
        let result: Result<_, std::convert::Infallible> =
            self.registry.acquire(resource.id(), |_| {
                Ok(Informer::start(
                    self.client.clone(),
                    resource.clone(),
                    self.config.clone(),
                ))
            });
        match result {
            Ok(lease) => lease,
            Err(never) => match never {},
        }
    }

    /// Resources with a running informer.
    pub fn running(&self) -> Vec<ResourceId> {
        self.registry.keys()
    }

    /// Replays every running informer's cache to its handlers (a sharded replica that
    /// acquired shards re-queues the keys it dropped while another replica owned them).
    pub fn resync_all(&self) {
        for id in self.registry.keys() {
            if let Some(informer) = self.registry.get(&id) {
                informer.resync();
            }
        }
    }

    /// Every running informer with its cached object count and whether its first list
    /// completed (metrics, readiness).
    pub fn cache_stats(&self) -> Vec<(ResourceId, usize, bool)> {
        self.registry
            .keys()
            .into_iter()
            .filter_map(|id| {
                let informer = self.registry.get(&id)?;
                Some((id, informer.len(), informer.has_synced()))
            })
            .collect()
    }
}
