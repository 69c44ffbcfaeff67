//! Sharding (`--sharding`): parents spread over all replicas, coordinated only through
//! `coordination.k8s.io/v1` Leases — no coordinator besides the API server.
//!
//! # Design
//!
//! - **Keys → shards.** Every queue key (a parent's `namespace/name`) hashes to one of
//!   `--shards` virtual shards ([`metacontroller_dynamic::shard_of`], a stable hash).
//!   The key, not the uid, is hashed: the work queue's one-worker-per-key guarantee is on the
//!   key, the gate decides without a cache read, and a child event maps to its parent's key
//!   before the parent is even cached.
//! - **Membership.** Each replica holds its own *member Lease*
//!   `<leader-election-id>-member-<hash of identity>` (labelled
//!   `metacontroller.k8s.io/shard-group=<leader-election-id>`,
//!   `metacontroller.k8s.io/shard-role=member`) and renews it every `--shard-retry-period`,
//!   like the leader Lease (client-go timings). Members are the replicas whose Lease changed
//!   within `--shard-lease-duration` *as observed by the local clock* (never the holder's
//!   timestamps: clock skew). Each round lists the group's Leases once; a watch of the member
//!   Leases records each renewal when it happens (a list would see it up to a retry period
//!   late, and every takeover would wait as much longer), wakes the rounds when a member
//!   joins or leaves, and the next round is due right after the first member Lease's expiry.
//! - **Assignment.** Rendezvous hashing with bounded loads ([`assignment`]): every
//!   (member, shard) pair is scored `hash(identity, s)`; going down the pairs from the
//!   highest score, a shard goes to the member of its pair unless it is already placed or
//!   that member already holds `ceil(shards / members)`. Every replica computes the same
//!   table from the same member list. Plain rendezvous (each shard to its top-scoring
//!   member) moves the fewest shards but is lumpy: with 64 shards and 3 members the
//!   largest member holds 39.5% of the shards on average and up to 56%, and that replica
//!   sets the memory and the time of the whole group. The cap makes it 22/64 (34.4%)
//!   at most, for about 10% more moves than the minimum when a replica joins or leaves
//!   (`cargo test -p metacontroller bounded_rendezvous` prints the figures). The default
//!   `--shards` is 60, which the cap splits evenly over 2, 3, 4, 5, 6, 10 or 12 members.
//! - **Ownership.** Who actually syncs shard `s` is recorded in the *shard Lease*
//!   `<leader-election-id>-shard-<s>` (`holderIdentity`). It is not renewed: it stays valid as
//!   long as its holder's member Lease is live, so steady state costs one Lease write per
//!   replica per retry period whatever the number of shards. Every change of holder is a PUT
//!   with the read `resourceVersion` (or a create), so two replicas can never both win.
//!   - A replica *acquires* `s` only when the assignment gives it `s`, no member appeared
//!     since its previous round (replicas started together see each other before any takes
//!     shards, so none caches everything first; a membership that only lost members is
//!     acted on at once, which takes a round off the takeover after a death), and the shard Lease is
//!     free, its own, or held by a replica that is no longer a member. After the write
//!     succeeded the shard is *reserved* in the gate (its objects are retained), the filtered
//!     informers relist, and only once a list started after the reservation has completed
//!     does the gate admit the shard's keys; the cached parents of the admitted shards (only
//!     those) are then replayed so they are queued. The relist runs in the background: rounds (renewals) go on.
//!   - A replica that is no longer assigned `s` *releases* it: its gate stops admitting the
//!     shard's keys, its running syncs of that shard end (drain), and only then it clears the
//!     holder and prunes the shard's objects from its caches (the controllers then drop what
//!     they kept for those parents: hook responses, customize rules, expectations, ...). The next owner starts after
//!     that write, so a parent is never synced by two replicas at once.
//!   - A replica that dies (kill -9) stops renewing; after `--shard-lease-duration` the others
//!     drop it from the members and take its shards over. A replica that is alive but cannot
//!     renew for `--shard-renew-deadline` stops syncing every shard (and exits if its syncs do
//!     not end before its Lease can expire), as the leader elector does. A member that has
//!     not renewed for 2.5 retry periods is *silent*: the others retain the shards they would
//!     take from it and relist once, ahead of its expiry, so the takeover admits them at once
//!     (the relist of every parent and child, 1.2 s at 6,000 parents × 3 children, is off the
//!     critical path; nothing is synced before the shard Lease is taken). If it renews after
//!     all, they drop and prune what they cached ahead. For one lease
//!     duration after such a takeover the taken shards' keys are *expedited*: every work queue
//!     serves them first, the follow-ups of their syncs included (see
//!     [`metacontroller_dynamic::WorkQueue`]), so the dead replica's parents do not wait
//!     behind the survivors' own backlog.
//! - **One shard count.** A member Lease carries its replica's `--shards`
//!   ([`SHARDS_ANNOTATION`]). Replicas with different counts map a parent to different shard
//!   Leases, so a replica that sees a live member with another count acquires no shard until
//!   that member is gone (it keeps syncing the shards it holds): during a rolling update that
//!   changes `--shards`, the new replicas start syncing as the old ones leave.
//! - **Shutdown.** SIGTERM drains the syncs, clears the holder of every shard Lease it holds
//!   and deletes its member Lease: the others take over at their next round.
//! - **Caches.** Every replica watches every parent and child (one watch per resource, as a
//!   single replica), but stores only its share: the parents of its retained shards, their
//!   children (by controller ownerReference) and orphans (see
//!   [`metacontroller_dynamic::Keep`] for the retention rules and the trade-off). Label
//!   selectors cannot do this: the shard is a function of the parent's key, which no label
//!   on a child carries unless the controller wrote it (and parents are owned by users).
//!   Related objects of customize hooks and CRDs are kept in full.
//!
//! With sharding on, `--leader-election` is refused: every replica is active.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::Client;
use metacontroller_dynamic::{shard_of, stable_hash};
use metacontroller_dynamic::{Informers, Lapse, LeaseDeadlines, SyncGate};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, IntGauge, Opts, Registry};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// Label naming the sharding group (the `--leader-election-id`) on every Lease it uses.
pub const GROUP_LABEL: &str = "metacontroller.k8s.io/shard-group";
/// Label telling member Leases (`member`) from shard Leases (`shard`).
pub const ROLE_LABEL: &str = "metacontroller.k8s.io/shard-role";
/// Annotation of a member Lease: the `--shards` of its replica. Replicas that split parents
/// into different numbers of shards map a parent to different shard Leases, so they must
/// never sync at the same time (see [`Coordinator::members`]).
pub const SHARDS_ANNOTATION: &str = "metacontroller.k8s.io/shards";

/// Sharding settings.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// Namespace of the Leases (`--leader-election-namespace` or the pod's namespace).
    pub namespace: String,
    /// Prefix of the Lease names and value of [`GROUP_LABEL`] (`--leader-election-id`).
    pub group: String,
    /// This replica's identity (hostname + unique suffix).
    pub identity: String,
    /// Number of virtual shards (`--shards`).
    pub shards: u32,
    /// `--shard-lease-duration`.
    pub lease_duration: Duration,
    /// `--shard-renew-deadline`.
    pub renew_deadline: Duration,
    /// `--shard-retry-period`.
    pub retry_period: Duration,
}

impl ShardConfig {
    /// From the command line; checks the timings are consistent.
    pub fn from_args(args: &crate::cli::ControllerArgs) -> anyhow::Result<ShardConfig> {
        if args.leader_election {
            anyhow::bail!("--sharding and --leader-election exclude each other: with sharding every replica is active");
        }
        if args.leader_election_id.is_empty() {
            anyhow::bail!("--leader-election-id must not be empty");
        }
        if args.shard_retry_period.is_zero()
            || args.shard_renew_deadline <= args.shard_retry_period
            || args.shard_lease_duration <= args.shard_renew_deadline
        {
            anyhow::bail!(
                "sharding needs --shard-retry-period < --shard-renew-deadline < --shard-lease-duration"
            );
        }
        Ok(ShardConfig {
            namespace: crate::leader::default_namespace(&args.leader_election_namespace),
            group: args.leader_election_id.clone(),
            identity: crate::leader::identity(),
            shards: args.shards,
            lease_duration: args.shard_lease_duration,
            renew_deadline: args.shard_renew_deadline,
            retry_period: args.shard_retry_period,
        })
    }

    fn member_lease(&self) -> String {
        format!(
            "{}-member-{:016x}",
            self.group,
            stable_hash(self.identity.as_bytes())
        )
    }

    fn shard_lease(&self, shard: u32) -> String {
        format!("{}-shard-{shard}", self.group)
    }
}

/// Whether this round's members may be acted on: seen in the previous round already, or
/// only members of it (departures). A newcomer waits a round so that replicas started
/// together see each other before any takes shards.
fn settled(previous: Option<&[String]>, members: &[String]) -> bool {
    previous.is_some_and(|last| members.iter().all(|m| last.contains(m)))
}

/// Which member owns each shard `0..shards` (rendezvous hashing with bounded loads, see
/// the module docs); `None` for every shard when there are no members. Members are
/// identified by name, so the order of `members` does not matter.
pub fn assignment<'a>(shards: u32, members: &[&'a str]) -> Vec<Option<&'a str>> {
    let mut owner: Vec<Option<&'a str>> = vec![None; shards as usize];
    if members.is_empty() {
        return owner;
    }
    let cap = (shards as usize).div_ceil(members.len());
    let mut pairs: Vec<(u64, &'a str, u32)> = members
        .iter()
        .flat_map(|m| (0..shards).map(move |s| (score(m, s), *m, s)))
        .collect();
    pairs.sort_unstable_by(|a, b| b.cmp(a));
    let mut load: HashMap<&'a str, usize> = HashMap::with_capacity(members.len());
    let mut placed = 0;
    for (_, member, shard) in pairs {
        let slot = &mut owner[shard as usize];
        let held = load.entry(member).or_default();
        if slot.is_none() && *held < cap {
            *slot = Some(member);
            *held += 1;
            placed += 1;
            if placed == owner.len() {
                break;
            }
        }
    }
    owner
}

fn score(member: &str, shard: u32) -> u64 {
    let mut bytes = Vec::with_capacity(member.len() + 5);
    bytes.extend_from_slice(member.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(&shard.to_be_bytes());
    stable_hash(&bytes)
}

/// `metacontroller_shards_owned`, `metacontroller_shard_parents_owned` (see
/// [`ParentsOwned`]), `metacontroller_shard_members` and
/// `metacontroller_shard_takeovers_total`.
#[derive(Clone)]
struct ShardMetrics {
    owned: IntGauge,
    members: IntGauge,
    takeovers: IntCounterVec,
}

/// `metacontroller_shard_parents_owned`, counted from the caches at each scrape: the cached
/// parents (and decorator targets) whose key is in a shard this replica owns now. Nothing
/// is accumulated, so the count follows creations, deletions and handoffs exactly and
/// cannot drift.
struct ParentsOwned {
    gate: SyncGate,
    informers: Informers,
    gauge: IntGauge,
}

impl Collector for ParentsOwned {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let shards = self.gate.shard_count().unwrap_or(1);
        let owned: HashSet<u32> = self.gate.owned_shards().into_iter().collect();
        let parents = if owned.is_empty() {
            0
        } else {
            self.informers
                .count_parents(|key| owned.contains(&shard_of(key, shards)))
        };
        self.gauge.set(i64::try_from(parents).unwrap_or(i64::MAX));
        self.gauge.collect()
    }
}

impl ShardMetrics {
    fn register(
        registry: &Registry,
        gate: &SyncGate,
        informers: &Informers,
    ) -> anyhow::Result<ShardMetrics> {
        let owned = IntGauge::new(
            "metacontroller_shards_owned",
            "Shards whose parents this replica syncs now (--sharding).",
        )?;
        let members = IntGauge::new(
            "metacontroller_shard_members",
            "Live replicas this replica sees in its sharding group (--sharding).",
        )?;
        let parents = IntGauge::new(
            "metacontroller_shard_parents_owned",
            "Cached parents (and decorator targets) of the shards this replica owns now (--sharding).",
        )?;
        let takeovers = IntCounterVec::new(
            Opts::new(
                "metacontroller_shard_takeovers_total",
                "Shards this replica took over from a replica that was no longer a member (it died or lost its lease), by whether it had cached them ahead (--sharding).",
            ),
            &["cached_ahead"],
        )?;
        registry.register(Box::new(owned.clone()))?;
        registry.register(Box::new(ParentsOwned {
            gate: gate.clone(),
            informers: informers.clone(),
            gauge: parents,
        }))?;
        registry.register(Box::new(members.clone()))?;
        registry.register(Box::new(takeovers.clone()))?;
        Ok(ShardMetrics {
            owned,
            members,
            takeovers,
        })
    }
}

/// The running shard coordinator of the process.
pub struct ShardTask {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ShardTask {
    /// Joins the group and keeps the gate's shard ownership in line with the assignment.
    pub fn spawn(
        client: Client,
        config: ShardConfig,
        gate: SyncGate,
        informers: Informers,
        registry: &Registry,
        supervisor: &metacontroller_dynamic::Supervisor,
    ) -> anyhow::Result<ShardTask> {
        let metrics = ShardMetrics::register(registry, &gate, &informers)?;
        let (stop, stop_rx) = watch::channel(false);
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        let observed = Observed::default();
        let wake = Arc::new(Notify::new());
        let watch_task = supervisor.spawn(
            "shard-members-watch",
            watch_members(
                api.clone(),
                config.group.clone(),
                observed.clone(),
                wake.clone(),
            ),
        );
        let coordinator = Coordinator {
            api,
            config,
            gate,
            informers,
            metrics,
            observed,
            wake,
            watch_task,
            foreign: Vec::new(),
            member: None,
            renewed: None,
            releasing: Arc::new(Mutex::new(HashSet::new())),
            acquiring: Arc::new(Mutex::new(HashSet::new())),
            last_members: None,
            silent: Vec::new(),
            ahead: HashMap::new(),
        };
        let task = supervisor.spawn("shard-coordinator", coordinator.run(stop_rx));
        Ok(ShardTask { stop, task })
    }

    /// Stops the coordinator: it clears the shard Leases it holds and deletes its member
    /// Lease. The caller must have closed and drained the gate first.
    pub async fn release(self) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .is_err()
        {
            tracing::warn!("sharding: releasing the leases timed out; they expire on their own");
        }
    }
}

struct Coordinator {
    api: Api<Lease>,
    config: ShardConfig,
    gate: SyncGate,
    informers: Informers,
    metrics: ShardMetrics,
    /// Member Leases as first seen with their current spec, by the rounds' lists and the
    /// watch ([`watch_members`]).
    observed: Observed,
    /// Rings when a member joined or left (see [`watch_members`]).
    wake: Arc<Notify>,
    /// The member Lease watch; aborted when the coordinator ends.
    watch_task: tokio::task::JoinHandle<()>,
    /// Our member Lease as last written (its resourceVersion guards the next renewal).
    member: Option<Lease>,
    /// When our member Lease was last renewed.
    renewed: Option<Instant>,
    /// Shards being drained before their Lease is cleared.
    releasing: Arc<Mutex<HashSet<u32>>>,
    /// Shards whose Lease we took, waiting for the relist before their keys are admitted.
    acquiring: Arc<Mutex<HashSet<u32>>>,
    /// The members seen by the previous round.
    last_members: Option<Vec<String>>,
    /// Live members using another `--shards`, as last logged.
    foreign: Vec<String>,
    /// Live members that have not renewed for [`Coordinator::silent_after`] (last round).
    silent: Vec<String>,
    /// Shards of silent members this replica would take over, retained ahead (see
    /// [`Coordinator::cache_ahead`]).
    ahead: HashMap<u32, Ahead>,
}

impl Coordinator {
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        tracing::info!(identity = %self.config.identity, namespace = %self.config.namespace, group = %self.config.group, shards = self.config.shards, "sharding: joining the group");
        loop {
            // Rounds start a retry period apart, however long one took (a slow round must
            // not push the next renewal past the renew deadline).
            let started = Instant::now();
            self.round().await;
            let pause = self.pause().saturating_sub(started.elapsed());
            let stopped = tokio::select! {
                _ = self.wake.notified() => *stop.borrow(),
                stopped = crate::leader::sleep_or_stop(pause, &mut stop) => stopped,
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
            crate::leader::jitter(self.config.retry_period),
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
    fn deadlines(&self, sent: Instant) -> LeaseDeadlines {
        let written =
            Duration::from_secs(seconds(self.config.lease_duration).unsigned_abs().into());
        let margin =
            ((written.saturating_sub(self.config.renew_deadline)) / 2).min(Duration::from_secs(1));
        let fence = sent + written.saturating_sub(margin);
        LeaseDeadlines {
            renew_by: (sent + self.config.renew_deadline).min(fence),
            fence,
        }
    }

    /// The rest of a round: read the group, release and acquire shards. Requests are bounded
    /// by `act_by` and no acquisition begins after it, so a slow or hung API server never
    /// keeps the next renewal from being sent in time; what is left is done next round.
    async fn act(&mut self, act_by: Instant) {
        let selector = format!("{GROUP_LABEL}={}", self.config.group);
        let leases = match tokio::time::timeout_at(act_by, list_leases(&self.api, &selector)).await
        {
            Ok(Ok(leases)) => leases,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "sharding: cannot list the group's leases");
                return;
            }
            Err(_) => {
                tracing::warn!("sharding: listing the group's leases timed out");
                return;
            }
        };
        let members = self.members(&leases);
        self.metrics
            .members
            .set(i64::try_from(members.len()).unwrap_or(i64::MAX));
        let shard_leases: HashMap<String, Lease> = leases
            .into_iter()
            .filter(|l| role(l) == Some("shard"))
            .filter_map(|l| Some((l.metadata.name.clone()?, l)))
            .collect();
        let member_refs: Vec<&str> = members.iter().map(String::as_str).collect();
        let owners = assignment(self.config.shards, &member_refs);
        // While a live replica splits parents differently (a rolling update that changed
        // --shards), acquire nothing: keep syncing the shards held, take none of theirs.
        let may_acquire =
            settled(self.last_members.as_deref(), &members) && self.foreign.is_empty();
        let me = self.config.identity.clone();
        let owned: HashSet<u32> = self.gate.owned_shards().into_iter().collect();
        let acquiring: HashSet<u32> = lock(&self.acquiring).clone();
        let mut reserved = Vec::new();
        for shard in 0..self.config.shards {
            let name = self.config.shard_lease(shard);
            let lease = shard_leases.get(&name);
            let holder = lease
                .and_then(|l| l.spec.as_ref())
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty());
            let mine = owners.get(shard as usize).copied().flatten() == Some(me.as_str());
            let releasing = self.lock_releasing().contains(&shard);
            if releasing {
                continue;
            }
            let we_hold = holder.as_deref() == Some(me.as_str());
            let active = owned.contains(&shard) || acquiring.contains(&shard);
            if active && !we_hold {
                // Only after our membership expired could another replica take it; stop now.
                tracing::error!(shard, holder = ?holder, "sharding: a shard this replica syncs is held by another; stopping it");
                lock(&self.acquiring).remove(&shard);
                self.spawn_release(shard, false);
            } else if we_hold && !mine {
                lock(&self.acquiring).remove(&shard);
                self.spawn_release(shard, true);
            } else if mine && !active && may_acquire {
                let free = match holder.as_deref() {
                    None => true,
                    Some(h) => h == me || !members.iter().any(|m| m == h),
                };
                // Held by a replica that is no longer a member: it died (or lost its Lease)
                // without releasing, so the shard's parents have had no owner since.
                let orphaned = holder.as_deref().is_some_and(|h| h != me);
                // A Lease written after our own lapsed is re-acquired in a later round.
                if free
                    && Instant::now() < act_by
                    && tokio::time::timeout_at(act_by, self.acquire(shard, &name, lease))
                        .await
                        .unwrap_or(false)
                    && self.gate.lease_current()
                {
                    // Cached ahead and complete: no relist needed before syncing it.
                    let cached = self
                        .ahead
                        .remove(&shard)
                        .filter(|a| a.listed.load(Ordering::Acquire));
                    reserved.push(Reserved {
                        shard,
                        epoch: match &cached {
                            Some(ahead) => ahead.epoch,
                            None => self.gate.reserve_shard(shard),
                        },
                        orphaned,
                        cached: cached.is_some(),
                    });
                    lock(&self.acquiring).insert(shard);
                }
            }
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

    /// A member that has not renewed for this long (two renewals missed, and half a period
    /// of slack) is *silent*: probably dead; its Lease expires within the rest of the lease
    /// duration.
    fn silent_after(&self) -> Duration {
        self.config.retry_period * 5 / 2
    }

    /// Retains, ahead of a takeover, the shards the silent members hold that this replica
    /// would take if they were gone, and relists once for them: when their Leases expire
    /// those shards are admitted at once instead of after a relist of every filtered
    /// informer, which sits on the takeover's critical path (1.2 s at 6,000 parents × 3
    /// children on the load harness). Nothing is synced early: the keys are admitted only
    /// after the shard Lease is taken. Shards no longer in that position (their holder
    /// renewed, the assignment changed) are released and pruned again.
    async fn cache_ahead(&mut self, members: &[String], shard_leases: &HashMap<String, Lease>) {
        let me = self.config.identity.as_str();
        let owned: HashSet<u32> = self.gate.owned_shards().into_iter().collect();
        let acquiring: HashSet<u32> = lock(&self.acquiring).clone();
        let releasing: HashSet<u32> = self.lock_releasing().clone();
        let busy = |s: &u32| owned.contains(s) || acquiring.contains(s) || releasing.contains(s);
        let mut wanted = HashSet::new();
        if !self.silent.is_empty() && self.foreign.is_empty() {
            let remaining: Vec<&str> = members
                .iter()
                .map(String::as_str)
                .filter(|m| !self.silent.iter().any(|s| s == m))
                .collect();
            let owners = assignment(self.config.shards, &remaining);
            for shard in 0..self.config.shards {
                let held_by_silent = holder_of(shard_leases.get(&self.config.shard_lease(shard)))
                    .is_some_and(|h| self.silent.iter().any(|s| s == h));
                if held_by_silent
                    && owners.get(shard as usize).copied().flatten() == Some(me)
                    && !busy(&shard)
                {
                    wanted.insert(shard);
                }
            }
        }
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
        let listed = Arc::new(AtomicBool::new(false));
        for shard in &new {
            let epoch = self.gate.reserve_shard(*shard);
            let listed = listed.clone();
            self.ahead.insert(*shard, Ahead { epoch, listed });
        }
        tracing::info!(
            silent = ?self.silent,
            shards = new.len(),
            "sharding: members stopped renewing; caching the shards this replica would take over ahead of their lease expiry"
        );
        let relist = self.informers.relist_filtered();
        tokio::spawn(async move {
            relist.await;
            listed.store(true, Ordering::Release);
        });
    }

    fn update_metrics(&self) {
        self.metrics
            .owned
            .set(i64::try_from(self.gate.owned_shards().len()).unwrap_or(i64::MAX));
    }

    /// Relists the filtered informers (the request is made now, after the reservations),
    /// then admits the reserved shards that were not released meanwhile and replays the
    /// caches so their parents are queued. The parents of orphaned shards are expedited for
    /// one lease duration: they go ahead of this replica's own backlog, follow-ups included.
    fn spawn_admit(&self, reserved: Vec<Reserved>) {
        let expedite_for = self.config.lease_duration;
        let cached_ahead = reserved.iter().filter(|r| r.cached).count();
        let relist: futures::future::Either<_, _> = if cached_ahead == reserved.len() {
            futures::future::Either::Left(std::future::ready(()))
        } else {
            futures::future::Either::Right(self.informers.relist_filtered())
        };
        let gate = self.gate.clone();
        let informers = self.informers.clone();
        let acquiring = self.acquiring.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
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
                cached,
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
                            .with_label_values(&[if cached { "true" } else { "false" }])
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

    fn lock_releasing(&self) -> std::sync::MutexGuard<'_, HashSet<u32>> {
        self.releasing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Live members: our own identity while our renewals are current, and every other
    /// member Lease whose spec changed within the lease duration by our clock and whose
    /// [`SHARDS_ANNOTATION`] is our `--shards`. Live members with another (or no) value are
    /// kept in `self.foreign`: while there are any, this replica acquires no shard.
    fn members(&mut self, leases: &[Lease]) -> Vec<String> {
        let now = Instant::now();
        let mut seen = HashSet::new();
        let mut members = vec![self.config.identity.clone()];
        let mut foreign = Vec::new();
        let mut silent = Vec::new();
        for lease in leases.iter().filter(|l| role(l) == Some("member")) {
            let (Some(name), Some(spec)) = (lease.metadata.name.clone(), lease.spec.clone()) else {
                continue;
            };
            seen.insert(name.clone());
            let Some(holder) = spec.holder_identity.clone().filter(|h| !h.is_empty()) else {
                continue;
            };
            if holder == self.config.identity {
                continue;
            }
            let valid = lease_validity(&spec);
            let (first_seen, _) = observe(&mut lock(&self.observed), name, spec, now);
            if first_seen.elapsed() < valid {
                let theirs = lease
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(SHARDS_ANNOTATION));
                if theirs.map(String::as_str) == Some(self.config.shards.to_string().as_str()) {
                    if first_seen.elapsed() >= self.silent_after() {
                        silent.push(holder.clone());
                    }
                    members.push(holder);
                } else {
                    foreign.push(format!(
                        "{holder} (--shards {})",
                        theirs.map_or("unknown", |v| v)
                    ));
                }
            }
        }
        lock(&self.observed).retain(|name, _| seen.contains(name));
        members.sort();
        members.dedup();
        silent.sort();
        silent.dedup();
        self.silent = silent;
        foreign.sort();
        if foreign != self.foreign {
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
        members
    }

    /// Creates or renews our member Lease (PUT guarded by the resourceVersion we wrote).
    async fn renew(&mut self) -> anyhow::Result<()> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let name = self.config.member_lease();
        let mut lease = match self.member.take() {
            Some(lease) => lease,
            None => match self.api.get_opt(&name).await? {
                Some(lease) => lease,
                None => {
                    let lease = self.lease_object(&name, "member", Some(&self.config.identity));
                    let created = self.api.create(&PostParams::default(), &lease).await?;
                    tracing::info!(identity = %self.config.identity, lease = %name, "sharding: joined as a member");
                    self.member = Some(created);
                    return Ok(());
                }
            },
        };
        lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                SHARDS_ANNOTATION.to_string(),
                self.config.shards.to_string(),
            );
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some(self.config.identity.clone());
        spec.lease_duration_seconds = Some(seconds(self.config.lease_duration));
        spec.renew_time = Some(now);
        match self
            .api
            .replace(&name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.member = Some(written);
                Ok(())
            }
            // Read it again next round (someone edited it, or it was deleted).
            Err(err) => Err(err.into()),
        }
    }

    fn lease_object(&self, name: &str, role: &str, holder: Option<&str>) -> Lease {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(self.config.namespace.clone()),
                labels: Some(
                    [
                        (GROUP_LABEL.to_string(), self.config.group.clone()),
                        (ROLE_LABEL.to_string(), role.to_string()),
                    ]
                    .into(),
                ),
                annotations: (role == "member").then(|| {
                    [(
                        SHARDS_ANNOTATION.to_string(),
                        self.config.shards.to_string(),
                    )]
                    .into()
                }),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: Some(seconds(self.config.lease_duration)),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        }
    }

    /// Takes the shard Lease (create, or PUT with the listed resourceVersion).
    async fn acquire(&self, shard: u32, name: &str, lease: Option<&Lease>) -> bool {
        let me = self.config.identity.as_str();
        let result = match lease {
            None => {
                let lease = self.lease_object(name, "shard", Some(me));
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(lease) => {
                let mut lease = lease.clone();
                let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
                let spec = lease.spec.get_or_insert_with(Default::default);
                if spec.holder_identity.as_deref() != Some(me) {
                    spec.lease_transitions =
                        Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
                    spec.acquire_time = Some(now.clone());
                }
                spec.holder_identity = Some(me.to_string());
                spec.lease_duration_seconds = Some(seconds(self.config.lease_duration));
                spec.renew_time = Some(now);
                self.api.replace(name, &PostParams::default(), &lease).await
            }
        };
        match result {
            Ok(_) => true,
            Err(err) => {
                tracing::info!(shard, error = %err, "sharding: shard lease not acquired");
                false
            }
        }
    }

    /// Drains `shard` in the background, then (if `clear`) clears its Lease's holder.
    fn spawn_release(&self, shard: u32, clear: bool) {
        self.lock_releasing().insert(shard);
        let gate = self.gate.clone();
        let informers = self.informers.clone();
        let api = self.api.clone();
        let name = self.config.shard_lease(shard);
        let me = self.config.identity.clone();
        let releasing = self.releasing.clone();
        tokio::spawn(async move {
            // A sync cannot be cancelled halfway; the Lease stays ours until it ends.
            while !gate.release_shard(shard, Duration::from_secs(60)).await {
                tracing::warn!(
                    shard,
                    "sharding: still waiting for the shard's syncs to end"
                );
            }
            let pruned = informers.prune_filtered();
            tracing::debug!(
                shard,
                pruned,
                "sharding: released shard pruned from the caches"
            );
            if clear {
                if let Err(err) = clear_holder(&api, &name, &me).await {
                    tracing::warn!(shard, error = %err, "sharding: cannot clear the shard lease; retrying next round");
                }
            }
            releasing
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&shard);
        });
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

    /// Graceful exit (the gate is closed and drained): free our shards and membership.
    async fn leave(&mut self) {
        for shard in self.gate.owned_shards() {
            self.gate.release_shard(shard, Duration::ZERO).await;
        }
        if let Ok(leases) = list_leases(
            &self.api,
            &format!("{GROUP_LABEL}={},{ROLE_LABEL}=shard", self.config.group),
        )
        .await
        {
            for lease in leases {
                let held = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.as_deref())
                    == Some(self.config.identity.as_str());
                if let (true, Some(name)) = (held, lease.metadata.name.as_deref()) {
                    if let Err(err) = clear_holder(&self.api, name, &self.config.identity).await {
                        tracing::warn!(lease = name, error = %err, "sharding: cannot clear a shard lease; it frees when our membership expires");
                    }
                }
            }
        }
        let name = self.config.member_lease();
        match self.api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!("sharding: left the group"),
            Err(err) => {
                tracing::warn!(error = %err, "sharding: cannot delete the member lease; it expires on its own")
            }
        }
        self.metrics.owned.set(0);
    }
}

/// The Leases `selector` selects, without their `managedFields`. Every round lists the
/// group's Leases (one per shard plus one per member); decoded whole, each Lease's
/// managedFields are a JSON tree of their own, and the list cost each replica about 0.3 MiB
/// every retry period (heaptrack at 64 shards) for fields nothing here reads. A Lease written
/// back (an acquisition's PUT) carries the metadata kept here; the API server keeps the
/// managedFields of an update that omits them.
async fn list_leases(api: &Api<Lease>, selector: &str) -> kube::Result<Vec<Lease>> {
    let mut request = kube::core::Request::new(api.resource_url())
        .list(&ListParams::default().labels(selector))
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("list");
    let list: ListedLeases = api.clone().into_client().request(request).await?;
    Ok(list
        .items
        .into_iter()
        .map(ListedLease::into_lease)
        .collect())
}

/// A Lease list as [`list_leases`] reads it (unknown fields are skipped, not decoded).
#[derive(serde::Deserialize)]
struct ListedLeases {
    #[serde(default)]
    items: Vec<ListedLease>,
}

#[derive(serde::Deserialize)]
struct ListedLease {
    #[serde(default)]
    metadata: ListedMeta,
    spec: Option<LeaseSpec>,
}

/// The metadata a Lease is read and written back with.
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListedMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    finalizers: Option<Vec<String>>,
}

impl ListedLease {
    fn into_lease(self) -> Lease {
        let m = self.metadata;
        Lease {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                labels: m.labels,
                annotations: m.annotations,
                owner_references: m.owner_references,
                finalizers: m.finalizers,
                ..ObjectMeta::default()
            },
            spec: self.spec,
        }
    }
}

/// Clears the holder of shard Lease `name` if it is still `me` (read, then PUT guarded by
/// the resourceVersion read).
async fn clear_holder(api: &Api<Lease>, name: &str, me: &str) -> anyhow::Result<()> {
    let Some(mut lease) = api.get_opt(name).await? else {
        return Ok(());
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(me) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
    api.replace(name, &PostParams::default(), &lease).await?;
    Ok(())
}

/// Member Leases by name: the spec last seen and when this replica first saw that spec (its
/// own clock: the holder's timestamps are never trusted, clocks skew).
type Observed = Arc<Mutex<HashMap<String, (LeaseSpec, Instant)>>>;

/// How long after a member Lease's expiry (as observed) the round that drops it runs.
const EXPIRY_MARGIN: Duration = Duration::from_millis(20);

/// Until the next round: `period`, or until just after the first live member's Lease
/// expires if that is sooner, so that a dead replica's shards are taken over at the expiry
/// rather than up to a retry period later.
fn next_round_in(
    observed: &HashMap<String, (LeaseSpec, Instant)>,
    me: &str,
    now: Instant,
    period: Duration,
) -> Duration {
    observed
        .values()
        .filter(|(spec, _)| {
            spec.holder_identity
                .as_deref()
                .is_some_and(|h| !h.is_empty() && h != me)
        })
        .filter_map(|(spec, seen)| seen.checked_add(lease_validity(spec)))
        .filter(|expiry| *expiry > now)
        .map(|expiry| expiry - now + EXPIRY_MARGIN)
        .fold(period, Duration::min)
}

/// Records `spec` as member Lease `name`'s, seen at `now`, unless it is the spec already
/// recorded (whose time stays: a Lease is valid for its duration after it *changed*).
/// Returns when the recorded spec was first seen, and whether its holder is new (a member
/// joined, or a Lease changed hands).
fn observe(
    observed: &mut HashMap<String, (LeaseSpec, Instant)>,
    name: String,
    spec: LeaseSpec,
    now: Instant,
) -> (Instant, bool) {
    match observed.entry(name) {
        Entry::Occupied(seen) if seen.get().0 == spec => (seen.get().1, false),
        Entry::Occupied(mut seen) => {
            let new_holder = seen.get().0.holder_identity != spec.holder_identity;
            seen.insert((spec, now));
            (now, new_holder)
        }
        Entry::Vacant(seen) => {
            seen.insert((spec, now));
            (now, true)
        }
    }
}

/// How long a member Lease stays valid after a change of its spec.
fn lease_validity(spec: &LeaseSpec) -> Duration {
    Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0))
}

/// Watches the group's member Leases so that a renewal counts from when it happened, not
/// from the next round's list (which comes up to a retry period later and would push every
/// takeover back by as much), and rings `wake` when a member joins, changes holder or is
/// deleted (a graceful leave: its shards are free now, the next round need not wait).
/// Errors back off and relist (the rounds' lists keep working without the watch).
async fn watch_members(api: Api<Lease>, group: String, observed: Observed, wake: Arc<Notify>) {
    use futures::StreamExt;
    use kube::runtime::{watcher, WatchStreamExt};

    let config =
        watcher::Config::default().labels(&format!("{GROUP_LABEL}={group},{ROLE_LABEL}=member"));
    let mut stream = std::pin::pin!(watcher(api, config).default_backoff());
    let mut warned = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Apply(lease)) | Ok(watcher::Event::InitApply(lease)) => {
                let (Some(name), Some(spec)) = (lease.metadata.name, lease.spec) else {
                    continue;
                };
                let (_, joined) = observe(&mut lock(&observed), name, spec, Instant::now());
                if joined {
                    wake.notify_one();
                }
            }
            Ok(watcher::Event::Delete(lease)) => {
                if let Some(name) = lease.metadata.name {
                    lock(&observed).remove(&name);
                }
                wake.notify_one();
            }
            Ok(watcher::Event::Init) | Ok(watcher::Event::InitDone) => {}
            // Once (RBAC without `watch` fails every retry): the rounds' lists still work.
            Err(err) if !warned => {
                warned = true;
                tracing::warn!(error = %err, "sharding: cannot watch the member leases (retrying); until it works renewals are seen only by each round's list, up to a retry period late")
            }
            Err(err) => {
                tracing::debug!(error = %err, "sharding: member lease watch failed; retrying")
            }
        }
    }
}

/// A shard whose Lease this replica just took, not admitted yet.
struct Reserved {
    shard: u32,
    /// From [`SyncGate::reserve_shard`], for [`SyncGate::admit_shard`].
    epoch: u64,
    /// Taken from a holder that is no longer a member (not released by it).
    orphaned: bool,
    /// Retained since before a completed list (cached ahead): admitted without a relist.
    cached: bool,
}

/// A shard retained ahead of a takeover (see [`Coordinator::cache_ahead`]).
struct Ahead {
    /// From [`SyncGate::reserve_shard`]: still current if nothing released or reserved the
    /// shard since, which [`SyncGate::admit_shard`] checks.
    epoch: u64,
    /// Set once a list started after the reservation has completed.
    listed: Arc<AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The holder of a shard Lease, if any.
fn holder_of(lease: Option<&Lease>) -> Option<&str> {
    lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

fn role(lease: &Lease) -> Option<&str> {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ROLE_LABEL))
        .map(String::as_str)
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}-{i}")).collect()
    }

    fn loads<'a>(table: &[Option<&'a str>]) -> HashMap<&'a str, usize> {
        let mut counts = HashMap::new();
        for owner in table.iter().flatten() {
            *counts.entry(*owner).or_insert(0) += 1;
        }
        counts
    }

    #[test]
    fn the_default_shard_count_splits_evenly_over_common_replica_counts() {
        let shards = crate::cli::DEFAULT_SHARDS;
        for members in [2usize, 3, 4, 5, 6, 10, 12] {
            let ids = names("replica", members);
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            let counts = loads(&assignment(shards, &refs));
            let expected = shards as usize / members;
            assert!(
                counts.len() == members && counts.values().all(|&n| n == expected),
                "{shards} shards over {members} replicas: {counts:?}"
            );
        }
    }

    #[test]
    fn listed_leases_keep_what_is_written_back_and_skip_managed_fields() {
        let list = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "LeaseList",
            "metadata": {"resourceVersion": "77"},
            "items": [{
                "metadata": {
                    "name": "metacontroller-shard-3",
                    "namespace": "metacontroller",
                    "uid": "u-3",
                    "resourceVersion": "42",
                    "labels": {GROUP_LABEL: "metacontroller", ROLE_LABEL: "shard"},
                    "annotations": {"a": "b"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-o"}],
                    "finalizers": ["example.com/keep"],
                    "creationTimestamp": "2026-11-24T06:00:00Z",
                    "managedFields": [{"manager": "metacontroller", "operation": "Update",
                        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:holderIdentity": {}}}}]
                },
                "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 15, "leaseTransitions": 2}
            }, {"metadata": {"name": "bare"}}]
        });
        let listed: ListedLeases = serde_json::from_value(list).expect("a Lease list decodes");
        let leases: Vec<Lease> = listed
            .items
            .into_iter()
            .map(ListedLease::into_lease)
            .collect();
        assert_eq!(leases.len(), 2);
        let meta = &leases[0].metadata;
        assert_eq!(meta.name.as_deref(), Some("metacontroller-shard-3"));
        assert_eq!(meta.namespace.as_deref(), Some("metacontroller"));
        assert_eq!(meta.uid.as_deref(), Some("u-3"));
        assert_eq!(meta.resource_version.as_deref(), Some("42"));
        assert_eq!(role(&leases[0]), Some("shard"));
        assert_eq!(
            meta.annotations
                .as_ref()
                .and_then(|a| a.get("a"))
                .map(String::as_str),
            Some("b")
        );
        assert_eq!(meta.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            meta.finalizers.as_deref(),
            Some(&["example.com/keep".to_string()][..])
        );
        assert!(
            meta.managed_fields.is_none(),
            "managedFields are not decoded"
        );
        let spec = leases[0].spec.as_ref().expect("spec");
        assert_eq!(spec.holder_identity.as_deref(), Some("replica-a"));
        assert_eq!(spec.lease_transitions, Some(2));
        assert!(leases[1].spec.is_none());
        assert_eq!(role(&leases[1]), None);
    }

    #[test]
    fn bounded_rendezvous_balances_and_moves_little() {
        let mut moves = 0;
        let mut minimal = 0;
        for trial in 0..200 {
            let all = names(&format!("replica-{trial}"), 4);
            let refs: Vec<&str> = all.iter().map(String::as_str).collect();
            let three = assignment(64, &refs[..3]);
            // Every shard placed, every member within the cap.
            assert!(three.iter().all(Option::is_some));
            let counts = loads(&three);
            assert_eq!(counts.len(), 3);
            // No member above the cap (22 = ceil(64 / 3)); the rest may hold fewer.
            assert!(counts.values().all(|&n| n <= 22), "{counts:?}");
            // The order of the member list does not matter.
            let reversed: Vec<&str> = refs[..3].iter().rev().copied().collect();
            assert_eq!(assignment(64, &reversed), three);

            // refs[1] leaves: at least its shards move.
            let two = assignment(64, &[refs[0], refs[2]]);
            assert!(loads(&two).values().all(|&n| n == 32));
            moves += three.iter().zip(&two).filter(|(a, b)| a != b).count();
            minimal += counts[refs[1]];
            // refs[3] joins: at least the shards it gets move.
            let four = assignment(64, &refs);
            assert!(loads(&four).values().all(|&n| n == 16));
            moves += three.iter().zip(&four).filter(|(a, b)| a != b).count();
            minimal += loads(&four)[refs[3]];
        }
        println!("bounded rendezvous: {moves} shard moves where {minimal} were unavoidable");
        assert!(
            moves * 100 <= minimal * 125,
            "{moves} moves, {minimal} unavoidable"
        );
    }

    #[test]
    fn a_membership_is_settled_unless_someone_joined() {
        let abc = names("m", 3);
        let ab = abc[..2].to_vec();
        assert!(!settled(None, &abc), "the first round only looks");
        assert!(settled(Some(&abc), &abc));
        assert!(settled(Some(&abc), &ab), "a departure is acted on at once");
        assert!(!settled(Some(&ab), &abc), "a newcomer waits a round");
        let ad = vec![abc[0].clone(), "m-new".to_string()];
        assert!(!settled(Some(&ab), &ad), "one left, one joined: wait");
    }

    #[test]
    fn the_next_round_comes_when_a_member_lease_expires() {
        let now = Instant::now();
        let spec = |holder: &str, secs: i32| LeaseSpec {
            holder_identity: Some(holder.to_string()),
            lease_duration_seconds: Some(secs),
            ..LeaseSpec::default()
        };
        let period = Duration::from_secs(2);
        let mut observed = HashMap::new();
        assert_eq!(next_round_in(&observed, "me", now, period), period);
        // Renewed 14.5 s ago with a 15 s lease: the round comes at its expiry.
        observed.insert(
            "a".to_string(),
            (spec("a", 15), now - Duration::from_millis(14_500)),
        );
        assert_eq!(
            next_round_in(&observed, "me", now, period),
            Duration::from_millis(500) + EXPIRY_MARGIN
        );
        // An expired member is not waited for again; our own Lease never; nor a free one.
        observed.insert(
            "a".to_string(),
            (spec("a", 15), now - Duration::from_secs(16)),
        );
        observed.insert(
            "me".to_string(),
            (spec("me", 15), now - Duration::from_secs(14)),
        );
        observed.insert(
            "free".to_string(),
            (spec("", 15), now - Duration::from_secs(14)),
        );
        assert_eq!(next_round_in(&observed, "me", now, period), period);
        // A member far from its expiry: the period.
        observed.insert("b".to_string(), (spec("b", 15), now));
        assert_eq!(next_round_in(&observed, "me", now, period), period);
    }

    #[test]
    fn a_lease_counts_from_its_last_change_and_a_new_holder_is_a_join() {
        let spec = |holder: &str, renewed: i64| LeaseSpec {
            holder_identity: Some(holder.to_string()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(
                k8s_openapi::jiff::Timestamp::from_second(renewed).unwrap(),
            )),
            ..LeaseSpec::default()
        };
        let t0 = Instant::now();
        let (t1, t2) = (t0 + Duration::from_secs(1), t0 + Duration::from_secs(2));
        let mut observed = HashMap::new();
        // (holder, renewal, seen at) → (valid from, a join)
        let steps = [
            (("a", 1, t0), (t0, true)),
            // The same spec again (the next list, or a watch relist): still valid from t0.
            (("a", 1, t1), (t0, false)),
            // A renewal: valid from when it was seen; the same holder is no join.
            (("a", 2, t1), (t1, false)),
            // Another replica under the same Lease name: a join.
            (("b", 3, t2), (t2, true)),
        ];
        for ((holder, renewed, at), expected) in steps {
            assert_eq!(
                observe(&mut observed, "m".into(), spec(holder, renewed), at),
                expected,
                "{holder} renewed at {renewed}"
            );
        }
    }

    #[test]
    fn assignment_of_edge_cases() {
        assert_eq!(assignment(4, &[]), vec![None; 4]);
        assert_eq!(assignment(0, &["a"]), Vec::<Option<&str>>::new());
        assert_eq!(assignment(3, &["a"]), vec![Some("a"); 3]);
        // More members than shards: each shard to a different member.
        let table = assignment(2, &["a", "b", "c"]);
        assert!(table.iter().all(Option::is_some));
        assert_ne!(table[0], table[1]);
    }
}
