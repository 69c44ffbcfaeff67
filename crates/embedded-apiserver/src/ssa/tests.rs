use super::*;
use serde_json::json;

const T1: &str = "2024-01-01T00:00:00Z";
const T2: &str = "2024-01-01T00:01:00Z";
const T3: &str = "2024-01-01T00:02:00Z";

fn deploy_schema() -> BuiltinSchema {
    BuiltinSchema::for_kind("apps", "Deployment")
}

fn opts<'a>(manager: &'a str, force: bool, now: &'a str) -> ApplyOptions<'a> {
    ApplyOptions {
        manager,
        force,
        now,
        subresource: None,
    }
}

fn config(replicas: i64, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": image,
                    "ports": [{"containerPort": 80}]}]}}}})
}

fn entry<'a>(obj: &'a Value, manager: &str) -> Option<&'a Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager)
}

#[test]
fn apply_on_create_records_fields_v1_like_kube_apiserver() {
    let out = apply(
        None,
        &config(3, "nginx:1"),
        &opts("kubectl", false, T1),
        &deploy_schema(),
    )
    .unwrap();
    assert_eq!(out["spec"]["replicas"], 3);
    let e = entry(&out, "kubectl").unwrap();
    assert_eq!(e["operation"], "Apply");
    assert_eq!(e["apiVersion"], "apps/v1");
    assert_eq!(e["time"], T1);
    assert_eq!(e["fieldsType"], "FieldsV1");
    assert_eq!(
        e["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:containerPort": {}}}
                    }}}
                }
            }
        })
    );
    assert!(e.get("subresource").is_none());
}

#[test]
fn conflicting_apply_is_rejected_with_the_real_message() {
    let live = apply(
        None,
        &config(3, "nginx:1"),
        &opts("alice", false, T1),
        &deploy_schema(),
    )
    .unwrap();
    let err = apply(
        Some(&live),
        &config(5, "nginx:1"),
        &opts("bob", false, T2),
        &deploy_schema(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas"
    );
    let status = err.to_status();
    assert_eq!(status["code"], 409);
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"alice\"", "field": ".spec.replicas"}])
    );
}

#[test]
fn same_value_is_shared_not_conflicting_and_force_takes_ownership() {
    let live = apply(
        None,
        &config(3, "nginx:1"),
        &opts("alice", false, T1),
        &deploy_schema(),
    )
    .unwrap();
    // Bob applies the same replicas: no conflict, both own it.
    let bob_cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 3}});
    let shared = apply(
        Some(&live),
        &bob_cfg,
        &opts("bob", false, T2),
        &deploy_schema(),
    )
    .unwrap();
    assert!(entry(&shared, "alice").unwrap()["fieldsV1"]["f:spec"]
        .get("f:replicas")
        .is_some());
    assert!(entry(&shared, "bob").unwrap()["fieldsV1"]["f:spec"]
        .get("f:replicas")
        .is_some());

    // Forced change: bob takes replicas away from alice.
    let mut forced_cfg = bob_cfg.clone();
    forced_cfg["spec"]["replicas"] = json!(7);
    let err = apply(
        Some(&shared),
        &forced_cfg,
        &opts("bob", false, T3),
        &deploy_schema(),
    )
    .unwrap_err();
    assert!(matches!(err, ApplyError::Conflicts(_)));
    let forced = apply(
        Some(&shared),
        &forced_cfg,
        &opts("bob", true, T3),
        &deploy_schema(),
    )
    .unwrap();
    assert_eq!(forced["spec"]["replicas"], 7);
    assert!(entry(&forced, "alice").unwrap()["fieldsV1"]["f:spec"]
        .get("f:replicas")
        .is_none());
    assert_eq!(entry(&forced, "bob").unwrap()["time"], T3);
}

#[test]
fn fields_dropped_from_the_config_are_removed_unless_owned_by_others() {
    let mut cfg = config(3, "nginx:1");
    cfg["metadata"]["labels"]["extra"] = json!("x");
    cfg["metadata"]["annotations"] = json!({"note": "hi"});
    let live = apply(None, &cfg, &opts("alice", false, T1), &deploy_schema()).unwrap();
    // Another manager also owns the annotation.
    let mut edited = live.clone();
    edited["metadata"]["annotations"]["note"] = json!("edited");
    let edited = record_update(
        Some(&live),
        &edited,
        "kubectl-edit",
        None,
        T2,
        &deploy_schema(),
    );

    let out = apply(
        Some(&edited),
        &config(3, "nginx:1"),
        &opts("alice", false, T3),
        &deploy_schema(),
    )
    .unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(out["metadata"]["annotations"], json!({"note": "edited"}));
}

#[test]
fn removing_the_last_applied_item_removes_the_list() {
    let mut cfg = config(1, "a:1");
    cfg["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "X", "value": "1"}]);
    let live = apply(None, &cfg, &opts("alice", false, T1), &deploy_schema()).unwrap();
    let out = apply(
        Some(&live),
        &config(1, "a:1"),
        &opts("alice", false, T2),
        &deploy_schema(),
    )
    .unwrap();
    assert!(out["spec"]["template"]["spec"]["containers"][0]
        .get("env")
        .is_none());
}

#[test]
fn list_items_added_by_others_survive_and_keep_their_place() {
    let live = apply(
        None,
        &config(1, "a:1"),
        &opts("alice", false, T1),
        &deploy_schema(),
    )
    .unwrap();
    let mut with_sidecar = live.clone();
    with_sidecar["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "sidecar", "image": "proxy:1"}));
    let with_sidecar = record_update(
        Some(&live),
        &with_sidecar,
        "injector",
        None,
        T2,
        &deploy_schema(),
    );
    let out = apply(
        Some(&with_sidecar),
        &config(1, "a:2"),
        &opts("alice", false, T3),
        &deploy_schema(),
    )
    .unwrap();
    let names: Vec<&str> = out["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["nginx", "sidecar"]);
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"][0]["image"],
        "a:2"
    );
    let inj = entry(&out, "injector").unwrap();
    assert!(
        inj["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
            .get("k:{\"name\":\"sidecar\"}")
            .is_some()
    );
}

#[test]
fn noop_apply_returns_live_unchanged() {
    let live = apply(
        None,
        &config(3, "nginx:1"),
        &opts("alice", false, T1),
        &deploy_schema(),
    )
    .unwrap();
    let again = apply(
        Some(&live),
        &config(3, "nginx:1"),
        &opts("alice", false, T2),
        &deploy_schema(),
    )
    .unwrap();
    assert_eq!(again, live);
}

#[test]
fn record_update_on_create_matches_real_dot_members() {
    let new = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
                     "creationTimestamp": "2024-01-01T00:00:00Z", "uid": "u", "resourceVersion": "1", "generation": 1},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {"metadata": {"creationTimestamp": null, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {}}]}}},
        "status": {}});
    let out = record_update(None, &new, "kubectl-create", None, T1, &deploy_schema());
    let e = entry(&out, "kubectl-create").unwrap();
    assert_eq!(e["operation"], "Update");
    assert_eq!(e["apiVersion"], "apps/v1");
    assert_eq!(
        e["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:strategy": {"f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}}, "f:type": {}},
                "f:template": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {
                        ".": {}, "f:image": {}, "f:name": {}, "f:resources": {}}}}
                }
            }
        })
    );
}

#[test]
fn updates_take_fields_from_appliers_and_conflicts_name_update_managers() {
    let live = apply(
        None,
        &config(3, "nginx:1"),
        &opts("alice", false, T1),
        &deploy_schema(),
    )
    .unwrap();
    let mut scaled = live.clone();
    scaled["spec"]["replicas"] = json!(10);
    let scaled = record_update(Some(&live), &scaled, "hpa", None, T2, &deploy_schema());
    let hpa = entry(&scaled, "hpa").unwrap();
    assert_eq!(hpa["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    assert_eq!(hpa["time"], T2);
    assert!(entry(&scaled, "alice").unwrap()["fieldsV1"]["f:spec"]
        .get("f:replicas")
        .is_none());
    // Entries sorted: Apply before Update.
    let ops: Vec<&str> = scaled["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["operation"].as_str().unwrap())
        .collect();
    assert_eq!(ops, vec!["Apply", "Update"]);

    // alice re-applies replicas 3: conflict with the updater.
    let err = apply(
        Some(&scaled),
        &config(3, "nginx:1"),
        &opts("alice", false, T3),
        &deploy_schema(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"hpa\" using apps/v1: .spec.replicas"
    );

    // A no-op update leaves managedFields alone.
    let same = record_update(Some(&scaled), &scaled, "other", None, T3, &deploy_schema());
    assert_eq!(
        same["metadata"]["managedFields"],
        scaled["metadata"]["managedFields"]
    );
}

#[test]
fn multiple_conflicts_are_grouped_by_manager() {
    let live = apply(
        None,
        &config(3, "nginx:1"),
        &opts("alice", false, T1),
        &deploy_schema(),
    )
    .unwrap();
    let err = apply(
        Some(&live),
        &config(4, "nginx:2"),
        &opts("bob", false, T2),
        &deploy_schema(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"alice\":\n- .spec.replicas\n- .spec.template.spec.containers[name=\"nginx\"].image"
    );
}

#[test]
fn finalizers_are_a_set_and_owner_references_atomic_items() {
    let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "finalizers": ["a.io/x"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "123"}]},
        "data": {"k": "v"}});
    let out = apply(
        None,
        &cfg,
        &opts("m", false, T1),
        &BuiltinSchema::for_kind("", "ConfigMap"),
    )
    .unwrap();
    assert_eq!(
        entry(&out, "m").unwrap()["fieldsV1"],
        json!({"f:data": {"f:k": {}},
               "f:metadata": {"f:finalizers": {"v:\"a.io/x\"": {}},
                              "f:ownerReferences": {"k:{\"uid\":\"123\"}": {}}}})
    );
}

#[test]
fn invalid_configurations() {
    let bad_key = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
        "spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
    let err = apply(None, &bad_key, &opts("m", false, T1), &deploy_schema()).unwrap_err();
    let status = err.to_status();
    assert_eq!(status["reason"], "InternalError");
    assert!(status["message"]
        .as_str()
        .unwrap()
        .starts_with("Internal error occurred: failed to create typed patch object"));
    match err {
        ApplyError::Invalid { code, message } => {
            assert_eq!(code, 500);
            assert!(message.contains("omits key field \"name\""), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    let with_mf = json!({"metadata": {"name": "x", "managedFields": []}});
    let err = apply(None, &with_mf, &opts("m", false, T1), &deploy_schema()).unwrap_err();
    assert_eq!(err.to_string(), "metadata.managedFields must be nil");
    assert_eq!(err.to_status()["reason"], "BadRequest");
}

#[test]
fn malformed_managed_fields_are_reset() {
    let obj = json!({"metadata": {"managedFields": [{"manager": "x", "operation": "Update", "fieldsV1": {"bogus": 1}}]}});
    assert!(decode_managed_fields(&obj).is_empty());
    let obj = json!({"metadata": {"managedFields": "nope"}});
    assert!(decode_managed_fields(&obj).is_empty());
}

#[test]
fn status_subresource_entries_carry_the_subresource() {
    let raw = json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"}, "status": {}});
    let live = record_update(None, &raw, "creator", None, T1, &Untyped);
    let mut new = live.clone();
    new["status"]["phase"] = json!("Ready");
    let out = record_update(Some(&live), &new, "ctrl", Some("status"), T1, &Untyped);
    let e = entry(&out, "ctrl").unwrap();
    assert_eq!(e["subresource"], "status");
    assert_eq!(e["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
    let err = ApplyError::Conflicts(vec![Conflict {
        manager: ManagedEntry {
            manager: "ctrl".into(),
            operation: "Update".into(),
            api_version: "example.com/v1".into(),
            time: None,
            subresource: "status".into(),
            fields: FieldSet::new(),
        }
        .display(),
        path: ".status.phase".into(),
    }]);
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"ctrl\" with subresource \"status\" using example.com/v1: .status.phase"
    );
}

#[test]
fn custom_resources_use_the_crd_schema() {
    let s = crate::schema::StructuralSchema::from_openapi_v3(&json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                "items": {"type": "object", "properties": {"id": {"type": "string"}, "v": {"type": "integer"}}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "raw": {"type": "array", "items": {"type": "string"}}
        }}}}))
    .unwrap();
    let schema = CrdSchema::new(&s);
    let cfg = json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"},
        "spec": {"items": [{"id": "a", "v": 1}], "tags": ["x"], "raw": ["r"]}});
    let live = apply(None, &cfg, &opts("one", false, T1), &schema).unwrap();
    assert_eq!(
        entry(&live, "one").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:items": {"k:{\"id\":\"a\"}": {".": {}, "f:id": {}, "f:v": {}}},
                          "f:raw": {}, "f:tags": {"v:\"x\"": {}}}})
    );
    // A second applier adds an item and a tag: both lists merge.
    let cfg2 = json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"},
        "spec": {"items": [{"id": "b", "v": 2}], "tags": ["y"]}});
    let out = apply(Some(&live), &cfg2, &opts("two", false, T2), &schema).unwrap();
    assert_eq!(
        out["spec"]["items"],
        json!([{"id": "a", "v": 1}, {"id": "b", "v": 2}])
    );
    assert_eq!(out["spec"]["tags"], json!(["x", "y"]));
    // Create through a plain write: unknown-to-the-old-object maps are members.
    let created = record_update(None, &cfg, "kubectl-create", None, T1, &schema);
    assert_eq!(
        entry(&created, "kubectl-create").unwrap()["fieldsV1"]["f:spec"]["."],
        json!({})
    );
}

#[test]
fn item_shared_with_another_manager_keeps_its_key_and_their_fields() {
    let live = apply(
        None,
        &config(1, "a:1"),
        &opts("alice", false, T1),
        &deploy_schema(),
    )
    .unwrap();
    // bob sets resources on alice's container.
    let mut edited = live.clone();
    edited["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"cpu": "1"}});
    let edited = record_update(Some(&live), &edited, "bob", None, T2, &deploy_schema());
    // alice stops applying the container altogether.
    let cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}}}});
    let out = apply(
        Some(&edited),
        &cfg,
        &opts("alice", false, T3),
        &deploy_schema(),
    )
    .unwrap();
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"],
        json!([{"name": "nginx", "resources": {"limits": {"cpu": "1"}}}])
    );
}

#[test]
fn applied_field_set_owns_leaves_and_free_form_keys_only() {
    let cfg = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {}}], "securityContext": {}}});
    let set = field_set_of(&cfg, &BuiltinSchema::for_kind("", "Pod")).unwrap();
    assert_eq!(
        set.to_fields_v1(),
        json!({"f:metadata": {"f:labels": {"f:a": {}}},
               "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
    );
}

#[test]
fn update_managers_are_capped_into_ancient_changes() {
    let schema = Untyped;
    let base = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k0": "v"}});
    let mut obj = record_update(None, &base, "m00", None, "2024-01-01T00:00:00Z", &schema);
    for i in 1..12 {
        let mut next = obj.clone();
        next["data"][format!("k{i}")] = json!("v");
        let now = format!("2024-01-01T00:00:{i:02}Z");
        obj = record_update(Some(&obj), &next, &format!("m{i:02}"), None, &now, &schema);
    }
    let mf = obj["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(mf.len(), 10);
    let ancient = mf
        .iter()
        .find(|e| e["manager"] == "ancient-changes")
        .unwrap();
    // The three oldest updates were merged; the bucket keeps the newest time of them.
    assert_eq!(
        ancient["fieldsV1"],
        json!({"f:data": {".": {}, "f:k0": {}, "f:k1": {}, "f:k2": {}}})
    );
    assert_eq!(ancient["time"], "2024-01-01T00:00:02Z");
    assert!(mf
        .iter()
        .all(|e| e["manager"] != "m00" && e["manager"] != "m02"));
}

#[test]
fn managed_fields_in_update_requests() {
    let live = apply(
        None,
        &config(3, "nginx:1"),
        &opts("alice", false, T1),
        &deploy_schema(),
    )
    .unwrap();
    // A client that drops managedFields does not erase them.
    let mut stripped = live.clone();
    stripped["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    let kept = record_update(Some(&live), &stripped, "x", None, T2, &deploy_schema());
    assert_eq!(
        kept["metadata"]["managedFields"],
        live["metadata"]["managedFields"]
    );
    // `[]` resets them (nothing changed in this write, so none remain).
    let mut reset = live.clone();
    reset["metadata"]["managedFields"] = json!([]);
    let out = record_update(Some(&live), &reset, "x", None, T2, &deploy_schema());
    assert!(out["metadata"].get("managedFields").is_none());
    // Edited entries are taken as given.
    let mut edited = live.clone();
    edited["metadata"]["managedFields"][0]["manager"] = json!("renamed");
    let out = record_update(Some(&live), &edited, "x", None, T2, &deploy_schema());
    assert!(entry(&out, "renamed").is_some());
    // ...but not through a subresource.
    let out = record_update(
        Some(&live),
        &edited,
        "x",
        Some("status"),
        T2,
        &deploy_schema(),
    );
    assert!(entry(&out, "alice").is_some());
    assert!(entry(&out, "renamed").is_none());
}

#[test]
fn untracked_objects_stay_untracked_until_the_first_apply() {
    let raw = config(3, "nginx:1");
    let mut changed = raw.clone();
    changed["spec"]["replicas"] = json!(4);
    let out = record_update(Some(&raw), &changed, "x", None, T1, &deploy_schema());
    assert!(out["metadata"].get("managedFields").is_none());
    // The first apply attributes existing fields to before-first-apply.
    let err = apply(
        Some(&changed),
        &config(5, "nginx:1"),
        &opts("alice", false, T2),
        &deploy_schema(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"before-first-apply\" using apps/v1: .spec.replicas"
    );
    let ok = apply(
        Some(&changed),
        &config(4, "nginx:1"),
        &opts("alice", false, T2),
        &deploy_schema(),
    )
    .unwrap();
    assert!(entry(&ok, "before-first-apply").is_some());
    assert!(entry(&ok, "alice").is_some());
}

#[test]
fn kubectl_server_side_apply_syncs_an_existing_last_applied_annotation() {
    let mut live = apply(
        None,
        &config(3, "nginx:1"),
        &opts("kubectl", false, T1),
        &deploy_schema(),
    )
    .unwrap();
    live["metadata"]["annotations"] = json!({(LAST_APPLIED_ANNOTATION): "{}"});
    let out = apply(
        Some(&live),
        &config(3, "nginx:2"),
        &opts("kubectl", false, T2),
        &deploy_schema(),
    )
    .unwrap();
    let text = out["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(text.ends_with('\n'));
    let parsed: Value = serde_json::from_str(text).unwrap();
    assert_eq!(parsed, config(3, "nginx:2"));
    // Other managers leave it alone.
    let other = apply(
        Some(&live),
        &config(3, "nginx:2"),
        &opts("helm", true, T2),
        &deploy_schema(),
    )
    .unwrap();
    assert_eq!(
        other["metadata"]["annotations"][LAST_APPLIED_ANNOTATION],
        "{}"
    );
}

#[test]
fn integral_floats_equal_integers_when_comparing() {
    let live = apply(
        None,
        &config(3, "nginx:1"),
        &opts("alice", false, T1),
        &deploy_schema(),
    )
    .unwrap();
    let mut same = config(3, "nginx:1");
    same["spec"]["replicas"] = json!(3.0);
    // bob applying 3.0 does not change alice's 3: no conflict.
    let out = apply(
        Some(&live),
        &same,
        &opts("bob", false, T2),
        &deploy_schema(),
    )
    .unwrap();
    assert!(entry(&out, "bob").is_some());
}

#[test]
fn kubectl_server_side_apply_upgrades_from_client_side_apply() {
    // `kubectl apply` (client-side) created the object: Update entry plus annotation.
    let mut created = config(3, "nginx:1");
    created["metadata"]["annotations"] =
        json!({(LAST_APPLIED_ANNOTATION): format!("{}\n", canonical_json(&config(3, "nginx:1")))});
    let live = record_update(
        None,
        &created,
        "kubectl-client-side-apply",
        None,
        T1,
        &deploy_schema(),
    );
    // Server-side apply by "kubectl" changing the image: allowed (annotation matches live).
    let out = apply(
        Some(&live),
        &config(3, "nginx:2"),
        &opts("kubectl", false, T2),
        &deploy_schema(),
    )
    .unwrap();
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
    // Another manager name gets the conflict.
    let err = apply(
        Some(&live),
        &config(3, "nginx:2"),
        &opts("other", false, T2),
        &deploy_schema(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("kubectl-client-side-apply"),
        "{err}"
    );
    // A field changed since the annotation was written is a real conflict.
    let mut drifted = live.clone();
    drifted["spec"]["replicas"] = json!(9);
    let drifted = record_update(Some(&live), &drifted, "hpa", None, T2, &deploy_schema());
    let err = apply(
        Some(&drifted),
        &config(4, "nginx:1"),
        &opts("kubectl", false, T3),
        &deploy_schema(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"hpa\" using apps/v1: .spec.replicas"
    );
}
