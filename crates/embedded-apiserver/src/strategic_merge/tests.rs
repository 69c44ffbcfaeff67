use super::*;
use serde_json::json;

fn deploy_meta() -> PatchMeta {
    PatchMeta::for_kind("apps", "Deployment").unwrap()
}

fn deployment() -> Value {
    json!({"metadata": {"name": "web", "labels": {"app": "web", "tier": "fe"}, "finalizers": ["a", "b"]},
        "spec": {"replicas": 1, "template": {"spec": {
            "containers": [
                {"name": "app", "image": "app:1", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "sidecar", "image": "proxy:1"}],
            "tolerations": [{"key": "k1", "operator": "Exists"}]}}}})
}

fn containers(v: &Value) -> &Value {
    &v["spec"]["template"]["spec"]["containers"]
}

/// The names of the containers of the pod template, in order.
fn container_names(v: &Value) -> Vec<&str> {
    containers(v)
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

#[test]
fn containers_merge_by_name_and_keep_others() {
    let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    let c = containers(&out);
    assert_eq!(c.as_array().unwrap().len(), 2);
    assert_eq!(c[0]["name"], "app");
    assert_eq!(c[0]["image"], "app:2");
    // Untouched fields of the merged item survive.
    assert_eq!(c[0]["ports"][0]["containerPort"], 80);
    assert_eq!(c[1], json!({"name": "sidecar", "image": "proxy:1"}));
}

#[test]
fn new_list_item_without_set_element_order_goes_first_like_upstream() {
    let p =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "new", "image": "n:1"}]}}}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    let names = container_names(&out);
    assert_eq!(names, vec!["new", "app", "sidecar"]);
}

#[test]
fn set_element_order_fixes_the_order() {
    let p = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}, {"name": "new"}],
        "containers": [{"name": "new", "image": "n:1"}]}}}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    let names = container_names(&out);
    assert_eq!(names, vec!["app", "sidecar", "new"]);
    assert!(out["spec"]["template"]["spec"]
        .get("$setElementOrder/containers")
        .is_none());
}

#[test]
fn delete_directive_in_list_and_null_deletes_key() {
    let p = json!({"metadata": {"labels": {"tier": null}},
        "spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(containers(&out).as_array().unwrap().len(), 1);
    assert_eq!(containers(&out)[0]["name"], "app");
}

#[test]
fn nested_lists_merge_by_their_own_keys() {
    let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "app",
        "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
        "ports": [{"containerPort": 443}]}]}}}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    let c = &containers(&out)[0];
    let env: Vec<(String, String)> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(env.len(), 3);
    assert!(env.contains(&("A".into(), "1".into())));
    assert!(env.contains(&("B".into(), "two".into())));
    assert!(env.contains(&("C".into(), "3".into())));
    assert_eq!(c["ports"].as_array().unwrap().len(), 2);
}

#[test]
fn lists_without_strategy_are_replaced() {
    let p = json!({"spec": {"template": {"spec": {"tolerations": [{"key": "k2", "operator": "Exists"}]}}}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    assert_eq!(
        out["spec"]["template"]["spec"]["tolerations"],
        json!([{"key": "k2", "operator": "Exists"}])
    );
    // Untyped metadata replaces every list.
    let out = patch(
        &json!({"a": [1, 2]}),
        &json!({"a": [3]}),
        &PatchMeta::untyped(),
    )
    .unwrap();
    assert_eq!(out, json!({"a": [3]}));
}

#[test]
fn replace_directive_on_list_and_map() {
    let p = json!({"spec": {"template": {"spec": {"containers": [
        {"$patch": "replace"}, {"name": "only", "image": "o:1"}]}}}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    assert_eq!(containers(&out), &json!([{"name": "only", "image": "o:1"}]));

    let p = json!({"metadata": {"labels": {"$patch": "replace", "x": "y"}}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"x": "y"}));

    let p = json!({"metadata": {"labels": {"$patch": "delete"}}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    assert_eq!(out["metadata"]["labels"], json!({}));
}

#[test]
fn finalizers_merge_as_a_set_and_delete_from_primitive_list() {
    let p = json!({"metadata": {"finalizers": ["b", "c"]}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    let mut f: Vec<&str> = out["metadata"]["finalizers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    f.sort();
    assert_eq!(f, vec!["a", "b", "c"]);

    let p = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["b"]));

    // Deleting from a list that does not exist adds nothing.
    let p = json!({"metadata": {"$deleteFromPrimitiveList/nothing": ["a"]}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    assert!(out["metadata"].get("nothing").is_none());
}

#[test]
fn retain_keys_clears_unlisted_keys() {
    let orig =
        json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
    let p = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
    let out = patch(&orig, &p, &deploy_meta()).unwrap();
    assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
    // A patch key missing from the list is a 400.
    let bad = json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}});
    let err = patch(&orig, &bad, &deploy_meta()).unwrap_err();
    assert_eq!(err.code, 400);
    assert_eq!(err.message, "invalid patch format of retainKeys");
}

#[test]
fn service_ports_merge_by_port_and_owner_references_by_uid() {
    let svc = json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]},
        "spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
    let meta = PatchMeta::for_kind("", "Service").unwrap();
    let p = json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "renamed"}, {"uid": "2", "name": "b"}]},
        "spec": {"ports": [{"port": 80, "targetPort": 9090}]}});
    let out = patch(&svc, &p, &meta).unwrap();
    assert_eq!(
        out["spec"]["ports"],
        json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
    );
    let refs = out["metadata"]["ownerReferences"].as_array().unwrap();
    assert_eq!(refs.len(), 2);
    assert!(refs.contains(&json!({"uid": "1", "name": "renamed"})));
}

#[test]
fn conditions_merge_by_type_in_status() {
    let d = json!({"status": {"conditions": [{"type": "Available", "status": "False"},
                                              {"type": "Progressing", "status": "True"}]}});
    let p = json!({"status": {"conditions": [{"type": "Available", "status": "True"}]}});
    let out = patch(&d, &p, &deploy_meta()).unwrap();
    assert_eq!(
        out["status"]["conditions"],
        json!([{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True"}])
    );
}

#[test]
fn missing_merge_key_is_an_error() {
    let p = json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
    let err = patch(&deployment(), &p, &deploy_meta()).unwrap_err();
    assert_eq!(err.code, 500);
    assert_eq!(
        err.message,
        "map: map[image:x] does not contain declared merge key: name"
    );
    let status = err.to_status();
    assert_eq!(
        status["message"],
        "Internal error occurred: map: map[image:x] does not contain declared merge key: name"
    );
    assert_eq!(status["reason"], "InternalError");
}

#[test]
fn error_statuses_for_bad_request_and_unprocessable() {
    let e = PatchError::bad_request("invalid patch format of retainKeys");
    assert_eq!(e.to_status()["reason"], "BadRequest");
    let e = err_list_of_lists();
    let s = e.to_status();
    assert_eq!(s["code"], 422);
    assert_eq!(
        s["details"]["causes"][0]["message"],
        "lists of lists are not supported"
    );
}

#[test]
fn bad_documents_and_directives() {
    let err = patch(&deployment(), &json!([1]), &deploy_meta()).unwrap_err();
    assert_eq!(err.code, 400);
    let err = patch(
        &deployment(),
        &json!({"metadata": {"labels": {"$patch": "frobnicate"}}}),
        &deploy_meta(),
    )
    .unwrap_err();
    assert!(
        err.message.starts_with("unknown patch type: frobnicate"),
        "{}",
        err.message
    );
    let err = patch(
        &json!({"a": [[1]]}),
        &json!({"metadata": {"finalizers": [[1]]}}),
        &deploy_meta(),
    );
    // Only a list of lists that has to be merged fails.
    assert!(err.is_ok());
    let err = patch(
        &json!({"metadata": {"finalizers": [["x"]]}}),
        &json!({"metadata": {"finalizers": [["y"]]}}),
        &deploy_meta(),
    )
    .unwrap_err();
    assert_eq!(err.code, 422);
}

#[test]
fn new_values_lose_nulls_and_directives() {
    let p = json!({"spec": {"newField": {"a": null, "b": 1, "$patch": "merge"}}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    assert_eq!(out["spec"]["newField"], json!({"b": 1}));
}

#[test]
fn type_change_replaces() {
    let out = patch(
        &json!({"spec": {"x": {"a": 1}}}),
        &json!({"spec": {"x": "scalar"}}),
        &deploy_meta(),
    )
    .unwrap();
    assert_eq!(out["spec"]["x"], "scalar");
}

#[test]
fn kinds_without_smp_support() {
    assert!(PatchMeta::for_kind("example.com", "Widget").is_none());
    assert!(PatchMeta::for_kind("", "ConfigMap").is_some());
    assert!(PatchMeta::for_kind("batch", "CronJob").is_some());
}

#[test]
fn cronjob_job_template_pod_spec_uses_container_keys() {
    let cj = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
        {"name": "a", "image": "1"}, {"name": "b", "image": "2"}]}}}}}});
    let p = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
        {"name": "b", "image": "3"}]}}}}}});
    let out = patch(&cj, &p, &PatchMeta::for_kind("batch", "CronJob").unwrap()).unwrap();
    assert_eq!(
        out["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"],
        json!([{"name": "a", "image": "1"}, {"name": "b", "image": "3"}])
    );
}

#[test]
fn kubectl_three_way_patch_for_primitive_list() {
    // What client-side `kubectl apply` sends when finalizers go from [a, b] to [a, c].
    let p = json!({"metadata": {
        "$setElementOrder/finalizers": ["a", "c"],
        "$deleteFromPrimitiveList/finalizers": ["b"],
        "finalizers": ["c"]}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["a", "c"]));
}

#[test]
fn kubectl_three_way_patch_deleting_a_container() {
    let p = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "app"}],
        "containers": [{"$patch": "delete", "name": "sidecar"}]}}}});
    let out = patch(&deployment(), &p, &deploy_meta()).unwrap();
    assert_eq!(containers(&out).as_array().unwrap().len(), 1);
    assert_eq!(containers(&out)[0]["name"], "app");
}

#[test]
fn set_element_order_mismatch_is_rejected() {
    let p = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "app"}],
        "containers": [{"name": "other", "image": "x"}]}}}});
    let err = patch(&deployment(), &p, &deploy_meta()).unwrap_err();
    assert!(
        err.message.contains("doesn't match $setElementOrder list"),
        "{}",
        err.message
    );
}
