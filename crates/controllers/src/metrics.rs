//! The controllers' Prometheus metrics, registered once per process and shared by every
//! controller ([`ControllerMetrics`] in [`crate::composite::Options`]):
//!
//! * the work queue and reconcile families of each controller's queue (see
//!   [`metacontroller_workqueue::QueueMetrics`]), the queue named
//!   `CompositeController-<name>` / `DecoratorController-<name>` as upstream;
//! * `metacontroller_child_writes_total{controller_name,controller_type,action}` — child
//!   writes sent (`create`, `update`, `delete`, `apply`);
//! * `metacontroller_child_apply_skipped_total{controller_name,controller_type}` —
//!   server-side apply bodies not sent because the child already holds them;
//! * `metacontroller_parent_state_entries{controller_name,controller_type,structure}` —
//!   entries of each structure a controller keeps per parent, read from the running
//!   controllers at each scrape (see `crate::departed`);
//! * the `metacontroller_hook_rollout_*` families of `spec.hookRollout` (see
//!   `crate::hook_rollout::driver::metrics`).

use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};

use metacontroller_workqueue::{Backoff, QueueMetrics, WorkQueue};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

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
    states: StateSources,
    rollouts: crate::hook_rollout::driver::metrics::RolloutMetrics,
}

/// What a running controller keeps per parent, by structure (see
/// [`ControllerMetrics::track_states`]).
pub(crate) trait ParentStates: Send + Sync {
    /// Entries per structure.
    fn state_entries(&self) -> Vec<(&'static str, usize)>;
}

/// The running controllers the state gauge reads: (controller_type, name, controller).
type StateSources = Arc<Mutex<Vec<(&'static str, String, Weak<dyn ParentStates>)>>>;

/// Reads the controllers when scraped, so the gauge never outlives a controller.
struct StateCollector {
    sources: StateSources,
    entries: IntGaugeVec,
}

impl Collector for StateCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.entries.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.entries.reset();
        let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        sources.retain(|(_, _, states)| states.strong_count() > 0);
        for (controller_type, name, states) in sources.iter() {
            let Some(states) = states.upgrade() else {
                continue;
            };
            for (structure, n) in states.state_entries() {
                self.entries
                    .with_label_values(&[name.as_str(), controller_type, structure])
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        self.entries.collect()
    }
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
        let entries = IntGaugeVec::new(
            Opts::new(
                "metacontroller_parent_state_entries",
                "Entries a controller keeps per parent (or per child of its parents), by structure; they follow the parents this replica holds.",
            ),
            &["controller_name", "controller_type", "structure"],
        )?;
        let states = StateSources::default();
        registry.register(Box::new(writes.clone()))?;
        registry.register(Box::new(skipped.clone()))?;
        registry.register(Box::new(StateCollector {
            sources: states.clone(),
            entries,
        }))?;
        Ok(ControllerMetrics {
            families: Some(Families {
                queues: QueueMetrics::register(registry)?,
                writes,
                skipped,
                states,
                rollouts: crate::hook_rollout::driver::metrics::RolloutMetrics::register(registry)?,
            }),
        })
    }

    /// Exports what the running controller `states` keeps per parent until it is dropped.
    pub(crate) fn track_states(
        &self,
        controller_type: &'static str,
        name: &str,
        states: Weak<dyn ParentStates>,
    ) {
        if let Some(f) = &self.families {
            f.states.lock().unwrap_or_else(|p| p.into_inner()).push((
                controller_type,
                name.to_string(),
                states,
            ));
        }
    }

    /// Exports the state of `driver` (controller `name`'s rollout) until it is dropped.
    pub(crate) fn track_rollout(
        &self,
        controller_type: &'static str,
        name: &str,
        driver: &Arc<crate::hook_rollout::driver::RolloutDriver>,
    ) {
        if let Some(f) = &self.families {
            f.rollouts.track(controller_type, name, driver);
        }
    }

    /// The work queue of controller `name` of kind `controller_type`, with metrics.
    pub(crate) fn queue<K>(&self, controller_type: &str, name: &str) -> WorkQueue<K>
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
    pub(crate) fn child_writes(&self, controller_type: &str, name: &str) -> ChildWrites {
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
pub(crate) struct ChildWrites {
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
pub(crate) enum ChildWrite {
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
    pub(crate) fn record(&self, write: ChildWrite) {
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
