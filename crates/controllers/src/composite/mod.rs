//! The CompositeController reconciler for one controller object, following upstream
//! Metacontroller's `parentController`:
//!
//! - **Events → keys.** Parent events queue the parent (skipped when the parent neither
//!   matches `parentResource.labelSelector` nor carries our finalizer, and — with
//!   `ignoreStatusChanges` — when only the status changed). Child events queue the parent
//!   named by the child's controller ownerReference; an orphan's events queue every parent
//!   whose selector matches it (so it can be adopted). Watch events are served before bulk
//!   (relist / resync) keys.
//! - **Sync.** Read the parent (cache + own-writes overlay); add or remove the
//!   `metacontroller.io/compositecontroller-<name>` finalizer depending on whether a finalize
//!   hook exists; wait while our creates/deletes are unconfirmed; claim children (owned and
//!   matching → child; matching orphan → adopt after re-reading it from the API server; owned
//!   but no longer matching → release); call the sync hook, or the finalize hook
//!   (`finalizing: true`) while the parent is being deleted; write children per update
//!   strategy; remove the finalizer once the finalize hook says `finalized`; write the status
//!   (with `observedGeneration`) only when it changed; schedule `resyncAfterSeconds` and
//!   `resyncPeriodSeconds`.
//! - **Failures** are values: a failed sync is requeued with backoff; a 409 Conflict on a
//!   child stops the child writes, the status is still written, and the next sync
//!   recomputes from fresher state.
//!
//! Modules: `plan` holds the pure steps of a sync that `metacontroller render` shares (hook
//! choice, request, checking the answer, desired children and status); the running
//! controller is `reconciler` (start, the sync itself), with `mapper` (events → keys),
//! `adoption` (claiming children), `revisions` (rolling updates) and `resolve` (the spec's
//! resources through discovery).
//!
//! Rolling update methods (`RollingRecreate`, `RollingInPlace`) keep ControllerRevisions and
//! move one child per sync, gated by `statusChecks` (see `crate::rolling`). The customize
//! hook and `related` objects come from `crate::related`; a failed sync records a
//! `SyncError` Warning Event on the parent through [`crate::events`] (except 409 conflicts,
//! which are expected stale-cache retries).

mod adoption;
mod cleanup;
pub(crate) mod errors;
mod mapper;
pub(crate) mod plan;
mod reach;
mod read_versions;
mod reconciler;
pub(crate) mod resolve;
mod revisions;

pub use errors::StartError;
pub(crate) use errors::SyncError;
pub use reconciler::{start, CompositeHandle};
pub(crate) use resolve::Resolved;

use crate::events::EventRecorder;
use crate::writer::ApplyStrategy;

/// Default of [`Options::parents_in_flight`] (`--parents-in-flight`).
pub const DEFAULT_PARENTS_IN_FLIGHT: usize = 64;

/// How a controller runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Syncs of this controller that call hooks at once (`--workers`); at least one.
    pub workers: usize,
    /// Syncs of this controller in progress at once, including those past their hook
    /// calls that only wait on API writes (`--parents-in-flight`); never fewer than
    /// `workers`.
    pub parents_in_flight: usize,
    /// How children are written (`--apply-strategy`).
    pub apply_strategy: ApplyStrategy,
    /// Where Events about parents go (default: dropped).
    pub events: EventRecorder,
    /// Schemas to merge children with (`--apply-schema=auto`); `None`: conventions only.
    pub schemas: Option<metacontroller_dynamic::Schemas>,
    /// Passed by every sync (leader election, shutdown); default: always open.
    pub gate: metacontroller_workqueue::SyncGate,
    /// Where queue, reconcile and child write metrics go (default: not exported).
    pub metrics: crate::metrics::ControllerMetrics,
    /// Child writes of one sync in flight at once (`--max-concurrent-child-writes`; 1: one
    /// after another, as upstream).
    pub child_write_concurrency: usize,
}

impl Options {
    /// The work queue's limits: `workers` syncs calling hooks, `parents_in_flight` in all.
    pub(crate) fn concurrency(&self) -> metacontroller_workqueue::Concurrency {
        metacontroller_workqueue::Concurrency::new(self.workers, self.parents_in_flight)
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            workers: 5,
            parents_in_flight: DEFAULT_PARENTS_IN_FLIGHT,
            apply_strategy: ApplyStrategy::DynamicApply,
            events: EventRecorder::disabled(),
            schemas: None,
            gate: Default::default(),
            metrics: Default::default(),
            child_write_concurrency: crate::writer::DEFAULT_CHILD_WRITE_CONCURRENCY,
        }
    }
}
