//! Patch metadata of the built-in types the server serves: the
//! `patchStrategy` / `patchMergeKey` struct tags of `k8s.io/api`, as a small
//! type graph keyed by field name.

/// How a field's value is combined with the live value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// No tag: maps merge key by key, lists are replaced.
    None,
    /// `patchStrategy:"merge"` (lists merge; by key for lists of maps,
    /// as a set for lists of scalars).
    Merge,
    /// `patchStrategy:"replace"`.
    Replace,
    /// `patchStrategy:"retainKeys"` (maps merge; `$retainKeys` honoured).
    RetainKeys,
}

/// A node of the built-in type graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// A type without patch tags anywhere below (also CR content).
    Unknown,
    /// Objects with only ObjectMeta of interest (ConfigMap, Secret, ...).
    Generic,
    /// Pod.
    Pod,
    /// PodTemplate (the core/v1 kind).
    PodTemplate,
    /// PodTemplateSpec.
    PodTemplateSpec,
    /// Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob,
    /// ReplicationController.
    Workload,
    /// Their `spec`.
    WorkloadSpec,
    /// CronJob `spec.jobTemplate`.
    JobTemplateSpec,
    /// A status whose `conditions` merge by `type`.
    ConditionsStatus,
    /// Service.
    Service,
    /// ServiceSpec.
    ServiceSpec,
    /// Namespace.
    Namespace,
    /// ServiceAccount.
    ServiceAccount,
    /// ObjectMeta.
    ObjectMeta,
    /// PodSpec.
    PodSpec,
    /// Container / EphemeralContainer.
    Container,
    /// PodStatus.
    PodStatus,
}

/// Patch metadata of one field: strategy, merge key, and the type of the
/// value (of the elements, for lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldMeta {
    /// Patch strategy.
    pub strategy: Strategy,
    /// Merge key for lists of maps.
    pub merge_key: Option<&'static str>,
    /// Type of the value or list element.
    pub ty: Ty,
}

const fn plain(ty: Ty) -> FieldMeta {
    FieldMeta {
        strategy: Strategy::None,
        merge_key: None,
        ty,
    }
}

const fn merge(key: &'static str, ty: Ty) -> FieldMeta {
    FieldMeta {
        strategy: Strategy::Merge,
        merge_key: Some(key),
        ty,
    }
}

const UNKNOWN: FieldMeta = plain(Ty::Unknown);
const META: FieldMeta = plain(Ty::ObjectMeta);

/// Looks up the patch metadata of `field` inside a value of type `ty`.
pub fn field_meta(ty: Ty, field: &str) -> FieldMeta {
    match (ty, field) {
        (
            Ty::Generic
            | Ty::Pod
            | Ty::PodTemplate
            | Ty::PodTemplateSpec
            | Ty::Workload
            | Ty::JobTemplateSpec
            | Ty::Service
            | Ty::Namespace
            | Ty::ServiceAccount,
            "metadata",
        ) => META,
        (Ty::Pod, "spec") | (Ty::PodTemplateSpec, "spec") => plain(Ty::PodSpec),
        (Ty::Pod, "status") => plain(Ty::PodStatus),
        (Ty::PodTemplate, "template") => plain(Ty::PodTemplateSpec),
        (Ty::Workload, "spec") | (Ty::JobTemplateSpec, "spec") => plain(Ty::WorkloadSpec),
        (Ty::Workload | Ty::Namespace, "status") => plain(Ty::ConditionsStatus),
        (Ty::WorkloadSpec, "template") => plain(Ty::PodTemplateSpec),
        (Ty::WorkloadSpec, "jobTemplate") => plain(Ty::JobTemplateSpec),
        // Deployment.spec.strategy carries patchStrategy:"retainKeys".
        (Ty::WorkloadSpec, "strategy") => FieldMeta {
            strategy: Strategy::RetainKeys,
            merge_key: None,
            ty: Ty::Unknown,
        },
        (Ty::ConditionsStatus, "conditions") => merge("type", Ty::Unknown),
        (Ty::Service, "spec") => plain(Ty::ServiceSpec),
        (Ty::Service, "status") => plain(Ty::ConditionsStatus),
        (Ty::ServiceSpec, "ports") => merge("port", Ty::Unknown),
        (Ty::ServiceAccount, "secrets") => merge("name", Ty::Unknown),
        (Ty::ObjectMeta, "finalizers") => FieldMeta {
            strategy: Strategy::Merge,
            merge_key: None,
            ty: Ty::Unknown,
        },
        (Ty::ObjectMeta, "ownerReferences") => merge("uid", Ty::Unknown),
        (Ty::PodSpec, "containers" | "initContainers" | "ephemeralContainers") => {
            merge("name", Ty::Container)
        }
        (Ty::PodSpec, "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates") => {
            merge("name", Ty::Unknown)
        }
        (Ty::PodSpec, "hostAliases") => merge("ip", Ty::Unknown),
        (Ty::PodSpec, "topologySpreadConstraints") => merge("topologyKey", Ty::Unknown),
        (Ty::Container, "ports") => merge("containerPort", Ty::Unknown),
        (Ty::Container, "env") => merge("name", Ty::Unknown),
        (Ty::Container, "volumeMounts") => merge("mountPath", Ty::Unknown),
        (Ty::Container, "volumeDevices") => merge("devicePath", Ty::Unknown),
        (Ty::PodStatus, "conditions") => merge("type", Ty::Unknown),
        (Ty::PodStatus, "podIPs" | "hostIPs") => merge("ip", Ty::Unknown),
        (Ty::PodStatus, "resourceClaimStatuses") => merge("name", Ty::Unknown),
        _ => UNKNOWN,
    }
}

/// Patch metadata for a whole object of a built-in kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchMeta {
    pub(crate) root: Ty,
}

impl PatchMeta {
    /// The metadata for a built-in `group`/`kind` served by the embedded
    /// server; `None` for kinds strategic merge patch does not support
    /// (custom resources: the real server answers 415).
    pub fn for_kind(group: &str, kind: &str) -> Option<PatchMeta> {
        let root = match (group, kind) {
            ("", "Pod") => Ty::Pod,
            ("", "PodTemplate") => Ty::PodTemplate,
            ("", "Service") => Ty::Service,
            ("", "Namespace") => Ty::Namespace,
            ("", "ServiceAccount") => Ty::ServiceAccount,
            ("", "ReplicationController")
            | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
            | ("batch", "Job" | "CronJob") => Ty::Workload,
            (
                "",
                "ConfigMap"
                | "Secret"
                | "Event"
                | "PersistentVolumeClaim"
                | "Endpoints"
                | "LimitRange"
                | "ResourceQuota",
            )
            | ("events.k8s.io", "Event")
            | ("coordination.k8s.io", "Lease")
            | ("apiextensions.k8s.io", "CustomResourceDefinition")
            | (
                "rbac.authorization.k8s.io",
                "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding",
            ) => Ty::Generic,
            _ => return None,
        };
        Some(PatchMeta { root })
    }

    /// Metadata that knows no tags (every list replaced).
    pub fn untyped() -> PatchMeta {
        PatchMeta { root: Ty::Unknown }
    }
}
