//! Shard Leases: taking one (create, or PUT with the listed resourceVersion), releasing
//! one after its syncs drained, and reading the group's Leases without their
//! `managedFields`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, ListParams, PostParams};

use metacontroller_dynamic::Supervisor;

use super::coordinator::Coordinator;
use super::{GROUP_LABEL, ROLE_LABEL, SHARDS_ANNOTATION};
use crate::coordination::{hold, new_spec};

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
        let result = match lease {
            None => {
                let lease = self.lease_object(name, "shard", Some(me));
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(lease) => {
                let mut lease = lease.clone();
                let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
                let spec = lease.spec.get_or_insert_with(Default::default);
                hold(spec, me, self.config.lease_duration, &now);
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
    pub(super) fn spawn_release(&self, shard: u32, clear: bool) {
        self.lock_releasing().insert(shard);
        let gate = self.gate.clone();
        let informers = self.informers.clone();
        let api = self.api.clone();
        let name = self.config.shard_lease(shard);
        let me = self.config.identity.clone();
        let releasing = self.releasing.clone();
        let supervisor = self.informers.supervisor();
        Supervisor::spawn_once_with(supervisor, "shard-release", async move {
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
}

/// The Leases `selector` selects, without their `managedFields`. Every round lists the
/// group's Leases (one per shard plus one per member); decoded whole, each Lease's
/// managedFields are a JSON tree of their own, memory every replica would allocate every
/// retry period for fields nothing here reads. A Lease written
/// back (an acquisition's PUT) carries the metadata kept here; the API server keeps the
/// managedFields of an update that omits them.
pub(super) async fn list_leases(api: &Api<Lease>, selector: &str) -> kube::Result<Vec<Lease>> {
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
pub(super) async fn clear_holder(api: &Api<Lease>, name: &str, me: &str) -> anyhow::Result<()> {
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

/// The role label of a group Lease (`member` or `shard`).
pub(super) fn role(lease: &Lease) -> Option<&str> {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ROLE_LABEL))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
