//! What leader election ([`crate::leader`]) and sharding ([`crate::shard`]) share about
//! Leases: the one Lease client ([`LeaseClient`]: every read and write of a Lease, each
//! with the instant its request was sent), one rule for the deadlines of ownership resting
//! on a renewal (counted from that send), one conversion of durations to a Lease's whole
//! seconds, the ways a Lease's spec is held and released, the retry jitter and the
//! stoppable wait. Both bind their deadlines to the same
//! [`metacontroller_workqueue::SyncGate`] (its write fence).

mod client;

pub(crate) use client::{LeaseClient, Release};

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use metacontroller_workqueue::LeaseDeadlines;
use tokio::sync::watch;
use tokio::time::Instant;

/// A duration as a Lease's `leaseDurationSeconds`: whole seconds, at least one (a zero
/// duration would let anyone take the Lease at once).
pub(crate) fn lease_seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// The deadlines of ownership resting on a Lease renewal sent at `sent` (leader election
/// and shard membership alike): no sync starts after the renew deadline, and running ones
/// are abandoned at the fence, a margin before the Lease can expire in any other replica's
/// eyes (the duration written in the Lease, whole seconds). Both count from the *send*:
/// the server, and so every other replica, saw the renewal later, so no other replica can
/// count the Lease as expired before `sent + lease duration`.
pub(crate) fn lease_deadlines(
    sent: Instant,
    lease_duration: Duration,
    renew_deadline: Duration,
) -> LeaseDeadlines {
    let written = Duration::from_secs(lease_seconds(lease_duration).unsigned_abs().into());
    let margin = (written.saturating_sub(renew_deadline) / 2).min(Duration::from_secs(1));
    let fence = sent + written.saturating_sub(margin);
    LeaseDeadlines {
        renew_by: (sent + renew_deadline).min(fence),
        fence,
    }
}

/// A wait between attempts: spread over [period/2, period] so candidates do not retry in
/// lockstep, yet one notices a released Lease within one retry period (client-go jitters
/// upwards, which lets a takeover after a clean shutdown take over 2 s).
pub(crate) fn jitter(period: Duration) -> Duration {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u8(0);
    let fraction = (hasher.finish() % 1000) as f64 / 1000.0;
    period.mul_f64(0.5 + 0.5 * fraction)
}

/// Sleeps `d`; `true` if `stop` turned true (or its sender went) meanwhile.
pub(crate) async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(d) => false,
        changed = stop.wait_for(|s| *s) => { let _ = changed; true }
    };
    stopped || *stop.borrow()
}

/// The spec of a Lease created held by `holder` (or by nobody) for `duration` from `now`.
pub(crate) fn new_spec(holder: Option<&str>, duration: Duration, now: &MicroTime) -> LeaseSpec {
    LeaseSpec {
        holder_identity: holder.map(str::to_string),
        lease_duration_seconds: Some(lease_seconds(duration)),
        acquire_time: Some(now.clone()),
        renew_time: Some(now.clone()),
        lease_transitions: Some(0),
        ..LeaseSpec::default()
    }
}

/// Makes an existing Lease's `spec` say `me` holds it for `duration` from `now`, as
/// client-go's `tryAcquireOrRenew` writes its record: renewed now; when the holder was
/// another (or nobody), acquired now and one more transition. The one way leader election and
/// shard Leases are taken and renewed.
pub(crate) fn hold(spec: &mut LeaseSpec, me: &str, duration: Duration, now: &MicroTime) {
    if spec.holder_identity.as_deref() != Some(me) {
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        spec.acquire_time = Some(now.clone());
        spec.holder_identity = Some(me.to_string());
    }
    spec.lease_duration_seconds = Some(lease_seconds(duration));
    spec.renew_time = Some(now.clone());
}

/// How long a Lease stays valid after its spec last changed: its `leaseDurationSeconds`
/// (none or negative: not at all).
pub(crate) fn lease_validity(spec: &LeaseSpec) -> Duration {
    Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0))
}

/// Whether a Lease another replica holds has expired at `now`, as leader election and
/// sharding both judge it: unchanged for its whole duration since this replica *first saw*
/// it as it is (its own clock; the holder's timestamps are never trusted, clocks skew).
pub(crate) fn expired(first_seen: Instant, valid_for: Duration, now: Instant) -> bool {
    now.saturating_duration_since(first_seen) >= valid_for
}

/// The holder a Lease names (`None`: none, or empty).
pub(crate) fn holder_of(lease: Option<&Lease>) -> Option<&str> {
    lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holding_counts_a_transition_only_when_the_holder_changes() {
        let t = |s: i64| MicroTime(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let mut spec = new_spec(Some("a"), Duration::from_secs(15), &t(1));
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(
            (spec.lease_transitions, spec.lease_duration_seconds),
            (Some(0), Some(15))
        );
        hold(&mut spec, "a", Duration::from_secs(15), &t(3));
        assert_eq!(
            spec.acquire_time,
            Some(t(1)),
            "a renewal keeps the acquire time"
        );
        assert_eq!(
            (spec.renew_time.clone(), spec.lease_transitions),
            (Some(t(3)), Some(0))
        );
        hold(&mut spec, "b", Duration::from_secs(15), &t(5));
        assert_eq!(
            (spec.acquire_time.clone(), spec.lease_transitions),
            (Some(t(5)), Some(1))
        );
        spec.holder_identity = None;
        hold(&mut spec, "a", Duration::from_secs(15), &t(7));
        assert_eq!(
            spec.lease_transitions,
            Some(2),
            "a released Lease taken: client-go counts it"
        );
    }

    #[test]
    fn a_lease_expires_its_duration_after_it_was_first_seen_unchanged() {
        let seen = Instant::now();
        let spec = LeaseSpec {
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        };
        let valid = lease_validity(&spec);
        assert_eq!(valid, Duration::from_secs(15));
        assert!(!expired(seen, valid, seen + Duration::from_millis(14_999)));
        assert!(expired(seen, valid, seen + Duration::from_secs(15)));
        // Seen "in the future" (an older observation read later): not expired.
        assert!(!expired(seen + Duration::from_secs(1), valid, seen));
        let broken = LeaseSpec {
            lease_duration_seconds: Some(-3),
            ..LeaseSpec::default()
        };
        assert_eq!(lease_validity(&broken), Duration::ZERO);
        assert!(expired(seen, lease_validity(&broken), seen));
    }

    #[test]
    fn jitter_stays_within_one_retry_period() {
        for _ in 0..100 {
            let d = jitter(Duration::from_secs(2));
            assert!(d >= Duration::from_secs(1) && d <= Duration::from_secs(2));
        }
    }

    #[test]
    fn a_lease_is_at_least_one_second_long_and_deadlines_follow_what_is_written() {
        assert_eq!(lease_seconds(Duration::from_millis(400)), 1);
        assert_eq!(lease_seconds(Duration::from_millis(15_900)), 15);
        let sent = Instant::now();
        // Written as 1 s: the fence is inside that second, not at the 400 ms asked for.
        let short = lease_deadlines(sent, Duration::from_millis(400), Duration::from_millis(300));
        assert!(short.fence > sent && short.fence <= sent + Duration::from_secs(1));
        // controller-runtime's timings: 15 s written, renew by 10 s, fence 1 s before expiry.
        let d = lease_deadlines(sent, Duration::from_secs(15), Duration::from_secs(10));
        assert_eq!(d.renew_by, sent + Duration::from_secs(10));
        assert_eq!(d.fence, sent + Duration::from_secs(14));
    }
}
