//! CompositeController sync/finalize hook messages. The shapes are identical in v1
//! and v2; only the keys of `children` and `related` differ (see [`ObjectMap`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{is_false, is_zero, null_as_default, HookEvent, ObjectMap};
use crate::composite::CompositeController;

/// Body POSTed to a CompositeController's sync and finalize hooks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeHookRequest {
    /// The whole CompositeController object.
    pub controller: CompositeController,
    /// The parent object as observed.
    pub parent: Value,
    /// Observed children: one entry per declared child type, even when empty.
    #[serde(default, deserialize_with = "null_as_default")]
    pub children: ObjectMap,
    /// Related objects selected by the customize hook's response.
    #[serde(default, deserialize_with = "null_as_default")]
    pub related: ObjectMap,
    /// False for sync, true for finalize.
    #[serde(default, deserialize_with = "null_as_default")]
    pub finalizing: bool,
}

/// Response of a CompositeController's sync and finalize hooks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeHookResponse {
    /// Replaces the parent's `status`; `null`/absent leaves it unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Map<String, Value>>,
    /// Every desired child (a flat list; children not listed are deleted).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub children: Vec<Value>,
    /// Sync this parent again after this many seconds (fractions allowed); 0 = no.
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
    /// Events to record on the parent (extension beyond upstream; see [`HookEvent`]).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub events: Vec<HookEvent>,
}

impl CompositeHookResponse {
    /// Adds an Event to record on the parent (`type_` is `Normal` or `Warning`, `reason`
    /// CamelCase): `CompositeHookResponse::default().event("Normal", "Started", "...")`.
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
