//! Who owns a written object, as the caches show it: the informer watching it, whether it
//! is present, and the owner its controller ownerReference names.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::DynamicObject;
use metacontroller_dynamic::{ApiResource, Change, Informer, NamespacedName, ObjectKey};

/// The informer among `watched` of the resource the written object `key` names, and the
/// object's `namespace/name`; `None` when that resource is not watched.
pub(crate) fn watching_informer<'a>(
    watched: impl IntoIterator<Item = (&'a ApiResource, &'a Informer)>,
    key: &ObjectKey,
) -> Option<(&'a Informer, NamespacedName)> {
    // Keys are `<apiVersion>/<plural>` (see `writer::object_key`).
    let (api_version, plural) = key.resource.rsplit_once('/')?;
    let (_, informer) = watched
        .into_iter()
        .find(|(res, _)| res.api_version == api_version && res.name == plural)?;
    Some((
        informer,
        NamespacedName::new(key.namespace.clone(), key.name.clone()),
    ))
}

/// For expectations: whether the informer of `key`'s resource (among `watched`) holds it.
/// An accepted delete (deletionTimestamp set) counts as done, so a finalizer or grace period
/// on a written object does not hold up its owner's syncs. `None` when `key`'s resource is
/// not watched.
pub(crate) fn presence<'a>(
    watched: impl IntoIterator<Item = (&'a ApiResource, &'a Informer)>,
    key: &ObjectKey,
) -> Option<bool> {
    let (informer, name) = watching_informer(watched, key)?;
    Some(
        informer
            .get(&name)
            .is_some_and(|o| o.metadata.deletion_timestamp.is_none()),
    )
}

/// A relist replays unchanged objects: for written objects (children, attachments) that is
/// no reason to sync their owner, whose own resync covers it.
pub(crate) fn is_unchanged_replay(change: &Change<DynamicObject>) -> bool {
    matches!(change, Change::Updated { old, new }
        if old.metadata.resource_version == new.metadata.resource_version)
}

/// The controller ownerReference of `obj`, if any.
pub(crate) fn controller_ref(obj: &DynamicObject) -> Option<&OwnerReference> {
    obj.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// Upstream `resolveControllerRef`: the object of `owners` (the informer of `res`) that
/// `obj`'s controller ownerReference names — same group and kind (any version), same uid.
pub(crate) fn resolve_controller_ref(
    obj: &DynamicObject,
    res: &ApiResource,
    owners: &Informer,
) -> Option<(NamespacedName, Arc<DynamicObject>)> {
    let owner = controller_ref(obj)?;
    if owner.kind != res.kind || crate::meta::api_group(&owner.api_version) != res.group {
        return None;
    }
    let namespace = if res.namespaced {
        obj.metadata.namespace.clone().unwrap_or_default()
    } else {
        String::new()
    };
    let key = NamespacedName::new(namespace, owner.name.clone());
    let found = owners.get(&key)?;
    (found.metadata.uid.as_deref() == Some(owner.uid.as_str())).then_some((key, found))
}
