//! Member Leases: our own (created, renewed, deleted on leave, through the one
//! [`LeaseClient`]), when each other member's Lease was first seen as it is (our clock),
//! and the watch that records renewals when they happen. Who counts as live is decided by
//! [`super::machine`].

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::coordinator::{lock, Coordinator};
use super::leases::{clear_holder, role};
use super::machine::MemberLease;
use super::{GROUP_LABEL, ROLE_LABEL, SHARDS_ANNOTATION};
use crate::coordination::{lease_validity, LeaseClient};

impl Coordinator {
    /// Creates or renews our member Lease (PUT guarded by the resourceVersion we wrote).
    /// Returns when the attempt's first request was sent: the renewal counts from there.
    pub(super) async fn renew(&mut self) -> anyhow::Result<Instant> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let name = self.config.member_lease();
        let (mut lease, sent) = match self.member.take() {
            Some(lease) => (lease, None),
            None => {
                let read = self.leases.get(&name).await;
                match read.result? {
                    Some(lease) => (lease, Some(read.sent)),
                    None => {
                        let lease = self.lease_object(&name, "member", Some(&self.config.identity));
                        let created = self.leases.create(&lease).await;
                        let written = created.result?;
                        tracing::info!(identity = %self.config.identity, lease = %name, "sharding: joined as a member");
                        self.member = Some(written);
                        return Ok(read.sent);
                    }
                }
            }
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
        let renewed = self.leases.renew(&lease).await;
        // On failure it is read again next round (someone edited it, or it was deleted).
        self.member = Some(renewed.result?);
        Ok(sent.unwrap_or(renewed.sent))
    }

    /// Graceful exit (the gate is closed and drained): free our shards and membership.
    pub(super) async fn leave(&mut self) {
        for shard in self.gate.owned_shards() {
            self.gate.release_shard(shard, Duration::ZERO).await;
        }
        let selector = format!("{GROUP_LABEL}={},{ROLE_LABEL}=shard", self.config.group);
        if let Ok(leases) = self.leases.list(&selector).await.result {
            for lease in leases {
                let held = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.as_deref())
                    == Some(self.config.identity.as_str());
                if let (true, Some(name)) = (held, lease.metadata.name.as_deref()) {
                    if let Err(err) = clear_holder(&self.leases, name, &self.config.identity).await
                    {
                        tracing::warn!(lease = name, error = %err, "sharding: cannot clear a shard lease; it frees when our membership expires");
                    }
                }
            }
        }
        let name = self.config.member_lease();
        match self.leases.delete(&name).await.result {
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

/// Records the other replicas' member Leases among `leases` in `observed` (forgetting those
/// no longer listed) and answers them with when each was first seen as it is: by this
/// replica's clock, a Lease is valid for its duration after it last *changed*.
pub(super) fn observe_members<'a>(
    observed: &Observed,
    me: &str,
    leases: &'a [Lease],
    now: Instant,
) -> Vec<MemberLease<'a>> {
    let mut observed = lock(observed);
    let mut seen = HashSet::new();
    let mut others = Vec::new();
    for lease in leases.iter().filter(|l| role(l) == Some("member")) {
        let (Some(name), Some(spec)) = (lease.metadata.name.as_ref(), lease.spec.as_ref()) else {
            continue;
        };
        seen.insert(name.clone());
        let Some(holder) = spec.holder_identity.as_deref().filter(|h| !h.is_empty()) else {
            continue;
        };
        if holder == me {
            continue;
        }
        let (first_seen, _) = observe(&mut observed, name.clone(), spec.clone(), now);
        others.push(MemberLease {
            holder,
            shards: lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SHARDS_ANNOTATION))
                .map(String::as_str),
            valid_for: lease_validity(spec),
            first_seen,
        });
    }
    observed.retain(|name, _| seen.contains(name));
    others
}

/// Watches the group's member Leases so that a renewal counts from when it happened, not
/// from the next round's list (which comes up to a retry period later and would push every
/// takeover back by as much), and rings `wake` when a member joins, changes holder or is
/// deleted (a graceful leave: its shards are free now, the next round need not wait).
/// Errors back off and relist (the rounds' lists keep working without the watch).
pub(super) async fn watch_members(
    leases: LeaseClient,
    group: String,
    observed: Observed,
    wake: Arc<Notify>,
) {
    use futures::StreamExt;
    use kube::runtime::{watcher, WatchStreamExt};

    let selector = format!("{GROUP_LABEL}={group},{ROLE_LABEL}=member");
    let mut stream = std::pin::pin!(leases.watch(&selector).default_backoff());
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

    /// A member Lease `name` held by `holder`, renewed at second `renewed`, with `--shards`.
    fn member(name: &str, holder: &str, renewed: i64, shards: Option<&str>) -> Lease {
        let mut lease = Lease::default();
        lease.metadata.name = Some(name.into());
        lease.metadata.labels = Some([(ROLE_LABEL.to_string(), "member".to_string())].into());
        lease.metadata.annotations =
            shards.map(|n| [(SHARDS_ANNOTATION.to_string(), n.to_string())].into());
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(
                k8s_openapi::jiff::Timestamp::from_second(renewed).unwrap(),
            )),
            ..LeaseSpec::default()
        });
        lease
    }

    #[test]
    fn other_members_are_seen_from_when_their_lease_last_changed_by_our_clock() {
        let observed = Observed::default();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(3);
        let mut shard = member("g-shard-0", "b", 1, None);
        shard.metadata.labels = Some([(ROLE_LABEL.to_string(), "shard".to_string())].into());
        let first = [
            member("m-me", "me", 1, Some("12")),
            member("m-free", "", 1, Some("12")),
            member("m-b", "b", 1, Some("12")),
            member("m-c", "c", 1, None),
            shard,
        ];
        let seen = observe_members(&observed, "me", &first, t0);
        let summary: Vec<_> = seen
            .iter()
            .map(|m| (m.holder, m.shards, m.valid_for, m.first_seen))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("b", Some("12"), Duration::from_secs(15), t0),
                ("c", None, Duration::from_secs(15), t0),
            ],
            "our own Lease, a free one and shard Leases are no other member"
        );
        // Listed again later: b unchanged keeps t0 (its holder's timestamps are not read);
        // c renewed counts from now; a Lease no longer listed is forgotten.
        let second = [
            member("m-b", "b", 1, Some("12")),
            member("m-c", "c", 2, None),
        ];
        let seen = observe_members(&observed, "me", &second, t1);
        let firsts: Vec<_> = seen.iter().map(|m| (m.holder, m.first_seen)).collect();
        assert_eq!(firsts, vec![("b", t0), ("c", t1)]);
        let names: HashSet<String> = lock(&observed).keys().cloned().collect();
        assert_eq!(names, ["m-b".to_string(), "m-c".to_string()].into());
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
