//! Server-side apply (`--apply-strategy=server-side-apply`): the body of an
//! `application/apply-patch+yaml` request (JSON is valid YAML).

use serde_json::{Map, Value};

use crate::compare::IGNORED_METADATA_FIELDS;
use crate::error::{type_name, ApplyError};
use crate::last_applied::ANNOTATION;
use crate::merge::without_nulls;

/// Builds the apply-patch body for `desired`: the fields the hook set, with `apiVersion`,
/// `kind`, `metadata.name` required and `metadata.namespace` filled from `default_namespace`
/// when desired has none. Removed: the client-side last-applied annotation (server-side apply
/// tracks ownership in `managedFields`), server-populated metadata (a `resourceVersion` would
/// turn the apply into a conditional write), top-level `status` (never applied to children), and
/// `null` fields (unset means "not owned").
pub fn apply_patch_body(
    desired: &Value,
    default_namespace: Option<&str>,
) -> Result<Value, ApplyError> {
    let Value::Object(obj) = desired else {
        return Err(ApplyError::invalid(
            ".",
            format!("desired must be an object, found {}", type_name(desired)),
        ));
    };
    for field in ["apiVersion", "kind"] {
        if obj
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(ApplyError::invalid(
                format!(".{field}"),
                "required for server-side apply",
            ));
        }
    }
    let Value::Object(mut body) = without_nulls(desired) else {
        return Err(ApplyError::invalid(".", "desired must be an object"));
    };
    body.remove("status");
    let meta = body
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else {
        return Err(ApplyError::invalid(
            ".metadata",
            "metadata must be an object",
        ));
    };
    if meta
        .get("name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(ApplyError::invalid(
            ".metadata.name",
            "required for server-side apply",
        ));
    }
    for f in IGNORED_METADATA_FIELDS {
        meta.remove(f);
    }
    let has_ns = meta
        .get("namespace")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty());
    if !has_ns {
        if let Some(ns) = default_namespace.filter(|ns| !ns.is_empty()) {
            meta.insert("namespace".into(), Value::String(ns.to_string()));
        }
    }
    let drop_annotations = match meta.get_mut("annotations") {
        Some(Value::Object(ann)) => {
            ann.remove(ANNOTATION);
            ann.is_empty()
        }
        _ => false,
    };
    if drop_annotations {
        meta.remove("annotations");
    }
    Ok(Value::Object(body))
}

/// True when applying `body` (an apply body, see [`apply_patch_body`]) to `observed` would
/// change nothing: every field it sets is in place, list-maps merged by key, in the form the
/// server stores it. `body` counts as applied before (it is what the server made `observed`
/// from when nothing else changed), so a quantity the server rewrote (`0.5` stored as
/// `500m`) or a converted field (Secret `stringData`) is in place.
pub fn is_in_place(observed: &Value, body: &Value) -> bool {
    match crate::merge(observed, Some(body), body) {
        Ok(merged) => !crate::needs_update(observed, &merged),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn body_has_identity_and_no_client_side_record() {
        let desired = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "resourceVersion": "12", "uid": "u",
                "annotations": {ANNOTATION: "{}"}, "labels": {"a": "b"}},
            "data": {"k": "v", "gone": null},
            "status": {"x": 1}
        });
        let body = apply_patch_body(&desired, Some("ns1")).unwrap();
        assert_eq!(
            body,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "ns1", "labels": {"a": "b"}},
                "data": {"k": "v"}
            })
        );
    }

    #[test]
    fn own_namespace_and_other_annotations_are_kept() {
        let desired = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "mine", "annotations": {"x": "y", ANNOTATION: ""}}
        });
        let body = apply_patch_body(&desired, Some("other")).unwrap();
        assert_eq!(body["metadata"]["namespace"], json!("mine"));
        assert_eq!(body["metadata"]["annotations"], json!({"x": "y"}));
    }

    #[test]
    fn missing_identity_is_an_error_with_path() {
        let err =
            apply_patch_body(&json!({"kind": "X", "metadata": {"name": "a"}}), None).unwrap_err();
        assert_eq!(err.path(), ".apiVersion");
        let err = apply_patch_body(&json!({"apiVersion": "v1", "kind": "X"}), None).unwrap_err();
        assert_eq!(err.path(), ".metadata.name");
        let err = apply_patch_body(
            &json!({"apiVersion": "v1", "kind": "X", "metadata": []}),
            None,
        )
        .unwrap_err();
        assert_eq!(err.path(), ".metadata");
        assert!(apply_patch_body(&json!([]), None).is_err());
    }
}
