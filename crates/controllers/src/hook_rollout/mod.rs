//! `spec.hookRollout` at controller start. The API, its validation and the rollout state
//! machine exist (`metacontroller_api::rollout`); the driver that stores code versions and
//! picks each parent's code does not yet, so a controller asking for a rollout is told so
//! in the log instead of silently getting every change at once.

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
