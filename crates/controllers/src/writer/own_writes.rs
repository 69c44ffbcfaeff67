//! Our own writes as the informers confirm them: the overlay of objects our writes
//! returned, and the expectations of creates and deletes per owner.

use super::*;

impl Writer {
    /// Informer handler hook: confirms expectations and lets the overlay drop entries the
    /// cache caught up with. Call it for every change of every resource this writer writes.
    ///
    /// Returns, as `Added` changes of the object we wanted (with our controller
    /// ownerReference), the children whose name was taken by a foreign object that has now
    /// changed or gone: pass them to the child handler so their parents are synced again
    /// (a foreign object's own events map to no parent).
    pub(crate) fn observe(
        &self,
        res: &ApiResource,
        change: &Change<DynamicObject>,
    ) -> Vec<Change<DynamicObject>> {
        let obj = change.object();
        let key = object_key(
            res,
            obj.metadata.namespace.as_deref().unwrap_or_default(),
            obj.metadata.name.as_deref().unwrap_or_default(),
        );
        let owner = obj.controller_uid().map(str::to_owned);
        let released = self.release_taken(&key, change);
        match change {
            Change::Deleted(_) => {
                if let Some(uid) = obj.metadata.uid.as_deref() {
                    // A parent that is gone waits for no name any more.
                    self.taken_lock().retain(|(owner, _), _| owner != uid);
                }
                self.overlay.observe_deleted(&key);
                self.applied_lock().remove(&key);
                if let Some(owner) = owner {
                    self.expectations.observed_delete(&owner, &key);
                }
            }
            Change::Added(_) | Change::Updated { .. } => {
                if let Some(rv) = obj.resource_version() {
                    self.overlay
                        .observe(&key, &json!({"metadata": {"resourceVersion": rv}}));
                }
                if let Some(owner) = owner {
                    if obj.metadata.deletion_timestamp.is_some() {
                        // Deletion accepted; finalizers or a grace period may keep the object
                        // a while, but our delete is confirmed.
                        self.expectations.observed_delete(&owner, &key);
                    } else {
                        self.expectations.observed_create(&owner, &key);
                    }
                }
            }
        }
        released
    }

    pub(super) fn record(
        &self,
        res: &ApiResource,
        key: &ObjectKey,
        based_on: Option<&str>,
        obj: &DynamicObject,
    ) {
        if let Ok(v) = to_value(obj, res) {
            self.overlay.record_write(key.clone(), based_on, v);
        }
    }
}
