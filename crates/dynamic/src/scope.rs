//! Which namespaces a process watches (`--watch-namespaces`), and what an informer of one
//! resource lists and watches under it.
//!
//! A namespaced install holds Roles in its namespaces only, so every list or watch must name
//! one of them: an informer of a namespaced resource runs one watch per namespace. A
//! cluster-scoped resource cannot be watched at all unless the install is granted it
//! cluster-wide (CustomResourceDefinitions, for merge schemas): every other cluster-scoped
//! informer stays empty instead of being refused (403) again and again.

use std::collections::BTreeSet;

use crate::discovery::ApiResource;

/// The namespaces a process is limited to, and the cluster-scoped resources it may still
/// watch cluster-wide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchScope {
    namespaces: BTreeSet<String>,
    /// `(group, plural)` of cluster-scoped resources the install may list cluster-wide.
    cluster_wide: BTreeSet<(String, String)>,
}

/// What an informer of one resource lists and watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Watched {
    /// Every namespace (one cluster-wide watch), or a cluster-scoped resource.
    All,
    /// One watch per namespace, in this order.
    Namespaces(Vec<String>),
    /// Nothing: a cluster-scoped resource outside the scope. The informer stays empty.
    Nothing,
}

impl WatchScope {
    /// The scope of `namespaces` (blank entries ignored, duplicates merged); `None` when no
    /// namespace is left, which means every namespace.
    pub fn new<I, S>(namespaces: I) -> Option<WatchScope>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let namespaces: BTreeSet<String> = namespaces
            .into_iter()
            .map(|ns| ns.as_ref().trim().to_string())
            .filter(|ns| !ns.is_empty())
            .collect();
        (!namespaces.is_empty()).then(|| WatchScope {
            namespaces,
            cluster_wide: BTreeSet::new(),
        })
    }

    /// Also watches the cluster-scoped resource `group`/`plural` cluster-wide.
    pub fn allow_cluster_wide(mut self, group: &str, plural: &str) -> WatchScope {
        self.cluster_wide
            .insert((group.to_string(), plural.to_string()));
        self
    }

    /// The namespaces, sorted.
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.namespaces.iter().map(String::as_str)
    }

    /// Whether `namespace` is watched.
    #[cfg(test)]
    pub(crate) fn contains(&self, namespace: &str) -> bool {
        self.namespaces.contains(namespace)
    }

    /// Whether an object of `resource` in `namespace` (ignored for cluster-scoped
    /// resources) is within the scope: its informer sees it, so the process may own it.
    pub fn reaches(&self, resource: &ApiResource, namespace: &str) -> bool {
        match self.watched(resource) {
            Watched::All => true,
            Watched::Namespaces(_) => self.namespaces.contains(namespace),
            Watched::Nothing => false,
        }
    }

    /// What an informer of `resource` watches.
    pub(crate) fn watched(&self, resource: &ApiResource) -> Watched {
        if resource.namespaced {
            return Watched::Namespaces(self.namespaces.iter().cloned().collect());
        }
        let key = (resource.group.clone(), resource.name.clone());
        if self.cluster_wide.contains(&key) {
            Watched::All
        } else {
            Watched::Nothing
        }
    }
}

impl std::fmt::Display for WatchScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list: Vec<&str> = self.namespaces().collect();
        f.write_str(&list.join(","))
    }
}

/// What an informer of `resource` watches under `scope` (`None`: everything).
pub(crate) fn watched(scope: Option<&WatchScope>, resource: &ApiResource) -> Watched {
    scope.map_or(Watched::All, |scope| scope.watched(resource))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(group: &str, name: &str, namespaced: bool) -> ApiResource {
        ApiResource {
            api_version: if group.is_empty() {
                "v1".into()
            } else {
                format!("{group}/v1")
            },
            group: group.into(),
            version: "v1".into(),
            name: name.into(),
            singular_name: String::new(),
            kind: "K".into(),
            namespaced,
            verbs: Default::default(),
            short_names: Vec::new(),
            subresources: Default::default(),
        }
    }

    #[test]
    fn empty_means_everything() {
        assert_eq!(WatchScope::new(["", " "]), None);
        assert_eq!(
            watched(None, &resource("", "configmaps", true)),
            Watched::All
        );
    }

    #[test]
    fn namespaced_resources_get_one_watch_per_namespace() {
        let scope = WatchScope::new(["b", " a", "b"]).unwrap();
        assert_eq!(scope.to_string(), "a,b");
        assert!(scope.contains("a") && !scope.contains("c"));
        let configmaps = resource("", "configmaps", true);
        assert!(scope.reaches(&configmaps, "a") && !scope.reaches(&configmaps, "c"));
        let roles = resource("rbac.authorization.k8s.io", "clusterroles", false);
        assert!(!scope.reaches(&roles, ""));
        let scope = scope.allow_cluster_wide("rbac.authorization.k8s.io", "clusterroles");
        assert!(scope.reaches(&roles, ""));
        assert_eq!(
            scope.watched(&resource("", "configmaps", true)),
            Watched::Namespaces(vec!["a".into(), "b".into()])
        );
    }

    #[test]
    fn cluster_scoped_resources_only_when_allowed() {
        let scope = WatchScope::new(["a"])
            .unwrap()
            .allow_cluster_wide("apiextensions.k8s.io", "customresourcedefinitions");
        assert_eq!(
            scope.watched(&resource("", "namespaces", false)),
            Watched::Nothing
        );
        assert_eq!(
            scope.watched(&resource(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                false
            )),
            Watched::All
        );
    }
}
