//! Tells the owner of a controller object why its controller syncs nothing: a resource it
//! reads cannot be listed (no permission, no longer served). Such a controller waits for
//! that cache instead of calling hooks with objects missing, which only the logs showed. A
//! Warning `ListError` Event on the controller object says which resource and why, once per
//! change of what fails (the recorder's per-object limit and aggregation apply on top).

use std::collections::HashMap;

use metacontroller_controllers::events::{reason, EventRecorder};
use metacontroller_dynamic::ResourceId;
use serde_json::Value;

/// The Event reason (not one of upstream's: upstream waits for its caches silently).
pub(crate) const LIST_ERROR: &str = reason::LIST_ERROR;

/// The last report per controller name, so an unchanged failure is not reported again.
#[derive(Default)]
pub(crate) struct ListErrorReports {
    reported: HashMap<String, String>,
}

impl ListErrorReports {
    /// Reports what controller `name` (object `object`) cannot list now, if that changed
    /// since the last report; logs once it lists everything again.
    pub(crate) fn check(
        &mut self,
        events: &EventRecorder,
        kind: &str,
        name: &str,
        object: &Value,
        unlistable: Vec<(ResourceId, String)>,
    ) {
        if unlistable.is_empty() {
            if self.reported.remove(name).is_some() {
                tracing::info!(%kind, %name, "every resource of the controller can be listed again");
            }
            return;
        }
        let message = message(&unlistable);
        if self.reported.get(name) == Some(&message) {
            return;
        }
        tracing::warn!(%kind, %name, error = %message, "controller waits for resources it cannot list");
        events.warning(object, LIST_ERROR, message.clone());
        self.reported.insert(name.to_string(), message);
    }

    /// Forgets controller `name` (restarted: its new reconciler is reported afresh).
    pub(crate) fn forget(&mut self, name: &str) {
        self.reported.remove(name);
    }

    /// Keeps only the controllers `running` says still run.
    pub(crate) fn retain(&mut self, running: impl Fn(&str) -> bool) {
        self.reported.retain(|name, _| running(name));
    }
}

/// `Cannot list <resource> (<apiVersion>): <error>` per resource, then what it means.
fn message(unlistable: &[(ResourceId, String)]) -> String {
    let causes: Vec<String> = unlistable
        .iter()
        .map(|(id, error)| format!("Cannot list {} ({}): {error}", id.resource, id.api_version))
        .collect();
    let pronoun = if unlistable.len() == 1 { "it" } else { "they" };
    format!(
        "{}; the controller syncs nothing until {pronoun} can be listed",
        causes.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(api_version: &str, resource: &str) -> ResourceId {
        ResourceId {
            api_version: api_version.into(),
            resource: resource.into(),
        }
    }

    #[test]
    fn the_message_names_each_resource_and_its_error() {
        let one = message(&[(id("v1", "configmaps"), "403 Forbidden".into())]);
        assert_eq!(
            one,
            "Cannot list configmaps (v1): 403 Forbidden; the controller syncs nothing until it can be listed"
        );
        let two = message(&[
            (id("v1", "configmaps"), "403".into()),
            (id("example.com/v1", "widgets"), "404".into()),
        ]);
        assert!(two.starts_with(
            "Cannot list configmaps (v1): 403; Cannot list widgets (example.com/v1): 404; "
        ));
        assert!(two.ends_with("syncs nothing until they can be listed"));
    }
}
