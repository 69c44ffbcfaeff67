//! Informer events → parent keys (upstream's parent and child event handlers).

use std::sync::Arc;

use kube::core::DynamicObject;
use metacontroller_dynamic::{ApiResource, Change, Informer, NamespacedName, Origin, Selector};
use metacontroller_workqueue::WorkQueue;
use serde_json::json;

use super::plan::parent_child_selector;
use super::read_versions::ReadVersions;
use crate::reconcile::{self, priority};

/// Maps informer events to parent keys (shared by the handlers).
pub(super) struct Mapper {
    pub(super) parents: Arc<Informer>,
    pub(super) parent_resource: Arc<ApiResource>,
    pub(super) parent_selector: Selector,
    pub(super) finalizer: String,
    /// The children-elsewhere finalizer ([`super::cleanup::elsewhere_finalizer`]), once.
    pub(super) elsewhere_finalizer: String,
    pub(super) generate_selector: bool,
    pub(super) ignore_status_changes: bool,
    pub(super) queue: WorkQueue<NamespacedName>,
    /// The parent resourceVersions recent syncs of each parent read (cache or own writes).
    pub(super) read: ReadVersions<NamespacedName>,
    /// Parents seen being deleted with `propagationPolicy: Orphan` (children elsewhere).
    pub(super) orphaning: super::cleanup::Orphaning,
}

pub(super) fn has_finalizer(obj: &DynamicObject, name: &str) -> bool {
    obj.metadata.finalizers.iter().flatten().any(|f| f == name)
}

impl Mapper {
    /// Parents that neither match `parentResource.labelSelector` nor carry one of our
    /// finalizers (finalize hook, children elsewhere) are not ours.
    pub(super) fn interested(&self, parent: &DynamicObject) -> bool {
        let empty = Default::default();
        let labels = parent.metadata.labels.as_ref().unwrap_or(&empty);
        has_finalizer(parent, &self.finalizer)
            || self.parent_selector.matches(labels)
            || has_finalizer(
                parent,
                &super::cleanup::elsewhere_finalizer(&self.finalizer),
            )
    }

    /// A sync of `key` read the parent at `version`.
    pub(super) fn record_read(&self, key: &NamespacedName, version: Option<&str>) {
        self.read.record(key, version);
    }

    /// Whether a recent sync already read this version of the parent: the watch event of
    /// our own write (finalizer, status) that a later sync read from the own-writes overlay
    /// before the event came (see [`ReadVersions`]). Such an event brings the hook nothing it
    /// has not seen, and queueing it would cost one more sync. The event of a status write
    /// that no sync has read yet still queues the parent (as upstream, hooks see their
    /// status committed).
    fn already_read(&self, key: &NamespacedName, version: Option<&str>) -> bool {
        self.read.contains(key, version)
    }

    pub(super) fn on_parent(&self, change: &Change<DynamicObject>, origin: Origin) {
        let obj = match change {
            // As upstream, a deleted parent is synced once more: the sync finds it gone and
            // drops what was cached for it (related objects, their informer leases, hook
            // responses) — also when it had stopped matching, as it may have matched before.
            Change::Deleted(obj) => {
                self.orphaning.forget(obj);
                if let Some(key) = NamespacedName::of(obj.as_ref()) {
                    self.read.forget(&key);
                    self.queue.add(key, priority(origin));
                }
                return;
            }
            Change::Added(new) => {
                self.orphaning.observe(new);
                new
            }
            Change::Updated { old, new } => {
                self.orphaning.observe(new);
                if origin == Origin::Watch {
                    let key = NamespacedName::of(new.as_ref());
                    let version = new.metadata.resource_version.as_deref();
                    if key.is_some_and(|k| self.already_read(&k, version)) {
                        return;
                    }
                }
                if self.ignore_status_changes
                    && origin == Origin::Watch
                    && old.metadata.generation == new.metadata.generation
                    && old.metadata.labels == new.metadata.labels
                    && old.metadata.annotations == new.metadata.annotations
                    && new.metadata.deletion_timestamp.is_none()
                {
                    return;
                }
                new
            }
        };
        if !self.interested(obj) {
            return;
        }
        if let Some(key) = NamespacedName::of(obj.as_ref()) {
            self.queue.add(key, priority(origin));
        }
    }

    pub(super) fn on_child(&self, change: &Change<DynamicObject>, origin: Origin) {
        if reconcile::is_unchanged_replay(change) {
            return;
        }
        let obj = change.object();
        let child_deleting =
            matches!(change, Change::Deleted(_)) || obj.metadata.deletion_timestamp.is_some();
        if let Some((key, uid)) = crate::elsewhere::parent_of(
            obj.metadata.labels.as_ref(),
            obj.metadata.annotations.as_ref(),
        ) {
            // A child outside its parent's namespace, tracked by label (extension).
            let parent = self.parents.get(&key);
            if let Some(parent) = parent.filter(|p| p.metadata.uid.as_deref() == Some(&uid)) {
                if self.interested(&parent) {
                    self.queue.add(key, priority(origin));
                }
            }
            return;
        }
        if reconcile::controller_ref(obj).is_some() {
            let resolved =
                reconcile::resolve_controller_ref(obj, &self.parent_resource, &self.parents);
            if let Some((key, parent)) = resolved {
                if self.interested(&parent) {
                    self.queue.add(key, priority(origin));
                }
            }
            return;
        }
        let namespace = obj.metadata.namespace.clone().unwrap_or_default();
        // An orphan: we never adopt orphans that are being deleted. A relist needs no mapping:
        // it also replays every parent, whose sync claims matching orphans.
        if child_deleting || origin == Origin::Relist {
            return;
        }
        let candidates = if self.parent_resource.namespaced {
            self.parents.list_namespace(&namespace)
        } else {
            self.parents.list()
        };
        let empty = Default::default();
        let labels = obj.metadata.labels.as_ref().unwrap_or(&empty);
        for parent in candidates {
            if !self.interested(&parent) {
                continue;
            }
            // Only the fields the selector needs, not the whole parent.
            let value = json!({
                "metadata": {"uid": parent.metadata.uid},
                "spec": {"selector": parent.data.pointer("/spec/selector")},
            });
            let Ok(selector) = parent_child_selector(&value, self.generate_selector) else {
                continue;
            };
            if selector.matches(labels) {
                if let Some(key) = NamespacedName::of(parent.as_ref()) {
                    self.queue.add(key, priority(origin));
                }
            }
        }
    }
}
