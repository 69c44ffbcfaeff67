//! Related-resource rules: what a customize hook returns to ask for objects its
//! parent's sync and finalize hooks should see under `related`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::selector::{label_selector_schema, LabelSelector};

/// One rule of a customize hook response's `relatedResources`.
///
/// Objects are selected either by `labelSelector` (optionally narrowed by
/// `namespaceSelector`) or by `namespace` and/or `names`, never both ways at once.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelatedResourceRule {
    /// `<group>/<version>` or `<version>` for the core group.
    pub api_version: String,
    /// Lower-case plural resource name.
    pub resource: String,
    /// Select related objects by labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "label_selector_schema")]
    pub label_selector: Option<LabelSelector>,
    /// Only objects in namespaces whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "label_selector_schema")]
    pub namespace_selector: Option<LabelSelector>,
    /// Only objects in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Only objects with these names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
}

impl RelatedResourceRule {
    /// True when the rule selects by namespace and/or names rather than by labels.
    pub fn selects_by_name(&self) -> bool {
        self.namespace.as_deref().is_some_and(|n| !n.is_empty())
            || self.names.as_ref().is_some_and(|n| !n.is_empty())
    }
}
