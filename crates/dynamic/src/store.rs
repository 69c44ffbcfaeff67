//! The object store behind an informer: objects of one resource by `namespace/name`, with
//! indexes by namespace and by controller owner uid, so listing a parent's children never
//! scans every object of the type.
//!
//! Watch events are applied with [`Store::upsert`] / [`Store::remove`]; a (re)list replaces
//! the content with [`Store::replace`], which reports what changed so handlers see deletions
//! that happened while the watch was down. Every change is returned as a [`Change`] for the
//! event handlers. Objects are shared (`Arc`) so readers never copy them.
//!
//! The store is generic over the stored form: informers keep
//! [`CompactObject`](crate::compact::CompactObject)s (JSON plus index metadata, see its
//! "Memory" section) and decode on read; anything with [`ObjectMetaAccess`] works.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::object::{NamespacedName, ObjectMetaAccess};

/// What a store operation did.
#[derive(Debug, Clone, PartialEq)]
pub enum Change<T> {
    /// A new object.
    Added(Arc<T>),
    /// An object replaced; `old` and `new` may have the same resourceVersion after a relist.
    Updated {
        /// Previous object.
        old: Arc<T>,
        /// Current object.
        new: Arc<T>,
    },
    /// An object removed (the last state the store knew).
    Deleted(Arc<T>),
}

impl<T> Change<T> {
    /// The object after the change, or the removed object for `Deleted`.
    pub fn object(&self) -> &Arc<T> {
        match self {
            Change::Added(o) | Change::Deleted(o) => o,
            Change::Updated { new, .. } => new,
        }
    }
}

/// An object without a name cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("object has no metadata.name")]
pub struct MissingName;

/// Objects of one resource, indexed.
#[derive(Debug)]
pub struct Store<T> {
    objects: HashMap<NamespacedName, Arc<T>>,
    /// Namespace ("" for cluster scope) → names, sorted for stable listings.
    by_namespace: HashMap<String, BTreeSet<String>>,
    /// Controller owner uid → keys of the objects it controls, sorted. A sorted `Vec`, not a
    /// `BTreeSet`: a parent controls a handful of objects and a B-tree allocates a whole
    /// 11-key node (about 540 bytes) for each parent.
    by_controller: HashMap<String, Vec<NamespacedName>>,
    /// Keys of objects without a controller (candidates for adoption), sorted by namespace.
    orphans: BTreeSet<NamespacedName>,
}

impl<T> Default for Store<T> {
    fn default() -> Self {
        Store {
            objects: HashMap::new(),
            by_namespace: HashMap::new(),
            by_controller: HashMap::new(),
            orphans: BTreeSet::new(),
        }
    }
}

impl<T: ObjectMetaAccess> Store<T> {
    fn index(&mut self, key: &NamespacedName, obj: &T) {
        self.by_namespace
            .entry(key.namespace.clone())
            .or_default()
            .insert(key.name.clone());
        if let Some(uid) = obj.controller_uid() {
            let keys = self.by_controller.entry(uid.to_string()).or_default();
            if let Err(at) = keys.binary_search(key) {
                keys.insert(at, key.clone());
            }
        } else {
            self.orphans.insert(key.clone());
        }
    }

    fn unindex(&mut self, key: &NamespacedName, obj: &T) {
        if let Some(names) = self.by_namespace.get_mut(&key.namespace) {
            names.remove(&key.name);
            if names.is_empty() {
                self.by_namespace.remove(&key.namespace);
            }
        }
        if let Some(uid) = obj.controller_uid() {
            if let Some(keys) = self.by_controller.get_mut(uid) {
                if let Ok(at) = keys.binary_search(key) {
                    keys.remove(at);
                }
                if keys.is_empty() {
                    self.by_controller.remove(uid);
                }
            }
        } else {
            self.orphans.remove(key);
        }
    }

    /// Adds or replaces an object (watch ADDED / MODIFIED).
    pub fn upsert(&mut self, obj: T) -> Result<Change<T>, MissingName> {
        let key = NamespacedName::of(&obj).ok_or(MissingName)?;
        Ok(self.upsert_shared(key, Arc::new(obj)))
    }

    /// Removes an object (watch DELETED); `None` if it was not stored.
    pub(crate) fn remove(&mut self, key: &NamespacedName) -> Option<Change<T>> {
        let old = self.objects.remove(key)?;
        self.unindex(key, &old);
        Some(Change::Deleted(old))
    }
    /// Replaces the whole content with a fresh list. Returns the changes: added, updated (every
    /// object still present, like an informer resync) and deleted. Objects without a name are
    /// skipped and counted in the second value.
    #[cfg(test)]
    pub(crate) fn replace(&mut self, list: impl IntoIterator<Item = T>) -> (Vec<Change<T>>, usize) {
        let shared: Vec<Arc<T>> = list.into_iter().map(|obj| self.share(obj)).collect();
        self.replace_shared(shared)
    }

    /// `obj` as a shared object: the stored one when it has the same key and resourceVersion
    /// (the same state of the same object, so the listed copy is dropped at once), else a new
    /// one. A relist of an unchanged cache therefore never holds two copies of an object.
    #[cfg(test)]
    pub(crate) fn share(&self, obj: T) -> Arc<T> {
        match self.unchanged(&obj) {
            Some(stored) => stored.clone(),
            None => Arc::new(obj),
        }
    }

    /// The stored object with the key and the (non-empty) resourceVersion of `obj`: the same
    /// state of the same object, whatever form `obj` has (an informer checks listed objects
    /// before converting them to the stored form).
    pub(crate) fn unchanged<O: ObjectMetaAccess + ?Sized>(&self, obj: &O) -> Option<&Arc<T>> {
        let rv = obj.resource_version().filter(|rv| !rv.is_empty())?;
        NamespacedName::of(obj)
            .and_then(|key| self.objects.get(&key))
            .filter(|stored| stored.resource_version() == Some(rv))
    }

    /// `Store::replace` with objects already shared (see `Store::share`).
    pub fn replace_shared(
        &mut self,
        list: impl IntoIterator<Item = Arc<T>>,
    ) -> (Vec<Change<T>>, usize) {
        self.replace_shared_in(None, list)
    }

    /// [`Store::replace_shared`] for the objects of one namespace only (`None`: all): the
    /// list of one namespace's watch says nothing about the other namespaces' objects.
    pub(crate) fn replace_shared_in(
        &mut self,
        namespace: Option<&str>,
        list: impl IntoIterator<Item = Arc<T>>,
    ) -> (Vec<Change<T>>, usize) {
        let mut fresh: BTreeMap<NamespacedName, Arc<T>> = BTreeMap::new();
        let mut skipped = 0;
        for obj in list {
            match NamespacedName::of(obj.as_ref()) {
                Some(key) => {
                    fresh.insert(key, obj);
                }
                None => skipped += 1,
            }
        }
        let mut changes = Vec::new();
        let mut gone: Vec<NamespacedName> = self
            .objects
            .keys()
            .filter(|k| namespace.is_none_or(|ns| k.namespace == ns))
            .filter(|k| !fresh.contains_key(k))
            .cloned()
            .collect();
        gone.sort();
        for key in gone {
            changes.extend(self.remove(&key));
        }
        for (key, new) in fresh {
            changes.push(self.upsert_shared(key, new));
        }
        (changes, skipped)
    }

    fn upsert_shared(&mut self, key: NamespacedName, new: Arc<T>) -> Change<T> {
        let old = self.objects.insert(key.clone(), new.clone());
        match old {
            // The same object: its index entries are already right.
            Some(old) if Arc::ptr_eq(&old, &new) => Change::Updated { old, new },
            Some(old) => {
                self.unindex(&key, &old);
                self.index(&key, &new);
                Change::Updated { old, new }
            }
            None => {
                self.index(&key, &new);
                Change::Added(new)
            }
        }
    }

    /// Drops every object `keep` refuses, without reporting a change (a sharded replica
    /// forgetting the objects of shards it released: nothing happened to them). Returns how
    /// many were dropped.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) -> usize {
        let gone: Vec<NamespacedName> = self
            .objects
            .iter()
            .filter(|(_, obj)| !keep(obj))
            .map(|(key, _)| key.clone())
            .collect();
        for key in &gone {
            self.remove(key);
        }
        gone.len()
    }

    /// The object `key`.
    pub fn get(&self, key: &NamespacedName) -> Option<&Arc<T>> {
        self.objects.get(key)
    }

    /// Objects of one namespace (`""`: cluster-scoped objects), sorted by name.
    pub(crate) fn list_namespace(&self, namespace: &str) -> Vec<Arc<T>> {
        self.by_namespace
            .get(namespace)
            .into_iter()
            .flatten()
            .filter_map(|name| {
                self.objects
                    .get(&NamespacedName::new(namespace, name.as_str()))
                    .cloned()
            })
            .collect()
    }

    /// Objects whose controller owner reference has `uid`, sorted by key.
    pub fn controlled_by(&self, uid: &str) -> Vec<Arc<T>> {
        self.by_controller
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|k| self.objects.get(k).cloned())
            .collect()
    }

    /// Objects without a controller owner reference, in `namespace` (`None`: every
    /// namespace), sorted by key.
    pub(crate) fn orphans(&self, namespace: Option<&str>) -> Vec<Arc<T>> {
        let keys: Box<dyn Iterator<Item = &NamespacedName>> = match namespace {
            None => Box::new(self.orphans.iter()),
            Some(ns) => Box::new(
                self.orphans
                    .range(NamespacedName::new(ns, "")..)
                    .take_while(move |k| k.namespace == ns),
            ),
        };
        keys.filter_map(|k| self.objects.get(k).cloned()).collect()
    }

    /// All objects (unordered).
    pub fn iter(&self) -> impl Iterator<Item = &Arc<T>> {
        self.objects.values()
    }

    /// Number of objects.
    pub(crate) fn len(&self) -> usize {
        self.objects.len()
    }

    /// True if empty.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn obj(ns: &str, name: &str, rv: &str, owner: Option<&str>) -> Value {
        let mut v = json!({"metadata": {"name": name, "resourceVersion": rv}});
        if !ns.is_empty() {
            v["metadata"]["namespace"] = json!(ns);
        }
        if let Some(uid) = owner {
            v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "P", "name": "p", "uid": uid, "controller": true}]);
        }
        v
    }

    fn names(objs: &[Arc<Value>]) -> Vec<String> {
        objs.iter()
            .map(|o| NamespacedName::of(o.as_ref()).unwrap().to_string())
            .collect()
    }

    #[test]
    fn indexes_follow_upserts_and_removes() {
        let mut s = Store::default();
        assert!(matches!(
            s.upsert(obj("a", "x", "1", Some("p1"))),
            Ok(Change::Added(_))
        ));
        s.upsert(obj("a", "y", "1", Some("p2"))).unwrap();
        s.upsert(obj("b", "x", "1", Some("p1"))).unwrap();
        s.upsert(obj("", "cluster", "1", None)).unwrap();
        assert_eq!(names(&s.list_namespace("a")), vec!["a/x", "a/y"]);
        assert_eq!(names(&s.list_namespace("")), vec!["cluster"]);
        assert_eq!(names(&s.controlled_by("p1")), vec!["a/x", "b/x"]);
        assert_eq!(names(&s.orphans(None)), vec!["cluster"]);
        assert!(s.orphans(Some("a")).is_empty());
        s.upsert(obj("a", "o", "1", None)).unwrap();
        s.upsert(obj("ab", "o", "1", None)).unwrap();
        assert_eq!(names(&s.orphans(Some("a"))), vec!["a/o"]);
        // Adoption moves it out of the orphan index.
        s.upsert(obj("a", "o", "2", Some("p1"))).unwrap();
        assert!(s.orphans(Some("a")).is_empty());
        s.remove(&NamespacedName::new("ab", "o"));
        s.remove(&NamespacedName::new("a", "o"));
        // Re-owning moves the object between controller index entries.
        let change = s.upsert(obj("a", "x", "2", Some("p2"))).unwrap();
        assert!(matches!(change, Change::Updated { .. }));
        assert_eq!(names(&s.controlled_by("p1")), vec!["b/x"]);
        assert_eq!(names(&s.controlled_by("p2")), vec!["a/x", "a/y"]);
        // Orphaning removes it from the index.
        s.upsert(obj("a", "y", "3", None)).unwrap();
        assert_eq!(names(&s.controlled_by("p2")), vec!["a/x"]);
        assert_eq!(names(&s.orphans(Some("a"))), vec!["a/y"]);
        assert!(matches!(
            s.remove(&NamespacedName::new("a", "x")),
            Some(Change::Deleted(_))
        ));
        assert!(s.controlled_by("p2").is_empty());
        assert!(s.remove(&NamespacedName::new("a", "x")).is_none());
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn objects_without_name_are_rejected() {
        let mut s: Store<Value> = Store::default();
        assert_eq!(s.upsert(json!({"metadata": {}})), Err(MissingName));
        assert_eq!(s.upsert(json!("junk")), Err(MissingName));
        assert!(s.is_empty());
    }

    #[test]
    fn replace_reports_added_updated_and_deleted() {
        let mut s = Store::default();
        s.upsert(obj("a", "keep", "1", None)).unwrap();
        s.upsert(obj("a", "gone", "1", Some("p"))).unwrap();
        let (changes, skipped) = s.replace(vec![
            obj("a", "keep", "1", None),
            obj("a", "new", "5", None),
            json!({"metadata": {"namespace": "a"}}),
        ]);
        assert_eq!(skipped, 1);
        let kinds: Vec<_> = changes
            .iter()
            .map(|c| match c {
                Change::Added(o) => format!("added {}", o["metadata"]["name"]),
                Change::Updated { new, .. } => format!("updated {}", new["metadata"]["name"]),
                Change::Deleted(o) => format!("deleted {}", o["metadata"]["name"]),
            })
            .collect();
        assert_eq!(
            kinds,
            vec!["deleted \"gone\"", "updated \"keep\"", "added \"new\""]
        );
        assert!(s.controlled_by("p").is_empty());
        assert_eq!(names(&s.list_namespace("a")), vec!["a/keep", "a/new"]);
    }

    #[test]
    fn replace_in_one_namespace_keeps_the_others() {
        let mut s = Store::default();
        s.upsert(obj("a", "gone", "1", None)).unwrap();
        s.upsert(obj("b", "other", "1", None)).unwrap();
        let fresh = vec![s.share(obj("a", "new", "1", None))];
        let (changes, _) = s.replace_shared_in(Some("a"), fresh);
        assert_eq!(changes.len(), 2, "a/gone deleted, a/new added");
        assert_eq!(names(&s.list_namespace("b")), vec!["b/other"]);
        assert_eq!(names(&s.list_namespace("a")), vec!["a/new"]);
    }

    #[test]
    fn retain_drops_refused_objects_from_every_index() {
        let mut s = Store::default();
        s.upsert(obj("a", "keep", "1", Some("p1"))).unwrap();
        s.upsert(obj("a", "drop", "1", Some("p1"))).unwrap();
        s.upsert(obj("a", "orphan", "1", None)).unwrap();
        let dropped = s.retain(|o| o.name() != Some("drop") && o.name() != Some("orphan"));
        assert_eq!(dropped, 2);
        assert_eq!(names(&s.controlled_by("p1")), vec!["a/keep"]);
        assert!(s.orphans(None).is_empty());
        assert_eq!(names(&s.list_namespace("a")), vec!["a/keep"]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Upsert(u8, u8, Option<u8>),
        Remove(u8, u8),
        Replace(Vec<(u8, u8, Option<u8>)>),
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        let item = (0u8..3, 0u8..4, proptest::option::of(0u8..3));
        prop_oneof![
            4 => item.clone().prop_map(|(n, m, o)| Op::Upsert(n, m, o)),
            2 => (0u8..3, 0u8..4).prop_map(|(n, m)| Op::Remove(n, m)),
            1 => proptest::collection::vec(item, 0..6).prop_map(Op::Replace),
        ]
    }

    proptest! {
        /// The indexes always agree with a full scan.
        #[test]
        fn indexes_match_a_full_scan(ops in proptest::collection::vec(arb_op(), 0..40)) {
            let mut s = Store::default();
            let make = |n: u8, m: u8, o: Option<u8>| {
                let owner = o.map(|o| format!("p{o}"));
                obj(&format!("ns{n}"), &format!("o{m}"), "1", owner.as_deref())
            };
            for op in ops {
                match op {
                    Op::Upsert(n, m, o) => { s.upsert(make(n, m, o)).unwrap(); }
                    Op::Remove(n, m) => { s.remove(&NamespacedName::new(format!("ns{n}"), format!("o{m}"))); }
                    Op::Replace(items) => { s.replace(items.into_iter().map(|(n, m, o)| make(n, m, o))); }
                }
                for ns in 0..3 {
                    let ns = format!("ns{ns}");
                    let mut scan: Vec<String> = s.iter()
                        .filter(|o| o.namespace() == Some(ns.as_str()))
                        .map(|o| NamespacedName::of(o.as_ref()).unwrap().to_string())
                        .collect();
                    scan.sort();
                    prop_assert_eq!(names(&s.list_namespace(&ns)), scan);
                }
                for p in 0..3 {
                    let uid = format!("p{p}");
                    let mut scan: Vec<String> = s.iter()
                        .filter(|o| o.controller_uid() == Some(uid.as_str()))
                        .map(|o| NamespacedName::of(o.as_ref()).unwrap().to_string())
                        .collect();
                    scan.sort();
                    prop_assert_eq!(names(&s.controlled_by(&uid)), scan);
                }
            }
        }
    }

    #[test]
    fn relist_keeps_unchanged_objects_shared_and_replaces_changed_ones() {
        let mut s = Store::default();
        s.upsert(obj("a", "same", "1", Some("p1"))).unwrap();
        s.upsert(obj("a", "moved", "1", Some("p1"))).unwrap();
        let cached = s.get(&NamespacedName::new("a", "same")).unwrap().clone();
        let listed = vec![
            s.share(obj("a", "same", "1", Some("p1"))),
            s.share(obj("a", "moved", "2", Some("p2"))),
        ];
        assert!(Arc::ptr_eq(&listed[0], &cached));
        let (changes, _) = s.replace_shared(listed);
        assert!(matches!(&changes[1], Change::Updated { old, new } if Arc::ptr_eq(old, new)));
        assert_eq!(s.controlled_by("p1").len(), 1);
        assert_eq!(s.controlled_by("p2").len(), 1);
    }
}
