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
