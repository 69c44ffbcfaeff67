//! The driver of a replica's shard coordinator: each round it renews the membership
//! (bounded by the renew deadline), gathers what the replica knows into a
//! [`machine::View`], asks [`machine::round`] what to do and carries the actions out (see
//! `effects`). Every decision is in the machine; here are only requests and bookkeeping.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use metacontroller_dynamic::{Informers, Supervisor};
use metacontroller_workqueue::{Lapse, SyncGate};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::effects::{Ahead, Reserved};
use super::leases::role;
use super::machine::{self, Action, Group, View};
use super::membership::{observe_members, Observed};
use super::metrics::ShardMetrics;
use super::{ShardConfig, GROUP_LABEL};
use crate::coordination::{holder_of, LeaseClient};

pub(super) struct Coordinator {
    pub(super) leases: LeaseClient,
    pub(super) config: ShardConfig,
    pub(super) gate: SyncGate,
    pub(super) informers: Informers,
    pub(super) metrics: ShardMetrics,
    /// Every task the coordinator starts runs under it.
    pub(super) supervisor: Supervisor,
    /// Member Leases as first seen with their current spec, by the rounds' lists and the
    /// watch (`watch_members`).
    pub(super) observed: Observed,
    /// Rings when a member joined or left (see `watch_members`).
    pub(super) wake: Arc<Notify>,
    /// The member Lease watch; aborted when the coordinator ends.
    pub(super) watch_task: tokio::task::JoinHandle<()>,
    /// Our member Lease as last written (its resourceVersion guards the next renewal).
    pub(super) member: Option<Lease>,
    /// When our last successful member renewal was *sent*.
    pub(super) renewed: Option<Instant>,
    /// Shards being drained before their Lease is cleared.
    pub(super) releasing: Arc<Mutex<HashSet<u32>>>,
    /// Shards whose Lease we took, waiting for the relist before their keys are admitted.
    pub(super) acquiring: Arc<Mutex<HashSet<u32>>>,
    /// The members seen by the previous round.
    pub(super) last_members: Option<Vec<String>>,
    /// Live members using another `--shards`, as last logged.
    pub(super) foreign: Vec<String>,
    /// Live members that have not renewed for [`machine::silent_after`] (last round).
    pub(super) silent: Vec<String>,
    /// Shards of silent members this replica would take over, retained ahead (see
    /// `Coordinator::cache_ahead`).
    pub(super) ahead: HashMap<u32, Ahead>,
}

impl Coordinator {
    /// A coordinator of `config`'s group, not started (see [`Coordinator::run`]).
    pub(super) fn new(
        parts: (LeaseClient, ShardConfig, SyncGate, Informers, ShardMetrics),
        supervisor: Supervisor,
        observed: Observed,
        wake: Arc<Notify>,
        watch_task: tokio::task::JoinHandle<()>,
    ) -> Coordinator {
        let (leases, config, gate, informers, metrics) = parts;
        Coordinator {
            leases,
            config,
            gate,
            informers,
            metrics,
            supervisor,
            observed,
            wake,
            watch_task,
            member: None,
            renewed: None,
            releasing: Arc::default(),
            acquiring: Arc::default(),
            last_members: None,
            foreign: Vec::new(),
            silent: Vec::new(),
            ahead: HashMap::new(),
        }
    }

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

    /// Until the next round: see [`machine::next_round_in`].
    fn pause(&self) -> Duration {
        machine::next_round_in(
            &lock(&self.observed),
            &self.config.identity,
            Instant::now(),
            crate::coordination::jitter(self.config.retry_period),
        )
    }

    /// One round: renew our membership, ask the machine what that means (stop every shard,
    /// or read the group by a deadline), read the group, and carry out what the machine
    /// decides with it.
    async fn round(&mut self) {
        let lapse = self.renew_bounded().await;
        let mut read_by = None;
        for action in self.decide(lapse, None) {
            match action {
                Action::ReadGroup { by } => read_by = Some(by),
                other => {
                    self.carry_out(other, &HashMap::new(), &mut Vec::new())
                        .await
                }
            }
        }
        let Some(by) = read_by else {
            return;
        };
        let Some(leases) = self.read_group(by).await else {
            return;
        };
        let shard_leases: HashMap<String, Lease> = leases
            .iter()
            .filter(|l| role(l) == Some("shard"))
            .filter_map(|l| Some((l.metadata.name.clone()?, l.clone())))
            .collect();
        let actions = self.decide(Lapse::None, Some(&leases));
        let mut reserved = Vec::new();
        for action in actions {
            self.carry_out(action, &shard_leases, &mut reserved).await;
        }
        self.update_metrics();
    }

    /// What the machine decides from what this replica knows now (and the group's
    /// `leases`, once read this round).
    fn decide(&self, lapse: Lapse, leases: Option<&[Lease]>) -> Vec<Action> {
        let owned: HashSet<u32> = self.gate.owned_shards().into_iter().collect();
        let acquiring = lock(&self.acquiring).clone();
        let releasing = self.lock_releasing().clone();
        let ahead: HashSet<u32> = self.ahead.keys().copied().collect();
        let now = Instant::now();
        let group = leases.map(|leases| {
            let by_name: HashMap<&str, &Lease> = leases
                .iter()
                .filter(|l| role(l) == Some("shard"))
                .filter_map(|l| Some((l.metadata.name.as_deref()?, l)))
                .collect();
            Group {
                others: observe_members(&self.observed, &self.config.identity, leases, now),
                holders: (0..self.config.shards)
                    .map(|s| {
                        let name = self.config.shard_lease(s);
                        holder_of(by_name.get(name.as_str()).copied())
                    })
                    .collect(),
            }
        });
        let view = View {
            config: &self.config,
            renewed: self.renewed,
            lapse,
            owned: &owned,
            acquiring: &acquiring,
            releasing: &releasing,
            ahead: &ahead,
            last_members: self.last_members.as_deref(),
            foreign: &self.foreign,
            group,
        };
        machine::round(&view, now)
    }

    /// Carries out one action of the machine; the shards acquired go to `reserved`, to be
    /// admitted by [`Action::AdmitAcquired`].
    async fn carry_out(
        &mut self,
        action: Action,
        shard_leases: &HashMap<String, Lease>,
        reserved: &mut Vec<Reserved>,
    ) {
        match action {
            Action::ResyncOwned => self.resync_owned(),
            Action::ForgetPending => self.forget_pending(),
            Action::StopAll { drain_until } => self.stop_all(drain_until).await,
            // Read by `round`, which asks for it.
            Action::ReadGroup { .. } => {}
            Action::Members { members, silent } => {
                self.metrics
                    .members
                    .set(i64::try_from(members.len()).unwrap_or(i64::MAX));
                self.silent = silent;
                self.last_members = Some(members);
            }
            Action::Foreign(foreign) => self.foreign_changed(foreign),
            Action::Stop(shard) => {
                let holder = holder_of(shard_leases.get(&self.config.shard_lease(shard)));
                tracing::error!(shard, holder = ?holder, "sharding: a shard this replica syncs is held by another; stopping it");
                lock(&self.acquiring).remove(&shard);
                self.spawn_release(shard, false);
            }
            Action::Release(shard) => {
                lock(&self.acquiring).remove(&shard);
                self.spawn_release(shard, true);
            }
            Action::Acquire {
                shard,
                orphaned,
                by,
            } => {
                if Instant::now() < by {
                    let name = self.config.shard_lease(shard);
                    let lease = shard_leases.get(&name);
                    reserved.extend(self.take(shard, &name, lease, orphaned, by).await);
                }
            }
            Action::DropAhead { forget, unreserve } => self.drop_ahead(&forget, &unreserve).await,
            Action::CacheAhead(shards) => self.cache_ahead(&shards),
            Action::AdmitAcquired => {
                if !reserved.is_empty() {
                    tracing::info!(
                        reserved = reserved.len(),
                        members = self.last_members.as_ref().map_or(0, Vec::len),
                        "sharding: acquired shard leases; syncing them once the caches hold them"
                    );
                    self.spawn_admit(std::mem::take(reserved));
                }
            }
        }
    }

    /// Renews the member Lease, the attempt bounded by `--shard-renew-deadline`. On success
    /// the gate's deadlines move to count from when the renewal was *sent*: the server, and so
    /// every other replica, saw it later, so no other replica can count our Lease as expired
    /// before `sent + lease duration`. Returns what the gate says of the renewal's timing.
    async fn renew_bounded(&mut self) -> Lapse {
        match tokio::time::timeout(self.config.renew_deadline, self.renew()).await {
            Ok(Ok(sent)) => {
                self.renewed = Some(sent);
                self.gate.set_lease(crate::coordination::lease_deadlines(
                    sent,
                    self.config.lease_duration,
                    self.config.renew_deadline,
                ))
            }
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "sharding: cannot renew the member lease");
                Lapse::None
            }
            Err(_) => {
                // The request may still reach the server; the Lease is read again.
                self.member = None;
                tracing::warn!(timeout = ?self.config.renew_deadline, "sharding: renewing the member lease timed out");
                Lapse::None
            }
        }
    }

    /// Lists the group's Leases (bounded by `by`).
    async fn read_group(&mut self, by: Instant) -> Option<Vec<Lease>> {
        let selector = format!("{GROUP_LABEL}={}", self.config.group);
        match tokio::time::timeout_at(by, self.leases.list(&selector)).await {
            Ok(listed) => match listed.result {
                Ok(leases) => Some(leases),
                Err(err) => {
                    tracing::warn!(error = %err, "sharding: cannot list the group's leases");
                    None
                }
            },
            Err(_) => {
                tracing::warn!("sharding: listing the group's leases timed out");
                None
            }
        }
    }

    /// Logs a change of the live members using another `--shards`.
    fn foreign_changed(&mut self, foreign: Vec<String>) {
        if foreign.is_empty() {
            tracing::info!(
                "sharding: every live replica uses --shards {}; acquiring shards again",
                self.config.shards
            );
        } else {
            tracing::error!(shards = self.config.shards, others = ?foreign, "sharding: live replicas use another --shards; acquiring no shard until they are gone (all replicas must use the same value)");
        }
        self.foreign = foreign;
    }

    pub(super) fn update_metrics(&self) {
        self.metrics
            .owned
            .set(i64::try_from(self.gate.owned_shards().len()).unwrap_or(i64::MAX));
    }

    pub(super) fn lock_releasing(&self) -> std::sync::MutexGuard<'_, HashSet<u32>> {
        self.releasing.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Locks `m`, also after a panic elsewhere (the data stays usable).
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
