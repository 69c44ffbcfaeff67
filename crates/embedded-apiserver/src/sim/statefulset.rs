//! The StatefulSet controller: pods `<name>-<ordinal>` created in order (OrderedReady, one
//! at a time, each waiting for the previous to be Running and Ready) or all at once
//! (Parallel), removed from the highest ordinal, RollingUpdate from the highest ordinal down
//! to `partition`, and `currentRevision` / `updateRevision` with their replica counts.

use super::util::{self, int_at, CONTROLLER_MANAGER};
use super::{Key, Sim};
use crate::store::{meta_str, State};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const REVISION_LABEL: &str = "controller-revision-hash";
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
const SOURCE: &str = "statefulset-controller";

fn running_and_ready(pod: &Value) -> bool {
    util::phase(pod) == "Running" && util::is_ready(pod) && !util::is_deleting(pod)
}

fn revision_of(pod: &Value) -> &str {
    pod.pointer("/metadata/labels")
        .and_then(|l| l.get(REVISION_LABEL))
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(super) fn reconcile(sim: &mut Sim, st: &mut State, ns: &str, name: &str) {
    let Some(set) = util::get(st, "apps", "statefulsets", ns, name) else {
        return;
    };
    if util::is_deleting(&set) {
        return;
    }
    let replicas = int_at(&set, "/spec/replicas", 1).max(0);
    let parallel = set
        .pointer("/spec/podManagementPolicy")
        .and_then(Value::as_str)
        == Some("Parallel");
    let strategy = set
        .pointer("/spec/updateStrategy/type")
        .and_then(Value::as_str)
        .unwrap_or("RollingUpdate");
    let partition = int_at(&set, "/spec/updateStrategy/rollingUpdate/partition", 0).max(0);
    let template = set.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let hash = util::template_hash(&template, 0);
    let update_rev = format!("{name}-{hash}");
    let current_rev = set
        .pointer("/status/currentRevision")
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| update_rev.clone());
    super::history::ensure_revision(st, &set, &hash, &template, &[&current_rev, &update_rev]);

    let prefix = format!("{name}-");
    let mut pods: BTreeMap<i64, Arc<Value>> = BTreeMap::new();
    for pod in util::owned(st, meta_str(&set, "uid"), "", "pods") {
        if let Some(ord) = meta_str(&pod, "name")
            .strip_prefix(&prefix)
            .and_then(|s| s.parse::<i64>().ok())
        {
            pods.insert(ord, pod);
        }
    }

    let mut acted = false;
    // Create / replace pods within 0..replicas.
    for ord in 0..replicas {
        match pods.get(&ord) {
            None => {
                create_pod(st, &set, &template, &update_rev, ord);
                acted = true;
                if !parallel {
                    break;
                }
            }
            Some(pod) if matches!(util::phase(pod), "Succeeded" | "Failed") => {
                delete_pod(st, &set, pod);
                acted = true;
                if !parallel {
                    break;
                }
            }
            Some(pod) if !parallel && !running_and_ready(pod) => break,
            Some(_) => {}
        }
    }
    // Scale down from the highest ordinal, once all others are running and ready.
    let condemned: Vec<&Arc<Value>> = pods.range(replicas..).rev().map(|(_, p)| p).collect();
    if !acted && !condemned.is_empty() {
        let healthy = pods.range(..replicas).all(|(_, p)| running_and_ready(p));
        for pod in condemned {
            if util::is_deleting(pod) {
                if !parallel {
                    break;
                }
                continue;
            }
            if !parallel && !healthy {
                break;
            }
            delete_pod(st, &set, pod);
            acted = true;
            if !parallel {
                break;
            }
        }
    }
    // Rolling update: highest ordinal first, down to the partition, one unavailable at a time.
    if !acted && strategy == "RollingUpdate" {
        let all_ready = (0..replicas).all(|o| pods.get(&o).is_some_and(|p| running_and_ready(p)));
        if all_ready {
            if let Some(pod) = (partition..replicas)
                .rev()
                .filter_map(|o| pods.get(&o))
                .find(|p| revision_of(p) != update_rev)
            {
                delete_pod(st, &set, pod);
            }
        }
    }
    write_status(
        sim,
        st,
        &set,
        &pods,
        replicas,
        &current_rev,
        &update_rev,
        strategy,
    );
}

fn create_pod(st: &mut State, set: &Value, template: &Value, rev: &str, ord: i64) {
    let name = meta_str(set, "name");
    let ns = meta_str(set, "namespace");
    let pod_name = format!("{name}-{ord}");
    let mut pod = util::pod_from_template(
        set,
        template,
        &[
            (REVISION_LABEL, rev.to_string()),
            (POD_NAME_LABEL, pod_name.clone()),
            (POD_INDEX_LABEL, ord.to_string()),
        ],
    );
    pod["metadata"]["name"] = json!(pod_name);
    pod["spec"]["hostname"] = json!(pod_name);
    if let Some(svc) = set.pointer("/spec/serviceName").and_then(Value::as_str) {
        if !svc.is_empty() {
            pod["spec"]["subdomain"] = json!(svc);
        }
    }
    if util::create(st, "", "pods", ns, pod, CONTROLLER_MANAGER).is_some() {
        let msg = format!("create Pod {pod_name} in StatefulSet {name} successful");
        util::event(st, set, "Normal", "SuccessfulCreate", &msg, SOURCE);
    }
}

fn delete_pod(st: &mut State, set: &Value, pod: &Value) {
    let pod_name = meta_str(pod, "name").to_string();
    if util::delete(st, "", "pods", meta_str(pod, "namespace"), &pod_name) {
        let msg = format!(
            "delete Pod {pod_name} in StatefulSet {} successful",
            meta_str(set, "name")
        );
        util::event(st, set, "Normal", "SuccessfulDelete", &msg, SOURCE);
    }
}

#[allow(clippy::too_many_arguments)]
fn write_status(
    sim: &mut Sim,
    st: &mut State,
    set: &Value,
    pods: &BTreeMap<i64, Arc<Value>>,
    replicas: i64,
    current_rev: &str,
    update_rev: &str,
    strategy: &str,
) {
    let min_ready = int_at(set, "/spec/minReadySeconds", 0);
    let now = crate::time::now_unix();
    let live: Vec<&Arc<Value>> = pods.values().filter(|p| !util::is_deleting(p)).collect();
    let count = |f: &dyn Fn(&Value) -> bool| live.iter().filter(|p| f(p)).count() as i64;
    let mut available = 0;
    for p in &live {
        match util::availability(p, min_ready, now) {
            Ok(()) => available += 1,
            Err(Some(left)) => sim.at(
                Instant::now() + Duration::from_secs(left as u64),
                Key::StatefulSet(
                    meta_str(set, "namespace").to_string(),
                    meta_str(set, "name").to_string(),
                ),
            ),
            Err(None) => {}
        }
    }
    let total = live.len() as i64;
    let ready = count(&|p| util::is_ready(p));
    let updated = count(&|p| revision_of(p) == update_rev);
    let mut current = count(&|p| revision_of(p) == current_rev);
    let mut current_rev = current_rev.to_string();
    if strategy == "RollingUpdate" && updated == total && ready == total && total == replicas {
        current_rev = update_rev.to_string();
        current = updated;
    }
    let mut status = json!({
        "replicas": total,
        "availableReplicas": available,
        "currentRevision": current_rev,
        "updateRevision": update_rev,
        "collisionCount": 0,
    });
    for (k, v) in [
        ("readyReplicas", ready),
        ("currentReplicas", current),
        ("updatedReplicas", updated),
    ] {
        if v > 0 {
            status[k] = json!(v);
        }
    }
    if let Some(g) = set.pointer("/metadata/generation") {
        status["observedGeneration"] = g.clone();
    }
    util::set_status(st, "apps", "statefulsets", set, status, CONTROLLER_MANAGER);
}
