//! Label and annotation selectors as used in controller specs and related-resource
//! rules. Label selectors reuse k8s-openapi's `LabelSelector` so other crates can hand
//! them straight to Kubernetes APIs; their CRD schema is written here because
//! k8s-openapi's types carry no JSON schema.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Selects objects by annotations, with the same semantics as a label selector
/// (`matchAnnotations` plays the role of `matchLabels`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationSelector {
    /// Annotations that must exist with exactly these values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_annotations: Option<BTreeMap<String, String>>,
    /// Set-based requirements on annotations (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "requirements_schema")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
}

fn requirement_schema() -> serde_json::Value {
    serde_json::json!({
        "description": "A selector requirement: a key, an operator (In, NotIn, Exists, DoesNotExist) and values.",
        "type": "object",
        "required": ["key", "operator"],
        "properties": {
            "key": {"type": "string"},
            "operator": {"type": "string"},
            "values": {"type": "array", "items": {"type": "string"}}
        }
    })
}

/// Schema of a list of `LabelSelectorRequirement`s.
pub fn requirements_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": requirement_schema()
    })
}

/// Schema of a Kubernetes `LabelSelector` (`matchLabels`, `matchExpressions`).
pub fn label_selector_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "A label query over a set of resources; matchLabels and matchExpressions are ANDed. An empty selector matches all objects.",
        "type": "object",
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "matchExpressions": {"type": "array", "items": requirement_schema()}
        },
        "x-kubernetes-map-type": "atomic"
    })
}

/// Schema of a free-form JSON object whose content Kubernetes must keep as is.
pub fn free_form_object_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}
