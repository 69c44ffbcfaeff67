//! State follows ownership: what a controller keeps per parent goes when the parent leaves
//! this process's caches.
//!
//! A parent leaves in two ways. Deleted, it is reported (a `Deleted` event, then one more
//! sync that finds it gone), and each structure drops its entry on that path. Pruned — a
//! sharded replica released the parent's shard ([`Informers::prune_filtered`]) — it leaves
//! silently: no event, no sync, since nothing happened to it. After every prune the
//! controller therefore sweeps everything it keeps per parent against its caches
//! ([`forget_departed`]): cached customize rules (and the informer leases only they
//! needed), hook response (ETag) caches, create/delete expectations, names known to be
//! taken, apply hashes and own-writes entries of the parents' children. The sweep also
//! catches a deletion whose sync this replica never ran (the key was refused while its
//! shard moved).
//!
//! [`Informers::prune_filtered`]: metacontroller_dynamic::Informers::prune_filtered

use std::collections::HashSet;

use metacontroller_dynamic::{ApiResource, Informer, NamespacedName, ObjectKey};

use crate::reconcile::Common;
use crate::related::ParentId;

/// The parent (or decorator target) informers of one controller: which parents this
/// process still holds.
pub(crate) struct Held<'a> {
    parents: Vec<(&'a ApiResource, &'a Informer)>,
}

impl<'a> Held<'a> {
    pub(crate) fn new(parents: Vec<(&'a ApiResource, &'a Informer)>) -> Self {
        Held { parents }
    }

    /// Whether the parent `id` is cached.
    fn holds(&self, id: &ParentId) -> bool {
        self.parents
            .iter()
            .filter(|(res, _)| res.api_version == id.api_version && res.kind == id.kind)
            .any(|(_, informer)| informer.contains(&id.key))
    }

    /// Whether the parent a hook call named is cached: `namespace/name` (sync and
    /// customize calls of composite parents, customize calls of decorator targets) or
    /// `<apiVersion>/<Kind>/<namespace>/<name>` (sync calls of decorator targets).
    fn holds_hook_key(&self, key: &str) -> bool {
        for (res, informer) in &self.parents {
            let prefix = format!("{}/{}/", res.api_version, res.kind);
            if let Some(rest) = key.strip_prefix(&prefix) {
                if NamespacedName::parse(rest).is_some_and(|k| informer.contains(&k)) {
                    return true;
                }
            }
        }
        NamespacedName::parse(key).is_some_and(|k| self.parents.iter().any(|(_, i)| i.contains(&k)))
    }

    /// The uids of the cached parents (expectations and taken names are kept by uid).
    fn uids(&self) -> HashSet<String> {
        let mut uids = HashSet::new();
        for (_, informer) in &self.parents {
            uids.extend(informer.uids());
        }
        uids
    }
}

/// Whether one of `watched` caches the object `key` names (`None`: its resource is not
/// watched). Unlike [`crate::reconcile::presence`], an object being deleted counts.
pub(crate) fn cached<'a>(
    watched: impl IntoIterator<Item = (&'a ApiResource, &'a Informer)>,
    key: &ObjectKey,
) -> Option<bool> {
    let (informer, name) = crate::reconcile::watching_informer(watched, key)?;
    Some(informer.contains(&name))
}

/// After the last sync of a deleted parent: drops the expectations and taken names of
/// owners no longer cached, and the own-writes entries and apply hashes of objects no
/// longer cached. The `Deleted` events dropped most of it, but a sync that was running
/// then may have recorded more afterwards: a write whose response came after the written
/// object's `Deleted` event (the parent or a child deleted meanwhile) would otherwise wait
/// forever for an event. The parent's uid is not known any more; usually nothing is held
/// and nothing is scanned.
pub(crate) fn forget_deleted_owners<K>(
    common: &Common<K>,
    held: &Held<'_>,
    cached: &dyn Fn(&ObjectKey) -> Option<bool>,
) where
    K: Clone + Eq + std::hash::Hash + Send + 'static,
{
    if !common.writer.holds_owner_state() && !common.writer.holds_writes() {
        return;
    }
    // Listing every cached parent's uid costs as much as the cache is large: only when an
    // entry asks (an owner's state, or a write of an object no longer cached).
    let uids = std::cell::OnceCell::new();
    let live = |uid: &str| uids.get_or_init(|| held.uids()).contains(uid);
    common.writer.retain_owners(&live, cached);
}

/// Drops the entries of every parent `held` no longer caches from the structures every
/// controller kind keeps (see the module docs); `cached` answers for written objects.
pub(crate) fn forget_departed<K>(
    common: &Common<K>,
    held: &Held<'_>,
    cached: &dyn Fn(&ObjectKey) -> Option<bool>,
) where
    K: Clone + Eq + std::hash::Hash + Send + 'static,
{
    let rules = common.related.retain(|id| held.holds(id));
    common
        .hooks
        .retain_parents(&common.name, &|key| held.holds_hook_key(key));
    let uids = held.uids();
    common
        .writer
        .retain_owners(&|uid| uids.contains(uid), cached);
    tracing::debug!(
        controller = %common.name,
        related_rules_dropped = rules,
        "dropped the state of parents that left the caches"
    );
}
