//! A rollout shared by sharded replicas (`--sharding`): every replica syncs only the parents
//! of its shards, so one of them drives and the others follow, all through the API.
//!
//! - **One driver.** The replica whose gate owns shard 0 (the shard Lease decides, so at most
//!   one replica at a time) runs the state machine and writes `status.hookRollout`; each
//!   write carries the `resourceVersion` it read, so a driver that lost shard 0 without
//!   knowing it yet cannot overwrite a newer state (the server answers 409).
//! - **Followers.** Every replica reads the status each round and queues those of its own
//!   parents whose code changed; a parent's code always comes from a status read from the
//!   API, so a replica can lag behind the driver (by at most a round) but never lead it.
//! - **Reports.** Each replica publishes the last sync result of each of its parents on the
//!   new code in a Lease of its own ([`REPORT_LABEL`], annotation [`REPORT_ANNOTATION`]),
//!   owned by the controller object; the driver merges every report for the current `to`
//!   digest (the newest result of a parent wins: a parent handed over keeps its history).
//! - **All parents.** Step sizes and the cutoff need every parent's key, not only the driver's
//!   share: the driver lists the parent resources from the API when it evaluates.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::Api;
use metacontroller_api::rollout::assign::ParentKey;
use metacontroller_api::rollout::machine::SyncResult;
use metacontroller_workqueue::SyncGate;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use metacontroller_api::rollout::assign::digest_of;
use metacontroller_api::rollout::machine::Effect;
use metacontroller_api::rollout::{HookRolloutStatus, RolloutPhase};

use super::driver::{parent_of, Parent, RolloutDriver, RolloutHost};
use super::store::Owner;

/// Shortest time between two rounds of a sharded replica (each reads the controller object).
const MIN_ROUND: std::time::Duration = std::time::Duration::from_millis(200);

/// Label on every report Lease; its value is the controller's revision prefix
/// (`<name>-cc` / `<name>-dc`), so the driver lists the reports of its controller only.
pub(crate) const REPORT_LABEL: &str = "metacontroller.k8s.io/hook-rollout-report";
/// Annotation of a report Lease holding the report (JSON).
pub(crate) const REPORT_ANNOTATION: &str = "metacontroller.k8s.io/hook-rollout-report";

/// One sync result, as a report carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Reported {
    /// The error of the last sync; absent when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// When it finished (Unix milliseconds of the reporting replica).
    pub(crate) at: i64,
}

/// What one replica knows of its parents on the new code.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Report {
    /// The digest the results are about (`status.hookRollout.to`).
    pub(crate) to: String,
    /// By parent key.
    pub(crate) results: BTreeMap<String, Reported>,
}

impl Reported {
    pub(crate) fn of(result: &SyncResult, at: i64) -> Option<Reported> {
        match result {
            SyncResult::NotYet => None,
            SyncResult::Ok => Some(Reported { error: None, at }),
            SyncResult::Err(e) => Some(Reported {
                error: Some(e.clone()),
                at,
            }),
        }
    }

    pub(crate) fn result(&self) -> SyncResult {
        match &self.error {
            None => SyncResult::Ok,
            Some(e) => SyncResult::Err(e.clone()),
        }
    }
}

/// The sharding side of one controller's rollout in this replica.
pub(crate) struct Shared {
    gate: SyncGate,
    /// This replica's report Lease.
    report_name: String,
    /// The report last written (nothing is written while it is unchanged).
    published: std::sync::Mutex<Option<Report>>,
    /// The watched namespaces (`--watch-namespaces`); `None`: every namespace.
    namespaces: Option<Vec<String>>,
}

impl Shared {
    /// The sharing of a rollout under `gate`; `None` without sharding (one replica, or
    /// leader election: a single driver already).
    pub(crate) fn new(
        gate: &SyncGate,
        owner: &Owner,
        namespaces: Option<Vec<String>>,
    ) -> Option<Shared> {
        gate.shard_count()?;
        // Seeded by the OS: unique per process without an extra dependency.
        let mut nonce = std::collections::hash_map::RandomState::new().build_hasher();
        nonce.write_u32(std::process::id());
        Some(Shared {
            gate: gate.clone(),
            report_name: report_name(owner, nonce.finish()),
            published: std::sync::Mutex::new(None),
            namespaces,
        })
    }

    /// Whether this replica drives the rollout now: it owns shard 0 under a current Lease.
    pub(crate) fn drives(&self) -> bool {
        self.gate.lease_current() && self.gate.owned_shards().first() == Some(&0)
    }

    /// Writes `report` into this replica's Lease unless it was written already.
    pub(crate) async fn publish(
        &self,
        client: &kube::Client,
        owner: &Owner,
        namespace: &str,
        report: Report,
    ) -> Result<(), String> {
        if self.lock().as_ref() == Some(&report) {
            return Ok(());
        }
        let text = serde_json::to_string(&report).map_err(|e| e.to_string())?;
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {
                "name": self.report_name,
                "namespace": namespace,
                "labels": {REPORT_LABEL: label_value(owner)},
                "annotations": {REPORT_ANNOTATION: text},
                "ownerReferences": [owner.reference()],
            },
        });
        let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
        api.patch(
            &self.report_name,
            &PatchParams::apply("metacontroller-hook-rollout").force(),
            &Patch::Apply(&lease),
        )
        .await
        .map_err(|e| {
            format!(
                "writing the rollout report {namespace}/{}: {e}",
                self.report_name
            )
        })?;
        *self.lock() = Some(report);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Report>> {
        self.published.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The newest result of each parent on code `to` over every replica's report (a report
/// that does not parse is skipped with a warning: a hand edit must not stop the rollout).
pub(crate) async fn read_reports(
    client: &kube::Client,
    owner: &Owner,
    namespace: &str,
    to: &str,
) -> Result<HashMap<ParentKey, Reported>, String> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let selector = format!("{REPORT_LABEL}={}", label_value(owner));
    let leases = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| format!("listing the rollout reports in {namespace}: {e}"))?;
    let mut merged: HashMap<ParentKey, Reported> = HashMap::new();
    for lease in leases.items {
        let text = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REPORT_ANNOTATION));
        let report = match text.map(|t| serde_json::from_str::<Report>(t)) {
            Some(Ok(report)) => report,
            Some(Err(e)) => {
                tracing::warn!(lease = ?lease.metadata.name, error = %e, "hook rollout: a report does not parse; skipped");
                continue;
            }
            None => continue,
        };
        if report.to != to {
            continue;
        }
        for (key, result) in report.results {
            merge(&mut merged, ParentKey::from_stored(key), result);
        }
    }
    Ok(merged)
}

/// Keeps the newer of two results of one parent (a failure on a tie: it is the safer one).
pub(crate) fn merge(into: &mut HashMap<ParentKey, Reported>, key: ParentKey, result: Reported) {
    match into.get(&key) {
        Some(old) if old.at > result.at || (old.at == result.at && old.error.is_some()) => {}
        _ => {
            into.insert(key, result);
        }
    }
}

/// Every parent of the controller, listed from the API (this replica caches only its
/// shards) in the watched `namespaces` (every one when `None`; a cluster-scoped resource
/// cluster-wide), keeping those `cares` accepts.
pub(crate) async fn list_parents(
    client: &kube::Client,
    resources: &[Arc<metacontroller_dynamic::ApiResource>],
    namespaces: Option<&[String]>,
    cares: impl Fn(&Value) -> bool,
) -> Result<Vec<Parent>, String> {
    let mut parents = Vec::new();
    for resource in resources {
        let kube_resource = resource.to_kube();
        let apis = match namespaces.filter(|_| resource.namespaced) {
            None => vec![Api::<DynamicObject>::all_with(
                client.clone(),
                &kube_resource,
            )],
            Some(namespaces) => namespaces
                .iter()
                .map(|ns| Api::namespaced_with(client.clone(), ns, &kube_resource))
                .collect(),
        };
        let mut items = Vec::new();
        for api in apis {
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing {}: {e}", resource.name))?;
            items.extend(list.items);
        }
        for object in items {
            let mut value = serde_json::to_value(&object).map_err(|e| e.to_string())?;
            value["apiVersion"] = Value::String(resource.api_version.clone());
            value["kind"] = Value::String(resource.kind.clone());
            if cares(&value) {
                parents.push(parent_of(value));
            }
        }
    }
    Ok(parents)
}

/// The controller's [`REPORT_LABEL`] value: its prefix, hashed when longer than a label
/// value may be.
fn label_value(owner: &Owner) -> String {
    let prefix = owner.prefix();
    if prefix.len() <= 63 {
        return prefix;
    }
    format!(
        "h-{:016x}",
        metacontroller_workqueue::stable_hash(prefix.as_bytes())
    )
}

/// This replica's report Lease name for `owner` (within a name's 253 characters).
fn report_name(owner: &Owner, nonce: u64) -> String {
    let name = format!("{}-rollout-{nonce:016x}", owner.prefix());
    if name.len() <= 253 {
        return name;
    }
    format!("hook-rollout-{}-{nonce:016x}", label_value(owner))
}

/// Whether a failed write of the state was refused for a stale `resourceVersion`.
pub(crate) fn is_conflict(error: &str) -> bool {
    error.contains("Conflict")
}

/// One round of a sharded replica: reads the state (queuing its own parents whose code
/// changed), publishes its report, and when it `drives`, evaluates the rollout over every
/// parent and every report. `None` when it does not drive, had nothing to evaluate, or lost
/// a race to write. Rounds are at least [`MIN_ROUND`] apart: every finished sync wakes one.
pub(crate) async fn sharded_round(
    driver: &RolloutDriver,
    host: &dyn RolloutHost,
    drives: bool,
    code_may_have_changed: bool,
) -> Result<Option<Vec<Effect>>, String> {
    let Some(shared) = &driver.shared else {
        return Ok(None);
    };
    let round = tokio::time::sleep(MIN_ROUND);
    let status = follow(driver, host).await?;
    let running = matches!(
        status.phase,
        RolloutPhase::Progressing | RolloutPhase::Paused
    );
    if running {
        let report = own_report(driver, &status.to);
        shared
            .publish(&driver.client, &driver.owner, &driver.namespace, report)
            .await?;
    }
    if !drives || !(running || code_may_have_changed) {
        // At rest the driver lists nothing: only a code change starts a rollout.
        round.await;
        return Ok(None);
    }
    let remote = read_reports(&driver.client, &driver.owner, &driver.namespace, &status.to).await?;
    let resources = host.parent_resources();
    let scope = shared.namespaces.as_deref();
    let parents = list_parents(&driver.client, &resources, scope, |o| host.cares(o)).await?;
    let stepped = driver.step(&parents, &remote, code_may_have_changed).await;
    round.await;
    match stepped {
        Err(e) if is_conflict(&e) => {
            tracing::info!(controller = %driver.owner.name, "hook rollout: the state changed while evaluating it; reading it again");
            Ok(None)
        }
        other => other.map(Some),
    }
}

/// This replica's results on code `to`.
fn own_report(driver: &RolloutDriver, to: &str) -> Report {
    let state = driver.lock();
    let results = state
        .results
        .iter()
        .filter(|(_, (digest, _, _))| digest == to)
        .filter_map(|(key, (_, result, at))| {
            Some((key.as_str().to_string(), Reported::of(result, *at)?))
        })
        .collect();
    Report {
        to: to.to_string(),
        results,
    }
}

/// Reads `status.hookRollout` from the API and makes it this replica's: the versions it
/// names are loaded first (a sync never waits on a missing one), then those of this
/// replica's parents whose code changed are queued. Returns the state.
async fn follow(
    driver: &RolloutDriver,
    host: &dyn RolloutHost,
) -> Result<HookRolloutStatus, String> {
    let api = Api::<DynamicObject>::all_with(driver.client.clone(), &driver.resource);
    let object = api
        .get(&driver.owner.name)
        .await
        .map_err(|e| format!("reading {} {}: {e}", driver.owner.kind, driver.owner.name))?;
    let rv = object.metadata.resource_version.clone().unwrap_or_default();
    let Some(next) = HookRolloutStatus::from_status(object.data.get("status")) else {
        return Err("the rollout state is gone from the status".into());
    };
    driver.ensure_loaded(&next.from).await?;
    driver.ensure_loaded(&next.to).await?;
    let prev = {
        let mut state = driver.lock();
        state.resource_version = rv;
        let prev = state.status.replace(next.clone());
        if prev.as_ref().is_some_and(|p| p.to != next.to) {
            state.results.clear();
        }
        prev
    };
    if let Some(prev) = prev.filter(|p| *p != next) {
        let moved: Vec<ParentKey> = host
            .parents()
            .into_iter()
            .map(|p| p.key)
            .filter(|k| digest_of(&prev, k) != digest_of(&next, k))
            .collect();
        if !moved.is_empty() {
            tracing::info!(controller = %driver.owner.name, parents = moved.len(), "hook rollout: the state changed; resyncing this replica's parents whose code changed");
            host.resync(&moved);
        }
    }
    Ok(next)
}

/// Unix milliseconds now.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(at: i64) -> Reported {
        Reported { error: None, at }
    }

    fn failed(at: i64) -> Reported {
        Reported {
            error: Some("boom".into()),
            at,
        }
    }

    #[test]
    fn the_newest_result_of_a_parent_wins() {
        let key = ParentKey::new("u", "ns", "p");
        let mut merged = HashMap::new();
        merge(&mut merged, key.clone(), failed(5));
        merge(&mut merged, key.clone(), ok(3));
        assert_eq!(
            merged[&key],
            failed(5),
            "an older success does not hide a failure"
        );
        merge(&mut merged, key.clone(), ok(7));
        assert_eq!(merged[&key], ok(7), "the new owner's later success counts");
        merge(&mut merged, key.clone(), failed(7));
        assert_eq!(merged[&key], failed(7), "a tie keeps the failure");
        merge(&mut merged, key.clone(), ok(7));
        assert_eq!(merged[&key], failed(7));
    }

    #[test]
    fn reports_round_trip_and_results_map_back() {
        let mut report = Report {
            to: "abc".into(),
            ..Default::default()
        };
        report.results.insert("k1".into(), ok(1));
        report.results.insert("k2".into(), failed(2));
        let text = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<Report>(&text).unwrap(), report);
        assert_eq!(report.results["k1"].result(), SyncResult::Ok);
        assert_eq!(
            report.results["k2"].result(),
            SyncResult::Err("boom".into())
        );
        assert_eq!(Reported::of(&SyncResult::NotYet, 1), None);
    }

    #[test]
    fn without_sharding_there_is_nothing_to_share() {
        let owner = Owner {
            kind: "CompositeController",
            name: "c".into(),
            uid: "u".into(),
        };
        assert!(Shared::new(&SyncGate::default(), &owner, None).is_none());
        let sharded = Shared::new(&SyncGate::sharded(4), &owner, None).expect("sharded");
        assert!(!sharded.drives(), "shard 0 is not owned yet");
        assert!(sharded.report_name.starts_with("c-cc-rollout-"));
    }
}
