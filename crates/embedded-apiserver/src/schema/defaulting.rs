//! Structural defaulting (apiextensions `schema/defaulting` semantics).

use super::{AdditionalProperties, Node};
use serde_json::Value;

fn additional_schema(s: &Node) -> Option<&Node> {
    match &s.additional_properties {
        Some(AdditionalProperties::Schema(n)) => Some(n),
        _ => None,
    }
}

/// A `null` where the schema does not allow one is treated as absent.
fn is_non_nullable_null(v: &Value, s: Option<&Node>) -> bool {
    v.is_null() && s.is_some_and(|s| !s.nullable)
}

pub(crate) fn default_and_prune_nulls(x: &mut Value, s: &Node) {
    default(x, s);
    prune_non_nullable_nulls(x, s);
}

fn default(x: &mut Value, s: &Node) {
    match x {
        Value::Object(m) => {
            for (k, prop) in &s.properties {
                let Some(d) = &prop.default else { continue };
                let absent = match m.get(k) {
                    None => true,
                    Some(v) => is_non_nullable_null(v, Some(prop)),
                };
                if absent {
                    m.insert(k.clone(), d.clone());
                }
            }
            let ap = additional_schema(s);
            for (k, v) in m.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    default(v, prop);
                } else if let Some(ap) = ap {
                    if is_non_nullable_null(v, Some(ap)) {
                        if let Some(d) = &ap.default {
                            *v = d.clone();
                        }
                    }
                    default(v, ap);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for v in a.iter_mut() {
                    if is_non_nullable_null(v, Some(items)) {
                        if let Some(d) = &items.default {
                            *v = d.clone();
                        }
                    }
                    default(v, items);
                }
            }
        }
        _ => {}
    }
}

/// Drops `null` values of non-nullable fields that have no default (they were
/// not defaulted above), recursively.
fn prune_non_nullable_nulls(x: &mut Value, s: &Node) {
    match x {
        Value::Object(m) => {
            let ap = additional_schema(s);
            m.retain(|k, v| {
                let sub = s.properties.get(k).or(ap);
                match sub {
                    Some(sub) => !(v.is_null() && !sub.nullable && sub.default.is_none()),
                    None => true,
                }
            });
            for (k, v) in m.iter_mut() {
                if let Some(sub) = s.properties.get(k).or(ap) {
                    prune_non_nullable_nulls(v, sub);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for v in a.iter_mut() {
                    prune_non_nullable_nulls(v, items);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use crate::schema::test_schema as schema;
    use serde_json::json;

    #[test]
    fn absent_fields_get_defaults_nested() {
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "default": {},
            "properties": {
                "replicas": {"type": "integer", "default": 1},
                "mode": {"type": "string", "default": "fast"},
                "nested": {"type": "object", "default": {"a": 1},
                    "properties": {"a": {"type": "integer"}, "b": {"type": "string", "default": "bee"}}}
            }}}}),
        );
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"}});
        s.apply_defaults(&mut obj);
        // The default `{}` of spec is itself defaulted recursively.
        assert_eq!(
            obj["spec"],
            json!({"replicas": 1, "mode": "fast", "nested": {"a": 1, "b": "bee"}})
        );
    }

    #[test]
    fn present_values_are_not_overwritten() {
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"replicas": {"type": "integer", "default": 1}}}}}),
        );
        let mut obj = json!({"spec": {"replicas": 5}});
        s.apply_defaults(&mut obj);
        assert_eq!(obj["spec"]["replicas"], 5);
        // No spec, no default for spec: nothing appears.
        let mut obj = json!({});
        s.apply_defaults(&mut obj);
        assert_eq!(obj, json!({}));
    }

    #[test]
    fn null_of_non_nullable_field_is_defaulted_or_dropped() {
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {
                "a": {"type": "integer", "default": 7},
                "b": {"type": "string"},
                "c": {"type": "string", "nullable": true, "default": "x"},
                "d": {"type": "string", "nullable": true}
            }}}}),
        );
        let mut obj = json!({"spec": {"a": null, "b": null, "c": null, "d": null}});
        s.apply_defaults(&mut obj);
        assert_eq!(obj["spec"], json!({"a": 7, "c": null, "d": null}));
    }

    #[test]
    fn defaults_apply_in_list_items_and_additional_properties() {
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "protocol": {"type": "string", "default": "TCP"}, "port": {"type": "integer"}}}},
                "byName": {"type": "object", "additionalProperties": {"type": "object",
                    "properties": {"enabled": {"type": "boolean", "default": true}}}}
            }}}}),
        );
        let mut obj = json!({"spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}],
            "byName": {"x": {}, "y": {"enabled": false}}}});
        s.apply_defaults(&mut obj);
        assert_eq!(
            obj["spec"]["ports"],
            json!([{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}])
        );
        assert_eq!(
            obj["spec"]["byName"],
            json!({"x": {"enabled": true}, "y": {"enabled": false}})
        );
    }
}
