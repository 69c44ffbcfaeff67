//! A per-controller work queue of keys (client-go `workqueue` semantics, with two priorities).
//!
//! Guarantees:
//! - **De-duplication**: a key waiting in the queue is held once however often it is added.
//! - **One worker per key**: a key handed to a worker is *processing* until [`WorkQueue::done`];
//!   adding it meanwhile marks it *dirty* and it is queued again when the current run ends.
//! - **Two priorities**: [`Priority::Event`] keys are always handed out before
//!   [`Priority::Bulk`] keys (resync / relist), so a cache flush never starves a real change.
//!   Adding a key as `Event` while it waits as `Bulk` promotes it. The priority is strict:
//!   bulk keys wait as long as event keys keep arriving (resyncs are the deferrable work).
//! - **Expedited keys**: a key of a shard the gate expedites ([`SyncGate::expedites_key`]: a
//!   shard just taken over from a replica that died) goes ahead of both, whatever its
//!   priority, while the gate says so. Its parents have had no owner since the death, and
//!   the follow-ups of their syncs (their children's watch events) must not queue behind this
//!   replica's own backlog either, or the takeover takes as long as that backlog.
//! - **Backoff**: [`WorkQueue::add_rate_limited`] requeues after a per-key exponential delay
//!   (5 ms doubling, capped at 1000 s, like client-go's per-item limiter); [`WorkQueue::forget`]
//!   resets it.
//! - **Delayed adds**: [`WorkQueue::add_after`] keeps one pending deadline per key; an earlier
//!   deadline replaces a later one, a later one never postpones an earlier one. A delay
//!   beyond [`MAX_DELAY`] is capped, never dropped.
//! - **Gate**: [`WorkQueue::set_gate`] puts the process's [`SyncGate`] (leader election,
//!   shutdown) in front of the workers of [`WorkQueue::run`]. With a sharded gate a key of a
//!   shard this replica does not own is dropped (forgotten, not synced) instead of waiting.
//! - **Shutdown**: [`WorkQueue::shut_down`] refuses new keys and drops pending delays; workers
//!   still receive the keys already queued, then [`WorkQueue::get`] returns `None`.
//!
//! Time is `tokio::time`, so tests run on paused time.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::FutureExt;

pub use crate::queue_metrics::QueueMetrics;
use crate::queue_metrics::{BoundQueueMetrics, ReconcileResult};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::gate::SyncGate;

/// The longest delay [`WorkQueue::add_after`] stores (about a year); longer ones are capped,
/// never dropped.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);

/// Which lane a key is queued in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Priority {
    /// Caused by an observed change (watch event, failure retry, hook-requested resync).
    Event,
    /// Periodic resync or cache relist; served only when no `Event` key waits.
    Bulk,
}

impl Priority {
    fn max(self, other: Priority) -> Priority {
        if self == Priority::Event || other == Priority::Event {
            Priority::Event
        } else {
            Priority::Bulk
        }
    }
}

/// The lanes, served in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Lane {
    Expedited = 0,
    Event = 1,
    Bulk = 2,
}

impl Lane {
    const ALL: [Lane; 3] = [Lane::Expedited, Lane::Event, Lane::Bulk];

    fn of(priority: Priority, expedited: bool) -> Lane {
        match (expedited, priority) {
            (true, _) => Lane::Expedited,
            (false, Priority::Event) => Lane::Event,
            (false, Priority::Bulk) => Lane::Bulk,
        }
    }
}

/// How many lane entries beyond twice the queued keys are tolerated before the lanes are
/// rebuilt (see [`drop_stale_entries`]).
const STALE_SLACK: usize = 64;

/// Removes the stale lane entries (of keys promoted to a higher lane or dropped by
/// `retain`) once they outnumber the live ones by [`STALE_SLACK`]. Popping skips stale
/// entries, but the lower lanes are popped only when the higher ones are empty: under
/// steady event load the bulk lane would otherwise grow by a stale entry per promotion,
/// without bound. Rebuilding when stale entries exceed the live ones keeps the lanes at most
/// twice the queued keys (plus the slack) at amortized constant cost per add.
fn drop_stale_entries<K: Eq + Hash>(state: &mut State<K>) {
    let entries: usize = state.lanes.iter().map(VecDeque::len).sum();
    if entries <= 2 * state.queued.len() + STALE_SLACK {
        return;
    }
    let State { lanes, queued, .. } = state;
    for lane in lanes.iter_mut() {
        lane.retain(|(key, seq)| queued.get(key).is_some_and(|&(_, live)| live == *seq));
    }
}

/// Whether a key goes to the expedited lane (installed with the gate).
type Expedite<K> = Box<dyn Fn(&K) -> bool + Send + Sync>;

/// Backoff settings for `WorkQueue::add_rate_limited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub base: Duration,
    /// Upper bound of the delay.
    pub max: Duration,
}

impl Default for Backoff {
    /// 5 ms doubling to 1000 s, as client-go's default controller rate limiter.
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(5),
            max: Duration::from_secs(1000),
        }
    }
}

impl Backoff {
    /// The delay before retry number `failures` (0-based): `base * 2^failures`, capped.
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 2u32.checked_pow(failures).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .map_or(self.max, |d| d.min(self.max))
    }
}

/// How many syncs [`WorkQueue::run`] runs at once.
///
/// A *worker* is held from the moment a key leaves the queue until the sync calls
/// [`release_worker`] (a controller does so once its hooks have answered and only API writes
/// remain) or ends. *In flight* bounds the syncs in progress, with or without a worker. So
/// syncs waiting on the API server do not keep the queue from handing out the next key, while
/// the work that calls hooks stays at `workers` at once. From a number `n`: `n` of each (a
/// worker for the whole sync).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    workers: usize,
    in_flight: usize,
}

impl Concurrency {
    /// `workers` workers (at least one) and `in_flight` syncs (at least `workers`).
    pub fn new(workers: usize, in_flight: usize) -> Self {
        Concurrency { workers, in_flight }
    }

    /// Syncs that hold a worker at once (at least one).
    pub(crate) fn workers(&self) -> usize {
        self.workers.max(1)
    }

    /// Syncs in progress at once (never fewer than the workers).
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.max(self.workers())
    }
}

impl From<usize> for Concurrency {
    fn from(n: usize) -> Self {
        Concurrency::new(n, n)
    }
}

/// The worker of the sync running in this task (see [`Concurrency`]).
struct WorkerSlot(std::cell::RefCell<Option<OwnedSemaphorePermit>>);

tokio::task_local! {
    static WORKER: WorkerSlot;
}

/// Gives up the worker the current sync holds: the rest of the sync runs without one and the
/// queue hands the next key to a free worker. Call it once only API writes remain. Nothing
/// happens outside a sync of [`WorkQueue::run`] or when the worker was already given up.
pub fn release_worker() {
    let _ = WORKER.try_with(|slot| slot.0.borrow_mut().take());
}

struct State<K> {
    /// Keys waiting for a worker, with their lane and the sequence number of their live
    /// lane entry. Lane entries with another sequence number are stale (skipped on pop):
    /// promotion pushes a fresh entry instead of searching the bulk lane.
    queued: HashMap<K, (Lane, u64)>,
    /// Indexed by `Lane`.
    lanes: [VecDeque<(K, u64)>; 3],
    seq: u64,
    processing: HashSet<K>,
    /// When each queued key was queued and each processing key was handed out (metrics).
    queued_at: HashMap<K, Instant>,
    started_at: HashMap<K, Instant>,
    /// Keys added while processing; queued again (with this priority) by `done`.
    dirty: HashMap<K, Priority>,
    failures: HashMap<K, u32>,
    /// The longest delay of a key's next backoff, set by `limit_next_retry`.
    retry_limits: HashMap<K, Duration>,
    delayed: BTreeMap<(Instant, u64), K>,
    /// Pending deadline per key: (deadline, seq) into `delayed`, and its priority.
    delayed_index: HashMap<K, ((Instant, u64), Priority)>,
    shutting_down: bool,
}

struct Shared<K> {
    name: String,
    backoff: Backoff,
    metrics: Option<BoundQueueMetrics>,
    state: Mutex<State<K>>,
    /// Wakes workers waiting in `get`.
    ready: Notify,
    /// Wakes `drained` when the queue may have become empty.
    idle: Notify,
    /// The process's sync gate, passed by workers before each sync (none: always open).
    gate: std::sync::OnceLock<SyncGate>,
    /// Set with the gate: whether a key is expedited.
    expedite: std::sync::OnceLock<Expedite<K>>,
}

/// A cloneable handle to one controller's work queue.
pub struct WorkQueue<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue {
            shared: self.shared.clone(),
        }
    }
}

impl<K> fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + 'static,
{
    /// A queue with default backoff and no metrics.
    pub fn new(name: impl Into<String>) -> Self {
        Self::with_options(name, Backoff::default(), None)
    }

    /// A queue with explicit backoff and optional metrics.
    pub fn with_options(
        name: impl Into<String>,
        backoff: Backoff,
        metrics: Option<QueueMetrics>,
    ) -> Self {
        let name = name.into();
        let metrics = metrics.map(|m| m.bind(&name));
        WorkQueue {
            shared: Arc::new(Shared {
                name,
                backoff,
                metrics,
                state: Mutex::new(State {
                    queued: HashMap::new(),
                    lanes: Default::default(),
                    seq: 0,
                    processing: HashSet::new(),
                    queued_at: HashMap::new(),
                    started_at: HashMap::new(),
                    dirty: HashMap::new(),
                    failures: HashMap::new(),
                    retry_limits: HashMap::new(),
                    delayed: BTreeMap::new(),
                    delayed_index: HashMap::new(),
                    shutting_down: false,
                }),
                ready: Notify::new(),
                idle: Notify::new(),
                gate: std::sync::OnceLock::new(),
                expedite: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Puts `gate` in front of the workers of [`WorkQueue::run`]: each sync waits for it to
    /// be open and holds a permit while it runs; the keys it expedites are served first. Set
    /// once, before `run`; later calls are ignored.
    pub fn set_gate(&self, gate: SyncGate)
    where
        K: fmt::Display,
    {
        if self.shared.gate.set(gate.clone()).is_ok() && gate.shard_count().is_some() {
            let expedite: Expedite<K> =
                Box::new(move |key| gate.expediting() && gate.expedites_key(&key.to_string()));
            let _ = self.shared.expedite.set(expedite);
        }
    }

    /// The queue's name (metrics label).
    pub(crate) fn name(&self) -> &str {
        &self.shared.name
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters more than stopping the controller would, so recover from poisoning.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn update_depth(&self, state: &State<K>) {
        if let Some(m) = &self.shared.metrics {
            m.depth
                .set(i64::try_from(state.queued.len()).unwrap_or(i64::MAX));
        }
    }

    /// Queues `key` now (no-op after shutdown).
    pub fn add(&self, key: K, priority: Priority) {
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        self.insert(&mut state, key, priority);
    }

    /// Core of `add`; also used for due delays and dirty keys (which bypass the shutdown check).
    fn insert(&self, state: &mut State<K>, key: K, priority: Priority) {
        if state.processing.contains(&key) {
            let p = state.dirty.get(&key).map_or(priority, |p| p.max(priority));
            state.dirty.insert(key, p);
            return;
        }
        let expedited = self.shared.expedite.get().is_some_and(|f| f(&key));
        let lane = Lane::of(priority, expedited);
        match state.queued.get(&key).copied() {
            Some((queued, _)) if queued <= lane => {}
            existing => {
                let key_for_time = key.clone();
                state.seq += 1;
                let seq = state.seq;
                state.queued.insert(key.clone(), (lane, seq));
                state.lanes[lane as usize].push_back((key, seq));
                if existing.is_some() {
                    // Promoted: its entry in the lower lane is stale now.
                    drop_stale_entries(state);
                }
                if existing.is_none() {
                    if let Some(m) = &self.shared.metrics {
                        m.adds.inc();
                        state.queued_at.insert(key_for_time, Instant::now());
                    }
                    self.update_depth(state);
                }
                self.shared.ready.notify_one();
            }
        }
    }

    /// Queues `key` once `delay` has passed. Of several pending delays for one key the
    /// earliest wins; the priority is the highest requested.
    pub fn add_after(&self, key: K, delay: Duration, priority: Priority) {
        if delay.is_zero() {
            return self.add(key, priority);
        }
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        // A deadline is never dropped: one beyond the clock's range fires at the cap.
        let delay = delay.min(MAX_DELAY);
        let now = Instant::now();
        let deadline = now.checked_add(delay).unwrap_or(now);
        if let Some(&((at, seq), p)) = state.delayed_index.get(&key) {
            if at <= deadline {
                let p = p.max(priority);
                state.delayed_index.insert(key, ((at, seq), p));
                return;
            }
            state.delayed.remove(&(at, seq));
        }
        state.seq += 1;
        let slot = (deadline, state.seq);
        state.delayed.insert(slot, key.clone());
        let p = state
            .delayed_index
            .get(&key)
            .map_or(priority, |(_, p)| p.max(priority));
        state.delayed_index.insert(key, (slot, p));
        // A sleeping worker may be waiting for a later deadline.
        self.shared.ready.notify_one();
    }

    /// Requeues `key` after its backoff delay and counts the failure.
    pub(crate) fn add_rate_limited(&self, key: K) {
        let delay = {
            let mut state = self.lock();
            if state.shutting_down {
                return;
            }
            let n = state.failures.entry(key.clone()).or_insert(0);
            let delay = self.shared.backoff.delay(*n);
            *n = n.saturating_add(1);
            match state.retry_limits.remove(&key) {
                Some(limit) => delay.min(limit),
                None => delay,
            }
        };
        if let Some(m) = &self.shared.metrics {
            m.retries.inc();
        }
        self.add_after(key, delay, Priority::Event);
    }

    /// Clears the failure count of `key` (call after a successful sync).
    pub(crate) fn forget(&self, key: &K) {
        let mut state = self.lock();
        state.failures.remove(key);
        state.retry_limits.remove(key);
    }

    /// The next `add_rate_limited` of `key` waits at most `max`
    /// (the failure is still counted). For a failure that says nothing about the key, such
    /// as the API server being unreachable: its retry must not wait out a backoff that grew
    /// while the server was down.
    pub fn limit_next_retry(&self, key: &K, max: Duration) {
        let mut state = self.lock();
        if !state.shutting_down {
            state.retry_limits.insert(key.clone(), max);
        }
    }

    /// Drops what the queue holds for every key `keep` rejects: a queued or delayed add
    /// (a resync, a backoff retry), its failure count, and a requeue recorded while it is
    /// being processed (the running sync itself ends normally). Returns how many keys lost
    /// an entry. For keys whose objects left this process (a released shard): their adds
    /// would only be refused later, and their entries would stay until then.
    pub fn retain(&self, keep: impl Fn(&K) -> bool) -> usize {
        let mut state = self.lock();
        let mut dropped = HashSet::new();
        let mut drop_if_rejected = |key: &K| {
            let kept = keep(key);
            if !kept {
                dropped.insert(key.clone());
            }
            kept
        };
        let State {
            queued,
            queued_at,
            delayed,
            delayed_index,
            dirty,
            failures,
            retry_limits,
            ..
        } = &mut *state;
        // Lane entries of dropped keys become stale and are skipped when popped.
        queued.retain(|key, _| drop_if_rejected(key));
        delayed_index.retain(|key, (slot, _)| {
            let kept = drop_if_rejected(key);
            if !kept {
                delayed.remove(slot);
            }
            kept
        });
        dirty.retain(|key, _| drop_if_rejected(key));
        failures.retain(|key, _| drop_if_rejected(key));
        retry_limits.retain(|key, _| drop_if_rejected(key));
        queued_at.retain(|key, _| queued.contains_key(key));
        drop_stale_entries(&mut state);
        self.update_depth(&state);
        if state.processing.is_empty() && state.queued.is_empty() {
            self.shared.idle.notify_waiters();
        }
        dropped.len()
    }

    /// How many times `key` failed since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Keys waiting for a worker (not counting processing or delayed keys).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().queued.len()
    }

    /// True if no key waits for a worker.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once [`WorkQueue::shut_down`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    /// Moves delayed keys whose deadline passed into the queue; returns the next deadline.
    fn promote_due(&self, state: &mut State<K>, now: Instant) -> Option<Instant> {
        while let Some((&(at, seq), _)) = state.delayed.first_key_value() {
            if at > now {
                return Some(at);
            }
            let Some(key) = state.delayed.remove(&(at, seq)) else {
                break;
            };
            let priority = state
                .delayed_index
                .remove(&key)
                .map_or(Priority::Event, |(_, p)| p);
            self.insert(state, key, priority);
        }
        None
    }

    fn pop(&self, state: &mut State<K>) -> Option<K> {
        for lane in Lane::ALL {
            loop {
                let Some((key, seq)) = state.lanes[lane as usize].pop_front() else {
                    break;
                };
                if state.queued.get(&key).is_some_and(|&(_, s)| s == seq) {
                    state.queued.remove(&key);
                    self.update_depth(state);
                    if let Some(m) = &self.shared.metrics {
                        let now = Instant::now();
                        if let Some(at) = state.queued_at.remove(&key) {
                            m.queue_duration.observe((now - at).as_secs_f64());
                        }
                        state.started_at.insert(key.clone(), now);
                    }
                    return Some(key);
                }
            }
        }
        None
    }

    /// Waits for the next key and marks it processing. The caller must call
    /// [`WorkQueue::done`] with it. Returns `None` once shut down and empty.
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.shared.ready.notified();
            tokio::pin!(notified);
            // Register before looking, so an add between the look and the wait is not lost.
            notified.as_mut().enable();
            let next_deadline = {
                let mut state = self.lock();
                let next = self.promote_due(&mut state, Instant::now());
                if let Some(key) = self.pop(&mut state) {
                    state.processing.insert(key.clone());
                    return Some(key);
                }
                if state.shutting_down {
                    return None;
                }
                next
            };
            match next_deadline {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Ends processing of `key`; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &K) {
        let mut state = self.lock();
        state.processing.remove(key);
        if let Some(at) = state.started_at.remove(key) {
            if let Some(m) = &self.shared.metrics {
                m.work_duration.observe(at.elapsed().as_secs_f64());
            }
        }
        if let Some(priority) = state.dirty.remove(key) {
            self.insert(&mut state, key.clone(), priority);
        }
        if state.processing.is_empty() && state.queued.is_empty() {
            self.shared.idle.notify_waiters();
        }
    }

    /// Stops accepting keys and drops pending delays; queued keys are still handed out.
    pub fn shut_down(&self) {
        let mut state = self.lock();
        state.shutting_down = true;
        state.delayed.clear();
        state.delayed_index.clear();
        let idle = state.processing.is_empty() && state.queued.is_empty();
        drop(state);
        self.shared.ready.notify_waiters();
        if idle {
            self.shared.idle.notify_waiters();
        }
    }

    /// Waits until no key is queued or processing (use after `shut_down` to drain).
    #[cfg(test)]
    pub(crate) async fn drained(&self) {
        loop {
            let notified = self.shared.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.lock();
                if state.processing.is_empty() && state.queued.is_empty() {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Runs syncs until the queue is shut down and drained, within `limits`: a key is taken
    /// from the queue only when a worker is free (so the lanes' order holds), and a sync
    /// that calls [`release_worker`] goes on without its worker. A key whose handler returns
    /// `Ok` is forgotten; `Err` or a panic requeues it with backoff.
    pub async fn run<F, Fut, E>(&self, limits: impl Into<Concurrency>, handler: F)
    where
        K: fmt::Display,
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        let limits = limits.into();
        let handler = Arc::new(handler);
        if let Some(m) = &self.shared.metrics {
            m.max_concurrent
                .set(i64::try_from(limits.in_flight()).unwrap_or(i64::MAX));
        }
        let dispatch = self.dispatch(limits, handler);
        match &self.shared.metrics {
            Some(m) => {
                // client-go refreshes the in-progress gauges twice a second.
                let mut tick = tokio::time::interval(Duration::from_millis(500));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let refresh = async {
                    loop {
                        tick.tick().await;
                        self.update_in_progress(m);
                    }
                };
                tokio::select! {
                    _ = dispatch => {}
                    _ = refresh => {}
                }
                self.update_in_progress(m);
            }
            None => dispatch.await,
        }
    }

    /// Hands keys to sync tasks while a worker and an in-flight slot are free; returns once
    /// the queue is shut down and every task has ended.
    async fn dispatch<F, Fut, E>(&self, limits: Concurrency, handler: Arc<F>)
    where
        K: fmt::Display,
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        let workers = Arc::new(Semaphore::new(limits.workers()));
        let in_flight = Arc::new(Semaphore::new(limits.in_flight()));
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            let (Ok(slot), Ok(worker)) = (
                in_flight.clone().acquire_owned().await,
                workers.clone().acquire_owned().await,
            ) else {
                break;
            };
            while tasks.try_join_next().is_some() {}
            let Some(key) = self.get().await else {
                break;
            };
            let queue = self.clone();
            let handler = handler.clone();
            let worker = WorkerSlot(std::cell::RefCell::new(Some(worker)));
            tasks.spawn(WORKER.scope(worker, async move {
                queue.process(key, &*handler).await;
                drop(slot);
            }));
        }
        while tasks.join_next().await.is_some() {}
    }

    /// One sync of `key` through the gate, with its outcome recorded and the key requeued
    /// or forgotten.
    async fn process<F, Fut, E>(&self, key: K, handler: &F)
    where
        K: fmt::Display,
        F: Fn(K) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: fmt::Display,
    {
        // Held (with the key processing) while the gate is closed: the standby keeps its
        // queue, and the key is synced once this process leads.
        let permit = match self.shared.gate.get() {
            Some(gate) if gate.shard_count().is_some() => {
                match gate.enter_key(&key.to_string()).await {
                    Some(permit) => Some(permit),
                    None => {
                        // Another replica's shard: dropped here; acquiring the shard later
                        // replays the caches, which queues it again.
                        self.forget(&key);
                        self.done(&key);
                        return;
                    }
                }
            }
            Some(gate) => Some(gate.enter().await),
            None => None,
        };
        let started = Instant::now();
        let metrics = self.shared.metrics.as_ref();
        if let Some(m) = metrics {
            m.active_workers.inc();
        }
        let sync = AssertUnwindSafe(handler(key.clone())).catch_unwind();
        let outcome = match &permit {
            Some(permit) => permit.run(sync).await,
            None => Some(sync.await),
        };
        drop(permit);
        if let Some(m) = metrics {
            m.active_workers.dec();
        }
        let Some(outcome) = outcome else {
            // Past the fence of the Lease the key's shard rests on: another replica may
            // own it now. Acquiring the shard again replays it.
            tracing::error!(queue = %self.name(), key = %key, "sync abandoned: this replica's lease could be taken over before it ended");
            self.forget(&key);
            self.done(&key);
            return;
        };
        if let Some(m) = metrics {
            let result = match &outcome {
                Ok(Ok(())) if self.has_delayed(&key) => ReconcileResult::RequeueAfter,
                Ok(Ok(())) => ReconcileResult::Success,
                Ok(Err(_)) => ReconcileResult::Error,
                Err(_) => {
                    m.panics.inc();
                    ReconcileResult::Error
                }
            };
            m.reconciled(result, started.elapsed().as_secs_f64());
        }
        match outcome {
            Ok(Ok(())) => self.forget(&key),
            Ok(Err(err)) => {
                tracing::warn!(queue = %self.name(), error = %err, "sync failed; requeued with backoff");
                self.add_rate_limited(key.clone());
            }
            Err(_) => {
                tracing::error!(queue = %self.name(), "sync panicked; requeued with backoff");
                self.add_rate_limited(key.clone());
            }
        }
        self.done(&key);
    }

    /// Whether `key` has a pending delayed add.
    fn has_delayed(&self, key: &K) -> bool {
        self.lock().delayed_index.contains_key(key)
    }

    /// Sets the unfinished-work and longest-running gauges from the keys in progress.
    fn update_in_progress(&self, m: &BoundQueueMetrics) {
        let now = Instant::now();
        let (total, longest) = self
            .lock()
            .started_at
            .values()
            .map(|at| (now - *at).as_secs_f64())
            .fold((0.0, 0.0f64), |(sum, max), s| (sum + s, max.max(s)));
        m.unfinished.set(total);
        m.longest.set(longest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::time::timeout;

    /// `get` that must not return within `within` (paused time advances automatically).
    async fn assert_nothing(q: &WorkQueue<&'static str>, within: Duration) {
        assert!(
            timeout(within, q.get()).await.is_err(),
            "unexpected key available"
        );
    }

    /// Lane entries held, live or stale.
    fn lane_entries<K: Clone + Eq + Hash + Send + 'static>(q: &WorkQueue<K>) -> usize {
        q.lock().lanes.iter().map(VecDeque::len).sum()
    }

    #[tokio::test(start_paused = true)]
    async fn promotions_and_drops_under_steady_event_load_leave_no_stale_entries() {
        let q: WorkQueue<u32> = WorkQueue::new("t");
        for _ in 0..200 {
            // A resync queues every key as bulk work, events promote them and the workers
            // serve the event lane: the bulk lane is never reached.
            for k in 0..10 {
                q.add(k, Priority::Bulk);
            }
            for k in 0..10 {
                q.add(k, Priority::Event);
            }
            for _ in 0..10 {
                let k = q.get().await.unwrap();
                q.done(&k);
            }
            // Keys of a released shard are dropped while queued.
            for k in 100..110 {
                q.add(k, Priority::Bulk);
            }
            q.retain(|k| *k < 100);
        }
        assert!(q.is_empty());
        let held = lane_entries(&q);
        assert!(held <= STALE_SLACK, "{held} lane entries for no queued key");
        // What is live is still served, in lane order.
        q.add(1, Priority::Bulk);
        q.add(2, Priority::Event);
        assert_eq!(q.get().await, Some(2));
        assert_eq!(q.get().await, Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn duplicate_adds_are_processed_once() {
        let q = WorkQueue::new("t");
        q.add("a", Priority::Event);
        q.add("a", Priority::Event);
        q.add("a", Priority::Bulk);
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        assert_nothing(&q, Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn key_added_while_processing_waits_for_done() {
        let q = WorkQueue::new("t");
        q.add("a", Priority::Event);
        assert_eq!(q.get().await, Some("a"));
        q.add("a", Priority::Event);
        q.add("a", Priority::Event);
        // Not handed to a second worker while the first still holds it.
        assert_nothing(&q, Duration::from_secs(1)).await;
        q.done(&"a");
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        // The two adds while processing collapsed into one run.
        assert_nothing(&q, Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn event_keys_are_served_before_bulk_keys() {
        let q = WorkQueue::new("t");
        for i in 0..10_000u32 {
            q.add(i, Priority::Bulk);
        }
        q.add(20_000, Priority::Event);
        assert_eq!(q.get().await, Some(20_000));
        assert_eq!(q.get().await, Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn event_add_promotes_a_bulk_key_once() {
        let q = WorkQueue::new("t");
        q.add("y", Priority::Bulk);
        q.add("x", Priority::Bulk);
        q.add("x", Priority::Event);
        assert_eq!(q.len(), 2);
        // "x" jumps ahead of "y", which was queued first.
        assert_eq!(q.get().await, Some("x"));
        assert_eq!(q.get().await, Some("y"));
        // The stale bulk entry of "x" is skipped, not served twice.
        q.done(&"x");
        q.done(&"y");
        assert_nothing(&q, Duration::from_secs(1)).await;
    }

    /// A queue behind a gate of 4 shards, and a key of each shard.
    fn sharded_queue() -> (WorkQueue<String>, SyncGate, Vec<String>) {
        let gate = SyncGate::sharded(4);
        let q = WorkQueue::new("t");
        q.set_gate(gate.clone());
        let keys = (0..4)
            .map(|shard| {
                (0..)
                    .map(|i| format!("ns/p-{i}"))
                    .find(|k| crate::gate::shard_of(k, 4) == shard)
                    .unwrap()
            })
            .collect();
        (q, gate, keys)
    }

    #[tokio::test(start_paused = true)]
    async fn expedited_keys_go_first_whatever_their_priority_while_the_gate_says_so() {
        let (q, gate, keys) = sharded_queue();
        let (own, taken) = (&keys[0], &keys[1]);
        q.add(own.clone(), Priority::Event);
        q.add(taken.clone(), Priority::Bulk);
        // Without an expedited shard the priorities decide.
        assert_eq!(q.get().await.as_ref(), Some(own));
        assert_eq!(q.get().await.as_ref(), Some(taken));
        q.done(own);
        q.done(taken);

        gate.expedite_shard(1, Duration::from_secs(15));
        q.add(own.clone(), Priority::Event);
        q.add(taken.clone(), Priority::Bulk);
        assert_eq!(
            q.get().await.as_ref(),
            Some(taken),
            "the taken-over key first"
        );
        // A follow-up of the taken-over key (added while it syncs) goes first again.
        q.add(taken.clone(), Priority::Event);
        q.done(taken);
        assert_eq!(q.get().await.as_ref(), Some(taken));
        q.done(taken);
        assert_eq!(q.get().await.as_ref(), Some(own));
        q.done(own);

        // A key queued in the window keeps its place after the window ends; keys added
        // after it are ranked by priority again.
        q.add(own.clone(), Priority::Event);
        q.add(taken.clone(), Priority::Bulk);
        assert_eq!(q.len(), 2);
        tokio::time::sleep(Duration::from_secs(16)).await;
        q.add(keys[2].clone(), Priority::Event);
        q.add(keys[3].clone(), Priority::Bulk);
        let order: Vec<String> = {
            let mut v = Vec::new();
            for _ in 0..4 {
                v.push(q.get().await.unwrap());
            }
            v
        };
        let want = [taken, own, &keys[2], &keys[3]].map(String::clone);
        assert_eq!(order, want);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_key_is_promoted_to_the_expedited_lane_once() {
        let (q, gate, keys) = sharded_queue();
        q.add(keys[0].clone(), Priority::Event);
        q.add(keys[1].clone(), Priority::Event);
        gate.expedite_shard(1, Duration::from_secs(15));
        q.add(keys[1].clone(), Priority::Bulk);
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await.as_ref(), Some(&keys[1]));
        assert_eq!(q.get().await.as_ref(), Some(&keys[0]));
        // The stale Event-lane entry of keys[1] is skipped.
        q.done(&keys[0]);
        q.done(&keys[1]);
        assert!(timeout(Duration::from_secs(1), q.get()).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn dirty_key_keeps_the_highest_priority() {
        let q = WorkQueue::new("t");
        q.add("a", Priority::Event);
        assert_eq!(q.get().await, Some("a"));
        q.add("a", Priority::Bulk);
        q.add("a", Priority::Event);
        q.add("b", Priority::Bulk);
        q.done(&"a");
        assert_eq!(q.get().await, Some("a"));
    }

    #[test]
    fn backoff_doubles_from_5ms_to_1000s() {
        let b = Backoff::default();
        assert_eq!(b.delay(0), Duration::from_millis(5));
        assert_eq!(b.delay(1), Duration::from_millis(10));
        assert_eq!(b.delay(10), Duration::from_millis(5 * 1024));
        assert_eq!(b.delay(17), Duration::from_millis(5 << 17));
        assert_eq!(b.delay(18), Duration::from_secs(1000));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_and_forget_resets() {
        let q = WorkQueue::new("t");
        let start = Instant::now();
        let mut expected = Duration::ZERO;
        for n in 0..4u32 {
            q.add_rate_limited("a");
            expected += Duration::from_millis(5 << n);
            assert_eq!(q.get().await, Some("a"));
            assert_eq!(start.elapsed(), expected);
            q.done(&"a");
        }
        assert_eq!(q.num_requeues(&"a"), 4);
        q.forget(&"a");
        assert_eq!(q.num_requeues(&"a"), 0);
        let t = Instant::now();
        q.add_rate_limited("a");
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(t.elapsed(), Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_limited_retry_waits_at_most_the_limit_once() {
        let q = WorkQueue::new("t");
        for _ in 0..20 {
            q.add_rate_limited("a");
            assert_eq!(q.get().await, Some("a"));
            q.done(&"a");
        }
        // 20 failures: the next backoff would be 5 ms * 2^20, about 87 minutes.
        let t = Instant::now();
        q.limit_next_retry(&"a", Duration::from_secs(2));
        q.add_rate_limited("a");
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(t.elapsed(), Duration::from_secs(2));
        q.done(&"a");
        assert_eq!(q.num_requeues(&"a"), 21);
        // The limit was for one retry only.
        let t = Instant::now();
        q.add_rate_limited("a");
        assert_eq!(q.get().await, Some("a"));
        assert!(t.elapsed() > Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn earlier_deadline_wins_later_does_not_postpone() {
        let q = WorkQueue::new("t");
        let start = Instant::now();
        q.add_after("a", Duration::from_secs(10), Priority::Bulk);
        q.add_after("a", Duration::from_secs(5), Priority::Bulk);
        q.add_after("b", Duration::from_secs(5), Priority::Bulk);
        q.add_after("b", Duration::from_secs(10), Priority::Bulk);
        let first = q.get().await.unwrap();
        let second = q.get().await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_ne!(first, second);
        q.done(&first);
        q.done(&second);
        // The replaced 10 s deadlines are gone, not duplicated.
        assert_nothing(&q, Duration::from_secs(60)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn huge_delays_are_capped_not_dropped() {
        let q = WorkQueue::new("t");
        let start = Instant::now();
        q.add_after("a", Duration::MAX, Priority::Event);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(start.elapsed(), MAX_DELAY);
    }

    #[tokio::test(start_paused = true)]
    async fn closed_gate_holds_workers_and_opening_releases_them() {
        let q = WorkQueue::new("t");
        let gate = SyncGate::new(false);
        q.set_gate(gate.clone());
        let calls = Arc::new(AtomicUsize::new(0));
        q.add("a", Priority::Event);
        let runner = {
            let q = q.clone();
            let calls = calls.clone();
            tokio::spawn(async move {
                q.run(2, move |_key| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async { Ok::<(), String>(()) }
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "synced through a closed gate"
        );
        gate.open();
        while calls.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.shut_down();
        runner.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_key_wakes_a_waiting_worker() {
        let q = WorkQueue::new("t");
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        };
        tokio::task::yield_now().await;
        let start = Instant::now();
        q.add_after("a", Duration::from_secs(3), Priority::Event);
        assert_eq!(waiter.await.unwrap(), Some("a"));
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_priority_is_respected_when_due() {
        let q = WorkQueue::new("t");
        q.add("bulk", Priority::Bulk);
        q.add_after("ev", Duration::from_secs(1), Priority::Event);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(q.get().await, Some("ev"));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_drains_queued_keys_and_refuses_new_ones() {
        let q = WorkQueue::new("t");
        q.add("a", Priority::Event);
        q.add("b", Priority::Bulk);
        q.add_after("c", Duration::from_secs(1), Priority::Event);
        assert_eq!(q.get().await, Some("a"));
        q.add("a", Priority::Event); // dirty before shutdown: still processed
        q.shut_down();
        q.add("d", Priority::Event);
        q.add_rate_limited("e");
        q.done(&"a");
        let mut rest = vec![q.get().await.unwrap(), q.get().await.unwrap()];
        rest.sort();
        assert_eq!(rest, vec!["a", "b"]);
        q.done(&"a");
        q.done(&"b");
        assert_eq!(q.get().await, None);
        q.drained().await;
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_wakes_idle_workers() {
        let q: WorkQueue<&'static str> = WorkQueue::new("t");
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        };
        tokio::task::yield_now().await;
        q.shut_down();
        assert_eq!(waiter.await.unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn run_retries_failures_and_forgets_on_success() {
        let q = WorkQueue::new("t");
        let calls = Arc::new(AtomicUsize::new(0));
        q.add("a", Priority::Event);
        let runner = {
            let q = q.clone();
            let calls = calls.clone();
            tokio::spawn(async move {
                q.run(2, move |_key| {
                    let n = calls.fetch_add(1, Ordering::SeqCst);
                    async move {
                        match n {
                            0 => Err("boom"),
                            1 => panic!("handler panic is contained"),
                            _ => Ok(()),
                        }
                    }
                })
                .await
            })
        };
        let start = Instant::now();
        while calls.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Two failures: 5 ms then 10 ms of backoff.
        assert!(start.elapsed() >= Duration::from_millis(15));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(q.num_requeues(&"a"), 0);
        q.shut_down();
        runner.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    /// Runs 6 keys through `limits`; each sync gives its worker up when `release` says so,
    /// then waits a second. Returns the most syncs running at once and the order the keys
    /// started in.
    async fn syncs_at_once(limits: Concurrency, release: bool) -> (usize, Vec<u32>) {
        let q = WorkQueue::new("t");
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(Mutex::new(Vec::new()));
        for key in 0..5u32 {
            q.add(key, Priority::Bulk);
        }
        let runner = {
            let (q, running, peak, started) =
                (q.clone(), running.clone(), peak.clone(), started.clone());
            tokio::spawn(async move {
                q.run(limits, move |key: u32| {
                    let (running, peak, started) = (running.clone(), peak.clone(), started.clone());
                    async move {
                        started.lock().unwrap().push(key);
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        // The sync's hook phase, then (maybe) only writes remain.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        if release {
                            release_worker();
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok::<(), &str>(())
                    }
                })
                .await
            })
        };
        // An event key added while the first syncs run still goes before the bulk keys.
        tokio::time::sleep(Duration::from_millis(5)).await;
        q.add(9, Priority::Event);
        while started.lock().unwrap().len() < 6 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.shut_down();
        runner.await.unwrap();
        let order = started.lock().unwrap().clone();
        (peak.load(Ordering::SeqCst), order)
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_worker_takes_the_next_key_within_the_in_flight_bound() {
        let (peak, order) = syncs_at_once(Concurrency::new(1, 3), true).await;
        assert_eq!(peak, 3, "one worker, three syncs in flight");
        assert_eq!(order, vec![0, 9, 1, 2, 3, 4], "keys leave in lane order");
    }

    #[tokio::test(start_paused = true)]
    async fn a_sync_that_keeps_its_worker_runs_alone() {
        let (peak, order) = syncs_at_once(Concurrency::new(1, 3), false).await;
        assert_eq!(peak, 1);
        assert_eq!(order, vec![0, 9, 1, 2, 3, 4]);
        let (peak, _) = syncs_at_once(Concurrency::from(1), true).await;
        assert_eq!(peak, 1, "in flight equal to workers: one sync at a time");
    }

    #[tokio::test(start_paused = true)]
    async fn retain_drops_queued_delayed_and_failed_entries_of_rejected_keys() {
        let q = WorkQueue::new("t");
        q.add("gone-queued", Priority::Event);
        q.add("kept", Priority::Bulk);
        q.add_after("gone-delayed", Duration::from_secs(30), Priority::Bulk);
        q.add_rate_limited("gone-failed");
        q.add("gone-processing", Priority::Event);
        assert_eq!(q.get().await, Some("gone-queued"));
        q.done(&"gone-queued");
        q.add("gone-queued", Priority::Event);
        let processing = q.get().await;
        assert_eq!(processing, Some("gone-processing"));
        q.add("gone-processing", Priority::Event); // dirty: requeued by `done`
        let dropped = q.retain(|key| *key == "kept");
        assert_eq!(dropped, 4);
        q.done(&"gone-processing");
        assert_eq!(q.num_requeues(&"gone-failed"), 0);
        assert_eq!(q.get().await, Some("kept"));
        q.done(&"kept");
        // Nothing else comes back, not even after the delays would have fired.
        assert_nothing(&q, Duration::from_secs(120)).await;
        assert!(q.lock().delayed.is_empty() && q.lock().queued_at.is_empty());
    }

    #[test]
    fn in_flight_is_never_below_workers() {
        assert_eq!(Concurrency::new(8, 2).in_flight(), 8);
        assert_eq!(Concurrency::new(0, 0).workers(), 1);
        assert_eq!(Concurrency::new(0, 0).in_flight(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_count_adds_depth_and_retries() {
        let registry = prometheus::Registry::new();
        let metrics = QueueMetrics::register(&registry).unwrap();
        let q = WorkQueue::with_options("cc-x", Backoff::default(), Some(metrics));
        q.add("a", Priority::Event);
        q.add("a", Priority::Event);
        q.add("b", Priority::Bulk);
        q.add_rate_limited("c");
        let value = |name: &str| {
            registry
                .gather()
                .iter()
                .find(|f| f.name() == name)
                .map(|f| {
                    let m = &f.get_metric()[0];
                    if m.get_counter().value() != 0.0 {
                        m.get_counter().value()
                    } else {
                        m.get_gauge().value()
                    }
                })
                .unwrap_or(-1.0)
        };
        assert_eq!(value("workqueue_adds_total"), 2.0);
        assert_eq!(value("workqueue_depth"), 2.0);
        assert_eq!(value("workqueue_retries_total"), 1.0);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(value("workqueue_depth"), 1.0);
        tokio::time::sleep(Duration::from_secs(2)).await;
        q.done(&"a");
        let histogram = |name: &str| {
            registry
                .gather()
                .iter()
                .find(|f| f.name() == name)
                .map(|f| {
                    let h = f.get_metric()[0].get_histogram();
                    (h.get_sample_count(), h.get_sample_sum())
                })
                .unwrap_or_default()
        };
        assert_eq!(histogram("workqueue_queue_duration_seconds").0, 1);
        assert_eq!(histogram("workqueue_work_duration_seconds"), (1, 2.0));
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_count_reconciles_by_result() {
        let registry = prometheus::Registry::new();
        let metrics = QueueMetrics::register(&registry).unwrap();
        let q: WorkQueue<&'static str> =
            WorkQueue::with_options("CompositeController-x", Backoff::default(), Some(metrics));
        let labels = |m: &prometheus::proto::Metric| -> Vec<(String, String)> {
            m.get_label()
                .iter()
                .map(|l| (l.name().to_owned(), l.value().to_owned()))
                .collect()
        };
        let reconciles = |result: &str| -> f64 {
            registry
                .gather()
                .iter()
                .find(|f| f.name() == "controller_runtime_reconcile_total")
                .and_then(|f| {
                    f.get_metric().iter().find(|m| {
                        labels(m).contains(&("result".into(), result.into()))
                            && labels(m)
                                .contains(&("controller".into(), "CompositeController-x".into()))
                    })
                })
                .map_or(-1.0, |m| m.get_counter().value())
        };
        // Every result series exists at zero before the first reconcile.
        for r in crate::queue_metrics::RESULTS {
            assert_eq!(reconciles(r), 0.0, "{r}");
        }
        q.add("ok", Priority::Event);
        q.add("fail", Priority::Event);
        q.add("later", Priority::Event);
        let runner = q.clone();
        let handler_queue = q.clone();
        let run = tokio::spawn(async move {
            runner
                .run(1, move |key: &'static str| {
                    let q = handler_queue.clone();
                    async move {
                        match key {
                            "fail" => Err("boom"),
                            "later" => {
                                q.add_after(key, Duration::from_secs(600), Priority::Event);
                                Ok(())
                            }
                            _ => Ok(()),
                        }
                    }
                })
                .await
        });
        // The failed key comes back after its 5 ms backoff and fails again.
        tokio::time::sleep(Duration::from_millis(7)).await;
        q.shut_down();
        run.await.unwrap();
        assert_eq!(reconciles("success"), 1.0);
        assert!(reconciles("error") >= 1.0);
        assert_eq!(reconciles("requeue_after"), 1.0);
        assert_eq!(reconciles("requeue"), 0.0);
    }

    /// Many workers, many adds of few keys: no key is ever processed concurrently, and every
    /// key added is processed at least once after its last add.
    fn no_concurrent_processing(adds: Vec<(u8, bool)>, workers: usize) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async move {
            let q: WorkQueue<u8> = WorkQueue::new("p");
            let active = Arc::new(Mutex::new(HashSet::new()));
            let processed_after_add = Arc::new(Mutex::new(HashSet::new()));
            let violations = Arc::new(AtomicUsize::new(0));
            let runner = {
                let q = q.clone();
                let active = active.clone();
                let seen = processed_after_add.clone();
                let violations = violations.clone();
                tokio::spawn(async move {
                    q.run(workers, move |key: u8| {
                        let active = active.clone();
                        let seen = seen.clone();
                        let violations = violations.clone();
                        async move {
                            if !active.lock().unwrap().insert(key) {
                                violations.fetch_add(1, Ordering::SeqCst);
                            }
                            // Stay busy across several polls so overlapping runs would show.
                            for _ in 0..4 {
                                tokio::task::yield_now().await;
                            }
                            seen.lock().unwrap().insert(key);
                            active.lock().unwrap().remove(&key);
                            Ok::<(), String>(())
                        }
                    })
                    .await
                })
            };
            for (key, event) in &adds {
                processed_after_add.lock().unwrap().remove(key);
                let p = if *event {
                    Priority::Event
                } else {
                    Priority::Bulk
                };
                q.add(*key, p);
                if key % 2 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            // Shut down only once every add has been handled; then drain.
            let expected: HashSet<u8> = adds.iter().map(|(k, _)| *k).collect();
            let deadline = Instant::now() + Duration::from_secs(30);
            while *processed_after_add.lock().unwrap() != expected && Instant::now() < deadline {
                tokio::task::yield_now().await;
            }
            q.shut_down();
            runner.await.unwrap();
            assert_eq!(violations.load(Ordering::SeqCst), 0);
            assert_eq!(*processed_after_add.lock().unwrap(), expected);
        });
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        #[test]
        fn queue_never_runs_a_key_concurrently(
            adds in proptest::collection::vec((0u8..6, proptest::bool::ANY), 1..200),
            workers in 1usize..8,
        ) {
            no_concurrent_processing(adds, workers);
        }
    }
}
