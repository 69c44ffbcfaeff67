//! The failure policy: what a failed sync asks of the queue, as a value. A pure function of
//! the error ([`error_policy`]), like kube-runtime's `error_policy` returning an `Action`;
//! the queue applies it, nothing here touches the queue. And the resync period a success or
//! failure carries ([`resync_period`]).

use std::fmt::Display;
use std::time::Duration;

use metacontroller_workqueue::{Outcome, Requeue, Retry};

/// How the skeleton treats a failed sync.
pub(crate) trait SyncFailure: Display {
    /// `Some(delay)` when a hook asked to slow down (429): retried after `delay`, no Event.
    fn retry_after(&self) -> Option<Duration>;
    /// A 409 Conflict (stale cache): retried with backoff, no Event.
    fn is_conflict(&self) -> bool;
    /// The API server was unreachable: retried with backoff of at most
    /// [`UNREACHABLE_RETRY_MAX`], so keys that failed during an outage follow soon after it.
    fn is_unreachable(&self) -> bool {
        false
    }
}

/// The longest backoff of a key whose sync failed because the API server was unreachable.
/// Only keys with work pending fail so (an idle parent is not synced while the watches are
/// down), so the retries stay few; the hook is called again on each.
pub(crate) const UNREACHABLE_RETRY_MAX: Duration = Duration::from_secs(2);

/// What the policy decides for one failed sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OnError {
    /// How the queue retries the key.
    pub(crate) retry: Retry,
    /// When the key comes back instead of what the sync asked (`None`: as it asked).
    pub(crate) requeue: Option<Requeue>,
    /// Whether a `SyncError` Warning Event is recorded on the object.
    pub(crate) sync_error_event: bool,
}

/// The failure policy: a hook's 429 comes back after `Retry-After`, without backoff and
/// without an Event (still a failed sync in the metrics); an unreachable API server bounds
/// the backoff; any failure but a 409 Conflict is recorded as a `SyncError` Event.
pub(crate) fn error_policy<E: SyncFailure + ?Sized>(error: &E) -> OnError {
    if let Some(delay) = error.retry_after() {
        return OnError {
            retry: Retry::Throttled,
            requeue: Some(Requeue::After(delay)),
            sync_error_event: false,
        };
    }
    let retry = if error.is_unreachable() {
        Retry::BackoffAtMost(UNREACHABLE_RETRY_MAX)
    } else {
        Retry::Backoff
    };
    OnError {
        retry,
        requeue: None,
        sync_error_event: !error.is_conflict(),
    }
}

impl OnError {
    /// `outcome` (a failed sync's) as the policy decided.
    pub(crate) fn apply<E>(self, outcome: Outcome<E>) -> Outcome<E> {
        let requeue = self.requeue.unwrap_or(outcome.requeue);
        Outcome { requeue, ..outcome }.with_retry(self.retry)
    }
}

/// `resyncPeriodSeconds` as a delay: upstream raises any period below one second (0 and
/// negatives too) to one. `None` without a period.
pub(crate) fn resync_period(seconds: Option<i32>) -> Option<Duration> {
    seconds.map(|s| Duration::from_secs(s.max(1) as u64))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A failure with the traits a test picks (also used by other modules' tests).
    #[derive(Default)]
    pub(crate) struct Failure {
        pub(crate) retry_after: Option<Duration>,
        pub(crate) conflict: bool,
        pub(crate) unreachable: bool,
    }

    impl Display for Failure {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("failure")
        }
    }

    impl SyncFailure for Failure {
        fn retry_after(&self) -> Option<Duration> {
            self.retry_after
        }
        fn is_conflict(&self) -> bool {
            self.conflict
        }
        fn is_unreachable(&self) -> bool {
            self.unreachable
        }
    }

    #[test]
    fn each_kind_of_failure_maps_to_its_retry() {
        let secs = Duration::from_secs;
        let table = [
            (
                "any failure",
                Failure::default(),
                Retry::Backoff,
                None,
                true,
            ),
            (
                "409 Conflict",
                Failure {
                    conflict: true,
                    ..Failure::default()
                },
                Retry::Backoff,
                None,
                false,
            ),
            (
                "API server unreachable",
                Failure {
                    unreachable: true,
                    ..Failure::default()
                },
                Retry::BackoffAtMost(UNREACHABLE_RETRY_MAX),
                None,
                true,
            ),
            (
                "hook 429 with Retry-After: 7",
                Failure {
                    retry_after: Some(secs(7)),
                    ..Failure::default()
                },
                Retry::Throttled,
                Some(Requeue::After(secs(7))),
                false,
            ),
            (
                "429 wins over unreachable",
                Failure {
                    retry_after: Some(secs(1)),
                    unreachable: true,
                    ..Failure::default()
                },
                Retry::Throttled,
                Some(Requeue::After(secs(1))),
                false,
            ),
        ];
        for (name, failure, retry, requeue, event) in table {
            let expected = OnError {
                retry,
                requeue,
                sync_error_event: event,
            };
            assert_eq!(error_policy(&failure), expected, "{name}");
        }
    }

    #[test]
    fn a_throttled_failure_stays_a_failure_and_comes_back_when_asked() {
        let failure = Failure {
            retry_after: Some(Duration::from_secs(3)),
            ..Failure::default()
        };
        // The hook's resyncAfterSeconds gives way to its Retry-After.
        let outcome = Outcome::new(Err(failure), Requeue::After(Duration::from_secs(60)));
        let policy = error_policy(outcome.result.as_ref().unwrap_err());
        let outcome = policy.apply(outcome);
        assert!(outcome.result.is_err(), "counted as a failed sync");
        assert_eq!(outcome.retry, Retry::Throttled);
        assert_eq!(outcome.requeue, Requeue::After(Duration::from_secs(3)));
    }

    #[test]
    fn a_plain_failure_keeps_the_requeue_it_asked_for() {
        let asked = Requeue::After(Duration::from_secs(60));
        let outcome = Outcome::new(Err(Failure::default()), asked);
        let outcome = error_policy(outcome.result.as_ref().unwrap_err()).apply(outcome);
        assert_eq!(outcome.requeue, asked);
        assert_eq!(outcome.retry, Retry::Backoff);
    }

    #[test]
    fn resync_periods_below_a_second_are_one_second() {
        let secs = Duration::from_secs;
        assert_eq!(resync_period(None), None);
        assert_eq!(resync_period(Some(-5)), Some(secs(1)));
        assert_eq!(resync_period(Some(0)), Some(secs(1)));
        assert_eq!(resync_period(Some(30)), Some(secs(30)));
    }
}
