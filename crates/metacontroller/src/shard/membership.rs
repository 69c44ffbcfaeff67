//! Member Leases: our own (created, renewed, deleted on leave), who is live by our clock,
//! and the watch that records renewals when they happen.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, PostParams};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::coordinator::{lock, Coordinator};
use super::leases::{clear_holder, list_leases, role};
use super::{GROUP_LABEL, ROLE_LABEL, SHARDS_ANNOTATION};

impl Coordinator {
    /// Live members: our own identity while our renewals are current, and every other
    /// member Lease whose spec changed within the lease duration by our clock and whose
    /// [`SHARDS_ANNOTATION`] is our `--shards`. Live members with another (or no) value are
    /// kept in `self.foreign`: while there are any, this replica acquires no shard.
    pub(super) fn members(&mut self, leases: &[Lease]) -> Vec<String> {
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
    pub(super) async fn renew(&mut self) -> anyhow::Result<()> {
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
        spec.lease_duration_seconds = Some(crate::coordination::lease_seconds(
            self.config.lease_duration,
        ));
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

    /// Graceful exit (the gate is closed and drained): free our shards and membership.
    pub(super) async fn leave(&mut self) {
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

/// Member Leases by name: the spec last seen and when this replica first saw that spec (its
/// own clock: the holder's timestamps are never trusted, clocks skew).
pub(super) type Observed = Arc<Mutex<HashMap<String, (LeaseSpec, Instant)>>>;

/// How long after a member Lease's expiry (as observed) the round that drops it runs.
const EXPIRY_MARGIN: Duration = Duration::from_millis(20);

/// Until the next round: `period`, or until just after the first live member's Lease
/// expires if that is sooner, so that a dead replica's shards are taken over at the expiry
/// rather than up to a retry period later.
pub(super) fn next_round_in(
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
pub(super) async fn watch_members(
    api: Api<Lease>,
    group: String,
    observed: Observed,
    wake: Arc<Notify>,
) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
