//! The one Lease client of the process: leader election and sharding read and write their
//! `coordination.k8s.io/v1` Leases only through it. Every call answers with the instant its
//! first request was *sent* ([`Sent`]): ownership resting on a write is counted from there
//! (see [`super::lease_deadlines`]), never from the answer, which may come back late.

use std::collections::BTreeMap;

use futures::Stream;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use tokio::time::Instant;

/// A request's outcome and the instant it was sent.
#[derive(Debug)]
pub(crate) struct Sent<T> {
    /// When the (first) request was sent.
    pub(crate) sent: Instant,
    /// What the API server answered.
    pub(crate) result: kube::Result<T>,
}

impl<T> Sent<T> {
    /// Runs `request`, noting when it was sent (a future does nothing before it is polled,
    /// so the instant taken here precedes the request).
    async fn timed(request: impl std::future::Future<Output = kube::Result<T>>) -> Sent<T> {
        let sent = Instant::now();
        let result = request.await;
        Sent { sent, result }
    }
}

/// How a holder gives a Lease up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// client-go's `ReleaseOnCancel` (leader election): no holder, a one-second duration and
    /// acquired and renewed now, the transition count kept, so a standby acquires at its
    /// next attempt.
    Handover,
    /// A shard Lease: no holder, renewed now; the rest stays as it was.
    ClearHolder,
}

/// Makes `spec` released as `how` says at `now`.
pub(crate) fn released(spec: &LeaseSpec, how: Release, now: &MicroTime) -> LeaseSpec {
    match how {
        Release::Handover => LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now.clone()),
            lease_transitions: spec.lease_transitions,
            ..LeaseSpec::default()
        },
        Release::ClearHolder => LeaseSpec {
            holder_identity: None,
            renew_time: Some(now.clone()),
            ..spec.clone()
        },
    }
}

/// Reads and writes the Leases of one namespace. Every change of holder is a create or a PUT
/// carrying the resourceVersion read, so of two concurrent writers one gets a conflict.
#[derive(Clone)]
pub(crate) struct LeaseClient {
    api: Api<Lease>,
}

impl LeaseClient {
    /// The Leases of `namespace`.
    pub(crate) fn new(client: kube::Client, namespace: &str) -> LeaseClient {
        LeaseClient {
            api: Api::namespaced(client, namespace),
        }
    }

    /// Reads Lease `name` (`None`: there is none).
    pub(crate) async fn get(&self, name: &str) -> Sent<Option<Lease>> {
        Sent::timed(self.api.get_opt(name)).await
    }

    /// Creates `lease` (fails with a conflict if it exists).
    pub(crate) async fn create(&self, lease: &Lease) -> Sent<Lease> {
        Sent::timed(self.api.create(&PostParams::default(), lease)).await
    }

    /// Writes `lease` back (a renewal, or a change of holder), guarded by the resourceVersion
    /// it carries.
    pub(crate) async fn renew(&self, lease: &Lease) -> Sent<Lease> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        Sent::timed(self.api.replace(&name, &PostParams::default(), lease)).await
    }

    /// Gives up Lease `name` if `me` holds it (read, then PUT guarded by the resourceVersion
    /// read). `true` when it was written; `false` when there is no such Lease or another holds
    /// it (nothing to give up).
    pub(crate) async fn release(&self, name: &str, me: &str, how: Release) -> Sent<bool> {
        let read = self.get(name).await;
        let sent = read.sent;
        let mut lease = match read.result {
            Ok(Some(lease)) => lease,
            Ok(None) => {
                return Sent {
                    sent,
                    result: Ok(false),
                }
            }
            Err(err) => {
                return Sent {
                    sent,
                    result: Err(err),
                }
            }
        };
        let old = lease.spec.clone().unwrap_or_default();
        if old.holder_identity.as_deref() != Some(me) {
            return Sent {
                sent,
                result: Ok(false),
            };
        }
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        lease.spec = Some(released(&old, how, &now));
        let result = self.renew(&lease).await.result.map(|_| true);
        Sent { sent, result }
    }

    /// Deletes Lease `name`.
    pub(crate) async fn delete(&self, name: &str) -> Sent<()> {
        Sent::timed(async {
            self.api
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ())
        })
        .await
    }

    /// The Leases `selector` selects, without their `managedFields`. Sharding lists its
    /// group's Leases (one per shard plus one per member) every round; decoded whole, each
    /// Lease's managedFields are a JSON tree of their own, memory every replica would
    /// allocate every retry period for fields nothing here reads. A Lease written back (an
    /// acquisition's PUT) carries the metadata kept here; the API server keeps the
    /// managedFields of an update that omits them.
    pub(crate) async fn list(&self, selector: &str) -> Sent<Vec<Lease>> {
        Sent::timed(async {
            let mut request = kube::core::Request::new(self.api.resource_url())
                .list(&ListParams::default().labels(selector))
                .map_err(kube::Error::BuildRequest)?;
            request.extensions_mut().insert("list");
            let list: ListedLeases = self.api.clone().into_client().request(request).await?;
            Ok(list
                .items
                .into_iter()
                .map(ListedLease::into_lease)
                .collect())
        })
        .await
    }

    /// A watch of the Leases `selector` selects (relisting after errors, as
    /// [`watcher`] does).
    pub(crate) fn watch(
        &self,
        selector: &str,
    ) -> impl Stream<Item = Result<watcher::Event<Lease>, watcher::Error>> + Send + 'static {
        watcher(
            self.api.clone(),
            watcher::Config::default().labels(selector),
        )
    }
}

/// A Lease list as [`LeaseClient::list`] reads it (unknown fields are skipped, not decoded).
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

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> MicroTime {
        MicroTime(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())
    }

    fn held() -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(t(1)),
            renew_time: Some(t(5)),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    /// Deadlines count from the send: an answer that comes back late does not move them.
    #[tokio::test(start_paused = true)]
    async fn a_request_is_timed_from_its_send_not_its_answer() {
        let before = Instant::now();
        let answered = Sent::timed(async {
            tokio::time::sleep(std::time::Duration::from_secs(8)).await;
            Ok(())
        });
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        // Not polled yet: not sent yet either.
        let at_send = Instant::now();
        let answered = answered.await;
        assert!(answered.result.is_ok());
        assert_eq!(answered.sent, at_send);
        assert_eq!(Instant::now(), before + std::time::Duration::from_secs(9));
        let deadlines = super::super::lease_deadlines(
            answered.sent,
            std::time::Duration::from_secs(15),
            std::time::Duration::from_secs(10),
        );
        assert_eq!(
            deadlines.fence,
            at_send + std::time::Duration::from_secs(14),
            "the fence is 14 s after the send, 6 s after the late answer"
        );
    }

    #[test]
    fn a_handover_is_client_gos_release_on_cancel() {
        let spec = released(&held(), Release::Handover, &t(9));
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(
            (spec.acquire_time, spec.renew_time),
            (Some(t(9)), Some(t(9)))
        );
        assert_eq!(spec.lease_transitions, Some(3), "the transitions are kept");
    }

    #[test]
    fn clearing_a_shard_lease_changes_only_its_holder_and_renew_time() {
        let spec = released(&held(), Release::ClearHolder, &t(9));
        assert_eq!(
            spec,
            LeaseSpec {
                holder_identity: None,
                renew_time: Some(t(9)),
                ..held()
            }
        );
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
                    "labels": {"g": "metacontroller", "r": "shard"},
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
        assert_eq!(
            meta.labels
                .as_ref()
                .and_then(|l| l.get("r"))
                .map(String::as_str),
            Some("shard")
        );
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
    }
}
