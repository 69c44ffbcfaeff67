//! The Events the binary records, read as `kubectl get events` shows them.

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};

use crate::TestCluster;

/// The Events in `namespace` about the object named `name` (any kind), in list order.
///
/// # Panics
/// When the Events cannot be listed.
pub async fn events_about(cluster: &TestCluster, namespace: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(cluster.client(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing the Events in {namespace}: {e}"))
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .collect()
}

/// Waits (at most `within`) for a `SyncError` Event on the object `namespace/name` whose
/// message contains `needle`.
pub async fn until_sync_error(
    cluster: &TestCluster,
    namespace: &str,
    name: &str,
    needle: &str,
    within: std::time::Duration,
) {
    let what = format!("a SyncError on {name} saying {needle:?}");
    crate::eventually_within(&what, within, || async {
        events_about(cluster, namespace, name)
            .await
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("SyncError")
                    && e.message.as_deref().is_some_and(|m| m.contains(needle))
            })
    })
    .await;
}
