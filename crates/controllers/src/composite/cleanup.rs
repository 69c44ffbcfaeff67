//! Extension (`childResources[].namespaces`): deleting a namespaced parent's children that
//! live elsewhere (other namespaces, cluster-scoped). The garbage collector cannot do it
//! (they carry no ownerReference), so a second finalizer holds such a parent: once it is
//! being deleted and our finalize-hook finalizer is gone (the finalize hook ran first), its
//! label-tracked children are deleted, then the finalizer is dropped. A parent deleted with
//! `propagationPolicy: Orphan` leaves them in place: its watch events carry Kubernetes'
//! `orphan` finalizer, remembered ([`Orphaning`]) since the garbage collector drops it before
//! the parent goes. The finalizer survives a controller crash: a restarted controller
//! finishes the cleanup (but forgets an Orphan delete whose `orphan` finalizer is gone).

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use kube::core::DynamicObject;
use metacontroller_dynamic::ObjectMetaAccess;
use serde_json::Value;

use super::reconciler::{Inner, ParentState};
use super::SyncError;
use crate::finalizer::{has_finalizer, is_deleting};
use crate::reconcile::{self, Reconciler};
use crate::writer::to_value;

/// The finalizer Kubernetes puts on an object deleted with `propagationPolicy: Orphan`.
const ORPHAN_FINALIZER: &str = "orphan";

/// Parents seen being deleted with the `orphan` finalizer. The garbage collector drops that
/// finalizer soon after the delete while ours still holds the parent, so the sync that
/// cleans up may never see it; the parent's watch events do, and this keeps what they saw.
/// Kept in memory only: a controller restarted after the collector dropped the finalizer
/// no longer knows, and deletes the children (documented).
#[derive(Debug, Default)]
pub(super) struct Orphaning(Mutex<HashSet<String>>);

impl Orphaning {
    fn uids(&self) -> MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `parent` if it is being deleted with the `orphan` finalizer.
    pub(super) fn observe(&self, parent: &DynamicObject) {
        let orphan = parent.metadata.deletion_timestamp.is_some()
            && super::mapper::has_finalizer(parent, ORPHAN_FINALIZER);
        if let (true, Some(uid)) = (orphan, parent.metadata.uid.as_deref()) {
            self.uids().insert(uid.to_string());
        }
    }

    /// Forgets a parent that is gone.
    pub(super) fn forget(&self, parent: &DynamicObject) {
        if let Some(uid) = parent.metadata.uid.as_deref() {
            self.uids().remove(uid);
        }
    }

    fn contains(&self, uid: &str) -> bool {
        self.uids().contains(uid)
    }
}

/// What the cleanup step leaves to the rest of the sync.
pub(super) enum Cleanup {
    /// Nothing to do here: the sync goes on.
    Continue,
    /// The parent is being deleted and only the cleanup concerned it: the sync ends.
    Done,
}

/// The finalizer holding a parent with children elsewhere: the controller's finalizer name
/// with another prefix (the same length, so any valid controller name fits).
pub(super) fn elsewhere_finalizer(finalizer: &str) -> String {
    match finalizer.split_once('/') {
        Some((_, name)) => format!("children-elsewhere.metacontroller.io/{name}"),
        None => format!("children-elsewhere.metacontroller.io/{finalizer}"),
    }
}

impl Inner {
    /// Whether parents of this controller may have children elsewhere.
    fn places_elsewhere(&self, parent: &ParentState) -> bool {
        parent.namespace.is_some() && self.children.iter().any(|c| !c.kind.namespaces.is_empty())
    }

    /// Keeps the elsewhere finalizer on live parents that may need it; on a parent being
    /// deleted (finalize hook done), deletes its label-tracked children and then drops it.
    pub(super) async fn cleanup_elsewhere(
        &self,
        parent: &mut ParentState,
    ) -> Result<Cleanup, SyncError> {
        let name = &self.mapper.elsewhere_finalizer;
        let wanted = self.places_elsewhere(parent);
        if !is_deleting(&parent.object) || !wanted {
            let written = reconcile::sync_finalizer(
                &self.common.writer,
                &self.parent_resource,
                parent.object.clone(),
                name,
                wanted,
            )
            .await?;
            return Ok(match written {
                Some(written) => {
                    parent.object = written;
                    Cleanup::Continue
                }
                None => Cleanup::Done,
            });
        }
        if !has_finalizer(&parent.object, name) {
            return Ok(Cleanup::Continue);
        }
        if has_finalizer(&parent.object, self.finalizer()) {
            // The finalize hook has not said `finalized` yet: it runs first.
            return Ok(Cleanup::Continue);
        }
        let orphan = has_finalizer(&parent.object, ORPHAN_FINALIZER)
            || self.mapper.orphaning.contains(&parent.uid);
        if !orphan && self.delete_elsewhere(parent).await? > 0 {
            // Their deletion events bring the parent back (mapper); drop the finalizer then.
            return Ok(Cleanup::Done);
        }
        tracing::info!(controller = self.name(), parent = %parent.key, orphan,
            "children elsewhere cleaned up: dropping the finalizer");
        if let Some(updated) = crate::finalizer::with_finalizer(&parent.object, name, false) {
            match self
                .common
                .writer
                .replace(&self.parent_resource, updated)
                .await
            {
                Err(e) if !e.is_not_found() => return Err(e.into()),
                _ => {}
            }
        }
        Ok(Cleanup::Done)
    }

    /// Deletes the cached label-tracked children of `parent`; returns how many were still
    /// there (0: none left).
    async fn delete_elsewhere(&self, parent: &ParentState) -> Result<usize, SyncError> {
        let parent_ns = parent.namespace.as_deref().unwrap_or_default();
        let mut left = 0;
        for c in &self.children {
            for obj in c.informer.controlled_by(&parent.uid) {
                let tracked = obj.namespace().unwrap_or_default() != parent_ns
                    && reconcile::controller_ref(&obj).is_none();
                if !tracked {
                    continue;
                }
                left += 1;
                if obj.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let value: Value = to_value(&obj, &c.resource)?;
                self.common
                    .writer
                    .delete(&c.resource, &parent.uid, &value)
                    .await?;
            }
        }
        Ok(left)
    }
}
