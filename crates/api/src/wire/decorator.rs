//! DecoratorController sync/finalize hook messages. The field names are the same in
//! v1 and v2 (`object`, `attachments`, `related`, `finalizing`); only the keys of the
//! `attachments` and `related` maps differ (see [`ObjectMap`]). The response is the
//! same in both versions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{is_false, is_zero, null_as_default, HookEvent, ObjectMap};
use crate::decorator::DecoratorController;

/// Body POSTed to a DecoratorController's sync and finalize hooks (v1 and v2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorHookRequest {
    /// The whole DecoratorController object.
    pub controller: DecoratorController,
    /// The target object as observed.
    pub object: Value,
    /// Observed attachments: one entry per declared attachment type, even when empty,
    /// keyed per the hook version.
    #[serde(default, deserialize_with = "null_as_default")]
    pub attachments: ObjectMap,
    /// Related objects selected by the customize hook's response.
    #[serde(default, deserialize_with = "null_as_default")]
    pub related: ObjectMap,
    /// False for sync, true for finalize.
    #[serde(default, deserialize_with = "null_as_default")]
    pub finalizing: bool,
}

impl DecoratorHookRequest {
    /// Builds the request; `attachments` and `related` must already be keyed for the
    /// hook's version (the field names do not depend on it).
    pub fn new(
        controller: DecoratorController,
        object: Value,
        attachments: ObjectMap,
        related: ObjectMap,
        finalizing: bool,
    ) -> Self {
        Self {
            controller,
            object,
            attachments,
            related,
            finalizing,
        }
    }
}

/// Response of a DecoratorController's sync and finalize hooks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorHookResponse {
    /// Labels to set on the target; a `null` value removes the label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, Option<String>>>,
    /// Annotations to set on the target; a `null` value removes the annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, Option<String>>>,
    /// Replaces the target's `status`; `null`/absent leaves it unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Map<String, Value>>,
    /// Every desired attachment (attachments not listed are deleted).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub attachments: Vec<Value>,
    /// Sync this target again after this many seconds (fractions allowed); 0 = no.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_zero"
    )]
    pub resync_after_seconds: f64,
    /// Finalize hook only: true when clean-up is done and the finalizer may go.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_false"
    )]
    pub finalized: bool,
    /// Events to record on the target (extension beyond upstream; see [`HookEvent`]).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub events: Vec<HookEvent>,
}

impl DecoratorHookResponse {
    /// Adds an Event to record on the target (`type_` is `Normal` or `Warning`, `reason`
    /// CamelCase): `DecoratorHookResponse::default().event("Normal", "Started", "...")`.
    pub fn event(
        mut self,
        type_: impl Into<String>,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        self.events.push(HookEvent::new(type_, reason, message));
        self
    }
}
