//! Background controllers that kube-controller-manager and the apiextensions
//! server run next to a real API server: the garbage collector (background,
//! foreground and orphan propagation), namespace content removal, and CRD
//! instance cleanup.

use crate::crd::{self, CLEANUP_FINALIZER};
use crate::ops::finalizers;
use crate::ops::{
    self, is_deleting, DeleteOpts, Propagation, Subresource, WriteOpts, FOREGROUND_FINALIZER,
    ORPHAN_FINALIZER,
};
use crate::registry::ResourceInfo;
use crate::server::Shared;
use crate::store::{meta_str, State};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

fn owner_refs(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Removes `finalizer` from object `ns/name` of `info` if it still exists; returns whether
/// that wrote it.
fn drop_finalizer(
    st: &mut State,
    info: &Arc<ResourceInfo>,
    ns: &str,
    name: &str,
    finalizer: &str,
) -> bool {
    let Some(cur) = st.get(&info.gr(), ns, name) else {
        return false;
    };
    let new = without_finalizer(&cur, finalizer);
    write_back(st, info, ns, name, new, Subresource::Main)
}

fn write_back(
    st: &mut State,
    info: &Arc<ResourceInfo>,
    ns: &str,
    name: &str,
    obj: Value,
    sub: Subresource,
) -> bool {
    let nsopt = if info.namespaced { Some(ns) } else { None };
    let version = info.storage_version.clone();
    match ops::update(
        st,
        info,
        &version,
        nsopt,
        name,
        obj,
        sub,
        &WriteOpts::default(),
    ) {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(error = %e, name, "controller update failed");
            false
        }
    }
}

fn set_refs(obj: &Value, refs: Vec<Value>) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        if refs.is_empty() {
            m.remove("ownerReferences");
        } else {
            m.insert("ownerReferences".into(), Value::Array(refs));
        }
    }
    o
}

fn without_finalizer(obj: &Value, f: &str) -> Value {
    let mut o = obj.clone();
    let rest: Vec<String> = finalizers(obj).into_iter().filter(|x| x != f).collect();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        if rest.is_empty() {
            m.remove("finalizers");
        } else {
            m.insert("finalizers".into(), json!(rest));
        }
    }
    o
}

fn delete(st: &mut State, info: &Arc<ResourceInfo>, ns: &str, name: &str, p: Propagation) -> bool {
    let opts = DeleteOpts {
        propagation: Some(p),
        ..Default::default()
    };
    ops::delete(st, info, ns, name, &opts).is_ok()
}

/// The service-account controller's part: every active namespace gets a `default` ServiceAccount.
fn ensure_default_service_accounts(st: &mut State) -> bool {
    ensure_in_every_namespace(
        st,
        "serviceaccounts",
        "default",
        |ns| json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}),
    )
}

/// The root-CA publisher's part: every active namespace gets the `kube-root-ca.crt`
/// ConfigMap. The embedded server serves plain HTTP, so there is no CA to publish; the
/// key is there (empty PEM bundle) so pods and tools that expect the ConfigMap find it.
fn ensure_root_ca_config_maps(st: &mut State) -> bool {
    if !st.simulated_cluster {
        return false;
    }
    ensure_in_every_namespace(st, "configmaps", "kube-root-ca.crt", |ns| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "kube-root-ca.crt", "namespace": ns,
                            "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
               "data": {"ca.crt": ""}})
    })
}

/// Creates the core-group object `name` of `resource`, as `object(namespace)` builds it, in
/// every namespace that is not being deleted and lacks it; returns whether it created any.
fn ensure_in_every_namespace(
    st: &mut State,
    resource: &str,
    name: &str,
    object: impl Fn(&str) -> Value,
) -> bool {
    let (Some(ns_info), Some(info)) = (
        st.registry.get_gr("", "namespaces"),
        st.registry.get_gr("", resource),
    ) else {
        return false;
    };
    let mut changed = false;
    for ((_, ns), obj) in st.list(&ns_info.gr(), None) {
        if is_deleting(&obj) || st.get(&info.gr(), &ns, name).is_some() {
            continue;
        }
        let new = object(&ns);
        changed |= ops::create(st, &info, "v1", Some(&ns), new, &WriteOpts::default()).is_ok();
    }
    changed
}

/// One reconciliation pass over the objects writes marked for the controllers (see
/// `State::take_gc_dirty`); returns whether it changed anything. Its own writes mark the
/// objects they affect, so repeating passes until nothing changes converges.
pub fn run_once(st: &mut State) -> bool {
    let mut changed = ensure_default_service_accounts(st) | ensure_root_ca_config_maps(st);
    for (gr, (ns, name)) in st.take_gc_dirty() {
        let Some(info) = st.registry.get_gr(&gr.0, &gr.1) else {
            continue;
        };
        let Some(obj) = st.get(&gr, &ns, &name) else {
            continue;
        };
        if is_deleting(&obj) {
            changed |= reconcile_deleting_owner(st, &info, &ns, &name, &obj);
        } else if !owner_refs(&obj).is_empty() {
            changed |= reconcile_dependent(st, &info, &ns, &name, &obj);
        }
    }
    changed
}

/// An owner being deleted: orphan and foreground finalizers, namespaces, CRDs.
fn reconcile_deleting_owner(
    st: &mut State,
    info: &Arc<ResourceInfo>,
    ns: &str,
    name: &str,
    obj: &Value,
) -> bool {
    let mut changed = false;
    let uid = meta_str(obj, "uid").to_string();
    let fin = finalizers(obj);
    let deps = st.dependents_of(&uid);
    if fin.iter().any(|f| f == ORPHAN_FINALIZER) {
        for (dgr, (dns, dname)) in &deps {
            let Some(dinfo) = st.registry.get_gr(&dgr.0, &dgr.1) else {
                continue;
            };
            let Some(cur) = st.get(dgr, dns, dname) else {
                continue;
            };
            let refs: Vec<Value> = owner_refs(&cur)
                .into_iter()
                .filter(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()))
                .collect();
            let new = set_refs(&cur, refs);
            changed |= write_back(st, &dinfo, dns, dname, new, Subresource::Main);
        }
        changed |= drop_finalizer(st, info, ns, name, ORPHAN_FINALIZER);
        return changed;
    }
    if fin.iter().any(|f| f == FOREGROUND_FINALIZER) {
        let blocking = deps.iter().any(|(dgr, (dns, dname))| {
            st.get(dgr, dns, dname).is_some_and(|cur| {
                owner_refs(&cur).iter().any(|r| {
                    r.get("uid").and_then(Value::as_str) == Some(uid.as_str())
                        && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
                })
            })
        });
        if !blocking {
            changed |= drop_finalizer(st, info, ns, name, FOREGROUND_FINALIZER);
        }
    }
    if info.group.is_empty() && info.resource == "namespaces" {
        changed |= finalize_namespace(st, info, name);
    }
    if crd::is_crd(info) && fin.iter().any(|f| f == CLEANUP_FINALIZER) {
        changed |= cleanup_crd(st, info, name, obj);
    }
    changed
}

/// A dependent: deleted when all owners are gone (or waiting for their dependents);
/// dangling references dropped when some owner remains.
fn reconcile_dependent(
    st: &mut State,
    info: &Arc<ResourceInfo>,
    ns: &str,
    name: &str,
    cur: &Value,
) -> bool {
    let refs = owner_refs(cur);
    if refs.is_empty() || is_deleting(cur) {
        return false;
    }
    let mut solid = Vec::new();
    let mut absent = 0;
    let mut waiting = 0;
    let mut orphaning = false;
    for r in &refs {
        let uid = r.get("uid").and_then(Value::as_str).unwrap_or("");
        let owner = st
            .locate_uid(uid)
            .and_then(|(gr, (ons, oname))| st.get(&gr, &ons, &oname));
        match owner {
            None => absent += 1,
            Some(o) => {
                let ofin = finalizers(&o);
                if is_deleting(&o) && ofin.iter().any(|f| f == FOREGROUND_FINALIZER) {
                    waiting += 1;
                } else if is_deleting(&o) && ofin.iter().any(|f| f == ORPHAN_FINALIZER) {
                    orphaning = true;
                    solid.push(r.clone());
                } else {
                    solid.push(r.clone());
                }
            }
        }
    }
    if orphaning {
        return false; // the owner's orphan pass strips the reference
    }
    if solid.is_empty() && (absent > 0 || waiting > 0) {
        let p = if waiting > 0 {
            Propagation::Foreground
        } else {
            Propagation::Background
        };
        delete(st, info, ns, name, p)
    } else if absent + waiting > 0 {
        write_back(st, info, ns, name, set_refs(cur, solid), Subresource::Main)
    } else {
        false
    }
}

fn finalize_namespace(st: &mut State, ns_info: &Arc<ResourceInfo>, ns: &str) -> bool {
    let mut changed = false;
    let mut remaining = 0;
    for info in st.registry.all() {
        if !info.namespaced {
            continue;
        }
        for ((ons, oname), obj) in st.list(&info.gr(), Some(ns)) {
            remaining += 1;
            if !is_deleting(&obj) {
                changed |= delete(st, &info, &ons, &oname, Propagation::Background);
            }
        }
    }
    if remaining > 0 {
        return changed;
    }
    let Some(cur) = st.get(&ns_info.gr(), "", ns) else {
        return changed;
    };
    let spec_fin = cur
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if spec_fin {
        let mut new = (*cur).clone();
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("finalizers");
        }
        changed |= write_back(st, ns_info, "", ns, new, Subresource::Finalize);
    } else if finalizers(&cur).is_empty() {
        st.remove(ns_info, "", ns);
        changed = true;
    }
    changed
}

fn cleanup_crd(
    st: &mut State,
    crd_info: &Arc<ResourceInfo>,
    crd_name: &str,
    crd_obj: &Value,
) -> bool {
    let group = crd_obj
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let plural = crd_obj
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut changed = false;
    let mut remaining = 0;
    if let Some(info) = st.registry.get_gr(group, plural) {
        for ((ns, name), obj) in st.list(&info.gr(), None) {
            remaining += 1;
            if !is_deleting(&obj) {
                changed |= delete(st, &info, &ns, &name, Propagation::Background);
            }
        }
    }
    if remaining == 0 {
        if let Some(cur) = st.get(&crd_info.gr(), "", crd_name) {
            changed |= write_back(
                st,
                crd_info,
                "",
                crd_name,
                without_finalizer(&cur, CLEANUP_FINALIZER),
                Subresource::Main,
            );
        }
    }
    changed
}

/// Runs the controllers until the server stops: on every notification (and every 30s).
pub(crate) async fn run(sh: Arc<Shared>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = sh.controllers.notified() => {}
            // Writes that give work mark the objects concerned and notify; the slow
            // tick is a safety net that looks at everything once.
            _ = tokio::time::sleep(Duration::from_secs(30)) => {
                sh.write(State::mark_all_gc_dirty);
            }
            _ = stop.changed() => return,
        }
        for _ in 0..100 {
            let changed = sh.write(run_once);
            if !changed {
                break;
            }
            tokio::task::yield_now().await;
        }
        // Coalesce bursts of writes into one pass.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
