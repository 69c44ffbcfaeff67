//! Prometheus metrics of `spec.hookRollout`, read from each running driver at scrape time
//! (so a stopped controller's gauges go with it):
//!
//! * `metacontroller_hook_rollout_step{controller_name,controller_type}`: the current step,
//!   counted from 1 (as `rollout status` shows it);
//! * `metacontroller_hook_rollout_parents{controller_name,controller_type,state}`: parents on
//!   the new code (`updated`), and of those `healthy` and `failed`;
//! * `metacontroller_hook_rollout_phase{controller_name,controller_type,phase}`: 1 for the
//!   current phase, 0 for the others;
//! * `metacontroller_hook_rollout_rollbacks_total{controller_name,controller_type,cause}`:
//!   rollbacks this process made, `cause` `failure` (beyond `maxFailures`) or `undo`.

use std::sync::{Arc, Mutex, Weak};

use metacontroller_api::rollout::RolloutPhase;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::RolloutDriver;

const PHASES: [(RolloutPhase, &str); 4] = [
    (RolloutPhase::Progressing, "Progressing"),
    (RolloutPhase::Paused, "Paused"),
    (RolloutPhase::Complete, "Complete"),
    (RolloutPhase::RolledBack, "RolledBack"),
];

/// The running drivers: (controller_type, name, driver).
type Sources = Arc<Mutex<Vec<(&'static str, String, Weak<RolloutDriver>)>>>;

/// The rollout metric families of a process.
#[derive(Clone)]
pub(crate) struct RolloutMetrics {
    sources: Sources,
    rollbacks: IntCounterVec,
}

/// A driver's rollback counters.
pub(crate) struct Rollbacks {
    failure: IntCounter,
    undo: IntCounter,
}

impl RolloutMetrics {
    /// Creates the families and registers them in `registry`.
    pub(crate) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let labels = ["controller_name", "controller_type"];
        let gauge = |name: &str, help: &str, extra: Option<&str>| {
            let mut all = labels.to_vec();
            all.extend(extra);
            IntGaugeVec::new(Opts::new(name, help), &all)
        };
        let collector = RolloutCollector {
            sources: Sources::default(),
            step: gauge(
                "metacontroller_hook_rollout_step",
                "Current step of the hook code rollout, from 1.",
                None,
            )?,
            parents: gauge(
                "metacontroller_hook_rollout_parents",
                "Parents on the new hook code (updated), and of those healthy and failed.",
                Some("state"),
            )?,
            phase: gauge(
                "metacontroller_hook_rollout_phase",
                "1 for the current phase of the hook code rollout, 0 for the others.",
                Some("phase"),
            )?,
        };
        let rollbacks = IntCounterVec::new(
            Opts::new(
                "metacontroller_hook_rollout_rollbacks_total",
                "Hook code rollouts rolled back by this process, by cause (failure, undo).",
            ),
            &["controller_name", "controller_type", "cause"],
        )?;
        let sources = collector.sources.clone();
        registry.register(Box::new(collector))?;
        registry.register(Box::new(rollbacks.clone()))?;
        Ok(RolloutMetrics { sources, rollbacks })
    }

    /// Exports `driver`'s state until it is dropped, and counts its rollbacks.
    pub(crate) fn track(
        &self,
        controller_type: &'static str,
        name: &str,
        driver: &Arc<RolloutDriver>,
    ) {
        let counter = |cause: &str| {
            self.rollbacks
                .with_label_values(&[name, controller_type, cause])
        };
        // A driver is tracked once, when its controller starts.
        let _ = driver.rollbacks.set(Rollbacks {
            failure: counter("failure"),
            undo: counter("undo"),
        });
        self.sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((controller_type, name.to_string(), Arc::downgrade(driver)));
    }
}

impl RolloutDriver {
    /// Counts a rollback when `reason` (of an Event the driver records) is one.
    pub(super) fn count_rollback(&self, reason: &str) {
        let Some(counters) = self.rollbacks.get() else {
            return;
        };
        match reason {
            "RolloutRolledBack" => counters.failure.inc(),
            "RolloutUndone" => counters.undo.inc(),
            _ => {}
        }
    }
}

/// Reads the drivers when scraped.
struct RolloutCollector {
    sources: Sources,
    step: IntGaugeVec,
    parents: IntGaugeVec,
    phase: IntGaugeVec,
}

impl Collector for RolloutCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut descs = self.step.desc();
        descs.extend(self.parents.desc());
        descs.extend(self.phase.desc());
        descs
    }

    fn collect(&self) -> Vec<MetricFamily> {
        for family in [&self.step, &self.parents, &self.phase] {
            family.reset();
        }
        let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        sources.retain(|(_, _, driver)| driver.strong_count() > 0);
        for (controller_type, name, driver) in sources.iter() {
            let Some(status) = driver.upgrade().and_then(|d| d.lock().status.clone()) else {
                continue;
            };
            let labels = [name.as_str(), *controller_type];
            self.step
                .with_label_values(&labels)
                .set(i64::from(status.step) + 1);
            for (state, n) in [
                ("updated", status.updated),
                ("healthy", status.healthy),
                ("failed", status.failed),
            ] {
                self.parents
                    .with_label_values(&[labels[0], labels[1], state])
                    .set(i64::from(n));
            }
            for (phase, shown) in PHASES {
                self.phase
                    .with_label_values(&[labels[0], labels[1], shown])
                    .set(i64::from(status.phase == phase));
            }
        }
        let mut families = self.step.collect();
        families.extend(self.parents.collect());
        families.extend(self.phase.collect());
        families
    }
}
