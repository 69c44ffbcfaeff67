//! The first step of a sync: the controller's finalizer in place.

use metacontroller_dynamic::ApiResource;
use serde_json::Value;

use crate::finalizer::{self, FinalizerSync};
use crate::writer::{WriteError, Writer};

/// Before anything else in a sync, puts the controller's finalizer in place (present iff
/// a finalize hook is configured, see [`finalizer::finalizer_sync`]), so whatever the sync
/// does later can be cleaned up. Returns the object as written, or `None` when it is gone.
pub(crate) async fn sync_finalizer(
    writer: &Writer,
    res: &ApiResource,
    object: Value,
    name: &str,
    finalize_hook: bool,
) -> Result<Option<Value>, WriteError> {
    let present = match finalizer::finalizer_sync(&object, name, finalize_hook) {
        FinalizerSync::Keep => return Ok(Some(object)),
        FinalizerSync::Add => true,
        FinalizerSync::Remove => false,
    };
    let Some(updated) = finalizer::with_finalizer(&object, name, present) else {
        return Ok(Some(object));
    };
    match writer.replace(res, updated).await {
        Ok(written) => Ok(Some(written)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}
