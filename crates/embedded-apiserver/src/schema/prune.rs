//! Pruning of unknown fields (apiextensions `schema/pruning` semantics).

use super::{join_key, AdditionalProperties, Node};
use serde_json::{Map, Value};

/// Fields of `metav1.ObjectMeta`; anything else in `metadata` is dropped the
/// way decoding into ObjectMeta drops it on the real server.
pub(crate) const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn is_meta_field(k: &str) -> bool {
    matches!(k, "apiVersion" | "kind" | "metadata")
}

pub(crate) fn prune_root(obj: &mut Value, root: &Node) -> Vec<String> {
    let mut pruned = Vec::new();
    // The resource root is always treated as an embedded resource.
    prune(obj, Some(root), true, "", &mut pruned);
    pruned.sort();
    pruned
}

fn prune_metadata(meta: &mut Value, path: &str, pruned: &mut Vec<String>) {
    if let Value::Object(m) = meta {
        let unknown: Vec<String> = m
            .keys()
            .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
            .cloned()
            .collect();
        for k in unknown {
            m.remove(&k);
            pruned.push(join_key(path, &k));
        }
    }
}

/// `embedded` is the node's `x-kubernetes-embedded-resource` (forced true at
/// the root).
fn prune(x: &mut Value, s: Option<&Node>, embedded: bool, path: &str, pruned: &mut Vec<String>) {
    if let Some(s) = s {
        if s.preserve_unknown_fields {
            skip_prune(x, s, embedded, path, pruned);
            return;
        }
    }
    match x {
        Value::Object(m) => {
            let Some(s) = s else {
                let keys: Vec<String> = m.keys().cloned().collect();
                for k in keys {
                    pruned.push(join_key(path, &k));
                    m.remove(&k);
                }
                return;
            };
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let child_path = join_key(path, &k);
                if embedded && embedded_meta_field(m, &k, &child_path, pruned) {
                    continue;
                }
                if let Some(prop) = s.properties.get(&k) {
                    if let Some(v) = m.get_mut(&k) {
                        prune(v, Some(prop), prop.embedded_resource, &child_path, pruned);
                    }
                } else if let Some(ap) = &s.additional_properties {
                    let sub = match ap {
                        AdditionalProperties::Schema(n) => Some(n.as_ref()),
                        AdditionalProperties::Bool(_) => None,
                    };
                    if let Some(v) = m.get_mut(&k) {
                        let emb = sub.map(|n| n.embedded_resource).unwrap_or(false);
                        prune(v, sub, emb, &child_path, pruned);
                    }
                } else {
                    // Meta-named fields count as unknown everywhere but at the root.
                    if !is_meta_field(&k) || !path.is_empty() {
                        pruned.push(child_path);
                    }
                    m.remove(&k);
                }
            }
        }
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            for (i, v) in a.iter_mut().enumerate() {
                let emb = items.map(|n| n.embedded_resource).unwrap_or(false);
                prune(v, items, emb, &format!("{path}[{i}]"), pruned);
            }
        }
        _ => {}
    }
}

/// Whether `k` is a field of an embedded resource's root that its schema does not
/// describe (`apiVersion`, `kind`, `metadata`): `metadata` is pruned as ObjectMeta, the
/// others are kept as they are.
fn embedded_meta_field(
    m: &mut Map<String, Value>,
    k: &str,
    path: &str,
    pruned: &mut Vec<String>,
) -> bool {
    if !is_meta_field(k) {
        return false;
    }
    if k == "metadata" {
        if let Some(v) = m.get_mut(k) {
            prune_metadata(v, path, pruned);
        }
    }
    true
}

/// Below `x-kubernetes-preserve-unknown-fields`: unknown fields stay, known
/// ones are still pruned by their own schemas.
fn skip_prune(x: &mut Value, s: &Node, embedded: bool, path: &str, pruned: &mut Vec<String>) {
    match x {
        Value::Object(m) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let child_path = join_key(path, &k);
                if embedded && embedded_meta_field(m, &k, &child_path, pruned) {
                    continue;
                }
                let Some(v) = m.get_mut(&k) else { continue };
                if let Some(prop) = s.properties.get(&k) {
                    prune(v, Some(prop), prop.embedded_resource, &child_path, pruned);
                } else if let Some(ap) = &s.additional_properties {
                    let sub = match ap {
                        AdditionalProperties::Schema(n) => Some(n.as_ref()),
                        AdditionalProperties::Bool(_) => None,
                    };
                    let emb = sub.map(|n| n.embedded_resource).unwrap_or(false);
                    prune(v, sub, emb, &child_path, pruned);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for (i, v) in a.iter_mut().enumerate() {
                    skip_prune(
                        v,
                        items,
                        items.embedded_resource,
                        &format!("{path}[{i}]"),
                        pruned,
                    );
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
    fn unknown_fields_are_pruned_and_reported() {
        let s = schema(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}}
            }},
            "status": {"type": "object"}
        }}));
        let mut obj = json!({
            "apiVersion": "example.com/v1", "kind": "Foo",
            "metadata": {"name": "a", "labels": {"x": "y"}},
            "spec": {"replicas": 1, "foo": 1, "items": [{"name": "n", "bar": true}]},
            "status": {"phase": "x"},
            "extra": {}
        });
        let pruned = s.prune(&mut obj);
        assert_eq!(
            pruned,
            vec!["extra", "spec.foo", "spec.items[0].bar", "status.phase"]
        );
        assert_eq!(
            obj,
            json!({
                "apiVersion": "example.com/v1", "kind": "Foo",
                "metadata": {"name": "a", "labels": {"x": "y"}},
                "spec": {"replicas": 1, "items": [{"name": "n"}]},
                "status": {}
            })
        );
    }

    #[test]
    fn root_metadata_is_reduced_to_object_meta_fields() {
        let s = schema(json!({"type": "object"}));
        let mut obj = json!({"apiVersion": "v", "kind": "K",
            "metadata": {"name": "a", "bogus": 1, "finalizers": ["f"]}});
        let pruned = s.prune(&mut obj);
        assert_eq!(pruned, vec!["metadata.bogus"]);
        assert_eq!(obj["metadata"], json!({"name": "a", "finalizers": ["f"]}));
        assert_eq!(obj["apiVersion"], "v");
    }

    #[test]
    fn preserve_unknown_fields_keeps_unknown_but_prunes_known_subtrees() {
        let s = schema(json!({"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
                "known": {"type": "object", "properties": {"a": {"type": "string"}}}
            }}
        }}));
        let mut obj = json!({"spec": {"anything": {"deep": 1}, "known": {"a": "x", "b": "y"}}});
        let pruned = s.prune(&mut obj);
        assert_eq!(pruned, vec!["spec.known.b"]);
        assert_eq!(
            obj,
            json!({"spec": {"anything": {"deep": 1}, "known": {"a": "x"}}})
        );
    }

    #[test]
    fn root_preserve_unknown_fields_keeps_everything() {
        let s = schema(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        let mut obj = json!({"spec": {"x": 1}, "other": [1, 2]});
        assert!(s.prune(&mut obj).is_empty());
        assert_eq!(obj, json!({"spec": {"x": 1}, "other": [1, 2]}));
    }

    #[test]
    fn embedded_resource_keeps_type_and_object_meta() {
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}}
            }}}}),
        );
        let mut obj = json!({"spec": {"template": {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "junk": 1},
            "spec": {"x": "1", "y": "2"}, "status": {}
        }}});
        let pruned = s.prune(&mut obj);
        assert_eq!(
            pruned,
            vec![
                "spec.template.metadata.junk",
                "spec.template.spec.y",
                "spec.template.status"
            ]
        );
        assert_eq!(
            obj["spec"]["template"],
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": "1"}})
        );
    }

    #[test]
    fn additional_properties_schema_prunes_values() {
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "additionalProperties": {"type": "object", "properties": {"a": {"type": "integer"}}}}}}),
        );
        let mut obj = json!({"spec": {"k1": {"a": 1, "b": 2}, "k2": {"a": 3}}});
        assert_eq!(s.prune(&mut obj), vec!["spec.k1.b"]);
        assert_eq!(obj, json!({"spec": {"k1": {"a": 1}, "k2": {"a": 3}}}));
    }

    #[test]
    fn meta_named_fields_below_root_are_pruned_when_not_embedded() {
        let s = schema(json!({"type": "object", "properties": {"spec": {"type": "object"}}}));
        let mut obj = json!({"spec": {"kind": "x", "metadata": {}}});
        assert_eq!(s.prune(&mut obj), vec!["spec.kind", "spec.metadata"]);
        assert_eq!(obj, json!({"spec": {}}));
    }
}
