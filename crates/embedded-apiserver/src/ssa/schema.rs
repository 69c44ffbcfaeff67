//! What server-side apply needs to know about a type: list semantics
//! (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`), atomic maps and
//! structs, which object keys are declared struct fields (vs free-form map
//! keys), and the zero object Go would serialize for the type (the "old"
//! object of a create).

use crate::schema::{AdditionalProperties, Node, StructuralSchema};
use serde_json::{json, Value};

/// List semantics.
#[derive(Debug, Clone, PartialEq)]
pub enum ListType {
    /// Replaced and owned as a whole.
    Atomic,
    /// A set of scalars (items owned by value).
    Set,
    /// A list-map: items identified by these key fields, with the default
    /// used when an item omits a key field (e.g. `protocol: TCP`).
    Map(Vec<(String, Option<Value>)>),
}

/// Type information for server-side apply. Paths are field names from the
/// object root; list items do not add a path element (the item of list
/// `spec.containers` is at `["spec", "containers"]`).
pub trait SsaSchema {
    /// Semantics of the list at `path`.
    fn list_type(&self, path: &[&str]) -> ListType;
    /// Whether the object at `path` (or the items of the list at `path`) is
    /// atomic.
    fn is_atomic_map(&self, path: &[&str]) -> bool;
    /// Whether the last element of `path` is a declared struct field (a
    /// free-form map key or an unknown field is not).
    fn is_declared_field(&self, path: &[&str]) -> bool;
    /// The object Go would serialize for an empty value of this type.
    fn empty_object(&self) -> Value {
        json!({})
    }
}

/// No type information: lists atomic, maps granular, every key free-form —
/// structured-merge-diff's "deduced" type.
#[derive(Debug, Clone, Copy, Default)]
pub struct Untyped;

impl SsaSchema for Untyped {
    fn list_type(&self, _: &[&str]) -> ListType {
        ListType::Atomic
    }
    fn is_atomic_map(&self, _: &[&str]) -> bool {
        false
    }
    fn is_declared_field(&self, _: &[&str]) -> bool {
        false
    }
}

/// Built-in kinds served by the embedded server, from the list-type
/// markers of `k8s.io/api`.
#[derive(Debug, Clone)]
pub struct BuiltinSchema {
    kind: String,
}

impl BuiltinSchema {
    /// Schema for a built-in `group`/`kind` (unknown kinds get the generic
    /// ObjectMeta-only knowledge).
    pub fn for_kind(_group: &str, kind: &str) -> Self {
        BuiltinSchema {
            kind: kind.to_string(),
        }
    }
}

fn ends_with(path: &[&str], suffix: &[&str]) -> bool {
    path.len() >= suffix.len() && &path[path.len() - suffix.len()..] == suffix
}

fn keys(names: &[&str]) -> ListType {
    ListType::Map(
        names
            .iter()
            .map(|n| {
                let default = match *n {
                    "protocol" => Some(json!("TCP")),
                    _ => None,
                };
                (n.to_string(), default)
            })
            .collect(),
    )
}

/// Free-form maps (map[string]T in Go): their keys are not declared fields.
fn is_free_form_map(kind: &str, path: &[&str]) -> bool {
    let Some(last) = path.last() else {
        return false;
    };
    match *last {
        "labels" | "annotations" | "nodeSelector" | "limits" | "requests" | "matchLabels"
        | "capacity" | "allocatable" | "hard" | "used" | "stringData" | "binaryData" => true,
        "data" => matches!(kind, "ConfigMap" | "Secret"),
        "default" | "defaultRequest" | "max" | "min" | "maxLimitRequestRatio" => {
            kind == "LimitRange"
        }
        "selector" => kind == "Service" && path == ["spec", "selector"],
        _ => false,
    }
}

impl SsaSchema for BuiltinSchema {
    fn list_type(&self, path: &[&str]) -> ListType {
        let last = path.last().copied().unwrap_or("");
        match last {
            "containers"
            | "initContainers"
            | "ephemeralContainers"
            | "volumes"
            | "imagePullSecrets"
            | "resourceClaims"
            | "schedulingGates" => {
                if ends_with(path, &["spec", last]) || last == "imagePullSecrets" {
                    keys(&["name"])
                } else {
                    ListType::Atomic
                }
            }
            "ports" => {
                if self.kind == "Service" && path == ["spec", "ports"] {
                    keys(&["port", "protocol"])
                } else if path.len() >= 2 && path[path.len() - 2] == "containers"
                    || path.len() >= 2 && path[path.len() - 2] == "initContainers"
                    || path.len() >= 2 && path[path.len() - 2] == "ephemeralContainers"
                {
                    keys(&["containerPort", "protocol"])
                } else {
                    ListType::Atomic
                }
            }
            "env" => keys(&["name"]),
            "volumeMounts" => keys(&["mountPath"]),
            "volumeDevices" => keys(&["devicePath"]),
            "hostAliases" => keys(&["ip"]),
            "topologySpreadConstraints" => keys(&["topologyKey", "whenUnsatisfiable"]),
            "ownerReferences" => keys(&["uid"]),
            "finalizers" => {
                if path == ["metadata", "finalizers"]
                    || ends_with(path, &["metadata", "finalizers"])
                {
                    ListType::Set
                } else {
                    ListType::Atomic
                }
            }
            "conditions" => keys(&["type"]),
            "podIPs" | "hostIPs" => keys(&["ip"]),
            "secrets" if self.kind == "ServiceAccount" => keys(&["name"]),
            _ => ListType::Atomic,
        }
    }

    fn is_atomic_map(&self, path: &[&str]) -> bool {
        let last = path.last().copied().unwrap_or("");
        match last {
            // LabelSelector is `+structType=atomic`; the Service's map
            // selector is `+mapType=atomic`.
            "selector" | "labelSelector" | "namespaceSelector" | "ownerReferences"
            | "involvedObject" | "regarding" | "related" | "roleRef" => true,
            _ => false,
        }
    }

    fn is_declared_field(&self, path: &[&str]) -> bool {
        match path.split_last() {
            Some((_, parent)) => !is_free_form_map(&self.kind, parent),
            None => true,
        }
    }

    fn empty_object(&self) -> Value {
        let template =
            json!({"metadata": {"creationTimestamp": null}, "spec": {"containers": null}});
        let mut obj = match self.kind.as_str() {
            "Deployment" => {
                json!({"spec": {"selector": null, "template": template, "strategy": {}}, "status": {}})
            }
            "ReplicaSet" => {
                json!({"spec": {"selector": null, "template": template}, "status": {"replicas": 0}})
            }
            "StatefulSet" => {
                json!({"spec": {"selector": null, "template": template, "serviceName": "",
                "updateStrategy": {}}, "status": {"replicas": 0, "availableReplicas": 0}})
            }
            "DaemonSet" => {
                json!({"spec": {"selector": null, "template": template, "updateStrategy": {}},
                "status": {"currentNumberScheduled": 0, "numberMisscheduled": 0,
                           "desiredNumberScheduled": 0, "numberReady": 0}})
            }
            "Job" => json!({"spec": {"template": template}, "status": {}}),
            "CronJob" => {
                json!({"spec": {"schedule": "", "jobTemplate": {"metadata": {"creationTimestamp": null},
                "spec": {"template": template}}}, "status": {}})
            }
            "Pod" => json!({"spec": {"containers": null}, "status": {}}),
            "PodTemplate" => json!({"template": template}),
            "Service" => json!({"spec": {}, "status": {"loadBalancer": {}}}),
            "Namespace" => json!({"spec": {}, "status": {}}),
            "Role" | "ClusterRole" => json!({"rules": null}),
            "RoleBinding" | "ClusterRoleBinding" => {
                json!({"roleRef": {"apiGroup": "", "kind": "", "name": ""}})
            }
            "Lease" => json!({"spec": {}}),
            _ => json!({}),
        };
        if let Some(o) = obj.as_object_mut() {
            o.insert("metadata".into(), json!({"creationTimestamp": null}));
        }
        obj
    }
}

/// A CRD version's structural schema.
#[derive(Debug, Clone)]
pub struct CrdSchema<'a> {
    schema: &'a StructuralSchema,
}

impl<'a> CrdSchema<'a> {
    /// Wraps a parsed structural schema.
    pub fn new(schema: &'a StructuralSchema) -> Self {
        CrdSchema { schema }
    }

    /// The node at `path` (list items transparent); `None` when the schema
    /// does not describe it.
    fn node(&self, path: &[&str]) -> Option<&'a Node> {
        let mut n: &Node = &self.schema.root;
        for k in path {
            // Step through list items transparently.
            while n.type_.as_deref() == Some("array") {
                n = n.items.as_deref()?;
            }
            n = match n.properties.get(*k) {
                Some(p) => p,
                None => match &n.additional_properties {
                    Some(AdditionalProperties::Schema(s)) => s,
                    _ => return None,
                },
            };
        }
        Some(n)
    }
}

impl SsaSchema for CrdSchema<'_> {
    fn list_type(&self, path: &[&str]) -> ListType {
        if path == ["metadata", "finalizers"] {
            return ListType::Set;
        }
        if path == ["metadata", "ownerReferences"] {
            return keys(&["uid"]);
        }
        let Some(n) = self.node(path) else {
            return ListType::Atomic;
        };
        match n.list_type.as_deref() {
            Some("set") => ListType::Set,
            Some("map") => {
                let items = n.items.as_deref();
                ListType::Map(
                    n.list_map_keys
                        .iter()
                        .map(|k| {
                            let d = items
                                .and_then(|i| i.properties.get(k))
                                .and_then(|p| p.default.clone());
                            (k.clone(), d)
                        })
                        .collect(),
                )
            }
            _ => ListType::Atomic,
        }
    }

    fn is_atomic_map(&self, path: &[&str]) -> bool {
        if path == ["metadata", "ownerReferences"] {
            return true;
        }
        let Some(mut n) = self.node(path) else {
            return false;
        };
        if n.type_.as_deref() == Some("array") {
            match n.items.as_deref() {
                Some(i) => n = i,
                None => return false,
            }
        }
        n.map_type.as_deref() == Some("atomic")
    }

    fn is_declared_field(&self, path: &[&str]) -> bool {
        let Some((last, parent)) = path.split_last() else {
            return true;
        };
        if parent.is_empty() {
            return matches!(*last, "apiVersion" | "kind" | "metadata")
                || self.schema.root.properties.contains_key(*last);
        }
        if parent[0] == "metadata" {
            return !is_free_form_map("", parent);
        }
        match self.node(parent) {
            Some(mut n) => {
                while n.type_.as_deref() == Some("array") {
                    match n.items.as_deref() {
                        Some(i) => n = i,
                        None => return false,
                    }
                }
                n.properties.contains_key(*last)
            }
            None => false,
        }
    }
}
