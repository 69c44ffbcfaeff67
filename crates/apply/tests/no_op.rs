//! `needs_update`: what counts as a change.

use metacontroller_apply::{last_applied::ANNOTATION, needs_update};
use serde_json::{json, Value};

fn base() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "resourceVersion": "1", "uid": "u", "generation": 1,
                     "creationTimestamp": "t", "managedFields": [], "selfLink": "/x",
                     "annotations": {ANNOTATION: "{\"a\":1,\"b\":[1,2]}"}},
        "spec": {"containers": [{"name": "c", "image": "i",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}},
            "volumeMounts": []}],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}}],
            "replicas": 3},
        "status": {"phase": "Running"}
    })
}

fn with(mut v: Value, pointer: &str, new: Value) -> Value {
    *v.pointer_mut(pointer).unwrap() = new;
    v
}

#[test]
fn identical_is_no_update() {
    assert!(!needs_update(&base(), &base()));
}

#[test]
fn server_populated_metadata_and_status_are_ignored() {
    let mut m = base();
    for f in [
        "resourceVersion",
        "uid",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
    ] {
        m["metadata"].as_object_mut().unwrap().remove(f);
    }
    m["metadata"]["resourceVersion"] = json!("999");
    m["status"] = json!({"phase": "Pending"});
    assert!(!needs_update(&base(), &m));
}

#[test]
fn numbers_and_quantities_compare_by_value() {
    let b = base();
    assert!(!needs_update(
        &b,
        &with(b.clone(), "/spec/replicas", json!(3.0))
    ));
    assert!(needs_update(
        &b,
        &with(b.clone(), "/spec/replicas", json!(4))
    ));
    let q = "/spec/containers/0/resources/limits/cpu";
    assert!(!needs_update(&b, &with(b.clone(), q, json!("1000m"))));
    assert!(!needs_update(&b, &with(b.clone(), q, json!(1))));
    assert!(needs_update(&b, &with(b.clone(), q, json!("1001m"))));
    let mem = "/spec/containers/0/resources/limits/memory";
    assert!(!needs_update(&b, &with(b.clone(), mem, json!("1024Mi"))));
    assert!(!needs_update(
        &b,
        &with(b.clone(), mem, json!("1073741824"))
    ));
    assert!(needs_update(&b, &with(b.clone(), mem, json!("1G"))));
    let req = "/spec/containers/0/resources/requests/cpu";
    assert!(!needs_update(&b, &with(b.clone(), req, json!("0.5"))));
    let size = "/spec/volumes/0/emptyDir/sizeLimit";
    assert!(!needs_update(&b, &with(b.clone(), size, json!("1024Mi"))));
    // Outside quantity fields strings are compared as text.
    assert!(needs_update(
        &b,
        &with(b.clone(), "/spec/containers/0/image", json!("i "))
    ));
    let mut label = b.clone();
    label["metadata"]["labels"] = json!({"version": "1.0"});
    let mut label2 = b.clone();
    label2["metadata"]["labels"] = json!({"version": "1"});
    assert!(needs_update(&label, &label2));
}

#[test]
fn empty_values_equal_missing_ones() {
    let b = base();
    let mut m = b.clone();
    m["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("volumeMounts");
    m["spec"]["securityContext"] = json!({});
    m["spec"]["nodeSelector"] = Value::Null;
    assert!(!needs_update(&b, &m));
    // But a present non-empty value is a change.
    m["spec"]["securityContext"] = json!({"runAsUser": 1});
    assert!(needs_update(&b, &m));
    // And an emptied list is a change when the other side has items.
    assert!(needs_update(
        &b,
        &with(b.clone(), "/spec/volumes", json!([]))
    ));
}

#[test]
fn last_applied_annotation_compares_by_meaning() {
    let b = base();
    let a = "/metadata/annotations/metacontroller.k8s.io~1last-applied-configuration";
    assert!(!needs_update(
        &b,
        &with(b.clone(), a, json!("{ \"b\": [1, 2.0], \"a\": 1 }"))
    ));
    assert!(needs_update(
        &b,
        &with(b.clone(), a, json!("{\"a\":1,\"b\":[2,1]}"))
    ));
    assert!(needs_update(&b, &with(b.clone(), a, json!("not json"))));
    // Other annotations are plain strings.
    let mut x = b.clone();
    x["metadata"]["annotations"]["other"] = json!("{\"a\":1}");
    let mut y = b.clone();
    y["metadata"]["annotations"]["other"] = json!("{ \"a\": 1 }");
    assert!(needs_update(&x, &y));
}

#[test]
fn list_order_and_content_matter() {
    let b = json!({"spec": {"args": ["a", "b"]}});
    assert!(needs_update(&b, &json!({"spec": {"args": ["b", "a"]}})));
    assert!(needs_update(&b, &json!({"spec": {"args": ["a"]}})));
    assert!(!needs_update(&b, &json!({"spec": {"args": ["a", "b"]}})));
}

#[test]
fn non_objects_compare_plainly() {
    assert!(!needs_update(&json!(1), &json!(1.0)));
    assert!(needs_update(&json!([1]), &json!({})));
}
