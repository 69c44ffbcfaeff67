//! Who may run an in-process hook now. Each controller has its own share (at most
//! `per_controller` of its calls run at once, reserving at most half the memory budget
//! between them), the process a cap over all of them, and the memory budget
//! ([`super::budget`]) a byte count. A call waits for its controller's share first, so a
//! controller whose hooks loop, time out or hit limits queues behind its own calls only: it
//! holds at most its share of the process cap and of the budget, and never delays another
//! controller's calls. Every wait is bounded by the call's deadline (its hook timeout).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use prometheus::IntCounterVec;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::budget::{format_bytes, units, BudgetMetrics, MemoryBudget, Reservation, UNIT};

/// Default `--inprocess-hook-concurrency-per-controller`: a controller's calls at once.
pub const DEFAULT_PER_CONTROLLER: usize = 4;
/// Default `--inprocess-hook-concurrency`: calls of all controllers at once.
pub const DEFAULT_PROCESS: usize = 64;

/// The limits of in-process hook calls, for the whole process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InProcessLimits {
    /// Calls of one controller that run at once; more wait for the controller's share.
    pub per_controller: usize,
    /// Calls of all controllers that run at once.
    pub process: usize,
    /// Bytes the memory limits of running calls may add up to.
    pub memory_budget: u64,
}

impl Default for InProcessLimits {
    fn default() -> Self {
        Self {
            per_controller: DEFAULT_PER_CONTROLLER,
            process: DEFAULT_PROCESS,
            memory_budget: super::budget::DEFAULT_MEMORY_BUDGET,
        }
    }
}

/// Why a call could not be admitted before its deadline.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// It waited for its controller's share (or the process cap) until its timeout.
    Share(String),
    /// The memory budget had no room for it (message names the budget).
    Memory(String),
}

/// Admission of in-process hook calls; one per process.
pub(crate) struct Admission {
    limits: InProcessLimits,
    /// Each controller's share, while one of its calls holds or waits for it.
    shares: Mutex<HashMap<String, Weak<Share>>>,
    /// Memory units (KiB) one controller's calls may reserve together: half the budget.
    share_units: u32,
    process: Arc<Semaphore>,
    budget: MemoryBudget,
    waits: Option<IntCounterVec>,
}

/// One controller's share: calls at once, and memory units its calls may reserve together.
struct Share {
    calls: Arc<Semaphore>,
    memory: Arc<Semaphore>,
}

/// A call's admission: its place in its controller's share, in the process cap and its
/// memory reservation, all given back when dropped.
pub(crate) struct Ticket {
    /// Keeps the share in the map while the call runs.
    _owner: Arc<Share>,
    _share: OwnedSemaphorePermit,
    _share_memory: OwnedSemaphorePermit,
    _process: OwnedSemaphorePermit,
    _memory: Reservation,
}

impl Admission {
    /// Admission under `limits` (shares and the process cap at least 1).
    pub(crate) fn new(
        limits: InProcessLimits,
        budget: Option<BudgetMetrics>,
        waits: Option<IntCounterVec>,
    ) -> Self {
        let limits = InProcessLimits {
            per_controller: limits.per_controller.max(1),
            process: limits.process.max(1),
            ..limits
        };
        let share_units = (units(limits.memory_budget) / 2).clamp(1, u64::from(u32::MAX)) as u32;
        Self {
            limits,
            shares: Mutex::new(HashMap::new()),
            share_units,
            process: Arc::new(Semaphore::new(limits.process)),
            budget: MemoryBudget::new(limits.memory_budget, budget),
            waits,
        }
    }

    /// Admits a call of `controller` that may use `memory` bytes, waiting until `deadline`
    /// at most: first for the controller's share, then the process cap, then the memory.
    pub(crate) async fn admit(
        &self,
        controller: &str,
        memory: u64,
        deadline: Instant,
    ) -> Result<Ticket, Refused> {
        let share = self.share(controller);
        let calls = share.calls.clone();
        let calls = self.wait(controller, "controller", calls, deadline).await.ok_or_else(|| {
            Refused::Share(format!(
                "waited for its controller's share of in-process hook calls ({} at once, --inprocess-hook-concurrency-per-controller)",
                self.limits.per_controller
            ))
        })?;
        let process = self.process.clone();
        let process = self.wait(controller, "process", process, deadline).await.ok_or_else(|| {
            Refused::Share(format!(
                "waited for the process's in-process hook calls ({} at once, --inprocess-hook-concurrency)",
                self.limits.process
            ))
        })?;
        let share_memory = self.share_memory(&share, memory, deadline).await?;
        let memory = self
            .budget
            .reserve(memory, deadline)
            .await
            .map_err(Refused::Memory)?;
        Ok(Ticket {
            _owner: share,
            _share: calls,
            _share_memory: share_memory,
            _process: process,
            _memory: memory,
        })
    }

    /// The call's part of its controller's memory share: its memory limit, or the whole
    /// share for a call larger than it (which then runs alone among its controller's calls).
    async fn share_memory(
        &self,
        share: &Share,
        bytes: u64,
        deadline: Instant,
    ) -> Result<OwnedSemaphorePermit, Refused> {
        let wanted = units(bytes).clamp(1, u64::from(self.share_units)) as u32;
        let acquire = share.memory.clone().acquire_many_owned(wanted);
        match tokio::time::timeout_at(deadline.into(), acquire).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(Refused::Memory(format!(
                "in-process hook memory budget {} exhausted: this controller's running calls hold its share of it ({}; waited until the hook's timeout)",
                format_bytes(self.limits.memory_budget),
                format_bytes(u64::from(self.share_units) * UNIT)
            ))),
        }
    }

    /// A permit of `semaphore`, waiting until `deadline` at most (a wait is counted).
    async fn wait(
        &self,
        controller: &str,
        what: &str,
        semaphore: Arc<Semaphore>,
        deadline: Instant,
    ) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = semaphore.clone().try_acquire_owned() {
            return Some(permit);
        }
        if let Some(waits) = &self.waits {
            waits.with_label_values(&[controller, what]).inc();
        }
        match tokio::time::timeout_at(deadline.into(), semaphore.acquire_owned()).await {
            Ok(Ok(permit)) => Some(permit),
            _ => None,
        }
    }

    /// The share of `controller`: kept while a call holds or waits for it, so the map holds
    /// only controllers with calls (dead entries are swept as new ones come).
    fn share(&self, controller: &str) -> Arc<Share> {
        let mut shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(share) = shares.get(controller).and_then(Weak::upgrade) {
            return share;
        }
        shares.retain(|_, share| share.strong_count() > 0);
        let share = Arc::new(Share {
            calls: Arc::new(Semaphore::new(self.limits.per_controller)),
            memory: Arc::new(Semaphore::new(self.share_units as usize)),
        });
        shares.insert(controller.to_owned(), Arc::downgrade(&share));
        share
    }

    /// Controllers with a share in use (for tests).
    #[cfg(test)]
    fn controllers(&self) -> usize {
        let shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        shares.values().filter(|s| s.strong_count() > 0).count()
    }
}

/// How long `deadline` is from now (zero once passed).
pub(crate) fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(per_controller: usize, process: usize) -> Arc<Admission> {
        Arc::new(Admission::new(
            InProcessLimits {
                per_controller,
                process,
                memory_budget: 1 << 30,
            },
            None,
            None,
        ))
    }

    /// Controller A holds its whole share (its hooks loop until their timeout) and has more
    /// calls waiting; controller B's calls are admitted at once all the same.
    #[tokio::test]
    async fn a_saturated_controller_does_not_delay_another() {
        let admission = admission(2, 8);
        let far = Instant::now() + Duration::from_secs(60);
        let a1 = admission.admit("A", 1 << 20, far).await.unwrap();
        let _a2 = admission.admit("A", 1 << 20, far).await.unwrap();
        let queued: Vec<_> = (0..6)
            .map(|_| {
                let admission = admission.clone();
                tokio::spawn(async move { admission.admit("A", 1 << 20, far).await.map(|_| ()) })
            })
            .collect();
        tokio::task::yield_now().await;
        let now = Instant::now();
        for _ in 0..2 {
            let b = admission.admit("B", 1 << 20, now).await;
            assert!(b.is_ok(), "B must not wait behind A");
        }
        // A's own extra call waits for A's share and times out saying so.
        let soon = Instant::now() + Duration::from_millis(30);
        match admission.admit("A", 1 << 20, soon).await {
            Err(Refused::Share(message)) => {
                assert!(message.contains("controller's share"), "{message}")
            }
            other => panic!("expected a share timeout, got {:?}", other.err()),
        }
        drop(a1);
        for call in queued {
            call.abort();
        }
    }

    /// Controller A's calls hold all the memory a controller may (half the budget) and more
    /// wait; controller B's calls get the other half at once.
    #[tokio::test]
    async fn a_controller_holds_at_most_half_the_memory_budget() {
        let admission = Arc::new(Admission::new(
            InProcessLimits {
                per_controller: 8,
                process: 16,
                memory_budget: 1 << 30,
            },
            None,
            None,
        ));
        let far = Instant::now() + Duration::from_secs(60);
        let _a1 = admission.admit("A", 256 << 20, far).await.unwrap();
        let _a2 = admission.admit("A", 256 << 20, far).await.unwrap();
        let soon = Instant::now() + Duration::from_millis(30);
        match admission.admit("A", 256 << 20, soon).await {
            Err(Refused::Memory(message)) => assert!(
                message.contains("memory budget 1Gi exhausted: this controller's running calls hold its share of it (512Mi"),
                "{message}"
            ),
            other => panic!("expected a share refusal, got {:?}", other.err()),
        }
        let now = Instant::now();
        let _b1 = admission.admit("B", 256 << 20, now).await.unwrap();
        let _b2 = admission.admit("B", 256 << 20, now).await.unwrap();
        // A call larger than a share runs when its controller has nothing else running.
        let _c = admission.admit("C", 0, now).await.unwrap();
        let huge = Admission::new(InProcessLimits::default(), None, None);
        let _big = huge.admit("D", 768 << 20, now).await.unwrap();
    }

    #[tokio::test]
    async fn shares_of_controllers_without_calls_are_dropped() {
        let admission = admission(1, 8);
        let far = Instant::now() + Duration::from_secs(60);
        let a = admission.admit("A", 0, far).await.unwrap();
        assert_eq!(admission.controllers(), 1);
        drop(a);
        let _b = admission.admit("B", 0, far).await.unwrap();
        assert_eq!(admission.controllers(), 1);
        assert_eq!(admission.shares.lock().unwrap().len(), 1, "A's entry swept");
    }

    #[tokio::test]
    async fn the_memory_budget_is_checked_after_the_share() {
        let admission = Admission::new(
            InProcessLimits {
                per_controller: 4,
                process: 8,
                memory_budget: 64 << 20,
            },
            None,
            None,
        );
        let far = Instant::now() + Duration::from_secs(60);
        match admission.admit("A", 128 << 20, far).await {
            Err(Refused::Memory(message)) => {
                assert!(
                    message.contains("memory budget 64Mi exhausted"),
                    "{message}"
                )
            }
            other => panic!("expected a budget error, got {:?}", other.err()),
        }
    }
}
