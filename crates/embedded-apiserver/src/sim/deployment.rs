//! The Deployment controller: one ReplicaSet per pod template (`pod-template-hash`,
//! `deployment.kubernetes.io/revision`), rolled by RollingUpdate (maxSurge /
//! maxUnavailable) or Recreate, old ReplicaSets pruned to `revisionHistoryLimit`, and the
//! status (`replicas`, `updatedReplicas`, `readyReplicas`, `availableReplicas`,
//! `unavailableReplicas`, `observedGeneration`, Available/Progressing) that `kubectl rollout
//! status` and sync hooks read.

use super::util::{self, int_at, CONTROLLER_MANAGER};
use super::Sim;
use crate::store::{meta_str, State};
use serde_json::{json, Value};
use std::sync::Arc;

const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
const HASH: &str = "pod-template-hash";
const SOURCE: &str = "deployment-controller";

fn revision(rs: &Value) -> i64 {
    util::annotation(rs, REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn spec_replicas(rs: &Value) -> i64 {
    int_at(rs, "/spec/replicas", 0)
}

/// An RS template without its hash label, to compare with the Deployment's template.
fn unhashed(template: Option<&Value>) -> Value {
    let mut t = template.cloned().unwrap_or(json!({}));
    if let Some(labels) = t
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(HASH);
    }
    t
}

struct Rollout {
    replicas: i64,
    max_surge: i64,
    max_unavailable: i64,
    recreate: bool,
}

impl Rollout {
    fn of(d: &Value) -> Self {
        let replicas = int_at(d, "/spec/replicas", 1).max(0);
        let recreate = d.pointer("/spec/strategy/type").and_then(Value::as_str) == Some("Recreate");
        let ru = d.pointer("/spec/strategy/rollingUpdate");
        let (mut max_surge, mut max_unavailable) = (0, 0);
        if !recreate {
            max_surge =
                util::int_or_percent(ru.and_then(|r| r.get("maxSurge")), "25%", replicas, true);
            max_unavailable = util::int_or_percent(
                ru.and_then(|r| r.get("maxUnavailable")),
                "25%",
                replicas,
                false,
            );
            if max_surge == 0 && max_unavailable == 0 {
                max_unavailable = 1;
            }
            max_unavailable = max_unavailable.min(replicas);
        }
        Rollout {
            replicas,
            max_surge,
            max_unavailable,
            recreate,
        }
    }
}

pub(super) fn reconcile(_sim: &mut Sim, st: &mut State, ns: &str, name: &str) {
    let Some(d) = util::get(st, "apps", "deployments", ns, name) else {
        return;
    };
    if util::is_deleting(&d) {
        return;
    }
    let uid = meta_str(&d, "uid").to_string();
    let plan = Rollout::of(&d);
    let template = d.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let paused = d.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
    let rss = live_replica_sets(st, &uid);
    let max_rev = rss.iter().map(|r| revision(r)).max().unwrap_or(0);
    let mut new_rs = rss
        .iter()
        .find(|rs| unhashed(rs.pointer("/spec/template")) == template)
        .cloned();
    let mut created_new = false;
    if new_rs.is_none() && !paused {
        new_rs = create_new_rs(st, &d, &template, &rss, &plan, max_rev + 1);
        created_new = new_rs.is_some();
    } else if let Some(rs) = &new_rs {
        // A rollback to an older template makes its ReplicaSet the newest revision again.
        if revision(rs) < max_rev {
            let mut n = (**rs).clone();
            n["metadata"]["annotations"][REVISION] = json!((max_rev + 1).to_string());
            new_rs = util::update(st, "apps", "replicasets", n, CONTROLLER_MANAGER).or(new_rs);
        }
    }
    if let Some(rs) = &new_rs {
        let rev = util::annotation(rs, REVISION).unwrap_or("1").to_string();
        if util::annotation(&d, REVISION) != Some(rev.as_str()) {
            let mut n = (*d).clone();
            if !n["metadata"]["annotations"].is_object() {
                n["metadata"]["annotations"] = json!({});
            }
            n["metadata"]["annotations"][REVISION] = json!(rev);
            if let Some(stored) = util::update(st, "apps", "deployments", n, CONTROLLER_MANAGER) {
                return finish(st, &stored, &plan, created_new);
            }
        }
    }
    if !paused && !created_new {
        if let Some(new) = &new_rs {
            let olds: Vec<Arc<Value>> = rss
                .iter()
                .filter(|r| meta_str(r, "uid") != meta_str(new, "uid"))
                .cloned()
                .collect();
            if plan.recreate {
                recreate(st, &d, new, &olds, &plan);
            } else {
                rolling(st, &d, new, &olds, &plan);
            }
        }
        prune_history(st, &d, new_rs.as_deref());
    }
    finish(st, &d, &plan, created_new);
}

fn live_replica_sets(st: &State, uid: &str) -> Vec<Arc<Value>> {
    let mut rss: Vec<Arc<Value>> = util::owned(st, uid, "apps", "replicasets")
        .into_iter()
        .filter(|r| !util::is_deleting(r))
        .collect();
    rss.sort_by_key(|r| (meta_str(r, "creationTimestamp").to_string(), revision(r)));
    rss
}

fn create_new_rs(
    st: &mut State,
    d: &Value,
    template: &Value,
    olds: &[Arc<Value>],
    plan: &Rollout,
    rev: i64,
) -> Option<Arc<Value>> {
    let name = meta_str(d, "name");
    let ns = meta_str(d, "namespace");
    let collisions = int_at(d, "/status/collisionCount", 0);
    let hash = util::template_hash(template, collisions);
    let mut tmpl = template.clone();
    if !tmpl["metadata"].is_object() {
        tmpl["metadata"] = json!({});
    }
    if !tmpl["metadata"]["labels"].is_object() {
        tmpl["metadata"]["labels"] = json!({});
    }
    tmpl["metadata"]["labels"][HASH] = json!(hash);
    let mut selector = d.pointer("/spec/selector").cloned().unwrap_or(json!({}));
    if !selector["matchLabels"].is_object() {
        selector["matchLabels"] = json!({});
    }
    selector["matchLabels"][HASH] = json!(hash);
    // The first ReplicaSet starts at full size; a later one within the surge budget.
    let replicas = if olds.iter().all(|r| spec_replicas(r) == 0) && !plan.recreate {
        plan.replicas
    } else if plan.recreate {
        0
    } else {
        let total: i64 = olds.iter().map(|r| spec_replicas(r)).sum();
        (plan.replicas + plan.max_surge - total).clamp(0, plan.replicas)
    };
    let rs = json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": format!("{name}-{hash}"),
            "namespace": ns,
            "labels": tmpl["metadata"]["labels"].clone(),
            "annotations": {
                REVISION: rev.to_string(),
                DESIRED: plan.replicas.to_string(),
                MAX_REPLICAS: (plan.replicas + plan.max_surge).to_string(),
            },
            "ownerReferences": [util::owner_ref(d)],
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": int_at(d, "/spec/minReadySeconds", 0),
            "selector": selector,
            "template": tmpl,
        },
    });
    let created = util::create(st, "apps", "replicasets", ns, rs, CONTROLLER_MANAGER)?;
    let msg = format!(
        "Scaled up replica set {} from 0 to {replicas}",
        meta_str(&created, "name")
    );
    util::event(st, d, "Normal", "ScalingReplicaSet", &msg, SOURCE);
    Some(created)
}

/// Sets a ReplicaSet's size (and the Deployment annotations it carries), with the Event.
fn scale(st: &mut State, d: &Value, rs: &Value, to: i64, plan: &Rollout) -> bool {
    let from = spec_replicas(rs);
    let desired = plan.replicas.to_string();
    if from == to && util::annotation(rs, DESIRED) == Some(desired.as_str()) {
        return false;
    }
    let mut n = rs.clone();
    n["spec"]["replicas"] = json!(to);
    if !n["metadata"]["annotations"].is_object() {
        n["metadata"]["annotations"] = json!({});
    }
    n["metadata"]["annotations"][DESIRED] = json!(desired);
    n["metadata"]["annotations"][MAX_REPLICAS] =
        json!((plan.replicas + plan.max_surge).to_string());
    if util::update(st, "apps", "replicasets", n, CONTROLLER_MANAGER).is_none() {
        return false;
    }
    if from != to {
        let dir = if to > from { "up" } else { "down" };
        let msg = format!(
            "Scaled {dir} replica set {} from {from} to {to}",
            meta_str(rs, "name")
        );
        util::event(st, d, "Normal", "ScalingReplicaSet", &msg, SOURCE);
    }
    from != to
}

fn available(rs: &Value) -> i64 {
    int_at(rs, "/status/availableReplicas", 0)
}

/// RollingUpdate: grow the new ReplicaSet within maxSurge, shrink old ones while at least
/// `replicas - maxUnavailable` pods stay available (unhealthy old pods go first).
fn rolling(st: &mut State, d: &Value, new: &Value, olds: &[Arc<Value>], plan: &Rollout) {
    let new_spec = spec_replicas(new);
    let old_spec: i64 = olds.iter().map(|r| spec_replicas(r)).sum();
    let all_spec = new_spec + old_spec;
    let target_new = if new_spec > plan.replicas {
        plan.replicas
    } else if new_spec < plan.replicas {
        let room = plan.replicas + plan.max_surge - all_spec;
        new_spec + room.clamp(0, plan.replicas - new_spec)
    } else {
        new_spec
    };
    if scale(st, d, new, target_new, plan) && target_new > new_spec {
        return;
    }
    let min_available = plan.replicas - plan.max_unavailable;
    let new_unavailable = target_new - available(new);
    let mut budget = target_new + old_spec - min_available - new_unavailable;
    if budget <= 0 {
        return;
    }
    // Old ReplicaSets, oldest first: first their unavailable pods...
    let mut sizes: Vec<i64> = olds.iter().map(|r| spec_replicas(r)).collect();
    for (i, rs) in olds.iter().enumerate() {
        if budget <= 0 {
            break;
        }
        let unhealthy = (sizes[i] - available(rs)).max(0);
        let cut = unhealthy.min(budget);
        sizes[i] -= cut;
        budget -= cut;
    }
    // ...then available ones, keeping minAvailable.
    let total_available: i64 = available(new) + olds.iter().map(|r| available(r)).sum::<i64>();
    let mut can_remove = (total_available - min_available).max(0);
    for (i, rs) in olds.iter().enumerate() {
        if can_remove <= 0 {
            break;
        }
        let healthy = sizes[i].min(available(rs));
        let cut = healthy.min(can_remove);
        sizes[i] -= cut;
        can_remove -= cut;
    }
    for (rs, size) in olds.iter().zip(sizes) {
        scale(st, d, rs, size.max(0), plan);
    }
}

/// Recreate: every old pod goes before the new ReplicaSet grows.
fn recreate(st: &mut State, d: &Value, new: &Value, olds: &[Arc<Value>], plan: &Rollout) {
    let mut old_running = false;
    for rs in olds {
        scale(st, d, rs, 0, plan);
        old_running |= int_at(rs, "/status/replicas", 0) > 0 || spec_replicas(rs) > 0;
    }
    if !old_running {
        scale(st, d, new, plan.replicas, plan);
    }
}

/// Deletes empty old ReplicaSets beyond `revisionHistoryLimit` (oldest revisions first).
fn prune_history(st: &mut State, d: &Value, new: Option<&Value>) {
    let limit = int_at(d, "/spec/revisionHistoryLimit", 10).max(0) as usize;
    let uid = meta_str(d, "uid").to_string();
    let new_uid = new
        .map(|n| meta_str(n, "uid").to_string())
        .unwrap_or_default();
    let mut idle: Vec<Arc<Value>> = live_replica_sets(st, &uid)
        .into_iter()
        .filter(|r| meta_str(r, "uid") != new_uid)
        .filter(|r| spec_replicas(r) == 0 && int_at(r, "/status/replicas", 0) == 0)
        .collect();
    if idle.len() <= limit {
        return;
    }
    idle.sort_by_key(|r| revision(r));
    let extra = idle.len() - limit;
    for rs in idle.into_iter().take(extra) {
        let ns = meta_str(&rs, "namespace").to_string();
        let name = meta_str(&rs, "name").to_string();
        util::delete(st, "apps", "replicasets", &ns, &name);
    }
}

/// Writes the Deployment status from its ReplicaSets as they are now.
fn finish(st: &mut State, d: &Value, plan: &Rollout, created_new: bool) {
    let uid = meta_str(d, "uid").to_string();
    let template = d.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let rss = live_replica_sets(st, &uid);
    let new = rss
        .iter()
        .find(|rs| unhashed(rs.pointer("/spec/template")) == template);
    let sum = |ptr: &str| -> i64 { rss.iter().map(|r| int_at(r, ptr, 0)).sum() };
    let replicas = sum("/status/replicas");
    let updated = new.map(|r| int_at(r, "/status/replicas", 0)).unwrap_or(0);
    let ready = sum("/status/readyReplicas");
    let avail = sum("/status/availableReplicas");
    let total_spec = sum("/spec/replicas");
    let unavailable = (total_spec - avail).max(0);
    let mut status = json!({});
    if let Some(g) = d.pointer("/metadata/generation") {
        status["observedGeneration"] = g.clone();
    }
    for (k, v) in [
        ("replicas", replicas),
        ("updatedReplicas", updated),
        ("readyReplicas", ready),
        ("availableReplicas", avail),
        ("unavailableReplicas", unavailable),
    ] {
        if v > 0 {
            status[k] = json!(v);
        }
    }
    let mut conds: Vec<Value> = d
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let min_ok = avail >= plan.replicas - plan.max_unavailable;
    util::put_condition(
        &mut conds,
        if min_ok {
            json!({"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                   "message": "Deployment has minimum availability."})
        } else {
            json!({"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                   "message": "Deployment does not have minimum availability."})
        },
        true,
    );
    let paused = d.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
    let new_name = new.map(|r| meta_str(r, "name").to_string());
    let complete = updated == plan.replicas
        && replicas == plan.replicas
        && avail == plan.replicas
        && new.is_some();
    let progressing = if paused {
        json!({"type": "Progressing", "status": "Unknown", "reason": "DeploymentPaused",
               "message": "Deployment is paused"})
    } else if complete {
        json!({"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
               "message": format!("ReplicaSet \"{}\" has successfully progressed.", new_name.unwrap_or_default())})
    } else if created_new {
        json!({"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated",
               "message": format!("Created new replica set \"{}\"", new_name.unwrap_or_default())})
    } else {
        json!({"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
               "message": format!("ReplicaSet \"{}\" is progressing.", new_name.unwrap_or_default())})
    };
    util::put_condition(&mut conds, progressing, true);
    conds.sort_by_key(|c| c.get("type").and_then(Value::as_str) != Some("Available"));
    status["conditions"] = json!(conds);
    if let Some(c) = d.pointer("/status/collisionCount") {
        status["collisionCount"] = c.clone();
    }
    util::set_status(st, "apps", "deployments", d, status, CONTROLLER_MANAGER);
}
