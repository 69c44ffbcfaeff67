//! The reconciler side of a rollout: the driver sees a controller's parents, queues
//! some of them and records Events through this, whatever the controller's kind.

use std::collections::HashSet;
use std::sync::Arc;

use metacontroller_api::rollout::assign::ParentKey;
use metacontroller_workqueue::Priority;
use serde_json::Value;

use super::driver::{parent_key, parent_of, Parent, RolloutHost};
use crate::reconcile::Reconciler;

/// A reconciler as the host of its rollout.
pub(crate) struct Host<R>(pub(crate) Arc<R>);

impl<R: Reconciler> RolloutHost for Host<R> {
    fn parents(&self) -> Vec<Parent> {
        let r = &self.0;
        r.cached_keys()
            .iter()
            .filter_map(|k| r.object(k))
            .filter(|o| r.cares(o))
            .map(parent_of)
            .collect()
    }

    fn resync(&self, keys: &[ParentKey]) {
        let wanted: HashSet<&ParentKey> = keys.iter().collect();
        let r = &self.0;
        for key in r.cached_keys() {
            if r.object(&key)
                .is_some_and(|o| wanted.contains(&parent_key(&o)))
            {
                r.common().queue.add(key, Priority::Event);
            }
        }
    }

    fn parent_resources(&self) -> Vec<Arc<metacontroller_dynamic::ApiResource>> {
        self.0.parent_resources()
    }

    fn cares(&self, object: &Value) -> bool {
        self.0.cares(object)
    }

    fn event(&self, object: &Value, warning: bool, reason: &str, message: String) {
        let events = &self.0.common().events;
        if warning {
            events.warning(object, reason, message);
        } else {
            events.normal(object, reason, message);
        }
    }
}
