//! Schema-aware merge with the shape of a real API server OpenAPI v3 document
//! (`/openapi/v3/apis/apps/v1`): `allOf`-wrapped `$ref`s, list-map keys with defaults,
//! strategic-merge metadata, atomic lists.

use metacontroller_apply::{last_applied, merge_for_cli, merge_with_schema, Schema};
use serde_json::{json, Value};

fn apps_v1_doc() -> Value {
    json!({
        "openapi": "3.0.0",
        "components": {"schemas": {
            "io.k8s.api.apps.v1.Deployment": {
                "type": "object",
                "x-kubernetes-group-version-kind": [
                    {"group": "apps", "kind": "Deployment", "version": "v1"}],
                "properties": {
                    "spec": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"}], "default": {}}
                }
            },
            "io.k8s.api.apps.v1.DeploymentSpec": {
                "type": "object",
                "properties": {
                    "template": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodTemplateSpec"}], "default": {}}
                }
            },
            "io.k8s.api.core.v1.PodTemplateSpec": {
                "type": "object",
                "properties": {"spec": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}], "default": {}}}
            },
            "io.k8s.api.core.v1.PodSpec": {
                "type": "object",
                "properties": {
                    "containers": {
                        "type": "array",
                        "items": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"}], "default": {}},
                        "x-kubernetes-list-map-keys": ["name"],
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-patch-merge-key": "name",
                        "x-kubernetes-patch-strategy": "merge"
                    },
                    "tolerations": {
                        "type": "array",
                        "items": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.Toleration"}], "default": {}},
                        "x-kubernetes-list-type": "atomic"
                    }
                }
            },
            "io.k8s.api.core.v1.Container": {
                "type": "object",
                "properties": {
                    "args": {"type": "array", "items": {"type": "string", "default": ""},
                             "x-kubernetes-list-type": "atomic"},
                    "ports": {
                        "type": "array",
                        "items": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.ContainerPort"}], "default": {}},
                        "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-patch-merge-key": "containerPort",
                        "x-kubernetes-patch-strategy": "merge"
                    }
                }
            },
            "io.k8s.api.core.v1.ContainerPort": {
                "type": "object",
                "required": ["containerPort"],
                "properties": {
                    "containerPort": {"type": "integer", "format": "int32", "default": 0},
                    "name": {"type": "string"},
                    "protocol": {"type": "string", "default": "TCP"}
                }
            },
            "io.k8s.api.core.v1.Toleration": {
                "type": "object",
                "properties": {"key": {"type": "string"}, "operator": {"type": "string"}}
            }
        }}
    })
}

fn deployment(containers: Value, tolerations: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
           "spec": {"template": {"spec": {"containers": containers, "tolerations": tolerations}}}})
}

#[test]
fn tcp_and_udp_on_one_port_with_defaulted_protocol() {
    let schema = Schema::from_openapi_v3(&apps_v1_doc(), "apps", "v1", "Deployment").unwrap();
    // The server stored protocol TCP (defaulted) next to a UDP port someone else added.
    let observed = deployment(
        json!([{"name": "dns", "ports": [
            {"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"},
            {"containerPort": 53, "protocol": "UDP", "name": "dns-udp"}]}]),
        json!([]),
    );
    let last = deployment(
        json!([{"name": "dns", "ports": [{"containerPort": 53, "name": "dns-tcp"}]}]),
        json!([]),
    );
    let desired = deployment(
        json!([{"name": "dns", "ports": [{"containerPort": 53, "name": "dns"}]}]),
        json!([]),
    );
    let merged = merge_with_schema(&observed, Some(&last), &desired, &schema).unwrap();
    assert_eq!(
        merged["spec"]["template"]["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 53, "protocol": "TCP", "name": "dns"},
               {"containerPort": 53, "protocol": "UDP", "name": "dns-udp"}])
    );
    // Conventions alone key by containerPort, which repeats: the list is left as it is (both
    // entries kept, the rename not applied).
    let conventional = metacontroller_apply::merge(&observed, Some(&last), &desired).unwrap();
    assert_eq!(
        conventional["spec"]["template"]["spec"]["containers"][0]["ports"],
        observed["spec"]["template"]["spec"]["containers"][0]["ports"]
    );
}

#[test]
fn atomic_tolerations_from_the_document() {
    let doc = apps_v1_doc();
    let mut observed = deployment(
        json!([{"name": "a"}]),
        json!([{"key": "mine", "operator": "Exists"}, {"key": "injected", "operator": "Exists"}]),
    );
    last_applied::set(
        &mut observed,
        &deployment(
            json!([{"name": "a"}]),
            json!([{"key": "mine", "operator": "Exists"}]),
        ),
    )
    .unwrap();
    let desired = deployment(
        json!([{"name": "a"}]),
        json!([{"key": "mine", "operator": "Exists"}]),
    );
    // With the document: atomic, so the injected toleration is replaced away.
    let out = merge_for_cli(&observed, &desired, None, Some(&doc)).unwrap();
    assert!(out.update);
    assert_eq!(
        out.merged["spec"]["template"]["spec"]["tolerations"],
        json!([{"key": "mine", "operator": "Exists"}])
    );
    // Without it: tolerations have no conventional key either (key is not one), so upstream
    // replaces them too — same result, and the same decision.
    let out = merge_for_cli(&observed, &desired, None, None).unwrap();
    assert!(out.update);
    assert_eq!(
        out.merged["spec"]["template"]["spec"]["tolerations"],
        json!([{"key": "mine", "operator": "Exists"}])
    );
}
