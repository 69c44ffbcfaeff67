//! Realistic write latency (off by default): the shape of kube-apiserver + etcd under load,
//! for benchmarks that must not run faster here than they would against a real cluster.
//!
//! A write to a real API server spends most of its time in work that many writes do at once
//! (decoding, admission, validation, the round trip to etcd), and a short time in a step etcd
//! does one at a time per slot (appending to the raft log and fsyncing it). So one client
//! sees a few milliseconds per write, while the whole server tops out at a fixed number of
//! writes per second however many clients push. [`WriteLatency`] models exactly that: every
//! write first waits [`WriteLatency::handling`] (unbounded overlap), then holds one of
//! [`WriteLatency::commit_slots`] for [`WriteLatency::commit`] and is applied to the store at
//! the end of it (so its watch event follows its commit, as on a real server).
//!
//! Reads, lists and watches are not delayed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Per-write service time and commit concurrency of [`crate::Config::write_latency`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteLatency {
    /// Time a write spends before its commit; any number of writes overlap here.
    pub handling: Duration,
    /// Time a write holds a commit slot.
    pub commit: Duration,
    /// Writes committing at once (at least 1). The server's write throughput tops out at
    /// `commit_slots / commit` per second.
    pub commit_slots: usize,
}

impl WriteLatency {
    /// Tuned on kube-apiserver 1.28 + etcd on a 2-core machine: one client sees about 4 ms
    /// per write (2.75 ms handling + 1.25 ms commit) and the server takes about 800 writes/s
    /// in total (one commit slot of 1.25 ms).
    pub fn realistic() -> Self {
        WriteLatency {
            handling: Duration::from_micros(2750),
            commit: Duration::from_micros(1250),
            commit_slots: 1,
        }
    }

    /// What one write takes when nothing else is writing.
    pub fn single_client(&self) -> Duration {
        self.handling + self.commit
    }

    /// The most writes per second the server accepts.
    pub fn max_writes_per_second(&self) -> f64 {
        self.commit_slots.max(1) as f64 / self.commit.as_secs_f64().max(1e-9)
    }
}

/// The commit slots of a running server, with a record of the most writes that ever held
/// one at once (so a test can check the bound).
pub(crate) struct CommitSlots {
    config: WriteLatency,
    slots: Arc<Semaphore>,
    committing: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

/// A held commit slot; the write is applied while it is held.
pub(crate) struct Commit {
    _permit: OwnedSemaphorePermit,
    committing: Arc<AtomicUsize>,
}

impl Drop for Commit {
    fn drop(&mut self) {
        self.committing.fetch_sub(1, Ordering::SeqCst);
    }
}

impl CommitSlots {
    pub(crate) fn new(config: WriteLatency) -> Self {
        let slots = Arc::new(Semaphore::new(config.commit_slots.max(1)));
        CommitSlots {
            config,
            slots,
            committing: Arc::new(AtomicUsize::new(0)),
            peak: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Waits the handling time, takes a commit slot and waits the commit time. Hold the
    /// returned guard while applying the write.
    pub(crate) async fn enter(&self) -> Option<Commit> {
        tokio::time::sleep(self.config.handling).await;
        // The semaphore is never closed, so this only fails if it were.
        let permit = self.slots.clone().acquire_owned().await.ok()?;
        let now = self.committing.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let commit = Commit {
            _permit: permit,
            committing: self.committing.clone(),
        };
        tokio::time::sleep(self.config.commit).await;
        Some(commit)
    }

    /// The most writes that held a commit slot at once.
    pub(crate) fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realistic_shape() {
        let l = WriteLatency::realistic();
        assert_eq!(l.single_client(), Duration::from_millis(4));
        assert!((l.max_writes_per_second() - 800.0).abs() < 1e-6);
    }
}
