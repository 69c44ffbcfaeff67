//! Events a sync or finalize hook asks the controller to record on the parent (the target
//! for a DecoratorController). An extension beyond upstream Metacontroller (its issue
//! #249): responses without `events` mean what they always meant.
//!
//! Decoding accepts any strings so that one bad entry never fails a sync; the controller
//! checks each entry ([`HookEvent::problem`]) and skips the invalid ones with a Warning.

use serde::{Deserialize, Serialize};

use super::null_as_default;

/// Event types a hook may ask for, as core/v1 Events know them.
pub const HOOK_EVENT_TYPES: [&str; 2] = ["Normal", "Warning"];
/// Most events recorded from one response; later entries are skipped.
pub const MAX_HOOK_EVENTS: usize = 10;
/// Longest accepted `reason` in bytes (the limit events.k8s.io puts on it).
pub const MAX_HOOK_EVENT_REASON_BYTES: usize = 128;
/// Longest `message` recorded, in bytes; longer ones are cut on a character boundary
/// (the limit events.k8s.io puts on an Event's note).
pub const MAX_HOOK_EVENT_MESSAGE_BYTES: usize = 1024;
/// Reasons the controller itself records on the objects a hook's events land on (or on
/// controller objects, for failures): a hook event with one of them is skipped, so that a
/// `SyncError` (or a `SyncRecovered`) always comes from the controller. `Starting`,
/// `Started`, `Stopping` and `Stopped` are the controller's too, but only on controller
/// objects, and Kubernetes itself uses them on Pods: hooks keep them.
pub const RESERVED_HOOK_EVENT_REASONS: [&str; 5] = [
    "SyncError",
    "SyncRecovered",
    "CreateError",
    "ListError",
    "InvalidHookEvent",
];

/// One Event a hook asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(transform = required_type_and_reason)]
pub struct HookEvent {
    /// `Normal` or `Warning`.
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    #[schemars(extend("enum" = ["Normal", "Warning"]))]
    pub type_: String,
    /// Why, in CamelCase (an upper-case letter, then letters and digits; at most 128
    /// bytes), e.g. `BackupStarted`.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schemars(extend("pattern" = "^[A-Z][A-Za-z0-9]*$", "maxLength" = 128))]
    pub reason: String,
    /// Human-readable text; cut to 1024 bytes when longer.
    #[serde(default, deserialize_with = "null_as_default")]
    pub message: String,
}

impl HookEvent {
    /// A `Normal` event.
    pub fn normal(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new("Normal", reason, message)
    }

    /// A `Warning` event.
    pub fn warning(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new("Warning", reason, message)
    }

    /// An event of any `type_` (`Normal` or `Warning`; others are skipped by the
    /// controller).
    pub fn new(
        type_: impl Into<String>,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_: type_.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// Why the controller would skip this event, or `None` when it is valid: the type
    /// must be `Normal` or `Warning`, the reason CamelCase (an ASCII upper-case letter,
    /// then ASCII letters and digits) of at most [`MAX_HOOK_EVENT_REASON_BYTES`], and not
    /// one of the controller's own ([`RESERVED_HOOK_EVENT_REASONS`]).
    pub fn problem(&self) -> Option<String> {
        if !HOOK_EVENT_TYPES.contains(&self.type_.as_str()) {
            return Some(format!(
                "type {:?} is not Normal or Warning",
                shorten(&self.type_, 64)
            ));
        }
        let reason = &self.reason;
        if reason.is_empty() {
            return Some("reason is empty".to_owned());
        }
        if reason.len() > MAX_HOOK_EVENT_REASON_BYTES {
            return Some(format!(
                "reason is longer than {MAX_HOOK_EVENT_REASON_BYTES} bytes"
            ));
        }
        let camel = reason.starts_with(|c: char| c.is_ascii_uppercase())
            && reason.chars().all(|c| c.is_ascii_alphanumeric());
        if !camel {
            return Some(format!("reason {reason:?} is not CamelCase"));
        }
        if RESERVED_HOOK_EVENT_REASONS.contains(&reason.as_str()) {
            return Some(format!(
                "reason {reason:?} is reserved for the controller's own Events"
            ));
        }
        None
    }

    /// The message as recorded: at most [`MAX_HOOK_EVENT_MESSAGE_BYTES`], cut on a
    /// character boundary.
    pub fn capped_message(&self) -> &str {
        shorten(&self.message, MAX_HOOK_EVENT_MESSAGE_BYTES)
    }
}

/// The schema states the contract (type and reason required), not the lenient decoding
/// (missing fields decode as empty so that the controller can skip them by itself).
fn required_type_and_reason(schema: &mut schemars::Schema) {
    if let Some(properties) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        for property in properties.values_mut() {
            if let Some(property) = property.as_object_mut() {
                property.remove("default");
            }
        }
    }
    schema.insert("required".into(), serde_json::json!(["type", "reason"]));
}

/// The longest prefix of `text` of at most `max` bytes that ends on a char boundary.
fn shorten(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_events_have_no_problem() {
        assert_eq!(HookEvent::normal("BackupStarted", "x").problem(), None);
        assert_eq!(HookEvent::warning("Failed2", "").problem(), None);
    }

    #[test]
    fn bad_types_and_reasons_are_named() {
        let bad = [
            (HookEvent::new("Info", "Ok", "m"), "type \"Info\""),
            (HookEvent::new("normal", "Ok", "m"), "type \"normal\""),
            (HookEvent::new("", "Ok", "m"), "type \"\""),
            (HookEvent::normal("", "m"), "reason is empty"),
            (HookEvent::normal("lowerCase", "m"), "not CamelCase"),
            (HookEvent::normal("Has Space", "m"), "not CamelCase"),
            (HookEvent::normal("Dash-ed", "m"), "not CamelCase"),
            (HookEvent::normal("Ünicode", "m"), "not CamelCase"),
            (HookEvent::normal("A".repeat(129), "m"), "longer than 128"),
            (HookEvent::warning("SyncError", "m"), "reserved"),
            (HookEvent::normal("SyncRecovered", "m"), "reserved"),
            (HookEvent::warning("InvalidHookEvent", "m"), "reserved"),
        ];
        for (event, expected) in bad {
            let problem = event.problem().expect("should be invalid");
            assert!(problem.contains(expected), "{problem} vs {expected}");
        }
        assert_eq!(HookEvent::normal("A".repeat(128), "m").problem(), None);
        // Lifecycle reasons Kubernetes also uses stay open to hooks.
        assert_eq!(HookEvent::normal("Started", "m").problem(), None);
        // A huge bad type is not echoed in full.
        let problem = HookEvent::new("x".repeat(10_000), "Ok", "m")
            .problem()
            .unwrap();
        assert!(problem.len() < 100, "{problem}");
    }

    #[test]
    fn messages_are_capped_on_a_char_boundary() {
        let short = HookEvent::normal("R", "hello");
        assert_eq!(short.capped_message(), "hello");
        let exact = HookEvent::normal("R", "a".repeat(1024));
        assert_eq!(exact.capped_message().len(), 1024);
        // 'é' is two bytes: 1023 bytes of 'a' then 'é' would cross the cap.
        let crossing = HookEvent::normal("R", format!("{}é", "a".repeat(1023)));
        assert_eq!(crossing.capped_message(), "a".repeat(1023));
        let wide = HookEvent::normal("R", "€".repeat(1000));
        let capped = wide.capped_message();
        assert!(capped.len() <= 1024 && capped.chars().all(|c| c == '€'));
    }

    #[test]
    fn decodes_with_missing_or_null_fields() {
        let event: HookEvent = serde_json::from_str(r#"{"type": null, "reason": "R"}"#).unwrap();
        assert_eq!(event, HookEvent::new("", "R", ""));
        let json = serde_json::to_value(HookEvent::warning("R", "m")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"type": "Warning", "reason": "R", "message": "m"})
        );
    }
}
