//! Small facts about any object or apiVersion that every part of the controllers reads the
//! same way (one definition, so the rules cannot drift apart).

use serde_json::Value;

/// Whether the object has a (non-null) `metadata.deletionTimestamp`.
pub fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// The API group of an apiVersion (`""` for the core group `v1`).
pub(crate) fn api_group(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(group, _)| group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn groups_of_core_and_named_versions() {
        assert_eq!(api_group("v1"), "");
        assert_eq!(api_group("apps/v1"), "apps");
        assert_eq!(
            api_group("metacontroller.k8s.io/v1alpha1"),
            "metacontroller.k8s.io"
        );
    }

    #[test]
    fn deleting_needs_a_non_null_timestamp() {
        assert!(!is_deleting(&json!({"metadata": {}})));
        assert!(!is_deleting(
            &json!({"metadata": {"deletionTimestamp": null}})
        ));
        assert!(is_deleting(
            &json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}})
        ));
    }
}
