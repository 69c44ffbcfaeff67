//! Controller manifests in upstream documentation shape (including ones using every
//! field) decode into the Rust types and re-encode without losing or changing a field;
//! the generated CRD schemas accept them without pruning anything; and the "full"
//! manifests exercise every field the schemas define.

use std::collections::BTreeSet;
use std::path::PathBuf;

use metacontroller_api::validation::{
    validate_composite_controller, validate_decorator_controller,
};
use metacontroller_api::{crds, CompositeController, ControllerRevision, DecoratorController};
use serde::Deserialize;
use serde_json::Value;

fn load(name: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/manifests")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .collect()
}

fn all_manifests() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for name in [
        "compositecontroller-full.yaml",
        "decoratorcontroller-full.yaml",
        "upstream-docs.yaml",
        "controllerrevision.yaml",
    ] {
        for (i, doc) in load(name).into_iter().enumerate() {
            out.push((format!("{name}#{i}"), doc));
        }
    }
    out
}

fn schema_for(kind: &str) -> Value {
    let crd = match kind {
        "CompositeController" => crds::composite_controller(),
        "DecoratorController" => crds::decorator_controller(),
        "ControllerRevision" => crds::controller_revision(),
        other => panic!("unexpected kind {other}"),
    };
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn manifests_round_trip_without_losing_fields() {
    let mut kinds = BTreeSet::new();
    for (name, original) in all_manifests() {
        let kind = original["kind"].as_str().unwrap().to_string();
        let again = match kind.as_str() {
            "CompositeController" => {
                let cc: CompositeController = serde_json::from_value(original.clone()).unwrap();
                validate_composite_controller(&cc).unwrap_or_else(|e| panic!("{name}: {e}"));
                serde_json::to_value(&cc).unwrap()
            }
            "DecoratorController" => {
                let dc: DecoratorController = serde_json::from_value(original.clone()).unwrap();
                validate_decorator_controller(&dc).unwrap_or_else(|e| panic!("{name}: {e}"));
                serde_json::to_value(&dc).unwrap()
            }
            "ControllerRevision" => {
                let cr: ControllerRevision = serde_json::from_value(original.clone()).unwrap();
                serde_json::to_value(&cr).unwrap()
            }
            other => panic!("{name}: unexpected kind {other}"),
        };
        let mut again = again;
        if kind != "ControllerRevision" && original.get("status").is_none() {
            // Controllers serialize an unset status as `{}`, as upstream's Go type does.
            let status = again.as_object_mut().and_then(|m| m.remove("status"));
            assert_eq!(status, Some(serde_json::json!({})), "{name}");
        }
        assert_eq!(again, original, "{name} changed in a round trip");
        kinds.insert(kind);
    }
    assert_eq!(kinds.len(), 3);
}

fn int_or_string(schema: &Value) -> bool {
    schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
}

fn n_is_int(value: &Value) -> bool {
    value.as_i64().is_some() || value.as_u64().is_some()
}

/// Checks `value` against a structural schema the way the API server's pruning and
/// validation would, collecting problems instead of stopping at the first.
fn check(schema: &Value, value: &Value, path: &str, problems: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let ok = match (ty, value) {
        ("object", Value::Object(_))
        | ("array", Value::Array(_))
        | ("string", Value::String(_)) => true,
        ("boolean", Value::Bool(_)) => true,
        ("integer", Value::Number(n)) => n.is_i64() || n.is_u64(),
        ("number", Value::Number(_)) => true,
        // `x-kubernetes-int-or-string`: no type, an integer or a string.
        ("", Value::Number(_) | Value::String(_)) if int_or_string(schema) => {
            !matches!(value, Value::Number(_)) || n_is_int(value)
        }
        _ => false,
    };
    if !ok {
        problems.push(format!("{path}: {value} is not of type {ty:?}"));
        return;
    }
    if let Some(Value::Array(allowed)) = schema.get("enum") {
        if !allowed.contains(value) {
            problems.push(format!("{path}: {value} not in enum {allowed:?}"));
        }
    }
    match value {
        Value::Object(map) => {
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !map.contains_key(required.as_str().unwrap()) {
                    problems.push(format!("{path}: missing required field {required}"));
                }
            }
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (k, v) in map {
                let child = format!("{path}.{k}");
                match (props.and_then(|p| p.get(k)), additional) {
                    (Some(s), _) => check(s, v, &child, problems),
                    (None, Some(s)) => check(s, v, &child, problems),
                    (None, None) => problems.push(format!("{child}: field would be pruned")),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check(&schema["items"], item, &format!("{path}[{i}]"), problems);
            }
        }
        _ => {}
    }
}

#[test]
fn generated_schemas_accept_every_manifest_without_pruning() {
    for (name, manifest) in all_manifests() {
        let schema = schema_for(manifest["kind"].as_str().unwrap());
        let mut problems = Vec::new();
        let mut without_metadata = manifest.clone();
        // metadata is validated by the API server itself, not by the CRD schema.
        without_metadata.as_object_mut().unwrap().remove("metadata");
        let mut schema_without_metadata = schema.clone();
        schema_without_metadata["required"] = Value::Array(
            schema["required"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| *r != "metadata")
                .cloned()
                .collect(),
        );
        check(
            &schema_without_metadata,
            &without_metadata,
            "",
            &mut problems,
        );
        assert!(problems.is_empty(), "{name}: {problems:#?}");
    }
}

/// Identifies an object type in a schema by its property names, so a type used in
/// several places (a Hook under sync, finalize, ...) counts once.
fn type_id(schema: &Value) -> String {
    let props = schema.get("properties").and_then(Value::as_object);
    props
        .map(|p| p.keys().cloned().collect::<Vec<_>>().join(","))
        .unwrap_or_default()
}

/// Every (type, field) pair the schema defines.
fn schema_fields(schema: &Value, out: &mut BTreeSet<(String, String)>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, s) in props {
            out.insert((type_id(schema), k.clone()));
            schema_fields(s, out);
        }
    }
    if let Some(items) = schema.get("items") {
        schema_fields(items, out);
    }
}

/// Every (type, field) pair a manifest sets.
fn used_fields(schema: &Value, value: &Value, out: &mut BTreeSet<(String, String)>) {
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            for (k, v) in map {
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    out.insert((type_id(schema), k.clone()));
                    used_fields(s, v, out);
                }
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|v| used_fields(&schema["items"], v, out)),
        _ => {}
    }
}

#[test]
fn full_manifests_use_every_schema_field() {
    for (file, kind) in [
        ("compositecontroller-full.yaml", "CompositeController"),
        ("decoratorcontroller-full.yaml", "DecoratorController"),
        ("controllerrevision.yaml", "ControllerRevision"),
    ] {
        let schema = schema_for(kind);
        let mut wanted = BTreeSet::new();
        schema_fields(&schema, &mut wanted);
        let mut used = BTreeSet::new();
        for doc in load(file) {
            used_fields(&schema, &doc, &mut used);
        }
        let missing: Vec<String> = wanted
            .difference(&used)
            .map(|(ty, field)| format!("{field} (in object with fields {ty})"))
            .collect();
        assert!(missing.is_empty(), "{file} does not use {missing:#?}");
    }
}

#[test]
fn crds_are_valid_custom_resource_definitions() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let all: Vec<CustomResourceDefinition> = crds::all_typed().unwrap();
    assert_eq!(all.len(), 3);
    for typed in all {
        let version = &typed.spec.versions[0];
        assert_eq!(typed.spec.group, "metacontroller.k8s.io");
        assert_eq!(version.name, "v1alpha1");
        assert!(version
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some()));
    }
    let cc = crds::composite_controller();
    assert_eq!(
        cc["spec"]["names"]["shortNames"],
        serde_json::json!(["cc", "cctl"])
    );
    assert_eq!(cc["spec"]["scope"], "Cluster");
    let dc = crds::decorator_controller();
    assert_eq!(
        dc["spec"]["names"]["shortNames"],
        serde_json::json!(["dec", "decorators"])
    );
    assert_eq!(crds::controller_revision()["spec"]["scope"], "Namespaced");
}

/// The embedded API server's implementation of kube-apiserver's schema handling
/// (pruning, defaulting, validation) accepts the CRDs and leaves every manifest as is,
/// apart from the `version: v1` hook default.
#[test]
fn embedded_apiserver_schema_keeps_every_manifest_field() {
    use embedded_apiserver::schema::StructuralSchema;
    for (name, manifest) in all_manifests() {
        let kind = manifest["kind"].as_str().unwrap();
        let crd = crds::all()
            .into_iter()
            .find(|c| c["spec"]["names"]["kind"] == kind)
            .unwrap();
        let schema = StructuralSchema::from_crd(&crd, "v1alpha1")
            .unwrap()
            .unwrap();
        let mut stored = manifest.clone();
        schema.apply_defaults(&mut stored);
        let pruned = schema.prune(&mut stored);
        assert!(pruned.is_empty(), "{name}: pruned {pruned:?}");
        let errors = schema.validate(&stored);
        assert!(errors.is_empty(), "{name}: {errors:?}");
        // Defaulting only fills in hook versions.
        let mut expected = manifest.clone();
        for hook in [
            "sync",
            "finalize",
            "customize",
            "preUpdateChild",
            "postUpdateChild",
        ] {
            if let Some(h) = expected.pointer_mut(&format!("/spec/hooks/{hook}")) {
                h.as_object_mut()
                    .unwrap()
                    .entry("version")
                    .or_insert("v1".into());
            }
        }
        assert_eq!(
            stored, expected,
            "{name}: defaulting changed more than hook versions"
        );
    }
    // The check can fail: a field the schema lacks is pruned, a bad enum is rejected.
    let crd = crds::composite_controller();
    let schema = StructuralSchema::from_crd(&crd, "v1alpha1")
        .unwrap()
        .unwrap();
    let mut bogus = load("upstream-docs.yaml").remove(0);
    bogus["spec"]["bogus"] = serde_json::json!(1);
    bogus["spec"]["hooks"]["sync"]["version"] = serde_json::json!("v3");
    assert_eq!(schema.prune(&mut bogus), vec!["spec.bogus".to_string()]);
    assert!(!schema.validate(&bogus).is_empty());
}
