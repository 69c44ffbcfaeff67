//! Fields the API server stores in another form than written (issue 43): a converged child
//! whose desired object writes them that way plans no write, in client-side apply (with and
//! without a schema) and in server-side apply's in-place check; a change of ours still
//! writes. The stored objects are what kube-apiserver 1.28.7 answered for these creates.

use metacontroller_apply::{plan, prepare_create, ssa, Plan, Schema};
use serde_json::{json, Value};

/// `created` (the body we sent) as the server stored it: `edits` replace values by pointer.
fn stored(created: &Value, edits: &[(&str, Value)]) -> Value {
    let mut obj = created.clone();
    for (pointer, v) in edits {
        let (parent, key) = pointer.rsplit_once('/').expect("pointer");
        let target = obj.pointer_mut(parent).expect("parent exists");
        match target {
            Value::Object(m) if v.is_null() => {
                m.remove(key);
            }
            Value::Object(m) => {
                m.insert(key.to_string(), v.clone());
            }
            other => panic!("{parent} is not an object: {other}"),
        }
    }
    obj["metadata"]["resourceVersion"] = json!("7");
    obj
}

/// No write in every mode: client-side with `schema` and without, server-side apply.
fn assert_quiet(observed: &Value, desired: &Value, schema: Option<&Schema>) {
    assert_eq!(plan(observed, desired, None).unwrap(), Plan::Unchanged);
    if let Some(s) = schema {
        assert_eq!(plan(observed, desired, Some(s)).unwrap(), Plan::Unchanged);
    }
    let body = ssa::apply_patch_body(desired, Some("ns")).unwrap();
    let mut observed = observed.clone();
    observed["metadata"]["namespace"] = json!("ns");
    assert!(ssa::is_in_place(&observed, &body));
}

fn limit_range(cpu: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "l"},
        "spec": {"limits": [{"type": "Container", "default": {"cpu": cpu, "memory": "0.5Gi"},
                             "max": {"cpu": 2}}]}})
}

/// kube-apiserver's schema of `LimitRangeSpec.limits`: no list type, no merge key.
fn limit_range_schema() -> Schema {
    Schema::from_openapi_v3_schema(&json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"limits": {"type": "array", "items": {
            "type": "object", "properties": {"type": {"type": "string"},
                "default": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}}}))
    .unwrap()
}

fn stored_limit_range(created: &Value) -> Value {
    stored(
        created,
        &[
            ("/spec/limits/0/default/cpu", json!("500m")),
            ("/spec/limits/0/default/memory", json!("512Mi")),
            ("/spec/limits/0/max/cpu", json!("2")),
            // SetDefaults_LimitRangeItem.
            (
                "/spec/limits/0/defaultRequest",
                json!({"cpu": "500m", "memory": "512Mi"}),
            ),
        ],
    )
}

#[test]
fn quantities_in_a_list_without_merge_key_in_their_stored_form_are_in_place() {
    let desired = limit_range(json!("0.5"));
    let observed = stored_limit_range(&prepare_create(&desired).unwrap());
    assert_quiet(&observed, &desired, Some(&limit_range_schema()));
    // A number is a quantity too.
    let desired = limit_range(json!(0.5));
    let observed = stored_limit_range(&prepare_create(&desired).unwrap());
    assert_quiet(&observed, &desired, Some(&limit_range_schema()));
}

#[test]
fn a_changed_quantity_is_written() {
    let observed = stored_limit_range(&prepare_create(&limit_range(json!("0.5"))).unwrap());
    let Plan::Update(merged) = plan(&observed, &limit_range(json!("0.75")), None).unwrap() else {
        panic!("a changed limit must be written");
    };
    assert_eq!(merged["spec"]["limits"][0]["default"]["cpu"], "0.75");
    let body = ssa::apply_patch_body(&limit_range(json!("0.75")), None).unwrap();
    assert!(!ssa::is_in_place(&observed, &body));
}

#[test]
fn a_stored_form_we_did_not_write_before_is_written() {
    // Without a record the field is not known to be a quantity: a string field holding
    // `500m` where we want `0.5` (someone else's edit) is set back.
    let desired = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                         "data": {"ratio": "0.5"}});
    let observed = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "resourceVersion": "3"}, "data": {"ratio": "500m"}});
    assert!(matches!(
        plan(&observed, &desired, None).unwrap(),
        Plan::Update(_)
    ));
}

#[test]
fn quantities_in_maps_and_metric_targets_in_their_stored_form_are_in_place() {
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
        "spec": {"hard": {"requests.storage": "0.5Ti", "services": 20, "count/configmaps": "1e2"}}});
    let observed = stored(
        &prepare_create(&quota).unwrap(),
        &[(
            "/spec/hard",
            json!({"requests.storage": "512Gi", "services": "20", "count/configmaps": "100"}),
        )],
    );
    assert_quiet(&observed, &quota, None);
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "h"}, "spec": {"maxReplicas": 3, "metrics": [
            {"type": "Pods", "pods": {"metric": {"name": "qps"},
                "target": {"type": "AverageValue", "averageValue": "1.5k"}}},
            {"type": "External", "external": {"metric": {"name": "q"},
                "target": {"type": "Value", "value": "2048Mi"}}}]}});
    let observed = stored(
        &prepare_create(&hpa).unwrap(),
        &[
            ("/spec/metrics/0/pods/target/averageValue", json!("1500")),
            ("/spec/metrics/1/external/target/value", json!("2Gi")),
            ("/spec/minReplicas", json!(1)),
        ],
    );
    assert_quiet(&observed, &hpa, None);
}

fn secret(greeting: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "stringData": {"greeting": greeting},
        "data": {"wrapped": "QUJD\nREVG", "odd": "QR=="}})
}

fn stored_secret(created: &Value) -> Value {
    stored(
        created,
        &[
            ("/stringData", Value::Null),
            (
                "/data",
                json!({"greeting": "aGVsbG8=", "wrapped": "QUJDREVG", "odd": "QQ=="}),
            ),
            ("/type", json!("Opaque")),
        ],
    )
}

#[test]
fn secret_string_data_folded_into_data_is_in_place() {
    let observed = stored_secret(&prepare_create(&secret("hello")).unwrap());
    assert_quiet(&observed, &secret("hello"), None);
}

#[test]
fn changed_string_data_is_written() {
    let observed = stored_secret(&prepare_create(&secret("hello")).unwrap());
    let Plan::Update(merged) = plan(&observed, &secret("bye"), None).unwrap() else {
        panic!("changed stringData must be written");
    };
    // Written in the form the server stores it.
    assert_eq!(merged["data"]["greeting"], json!("Ynll"));
    assert!(merged.get("stringData").is_none());
    let body = ssa::apply_patch_body(&secret("bye"), None).unwrap();
    assert!(!ssa::is_in_place(&observed, &body));
}

/// A hook setting the same key in `data` and `stringData` (issue 51): the server stores
/// `data[k] = base64(stringData[k])`.
fn overlapping_secret(k: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "data": {"k": "YQ==", "other": "eA=="}, "stringData": {"k": k}})
}

fn stored_overlapping(created: &Value, k_base64: &str) -> Value {
    stored(
        created,
        &[
            ("/stringData", Value::Null),
            ("/data", json!({"k": k_base64, "other": "eA=="})),
            ("/type", json!("Opaque")),
        ],
    )
}

#[test]
fn a_key_in_data_and_string_data_is_in_place_as_the_server_stores_it() {
    let observed = stored_overlapping(&prepare_create(&overlapping_secret("b")).unwrap(), "Yg==");
    assert_quiet(&observed, &overlapping_secret("b"), None);
}

#[test]
fn a_key_in_data_and_string_data_is_never_removed() {
    // Someone else changed the key: the write puts back stringData's value, never drops it.
    let observed = stored_overlapping(&prepare_create(&overlapping_secret("b")).unwrap(), "eg==");
    let Plan::Update(merged) = plan(&observed, &overlapping_secret("b"), None).unwrap() else {
        panic!("a changed key must be written");
    };
    assert_eq!(merged["data"], json!({"k": "Yg==", "other": "eA=="}));
    // A new stringData value is written as its encoding.
    let observed = stored_overlapping(&prepare_create(&overlapping_secret("b")).unwrap(), "Yg==");
    let Plan::Update(merged) = plan(&observed, &overlapping_secret("c"), None).unwrap() else {
        panic!("a changed stringData value must be written");
    };
    assert_eq!(merged["data"], json!({"k": "Yw==", "other": "eA=="}));
}

#[test]
fn a_key_no_longer_set_through_string_data_is_removed_from_data() {
    let created = prepare_create(&secret("hello")).unwrap();
    let observed = stored_secret(&created);
    let mut desired = secret("hello");
    desired.as_object_mut().unwrap().remove("stringData");
    let Plan::Update(merged) = plan(&observed, &desired, None).unwrap() else {
        panic!("the key we stopped setting must be removed");
    };
    assert_eq!(
        merged["data"],
        json!({"wrapped": "QUJDREVG", "odd": "QQ=="})
    );
}

#[test]
fn binary_data_re_encoded_by_the_server_is_in_place() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
        "data": {"a": "1"}, "binaryData": {"wrapped": "AAEC\nAw==", "odd": "QR=="}});
    let observed = stored(
        &prepare_create(&cm).unwrap(),
        &[("/binaryData", json!({"wrapped": "AAECAw==", "odd": "QQ=="}))],
    );
    assert_quiet(&observed, &cm, None);
    // Other bytes are a change.
    let mut changed = cm.clone();
    changed["binaryData"]["odd"] = json!("Qg==");
    assert!(matches!(
        plan(&observed, &changed, None).unwrap(),
        Plan::Update(_)
    ));
}
