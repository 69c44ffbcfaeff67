//! DecoratorController sync/finalize hook messages. Upstream's v1 request names the
//! target `object` and its attachments `attachments`; the v2 request calls them
//! `parent` and `children`. The response is the same in both versions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{is_false, is_zero, null_as_default, ObjectMap};
use crate::decorator::DecoratorController;
use crate::hook::HookVersion;

/// v1 body POSTed to a DecoratorController's sync and finalize hooks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorHookRequestV1 {
    /// The whole DecoratorController object.
    pub controller: DecoratorController,
    /// The target object as observed.
    pub object: Value,
    /// Observed attachments: one entry per declared attachment type, even when empty.
    #[serde(default, deserialize_with = "null_as_default")]
    pub attachments: ObjectMap,
    /// Related objects selected by the customize hook's response.
    #[serde(default, deserialize_with = "null_as_default")]
    pub related: ObjectMap,
    /// False for sync, true for finalize.
    #[serde(default, deserialize_with = "null_as_default")]
    pub finalizing: bool,
}

/// v2 body POSTed to a DecoratorController's sync and finalize hooks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorHookRequestV2 {
    /// The whole DecoratorController object.
    pub controller: DecoratorController,
    /// The target object as observed.
    pub parent: Value,
    /// Observed attachments, keyed uniformly by `<namespace>/<name>`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub children: ObjectMap,
    /// Related objects selected by the customize hook's response.
    #[serde(default, deserialize_with = "null_as_default")]
    pub related: ObjectMap,
    /// False for sync, true for finalize.
    #[serde(default, deserialize_with = "null_as_default")]
    pub finalizing: bool,
}

/// A decorator hook request of either version (serialized without any tag).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum DecoratorHookRequest {
    /// Version v1 field names.
    V1(DecoratorHookRequestV1),
    /// Version v2 field names.
    V2(DecoratorHookRequestV2),
}

impl DecoratorHookRequest {
    /// Builds the request with the field names of `version`; `attachments` must already
    /// be keyed for that version.
    pub fn new(
        version: HookVersion,
        controller: DecoratorController,
        object: Value,
        attachments: ObjectMap,
        related: ObjectMap,
        finalizing: bool,
    ) -> Self {
        match version {
            HookVersion::V1 => Self::V1(DecoratorHookRequestV1 {
                controller,
                object,
                attachments,
                related,
                finalizing,
            }),
            HookVersion::V2 => Self::V2(DecoratorHookRequestV2 {
                controller,
                parent: object,
                children: attachments,
                related,
                finalizing,
            }),
        }
    }

    /// The target object.
    pub fn object(&self) -> &Value {
        match self {
            Self::V1(r) => &r.object,
            Self::V2(r) => &r.parent,
        }
    }

    /// The observed attachments.
    pub fn attachments(&self) -> &ObjectMap {
        match self {
            Self::V1(r) => &r.attachments,
            Self::V2(r) => &r.children,
        }
    }
}

/// Response of a DecoratorController's sync and finalize hooks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
}
