//! Error values of the merge engine. Every error names the field it is about, so a hook author
//! can find the offending part of the object without reading our code.

use thiserror::Error;

/// Why a merge, a schema load or a last-applied record failed.
///
/// Paths use a JSONPath-like notation: `.spec.template.spec.containers[name=nginx].ports[0]`,
/// where `[k=v]` names a list-map item by its merge key(s) and `[i]` a plain list index.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ApplyError {
    /// Observed and desired disagree on the JSON type of a field that must be merged
    /// (an object or a list in observed, something else in desired).
    #[error("{path}: cannot merge desired {desired} into observed {observed}")]
    TypeMismatch {
        /// Field path.
        path: String,
        /// JSON type found in the observed object.
        observed: &'static str,
        /// JSON type found in the desired object.
        desired: &'static str,
    },
    /// A list-map item's key field holds an object or a list, which cannot identify an item.
    #[error("{path}: list-map key field {key:?} must be a scalar, found {found}")]
    InvalidMergeKey {
        /// Path of the list item.
        path: String,
        /// Name of the key field.
        key: String,
        /// JSON type found.
        found: &'static str,
    },
    /// The input as a whole is unusable (for example the desired object is not a JSON object).
    #[error("{path}: {message}")]
    InvalidInput {
        /// Field path (`.` for the whole object).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The `metacontroller.k8s.io/last-applied-configuration` annotation cannot be decoded.
    #[error("can't decode annotation {annotation:?}: {message}")]
    LastApplied {
        /// The annotation name.
        annotation: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A schema document cannot be used.
    #[error("schema {path}: {message}")]
    Schema {
        /// Location inside the schema document.
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl ApplyError {
    /// The field (or schema) path the error is about; empty for annotation errors.
    pub fn path(&self) -> &str {
        match self {
            ApplyError::TypeMismatch { path, .. }
            | ApplyError::InvalidMergeKey { path, .. }
            | ApplyError::InvalidInput { path, .. }
            | ApplyError::Schema { path, .. } => path,
            ApplyError::LastApplied { .. } => "",
        }
    }

    pub(crate) fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        ApplyError::InvalidInput {
            path: path.into(),
            message: message.into(),
        }
    }

    pub(crate) fn schema(path: impl Into<String>, message: impl Into<String>) -> Self {
        ApplyError::Schema {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// JSON type name used in messages.
pub(crate) fn type_name(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}
