//! The controllers' Prometheus metrics, registered once per process and shared by every
//! controller ([`ControllerMetrics`] in [`crate::composite::Options`]):
//!
//! * the work queue and reconcile families of each controller's queue (see
//!   [`metacontroller_dynamic::queue_metrics`]), the queue named
//!   `CompositeController-<name>` / `DecoratorController-<name>` as upstream;
//! * `metacontroller_child_writes_total{controller_name,controller_type,action}` — child
//!   writes sent (`create`, `update`, `delete`, `apply`);
//! * `metacontroller_child_apply_skipped_total{controller_name,controller_type}` —
//!   server-side apply bodies not sent because the child already holds them.

use std::hash::Hash;

use metacontroller_dynamic::{Backoff, QueueMetrics, WorkQueue};
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

/// `controller_type` label of CompositeControllers (upstream's value).
pub const COMPOSITE: &str = "CompositeController";
/// `controller_type` label of DecoratorControllers (upstream's value).
pub const DECORATOR: &str = "DecoratorController";

/// The metric families of all controllers of a process. The default is unregistered:
/// counting still works, nothing is exported.
#[derive(Debug, Clone, Default)]
pub struct ControllerMetrics {
    families: Option<Families>,
}

#[derive(Clone)]
struct Families {
    queues: QueueMetrics,
    writes: IntCounterVec,
    skipped: IntCounterVec,
}

impl std::fmt::Debug for Families {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Families")
    }
}

impl ControllerMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let labels = ["controller_name", "controller_type", "action"];
        let writes = IntCounterVec::new(
            Opts::new(
                "metacontroller_child_writes_total",
                "Child writes sent to the API server, by controller and action.",
            ),
            &labels,
        )?;
        let skipped = IntCounterVec::new(
            Opts::new(
                "metacontroller_child_apply_skipped_total",
                "Server-side apply bodies not sent because the child already held them.",
            ),
            &labels[..2],
        )?;
        registry.register(Box::new(writes.clone()))?;
        registry.register(Box::new(skipped.clone()))?;
        Ok(ControllerMetrics {
            families: Some(Families {
                queues: QueueMetrics::register(registry)?,
                writes,
                skipped,
            }),
        })
    }

    /// The work queue of controller `name` of kind `controller_type`, with metrics.
    pub fn queue<K>(&self, controller_type: &str, name: &str) -> WorkQueue<K>
    where
        K: Clone + Eq + Hash + Send + 'static,
    {
        WorkQueue::with_options(
            format!("{controller_type}-{name}"),
            Backoff::default(),
            self.families.as_ref().map(|f| f.queues.clone()),
        )
    }

    /// The child write counters of one controller.
    pub fn child_writes(&self, controller_type: &str, name: &str) -> ChildWrites {
        let Some(f) = &self.families else {
            return ChildWrites::default();
        };
        let write = |action: &str| f.writes.with_label_values(&[name, controller_type, action]);
        ChildWrites {
            counters: Some(ChildCounters {
                create: write("create"),
                update: write("update"),
                delete: write("delete"),
                apply: write("apply"),
                skipped: f.skipped.with_label_values(&[name, controller_type]),
            }),
        }
    }
}

/// One controller's child write counters (no-ops when metrics are off).
#[derive(Debug, Clone, Default)]
pub struct ChildWrites {
    counters: Option<ChildCounters>,
}

#[derive(Debug, Clone)]
struct ChildCounters {
    create: IntCounter,
    update: IntCounter,
    delete: IntCounter,
    apply: IntCounter,
    skipped: IntCounter,
}

/// A child write the writer carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildWrite {
    /// POST of a new child.
    Create,
    /// PUT of an existing child.
    Update,
    /// DELETE of a child.
    Delete,
    /// Server-side apply PATCH.
    Apply,
    /// Server-side apply body skipped (already in place).
    ApplySkipped,
}

impl ChildWrites {
    /// Counts one write.
    pub fn record(&self, write: ChildWrite) {
        let Some(c) = &self.counters else { return };
        match write {
            ChildWrite::Create => c.create.inc(),
            ChildWrite::Update => c.update.inc(),
            ChildWrite::Delete => c.delete.inc(),
            ChildWrite::Apply => c.apply.inc(),
            ChildWrite::ApplySkipped => c.skipped.inc(),
        }
    }
}
