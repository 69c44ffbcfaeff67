//! JSON wire types exchanged with hook servers: sync/finalize requests and responses
//! of CompositeController and DecoratorController, and customize requests and
//! responses, for hook versions v1 and v2, plus response decoding in `loose` and
//! `strict` mode.
//!
//! Requests are serialized with every field present (hooks written against upstream
//! index into them unconditionally). Responses accept `null` wherever Go would (a
//! `null` list is an empty list).

pub mod composite;
pub mod customize;
pub mod decode;
pub mod decorator;
pub mod event;
pub mod object_map;

pub use composite::{CompositeHookRequest, CompositeHookResponse};
pub use customize::{CustomizableController, CustomizeHookRequest, CustomizeHookResponse};
pub use decode::{decode_response, DecodeError};
pub use decorator::{DecoratorHookRequest, DecoratorHookResponse};
pub use event::{
    HookEvent, HOOK_EVENT_TYPES, MAX_HOOK_EVENTS, MAX_HOOK_EVENT_MESSAGE_BYTES,
    MAX_HOOK_EVENT_REASON_BYTES, RESERVED_HOOK_EVENT_REASONS,
};
pub use object_map::{group_key, parse_group_key, ObjectMap};

use serde::{Deserialize, Deserializer};

/// Deserializes `null` as the type's default, as Go's `encoding/json` does for
/// slices, maps, numbers and booleans.
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

pub(crate) fn is_zero(f: &f64) -> bool {
    *f == 0.0
}
