//! The JSON Schemas of the hook messages under docs/schemas/ are generated from the
//! Rust wire types. This test regenerates them and fails when the checked-in files
//! differ; run it with `METACONTROLLER_BLESS_SCHEMAS=1` to rewrite them:
//!
//! ```sh
//! METACONTROLLER_BLESS_SCHEMAS=1 cargo test -p metacontroller-hook --test schemas
//! ```
//!
//! It also validates every golden hook request and response of the controller's tests
//! against its schema.

use std::path::PathBuf;

use metacontroller_hook::{
    CompositeHookRequest, CompositeHookResponse, CustomizeHookRequest, CustomizeHookResponse,
    DecoratorHookRequest, DecoratorHookResponse,
};
use schemars::JsonSchema;
use serde_json::{Map, Value};

const V1_KEYS: &str = "Objects grouped by type: `<Kind>.<apiVersion>` (e.g. `Pod.v1`, `Deployment.apps/v1`) → object name → object. Hook version v1 keys objects by name relative to the parent (`<namespace>/<name>` when a cluster-scoped parent has namespaced objects). Every declared type has an entry, possibly empty.";
const V2_KEYS: &str = "Objects grouped by type: `<Kind>.<apiVersion>` (e.g. `Pod.v1`, `Deployment.apps/v1`) → key → object. Hook version v2 keys namespaced objects `<namespace>/<name>` and cluster-scoped ones `<name>`, whatever the parent's scope. Every declared type has an entry, possibly empty.";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn schema_of<T: JsonSchema>(version: &str, name: &str, title: &str) -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap();
    let obj = schema.as_object_mut().unwrap();
    obj.insert(
        "$id".into(),
        Value::String(format!(
            "https://github.com/metacontroller-rs/metacontroller-rs/docs/schemas/{version}/{name}.json"
        )),
    );
    obj.insert("title".into(), Value::String(title.into()));
    // The selectors' schema is written for the CRD (structural, never null), but a hook
    // may answer `null` for them, as Go's encoder does for a nil pointer.
    for field in ["labelSelector", "namespaceSelector"] {
        let pointer = format!("/$defs/RelatedResourceRule/properties/{field}/type");
        if let Some(ty) = schema.pointer_mut(&pointer) {
            *ty = serde_json::json!(["object", "null"]);
        }
    }
    if let Some(map) = schema.pointer_mut("/$defs/ObjectMap") {
        map["description"] = Value::String(if version == "v1" { V1_KEYS } else { V2_KEYS }.into());
    }
    schema
}

/// Builds the schema of one message: [`schema_of`] for its wire type.
type Generate = fn(&str, &str, &str) -> Value;

/// Every message with a schema, in file order: file stem, title, and its wire type's
/// generator.
const MESSAGES: [(&str, &str, Generate); 10] = [
    (
        "composite-sync-request",
        "CompositeController sync hook request",
        schema_of::<CompositeHookRequest>,
    ),
    (
        "composite-sync-response",
        "CompositeController sync hook response",
        schema_of::<CompositeHookResponse>,
    ),
    (
        "composite-finalize-request",
        "CompositeController finalize hook request",
        schema_of::<CompositeHookRequest>,
    ),
    (
        "composite-finalize-response",
        "CompositeController finalize hook response",
        schema_of::<CompositeHookResponse>,
    ),
    (
        "decorator-sync-request",
        "DecoratorController sync hook request",
        schema_of::<DecoratorHookRequest>,
    ),
    (
        "decorator-sync-response",
        "DecoratorController sync hook response",
        schema_of::<DecoratorHookResponse>,
    ),
    (
        "decorator-finalize-request",
        "DecoratorController finalize hook request",
        schema_of::<DecoratorHookRequest>,
    ),
    (
        "decorator-finalize-response",
        "DecoratorController finalize hook response",
        schema_of::<DecoratorHookResponse>,
    ),
    (
        "customize-request",
        "Customize hook request (CompositeController or DecoratorController)",
        schema_of::<CustomizeHookRequest>,
    ),
    (
        "customize-response",
        "Customize hook response",
        schema_of::<CustomizeHookResponse>,
    ),
];

/// Every schema file: (version, file stem, schema).
fn schemas() -> Vec<(&'static str, &'static str, Value)> {
    let mut out = Vec::new();
    for version in ["v1", "v2"] {
        for (stem, title, generate) in MESSAGES {
            out.push((version, stem, generate(version, stem, title)));
        }
    }
    out
}

fn schema_path(version: &str, stem: &str) -> PathBuf {
    root()
        .join("docs/schemas")
        .join(version)
        .join(format!("{stem}.json"))
}

#[test]
fn checked_in_schemas_are_up_to_date() {
    let bless = std::env::var_os("METACONTROLLER_BLESS_SCHEMAS").is_some();
    let mut stale = Vec::new();
    for (version, stem, schema) in schemas() {
        let path = schema_path(version, stem);
        let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "out of date (run METACONTROLLER_BLESS_SCHEMAS=1 cargo test -p metacontroller-hook --test schemas): {stale:?}"
    );
}

#[test]
fn golden_hook_messages_validate_against_the_schemas() {
    let goldens = root().join("crates/metacontroller/tests/golden/hooks");
    let mut checked = 0;
    for (version, stem, schema) in schemas() {
        let files: Vec<String> = if stem == "customize-request" {
            vec![
                "customize-request-composite.json".into(),
                "customize-request-decorator.json".into(),
            ]
        } else {
            vec![format!("{stem}.json")]
        };
        for file in files {
            let path = goldens.join(version).join(&file);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let instance: Value = serde_json::from_str(&text).unwrap();
            let errors = validate(&schema, &schema, &instance, "");
            assert!(
                errors.is_empty(),
                "{} against {stem}: {errors:#?}",
                path.display()
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 22);
}

#[test]
fn the_validator_rejects_what_the_schemas_forbid() {
    let schema = schema_of::<CompositeHookRequest>("v2", "composite-sync-request", "t");
    let bad = serde_json::json!({"parent": {}, "children": {"Pod.v1": []}, "finalizing": "no"});
    let errors = validate(&schema, &schema, &bad, "");
    let text = errors.join("\n");
    assert!(text.contains("/controller: required"), "{text}");
    assert!(text.contains("/children/Pod.v1"), "{text}");
    assert!(text.contains("/finalizing"), "{text}");
    let response = schema_of::<CompositeHookResponse>("v2", "composite-sync-response", "t");
    let errors = validate(
        &response,
        &response,
        &serde_json::json!({"children": {}}),
        "",
    );
    assert!(!errors.is_empty());
    let events = |events: Value| {
        validate(
            &response,
            &response,
            &serde_json::json!({ "events": events }),
            "",
        )
    };
    let good = CompositeHookResponse::default().event("Warning", "QuotaLow", "m");
    assert_eq!(
        events(serde_json::to_value(&good.events).unwrap()),
        Vec::<String>::new()
    );
    let text =
        events(serde_json::json!([{"type": "Info", "reason": "R"}, {"message": "m"}])).join("\n");
    assert!(text.contains("/events/0/type"), "{text}");
    assert!(text.contains("/events/1/reason: required"), "{text}");
}

/// A validator for the JSON Schema subset schemars emits (`$ref` into `$defs`, `type`,
/// `properties`, `required`, `additionalProperties`, `items`, `anyOf`/`oneOf`, `enum`,
/// `const`, `format` ignored). Kept here rather than a validator crate: the full
/// validators pull an HTTP client and dozens of crates into the build for features
/// these schemas never use; the test above proves this one rejects violations.
fn validate(root: &Value, schema: &Value, instance: &Value, at: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let Some(schema) = schema.as_object() else {
        if schema == &Value::Bool(false) {
            errors.push(format!("{at}: not allowed"));
        }
        return errors;
    };
    validate_alternatives(root, schema, instance, at, &mut errors);
    if let Some(error) = type_error(schema, instance, at) {
        errors.push(error);
        return errors;
    }
    if let Some(object) = instance.as_object() {
        validate_properties(root, schema, object, at, &mut errors);
    }
    if let (Some(items), Some(array)) = (schema.get("items"), instance.as_array()) {
        for (i, item) in array.iter().enumerate() {
            errors.extend(validate(root, items, item, &format!("{at}/{i}")));
        }
    }
    errors
}

/// The keywords naming what the instance must be elsewhere or among: `$ref` (validated
/// against its target), `anyOf`/`oneOf`, `enum` and `const`.
fn validate_alternatives(
    root: &Value,
    schema: &Map<String, Value>,
    instance: &Value,
    at: &str,
    errors: &mut Vec<String>,
) {
    if let Some(Value::String(reference)) = schema.get("$ref") {
        let target = reference
            .strip_prefix('#')
            .and_then(|p| root.pointer(p))
            .unwrap_or_else(|| panic!("unresolvable $ref {reference}"));
        errors.extend(validate(root, target, instance, at));
    }
    if let Some(Value::Array(any)) = schema.get("anyOf").or_else(|| schema.get("oneOf")) {
        if !any
            .iter()
            .any(|s| validate(root, s, instance, at).is_empty())
        {
            errors.push(format!("{at}: matches none of anyOf/oneOf"));
        }
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        if !values.contains(instance) {
            errors.push(format!("{at}: not one of {values:?}"));
        }
    }
    if let Some(value) = schema.get("const") {
        if value != instance {
            errors.push(format!("{at}: not {value}"));
        }
    }
}

/// The error when the instance has none of the schema's `type`s (then nothing else of
/// the schema applies to it).
fn type_error(schema: &Map<String, Value>, instance: &Value, at: &str) -> Option<String> {
    let types: Vec<&str> = match schema.get("type")? {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let ok = types.iter().any(|t| match *t {
        "object" => instance.is_object(),
        "array" => instance.is_array(),
        "string" => instance.is_string(),
        "boolean" => instance.is_boolean(),
        "null" => instance.is_null(),
        "number" => instance.is_number(),
        "integer" => instance.as_i64().is_some() || instance.as_u64().is_some(),
        _ => false,
    });
    (!ok).then(|| format!("{at}: not of type {types:?}"))
}

/// An object's `required` fields, and each field against its `properties` entry or else
/// `additionalProperties`.
fn validate_properties(
    root: &Value,
    schema: &Map<String, Value>,
    object: &Map<String, Value>,
    at: &str,
    errors: &mut Vec<String>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !object.contains_key(name) {
                errors.push(format!("{at}/{name}: required"));
            }
        }
    }
    for (key, value) in object {
        let path = format!("{at}/{key}");
        match properties.and_then(|p| p.get(key)) {
            Some(sub) => errors.extend(validate(root, sub, value, &path)),
            None => {
                if let Some(extra) = schema.get("additionalProperties") {
                    errors.extend(validate(root, extra, value, &path));
                }
            }
        }
    }
}
