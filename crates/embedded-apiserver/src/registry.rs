//! The set of served resources: built-in kinds plus those defined by
//! CustomResourceDefinitions, with what discovery reports about them.

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `(group, resource)`: the storage identity of a resource, independent of version.
pub type GroupResource = (String, String);

/// Where a `/scale` subresource reads and writes replicas.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleInfo {
    /// e.g. `.spec.replicas`
    pub spec_replicas_path: String,
    /// e.g. `.status.replicas`
    pub status_replicas_path: String,
    /// e.g. `.status.selector` (CRDs) — built-ins derive it from `.spec.selector`.
    pub label_selector_path: Option<String>,
}

/// CRD-specific data for a resource.
#[derive(Clone, Debug)]
pub struct CrdInfo {
    /// The CRD's name (`<plural>.<group>`).
    pub crd_name: String,
    /// Per version: the parsed structural schema (if the version has a valid one).
    pub schemas: BTreeMap<String, Arc<crate::schema::StructuralSchema>>,
    /// Per served version: additionalPrinterColumns.
    pub printer_columns: BTreeMap<String, Vec<Value>>,
    /// Per version: status subresource enabled.
    pub status_versions: BTreeMap<String, bool>,
}

/// A served resource.
#[derive(Clone, Debug)]
pub struct ResourceInfo {
    pub group: String,
    /// Served versions, preferred first.
    pub versions: Vec<String>,
    /// The version objects are stored in.
    pub storage_version: String,
    /// Plural name (URL segment).
    pub resource: String,
    pub singular: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub verbs: Vec<String>,
    /// Has a `/status` subresource.
    pub status: bool,
    pub scale: Option<ScaleInfo>,
    /// Whether `metadata.generation` is maintained.
    pub has_generation: bool,
    /// Extra field-selector labels beyond metadata.name/namespace.
    pub field_labels: Vec<String>,
    pub crd: Option<CrdInfo>,
}

impl ResourceInfo {
    /// `(group, resource)`.
    pub fn gr(&self) -> GroupResource {
        (self.group.clone(), self.resource.clone())
    }

    /// `apiVersion` for a version.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// Whether this resource is served from a CRD.
    pub fn is_custom(&self) -> bool {
        self.crd.is_some()
    }

    /// Whether `sub` is a known subresource.
    pub fn has_subresource(&self, sub: &str) -> bool {
        match sub {
            "status" => self.status,
            "scale" => self.scale.is_some(),
            "finalize" => self.group.is_empty() && self.resource == "namespaces",
            _ => false,
        }
    }
}

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn replicas_scale() -> Option<ScaleInfo> {
    Some(ScaleInfo {
        spec_replicas_path: ".spec.replicas".into(),
        status_replicas_path: ".status.replicas".into(),
        label_selector_path: None,
    })
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    resource: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
    categories: &[&str],
    status: bool,
    has_generation: bool,
) -> ResourceInfo {
    let mut verbs: Vec<String> = ALL_VERBS.iter().map(|s| s.to_string()).collect();
    if resource == "namespaces" && group.is_empty() {
        verbs.retain(|v| v != "deletecollection");
    }
    ResourceInfo {
        group: group.into(),
        versions: vec!["v1".into()],
        storage_version: "v1".into(),
        resource: resource.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: categories.iter().map(|s| s.to_string()).collect(),
        verbs,
        status,
        scale: None,
        has_generation,
        field_labels: vec![],
        crd: None,
    }
}

/// HorizontalPodAutoscaler, served (and stored) as autoscaling/v2 only: kube-apiserver also
/// serves autoscaling/v1, whose conversion is not emulated.
fn autoscaling_v2() -> ResourceInfo {
    let mut hpa = builtin(
        "autoscaling",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        true,
        &["hpa"],
        &["all"],
        true,
        false,
    );
    hpa.versions = vec!["v2".into()];
    hpa.storage_version = "v2".into();
    hpa
}

/// The built-in resources, in discovery order.
pub fn builtins() -> Vec<ResourceInfo> {
    let all = &["all"][..];
    let mut v = vec![
        builtin(
            "",
            "namespaces",
            "Namespace",
            false,
            &["ns"],
            &[],
            true,
            false,
        ),
        builtin(
            "",
            "configmaps",
            "ConfigMap",
            true,
            &["cm"],
            &[],
            false,
            false,
        ),
        builtin("", "secrets", "Secret", true, &[], &[], false, false),
        builtin(
            "",
            "limitranges",
            "LimitRange",
            true,
            &["limits"],
            &[],
            false,
            false,
        ),
        builtin(
            "",
            "resourcequotas",
            "ResourceQuota",
            true,
            &["quota"],
            &[],
            true,
            false,
        ),
        builtin("", "services", "Service", true, &["svc"], all, true, false),
        builtin("", "pods", "Pod", true, &["po"], all, true, false),
        builtin(
            "",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            &["pvc"],
            &[],
            true,
            false,
        ),
        builtin(
            "networking.k8s.io",
            "ingresses",
            "Ingress",
            true,
            &["ing"],
            &[],
            true,
            true,
        ),
        builtin(
            "networking.k8s.io",
            "networkpolicies",
            "NetworkPolicy",
            true,
            &["netpol"],
            &[],
            false,
            true,
        ),
        builtin(
            "",
            "serviceaccounts",
            "ServiceAccount",
            true,
            &["sa"],
            &[],
            false,
            false,
        ),
        builtin("", "events", "Event", true, &["ev"], &[], false, false),
        builtin(
            "events.k8s.io",
            "events",
            "Event",
            true,
            &["ev"],
            &[],
            false,
            false,
        ),
        builtin(
            "coordination.k8s.io",
            "leases",
            "Lease",
            true,
            &[],
            &[],
            false,
            false,
        ),
        builtin(
            "apps",
            "deployments",
            "Deployment",
            true,
            &["deploy"],
            all,
            true,
            true,
        ),
        builtin(
            "apps",
            "replicasets",
            "ReplicaSet",
            true,
            &["rs"],
            all,
            true,
            true,
        ),
        builtin(
            "apps",
            "statefulsets",
            "StatefulSet",
            true,
            &["sts"],
            all,
            true,
            true,
        ),
        builtin(
            "apps",
            "daemonsets",
            "DaemonSet",
            true,
            &["ds"],
            all,
            true,
            true,
        ),
        builtin(
            "apps",
            "controllerrevisions",
            "ControllerRevision",
            true,
            &[],
            &[],
            false,
            false,
        ),
        builtin(
            "policy",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            &["pdb"],
            &[],
            true,
            true,
        ),
        builtin("batch", "jobs", "Job", true, &[], all, true, true),
        autoscaling_v2(),
        builtin(
            "batch",
            "cronjobs",
            "CronJob",
            true,
            &["cj"],
            all,
            true,
            true,
        ),
        builtin("", "nodes", "Node", false, &["no"], &[], true, false),
        builtin(
            "discovery.k8s.io",
            "endpointslices",
            "EndpointSlice",
            true,
            &[],
            &[],
            false,
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "roles",
            "Role",
            true,
            &[],
            &[],
            false,
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "rolebindings",
            "RoleBinding",
            true,
            &[],
            &[],
            false,
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "clusterroles",
            "ClusterRole",
            false,
            &[],
            &[],
            false,
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            &[],
            &[],
            false,
            false,
        ),
        builtin(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            &["api-extensions"],
            true,
            true,
        ),
    ];
    for r in v.iter_mut() {
        if r.group == "apps" && r.resource != "daemonsets" {
            r.scale = replicas_scale();
        }
        r.field_labels = match (r.group.as_str(), r.resource.as_str()) {
            ("", "pods") => vec![
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ],
            ("", "events") => vec![
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
            ("", "secrets") => vec!["type"],
            ("", "namespaces") => vec!["status.phase"],
            ("", "services") => vec!["spec.clusterIP", "spec.type"],
            ("apps", "replicasets") => vec!["status.replicas"],
            ("batch", "jobs") => vec!["status.successful"],
            _ => vec![],
        }
        .into_iter()
        .map(String::from)
        .collect();
    }
    v
}

/// The resource table: lookups by group/version/resource and by kind.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    /// Keyed by `(group, resource)`.
    resources: BTreeMap<GroupResource, Arc<ResourceInfo>>,
    /// Discovery order of `(group, resource)`.
    order: Vec<GroupResource>,
}

impl Registry {
    /// A registry with the built-in resources.
    pub fn with_builtins() -> Self {
        let mut r = Registry::default();
        for info in builtins() {
            r.insert(info);
        }
        r
    }

    /// Adds or replaces a resource.
    pub fn insert(&mut self, info: ResourceInfo) {
        let key = info.gr();
        if !self.order.contains(&key) {
            self.order.push(key.clone());
        }
        self.resources.insert(key, Arc::new(info));
    }

    /// Removes a resource.
    pub fn remove(&mut self, gr: &GroupResource) {
        self.resources.remove(gr);
        self.order.retain(|k| k != gr);
    }

    /// Resource by `(group, resource)` regardless of version.
    pub fn get_gr(&self, group: &str, resource: &str) -> Option<Arc<ResourceInfo>> {
        self.resources
            .get(&(group.to_string(), resource.to_string()))
            .cloned()
    }

    /// Resource served at `group/version/resource`.
    pub fn get(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceInfo>> {
        self.get_gr(group, resource)
            .filter(|r| r.versions.iter().any(|v| v == version))
    }

    /// All resources in discovery order.
    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        self.order
            .iter()
            .filter_map(|k| self.resources.get(k).cloned())
            .collect()
    }

    /// Groups (excluding core) in discovery order with their versions, preferred first.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for r in self.all() {
            if r.group.is_empty() {
                continue;
            }
            let entry = match out.iter_mut().position(|(g, _)| *g == r.group) {
                Some(i) => &mut out[i].1,
                None => {
                    out.push((r.group.clone(), Vec::new()));
                    &mut out.last_mut().expect("just pushed").1
                }
            };
            for v in &r.versions {
                if !entry.contains(v) {
                    entry.push(v.clone());
                }
            }
        }
        for (_, versions) in out.iter_mut() {
            sort_versions(versions);
        }
        out
    }

    /// Resources served at a group version.
    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceInfo>> {
        self.all()
            .into_iter()
            .filter(|r| r.group == group && r.versions.iter().any(|v| v == version))
            .collect()
    }
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first, then others alphabetically.
pub fn sort_versions(versions: &mut [String]) {
    versions.sort_by_key(|v| version_key(v));
}

fn version_key(v: &str) -> (u8, i64, i64, i64, String) {
    let parse = |s: &str| -> Option<(i64, i64, i64)> {
        let rest = s.strip_prefix('v')?;
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major: i64 = rest[..digits_end].parse().ok()?;
        let tail = &rest[digits_end..];
        if tail.is_empty() {
            return Some((3, major, 0));
        }
        for (prefix, rank) in [("beta", 2), ("alpha", 1)] {
            if let Some(n) = tail.strip_prefix(prefix) {
                return Some((rank, major, n.parse().ok()?));
            }
        }
        None
    };
    match parse(v) {
        Some((rank, major, minor)) => (0, -rank, -major, -minor, String::new()),
        None => (1, 0, 0, 0, v.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kubernetes() {
        let mut v: Vec<String> = [
            "v1alpha1", "foo", "v2beta1", "v1", "v1beta2", "v2", "v1beta1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        sort_versions(&mut v);
        assert_eq!(
            v,
            ["v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }

    #[test]
    fn finds_builtins() {
        let r = Registry::with_builtins();
        assert!(r.get("apps", "v1", "deployments").unwrap().scale.is_some());
        assert!(r.get("apps", "v2", "deployments").is_none());
        assert!(r.groups().iter().any(|(g, _)| g == "batch"));
    }
}
