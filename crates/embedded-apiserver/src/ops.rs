//! The write semantics of the API server: create, update (main, status,
//! finalize), delete with finalizers and propagation policies. Handlers and
//! the background controllers (garbage collector, namespace and CRD cleanup)
//! both go through these, so every write gets the same rules.

use crate::crd;
use crate::errors::{ApiError, ApiResult};
use crate::hooks::{self, FieldValidation, PrepareCtx};
use crate::registry::ResourceInfo;
use crate::store::{meta_str, EventType, State};
use crate::string_list::string_list;
use crate::time::now_rfc3339;
use crate::validation::{self, forbidden, name_rule, required};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Options common to writes.
#[derive(Clone, Debug, Default)]
pub struct WriteOpts {
    /// `dryRun=All`: run every step but do not store.
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    /// Manager recorded in `managedFields`; `None` leaves them as they are
    /// (internal controller writes, and apply, which records its own).
    pub field_manager: Option<String>,
}

/// What a write returns.
#[derive(Clone, Debug)]
pub struct WriteResult {
    /// The object as stored (storage version).
    pub object: Arc<Value>,
    pub warnings: Vec<String>,
    /// True when a PUT created the object (resources that allow create-on-update).
    pub created: bool,
}

/// Which part of an object an update addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
    /// `namespaces/{name}/finalize`: only `spec.finalizers`.
    Finalize,
}

/// Deletion propagation policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// `DeleteOptions` as far as they matter here.
#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    pub propagation: Option<Propagation>,
    pub grace_period_seconds: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

/// Outcome of a delete.
#[derive(Clone, Debug)]
pub struct DeleteResult {
    /// The last state of the object.
    pub object: Arc<Value>,
    /// True if the object is gone; false if it waits for finalizers.
    pub deleted: bool,
}

/// Finalizer the garbage collector uses for Orphan deletion.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// Finalizer the garbage collector uses for Foreground deletion.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

static UID_COUNTER: AtomicU64 = AtomicU64::new(0);

fn random_u64() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u64(UID_COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// A random (v4-format) UUID.
pub fn new_uid() -> String {
    let a = random_u64();
    let b = random_u64();
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_le_bytes());
    bytes[8..].copy_from_slice(&b.to_le_bytes());
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let h: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The 5-character suffix of generateName, from apimachinery's alphabet.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut r = random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(r % ALPHABET.len() as u64) as usize] as char;
            r /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

fn meta_mut(obj: &mut Value) -> ApiResult<&mut Map<String, Value>> {
    let map = obj
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the body of the request must be a JSON object"))?;
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if meta.is_null() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))
}

/// The object's `metadata.finalizers`.
pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    string_list(obj.pointer("/metadata/finalizers"))
}

fn set_finalizers(obj: &mut Value, f: &[String]) {
    if let Ok(meta) = meta_mut(obj) {
        if f.is_empty() {
            meta.remove("finalizers");
        } else {
            meta.insert("finalizers".into(), json!(f));
        }
    }
}

/// Whether the object waits for deletion.
pub fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// Checks `kind`/`apiVersion` of a body and normalises them to the storage version.
fn check_type(info: &ResourceInfo, version: &str, obj: &mut Value) -> ApiResult<()> {
    let map = obj
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the body of the request must be a JSON object"))?;
    let expected = info.api_version(version);
    if let Some(av) = map.get("apiVersion").and_then(Value::as_str) {
        if !av.is_empty() && av != expected {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({expected})"
            )));
        }
    }
    if let Some(k) = map.get("kind").and_then(Value::as_str) {
        if !k.is_empty() && k != info.kind {
            return Err(ApiError::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): kind {k:?} does not match",
                info.kind
            )));
        }
    }
    map.insert(
        "apiVersion".into(),
        json!(info.api_version(&info.storage_version)),
    );
    map.insert("kind".into(), json!(info.kind));
    Ok(())
}

/// Sets the namespace of a body from the URL, refusing a different one.
fn check_namespace(
    info: &ResourceInfo,
    url_ns: Option<&str>,
    obj: &mut Value,
) -> ApiResult<String> {
    let meta = meta_mut(obj)?;
    if !info.namespaced {
        meta.remove("namespace");
        return Ok(String::new());
    }
    let url_ns = url_ns.unwrap_or("");
    let body_ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
    if !body_ns.is_empty() && !url_ns.is_empty() && body_ns != url_ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let ns = if url_ns.is_empty() { body_ns } else { url_ns }.to_string();
    if ns.is_empty() {
        return Err(ApiError::bad_request(
            "the server could not find the requested resource",
        ));
    }
    meta.insert("namespace".into(), json!(ns));
    Ok(ns)
}

fn check_namespace_usable(
    st: &State,
    info: &ResourceInfo,
    ns: &str,
    creating: bool,
) -> ApiResult<()> {
    if !info.namespaced {
        return Ok(());
    }
    let Some(nsobj) = st.get(&(String::new(), "namespaces".into()), "", ns) else {
        return Err(ApiError::not_found("", "namespaces", ns));
    };
    if creating && is_deleting(&nsobj) {
        let mut e = ApiError::forbidden(
            &info.group,
            &info.resource,
            "",
            format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        );
        if let Some(d) = e.details.as_mut() {
            d["causes"] = json!([{"reason": "NamespaceTerminating", "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}]);
        }
        return Err(e);
    }
    Ok(())
}

fn validate_meta(info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    let name = meta_str(obj, "name");
    let mut causes = validation::validate_name(
        name_rule(&info.group, &info.resource),
        name,
        "metadata.name",
    );
    causes.extend(validation::validate_labels_annotations(obj));
    if info.group.is_empty() && info.resource == "events" {
        causes.extend(validation::validate_legacy_event_namespace(obj));
    }
    if let Some(f) = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
    {
        for v in f {
            let s = v.as_str().unwrap_or("");
            if !s.contains('/')
                && !["kubernetes", ORPHAN_FINALIZER, FOREGROUND_FINALIZER].contains(&s)
            {
                // Kubernetes only warns about unqualified finalizer names.
            }
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(hooks::invalid(info, obj, causes))
    }
}

/// The parts of an object that count as its spec for generation purposes.
fn spec_view(info: &ResourceInfo, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if info.status {
            m.remove("status");
        }
    }
    v
}

/// Runs `f` with the server-side-apply type information of `info` at `version`.
pub fn with_ssa_schema<T>(
    info: &ResourceInfo,
    version: &str,
    f: impl FnOnce(&dyn crate::ssa::SsaSchema) -> T,
) -> T {
    if let Some(crd) = &info.crd {
        return match crd.schemas.get(version) {
            Some(s) => f(&crate::ssa::CrdSchema::new(s)),
            None => f(&crate::ssa::Untyped),
        };
    }
    f(&crate::ssa::BuiltinSchema::for_kind(
        &info.group,
        &info.kind,
    ))
}

/// Records a non-apply write in `managedFields` (no-op without a manager).
fn record_managed_fields(
    info: &ResourceInfo,
    version: &str,
    old: Option<&Value>,
    new: Value,
    manager: Option<&str>,
    sub: Subresource,
) -> Value {
    let Some(manager) = manager else {
        return new;
    };
    let subresource = match sub {
        Subresource::Main => None,
        Subresource::Status => Some("status"),
        Subresource::Finalize => Some("finalize"),
    };
    let now = now_rfc3339();
    with_ssa_schema(info, version, |schema| {
        crate::ssa::record_update(old, &new, manager, subresource, &now, schema)
    })
}

fn tracks_generation(info: &ResourceInfo) -> bool {
    info.has_generation || info.is_custom()
}

/// Creates an object. `version` is the API version of the request.
pub fn create(
    st: &mut State,
    info: &Arc<ResourceInfo>,
    version: &str,
    url_ns: Option<&str>,
    mut obj: Value,
    opts: &WriteOpts,
) -> ApiResult<WriteResult> {
    check_type(info, version, &mut obj)?;
    let ns = check_namespace(info, url_ns, &mut obj)?;
    if info.is_custom() && crd::is_terminating(st, info) {
        return Err(ApiError::method_not_allowed(
            "create not allowed while custom resource definition is terminating",
        ));
    }
    {
        let meta = meta_mut(&mut obj)?;
        let name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() {
            let gen = meta
                .get("generateName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if gen.is_empty() {
                return Err(hooks::invalid(
                    info,
                    &json!({}),
                    vec![required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ));
            }
            meta.insert("name".into(), json!(format!("{gen}{}", random_suffix())));
        }
        meta.insert("uid".into(), json!(new_uid()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.remove("resourceVersion");
        meta.remove("selfLink");
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        if tracks_generation(info) {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
    }
    validate_meta(info, &obj)?;
    check_namespace_usable(st, info, &ns, true)?;
    if st.get(&info.gr(), &ns, meta_str(&obj, "name")).is_some() {
        return Err(ApiError::already_exists(
            &info.group,
            &info.resource,
            meta_str(&obj, "name"),
        ));
    }
    let mut ctx = PrepareCtx {
        info,
        version,
        old: None,
        field_validation: opts.field_validation,
        warnings: Vec::new(),
    };
    hooks::prepare_for_storage(&mut ctx, &mut obj)?;
    let warnings = ctx.warnings;
    if crd::is_crd(info) {
        crd::prepare_crd(st, &mut obj, None)?;
    }
    let mut obj = record_managed_fields(
        info,
        version,
        None,
        obj,
        opts.field_manager.as_deref(),
        Subresource::Main,
    );
    hooks::allocate(info, None, &mut obj, &mut st.ip_alloc)?;
    let name = meta_str(&obj, "name").to_string();
    if opts.dry_run {
        if info.group.is_empty() && info.resource == "services" {
            use crate::defaults::ClusterIpAllocator;
            st.ip_alloc.release(&format!("{ns}/{name}"));
        }
        return Ok(WriteResult {
            object: Arc::new(obj),
            warnings,
            created: false,
        });
    }
    let stored = st.put(info, obj, EventType::Added);
    after_write(st, info, &stored);
    Ok(WriteResult {
        object: stored,
        warnings,
        created: false,
    })
}

/// Hook run after every stored write.
fn after_write(st: &mut State, info: &ResourceInfo, obj: &Arc<Value>) {
    if info.group.is_empty() && info.resource == "namespaces" {
        // New namespaces get their default ServiceAccount from the controllers.
        st.controllers_dirty = true;
    }
    if crd::is_crd(info) {
        crd::sync_registry(st, obj);
    }
    if is_deleting(obj)
        || obj
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    {
        st.controllers_dirty = true;
    }
}

/// Replaces an object (PUT, and the second half of PATCH).
#[allow(clippy::too_many_arguments)]
pub fn update(
    st: &mut State,
    info: &Arc<ResourceInfo>,
    version: &str,
    url_ns: Option<&str>,
    name: &str,
    mut body: Value,
    sub: Subresource,
    opts: &WriteOpts,
) -> ApiResult<WriteResult> {
    check_type(info, version, &mut body)?;
    let ns = check_namespace(info, url_ns, &mut body)?;
    {
        let meta = meta_mut(&mut body)?;
        let body_name = meta.get("name").and_then(Value::as_str).unwrap_or("");
        if body_name.is_empty() {
            meta.insert("name".into(), json!(name));
        } else if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
    }
    let Some(old) = st.get(&info.gr(), &ns, name) else {
        if sub == Subresource::Main && allow_create_on_update(info) {
            let mut res = create(st, info, version, url_ns, body, opts)?;
            res.created = true;
            return Ok(res);
        }
        return Err(ApiError::not_found(&info.group, &info.resource, name));
    };
    let body_rv = meta_str(&body, "resourceVersion").to_string();
    let old_rv = meta_str(&old, "resourceVersion").to_string();
    if !body_rv.is_empty() && body_rv != old_rv {
        return Err(ApiError::conflict_modified(
            &info.group,
            &info.resource,
            name,
        ));
    }
    let body_uid = meta_str(&body, "uid").to_string();
    let old_uid = meta_str(&old, "uid").to_string();
    if !body_uid.is_empty() && body_uid != old_uid {
        return Err(ApiError::conflict(
            &info.group,
            &info.resource,
            name,
            &format!("Precondition failed: UID in precondition: {body_uid}, UID in object meta: {old_uid}"),
        ));
    }
    let mut new = match sub {
        Subresource::Main => {
            let mut n = body.clone();
            if info.status {
                if let Some(m) = n.as_object_mut() {
                    match old.get("status") {
                        Some(s) => m.insert("status".into(), s.clone()),
                        None => m.remove("status"),
                    };
                }
            }
            n
        }
        Subresource::Status => {
            let mut n = (*old).clone();
            if let Some(m) = n.as_object_mut() {
                match body.get("status") {
                    Some(s) => m.insert("status".into(), s.clone()),
                    None => m.remove("status"),
                };
            }
            n
        }
        Subresource::Finalize => (*old).clone(),
    };
    // System-owned metadata comes from the stored object.
    {
        let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let meta = meta_mut(&mut new)?;
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
            "name",
            "resourceVersion",
        ] {
            match old_meta.get(f) {
                Some(v) => meta.insert(f.into(), v.clone()),
                None => meta.remove(f),
            };
        }
        meta.remove("selfLink");
        if meta.get("generateName").is_none() {
            if let Some(g) = old_meta.get("generateName") {
                meta.insert("generateName".into(), g.clone());
            }
        }
    }
    validate_meta(info, &new)?;
    if is_deleting(&old) {
        let before = finalizers(&old);
        let added: Vec<String> = finalizers(&new)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            return Err(hooks::invalid(
                info,
                &new,
                vec![forbidden(
                    "metadata.finalizers",
                    &format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        added.iter().map(|f| format!("{f:?}")).collect::<Vec<_>>().join(", ")
                    ),
                )],
            ));
        }
    }
    let mut ctx = PrepareCtx {
        info,
        version,
        old: Some(&old),
        field_validation: opts.field_validation,
        warnings: Vec::new(),
    };
    hooks::prepare_for_storage(&mut ctx, &mut new)?;
    let warnings = ctx.warnings;
    if sub == Subresource::Finalize {
        let fin = body.pointer("/spec/finalizers").cloned();
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            match fin {
                Some(f) if !f.is_null() => spec.insert("finalizers".into(), f),
                _ => spec.remove("finalizers"),
            };
        }
    }
    if crd::is_crd(info) {
        crd::prepare_crd(st, &mut new, Some(&old))?;
    }
    if tracks_generation(info) && spec_view(info, &new) != spec_view(info, &old) {
        let g = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta_mut(&mut new)?.insert("generation".into(), json!(g + 1));
    }
    let new = record_managed_fields(
        info,
        version,
        Some(&old),
        new,
        opts.field_manager.as_deref(),
        sub,
    );
    let mut new = new;
    if sub == Subresource::Main {
        hooks::allocate(info, Some(&old), &mut new, &mut st.ip_alloc)?;
    }
    if new == *old || differs_only_in_managed_times(&new, &old) {
        // A no-op update is not written: no new resourceVersion, no watch event.
        return Ok(WriteResult {
            object: old,
            warnings,
            created: false,
        });
    }
    if opts.dry_run {
        return Ok(WriteResult {
            object: Arc::new(new),
            warnings,
            created: false,
        });
    }
    let finished =
        is_deleting(&new) && finalizers(&new).is_empty() && !namespace_pending(info, &new);
    let stored = st.put(info, new, EventType::Modified);
    after_write(st, info, &stored);
    if finished {
        remove_now(st, info, &ns, name);
    }
    Ok(WriteResult {
        object: stored,
        warnings,
        created: false,
    })
}

/// kube-apiserver's `IgnoreManagedFieldsTimestampsTransformer`: the field manager records a
/// new time whenever the request differs from the object, but cannot know that decoding,
/// defaulting and normalization undo the difference (a quantity `0.5` applied over `500m`).
/// When the result differs from the stored object only in `managedFields` timestamps, the
/// stored object is kept.
fn differs_only_in_managed_times(new: &Value, old: &Value) -> bool {
    fn without_times(obj: &Value) -> Option<Vec<Value>> {
        let entries = obj.pointer("/metadata/managedFields")?.as_array()?;
        Some(
            entries
                .iter()
                .map(|e| {
                    let mut e = e.clone();
                    if let Some(m) = e.as_object_mut() {
                        m.remove("time");
                    }
                    e
                })
                .collect(),
        )
    }
    // Cheap first: most real changes change the field sets too.
    if without_times(new) != without_times(old) {
        return false;
    }
    let rest = |obj: &Value| {
        let mut obj = obj.clone();
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        obj
    };
    rest(new) == rest(old)
}

/// Kinds whose strategy lets a PUT create a missing object (leases, events).
fn allow_create_on_update(info: &ResourceInfo) -> bool {
    matches!(
        (info.group.as_str(), info.resource.as_str()),
        ("coordination.k8s.io", "leases") | ("", "events") | ("events.k8s.io", "events")
    )
}

fn namespace_pending(info: &ResourceInfo, obj: &Value) -> bool {
    info.group.is_empty()
        && info.resource == "namespaces"
        && obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
}

fn remove_now(st: &mut State, info: &ResourceInfo, ns: &str, name: &str) -> Option<Arc<Value>> {
    let removed = st.remove(info, ns, name)?;
    if info.group.is_empty() && info.resource == "services" {
        use crate::defaults::ClusterIpAllocator;
        st.ip_alloc.release(&format!("{ns}/{name}"));
    }
    if crd::is_crd(info) {
        crd::sync_registry_removed(st, &removed);
    }
    Some(removed)
}

/// Deletes an object, honouring preconditions, finalizers and the propagation policy.
pub fn delete(
    st: &mut State,
    info: &Arc<ResourceInfo>,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
) -> ApiResult<DeleteResult> {
    let ns = if info.namespaced { ns } else { "" };
    let old = st
        .get(&info.gr(), ns, name)
        .ok_or_else(|| ApiError::not_found(&info.group, &info.resource, name))?;
    if let Some(uid) = &opts.precondition_uid {
        let actual = meta_str(&old, "uid");
        if uid != actual {
            return Err(ApiError::conflict(
                &info.group,
                &info.resource,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                ),
            ));
        }
    }
    if let Some(rv) = &opts.precondition_rv {
        let actual = meta_str(&old, "resourceVersion");
        if rv != actual {
            return Err(ApiError::conflict(
                &info.group,
                &info.resource,
                name,
                &format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"),
            ));
        }
    }
    let mut fin = finalizers(&old);
    let policy_finalizer = match opts.propagation {
        Some(Propagation::Orphan) => Some(ORPHAN_FINALIZER),
        Some(Propagation::Foreground) => Some(FOREGROUND_FINALIZER),
        _ => None,
    };
    if is_deleting(&old) && graceful_pod(st, info, &old) && opts.grace_period_seconds == Some(0) {
        // `--grace-period=0 --force`: the pod goes now, without waiting for its kubelet.
        if opts.dry_run {
            return Ok(DeleteResult {
                object: old,
                deleted: true,
            });
        }
        return Ok(finish_pod_termination(st, info, ns, name));
    }
    if is_deleting(&old) {
        // A second delete may only switch the GC policy finalizer.
        if let Some(pf) = policy_finalizer {
            if !fin.iter().any(|f| f == pf) {
                fin.retain(|f| f != ORPHAN_FINALIZER && f != FOREGROUND_FINALIZER);
                fin.push(pf.to_string());
                let mut new = (*old).clone();
                set_finalizers(&mut new, &fin);
                if opts.dry_run {
                    return Ok(DeleteResult {
                        object: Arc::new(new),
                        deleted: false,
                    });
                }
                let stored = st.put(info, new, EventType::Modified);
                after_write(st, info, &stored);
                return Ok(DeleteResult {
                    object: stored,
                    deleted: false,
                });
            }
        }
        return Ok(DeleteResult {
            object: old,
            deleted: false,
        });
    }
    if let Some(pf) = policy_finalizer {
        if !fin.iter().any(|f| f == pf) {
            fin.push(pf.to_string());
        }
    }
    if crd::is_crd(info) && !fin.iter().any(|f| f == crd::CLEANUP_FINALIZER) {
        fin.push(crd::CLEANUP_FINALIZER.to_string());
    }
    let grace = pod_grace_seconds(st, info, &old, opts);
    let is_namespace = info.group.is_empty() && info.resource == "namespaces";
    if !fin.is_empty() || is_namespace || namespace_pending(info, &old) || grace > 0 {
        let mut new = (*old).clone();
        set_finalizers(&mut new, &fin);
        {
            let meta = meta_mut(&mut new)?;
            let when = crate::time::format_rfc3339(crate::time::now_unix() + grace);
            meta.insert("deletionTimestamp".into(), json!(when));
            meta.insert(
                "deletionGracePeriodSeconds".into(),
                json!(opts.grace_period_seconds.unwrap_or(grace).max(0)),
            );
            if let Some(g) = meta.get("generation").and_then(Value::as_i64) {
                if g > 0 {
                    meta.insert("generation".into(), json!(g + 1));
                }
            }
        }
        if is_namespace {
            if let Some(m) = new.as_object_mut() {
                let status = m.entry("status").or_insert_with(|| json!({}));
                status["phase"] = json!("Terminating");
            }
        }
        if crd::is_crd(info) {
            crd::mark_terminating(&mut new);
        }
        if opts.dry_run {
            return Ok(DeleteResult {
                object: Arc::new(new),
                deleted: false,
            });
        }
        let stored = st.put(info, new, EventType::Modified);
        st.controllers_dirty = true;
        after_write(st, info, &stored);
        return Ok(DeleteResult {
            object: stored,
            deleted: false,
        });
    }
    if opts.dry_run {
        return Ok(DeleteResult {
            object: old,
            deleted: true,
        });
    }
    let removed = remove_now(st, info, ns, name).unwrap_or(old);
    Ok(DeleteResult {
        object: removed,
        deleted: true,
    })
}

/// Whether deleting this object is graceful: a pod bound to a node that has not finished,
/// while simulated kubelets run (they finish the deletion; see `sim::kubelet`).
fn graceful_pod(st: &State, info: &ResourceInfo, obj: &Value) -> bool {
    st.simulated_cluster
        && info.group.is_empty()
        && info.resource == "pods"
        && obj
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
        && !matches!(
            obj.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        )
}

/// The grace period a delete gives: the request's, else the pod's
/// `terminationGracePeriodSeconds` (default 30); 0 for everything but graceful pods.
fn pod_grace_seconds(st: &State, info: &ResourceInfo, obj: &Value, opts: &DeleteOpts) -> i64 {
    if !graceful_pod(st, info, obj) {
        return 0;
    }
    opts.grace_period_seconds
        .or_else(|| {
            obj.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30)
        .max(0)
}

/// The kubelet's last word on a terminating pod: gone now unless finalizers hold it, in
/// which case its grace period drops to 0 and removing the last finalizer removes it.
pub fn finish_pod_termination(
    st: &mut State,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
) -> DeleteResult {
    let Some(old) = st.get(&info.gr(), ns, name) else {
        return DeleteResult {
            object: Arc::new(json!({})),
            deleted: true,
        };
    };
    if finalizers(&old).is_empty() {
        let removed = remove_now(st, info, ns, name).unwrap_or(old);
        return DeleteResult {
            object: removed,
            deleted: true,
        };
    }
    if old.pointer("/metadata/deletionGracePeriodSeconds") == Some(&json!(0)) {
        return DeleteResult {
            object: old,
            deleted: false,
        };
    }
    let mut new = (*old).clone();
    if let Ok(meta) = meta_mut(&mut new) {
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
    }
    let stored = st.put(info, new, EventType::Modified);
    DeleteResult {
        object: stored,
        deleted: false,
    }
}

/// Puts a storage-version object into the requested version (None conversion: rewrite apiVersion).
pub fn to_version(info: &ResourceInfo, obj: &Arc<Value>, version: &str) -> Arc<Value> {
    let want = info.api_version(version);
    if obj.get("apiVersion").and_then(Value::as_str) == Some(want.as_str()) {
        return obj.clone();
    }
    let mut o = (**obj).clone();
    if let Some(m) = o.as_object_mut() {
        m.insert("apiVersion".into(), json!(want));
    }
    Arc::new(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_look_like_uuids() {
        let a = new_uid();
        let b = new_uid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert_eq!(random_suffix().len(), 5);
    }
}
