//! Prometheus metrics of work queues and of the reconciles their workers run, named and
//! labelled as client-go's work queue and controller-runtime publish them (upstream
//! Metacontroller's dashboards read these):
//!
//! * `workqueue_depth{name,controller,priority}`, `workqueue_adds_total`,
//!   `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds`,
//!   `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds`,
//!   `workqueue_retries_total` — all `{name,controller}` with both set to the queue name
//!   (`CompositeController-<name>` / `DecoratorController-<name>`, as upstream);
//! * `controller_runtime_reconcile_total{controller,result}` (result `success`, `error`,
//!   `requeue`, `requeue_after`), `controller_runtime_reconcile_errors_total`,
//!   `controller_runtime_reconcile_panics_total`, `controller_runtime_reconcile_time_seconds`,
//!   `controller_runtime_max_concurrent_reconciles`, `controller_runtime_active_workers` —
//!   all `{controller}`, one reconcile being one run of the queue's handler for a key;
//! * beyond both, `metacontroller_failing_parents{controller}` (keys whose last sync failed)
//!   and `metacontroller_longest_failing_parent_seconds{controller}` (how long ago the
//!   longest-failing of them first failed, without a success since): refreshed with the
//!   in-progress gauges, so an alert can tell a parent stuck for an hour from many brief
//!   failures.

use std::fmt;

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

/// Result label values of `controller_runtime_reconcile_total`.
pub(crate) const RESULTS: [&str; 4] = ["error", "requeue", "requeue_after", "success"];

/// client-go's work queue latency buckets: 10 ns to 1000 s, ×10 per bucket.
fn queue_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(10e-9, 10.0, 12).unwrap_or_default()
}

/// controller-runtime's reconcile time buckets.
const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// A metric family's name and help text.
type Family = (&'static str, &'static str);

// The families' names and help texts, as client-go and controller-runtime publish them.
const DEPTH: Family = (
    "workqueue_depth",
    "Current depth of workqueue by workqueue and priority",
);
const ADDS: Family = (
    "workqueue_adds_total",
    "Total number of adds handled by workqueue",
);
const QUEUE_DURATION: Family = (
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
);
const WORK_DURATION: Family = (
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
);
const UNFINISHED: Family = (
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't \
     been observed by work_duration. Large values indicate stuck threads.",
);
const LONGEST: Family = (
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been \
     running.",
);
const RETRIES: Family = (
    "workqueue_retries_total",
    "Total number of retries handled by workqueue",
);
const RECONCILE_TOTAL: Family = (
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller",
);
const RECONCILE_ERRORS: Family = (
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller",
);
const RECONCILE_PANICS: Family = (
    "controller_runtime_reconcile_panics_total",
    "Total number of reconciliation panics per controller",
);
const RECONCILE_TIME: Family = (
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
);
const MAX_CONCURRENT: Family = (
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller",
);
const ACTIVE_WORKERS: Family = (
    "controller_runtime_active_workers",
    "Number of currently used workers per controller",
);

// Beyond client-go and controller-runtime: parents that keep failing.
const FAILING: Family = (
    "metacontroller_failing_parents",
    "Parents (or decorator targets) whose last sync failed, per controller.",
);
const LONGEST_FAILING: Family = (
    "metacontroller_longest_failing_parent_seconds",
    "Seconds since the first failure of the parent that has failed longest without a \
     successful sync since (0 when none is failing).",
);

/// The options of a gauge or counter family.
fn opts((name, help): Family) -> Opts {
    Opts::new(name, help)
}

/// The options of a histogram family with `buckets`.
fn histogram((name, help): Family, buckets: Vec<f64>) -> HistogramOpts {
    HistogramOpts::new(name, help).buckets(buckets)
}

/// The metric families of all work queues of a process; register once per registry and
/// hand clones to every queue ([`crate::WorkQueue::with_options`]).
#[derive(Clone)]
pub struct QueueMetrics {
    depth: IntGaugeVec,
    adds: IntCounterVec,
    queue_duration: HistogramVec,
    work_duration: HistogramVec,
    unfinished: GaugeVec,
    longest: GaugeVec,
    retries: IntCounterVec,
    reconcile_total: IntCounterVec,
    reconcile_errors: IntCounterVec,
    reconcile_panics: IntCounterVec,
    reconcile_time: HistogramVec,
    max_concurrent: IntGaugeVec,
    active_workers: IntGaugeVec,
    failing: IntGaugeVec,
    longest_failing: GaugeVec,
}

impl fmt::Debug for QueueMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QueueMetrics")
    }
}

impl QueueMetrics {
    /// Creates the metric families and registers them in `registry`.
    pub fn register(registry: &Registry) -> Result<QueueMetrics, prometheus::Error> {
        let metrics = Self::new_families()?;
        metrics.register_families(registry)?;
        Ok(metrics)
    }

    /// The metric families, not yet registered anywhere.
    fn new_families() -> Result<QueueMetrics, prometheus::Error> {
        let queue = ["name", "controller"];
        let ctl = ["controller"];
        Ok(QueueMetrics {
            depth: IntGaugeVec::new(opts(DEPTH), &["name", "controller", "priority"])?,
            adds: IntCounterVec::new(opts(ADDS), &queue)?,
            queue_duration: HistogramVec::new(histogram(QUEUE_DURATION, queue_buckets()), &queue)?,
            work_duration: HistogramVec::new(histogram(WORK_DURATION, queue_buckets()), &queue)?,
            unfinished: GaugeVec::new(opts(UNFINISHED), &queue)?,
            longest: GaugeVec::new(opts(LONGEST), &queue)?,
            retries: IntCounterVec::new(opts(RETRIES), &queue)?,
            reconcile_total: IntCounterVec::new(opts(RECONCILE_TOTAL), &["controller", "result"])?,
            reconcile_errors: IntCounterVec::new(opts(RECONCILE_ERRORS), &ctl)?,
            reconcile_panics: IntCounterVec::new(opts(RECONCILE_PANICS), &ctl)?,
            reconcile_time: HistogramVec::new(
                histogram(RECONCILE_TIME, RECONCILE_BUCKETS.to_vec()),
                &ctl,
            )?,
            max_concurrent: IntGaugeVec::new(opts(MAX_CONCURRENT), &ctl)?,
            active_workers: IntGaugeVec::new(opts(ACTIVE_WORKERS), &ctl)?,
            failing: IntGaugeVec::new(opts(FAILING), &ctl)?,
            longest_failing: GaugeVec::new(opts(LONGEST_FAILING), &ctl)?,
        })
    }

    /// Registers every family in `registry`, in declaration order; stops at the first
    /// failure (e.g. a family already registered).
    fn register_families(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.depth.clone()))?;
        registry.register(Box::new(self.adds.clone()))?;
        registry.register(Box::new(self.queue_duration.clone()))?;
        registry.register(Box::new(self.work_duration.clone()))?;
        registry.register(Box::new(self.unfinished.clone()))?;
        registry.register(Box::new(self.longest.clone()))?;
        registry.register(Box::new(self.retries.clone()))?;
        registry.register(Box::new(self.reconcile_total.clone()))?;
        registry.register(Box::new(self.reconcile_errors.clone()))?;
        registry.register(Box::new(self.reconcile_panics.clone()))?;
        registry.register(Box::new(self.reconcile_time.clone()))?;
        registry.register(Box::new(self.max_concurrent.clone()))?;
        registry.register(Box::new(self.active_workers.clone()))?;
        registry.register(Box::new(self.failing.clone()))?;
        registry.register(Box::new(self.longest_failing.clone()))?;
        Ok(())
    }

    /// The series of queue `name`, created at zero (as controller-runtime initialises them
    /// when a controller starts) so they are visible before the first key.
    pub(crate) fn bind(&self, name: &str) -> BoundQueueMetrics {
        let q = [name, name];
        let c = [name];
        BoundQueueMetrics {
            depth: self.depth.with_label_values(&[name, name, ""]),
            adds: self.adds.with_label_values(&q),
            queue_duration: self.queue_duration.with_label_values(&q),
            work_duration: self.work_duration.with_label_values(&q),
            unfinished: self.unfinished.with_label_values(&q),
            longest: self.longest.with_label_values(&q),
            retries: self.retries.with_label_values(&q),
            results: RESULTS.map(|r| self.reconcile_total.with_label_values(&[name, r])),
            errors: self.reconcile_errors.with_label_values(&c),
            panics: self.reconcile_panics.with_label_values(&c),
            reconcile_time: self.reconcile_time.with_label_values(&c),
            max_concurrent: self.max_concurrent.with_label_values(&c),
            active_workers: self.active_workers.with_label_values(&c),
            failing: self.failing.with_label_values(&c),
            longest_failing: self.longest_failing.with_label_values(&c),
        }
    }
}

/// One queue's series.
pub(crate) struct BoundQueueMetrics {
    pub depth: IntGauge,
    pub adds: IntCounter,
    pub queue_duration: Histogram,
    pub work_duration: Histogram,
    pub unfinished: Gauge,
    pub longest: Gauge,
    pub retries: IntCounter,
    /// In [`RESULTS`] order.
    pub results: [IntCounter; 4],
    pub errors: IntCounter,
    pub panics: IntCounter,
    pub reconcile_time: Histogram,
    pub max_concurrent: IntGauge,
    pub active_workers: IntGauge,
    pub failing: IntGauge,
    pub longest_failing: Gauge,
}

/// How a reconcile ended (the `result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReconcileResult {
    Error,
    /// The handler succeeded and left a delayed add for its key (a resync, a hook's
    /// `resyncAfterSeconds`, an own-writes fallback); a throttled failure is an `Error`.
    /// controller-runtime's `requeue` (immediate requeue on request) has no counterpart
    /// here; its series stays at zero.
    RequeueAfter,
    Success,
}

impl BoundQueueMetrics {
    pub(crate) fn reconciled(&self, result: ReconcileResult, seconds: f64) {
        let index = match result {
            ReconcileResult::Error => 0,
            ReconcileResult::RequeueAfter => 2,
            ReconcileResult::Success => 3,
        };
        self.results[index].inc();
        if result == ReconcileResult::Error {
            self.errors.inc();
        }
        self.reconcile_time.observe(seconds);
    }
}
