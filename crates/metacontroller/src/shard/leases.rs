//! Shard Leases, through the one [`LeaseClient`]: the Lease objects of the group, taking
//! one (create, or PUT with the listed resourceVersion), and releasing one after its syncs
//! drained.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use metacontroller_dynamic::Supervisor;

use super::coordinator::Coordinator;
use super::{GROUP_LABEL, ROLE_LABEL, SHARDS_ANNOTATION};
use crate::coordination::{hold, new_spec, LeaseClient, Release};

impl Coordinator {
    pub(super) fn lease_object(&self, name: &str, role: &str, holder: Option<&str>) -> Lease {
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
            spec: Some(new_spec(holder, self.config.lease_duration, &now)),
        }
    }

    /// Takes the shard Lease (create, or PUT with the listed resourceVersion).
    pub(super) async fn acquire(&self, shard: u32, name: &str, lease: Option<&Lease>) -> bool {
        let me = self.config.identity.as_str();
        let written = match lease {
            None => {
                let lease = self.lease_object(name, "shard", Some(me));
                self.leases.create(&lease).await
            }
            Some(lease) => {
                let mut lease = lease.clone();
                let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
                let spec = lease.spec.get_or_insert_with(Default::default);
                hold(spec, me, self.config.lease_duration, &now);
                self.leases.renew(&lease).await
            }
        };
        match written.result {
            Ok(_) => true,
            Err(err) => {
                tracing::info!(shard, error = %err, "sharding: shard lease not acquired");
                false
            }
        }
    }

    /// Drains `shard` in the background, then (if `clear`) clears its Lease's holder.
    pub(super) fn spawn_release(&self, shard: u32, clear: bool) {
        self.lock_releasing().insert(shard);
        let gate = self.gate.clone();
        let informers = self.informers.clone();
        let leases = self.leases.clone();
        let name = self.config.shard_lease(shard);
        let me = self.config.identity.clone();
        let releasing = self.releasing.clone();
        Supervisor::spawn_once_with(Some(&self.supervisor), "shard-release", async move {
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
                if let Err(err) = clear_holder(&leases, &name, &me).await {
                    tracing::warn!(shard, error = %err, "sharding: cannot clear the shard lease; retrying next round");
                }
            }
            releasing
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&shard);
        });
    }
}

/// Clears the holder of shard Lease `name` if it is still `me` ([`Release::ClearHolder`]).
pub(super) async fn clear_holder(leases: &LeaseClient, name: &str, me: &str) -> kube::Result<()> {
    leases
        .release(name, me, Release::ClearHolder)
        .await
        .result
        .map(|_| ())
}

/// The role label of a group Lease (`member` or `shard`).
pub(super) fn role(lease: &Lease) -> Option<&str> {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ROLE_LABEL))
        .map(String::as_str)
}
