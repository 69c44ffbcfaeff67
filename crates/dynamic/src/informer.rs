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

use crate::discovery::{ApiResource, ResourceId};
use crate::object::NamespacedName;
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
    store: RwLock<Store<DynamicObject>>,
    handlers: Mutex<Vec<(HandlerId, Handler)>>,
    next_handler: AtomicU64,
    synced: tokio::sync::watch::Sender<bool>,
}

impl Shared {
    fn handlers(&self) -> std::sync::MutexGuard<'_, Vec<(HandlerId, Handler)>> {
        self.handlers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn store_mut(&self) -> std::sync::RwLockWriteGuard<'_, Store<DynamicObject>> {
        self.store.write().unwrap_or_else(|p| p.into_inner())
    }

    fn notify(&self, changes: &[Change<DynamicObject>], origin: Origin) {
        let handlers: Vec<Handler> = self.handlers().iter().map(|(_, h)| h.clone()).collect();
        for change in changes {
            for h in &handlers {
                // A panicking handler is a bug in one controller: log it and keep the watch
                // (and every other controller sharing it) running.
                let call = std::panic::AssertUnwindSafe(|| h(change, origin));
                if std::panic::catch_unwind(call).is_err() {
                    let key = NamespacedName::of(change.object().as_ref());
                    tracing::error!(object = ?key, "informer handler panicked; event skipped for it");
                }
            }
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
        let existing = self.list();
        for obj in existing {
            handler(&Change::Added(obj), Origin::Relist);
        }
        handlers.push((id, handler));
        id
    }

    /// Unregisters a handler.
    pub fn remove_handler(&self, id: HandlerId) {
        self.shared.handlers().retain(|(h, _)| *h != id);
    }

    fn store(&self) -> std::sync::RwLockReadGuard<'_, Store<DynamicObject>> {
        self.shared.store.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached object `key`.
    pub fn get(&self, key: &NamespacedName) -> Option<Arc<DynamicObject>> {
        self.store().get(key).cloned()
    }

    /// Cached objects whose controller owner reference has `uid`.
    pub fn controlled_by(&self, uid: &str) -> Vec<Arc<DynamicObject>> {
        self.store().controlled_by(uid)
    }

    /// Cached objects without a controller owner reference in `namespace` (`None`: all).
    pub fn orphans(&self, namespace: Option<&str>) -> Vec<Arc<DynamicObject>> {
        self.store().orphans(namespace)
    }

    /// Cached objects of one namespace (`""` for cluster-scoped objects).
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<DynamicObject>> {
        self.store().list_namespace(namespace)
    }

    /// All cached objects.
    pub fn list(&self) -> Vec<Arc<DynamicObject>> {
        self.store().iter().cloned().collect()
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
    // Listed objects until the list is complete. An object the cache already holds at the same
    // resourceVersion is kept as the cached `Arc` and the decoded copy dropped at once, so a
    // relist does not hold a second copy of every unchanged object beside the store.
    let mut buffer: Vec<Arc<DynamicObject>> = Vec::new();
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
                let store = shared.store.read().unwrap_or_else(|p| p.into_inner());
                buffer.push(store.share(obj));
            }
            Ok(watcher::Event::InitDone) => {
                let (changes, skipped) = shared.store_mut().replace_shared(buffer.drain(..));
                // Do not keep the list's capacity next to the store until the next relist.
                buffer = Vec::new();
                if skipped > 0 {
                    tracing::warn!(resource = ?id, skipped, "listed objects without a name");
                }
                shared.synced.send_replace(true);
                shared.notify(&changes, Origin::Relist);
            }
            Ok(watcher::Event::Apply(obj)) => {
                let change = shared.store_mut().upsert(obj);
                if let Ok(change) = change {
                    shared.notify(std::slice::from_ref(&change), Origin::Watch);
                }
            }
            Ok(watcher::Event::Delete(obj)) => {
                let change = NamespacedName::of(&obj).and_then(|k| shared.store_mut().remove(&k));
                if let Some(change) = change {
                    shared.notify(std::slice::from_ref(&change), Origin::Watch);
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
    let changes: Vec<Change<DynamicObject>> = {
        let store = shared.store.read().unwrap_or_else(|p| p.into_inner());
        store
            .iter()
            .map(|obj| Change::Updated {
                old: obj.clone(),
                new: obj.clone(),
            })
            .collect()
    };
    shared.notify(&changes, Origin::Relist);
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
