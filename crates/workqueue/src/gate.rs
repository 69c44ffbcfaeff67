//! The sync gate: the one switch in front of every worker of the process.
//!
//! Leader election and shutdown decide *whether* a process may write; the controllers do not
//! know about either. Workers pass [`SyncGate::enter`] before each sync and hold the returned
//! [`SyncPermit`] until it ends. Closing the gate ([`SyncGate::close_and_drain`]) stops new
//! syncs at once and waits for the running ones, so a caller that gets `true` back knows no
//! sync of this process is writing any more (a replica losing its lease must know that before
//! the lease can expire). Caches and queues keep running while the gate is closed, so a
//! standby that becomes leader starts from warm caches with every key already queued.
//!
//! With sharding (`--sharding`, [`SyncGate::sharded`]) the gate also partitions keys: every
//! key belongs to one of a fixed number of virtual shards ([`shard_of`], a stable hash of the
//! key), and a worker may sync a key only while this replica owns the key's shard
//! ([`SyncGate::enter_key`] returns `None` otherwise and the queue drops the key). Ownership is
//! granted and withdrawn one shard at a time by the shard coordinator of the binary:
//! [`SyncGate::own_shard`] after it acquired the shard's Lease, and
//! [`SyncGate::release_shard`] — stop admitting the shard's keys, wait for its running syncs —
//! before it releases the Lease, so no two replicas ever sync the same key at once.
//!
//! The gate also says which shards the caches keep ([`SyncGate::retains_key`], used by the
//! informers' retention filter in `metacontroller-dynamic`): a shard is *retained* from the
//! moment its acquisition begins ([`SyncGate::reserve_shard`]: its objects must survive the
//! relist that brings them back) until its release has drained; it is *owned* (its keys
//! admitted) only once the acquisition's relist has completed ([`SyncGate::admit_shard`]).
//! Every reservation and release bumps the shard's epoch, so an acquisition that began
//! before a release can never admit the shard afterwards, and a release that ends after a new
//! acquisition began leaves the shard retained.
//!
//! A shard taken over from a replica that died can be *expedited* for a while
//! ([`SyncGate::expedite_shard`]): its parents have had no owner since the death, so the work
//! queues serve their keys before any other ([`SyncGate::expedites_key`], see
//! [`WorkQueue`](crate::WorkQueue)).

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

#[derive(Debug)]
struct State {
    open: bool,
    in_flight: usize,
    /// Per-shard ownership and running syncs; `None` without sharding.
    shards: Option<Shards>,
    /// The deadlines of the membership that ownership rests on (see [`SyncGate::set_lease`]);
    /// `None`: ownership is not time-bound.
    lease: Option<LeaseDeadlines>,
}

/// What [`SyncGate::set_lease`] found of the previous deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lapse {
    /// Renewed before the renew deadline.
    None,
    /// Renewed after the renew deadline but before the fence: ownership is kept, but keys
    /// were refused meanwhile (the caller queues the owned shards' keys again).
    Refused,
    /// Renewed after the fence: every shard was revoked and is no longer retained (the
    /// caller prunes the caches and acquires its shards again).
    Revoked,
}

/// Until when ownership granted by a Lease may be used, both measured from when the last
/// successful renewal was *sent* (the server, and so any other replica, saw it later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseDeadlines {
    /// No sync starts from this moment on (the renew deadline).
    pub renew_by: Instant,
    /// Running syncs are abandoned (their tasks dropped) at this moment, before any other
    /// replica can take the Lease over.
    pub fence: Instant,
}

#[derive(Debug)]
struct Shards {
    owned: Vec<bool>,
    /// Shards whose objects the caches keep: being acquired, owned, or draining.
    retained: Vec<bool>,
    /// Bumped by every reservation and release (see [`SyncGate::admit_shard`]).
    epoch: Vec<u64>,
    in_flight: Vec<usize>,
    /// Until when each shard's keys are expedited.
    expedite_until: Vec<Option<Instant>>,
}

/// 64-bit FNV-1a followed by the splitmix64 finalizer: stable across processes, builds and
/// platforms (unlike `std`'s hasher), and well mixed in the low bits we take a modulo of.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

fn lease_current(lease: Option<LeaseDeadlines>, now: Instant) -> bool {
    lease.is_none_or(|l| now < l.renew_by)
}

/// The virtual shard of a queue key (`namespace/name` of a parent) among `count` shards.
pub fn shard_of(key: &str, count: u32) -> u32 {
    (stable_hash(key.as_bytes()) % u64::from(count.max(1))) as u32
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    /// Broadcasts `open` changes to waiting workers.
    open_tx: watch::Sender<bool>,
    /// Wakes `close_and_drain` when the last permit is dropped.
    idle: Notify,
    /// The current [`LeaseDeadlines`], for running permits to watch their fence.
    lease_tx: watch::Sender<Option<LeaseDeadlines>>,
}

/// A cloneable handle on the process's sync gate.
#[derive(Debug, Clone)]
pub struct SyncGate {
    inner: Arc<Inner>,
}

impl Default for SyncGate {
    /// An open gate (a process without leader election).
    fn default() -> Self {
        SyncGate::new(true)
    }
}

impl SyncGate {
    /// A gate, open or closed.
    pub fn new(open: bool) -> SyncGate {
        let (open_tx, _) = watch::channel(open);
        let (lease_tx, _) = watch::channel(None);
        SyncGate {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    open,
                    in_flight: 0,
                    shards: None,
                    lease: None,
                }),
                open_tx,
                idle: Notify::new(),
                lease_tx,
            }),
        }
    }

    /// An open gate partitioned into `count` shards, none of them owned yet.
    pub fn sharded(count: u32) -> SyncGate {
        let gate = SyncGate::new(true);
        let count = count.max(1) as usize;
        gate.lock().shards = Some(Shards {
            owned: vec![false; count],
            retained: vec![false; count],
            epoch: vec![0; count],
            in_flight: vec![0; count],
            expedite_until: vec![None; count],
        });
        gate
    }

    /// The number of shards, `None` without sharding.
    pub fn shard_count(&self) -> Option<u32> {
        self.lock()
            .shards
            .as_ref()
            .map(|s| u32::try_from(s.owned.len()).unwrap_or(u32::MAX))
    }

    /// The shards this process owns now.
    pub fn owned_shards(&self) -> Vec<u32> {
        self.lock()
            .shards
            .as_ref()
            .map(|s| {
                (0..s.owned.len())
                    .filter(|i| s.owned[*i])
                    .map(|i| i as u32)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether `key`'s shard is owned now (always without sharding). The gate keeps no
    /// per-key state: the parents owned are counted from the caches (see
    /// the informers' `count_parents`), so the count follows deletions and handoffs.
    #[cfg(test)]
    pub(crate) fn owns_key(&self, key: &str) -> bool {
        let state = self.lock();
        let Some(shards) = state.shards.as_ref() else {
            return true;
        };
        let count = u32::try_from(shards.owned.len()).unwrap_or(u32::MAX);
        shards.owned[shard_of(key, count) as usize]
    }

    /// Admits the keys of `shard` from now on (and retains its objects).
    #[cfg(test)]
    pub(crate) fn own_shard(&self, shard: u32) {
        if let Some(shards) = self.lock().shards.as_mut() {
            if let Some(owned) = shards.owned.get_mut(shard as usize) {
                *owned = true;
                shards.retained[shard as usize] = true;
            }
        }
    }

    /// Begins acquiring `shard`: the caches keep its objects from now on, its keys are not
    /// admitted yet. Returns the epoch to pass to [`SyncGate::admit_shard`].
    pub fn reserve_shard(&self, shard: u32) -> u64 {
        let mut state = self.lock();
        let Some(shards) = state.shards.as_mut() else {
            return 0;
        };
        match shards.retained.get_mut(shard as usize) {
            Some(retained) => {
                *retained = true;
                shards.epoch[shard as usize] += 1;
                shards.epoch[shard as usize]
            }
            None => 0,
        }
    }

    /// Ends the acquisition begun by [`SyncGate::reserve_shard`] (its caches are complete):
    /// admits the shard's keys, unless the shard was released since (`epoch` is stale).
    /// Returns whether it was admitted.
    pub fn admit_shard(&self, shard: u32, epoch: u64) -> bool {
        let mut state = self.lock();
        let current = lease_current(state.lease, Instant::now());
        let Some(shards) = state.shards.as_mut() else {
            return false;
        };
        let i = shard as usize;
        if shards.epoch.get(i) != Some(&epoch) || !shards.retained[i] || !current {
            return false;
        }
        shards.owned[i] = true;
        true
    }

    /// Binds shard ownership to a membership Lease renewed at some moment: from
    /// `lease.renew_by` on no key is admitted and no shard acquisition completes, at
    /// `lease.fence` running syncs are abandoned (`SyncPermit::run`). Called after every
    /// successful renewal. If the previous fence had passed, every shard is revoked first
    /// (keys no longer admitted, pending acquisitions void, objects no longer retained: the
    /// caller prunes the caches): ownership held then may have been taken over meanwhile, so
    /// it must be acquired again, never resumed. Syncs still running then were abandoned at
    /// the fence.
    pub fn set_lease(&self, lease: LeaseDeadlines) -> Lapse {
        let now = Instant::now();
        let lapse;
        {
            let mut state = self.lock();
            lapse = match state.lease {
                Some(old) if now >= old.fence => Lapse::Revoked,
                Some(old) if now >= old.renew_by => Lapse::Refused,
                _ => Lapse::None,
            };
            if let (Lapse::Revoked, Some(shards)) = (lapse, state.shards.as_mut()) {
                for i in 0..shards.owned.len() {
                    shards.owned[i] = false;
                    shards.retained[i] = false;
                    shards.epoch[i] += 1;
                    shards.expedite_until[i] = None;
                }
            }
            state.lease = Some(lease);
        }
        self.inner.lease_tx.send_replace(Some(lease));
        lapse
    }

    /// Whether the ownership of shards may be used now: no Lease bound, or its renew
    /// deadline not passed.
    pub fn lease_current(&self) -> bool {
        lease_current(self.lock().lease, Instant::now())
    }

    /// Serves the keys of `shard` before any other key for `period` from now (a shard taken
    /// over from a replica that died: its parents have waited since). Ends early if the shard
    /// is released.
    pub fn expedite_shard(&self, shard: u32, period: Duration) {
        let now = Instant::now();
        let until = now.checked_add(period).unwrap_or(now);
        if let Some(shards) = self.lock().shards.as_mut() {
            if let Some(slot) = shards.expedite_until.get_mut(shard as usize) {
                *slot = Some(until);
            }
        }
    }

    /// Whether any shard is expedited now: callers check this before formatting a key for
    /// [`SyncGate::expedites_key`] (almost always false).
    pub(crate) fn expediting(&self) -> bool {
        let now = Instant::now();
        self.lock().shards.as_ref().is_some_and(|s| {
            s.expedite_until
                .iter()
                .any(|until| until.is_some_and(|u| now < u))
        })
    }

    /// Whether `key`'s shard is expedited now (see [`SyncGate::expedite_shard`]).
    pub(crate) fn expedites_key(&self, key: &str) -> bool {
        let state = self.lock();
        let Some(shards) = state.shards.as_ref() else {
            return false;
        };
        let count = u32::try_from(shards.owned.len()).unwrap_or(u32::MAX);
        shards.expedite_until[shard_of(key, count) as usize]
            .is_some_and(|until| Instant::now() < until)
    }

    /// Whether the caches keep the objects of `key`'s shard (always without sharding).
    pub fn retains_key(&self, key: &str) -> bool {
        let state = self.lock();
        let Some(shards) = state.shards.as_ref() else {
            return true;
        };
        let count = u32::try_from(shards.retained.len()).unwrap_or(u32::MAX);
        shards.retained[shard_of(key, count) as usize]
    }

    /// Stops admitting the keys of `shard` at once and waits up to `timeout` for its running
    /// syncs to end. Returns `true` when none runs any more; the shard is then no longer
    /// retained either (the caller prunes the caches).
    pub async fn release_shard(&self, shard: u32, timeout: Duration) -> bool {
        let mut epoch = None;
        if let Some(shards) = self.lock().shards.as_mut() {
            if let Some(owned) = shards.owned.get_mut(shard as usize) {
                *owned = false;
                shards.epoch[shard as usize] += 1;
                epoch = Some(shards.epoch[shard as usize]);
            }
            if let Some(slot) = shards.expedite_until.get_mut(shard as usize) {
                *slot = None;
            }
        }
        let drained = async {
            loop {
                let notified = self.inner.idle.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let running = self
                    .lock()
                    .shards
                    .as_ref()
                    .and_then(|s| s.in_flight.get(shard as usize).copied())
                    .unwrap_or(0);
                if running == 0 {
                    return;
                }
                notified.await;
            }
        };
        let done = tokio::time::timeout(timeout, drained).await.is_ok();
        if done {
            if let (Some(shards), Some(epoch)) = (self.lock().shards.as_mut(), epoch) {
                // Not if a new acquisition began meanwhile.
                if shards.epoch[shard as usize] == epoch && !shards.owned[shard as usize] {
                    shards.retained[shard as usize] = false;
                }
            }
        }
        done
    }

    /// [`SyncGate::enter`] for one key: waits while the gate is closed, then admits the key
    /// if this process owns its shard (always without sharding). `None`: another replica's
    /// key, not to be synced here.
    pub(crate) async fn enter_key(&self, key: &str) -> Option<SyncPermit> {
        let mut rx = self.inner.open_tx.subscribe();
        loop {
            {
                let mut state = self.lock();
                if state.open {
                    let current = lease_current(state.lease, Instant::now());
                    let shard = match state.shards.as_mut() {
                        None => None,
                        Some(shards) => {
                            let count = u32::try_from(shards.owned.len()).unwrap_or(u32::MAX);
                            let shard = shard_of(key, count);
                            if !shards.owned[shard as usize] || !current {
                                return None;
                            }
                            shards.in_flight[shard as usize] += 1;
                            Some(shard)
                        }
                    };
                    state.in_flight += 1;
                    return Some(SyncPermit {
                        gate: self.clone(),
                        shard,
                    });
                }
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Syncs running now.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// Whether a sync may start now: the gate is open and the Lease bound to it (if any) is
    /// current. Under leader election: whether this replica leads (the
    /// `leader_election_master_status` gauge).
    pub fn admits_syncs(&self) -> bool {
        let state = self.lock();
        state.open && lease_current(state.lease, Instant::now())
    }

    /// Lets syncs start.
    pub fn open(&self) {
        self.lock().open = true;
        self.inner.open_tx.send_replace(true);
    }

    /// Waits until the gate is open and the Lease bound to it (leader election, see
    /// [`SyncGate::set_lease`]) is current, and counts one running sync until the permit
    /// drops.
    pub(crate) async fn enter(&self) -> SyncPermit {
        let mut rx = self.inner.open_tx.subscribe();
        let mut lease = self.inner.lease_tx.subscribe();
        loop {
            {
                // Checked under the same lock `close` takes, so no sync starts after a
                // close returned.
                let mut state = self.lock();
                if state.open && lease_current(state.lease, Instant::now()) {
                    state.in_flight += 1;
                    return SyncPermit {
                        gate: self.clone(),
                        shard: None,
                    };
                }
            }
            // The senders live in `inner`, which we hold: `changed` cannot fail. Past the
            // renew deadline only a renewal (or closing and opening) lets syncs start again.
            let changed = tokio::select! {
                changed = rx.changed() => changed,
                changed = lease.changed() => changed,
            };
            if changed.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Stops new syncs at once and waits up to `timeout` for the running ones to end.
    /// Returns `true` when none runs any more.
    pub async fn close_and_drain(&self, timeout: Duration) -> bool {
        self.lock().open = false;
        self.inner.open_tx.send_replace(false);
        tokio::time::timeout(timeout, self.drained()).await.is_ok()
    }

    async fn drained(&self) {
        loop {
            let notified = self.inner.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().in_flight == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// One running sync; dropping it ends it (for [`SyncGate::close_and_drain`]).
#[derive(Debug)]
pub(crate) struct SyncPermit {
    gate: SyncGate,
    /// The shard counted in, with sharding.
    shard: Option<u32>,
}

impl SyncPermit {
    /// Runs one sync under this permit, abandoning it at the gate's fence (see
    /// [`SyncGate::set_lease`]): past the fence another replica may own the key, so the sync
    /// is dropped at its next await and sends nothing more. The clock is read before every
    /// poll, so a process resumed after a pause (SIGSTOP, a stalled VM) past its fence never
    /// polls the sync again, even before its timers fire. `None`: abandoned.
    pub(crate) async fn run<F: Future>(&self, sync: F) -> Option<F::Output> {
        let mut lease = self.gate.inner.lease_tx.subscribe();
        let fenced = async move {
            loop {
                let fence = lease.borrow_and_update().map(|l| l.fence);
                match fence {
                    Some(fence) => tokio::select! {
                        _ = tokio::time::sleep_until(fence) => return,
                        changed = lease.changed() => if changed.is_err() { std::future::pending::<()>().await },
                    },
                    None => {
                        if lease.changed().await.is_err() {
                            std::future::pending::<()>().await
                        }
                    }
                }
            }
        };
        let (mut fenced, mut sync) = (std::pin::pin!(fenced), std::pin::pin!(sync));
        std::future::poll_fn(|cx| {
            let past = self
                .gate
                .inner
                .lease_tx
                .borrow()
                .is_some_and(|l| Instant::now() >= l.fence);
            if past || fenced.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            sync.as_mut().poll(cx).map(Some)
        })
        .await
    }
}

impl Drop for SyncPermit {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        let mut shard_idle = false;
        if let (Some(shard), Some(shards)) = (self.shard, state.shards.as_mut()) {
            if let Some(n) = shards.in_flight.get_mut(shard as usize) {
                *n = n.saturating_sub(1);
                shard_idle = *n == 0;
            }
        }
        if state.in_flight == 0 || shard_idle {
            self.gate.inner.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn closed_gate_holds_workers_until_opened() {
        let gate = SyncGate::new(false);
        let waiter = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter().await })
        };
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiter.is_finished());
        assert!(!gate.admits_syncs());
        gate.open();
        assert!(gate.admits_syncs());
        let permit = waiter.await.unwrap();
        assert_eq!(gate.in_flight(), 1);
        drop(permit);
        assert_eq!(gate.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn close_waits_for_running_syncs_and_refuses_new_ones() {
        let gate = SyncGate::default();
        let permit = gate.enter().await;
        let closer = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.close_and_drain(Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!closer.is_finished(), "close returned while a sync ran");
        let late = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter().await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!late.is_finished(), "a sync started after close");
        drop(permit);
        assert!(closer.await.unwrap());
        assert!(!late.is_finished());
        late.abort();
    }

    fn key_of_shard(shard: u32, count: u32) -> String {
        (0..)
            .map(|i| format!("ns/parent-{i}"))
            .find(|k| shard_of(k, count) == shard)
            .unwrap()
    }

    fn deadlines(renew_in: u64, fence_in: u64) -> LeaseDeadlines {
        let now = Instant::now();
        LeaseDeadlines {
            renew_by: now + Duration::from_secs(renew_in),
            fence: now + Duration::from_secs(fence_in),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lapsed_lease_admits_nothing_and_its_shards_must_be_acquired_again() {
        let gate = SyncGate::sharded(4);
        let key = key_of_shard(1, 4);
        assert!(
            gate.set_lease(deadlines(3, 4)) == Lapse::None,
            "the first lease lapses nothing"
        );
        let epoch = gate.reserve_shard(1);
        assert!(gate.admit_shard(1, epoch));
        assert!(gate.enter_key(&key).await.is_some());
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!gate.lease_current());
        assert!(
            gate.enter_key(&key).await.is_none(),
            "admitted after the renew deadline"
        );
        // A pending acquisition cannot complete past the renew deadline either.
        let pending = gate.reserve_shard(2);
        assert!(!gate.admit_shard(2, pending));
        // Renewed past the renew deadline but before the fence: ownership stays.
        assert_eq!(gate.set_lease(deadlines(3, 4)), Lapse::Refused);
        assert_eq!(gate.owned_shards(), vec![1]);
        assert!(gate.enter_key(&key).await.is_some());
        // Renewing after the fence does not bring the old ownership back.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(gate.set_lease(deadlines(3, 4)), Lapse::Revoked);
        assert!(gate.owned_shards().is_empty());
        assert!(
            !gate.retains_key(&key),
            "revoked shards are pruned, not kept"
        );
        assert!(gate.enter_key(&key).await.is_none());
        assert!(
            !gate.admit_shard(1, epoch),
            "an acquisition from before the lapse"
        );
        let again = gate.reserve_shard(1);
        assert!(gate.admit_shard(1, again));
        assert!(gate.enter_key(&key).await.is_some());
        // A renewal in time keeps ownership.
        assert_eq!(gate.set_lease(deadlines(3, 4)), Lapse::None);
        assert_eq!(gate.owned_shards(), vec![1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_running_sync_is_abandoned_at_the_fence_unless_renewed() {
        let gate = SyncGate::sharded(4);
        let key = key_of_shard(1, 4);
        gate.set_lease(deadlines(3, 4));
        gate.own_shard(1);
        let permit = gate.enter_key(&key).await.unwrap();
        let long = tokio::time::sleep(Duration::from_secs(10));
        let started = Instant::now();
        assert_eq!(permit.run(long).await, None, "a sync outlived the fence");
        assert_eq!(started.elapsed(), Duration::from_secs(4));
        drop(permit);

        // Renewed in time, the fence moves and the sync completes (the lapse above revoked
        // the shard: it is owned again first).
        assert_eq!(gate.set_lease(deadlines(3, 4)), Lapse::Revoked);
        gate.own_shard(1);
        let permit = gate.enter_key(&key).await.unwrap();
        let renewer = {
            let gate = gate.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                gate.set_lease(deadlines(3, 4));
            })
        };
        let sync = tokio::time::sleep(Duration::from_secs(5));
        assert_eq!(permit.run(sync).await, Some(()));
        renewer.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_unsharded_gate_bound_to_a_lease_admits_nothing_past_its_renew_deadline() {
        // Leader election: the gate is open while leading, the Lease bounds it in time.
        let gate = SyncGate::new(true);
        gate.set_lease(deadlines(3, 4));
        drop(gate.enter().await);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let waiting = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter().await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !waiting.is_finished(),
            "a sync started past the renew deadline"
        );
        gate.set_lease(deadlines(3, 4));
        let permit = waiting.await.unwrap();
        // ... and a running one is abandoned at the fence.
        let long = tokio::time::sleep(Duration::from_secs(10));
        assert_eq!(permit.run(long).await, None, "a sync outlived the fence");
    }

    #[tokio::test(start_paused = true)]
    async fn a_sync_is_not_polled_again_once_the_clock_passed_the_fence() {
        // A paused process resumes with its timers not fired yet; the clock decides.
        let gate = SyncGate::sharded(4);
        gate.set_lease(deadlines(3, 4));
        gate.own_shard(1);
        let permit = gate.enter_key(&key_of_shard(1, 4)).await.unwrap();
        let polls = std::sync::atomic::AtomicUsize::new(0);
        let sync = std::future::poll_fn(|cx| {
            polls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        });
        let run = permit.run(sync);
        tokio::pin!(run);
        assert!(futures_poll_once(run.as_mut()).await.is_pending());
        let before = polls.load(std::sync::atomic::Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(futures_poll_once(run.as_mut()).await, Poll::Ready(None));
        assert_eq!(polls.load(std::sync::atomic::Ordering::SeqCst), before);
    }

    async fn futures_poll_once<F: Future + Unpin>(mut f: F) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(std::pin::Pin::new(&mut f).poll(cx))).await
    }

    #[test]
    fn shard_of_is_stable_and_spreads_keys() {
        // Fixed values: every replica (and every build) must agree on a key's shard.
        assert_eq!(shard_of("default/a", 64), shard_of("default/a", 64));
        let mut counts = [0usize; 8];
        for i in 0..8000 {
            counts[shard_of(&format!("ns/p-{i}"), 8) as usize] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "uneven shards: {counts:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn sharded_gate_admits_only_owned_shards() {
        let gate = SyncGate::sharded(4);
        let (a, b) = (key_of_shard(1, 4), key_of_shard(2, 4));
        assert!(gate.enter_key(&a).await.is_none());
        gate.own_shard(1);
        assert_eq!(gate.owned_shards(), vec![1]);
        let permit = gate.enter_key(&a).await.expect("owned shard admitted");
        assert!(gate.enter_key(&b).await.is_none());
        assert!(gate.owns_key(&a) && !gate.owns_key(&b));
        // Releasing waits for the running sync of that shard only.
        let release = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.release_shard(1, Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !release.is_finished(),
            "released while a sync of the shard ran"
        );
        assert!(
            gate.enter_key(&a).await.is_none(),
            "admitted while releasing"
        );
        drop(permit);
        assert!(release.await.unwrap());
        assert!(!gate.owns_key(&a));
        assert!(gate.owned_shards().is_empty());
        assert!(gate.release_shard(3, Duration::ZERO).await);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expedited_shard_expires_and_ends_with_its_release() {
        let gate = SyncGate::sharded(4);
        let (a, b) = (key_of_shard(1, 4), key_of_shard(2, 4));
        assert!(!gate.expediting());
        gate.own_shard(1);
        gate.expedite_shard(1, Duration::from_secs(15));
        assert!(gate.expediting());
        assert!(gate.expedites_key(&a));
        assert!(!gate.expedites_key(&b), "only the expedited shard");
        tokio::time::sleep(Duration::from_secs(16)).await;
        assert!(!gate.expediting() && !gate.expedites_key(&a), "expired");

        gate.expedite_shard(1, Duration::from_secs(15));
        assert!(gate.release_shard(1, Duration::ZERO).await);
        assert!(!gate.expedites_key(&a) && !gate.expediting(), "released");
        // Without sharding nothing is expedited; an out-of-range shard is ignored.
        let plain = SyncGate::new(true);
        plain.expedite_shard(0, Duration::from_secs(15));
        assert!(!plain.expediting() && !plain.expedites_key(&a));
        gate.expedite_shard(99, Duration::MAX);
        assert!(!gate.expedites_key(&a));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reserved_shard_is_retained_but_admitted_only_by_its_own_acquisition() {
        let gate = SyncGate::sharded(4);
        let a = key_of_shard(1, 4);
        assert!(!gate.retains_key(&a));
        let epoch = gate.reserve_shard(1);
        assert!(gate.retains_key(&a), "kept while its relist runs");
        assert!(
            gate.enter_key(&a).await.is_none(),
            "admitted before its relist"
        );
        assert!(gate.admit_shard(1, epoch));
        assert!(gate.enter_key(&a).await.is_some());
        assert!(gate.release_shard(1, Duration::ZERO).await);
        assert!(
            !gate.retains_key(&a),
            "still retained after the release drained"
        );
        // An acquisition overtaken by a release never admits the shard.
        let stale = gate.reserve_shard(1);
        assert!(gate.release_shard(1, Duration::ZERO).await);
        assert!(!gate.admit_shard(1, stale));
        assert!(gate.enter_key(&a).await.is_none());
        // A release still draining when a new acquisition begins leaves the shard retained.
        gate.own_shard(1);
        let permit = gate.enter_key(&a).await.unwrap();
        let release = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.release_shard(1, Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        let epoch = gate.reserve_shard(1);
        drop(permit);
        assert!(release.await.unwrap());
        assert!(gate.retains_key(&a));
        assert!(gate.admit_shard(1, epoch));
        // Without sharding everything is retained.
        assert!(SyncGate::default().retains_key(&a));
    }

    #[tokio::test(start_paused = true)]
    async fn close_gives_up_after_the_timeout() {
        let gate = SyncGate::default();
        let _permit = gate.enter().await;
        assert!(!gate.close_and_drain(Duration::from_secs(3)).await);
    }
}
