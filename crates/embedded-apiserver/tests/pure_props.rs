//! Property tests: arbitrary JSON never panics the pure modules, and the
//! operations the server repeats on every read/write are idempotent.

use embedded_apiserver::defaults::{apply_builtin_defaults, RangeAllocator};
use embedded_apiserver::schema::StructuralSchema;
use embedded_apiserver::ssa::{self, ApplyOptions, BuiltinSchema, Untyped};
use embedded_apiserver::strategic_merge::{self, PatchMeta};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("spec".to_string()),
        Just("metadata".to_string()),
        Just("name".to_string()),
        Just("containers".to_string()),
        Just("ports".to_string()),
        Just("image".to_string()),
        Just("labels".to_string()),
        Just("replicas".to_string()),
        "[a-z]{1,3}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..100).prop_map(Value::from),
        (-10.0f64..10.0).prop_map(|f| json!(f)),
        "[a-z0-9:]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(key(), json_value(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>()))
}

fn crd_schema() -> StructuralSchema {
    StructuralSchema::from_openapi_v3(&json!({"type": "object", "properties": {
    "spec": {"type": "object", "properties": {
        "replicas": {"type": "integer", "default": 1, "minimum": 0},
        "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]*$"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "containers": {"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"}, "image": {"type": "string", "default": "x"}}}},
        "ports": {"type": "array", "items": {"x-kubernetes-int-or-string": true}},
        "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    }}}}))
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn schema_parsing_never_panics(v in json_value()) {
        let _ = StructuralSchema::from_openapi_v3(&v);
    }

    #[test]
    fn prune_default_validate_never_panic_and_are_idempotent(mut obj in json_object()) {
        let s = crd_schema();
        s.prune(&mut obj);
        prop_assert!(s.prune(&mut obj.clone()).is_empty());
        s.apply_defaults(&mut obj);
        let once = obj.clone();
        s.apply_defaults(&mut obj);
        prop_assert_eq!(&once, &obj);
        let _ = s.validate(&obj);
    }

    #[test]
    fn builtin_defaults_never_panic_and_are_idempotent(
        obj in json_object(),
        kind in prop::sample::select(vec![
            ("", "Pod"), ("", "Service"), ("", "Secret"), ("", "Namespace"), ("", "PodTemplate"),
            ("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"),
            ("apps", "ReplicaSet"), ("batch", "Job"), ("batch", "CronJob"),
            ("rbac.authorization.k8s.io", "RoleBinding"), ("", "Event"),
        ]),
    ) {
        let mut alloc = RangeAllocator::default();
        let mut once = obj.clone();
        if apply_builtin_defaults(kind.0, "v1", kind.1, &mut once, &mut alloc).is_ok() {
            let mut twice = once.clone();
            apply_builtin_defaults(kind.0, "v1", kind.1, &mut twice, &mut alloc).unwrap();
            prop_assert_eq!(once, twice);
        }
    }

    #[test]
    fn strategic_merge_never_panics(orig in json_object(), p in json_object()) {
        let meta = PatchMeta::for_kind("apps", "Deployment").unwrap();
        let _ = strategic_merge::patch(&orig, &p, &meta);
        let _ = strategic_merge::patch(&orig, &p, &PatchMeta::untyped());
    }

    #[test]
    fn empty_strategic_patch_is_identity(orig in json_object()) {
        let meta = PatchMeta::for_kind("", "Pod").unwrap();
        let out = strategic_merge::patch(&orig, &json!({}), &meta).unwrap();
        prop_assert_eq!(out, orig);
    }

    #[test]
    fn apply_never_panics_and_reapplying_is_a_noop(live in json_object(), cfg in json_object()) {
        let opts = ApplyOptions { manager: "m", force: true, now: "2024-01-01T00:00:00Z", subresource: None };
        let schema = BuiltinSchema::for_kind("apps", "Deployment");
        if let Ok(first) = ssa::apply(Some(&live), &cfg, &opts, &schema) {
            let opts2 = ApplyOptions { now: "2024-01-01T00:05:00Z", ..opts };
            let second = ssa::apply(Some(&first), &cfg, &opts2, &schema).unwrap();
            prop_assert_eq!(first, second);
        }
        let _ = ssa::apply(None, &cfg, &opts, &Untyped);
    }

    #[test]
    fn record_update_never_panics(old in json_object(), new in json_object()) {
        let schema = BuiltinSchema::for_kind("apps", "Deployment");
        let out = ssa::record_update(Some(&old), &new, "m", None, "2024-01-01T00:00:00Z", &schema);
        // Recording the same write again changes nothing.
        let again = ssa::record_update(Some(&out), &out, "m", None, "2024-01-01T00:01:00Z", &schema);
        prop_assert_eq!(out, again);
    }
}
