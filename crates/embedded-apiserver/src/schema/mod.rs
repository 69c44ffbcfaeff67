//! Structural schemas of CustomResourceDefinitions and what kube-apiserver
//! does with them on every write of a custom resource:
//!
//! * [`StructuralSchema::prune`] — removal of unknown fields, as
//!   `apiextensions-apiserver/pkg/apiserver/schema/pruning` does it: fields not
//!   in `properties` are dropped unless `additionalProperties` or
//!   `x-kubernetes-preserve-unknown-fields` allow them; `apiVersion`, `kind`
//!   and `metadata` are kept at the root and inside
//!   `x-kubernetes-embedded-resource` objects, where `metadata` is reduced to
//!   the `ObjectMeta` fields (as the real server's ObjectMeta coercion does).
//!   The pruned paths are returned sorted (`spec.foo`, `spec.items[0].bar`,
//!   `metadata.foo`) for `fieldValidation=Strict|Warn` messages
//!   (`unknown field "spec.foo"`).
//! * [`StructuralSchema::apply_defaults`] — `default`s of the schema, applied
//!   to absent fields and to `null`s of non-nullable fields, recursively into
//!   properties, additionalProperties and items; `null`s of non-nullable
//!   fields without a default are then dropped (the real server's
//!   `PruneNonNullableNullsWithoutDefaults`). The server calls this on
//!   decoding a request *and* on reading from storage.
//! * [`StructuralSchema::validate`] — OpenAPI value validation as the
//!   kube-openapi validator reports it through apiextensions: field paths
//!   (`spec.replicas`, `spec.items[0].name`) and messages such as
//!   `spec.replicas: Invalid value: "string": spec.replicas in body must be
//!   of type integer: "string"` with the cause reasons of
//!   [`FieldErrorType`].
//!
//! Order on write (as in kube-apiserver): prune, default, validate.

mod defaulting;
mod errors;
mod prune;
pub mod rules;
mod rules_eval;
mod validation;

pub use errors::{go_quote, go_value, invalid_message, invalid_status, FieldError, FieldErrorType};

use regex::Regex;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Errors turning an `openAPIV3Schema` into a [`StructuralSchema`].
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SchemaError {
    /// A keyword had a value of the wrong JSON type.
    #[error("{path}: invalid schema: {message}")]
    Invalid {
        /// Path of the schema node (`properties.spec.properties.replicas`).
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// `additionalProperties` of a structural schema node.
#[derive(Debug, Clone)]
pub enum AdditionalProperties {
    /// `additionalProperties: true|false`.
    Bool(bool),
    /// `additionalProperties: {schema}`.
    Schema(Box<Node>),
}

/// One node of a structural schema (a `JSONSchemaProps` of apiextensions/v1).
#[derive(Debug, Clone, Default)]
pub struct Node {
    /// `type` (`object`, `array`, `string`, `integer`, `number`, `boolean`).
    pub type_: Option<String>,
    /// `format`.
    pub format: Option<String>,
    /// `nullable`.
    pub nullable: bool,
    /// `properties`.
    pub properties: BTreeMap<String, Node>,
    /// `additionalProperties`.
    pub additional_properties: Option<AdditionalProperties>,
    /// `items`.
    pub items: Option<Box<Node>>,
    /// `required`.
    pub required: Vec<String>,
    /// `enum`.
    pub enum_: Option<Vec<Value>>,
    /// `default`.
    pub default: Option<Value>,
    /// `minimum`.
    pub minimum: Option<f64>,
    /// `maximum`.
    pub maximum: Option<f64>,
    /// `exclusiveMinimum`.
    pub exclusive_minimum: bool,
    /// `exclusiveMaximum`.
    pub exclusive_maximum: bool,
    /// `multipleOf`.
    pub multiple_of: Option<f64>,
    /// `minLength`.
    pub min_length: Option<i64>,
    /// `maxLength`.
    pub max_length: Option<i64>,
    /// `pattern` (source text and compiled form).
    pub pattern: Option<(String, Regex)>,
    /// `minItems`.
    pub min_items: Option<i64>,
    /// `maxItems`.
    pub max_items: Option<i64>,
    /// `uniqueItems`.
    pub unique_items: bool,
    /// `minProperties`.
    pub min_properties: Option<i64>,
    /// `maxProperties`.
    pub max_properties: Option<i64>,
    /// `x-kubernetes-preserve-unknown-fields`.
    pub preserve_unknown_fields: bool,
    /// `x-kubernetes-embedded-resource`.
    pub embedded_resource: bool,
    /// `x-kubernetes-int-or-string`.
    pub int_or_string: bool,
    /// `x-kubernetes-list-type` (`atomic`, `set`, `map`).
    pub list_type: Option<String>,
    /// `x-kubernetes-list-map-keys`.
    pub list_map_keys: Vec<String>,
    /// `x-kubernetes-map-type` (`granular`, `atomic`).
    pub map_type: Option<String>,
    /// `allOf` (value validations only in structural schemas).
    pub all_of: Vec<Node>,
    /// `anyOf`.
    pub any_of: Vec<Node>,
    /// `oneOf`.
    pub one_of: Vec<Node>,
    /// `not`.
    pub not: Option<Box<Node>>,
    /// `x-kubernetes-validations` (CEL rules).
    pub validations: Vec<rules::Rule>,
    /// Whether this node or one below it has `x-kubernetes-validations` (so a write
    /// walks only the parts of an object that rules look at).
    pub rules_below: bool,
}

/// A parsed structural schema of one CRD version.
#[derive(Debug, Clone)]
pub struct StructuralSchema {
    /// Root node (the `openAPIV3Schema`).
    pub root: Node,
}

impl StructuralSchema {
    /// Parses an `openAPIV3Schema` (apiextensions.k8s.io/v1 JSON).
    pub fn from_openapi_v3(schema: &Value) -> Result<Self, SchemaError> {
        Ok(StructuralSchema {
            root: parse_node(schema, "openAPIV3Schema")?,
        })
    }

    /// Parses the schema of `version` from a whole CRD object
    /// (`spec.versions[name=version].schema.openAPIV3Schema`). A version
    /// without a schema yields `Ok(None)`.
    pub fn from_crd(crd: &Value, version: &str) -> Result<Option<Self>, SchemaError> {
        let versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for v in versions {
            if v.get("name").and_then(Value::as_str) == Some(version) {
                return match v.pointer("/schema/openAPIV3Schema") {
                    Some(s) => Self::from_openapi_v3(s).map(Some),
                    None => Ok(None),
                };
            }
        }
        Ok(None)
    }

    /// Removes unknown fields (see the module docs); returns the pruned
    /// paths, sorted.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        prune::prune_root(obj, &self.root)
    }

    /// Applies schema defaults (see the module docs).
    pub fn apply_defaults(&self, obj: &mut Value) {
        defaulting::default_and_prune_nulls(obj, &self.root);
    }

    /// Validates `obj` against the schema; errors in a stable order.
    pub fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validation::validate(obj, &self.root)
    }

    /// Runs the `x-kubernetes-validations` rules on `obj` (`old`: the stored object of an
    /// update, for transition rules); see [`rules`] for what is checked and what is skipped.
    pub fn validate_rules(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        rules_eval::validate_rules(obj, old, &self.root)
    }

    /// Whether the schema has any `x-kubernetes-validations` rule.
    pub fn has_rules(&self) -> bool {
        self.root.rules_below
    }
}

/// Rewrites integral floating-point numbers (`3.0`) as integers, recursively.
/// Go's JSON encoder prints float64 `3.0` as `3`, so a real server never
/// returns `3.0`; typed clients (k8s-openapi's `i32` fields) reject it.
pub fn normalize_numbers(v: &mut Value) {
    match v {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64() {
                if f.fract() == 0.0 && f.abs() < 9.0e18 {
                    *v = Value::from(f as i64);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalize_numbers),
        Value::Object(m) => m.values_mut().for_each(normalize_numbers),
        _ => {}
    }
}

/// The warning (`fieldValidation=Warn`, sent as a `Warning` header) for one
/// pruned path: `unknown field "spec.foo"`.
pub fn unknown_field_warning(path: &str) -> String {
    format!("unknown field {}", go_quote(path))
}

/// The strict-decoding error text for pruned paths
/// (`strict decoding error: unknown field "spec.foo", unknown field "x"`).
pub fn strict_decoding_error(paths: &[String]) -> String {
    let parts: Vec<String> = paths.iter().map(|p| unknown_field_warning(p)).collect();
    format!("strict decoding error: {}", parts.join(", "))
}

/// The 400 BadRequest message of a create/update with
/// `fieldValidation=Strict` and unknown fields:
/// `Widget in version "v1" cannot be handled as a Widget: strict decoding
/// error: unknown field "spec.foo"`.
pub fn strict_field_validation_message(kind: &str, version: &str, paths: &[String]) -> String {
    format!(
        "{kind} in version {} cannot be handled as a {kind}: {}",
        go_quote(version),
        strict_decoding_error(paths)
    )
}

fn invalid(path: &str, message: impl Into<String>) -> SchemaError {
    SchemaError::Invalid {
        path: path.to_string(),
        message: message.into(),
    }
}

fn opt_str(m: &Map<String, Value>, k: &str, path: &str) -> Result<Option<String>, SchemaError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(path, format!("{k} must be a string"))),
    }
}

fn opt_bool(m: &Map<String, Value>, k: &str, path: &str) -> Result<bool, SchemaError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(invalid(path, format!("{k} must be a boolean"))),
    }
}

fn opt_f64(m: &Map<String, Value>, k: &str, path: &str) -> Result<Option<f64>, SchemaError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(_) => Err(invalid(path, format!("{k} must be a number"))),
    }
}

fn opt_i64(m: &Map<String, Value>, k: &str, path: &str) -> Result<Option<i64>, SchemaError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| invalid(path, format!("{k} must be an integer"))),
        Some(_) => Err(invalid(path, format!("{k} must be an integer"))),
    }
}

fn str_list(m: &Map<String, Value>, k: &str, path: &str) -> Result<Vec<String>, SchemaError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| invalid(path, format!("{k} must be a list of strings")))
            })
            .collect(),
        Some(_) => Err(invalid(path, format!("{k} must be a list of strings"))),
    }
}

fn node_list(m: &Map<String, Value>, k: &str, path: &str) -> Result<Vec<Node>, SchemaError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| parse_node(v, &format!("{path}.{k}[{i}]")))
            .collect(),
        Some(_) => Err(invalid(path, format!("{k} must be a list of schemas"))),
    }
}

/// Parses one `JSONSchemaProps` node.
pub fn parse_node(v: &Value, path: &str) -> Result<Node, SchemaError> {
    let m = v
        .as_object()
        .ok_or_else(|| invalid(path, "schema must be an object"))?;
    let mut n = Node {
        type_: opt_str(m, "type", path)?,
        format: opt_str(m, "format", path)?,
        nullable: opt_bool(m, "nullable", path)?,
        required: str_list(m, "required", path)?,
        default: m.get("default").cloned(),
        minimum: opt_f64(m, "minimum", path)?,
        maximum: opt_f64(m, "maximum", path)?,
        exclusive_minimum: opt_bool(m, "exclusiveMinimum", path)?,
        exclusive_maximum: opt_bool(m, "exclusiveMaximum", path)?,
        multiple_of: opt_f64(m, "multipleOf", path)?,
        min_length: opt_i64(m, "minLength", path)?,
        max_length: opt_i64(m, "maxLength", path)?,
        min_items: opt_i64(m, "minItems", path)?,
        max_items: opt_i64(m, "maxItems", path)?,
        unique_items: opt_bool(m, "uniqueItems", path)?,
        min_properties: opt_i64(m, "minProperties", path)?,
        max_properties: opt_i64(m, "maxProperties", path)?,
        preserve_unknown_fields: opt_bool(m, "x-kubernetes-preserve-unknown-fields", path)?,
        embedded_resource: opt_bool(m, "x-kubernetes-embedded-resource", path)?,
        int_or_string: opt_bool(m, "x-kubernetes-int-or-string", path)?,
        list_type: opt_str(m, "x-kubernetes-list-type", path)?,
        list_map_keys: str_list(m, "x-kubernetes-list-map-keys", path)?,
        map_type: opt_str(m, "x-kubernetes-map-type", path)?,
        all_of: node_list(m, "allOf", path)?,
        any_of: node_list(m, "anyOf", path)?,
        one_of: node_list(m, "oneOf", path)?,
        ..Node::default()
    };
    if let Some(e) = m.get("enum") {
        match e {
            Value::Array(a) => n.enum_ = Some(a.clone()),
            Value::Null => {}
            _ => return Err(invalid(path, "enum must be a list")),
        }
    }
    if let Some(p) = opt_str(m, "pattern", path)? {
        let re = Regex::new(&p).map_err(|e| invalid(path, format!("pattern: {e}")))?;
        n.pattern = Some((p, re));
    }
    if let Some(props) = m.get("properties") {
        let props = props
            .as_object()
            .ok_or_else(|| invalid(path, "properties must be an object"))?;
        for (k, pv) in props {
            n.properties.insert(
                k.clone(),
                parse_node(pv, &format!("{path}.properties.{k}"))?,
            );
        }
    }
    match m.get("additionalProperties") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => n.additional_properties = Some(AdditionalProperties::Bool(*b)),
        Some(s @ Value::Object(_)) => {
            n.additional_properties = Some(AdditionalProperties::Schema(Box::new(parse_node(
                s,
                &format!("{path}.additionalProperties"),
            )?)))
        }
        Some(_) => {
            return Err(invalid(
                path,
                "additionalProperties must be a bool or schema",
            ))
        }
    }
    match m.get("items") {
        None | Some(Value::Null) => {}
        Some(s @ Value::Object(_)) => {
            n.items = Some(Box::new(parse_node(s, &format!("{path}.items"))?));
        }
        Some(_) => return Err(invalid(path, "items must be a schema")),
    }
    if let Some(s) = m.get("not") {
        n.not = Some(Box::new(parse_node(s, &format!("{path}.not"))?));
    }
    n.validations = rules::parse_rules(m);
    n.rules_below = !n.validations.is_empty()
        || n.properties.values().any(|p| p.rules_below)
        || n.items.as_ref().is_some_and(|i| i.rules_below)
        || matches!(&n.additional_properties, Some(AdditionalProperties::Schema(s)) if s.rules_below);
    Ok(n)
}

impl Node {
    /// The schema of a map value under key `k`: the property, else the
    /// `additionalProperties` schema. `Some(None)` means "allowed, no schema".
    pub fn child(&self, k: &str) -> Option<Option<&Node>> {
        if let Some(p) = self.properties.get(k) {
            return Some(Some(p));
        }
        match &self.additional_properties {
            Some(AdditionalProperties::Schema(s)) => Some(Some(s)),
            Some(AdditionalProperties::Bool(true)) => Some(None),
            _ => None,
        }
    }
}

/// Appends `.key` to a field path (no leading dot at the root).
pub(crate) fn join_key(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The structural schema of `v`, an OpenAPI v3 schema a test writes as JSON.
#[cfg(test)]
pub(crate) fn test_schema(v: Value) -> StructuralSchema {
    StructuralSchema::from_openapi_v3(&v).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_crd_version_schema() {
        let crd = json!({"spec": {"versions": [
            {"name": "v1", "schema": {"openAPIV3Schema": {"type": "object",
              "properties": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer", "default": 1}}}}}}},
            {"name": "v2"}
        ]}});
        let s = StructuralSchema::from_crd(&crd, "v1").unwrap().unwrap();
        assert_eq!(
            s.root.properties["spec"].properties["replicas"].default,
            Some(json!(1))
        );
        assert!(StructuralSchema::from_crd(&crd, "v2").unwrap().is_none());
        assert!(StructuralSchema::from_crd(&crd, "v3").unwrap().is_none());
    }

    #[test]
    fn integral_floats_become_integers() {
        let mut v = json!({"a": 3.0, "b": [1.5, -2.0, 7], "c": {"d": 1e3}});
        normalize_numbers(&mut v);
        assert_eq!(v.to_string(), r#"{"a":3,"b":[1.5,-2,7],"c":{"d":1000}}"#);
    }

    #[test]
    fn strict_field_validation_messages() {
        assert_eq!(
            unknown_field_warning("spec.foo"),
            "unknown field \"spec.foo\""
        );
        assert_eq!(
            strict_field_validation_message("Widget", "v1", &["spec.a".into(), "spec.b".into()]),
            "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"spec.a\", unknown field \"spec.b\""
        );
    }

    #[test]
    fn bad_schema_is_an_error_not_a_panic() {
        let err = StructuralSchema::from_openapi_v3(&json!({"type": 5})).unwrap_err();
        assert!(err.to_string().contains("type must be a string"), "{err}");
        let err = StructuralSchema::from_openapi_v3(&json!({"type": "string", "pattern": "("}))
            .unwrap_err();
        assert!(err.to_string().contains("pattern"), "{err}");
    }
}
