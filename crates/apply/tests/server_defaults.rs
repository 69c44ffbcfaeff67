//! The merge never plans a write whose only effect the API server would undo by defaulting
//! (issue 33): a default filled inside an atomic map, an atomic list or an un-keyed list is
//! not a change, with or without a schema. A real change of such a value still replaces it
//! whole (upstream's atomic semantics).

use metacontroller_apply::{merge, merge_with_schema, plan, prepare_create, Plan, Schema};
use serde_json::{json, Value};

/// The shape of `/openapi/v3/api/v1` for the fields these tests touch: `ObjectFieldSelector`
/// is an atomic map, `DownwardAPIVolumeSource.items` an atomic list, `env` a list-map by
/// `name`, `volumes` a list-map by `name`.
fn pod_schema() -> Schema {
    let field_ref = json!({"type": "object", "x-kubernetes-map-type": "atomic",
        "properties": {"apiVersion": {"type": "string"}, "fieldPath": {"type": "string"}}});
    Schema::from_openapi_v3_schema(&json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "containers": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "env": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "properties": {
                            "name": {"type": "string"},
                            "valueFrom": {"type": "object", "properties": {
                                "fieldRef": field_ref}}}}}}}},
            "volumes": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "downwardAPI": {"type": "object", "properties": {
                        "items": {"type": "array", "x-kubernetes-list-type": "atomic",
                            "items": {"type": "object", "properties": {
                                "path": {"type": "string"},
                                "fieldRef": field_ref}}}}}}}}}}}}))
    .unwrap()
}

fn desired_pod(field_path: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c", "image": "i",
                "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": field_path}}}]}],
            "volumes": [{"name": "podinfo", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}})
}

/// What the API server stores for a created body: `fieldRef.apiVersion` defaulted to `v1`
/// everywhere, plus the usual server fields.
fn as_stored(created: &Value) -> Value {
    let mut o = created.clone();
    o["metadata"]["uid"] = json!("u1");
    o["metadata"]["resourceVersion"] = json!("5");
    let spec = &mut o["spec"];
    spec["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] = json!("v1");
    spec["containers"][0]["terminationMessagePath"] = json!("/dev/termination-log");
    spec["volumes"][0]["downwardAPI"]["defaultMode"] = json!(420);
    spec["volumes"][0]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"] = json!("v1");
    spec["dnsPolicy"] = json!("ClusterFirst");
    o
}

#[test]
fn a_server_default_inside_an_atomic_map_or_list_is_not_a_change() {
    let schema = pod_schema();
    let desired = desired_pod("spec.nodeName");
    let observed = as_stored(&prepare_create(&desired).unwrap());
    assert_eq!(
        plan(&observed, &desired, Some(&schema)).unwrap(),
        Plan::Unchanged
    );
    // Without a schema too (conventional keys: `name`, `path`).
    assert_eq!(plan(&observed, &desired, None).unwrap(), Plan::Unchanged);
}

#[test]
fn a_changed_field_inside_an_atomic_map_replaces_it_whole() {
    let schema = pod_schema();
    let observed = as_stored(&prepare_create(&desired_pod("spec.nodeName")).unwrap());
    let desired = desired_pod("status.podIP");
    let Plan::Update(merged) = plan(&observed, &desired, Some(&schema)).unwrap() else {
        panic!("a changed fieldPath must be written");
    };
    // Atomic: the whole map is desired's (the server defaults `apiVersion` again).
    assert_eq!(
        merged["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"],
        json!({"fieldPath": "status.podIP"})
    );
    // The untouched atomic list keeps its observed (defaulted) value.
    assert_eq!(
        merged["spec"]["volumes"][0]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"],
        json!("v1")
    );
}

#[test]
fn removing_a_field_we_set_from_an_atomic_map_still_replaces_it() {
    let schema = Schema::from_openapi_v3_schema(&json!({"type": "object", "properties": {
        "sel": {"type": "object", "x-kubernetes-map-type": "atomic"}}}))
    .unwrap();
    let observed = json!({"sel": {"a": "1", "b": "2", "defaulted": "x"}});
    let last = json!({"sel": {"a": "1", "b": "2"}});
    let desired = json!({"sel": {"a": "1"}});
    let got = merge_with_schema(&observed, Some(&last), &desired, &schema).unwrap();
    assert_eq!(got, json!({"sel": {"a": "1"}}));
    // Nothing of ours changed: the defaulted (or foreign) field stays, nothing is written.
    let got = merge_with_schema(&observed, Some(&last), &last, &schema).unwrap();
    assert_eq!(got, observed);
}

#[test]
fn an_atomic_list_is_replaced_when_an_item_of_ours_changes_or_the_length_differs() {
    let schema = Schema::from_openapi_v3_schema(&json!({"type": "object", "properties": {
        "rules": {"type": "array", "x-kubernetes-list-type": "atomic"}}}))
    .unwrap();
    let last = json!({"rules": [{"name": "r", "v": 1}]});
    let observed = json!({"rules": [{"name": "r", "v": 1, "defaulted": true}]});
    // Converged: the default stays.
    let got = merge_with_schema(&observed, Some(&last), &last, &schema).unwrap();
    assert_eq!(got, observed);
    // A field of ours changes: the list becomes desired exactly.
    let desired = json!({"rules": [{"name": "r", "v": 2}]});
    let got = merge_with_schema(&observed, Some(&last), &desired, &schema).unwrap();
    assert_eq!(got, desired);
    // A field of ours is dropped: likewise.
    let desired = json!({"rules": [{"name": "r"}]});
    let got = merge_with_schema(&observed, Some(&last), &desired, &schema).unwrap();
    assert_eq!(got, desired);
    // An item added by others: the atomic list is ours, it goes.
    let observed = json!({"rules": [{"name": "r", "v": 1}, {"name": "foreign"}]});
    let got = merge_with_schema(&observed, Some(&last), &last, &schema).unwrap();
    assert_eq!(got, last);
}

#[test]
fn statefulset_volume_claim_templates_filled_by_the_server_are_not_a_change() {
    // No conventional key at the top of the items (`name` is under `metadata`): un-keyed.
    let desired = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "s"}, "spec": {"volumeClaimTemplates": [{
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}]}});
    let mut observed = prepare_create(&desired).unwrap();
    observed["metadata"]["uid"] = json!("u");
    let vct = &mut observed["spec"]["volumeClaimTemplates"][0];
    vct["apiVersion"] = json!("v1");
    vct["kind"] = json!("PersistentVolumeClaim");
    vct["spec"]["volumeMode"] = json!("Filesystem");
    vct["status"] = json!({"phase": "Pending"});
    assert_eq!(plan(&observed, &desired, None).unwrap(), Plan::Unchanged);
    // A real change (size) still writes the list as desired.
    let mut bigger = desired.clone();
    bigger["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] =
        json!("2Gi");
    let Plan::Update(merged) = plan(&observed, &bigger, None).unwrap() else {
        panic!("a changed template must be written");
    };
    assert_eq!(
        merged["spec"]["volumeClaimTemplates"],
        bigger["spec"]["volumeClaimTemplates"]
    );
}

#[test]
fn network_policy_ports_without_protocol_are_not_a_change() {
    let desired = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "n"}, "spec": {"podSelector": {},
            "ingress": [{"ports": [{"port": 80}, {"port": 443}]}]}});
    let mut observed = prepare_create(&desired).unwrap();
    for p in observed["spec"]["ingress"][0]["ports"]
        .as_array_mut()
        .unwrap()
    {
        p["protocol"] = json!("TCP");
    }
    observed["spec"]["policyTypes"] = json!(["Ingress"]);
    assert_eq!(plan(&observed, &desired, None).unwrap(), Plan::Unchanged);
    let got = merge(&observed, Some(&desired), &desired).unwrap();
    assert_eq!(got, observed);
}

#[test]
fn a_list_of_different_item_types_is_replaced_not_an_error() {
    let schema = Schema::from_openapi_v3_schema(&json!({"type": "object", "properties": {
        "l": {"type": "array", "x-kubernetes-list-type": "atomic"}}}))
    .unwrap();
    let observed = json!({"l": [{"a": 1}]});
    let desired = json!({"l": [[1]]});
    let got = merge_with_schema(&observed, Some(&desired), &desired, &schema).unwrap();
    assert_eq!(got, desired);
    let got = merge(&observed, None, &desired).unwrap();
    assert_eq!(got, desired);
}
