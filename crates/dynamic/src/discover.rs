//! The I/O half of discovery: [`ResourceMap::discover`] fetches `/api`, `/apis` and every
//! group version's `APIResourceList` from the API server and folds them into a
//! [`ResourceMap`] with `ResourceMap::refresh` (partial failures keep what the previous map
//! knew).

use crate::discovery::{DiscoveryError, ResourceMap};

/// What one discovery refresh produced.
#[derive(Debug)]
pub struct Discovered {
    /// The new map; `None` if nothing loaded (keep the previous one).
    pub update: Option<ResourceMap>,
    /// Group versions that could not be loaded (logged by the caller, not fatal).
    pub errors: Vec<DiscoveryError>,
}

fn fetch_error(source_name: &str, e: kube::Error) -> DiscoveryError {
    DiscoveryError::InvalidDocument {
        source_name: source_name.to_string(),
        message: e.to_string(),
    }
}

impl ResourceMap {
    /// Fetches every group version the server serves and builds a map, keeping group
    /// versions that failed this time from `previous`. Fails only if the group lists
    /// themselves cannot be read (the server is unreachable).
    pub async fn discover(
        client: &kube::Client,
        previous: &ResourceMap,
    ) -> Result<Discovered, kube::Error> {
        let core = client.list_core_api_versions().await?;
        let groups = client.list_api_groups().await?;
        let mut results = Vec::new();
        for version in &core.versions {
            let result = client
                .list_core_api_resources(version)
                .await
                .map_err(|e| fetch_error(version, e));
            results.push((version.clone(), result));
        }
        for gv in crate::discovery::group_versions_of(&groups) {
            let result = client
                .list_api_group_resources(&gv)
                .await
                .map_err(|e| fetch_error(&gv, e));
            results.push((gv, result));
        }
        let (update, errors) = ResourceMap::refresh(previous, results);
        Ok(Discovered { update, errors })
    }
}
