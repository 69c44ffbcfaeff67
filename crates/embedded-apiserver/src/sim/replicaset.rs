//! The ReplicaSet controller: keeps `spec.replicas` active pods and reports `replicas`,
//! `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas` and `observedGeneration`.

use super::util::{self, is_active, CONTROLLER_MANAGER};
use super::{Key, Sim};
use crate::selector::LabelSelector;
use crate::store::{meta_str, State};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pods created or deleted per pass, as kube-controller-manager's burst limit.
const BURST: usize = 500;

pub(super) fn reconcile(sim: &mut Sim, st: &mut State, ns: &str, name: &str) {
    let Some(rs) = util::get(st, "apps", "replicasets", ns, name) else {
        return;
    };
    if util::is_deleting(&rs) {
        return;
    }
    let uid = meta_str(&rs, "uid").to_string();
    let want = util::int_at(&rs, "/spec/replicas", 1).max(0) as usize;
    let pods = util::owned(st, &uid, "", "pods");
    let active: Vec<&Arc<Value>> = pods.iter().filter(|p| is_active(p)).collect();
    let template = rs.pointer("/spec/template").cloned().unwrap_or(json!({}));
    if active.len() < want {
        let hash = rs
            .pointer("/metadata/labels/pod-template-hash")
            .and_then(Value::as_str)
            .map(|h| vec![("pod-template-hash", h.to_string())])
            .unwrap_or_default();
        for _ in 0..(want - active.len()).min(BURST) {
            let mut pod = util::pod_from_template(&rs, &template, &hash);
            pod["metadata"]["generateName"] = json!(format!("{name}-"));
            let Some(created) = util::create(st, "", "pods", ns, pod, CONTROLLER_MANAGER) else {
                break;
            };
            let msg = format!("Created pod: {}", meta_str(&created, "name"));
            util::event(
                st,
                &rs,
                "Normal",
                "SuccessfulCreate",
                &msg,
                "replicaset-controller",
            );
        }
    } else if active.len() > want {
        let mut doomed = active.clone();
        doomed.sort_by_key(|p| deletion_rank(p));
        for pod in doomed.into_iter().take((active.len() - want).min(BURST)) {
            let pname = meta_str(pod, "name").to_string();
            if util::delete(st, "", "pods", ns, &pname) {
                let msg = format!("Deleted pod: {pname}");
                util::event(
                    st,
                    &rs,
                    "Normal",
                    "SuccessfulDelete",
                    &msg,
                    "replicaset-controller",
                );
            }
        }
    }
    let min_ready = util::int_at(&rs, "/spec/minReadySeconds", 0);
    let now = crate::time::now_unix();
    let template_labels = LabelSelector::from_object(&json!({
        "matchLabels": template.pointer("/metadata/labels").cloned().unwrap_or(json!({}))
    }));
    let mut ready = 0;
    let mut available = 0;
    let mut labeled = 0;
    for p in &active {
        if util::is_ready(p) {
            ready += 1;
        }
        match util::availability(p, min_ready, now) {
            Ok(()) => available += 1,
            Err(Some(left)) => sim.at(
                Instant::now() + Duration::from_secs(left as u64),
                Key::ReplicaSet(ns.to_string(), name.to_string()),
            ),
            Err(None) => {}
        }
        if template_labels.matches_object(p) {
            labeled += 1;
        }
    }
    let mut status = json!({"replicas": active.len()});
    for (k, v) in [
        ("fullyLabeledReplicas", labeled),
        ("readyReplicas", ready),
        ("availableReplicas", available),
    ] {
        if v > 0 {
            status[k] = json!(v);
        }
    }
    if let Some(g) = rs.pointer("/metadata/generation") {
        status["observedGeneration"] = g.clone();
    }
    if let Some(c) = rs.pointer("/status/conditions") {
        status["conditions"] = c.clone();
    }
    util::set_status(st, "apps", "replicasets", &rs, status, CONTROLLER_MANAGER);
}

/// Which pods go first when scaling down: unbound, then pending, then unready, then the
/// most recently created (kube-controller-manager's ActivePods ordering, simplified).
fn deletion_rank(pod: &Value) -> (u8, u8, u8, std::cmp::Reverse<String>) {
    let bound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let running = util::phase(pod) == "Running";
    (
        u8::from(bound),
        u8::from(running),
        u8::from(util::is_ready(pod)),
        std::cmp::Reverse(meta_str(pod, "creationTimestamp").to_string()),
    )
}
