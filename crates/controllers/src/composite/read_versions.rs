//! The parent versions recent syncs read, so that the watch event of a version a sync has
//! already seen queues nothing.
//!
//! A sync reads the parent through the own-writes overlay: right after our status (or
//! finalizer) write it reads the written version before its watch event arrives. That event
//! then brings the hook nothing new. Keeping only the latest version read is not enough:
//! when the events of the parent's watch lag behind the child events that queued it (a
//! loaded server, or another core handling the child watch first), a later sync has already
//! read a newer version by the time the event of an older own write arrives, and that stale
//! event would cost one more sync — a hook call that depends on the server's timing. So the
//! last few versions read are kept per parent: a parent has at most a couple of own writes
//! whose events are in flight at once (one per sync, and syncs of one key never overlap).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

/// How many versions read are kept per parent.
const KEPT: usize = 4;

/// Recently read versions, per key.
#[derive(Debug)]
pub(crate) struct ReadVersions<K> {
    read: Mutex<HashMap<K, VecDeque<String>>>,
}

impl<K> Default for ReadVersions<K> {
    fn default() -> Self {
        ReadVersions {
            read: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone> ReadVersions<K> {
    fn lock(&self) -> MutexGuard<'_, HashMap<K, VecDeque<String>>> {
        self.read.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A sync of `key` read it at `version`.
    pub(crate) fn record(&self, key: &K, version: Option<&str>) {
        let Some(version) = version else { return };
        let mut read = self.lock();
        let versions = read.entry(key.clone()).or_default();
        if versions.iter().any(|v| v == version) {
            return;
        }
        if versions.len() == KEPT {
            versions.pop_front();
        }
        versions.push_back(version.to_string());
    }

    /// Whether a recent sync of `key` read `version`.
    pub(crate) fn contains(&self, key: &K, version: Option<&str>) -> bool {
        let Some(version) = version else { return false };
        self.lock()
            .get(key)
            .is_some_and(|versions| versions.iter().any(|v| v == version))
    }

    /// Drops what is kept for `key` (the parent is gone).
    pub(crate) fn forget(&self, key: &K) {
        self.lock().remove(key);
    }

    /// Keeps only the keys `keep` answers true for.
    pub(crate) fn retain(&self, keep: impl Fn(&K) -> bool) {
        self.lock().retain(|key, _| keep(key));
    }

    /// Number of keys with versions kept.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_version_read_before_a_newer_one_is_still_known() {
        let read = ReadVersions::default();
        read.record(&"p", Some("10")); // the sync after our first status write
        read.record(&"p", Some("12")); // the sync after our second one
                                       // The first write's event arrives only now: no sync needed for it.
        assert!(read.contains(&"p", Some("10")));
        assert!(read.contains(&"p", Some("12")));
        assert!(!read.contains(&"p", Some("11")));
        assert!(!read.contains(&"q", Some("10")));
    }

    #[test]
    fn only_the_latest_few_versions_are_kept() {
        let read = ReadVersions::default();
        for v in 1..=KEPT + 1 {
            read.record(&"p", Some(&v.to_string()));
        }
        assert!(!read.contains(&"p", Some("1")));
        assert!(read.contains(&"p", Some(&(KEPT + 1).to_string())));
        read.record(&"p", Some("3")); // read again: kept once
        assert_eq!(read.lock()[&"p"].len(), KEPT);
    }

    #[test]
    fn forgotten_and_unversioned_reads_match_nothing() {
        let read = ReadVersions::default();
        read.record(&"p", None);
        assert!(!read.contains(&"p", None));
        read.record(&"p", Some("1"));
        read.forget(&"p");
        assert!(!read.contains(&"p", Some("1")));
        read.record(&"q", Some("1"));
        read.retain(|k| *k != "q");
        assert_eq!(read.len(), 0);
    }
}
