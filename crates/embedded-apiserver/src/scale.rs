//! The `/scale` subresource (`autoscaling/v1 Scale`) for apps workloads and CRDs that declare it.

use crate::errors::{ApiError, ApiResult};
use crate::ops::{self, Subresource, WriteOpts};
use crate::patch::{self, PatchBody};
use crate::registry::ResourceInfo;
use crate::selector::LabelSelector;
use crate::store::{meta_str, State};
use serde_json::{json, Value};
use std::sync::Arc;

fn pointer(path: &str) -> String {
    path.trim_start_matches('.')
        .split('.')
        .fold(String::new(), |acc, seg| format!("{acc}/{seg}"))
}

/// The Scale view of an object.
pub fn to_scale(info: &ResourceInfo, obj: &Value) -> ApiResult<Value> {
    let sc = info.scale.as_ref().ok_or_else(ApiError::not_found_path)?;
    let spec = obj
        .pointer(&pointer(&sc.spec_replicas_path))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let status = obj
        .pointer(&pointer(&sc.status_replicas_path))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let selector = match &sc.label_selector_path {
        Some(p) => obj
            .pointer(&pointer(p))
            .and_then(Value::as_str)
            .map(String::from),
        None => obj
            .pointer("/spec/selector")
            .map(|s| LabelSelector::from_object(s).to_query()),
    };
    let meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut m = json!({
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
        "creationTimestamp": meta.get("creationTimestamp"),
    });
    if info.namespaced {
        m["namespace"] = meta.get("namespace").cloned().unwrap_or(Value::Null);
    }
    let mut status_v = json!({"replicas": status});
    if let Some(s) = selector {
        status_v["selector"] = json!(s);
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": m,
        "spec": {"replicas": spec},
        "status": status_v,
    }))
}

/// PUT `/scale`.
pub fn update_scale(
    st: &mut State,
    info: &Arc<ResourceInfo>,
    version: &str,
    ns: &str,
    name: &str,
    scale: &Value,
    opts: &WriteOpts,
) -> ApiResult<Value> {
    let sc = info.scale.clone().ok_or_else(ApiError::not_found_path)?;
    let existing = st
        .get(&info.gr(), ns, name)
        .ok_or_else(|| ApiError::not_found(&info.group, &info.resource, name))?;
    let replicas = scale
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if replicas < 0 {
        return Err(ApiError::invalid(
            "autoscaling",
            "Scale",
            name,
            vec![crate::errors::Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                field: "spec.replicas".into(),
            }],
        ));
    }
    let rv = scale
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !rv.is_empty() && rv != meta_str(&existing, "resourceVersion") {
        return Err(ApiError::conflict_modified(
            &info.group,
            &info.resource,
            name,
        ));
    }
    let mut obj = (*ops::to_version(info, &existing, version)).clone();
    let ptr = pointer(&sc.spec_replicas_path);
    set_pointer(&mut obj, &ptr, json!(replicas));
    let nsopt = if info.namespaced { Some(ns) } else { None };
    let res = ops::update(st, info, version, nsopt, name, obj, Subresource::Main, opts)?;
    to_scale(info, &res.object)
}

/// PATCH `/scale`.
#[allow(clippy::too_many_arguments)]
pub fn patch_scale(
    st: &mut State,
    info: &Arc<ResourceInfo>,
    version: &str,
    ns: &str,
    name: &str,
    body: &PatchBody,
    opts: &WriteOpts,
) -> ApiResult<Value> {
    let existing = st
        .get(&info.gr(), ns, name)
        .ok_or_else(|| ApiError::not_found(&info.group, &info.resource, name))?;
    let current = to_scale(info, &existing)?;
    let body = match body {
        PatchBody::Strategic(p) => PatchBody::Merge(p.clone()),
        other => other.clone(),
    };
    let patched = patch::apply_patch(info, &current, &body)?;
    update_scale(st, info, version, ns, name, &patched, opts)
}

fn set_pointer(obj: &mut Value, ptr: &str, v: Value) {
    let mut cur = obj;
    let segs: Vec<&str> = ptr.split('/').filter(|s| !s.is_empty()).collect();
    for (i, seg) in segs.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(m) = cur.as_object_mut() else { return };
        if i == segs.len() - 1 {
            m.insert(seg.to_string(), v);
            return;
        }
        cur = m.entry(seg.to_string()).or_insert_with(|| json!({}));
    }
}
