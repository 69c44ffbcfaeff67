//! What a DecoratorController changes on the target itself, without I/O: its finalizer,
//! the labels and annotations the hook asks for (a `null` value removes the key), its
//! status (replaced when the hook returns a non-null one), and which hook to call.
//!
//! The rules are upstream's: the finalizer `metacontroller.io/decoratorcontroller-<name>`
//! is present exactly while a finalize hook is configured (never added to an object
//! already being deleted); the finalize hook runs when the target is being deleted *or no
//! longer matches the selectors*, and `finalized: true` removes the finalizer.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::writer::json_equal;

pub(crate) use crate::finalizer::with_finalizer;

/// The target after applying a hook response.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetUpdate {
    /// The updated target (whole object, the cached resourceVersion kept).
    pub object: Value,
    /// Labels, annotations or finalizers changed: the object itself must be written.
    pub metadata_changed: bool,
    /// `status` changed.
    pub status_changed: bool,
}

impl TargetUpdate {
    /// True when nothing needs writing.
    pub fn is_noop(&self) -> bool {
        !self.metadata_changed && !self.status_changed
    }
}

/// Applies `updates` to the string map at `metadata.<field>`: a `Some` value sets the key,
/// `None` removes it. Returns whether anything changed. An emptied map is removed.
fn merge_string_map(
    meta: &mut Map<String, Value>,
    field: &str,
    updates: &BTreeMap<String, Option<String>>,
) -> bool {
    let mut map = match meta.get(field) {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    let mut changed = false;
    for (key, value) in updates {
        match value {
            None => changed |= map.remove(key).is_some(),
            Some(v) => {
                if map.get(key).and_then(Value::as_str) != Some(v.as_str()) {
                    map.insert(key.clone(), Value::String(v.clone()));
                    changed = true;
                }
            }
        }
    }
    if changed {
        if map.is_empty() {
            meta.remove(field);
        } else {
            meta.insert(field.to_string(), Value::Object(map));
        }
    }
    changed
}

/// Applies a hook response to the target: labels and annotations merged (null removes),
/// `status` replaced when given (an absent or null status leaves it as is; an empty object
/// is a real value and replaces a missing status), and `remove_finalizer` dropped from
/// `metadata.finalizers` (when the finalize hook answered `finalized: true`).
pub(crate) fn apply_response(
    target: &Value,
    labels: Option<&BTreeMap<String, Option<String>>>,
    annotations: Option<&BTreeMap<String, Option<String>>>,
    status: Option<&Map<String, Value>>,
    remove_finalizer: Option<&str>,
) -> TargetUpdate {
    let mut object = target.clone();
    let mut metadata_changed = false;
    let mut status_changed = false;
    if let Some(root) = object.as_object_mut() {
        let meta = root
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        if let Some(meta) = meta.as_object_mut() {
            if let Some(labels) = labels {
                metadata_changed |= merge_string_map(meta, "labels", labels);
            }
            if let Some(annotations) = annotations {
                metadata_changed |= merge_string_map(meta, "annotations", annotations);
            }
        }
        if let Some(status) = status {
            let status = Value::Object(status.clone());
            // Semantic equality: the API server may re-encode numbers (1.0 → 1).
            if !root
                .get("status")
                .is_some_and(|current| json_equal(current, &status))
            {
                root.insert("status".into(), status);
                status_changed = true;
            }
        }
    }
    if let Some(name) = remove_finalizer {
        if let Some(without) = with_finalizer(&object, name, false) {
            object = without;
            metadata_changed = true;
        }
    }
    TargetUpdate {
        object,
        metadata_changed,
        status_changed,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const FIN: &str = "metacontroller.io/decoratorcontroller-dc";

    fn target(meta: Value) -> Value {
        let mut t = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "5"}});
        if let (Some(m), Some(extra)) = (t["metadata"].as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        t
    }

    fn updates(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect()
    }

    #[test]
    fn labels_and_annotations_merge_and_null_removes() {
        let t = target(json!({"labels": {"keep": "1", "drop": "x", "change": "a"},
                              "annotations": {"a": "1"}}));
        let u = apply_response(
            &t,
            Some(&updates(&[
                ("drop", None),
                ("change", Some("b")),
                ("new", Some("n")),
                ("absent", None),
            ])),
            Some(&updates(&[("a", None)])),
            None,
            None,
        );
        assert!(u.metadata_changed);
        assert!(!u.status_changed);
        assert_eq!(
            u.object["metadata"]["labels"],
            json!({"keep": "1", "change": "b", "new": "n"})
        );
        // The last annotation removed: the map goes.
        assert!(u.object["metadata"].get("annotations").is_none());
        assert_eq!(u.object["metadata"]["resourceVersion"], "5");
    }

    #[test]
    fn converged_response_is_a_noop() {
        let t = target(json!({"labels": {"a": "1"}}));
        let mut t = t;
        t["status"] = json!({"ready": true});
        let status = json!({"ready": true});
        let u = apply_response(
            &t,
            Some(&updates(&[("a", Some("1")), ("gone", None)])),
            Some(&BTreeMap::new()),
            status.as_object(),
            None,
        );
        assert!(u.is_noop());
        assert_eq!(u.object, t);
        // Removing a finalizer we do not have is no change either.
        assert!(apply_response(&t, None, None, None, Some(FIN)).is_noop());
    }

    #[test]
    fn status_replaced_only_when_given() {
        let mut t = target(json!({}));
        t["status"] = json!({"old": 1, "other": 2});
        assert!(apply_response(&t, None, None, None, None).is_noop());
        let new = json!({"new": 1});
        let u = apply_response(&t, None, None, new.as_object(), None);
        assert!(u.status_changed && !u.metadata_changed);
        // Numbers compare by value, as the API server re-encodes them.
        let mut float = target(json!({}));
        float["status"] = json!({"n": 1});
        let same = json!({"n": 1.0});
        assert!(apply_response(&float, None, None, same.as_object(), None).is_noop());
        assert_eq!(u.object["status"], json!({"new": 1}));
        // An empty status replaces a missing one (a hook may use it as a marker).
        let bare = target(json!({}));
        let empty = json!({});
        let u = apply_response(&bare, None, None, empty.as_object(), None);
        assert!(u.status_changed);
        assert_eq!(u.object["status"], json!({}));
    }

    #[test]
    fn finalized_removes_the_finalizer() {
        let t = target(json!({"finalizers": [FIN, "other"]}));
        let u = apply_response(&t, None, None, None, Some(FIN));
        assert!(u.metadata_changed);
        assert_eq!(u.object["metadata"]["finalizers"], json!(["other"]));
    }
}
