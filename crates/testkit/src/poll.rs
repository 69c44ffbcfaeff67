//! Polling with a deadline, and names that never collide between tests or runs.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long [`eventually`] waits on the embedded API server. Generous because CI machines are
/// small and shared.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`eventually`] waits on a real cluster, whose own controllers set the pace of some
/// steps: kube-controller-manager's garbage collector watches a newly created CRD's resource
/// only after its next discovery resync (every 30 s), so a cascading delete of a test's fresh
/// parent kind can take longer than [`DEFAULT_TIMEOUT`].
pub const REAL_CLUSTER_TIMEOUT: Duration = Duration::from_secs(90);

/// Polls `check` every 20 ms until it returns true; panics naming `what` after
/// [`DEFAULT_TIMEOUT`] ([`REAL_CLUSTER_TIMEOUT`] on a real cluster).
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let timeout = if crate::real_cluster_requested() {
        REAL_CLUSTER_TIMEOUT
    } else {
        DEFAULT_TIMEOUT
    };
    eventually_within(what, timeout, check).await
}

/// [`eventually`] with an explicit deadline.
pub async fn eventually_within<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `prefix-<suffix>`: a DNS-label-safe name unique within this process and, with high
/// probability, across runs against the same real cluster.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let salt = (u64::from(std::process::id()) << 20) ^ u64::from(nanos) ^ (n << 8);
    format!("{prefix}-{n}-{:x}", salt & 0xff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_differ_and_are_dns_labels() {
        let a = unique_name("t");
        let b = unique_name("t");
        assert_ne!(a, b);
        for name in [a, b] {
            assert!(name.len() <= 63);
            assert!(name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
        }
    }

    #[tokio::test]
    #[should_panic(expected = "timed out")]
    async fn eventually_panics_at_the_deadline() {
        eventually_within("never", Duration::from_millis(50), || async { false }).await;
    }
}
