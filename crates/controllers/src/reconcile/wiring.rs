//! Informer events into the queue: their priority, and the handlers that feed the
//! own-writes overlay before routing a change to the keys it concerns.

use std::sync::Arc;

use kube::core::DynamicObject;
use metacontroller_dynamic::{ApiResource, Change, HandlerId, Informer, Informers, Origin};
use metacontroller_workqueue::Priority;

use crate::writer::Writer;

/// The queue priority of an informer event: watch events go before relist replays, so a
/// cache flush never starves real changes.
pub(crate) fn priority(origin: Origin) -> Priority {
    match origin {
        Origin::Watch => Priority::Event,
        Origin::Relist => Priority::Bulk,
    }
}

/// Watches the informer of synced objects (parents / targets): changes feed the own-writes
/// overlay, a deleted object's expectations are dropped, then `route` queues keys.
pub(crate) fn watch_owners(
    informer: &Informer,
    writer: Arc<Writer>,
    res: Arc<ApiResource>,
    route: impl Fn(&Change<DynamicObject>, Origin) + Send + Sync + 'static,
) -> HandlerId {
    informer.add_handler(Arc::new(move |change, origin| {
        writer.observe(&res, change);
        if let Change::Deleted(obj) = change {
            if let Some(uid) = obj.metadata.uid.as_ref() {
                writer.expectations().forget(uid);
            }
        }
        route(change, origin);
    }))
}

/// Leases the informer of a resource a controller writes (retained as children) and
/// watches it with [`watch_owned`].
pub(crate) fn lease_owned(
    informers: &Informers,
    writer: &Arc<Writer>,
    res: &Arc<ApiResource>,
    route: impl Fn(&Change<DynamicObject>, Origin) + Send + Sync + 'static,
) -> (metacontroller_dynamic::InformerLease, HandlerId) {
    let informer = informers.lease_keeping(res, metacontroller_dynamic::Keep::Children);
    let handler = watch_owned(&informer, writer.clone(), res.clone(), route);
    (informer, handler)
}

/// Watches the informer of objects a controller writes (children, attachments, revisions):
/// changes feed the own-writes overlay, then `route` queues keys — also for the objects
/// whose name a foreign object has just freed (a foreign object's own events map to no
/// parent, so their parents are queued here).
pub(crate) fn watch_owned(
    informer: &Informer,
    writer: Arc<Writer>,
    res: Arc<ApiResource>,
    route: impl Fn(&Change<DynamicObject>, Origin) + Send + Sync + 'static,
) -> HandlerId {
    informer.add_handler(Arc::new(move |change, origin| {
        let released = writer.observe(&res, change);
        route(change, origin);
        released.iter().for_each(|c| route(c, origin));
    }))
}
