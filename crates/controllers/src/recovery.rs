//! A parent that recovers says so: after syncs that failed with a `SyncError` Event, the
//! first sync that completes records one Normal `SyncRecovered` Event. Without it the last
//! `SyncError` would stay the newest Event on the parent after the fix, and `kubectl
//! describe` would tell the user it still fails.
//!
//! What is remembered is in memory: after a restart of the controller a parent that failed
//! before gets no `SyncRecovered` (its next failure, or nothing, says the rest).

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Mutex;

use metacontroller_workqueue::{Outcome, Requeue};
use serde_json::Value;

use crate::events::{reason, EventRecorder};

/// The keys whose last sync failed with a `SyncError` Event, of one controller.
pub(crate) struct Failing<K> {
    keys: Mutex<HashSet<K>>,
}

impl<K: Clone + Eq + Hash> Default for Failing<K> {
    fn default() -> Self {
        Failing {
            keys: Mutex::new(HashSet::new()),
        }
    }
}

/// The message of the `SyncRecovered` Event: the same for every recovery, so repeated
/// recoveries are one Event whose count grows.
pub(crate) const RECOVERED_MESSAGE: &str = "Sync succeeded after failing";

impl<K: Clone + Eq + Hash> Failing<K> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<K>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A `SyncError` Event was recorded for `key`.
    pub(crate) fn failed(&self, key: &K) {
        self.lock().insert(key.clone());
    }

    /// Takes the end of a sync of `key` (before the failure policy rewrites it) into
    /// account: a sync that completed after failures records `SyncRecovered` on `object`
    /// (the object as the controller sees it; `None` when it is gone, which only forgets).
    /// A sync that ended waiting for its own writes did not complete: the next one says.
    pub(crate) fn observe<E>(
        &self,
        key: &K,
        outcome: &Outcome<E>,
        object: impl FnOnce() -> Option<Value>,
        events: &EventRecorder,
    ) {
        let completed =
            outcome.result.is_ok() && !matches!(outcome.requeue, Requeue::UnlessSyncedWithin(_));
        if !completed || !self.lock().remove(key) {
            return;
        }
        if let Some(object) = object() {
            events.normal(&object, reason::SYNC_RECOVERED, RECOVERED_MESSAGE);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ok(requeue: Requeue) -> Outcome<()> {
        Outcome::done(requeue)
    }

    /// Whether `observe` asked for the object (it does only to record the Event).
    fn recovers(failing: &Failing<&'static str>, key: &'static str, outcome: Outcome<()>) -> bool {
        let mut asked = false;
        failing.observe(
            &key,
            &outcome,
            || {
                asked = true;
                None
            },
            &EventRecorder::disabled(),
        );
        asked
    }

    #[test]
    fn one_recovery_per_failure_streak() {
        let failing = Failing::default();
        assert!(
            !recovers(&failing, "p", ok(Requeue::OnChange)),
            "never failed"
        );
        failing.failed(&"p");
        failing.failed(&"p");
        let failed = Outcome::new(Err(()), Requeue::OnChange);
        assert!(!recovers(&failing, "p", failed));
        assert!(!recovers(
            &failing,
            "p",
            ok(Requeue::UnlessSyncedWithin(Duration::from_secs(1)))
        ));
        assert!(!recovers(&failing, "q", ok(Requeue::OnChange)));
        assert!(recovers(
            &failing,
            "p",
            ok(Requeue::After(Duration::from_secs(5)))
        ));
        assert!(!recovers(&failing, "p", ok(Requeue::OnChange)), "once");
    }
}
