//! `merge_for_cli`: the pure part of `metacontroller merge`.

use metacontroller_apply::{last_applied::ANNOTATION, merge_for_cli, prepare_create};
use serde_json::{json, Value};

fn desired() -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"},
           "spec": {"items": [{"name": "a", "v": 1}]}})
}

fn crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "spec": {"group": "example.com", "versions": [{"name": "v1", "served": true,
            "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"items": {"type": "array",
                    "x-kubernetes-list-type": "atomic"}}}}}}}]}})
}

#[test]
fn observed_null_means_create() {
    let out = merge_for_cli(&Value::Null, &desired(), None, None).unwrap();
    assert!(out.update);
    assert_eq!(out.merged, prepare_create(&desired()).unwrap());
}

#[test]
fn last_applied_defaults_to_the_annotation() {
    let mut observed = prepare_create(&desired()).unwrap();
    observed["spec"]["items"][0]["foreign"] = json!(true);
    observed["spec"]["items"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "b"}));
    let out = merge_for_cli(&observed, &desired(), None, None).unwrap();
    assert!(!out.update);
    // Explicit last-applied overrides it: with an empty record nothing is removed either, but
    // the recorded annotation matches, so still no update.
    let out = merge_for_cli(&observed, &desired(), Some(&json!({})), None).unwrap();
    assert!(!out.update);
    // Desired drops item a: with the record it goes, foreign b stays.
    let mut d = desired();
    d["spec"]["items"] = json!([]);
    let out = merge_for_cli(&observed, &d, None, None).unwrap();
    assert!(out.update);
    assert_eq!(out.merged["spec"]["items"], json!([{"name": "b"}]));
    // With `null` as the explicit record, nothing is known to be ours: a stays.
    let out = merge_for_cli(&observed, &d, Some(&Value::Null), None).unwrap();
    assert_eq!(out.merged["spec"]["items"].as_array().unwrap().len(), 2);
}

#[test]
fn schema_forms_are_detected() {
    let mut observed = prepare_create(&desired()).unwrap();
    observed["spec"]["items"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "foreign"}));
    let crd = crd();
    let bare = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema")
        .unwrap()
        .clone();
    let version_schema = crd.pointer("/spec/versions/0/schema").unwrap().clone();
    let openapi = json!({"openapi": "3.0.0", "components": {"schemas": {
        "com.example.v1.Thing": {
            "x-kubernetes-group-version-kind": [{"group": "example.com", "version": "v1", "kind": "Thing"}],
            "type": "object", "properties": {"spec": {"$ref": "#/components/schemas/Spec"}}},
        "Spec": {"type": "object", "properties": {"items": {"type": "array",
            "x-kubernetes-list-type": "atomic"}}}}}});
    for schema in [&crd, &bare, &version_schema, &openapi] {
        let out = merge_for_cli(&observed, &desired(), None, Some(schema)).unwrap();
        // Atomic: the foreign item is replaced away.
        assert!(out.update, "{schema}");
        assert_eq!(out.merged["spec"]["items"], json!([{"name": "a", "v": 1}]));
    }
    // Without a schema the foreign item survives.
    let out = merge_for_cli(&observed, &desired(), None, None).unwrap();
    assert!(!out.update);
}

#[test]
fn invalid_input_is_an_error_not_a_panic() {
    assert!(merge_for_cli(&json!({}), &json!("x"), None, None).is_err());
    assert!(merge_for_cli(&json!([]), &desired(), None, None).is_err());
    assert!(merge_for_cli(&json!({}), &desired(), Some(&json!(3)), None).is_err());
    let bad_ann = json!({"metadata": {"annotations": {ANNOTATION: "{oops"}}});
    let err = merge_for_cli(&bad_ann, &desired(), None, None).unwrap_err();
    assert!(err.to_string().contains(ANNOTATION), "{err}");
    let err = merge_for_cli(&json!({}), &desired(), None, Some(&json!("nope"))).unwrap_err();
    assert!(err.to_string().contains("schema"), "{err}");
    let wrong_kind = json!({"components": {"schemas": {}}});
    assert!(merge_for_cli(&json!({}), &desired(), None, Some(&wrong_kind)).is_err());
}
