//! `spec.hookRollout` at controller start. The API, its validation and the rollout state
//! machine exist (`metacontroller_api::rollout`); the driver that stores code versions and
//! picks each parent's code does not yet, so a controller asking for a rollout is told so
//! in the log instead of silently getting every change at once.

pub(crate) mod driver;
pub(crate) mod host;
pub(crate) mod store;

use metacontroller_api::rollout::HookRollout;

/// Logs a warning when `rollout` is set: this version does not roll code out in steps yet.
pub(crate) fn warn_not_acted_on(rollout: Option<&HookRollout>, controller: &str) {
    if rollout.is_some() {
        tracing::warn!(
            controller,
            "spec.hookRollout is checked and kept, but this version does not act on it yet: a hook code change still reaches every parent at once"
        );
    }
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
    let result = outcome
        .result
        .as_ref()
        .map(|_| ())
        .map_err(ToString::to_string);
    driver.record(&parent, digest, result);
    outcome
}
