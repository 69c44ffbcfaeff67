//! Controllers under `--watch-namespaces`: a process limited to some namespaces watches no
//! cluster-scoped parent, child, target or attachment type, so a controller declaring one
//! does not start (its reconciler would never see those objects, or be refused writing them).

use metacontroller_dynamic::{ApiResource, WatchScope};

/// A controller names a cluster-scoped resource, or children in namespaces, while the
/// process is limited to other namespaces.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{role} resource {resource}.{api_version} {problem}, which this process does not watch: it is limited to the namespaces {namespaces} (--watch-namespaces)")]
pub struct OutOfScope {
    /// `parent`, `child`, `target` or `attachment`.
    pub role: &'static str,
    /// What is out of reach, e.g. `is cluster-scoped`.
    pub problem: String,
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
            problem: "is cluster-scoped".to_string(),
            resource: resource.name.clone(),
            api_version: resource.api_version.clone(),
            namespaces: scope.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Extension (children elsewhere, `childResources[].namespaces`): refuses a child type whose
/// namespace list names a namespace `scope` does not watch. Children written there would
/// never be seen again (no update, no cleanup), so the controller is refused at start, as
/// for a cluster-scoped type; `["*"]` is checked child by child at sync instead.
pub(crate) fn check_child_namespaces(
    scope: Option<&WatchScope>,
    resource: &ApiResource,
    namespaces: &[String],
) -> Result<(), OutOfScope> {
    let Some(scope) = scope else {
        return Ok(());
    };
    let unwatched: Vec<&str> = namespaces
        .iter()
        .map(String::as_str)
        .filter(|ns| *ns != metacontroller_api::composite::ANY_NAMESPACE)
        .filter(|ns| !scope.reaches(resource, ns))
        .collect();
    if unwatched.is_empty() {
        return Ok(());
    }
    Err(OutOfScope {
        role: "child",
        problem: format!(
            "may have children in the namespaces {} (childResources[].namespaces)",
            unwatched.join(",")
        ),
        resource: resource.name.clone(),
        api_version: resource.api_version.clone(),
        namespaces: scope.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configmaps() -> ApiResource {
        ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "configmaps".into(),
            singular_name: "configmap".into(),
            namespaced: true,
            verbs: Default::default(),
            short_names: Vec::new(),
            subresources: Default::default(),
        }
    }

    #[test]
    fn a_namespace_list_must_be_watched() {
        let scope = WatchScope::new(["a", "b"]).expect("a scope");
        let list = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let check =
            |names: &[&str]| check_child_namespaces(Some(&scope), &configmaps(), &list(names));
        assert!(check(&["a", "b"]).is_ok());
        assert!(check(&["*"]).is_ok(), "any namespace is checked per child");
        let err = check(&["a", "c", "d"]).expect_err("c and d are not watched");
        assert!(err.to_string().contains("namespaces c,d"), "{err}");
        assert!(check_child_namespaces(None, &configmaps(), &list(&["c"])).is_ok());
    }
}
