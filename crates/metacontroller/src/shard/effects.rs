//! What the coordinator does for the machine's actions that change ownership: take a
//! shard Lease and reserve the shard, cache shards ahead of a takeover (and drop them
//! again), admit acquired shards once the caches hold them, and stop every shard when the
//! membership lapsed. Leases are written through `leases`, member Leases through
//! `membership`.

use std::collections::HashSet;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt as _, Shared};
use k8s_openapi::api::coordination::v1::Lease;
use metacontroller_dynamic::{Relisted, Supervisor};
use metacontroller_workqueue::shard_of;
use tokio::time::Instant;

use super::coordinator::{lock, Coordinator};

impl Coordinator {
    /// Takes the shard Lease (bounded by `act_by`). A Lease written after our own lapsed
    /// is re-acquired in a later round.
    pub(super) async fn take(
        &mut self,
        shard: u32,
        name: &str,
        lease: Option<&Lease>,
        orphaned: bool,
        act_by: Instant,
    ) -> Option<Reserved> {
        let taken = tokio::time::timeout_at(act_by, self.acquire(shard, name, lease))
            .await
            .unwrap_or(false);
        if !taken || !self.gate.lease_current() {
            return None;
        }
        // Cached ahead: its list, complete or still running, is all the shard waits for.
        // After a failed one the shard is reserved and relisted again.
        let ahead = self
            .ahead
            .remove(&shard)
            .filter(|a| a.list.peek() != Some(&Relisted::Failed));
        let (epoch, ahead_list) = match ahead {
            Some(ahead) => (ahead.epoch, Some(ahead.list)),
            None => (self.gate.reserve_shard(shard), None),
        };
        lock(&self.acquiring).insert(shard);
        Some(Reserved {
            shard,
            epoch,
            orphaned,
            ahead: ahead_list,
        })
    }

    /// Retains, ahead of a takeover, `shards` (held by silent members, and this replica's
    /// once they are gone: see [`super::machine`]), and relists once for them: when their
    /// Leases expire those shards are admitted at once instead of after a relist of every
    /// filtered informer, which sits on the takeover's critical path. Nothing is synced
    /// early: the keys are admitted only after the shard Lease is taken.
    pub(super) fn cache_ahead(&mut self, shards: &[u32]) {
        let epochs: Vec<(u32, u64)> = shards
            .iter()
            .map(|shard| (*shard, self.gate.reserve_shard(*shard)))
            .collect();
        // Requested after the reservations, so the list keeps the new shards.
        let list = self.informers.relist_filtered().boxed().shared();
        for (shard, epoch) in epochs {
            let list = list.clone();
            self.ahead.insert(shard, Ahead { epoch, list });
        }
        tracing::info!(
            silent = ?self.silent,
            shards = shards.len(),
            "sharding: members stopped renewing; caching the shards this replica would take over ahead of their lease expiry"
        );
        // Drives the list to its end (so `peek` shows it) whether or not a takeover waits.
        Supervisor::spawn_once_with(Some(&self.supervisor), "shard-cache-ahead", async move {
            list.await;
        });
    }

    /// Forgets the shards cached ahead in `forget` (their holder renewed, or the assignment
    /// changed), releases `unreserve` in the gate and prunes what the caches kept for them.
    pub(super) async fn drop_ahead(&mut self, forget: &[u32], unreserve: &[u32]) {
        for shard in forget {
            self.ahead.remove(shard);
        }
        for shard in unreserve {
            self.gate.release_shard(*shard, Duration::ZERO).await;
        }
        let pruned = self.informers.prune_filtered();
        tracing::info!(
            shards = forget.len(),
            pruned,
            "sharding: dropped the shards cached ahead (their holder renewed, or the assignment changed)"
        );
    }

    /// A renewal after the renew deadline: keys refused meanwhile were dropped from the
    /// queues, so the owned shards' parents are queued again.
    pub(super) fn resync_owned(&self) {
        let owned: HashSet<u32> = self.gate.owned_shards().into_iter().collect();
        let shards = self.config.shards;
        self.informers
            .resync_parents(|key| owned.contains(&shard_of(key, shards)));
        tracing::warn!("sharding: renewed the member lease after the renew deadline; syncing the owned shards again");
    }

    /// A renewal after the fence: ownership and acquisitions from before are void (see
    /// `SyncGate::set_lease`): every shard is acquired again, with a relist. What the caches
    /// and the controllers held for them goes now: shards another replica took meanwhile may
    /// never come back.
    pub(super) fn forget_pending(&mut self) {
        lock(&self.acquiring).clear();
        self.ahead.clear();
        self.informers.prune_filtered();
        tracing::warn!("sharding: the member lease had lapsed; acquiring the shards again");
    }

    /// Waits for the lists the reserved shards need — one requested now (after the
    /// reservations) unless each was cached ahead, and the ahead lists still running — then
    /// admits the reserved shards that were not released meanwhile and replays the caches
    /// so their parents are queued. A failed list does not hold the shards back: the
    /// informer that failed reads as not synced, so only its controllers wait for it. The
    /// parents of orphaned shards are expedited for one lease duration: they go ahead of
    /// this replica's own backlog, follow-ups included.
    pub(super) fn spawn_admit(&self, reserved: Vec<Reserved>) {
        let expedite_for = self.config.lease_duration;
        let cached_ahead = reserved.iter().filter(|r| r.ahead.is_some()).count();
        let mut lists: Vec<AheadList> = reserved
            .iter()
            .filter_map(|r| r.ahead.clone())
            .filter(|list| list.peek().is_none())
            .collect();
        if cached_ahead < reserved.len() {
            lists.push(self.informers.relist_filtered().boxed().shared());
        }
        let relist = futures::future::join_all(lists);
        let gate = self.gate.clone();
        let informers = self.informers.clone();
        let acquiring = self.acquiring.clone();
        let metrics = self.metrics.clone();
        Supervisor::spawn_once_with(Some(&self.supervisor), "shard-admit", async move {
            let started = Instant::now();
            tokio::pin!(relist);
            while tokio::time::timeout(Duration::from_secs(30), &mut relist)
                .await
                .is_err()
            {
                tracing::warn!(
                    waited = ?started.elapsed(),
                    "sharding: still relisting before syncing acquired shards"
                );
            }
            let mut admitted = HashSet::new();
            let mut expedited = 0;
            for Reserved {
                shard,
                epoch,
                orphaned,
                ahead,
            } in reserved
            {
                let pending = lock(&acquiring).remove(&shard);
                if pending && gate.admit_shard(shard, epoch) {
                    admitted.insert(shard);
                    if orphaned {
                        gate.expedite_shard(shard, expedite_for);
                        expedited += 1;
                        metrics
                            .takeovers
                            .with_label_values(&[if ahead.is_some() { "true" } else { "false" }])
                            .inc();
                    }
                }
            }
            let owned = gate.owned_shards().len();
            metrics.owned.set(i64::try_from(owned).unwrap_or(i64::MAX));
            if !admitted.is_empty() {
                tracing::info!(
                    admitted = admitted.len(),
                    expedited,
                    cached_ahead,
                    owned,
                    relist = ?started.elapsed(),
                    "sharding: caches relisted; syncing the acquired shards"
                );
                // Only the acquired shards' parents: the others are synced already.
                let shards = gate.shard_count().unwrap_or(1);
                informers.resync_parents(|key| admitted.contains(&shard_of(key, shards)));
            }
        });
    }

    /// Our member Lease is not current: stop every shard before another replica may take
    /// them (`lease_duration` after our last renewal was sent), draining until
    /// `drain_until`, or exit.
    pub(super) async fn stop_all(&mut self, drain_until: Instant) {
        let owned = self.gate.owned_shards();
        let budget = drain_until.saturating_duration_since(Instant::now());
        tracing::error!(
            shards = owned.len(),
            ?budget,
            "sharding: cannot renew the member lease; stopping all shards"
        );
        let drains = owned.iter().map(|s| self.gate.release_shard(*s, budget));
        let drained = futures::future::join_all(drains).await;
        if drained.iter().any(|d| !d) {
            tracing::error!("sharding: running syncs did not end before the member lease expires; exiting so two replicas never sync one parent");
            std::process::exit(1);
        }
        // Pending acquisitions too: their Leases may be taken over as well.
        let mut pending: Vec<u32> = lock(&self.acquiring).drain().collect();
        pending.extend(self.ahead.drain().map(|(shard, _)| shard));
        for shard in pending {
            self.gate.release_shard(shard, Duration::ZERO).await;
        }
        self.informers.prune_filtered();
        self.metrics.owned.set(0);
    }
}

/// A shard whose Lease this replica just took, not admitted yet.
pub(super) struct Reserved {
    shard: u32,
    /// From [`SyncGate::reserve_shard`], for [`SyncGate::admit_shard`].
    epoch: u64,
    /// Taken from a holder that is no longer a member (not released by it).
    orphaned: bool,
    /// Retained ahead (see [`Ahead`]): the list started then is the one it waits for.
    ahead: Option<AheadList>,
}

/// The list requested for shards cached ahead, shared by the takeovers waiting for it.
pub(super) type AheadList = Shared<BoxFuture<'static, Relisted>>;

/// A shard retained ahead of a takeover (see `Coordinator::cache_ahead`).
pub(super) struct Ahead {
    /// From [`SyncGate::reserve_shard`]: still current if nothing released or reserved the
    /// shard since, which [`SyncGate::admit_shard`] checks.
    epoch: u64,
    /// The list requested after the reservation.
    list: AheadList,
}
