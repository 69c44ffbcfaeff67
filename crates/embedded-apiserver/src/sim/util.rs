//! Shared pieces of the simulated controllers: store access through the write paths of the
//! API server, owner references, pod state and the helpers kube-controller-manager uses.

use super::Key;
use crate::ops::{self, DeleteOpts, Subresource, WriteOpts};
use crate::registry::ResourceInfo;
use crate::store::{meta_str, State};
use serde_json::{json, Value};
use std::sync::Arc;

/// Field manager of the controllers' writes, as in a real cluster.
pub const CONTROLLER_MANAGER: &str = "kube-controller-manager";

pub fn info(st: &State, group: &str, resource: &str) -> Option<Arc<ResourceInfo>> {
    st.registry.get_gr(group, resource)
}

pub fn gr(group: &str, resource: &str) -> (String, String) {
    (group.to_string(), resource.to_string())
}

pub fn get(st: &State, group: &str, resource: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
    st.get(&gr(group, resource), ns, name)
}

fn opts(manager: &str) -> WriteOpts {
    WriteOpts {
        field_manager: Some(manager.to_string()),
        ..Default::default()
    }
}

/// Creates an object as `manager`; logs and returns `None` when the server refuses it.
pub fn create(
    st: &mut State,
    group: &str,
    resource: &str,
    ns: &str,
    obj: Value,
    manager: &str,
) -> Option<Arc<Value>> {
    let info = info(st, group, resource)?;
    let nsopt = info.namespaced.then_some(ns);
    match ops::create(st, &info, "v1", nsopt, obj, &opts(manager)) {
        Ok(res) => Some(res.object),
        Err(e) => {
            tracing::debug!(error = %e, resource, ns, "simulation: create refused");
            None
        }
    }
}

/// Replaces the main part (spec, metadata) of an object; `None` when refused.
pub fn update(
    st: &mut State,
    group: &str,
    resource: &str,
    obj: Value,
    manager: &str,
) -> Option<Arc<Value>> {
    write(st, group, resource, obj, Subresource::Main, manager)
}

/// Writes `status` through the `/status` subresource if it differs from the stored one.
pub fn set_status(
    st: &mut State,
    group: &str,
    resource: &str,
    obj: &Value,
    status: Value,
    manager: &str,
) -> bool {
    if obj.get("status") == Some(&status) {
        return false;
    }
    let mut new = obj.clone();
    new["status"] = status;
    write(st, group, resource, new, Subresource::Status, manager).is_some()
}

fn write(
    st: &mut State,
    group: &str,
    resource: &str,
    obj: Value,
    sub: Subresource,
    manager: &str,
) -> Option<Arc<Value>> {
    let info = info(st, group, resource)?;
    let ns = meta_str(&obj, "namespace").to_string();
    let name = meta_str(&obj, "name").to_string();
    let nsopt = info.namespaced.then_some(ns.as_str());
    match ops::update(st, &info, "v1", nsopt, &name, obj, sub, &opts(manager)) {
        Ok(res) => Some(res.object),
        Err(e) => {
            tracing::debug!(error = %e, resource, ns, name, "simulation: update refused");
            None
        }
    }
}

/// Deletes an object (background propagation, default grace period).
pub fn delete(st: &mut State, group: &str, resource: &str, ns: &str, name: &str) -> bool {
    let Some(info) = info(st, group, resource) else {
        return false;
    };
    ops::delete(st, &info, ns, name, &DeleteOpts::default()).is_ok()
}

/// The controller ownerReference of an object, if any.
pub fn controller_ref(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// The simulation key of the workload controlling `obj`.
pub fn controller_key(obj: &Value, ns: &str) -> Option<Key> {
    let r = controller_ref(obj)?;
    let name = r.get("name").and_then(Value::as_str)?.to_string();
    let api = r.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let ns = ns.to_string();
    match (api, r.get("kind").and_then(Value::as_str)?) {
        ("apps/v1", "ReplicaSet") => Some(Key::ReplicaSet(ns, name)),
        ("apps/v1", "Deployment") => Some(Key::Deployment(ns, name)),
        ("apps/v1", "StatefulSet") => Some(Key::StatefulSet(ns, name)),
        ("apps/v1", "DaemonSet") => Some(Key::DaemonSet(ns, name)),
        ("batch/v1", "Job") => Some(Key::Job(ns, name)),
        _ => None,
    }
}

/// Objects of `group/resource` whose controller ownerReference is `owner_uid` (from the
/// store's owner index, not a scan).
pub fn owned(st: &State, owner_uid: &str, group: &str, resource: &str) -> Vec<Arc<Value>> {
    let want = gr(group, resource);
    let mut out: Vec<Arc<Value>> = st
        .dependents_of(owner_uid)
        .into_iter()
        .filter(|(g, _)| *g == want)
        .filter_map(|(g, (ns, name))| st.get(&g, &ns, &name))
        .filter(|o| {
            controller_ref(o)
                .and_then(|r| r.get("uid"))
                .and_then(Value::as_str)
                == Some(owner_uid)
        })
        .collect();
    out.sort_by(|a, b| meta_str(a, "name").cmp(meta_str(b, "name")));
    out
}

/// A controller ownerReference to `owner`.
pub fn owner_ref(owner: &Value) -> Value {
    json!({
        "apiVersion": owner.get("apiVersion").cloned().unwrap_or(Value::Null),
        "kind": owner.get("kind").cloned().unwrap_or(Value::Null),
        "name": meta_str(owner, "name"),
        "uid": meta_str(owner, "uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// A pod (not yet stored) from `owner`'s `spec.template`, with extra labels.
pub fn pod_from_template(owner: &Value, template: &Value, labels: &[(&str, String)]) -> Value {
    let mut meta = template
        .get("metadata")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    if let Some(m) = meta.as_object_mut() {
        m.remove("name");
        m.remove("namespace");
        m.insert("ownerReferences".into(), json!([owner_ref(owner)]));
        let l = m.entry("labels").or_insert_with(|| json!({}));
        if !l.is_object() {
            *l = json!({});
        }
        for (k, v) in labels {
            l[*k] = json!(v);
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

pub fn is_deleting(obj: &Value) -> bool {
    ops::is_deleting(obj)
}

pub fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending")
}

/// Not finished and not being deleted (the controllers' "active" pods).
pub fn is_active(pod: &Value) -> bool {
    !is_deleting(pod) && !matches!(phase(pod), "Succeeded" | "Failed")
}

pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

pub fn is_ready(pod: &Value) -> bool {
    condition(pod, "Ready")
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some("True")
}

/// Ready for at least `min_ready` seconds; else the seconds left (if ready at all).
pub fn availability(pod: &Value, min_ready: i64, now: i64) -> Result<(), Option<i64>> {
    if !is_ready(pod) {
        return Err(None);
    }
    if min_ready <= 0 {
        return Ok(());
    }
    let since = condition(pod, "Ready")
        .and_then(|c| c.get("lastTransitionTime"))
        .and_then(Value::as_str)
        .and_then(crate::time::parse_rfc3339)
        .unwrap_or(now);
    let left = since + min_ready - now;
    if left <= 0 {
        Ok(())
    } else {
        Err(Some(left))
    }
}

pub fn int_at(obj: &Value, ptr: &str, default: i64) -> i64 {
    obj.pointer(ptr).and_then(Value::as_i64).unwrap_or(default)
}

pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// An intstr (`3` or `"25%"`) resolved against `total`, rounding percentages up or down.
pub fn int_or_percent(v: Option<&Value>, default: &str, total: i64, round_up: bool) -> i64 {
    let v = v.cloned().unwrap_or_else(|| json!(default));
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => {
            let p: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            if round_up {
                (p * total + 99) / 100
            } else {
                p * total / 100
            }
        }
        _ => 0,
    }
}

/// The hash kube-controller-manager puts in `pod-template-hash` and revision names: FNV-1a
/// (32 bit) of the template (and collision count), in its "safe" alphabet.
pub fn template_hash(template: &Value, collision_count: i64) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let text = serde_json::to_string(template).unwrap_or_default();
    let bytes = text.bytes().chain(if collision_count > 0 {
        collision_count.to_string().into_bytes()
    } else {
        Vec::new()
    });
    for b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string()
        .bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// Records a core/v1 Event about `obj`, as the controllers and kubelet do.
pub fn event(st: &mut State, obj: &Value, type_: &str, reason: &str, message: &str, source: &str) {
    let name = meta_str(obj, "name");
    let ns = match meta_str(obj, "namespace") {
        "" => "default",
        ns => ns,
    };
    let now = crate::time::now_rfc3339();
    let ev = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": format!("{name}.{}", crate::ops::new_uid().replace('-', "")[..16].to_string()), "namespace": ns},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion").cloned().unwrap_or(Value::Null),
            "kind": obj.get("kind").cloned().unwrap_or(Value::Null),
            "name": name,
            "namespace": meta_str(obj, "namespace"),
            "uid": meta_str(obj, "uid"),
            "resourceVersion": meta_str(obj, "resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "source": {"component": source},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "type": type_,
        "eventTime": null,
        "reportingComponent": source,
        "reportingInstance": "",
    });
    let _ = create(st, "", "events", ns, ev, source);
}

/// Sets (or keeps) a condition in a list, moving `lastTransitionTime` only when the status
/// changes, as the controllers do.
pub fn put_condition(conds: &mut Vec<Value>, mut c: Value, with_update_time: bool) {
    let now = crate::time::now_rfc3339();
    let type_ = c.get("type").cloned();
    let existing = conds.iter().position(|x| x.get("type") == type_.as_ref());
    let same_status = existing.is_some_and(|i| conds[i].get("status") == c.get("status"));
    let same_all = existing.is_some_and(|i| {
        conds[i].get("status") == c.get("status")
            && conds[i].get("reason") == c.get("reason")
            && conds[i].get("message") == c.get("message")
    });
    if same_all {
        return;
    }
    let transition = match existing {
        Some(i) if same_status => conds[i]
            .get("lastTransitionTime")
            .cloned()
            .unwrap_or(json!(now)),
        _ => json!(now),
    };
    c["lastTransitionTime"] = transition;
    if with_update_time {
        c["lastUpdateTime"] = json!(now);
    }
    match existing {
        Some(i) => conds[i] = c,
        None => conds.push(c),
    }
}
