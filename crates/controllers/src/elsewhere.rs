//! Extension (`childResources[].namespaces`, upstream issue #236): children of a namespaced
//! parent that live in another namespace or are cluster-scoped. No ownerReference can name
//! a parent across namespaces (the garbage collector would delete the child), so such a
//! child carries the parent's uid in [`PARENT_UID_LABEL`] and names the parent in
//! [`PARENT_ANNOTATION`] / [`PARENT_KIND_ANNOTATION`]. The caches index the label like a
//! controller reference (`ObjectMetaAccess::controller_uid`), so claiming, the name-collision
//! rule and the hook's children map treat it as an owned child.

use metacontroller_dynamic::NamespacedName;
pub use metacontroller_dynamic::PARENT_UID_LABEL;
use serde_json::{json, Value};

use crate::children::ParentRef;

/// Annotation naming the parent of a label-tracked child: `<namespace>/<name>` (sharded
/// replicas cache such a child by it).
pub use metacontroller_dynamic::PARENT_ANNOTATION;

/// Annotation naming the parent's type of a label-tracked child: `<Kind>.<apiVersion>`.
pub const PARENT_KIND_ANNOTATION: &str = "metacontroller.k8s.io/parent-kind";

fn namespace_of(obj: &Value) -> &str {
    obj.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Is `obj` a child that `parent` must track by label (a namespaced parent's child in
/// another namespace, or cluster-scoped)?
pub(crate) fn is_elsewhere(obj: &Value, parent: &ParentRef) -> bool {
    !parent.namespace.is_empty() && namespace_of(obj) != parent.namespace
}

/// Sets the parent label and annotations on `obj` (an object body).
pub(crate) fn set_parent_label(obj: &mut Value, parent: &ParentRef) {
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let meta = root.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    for (field, key, value) in [
        ("labels", PARENT_UID_LABEL, parent.uid.clone()),
        (
            "annotations",
            PARENT_ANNOTATION,
            format!("{}/{}", parent.namespace, parent.name),
        ),
        (
            "annotations",
            PARENT_KIND_ANNOTATION,
            format!("{}.{}", parent.kind, parent.api_version),
        ),
    ] {
        let map = meta.entry(field).or_insert_with(|| json!({}));
        if !map.is_object() {
            *map = json!({});
        }
        if let Some(map) = map.as_object_mut() {
            map.insert(key.to_string(), Value::String(value));
        }
    }
}

/// The parent a label-tracked child names: its key and uid, when both are present.
pub(crate) fn parent_of(
    labels: Option<&std::collections::BTreeMap<String, String>>,
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<(NamespacedName, String)> {
    let uid = labels?.get(PARENT_UID_LABEL)?;
    let (namespace, name) = annotations?.get(PARENT_ANNOTATION)?.split_once('/')?;
    if namespace.is_empty() || name.is_empty() {
        return None;
    }
    Some((NamespacedName::new(namespace, name), uid.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(namespace: &str) -> ParentRef {
        ParentRef {
            api_version: "ex.com/v1".into(),
            kind: "Team".into(),
            name: "t".into(),
            uid: "u1".into(),
            namespace: namespace.into(),
        }
    }

    #[test]
    fn only_children_outside_a_namespaced_parents_namespace_are_elsewhere() {
        let cm = |ns: &str| json!({"metadata": {"name": "c", "namespace": ns}});
        assert!(!is_elsewhere(&cm("a"), &parent("a")));
        assert!(is_elsewhere(&cm("b"), &parent("a")));
        assert!(is_elsewhere(
            &json!({"metadata": {"name": "n"}}),
            &parent("a")
        ));
        assert!(!is_elsewhere(&cm("b"), &parent("")));
    }

    #[test]
    fn label_and_annotations_name_the_parent() {
        let mut obj = json!({"metadata": {"name": "n", "labels": {"keep": "1"}}});
        set_parent_label(&mut obj, &parent("a"));
        assert_eq!(obj["metadata"]["labels"]["keep"], "1");
        assert_eq!(obj["metadata"]["labels"][PARENT_UID_LABEL], "u1");
        assert_eq!(obj["metadata"]["annotations"][PARENT_ANNOTATION], "a/t");
        assert_eq!(
            obj["metadata"]["annotations"][PARENT_KIND_ANNOTATION],
            "Team.ex.com/v1"
        );
        assert!(obj["metadata"].get("ownerReferences").is_none());
        let labels = [(PARENT_UID_LABEL.to_string(), "u1".to_string())].into();
        let annotations = [(PARENT_ANNOTATION.to_string(), "a/t".to_string())].into();
        let (key, uid) = parent_of(Some(&labels), Some(&annotations)).unwrap();
        assert_eq!((key, uid.as_str()), (NamespacedName::new("a", "t"), "u1"));
    }
}
