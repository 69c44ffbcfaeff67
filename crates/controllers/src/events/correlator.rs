//! Which Event writes to send, and when, without I/O.
//!
//! Correlation as client-go's `EventCorrelator`: one Event object per repeated event
//! (same object, type, reason, message) whose `count`, `lastTimestamp` and `message` are
//! patched; past [`MAX_SIMILAR_MESSAGES`] different messages of one object, type and
//! reason within [`AGGREGATE_WINDOW`], one combined Event carries the newest of them.
//!
//! The rate limit (`--events-qps`, `--events-burst`) paces writes; it never decides what
//! the Events say. A write it holds back is *deferred*, not dropped: the entry keeps
//! counting, and is written (with the count, message and last time seen so far) as soon
//! as a token allows, or at shutdown ([`Correlator::drain`]). Two budgets, so that
//! repeats can never starve a change:
//! * a *change* — a new Event, a new message on an Event, or an Event seen again after
//!   a newer one of the same object was written (it becomes the newest again) — takes a
//!   token of its object's bucket; the controller's Events and the hook's
//!   ([`Source`]) have one bucket each, so a hook cannot use up the controller's;
//! * a *repeat* of the object's newest Event (same message) takes a token of that
//!   Event's own bucket.
//!
//! `lastTimestamp` is when the event was last *seen*, not when it was written, so a late
//! write never makes a stale Event look newer than one seen after it.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use metacontroller_dynamic::{RateError, TokenBucket};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::{
    EventType, Record, Source, AGGREGATE_WINDOW, CACHE_ENTRIES, COMPONENT, MAX_MESSAGE_BYTES,
    MAX_SIMILAR_MESSAGES,
};

/// apiVersion, kind, namespace, name, uid of an involved object.
pub(crate) type ObjectIdentity = (String, String, String, String, String);
type AggregateKey = (ObjectIdentity, EventType, String);
/// One Event object: its involved object, type, reason and message ("" for a combined
/// Event standing for many similar messages).
type EventKey = (ObjectIdentity, EventType, String, String);
type BudgetKey = (ObjectIdentity, Source);

/// An API write to send.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Write {
    /// Create a new Event.
    Create(Box<Event>),
    /// Patch an existing Event's count, lastTimestamp and message; create `event` if it
    /// is gone.
    Patch {
        /// The full Event (for re-creation).
        event: Box<Event>,
        /// The strategic merge patch body.
        patch: Value,
    },
}

struct Aggregate {
    messages: BTreeSet<String>,
    last: Instant,
}

/// One Event object, as seen so far.
struct Entry {
    name: String,
    /// The latest record (its object's resourceVersion is the newest seen).
    record: Record,
    /// The message to write (the combined form for a combined Event).
    message: String,
    count: i32,
    first: Timestamp,
    last: Timestamp,
    /// The message the API server holds; `None` until created.
    written: Option<String>,
    /// When a deferred write may be tried again.
    due: Option<Instant>,
    touched: Instant,
    /// Paces repeats of this Event (`None`: unlimited).
    repeats: Option<TokenBucket>,
}

/// The change budget of one object's Events from one [`Source`].
struct Budget {
    changes: Option<TokenBucket>,
    /// The Event written with the latest `lastTimestamp`, and that time.
    newest: Option<(EventKey, Timestamp)>,
    touched: Instant,
}

/// client-go's event correlation with a rate limit that defers instead of dropping.
pub(crate) struct Correlator {
    qps: f64,
    burst: u32,
    aggregates: HashMap<AggregateKey, Aggregate>,
    entries: HashMap<EventKey, Entry>,
    budgets: HashMap<BudgetKey, Budget>,
    /// Deferred writes by the time they may be tried again.
    deferred: BTreeSet<(Instant, EventKey)>,
}

/// `message` cut to [`MAX_MESSAGE_BYTES`] on a character boundary.
pub(crate) fn truncate(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_string()
}

/// Drops the entries `evictable` allows, oldest first by `age`, once `map` holds more
/// than [`CACHE_ENTRIES`] (down to three quarters of it); returns the keys dropped.
fn bound<K: Clone + Eq + Hash, V, A: Ord>(
    map: &mut HashMap<K, V>,
    age: impl Fn(&V) -> A,
) -> Vec<K> {
    if map.len() <= CACHE_ENTRIES {
        return Vec::new();
    }
    let mut by_age: Vec<(A, K)> = map.iter().map(|(k, v)| (age(v), k.clone())).collect();
    by_age.sort_by(|a, b| a.0.cmp(&b.0));
    let excess = map.len() - CACHE_ENTRIES * 3 / 4;
    let dropped: Vec<K> = by_age.into_iter().take(excess).map(|(_, k)| k).collect();
    for k in &dropped {
        map.remove(k);
    }
    dropped
}

impl Correlator {
    /// A correlator allowing `burst` writes per budget, refilled at `qps` (0: unlimited).
    pub(crate) fn new(qps: f64, burst: u32) -> Result<Correlator, RateError> {
        if qps > 0.0 {
            TokenBucket::new(qps, burst)?;
        } else if !qps.is_finite() || qps < 0.0 {
            return Err(RateError::InvalidQps(qps));
        }
        Ok(Correlator {
            qps,
            burst,
            aggregates: HashMap::new(),
            entries: HashMap::new(),
            budgets: HashMap::new(),
            deferred: BTreeSet::new(),
        })
    }

    fn bucket(&self) -> Option<TokenBucket> {
        // Validated in `new`.
        (self.qps > 0.0)
            .then(|| TokenBucket::new(self.qps, self.burst).ok())
            .flatten()
    }

    /// Takes `record`, seen at `now` (`wall` is written into the Event), into account:
    /// the write to send now, or `None` when it waits for the rate limit.
    pub(crate) fn observe(
        &mut self,
        record: &Record,
        now: Instant,
        wall: Timestamp,
    ) -> Option<Write> {
        let identity = record.object.identity();
        let (message, key_message) = self.aggregate(record, &identity, now);
        let key: EventKey = (identity, record.type_, record.reason.clone(), key_message);
        let repeats = self.bucket();
        let entry = self.entries.entry(key.clone()).or_insert_with(|| Entry {
            name: format!("{}.{:x}", record.object.name, wall.as_nanosecond()),
            record: record.clone(),
            message: message.clone(),
            count: 0,
            first: wall,
            last: wall,
            written: None,
            due: None,
            touched: now,
            repeats,
        });
        entry.record = record.clone();
        entry.message = message;
        entry.count = entry.count.saturating_add(1);
        entry.last = wall;
        entry.touched = now;
        let write = self.attempt(&key, now);
        self.bound_caches();
        write
    }

    /// The deferred writes due at `now` that the rate limit allows now (others are
    /// deferred again).
    pub(crate) fn due(&mut self, now: Instant) -> Vec<Write> {
        let mut writes = Vec::new();
        while let Some((at, key)) = self.deferred.first().cloned() {
            if at > now {
                break;
            }
            self.deferred.remove(&(at, key.clone()));
            if let Some(entry) = self.entries.get_mut(&key) {
                entry.due = None;
            }
            writes.extend(self.attempt(&key, now));
        }
        writes
    }

    /// When the next deferred write is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.deferred.first().map(|(at, _)| *at)
    }

    /// Every deferred write, regardless of the rate limit (shutdown: what the Events say
    /// is not lost with the process).
    pub(crate) fn drain(&mut self) -> Vec<Write> {
        let keys: Vec<EventKey> = std::mem::take(&mut self.deferred)
            .into_iter()
            .map(|(_, key)| key)
            .collect();
        keys.iter()
            .filter_map(|key| self.written_now(key))
            .collect()
    }

    /// Writes `key` now if its budget allows, else defers it until a token is due.
    fn attempt(&mut self, key: &EventKey, now: Instant) -> Option<Write> {
        let entry = self.entries.get(key)?;
        let budget_key: BudgetKey = (key.0.clone(), entry.record.source);
        let fresh_budget = self.bucket();
        let budget = self.budgets.entry(budget_key).or_insert_with(|| Budget {
            changes: fresh_budget,
            newest: None,
            touched: now,
        });
        budget.touched = now;
        let newer_elsewhere = budget
            .newest
            .as_ref()
            .is_some_and(|(newest, at)| newest != key && entry.last > *at);
        let change = match &entry.written {
            None => true,
            Some(written) => *written != entry.message || newer_elsewhere,
        };
        let entry = self.entries.get_mut(key)?;
        let bucket = if change {
            budget.changes.as_mut()
        } else {
            entry.repeats.as_mut()
        };
        if let Some(Err(wait)) = bucket.map(|b| b.try_take(now)) {
            let at = now + wait;
            if let Some(previous) = entry.due.replace(at) {
                self.deferred.remove(&(previous, key.clone()));
            }
            self.deferred.insert((at, key.clone()));
            return None;
        }
        if let Some(previous) = entry.due.take() {
            self.deferred.remove(&(previous, key.clone()));
        }
        self.written_now(key)
    }

    /// The write bringing the API server up to date with `key`'s entry, taken as sent.
    fn written_now(&mut self, key: &EventKey) -> Option<Write> {
        let entry = self.entries.get_mut(key)?;
        entry.due = None;
        let event = event_of(entry);
        let write = match &entry.written {
            None => Write::Create(Box::new(event)),
            Some(_) => Write::Patch {
                patch: json!({
                    "count": entry.count,
                    "lastTimestamp": Time(entry.last),
                    "message": entry.message,
                }),
                event: Box::new(event),
            },
        };
        entry.written = Some(entry.message.clone());
        if let Some(budget) = self.budgets.get_mut(&(key.0.clone(), entry.record.source)) {
            if budget
                .newest
                .as_ref()
                .is_none_or(|(_, at)| entry.last >= *at)
            {
                budget.newest = Some((key.clone(), entry.last));
            }
        }
        Some(write)
    }

    /// Aggregation of similar events (same object, type, reason; other messages): the
    /// message to write and the message part of the Event's key. From the
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
        if agg.messages.contains(&message) {
            // A message already known keeps its own Event.
            return (message.clone(), message);
        }
        agg.messages.insert(message.clone());
        if agg.messages.len() < MAX_SIMILAR_MESSAGES {
            (message.clone(), message)
        } else {
            agg.messages.remove(&message);
            (
                truncate(&format!("(combined from similar events): {message}")),
                String::new(),
            )
        }
    }

    /// Keeps the caches within [`CACHE_ENTRIES`]: least recently seen first, and Events
    /// whose write is deferred last.
    fn bound_caches(&mut self) {
        bound(&mut self.aggregates, |a| a.last);
        for key in bound(&mut self.entries, |e| (e.due.is_some(), e.touched)) {
            self.deferred.retain(|(_, k)| *k != key);
        }
        bound(&mut self.budgets, |b| b.touched);
    }
}

/// The Event object for `entry`.
fn event_of(entry: &Entry) -> Event {
    let record = &entry.record;
    let obj = &record.object;
    Event {
        metadata: ObjectMeta {
            name: Some(entry.name.clone()),
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
        message: Some(entry.message.clone()),
        type_: Some(record.type_.as_str().to_string()),
        count: Some(entry.count),
        first_timestamp: Some(Time(entry.first)),
        last_timestamp: Some(Time(entry.last)),
        source: Some(EventSource {
            component: Some(COMPONENT.to_string()),
            host: None,
        }),
        reporting_component: Some(COMPONENT.to_string()),
        reporting_instance: Some(String::new()),
        ..Event::default()
    }
}
