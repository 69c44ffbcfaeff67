//! How long a watch waits before it reconnects after an error.
//!
//! Delays double from [`WatchBackoff::BASE`] to [`WatchBackoff::MAX`] with jitter, as
//! kube-runtime's and client-go's reflectors do, and start over only once the watch has been
//! stable for [`WatchBackoff::STABLE`] (an error after that long counts as the first): a
//! watch that connects and fails at once keeps backing off instead of reconnecting every
//! 0.2 s. A `410 Gone` (what a restarted kube-apiserver answers to the first watch; the relist
//! kube's watcher does next is the cure, not a retry of what failed) waits only the base delay.
//!
//! Long delays would make an API server outage last longer for the controller than for the
//! server. So while watches wait, one [`ReconnectProbe`] per client asks the server's
//! `/readyz` every [`ReconnectProbe::PERIOD`]; once it answers after having failed to, every
//! waiting watch reconnects at once. During an outage a process thus makes one cheap request
//! per period, not one reconnect per watch (one per namespace in a namespaced install), and
//! recovers within about a period of the server answering. An error that is not an outage
//! (the probe answers at once: a refused list, a deleted resource) waits its full delay.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tokio::time::Instant;

/// Doubling delays from [`WatchBackoff::BASE`] to [`WatchBackoff::MAX`], with jitter.
#[derive(Debug, Clone)]
pub(crate) struct WatchBackoff {
    failures: u32,
    last_error: Option<Instant>,
    random: RandomState,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            failures: 0,
            last_error: None,
            random: RandomState::new(),
        }
    }
}

impl WatchBackoff {
    /// The first delay.
    pub(crate) const BASE: Duration = Duration::from_millis(200);
    /// The longest delay (before jitter).
    pub(crate) const MAX: Duration = Duration::from_secs(30);
    /// An error this long after the previous one starts the delays over.
    pub(crate) const STABLE: Duration = Duration::from_secs(60);

    /// The delay before the next attempt after `error`, which happened at `now`.
    pub(crate) fn next_delay(&mut self, error: &watcher::Error, now: Instant) -> Duration {
        let stable = self
            .last_error
            .is_none_or(|last| now.saturating_duration_since(last) >= Self::STABLE);
        if stable {
            self.failures = 0;
        }
        self.last_error = Some(now);
        let delay = if is_gone(error) {
            Self::BASE
        } else {
            let factor = 2u32.saturating_pow(self.failures.min(16));
            Self::BASE.saturating_mul(factor).min(Self::MAX)
        };
        self.failures = self.failures.saturating_add(1);
        // 75-125% of the delay, so the watches of many replicas do not reconnect in step.
        let mut hasher = self.random.build_hasher();
        hasher.write_u32(self.failures);
        let permille = 750 + hasher.finish() % 501;
        delay.mul_f64(permille as f64 / 1000.0)
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

/// Cuts the waits of backing-off watches short once the API server answers again after an
/// outage (see the module docs). Cheap to clone; clones share one probe.
#[derive(Clone)]
pub struct ReconnectProbe {
    inner: Arc<ProbeInner>,
}

struct ProbeInner {
    client: kube::Client,
    /// Bumped each time the server answers after the probe saw it fail.
    recovered: tokio::sync::watch::Sender<u64>,
    probing: AtomicBool,
}

impl std::fmt::Debug for ReconnectProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconnectProbe").finish_non_exhaustive()
    }
}

/// Clears `probing` when the probe task ends, however it ends (a panic included), so a later
/// wait starts a new one.
struct ProbingFlag(Arc<ProbeInner>);

impl Drop for ProbingFlag {
    fn drop(&mut self) {
        self.0.probing.store(false, Ordering::Release);
    }
}

impl ReconnectProbe {
    /// How often the probe asks while the server does not answer.
    pub(crate) const PERIOD: Duration = Duration::from_secs(1);
    /// How long one probe request may take.
    const TIMEOUT: Duration = Duration::from_secs(2);

    /// A probe of the API server `client` talks to.
    pub fn new(client: kube::Client) -> Self {
        ReconnectProbe {
            inner: Arc::new(ProbeInner {
                client,
                recovered: tokio::sync::watch::channel(0).0,
                probing: AtomicBool::new(false),
            }),
        }
    }

    /// Waits `delay`, or until the server answers again after failing to (then a short
    /// jitter, so the watches do not all reconnect in the same millisecond).
    pub(crate) async fn wait(&self, delay: Duration) {
        let mut recovered = self.inner.recovered.subscribe();
        self.start();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            Ok(()) = recovered.changed() => {
                let jitter = RandomState::new().build_hasher().finish() % 200;
                tokio::time::sleep(Duration::from_millis(jitter).min(delay)).await;
            }
        }
    }

    /// Starts the probe task unless one runs. It asks until the server answers, and rings
    /// `recovered` if it failed to first. Not supervised: it ends by itself, and if it
    /// panicked the watches would only wait their full delays.
    fn start(&self) {
        if self.inner.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let flag = ProbingFlag(self.inner.clone());
        tokio::spawn(async move {
            let inner = flag.0.clone();
            let mut failed = false;
            loop {
                if ready(&inner.client).await {
                    break;
                }
                failed = true;
                tokio::time::sleep(Self::PERIOD).await;
            }
            if failed {
                tracing::info!("API server answers again; watches reconnect");
                inner.recovered.send_modify(|n| *n = n.wrapping_add(1));
            }
            drop(flag);
        });
    }
}

/// Whether the server answers `/readyz` in time: a restarted kube-apiserver answers other
/// paths (`/version`) before its watch caches are ready, and a watch sent then fails again.
async fn ready(client: &kube::Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    let answer = tokio::time::timeout(ReconnectProbe::TIMEOUT, client.request_text(request)).await;
    matches!(answer, Ok(Ok(_)))
}

impl ReconnectProbe {
    /// `stream` (a kube watcher) with `WatchBackoff` between an error and the next attempt,
    /// each wait cut short by this probe when the API server comes back.
    pub fn with_backoff<S, T>(
        self,
        stream: S,
    ) -> impl Stream<Item = Result<T, watcher::Error>> + Send
    where
        S: Stream<Item = Result<T, watcher::Error>> + Send + Unpin,
        T: Send,
    {
        futures::stream::unfold(
            (stream, WatchBackoff::default(), None::<Duration>, self),
            |(mut stream, mut backoff, wait, probe)| async move {
                if let Some(wait) = wait {
                    probe.wait(wait).await;
                }
                let item = stream.next().await?;
                let wait = match &item {
                    Ok(_) => None,
                    Err(error) => Some(backoff.next_delay(error, Instant::now())),
                };
                Some((item, (stream, backoff, wait, probe)))
            },
        )
    }
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
        let now = Instant::now();
        let delays: Vec<Duration> = (0..12)
            .map(|_| b.next_delay(&connect_error(), now))
            .collect();
        assert!(delays[0] >= Duration::from_millis(150) && delays[0] <= Duration::from_millis(250));
        assert!(delays[1] >= Duration::from_millis(300) && delays[1] <= Duration::from_millis(500));
        for d in &delays[9..] {
            assert!(
                *d >= Duration::from_millis(22_500) && *d <= Duration::from_millis(37_500),
                "{d:?}"
            );
        }
    }

    #[test]
    fn gone_waits_the_base_delay_and_only_a_stable_watch_starts_over() {
        let mut b = WatchBackoff::default();
        let start = Instant::now();
        for _ in 0..6 {
            b.next_delay(&connect_error(), start);
        }
        assert!(b.next_delay(&gone(), start) <= Duration::from_millis(250));
        // Connected and failed again soon: the delays keep growing.
        let soon = start + Duration::from_secs(5);
        assert!(b.next_delay(&connect_error(), soon) >= Duration::from_secs(9));
        // Stable for a while: the next error is a first one.
        let later = soon + WatchBackoff::STABLE;
        assert!(b.next_delay(&connect_error(), later) <= Duration::from_millis(250));
    }
}
