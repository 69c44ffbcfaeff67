//! Child names held by objects the parent does not control: met once, reported, and
//! retried once the holder changed or went.
//!
//! The informer event of the holder's change usually releases the name. A sharded replica
//! does not see every event, though: its child informers keep only the objects whose
//! controller is a parent of its own shards (see `metacontroller_dynamic::informer`), so a
//! holder controlled by another replica's parent can go without this replica hearing of
//! it. A taken name is therefore believed for [`TAKEN_RECHECK`] only; a sync after that
//! reads the object again (a GET, never a write) before reporting the name taken.

use std::time::{Duration, Instant};

use super::*;

/// How long a taken name is believed without reading the holder again. A parent stuck on
/// a taken name costs at most one GET per this period (and only when it is synced: its
/// failures back off as any other sync's), and learns within it that an unseen holder
/// went.
pub(crate) const TAKEN_RECHECK: Duration = Duration::from_secs(5);

/// What is known of a child's name before writing it.
pub(super) enum Known {
    /// Not known to be taken.
    Free,
    /// Taken, as read less than [`TAKEN_RECHECK`] ago.
    Taken(WriteError),
    /// Taken when last read, long enough ago to read again.
    Stale,
}

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

    /// What is known of a child's name: taken (the error to report), free, or to be read
    /// again ([`Writer::check_taken`]).
    pub(super) fn known_taken(&self, owner: &str, key: &ObjectKey, what: &str) -> Known {
        match self.taken_lock().get(&(owner.to_string(), key.clone())) {
            None => Known::Free,
            Some(t) if t.checked.elapsed() >= TAKEN_RECHECK => Known::Stale,
            Some(t) => Known::Taken(WriteError::NameTaken {
                what: what.to_string(),
                holder: t.holder.clone(),
            }),
        }
    }

    /// After a create met an existing object (or before a server-side apply that would
    /// create, or when a taken name is [`Known::Stale`]): reads it from the API server.
    /// `Ok(None)` when it is ours after all (a stale cache) or gone, and the name is no
    /// longer taken; otherwise it is remembered as taken (read now) and reported.
    pub(super) async fn check_taken(
        &self,
        res: &ApiResource,
        owner: &str,
        key: &ObjectKey,
        desired: &Value,
        what: &str,
    ) -> Result<Option<WriteError>, WriteError> {
        let existing = self.get(res, &key.namespace, &key.name).await?;
        let foreign = existing.filter(|e| e.controller_uid() != Some(owner));
        let Some(existing) = foreign else {
            self.taken_lock().remove(&(owner.to_string(), key.clone()));
            return Ok(None);
        };
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
        let resource_version = existing.resource_version().unwrap_or_default().to_string();
        let mut taken = self.taken_lock();
        let entry = (owner.to_string(), key.clone());
        // Upstream logs this at info level and tries again every sync; we say it once per
        // meeting (not again when a recheck finds the same object) and wait for it to change.
        if taken
            .get(&entry)
            .is_none_or(|t| t.resource_version != resource_version)
        {
            tracing::warn!(%what, %holder, "child name taken by an object we do not control");
        }
        taken.insert(
            entry,
            Taken {
                resource_version,
                desired: desired.clone(),
                holder: holder.clone(),
                checked: Instant::now(),
            },
        );
        drop(taken);
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
    /// When it was last read from the API server (see [`TAKEN_RECHECK`]).
    pub(super) checked: Instant,
}
