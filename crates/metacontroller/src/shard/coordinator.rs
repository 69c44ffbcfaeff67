//! The rounds of a replica's shard coordinator: renew the membership (bounded by the renew
//! deadline), read the group, release and acquire shards, cache ahead what a silent member
//! holds, and stop every shard when the membership cannot be renewed in time.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt as _, Shared};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use metacontroller_dynamic::shard_of;
use metacontroller_dynamic::{Informers, Lapse, LeaseDeadlines, Relisted, Supervisor, SyncGate};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::assignment::{assignment, settled};
use super::decision::{decide, shards_to_cache_ahead, ShardAction, ShardFacts};
use super::leases::{list_leases, role};
use super::membership::{next_round_in, Observed};
use super::metrics::ShardMetrics;
use super::{ShardConfig, GROUP_LABEL};
use crate::coordination::holder_of;

pub(super) struct Coordinator {
    pub(super) api: Api<Lease>,
    pub(super) config: ShardConfig,
    pub(super) gate: SyncGate,
    pub(super) informers: Informers,
    pub(super) metrics: ShardMetrics,
    /// Member Leases as first seen with their current spec, by the rounds' lists and the
    /// watch ([`watch_members`]).
    pub(super) observed: Observed,
    /// Rings when a member joined or left (see [`watch_members`]).
    pub(super) wake: Arc<Notify>,
    /// The member Lease watch; aborted when the coordinator ends.
    pub(super) watch_task: tokio::task::JoinHandle<()>,
    /// Our member Lease as last written (its resourceVersion guards the next renewal).
    pub(super) member: Option<Lease>,
    /// When our member Lease was last renewed.
    pub(super) renewed: Option<Instant>,
    /// Shards being drained before their Lease is cleared.
    pub(super) releasing: Arc<Mutex<HashSet<u32>>>,
    /// Shards whose Lease we took, waiting for the relist before their keys are admitted.
    pub(super) acquiring: Arc<Mutex<HashSet<u32>>>,
    /// The members seen by the previous round.
    pub(super) last_members: Option<Vec<String>>,
    /// Live members using another `--shards`, as last logged.
    pub(super) foreign: Vec<String>,
    /// Live members that have not renewed for [`Coordinator::silent_after`] (last round).
    pub(super) silent: Vec<String>,
    /// Shards of silent members this replica would take over, retained ahead (see
    /// [`Coordinator::cache_ahead`]).
    pub(super) ahead: HashMap<u32, Ahead>,
}

impl Coordinator {
    pub(super) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        tracing::info!(identity = %self.config.identity, namespace = %self.config.namespace, group = %self.config.group, shards = self.config.shards, "sharding: joining the group");
        loop {
            // Rounds start a retry period apart, however long one took (a slow round must
            // not push the next renewal past the renew deadline).
            let started = Instant::now();
            self.round().await;
            let pause = self.pause().saturating_sub(started.elapsed());
            let stopped = tokio::select! {
                _ = self.wake.notified() => *stop.borrow(),
                stopped = crate::coordination::sleep_or_stop(pause, &mut stop) => stopped,
            };
            if stopped {
                self.watch_task.abort();
                self.leave().await;
                return;
            }
        }
    }

    /// Until the next round: see [`next_round_in`].
    fn pause(&self) -> Duration {
        next_round_in(
            &lock(&self.observed),
            &self.config.identity,
            Instant::now(),
            crate::coordination::jitter(self.config.retry_period),
        )
    }

    /// One round: renew our membership, then (bounded by the renew deadline, so a hung
    /// request never keeps the round from noticing a lapse) read the group, release and
    /// acquire shards.
    async fn round(&mut self) {
        self.renew_bounded().await;
        let Some(deadlines) = self.renewed.map(|sent| self.deadlines(sent)) else {
            return;
        };
        if Instant::now() >= deadlines.renew_by {
            self.stop_all().await;
            return;
        }
        // Leave a retry period of the renew deadline for the next renewal.
        let act_by = deadlines
            .renew_by
            .checked_sub(self.config.retry_period)
            .unwrap_or(deadlines.renew_by)
            .max(Instant::now());
        self.act(act_by).await;
    }

    /// Renews the member Lease, the attempt bounded by `--shard-renew-deadline`. On success
    /// the gate's deadlines move to count from when the renewal was *sent*: the server, and so
    /// every other replica, saw it later, so no other replica can count our Lease as expired
    /// before `sent + lease duration`.
    async fn renew_bounded(&mut self) {
        let sent = Instant::now();
        match tokio::time::timeout(self.config.renew_deadline, self.renew()).await {
            Ok(Ok(())) => {
                self.renewed = Some(sent);
                match self.gate.set_lease(self.deadlines(sent)) {
                    Lapse::None => {}
                    Lapse::Refused => {
                        // Keys refused past the renew deadline were dropped from the queues.
                        let owned: HashSet<u32> = self.gate.owned_shards().into_iter().collect();
                        let shards = self.config.shards;
                        self.informers
                            .resync_parents(|key| owned.contains(&shard_of(key, shards)));
                        tracing::warn!("sharding: renewed the member lease after the renew deadline; syncing the owned shards again");
                    }
                    Lapse::Revoked => {
                        // Ownership and acquisitions from before the fence are void (see
                        // `SyncGate::set_lease`): every shard is acquired again, with a
                        // relist. What the caches and the controllers held for them goes
                        // now: shards another replica took meanwhile may never come back.
                        lock(&self.acquiring).clear();
                        self.ahead.clear();
                        self.informers.prune_filtered();
                        tracing::warn!(
                            "sharding: the member lease had lapsed; acquiring the shards again"
                        );
                    }
                }
            }
            Ok(Err(err)) => tracing::warn!(error = %err, "sharding: cannot renew the member lease"),
            Err(_) => {
                // The request may still reach the server; the Lease is read again.
                self.member = None;
                tracing::warn!(timeout = ?self.config.renew_deadline, "sharding: renewing the member lease timed out");
            }
        }
    }

    /// The gate's deadlines after a renewal sent at `sent`: no sync starts after the renew
    /// deadline, and running ones are abandoned at the fence, a margin before the Lease can
    /// expire in any other replica's eyes (the duration written in the Lease, whole seconds).
    pub(super) fn deadlines(&self, sent: Instant) -> LeaseDeadlines {
        crate::coordination::lease_deadlines(
            sent,
            self.config.lease_duration,
            self.config.renew_deadline,
        )
    }

    /// The rest of a round: read the group, release and acquire shards. Requests are bounded
    /// by `act_by` and no acquisition begins after it, so a slow or hung API server never
    /// keeps the next renewal from being sent in time; what is left is done next round.
    async fn act(&mut self, act_by: Instant) {
        let Some((members, shard_leases)) = self.read_group(act_by).await else {
            return;
        };
        let member_refs: Vec<&str> = members.iter().map(String::as_str).collect();
        let owners = assignment(self.config.shards, &member_refs);
        let view = RoundView {
            me: self.config.identity.clone(),
            // While a live replica splits parents differently (a rolling update that
            // changed --shards), acquire nothing: keep syncing the shards held, take none
            // of theirs.
            may_acquire: settled(self.last_members.as_deref(), &members) && self.foreign.is_empty(),
            owned: self.gate.owned_shards().into_iter().collect(),
            acquiring: lock(&self.acquiring).clone(),
            members: &members,
            act_by,
        };
        let mut reserved = Vec::new();
        for shard in 0..self.config.shards {
            let mine = owners.get(shard as usize).copied().flatten() == Some(view.me.as_str());
            let name = self.config.shard_lease(shard);
            let lease = shard_leases.get(&name);
            reserved.extend(self.act_on_shard(shard, mine, &name, lease, &view).await);
        }
        self.cache_ahead(&members, &shard_leases).await;
        self.last_members = Some(members.clone());
        if !reserved.is_empty() {
            tracing::info!(
                reserved = reserved.len(),
                members = members.len(),
                "sharding: acquired shard leases; syncing them once the caches hold them"
            );
            self.spawn_admit(reserved);
        }
        self.update_metrics();
    }

    /// Lists the group's Leases (bounded by `act_by`): the live members (see
    /// [`Coordinator::members`]) and the shard Leases by name.
    async fn read_group(
        &mut self,
        act_by: Instant,
    ) -> Option<(Vec<String>, HashMap<String, Lease>)> {
        let selector = format!("{GROUP_LABEL}={}", self.config.group);
        let leases = match tokio::time::timeout_at(act_by, list_leases(&self.api, &selector)).await
        {
            Ok(Ok(leases)) => leases,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "sharding: cannot list the group's leases");
                return None;
            }
            Err(_) => {
                tracing::warn!("sharding: listing the group's leases timed out");
                return None;
            }
        };
        let members = self.members(&leases);
        self.metrics
            .members
            .set(i64::try_from(members.len()).unwrap_or(i64::MAX));
        let shard_leases = leases
            .into_iter()
            .filter(|l| role(l) == Some("shard"))
            .filter_map(|l| Some((l.metadata.name.clone()?, l)))
            .collect();
        Some((members, shard_leases))
    }

    /// One shard in a round: stop it when another replica holds it, release it when the
    /// assignment moved it away, or take it when it is ours and free. Returns the shard
    /// when its Lease was just taken (to be admitted after the relist).
    async fn act_on_shard(
        &mut self,
        shard: u32,
        mine: bool,
        name: &str,
        lease: Option<&Lease>,
        view: &RoundView<'_>,
    ) -> Option<Reserved> {
        let holder = holder_of(lease);
        let facts = ShardFacts {
            me: view.me.as_str(),
            holder,
            holder_is_member: holder.is_some_and(|h| view.members.iter().any(|m| m == h)),
            active: view.owned.contains(&shard) || view.acquiring.contains(&shard),
            releasing: self.lock_releasing().contains(&shard),
            mine,
            may_acquire: view.may_acquire,
            time_left: Instant::now() < view.act_by,
        };
        match decide(&facts) {
            ShardAction::Leave => None,
            ShardAction::Stop => {
                tracing::error!(shard, holder = ?holder, "sharding: a shard this replica syncs is held by another; stopping it");
                lock(&self.acquiring).remove(&shard);
                self.spawn_release(shard, false);
                None
            }
            ShardAction::Release => {
                lock(&self.acquiring).remove(&shard);
                self.spawn_release(shard, true);
                None
            }
            ShardAction::Take { orphaned } => {
                self.take(shard, name, lease, orphaned, view.act_by).await
            }
        }
    }

    /// Takes the shard Lease (bounded by `act_by`). A Lease written after our own lapsed
    /// is re-acquired in a later round.
    async fn take(
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

    /// A member that has not renewed for this long (two renewals missed, and half a period
    /// of slack) is *silent*: probably dead; its Lease expires within the rest of the lease
    /// duration.
    pub(super) fn silent_after(&self) -> Duration {
        self.config.retry_period * 5 / 2
    }

    /// Retains, ahead of a takeover, the shards the silent members hold that this replica
    /// would take if they were gone, and relists once for them: when their Leases expire
    /// those shards are admitted at once instead of after a relist of every filtered
    /// informer, which sits on the takeover's critical path. Nothing is synced early: the keys are admitted only
    /// after the shard Lease is taken. Shards no longer in that position (their holder
    /// renewed, the assignment changed) are released and pruned again.
    async fn cache_ahead(&mut self, members: &[String], shard_leases: &HashMap<String, Lease>) {
        let me = self.config.identity.as_str();
        let owned: HashSet<u32> = self.gate.owned_shards().into_iter().collect();
        let acquiring: HashSet<u32> = lock(&self.acquiring).clone();
        let releasing: HashSet<u32> = self.lock_releasing().clone();
        let busy = |s: &u32| owned.contains(s) || acquiring.contains(s) || releasing.contains(s);
        let wanted = if self.foreign.is_empty() {
            let members: Vec<&str> = members.iter().map(String::as_str).collect();
            let silent: Vec<&str> = self.silent.iter().map(String::as_str).collect();
            let holders: Vec<Option<&str>> = (0..self.config.shards)
                .map(|shard| holder_of(shard_leases.get(&self.config.shard_lease(shard))))
                .collect();
            shards_to_cache_ahead(me, &members, &silent, &holders, |s| busy(&s))
        } else {
            HashSet::new()
        };
        let stale: Vec<u32> = self
            .ahead
            .keys()
            .filter(|s| !wanted.contains(s))
            .copied()
            .collect();
        if !stale.is_empty() {
            for shard in &stale {
                self.ahead.remove(shard);
                if !busy(shard) {
                    self.gate.release_shard(*shard, Duration::ZERO).await;
                }
            }
            let pruned = self.informers.prune_filtered();
            tracing::info!(
                shards = stale.len(),
                pruned,
                "sharding: dropped the shards cached ahead (their holder renewed, or the assignment changed)"
            );
        }
        let new: Vec<u32> = wanted
            .into_iter()
            .filter(|s| !self.ahead.contains_key(s))
            .collect();
        if new.is_empty() {
            return;
        }
        let epochs: Vec<(u32, u64)> = new
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
            shards = new.len(),
            "sharding: members stopped renewing; caching the shards this replica would take over ahead of their lease expiry"
        );
        // Drives the list to its end (so `peek` shows it) whether or not a takeover waits.
        let supervisor = self.informers.supervisor();
        Supervisor::spawn_once_with(supervisor, "shard-cache-ahead", async move {
            list.await;
        });
    }

    fn update_metrics(&self) {
        self.metrics
            .owned
            .set(i64::try_from(self.gate.owned_shards().len()).unwrap_or(i64::MAX));
    }

    /// Waits for the lists the reserved shards need — one requested now (after the
    /// reservations) unless each was cached ahead, and the ahead lists still running — then
    /// admits the reserved shards that were not released meanwhile and replays the caches
    /// so their parents are queued. A failed list does not hold the shards back: the
    /// informer that failed reads as not synced, so only its controllers wait for it. The
    /// parents of orphaned shards are expedited for one lease duration: they go ahead of
    /// this replica's own backlog, follow-ups included.
    fn spawn_admit(&self, reserved: Vec<Reserved>) {
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
        let supervisor = self.informers.supervisor();
        Supervisor::spawn_once_with(supervisor, "shard-admit", async move {
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

    pub(super) fn lock_releasing(&self) -> std::sync::MutexGuard<'_, HashSet<u32>> {
        self.releasing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Our member Lease is not current: stop every shard before another replica may take
    /// them (`lease_duration` after our last renewal), or exit.
    async fn stop_all(&mut self) {
        let owned = self.gate.owned_shards();
        if owned.is_empty() && lock(&self.acquiring).is_empty() && self.ahead.is_empty() {
            return;
        }
        // Syncs still running at the fence are abandoned by the gate (their permits drop),
        // so the drain ends by then; a second more covers a busy runtime.
        let deadline = self
            .renewed
            .map(|t| self.deadlines(t).fence + Duration::from_secs(1))
            .unwrap_or_else(Instant::now);
        let budget = deadline.saturating_duration_since(Instant::now());
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

/// What one round of [`Coordinator::act`] decides every shard with.
struct RoundView<'a> {
    /// This replica's identity.
    me: String,
    /// Whether shards may be acquired this round (the membership is settled and every
    /// live member uses our `--shards`).
    may_acquire: bool,
    /// Shards the gate admits now.
    owned: HashSet<u32>,
    /// Shards taken and waiting for their relist.
    acquiring: HashSet<u32>,
    /// The live members.
    members: &'a [String],
    /// No request or acquisition past this instant.
    act_by: Instant,
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

/// A shard retained ahead of a takeover (see [`Coordinator::cache_ahead`]).
pub(super) struct Ahead {
    /// From [`SyncGate::reserve_shard`]: still current if nothing released or reserved the
    /// shard since, which [`SyncGate::admit_shard`] checks.
    epoch: u64,
    /// The list requested after the reservation.
    list: AheadList,
}

/// Locks `m`, also after a panic elsewhere (the data stays usable).
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
