//! ETag cache of hook responses (RFC 7232): per hook, the last 200 response and its
//! `ETag` for each parent, so the next call can send `If-None-Match` and reuse the body
//! on 304 (or 412, which upstream's docs also allow).
//!
//! Defaults follow upstream: without `cacheTimeoutSeconds` (or with a value ≤ 0) entries
//! never expire; without `cacheCleanupSeconds` (≤ 0) there is no periodic sweep. Expired
//! entries are never used even before the sweep removes them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use metacontroller_api::hook::WebhookEtagConfig;

/// Effective ETag settings of a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EtagSettings {
    pub timeout: Option<Duration>,
    pub cleanup: Option<Duration>,
}

impl EtagSettings {
    /// `None` when the cache is not enabled.
    pub(crate) fn from_config(config: Option<&WebhookEtagConfig>) -> Option<Self> {
        let config = config?;
        if config.enabled != Some(true) {
            return None;
        }
        let seconds = |v: Option<i32>| v.filter(|s| *s > 0).map(|s| Duration::from_secs(s as u64));
        Some(Self {
            timeout: seconds(config.cache_timeout_seconds),
            cleanup: seconds(config.cache_cleanup_seconds),
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) struct CachedResponse {
    pub etag: String,
    pub body: Bytes,
    expires: Option<Instant>,
}

/// The cache of one hook. Keys are `(hook URL, parent key)`, so a hook that moves to a
/// new URL never gets an old server's body.
#[derive(Debug)]
pub(crate) struct EtagCache {
    settings: EtagSettings,
    entries: Mutex<HashMap<(String, String), CachedResponse>>,
}

impl EtagCache {
    /// A new cache; with a cleanup interval and inside a Tokio runtime, a sweeper task
    /// runs until the cache is dropped.
    pub(crate) fn new(settings: EtagSettings) -> Arc<Self> {
        let cache = Arc::new(Self {
            settings,
            entries: Mutex::new(HashMap::new()),
        });
        if let (Some(interval), Ok(handle)) =
            (settings.cleanup, tokio::runtime::Handle::try_current())
        {
            handle.spawn(sweep_loop(Arc::downgrade(&cache), interval));
        }
        cache
    }

    pub(crate) fn settings(&self) -> EtagSettings {
        self.settings
    }

    /// The cached response, if present and not expired.
    pub(crate) fn get(&self, url: &str, parent: &str) -> Option<CachedResponse> {
        let now = Instant::now();
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(&(url.to_owned(), parent.to_owned()))
            .filter(|entry| entry.expires.is_none_or(|at| at > now))
            .cloned()
    }

    pub(crate) fn put(&self, url: &str, parent: &str, etag: String, body: Bytes) {
        let expires = self.settings.timeout.map(|t| Instant::now() + t);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.insert(
            (url.to_owned(), parent.to_owned()),
            CachedResponse {
                etag,
                body,
                expires,
            },
        );
    }

    pub(crate) fn remove(&self, url: &str, parent: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.remove(&(url.to_owned(), parent.to_owned()));
    }

    /// Drops every entry of this parent (all URLs).
    pub(crate) fn forget_parent(&self, parent: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|(_, p), _| p != parent);
    }

    /// Keeps only the entries whose parent `keep` accepts.
    pub(crate) fn retain_parents(&self, keep: &dyn Fn(&str) -> bool) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|(_, p), _| keep(p));
    }

    /// Removes expired entries; returns how many remain.
    pub(crate) fn sweep(&self) -> usize {
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|_, entry| entry.expires.is_none_or(|at| at > now));
        entries.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

async fn sweep_loop(cache: Weak<EtagCache>, interval: Duration) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(cache) = cache.upgrade() else {
            return;
        };
        let remaining = cache.sweep();
        tracing::trace!(remaining, "swept ETag cache");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(
        enabled: Option<bool>,
        timeout: Option<i32>,
        cleanup: Option<i32>,
    ) -> WebhookEtagConfig {
        WebhookEtagConfig {
            enabled,
            cache_timeout_seconds: timeout,
            cache_cleanup_seconds: cleanup,
        }
    }

    #[test]
    fn settings_follow_upstream_defaults() {
        assert_eq!(EtagSettings::from_config(None), None);
        assert_eq!(
            EtagSettings::from_config(Some(&config(None, Some(5), None))),
            None
        );
        assert_eq!(
            EtagSettings::from_config(Some(&config(Some(false), None, None))),
            None
        );
        assert_eq!(
            EtagSettings::from_config(Some(&config(Some(true), None, Some(0)))),
            Some(EtagSettings {
                timeout: None,
                cleanup: None
            })
        );
        assert_eq!(
            EtagSettings::from_config(Some(&config(Some(true), Some(60), Some(300)))),
            Some(EtagSettings {
                timeout: Some(Duration::from_secs(60)),
                cleanup: Some(Duration::from_secs(300))
            })
        );
    }

    #[test]
    fn entries_without_timeout_never_expire() {
        let cache = EtagCache::new(EtagSettings {
            timeout: None,
            cleanup: None,
        });
        cache.put("u", "p", "\"1\"".into(), Bytes::from_static(b"{}"));
        assert_eq!(cache.sweep(), 1);
        assert_eq!(cache.get("u", "p").unwrap().etag, "\"1\"");
        assert!(cache.get("u", "other").is_none());
        assert!(cache.get("other-url", "p").is_none());
        cache.forget_parent("p");
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn expired_entries_are_not_served_and_are_swept() {
        let cache = EtagCache::new(EtagSettings {
            timeout: Some(Duration::from_millis(1)),
            cleanup: None,
        });
        cache.put("u", "p", "\"1\"".into(), Bytes::from_static(b"{}"));
        std::thread::sleep(Duration::from_millis(5));
        assert!(cache.get("u", "p").is_none());
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.sweep(), 0);
    }
}
