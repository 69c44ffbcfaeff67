//! Controllers under `--watch-namespaces`: a process limited to some namespaces watches no
//! cluster-scoped parent, child, target or attachment type, so a controller declaring one
//! does not start (its reconciler would never see those objects, or be refused writing them).

use metacontroller_dynamic::{ApiResource, WatchScope};

/// A controller names a cluster-scoped resource while the process is limited to namespaces.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{role} resource {resource}.{api_version} is cluster-scoped, which this process does not watch: it is limited to the namespaces {namespaces} (--watch-namespaces)")]
pub struct OutOfScope {
    /// `parent`, `child`, `target` or `attachment`.
    pub role: &'static str,
    /// The resource's plural name.
    pub resource: String,
    /// Its apiVersion.
    pub api_version: String,
    /// The watched namespaces, comma-separated.
    pub namespaces: String,
}

/// Refuses `resource` (playing `role` in a controller) when it is cluster-scoped and `scope`
/// limits the process to namespaces.
pub(crate) fn check(
    scope: Option<&WatchScope>,
    role: &'static str,
    resource: &ApiResource,
) -> Result<(), OutOfScope> {
    match scope {
        Some(scope) if !resource.namespaced => Err(OutOfScope {
            role,
            resource: resource.name.clone(),
            api_version: resource.api_version.clone(),
            namespaces: scope.to_string(),
        }),
        _ => Ok(()),
    }
}
