//! Defaulting of built-in resources as kube-apiserver (Kubernetes 1.31,
//! default feature gates) does it, so controllers see the objects they would
//! see on a real cluster:
//!
//! * [`apply_builtin_defaults`] — the versioned `SetDefaults_*` functions of
//!   `pkg/apis/{core,apps,batch,rbac}/v1/defaults.go` and the generated
//!   per-field defaulters (containers, ports, probes, volumes, pod templates
//!   in every workload), the v1 conversions visible in JSON (Secret
//!   `stringData` folded into base64 `data`, `serviceAccount` mirroring),
//!   the zero values Go always serializes (`resources: {}`,
//!   `creationTimestamp: null` in templates, empty statuses), what the
//!   default admission chain adds to Pods (service account, priority,
//!   default tolerations), and the Service storage's address allocation
//!   (cluster IP from a service CIDR via [`ClusterIpAllocator`], node ports,
//!   IPv4 single-stack families). Kubernetes applies defaults on every
//!   decode — create, update, patch and when reading from storage — so the
//!   server calls this on each of them; all defaults are idempotent.
//! * [`prepare_for_create`] — what the registry strategies do only on
//!   create: Namespace `spec.finalizers: [kubernetes]`, Pod
//!   `status.phase: Pending` + `qosClass`, Job selector and template labels
//!   from the uid.
//! * [`preserve_service_allocations`] — Service updates keep allocated
//!   addresses the client omitted.

mod autoscaling;
mod limits;
mod pod;
mod service;
mod util;
mod workloads;

pub use service::{
    allocate_service_addresses, preserve_service_allocations, ClusterIpAllocator, RangeAllocator,
    NODE_PORT_RANGE,
};

use crate::schema::FieldError;
use serde_json::{json, Map, Value};
use util::*;

/// Applies the built-in defaults for `group`/`version`/`kind` (core group is
/// `""`). Unknown kinds are left alone. Errors only come from Service address
/// allocation (422 Invalid on the real server).
pub fn apply_builtin_defaults(
    group: &str,
    version: &str,
    kind: &str,
    obj: &mut Value,
    alloc: &mut dyn ClusterIpAllocator,
) -> Result<(), FieldError> {
    defaults(group, version, kind, obj, Some(alloc))
}

/// [`apply_builtin_defaults`] without the Service address allocation. On a
/// real server defaults run when the request is decoded — before the field
/// manager records `managedFields` — while cluster IPs and node ports are
/// allocated later by the storage, so `clusterIP(s)`, `ipFamilies`,
/// `ipFamilyPolicy` and `nodePort` are owned by nobody. For identical
/// `managedFields` call this, then [`crate::ssa::record_update`], then
/// [`allocate_service_addresses`].
pub fn apply_defaults_only(group: &str, version: &str, kind: &str, obj: &mut Value) {
    // Without an allocator nothing can fail.
    let _ = defaults(group, version, kind, obj, None);
}

fn defaults(
    group: &str,
    version: &str,
    kind: &str,
    obj: &mut Value,
    alloc: Option<&mut dyn ClusterIpAllocator>,
) -> Result<(), FieldError> {
    let Some(o) = obj.as_object_mut() else {
        return Ok(());
    };
    match (group, version, kind) {
        ("", "v1", "Pod") => {
            if let Some(spec) = obj_at(o, "spec") {
                pod::pod_spec(spec);
                pod::pod_only(spec);
            }
            default_nil(o, "status", json!({}));
        }
        ("", "v1", "PodTemplate") => {
            if let Some(t) = obj_at(o, "template") {
                workloads::pod_template(t);
            }
        }
        ("", "v1", "ReplicationController") => {
            if let Some(spec) = obj_at(o, "spec") {
                default_nil(spec, "replicas", json!(1));
                if let Some(t) = existing_obj(spec, "template") {
                    workloads::pod_template(t);
                }
            }
        }
        ("", "v1", "Service") => service::service(o, alloc)?,
        ("", "v1", "Secret") => secret(o),
        ("", "v1", "LimitRange") => limits::limit_range(o),
        ("autoscaling", "v2", "HorizontalPodAutoscaler") => {
            autoscaling::horizontal_pod_autoscaler(o);
        }
        ("", "v1", "Namespace") => namespace(o),
        ("", "v1", "PersistentVolumeClaim") => workloads::pvc(o),
        ("networking.k8s.io", "v1", "NetworkPolicy") => network_policy(o),
        ("", "v1", "Event") => core_event(o),
        ("events.k8s.io", "v1", "Event") => events_event(o),
        ("coordination.k8s.io", "v1", "Lease") => default_nil(o, "spec", json!({})),
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => crd(o),
        ("apps", "v1", "Deployment") => workloads::deployment(o),
        ("apps", "v1", "StatefulSet") => workloads::stateful_set(o),
        ("apps", "v1", "DaemonSet") => workloads::daemon_set(o),
        ("apps", "v1", "ReplicaSet") => workloads::replica_set(o),
        ("batch", "v1", "Job") => workloads::job(o),
        ("batch", "v1", "CronJob") => workloads::cron_job(o),
        ("rbac.authorization.k8s.io", "v1", "Role" | "ClusterRole") => {
            // `rules` has no omitempty: Go writes `null` for a nil slice.
            o.entry("rules").or_insert(Value::Null);
        }
        ("rbac.authorization.k8s.io", "v1", "RoleBinding" | "ClusterRoleBinding") => {
            if let Some(rr) = obj_at(o, "roleRef") {
                default_str(rr, "apiGroup", "rbac.authorization.k8s.io");
            }
            each_obj_in(o, "subjects", |s| {
                if is_empty_str(s, "apiGroup") {
                    match s.get("kind").and_then(Value::as_str) {
                        Some("User" | "Group") => {
                            s.insert("apiGroup".into(), json!("rbac.authorization.k8s.io"));
                        }
                        Some("ServiceAccount") => {
                            s.remove("apiGroup");
                        }
                        _ => {}
                    }
                }
            });
        }
        _ => {}
    }
    Ok(())
}

/// `SetDefaults_Secret` (`type: Opaque`) and the v1 conversion that merges
/// `stringData` into `data` (base64, overriding) and drops `stringData`.
fn secret(o: &mut Map<String, Value>) {
    use base64::Engine;
    default_str(o, "type", "Opaque");
    if let Some(Value::Object(sd)) = o.remove("stringData") {
        if sd.is_empty() {
            return;
        }
        if let Some(data) = obj_at(o, "data") {
            for (k, v) in sd {
                let raw = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                let enc = base64::engine::general_purpose::STANDARD.encode(raw.as_bytes());
                data.insert(k, Value::String(enc));
            }
        }
    }
}

/// `SetDefaults_Namespace` (label `kubernetes.io/metadata.name`) and
/// `SetDefaults_NamespaceStatus` (`phase: Active`).
fn namespace(o: &mut Map<String, Value>) {
    let name = o
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !name.is_empty() {
        if let Some(meta) = obj_at(o, "metadata") {
            if let Some(labels) = obj_at(meta, "labels") {
                labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
        }
    }
    if let Some(status) = obj_at(o, "status") {
        default_str(status, "phase", "Active");
    }
    // NamespaceSpec is a struct: always serialized.
    default_nil(o, "spec", json!({}));
}

/// `SetDefaults_CustomResourceDefinition(Spec)`: singular and listKind from
/// the kind, `conversion.strategy: None`, conversion webhook service port
/// 443, `status.storedVersions` from the storage version; the status's
/// `acceptedNames` struct is always serialized.
fn crd(o: &mut Map<String, Value>) {
    let mut storage_version = None;
    if let Some(spec) = obj_at(o, "spec") {
        if let Some(names) = obj_at(spec, "names") {
            let kind = names
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if is_empty_str(names, "singular") {
                names.insert("singular".into(), json!(kind.to_lowercase()));
            }
            if is_empty_str(names, "listKind") && !kind.is_empty() {
                names.insert("listKind".into(), json!(format!("{kind}List")));
            }
        }
        default_nil(spec, "conversion", json!({"strategy": "None"}));
        if let Some(conv) = existing_obj(spec, "conversion") {
            if let Some(wh) = existing_obj(conv, "webhook") {
                if let Some(cc) = existing_obj(wh, "clientConfig") {
                    if let Some(svc) = existing_obj(cc, "service") {
                        default_nil(svc, "port", json!(443));
                    }
                }
            }
        }
        if let Some(Value::Array(vs)) = spec.get("versions") {
            storage_version = vs
                .iter()
                .find(|v| v.get("storage") == Some(&Value::Bool(true)))
                .and_then(|v| v.get("name"))
                .cloned();
        }
    }
    if let Some(status) = obj_at(o, "status") {
        default_nil(status, "acceptedNames", json!({"plural": "", "kind": ""}));
        let empty = match status.get("storedVersions") {
            None | Some(Value::Null) => true,
            Some(Value::Array(a)) => a.is_empty(),
            _ => false,
        };
        if empty {
            if let Some(v) = storage_version {
                status.insert("storedVersions".into(), json!([v]));
            }
        }
    }
}

/// core/v1 Event: non-omitempty fields Go always writes.
fn core_event(o: &mut Map<String, Value>) {
    default_nil(o, "involvedObject", json!({}));
    default_nil(o, "source", json!({}));
    for k in ["firstTimestamp", "lastTimestamp", "eventTime"] {
        if !o.contains_key(k) {
            o.insert(k.into(), Value::Null);
        }
    }
    for k in ["reportingComponent", "reportingInstance"] {
        if is_nil(o, k) {
            o.insert(k.into(), json!(""));
        }
    }
}

/// events.k8s.io/v1 Event: zero-valued struct fields Go always writes.
fn events_event(o: &mut Map<String, Value>) {
    for k in [
        "eventTime",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
    ] {
        if !o.contains_key(k) {
            o.insert(k.into(), Value::Null);
        }
    }
    default_nil(o, "deprecatedSource", json!({}));
    default_nil(o, "regarding", json!({}));
}

/// `SetDefaults_NetworkPolicyPort` (`protocol: TCP`) and `SetDefaults_NetworkPolicy`
/// (`policyTypes`: `Ingress`, plus `Egress` when egress rules are given).
fn network_policy(o: &mut Map<String, Value>) {
    let Some(spec) = obj_at(o, "spec") else {
        return;
    };
    for rules in ["ingress", "egress"] {
        each_obj_in(spec, rules, |r| {
            each_obj_in(r, "ports", |p| default_str(p, "protocol", "TCP"));
        });
    }
    let empty = |v: Option<&Value>| v.and_then(Value::as_array).is_none_or(Vec::is_empty);
    if empty(spec.get("policyTypes")) {
        let mut types = vec![json!("Ingress")];
        if spec.get("egress").is_some_and(|e| !e.is_null()) {
            types.push(json!("Egress"));
        }
        spec.insert("policyTypes".into(), Value::Array(types));
    }
}

/// Create-only changes of the registry strategies (`PrepareForCreate`):
/// Namespace finalizer `kubernetes` and `phase: Active`; Pod
/// `status: {phase: Pending, qosClass}`; Job generated selector
/// (`batch.kubernetes.io/controller-uid`) and template labels (`job-name`,
/// `controller-uid`, both legacy and `batch.kubernetes.io/` forms) unless
/// `spec.manualSelector` is true. Needs `metadata.name` and `metadata.uid`
/// set; call after [`apply_builtin_defaults`] and run the defaults again
/// afterwards (as the real server's read path would).
pub fn prepare_for_create(group: &str, version: &str, kind: &str, obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    match (group, version, kind) {
        ("", "v1", "Namespace") => {
            if let Some(spec) = obj_at(o, "spec") {
                let fins = spec
                    .entry("finalizers".to_string())
                    .or_insert(Value::Array(Vec::new()));
                if fins.is_null() {
                    *fins = Value::Array(Vec::new());
                }
                if let Value::Array(a) = fins {
                    if !a.iter().any(|f| f == "kubernetes") {
                        a.push(json!("kubernetes"));
                    }
                }
            }
            if let Some(status) = obj_at(o, "status") {
                status.insert("phase".into(), json!("Active"));
            }
        }
        ("", "v1", "Pod") => {
            let qos = o
                .get("spec")
                .and_then(Value::as_object)
                .map(pod::qos_class)
                .unwrap_or("BestEffort");
            o.insert(
                "status".into(),
                json!({"phase": "Pending", "qosClass": qos}),
            );
        }
        ("batch", "v1", "Job") => job_selector(o),
        // The DaemonSet strategy starts `templateGeneration` at 1 and mirrors it in an
        // annotation (the v1 wire form has no field for it).
        ("apps", "v1", "DaemonSet") => {
            if let Some(meta) = obj_at(o, "metadata") {
                if let Some(ann) = obj_at(meta, "annotations") {
                    ann.insert(
                        "deprecated.daemonset.template.generation".into(),
                        json!("1"),
                    );
                }
            }
        }
        // The StorageObjectInUseProtection admission plugin (on by default).
        ("", "v1", "PersistentVolumeClaim") => {
            if let Some(meta) = obj_at(o, "metadata") {
                let fins = meta.entry("finalizers").or_insert(Value::Null);
                if fins.is_null() {
                    *fins = json!([]);
                }
                if let Value::Array(fins) = fins {
                    if !fins.iter().any(|f| f == "kubernetes.io/pvc-protection") {
                        fins.push(json!("kubernetes.io/pvc-protection"));
                    }
                }
            }
        }
        _ => {}
    }
}

fn job_selector(o: &mut Map<String, Value>) {
    let meta = o.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let uid = meta
        .and_then(|m| m.get("uid"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(spec) = obj_at(o, "spec") else {
        return;
    };
    if spec.get("manualSelector") == Some(&Value::Bool(true)) {
        return;
    }
    if let Some(t) = obj_at(spec, "template") {
        if let Some(m) = obj_at(t, "metadata") {
            if let Some(labels) = obj_at(m, "labels") {
                for k in ["job-name", "batch.kubernetes.io/job-name"] {
                    labels.entry(k.to_string()).or_insert(json!(name));
                }
                for k in ["controller-uid", "batch.kubernetes.io/controller-uid"] {
                    labels.entry(k.to_string()).or_insert(json!(uid));
                }
            }
        }
    }
    if let Some(sel) = obj_at(spec, "selector") {
        if let Some(ml) = obj_at(sel, "matchLabels") {
            ml.entry("batch.kubernetes.io/controller-uid".to_string())
                .or_insert(json!(uid));
        }
    }
}

#[cfg(test)]
mod tests;
