//! The pure modules chained the way the server uses them on writes.

use embedded_apiserver::defaults::{apply_builtin_defaults, prepare_for_create, RangeAllocator};
use embedded_apiserver::schema::{
    invalid_message, strict_field_validation_message, StructuralSchema,
};
use embedded_apiserver::ssa::{self, ApplyOptions, BuiltinSchema, CrdSchema};
use embedded_apiserver::strategic_merge::{self, PatchMeta};
use serde_json::{json, Value};

fn crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "color": {"type": "string", "default": "blue", "enum": ["blue", "red"]}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})
}

#[test]
fn custom_resource_write_pipeline() {
    let schema = StructuralSchema::from_crd(&crd(), "v1").unwrap().unwrap();
    let mut obj = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"size": 0, "shape": "round"}});

    let pruned = schema.prune(&mut obj);
    assert_eq!(pruned, vec!["spec.shape"]);
    assert_eq!(
        strict_field_validation_message("Widget", "v1", &pruned),
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"spec.shape\""
    );
    schema.apply_defaults(&mut obj);
    assert_eq!(obj["spec"]["color"], "blue");
    let errs = schema.validate(&obj);
    assert_eq!(
        invalid_message("Widget.example.com", "w", &errs),
        "Widget.example.com \"w\" is invalid: spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"
    );
    let causes: Vec<Value> = errs.iter().map(|e| e.to_cause()).collect();
    assert_eq!(causes[0]["reason"], "FieldValueInvalid");
    assert_eq!(causes[0]["field"], "spec.size");

    // Server-side apply against the CRD schema.
    obj["spec"]["size"] = json!(2);
    let created = ssa::record_update(
        None,
        &obj,
        "kubectl-create",
        None,
        "2024-01-01T00:00:00Z",
        &CrdSchema::new(&schema),
    );
    let applied = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"}, "spec": {"size": 3}});
    let err = ssa::apply(
        Some(&created),
        &applied,
        &ApplyOptions {
            manager: "ctl",
            force: false,
            now: "2024-01-01T00:01:00Z",
            subresource: None,
        },
        &CrdSchema::new(&schema),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl-create\" using example.com/v1: .spec.size"
    );
}

#[test]
fn builtin_write_pipeline() {
    let mut alloc = RangeAllocator::default();
    let mut dep = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}});
    apply_builtin_defaults("apps", "v1", "Deployment", &mut dep, &mut alloc).unwrap();
    prepare_for_create("apps", "v1", "Deployment", &mut dep);
    let schema = BuiltinSchema::for_kind("apps", "Deployment");
    let stored = ssa::record_update(
        None,
        &dep,
        "kubectl-create",
        None,
        "2024-01-01T00:00:00Z",
        &schema,
    );
    assert_eq!(
        stored["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );

    // `kubectl patch --type strategic` adding a sidecar, then defaults again.
    let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "proxy"}]}}}});
    let mut patched = strategic_merge::patch(
        &stored,
        &p,
        &PatchMeta::for_kind("apps", "Deployment").unwrap(),
    )
    .unwrap();
    apply_builtin_defaults("apps", "v1", "Deployment", &mut patched, &mut alloc).unwrap();
    let sidecar = &patched["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(sidecar["name"], "sidecar");
    assert_eq!(sidecar["imagePullPolicy"], "Always");
    let updated = ssa::record_update(
        Some(&stored),
        &patched,
        "kubectl-patch",
        None,
        "2024-01-01T00:01:00Z",
        &schema,
    );
    let mf = updated["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(mf.len(), 2);
    assert_eq!(mf[1]["manager"], "kubectl-patch");
    assert!(
        mf[1]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
            .get("k:{\"name\":\"sidecar\"}")
            .is_some()
    );

    // Custom resources have no strategic merge patch.
    assert!(PatchMeta::for_kind("example.com", "Widget").is_none());
}

#[test]
fn service_addresses_are_allocated_after_managed_fields_are_recorded() {
    use embedded_apiserver::defaults::{allocate_service_addresses, apply_defaults_only};
    let mut alloc = RangeAllocator::default();
    let mut svc = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}});
    apply_defaults_only("", "v1", "Service", &mut svc);
    assert!(svc["spec"].get("clusterIP").is_none());
    let mut svc = ssa::record_update(
        None,
        &svc,
        "kubectl-create",
        None,
        "2024-01-01T00:00:00Z",
        &BuiltinSchema::for_kind("", "Service"),
    );
    allocate_service_addresses(&mut svc, &mut alloc).unwrap();
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.2");
    let fields = &svc["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"];
    assert_eq!(
        fields,
        &json!({"f:internalTrafficPolicy": {}, "f:ports": {".": {},
                    "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
                "f:selector": {}, "f:sessionAffinity": {}, "f:type": {}})
    );
}
