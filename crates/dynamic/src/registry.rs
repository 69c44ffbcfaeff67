//! Reference-counted sharing of per-resource services (informers): one instance per key per
//! process whatever the number of users, started on first use, stopped when the last user
//! lets go.
//!
//! [`SharedRegistry::acquire`] returns a [`Lease`]; the value is created by the caller's
//! `start` closure only if no live instance exists. When the last lease of a key is dropped the
//! registry forgets the value, so the value's own `Drop` (e.g. aborting a watch task) stops it
//! once no other clone of the `Arc` remains.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

struct Slot<V> {
    value: Arc<V>,
    leases: usize,
}

type Slots<K, V> = Mutex<HashMap<K, Slot<V>>>;

/// A map of shared, reference-counted values.
pub(crate) struct SharedRegistry<K, V> {
    slots: Arc<Slots<K, V>>,
}

impl<K, V> Clone for SharedRegistry<K, V> {
    fn clone(&self) -> Self {
        SharedRegistry {
            slots: self.slots.clone(),
        }
    }
}

impl<K, V> Default for SharedRegistry<K, V> {
    fn default() -> Self {
        SharedRegistry {
            slots: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

impl<K, V> fmt::Debug for SharedRegistry<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedRegistry").finish_non_exhaustive()
    }
}

fn lock<K, V>(slots: &Slots<K, V>) -> MutexGuard<'_, HashMap<K, Slot<V>>> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}

impl<K: Eq + Hash + Clone, V> SharedRegistry<K, V> {
    /// An empty registry.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A lease on the value of `key`, starting it with `start` if none is live. A failing
    /// `start` leaves the registry unchanged. `start` runs under the registry's lock, so it
    /// must be quick (spawn the work, do not await it) and must not use this registry.
    pub(crate) fn acquire<E>(
        &self,
        key: K,
        start: impl FnOnce(&K) -> Result<V, E>,
    ) -> Result<Lease<K, V>, E> {
        let mut slots = lock(&self.slots);
        let value = match slots.get_mut(&key) {
            Some(slot) => {
                slot.leases += 1;
                slot.value.clone()
            }
            None => {
                let value = Arc::new(start(&key)?);
                slots.insert(
                    key.clone(),
                    Slot {
                        value: value.clone(),
                        leases: 1,
                    },
                );
                value
            }
        };
        Ok(Lease {
            key,
            value,
            slots: Arc::downgrade(&self.slots),
        })
    }

    /// The live value of `key`, without taking a lease.
    pub(crate) fn get(&self, key: &K) -> Option<Arc<V>> {
        lock(&self.slots).get(key).map(|s| s.value.clone())
    }

    /// Number of leases held on `key`.
    #[cfg(test)]
    pub(crate) fn leases(&self, key: &K) -> usize {
        lock(&self.slots).get(key).map_or(0, |s| s.leases)
    }

    /// Keys with a live value.
    pub(crate) fn keys(&self) -> Vec<K> {
        lock(&self.slots).keys().cloned().collect()
    }
    /// Number of live values.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.slots).len()
    }

    /// True if no value is live.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A user's hold on a shared value; dropping it releases the hold.
pub struct Lease<K: Eq + Hash, V> {
    key: K,
    value: Arc<V>,
    slots: Weak<Slots<K, V>>,
}

impl<K: Eq + Hash, V> Lease<K, V> {
    /// The shared value.
    pub fn value(&self) -> &Arc<V> {
        &self.value
    }
}

impl<K: Eq + Hash, V> Deref for Lease<K, V> {
    type Target = V;
    fn deref(&self) -> &V {
        &self.value
    }
}

impl<K: Eq + Hash + fmt::Debug, V> fmt::Debug for Lease<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).finish()
    }
}

impl<K: Eq + Hash, V> Drop for Lease<K, V> {
    fn drop(&mut self) {
        let Some(slots) = self.slots.upgrade() else {
            return;
        };
        // Take the value out while locked but drop it after unlocking: its Drop may be slow
        // or may itself use the registry.
        let released = {
            let mut slots = lock(&slots);
            match slots.get_mut(&self.key) {
                // Only release the instance this lease belongs to.
                Some(slot) if Arc::ptr_eq(&slot.value, &self.value) => {
                    slot.leases = slot.leases.saturating_sub(1);
                    if slot.leases == 0 {
                        slots.remove(&self.key)
                    } else {
                        None
                    }
                }
                _ => None,
            }
        };
        drop(released);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts starts and stops.
    struct Service {
        stops: Arc<AtomicUsize>,
    }

    impl Drop for Service {
        fn drop(&mut self) {
            self.stops.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn start(
        starts: &Arc<AtomicUsize>,
        stops: &Arc<AtomicUsize>,
    ) -> impl FnOnce(&&'static str) -> Result<Service, ()> {
        let starts = starts.clone();
        let stops = stops.clone();
        move |_| {
            starts.fetch_add(1, Ordering::SeqCst);
            Ok(Service { stops })
        }
    }

    #[test]
    fn one_instance_per_key_stopped_after_last_release() {
        let r = SharedRegistry::new();
        let (starts, stops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let a1 = r.acquire("pods", start(&starts, &stops)).unwrap();
        let a2 = r.acquire("pods", start(&starts, &stops)).unwrap();
        let b = r.acquire("cms", start(&starts, &stops)).unwrap();
        assert_eq!(starts.load(Ordering::SeqCst), 2);
        assert!(Arc::ptr_eq(a1.value(), a2.value()));
        assert_eq!(r.leases(&"pods"), 2);
        drop(a1);
        assert_eq!(stops.load(Ordering::SeqCst), 0);
        drop(a2);
        assert_eq!(stops.load(Ordering::SeqCst), 1);
        assert!(r.get(&"pods").is_none());
        assert_eq!(r.keys(), vec!["cms"]);
        drop(b);
        assert!(r.is_empty());
        // Acquiring again starts a fresh instance.
        let _c = r.acquire("pods", start(&starts, &stops)).unwrap();
        assert_eq!(starts.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn failed_start_leaves_nothing_behind() {
        let r: SharedRegistry<&str, Service> = SharedRegistry::new();
        assert_eq!(
            r.acquire("pods", |_| Err("no such resource")).err(),
            Some("no such resource")
        );
        assert!(r.is_empty());
    }

    #[test]
    fn leases_outliving_the_registry_are_harmless() {
        let r = SharedRegistry::new();
        let (starts, stops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let lease = r.acquire("pods", start(&starts, &stops)).unwrap();
        drop(r);
        drop(lease);
        assert_eq!(stops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn concurrent_users_share_one_instance() {
        let r = SharedRegistry::new();
        let (starts, stops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let l = r.acquire("pods", start(&starts, &stops)).unwrap();
                        let l2 = r.acquire("pods", start(&starts, &stops)).unwrap();
                        assert!(Arc::ptr_eq(l.value(), l2.value()));
                    }
                });
            }
        });
        assert!(r.is_empty());
        // Every instance started was stopped exactly once.
        assert_eq!(starts.load(Ordering::SeqCst), stops.load(Ordering::SeqCst));
    }
}
