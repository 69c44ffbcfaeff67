//! Child names held by objects the parent does not control: met once, reported, and
//! retried only once the holder changed or went.

use super::*;

impl Writer {
    /// Forgets the taken names `change` may have freed (the taker deleted, or changed since
    /// we met it) and returns the children to try again.
    pub(super) fn release_taken(
        &self,
        key: &ObjectKey,
        change: &Change<DynamicObject>,
    ) -> Vec<Change<DynamicObject>> {
        let mut taken = self.taken_lock();
        if taken.is_empty() {
            return Vec::new();
        }
        let rv = match change {
            Change::Deleted(_) => None,
            _ => change.object().resource_version().map(str::to_owned),
        };
        let mut released = Vec::new();
        taken.retain(|(_, k), t| {
            if k != key || rv.as_deref() == Some(t.resource_version.as_str()) {
                return true;
            }
            if let Ok(obj) = serde_json::from_value::<DynamicObject>(t.desired.clone()) {
                released.push(Change::Added(std::sync::Arc::new(obj)));
            }
            false
        });
        released
    }

    pub(super) fn taken_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(String, ObjectKey), Taken>> {
        self.taken.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The error for a child whose name is known to be taken, if it is.
    pub(super) fn known_taken(
        &self,
        owner: &str,
        key: &ObjectKey,
        what: &str,
    ) -> Option<WriteError> {
        self.taken_lock()
            .get(&(owner.to_string(), key.clone()))
            .map(|t| WriteError::NameTaken {
                what: what.to_string(),
                holder: t.holder.clone(),
            })
    }

    /// After a create met an existing object (or before a server-side apply that would
    /// create): reads it from the API server. `Ok(None)` when it is ours after all (a
    /// stale cache) or gone; otherwise it is remembered as taken and reported.
    pub(super) async fn check_taken(
        &self,
        res: &ApiResource,
        owner: &str,
        key: &ObjectKey,
        desired: &Value,
        what: &str,
    ) -> Result<Option<WriteError>, WriteError> {
        let Some(existing) = self.get(res, &key.namespace, &key.name).await? else {
            return Ok(None);
        };
        let controller = existing.controller_uid().map(str::to_owned);
        if controller.as_deref() == Some(owner) {
            return Ok(None);
        }
        let holder = match existing
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|refs| refs.iter().find(|r| r["controller"] == Value::Bool(true)))
        {
            Some(r) => format!(
                "controlled by {} {}",
                r["kind"].as_str().unwrap_or_default(),
                r["name"].as_str().unwrap_or_default()
            ),
            None => "no controller".to_string(),
        };
        let holder = format!("uid {}, {holder}", existing.uid().unwrap_or_default());
        // Upstream logs this at info level and tries again every sync; we say it once per
        // meeting and wait for the object to change.
        tracing::warn!(%what, %holder, "child name taken by an object we do not control");
        self.taken_lock().insert(
            (owner.to_string(), key.clone()),
            Taken {
                resource_version: existing.resource_version().unwrap_or_default().to_string(),
                desired: desired.clone(),
                holder: holder.clone(),
            },
        );
        Ok(Some(WriteError::NameTaken {
            what: what.to_string(),
            holder,
        }))
    }
}

/// An object that holds a child's name without being controlled by the child's parent.
#[derive(Debug, Clone)]
pub(super) struct Taken {
    /// Its resourceVersion when we last met it.
    pub(super) resource_version: String,
    /// What we wanted to create (it carries our controller ownerReference): handed back by
    /// [`Writer::observe`] once the name may be free, so the handler requeues the parent.
    pub(super) desired: Value,
    /// For the error message.
    pub(super) holder: String,
}
