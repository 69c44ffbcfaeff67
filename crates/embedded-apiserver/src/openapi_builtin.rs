//! OpenAPI v3 component schemas of the built-in kinds the server serves, written by hand
//! from the Kubernetes API reference: the object structure down to every list whose merge
//! behaviour Kubernetes declares (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`,
//! `x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key`) and the defaults of list-map
//! key fields (`protocol: TCP`). Clients that merge by schema (kubectl, server-side apply
//! clients, our controller) see the same list semantics as against kube-apiserver. Kinds with
//! a typed schema (`openapi_described`) are served whole, with descriptions, and this table
//! is laid over them; the table alone serves the rest.

use serde_json::{json, Map, Value};

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const POD_TEMPLATE_SPEC: &str = "io.k8s.api.core.v1.PodTemplateSpec";
const POD_SPEC: &str = "io.k8s.api.core.v1.PodSpec";
const CONTAINER: &str = "io.k8s.api.core.v1.Container";
const CONTAINER_PORT: &str = "io.k8s.api.core.v1.ContainerPort";
const SERVICE_SPEC: &str = "io.k8s.api.core.v1.ServiceSpec";
const SERVICE_PORT: &str = "io.k8s.api.core.v1.ServicePort";

fn reference(name: &str) -> Value {
    json!({"allOf": [{"$ref": format!("#/components/schemas/{name}")}]})
}

fn object(props: Value) -> Value {
    json!({"type": "object", "properties": props})
}

/// A list-map keyed by `keys`, merged by `merge_key` under strategic merge patch.
fn list_map(keys: &[&str], merge_key: &str, items: Value) -> Value {
    json!({
        "type": "array",
        "items": items,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": keys,
        "x-kubernetes-patch-merge-key": merge_key,
        "x-kubernetes-patch-strategy": "merge",
    })
}

fn atomic(items: Value) -> Value {
    json!({"type": "array", "items": items, "x-kubernetes-list-type": "atomic"})
}

/// `x-kubernetes-map-type: atomic` (the selectors `ObjectFieldSelector`,
/// `ResourceFieldSelector`, `ConfigMapKeySelector`, `SecretKeySelector`).
fn atomic_map() -> Value {
    json!({"type": "object", "x-kubernetes-map-type": "atomic"})
}

fn string() -> Value {
    json!({"type": "string"})
}

fn any_object() -> Value {
    json!({"type": "object"})
}

/// The shared (non-kind) components.
fn shared() -> Vec<(&'static str, Value)> {
    let named = || object(json!({"name": string()}));
    vec![
        (
            META,
            object(json!({
                "name": string(),
                "namespace": string(),
                "labels": {"type": "object", "additionalProperties": string()},
                "annotations": {"type": "object", "additionalProperties": string()},
                "finalizers": {"type": "array", "items": string(),
                               "x-kubernetes-list-type": "set",
                               "x-kubernetes-patch-strategy": "merge"},
                "ownerReferences": list_map(&["uid"], "uid", object(json!({"uid": string()}))),
                "managedFields": atomic(any_object()),
            })),
        ),
        (
            POD_TEMPLATE_SPEC,
            object(json!({"metadata": reference(META), "spec": reference(POD_SPEC)})),
        ),
        (
            POD_SPEC,
            object(json!({
                "containers": list_map(&["name"], "name", reference(CONTAINER)),
                "initContainers": list_map(&["name"], "name", reference(CONTAINER)),
                "ephemeralContainers": list_map(&["name"], "name", reference(CONTAINER)),
                "volumes": {
                    "type": "array",
                    "items": object(json!({
                        "name": string(),
                        "downwardAPI": object(json!({"items": {"type": "array",
                            "items": object(json!({"fieldRef": atomic_map(),
                                                   "resourceFieldRef": atomic_map()}))}})),
                    })),
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "x-kubernetes-patch-merge-key": "name",
                    "x-kubernetes-patch-strategy": "merge,retainKeys",
                },
                "imagePullSecrets": list_map(&["name"], "name", named()),
                "hostAliases": list_map(&["ip"], "ip", object(json!({"ip": string()}))),
                "topologySpreadConstraints": list_map(
                    &["topologyKey", "whenUnsatisfiable"], "topologyKey",
                    object(json!({"topologyKey": string(), "whenUnsatisfiable": string()}))),
                "resourceClaims": list_map(&["name"], "name", named()),
                "schedulingGates": list_map(&["name"], "name", named()),
                "tolerations": atomic(any_object()),
                "readinessGates": atomic(any_object()),
            })),
        ),
        (
            CONTAINER,
            object(json!({
                "name": string(),
                "image": string(),
                "args": atomic(string()),
                "command": atomic(string()),
                "ports": list_map(&["containerPort", "protocol"], "containerPort",
                                  reference(CONTAINER_PORT)),
                "env": list_map(&["name"], "name", object(json!({
                    "name": string(),
                    "valueFrom": object(json!({
                        "fieldRef": atomic_map(),
                        "resourceFieldRef": atomic_map(),
                        "configMapKeyRef": atomic_map(),
                        "secretKeyRef": atomic_map(),
                    })),
                }))),
                "envFrom": atomic(any_object()),
                "volumeMounts": list_map(&["mountPath"], "mountPath",
                                         object(json!({"mountPath": string()}))),
                "volumeDevices": list_map(&["devicePath"], "devicePath",
                                          object(json!({"devicePath": string()}))),
                "resizePolicy": atomic(any_object()),
            })),
        ),
        (
            CONTAINER_PORT,
            object(json!({
                "containerPort": {"type": "integer", "format": "int32"},
                "name": string(),
                "protocol": {"type": "string", "default": "TCP"},
            })),
        ),
        (
            SERVICE_SPEC,
            object(json!({
                "ports": list_map(&["port", "protocol"], "port", reference(SERVICE_PORT)),
                "clusterIPs": atomic(string()),
                "externalIPs": atomic(string()),
                "ipFamilies": atomic(string()),
                "loadBalancerSourceRanges": atomic(string()),
                "selector": {"type": "object", "additionalProperties": string(),
                             "x-kubernetes-map-type": "atomic"},
            })),
        ),
        (
            SERVICE_PORT,
            object(json!({
                "port": {"type": "integer", "format": "int32"},
                "name": string(),
                "protocol": {"type": "string", "default": "TCP"},
            })),
        ),
    ]
}

/// Conditions keyed by `type`, as most workload statuses declare them.
fn conditions() -> Value {
    list_map(&["type"], "type", object(json!({"type": string()})))
}

/// The `spec` and `status` properties of a built-in kind (beyond metadata).
fn kind_properties(group: &str, kind: &str) -> Option<Value> {
    let template = || json!({"template": reference(POD_TEMPLATE_SPEC)});
    // `LabelSelector` is an atomic map.
    let workload_spec =
        || json!({"template": reference(POD_TEMPLATE_SPEC), "selector": atomic_map()});
    Some(match (group, kind) {
        ("", "Pod") => json!({"spec": reference(POD_SPEC),
                              "status": object(json!({"conditions": conditions()}))}),
        ("", "PodTemplate") => json!({"template": reference(POD_TEMPLATE_SPEC)}),
        ("", "Service") => json!({"spec": reference(SERVICE_SPEC),
                                  "status": object(json!({"conditions": conditions()}))}),
        ("", "ReplicationController") => json!({"spec": object(template())}),
        ("apps", "Deployment" | "ReplicaSet" | "DaemonSet") => json!({
            "spec": object(workload_spec()),
            "status": object(json!({"conditions": conditions()})),
        }),
        ("apps", "StatefulSet") => {
            let mut spec = workload_spec();
            // No list type declared (kube-apiserver 1.28): un-keyed, replaced whole.
            spec["volumeClaimTemplates"] = json!({"type": "array", "items": any_object()});
            json!({"spec": object(spec),
                   "status": object(json!({"conditions": conditions()}))})
        }
        ("batch", "Job") => json!({"spec": object(workload_spec()),
                                   "status": object(json!({"conditions": atomic(any_object())}))}),
        ("networking.k8s.io", "Ingress") => json!({"spec": object(json!({
            "rules": atomic(object(json!({"http": object(json!({
                "paths": atomic(any_object())}))}))),
            "tls": atomic(object(json!({"hosts": atomic(string())}))),
        }))}),
        ("autoscaling", "HorizontalPodAutoscaler") => {
            let rules = || object(json!({"policies": atomic(any_object())}));
            json!({"spec": object(json!({
                "metrics": atomic(any_object()),
                "behavior": object(json!({"scaleUp": rules(), "scaleDown": rules()})),
            })),
            "status": object(json!({"conditions": conditions(),
                                    "currentMetrics": atomic(any_object())}))})
        }
        ("networking.k8s.io", "NetworkPolicy") => {
            json!({"spec": object(json!({"podSelector": atomic_map()}))})
        }
        ("", "PersistentVolumeClaim") => json!({"spec": object(json!({}))}),
        // `LocalObjectReference` and RBAC `Subject`/`RoleRef` are atomic structs.
        ("", "ServiceAccount") => {
            json!({"imagePullSecrets": {"type": "array", "items": atomic_map()}})
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => json!({
            "roleRef": atomic_map(),
            "subjects": {"type": "array", "items": atomic_map()},
        }),
        ("policy", "PodDisruptionBudget") => {
            json!({"spec": object(json!({"selector": atomic_map()})),
            "status": object(json!({"conditions": conditions()}))})
        }
        ("batch", "CronJob") => json!({"spec": object(json!({
            "jobTemplate": object(json!({"metadata": reference(META),
                                         "spec": object(template())})),
        }))}),
        (
            ""
            | "events.k8s.io"
            | "coordination.k8s.io"
            | "rbac.authorization.k8s.io"
            | "apiextensions.k8s.io",
            _,
        ) => json!({}),
        _ => return None,
    })
}

/// The Kubernetes name of a kind's component (`io.k8s.api.apps.v1.Deployment`).
fn component_name(group: &str, version: &str, kind: &str) -> String {
    match group {
        "" => format!("io.k8s.api.core.{version}.{kind}"),
        "apiextensions.k8s.io" => {
            format!("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{version}.{kind}")
        }
        g => {
            let short = g.strip_suffix(".k8s.io").unwrap_or(g).replace('.', "");
            format!("io.k8s.api.{short}.{version}.{kind}")
        }
    }
}

/// Adds the components of the built-in `kinds` of `group`/`version` (and the shared ones
/// they refer to) to `schemas`. Kinds without a table entry are skipped.
pub(crate) fn add_components(
    schemas: &mut Map<String, Value>,
    group: &str,
    version: &str,
    kinds: &[&str],
) {
    let mut any = false;
    let mut described_any = false;
    for kind in kinds {
        let gvk = json!([{"group": group, "version": version, "kind": kind}]);
        let table = kind_properties(group, kind).map(|mut props| {
            if let Some(p) = props.as_object_mut() {
                p.insert("apiVersion".into(), string());
                p.insert("kind".into(), string());
                p.insert("metadata".into(), reference(META));
            }
            object(props)
        });
        // Every kind with a typed schema is served with its descriptions (`kubectl explain`),
        // the table's list semantics laid over it.
        // The described kinds are those of the versions served (HPA: autoscaling/v2 only).
        let described = (version == "v1" || (group, version) == ("autoscaling", "v2"))
            .then(|| crate::openapi_described::described(group, kind))
            .flatten();
        if let Some(d) = described {
            described_any = true;
            for (name, schema) in &d.components {
                schemas
                    .entry(name.clone())
                    .or_insert_with(|| schema.clone());
            }
            if let Some(table) = &table {
                crate::openapi_described::overlay(schemas, &d.name, "", table);
            }
            if let Some(Value::Object(kind_schema)) = schemas.get_mut(&d.name) {
                kind_schema.insert("x-kubernetes-group-version-kind".into(), gvk);
            }
            continue;
        }
        let Some(mut schema) = table else {
            continue;
        };
        any = true;
        schema["x-kubernetes-group-version-kind"] = gvk;
        schemas.insert(component_name(group, version, kind), schema);
    }
    for (name, schema) in shared() {
        if described_any && schemas.contains_key(name) {
            crate::openapi_described::overlay(schemas, name, "", &schema);
        } else if any {
            schemas.entry(name.to_string()).or_insert(schema);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_ports_are_keyed_by_port_and_protocol() {
        let mut schemas = Map::new();
        add_components(&mut schemas, "apps", "v1", &["Deployment"]);
        let d = &schemas["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            d["x-kubernetes-group-version-kind"][0]["kind"],
            json!("Deployment")
        );
        let ports = &schemas[CONTAINER]["properties"]["ports"];
        assert_eq!(
            ports["x-kubernetes-list-map-keys"],
            json!(["containerPort", "protocol"])
        );
        assert_eq!(
            schemas[CONTAINER_PORT]["properties"]["protocol"]["default"],
            json!("TCP")
        );
        let mut none = Map::new();
        add_components(&mut none, "example.com", "v1", &["Thing"]);
        assert!(none.is_empty());
    }
}
