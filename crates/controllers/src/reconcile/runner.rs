//! Running a controller's syncs: the workers start once the informers have synced, and
//! each sync runs with the rules every kind shares around it ([`sync_and_record`]); its end
//! is an [`Outcome`] the queue applies.

use std::sync::Arc;
use std::time::Duration;

use metacontroller_dynamic::Supervisor;
use metacontroller_workqueue::{Outcome, Requeue, Worker};
use tracing::Instrument as _;

use super::code::resync_on_code_changes;
use super::policy::{error_policy, resync_period};
use super::Reconciler;
use crate::events;
use crate::handle::ControllerHandle;
use crate::spans;

/// How soon a key found with a cache not synced is tried again (see [`sync_and_record`]).
const UNSYNCED_RETRY: Duration = Duration::from_secs(1);

/// Starts the workers of `reconciler` once its informers have synced. Must run inside tokio.
/// Parents that leave the caches silently (pruned shards) are swept from every per-parent
/// structure after each prune ([`Reconciler::forget_departed`]).
pub(crate) fn run<R: Reconciler>(
    reconciler: Arc<R>,
    concurrency: metacontroller_workqueue::Concurrency,
) -> ControllerHandle<R::Key> {
    let common = reconciler.common();
    let queue = common.queue.clone();
    let run_queue = queue.clone();
    let states: std::sync::Weak<R> = Arc::downgrade(&reconciler);
    let unlistable = unlistable_probe(&reconciler);
    common
        .metrics
        .track_states(common.controller_type, &common.name, states);
    let mut pruned = common.informers.pruned();
    let task_name = format!(
        "controller/{}/{}",
        common.controller_type,
        reconciler.name()
    );
    let supervisor = common.informers.supervisor().cloned();
    let stopped = queue.clone();
    // Supervised: a panic outside a sync (a sync's own is caught and retried) would stop
    // this controller's work for good while the process looks healthy; it stops the process.
    let task = Supervisor::spawn_with(supervisor.as_ref(), task_name, async move {
        for informer in reconciler.informers() {
            informer.wait_synced().await;
        }
        let sweeper = {
            let reconciler = reconciler.clone();
            async move {
                while pruned.changed().await.is_ok() {
                    reconciler.forget_departed();
                }
                std::future::pending::<()>().await
            }
        };
        let code_changes = resync_on_code_changes(reconciler.clone());
        let workers = run_queue.run(concurrency, move |key: R::Key, worker: Worker| {
            let reconciler = reconciler.clone();
            async move { sync_and_record(&*reconciler, &key, worker).await }
        });
        tokio::select! {
            _ = workers => {}
            _ = sweeper => {}
            _ = code_changes => {}
        }
        if stopped.is_shutting_down() {
            // Stopped by its handle, which aborts this task next: not a failure.
            std::future::pending::<()>().await;
        }
    });
    ControllerHandle::new(queue, task, unlistable)
}

/// The informers of `reconciler` whose cache waits for a list that failed, one entry per
/// resource. Holds the reconciler weakly: the handle must not keep it alive.
fn unlistable_probe<R: Reconciler>(reconciler: &Arc<R>) -> crate::handle::UnlistableProbe {
    let reconciler = Arc::downgrade(reconciler);
    Box::new(move || {
        let Some(reconciler) = reconciler.upgrade() else {
            return Vec::new();
        };
        let mut found: Vec<(metacontroller_dynamic::ResourceId, String)> = Vec::new();
        for informer in reconciler.informers() {
            let id = informer.resource().id();
            if let Some(error) = informer.list_error() {
                if !found.iter().any(|(seen, _)| *seen == id) {
                    found.push((id, error));
                }
            }
        }
        found
    })
}

/// One sync of `key` with the rules every kind shares around it (see the module doc), each
/// a step here: caches synced, the span, the two phases, the resync period, failures.
pub(crate) async fn sync_and_record<R: Reconciler>(
    reconciler: &R,
    key: &R::Key,
    worker: Worker,
) -> Outcome<R::Error> {
    if let Some(informer) = reconciler.informers().into_iter().find(|i| !i.has_synced()) {
        // A relist failed (or a wider one runs): the cache may lack objects of this key,
        // and a hook would be told they are gone. Retried until the informer lists again.
        tracing::debug!(controller = reconciler.name(), object = %key, resource = ?informer.resource().id(), "cache not synced; syncing later");
        return Outcome::done(Requeue::After(UNSYNCED_RETRY));
    }
    let common = reconciler.common();
    let span = spans::sync_span(common.controller_type, reconciler.name(), key);
    if !span.is_disabled() {
        let retry = common.queue.num_requeues(key) > 0;
        span.record("trigger", if retry { "retry" } else { "change" });
    }
    let outcome = two_phases(reconciler, key, worker)
        .instrument(span.clone())
        .await;
    spans::record_sync(&span, &outcome.result);
    common
        .failing
        .observe(key, &outcome, || reconciler.object(key), &common.events);
    let outcome = on_failure(reconciler, key, outcome);
    outcome.with_resync(resync_after(reconciler, key))
}

/// Phase one with the worker, phase two without it (see [`Reconciler::plan`]).
async fn two_phases<R: Reconciler>(
    reconciler: &R,
    key: &R::Key,
    worker: Worker,
) -> Outcome<R::Error> {
    let plan = match reconciler.plan(key).await {
        Ok(plan) => plan,
        Err(error) => return Outcome::from(Err(error)),
    };
    // Only API writes remain: they need no worker (see `Concurrency`).
    worker.release();
    let Some(writes) = plan.writes else {
        return Outcome::done(plan.requeue);
    };
    Outcome::new(reconciler.write(writes).await, plan.requeue)
}

/// A failed sync as the failure policy ([`error_policy`]) decides; records the
/// `SyncError` Event it asks for (the only effect here: the queue applies the rest).
fn on_failure<R: Reconciler>(
    reconciler: &R,
    key: &R::Key,
    outcome: Outcome<R::Error>,
) -> Outcome<R::Error> {
    let Err(error) = &outcome.result else {
        return outcome;
    };
    let policy = error_policy(error);
    if let Some(Requeue::After(delay)) = policy.requeue {
        tracing::info!(controller = reconciler.name(), object = %key, ?delay, "hook asked to slow down; syncing again after its Retry-After");
    }
    if policy.sync_error_event {
        if let Some(object) = reconciler.object(key) {
            let common = reconciler.common();
            common.events.warning(
                &object,
                events::reason::SYNC_ERROR,
                format!("Sync error: {error}"),
            );
            common.failing.failed(key);
        }
    }
    policy.apply(outcome)
}

/// `resyncPeriodSeconds`: like upstream's informer resync, every object the controller
/// cares about comes back after the period, whether its last sync succeeded or not (a
/// failure is also retried, whichever comes first).
fn resync_after<R: Reconciler>(reconciler: &R, key: &R::Key) -> Option<Duration> {
    let period = resync_period(reconciler.common().resync_period_seconds)?;
    reconciler
        .object(key)
        .is_some_and(|object| reconciler.cares(&object))
        .then_some(period)
}
