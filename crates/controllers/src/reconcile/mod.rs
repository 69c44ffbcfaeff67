//! The skeleton both controller kinds run on. A CompositeController and a
//! DecoratorController differ in what one sync does (claim children vs. decorate a target);
//! everything around a sync is the same and lives here, once:
//!
//! - **Events → queue** ([`wiring`]). Watch events are served before relist replays
//!   ([`priority`]); the informer of the synced objects feeds the own-writes overlay and
//!   drops expectations of deleted owners ([`watch_owners`]); informers of written objects
//!   feed the overlay ([`wiring::watch_owned`]).
//! - **Workers** ([`runner`]). [`run`] waits for every informer to sync, then runs syncs:
//!   `--workers` at a time up to their hook calls, `--parents-in-flight` in all.
//! - **A sync is two phases and a value.** [`Reconciler::plan`] holds the queue's
//!   [`Worker`](metacontroller_workqueue::Worker): reads, the writes that must precede the
//!   hook, the hook calls; it returns a [`Plan`] (the writes, and when to come back).
//!   [`Reconciler::write`] runs the writes without a worker. The sync ends as an
//!   [`Outcome`](metacontroller_workqueue::Outcome) the queue applies (requeue, resync,
//!   backoff, forget); nothing here queues a synced key.
//! - **Around a sync** ([`runner::sync_and_record`]), each rule one step: a cache not
//!   synced comes back in a second; the span; failures go through the failure policy, a
//!   pure function of the error ([`policy::error_policy`]: a hook's 429 comes back after
//!   `Retry-After`, without backoff or Event, and counts as a failed sync; an unreachable
//!   API server bounds the backoff; any failure but a 409 Conflict records a `SyncError`
//!   Warning Event); `resyncPeriodSeconds` rides on the outcome, so every object the
//!   controller cares about comes back, whatever the result (upstream's informer resync).
//! - **Inside a sync**, the shared steps ([`common`], [`finalize`], [`ownership`]): end
//!   with [`Plan::await_own_writes`] while our own writes are unconfirmed
//!   ([`Common::own_writes_confirmed`]), put the finalizer in place first
//!   ([`sync_finalizer`]) and honour the hook's `resyncAfterSeconds`
//!   ([`requeue_after_seconds`]).
//!
//! The kind-specific part is the [`Reconciler`] trait; the controller object's common
//! parts are read by [`spec`], the in-process hook code it watches by [`code`].

use std::fmt::Display;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use metacontroller_dynamic::Informer;
use metacontroller_workqueue::Requeue;
use serde_json::Value;

mod code;
mod common;
mod finalize;
mod ownership;
pub(crate) mod policy;
mod runner;
mod spec;
mod wiring;

pub(crate) use common::{Common, StartContext};
pub(crate) use finalize::sync_finalizer;
pub(crate) use ownership::{
    controller_ref, is_unchanged_replay, presence, resolve_controller_ref, watching_informer,
};
pub(crate) use policy::SyncFailure;
pub(crate) use runner::run;
pub(crate) use spec::{child_type, resolve, ControllerSpec};
pub(crate) use wiring::{lease_owned, priority, watch_owners};

/// What phase one of a sync ([`Reconciler::plan`]) hands on.
pub(crate) struct Plan<W> {
    /// The writes the hook's answer asks for; `None` ends the sync here.
    pub(crate) writes: Option<W>,
    /// When the key comes back, whatever the writes do (the hook's `resyncAfterSeconds`).
    pub(crate) requeue: Requeue,
}

impl<W> Plan<W> {
    /// Nothing to write, nothing to come back for (the object is gone, or not ours).
    pub(crate) fn done() -> Self {
        Plan {
            writes: None,
            requeue: Requeue::OnChange,
        }
    }

    /// The cache has not caught up with our own writes ([`Common::own_writes_confirmed`]):
    /// the watch events that confirm them bring the key back. A second later it comes
    /// back anyway unless a sync of it has started since (the confirming event may have
    /// been handled, and its sync run, just before the expectations caught up); a fixed
    /// requeue would cost a whole extra sync (a hook call) per wait.
    pub(crate) fn await_own_writes() -> Self {
        Plan {
            writes: None,
            requeue: Requeue::UnlessSyncedWithin(OWN_WRITES_FALLBACK),
        }
    }

    /// `writes` to run in phase two, then `requeue`.
    pub(crate) fn write(writes: W, requeue: Requeue) -> Self {
        Plan {
            writes: Some(writes),
            requeue,
        }
    }
}

/// How soon a sync that waited for its own writes comes back if no event brought it back.
const OWN_WRITES_FALLBACK: Duration = Duration::from_secs(1);

/// What one controller kind plugs into the skeleton.
pub(crate) trait Reconciler: Send + Sync + 'static {
    /// A work queue key (one synced object).
    type Key: Clone + Eq + Hash + Display + Send + Sync + 'static;
    /// Why one sync failed.
    type Error: SyncFailure + Send + 'static;
    /// What phase one of a sync leaves for phase two to write.
    type Writes: Send + 'static;

    /// What every kind holds.
    fn common(&self) -> &Common<Self::Key>;
    /// The controller object's name (for logs).
    fn name(&self) -> &str {
        &self.common().name
    }
    /// Every informer the reconciler reads; syncs start once all of them have synced.
    fn informers(&self) -> Vec<&Informer>;
    /// The object `key` names, as the reconciler currently sees it (cache + own writes).
    fn object(&self, key: &Self::Key) -> Option<Value>;
    /// Whether the controller cares about `object`: it is selected, or it still carries
    /// the controller's finalizer (so it must be finalized).
    fn cares(&self, object: &Value) -> bool;
    /// The resources of the objects it syncs (its parents, a decorator's targets).
    fn parent_resources(&self) -> Vec<Arc<metacontroller_dynamic::ApiResource>>;
    /// The key of every cached object the controller might sync (before [`Self::cares`]).
    fn cached_keys(&self) -> Vec<Self::Key>;
    /// Phase one of a sync of `key`, holding a worker: reads, the writes that must come
    /// before the hook (finalizer, adoption), the hook calls. Returns what the answer asks
    /// to write.
    fn plan(
        &self,
        key: &Self::Key,
    ) -> impl Future<Output = Result<Plan<Self::Writes>, Self::Error>> + Send;
    /// Phase two, without a worker (under the sync's in-flight slot only): the writes.
    fn write(&self, writes: Self::Writes) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Drops what is kept for parents no longer cached (see [`crate::departed`]).
    fn forget_departed(&self);
    /// Entries per structure kept per parent (see [`Common::state_entries`]).
    fn state_entries(&self) -> Vec<(&'static str, usize)>;
}

impl<R: Reconciler> crate::metrics::ParentStates for R {
    fn state_entries(&self) -> Vec<(&'static str, usize)> {
        Reconciler::state_entries(self)
    }
}

/// The hook's `resyncAfterSeconds`: sync again after that many seconds (0 = no).
pub(crate) fn requeue_after_seconds(seconds: f64) -> Requeue {
    if seconds > 0.0 {
        Requeue::After(Duration::from_secs_f64(seconds.min(1e9)))
    } else {
        Requeue::OnChange
    }
}
