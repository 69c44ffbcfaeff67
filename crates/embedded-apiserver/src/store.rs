//! In-memory object storage with a cluster-wide resourceVersion counter, a
//! uid index (for the garbage collector) and a bounded event history that
//! watches replay from.

use crate::registry::{GroupResource, Registry, ResourceInfo};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use tokio::sync::broadcast;

/// Watch event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// Wire name (`ADDED`, …).
    pub fn as_str(&self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as recorded in the history and sent to watchers.
#[derive(Clone, Debug)]
pub struct Event {
    /// The resourceVersion this change produced.
    pub rv: u64,
    pub gr: GroupResource,
    pub namespace: String,
    pub name: String,
    pub etype: EventType,
    /// The object after the change (for DELETED: its last state with the deletion's rv).
    pub object: Arc<Value>,
    /// The object before the change (MODIFIED/DELETED), so selector watches can
    /// turn "moved out of the selection" into DELETED.
    pub prev: Option<Arc<Value>>,
    /// The watch-stream line for this event in its own type and storage version,
    /// encoded once and shared by every watcher that sends it unchanged.
    pub wire: std::sync::OnceLock<axum::body::Bytes>,
}

/// `(namespace, name)`; namespace is empty for cluster-scoped objects.
pub type ObjKey = (String, String);

/// Where an object is stored: its resource and key.
pub type Located = (GroupResource, ObjKey);

/// Everything the server stores, guarded by one lock.
pub struct State {
    /// Last assigned resourceVersion.
    pub rv: u64,
    pub registry: Registry,
    data: HashMap<GroupResource, BTreeMap<ObjKey, Arc<Value>>>,
    uids: HashMap<String, (GroupResource, ObjKey)>,
    history: VecDeque<Arc<Event>>,
    history_cap: usize,
    /// Watches must start at or after this resourceVersion.
    pub compacted_rv: u64,
    tx: broadcast::Sender<Arc<Event>>,
    /// Set when a write may give the background controllers (GC, namespaces, CRDs) work.
    pub controllers_dirty: bool,
    /// Owner uid → objects whose ownerReferences name it, so the garbage collector finds
    /// the dependents of one owner without scanning every object.
    dependents: HashMap<String, HashSet<Located>>,
    /// Objects the background controllers must look at again (see [`State::take_gc_dirty`]).
    gc_dirty: HashSet<Located>,
    /// Service cluster IPs and node ports.
    pub ip_alloc: crate::defaults::RangeAllocator,
    /// The dev-mode simulation runs: pods bound to a node end gracefully (a kubelet
    /// finishes their deletion) and namespaces get the objects a real cluster publishes in
    /// them (`kube-root-ca.crt`). Off by default so bare-server tests see only their objects.
    pub simulated_cluster: bool,
}

/// Reads `metadata.<field>` as a string.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

impl State {
    /// Empty storage with the built-in registry.
    pub fn new(history_cap: usize, tx: broadcast::Sender<Arc<Event>>) -> Self {
        State {
            rv: 1,
            registry: Registry::with_builtins(),
            data: HashMap::new(),
            uids: HashMap::new(),
            history: VecDeque::new(),
            history_cap: history_cap.max(1),
            compacted_rv: 0,
            tx,
            controllers_dirty: false,
            dependents: HashMap::new(),
            gc_dirty: HashSet::new(),
            ip_alloc: Default::default(),
            simulated_cluster: false,
        }
    }

    /// Subscribes to future events (call under the lock to not miss any).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// One object.
    pub fn get(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.data
            .get(gr)
            .and_then(|m| m.get(&(ns.to_string(), name.to_string())))
            .cloned()
    }

    /// Objects of a resource, optionally in one namespace, in key order.
    pub fn list(&self, gr: &GroupResource, ns: Option<&str>) -> Vec<(ObjKey, Arc<Value>)> {
        let Some(m) = self.data.get(gr) else {
            return Vec::new();
        };
        match ns {
            Some(ns) => m
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            None => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }
    }

    /// Total stored objects.
    pub fn total_objects(&self) -> usize {
        self.data.values().map(|m| m.len()).sum()
    }

    /// Where an object with this uid lives.
    pub fn locate_uid(&self, uid: &str) -> Option<(GroupResource, ObjKey)> {
        self.uids.get(uid).cloned()
    }

    /// Stores `obj` (creating or replacing), assigning the next resourceVersion.
    pub fn put(&mut self, info: &ResourceInfo, mut obj: Value, etype: EventType) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let ns = if info.namespaced {
            meta_str(&obj, "namespace").to_string()
        } else {
            String::new()
        };
        let name = meta_str(&obj, "name").to_string();
        let uid = meta_str(&obj, "uid").to_string();
        let obj = Arc::new(obj);
        let gr = info.gr();
        if !uid.is_empty() {
            self.uids
                .insert(uid, (gr.clone(), (ns.clone(), name.clone())));
        }
        let prev = self
            .data
            .entry(gr.clone())
            .or_default()
            .insert((ns.clone(), name.clone()), obj.clone());
        let here: Located = (gr.clone(), (ns.clone(), name.clone()));
        self.index_owners(&here, prev.as_deref(), Some(&obj));
        self.mark_after_put(&here, &obj);
        self.record(Event {
            rv,
            gr,
            namespace: ns,
            name,
            etype,
            object: obj.clone(),
            prev,
            wire: Default::default(),
        });
        obj
    }

    /// Objects the background controllers should look at, taken out of the set.
    pub fn take_gc_dirty(&mut self) -> Vec<Located> {
        self.gc_dirty.drain().collect()
    }

    /// Marks every stored object for the background controllers (the periodic full pass).
    pub fn mark_all_gc_dirty(&mut self) {
        for (gr, objects) in &self.data {
            for key in objects.keys() {
                self.gc_dirty.insert((gr.clone(), key.clone()));
            }
        }
        self.controllers_dirty = true;
    }

    /// Objects whose ownerReferences name `owner_uid`.
    pub fn dependents_of(&self, owner_uid: &str) -> Vec<Located> {
        self.dependents
            .get(owner_uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn mark(&mut self, at: Located) {
        self.gc_dirty.insert(at);
        self.controllers_dirty = true;
    }

    /// Moves `here` in the dependents index from the owners of `old` to those of `new`.
    fn index_owners(&mut self, here: &Located, old: Option<&Value>, new: Option<&Value>) {
        let old_owners = owner_uids(old);
        let new_owners = owner_uids(new);
        if old_owners == new_owners {
            return;
        }
        for uid in old_owners.iter().filter(|u| !new_owners.contains(u)) {
            if let Some(set) = self.dependents.get_mut(uid) {
                set.remove(here);
                if set.is_empty() {
                    self.dependents.remove(uid);
                }
            }
        }
        for uid in new_owners {
            self.dependents.entry(uid).or_default().insert(here.clone());
        }
    }

    fn mark_if_deleting(&mut self, at: Located) {
        let deleting = self
            .data
            .get(&at.0)
            .and_then(|m| m.get(&at.1))
            .is_some_and(|o| is_deleting(o));
        if deleting {
            self.mark(at);
        }
    }

    /// Owners of `obj` that are being deleted: a change of one of their dependents may let
    /// their foreground deletion finish.
    fn mark_deleting_owners(&mut self, obj: &Value) {
        for uid in owner_uids(Some(obj)) {
            if let Some(owner) = self.uids.get(&uid).cloned() {
                self.mark_if_deleting(owner);
            }
        }
    }

    fn mark_after_put(&mut self, here: &Located, obj: &Value) {
        let deleting = is_deleting(obj);
        let has_owners = !owner_uids(Some(obj)).is_empty();
        let is_namespace = here.0 .0.is_empty() && here.0 .1 == "namespaces";
        if deleting || has_owners || is_namespace {
            self.mark(here.clone());
        }
        if deleting {
            for dep in self.dependents_of(meta_str(obj, "uid")) {
                self.mark(dep);
            }
        }
        if has_owners {
            self.mark_deleting_owners(obj);
        }
    }

    fn mark_after_remove(&mut self, info: &ResourceInfo, here: &Located, old: &Value, uid: &str) {
        for dep in self.dependents_of(uid) {
            self.mark(dep);
        }
        self.mark_deleting_owners(old);
        // A terminating namespace or a deleted CRD finishes once its contents are gone.
        let ns = &here.1 .0;
        if !ns.is_empty() {
            self.mark_if_deleting((
                (String::new(), "namespaces".to_string()),
                (String::new(), ns.clone()),
            ));
        }
        if info.is_custom() {
            self.mark_if_deleting((
                (
                    "apiextensions.k8s.io".to_string(),
                    "customresourcedefinitions".to_string(),
                ),
                (String::new(), format!("{}.{}", info.resource, info.group)),
            ));
        }
    }

    /// Removes an object, recording a DELETED event at a new resourceVersion.
    pub fn remove(&mut self, info: &ResourceInfo, ns: &str, name: &str) -> Option<Arc<Value>> {
        let gr = info.gr();
        let old = self
            .data
            .get_mut(&gr)?
            .remove(&(ns.to_string(), name.to_string()))?;
        self.rv += 1;
        let rv = self.rv;
        let mut obj = (*old).clone();
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let uid = meta_str(&obj, "uid").to_string();
        self.uids.remove(&uid);
        let here: Located = (gr.clone(), (ns.to_string(), name.to_string()));
        self.index_owners(&here, Some(&old), None);
        self.mark_after_remove(info, &here, &old, &uid);
        let obj = Arc::new(obj);
        self.controllers_dirty = true;
        self.record(Event {
            rv,
            gr,
            namespace: ns.to_string(),
            name: name.to_string(),
            etype: EventType::Deleted,
            object: obj.clone(),
            prev: Some(old),
            wire: Default::default(),
        });
        Some(obj)
    }

    /// Drops all objects of a resource without events (used when its CRD is gone and already emptied).
    pub fn drop_resource(&mut self, gr: &GroupResource) {
        if let Some(m) = self.data.remove(gr) {
            for v in m.values() {
                self.uids.remove(meta_str(v, "uid"));
            }
        }
    }

    fn record(&mut self, ev: Event) {
        let ev = Arc::new(ev);
        if self.history.len() >= self.history_cap {
            if let Some(old) = self.history.pop_front() {
                self.compacted_rv = old.rv;
            }
        }
        self.history.push_back(ev.clone());
        // No receivers is fine.
        let _ = self.tx.send(ev);
    }

    /// Events after `rv` for a resource, or `None` if some of them were compacted away.
    pub fn events_since(&self, gr: &GroupResource, rv: u64) -> Option<Vec<Arc<Event>>> {
        if rv < self.compacted_rv {
            return None;
        }
        let start = self.history.partition_point(|e| e.rv <= rv);
        Some(
            self.history
                .iter()
                .skip(start)
                .filter(|e| e.gr == *gr)
                .cloned()
                .collect(),
        )
    }

    /// Forgets the whole history: any watch from an older resourceVersion gets 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted_rv = self.rv;
    }

    /// The retained history, oldest first.
    pub fn history(&self) -> Vec<Arc<Event>> {
        self.history.iter().cloned().collect()
    }
}

fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// The uids named by `obj`'s ownerReferences.
fn owner_uids(obj: Option<&Value>) -> Vec<String> {
    obj.and_then(|o| o.pointer("/metadata/ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .filter(|u| !u.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}
