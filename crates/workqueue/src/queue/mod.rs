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
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::queue_metrics::BoundQueueMetrics;
pub use crate::queue_metrics::QueueMetrics;
use tokio::sync::Notify;
use tokio::time::Instant;

mod run;
pub use run::{Concurrency, Outcome, Requeue, Retry, Worker};

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

/// A key's pending delayed add.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// (deadline, seq): its entry in `State::delayed`.
    slot: (Instant, u64),
    /// The highest priority asked.
    priority: Priority,
    /// Only a fallback ([`Requeue::UnlessSyncedWithin`]): dropped when the key is handed
    /// out for a sync before it falls due.
    fallback: bool,
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
    /// Failures since the key's last success: how many, and when the first of them was.
    failures: HashMap<K, (u32, Instant)>,
    /// The longest delay of a key's next backoff, set by `limit_next_retry`.
    retry_limits: HashMap<K, Duration>,
    delayed: BTreeMap<(Instant, u64), K>,
    /// Pending deadline per key.
    delayed_index: HashMap<K, Pending>,
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
        self.schedule(&mut state, key, delay, priority, false);
    }

    /// Queues `key` as an event once `delay` has passed, unless it is handed out for a sync
    /// before (see [`Requeue::UnlessSyncedWithin`]). A pending deadline that must fire stays
    /// one that must fire.
    pub(crate) fn add_fallback_after(&self, key: K, delay: Duration) {
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        self.schedule(&mut state, key, delay, Priority::Event, true);
    }

    /// Core of the delayed adds: keeps the earliest deadline of `key` and the highest
    /// priority asked; the deadline is a fallback only while every request for it was one.
    fn schedule(
        &self,
        state: &mut State<K>,
        key: K,
        delay: Duration,
        priority: Priority,
        fallback: bool,
    ) {
        // A deadline is never dropped: one beyond the clock's range fires at the cap.
        let delay = delay.min(MAX_DELAY);
        let now = Instant::now();
        let deadline = now.checked_add(delay).unwrap_or(now);
        let pending = state.delayed_index.get(&key).copied();
        let slot = match pending {
            Some(p) if p.slot.0 <= deadline => p.slot,
            _ => {
                if let Some(p) = pending {
                    state.delayed.remove(&p.slot);
                }
                state.seq += 1;
                let slot = (deadline, state.seq);
                state.delayed.insert(slot, key.clone());
                // A sleeping worker may be waiting for a later deadline.
                self.shared.ready.notify_one();
                slot
            }
        };
        let pending = Pending {
            slot,
            priority: pending.map_or(priority, |p| p.priority.max(priority)),
            fallback: fallback && pending.is_none_or(|p| p.fallback),
        };
        state.delayed_index.insert(key, pending);
    }

    /// Requeues `key` after its backoff delay and counts the failure.
    pub(crate) fn add_rate_limited(&self, key: K) {
        let delay = {
            let mut state = self.lock();
            if state.shutting_down {
                return;
            }
            let (n, _) = state
                .failures
                .entry(key.clone())
                .or_insert((0, Instant::now()));
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
    pub(crate) fn limit_next_retry(&self, key: &K, max: Duration) {
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
        delayed_index.retain(|key, pending| {
            let kept = drop_if_rejected(key);
            if !kept {
                delayed.remove(&pending.slot);
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
        self.lock().failures.get(key).map_or(0, |(n, _)| *n)
    }

    /// How many keys failed since their last success, and how long ago the first failure of
    /// the longest-failing one was (zero when none is failing).
    pub(crate) fn failing(&self, now: Instant) -> (usize, Duration) {
        let state = self.lock();
        let oldest = state.failures.values().map(|(_, since)| *since).min();
        (
            state.failures.len(),
            oldest.map_or(Duration::ZERO, |since| now.saturating_duration_since(since)),
        )
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
                .map_or(Priority::Event, |p| p.priority);
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
                    if state.delayed_index.get(&key).is_some_and(|p| p.fallback) {
                        // Synced now: the fallback has served its purpose.
                        if let Some(p) = state.delayed_index.remove(&key) {
                            state.delayed.remove(&p.slot);
                        }
                    }
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
}

#[cfg(test)]
mod tests {
    use super::*;
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
    async fn failing_counts_keys_and_ages_from_the_first_failure_of_a_streak() {
        let q = WorkQueue::new("t");
        assert_eq!(q.failing(Instant::now()), (0, Duration::ZERO));
        let start = Instant::now();
        q.add_rate_limited("a");
        tokio::time::sleep(Duration::from_secs(10)).await;
        // A second failure of "a" keeps its streak's start; "b" starts its own.
        q.add_rate_limited("a");
        q.add_rate_limited("b");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(q.failing(Instant::now()), (2, start.elapsed()));
        q.forget(&"a");
        assert_eq!(q.failing(Instant::now()), (1, Duration::from_secs(5)));
        q.retain(|key| *key != "b");
        assert_eq!(q.failing(Instant::now()), (0, Duration::ZERO));
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
    async fn a_fallback_fires_when_no_sync_of_the_key_came_before() {
        let q = WorkQueue::new("t");
        let start = Instant::now();
        q.add_fallback_after("a", Duration::from_secs(1));
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fallback_is_dropped_when_the_key_is_synced_before_it_falls_due() {
        let q = WorkQueue::new("t");
        q.add_fallback_after("a", Duration::from_secs(1));
        q.add("a", Priority::Event); // the change the sync waited for
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        assert_nothing(&q, Duration::from_secs(5)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_that_must_fire_stays_so_whatever_fallback_comes() {
        let q = WorkQueue::new("t");
        // A resync asked for, then a fallback: the resync survives a sync in between.
        q.add_after("a", Duration::from_secs(2), Priority::Event);
        q.add_fallback_after("a", Duration::from_secs(1));
        q.add("a", Priority::Event);
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        assert_eq!(q.get().await, Some("a"));
        // A fallback, then a resync asked for: the same.
        q.done(&"a");
        q.add_fallback_after("b", Duration::from_secs(1));
        q.add_after("b", Duration::from_secs(3), Priority::Event);
        q.add("b", Priority::Event);
        assert_eq!(q.get().await, Some("b"));
        q.done(&"b");
        assert_eq!(q.get().await, Some("b"));
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
}
