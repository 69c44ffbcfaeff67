//! Events a sync or finalize hook asked for (the `events` field of its response, an
//! extension beyond upstream): checked here, then recorded on the parent (the target of a
//! DecoratorController) through the [`EventRecorder`], so they are correlated (a repeat
//! bumps `count`) and rate limited per object like every other Event, on a budget of
//! their own: a hook's Events never hold back the controller's.
//!
//! They are recorded as soon as the hook answered (and its answer decoded), whatever the
//! rest of the sync does: the hook said it, and a later failing write is reported by its
//! own `SyncError`. An answer taken from the ETag cache (a 304) records nothing: the hook
//! did not say it again. A bad entry (a reason of the controller's own among them) never
//! fails the sync: it is skipped with a log line and a Warning [`INVALID_HOOK_EVENT`] on
//! the same object.

use metacontroller_api::wire::{HookEvent, MAX_HOOK_EVENTS};
use serde_json::Value;

use crate::events::reason::INVALID_HOOK_EVENT;
use crate::events::{EventRecorder, EventType, InvolvedObject};

/// What to record for one response's events.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Plan {
    /// The valid events, messages capped.
    pub(crate) events: Vec<(EventType, String, String)>,
    /// One message per skipped entry (and one for entries beyond the limit).
    pub(crate) skipped: Vec<String>,
}

/// Checks the events of a `hook_name` response: at most [`MAX_HOOK_EVENTS`], each with a
/// valid type and reason ([`HookEvent::problem`]), messages capped.
pub(crate) fn plan(hook_name: &str, events: Vec<HookEvent>) -> Plan {
    let mut plan = Plan::default();
    let total = events.len();
    for (index, event) in events.into_iter().enumerate().take(MAX_HOOK_EVENTS) {
        if let Some(problem) = event.problem() {
            plan.skipped
                .push(format!("{hook_name} hook event {index} skipped: {problem}"));
            continue;
        }
        let type_ = if event.type_ == "Warning" {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let message = event.capped_message().to_owned();
        plan.events.push((type_, event.reason, message));
    }
    if total > MAX_HOOK_EVENTS {
        plan.skipped.push(format!(
            "{hook_name} hook returned {total} events; the {} beyond the first {MAX_HOOK_EVENTS} were skipped",
            total - MAX_HOOK_EVENTS
        ));
    }
    plan
}

/// Records the events of a `hook_name` response on `object` (its JSON).
pub(crate) fn record(
    recorder: &EventRecorder,
    controller: &str,
    hook_name: &str,
    object: &Value,
    events: Vec<HookEvent>,
) {
    if events.is_empty() {
        return;
    }
    let plan = plan(hook_name, events);
    let involved = InvolvedObject::from_value(object);
    for message in plan.skipped {
        tracing::info!(controller, object = %involved.name, %message, "invalid hook event");
        recorder.record_for_hook(
            involved.clone(),
            EventType::Warning,
            INVALID_HOOK_EVENT,
            message,
        );
    }
    for (type_, reason, message) in plan.events {
        recorder.record_for_hook(involved.clone(), type_, &reason, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_events_are_kept_in_order_with_capped_messages() {
        let plan = plan(
            "sync",
            vec![
                HookEvent::normal("Started", "a"),
                HookEvent::warning("QuotaLow", "x".repeat(5000)),
            ],
        );
        assert!(plan.skipped.is_empty());
        assert_eq!(plan.events.len(), 2);
        assert_eq!(
            plan.events[0],
            (EventType::Normal, "Started".into(), "a".into())
        );
        assert_eq!(plan.events[1].0, EventType::Warning);
        assert_eq!(plan.events[1].2.len(), 1024);
    }

    #[test]
    fn invalid_entries_are_skipped_and_named() {
        let plan = plan(
            "finalize",
            vec![
                HookEvent::new("Info", "Started", "a"),
                HookEvent::normal("", "b"),
                HookEvent::normal("Fine", "c"),
                HookEvent::warning("SyncError", "d"),
            ],
        );
        assert_eq!(
            plan.events,
            vec![(EventType::Normal, "Fine".into(), "c".into())]
        );
        assert_eq!(plan.skipped.len(), 3);
        assert!(plan.skipped[0].starts_with("finalize hook event 0 skipped: type \"Info\""));
        assert!(plan.skipped[1].contains("event 1 skipped: reason is empty"));
        assert_eq!(
            plan.skipped[2],
            "finalize hook event 3 skipped: reason \"SyncError\" is reserved for the controller's own Events"
        );
    }

    #[test]
    fn entries_beyond_the_limit_are_skipped_with_one_message() {
        let events = (0..MAX_HOOK_EVENTS + 3)
            .map(|i| HookEvent::normal("Step", format!("{i}")))
            .collect();
        let plan = plan("sync", events);
        assert_eq!(plan.events.len(), MAX_HOOK_EVENTS);
        assert_eq!(plan.events.last().unwrap().2, "9");
        assert_eq!(
            plan.skipped,
            vec!["sync hook returned 13 events; the 3 beyond the first 10 were skipped"]
        );
    }
}
