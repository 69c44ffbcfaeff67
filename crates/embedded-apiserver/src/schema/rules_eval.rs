//! Running the `x-kubernetes-validations` rules of a structural schema on a write, as
//! apiextensions-apiserver's CEL validator does:
//!
//! * every node's rules run with `self` bound to the node's value; the rules of a node come
//!   before those of its children, whose paths are `spec.x`, `spec.list[0]`, `spec.map[key]`;
//! * a transition rule (one reading `oldSelf`) runs only on an update and only where the old
//!   object has a value at the same place: object properties and map values by key, list items
//!   only in `x-kubernetes-list-type: map` lists, by their map keys;
//! * `self` is typed by the schema: `integer` fields are CEL ints, `number` fields doubles,
//!   null fields absent, property names escaped (`x-y` → `x__dash__y`), fields the schema does
//!   not declare (preserved unknown fields) invisible, and `metadata` at the root and in
//!   embedded resources reduced to `name` and `generateName`;
//! * a failure is `field.Invalid(path, <schema type>, message)` (or the rule's `reason`), and
//!   an evaluation error `<error> evaluating rule: <message or rule>`.
//!
//! What cel-rust cannot evaluate (an undeclared function, a type it handles differently) skips
//! the rule with a log line; see [`super::rules`].

use super::errors::FieldError;
use super::rules::{env, Rule, RuleReason};
use super::{join_key, AdditionalProperties, Node};
use cel::objects::{Key, Map as CelMap};
use cel::{Context, ExecutionError, Value as Cel};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// Runs every rule of `schema` on `obj` (`old`: the stored object on an update).
pub(crate) fn validate_rules(obj: &Value, old: Option<&Value>, schema: &Node) -> Vec<FieldError> {
    let mut errs = Vec::new();
    walk(obj, old, schema, "", true, &mut errs);
    errs
}

fn walk(
    x: &Value,
    old: Option<&Value>,
    s: &Node,
    path: &str,
    root: bool,
    errs: &mut Vec<FieldError>,
) {
    if !s.rules_below || x.is_null() {
        return;
    }
    if !s.validations.is_empty() {
        if let Some(this) = to_cel(x, Some(s), root) {
            let prev = old.and_then(|o| to_cel(o, Some(s), root));
            for rule in &s.validations {
                if let Some(e) = run(rule, &this, prev.as_ref(), s, path) {
                    errs.push(e);
                }
            }
        }
    }
    match x {
        Value::Object(m) => walk_object(m, old.and_then(Value::as_object), s, path, errs),
        Value::Array(a) => walk_array(a, old.and_then(Value::as_array), s, path, errs),
        _ => {}
    }
}

fn walk_object(
    m: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
    s: &Node,
    path: &str,
    errs: &mut Vec<FieldError>,
) {
    for (k, v) in m {
        let prev = old.and_then(|o| o.get(k));
        if let Some(p) = s.properties.get(k) {
            walk(v, prev, p, &join_key(path, k), false, errs);
        } else if let Some(AdditionalProperties::Schema(ap)) = &s.additional_properties {
            walk(v, prev, ap, &format!("{path}[{k}]"), false, errs);
        }
    }
}

fn walk_array(
    a: &[Value],
    old: Option<&Vec<Value>>,
    s: &Node,
    path: &str,
    errs: &mut Vec<FieldError>,
) {
    let Some(items) = s.items.as_deref() else {
        return;
    };
    for (i, v) in a.iter().enumerate() {
        let prev = old.and_then(|o| correlated_item(v, o, s));
        walk(v, prev, items, &format!("{path}[{i}]"), false, errs);
    }
}

/// The old item a new list item is compared with: only `map` lists correlate, by their keys.
fn correlated_item<'a>(item: &Value, old: &'a [Value], s: &Node) -> Option<&'a Value> {
    if s.list_type.as_deref() != Some("map") || s.list_map_keys.is_empty() {
        return None;
    }
    old.iter()
        .find(|o| s.list_map_keys.iter().all(|k| o.get(k) == item.get(k)))
}

/// Evaluates one rule; the field error when it fails.
fn run(rule: &Rule, this: &Cel, prev: Option<&Cel>, s: &Node, path: &str) -> Option<FieldError> {
    if rule.transition && prev.is_none() {
        return None;
    }
    let program = rule.program.as_ref()?;
    let mut ctx = Context::with_env(env());
    ctx.add_variable_from_value("self", this.clone());
    if let Some(p) = prev {
        ctx.add_variable_from_value("oldSelf", p.clone());
    }
    let type_name = Value::String(s.type_.clone().unwrap_or_default());
    match program.execute(&ctx) {
        Ok(Cel::Bool(true)) => None,
        Ok(Cel::Bool(false)) => {
            let field = match &rule.field_path {
                Some(p) => join_key(path, p),
                None => path.to_string(),
            };
            let detail = message(rule, &ctx);
            Some(failure(rule.reason, field, type_name, detail))
        }
        Ok(other) => {
            rule.log_skipped(&format!("evaluates to {:?}, not a bool", other.type_of()));
            None
        }
        Err(e) => match runtime_error(&e) {
            Some(text) => Some(FieldError::invalid(
                path,
                type_name,
                format!("{text} evaluating rule: {}", rule.error_string()),
            )),
            None => {
                rule.log_skipped(&e.to_string());
                None
            }
        },
    }
}

/// The failure message: `messageExpression`'s value when it evaluates to a usable string
/// (non-blank, one line), else `message` / `failed rule: <rule>`.
fn message(rule: &Rule, ctx: &Context) -> String {
    if let Some(expr) = &rule.message_expression {
        match expr.execute(ctx) {
            Ok(Cel::String(s)) if !s.trim().is_empty() && !s.contains('\n') => {
                return s.to_string();
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "messageExpression evaluation failed"),
        }
    }
    rule.message_or_default()
}

fn failure(reason: RuleReason, field: String, type_name: Value, detail: String) -> FieldError {
    match reason {
        RuleReason::Invalid => FieldError::invalid(field, type_name, detail),
        RuleReason::Forbidden => FieldError::forbidden(field, detail),
        RuleReason::Required => FieldError::required(field, detail),
        RuleReason::Duplicate => FieldError::duplicate(field, type_name),
    }
}

/// The errors a rule that type-checked in Kubernetes can still hit at run time, in cel-go's
/// words; anything else from cel-rust is a gap of this server, not of the object.
fn runtime_error(e: &ExecutionError) -> Option<String> {
    match e {
        ExecutionError::NoSuchKey(k) => Some(format!("no such key: {k}")),
        ExecutionError::DivisionByZero(_) => Some("division by zero".into()),
        ExecutionError::RemainderByZero(_) => Some("modulus by zero".into()),
        ExecutionError::Overflow(..) => Some("integer overflow".into()),
        _ => None,
    }
}

/// The CEL value of `x` typed by `s` (`None`: not visible to rules, as a null).
fn to_cel(x: &Value, s: Option<&Node>, root: bool) -> Option<Cel> {
    Some(match x {
        Value::Null => return None,
        Value::Bool(b) => Cel::Bool(*b),
        Value::String(v) => Cel::String(Arc::new(v.clone())),
        Value::Number(n) => number(n, s),
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            Cel::List(Arc::new(
                a.iter().filter_map(|v| to_cel(v, items, false)).collect(),
            ))
        }
        Value::Object(m) => Cel::Map(object(m, s, root)),
    })
}

fn number(n: &serde_json::Number, s: Option<&Node>) -> Cel {
    let declared = s.and_then(|s| s.type_.as_deref());
    match (declared, n.as_i64(), n.as_u64()) {
        (Some("number"), _, _) => Cel::Float(n.as_f64().unwrap_or_default()),
        (_, Some(i), _) => Cel::Int(i),
        (_, None, Some(u)) => Cel::UInt(u),
        _ => Cel::Float(n.as_f64().unwrap_or_default()),
    }
}

fn object(m: &Map<String, Value>, s: Option<&Node>, root: bool) -> CelMap {
    let mut out: HashMap<Key, Cel> = HashMap::new();
    let embedded = root || s.is_some_and(|s| s.embedded_resource);
    for (k, v) in m {
        if embedded && (k == "apiVersion" || k == "kind" || k == "metadata") {
            if let Some(c) = object_meta_field(k, v) {
                out.insert(Key::String(Arc::new(k.clone())), c);
            }
            continue;
        }
        let Some(s) = s else {
            if let Some(c) = to_cel(v, None, false) {
                out.insert(Key::String(Arc::new(k.clone())), c);
            }
            continue;
        };
        if let Some(p) = s.properties.get(k) {
            let (Some(name), Some(c)) = (escape(k), to_cel(v, Some(p), false)) else {
                continue;
            };
            out.insert(Key::String(Arc::new(name)), c);
        } else if let Some(ap) = &s.additional_properties {
            let child = match ap {
                AdditionalProperties::Schema(n) => Some(n.as_ref()),
                AdditionalProperties::Bool(_) => None,
            };
            if let Some(c) = to_cel(v, child, false) {
                out.insert(Key::String(Arc::new(k.clone())), c);
            }
        }
    }
    out.into()
}

/// `apiVersion`, `kind`, and `metadata` reduced to `name` and `generateName`: all rules see
/// of an object's header.
fn object_meta_field(k: &str, v: &Value) -> Option<Cel> {
    if k != "metadata" {
        return v.as_str().map(|s| Cel::String(Arc::new(s.to_string())));
    }
    let meta = v.as_object()?;
    let mut out: HashMap<Key, Cel> = HashMap::new();
    for f in ["name", "generateName"] {
        if let Some(s) = meta.get(f).and_then(Value::as_str) {
            out.insert(
                Key::String(Arc::new(f.into())),
                Cel::String(Arc::new(s.into())),
            );
        }
    }
    Some(Cel::Map(out.into()))
}

const RESERVED: [&str; 18] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
];

/// A property name as rules spell it (Kubernetes' escaping); `None` when rules cannot name it.
pub(crate) fn escape(name: &str) -> Option<String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || "_.-/".contains(c));
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c));
    if !first_ok || !rest_ok {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    Some(
        name.replace("__", "__underscores__")
            .replace('.', "__dot__")
            .replace('-', "__dash__")
            .replace('/', "__slash__"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::test_schema;
    use serde_json::json;

    fn schema() -> crate::schema::StructuralSchema {
        test_schema(json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "!has(self.min) || !has(self.max) || self.min < self.max",
             "message": "min must be below max"},
            {"rule": "self.name == oldSelf.name", "message": "name is immutable"},
            {"rule": "!has(self.mode) || self.mode != 'bad'",
             "messageExpression": "'mode ' + self.mode + ' is not allowed'"},
            {"rule": "!has(self.x__dash__y) || self.x__dash__y > 0.5"},
            {"rule": "!has(self.tags) || self.tags.isSorted()"}
        ],
        "properties": {
            "name": {"type": "string"}, "min": {"type": "integer"}, "max": {"type": "integer"},
            "mode": {"type": "string"}, "x-y": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "port": {"type": "integer"}},
                    "x-kubernetes-validations": [
                        {"rule": "self.port == oldSelf.port", "message": "port is immutable",
                         "reason": "FieldValueForbidden"}]}},
            "labels": {"type": "object", "additionalProperties": {"type": "string",
                "x-kubernetes-validations": [{"rule": "size(self) > 0",
                    "message": "label values may not be empty"}]}}
        }}}}))
    }

    fn check(obj: Value, old: Option<Value>) -> Vec<String> {
        let s = schema();
        validate_rules(&obj, old.as_ref(), &s.root)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn failures_name_the_node_and_its_schema_type() {
        assert_eq!(
            check(json!({"spec": {"min": 5, "max": 3, "mode": "bad"}}), None),
            [
                "spec: Invalid value: \"object\": min must be below max",
                "spec: Invalid value: \"object\": mode bad is not allowed",
            ]
        );
        assert!(check(json!({"spec": {"min": 1, "max": 3}}), None).is_empty());
        assert_eq!(
            check(json!({"spec": {"labels": {"a": "", "b": "x"}}}), None),
            ["spec.labels[a]: Invalid value: \"string\": label values may not be empty"]
        );
        assert_eq!(
            check(json!({"spec": {"x-y": 0.25}}), None),
            ["spec: Invalid value: \"object\": failed rule: !has(self.x__dash__y) || self.x__dash__y > 0.5"]
        );
    }

    #[test]
    fn transition_rules_need_an_old_value() {
        assert!(check(json!({"spec": {}}), None).is_empty());
        assert_eq!(
            check(json!({"spec": {}}), Some(json!({"spec": {"name": "a"}}))),
            ["spec: Invalid value: \"object\": no such key: name evaluating rule: name is immutable"]
        );
        assert_eq!(
            check(
                json!({"spec": {"name": "a", "ports": [{"name": "p", "port": 2}, {"name": "q", "port": 3}]}}),
                Some(json!({"spec": {"name": "a", "ports": [{"name": "p", "port": 1}]}}))
            ),
            ["spec.ports[0]: Forbidden: port is immutable"]
        );
    }

    #[test]
    fn functions_cel_rust_lacks_skip_the_rule() {
        assert!(check(json!({"spec": {"tags": ["b", "a"]}}), None).is_empty());
    }

    #[test]
    fn escaping_follows_kubernetes() {
        assert_eq!(escape("x-prop").as_deref(), Some("x__dash__prop"));
        assert_eq!(
            escape("redact__d").as_deref(),
            Some("redact__underscores__d")
        );
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("a.b/c").as_deref(), Some("a__dot__b__slash__c"));
        assert_eq!(escape("1abc"), None);
    }
}
