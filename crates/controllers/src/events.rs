//! Kubernetes Events (core/v1) about parents and controllers, recorded the way client-go's
//! legacy recorder does for upstream Metacontroller, and never at the expense of a sync.
//!
//! * [`EventRecorder::record`] only queues (a bounded queue of `QUEUE_CAPACITY`); a
//!   background task writes. A full queue, a rate-limited event or a failed write drops the
//!   event with a debug log. Nothing is retried.
//! * Correlation as client-go's `EventCorrelator`:
//!   - identical events (same object, type, reason, message) are one Event whose `count`
//!     and `lastTimestamp` are patched (strategic merge patch; re-created if it is gone);
//!   - after `MAX_SIMILAR_MESSAGES` different messages with the same object, type and
//!     reason within `AGGREGATE_WINDOW`, further ones go into a single Event whose message
//!     is prefixed `(combined from similar events): `;
//!   - per involved object, a token bucket (`--events-qps`, `--events-burst`; upstream
//!     defaults one per 5 minutes, burst 25) drops the excess.
//! * Every Event not written is counted in `metacontroller_events_dropped_total{reason}`
//!   (`queue_full`, `rate_limited`, `write_failed`), registered by the binary
//!   ([`EventRecorder::dropped_metric`]).
//! * Events are named `<object name>.<hex unix nanos>` in the object's namespace, or
//!   `default` for cluster-scoped objects, with source component `metacontroller`.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use metacontroller_dynamic::{KeyedRateLimiter, RateError};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Event reasons used by upstream Metacontroller.
pub mod reason {
    /// A sync of a parent failed (Warning, message `Sync error: <error>`).
    pub const SYNC_ERROR: &str = "SyncError";
    /// A controller could not be created from its spec (Warning).
    pub const CREATE_ERROR: &str = "CreateError";
    /// A controller is starting (Normal, on the controller object).
    pub const STARTING: &str = "Starting";
    /// A controller started (Normal, on the controller object).
    pub const STARTED: &str = "Started";
    /// A controller is stopping (Normal, on the controller object).
    pub const STOPPING: &str = "Stopping";
    /// A controller stopped (Normal, on the controller object).
    pub const STOPPED: &str = "Stopped";
}

/// Source component of every Event.
pub(crate) const COMPONENT: &str = "metacontroller";
/// Events waiting to be written; beyond this, new events are dropped (client-go: 1000).
pub(crate) const QUEUE_CAPACITY: usize = 1000;
/// Distinct messages per (object, type, reason) before aggregation (client-go: 10).
pub(crate) const MAX_SIMILAR_MESSAGES: usize = 10;
/// Window of similar-event aggregation (client-go: 10 minutes).
pub(crate) const AGGREGATE_WINDOW: Duration = Duration::from_secs(600);
/// Objects and event keys remembered by the correlator (client-go: 4096).
pub(crate) const CACHE_ENTRIES: usize = 4096;
/// Longest message written; longer ones are cut (the API server limits Event size).
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024;

/// Event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Normal operation.
    Normal,
    /// Something went wrong.
    Warning,
}

impl EventType {
    /// `Normal` or `Warning`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an Event is about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct InvolvedObject {
    /// apiVersion.
    pub api_version: String,
    /// kind.
    pub kind: String,
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// uid.
    pub uid: String,
    /// resourceVersion when the event was recorded.
    pub resource_version: String,
}

impl InvolvedObject {
    /// Reads apiVersion, kind and metadata from an object's JSON (missing fields empty).
    pub(crate) fn from_value(obj: &Value) -> InvolvedObject {
        let s = |p: &str| {
            obj.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        InvolvedObject {
            api_version: s("/apiVersion"),
            kind: s("/kind"),
            namespace: s("/metadata/namespace"),
            name: s("/metadata/name"),
            uid: s("/metadata/uid"),
            resource_version: s("/metadata/resourceVersion"),
        }
    }

    /// The namespace the Event lives in.
    fn event_namespace(&self) -> &str {
        if self.namespace.is_empty() {
            "default"
        } else {
            &self.namespace
        }
    }

    /// Identity without the resourceVersion (which changes with every write).
    fn identity(&self) -> (String, String, String, String, String) {
        (
            self.api_version.clone(),
            self.kind.clone(),
            self.namespace.clone(),
            self.name.clone(),
            self.uid.clone(),
        )
    }
}

/// One event to record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Record {
    /// What it is about.
    pub object: InvolvedObject,
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason (see [`reason`]).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

type ObjectIdentity = (String, String, String, String, String);
type AggregateKey = (ObjectIdentity, EventType, String);
type EventKey = (ObjectIdentity, EventType, String, String);

/// What the writer should do with an observed event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Create a new Event.
    Create(Box<Event>),
    /// Patch an existing Event's count, lastTimestamp and message; create `event` if it is
    /// gone.
    Patch {
        /// The full Event (for re-creation).
        event: Box<Event>,
        /// The strategic merge patch body.
        patch: Value,
    },
    /// Rate limited: drop.
    Drop,
}

struct Aggregate {
    messages: BTreeSet<String>,
    last: Instant,
}

struct Seen {
    name: String,
    count: i32,
    first: Timestamp,
    last: Instant,
}

/// client-go's event correlation, without I/O: aggregation, deduplication, spam filter.
pub(crate) struct Correlator {
    aggregates: HashMap<AggregateKey, Aggregate>,
    seen: HashMap<EventKey, Seen>,
    spam: KeyedRateLimiter<ObjectIdentity>,
}

fn truncate(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_string()
}

/// Drops the oldest entries once `map` holds more than [`CACHE_ENTRIES`].
fn bound<K: Clone + Eq + Hash, V>(map: &mut HashMap<K, V>, last: impl Fn(&V) -> Instant) {
    if map.len() <= CACHE_ENTRIES {
        return;
    }
    let mut by_age: Vec<(Instant, K)> = map.iter().map(|(k, v)| (last(v), k.clone())).collect();
    by_age.sort_by_key(|(t, _)| *t);
    let excess = map.len() - CACHE_ENTRIES * 3 / 4;
    for (_, k) in by_age.into_iter().take(excess) {
        map.remove(&k);
    }
}

impl Correlator {
    /// A correlator allowing `burst` events per object, refilled at `qps` (0: unlimited).
    pub(crate) fn new(qps: f64, burst: u32) -> Result<Correlator, RateError> {
        Ok(Correlator {
            aggregates: HashMap::new(),
            seen: HashMap::new(),
            spam: KeyedRateLimiter::new(qps, burst, CACHE_ENTRIES)?,
        })
    }

    /// Decides what to write for `record` observed at `now` (`wall` is the timestamp
    /// written into the Event).
    pub(crate) fn observe(&mut self, record: &Record, now: Instant, wall: Timestamp) -> Action {
        let identity = record.object.identity();
        let (message, key_message) = self.aggregate(record, &identity, now);

        // Deduplication: the same event again bumps the count of the existing Event.
        let event_key: EventKey = (
            identity.clone(),
            record.type_,
            record.reason.clone(),
            key_message,
        );
        let previous = self
            .seen
            .get(&event_key)
            .map(|s| (s.name.clone(), s.count, s.first));
        let (name, count, first) = match previous {
            Some((name, count, first)) => (name, count.saturating_add(1), first),
            None => (
                format!("{}.{:x}", record.object.name, wall.as_nanosecond()),
                1,
                wall,
            ),
        };

        // Spam filter per involved object, applied after correlation like client-go.
        if !self.spam.try_acquire(&identity) {
            return Action::Drop;
        }
        self.seen.insert(
            event_key,
            Seen {
                name: name.clone(),
                count,
                first,
                last: now,
            },
        );
        bound(&mut self.seen, |s| s.last);

        let event = event_of(record, name, &message, count, first, wall);
        if count == 1 {
            Action::Create(Box::new(event))
        } else {
            let patch = json!({
                "count": count,
                "lastTimestamp": Time(wall),
                "message": message,
            });
            Action::Patch {
                event: Box::new(event),
                patch,
            }
        }
    }

    /// Aggregation of similar events (same object, type, reason; other messages): the
    /// message to write and the message part of the deduplication key. From the
    /// [`MAX_SIMILAR_MESSAGES`]th different message on, one combined Event (keyed without
    /// the message) stands for all further similar ones.
    fn aggregate(
        &mut self,
        record: &Record,
        identity: &ObjectIdentity,
        now: Instant,
    ) -> (String, String) {
        let message = truncate(&record.message);
        let agg_key: AggregateKey = (identity.clone(), record.type_, record.reason.clone());
        let agg = self.aggregates.entry(agg_key).or_insert_with(|| Aggregate {
            messages: BTreeSet::new(),
            last: now,
        });
        if now.saturating_duration_since(agg.last) > AGGREGATE_WINDOW {
            agg.messages.clear();
        }
        agg.last = now;
        agg.messages.insert(message.clone());
        let result = if agg.messages.len() < MAX_SIMILAR_MESSAGES {
            (message.clone(), message)
        } else {
            agg.messages.pop_first();
            (
                truncate(&format!("(combined from similar events): {message}")),
                String::new(),
            )
        };
        bound(&mut self.aggregates, |a| a.last);
        result
    }
}

/// The Event object for `record`, named `name`, seen `count` times from `first` to `wall`.
fn event_of(
    record: &Record,
    name: String,
    message: &str,
    count: i32,
    first: Timestamp,
    wall: Timestamp,
) -> Event {
    let obj = &record.object;
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(obj.event_namespace().to_string()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(obj.api_version.clone()).filter(|s| !s.is_empty()),
            kind: Some(obj.kind.clone()).filter(|s| !s.is_empty()),
            namespace: Some(obj.namespace.clone()).filter(|s| !s.is_empty()),
            name: Some(obj.name.clone()).filter(|s| !s.is_empty()),
            uid: Some(obj.uid.clone()).filter(|s| !s.is_empty()),
            resource_version: Some(obj.resource_version.clone()).filter(|s| !s.is_empty()),
            field_path: None,
        },
        reason: Some(record.reason.clone()),
        message: Some(message.to_string()),
        type_: Some(record.type_.as_str().to_string()),
        count: Some(count),
        first_timestamp: Some(Time(first)),
        last_timestamp: Some(Time(wall)),
        source: Some(EventSource {
            component: Some(COMPONENT.to_string()),
            host: None,
        }),
        reporting_component: Some(COMPONENT.to_string()),
        reporting_instance: Some(String::new()),
        ..Event::default()
    }
}

/// Name of the counter of Events not written.
pub const DROPPED_TOTAL: &str = "metacontroller_events_dropped_total";

/// Why an Event was not written (the `reason` label of [`DROPPED_TOTAL`]).
const DROP_REASONS: [&str; 3] = ["queue_full", "rate_limited", "write_failed"];

/// Counts Events not written, by reason; every reason's series exists from the start.
#[derive(Clone)]
struct Dropped(Option<prometheus::IntCounterVec>);

impl Dropped {
    fn new() -> Dropped {
        let counter = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                DROPPED_TOTAL,
                "Events not written, by reason: queue_full, rate_limited (per-object budget) or write_failed.",
            ),
            &["reason"],
        )
        .ok();
        if let Some(c) = &counter {
            for reason in DROP_REASONS {
                c.with_label_values(&[reason]);
            }
        }
        Dropped(counter)
    }

    fn inc(&self, reason: &str) {
        if let Some(c) = &self.0 {
            c.with_label_values(&[reason]).inc();
        }
    }
}

/// Records Events without ever blocking or failing the caller. Cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    tx: Option<mpsc::Sender<Record>>,
    dropped: Dropped,
    /// Records queued or being written, for [`EventRecorder::flush`].
    pending: Arc<tokio::sync::watch::Sender<usize>>,
    _worker: Option<Arc<WorkerGuard>>,
}

struct WorkerGuard(tokio::task::JoinHandle<()>);

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("enabled", &self.tx.is_some())
            .finish()
    }
}

impl EventRecorder {
    /// Starts the writer task (must be called inside tokio). `qps`/`burst` are
    /// `--events-qps`/`--events-burst`; `qps == 0` means unlimited.
    pub fn new(client: kube::Client, qps: f64, burst: u32) -> Result<EventRecorder, RateError> {
        EventRecorder::supervised(client, qps, burst, None)
    }

    /// [`EventRecorder::new`] with the writer task under `supervisor`: a panic there would
    /// silently drop every later Event, so it stops the process instead.
    pub fn supervised(
        client: kube::Client,
        qps: f64,
        burst: u32,
        supervisor: Option<&metacontroller_dynamic::Supervisor>,
    ) -> Result<EventRecorder, RateError> {
        let correlator = Correlator::new(qps, burst)?;
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let pending = Arc::new(tokio::sync::watch::channel(0).0);
        let dropped = Dropped::new();
        let writer = write_loop(client, correlator, rx, pending.clone(), dropped.clone());
        let task =
            metacontroller_dynamic::Supervisor::spawn_once_with(supervisor, "event-writer", writer);
        Ok(EventRecorder {
            tx: Some(tx),
            dropped,
            pending,
            _worker: Some(Arc::new(WorkerGuard(task))),
        })
    }

    /// A recorder that drops everything (tests, tools).
    pub(crate) fn disabled() -> EventRecorder {
        EventRecorder {
            tx: None,
            dropped: Dropped::new(),
            pending: Arc::new(tokio::sync::watch::channel(0).0),
            _worker: None,
        }
    }

    /// The `metacontroller_events_dropped_total{reason}` counter of this recorder, for the
    /// process registry (`None` only if the family could not be built).
    pub fn dropped_metric(&self) -> Option<prometheus::IntCounterVec> {
        self.dropped.0.clone()
    }

    /// Waits up to `timeout` until every Event recorded so far is written (or dropped by the
    /// rate limit). Returns `false` on timeout. Used by shutdown.
    pub async fn flush(&self, timeout: std::time::Duration) -> bool {
        let mut rx = self.pending.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|n| *n == 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Queues an event about `object`. Never blocks; drops (debug log) when the queue is full.
    pub fn record(
        &self,
        object: InvolvedObject,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let Some(tx) = &self.tx else { return };
        let record = Record {
            object,
            type_,
            reason: reason.to_string(),
            message: message.into(),
        };
        // Counted before sending so the writer never decrements below zero.
        self.pending.send_modify(|n| *n += 1);
        if let Err(e) = tx.try_send(record) {
            self.pending.send_modify(|n| *n = n.saturating_sub(1));
            let record = match e {
                mpsc::error::TrySendError::Full(r) | mpsc::error::TrySendError::Closed(r) => r,
            };
            self.dropped.inc("queue_full");
            tracing::debug!(reason = %record.reason, object = %record.object.name, "event queue full; event dropped");
        }
    }

    /// A Warning event about `object` (its JSON).
    pub fn warning(&self, object: &Value, reason: &str, message: impl Into<String>) {
        self.record(
            InvolvedObject::from_value(object),
            EventType::Warning,
            reason,
            message,
        );
    }

    /// A Normal event about `object` (its JSON).
    pub fn normal(&self, object: &Value, reason: &str, message: impl Into<String>) {
        self.record(
            InvolvedObject::from_value(object),
            EventType::Normal,
            reason,
            message,
        );
    }
}

async fn write_loop(
    client: kube::Client,
    mut correlator: Correlator,
    mut rx: mpsc::Receiver<Record>,
    pending: Arc<tokio::sync::watch::Sender<usize>>,
    dropped: Dropped,
) {
    while let Some(record) = rx.recv().await {
        if let Err(reason) = write_one(&client, &mut correlator, record).await {
            dropped.inc(reason);
        }
        pending.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Writes one Event; `Err` names why it was dropped instead.
async fn write_one(
    client: &kube::Client,
    correlator: &mut Correlator,
    record: Record,
) -> Result<(), &'static str> {
    let action = correlator.observe(&record, Instant::now(), Timestamp::now());
    let ns = record.object.event_namespace().to_string();
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    let result = match action {
        Action::Drop => {
            tracing::debug!(reason = %record.reason, object = %record.object.name, "event rate limited; dropped");
            return Err("rate_limited");
        }
        Action::Create(event) => api.create(&PostParams::default(), &event).await.map(drop),
        Action::Patch { event, patch } => {
            let name = event.metadata.name.clone().unwrap_or_default();
            match api
                .patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    api.create(&PostParams::default(), &event).await.map(drop)
                }
                r => r.map(drop),
            }
        }
    };
    result.map_err(|e| {
        tracing::debug!(reason = %record.reason, object = %record.object.name, error = %e, "event write failed; dropped");
        "write_failed"
    })
}

#[cfg(test)]
mod tests {
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
        }
    }

    fn wall(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn first_event_is_created_with_upstream_fields() {
        let mut c = Correlator::new(0.0, 0).unwrap();
        let Action::Create(e) =
            c.observe(&record("p", "SyncError", "boom"), Instant::now(), wall(0))
        else {
            panic!("expected a create");
        };
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
        let Action::Create(e) = c.observe(&cluster, Instant::now(), wall(0)) else {
            panic!()
        };
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(e.involved_object.namespace, None);
    }

    #[tokio::test(start_paused = true)]
    async fn repeats_patch_the_count_of_the_same_event() {
        let mut c = Correlator::new(0.0, 0).unwrap();
        let Action::Create(first) =
            c.observe(&record("p", "SyncError", "boom"), Instant::now(), wall(0))
        else {
            panic!()
        };
        // A new resourceVersion of the parent does not make it a different event.
        let mut again = record("p", "SyncError", "boom");
        again.object.resource_version = "2".into();
        let Action::Patch { event, patch } = c.observe(&again, Instant::now(), wall(5)) else {
            panic!("expected a patch")
        };
        assert_eq!(event.metadata.name, first.metadata.name);
        assert_eq!(event.count, Some(2));
        assert_eq!(event.first_timestamp, first.first_timestamp);
        assert_eq!(patch["count"], 2);
        assert_eq!(patch["message"], "boom");
        // A different message is a different event.
        assert!(matches!(
            c.observe(&record("p", "SyncError", "other"), Instant::now(), wall(6)),
            Action::Create(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn many_similar_messages_are_combined() {
        let mut c = Correlator::new(0.0, 0).unwrap();
        for i in 0..MAX_SIMILAR_MESSAGES - 1 {
            assert!(matches!(
                c.observe(
                    &record("p", "SyncError", &format!("m{i}")),
                    Instant::now(),
                    wall(0)
                ),
                Action::Create(_)
            ));
        }
        let Action::Create(combined) =
            c.observe(&record("p", "SyncError", "m-last"), Instant::now(), wall(1))
        else {
            panic!()
        };
        assert_eq!(
            combined.message.as_deref(),
            Some("(combined from similar events): m-last")
        );
        let Action::Patch { event, .. } =
            c.observe(&record("p", "SyncError", "m-more"), Instant::now(), wall(2))
        else {
            panic!("further similar events update the combined one")
        };
        assert_eq!(event.metadata.name, combined.metadata.name);
        assert_eq!(
            event.message.as_deref(),
            Some("(combined from similar events): m-more")
        );
        // After the window, messages count from zero again.
        tokio::time::advance(AGGREGATE_WINDOW + Duration::from_secs(1)).await;
        let Action::Create(e) = c.observe(
            &record("p", "SyncError", "fresh"),
            Instant::now(),
            wall(700),
        ) else {
            panic!()
        };
        assert_eq!(e.message.as_deref(), Some("fresh"));
    }

    #[tokio::test(start_paused = true)]
    async fn excess_per_object_is_dropped_and_refills() {
        let mut c = Correlator::new(1.0, 2).unwrap();
        assert!(!matches!(
            c.observe(&record("p", "A", "1"), Instant::now(), wall(0)),
            Action::Drop
        ));
        assert!(!matches!(
            c.observe(&record("p", "B", "1"), Instant::now(), wall(0)),
            Action::Drop
        ));
        assert_eq!(
            c.observe(&record("p", "C", "1"), Instant::now(), wall(0)),
            Action::Drop
        );
        // Other objects have their own budget.
        assert!(!matches!(
            c.observe(&record("q", "A", "1"), Instant::now(), wall(0)),
            Action::Drop
        ));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!matches!(
            c.observe(&record("p", "C", "1"), Instant::now(), wall(1)),
            Action::Drop
        ));
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let cut = truncate(&long);
        assert!(cut.len() <= MAX_MESSAGE_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[tokio::test]
    async fn disabled_recorder_accepts_and_drops() {
        let r = EventRecorder::disabled();
        r.warning(&json!({"metadata": {"name": "x"}}), reason::SYNC_ERROR, "m");
    }
}
