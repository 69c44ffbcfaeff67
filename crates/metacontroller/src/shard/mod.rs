//! Sharding (`--sharding`): parents spread over all replicas, coordinated only through
//! `coordination.k8s.io/v1` Leases — no coordinator besides the API server.
//!
//! # Design
//!
//! - **Keys → shards.** Every queue key (a parent's `namespace/name`) hashes to one of
//!   `--shards` virtual shards ([`metacontroller_workqueue::shard_of`], a stable hash).
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
//!   member) moves the fewest shards but is lumpy, and the largest member sets the memory
//!   and the time of the whole group; the cap bounds every member to `ceil(shards /
//!   members)` for a few more moves when a replica joins or leaves. The default `--shards`
//!   is 60, which the cap splits evenly over 2, 3, 4, 5, 6, 10 or 12 members.
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
//!     (the relist of every parent and child is off the critical path; nothing is synced
//!     before the shard Lease is taken). If it renews after
//!     all, they drop and prune what they cached ahead. For one lease
//!     duration after such a takeover the taken shards' keys are *expedited*: every work queue
//!     serves them first, the follow-ups of their syncs included (see
//!     [`metacontroller_workqueue::WorkQueue`]), so the dead replica's parents do not wait
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
//!   children (by controller ownerReference, or for children elsewhere by the parent their
//!   `metacontroller.k8s.io/parent` annotation names) and orphans (see
//!   [`metacontroller_dynamic::Keep`] for the retention rules and the trade-off). Label
//!   selectors cannot do this: the shard is a function of the parent's key, which no label
//!   on a child carries unless the controller wrote it (and parents are owned by users).
//!   Related objects of customize hooks and CRDs are kept in full.
//!
//! With sharding on, `--leader-election` is refused: every replica is active.
//!
//! Modules: [`assignment`] (shards → members), `machine` (every decision of a round, pure:
//! `round(view, now) -> actions`, built on `decision`, the rules for one shard),
//! `coordinator` (the driver: renew, gather the view, carry the actions out), `effects`
//! (taking, caching ahead, admitting, stopping shards), `membership` (member Leases:
//! renewal, when each was first seen, the watch), `leases` (shard Leases), `metrics`. Every
//! Lease request goes through [`crate::coordination::LeaseClient`].

mod assignment;
mod coordinator;
mod decision;
mod effects;
mod leases;
mod machine;
mod membership;
mod metrics;

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use metacontroller_dynamic::Informers;
use metacontroller_workqueue::stable_hash;
use metacontroller_workqueue::SyncGate;
use prometheus::Registry;
use tokio::sync::{watch, Notify};

use crate::coordination::LeaseClient;
use coordinator::Coordinator;
use membership::{watch_members, Observed};
use metrics::ShardMetrics;

/// Label naming the sharding group (the `--leader-election-id`) on every Lease it uses.
pub const GROUP_LABEL: &str = "metacontroller.k8s.io/shard-group";
/// Label telling member Leases (`member`) from shard Leases (`shard`).
pub const ROLE_LABEL: &str = "metacontroller.k8s.io/shard-role";
/// Annotation of a member Lease: the `--shards` of its replica. Replicas that split parents
/// into different numbers of shards map a parent to different shard Leases, so they must
/// never sync at the same time.
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

    pub(crate) fn member_lease(&self) -> String {
        format!(
            "{}-member-{:016x}",
            self.group,
            stable_hash(self.identity.as_bytes())
        )
    }

    pub(crate) fn shard_lease(&self, shard: u32) -> String {
        format!("{}-shard-{shard}", self.group)
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
        let leases = LeaseClient::new(client, &config.namespace);
        let observed = Observed::default();
        let wake = Arc::new(Notify::new());
        let watch_task = supervisor.spawn(
            "shard-members-watch",
            watch_members(
                leases.clone(),
                config.group.clone(),
                observed.clone(),
                wake.clone(),
            ),
        );
        let coordinator = Coordinator::new(
            (leases, config, gate, informers, metrics),
            supervisor.clone(),
            observed,
            wake,
            watch_task,
        );
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
