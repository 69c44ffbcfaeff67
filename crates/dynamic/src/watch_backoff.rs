//! How long a watch waits before it reconnects after an error.
//!
//! kube-runtime's default (client-go's reflector: 0.8 s doubling to 30 s, reset after 2 min)
//! is tuned for thousands of kubelets' reflectors sparing one API server. A controller runs
//! one watch per resource type, a handful per process, and during an API server outage each
//! failed attempt doubles its delay: after a 15 s outage the next attempt could be 30 s away,
//! and the `410 Gone` that a restarted server answers to the first watch (its watch cache
//! starts afresh) cost another doubled delay before the relist. Events made meanwhile wait.
//!
//! [`WatchBackoff`] keeps the doubling but caps it at [`WatchBackoff::MAX`], and a `410 Gone`
//! (the relist kube's watcher does next is the cure, not a retry of what failed) waits only
//! the base delay. A server that stays down sees one attempt per watch every couple of
//! seconds: a refused connection costs it nothing.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::watcher;

/// Doubling delays from [`WatchBackoff::BASE`] to [`WatchBackoff::MAX`], with jitter.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    failures: u32,
    random: RandomState,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            failures: 0,
            random: RandomState::new(),
        }
    }
}

impl WatchBackoff {
    /// The first delay.
    pub const BASE: Duration = Duration::from_millis(200);
    /// The longest delay (before jitter).
    pub const MAX: Duration = Duration::from_secs(2);

    /// The delay before the next attempt after `error`.
    pub fn next_delay(&mut self, error: &watcher::Error) -> Duration {
        if is_gone(error) {
            self.failures = 0;
        }
        let factor = 2u32.saturating_pow(self.failures.min(16));
        self.failures = self.failures.saturating_add(1);
        let delay = Self::BASE.saturating_mul(factor).min(Self::MAX);
        // 75-125% of the delay, so the watches of many replicas do not reconnect in step.
        let mut hasher = self.random.build_hasher();
        hasher.write_u32(self.failures);
        let permille = 750 + hasher.finish() % 501;
        delay.mul_f64(permille as f64 / 1000.0)
    }

    /// A successful event: the next error starts from the base delay again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Whether `error` is the API server's `410 Gone` (the resourceVersion is too old).
fn is_gone(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// `stream` (a kube watcher) with `WatchBackoff` between an error and the next attempt.
pub fn with_backoff<S, T>(stream: S) -> impl Stream<Item = Result<T, watcher::Error>> + Send
where
    S: Stream<Item = Result<T, watcher::Error>> + Send + Unpin,
    T: Send,
{
    futures::stream::unfold(
        (stream, WatchBackoff::default(), None::<Duration>),
        |(mut stream, mut backoff, wait)| async move {
            if let Some(wait) = wait {
                tokio::time::sleep(wait).await;
            }
            let item = stream.next().await?;
            let wait = match &item {
                Ok(_) => {
                    backoff.reset();
                    None
                }
                Err(error) => Some(backoff.next_delay(error)),
            };
            Some((item, (stream, backoff, wait)))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connect_error() -> watcher::Error {
        watcher::Error::NoResourceVersion
    }

    fn gone() -> watcher::Error {
        watcher::Error::WatchError(Box::new(kube::core::Status {
            code: 410,
            ..Default::default()
        }))
    }

    #[test]
    fn delays_double_up_to_the_cap_with_jitter() {
        let mut b = WatchBackoff::default();
        let delays: Vec<Duration> = (0..8).map(|_| b.next_delay(&connect_error())).collect();
        assert!(delays[0] >= Duration::from_millis(150) && delays[0] <= Duration::from_millis(250));
        assert!(delays[1] >= Duration::from_millis(300) && delays[1] <= Duration::from_millis(500));
        for d in &delays[4..] {
            assert!(
                *d >= Duration::from_millis(1500) && *d <= Duration::from_millis(2500),
                "{d:?}"
            );
        }
    }

    #[test]
    fn gone_and_success_start_over() {
        let mut b = WatchBackoff::default();
        for _ in 0..6 {
            b.next_delay(&connect_error());
        }
        assert!(b.next_delay(&gone()) <= Duration::from_millis(250));
        for _ in 0..6 {
            b.next_delay(&connect_error());
        }
        b.reset();
        assert!(b.next_delay(&connect_error()) <= Duration::from_millis(250));
    }
}
