//! `spec.hookRollout`: progressive rollouts of a controller's in-process hook code. The
//! versions are stored as ControllerRevisions ([`store`]), each sync runs the code of its
//! parent's assignment ([`sync_on_assigned_code`]), and [`driver`] advances the rollout in
//! the controller object's `status.hookRollout`. Webhook hooks are not rolled out: a
//! controller with `spec.hookRollout` and no in-process hook code is told so in the log.

pub(crate) mod driver;
pub(crate) mod host;
pub(crate) mod shared;
pub(crate) mod store;
pub(crate) mod stored;

/// Logs a warning when `rollout` is set on a controller without in-process hook code:
/// webhook code is not rolled out in steps.
pub(crate) fn warn_without_code(controller: &str) {
    tracing::warn!(
        controller,
        "spec.hookRollout applies to in-process (jsonnet:, wasm:) hook code only; this controller has none, so a change of its webhooks still reaches every parent at once"
    );
}

/// Runs `sync` (one sync of `key`) on the code of the parent's rollout assignment and
/// reports its result to the driver; without `spec.hookRollout` it just runs `sync`. When
/// the code cannot be chosen yet (state not read, version not loaded) the sync does not
/// run and is retried shortly: running the live code could hand a parent new code early.
pub(crate) async fn sync_on_assigned_code<R, F>(
    reconciler: &R,
    key: &R::Key,
    sync: F,
) -> metacontroller_workqueue::Outcome<R::Error>
where
    R: crate::reconcile::Reconciler,
    F: std::future::Future<Output = metacontroller_workqueue::Outcome<R::Error>>,
{
    let (Some(driver), Some(parent)) = (&reconciler.common().rollout, reconciler.object(key))
    else {
        return sync.await;
    };
    let (digest, pins) = match driver.code_for(&parent).await {
        Ok(code) => code,
        Err(e) => {
            tracing::warn!(controller = reconciler.name(), object = %key, error = %e, "hook rollout: cannot choose this parent's code; syncing later");
            return metacontroller_workqueue::Outcome::done(
                metacontroller_workqueue::Requeue::After(std::time::Duration::from_secs(1)),
            );
        }
    };
    let outcome = metacontroller_hooks::with_pinned_code(pins, sync).await;
    if outcome.result.as_ref().is_err_and(is_transient) {
        // Says nothing about the code: the sync is retried soon, and that one counts.
        return outcome;
    }
    let result = outcome
        .result
        .as_ref()
        .map(|_| ())
        .map_err(ToString::to_string);
    driver.record(&parent, digest, result);
    outcome
}

/// A failed sync that is retried without it being the code's fault: a 409 Conflict (a
/// stale cache, e.g. the parent changed while its status was written), an unreachable API
/// server, or a hook's 429.
fn is_transient<E: crate::reconcile::SyncFailure>(error: &E) -> bool {
    error.is_conflict() || error.is_unreachable() || error.retry_after().is_some()
}

#[cfg(test)]
mod tests {
    use super::is_transient;
    use crate::reconcile::policy::tests::Failure;
    use std::time::Duration;

    #[test]
    fn only_failures_that_say_something_about_the_code_count() {
        assert!(
            !is_transient(&Failure::default()),
            "a hook or apply error counts"
        );
        let conflict = Failure {
            conflict: true,
            ..Failure::default()
        };
        let unreachable = Failure {
            unreachable: true,
            ..Failure::default()
        };
        let throttled = Failure {
            retry_after: Some(Duration::from_secs(2)),
            ..Failure::default()
        };
        for failure in [conflict, unreachable, throttled] {
            assert!(is_transient(&failure));
        }
    }
}
