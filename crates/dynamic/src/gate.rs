//! The sync gate: the one switch in front of every worker of the process.
//!
//! Leader election and shutdown decide *whether* a process may write; the controllers do not
//! know about either. Workers pass [`SyncGate::enter`] before each sync and hold the returned
//! [`SyncPermit`] until it ends. Closing the gate ([`SyncGate::close_and_drain`]) stops new
//! syncs at once and waits for the running ones, so a caller that gets `true` back knows no
//! sync of this process is writing any more (a replica losing its lease must know that before
//! the lease can expire). Caches and queues keep running while the gate is closed, so a
//! standby that becomes leader starts from warm caches with every key already queued.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{watch, Notify};

#[derive(Debug)]
struct State {
    open: bool,
    in_flight: usize,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    /// Broadcasts `open` changes to waiting workers.
    open_tx: watch::Sender<bool>,
    /// Wakes `close_and_drain` when the last permit is dropped.
    idle: Notify,
}

/// A cloneable handle on the process's sync gate.
#[derive(Debug, Clone)]
pub struct SyncGate {
    inner: Arc<Inner>,
}

impl Default for SyncGate {
    /// An open gate (a process without leader election).
    fn default() -> Self {
        SyncGate::new(true)
    }
}

impl SyncGate {
    /// A gate, open or closed.
    pub fn new(open: bool) -> SyncGate {
        let (open_tx, _) = watch::channel(open);
        SyncGate {
            inner: Arc::new(Inner {
                state: Mutex::new(State { open, in_flight: 0 }),
                open_tx,
                idle: Notify::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether syncs may start now.
    pub fn is_open(&self) -> bool {
        self.lock().open
    }

    /// Syncs running now.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// Lets syncs start.
    pub fn open(&self) {
        self.lock().open = true;
        self.inner.open_tx.send_replace(true);
    }

    /// Waits until the gate is open and counts one running sync until the permit drops.
    pub async fn enter(&self) -> SyncPermit {
        let mut rx = self.inner.open_tx.subscribe();
        loop {
            {
                // Checked under the same lock `close` takes, so no sync starts after a
                // close returned.
                let mut state = self.lock();
                if state.open {
                    state.in_flight += 1;
                    return SyncPermit { gate: self.clone() };
                }
            }
            // The sender lives in `inner`, which we hold: `changed` cannot fail.
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Stops new syncs at once and waits up to `timeout` for the running ones to end.
    /// Returns `true` when none runs any more.
    pub async fn close_and_drain(&self, timeout: Duration) -> bool {
        self.lock().open = false;
        self.inner.open_tx.send_replace(false);
        tokio::time::timeout(timeout, self.drained()).await.is_ok()
    }

    async fn drained(&self) {
        loop {
            let notified = self.inner.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().in_flight == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// One running sync; dropping it ends it (for [`SyncGate::close_and_drain`]).
#[derive(Debug)]
pub struct SyncPermit {
    gate: SyncGate,
}

impl Drop for SyncPermit {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            self.gate.inner.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn closed_gate_holds_workers_until_opened() {
        let gate = SyncGate::new(false);
        let waiter = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter().await })
        };
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiter.is_finished());
        gate.open();
        let permit = waiter.await.unwrap();
        assert_eq!(gate.in_flight(), 1);
        drop(permit);
        assert_eq!(gate.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn close_waits_for_running_syncs_and_refuses_new_ones() {
        let gate = SyncGate::default();
        let permit = gate.enter().await;
        let closer = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.close_and_drain(Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!closer.is_finished(), "close returned while a sync ran");
        let late = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter().await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!late.is_finished(), "a sync started after close");
        drop(permit);
        assert!(closer.await.unwrap());
        assert!(!late.is_finished());
        late.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn close_gives_up_after_the_timeout() {
        let gate = SyncGate::default();
        let _permit = gate.enter().await;
        assert!(!gate.close_and_drain(Duration::from_secs(3)).await);
    }
}
