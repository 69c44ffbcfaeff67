//! Leader election (`--leader-election`) on a `coordination.k8s.io/v1` Lease, with
//! client-go's semantics and controller-runtime's default timings.
//!
//! The elector drives the process's [`SyncGate`]: open while this replica holds the Lease,
//! closed otherwise. The controllers, informers and queues run in every replica (a standby
//! keeps warm caches and every key queued), only the gate decides who syncs.
//!
//! Safety rule: no two replicas write at the same time. Another replica can take the Lease
//! only `lease_duration` after it saw it renewed, which is after the leader *sent* that
//! renewal; the leader's own deadlines therefore count from the send, never from the answer
//! (which may come back late). Bound to the gate ([`SyncGate::set_lease`], as a shard
//! Lease is): from `renew_deadline` after the last renewal sent no sync starts, and at the
//! fence, a margin before `lease_duration`, running syncs are abandoned (dropped before
//! their next request). A leader that cannot renew closes the gate and waits for its syncs;
//! if they do not end by the fence, the process exits rather than write alongside a new
//! leader.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use metacontroller_workqueue::{LeaseDeadlines, SyncGate};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::coordination::{
    expired, hold, jitter, lease_deadlines, lease_validity, new_spec, sleep_or_stop, LeaseClient,
    Release,
};

/// Where the service account's namespace is mounted in a pod.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Lease settings (controller-runtime's defaults).
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease (`--leader-election-id`).
    pub name: String,
    /// This replica's `holderIdentity`: hostname + unique suffix.
    pub identity: String,
    /// How long a Lease is valid after its last renewal, as seen by the others.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leading.
    pub renew_deadline: Duration,
    /// Pause between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// From the command line: `--leader-election-namespace` (default: the pod's namespace from
    /// `$POD_NAMESPACE` or the service account mount, else `metacontroller`),
    /// `--leader-election-id`, and `--leader-election-resource-lock` (only `leases`).
    pub fn from_args(
        namespace: &str,
        id: &str,
        resource_lock: &str,
    ) -> anyhow::Result<LeaderConfig> {
        if resource_lock != "leases" {
            anyhow::bail!(
                "--leader-election-resource-lock={resource_lock} is not supported; use leases"
            );
        }
        if id.is_empty() {
            anyhow::bail!("--leader-election-id must not be empty");
        }
        Ok(LeaderConfig {
            namespace: default_namespace(namespace),
            name: id.to_string(),
            identity: identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        })
    }
}

pub(crate) fn default_namespace(flag: &str) -> String {
    let flag = flag.trim();
    if !flag.is_empty() {
        return flag.to_string();
    }
    if let Some(ns) = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|ns| !ns.trim().is_empty())
    {
        return ns.trim().to_string();
    }
    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
        .ok()
        .map(|ns| ns.trim().to_string())
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "metacontroller".to_string())
}

/// `<hostname>_<16 random hex digits>`, unique per process even for replicas sharing a
/// hostname (as controller-runtime's hostname + UUID).
pub(crate) fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "metacontroller".to_string());
    // RandomState is seeded from the OS's randomness: no extra dependency for a nonce.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{host}_{:016x}", hasher.finish())
}

/// The elector of one process.
pub struct Elector {
    leases: LeaseClient,
    config: LeaderConfig,
    gate: SyncGate,
    /// The Lease spec last read and when it was first seen as it is (local clock): expiry is
    /// judged from our own observation, never from the holder's timestamps (clock skew).
    observed: Option<(LeaseSpec, Instant)>,
}

/// Why one attempt did not leave us holding the Lease.
enum Attempt {
    Held,
    HeldByOther(String),
    Failed(String),
}

impl Elector {
    /// An elector for `config`, driving `gate` (which should start closed).
    pub fn new(client: Client, config: LeaderConfig, gate: SyncGate) -> Elector {
        Elector {
            leases: LeaseClient::new(client, &config.namespace),
            config,
            gate,
            observed: None,
        }
    }

    /// Runs until `stop` turns true: competes for the Lease, opens the gate while leading,
    /// closes it (after draining) when the Lease is lost. On stop, a leader releases the
    /// Lease so a standby takes over at once; the caller must have closed and drained the
    /// gate first.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let config = self.config.clone();
        tracing::info!(lease = %format!("{}/{}", config.namespace, config.name), identity = %config.identity, "leader election: waiting to acquire the lease");
        loop {
            // Candidate.
            let mut last_wait: Option<String> = None;
            let mut renewed;
            loop {
                if *stop.borrow() {
                    return;
                }
                let (attempt, sent) = self.try_acquire_or_renew().await;
                renewed = sent;
                match attempt {
                    Attempt::Held => break,
                    Attempt::HeldByOther(holder) => {
                        if last_wait.as_deref() != Some(holder.as_str()) {
                            tracing::info!(%holder, "leader election: lease held by another replica; standing by");
                            last_wait = Some(holder);
                        }
                    }
                    Attempt::Failed(err) => {
                        tracing::warn!(error = %err, "leader election: cannot acquire the lease; retrying")
                    }
                }
                if sleep_or_stop(jitter(config.retry_period), &mut stop).await {
                    return;
                }
            }
            tracing::info!(identity = %config.identity, lease = %format!("{}/{}", config.namespace, config.name), "leader election: acquired the lease; this replica syncs");
            self.gate.set_lease(self.deadlines(renewed));
            self.gate.open();
            // Leader: renew every retry period until the renew deadline passes without success.
            loop {
                if sleep_or_stop(config.retry_period, &mut stop).await {
                    self.release().await;
                    return;
                }
                let left = config
                    .renew_deadline
                    .saturating_sub(renewed.elapsed())
                    .max(Duration::from_millis(100));
                match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                    Ok((Attempt::Held, sent)) => {
                        renewed = sent;
                        self.gate.set_lease(self.deadlines(sent));
                        tracing::debug!("leader election: renewed the lease");
                        continue;
                    }
                    Ok((Attempt::HeldByOther(holder), _)) => {
                        tracing::error!(%holder, "leader election: the lease was taken over");
                    }
                    Ok((Attempt::Failed(err), _)) => {
                        tracing::warn!(error = %err, "leader election: cannot renew the lease");
                    }
                    Err(_) => tracing::warn!("leader election: renewing the lease timed out"),
                }
                if renewed.elapsed() >= config.renew_deadline
                    || matches!(self.observed_holder(), Some(h) if h != config.identity)
                {
                    break;
                }
            }
            self.lost(renewed).await;
        }
    }

    /// The gate's deadlines after a renewal sent at `sent`.
    fn deadlines(&self, sent: Instant) -> LeaseDeadlines {
        lease_deadlines(sent, self.config.lease_duration, self.config.renew_deadline)
    }

    /// Leadership lost: stop syncing before anyone else may start.
    async fn lost(&mut self, renewed: Instant) {
        // Others may take the Lease `lease_duration` after our last renewal was sent; syncs
        // still running at the fence (a margin before) are abandoned there, so they are gone
        // moments after it.
        let budget =
            (self.deadlines(renewed).fence + FENCE_GRACE).saturating_duration_since(Instant::now());
        tracing::error!(
            ?budget,
            "leader election: lost the lease; stopping syncs (caches stay warm)"
        );
        if !self.gate.close_and_drain(budget).await {
            tracing::error!("leader election: running syncs did not end before the lease expires; exiting so two replicas never write at once");
            std::process::exit(1);
        }
        tracing::info!("leader election: syncs stopped; standing by");
        self.observed = None;
    }

    fn observed_holder(&self) -> Option<&str> {
        self.observed
            .as_ref()
            .and_then(|(spec, _)| spec.holder_identity.as_deref())
    }

    /// One client-go `tryAcquireOrRenew`: read the Lease; take it if it is ours, free, or
    /// expired by our own observation; write with the read resourceVersion (a concurrent
    /// writer makes this fail with 409 instead of both winning). Also answers when the
    /// attempt's first request was sent: a renewal counts from there.
    async fn try_acquire_or_renew(&mut self) -> (Attempt, Instant) {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let config = &self.config;
        let read = self.leases.get(&config.name).await;
        let sent = read.sent;
        let current = match read.result {
            Ok(current) => current,
            Err(err) => return (Attempt::Failed(format!("reading lease: {err}")), sent),
        };
        let Some(mut lease) = current else {
            let mine = new_spec(Some(&config.identity), config.lease_duration, &now);
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    namespace: Some(config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(mine.clone()),
            };
            return match self.leases.create(&lease).await.result {
                Ok(_) => {
                    self.observed = Some((mine, Instant::now()));
                    (Attempt::Held, sent)
                }
                Err(err) => (Attempt::Failed(format!("creating lease: {err}")), sent),
            };
        };
        let old = lease.spec.clone().unwrap_or_default();
        if self.observed.as_ref().map(|(spec, _)| spec) != Some(&old) {
            self.observed = Some((old.clone(), Instant::now()));
        }
        let observed_at = self
            .observed
            .as_ref()
            .map_or_else(Instant::now, |(_, t)| *t);
        let holder = old.holder_identity.clone().unwrap_or_default();
        let we_hold = holder == config.identity;
        if !holder.is_empty()
            && !we_hold
            && !expired(observed_at, lease_validity(&old), Instant::now())
        {
            return (Attempt::HeldByOther(holder), sent);
        }
        let mut spec = old;
        hold(&mut spec, &config.identity, config.lease_duration, &now);
        lease.spec = Some(spec.clone());
        match self.leases.renew(&lease).await.result {
            Ok(_) => {
                self.observed = Some((spec, Instant::now()));
                (Attempt::Held, sent)
            }
            Err(err) => (Attempt::Failed(format!("updating lease: {err}")), sent),
        }
    }

    /// client-go's ReleaseOnCancel (see [`Release::Handover`]), so a standby acquires at its
    /// next attempt.
    async fn release(&mut self) {
        self.gate.close_and_drain(Duration::ZERO).await;
        let released = self
            .leases
            .release(&self.config.name, &self.config.identity, Release::Handover)
            .await;
        match released.result {
            Ok(true) => tracing::info!("leader election: released the lease"),
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(error = %err, "leader election: cannot release the lease; it expires on its own")
            }
        }
    }
}

/// How long after the fence a leader that lost its Lease waits for the syncs abandoned
/// there to be dropped before it exits: well inside the margin between the fence and the
/// Lease's expiry.
const FENCE_GRACE: Duration = Duration::from_millis(200);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_leases_are_supported() {
        assert!(LeaderConfig::from_args("ns", "id", "leases").is_ok());
        let err = LeaderConfig::from_args("ns", "id", "configmaps")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--leader-election-resource-lock"), "{err}");
    }

    #[test]
    fn controller_runtime_timings_and_unique_identities() {
        let a = LeaderConfig::from_args("ns", "metacontroller", "leases").unwrap();
        let b = LeaderConfig::from_args("ns", "metacontroller", "leases").unwrap();
        assert_eq!(a.lease_duration, Duration::from_secs(15));
        assert_eq!(a.renew_deadline, Duration::from_secs(10));
        assert_eq!(a.retry_period, Duration::from_secs(2));
        assert_eq!(a.namespace, "ns");
        assert_ne!(a.identity, b.identity);
        assert!(a.identity.contains('_'));
    }
}
