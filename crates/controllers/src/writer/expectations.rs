//! Expectations: which creates and deletes a parent's last sync sent and the informer has not
//! confirmed yet.
//!
//! A sync must not decide from a cache that has not seen its own writes (it would create a
//! child twice or "recreate" one it just deleted). The controller records, per parent key, the
//! child keys it is about to create or delete; informer events confirm them; while any is
//! unconfirmed, [`Expectations::satisfied`] is false and the sync should wait (requeue)
//! instead of acting. Unconfirmed expectations expire after a TTL (5 minutes, as in
//! Kubernetes' controller expectations) so a lost event cannot wedge a parent forever.
//!
//! Protocol:
//! 1. call [`Expectations::expect_creates`] / [`Expectations::expect_deletes`] **before**
//!    sending the writes (an event may arrive before the write call returns);
//! 2. if a write fails, or a create returns AlreadyExists, or a delete returns NotFound, call
//!    [`Expectations::cancel_create`] / [`Expectations::cancel_delete`] for it: no event will
//!    confirm it;
//! 3. informer handlers call [`Expectations::observed_create`] /
//!    [`Expectations::observed_delete`];
//! 4. when the parent is deleted, [`Expectations::forget`] it.
//!
//! [`Expectations::satisfied_given`] also confirms against the cache's current content, which
//! makes the check robust against events that were coalesced or arrived out of order.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// Default time after which unconfirmed expectations are dropped.
pub(crate) const DEFAULT_EXPECTATION_TTL: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
struct Pending<C> {
    creates: HashSet<C>,
    deletes: HashSet<C>,
    since: Instant,
}

impl<C> Pending<C> {
    fn is_empty(&self) -> bool {
        self.creates.is_empty() && self.deletes.is_empty()
    }
}

/// Outstanding create/delete expectations, per parent key `P`, of child keys `C`.
#[derive(Debug)]
pub(crate) struct Expectations<P, C> {
    ttl: Duration,
    pending: Mutex<HashMap<P, Pending<C>>>,
}

impl<P, C> Default for Expectations<P, C>
where
    P: Eq + Hash + Clone,
    C: Eq + Hash + Clone,
{
    /// Expectations with the default 5 minute TTL.
    fn default() -> Self {
        Self::with_ttl(DEFAULT_EXPECTATION_TTL)
    }
}

impl<P, C> Expectations<P, C>
where
    P: Eq + Hash + Clone,
    C: Eq + Hash + Clone,
{
    /// Expectations with a custom TTL.
    pub(crate) fn with_ttl(ttl: Duration) -> Self {
        Expectations {
            ttl,
            pending: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<P, Pending<C>>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn entry<'a>(map: &'a mut HashMap<P, Pending<C>>, parent: &P) -> &'a mut Pending<C> {
        let pending = map.entry(parent.clone()).or_insert_with(|| Pending {
            creates: HashSet::new(),
            deletes: HashSet::new(),
            since: Instant::now(),
        });
        // The TTL counts from the latest batch of writes, like Kubernetes' timestamp reset.
        pending.since = Instant::now();
        pending
    }

    /// Records that creates of `children` are about to be sent for `parent`.
    pub(crate) fn expect_creates(&self, parent: &P, children: impl IntoIterator<Item = C>) {
        let mut map = self.lock();
        let pending = Self::entry(&mut map, parent);
        pending.creates.extend(children);
    }

    /// Records that deletes of `children` are about to be sent for `parent`.
    pub(crate) fn expect_deletes(&self, parent: &P, children: impl IntoIterator<Item = C>) {
        let mut map = self.lock();
        let pending = Self::entry(&mut map, parent);
        pending.deletes.extend(children);
    }

    fn lower(&self, parent: &P, child: &C, create: bool) -> bool {
        let mut map = self.lock();
        let Some(pending) = map.get_mut(parent) else {
            return false;
        };
        let removed = if create {
            pending.creates.remove(child)
        } else {
            pending.deletes.remove(child)
        };
        if pending.is_empty() {
            map.remove(parent);
        }
        removed
    }

    /// The informer saw `child` (of `parent`) appear. Returns whether it was expected.
    pub(crate) fn observed_create(&self, parent: &P, child: &C) -> bool {
        self.lower(parent, child, true)
    }

    /// The informer saw `child` (of `parent`) disappear. Returns whether it was expected.
    pub(crate) fn observed_delete(&self, parent: &P, child: &C) -> bool {
        self.lower(parent, child, false)
    }

    /// The create of `child` will not be confirmed by an event (it failed, or AlreadyExists).
    pub(crate) fn cancel_create(&self, parent: &P, child: &C) {
        self.lower(parent, child, true);
    }

    /// The delete of `child` will not be confirmed by an event (it failed, or NotFound).
    pub(crate) fn cancel_delete(&self, parent: &P, child: &C) {
        self.lower(parent, child, false);
    }

    /// Drops everything recorded for `parent` (the parent is gone).
    pub(crate) fn forget(&self, parent: &P) {
        self.lock().remove(parent);
    }

    /// Keeps only the parents `keep` accepts (those that left this process's caches are
    /// dropped: the events that would confirm their writes never come). Returns how many
    /// were dropped.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&P) -> bool) -> usize {
        let mut map = self.lock();
        let before = map.len();
        map.retain(|parent, _| keep(parent));
        before - map.len()
    }

    /// Parents with unconfirmed writes, expired or not.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no parent has unconfirmed writes.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
    /// Unconfirmed (creates, deletes) of `parent`, expired or not.
    #[cfg(test)]
    pub(crate) fn pending(&self, parent: &P) -> (usize, usize) {
        self.lock()
            .get(parent)
            .map_or((0, 0), |p| (p.creates.len(), p.deletes.len()))
    }

    /// True if `parent` may be synced: nothing unconfirmed, or the expectations expired
    /// (they are then dropped).
    #[cfg(test)]
    pub(crate) fn satisfied(&self, parent: &P) -> bool {
        self.satisfied_given(parent, |_| None)
    }

    /// Like `Expectations::satisfied`, first confirming against the cache: `present(child)`
    /// returns `Some(true)` if the cache holds the child, `Some(false)` if it does not, `None`
    /// if unknown. A present expected create and an absent expected delete are confirmed.
    pub(crate) fn satisfied_given(&self, parent: &P, present: impl Fn(&C) -> Option<bool>) -> bool {
        let mut map = self.lock();
        let Some(pending) = map.get_mut(parent) else {
            return true;
        };
        pending.deletes.retain(|c| present(c) != Some(false));
        // While a delete of the same key is pending, a present object is the old one.
        let Pending {
            creates, deletes, ..
        } = pending;
        creates.retain(|c| deletes.contains(c) || present(c) != Some(true));
        let expired = pending.since.elapsed() >= self.ttl;
        if pending.is_empty() || expired {
            if expired && !pending.is_empty() {
                tracing::debug!(
                    creates = pending.creates.len(),
                    deletes = pending.deletes.len(),
                    "expectations expired without confirmation"
                );
            }
            map.remove(parent);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type E = Expectations<&'static str, &'static str>;

    #[tokio::test(start_paused = true)]
    async fn retain_drops_the_parents_that_left() {
        let e = E::default();
        e.expect_creates(&"stays", ["a"]);
        e.expect_deletes(&"leaves", ["b"]);
        assert_eq!(e.len(), 2);
        assert_eq!(e.retain(|p| *p == "stays"), 1);
        assert_eq!(e.len(), 1);
        assert!(!e.satisfied(&"stays"));
        assert!(e.satisfied(&"leaves"));
    }

    #[tokio::test(start_paused = true)]
    async fn satisfied_only_after_all_writes_observed() {
        let e = E::default();
        assert!(e.satisfied(&"p"));
        e.expect_creates(&"p", ["a", "b"]);
        e.expect_deletes(&"p", ["old"]);
        assert!(!e.satisfied(&"p"));
        assert!(e.observed_create(&"p", &"a"));
        assert!(!e.observed_create(&"p", &"unrelated"));
        assert!(!e.observed_create(&"other", &"b"));
        assert!(!e.satisfied(&"p"));
        e.observed_create(&"p", &"b");
        assert_eq!(e.pending(&"p"), (0, 1));
        // A create event does not confirm a delete of the same name.
        assert!(!e.observed_create(&"p", &"old"));
        assert!(!e.satisfied(&"p"));
        assert!(e.observed_delete(&"p", &"old"));
        assert!(e.satisfied(&"p"));
    }

    #[tokio::test(start_paused = true)]
    async fn parents_are_independent() {
        let e = E::default();
        e.expect_creates(&"p1", ["a"]);
        e.expect_creates(&"p2", ["a"]);
        e.observed_create(&"p1", &"a");
        assert!(e.satisfied(&"p1"));
        assert!(!e.satisfied(&"p2"));
    }

    #[tokio::test(start_paused = true)]
    async fn failed_writes_are_cancelled() {
        let e = E::default();
        e.expect_creates(&"p", ["a"]);
        e.expect_deletes(&"p", ["b"]);
        e.cancel_create(&"p", &"a");
        e.cancel_delete(&"p", &"b");
        assert!(e.satisfied(&"p"));
    }

    #[tokio::test(start_paused = true)]
    async fn unconfirmed_expectations_expire_after_ttl() {
        let e = E::default();
        e.expect_creates(&"p", ["a"]);
        tokio::time::sleep(DEFAULT_EXPECTATION_TTL - Duration::from_secs(1)).await;
        assert!(!e.satisfied(&"p"));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(e.satisfied(&"p"));
        assert_eq!(e.pending(&"p"), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn new_writes_restart_the_ttl() {
        let e = E::with_ttl(Duration::from_secs(10));
        e.expect_creates(&"p", ["a"]);
        tokio::time::sleep(Duration::from_secs(8)).await;
        e.expect_deletes(&"p", ["b"]);
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert!(!e.satisfied(&"p"));
    }

    #[tokio::test(start_paused = true)]
    async fn cache_content_confirms_expectations() {
        let e = E::default();
        e.expect_creates(&"p", ["a", "b"]);
        e.expect_deletes(&"p", ["gone", "still"]);
        let cache = |c: &&str| match *c {
            "a" | "still" => Some(true),
            "gone" => Some(false),
            _ => None,
        };
        assert!(!e.satisfied_given(&"p", cache));
        assert_eq!(e.pending(&"p"), (1, 1));
        e.observed_create(&"p", &"b");
        e.observed_delete(&"p", &"still");
        assert!(e.satisfied_given(&"p", cache));
    }

    #[tokio::test(start_paused = true)]
    async fn forget_drops_a_parent() {
        let e = E::default();
        e.expect_creates(&"p", ["a"]);
        e.forget(&"p");
        assert!(e.satisfied(&"p"));
    }

    #[tokio::test(start_paused = true)]
    async fn recreate_waits_for_both_delete_and_create() {
        let e = E::default();
        e.expect_deletes(&"p", ["a"]);
        e.expect_creates(&"p", ["a"]);
        assert_eq!(e.pending(&"p"), (1, 1));
        // The cache still holding the old "a" confirms neither.
        assert!(!e.satisfied_given(&"p", |_| Some(true)));
        assert_eq!(e.pending(&"p"), (1, 1));
        e.observed_delete(&"p", &"a");
        assert!(!e.satisfied(&"p"));
        e.observed_create(&"p", &"a");
        assert!(e.satisfied(&"p"));
    }
}
