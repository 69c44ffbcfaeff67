//! Running syncs off a [`WorkQueue`]: how many at once ([`Concurrency`]), the two phases of
//! a sync ([`Worker`]: held while it calls hooks, given up for its writes) and what the end of
//! a sync asks of the queue ([`Outcome`], [`Requeue`]; kube-runtime's reconciler `Action`).
//!
//! The rules every sync runs under that belong to the queue are here, once: the process's
//! gate and the write fence of a sharded gate, panics contained, the reconcile metrics, and
//! the key forgotten, requeued as asked or retried with backoff.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{Priority, WorkQueue};
use crate::queue_metrics::{BoundQueueMetrics, ReconcileResult};

/// How many syncs [`WorkQueue::run`] runs at once.
///
/// A *worker* ([`Worker`]) is held from the moment a key leaves the queue until the sync gives
/// it up (a controller does so once its hooks have answered and only API writes remain) or
/// ends. *In flight* bounds the syncs in progress, with or without a worker. So syncs waiting
/// on the API server do not keep the queue from handing out the next key, while the work that
/// calls hooks stays at `workers` at once. From a number `n`: `n` of each (a worker for the
/// whole sync).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    workers: usize,
    in_flight: usize,
}

impl Concurrency {
    /// `workers` workers (at least one) and `in_flight` syncs (at least `workers`).
    pub fn new(workers: usize, in_flight: usize) -> Self {
        Concurrency { workers, in_flight }
    }

    /// Syncs that hold a worker at once (at least one).
    pub(crate) fn workers(&self) -> usize {
        self.workers.max(1)
    }

    /// Syncs in progress at once (never fewer than the workers).
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.max(self.workers())
    }
}

impl From<usize> for Concurrency {
    fn from(n: usize) -> Self {
        Concurrency::new(n, n)
    }
}

/// The worker a sync holds from the moment its key left the queue (see [`Concurrency`]).
/// Giving it up ([`Worker::release`], or dropping it) lets the queue hand the next key to a
/// sync while this one goes on under its in-flight slot alone.
#[derive(Debug)]
pub struct Worker {
    _permit: OwnedSemaphorePermit,
}

impl Worker {
    /// Gives the worker up: what remains of the sync needs none (only API writes).
    pub fn release(self) {}
}

/// What the end of a sync asks of the queue for its key, besides the backoff of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Requeue {
    /// Nothing: the key comes back with the next change that names it.
    #[default]
    OnChange,
    /// Again after the delay, as an event (of several pending deadlines the earliest wins).
    After(Duration),
    /// Again after the delay, unless a sync of the key starts before: a fallback for a change
    /// the sync expects to be told of soon (e.g. the watch event confirming its own write).
    UnlessSyncedWithin(Duration),
}

/// How a failed sync is retried (ignored when the sync succeeded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Retry {
    /// With backoff that grows with each failure of the key.
    #[default]
    Backoff,
    /// With that backoff, but waiting at most this long: for a failure that says nothing
    /// about the key (the API server unreachable), whose retry must not wait out a backoff
    /// that grew meanwhile.
    BackoffAtMost(Duration),
    /// Without backoff: the peer asked to slow down, and the [`Outcome::requeue`] says when
    /// to come back (a hook's 429 with `Retry-After`). Counted as a failed sync in the
    /// metrics; the key's failure count is cleared, as after a success.
    Throttled,
}

/// How a sync ended: its result, and what it asks of the queue (a failed sync asks too: a
/// hook's `resyncAfterSeconds` stands when a later write failed). A value: the queue alone
/// applies it; a sync never queues its own key.
#[derive(Debug)]
pub struct Outcome<E> {
    /// `Err` retries the key as [`Outcome::retry`] says; `Ok` forgets its failures.
    pub result: Result<(), E>,
    /// When the key comes back, whatever the result.
    pub requeue: Requeue,
    /// How a failure is retried.
    pub retry: Retry,
    /// A periodic resync: the key comes back after this delay as a bulk (low-priority) add,
    /// whatever the result (a controller's `resyncPeriodSeconds`).
    pub resync: Option<Duration>,
}

impl<E> Outcome<E> {
    /// A sync that succeeded and asks for `requeue`.
    pub fn done(requeue: Requeue) -> Self {
        Outcome::new(Ok(()), requeue)
    }

    /// A sync that ended with `result` and asks for `requeue`; a failure retried with
    /// backoff, no periodic resync.
    pub fn new(result: Result<(), E>, requeue: Requeue) -> Self {
        Outcome {
            result,
            requeue,
            retry: Retry::Backoff,
            resync: None,
        }
    }

    /// The same outcome, its failure retried as `retry` says.
    pub fn with_retry(self, retry: Retry) -> Self {
        Outcome { retry, ..self }
    }

    /// The same outcome, with a periodic resync after `resync` (if any).
    pub fn with_resync(self, resync: Option<Duration>) -> Self {
        Outcome { resync, ..self }
    }
}

impl<E> From<Result<Requeue, E>> for Outcome<E> {
    fn from(result: Result<Requeue, E>) -> Self {
        match result {
            Ok(requeue) => Outcome::done(requeue),
            Err(error) => Outcome::new(Err(error), Requeue::OnChange),
        }
    }
}

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + 'static,
{
    /// Runs syncs until the queue is shut down and drained, within `limits`: a key is taken
    /// from the queue only when a worker is free (so the lanes' order holds), and handed to
    /// `handler` with that [`Worker`]; a sync that gives its worker up goes on without it.
    /// The [`Outcome`]'s requeue is applied; a key whose result is `Ok` is forgotten, `Err`
    /// or a panic retries it with backoff.
    pub async fn run<F, Fut, E>(&self, limits: impl Into<Concurrency>, handler: F)
    where
        K: fmt::Display,
        F: Fn(K, Worker) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome<E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        let limits = limits.into();
        let handler = Arc::new(handler);
        if let Some(m) = &self.shared.metrics {
            m.max_concurrent
                .set(i64::try_from(limits.in_flight()).unwrap_or(i64::MAX));
        }
        let dispatch = self.dispatch(limits, handler);
        match &self.shared.metrics {
            Some(m) => {
                // client-go refreshes the in-progress gauges twice a second.
                let mut tick = tokio::time::interval(Duration::from_millis(500));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let refresh = async {
                    loop {
                        tick.tick().await;
                        self.update_in_progress(m);
                    }
                };
                tokio::select! {
                    _ = dispatch => {}
                    _ = refresh => {}
                }
                self.update_in_progress(m);
            }
            None => dispatch.await,
        }
    }

    /// Hands keys to sync tasks while a worker and an in-flight slot are free; returns once
    /// the queue is shut down and every task has ended.
    async fn dispatch<F, Fut, E>(&self, limits: Concurrency, handler: Arc<F>)
    where
        K: fmt::Display,
        F: Fn(K, Worker) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome<E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        let workers = Arc::new(Semaphore::new(limits.workers()));
        let in_flight = Arc::new(Semaphore::new(limits.in_flight()));
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            let (Ok(slot), Ok(worker)) = (
                in_flight.clone().acquire_owned().await,
                workers.clone().acquire_owned().await,
            ) else {
                break;
            };
            while tasks.try_join_next().is_some() {}
            let Some(key) = self.get().await else {
                break;
            };
            let queue = self.clone();
            let handler = handler.clone();
            tasks.spawn(async move {
                queue
                    .process(key, Worker { _permit: worker }, &*handler)
                    .await;
                drop(slot);
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// One sync of `key` through the gate, with its outcome recorded and the key requeued
    /// or forgotten.
    async fn process<F, Fut, E>(&self, key: K, worker: Worker, handler: &F)
    where
        K: fmt::Display,
        F: Fn(K, Worker) -> Fut,
        Fut: Future<Output = Outcome<E>>,
        E: fmt::Display,
    {
        // Held (with the key processing) while the gate is closed: the standby keeps its
        // queue, and the key is synced once this process leads.
        let permit = match self.shared.gate.get() {
            Some(gate) if gate.shard_count().is_some() => {
                match gate.enter_key(&key.to_string()).await {
                    Some(permit) => Some(permit),
                    None => {
                        // Another replica's shard: dropped here; acquiring the shard later
                        // replays the caches, which queues it again.
                        self.forget(&key);
                        self.done(&key);
                        return;
                    }
                }
            }
            Some(gate) => Some(gate.enter().await),
            None => None,
        };
        let started = Instant::now();
        let metrics = self.shared.metrics.as_ref();
        if let Some(m) = metrics {
            m.active_workers.inc();
        }
        let sync = AssertUnwindSafe(handler(key.clone(), worker)).catch_unwind();
        let outcome = match &permit {
            Some(permit) => permit.run(sync).await,
            None => Some(sync.await),
        };
        drop(permit);
        if let Some(m) = metrics {
            m.active_workers.dec();
        }
        let Some(outcome) = outcome else {
            // Past the fence of the Lease the key's shard rests on: another replica may
            // own it now. Acquiring the shard again replays it.
            tracing::error!(queue = %self.name(), key = %key, "sync abandoned: this replica's lease could be taken over before it ended");
            self.forget(&key);
            self.done(&key);
            return;
        };
        self.finish(&key, outcome, started);
        self.done(&key);
    }

    /// Applies what a sync's end asks for `key` (the outcome's requeue; backoff after a
    /// failure or panic, else its failures forgotten) and records it in the metrics.
    fn finish<E: fmt::Display>(
        &self,
        key: &K,
        outcome: Result<Outcome<E>, Box<dyn std::any::Any + Send>>,
        started: Instant,
    ) {
        let failed = match outcome {
            Ok(Outcome {
                result,
                requeue,
                retry,
                resync,
            }) => {
                if let Some(period) = resync {
                    self.add_after(key.clone(), period, Priority::Bulk);
                }
                self.requeue(key, requeue);
                match result {
                    Ok(()) => {
                        self.forget(key);
                        false
                    }
                    Err(err) => {
                        self.retry(key, retry, &err);
                        true
                    }
                }
            }
            Err(_) => {
                tracing::error!(queue = %self.name(), "sync panicked; requeued with backoff");
                if let Some(m) = &self.shared.metrics {
                    m.panics.inc();
                }
                self.add_rate_limited(key.clone());
                true
            }
        };
        if let Some(m) = &self.shared.metrics {
            let result = if failed {
                ReconcileResult::Error
            } else if self.has_delayed(key) {
                ReconcileResult::RequeueAfter
            } else {
                ReconcileResult::Success
            };
            m.reconciled(result, started.elapsed().as_secs_f64());
        }
    }

    /// Retries `key` after a failed sync as `retry` says.
    fn retry(&self, key: &K, retry: Retry, err: &dyn fmt::Display) {
        match retry {
            Retry::Backoff => {}
            Retry::BackoffAtMost(max) => self.limit_next_retry(key, max),
            Retry::Throttled => {
                tracing::info!(queue = %self.name(), error = %err, "sync throttled; requeued as asked, without backoff");
                self.forget(key);
                return;
            }
        }
        tracing::warn!(queue = %self.name(), error = %err, "sync failed; requeued with backoff");
        self.add_rate_limited(key.clone());
    }

    /// Queues `key` again as `requeue` asks.
    fn requeue(&self, key: &K, requeue: Requeue) {
        match requeue {
            Requeue::OnChange => {}
            Requeue::After(delay) => self.add_after(key.clone(), delay, Priority::Event),
            Requeue::UnlessSyncedWithin(delay) => self.add_fallback_after(key.clone(), delay),
        }
    }

    /// Whether `key` has a pending delayed add.
    fn has_delayed(&self, key: &K) -> bool {
        self.lock().delayed_index.contains_key(key)
    }

    /// Sets the unfinished-work and longest-running gauges from the keys in progress, and
    /// the failing-parents gauges from the keys in backoff.
    fn update_in_progress(&self, m: &BoundQueueMetrics) {
        let now = Instant::now();
        let (failing, longest_failing) = self.failing(now);
        m.failing.set(i64::try_from(failing).unwrap_or(i64::MAX));
        m.longest_failing.set(longest_failing.as_secs_f64());
        let (total, longest) = self
            .lock()
            .started_at
            .values()
            .map(|at| (now - *at).as_secs_f64())
            .fold((0.0, 0.0f64), |(sum, max), s| (sum + s, max.max(s)));
        m.unfinished.set(total);
        m.longest.set(longest);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Backoff, QueueMetrics};
    use super::*;
    use crate::gate::SyncGate;
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    #[tokio::test(start_paused = true)]
    async fn closed_gate_holds_workers_and_opening_releases_them() {
        let q = WorkQueue::new("t");
        let gate = SyncGate::new(false);
        q.set_gate(gate.clone());
        let calls = Arc::new(AtomicUsize::new(0));
        q.add("a", Priority::Event);
        let runner = {
            let q = q.clone();
            let calls = calls.clone();
            tokio::spawn(async move {
                q.run(2, move |_key, _worker| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async { Outcome::<String>::done(Requeue::OnChange) }
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "synced through a closed gate"
        );
        gate.open();
        while calls.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.shut_down();
        runner.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn run_retries_failures_and_forgets_on_success() {
        let q = WorkQueue::new("t");
        let calls = Arc::new(AtomicUsize::new(0));
        q.add("a", Priority::Event);
        let runner = {
            let q = q.clone();
            let calls = calls.clone();
            tokio::spawn(async move {
                q.run(2, move |_key, _worker| {
                    let n = calls.fetch_add(1, Ordering::SeqCst);
                    async move {
                        Outcome::from(match n {
                            0 => Err("boom"),
                            1 => panic!("handler panic is contained"),
                            _ => Ok(Requeue::OnChange),
                        })
                    }
                })
                .await
            })
        };
        let start = Instant::now();
        while calls.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Two failures: 5 ms then 10 ms of backoff.
        assert!(start.elapsed() >= Duration::from_millis(15));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(q.num_requeues(&"a"), 0);
        q.shut_down();
        runner.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_sync_keeps_the_requeue_it_asked_for() {
        let q = WorkQueue::new("t");
        let calls = Arc::new(Mutex::new(Vec::new()));
        q.add("a", Priority::Event);
        let start = Instant::now();
        let runner = {
            let (q, calls) = (q.clone(), calls.clone());
            tokio::spawn(async move {
                q.run(1, move |_key, _worker| {
                    let mut calls = calls.lock().unwrap();
                    calls.push(start.elapsed());
                    // The first sync asks to come back in 2 ms (sooner than its 5 ms
                    // backoff), then fails a write.
                    let outcome = match calls.len() {
                        1 => Outcome::new(
                            Err("write failed"),
                            Requeue::After(Duration::from_millis(2)),
                        ),
                        _ => Outcome::done(Requeue::OnChange),
                    };
                    async move { outcome }
                })
                .await
            })
        };
        let deadline = start + Duration::from_secs(60);
        while calls.lock().unwrap().len() < 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.shut_down();
        runner.await.unwrap();
        let calls = calls.lock().unwrap().clone();
        assert_eq!(calls.get(1), Some(&Duration::from_millis(2)), "{calls:?}");
        assert_eq!(q.num_requeues(&"a"), 0, "the second sync succeeded");
    }

    /// Runs one sync of "a" per entry of `outcomes` (then successes) until `syncs` syncs
    /// ran or ten minutes passed; returns when each started and the key's failure count.
    async fn run_outcomes(
        q: &WorkQueue<&'static str>,
        outcomes: Vec<Outcome<&'static str>>,
        syncs: usize,
    ) -> (Vec<Duration>, u32) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let outcomes = Arc::new(Mutex::new(outcomes.into_iter()));
        q.add("a", Priority::Event);
        let start = Instant::now();
        let runner = {
            let (q, calls) = (q.clone(), calls.clone());
            tokio::spawn(async move {
                q.run(1, move |_key, _worker| {
                    calls.lock().unwrap().push(start.elapsed());
                    let outcome = outcomes.lock().unwrap().next();
                    async move { outcome.unwrap_or_else(|| Outcome::done(Requeue::OnChange)) }
                })
                .await
            })
        };
        let deadline = start + Duration::from_secs(600);
        while calls.lock().unwrap().len() < syncs && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let failures = q.num_requeues(&"a");
        q.shut_down();
        runner.await.unwrap();
        let calls = calls.lock().unwrap().clone();
        (calls, failures)
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_failure_comes_back_when_asked_without_backoff() {
        let q = WorkQueue::new("t");
        let throttled = || {
            Outcome::new(Err("429"), Requeue::After(Duration::from_millis(40)))
                .with_retry(Retry::Throttled)
        };
        let (calls, failures) = run_outcomes(&q, vec![throttled(), throttled()], 3).await;
        let ms = |n| Duration::from_millis(n);
        // Backoff would bring it back after 5 ms, then 10 ms.
        assert_eq!(calls, vec![ms(0), ms(40), ms(80)]);
        assert_eq!(
            failures, 0,
            "a throttled key has no failures to back off on"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_bounded_backoff_waits_at_most_its_bound() {
        let q = WorkQueue::with_options(
            "t",
            Backoff {
                base: Duration::from_millis(100),
                max: Duration::from_secs(10),
            },
            None,
        );
        let bounded = Outcome::new(Err("unreachable"), Requeue::OnChange)
            .with_retry(Retry::BackoffAtMost(Duration::from_millis(30)));
        let (calls, failures) = run_outcomes(&q, vec![bounded], 2).await;
        assert_eq!(calls.get(1), Some(&Duration::from_millis(30)), "{calls:?}");
        assert_eq!(failures, 0, "the second sync succeeded");
    }

    #[tokio::test(start_paused = true)]
    async fn a_resync_brings_the_key_back_after_its_period() {
        let q = WorkQueue::new("t");
        let period = Some(Duration::from_secs(30));
        let outcomes = vec![
            Outcome::done(Requeue::OnChange).with_resync(period),
            Outcome::done(Requeue::OnChange).with_resync(period),
        ];
        let (calls, _) = run_outcomes(&q, outcomes, 3).await;
        let s = Duration::from_secs;
        assert_eq!(calls, vec![s(0), s(30), s(60)]);
        let q = WorkQueue::new("t");
        let failed = Outcome::new(Err("boom"), Requeue::OnChange).with_resync(period);
        let (calls, _) = run_outcomes(&q, vec![failed], 2).await;
        // Retried after its 5 ms backoff (the earlier of the two deadlines).
        assert_eq!(calls, vec![s(0), Duration::from_millis(5)]);
    }

    /// Runs 6 keys through `limits`; each sync gives its worker up when `release` says so,
    /// then waits a second. Returns the most syncs running at once and the order the keys
    /// started in.
    async fn syncs_at_once(limits: Concurrency, release: bool) -> (usize, Vec<u32>) {
        let q = WorkQueue::new("t");
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(Mutex::new(Vec::new()));
        for key in 0..5u32 {
            q.add(key, Priority::Bulk);
        }
        let runner = {
            let (q, running, peak, started) =
                (q.clone(), running.clone(), peak.clone(), started.clone());
            tokio::spawn(async move {
                q.run(limits, move |key: u32, worker: Worker| {
                    let (running, peak, started) = (running.clone(), peak.clone(), started.clone());
                    async move {
                        started.lock().unwrap().push(key);
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        // The sync's hook phase, then (maybe) only writes remain.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        let kept = if release {
                            worker.release();
                            None
                        } else {
                            Some(worker)
                        };
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        drop(kept);
                        Outcome::<&str>::done(Requeue::OnChange)
                    }
                })
                .await
            })
        };
        // An event key added while the first syncs run still goes before the bulk keys.
        tokio::time::sleep(Duration::from_millis(5)).await;
        q.add(9, Priority::Event);
        while started.lock().unwrap().len() < 6 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        q.shut_down();
        runner.await.unwrap();
        let order = started.lock().unwrap().clone();
        (peak.load(Ordering::SeqCst), order)
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_worker_takes_the_next_key_within_the_in_flight_bound() {
        let (peak, order) = syncs_at_once(Concurrency::new(1, 3), true).await;
        assert_eq!(peak, 3, "one worker, three syncs in flight");
        assert_eq!(order, vec![0, 9, 1, 2, 3, 4], "keys leave in lane order");
    }

    #[tokio::test(start_paused = true)]
    async fn a_sync_that_keeps_its_worker_runs_alone() {
        let (peak, order) = syncs_at_once(Concurrency::new(1, 3), false).await;
        assert_eq!(peak, 1);
        assert_eq!(order, vec![0, 9, 1, 2, 3, 4]);
        let (peak, _) = syncs_at_once(Concurrency::from(1), true).await;
        assert_eq!(peak, 1, "in flight equal to workers: one sync at a time");
    }
    #[test]
    fn in_flight_is_never_below_workers() {
        assert_eq!(Concurrency::new(8, 2).in_flight(), 8);
        assert_eq!(Concurrency::new(0, 0).workers(), 1);
        assert_eq!(Concurrency::new(0, 0).in_flight(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_count_reconciles_by_result() {
        let registry = prometheus::Registry::new();
        let metrics = QueueMetrics::register(&registry).unwrap();
        let q: WorkQueue<&'static str> =
            WorkQueue::with_options("CompositeController-x", Backoff::default(), Some(metrics));
        let labels = |m: &prometheus::proto::Metric| -> Vec<(String, String)> {
            m.get_label()
                .iter()
                .map(|l| (l.name().to_owned(), l.value().to_owned()))
                .collect()
        };
        let reconciles = |result: &str| -> f64 {
            registry
                .gather()
                .iter()
                .find(|f| f.name() == "controller_runtime_reconcile_total")
                .and_then(|f| {
                    f.get_metric().iter().find(|m| {
                        labels(m).contains(&("result".into(), result.into()))
                            && labels(m)
                                .contains(&("controller".into(), "CompositeController-x".into()))
                    })
                })
                .map_or(-1.0, |m| m.get_counter().value())
        };
        // Every result series exists at zero before the first reconcile.
        for r in crate::queue_metrics::RESULTS {
            assert_eq!(reconciles(r), 0.0, "{r}");
        }
        q.add("ok", Priority::Event);
        q.add("fail", Priority::Event);
        q.add("later", Priority::Event);
        let runner = q.clone();
        let run = tokio::spawn(async move {
            runner
                .run(1, move |key: &'static str, _worker| async move {
                    Outcome::from(match key {
                        "fail" => Err("boom"),
                        "later" => Ok(Requeue::After(Duration::from_secs(600))),
                        _ => Ok(Requeue::OnChange),
                    })
                })
                .await
        });
        // The failed key comes back after its 5 ms backoff and fails again.
        tokio::time::sleep(Duration::from_millis(7)).await;
        q.shut_down();
        run.await.unwrap();
        assert_eq!(reconciles("success"), 1.0);
        assert!(reconciles("error") >= 1.0);
        assert_eq!(reconciles("requeue_after"), 1.0);
        assert_eq!(reconciles("requeue"), 0.0);
    }

    /// Many workers, many adds of few keys: no key is ever processed concurrently, and every
    /// key added is processed at least once after its last add.
    fn no_concurrent_processing(adds: Vec<(u8, bool)>, workers: usize) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async move {
            let q: WorkQueue<u8> = WorkQueue::new("p");
            let active = Arc::new(Mutex::new(HashSet::new()));
            let processed_after_add = Arc::new(Mutex::new(HashSet::new()));
            let violations = Arc::new(AtomicUsize::new(0));
            let runner = {
                let q = q.clone();
                let active = active.clone();
                let seen = processed_after_add.clone();
                let violations = violations.clone();
                tokio::spawn(async move {
                    q.run(workers, move |key: u8, _worker| {
                        let active = active.clone();
                        let seen = seen.clone();
                        let violations = violations.clone();
                        async move {
                            if !active.lock().unwrap().insert(key) {
                                violations.fetch_add(1, Ordering::SeqCst);
                            }
                            // Stay busy across several polls so overlapping runs would show.
                            for _ in 0..4 {
                                tokio::task::yield_now().await;
                            }
                            seen.lock().unwrap().insert(key);
                            active.lock().unwrap().remove(&key);
                            Outcome::<String>::done(Requeue::OnChange)
                        }
                    })
                    .await
                })
            };
            for (key, event) in &adds {
                processed_after_add.lock().unwrap().remove(key);
                let p = if *event {
                    Priority::Event
                } else {
                    Priority::Bulk
                };
                q.add(*key, p);
                if key % 2 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            // Shut down only once every add has been handled; then drain.
            let expected: HashSet<u8> = adds.iter().map(|(k, _)| *k).collect();
            let deadline = Instant::now() + Duration::from_secs(30);
            while *processed_after_add.lock().unwrap() != expected && Instant::now() < deadline {
                tokio::task::yield_now().await;
            }
            q.shut_down();
            runner.await.unwrap();
            assert_eq!(violations.load(Ordering::SeqCst), 0);
            assert_eq!(*processed_after_add.lock().unwrap(), expected);
        });
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        #[test]
        fn queue_never_runs_a_key_concurrently(
            adds in proptest::collection::vec((0u8..6, proptest::bool::ANY), 1..200),
            workers in 1usize..8,
        ) {
            no_concurrent_processing(adds, workers);
        }
    }
}
