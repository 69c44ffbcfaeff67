//! The process-wide memory budget of in-process hooks: a call reserves its memory limit
//! (WebAssembly `memoryLimit`, Jsonnet's reservation) before it runs and gives it back when it
//! ends, so the memory all running hooks may take together stays under the budget. A call
//! that does not fit waits, until its deadline, then fails naming the budget; a call whose
//! limit alone exceeds the budget fails at once.

use std::sync::Arc;
use std::time::Instant;

use prometheus::{IntCounterVec, IntGauge};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default budget (`--inprocess-hook-memory-budget`): 1 GiB.
pub const DEFAULT_MEMORY_BUDGET: u64 = 1 << 30;

/// Reservations are counted in KiB: a tokio semaphore takes at most `u32::MAX` permits at
/// once, and a limit may be 4 GiB.
pub(super) const UNIT: u64 = 1024;

/// Metrics of the budget (see [`crate::metrics::InProcessMetrics`]).
#[derive(Clone)]
pub(crate) struct BudgetMetrics {
    /// Bytes reserved by running calls.
    pub(crate) reserved: IntGauge,
    /// Calls that had to wait (`waited`), failed after waiting (`exhausted`) or were refused
    /// at once (`too_large`).
    pub(crate) outcomes: IntCounterVec,
}

/// The memory budget shared by every in-process hook call of the process.
pub(crate) struct MemoryBudget {
    total: u64,
    units: Arc<Semaphore>,
    metrics: Option<BudgetMetrics>,
}

/// Memory reserved by one call, given back when dropped.
pub(crate) struct Reservation {
    _permit: Option<OwnedSemaphorePermit>,
    bytes: u64,
    metrics: Option<BudgetMetrics>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(m) = &self.metrics {
            m.reserved.sub(self.bytes as i64);
        }
    }
}

impl MemoryBudget {
    /// A budget of `total` bytes (at least one unit).
    pub(crate) fn new(total: u64, metrics: Option<BudgetMetrics>) -> Self {
        let units = units(total).max(1).min(Semaphore::MAX_PERMITS as u64) as usize;
        Self {
            total,
            units: Arc::new(Semaphore::new(units)),
            metrics,
        }
    }

    /// Reserves `bytes` for a call, waiting until `deadline` at most.
    ///
    /// # Errors
    ///
    /// The message (naming the budget) when `bytes` alone exceeds the budget, or when the
    /// budget had no room for them before `deadline`.
    pub(crate) async fn reserve(
        &self,
        bytes: u64,
        deadline: Instant,
    ) -> Result<Reservation, String> {
        let budget = format_bytes(self.total);
        let wanted = units(bytes);
        if bytes > self.total || wanted > u64::from(u32::MAX) {
            self.count("too_large");
            return Err(format!(
                "in-process hook memory budget {budget} exhausted: this call's memory limit {} alone exceeds it (raise --inprocess-hook-memory-budget or lower the hook's memoryLimit)",
                format_bytes(bytes)
            ));
        }
        let permit = match self.units.clone().try_acquire_many_owned(wanted as u32) {
            Ok(permit) => permit,
            Err(_) => {
                self.count("waited");
                let acquire = self.units.clone().acquire_many_owned(wanted as u32);
                match tokio::time::timeout_at(deadline.into(), acquire).await {
                    Ok(Ok(permit)) => permit,
                    _ => {
                        self.count("exhausted");
                        let free = self.units.available_permits() as u64 * UNIT;
                        return Err(format!(
                            "in-process hook memory budget {budget} exhausted: this call needs {}, other calls hold {} (waited until the hook's timeout)",
                            format_bytes(bytes),
                            format_bytes(self.total.saturating_sub(free))
                        ));
                    }
                }
            }
        };
        if let Some(m) = &self.metrics {
            m.reserved.add(bytes as i64);
        }
        Ok(Reservation {
            _permit: Some(permit),
            bytes,
            metrics: self.metrics.clone(),
        })
    }

    fn count(&self, outcome: &str) {
        if let Some(m) = &self.metrics {
            m.outcomes.with_label_values(&[outcome]).inc();
        }
    }
}

/// `bytes` in reservation units, rounded up.
pub(super) fn units(bytes: u64) -> u64 {
    bytes.div_ceil(UNIT)
}

/// `bytes` as a Kubernetes quantity (`1Gi`, `256Mi`), as every hook limit is printed.
pub fn format_bytes(bytes: u64) -> String {
    crate::quantity::quantity(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn quantities_read_like_kubernetes() {
        assert_eq!(format_bytes(1 << 30), "1Gi");
        assert_eq!(format_bytes(256 << 20), "256Mi");
        assert_eq!(format_bytes(1536 << 20), "1536Mi");
        assert_eq!(format_bytes(1000), "1000");
    }

    #[tokio::test]
    async fn a_call_over_the_whole_budget_fails_at_once() {
        let budget = MemoryBudget::new(256 << 20, None);
        let far = Instant::now() + Duration::from_secs(60);
        let err = budget.reserve(512 << 20, far).await.err().unwrap();
        assert!(err.starts_with("in-process hook memory budget 256Mi exhausted: this call's memory limit 512Mi alone exceeds it"), "{err}");
    }

    #[tokio::test]
    async fn calls_wait_for_room_until_their_deadline() {
        let budget = Arc::new(MemoryBudget::new(128 << 20, None));
        let far = Instant::now() + Duration::from_secs(60);
        let first = budget.reserve(64 << 20, far).await.unwrap();
        let _second = budget.reserve(64 << 20, far).await.unwrap();
        let soon = Instant::now() + Duration::from_millis(50);
        let err = budget.reserve(64 << 20, soon).await.err().unwrap();
        assert!(
            err.contains("budget 128Mi exhausted: this call needs 64Mi, other calls hold 128Mi"),
            "{err}"
        );
        let waiting = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(64 << 20, far).await.map(|_| ()) })
        };
        drop(first);
        waiting.await.unwrap().unwrap();
    }
}
