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
    until_event(cluster, (namespace, name), "SyncError", needle, within).await;
}

/// Waits (at most `within`) for an Event with `reason` on the object `namespace/name` whose
/// message contains `needle`, and returns it.
///
/// # Panics
/// When none comes within `within`.
pub async fn until_event(
    cluster: &TestCluster,
    (namespace, name): (&str, &str),
    reason: &str,
    needle: &str,
    within: std::time::Duration,
) -> Event {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let found = events_about(cluster, namespace, name)
            .await
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.message.as_deref().is_some_and(|m| m.contains(needle))
            });
        if let Some(event) = found {
            return event;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for a {reason} Event on {name} saying {needle:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
