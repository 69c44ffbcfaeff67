//! CustomResourceDefinitions generated from the Rust types.
//!
//! Schemas come from `schemars` (doc comments become descriptions) and are rewritten
//! into Kubernetes *structural* schemas: every subschema inlined, no `nullable`/`anyOf`
//! for optional fields, free-form objects marked `x-kubernetes-preserve-unknown-fields`.
//! `hack/gen-crds.sh` writes [`all_yaml`] to `deploy/crds/` and
//! `charts/metacontroller/crds/`; a test fails when those files drift from the code.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::{json, Map, Value};

use crate::composite::CompositeControllerSpec;
use crate::decorator::DecoratorControllerSpec;
use crate::revision::ControllerRevisionChildren;
use crate::{CompositeController, ControllerRevision, DecoratorController, GROUP, VERSION};

/// File name of the generated CRDs under `deploy/crds/` and `charts/metacontroller/crds/`.
pub const CRD_FILE_NAME: &str = "metacontroller-crds-v1.yaml";

/// Schema of `T` as a structural OpenAPI v3 schema.
pub fn structural_schema<T: JsonSchema>() -> Value {
    let mut settings = SchemaSettings::openapi3();
    settings.inline_subschemas = true;
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    normalize(&mut value);
    value
}

/// Rewrites a schemars OpenAPI 3 schema into a structural one, recursively.
fn normalize(value: &mut Value) {
    let Value::Object(map) = value else { return };
    for key in [
        "$schema",
        "title",
        "nullable",
        "$defs",
        "definitions",
        "components",
    ] {
        map.remove(key);
    }
    // Option<T> comes out as `anyOf: [T, {nullable}]` or `allOf: [T]` in some cases;
    // Kubernetes wants the plain T.
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(variants)) = map.get(key).cloned() {
            let non_null: Vec<Value> = variants
                .into_iter()
                .filter(|v| !is_null_schema(v))
                .collect();
            if non_null.len() == 1 {
                map.remove(key);
                if let Value::Object(inner) = &non_null[0] {
                    for (k, v) in inner {
                        // The field's own description wins over the type's.
                        map.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
            }
        }
    }
    // Documented unit enums come out as `oneOf` of single-value string enums.
    if let Some(values) = map.get("oneOf").and_then(string_enum_values) {
        map.remove("oneOf");
        map.insert("type".into(), Value::String("string".into()));
        map.insert("enum".into(), Value::Array(values));
    }
    if let Some(Value::Array(types)) = map.get("type").cloned() {
        let non_null: Vec<Value> = types.into_iter().filter(|t| t != "null").collect();
        if non_null.len() == 1 {
            map.insert("type".into(), non_null[0].clone());
        }
    }
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    // `format: uint32`-style formats are not OpenAPI formats Kubernetes knows.
    if let Some(Value::String(format)) = map.get("format") {
        if !matches!(
            format.as_str(),
            "int32" | "int64" | "duration" | "double" | "float"
        ) {
            map.remove("format");
        }
    }
    // schemars emits `additionalProperties: false` for deny_unknown_fields only; a
    // `true` schema (serde_json::Value) means free-form.
    if map.get("additionalProperties") == Some(&Value::Bool(true)) {
        map.remove("additionalProperties");
        map.insert(
            "x-kubernetes-preserve-unknown-fields".into(),
            Value::Bool(true),
        );
    }
    for (_, child) in map.iter_mut() {
        match child {
            Value::Object(_) => normalize(child),
            Value::Array(items) => items.iter_mut().for_each(normalize),
            _ => {}
        }
    }
    // Property maps are objects keyed by field name: normalize their values, which the
    // loop above already did since `properties` is an object.
    if map.get("properties").is_some() && !map.contains_key("type") {
        map.insert("type".into(), Value::String("object".into()));
    }
}

/// When every variant is a string schema with `enum`/`const` values, all the values.
fn string_enum_values(variants: &Value) -> Option<Vec<Value>> {
    let mut values = Vec::new();
    for variant in variants.as_array()? {
        let variant = variant.as_object()?;
        if variant.get("type")? != "string" {
            return None;
        }
        match (variant.get("enum"), variant.get("const")) {
            (Some(Value::Array(vs)), _) => values.extend(vs.iter().cloned()),
            (None, Some(c)) => values.push(c.clone()),
            _ => return None,
        }
    }
    Some(values)
}

fn is_null_schema(v: &Value) -> bool {
    match v {
        Value::Object(m) => {
            m.get("type") == Some(&Value::String("null".into()))
                || m.get("enum") == Some(&json!([null]))
                || (m.get("nullable") == Some(&Value::Bool(true)) && m.len() == 1)
        }
        _ => false,
    }
}

fn type_meta_properties() -> Map<String, Value> {
    let mut props = Map::new();
    props.insert(
        "apiVersion".into(),
        json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
    );
    props.insert(
        "kind".into(),
        json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
    );
    props.insert("metadata".into(), json!({"type": "object"}));
    props
}

struct CrdNames {
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    short_names: &'static [&'static str],
    namespaced: bool,
}

fn crd(
    names: CrdNames,
    description: &str,
    mut properties: Map<String, Value>,
    required: &[&str],
) -> Value {
    let mut all = type_meta_properties();
    all.append(&mut properties);
    let mut crd_names = json!({
        "kind": names.kind,
        "listKind": format!("{}List", names.kind),
        "plural": names.plural,
        "singular": names.singular,
    });
    if !names.short_names.is_empty() {
        crd_names["shortNames"] = json!(names.short_names);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{}.{}", names.plural, GROUP),
            "annotations": {
                "api-approved.kubernetes.io": "unapproved, request not yet submitted"
            }
        },
        "spec": {
            "group": GROUP,
            "names": crd_names,
            "scope": if names.namespaced { "Namespaced" } else { "Cluster" },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "schema": {
                    "openAPIV3Schema": {
                        "description": description,
                        "type": "object",
                        "required": required,
                        "properties": all
                    }
                },
                "subresources": {"status": {}}
            }]
        }
    })
}

fn free_form_status() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// The CompositeController CRD.
pub fn composite_controller() -> Value {
    let mut props = Map::new();
    props.insert(
        "spec".into(),
        structural_schema::<CompositeControllerSpec>(),
    );
    props.insert("status".into(), free_form_status());
    crd(
        CrdNames {
            kind: CompositeController::KIND,
            plural: CompositeController::PLURAL,
            singular: "compositecontroller",
            short_names: &["cc", "cctl"],
            namespaced: false,
        },
        "CompositeController manages child objects for each object of a parent resource through webhooks.",
        props,
        &["metadata", "spec"],
    )
}

/// The DecoratorController CRD.
pub fn decorator_controller() -> Value {
    let mut props = Map::new();
    props.insert(
        "spec".into(),
        structural_schema::<DecoratorControllerSpec>(),
    );
    props.insert("status".into(), free_form_status());
    crd(
        CrdNames {
            kind: DecoratorController::KIND,
            plural: DecoratorController::PLURAL,
            singular: "decoratorcontroller",
            short_names: &["dec", "decorators"],
            namespaced: false,
        },
        "DecoratorController adds labels, annotations, status and attachments to existing objects through webhooks.",
        props,
        &["metadata", "spec"],
    )
}

/// The ControllerRevision CRD.
pub fn controller_revision() -> Value {
    let mut props = Map::new();
    props.insert(
        "parentPatch".into(),
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    );
    props.insert(
        "children".into(),
        json!({"type": "array", "items": structural_schema::<ControllerRevisionChildren>()}),
    );
    crd(
        CrdNames {
            kind: ControllerRevision::KIND,
            plural: ControllerRevision::PLURAL,
            singular: "controllerrevision",
            short_names: &[],
            namespaced: true,
        },
        "ControllerRevision records one revision of a parent and the children that belong to it.",
        props,
        &["metadata", "parentPatch"],
    )
}

/// All three CRDs, in a stable order (as `serde_json::Value`s that deserialize into
/// `k8s_openapi`'s `CustomResourceDefinition`).
pub fn all() -> Vec<Value> {
    vec![
        composite_controller(),
        controller_revision(),
        decorator_controller(),
    ]
}

/// All three CRDs as k8s-openapi objects, ready for `kube::Api::<CustomResourceDefinition>`.
pub fn all_typed() -> Result<Vec<CustomResourceDefinition>, serde_json::Error> {
    all().into_iter().map(serde_json::from_value).collect()
}

/// All CRDs as one multi-document YAML file, exactly as committed under `deploy/crds/`.
pub fn all_yaml() -> String {
    let mut out =
        String::from("# Generated by hack/gen-crds.sh from crates/api; do not edit by hand.\n");
    for crd in all() {
        out.push_str("---\n");
        // Serializing a serde_json::Value to YAML cannot fail (string keys only).
        out.push_str(&serde_yaml::to_string(&crd).unwrap_or_default());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALLOWED_KEYS: &[&str] = &[
        "type",
        "description",
        "properties",
        "items",
        "required",
        "enum",
        "default",
        "format",
        "additionalProperties",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
        "x-kubernetes-int-or-string",
    ];

    /// The rules of Kubernetes structural schemas our generator must meet (the API
    /// server rejects a CRD that breaks them).
    fn check_structural(schema: &Value, path: &str, problems: &mut Vec<String>) {
        let Value::Object(map) = schema else {
            problems.push(format!("{path}: schema is not an object"));
            return;
        };
        for key in map.keys() {
            if !ALLOWED_KEYS.contains(&key.as_str()) {
                problems.push(format!("{path}: unexpected keyword {key}"));
            }
        }
        let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
            // Kubernetes allows an int-or-string field without a type.
            || map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        let ty = map.get("type").and_then(Value::as_str);
        if ty.is_none() && !preserve {
            problems.push(format!("{path}: no type"));
        }
        if map.contains_key("properties") && map.contains_key("additionalProperties") {
            problems.push(format!(
                "{path}: properties and additionalProperties together"
            ));
        }
        match ty {
            Some("array") if !map.contains_key("items") => {
                problems.push(format!("{path}: array without items"))
            }
            Some("object") | Some("string") | Some("integer") | Some("boolean")
            | Some("number") | Some("array") | None => {}
            Some(other) => problems.push(format!("{path}: unknown type {other}")),
        }
        if let Some(Value::Object(props)) = map.get("properties") {
            for (k, v) in props {
                check_structural(v, &format!("{path}.{k}"), problems);
            }
        }
        if let Some(items) = map.get("items") {
            check_structural(items, &format!("{path}[]"), problems);
        }
        if let Some(additional @ Value::Object(_)) = map.get("additionalProperties") {
            check_structural(additional, &format!("{path}{{}}"), problems);
        }
        if let Some(Value::Array(required)) = map.get("required") {
            for r in required {
                let known = map
                    .get("properties")
                    .and_then(|p| p.get(r.as_str().unwrap_or_default()))
                    .is_some();
                if !known {
                    problems.push(format!("{path}: required {r} is not a property"));
                }
            }
        }
    }

    #[test]
    fn generated_schemas_are_structural() {
        for crd in all() {
            let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
            let mut problems = Vec::new();
            check_structural(schema, "", &mut problems);
            assert!(
                problems.is_empty(),
                "{}: {problems:#?}",
                crd["metadata"]["name"]
            );
        }
    }

    #[test]
    fn hook_version_defaults_to_v1_and_timeout_is_a_duration() {
        let crd = composite_controller();
        let sync = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["hooks"]["properties"]["sync"];
        assert_eq!(sync["properties"]["version"]["default"], "v1");
        assert_eq!(sync["properties"]["version"]["enum"], json!(["v1", "v2"]));
        let webhook = &sync["properties"]["webhook"]["properties"];
        assert_eq!(webhook["timeout"]["format"], "duration");
        assert_eq!(
            webhook["responseUnMarshallMode"]["enum"],
            json!(["loose", "strict"])
        );
    }

    #[test]
    fn yaml_has_three_documents() {
        use serde::Deserialize;
        let yaml = all_yaml();
        let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&yaml)
            .map(|doc| Value::deserialize(doc).unwrap())
            .collect();
        assert_eq!(docs, all());
        assert!(yaml.contains("name: compositecontrollers.metacontroller.k8s.io"));
        assert!(yaml.contains("name: controllerrevisions.metacontroller.k8s.io"));
        assert!(yaml.contains("name: decoratorcontrollers.metacontroller.k8s.io"));
    }
}
