//! The DaemonSet controller: one pod per (matching) node, pinned with node affinity as the
//! real controller does, RollingUpdate within `maxUnavailable`, and the scheduling counts
//! of the status.

use super::util::{self, int_at, CONTROLLER_MANAGER};
use super::{Key, Sim};
use crate::store::{meta_str, State};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const REVISION_LABEL: &str = "controller-revision-hash";
const SOURCE: &str = "daemonset-controller";

/// The node a daemon pod is for (its nodeName, else the node its affinity pins).
fn node_of(pod: &Value) -> String {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .or_else(|| {
            pod.pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
                .and_then(Value::as_str)
        })
        .unwrap_or("")
        .to_string()
}

fn eligible_nodes(st: &State, template: &Value) -> Vec<String> {
    let selector = template
        .pointer("/spec/nodeSelector")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    st.list(&util::gr("", "nodes"), None)
        .into_iter()
        .filter(|(_, node)| {
            selector
                .iter()
                .all(|(k, v)| node.pointer("/metadata/labels").and_then(|l| l.get(k)) == Some(v))
        })
        .map(|((_, name), _)| name)
        .collect()
}

pub(super) fn reconcile(sim: &mut Sim, st: &mut State, ns: &str, name: &str) {
    let Some(ds) = util::get(st, "apps", "daemonsets", ns, name) else {
        return;
    };
    if util::is_deleting(&ds) {
        return;
    }
    let template = ds.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let hash = util::template_hash(&template, 0);
    let nodes = eligible_nodes(st, &template);
    let mut by_node: BTreeMap<String, Vec<Arc<Value>>> = BTreeMap::new();
    let mut terminal = Vec::new();
    let mut terminating = std::collections::BTreeSet::new();
    for pod in util::owned(st, meta_str(&ds, "uid"), "", "pods") {
        if matches!(util::phase(&pod), "Succeeded" | "Failed") {
            terminal.push(pod);
        } else if util::is_deleting(&pod) {
            terminating.insert(node_of(&pod));
        } else {
            by_node.entry(node_of(&pod)).or_default().push(pod);
        }
    }
    for pod in &terminal {
        delete_pod(st, &ds, pod);
    }
    let in_use: Vec<String> = by_node
        .values()
        .flatten()
        .map(|p| format!("{name}-{}", revision_of(p)))
        .collect();
    let in_use: Vec<&str> = in_use.iter().map(String::as_str).collect();
    super::history::ensure_revision(st, &ds, &hash, &template, &in_use);
    for node in &nodes {
        match by_node.get(node).map(Vec::len).unwrap_or(0) {
            // A replacement waits until the old pod on the node is gone.
            0 if !terminating.contains(node) => create_pod(st, &ds, &template, &hash, node),
            0 => {}
            1 => {}
            _ => {
                for extra in by_node[node].iter().skip(1) {
                    delete_pod(st, &ds, extra);
                }
            }
        }
    }
    let misscheduled: Vec<Arc<Value>> = by_node
        .iter()
        .filter(|(n, _)| !nodes.contains(n))
        .flat_map(|(_, pods)| pods.iter().cloned())
        .collect();
    for pod in &misscheduled {
        delete_pod(st, &ds, pod);
    }
    let rolling = ds
        .pointer("/spec/updateStrategy/type")
        .and_then(Value::as_str)
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    let desired = nodes.len() as i64;
    let min_ready = int_at(&ds, "/spec/minReadySeconds", 0);
    let now = crate::time::now_unix();
    let daemon_pods: Vec<&Arc<Value>> = nodes
        .iter()
        .filter_map(|n| by_node.get(n).and_then(|p| p.first()))
        .collect();
    let mut available = 0;
    for p in &daemon_pods {
        match util::availability(p, min_ready, now) {
            Ok(()) => available += 1,
            Err(Some(left)) => sim.at(
                Instant::now() + Duration::from_secs(left as u64),
                Key::DaemonSet(ns.to_string(), name.to_string()),
            ),
            Err(None) => {}
        }
    }
    if rolling {
        let max_unavailable = util::int_or_percent(
            ds.pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable"),
            "1",
            desired,
            true,
        )
        .max(1);
        let unavailable = desired - available;
        let budget = (max_unavailable - unavailable).max(0) as usize;
        let mut outdated: Vec<&&Arc<Value>> = daemon_pods
            .iter()
            .filter(|p| revision_of(p) != hash)
            .collect();
        // Unavailable outdated pods go first: replacing them costs no availability.
        outdated.sort_by_key(|p| util::is_ready(p));
        let not_ready_outdated = outdated.iter().filter(|p| !util::is_ready(p)).count();
        for pod in outdated.iter().take(budget.max(not_ready_outdated)) {
            delete_pod(st, &ds, pod);
        }
    }
    let ready = daemon_pods.iter().filter(|p| util::is_ready(p)).count() as i64;
    let updated = daemon_pods
        .iter()
        .filter(|p| revision_of(p) == hash)
        .count() as i64;
    let mut status = json!({
        "currentNumberScheduled": daemon_pods.len(),
        "numberMisscheduled": misscheduled.len(),
        "desiredNumberScheduled": desired,
        "numberReady": ready,
    });
    for (k, v) in [
        ("updatedNumberScheduled", updated),
        ("numberAvailable", available),
        ("numberUnavailable", (desired - available).max(0)),
    ] {
        if v > 0 {
            status[k] = json!(v);
        }
    }
    if let Some(g) = ds.pointer("/metadata/generation") {
        status["observedGeneration"] = g.clone();
    }
    util::set_status(st, "apps", "daemonsets", &ds, status, CONTROLLER_MANAGER);
}

fn revision_of(pod: &Value) -> &str {
    pod.pointer("/metadata/labels")
        .and_then(|l| l.get(REVISION_LABEL))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn create_pod(st: &mut State, ds: &Value, template: &Value, hash: &str, node: &str) {
    let generation = int_at(ds, "/metadata/generation", 1).to_string();
    let mut pod = util::pod_from_template(
        ds,
        template,
        &[
            (REVISION_LABEL, hash.to_string()),
            ("pod-template-generation", generation),
        ],
    );
    pod["metadata"]["generateName"] = json!(format!("{}-", meta_str(ds, "name")));
    pod["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }}});
    let mut tolerations = pod["spec"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute"}));
    }
    pod["spec"]["tolerations"] = json!(tolerations);
    let ns = meta_str(ds, "namespace").to_string();
    if let Some(created) = util::create(st, "", "pods", &ns, pod, CONTROLLER_MANAGER) {
        let msg = format!("Created pod: {}", meta_str(&created, "name"));
        util::event(st, ds, "Normal", "SuccessfulCreate", &msg, SOURCE);
    }
}

fn delete_pod(st: &mut State, ds: &Value, pod: &Value) {
    let pod_name = meta_str(pod, "name").to_string();
    if util::delete(st, "", "pods", meta_str(pod, "namespace"), &pod_name) {
        let msg = format!("Deleted pod: {pod_name}");
        util::event(st, ds, "Normal", "SuccessfulDelete", &msg, SOURCE);
    }
}
