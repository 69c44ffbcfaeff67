//! The running reconciler of one controller object, whatever its kind.

use std::time::Duration;

use metacontroller_dynamic::ResourceId;
use metacontroller_hooks::HookError;
use metacontroller_workqueue::WorkQueue;

/// Reads the resources a reconciler cannot list now (see [`ControllerHandle::unlistable`]).
pub(crate) type UnlistableProbe = Box<dyn Fn() -> Vec<(ResourceId, String)> + Send + Sync>;

/// A running reconciler: its work queue and the task driving the workers. Dropping it (or
/// [`ControllerHandle::stop`]) stops the workers and releases the informers.
pub struct ControllerHandle<K>
where
    K: Clone + Eq + std::hash::Hash + Send + 'static,
{
    queue: WorkQueue<K>,
    task: tokio::task::JoinHandle<()>,
    unlistable: UnlistableProbe,
}

impl<K> ControllerHandle<K>
where
    K: Clone + Eq + std::hash::Hash + Send + 'static,
{
    pub(crate) fn new(
        queue: WorkQueue<K>,
        task: tokio::task::JoinHandle<()>,
        unlistable: UnlistableProbe,
    ) -> Self {
        ControllerHandle {
            queue,
            task,
            unlistable,
        }
    }

    /// The resources this controller reads whose cache waits for a list that failed (no
    /// permission to list them, no longer served, ...), each with the list's last error.
    /// Until they can be listed, the controller syncs nothing (a sync from a cache missing
    /// objects would tell hooks they are gone).
    pub fn unlistable(&self) -> Vec<(ResourceId, String)> {
        (self.unlistable)()
    }

    /// Stops the workers and releases the informers.
    pub async fn stop(self) {
        self.queue.shut_down();
        self.task.abort();
        let _ = (&mut { self }.task).await;
    }
}

impl<K> Drop for ControllerHandle<K>
where
    K: Clone + Eq + std::hash::Hash + Send + 'static,
{
    fn drop(&mut self) {
        self.queue.shut_down();
        self.task.abort();
    }
}

/// The longest `Retry-After` a hook can ask for: a hook answering "come back in a day" (or
/// a garbage header) must not park a parent that long.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// `Some(delay)` when a hook answered 429 Too Many Requests: the key is retried after
/// `Retry-After` (one second without it, at most [`MAX_RETRY_AFTER`]), with no Event — for
/// both controller kinds.
pub(crate) fn hook_retry_after(error: &HookError) -> Option<Duration> {
    match error {
        HookError::TooManyRequests { retry_after, .. } => Some(
            retry_after
                .unwrap_or(Duration::from_secs(1))
                .min(MAX_RETRY_AFTER),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn too_many(retry_after: Option<Duration>) -> HookError {
        HookError::TooManyRequests {
            url: "http://hook/sync".into(),
            retry_after,
        }
    }

    #[test]
    fn retry_after_is_capped_at_ten_minutes() {
        let day = Duration::from_secs(24 * 3600);
        assert_eq!(
            hook_retry_after(&too_many(Some(day))),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(
            hook_retry_after(&too_many(Some(Duration::MAX))),
            Some(Duration::from_secs(600))
        );
    }

    #[test]
    fn retry_after_below_the_cap_is_kept_and_defaults_to_one_second() {
        let asked = Duration::from_secs(42);
        assert_eq!(hook_retry_after(&too_many(Some(asked))), Some(asked));
        assert_eq!(
            hook_retry_after(&too_many(None)),
            Some(Duration::from_secs(1))
        );
    }
}
