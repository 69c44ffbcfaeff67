//! Full OpenAPI v3 component schemas of built-in kinds, with the descriptions of the
//! Kubernetes API reference, as kube-apiserver serves them (what `kubectl explain` prints).
//!
//! The structure and descriptions come from `k8s-openapi`'s `JsonSchema` implementations
//! (generated from Kubernetes' own OpenAPI documents); those carry no list semantics, so the
//! `x-kubernetes-*` extensions and defaults of the hand-written table in `openapi_builtin`
//! are laid over them, path by path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value};

/// The kind's component name and every component it refers to, transitively.
pub(crate) struct Described {
    pub name: String,
    pub components: Map<String, Value>,
}

fn generate<T: JsonSchema>() -> Described {
    let mut generator: SchemaGenerator = SchemaSettings::openapi3().into_generator();
    let _ = generator.subschema_for::<T>();
    Described {
        name: T::schema_name().into_owned(),
        components: generator.take_definitions(true),
    }
}

fn described_uncached(group: &str, kind: &str) -> Option<Described> {
    use k8s_openapi::api::{
        apps, autoscaling, batch, coordination, core, discovery, events, networking, policy, rbac,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    Some(match (group, kind) {
        ("", "Namespace") => generate::<core::v1::Namespace>(),
        ("", "ConfigMap") => generate::<core::v1::ConfigMap>(),
        ("", "Secret") => generate::<core::v1::Secret>(),
        ("", "LimitRange") => generate::<core::v1::LimitRange>(),
        ("", "ResourceQuota") => generate::<core::v1::ResourceQuota>(),
        ("autoscaling", "HorizontalPodAutoscaler") => {
            generate::<autoscaling::v2::HorizontalPodAutoscaler>()
        }
        ("", "Service") => generate::<core::v1::Service>(),
        ("", "Pod") => generate::<core::v1::Pod>(),
        ("", "PodTemplate") => generate::<core::v1::PodTemplate>(),
        ("", "ReplicationController") => generate::<core::v1::ReplicationController>(),
        ("", "ServiceAccount") => generate::<core::v1::ServiceAccount>(),
        ("", "Node") => generate::<core::v1::Node>(),
        ("", "Event") => generate::<core::v1::Event>(),
        ("", "Endpoints") => generate::<core::v1::Endpoints>(),
        ("", "PersistentVolumeClaim") => generate::<core::v1::PersistentVolumeClaim>(),
        ("discovery.k8s.io", "EndpointSlice") => generate::<discovery::v1::EndpointSlice>(),
        ("networking.k8s.io", "Ingress") => generate::<networking::v1::Ingress>(),
        ("networking.k8s.io", "NetworkPolicy") => generate::<networking::v1::NetworkPolicy>(),
        ("events.k8s.io", "Event") => generate::<events::v1::Event>(),
        ("coordination.k8s.io", "Lease") => generate::<coordination::v1::Lease>(),
        ("apps", "Deployment") => generate::<apps::v1::Deployment>(),
        ("apps", "ReplicaSet") => generate::<apps::v1::ReplicaSet>(),
        ("apps", "StatefulSet") => generate::<apps::v1::StatefulSet>(),
        ("apps", "DaemonSet") => generate::<apps::v1::DaemonSet>(),
        ("apps", "ControllerRevision") => generate::<apps::v1::ControllerRevision>(),
        ("policy", "PodDisruptionBudget") => generate::<policy::v1::PodDisruptionBudget>(),
        ("batch", "Job") => generate::<batch::v1::Job>(),
        ("batch", "CronJob") => generate::<batch::v1::CronJob>(),
        ("rbac.authorization.k8s.io", "Role") => generate::<rbac::v1::Role>(),
        ("rbac.authorization.k8s.io", "RoleBinding") => generate::<rbac::v1::RoleBinding>(),
        ("rbac.authorization.k8s.io", "ClusterRole") => generate::<rbac::v1::ClusterRole>(),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            generate::<rbac::v1::ClusterRoleBinding>()
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            generate::<apiextensions::CustomResourceDefinition>()
        }
        _ => return None,
    })
}

/// Described kinds by (group, kind); `None` for a kind without a typed schema.
type Cache = Mutex<HashMap<(String, String), Option<Arc<Described>>>>;

/// The described components of a built-in kind, generated once per process.
pub(crate) fn described(group: &str, kind: &str) -> Option<Arc<Described>> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (group.to_string(), kind.to_string());
    if let Some(hit) = cache.lock().ok()?.get(&key) {
        return hit.clone();
    }
    let made = described_uncached(group, kind).map(Arc::new);
    if let Ok(mut c) = cache.lock() {
        c.insert(key, made.clone());
    }
    made
}

/// Name of the component a schema node refers to (`$ref` or kube's `allOf: [{$ref}]`).
fn referenced(node: &Value) -> Option<String> {
    let reference = node
        .get("$ref")
        .or_else(|| node.pointer("/allOf/0/$ref"))?
        .as_str()?;
    Some(reference.rsplit('/').next()?.to_string())
}

/// Lays the list semantics and defaults of `table` (a hand-written schema node) over the node
/// at `pointer` of component `name` in `components`, following references where the
/// generated schema refers to another component and the table spells the structure inline.
pub(crate) fn overlay(
    components: &mut Map<String, Value>,
    name: &str,
    pointer: &str,
    table: &Value,
) {
    let Some(target) = components
        .get(name)
        .and_then(|c| c.pointer(pointer))
        .cloned()
    else {
        return;
    };
    if let (Some(next), true) = (referenced(&target), table.get("properties").is_some()) {
        if next != name || !pointer.is_empty() {
            overlay(components, &next, "", table);
        }
        return;
    }
    let Some(table_obj) = table.as_object() else {
        return;
    };
    if let Some(node) = components
        .get_mut(name)
        .and_then(|c| c.pointer_mut(pointer))
        .and_then(Value::as_object_mut)
    {
        for (k, v) in table_obj {
            if k.starts_with("x-kubernetes-") || k == "default" {
                node.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(props) = table.get("properties").and_then(Value::as_object) {
        for (p, sub) in props {
            let escaped = p.replace('~', "~0").replace('/', "~1");
            overlay(
                components,
                name,
                &format!("{pointer}/properties/{escaped}"),
                sub,
            );
        }
    }
    if let Some(items) = table.get("items") {
        if referenced(items).is_none() {
            overlay(components, name, &format!("{pointer}/items"), items);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_replicas_has_its_reference_description() {
        let d = described("apps", "Deployment").expect("Deployment");
        assert_eq!(d.name, "io.k8s.api.apps.v1.Deployment");
        let spec = &d.components["io.k8s.api.apps.v1.DeploymentSpec"];
        let replicas = spec["properties"]["replicas"]["description"]
            .as_str()
            .unwrap_or_default();
        assert!(replicas.contains("Number of desired pods"), "{spec}");
        assert!(d.components.contains_key("io.k8s.api.core.v1.Container"));
        assert!(described("example.com", "Widget").is_none());
    }
}
