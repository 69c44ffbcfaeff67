//! One test per merge rule of issue #4 (and upstream Metacontroller's own table tests).

use metacontroller_apply::{
    apply_update, last_applied, merge, merge_with_schema, needs_update, plan_update, ApplyError,
    Schema,
};
use serde_json::{json, Value};

fn m(observed: Value, last: Value, desired: Value) -> Value {
    merge(&observed, Some(&last), &desired).unwrap()
}

#[test]
fn scalars_keep_remove_replace_add() {
    // Upstream's "scalars" case.
    let got = m(
        json!({"keep": "other", "remove": "other", "replace": "other"}),
        json!({"remove": "old", "replace": "old"}),
        json!({"replace": "new", "add": "new"}),
    );
    assert_eq!(
        got,
        json!({"replace": "new", "add": "new", "keep": "other"})
    );
}

#[test]
fn nested_objects_merge_recursively() {
    let got = m(
        json!({"update": {"keep": "other", "remove": "other"}}),
        json!({"update": {"remove": "old", "replace": "old"}}),
        json!({"update": {"replace": "new", "add": "new"}}),
    );
    assert_eq!(
        got,
        json!({"update": {"replace": "new", "add": "new", "keep": "other"}})
    );
}

#[test]
fn field_dropped_from_desired_is_removed_whole() {
    let got = m(
        json!({"spec": {"a": {"x": 1, "foreign": 2}, "b": 1}}),
        json!({"spec": {"a": {"x": 1}, "b": 1}}),
        json!({"spec": {"b": 1}}),
    );
    assert_eq!(got, json!({"spec": {"b": 1}}));
}

#[test]
fn scalar_lists_and_mixed_lists_are_replaced() {
    let got = m(
        json!({"list": [1, 2, 3, {"a": true}]}),
        json!({"list": [4, 5, 6]}),
        json!({"list": [7, 8, 9, {"b": false}]}),
    );
    assert_eq!(got, json!({"list": [7, 8, 9, {"b": false}]}));
}

#[test]
fn list_maps_merge_item_by_item() {
    // Upstream's "merge list-map" case.
    let got = m(
        json!({
            "listMap": [
                {"name": "keep", "value": "other"},
                {"name": "remove", "value": "other"},
                {"name": "merge", "nested": {"keep": "other"}}
            ],
            "ports1": [{"port": 80, "keep": "other"}],
            "ports2": [{"containerPort": 80, "keep": "other"}]
        }),
        json!({
            "listMap": [{"name": "remove", "value": "old"}],
            "ports1": [{"port": 80, "remove": "old"}]
        }),
        json!({
            "listMap": [
                {"name": "add", "value": "new"},
                {"name": "merge", "nested": {"add": "new"}}
            ],
            "ports1": [{"port": 80, "add": "new"}, {"port": 90}],
            "ports2": [{"containerPort": 80}, {"containerPort": 90}]
        }),
    );
    assert_eq!(
        got,
        json!({
            "listMap": [
                {"name": "keep", "value": "other"},
                {"name": "merge", "nested": {"keep": "other", "add": "new"}},
                {"name": "add", "value": "new"}
            ],
            "ports1": [{"port": 80, "keep": "other", "add": "new"}, {"port": 90}],
            "ports2": [{"containerPort": 80, "keep": "other"}, {"containerPort": 90}]
        })
    );
}

#[test]
fn list_of_objects_without_a_common_key_is_replaced() {
    // Upstream's "replace list of objects that's not a list-map" case: one observed item lacks
    // the key, so the whole list is atomic.
    let got = m(
        json!({"notListMap": [
            {"name": "keep", "value": "other"},
            {"notName": "remove", "value": "other"},
            {"name": "merge", "nested": {"keep": "other"}}
        ]}),
        json!({"notListMap": [{"name": "remove", "value": "old"}]}),
        json!({"notListMap": [
            {"name": "add", "value": "new"},
            {"name": "merge", "nested": {"add": "new"}}
        ]}),
    );
    assert_eq!(
        got,
        json!({"notListMap": [
            {"name": "add", "value": "new"},
            {"name": "merge", "nested": {"add": "new"}}
        ]})
    );
}

#[test]
fn conventional_key_priority_is_upstream_order() {
    // Both containerPort and name are common: containerPort wins, so the two items with the
    // same name but different ports are distinct.
    let got = m(
        json!({"ports": [{"containerPort": 80, "name": "web", "x": 1}]}),
        json!({}),
        json!({"ports": [{"containerPort": 81, "name": "web"}]}),
    );
    assert_eq!(
        got,
        json!({"ports": [{"containerPort": 80, "name": "web", "x": 1},
                         {"containerPort": 81, "name": "web"}]})
    );
    // mountPath beats name.
    let got = m(
        json!({"vm": [{"mountPath": "/a", "name": "v"}]}),
        json!({"vm": [{"mountPath": "/a", "name": "v"}]}),
        json!({"vm": [{"mountPath": "/b", "name": "v"}]}),
    );
    assert_eq!(got, json!({"vm": [{"mountPath": "/b", "name": "v"}]}));
}

#[test]
fn empty_lists_everywhere_are_replaced_and_empty_desired_keeps_foreign_items() {
    assert_eq!(
        m(json!({"l": []}), json!({}), json!({"l": []})),
        json!({"l": []})
    );
    // Desired [] of a list-map: items we applied go, items of others stay (upstream).
    let got = m(
        json!({"l": [{"name": "ours"}, {"name": "theirs"}]}),
        json!({"l": [{"name": "ours"}]}),
        json!({"l": []}),
    );
    assert_eq!(got, json!({"l": [{"name": "theirs"}]}));
}

fn deployment(containers: Value, volumes: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": containers, "volumes": volumes}
            }
        }
    })
}

/// Observed = what the server returns after create: defaults, status, system metadata.
fn as_observed(created: &Value) -> Value {
    let mut o = created.clone();
    o["metadata"]["resourceVersion"] = json!("1001");
    o["metadata"]["uid"] = json!("5c6a");
    o["metadata"]["generation"] = json!(1);
    o["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
    o["spec"]["strategy"] = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}});
    o["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
    if let Some(cs) = o["spec"]["template"]["spec"]["containers"].as_array_mut() {
        for c in cs {
            c["imagePullPolicy"] = json!("IfNotPresent");
            c["terminationMessagePath"] = json!("/dev/termination-log");
        }
    }
    o["status"] = json!({"replicas": 2, "readyReplicas": 2});
    o
}

#[test]
fn sidecar_container_and_volume_added_by_others_survive_reapply() {
    let desired = deployment(
        json!([{"name": "app", "image": "app:1", "ports": [{"containerPort": 8080}]}]),
        json!([{"name": "data", "emptyDir": {}}]),
    );
    let created = metacontroller_apply::prepare_create(&desired).unwrap();
    let mut observed = as_observed(&created);
    // Other automation injects a sidecar and its volume.
    let spec = &mut observed["spec"]["template"]["spec"];
    spec["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "istio-proxy", "image": "proxy:1"}));
    spec["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "istio-certs", "secret": {"secretName": "certs"}}));

    // Same desired: nothing to write.
    let plan = plan_update(&observed, &desired, None).unwrap();
    assert!(!plan.update, "no-op re-apply must not write");

    // Changed desired (new image): we write, and the sidecar + volume survive.
    let desired2 = deployment(
        json!([{"name": "app", "image": "app:2", "ports": [{"containerPort": 8080}]}]),
        json!([{"name": "data", "emptyDir": {}}]),
    );
    let plan = plan_update(&observed, &desired2, None).unwrap();
    assert!(plan.update);
    let spec = &plan.merged["spec"]["template"]["spec"];
    assert_eq!(
        spec["containers"],
        json!([
            {"name": "app", "image": "app:2", "ports": [{"containerPort": 8080}],
             "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log"},
            {"name": "istio-proxy", "image": "proxy:1"}
        ])
    );
    assert_eq!(
        spec["volumes"],
        json!([{"name": "data", "emptyDir": {}},
               {"name": "istio-certs", "secret": {"secretName": "certs"}}])
    );
    // Server-owned fields are untouched.
    assert_eq!(plan.merged["status"], observed["status"]);
    assert_eq!(plan.merged["metadata"]["resourceVersion"], json!("1001"));
    assert_eq!(
        plan.merged["spec"]["strategy"],
        observed["spec"]["strategy"]
    );
}

#[test]
fn removing_a_port_removes_only_that_port() {
    let observed = json!({"spec": {"ports": [
        {"port": 80, "targetPort": 8080, "protocol": "TCP"},
        {"port": 443, "targetPort": 8443, "protocol": "TCP"},
        {"port": 9000, "protocol": "TCP", "name": "added-by-someone"}
    ]}});
    let last = json!({"spec": {"ports": [
        {"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 8443}]}});
    let desired = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}]}});
    assert_eq!(
        m(observed, last, desired),
        json!({"spec": {"ports": [
            {"port": 80, "targetPort": 8080, "protocol": "TCP"},
            {"port": 9000, "protocol": "TCP", "name": "added-by-someone"}
        ]}})
    );
}

#[test]
fn reordering_desired_keeps_observed_order_and_appends_new_items_in_desired_order() {
    let observed = json!({"env": [
        {"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}]});
    let last = observed.clone();
    // Reordered only: observed order is kept (upstream), so nothing changes.
    let desired = json!({"env": [
        {"name": "C", "value": "3"}, {"name": "A", "value": "1"}, {"name": "B", "value": "2"}]});
    let got = m(observed.clone(), last.clone(), desired);
    assert_eq!(got, observed);
    assert!(!needs_update(&observed, &got));
    // New items follow existing ones, in desired order.
    let desired = json!({"env": [
        {"name": "Z", "value": "z"}, {"name": "B", "value": "2"}, {"name": "Y", "value": "y"},
        {"name": "A", "value": "1"}, {"name": "C", "value": "3"}]});
    let got = m(observed, last, desired);
    let names: Vec<&str> = got["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["A", "B", "C", "Z", "Y"]);
}

#[test]
fn nested_list_maps_containers_then_ports_by_container_port() {
    let observed = json!({"containers": [
        {"name": "app", "ports": [
            {"containerPort": 80, "protocol": "TCP", "name": "http"},
            {"containerPort": 9090, "protocol": "TCP", "name": "metrics"}]},
        {"name": "sidecar", "ports": [{"containerPort": 15001}]}
    ]});
    let last = json!({"containers": [
        {"name": "app", "ports": [{"containerPort": 80, "name": "http"},
                                  {"containerPort": 9090, "name": "metrics"}]}]});
    let desired = json!({"containers": [
        {"name": "app", "ports": [{"containerPort": 80, "name": "web"},
                                  {"containerPort": 8443, "name": "https"}]}]});
    assert_eq!(
        m(observed, last, desired),
        json!({"containers": [
            {"name": "app", "ports": [
                {"containerPort": 80, "protocol": "TCP", "name": "web"},
                {"containerPort": 8443, "name": "https"}]},
            {"name": "sidecar", "ports": [{"containerPort": 15001}]}
        ]})
    );
}

fn service_schema() -> Schema {
    Schema::from_openapi_v3_schema(&json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["port", "protocol"],
                "items": {"type": "object", "properties": {
                    "port": {"type": "integer"},
                    "protocol": {"type": "string", "default": "TCP"},
                    "name": {"type": "string"}}}
            },
            "hosts": {"type": "array", "x-kubernetes-list-type": "atomic",
                      "items": {"type": "object"}},
            "finalizers": {"type": "array", "x-kubernetes-list-type": "set",
                           "items": {"type": "string"}},
            "rules": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["id"]},
            "selector": {"type": "object", "x-kubernetes-map-type": "atomic"}
        }}}
    }))
    .unwrap()
}

#[test]
fn multi_key_list_map_from_schema() {
    let schema = service_schema();
    // DNS on 53/TCP and 53/UDP: two items (by convention they would collapse on `port`).
    let observed = json!({"spec": {"ports": [
        {"port": 53, "protocol": "UDP", "name": "dns-udp", "nodePort": 30053},
        {"port": 53, "protocol": "TCP", "name": "dns-tcp", "nodePort": 30054},
        {"port": 8080, "protocol": "TCP", "name": "foreign"}
    ]}});
    let last = json!({"spec": {"ports": [
        {"port": 53, "protocol": "UDP", "name": "dns-udp"},
        {"port": 53, "name": "dns-tcp"}]}});
    // Drop the TCP one (declared without protocol: the schema default TCP applies), rename UDP.
    let desired = json!({"spec": {"ports": [{"port": 53, "protocol": "UDP", "name": "dns"}]}});
    let got = merge_with_schema(&observed, Some(&last), &desired, &schema).unwrap();
    assert_eq!(
        got,
        json!({"spec": {"ports": [
            {"port": 53, "protocol": "UDP", "name": "dns", "nodePort": 30053},
            {"port": 8080, "protocol": "TCP", "name": "foreign"}
        ]}})
    );
    // A desired item omitting the defaulted key field meets the observed item the server
    // defaulted: no duplicate, no write.
    let observed = json!({"spec": {"ports": [{"port": 80, "protocol": "TCP", "nodePort": 1}]}});
    let desired = json!({"spec": {"ports": [{"port": 80}]}});
    let got = merge_with_schema(&observed, Some(&desired), &desired, &schema).unwrap();
    assert_eq!(got, observed);
}

#[test]
fn atomic_list_from_schema_is_replaced_even_with_a_conventional_key() {
    let schema = service_schema();
    let observed = json!({"spec": {"hosts": [{"name": "a", "x": 1}, {"name": "foreign"}]}});
    let last = json!({"spec": {"hosts": [{"name": "a"}]}});
    let desired = json!({"spec": {"hosts": [{"name": "a"}, {"name": "b"}]}});
    let got = merge_with_schema(&observed, Some(&last), &desired, &schema).unwrap();
    assert_eq!(
        got,
        json!({"spec": {"hosts": [{"name": "a"}, {"name": "b"}]}})
    );
    // Without the schema the same input merges by name (upstream behaviour).
    let got = merge(&observed, Some(&last), &desired).unwrap();
    assert_eq!(
        got,
        json!({"spec": {"hosts": [{"name": "a", "x": 1}, {"name": "foreign"}, {"name": "b"}]}})
    );
}

#[test]
fn scalar_set_from_schema_merges_values() {
    let schema = service_schema();
    let observed = json!({"spec": {"finalizers": ["foreign", "ours-old", "kept"]}});
    let last = json!({"spec": {"finalizers": ["ours-old", "kept"]}});
    let desired = json!({"spec": {"finalizers": ["kept", "ours-new", "ours-new"]}});
    let got = merge_with_schema(&observed, Some(&last), &desired, &schema).unwrap();
    assert_eq!(
        got,
        json!({"spec": {"finalizers": ["foreign", "kept", "ours-new"]}})
    );
}

#[test]
fn unconventional_key_from_schema() {
    let schema = service_schema();
    let observed = json!({"spec": {"rules": [{"id": 1, "x": "a", "extra": true}, {"id": 2}]}});
    let last = json!({"spec": {"rules": [{"id": 1, "x": "a"}, {"id": 2}]}});
    let desired = json!({"spec": {"rules": [{"id": 1, "x": "b"}, {"id": 3}]}});
    let got = merge_with_schema(&observed, Some(&last), &desired, &schema).unwrap();
    assert_eq!(
        got,
        json!({"spec": {"rules": [{"id": 1, "x": "b", "extra": true}, {"id": 3}]}})
    );
}

#[test]
fn atomic_map_from_schema_is_replaced() {
    let schema = service_schema();
    let observed = json!({"spec": {"selector": {"app": "a", "foreign": "x"}}});
    let desired = json!({"spec": {"selector": {"app": "b"}}});
    let got = merge_with_schema(&observed, Some(&json!({})), &desired, &schema).unwrap();
    assert_eq!(got, json!({"spec": {"selector": {"app": "b"}}}));
}

/// The strategic-merge metadata Kubernetes publishes for `Deployment.spec.strategy` and
/// `PodSpec.volumes` (OpenAPI v3 of apps/v1 and v1).
fn retain_keys_schema() -> Schema {
    Schema::from_openapi_v3_schema(&json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "strategy": {"allOf": [{"type": "object"}], "default": {},
                         "x-kubernetes-patch-strategy": "retainKeys"},
            "template": {"type": "object", "properties": {"spec": {"type": "object",
                "properties": {"volumes": {
                    "type": "array", "items": {"type": "object"},
                    "x-kubernetes-list-map-keys": ["name"], "x-kubernetes-list-type": "map",
                    "x-kubernetes-patch-merge-key": "name",
                    "x-kubernetes-patch-strategy": "merge,retainKeys"}}}}}
        }}}
    }))
    .unwrap()
}

#[test]
fn retain_keys_clears_fields_desired_no_longer_sets_when_the_object_changes() {
    let schema = retain_keys_schema();
    // Switching the strategy type: the server-defaulted `rollingUpdate` must go, or the API
    // server rejects the object (kubectl sends `$retainKeys: [type]`).
    let observed = json!({"spec": {"strategy": {"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}}});
    let last = json!({"spec": {"strategy": {"type": "RollingUpdate"}}});
    let desired = json!({"spec": {"strategy": {"type": "Recreate"}}});
    let got = merge_with_schema(&observed, Some(&last), &desired, &schema).unwrap();
    assert_eq!(got, json!({"spec": {"strategy": {"type": "Recreate"}}}));
    // Without the schema the defaulted field stays (plain three-way merge).
    let got = merge(&observed, Some(&last), &desired).unwrap();
    assert_eq!(got["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    // Unchanged strategy: nothing is cleared, so server defaults cause no write.
    let got = merge_with_schema(&observed, Some(&last), &last, &schema).unwrap();
    assert_eq!(got, observed);
}

#[test]
fn retain_keys_on_a_list_map_applies_to_each_changed_item() {
    let schema = retain_keys_schema();
    let vols = |v: Value| json!({"spec": {"template": {"spec": {"volumes": v}}}});
    // `data` (not in our record, e.g. an adopted object) moves from emptyDir to a configMap:
    // the old volume source is cleared, where a plain three-way merge would keep both (which
    // the API server rejects). `cache` is unchanged and keeps its extra field; `foreign` is
    // someone else's.
    let observed = vols(json!([
        {"name": "data", "emptyDir": {}},
        {"name": "cache", "emptyDir": {"medium": ""}, "x": 1},
        {"name": "foreign", "hostPath": {"path": "/x"}}
    ]));
    let last = vols(json!([{"name": "cache", "emptyDir": {"medium": ""}}]));
    let desired = vols(json!([
        {"name": "data", "configMap": {"name": "cfg"}},
        {"name": "cache", "emptyDir": {"medium": ""}}
    ]));
    let got = merge_with_schema(&observed, Some(&last), &desired, &schema).unwrap();
    assert_eq!(
        got,
        vols(json!([
            {"name": "data", "configMap": {"name": "cfg"}},
            {"name": "cache", "emptyDir": {"medium": ""}, "x": 1},
            {"name": "foreign", "hostPath": {"path": "/x"}}
        ]))
    );
    // The same when observed lists the items in another order (general list-map merge).
    let mut reordered = observed.clone();
    reordered["spec"]["template"]["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .reverse();
    let got = merge_with_schema(&reordered, Some(&last), &desired, &schema).unwrap();
    let items = got["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    let data = items.iter().find(|v| v["name"] == "data").unwrap();
    assert_eq!(data, &json!({"name": "data", "configMap": {"name": "cfg"}}));
    let cache = items.iter().find(|v| v["name"] == "cache").unwrap();
    assert_eq!(cache["x"], 1);
    // Observed holding exactly the desired items in order (the pairwise fast path).
    let aligned = vols(json!([
        {"name": "data", "emptyDir": {}},
        {"name": "cache", "emptyDir": {"medium": ""}, "x": 1}
    ]));
    let got = merge_with_schema(&aligned, Some(&last), &desired, &schema).unwrap();
    assert_eq!(
        got,
        vols(json!([
            {"name": "data", "configMap": {"name": "cfg"}},
            {"name": "cache", "emptyDir": {"medium": ""}, "x": 1}
        ]))
    );
    // Without the schema both volume sources stay.
    let got = merge(&observed, Some(&last), &desired).unwrap();
    let data = &got["spec"]["template"]["spec"]["volumes"][0];
    assert!(
        data["emptyDir"].is_object() && data["configMap"].is_object(),
        "{data}"
    );
}

#[test]
fn null_in_desired_removes_the_field() {
    let got = m(
        json!({"spec": {"a": 1, "b": {"c": 1}, "keep": 1}, "x": [1]}),
        json!({}),
        json!({"spec": {"a": null, "b": null, "new": {"n": null, "v": 1}}, "x": null}),
    );
    assert_eq!(got, json!({"spec": {"keep": 1, "new": {"v": 1}}}));
}

#[test]
fn status_and_system_metadata_are_never_merged() {
    let observed = json!({
        "metadata": {"name": "a", "resourceVersion": "5", "uid": "u1", "generation": 3},
        "status": {"phase": "Running", "x": 1}
    });
    let desired = json!({
        "metadata": {"name": "a", "resourceVersion": "1", "uid": "other", "labels": {"l": "v"},
                     "creationTimestamp": "2020-01-01T00:00:00Z"},
        "status": {"phase": "Pending"}
    });
    let got = merge(&observed, Some(&json!({"status": {"x": 1}})), &desired).unwrap();
    assert_eq!(
        got,
        json!({
            "metadata": {"name": "a", "resourceVersion": "5", "uid": "u1", "generation": 3,
                         "labels": {"l": "v"}},
            "status": {"phase": "Running", "x": 1}
        })
    );
    // Also when observed has no metadata at all.
    let got = merge(&json!({}), None, &desired).unwrap();
    assert_eq!(
        got,
        json!({"metadata": {"name": "a", "labels": {"l": "v"}}})
    );
}

#[test]
fn type_mismatch_is_an_error_with_the_field_path() {
    let observed = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {}}}]}});
    let desired = json!({"spec": {"containers": [{"name": "a", "resources": "big"}]}});
    let err = merge(&observed, None, &desired).unwrap_err();
    assert_eq!(
        err,
        ApplyError::TypeMismatch {
            path: ".spec.containers[name=a].resources".into(),
            observed: "object",
            desired: "string",
        }
    );
    let err = merge(&json!({"l": [1]}), None, &json!({"l": {"a": 1}})).unwrap_err();
    assert_eq!(err.path(), ".l");
    // Scalar observed, object desired: desired replaces it (upstream).
    assert_eq!(
        merge(&json!({"l": 1}), None, &json!({"l": {"a": 1}})).unwrap(),
        json!({"l": {"a": 1}})
    );
    // Whole-object inputs.
    assert_eq!(merge(&json!({}), None, &json!([])).unwrap_err().path(), ".");
    assert_eq!(merge(&json!(3), None, &json!({})).unwrap_err().path(), ".");
}

#[test]
fn non_scalar_schema_key_is_an_error_with_path() {
    let schema = service_schema();
    let observed = json!({"spec": {"rules": [{"id": 1}]}});
    let desired = json!({"spec": {"rules": [{"id": {"nested": 1}}]}});
    let err = merge_with_schema(&observed, None, &desired, &schema).unwrap_err();
    assert_eq!(
        err,
        ApplyError::InvalidMergeKey {
            path: ".spec.rules[0]".into(),
            key: "id".into(),
            found: "object"
        }
    );
}

#[test]
fn conventional_candidate_with_object_value_is_skipped() {
    // `name` holds objects, so it cannot key the list; `uid` is next in order.
    let got = m(
        json!({"l": [{"name": {"a": 1}, "uid": "1", "x": 1}]}),
        json!({}),
        json!({"l": [{"name": {"a": 2}, "uid": "1"}]}),
    );
    assert_eq!(got, json!({"l": [{"name": {"a": 2}, "uid": "1", "x": 1}]}));
}

#[test]
fn repeated_keys_leave_the_list_as_observed_and_lose_nothing() {
    // `name: A` repeats in observed: keying by it would fold two entries into one.
    let observed = json!({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"},
                                  {"name": "B", "value": "b"}]});
    let got = m(
        observed.clone(),
        json!({}),
        json!({"env": [{"name": "A", "extra": true}, {"name": "C"}, {"name": "C", "v": 2}]}),
    );
    assert_eq!(got, observed);
}

#[test]
fn dns_ports_keyed_by_port_alone_keep_both_entries() {
    // The shape of the issue: 53/TCP and 53/UDP, no schema, so the conventional key is `port`
    // and it repeats. Both entries survive every sync; a rename cannot be applied by key (as
    // upstream, whose write of the folded list a validating cluster rejects).
    let ports = json!([{"port": 53, "protocol": "TCP", "name": "dns-tcp"},
                       {"port": 53, "protocol": "UDP", "name": "dns-udp"}]);
    let observed = json!({"spec": {"ports": ports}});
    let desired = observed.clone();
    assert_eq!(
        m(observed.clone(), desired.clone(), desired.clone()),
        observed
    );
    let renamed = json!({"spec": {"ports": [
        {"port": 53, "protocol": "TCP", "name": "dns-tcp"},
        {"port": 53, "protocol": "UDP", "name": "dns"}]}});
    assert_eq!(m(observed.clone(), desired, renamed.clone()), observed);
    // Nothing there yet: desired is taken whole.
    let empty = json!({"spec": {"ports": []}});
    assert_eq!(m(empty, json!({}), renamed.clone()), renamed);
}

#[test]
fn numeric_keys_match_by_value() {
    let got = m(
        json!({"ports": [{"containerPort": 80.0, "x": 1}]}),
        json!({}),
        json!({"ports": [{"containerPort": 80, "y": 2}]}),
    );
    assert_eq!(got["ports"].as_array().unwrap().len(), 1);
    assert_eq!(got["ports"][0]["x"], json!(1));
}

#[test]
fn mismatched_last_applied_type_is_ignored() {
    let got = m(
        json!({"a": {"x": 1}}),
        json!({"a": "was a string"}),
        json!({"a": {"y": 2}}),
    );
    assert_eq!(got, json!({"a": {"x": 1, "y": 2}}));
}

#[test]
fn long_list_maps_use_the_index_and_agree_with_short_ones() {
    let items: Vec<Value> = (0..100)
        .map(|i| json!({"name": format!("n{i}"), "v": i}))
        .collect();
    let mut observed_items = items.clone();
    observed_items.push(json!({"name": "foreign"}));
    let desired_items: Vec<Value> = items.iter().rev().skip(1).cloned().collect();
    let got = m(
        json!({"l": observed_items}),
        json!({"l": items}),
        json!({"l": desired_items}),
    );
    let names: Vec<&str> = got["l"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 100);
    assert_eq!(names[0], "n0");
    assert!(!names.contains(&"n99"));
    assert_eq!(names[99], "foreign");
}

#[test]
fn apply_update_records_desired_and_blanks_an_echoed_record() {
    let observed = json!({"metadata": {"name": "a", "annotations": {
        last_applied::ANNOTATION: "{\"metadata\":{\"name\":\"a\"},\"data\":{\"old\":\"1\"}}"}},
        "data": {"old": "1", "foreign": "2"}});
    // The hook echoes the observed annotations back (a common mistake).
    let desired = json!({"metadata": {"name": "a", "annotations": observed["metadata"]["annotations"].clone()},
        "data": {"new": "1"}});
    let merged = apply_update(&observed, &desired, None).unwrap();
    assert_eq!(merged["data"], json!({"foreign": "2", "new": "1"}));
    let record = last_applied::get(&merged).unwrap().unwrap();
    assert_eq!(
        record["metadata"]["annotations"][last_applied::ANNOTATION],
        json!("")
    );
    assert_eq!(record["data"], json!({"new": "1"}));
}
