//! Kubernetes Events (core/v1) about parents and controllers, recorded as client-go's
//! legacy recorder does for upstream Metacontroller, never at the expense of a sync, and
//! never hiding what changed.
//!
//! * [`EventRecorder::record`] only queues (a bounded queue of `QUEUE_CAPACITY`); a
//!   background task writes. A full queue or a failed write drops the event with a debug
//!   log; hook Events may fill only half of the queue, so the controller's always fit.
//! * [`correlator`]: identical events are one Event whose `count`, `lastTimestamp` and
//!   `message` are patched (strategic merge patch; re-created if it is gone); many
//!   different messages of one reason are combined into one Event; the rate limit
//!   (`--events-qps`, `--events-burst`, per object; upstream defaults one per 5 minutes,
//!   burst 25) delays writes instead of dropping them, repeats and changes have separate
//!   budgets, and so have the controller's and the hooks' Events.
//! * Every Event not written is counted in `metacontroller_events_dropped_total{reason}`
//!   (`queue_full`, `write_failed`), registered by the binary
//!   ([`EventRecorder::dropped_metric`]); the rate limit defers, it does not drop.
//! * Events are named `<object name>.<hex unix nanos>` in the object's namespace, or
//!   `default` for cluster-scoped objects, with source component `metacontroller`.

mod correlator;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use metacontroller_dynamic::RateError;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use correlator::{Correlator, Write};

/// Event reasons of the controller's own Events: upstream Metacontroller's, and ours
/// (`SyncRecovered`, `ListError`, `InvalidHookEvent`). A hook may not use the ones
/// [`metacontroller_api::wire::RESERVED_HOOK_EVENT_REASONS`] lists.
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
    /// A parent (target) synced after syncs that failed with a `SyncError` (Normal, once
    /// per recovery; not upstream's).
    pub const SYNC_RECOVERED: &str = "SyncRecovered";
    /// A controller cannot list a resource it reads (Warning, on the controller object;
    /// not upstream's).
    pub const LIST_ERROR: &str = "ListError";
    /// A hook asked for an Event the controller skipped (Warning; not upstream's).
    pub const INVALID_HOOK_EVENT: &str = "InvalidHookEvent";
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    fn identity(&self) -> correlator::ObjectIdentity {
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
    /// Whose budget the event spends.
    pub source: Source,
}

/// Who asked for an Event: each has its own rate-limit budget per object, so a hook's
/// Events never hold back the controller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// The controller's own Events.
    Controller,
    /// A hook's Events, and the `InvalidHookEvent` Warnings about them.
    Hook,
}

/// Name of the counter of Events not written.
pub const DROPPED_TOTAL: &str = "metacontroller_events_dropped_total";

/// Why an Event was not written (the `reason` label of [`DROPPED_TOTAL`]).
const DROP_REASONS: [&str; 2] = ["queue_full", "write_failed"];

/// Counts Events not written, by reason; every reason's series exists from the start.
#[derive(Clone)]
struct Dropped(Option<prometheus::IntCounterVec>);

impl Dropped {
    fn new() -> Dropped {
        let counter = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                DROPPED_TOTAL,
                "Events not written, by reason: queue_full (the writer's queue, or its hook half, is full) or write_failed.",
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
    tx: Option<mpsc::Sender<Message>>,
    dropped: Dropped,
    /// Records queued or being written, for [`EventRecorder::flush`].
    pending: Arc<tokio::sync::watch::Sender<usize>>,
    _worker: Option<Arc<WorkerGuard>>,
}

/// What the writer task is sent.
enum Message {
    /// An event to record.
    Record(Record),
    /// Write every deferred Event now (shutdown).
    Drain,
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

    /// Waits up to `timeout` until every Event recorded so far is written, those the rate
    /// limit was holding back included. Returns `false` on timeout. Used by shutdown.
    pub async fn flush(&self, timeout: std::time::Duration) -> bool {
        let mut rx = self.pending.subscribe();
        let written = async {
            if let Some(tx) = &self.tx {
                self.pending.send_modify(|n| *n += 1);
                if tx.send(Message::Drain).await.is_err() {
                    self.pending.send_modify(|n| *n = n.saturating_sub(1));
                }
            }
            rx.wait_for(|n| *n == 0).await.is_ok()
        };
        tokio::time::timeout(timeout, written)
            .await
            .unwrap_or(false)
    }

    /// Queues an event about `object`. Never blocks; drops (debug log) when the queue is full.
    pub fn record(
        &self,
        object: InvolvedObject,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.send(Record {
            object,
            type_,
            reason: reason.to_string(),
            message: message.into(),
            source: Source::Controller,
        });
    }

    /// Queues an event a hook asked for (or the `InvalidHookEvent` about one), on the
    /// hooks' budget. Dropped (debug log) while the queue is half full, so hook Events
    /// never take the place of the controller's.
    pub(crate) fn record_for_hook(
        &self,
        object: InvolvedObject,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let Some(tx) = &self.tx else { return };
        if tx.capacity() < QUEUE_CAPACITY / 2 {
            self.dropped.inc("queue_full");
            tracing::debug!(%reason, object = %object.name, "event queue half full; hook event dropped");
            return;
        }
        self.send(Record {
            object,
            type_,
            reason: reason.to_string(),
            message: message.into(),
            source: Source::Hook,
        });
    }

    fn send(&self, record: Record) {
        let Some(tx) = &self.tx else { return };
        // Counted before sending so the writer never decrements below zero.
        self.pending.send_modify(|n| *n += 1);
        if let Err(e) = tx.try_send(Message::Record(record)) {
            self.pending.send_modify(|n| *n = n.saturating_sub(1));
            if let mpsc::error::TrySendError::Full(Message::Record(record))
            | mpsc::error::TrySendError::Closed(Message::Record(record)) = e
            {
                self.dropped.inc("queue_full");
                tracing::debug!(reason = %record.reason, object = %record.object.name, "event queue full; event dropped");
            }
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

/// Writes what the correlator says, as events arrive and as deferred writes fall due.
async fn write_loop(
    client: kube::Client,
    mut correlator: Correlator,
    mut rx: mpsc::Receiver<Message>,
    pending: Arc<tokio::sync::watch::Sender<usize>>,
    dropped: Dropped,
) {
    loop {
        let next_due = correlator.next_due();
        let due = async {
            match next_due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            message = rx.recv() => {
                let Some(message) = message else { break };
                let writes = match message {
                    Message::Record(record) => correlator
                        .observe(&record, Instant::now(), Timestamp::now())
                        .into_iter()
                        .collect(),
                    Message::Drain => correlator.drain(),
                };
                for write in writes {
                    send_write(&client, write, &dropped).await;
                }
                pending.send_modify(|n| *n = n.saturating_sub(1));
            }
            () = due => {
                for write in correlator.due(Instant::now()) {
                    send_write(&client, write, &dropped).await;
                }
            }
        }
    }
}

/// Sends one write; a patch of an Event that is gone (expired) creates it again.
async fn send_write(client: &kube::Client, write: Write, dropped: &Dropped) {
    let event = match &write {
        Write::Create(event) | Write::Patch { event, .. } => event,
    };
    let ns = event.metadata.namespace.clone().unwrap_or_default();
    let name = event.metadata.name.clone().unwrap_or_default();
    let reason = event.reason.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    let result = match write {
        Write::Create(event) => api.create(&PostParams::default(), &event).await.map(drop),
        Write::Patch { event, patch } => {
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
    if let Err(e) = result {
        dropped.inc("write_failed");
        tracing::debug!(%reason, event = %name, error = %e, "event write failed; dropped");
    }
}
