//! Customize hook messages (same shape in v1 and v2): the controller and one parent
//! go in, related-resource rules come out.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::null_as_default;
use crate::composite::CompositeController;
use crate::decorator::DecoratorController;
use crate::related::RelatedResourceRule;

/// The controller sent in a customize request: either kind, serialized as itself.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum CustomizableController {
    /// A CompositeController.
    Composite(Box<CompositeController>),
    /// A DecoratorController.
    Decorator(Box<DecoratorController>),
}

impl<'de> Deserialize<'de> for CustomizableController {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(deserializer)?;
        let kind = value.get("kind").and_then(Value::as_str).map(str::to_owned);
        match kind.as_deref() {
            Some(CompositeController::KIND) => serde_json::from_value(value)
                .map(|c| Self::Composite(Box::new(c)))
                .map_err(D::Error::custom),
            Some(DecoratorController::KIND) => serde_json::from_value(value)
                .map(|c| Self::Decorator(Box::new(c)))
                .map_err(D::Error::custom),
            // Without a kind, the spec's shape decides.
            _ if value.pointer("/spec/parentResource").is_some() => serde_json::from_value(value)
                .map(|c| Self::Composite(Box::new(c)))
                .map_err(D::Error::custom),
            _ => serde_json::from_value(value)
                .map(|c| Self::Decorator(Box::new(c)))
                .map_err(D::Error::custom),
        }
    }
}

/// Body POSTed to a customize hook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomizeHookRequest {
    /// The whole controller object.
    pub controller: CustomizableController,
    /// The parent (or decorated target) object.
    pub parent: Value,
}

/// Response of a customize hook.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomizeHookResponse {
    /// Which objects the sync and finalize hooks should receive under `related`.
    #[serde(
        default,
        rename = "relatedResources",
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub related_resource_rules: Vec<RelatedResourceRule>,
}
