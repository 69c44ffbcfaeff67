//! Attachments of one target, without I/O. Attachments are related to their target by
//! the controller ownerReference (never by labels) and carry the
//! `metacontroller.k8s.io/decorator-controller` annotation naming the decorator that
//! manages them, so two decorators attaching the same type to the same target each see
//! (and delete) only their own objects.
//!
//! Validation, the request map and create/update/delete planning are the CompositeController
//! rules in [`crate::children`]; this module adds what differs for decorators.

use std::collections::BTreeMap;

use metacontroller_api::hook::HookVersion;
use metacontroller_api::wire::ObjectMap;
use metacontroller_api::DECORATOR_CONTROLLER_ANNOTATION;
use metacontroller_dynamic::ObjectMetaAccess;
use serde_json::{json, Value};

use crate::children::{self, ChildError, ChildKey, ChildType};

/// Whether a cached object is an attachment of the target with `target_uid` made by the
/// decorator named `decorator`.
pub fn is_own_attachment<T: ObjectMetaAccess + AnnotationAccess + ?Sized>(
    object: &T,
    target_uid: &str,
    decorator: &str,
) -> bool {
    !target_uid.is_empty()
        && object.controller_uid() == Some(target_uid)
        && object.annotation(DECORATOR_CONTROLLER_ANNOTATION) == Some(decorator)
}

/// Reads one annotation.
pub trait AnnotationAccess {
    /// The value of annotation `key`, if set to a string.
    fn annotation(&self, key: &str) -> Option<&str>;
}

impl AnnotationAccess for Value {
    fn annotation(&self, key: &str) -> Option<&str> {
        self.get("metadata")?.get("annotations")?.get(key)?.as_str()
    }
}

impl AnnotationAccess for kube::core::DynamicObject {
    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }
}

/// The hook request's attachments map: an entry for every declared type, then the
/// observed attachments keyed per hook version (v1: name relative to the target; v2:
/// `<namespace>/<name>`).
pub(crate) fn observed_map(
    version: HookVersion,
    target_namespace: Option<&str>,
    types: &[ChildType],
    observed: impl IntoIterator<Item = Value>,
) -> ObjectMap {
    children::observed_map(version, target_namespace, types, observed)
}

/// Checks the hook's desired attachments (declared types only, namespace defaulted to the
/// target's, a later duplicate replacing an earlier one; refused ones are returned apart,
/// see [`children::validate_desired`]) and marks each with this
/// decorator's annotation, which is part of the desired state, so it is recorded in
/// last-applied and restored if removed.
pub(crate) fn prepare_desired(
    types: &[ChildType],
    target_namespace: Option<&str>,
    decorator: &str,
    desired: Vec<Value>,
) -> (BTreeMap<ChildKey, (usize, Value)>, Vec<ChildError>) {
    let (mut out, refused) = children::validate_desired(types, target_namespace, desired);
    for (_, object) in out.values_mut() {
        set_annotation(object, DECORATOR_CONTROLLER_ANNOTATION, decorator);
    }
    (out, refused)
}

fn set_annotation(object: &mut Value, key: &str, value: &str) {
    let Some(root) = object.as_object_mut() else {
        return;
    };
    let meta = root.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    if let Some(map) = annotations.as_object_mut() {
        map.insert(key.to_string(), Value::String(value.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use metacontroller_api::ChildUpdateMethod;

    use super::*;
    use crate::children::{plan_children, Action, ParentRef};

    fn svc_type() -> ChildType {
        ChildType {
            api_version: "v1".into(),
            kind: "Service".into(),
            resource: "services".into(),
            namespaced: true,
            method: ChildUpdateMethod::InPlace,
            namespaces: Vec::new(),
        }
    }

    fn svc(name: &str, owner_uid: Option<&str>, decorator: Option<&str>) -> Value {
        let mut v = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "resourceVersion": "3"},
            "spec": {"ports": [{"port": 80}]}});
        if let Some(uid) = owner_uid {
            v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
                "name": "p", "uid": uid, "controller": true}]);
        }
        if let Some(d) = decorator {
            v["metadata"]["annotations"] = json!({DECORATOR_CONTROLLER_ANNOTATION: d});
        }
        v
    }

    #[test]
    fn only_own_controlled_annotated_objects_are_attachments() {
        assert!(is_own_attachment(
            &svc("a", Some("t"), Some("dc1")),
            "t",
            "dc1"
        ));
        // Another decorator's attachment on the same target.
        assert!(!is_own_attachment(
            &svc("a", Some("t"), Some("dc2")),
            "t",
            "dc1"
        ));
        // Controlled by the target but not made by a decorator (e.g. created by hand).
        assert!(!is_own_attachment(&svc("a", Some("t"), None), "t", "dc1"));
        // Another target's.
        assert!(!is_own_attachment(
            &svc("a", Some("u"), Some("dc1")),
            "t",
            "dc1"
        ));
        assert!(!is_own_attachment(&svc("a", None, Some("dc1")), "t", "dc1"));
        assert!(!is_own_attachment(
            &svc("a", Some(""), Some("dc1")),
            "",
            "dc1"
        ));
        let obj: kube::core::DynamicObject =
            serde_json::from_value(svc("a", Some("t"), Some("dc1"))).unwrap();
        assert!(is_own_attachment(&obj, "t", "dc1"));
        assert!(!is_own_attachment(&obj, "t", "dc2"));
    }

    #[test]
    fn desired_attachments_get_namespace_and_annotation() {
        let desired = vec![json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "a", "annotations": {"keep": "me"}}})];
        let (out, refused) = prepare_desired(&[svc_type()], Some("ns"), "dc1", desired);
        assert!(refused.is_empty());
        let (_, obj) = out.values().next().unwrap();
        assert_eq!(obj["metadata"]["namespace"], "ns");
        assert_eq!(
            obj["metadata"]["annotations"],
            json!({"keep": "me", DECORATOR_CONTROLLER_ANNOTATION: "dc1"})
        );
        let undeclared = vec![json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s"}})];
        let (out, refused) = prepare_desired(&[svc_type()], Some("ns"), "dc1", undeclared);
        assert!(out.is_empty());
        assert!(matches!(refused[..], [ChildError::Undeclared { .. }]));
    }

    #[test]
    fn create_carries_owner_reference_and_annotation() {
        let desired = prepare_desired(
            &[svc_type()],
            Some("ns"),
            "dc1",
            vec![json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}})],
        )
        .0;
        let target = ParentRef {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "p".into(),
            uid: "t".into(),
            namespace: String::new(),
        };
        let actions = plan_children(&[svc_type()], &target, &[], &desired, false).unwrap();
        let [Action::Create { object, .. }] = actions.as_slice() else {
            panic!("{actions:?}");
        };
        assert_eq!(object["metadata"]["ownerReferences"][0]["uid"], "t");
        assert_eq!(object["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            object["metadata"]["annotations"][DECORATOR_CONTROLLER_ANNOTATION],
            "dc1"
        );
    }

    #[test]
    fn map_keys_per_version() {
        let observed = svc("a", Some("t"), Some("dc1"));
        let v1 = observed_map(
            HookVersion::V1,
            Some("ns"),
            &[svc_type()],
            [observed.clone()],
        );
        assert!(v1.get("v1", "Service", "a").is_some());
        let v2 = observed_map(
            HookVersion::V2,
            Some("ns"),
            &[svc_type()],
            [observed.clone()],
        );
        assert!(v2.get("v1", "Service", "ns/a").is_some());
        // A cluster-scoped target (e.g. a Namespace) sees namespace/name in v1 too.
        let v1 = observed_map(HookVersion::V1, None, &[svc_type()], [observed]);
        assert!(v1.get("v1", "Service", "ns/a").is_some());
        let empty = observed_map(HookVersion::V1, Some("ns"), &[svc_type()], []);
        assert_eq!(
            serde_json::to_value(&empty).unwrap(),
            json!({"Service.v1": {}})
        );
    }
}
