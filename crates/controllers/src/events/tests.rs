use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use tokio::time::Instant;

use super::correlator::{truncate, Correlator, Write};
use super::*;

fn record(name: &str, reason: &str, message: &str) -> Record {
    Record {
        object: InvolvedObject {
            api_version: "example.com/v1".into(),
            kind: "Parent".into(),
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            resource_version: "1".into(),
        },
        type_: EventType::Warning,
        reason: reason.into(),
        message: message.into(),
        source: Source::Controller,
    }
}

fn from_hook(name: &str, reason: &str, message: &str) -> Record {
    Record {
        source: Source::Hook,
        ..record(name, reason, message)
    }
}

fn wall(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

/// Observes `r` now at `secs`.
fn seen(c: &mut Correlator, r: &Record, secs: i64) -> Option<Write> {
    c.observe(r, Instant::now(), wall(secs))
}

fn created(write: Option<Write>) -> Box<Event> {
    match write {
        Some(Write::Create(event)) => event,
        other => panic!("expected a create, got {other:?}"),
    }
}

fn patched(write: Option<Write>) -> (Box<Event>, Value) {
    match write {
        Some(Write::Patch { event, patch }) => (event, patch),
        other => panic!("expected a patch, got {other:?}"),
    }
}

/// The default flags: one token per 5 minutes, `burst` at once.
fn limited(burst: u32) -> Correlator {
    Correlator::new(1.0 / 300.0, burst).unwrap()
}

#[tokio::test(start_paused = true)]
async fn first_event_is_created_with_upstream_fields() {
    let mut c = Correlator::new(0.0, 0).unwrap();
    let e = created(seen(&mut c, &record("p", "SyncError", "boom"), 0));
    assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
    assert!(e.metadata.name.as_deref().unwrap().starts_with("p."));
    assert_eq!(e.involved_object.kind.as_deref(), Some("Parent"));
    assert_eq!(e.involved_object.uid.as_deref(), Some("uid-p"));
    assert_eq!(e.reason.as_deref(), Some("SyncError"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.count, Some(1));
    assert_eq!(
        e.source.as_ref().unwrap().component.as_deref(),
        Some("metacontroller")
    );
    // Cluster-scoped objects get their events in "default".
    let mut cluster = record("c", "Started", "hi");
    cluster.object.namespace.clear();
    let e = created(seen(&mut c, &cluster, 0));
    assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(e.involved_object.namespace, None);
}

#[tokio::test(start_paused = true)]
async fn repeats_patch_the_count_and_last_seen_time_of_the_same_event() {
    let mut c = Correlator::new(0.0, 0).unwrap();
    let first = created(seen(&mut c, &record("p", "SyncError", "boom"), 0));
    // A new resourceVersion of the parent does not make it a different event.
    let mut again = record("p", "SyncError", "boom");
    again.object.resource_version = "2".into();
    let (event, patch) = patched(seen(&mut c, &again, 5));
    assert_eq!(event.metadata.name, first.metadata.name);
    assert_eq!(event.count, Some(2));
    assert_eq!(event.first_timestamp, first.first_timestamp);
    assert_eq!(event.involved_object.resource_version.as_deref(), Some("2"));
    assert_eq!(
        patch,
        json!({"count": 2, "lastTimestamp": Time(wall(5)), "message": "boom"})
    );
    // A different message is a different event.
    created(seen(&mut c, &record("p", "SyncError", "other"), 6));
}

#[tokio::test(start_paused = true)]
async fn many_similar_messages_are_combined_into_the_newest() {
    let mut c = Correlator::new(0.0, 0).unwrap();
    for i in 0..MAX_SIMILAR_MESSAGES - 1 {
        created(seen(&mut c, &record("p", "SyncError", &format!("m{i}")), 0));
    }
    let combined = created(seen(&mut c, &record("p", "SyncError", "m-last"), 1));
    assert_eq!(
        combined.message.as_deref(),
        Some("(combined from similar events): m-last")
    );
    let (event, patch) = patched(seen(&mut c, &record("p", "SyncError", "m-more"), 2));
    assert_eq!(event.metadata.name, combined.metadata.name);
    assert_eq!(patch["message"], "(combined from similar events): m-more");
    // A message seen before keeps its own Event.
    let (event, _) = patched(seen(&mut c, &record("p", "SyncError", "m3"), 3));
    assert_eq!(event.message.as_deref(), Some("m3"));
    // After the window, messages count from zero again.
    tokio::time::advance(AGGREGATE_WINDOW + Duration::from_secs(1)).await;
    let e = created(seen(&mut c, &record("p", "SyncError", "fresh"), 700));
    assert_eq!(e.message.as_deref(), Some("fresh"));
}

#[tokio::test(start_paused = true)]
async fn repeats_never_spend_the_budget_of_a_new_error() {
    let mut c = limited(3);
    let a = record("p", "SyncError", "A");
    created(seen(&mut c, &a, 0));
    for secs in 1..=3 {
        patched(seen(&mut c, &a, secs));
    }
    // A's own budget is spent: further repeats wait, however many.
    for secs in 4..100 {
        assert_eq!(seen(&mut c, &a, secs), None);
    }
    // A new error, and another Event kind, are written at once.
    created(seen(&mut c, &record("p", "SyncError", "B"), 100));
    created(seen(&mut c, &record("p", "SyncRecovered", "fine"), 101));
}

#[tokio::test(start_paused = true)]
async fn deferred_writes_come_when_due_with_everything_seen_so_far() {
    let mut c = limited(1);
    let a = record("p", "SyncError", "A");
    created(seen(&mut c, &a, 0));
    patched(seen(&mut c, &a, 1));
    assert_eq!(seen(&mut c, &a, 2), None);
    assert_eq!(seen(&mut c, &a, 3), None);
    let due = c.next_due().expect("a write is deferred");
    assert!(c.due(Instant::now()).is_empty(), "not due yet");
    tokio::time::advance(due - Instant::now()).await;
    let writes = c.due(Instant::now());
    let [Write::Patch { patch, .. }] = writes.as_slice() else {
        panic!("{writes:?}")
    };
    assert_eq!(
        *patch,
        json!({"count": 4, "lastTimestamp": Time(wall(3)), "message": "A"})
    );
    assert_eq!(c.next_due(), None);
}

#[tokio::test(start_paused = true)]
async fn an_event_seen_again_after_a_newer_one_is_written_at_once() {
    let mut c = limited(3);
    let a = record("p", "SyncError", "A");
    created(seen(&mut c, &a, 0));
    for secs in 1..=3 {
        patched(seen(&mut c, &a, secs));
    }
    assert_eq!(seen(&mut c, &a, 4), None);
    created(seen(&mut c, &record("p", "SyncError", "B"), 5));
    // A is failing again after B: it must be the newest Event again, now.
    let (_, patch) = patched(seen(&mut c, &a, 6));
    assert_eq!(patch["count"], 6);
    assert_eq!(patch["lastTimestamp"], json!(Time(wall(6))));
}

#[tokio::test(start_paused = true)]
async fn a_late_write_keeps_the_time_it_was_last_seen() {
    let mut c = limited(2);
    let a = record("p", "SyncError", "A");
    created(seen(&mut c, &a, 0));
    patched(seen(&mut c, &a, 1));
    patched(seen(&mut c, &a, 1));
    assert_eq!(seen(&mut c, &a, 2), None);
    created(seen(&mut c, &record("p", "SyncRecovered", "fine"), 3));
    tokio::time::advance(Duration::from_secs(3600)).await;
    let writes = c.due(Instant::now());
    let [Write::Patch { patch, .. }] = writes.as_slice() else {
        panic!("{writes:?}")
    };
    // Older than the recovery: `kubectl describe` still lists the recovery last.
    assert_eq!(patch["lastTimestamp"], json!(Time(wall(2))));
}

#[tokio::test(start_paused = true)]
async fn hook_events_have_their_own_budget() {
    let mut c = limited(3);
    for i in 0..3 {
        created(seen(&mut c, &from_hook("p", "Tick", &format!("{i}")), 0));
    }
    for i in 3..50 {
        assert_eq!(
            seen(&mut c, &from_hook("p", "Tick", &format!("{i}")), 1),
            None
        );
    }
    created(seen(&mut c, &record("p", "SyncError", "A"), 2));
    created(seen(&mut c, &record("p", "SyncError", "B"), 3));
    // Other objects have their own budgets too.
    created(seen(&mut c, &from_hook("q", "Tick", "0"), 4));
}

#[tokio::test(start_paused = true)]
async fn new_events_beyond_the_budget_wait_and_are_not_lost() {
    let mut c = limited(2);
    created(seen(&mut c, &record("p", "SyncError", "A"), 0));
    created(seen(&mut c, &record("p", "SyncError", "B"), 1));
    assert_eq!(seen(&mut c, &record("p", "SyncError", "C"), 2), None);
    tokio::time::advance(Duration::from_secs(300)).await;
    let writes = c.due(Instant::now());
    let [Write::Create(event)] = writes.as_slice() else {
        panic!("{writes:?}")
    };
    assert_eq!(event.message.as_deref(), Some("C"));
    assert_eq!(event.last_timestamp, Some(Time(wall(2))));
}

#[tokio::test(start_paused = true)]
async fn drain_writes_everything_deferred() {
    let mut c = limited(1);
    let a = record("p", "SyncError", "A");
    created(seen(&mut c, &a, 0));
    patched(seen(&mut c, &a, 1));
    assert_eq!(seen(&mut c, &a, 2), None);
    assert_eq!(seen(&mut c, &record("p", "SyncError", "B"), 3), None);
    let writes = c.drain();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(writes
        .iter()
        .any(|w| matches!(w, Write::Patch { patch, .. } if patch["count"] == 3)));
    assert!(writes
        .iter()
        .any(|w| matches!(w, Write::Create(e) if e.message.as_deref() == Some("B"))));
    assert_eq!(c.next_due(), None);
    assert!(c.drain().is_empty());
}

#[test]
fn long_messages_are_cut_on_a_char_boundary() {
    let long = "é".repeat(MAX_MESSAGE_BYTES);
    let cut = truncate(&long);
    assert!(cut.len() <= MAX_MESSAGE_BYTES);
    assert!(cut.chars().all(|c| c == 'é'));
}

#[test]
fn invalid_rates_are_refused() {
    assert!(Correlator::new(-1.0, 1).is_err());
    assert!(Correlator::new(f64::NAN, 1).is_err());
    assert!(Correlator::new(1.0, 0).is_err());
}

#[tokio::test]
async fn disabled_recorder_accepts_and_drops() {
    let r = EventRecorder::disabled();
    r.warning(&json!({"metadata": {"name": "x"}}), reason::SYNC_ERROR, "m");
    assert!(r.flush(Duration::from_secs(1)).await);
}

#[test]
fn the_controllers_parent_reasons_are_reserved_for_it() {
    for reason in [
        reason::SYNC_ERROR,
        reason::SYNC_RECOVERED,
        reason::CREATE_ERROR,
        reason::LIST_ERROR,
        reason::INVALID_HOOK_EVENT,
    ] {
        assert!(
            metacontroller_api::wire::RESERVED_HOOK_EVENT_REASONS.contains(&reason),
            "{reason}"
        );
    }
}
