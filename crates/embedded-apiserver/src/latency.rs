//! Realistic write latency (off by default): the shape of kube-apiserver + etcd under load,
//! for benchmarks that must not run faster here than they would against a real cluster.
//!
//! A write to a real API server spends most of its time in work that many writes do at once
//! (decoding, admission, validation, the round trip to etcd), and a short time in a step etcd
//! does one at a time per slot (appending to the raft log and fsyncing it). So one client
//! sees a few milliseconds per write, while the whole server tops out at a fixed number of
//! writes per second however many clients push. [`WriteLatency`] models exactly that: every
//! write first waits [`WriteLatency::handling`] (unbounded overlap), then takes its turn on
//! one of [`WriteLatency::commit_slots`] for [`WriteLatency::commit`] and is applied to the
//! store at the end of it (so its watch event follows its commit, as on a real server).
//!
//! Reads, lists and watches are not delayed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

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
    /// Tuned on kube-apiserver 1.28 + etcd on a 2-core machine: one client sees about 5 ms
    /// per write (2.75 ms handling + 2.15 ms commit) and the server takes about 465 writes/s
    /// in total (one commit slot of 2.15 ms), the pace of `hack/load-composite.sh --real`'s
    /// bound (ConfigMap creates and custom-resource status updates from 8 connections; see
    /// the Benchmarks page of the book).
    pub fn realistic() -> Self {
        WriteLatency {
            handling: Duration::from_micros(2750),
            commit: Duration::from_micros(2150),
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

/// The commit slots of a running server. Commit times are booked on a schedule (each slot is
/// free again at the end of its last booked commit) and each write sleeps once until its
/// commit ends, so the timer's millisecond granularity never adds up: the server takes
/// exactly `commit_slots / commit` writes per second under load.
pub(crate) struct CommitSlots {
    config: WriteLatency,
    /// When each slot is free again.
    free_at: Mutex<Vec<Instant>>,
    /// Writes booked and not yet applied.
    waiting: AtomicUsize,
}

impl CommitSlots {
    pub(crate) fn new(config: WriteLatency) -> Self {
        let now = Instant::now();
        CommitSlots {
            free_at: Mutex::new(vec![now; config.commit_slots.max(1)]),
            config,
            waiting: AtomicUsize::new(0),
        }
    }

    /// Waits until this write's commit is over: its handling time, then its turn on the
    /// earliest free slot, then the commit time. Apply the write right after.
    pub(crate) async fn enter(&self) {
        let ready = Instant::now() + self.config.handling;
        let done = {
            let mut slots = self.free_at.lock();
            let (slot, free) = slots
                .iter()
                .copied()
                .enumerate()
                .min_by_key(|(_, t)| *t)
                .unwrap_or((0, ready));
            let done = free.max(ready) + self.config.commit;
            if let Some(s) = slots.get_mut(slot) {
                *s = done;
            }
            done
        };
        self.waiting.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep_until(done).await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }

    /// Writes waiting for their commit to end.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realistic_shape() {
        let l = WriteLatency::realistic();
        assert_eq!(l.single_client(), Duration::from_micros(4900));
        assert!((l.max_writes_per_second() - 1.0 / 0.00215).abs() < 1e-6);
    }
}
