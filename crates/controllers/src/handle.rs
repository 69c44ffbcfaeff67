//! The running reconciler of one controller object, whatever its kind.

use std::time::Duration;

use metacontroller_dynamic::WorkQueue;
use metacontroller_hooks::HookError;

/// A running reconciler: its work queue and the task driving the workers. Dropping it (or
/// [`ControllerHandle::stop`]) stops the workers and releases the informers.
pub struct ControllerHandle<K>
where
    K: Clone + Eq + std::hash::Hash + Send + 'static,
{
    queue: WorkQueue<K>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> ControllerHandle<K>
where
    K: Clone + Eq + std::hash::Hash + Send + 'static,
{
    pub(crate) fn new(queue: WorkQueue<K>, task: tokio::task::JoinHandle<()>) -> Self {
        ControllerHandle { queue, task }
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

/// `Some(delay)` when a hook answered 429 Too Many Requests: the key is retried after
/// `Retry-After` (one second without it), with no Event — for both controller kinds.
pub(crate) fn hook_retry_after(error: &HookError) -> Option<Duration> {
    match error {
        HookError::TooManyRequests { retry_after, .. } => {
            Some(retry_after.unwrap_or(Duration::from_secs(1)))
        }
        _ => None,
    }
}
