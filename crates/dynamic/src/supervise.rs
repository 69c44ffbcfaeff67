//! Supervision of a process's background tasks (informer drivers, the leader elector, the
//! shard coordinator, the metrics and probe servers, each controller's workers, the Event
//! writer, shard acquisitions and releases).
//!
//! Such a task is meant to run until the process stops it. If one ends on its own or panics,
//! the process is no longer what it claims to be: a dead informer leaves a stale cache, a
//! dead elector leaves the gate as it last was. [`Supervisor::spawn`] runs a task so that any
//! end it was not asked for is reported once to [`Supervisor::failed`], where the process
//! closes its gate and exits non-zero, so that Kubernetes restarts it.
//!
//! Ends after [`Supervisor::stopping`] (shutdown) are expected and not reported, nor are
//! aborts (an informer stopped with its last user is dropped, never completes). Tasks meant
//! to end ([`Supervisor::spawn_once`]) report only a panic.
//!
//! Test-only fault hook: `METACONTROLLER_TEST_FAULT_TASK=panic:<task>` makes the task named
//! `<task>` (or every task under `<task>/`) panic when it starts, `end:<task>` makes it return
//! at once. The variable is read once per spawn; unset (as in production) it changes nothing.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::watch;

/// The test-only variable naming a task to fail (see the module documentation).
pub(crate) const FAULT_TASK_ENV: &str = "METACONTROLLER_TEST_FAULT_TASK";

/// A supervised task that ended without being asked to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEnd {
    /// The task's name, as given to [`Supervisor::spawn`].
    pub task: String,
    /// `panicked: <message>` or `ended`.
    pub reason: String,
}

impl std::fmt::Display for TaskEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "background task {} {}", self.task, self.reason)
    }
}

/// Registers background tasks and reports the first unexpected end. Cheap to clone.
#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

struct Inner {
    failed: watch::Sender<Option<TaskEnd>>,
    stopping: AtomicBool,
}

impl Default for Supervisor {
    fn default() -> Self {
        Supervisor {
            inner: Arc::new(Inner {
                failed: watch::channel(None).0,
                stopping: AtomicBool::new(false),
            }),
        }
    }
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("stopping", &self.inner.stopping.load(Ordering::Relaxed))
            .field("failed", &*self.inner.failed.borrow())
            .finish()
    }
}

impl Supervisor {
    /// Spawns `task` under `name`; its end or panic is reported unless the process is
    /// stopping. The handle may be awaited or aborted as usual (a panic is caught here, so
    /// awaiting it yields `Ok(())`).
    pub fn spawn<F>(&self, name: impl Into<String>, task: F) -> tokio::task::JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let name = name.into();
        let fault = injected_fault(&name);
        let supervisor = self.clone();
        tokio::spawn(async move {
            let run = async move {
                match fault {
                    Some(Fault::Panic) => panic!("{FAULT_TASK_ENV}: injected panic"),
                    Some(Fault::End) => {}
                    None => task.await,
                }
            };
            let reason = match std::panic::AssertUnwindSafe(run).catch_unwind().await {
                Ok(()) => "ended".to_owned(),
                Err(panic) => format!("panicked: {}", panic_message(&*panic)),
            };
            supervisor.ended(TaskEnd { task: name, reason });
        })
    }

    /// Spawns a task that is meant to end (an acquisition, a release, a writer that ends
    /// with its channel) under `name`: only a panic is reported, unless the process is
    /// stopping. The test-only fault hook applies as to [`Supervisor::spawn`].
    pub(crate) fn spawn_once<F>(
        &self,
        name: impl Into<String>,
        task: F,
    ) -> tokio::task::JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let name = name.into();
        let fault = injected_fault(&name);
        let supervisor = self.clone();
        tokio::spawn(async move {
            let run = async move {
                match fault {
                    Some(Fault::Panic) => panic!("{FAULT_TASK_ENV}: injected panic"),
                    Some(Fault::End) => {}
                    None => task.await,
                }
            };
            if let Err(panic) = std::panic::AssertUnwindSafe(run).catch_unwind().await {
                let reason = format!("panicked: {}", panic_message(&*panic));
                supervisor.ended(TaskEnd { task: name, reason });
            }
        })
    }

    /// [`Supervisor::spawn`] with `supervisor`, or a plain task without one (tests, tools).
    pub fn spawn_with<F>(
        supervisor: Option<&Supervisor>,
        name: impl Into<String>,
        task: F,
    ) -> tokio::task::JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match supervisor {
            Some(s) => s.spawn(name, task),
            None => tokio::spawn(task),
        }
    }

    /// `Supervisor::spawn_once` with `supervisor`, or a plain task without one.
    pub fn spawn_once_with<F>(
        supervisor: Option<&Supervisor>,
        name: impl Into<String>,
        task: F,
    ) -> tokio::task::JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match supervisor {
            Some(s) => s.spawn_once(name, task),
            None => tokio::spawn(task),
        }
    }

    /// From now on, tasks ending are expected (shutdown).
    pub fn stopping(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
    }

    /// Whether [`Supervisor::stopping`] was called: a task whose connection fails from then
    /// on is seeing the shutdown, not a fault to report or retry.
    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.load(Ordering::SeqCst)
    }

    /// Waits for the first task that ended unexpectedly.
    pub async fn failed(&self) -> TaskEnd {
        let mut rx = self.inner.failed.subscribe();
        loop {
            if let Some(end) = rx.borrow_and_update().clone() {
                return end;
            }
            if rx.changed().await.is_err() {
                // The sender lives in `self`: cannot close while we are borrowed.
                std::future::pending::<()>().await;
            }
        }
    }

    fn ended(&self, end: TaskEnd) {
        if self.inner.stopping.load(Ordering::SeqCst) {
            tracing::debug!(task = %end.task, reason = %end.reason, "background task stopped");
            return;
        }
        tracing::error!(task = %end.task, reason = %end.reason, "background task ended unexpectedly; the process stops");
        self.inner.failed.send_if_modified(|first| {
            if first.is_none() {
                *first = Some(end);
                true
            } else {
                false
            }
        });
    }
}

enum Fault {
    Panic,
    End,
}

/// The fault the test-only variable asks for `name`, if any.
fn injected_fault(name: &str) -> Option<Fault> {
    let value = std::env::var(FAULT_TASK_ENV).ok()?;
    let (fault, target) = match value.split_once(':') {
        Some(("panic", target)) => (Fault::Panic, target),
        Some(("end", target)) => (Fault::End, target),
        _ => return None,
    };
    targets(name, target).then_some(fault)
}

/// Whether `target` names the task `name`: itself, or a group of tasks (`informer`).
fn targets(name: &str, target: &str) -> bool {
    name == target
        || name
            .strip_prefix(target)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_panic_is_reported_with_its_task_and_message() {
        let supervisor = Supervisor::default();
        drop(supervisor.spawn("informer/v1/pods", async { panic!("boom") }));
        let end = tokio::time::timeout(Duration::from_secs(5), supervisor.failed())
            .await
            .unwrap();
        assert_eq!(end.task, "informer/v1/pods");
        assert_eq!(end.reason, "panicked: boom");
    }

    #[tokio::test]
    async fn an_end_is_reported_unless_stopping() {
        let supervisor = Supervisor::default();
        supervisor.spawn("a", async {}).await.unwrap();
        assert_eq!(supervisor.failed().await.reason, "ended");

        let quiet = Supervisor::default();
        quiet.stopping();
        quiet.spawn("b", async {}).await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(50), quiet.failed())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_task_meant_to_end_is_reported_only_when_it_panics() {
        let supervisor = Supervisor::default();
        supervisor.spawn_once("admit", async {}).await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(50), supervisor.failed())
                .await
                .is_err()
        );
        drop(supervisor.spawn_once("admit", async { panic!("boom") }));
        let end = tokio::time::timeout(Duration::from_secs(5), supervisor.failed())
            .await
            .unwrap();
        assert_eq!(
            (end.task.as_str(), end.reason.as_str()),
            ("admit", "panicked: boom")
        );
    }

    #[tokio::test]
    async fn an_aborted_task_is_not_reported() {
        let supervisor = Supervisor::default();
        let handle = supervisor.spawn("c", std::future::pending());
        handle.abort();
        assert!(handle.await.unwrap_err().is_cancelled());
        assert!(
            tokio::time::timeout(Duration::from_millis(50), supervisor.failed())
                .await
                .is_err()
        );
    }

    #[test]
    fn fault_names_match_whole_path_segments() {
        // Only the matching is tested here: the variable is process-global.
        let m = targets;
        assert!(m("informer/v1/pods", "informer"));
        assert!(m("metrics-server", "metrics-server"));
        assert!(!m("informers", "informer"));
    }
}
