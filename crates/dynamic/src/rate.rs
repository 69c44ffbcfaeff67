//! Token-bucket rate limiting, one bucket for every use: the API client's request pacing
//! (`--client-go-qps` / `--client-go-burst`, a tower layer in the binary that waits for
//! [`TokenBucket::try_take`]'s delay), the Event recorder's budgets (`--events-qps` /
//! `--events-burst`: it defers a write until [`TokenBucket::try_take`] allows it), and a
//! per-key limiter that rejects the excess ([`KeyedRateLimiter`]).
//!
//! A bucket holds at most `burst` tokens, starts full and refills at `qps` tokens per second.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// Invalid limiter settings.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RateError {
    /// qps is NaN, infinite or negative.
    #[error("qps must be a finite number >= 0, got {0}")]
    InvalidQps(f64),
    /// burst is zero while a rate is set (nothing could ever pass).
    #[error("burst must be at least 1 when qps > 0")]
    ZeroBurst,
}

/// One token bucket.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket refilling at `qps` (finite, > 0) up to `burst` (>= 1) tokens.
    pub fn new(qps: f64, burst: u32) -> Result<Self, RateError> {
        if !validate(qps, burst)? {
            return Err(RateError::InvalidQps(qps));
        }
        Ok(TokenBucket::full(qps, burst, Instant::now()))
    }

    /// A full bucket. Callers validate `qps > 0` and `burst >= 1`.
    fn full(qps: f64, burst: u32, now: Instant) -> Self {
        TokenBucket {
            qps,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
    }

    /// Takes a token if one is available; otherwise says how long until one is.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            // Saturates rather than panics for a rate too small to express.
            Err(Duration::try_from_secs_f64((1.0 - self.tokens) / self.qps)
                .unwrap_or(Duration::MAX))
        }
    }

    fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= self.burst
    }
}

fn validate(qps: f64, burst: u32) -> Result<bool, RateError> {
    if !qps.is_finite() || qps < 0.0 {
        return Err(RateError::InvalidQps(qps));
    }
    if qps > 0.0 && burst == 0 {
        return Err(RateError::ZeroBurst);
    }
    Ok(qps > 0.0)
}

/// Per-key buckets (e.g. per involved object for Events); excess is rejected.
#[derive(Debug)]
pub struct KeyedRateLimiter<K> {
    qps: f64,
    burst: u32,
    max_keys: usize,
    buckets: Mutex<HashMap<K, TokenBucket>>,
}

impl<K: Eq + Hash + Clone> KeyedRateLimiter<K> {
    /// `qps == 0` means unlimited. At most `max_keys` buckets are kept; beyond that, full
    /// buckets (indistinguishable from new ones) are dropped first, then the least recently
    /// used.
    pub fn new(qps: f64, burst: u32, max_keys: usize) -> Result<Self, RateError> {
        validate(qps, burst)?;
        Ok(KeyedRateLimiter {
            qps,
            burst,
            max_keys: max_keys.max(1),
            buckets: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, TokenBucket>> {
        self.buckets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether one more event for `key` may pass now.
    pub fn try_acquire(&self, key: &K) -> bool {
        if self.qps == 0.0 {
            return true;
        }
        let now = Instant::now();
        let mut buckets = self.lock();
        if !buckets.contains_key(key) && buckets.len() >= self.max_keys {
            Self::prune(&mut buckets, self.max_keys, now);
        }
        buckets
            .entry(key.clone())
            .or_insert_with(|| TokenBucket::full(self.qps, self.burst, now))
            .try_take(now)
            .is_ok()
    }

    /// Shrinks to 3/4 of the capacity so pruning is amortised.
    fn prune(buckets: &mut HashMap<K, TokenBucket>, max_keys: usize, now: Instant) {
        buckets.retain(|_, b| !b.is_full(now));
        let target = max_keys - max_keys / 4 - 1;
        if buckets.len() > target {
            let mut by_age: Vec<(Instant, K)> =
                buckets.iter().map(|(k, b)| (b.last, k.clone())).collect();
            by_age.sort_by_key(|(t, _)| *t);
            for (_, k) in by_age.into_iter().take(buckets.len() - target) {
                buckets.remove(&k);
            }
        }
    }
    /// Number of keys tracked.
    #[cfg(test)]
    pub(crate) fn tracked_keys(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_validated() {
        assert!(TokenBucket::new(f64::NAN, 1).is_err());
        assert!(TokenBucket::new(f64::INFINITY, 1).is_err());
        assert!(TokenBucket::new(-1.0, 1).is_err());
        assert!(TokenBucket::new(0.0, 1).is_err());
        assert_eq!(TokenBucket::new(5.0, 0).unwrap_err(), RateError::ZeroBurst);
        assert!(KeyedRateLimiter::<u8>::new(f64::INFINITY, 1, 10).is_err());
        assert!(
            KeyedRateLimiter::<u8>::new(0.0, 0, 10).is_ok(),
            "0 = unlimited"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn burst_then_one_token_per_period() {
        let mut bucket = TokenBucket::new(10.0, 3).unwrap();
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(bucket.try_take(now), Ok(()));
        }
        assert_eq!(bucket.try_take(now), Err(Duration::from_millis(100)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(bucket.try_take(Instant::now()), Ok(()));
    }

    #[test]
    fn a_tiny_rate_saturates_the_wait_instead_of_panicking() {
        let mut bucket = TokenBucket::new(f64::MIN_POSITIVE, 1).unwrap();
        let now = Instant::now();
        assert_eq!(bucket.try_take(now), Ok(()));
        assert_eq!(bucket.try_take(now), Err(Duration::MAX));
    }

    #[tokio::test(start_paused = true)]
    async fn events_per_object_are_limited_independently() {
        // Upstream defaults: 25 burst, one event per 5 minutes.
        let l = KeyedRateLimiter::new(1.0 / 300.0, 25, 4096).unwrap();
        for _ in 0..25 {
            assert!(l.try_acquire(&"a"));
        }
        assert!(!l.try_acquire(&"a"));
        assert!(l.try_acquire(&"b"));
        tokio::time::sleep(Duration::from_secs(299)).await;
        assert!(!l.try_acquire(&"a"));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(l.try_acquire(&"a"));
        assert!(!l.try_acquire(&"a"));
    }

    #[tokio::test(start_paused = true)]
    async fn tracked_keys_are_bounded() {
        let l = KeyedRateLimiter::new(1.0, 2, 100).unwrap();
        for i in 0..1_000u32 {
            l.try_acquire(&i);
            l.try_acquire(&i);
        }
        assert!(l.tracked_keys() <= 100);
        // The most recent key kept its (empty) bucket.
        assert!(!l.try_acquire(&999));
    }
}
