//! The pure part of API discovery: a [`ResourceMap`] built from discovery documents.
//!
//! The runtime fetches `/api`, `/apis`, then one `APIResourceList` per group version
//! (`/api/v1`, `/apis/{group}/{version}`) and builds a map that answers "which resource is
//! `(apiVersion, plural)`" and "which resource serves `(apiVersion, kind)`", whether it is
//! namespaced, which verbs it supports and which subresources (`status`, `scale`) it has.
//! Refreshing on `--discovery-interval` compares the new map with the old one
//! ([`ResourceMap::diff`]) to start informers for new CRDs and stop those of removed ones.
//!
//! Like upstream (client-go `ServerGroupsAndResources`), discovery may be partial: a group
//! version that fails to load is reported, not fatal. [`ResourceMap::keep_failed_from`]
//! carries such group versions over from the previous map, so a transient failure does not
//! look like the resources were removed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroupList, APIResourceList};

/// Why (part of) a discovery document was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// The document is not an `APIResourceList` / `APIGroupList`.
    #[error("invalid discovery document for {source_name}: {message}")]
    InvalidDocument {
        /// Where the document came from (a URL path or group version).
        source_name: String,
        /// The decoding error.
        message: String,
    },
    /// `groupVersion` is empty or has more than one `/`.
    #[error("invalid groupVersion {0:?}")]
    InvalidGroupVersion(String),
    /// A resource entry with an empty name or kind.
    #[error("{group_version}: resources[{index}]: {message}")]
    InvalidResource {
        /// The list's group version.
        group_version: String,
        /// Index in `resources`.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

/// Splits `apiVersion` into (group, version); the core group is `""` (`v1`).
pub(crate) fn parse_api_version(api_version: &str) -> Result<(&str, &str), DiscoveryError> {
    let invalid = || DiscoveryError::InvalidGroupVersion(api_version.to_string());
    match api_version.split_once('/') {
        None if !api_version.is_empty() => Ok(("", api_version)),
        None => Err(invalid()),
        Some((g, v)) if !g.is_empty() && !v.is_empty() && !v.contains('/') => Ok((g, v)),
        Some(_) => Err(invalid()),
    }
}

/// A subresource such as `status` or `scale`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subresource {
    /// Kind served by the subresource (e.g. `Scale`; for `status` the parent kind).
    pub kind: String,
    /// Verbs the subresource supports.
    pub verbs: BTreeSet<String>,
}

/// One API resource (a main resource, not a subresource) of one group version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiResource {
    /// `v1`, `apps/v1`, ...
    pub api_version: String,
    /// API group (`""` for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource name (`deployments`).
    pub name: String,
    /// Singular name (may be empty in older servers' documents).
    pub singular_name: String,
    /// Kind (`Deployment`).
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Supported verbs.
    pub verbs: BTreeSet<String>,
    /// Short names (`deploy`).
    pub short_names: Vec<String>,
    /// Subresources by name (`status`, `scale`).
    pub subresources: BTreeMap<String, Subresource>,
}

impl ApiResource {
    /// The same resource as kube-rs names it (for `kube::Api::*_with`).
    pub fn to_kube(&self) -> kube::discovery::ApiResource {
        kube::discovery::ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            plural: self.name.clone(),
        }
    }

    /// Whether the resource has subresource `name` (e.g. `status`).
    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.contains_key(name)
    }

    /// Whether the resource supports `verb` (e.g. `watch`).
    #[cfg(test)]
    pub(crate) fn supports_verb(&self, verb: &str) -> bool {
        self.verbs.contains(verb)
    }

    /// Whether an informer can run on it (list and watch).
    #[cfg(test)]
    pub(crate) fn is_watchable(&self) -> bool {
        self.supports_verb("list") && self.supports_verb("watch")
    }

    /// The URL path of the collection (`namespace` ignored for cluster-scoped resources;
    /// `None` on a namespaced resource means all namespaces).
    #[cfg(test)]
    pub(crate) fn collection_path(&self, namespace: Option<&str>) -> String {
        let prefix = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            Some(ns) if self.namespaced => format!("{prefix}/namespaces/{ns}/{}", self.name),
            _ => format!("{prefix}/{}", self.name),
        }
    }

    /// Identifier of this resource.
    pub fn id(&self) -> ResourceId {
        ResourceId {
            api_version: self.api_version.clone(),
            resource: self.name.clone(),
        }
    }
}

/// (apiVersion, plural resource name): what controller specs name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId {
    /// `v1`, `apps/v1`, ...
    pub api_version: String,
    /// Plural name.
    pub resource: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct GroupVersion {
    resources: BTreeMap<String, Arc<ApiResource>>,
    /// Kind → resource name. When several resources serve one kind, the first listed wins.
    kinds: BTreeMap<String, String>,
}

/// All discovered resources, by group version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceMap {
    group_versions: BTreeMap<String, GroupVersion>,
}

impl ResourceMap {
    /// Builds a map from resource lists. Invalid lists or entries are skipped and reported;
    /// the rest is used.
    pub fn from_lists<'a>(
        lists: impl IntoIterator<Item = &'a APIResourceList>,
    ) -> (ResourceMap, Vec<DiscoveryError>) {
        let mut map = ResourceMap::default();
        let mut errors = Vec::new();
        for list in lists {
            if let Err(e) = map.insert_list(list, &mut errors) {
                errors.push(e);
            }
        }
        (map, errors)
    }

    /// Decodes one `APIResourceList` JSON document (from `source_name`, for messages).
    #[cfg(test)]
    pub(crate) fn parse_list(
        source_name: &str,
        json: &[u8],
    ) -> Result<APIResourceList, DiscoveryError> {
        serde_json::from_slice(json).map_err(|e| DiscoveryError::InvalidDocument {
            source_name: source_name.to_string(),
            message: e.to_string(),
        })
    }

    /// Adds (or replaces) one group version's resources.
    pub(crate) fn insert_list(
        &mut self,
        list: &APIResourceList,
        errors: &mut Vec<DiscoveryError>,
    ) -> Result<(), DiscoveryError> {
        let gv_name = list.group_version.as_str();
        let (group, version) = parse_api_version(gv_name)?;
        let mut gv = GroupVersion::default();
        let mut subresources = Vec::new();
        for (index, r) in list.resources.iter().enumerate() {
            let invalid = |message: &str| DiscoveryError::InvalidResource {
                group_version: gv_name.to_string(),
                index,
                message: message.to_string(),
            };
            if r.name.is_empty() {
                errors.push(invalid("empty name"));
                continue;
            }
            if let Some((parent, sub)) = r.name.split_once('/') {
                if parent.is_empty() || sub.is_empty() || sub.contains('/') {
                    errors.push(invalid("invalid subresource name"));
                    continue;
                }
                subresources.push((parent.to_string(), sub.to_string(), r));
                continue;
            }
            if r.kind.is_empty() {
                errors.push(invalid("empty kind"));
                continue;
            }
            let resource = ApiResource {
                api_version: gv_name.to_string(),
                // Entries may override the list's group/version (rare); default to the list's.
                group: r.group.clone().unwrap_or_else(|| group.to_string()),
                version: r.version.clone().unwrap_or_else(|| version.to_string()),
                name: r.name.clone(),
                singular_name: r.singular_name.clone(),
                kind: r.kind.clone(),
                namespaced: r.namespaced,
                verbs: r.verbs.iter().cloned().collect(),
                short_names: r.short_names.clone().unwrap_or_default(),
                subresources: BTreeMap::new(),
            };
            gv.kinds
                .entry(resource.kind.clone())
                .or_insert_with(|| resource.name.clone());
            gv.resources
                .insert(resource.name.clone(), Arc::new(resource));
        }
        for (parent, sub, r) in subresources {
            // A subresource listed without its main resource is ignored, as upstream does.
            if let Some(main) = gv.resources.get_mut(&parent) {
                Arc::make_mut(main).subresources.insert(
                    sub,
                    Subresource {
                        kind: r.kind.clone(),
                        verbs: r.verbs.iter().cloned().collect(),
                    },
                );
            }
        }
        self.group_versions.insert(gv_name.to_string(), gv);
        Ok(())
    }

    /// Copies the group versions in `failed` from `previous` (keeping what we knew when a
    /// refresh of those failed).
    pub(crate) fn keep_failed_from<'a>(
        &mut self,
        previous: &ResourceMap,
        failed: impl IntoIterator<Item = &'a str>,
    ) {
        for gv in failed {
            if let Some(entry) = previous.group_versions.get(gv) {
                self.group_versions
                    .entry(gv.to_string())
                    .or_insert_with(|| entry.clone());
            }
        }
    }

    /// One refresh step: builds the new map from per-group-version fetch results and keeps the
    /// group versions that failed to load from `previous`.
    /// Returns `None` (keep `previous`) if nothing at all could be loaded, as upstream does.
    pub(crate) fn refresh(
        previous: &ResourceMap,
        results: impl IntoIterator<Item = (String, Result<APIResourceList, DiscoveryError>)>,
    ) -> (Option<ResourceMap>, Vec<DiscoveryError>) {
        let mut map = ResourceMap::default();
        let mut errors = Vec::new();
        let mut failed = Vec::new();
        let mut loaded = 0usize;
        for (gv, result) in results {
            let list = match result {
                Ok(list) if list.group_version == gv => list,
                Ok(list) => {
                    errors.push(DiscoveryError::InvalidDocument {
                        source_name: gv.clone(),
                        message: format!("groupVersion is {:?}", list.group_version),
                    });
                    failed.push(gv);
                    continue;
                }
                Err(e) => {
                    errors.push(e);
                    failed.push(gv);
                    continue;
                }
            };
            match map.insert_list(&list, &mut errors) {
                Ok(()) => loaded += 1,
                Err(e) => {
                    errors.push(e);
                    failed.push(gv);
                }
            }
        }
        if loaded == 0 {
            return (None, errors);
        }
        map.keep_failed_from(previous, failed.iter().map(String::as_str));
        (Some(map), errors)
    }

    /// The resource `resource` (plural) of `api_version`.
    pub fn get(&self, api_version: &str, resource: &str) -> Option<&Arc<ApiResource>> {
        self.group_versions
            .get(api_version)?
            .resources
            .get(resource)
    }

    /// The resource serving `kind` in `api_version`.
    pub fn get_kind(&self, api_version: &str, kind: &str) -> Option<&Arc<ApiResource>> {
        let gv = self.group_versions.get(api_version)?;
        gv.resources.get(gv.kinds.get(kind)?)
    }

    /// All group versions known.
    pub fn group_versions(&self) -> impl Iterator<Item = &str> {
        self.group_versions.keys().map(String::as_str)
    }

    /// All resources, ordered by group version then name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ApiResource>> {
        self.group_versions
            .values()
            .flat_map(|gv| gv.resources.values())
    }
    /// Number of resources.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.group_versions
            .values()
            .map(|g| g.resources.len())
            .sum()
    }
}

/// Every group version named by an `/apis` `APIGroupList` (all versions, as upstream's
/// discovery uses all of them, not only the preferred one).
pub(crate) fn group_versions_of(groups: &APIGroupList) -> Vec<String> {
    let mut out: Vec<String> = groups
        .groups
        .iter()
        .flat_map(|g| g.versions.iter().map(|v| v.group_version.clone()))
        .filter(|gv| parse_api_version(gv).is_ok())
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes an `/apis` `APIGroupList` JSON document.
    fn parse_group_list(json: &[u8]) -> Result<APIGroupList, serde_json::Error> {
        serde_json::from_slice(json)
    }

    const CORE_V1: &str = r#"{
      "kind": "APIResourceList",
      "groupVersion": "v1",
      "resources": [
        {"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap",
         "verbs": ["create","delete","deletecollection","get","list","patch","update","watch"],
         "shortNames": ["cm"], "storageVersionHash": "qFsyl6wFWjQ="},
        {"name": "namespaces", "singularName": "namespace", "namespaced": false, "kind": "Namespace",
         "verbs": ["create","delete","get","list","patch","update","watch"], "shortNames": ["ns"]},
        {"name": "namespaces/status", "singularName": "", "namespaced": false, "kind": "Namespace",
         "verbs": ["get","patch","update"]},
        {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
         "verbs": ["create","delete","get","list","patch","update","watch"], "categories": ["all"]},
        {"name": "pods/status", "singularName": "", "namespaced": true, "kind": "Pod",
         "verbs": ["get","patch","update"]},
        {"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]},
        {"name": "bindings", "singularName": "binding", "namespaced": true, "kind": "Binding",
         "verbs": ["create"]}
      ]
    }"#;

    const APPS_V1: &str = r#"{
      "kind": "APIResourceList",
      "apiVersion": "v1",
      "groupVersion": "apps/v1",
      "resources": [
        {"name": "deployments", "singularName": "deployment", "namespaced": true, "kind": "Deployment",
         "verbs": ["create","delete","get","list","patch","update","watch"], "shortNames": ["deploy"]},
        {"name": "deployments/scale", "singularName": "", "namespaced": true, "group": "autoscaling",
         "version": "v1", "kind": "Scale", "verbs": ["get","patch","update"]},
        {"name": "deployments/status", "singularName": "", "namespaced": true, "kind": "Deployment",
         "verbs": ["get","patch","update"]}
      ]
    }"#;

    const CRD_V1: &str = r#"{
      "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "ctl.example.com/v1",
      "resources": [
        {"name": "widgets", "singularName": "widget", "namespaced": false, "kind": "Widget",
         "verbs": ["delete","deletecollection","get","list","patch","create","update","watch"]}
      ]
    }"#;

    const GROUPS: &str = r#"{
      "kind": "APIGroupList", "apiVersion": "v1",
      "groups": [
        {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}},
        {"name": "ctl.example.com", "versions": [
            {"groupVersion": "ctl.example.com/v2", "version": "v2"},
            {"groupVersion": "ctl.example.com/v1", "version": "v1"}]}
      ]
    }"#;

    fn list(json: &str) -> APIResourceList {
        ResourceMap::parse_list("test", json.as_bytes()).unwrap()
    }

    fn map(docs: &[&str]) -> ResourceMap {
        let lists: Vec<_> = docs.iter().map(|d| list(d)).collect();
        let (map, errors) = ResourceMap::from_lists(&lists);
        assert!(errors.is_empty(), "{errors:?}");
        map
    }

    #[test]
    fn looks_up_by_resource_and_kind() {
        let m = map(&[CORE_V1, APPS_V1]);
        let cm = m.get("v1", "configmaps").unwrap();
        assert_eq!(cm.kind, "ConfigMap");
        assert!(cm.namespaced);
        assert_eq!(cm.group, "");
        assert!(cm.is_watchable());
        assert_eq!(cm.short_names, vec!["cm"]);
        let deploy = m.get_kind("apps/v1", "Deployment").unwrap();
        assert_eq!(deploy.name, "deployments");
        assert_eq!(deploy.group, "apps");
        assert_eq!(deploy.version, "v1");
        assert!(m.get("apps/v1", "configmaps").is_none());
        assert!(m.get("v2", "configmaps").is_none());
        assert!(m.get_kind("v1", "Deployment").is_none());
        // Subresources are attached, not listed as resources.
        assert!(m.get("v1", "pods/status").is_none());
        assert_eq!(m.len(), 5);
    }

    #[test]
    fn subresources_scope_and_verbs() {
        let m = map(&[CORE_V1, APPS_V1]);
        let deploy = m.get("apps/v1", "deployments").unwrap();
        assert!(deploy.has_subresource("status"));
        assert!(deploy.has_subresource("scale"));
        assert_eq!(deploy.subresources["scale"].kind, "Scale");
        let pods = m.get("v1", "pods").unwrap();
        assert!(pods.has_subresource("log"));
        assert!(!pods.has_subresource("scale"));
        let ns = m.get("v1", "namespaces").unwrap();
        assert!(!ns.namespaced);
        assert!(!m.get("v1", "bindings").unwrap().is_watchable());
        assert_eq!(
            deploy.collection_path(Some("prod")),
            "/apis/apps/v1/namespaces/prod/deployments"
        );
        assert_eq!(deploy.collection_path(None), "/apis/apps/v1/deployments");
        assert_eq!(ns.collection_path(Some("ignored")), "/api/v1/namespaces");
    }

    #[test]
    fn bad_documents_and_entries_are_errors_not_panics() {
        assert!(ResourceMap::parse_list("x", b"not json").is_err());
        assert!(ResourceMap::parse_list("x", br#"{"kind": "Pod"}"#).is_err());
        assert!(ResourceMap::parse_list("x", br#"{"resources": 3}"#).is_err());
        let empty_gv = list(r#"{"resources": []}"#);
        let bad = list(
            r#"{"groupVersion": "g/v", "resources": [
                {"name": "", "singularName": "", "namespaced": true, "kind": "A", "verbs": []},
                {"name": "things", "singularName": "", "namespaced": true, "kind": "", "verbs": []},
                {"name": "/status", "singularName": "", "namespaced": true, "kind": "A", "verbs": []},
                {"name": "orphans/status", "singularName": "", "namespaced": true, "kind": "A", "verbs": []},
                {"name": "ok", "singularName": "", "namespaced": true, "kind": "Ok", "verbs": ["get"]}
            ]}"#,
        );
        let too_many = list(r#"{"groupVersion": "a/b/c", "resources": []}"#);
        let (m, errors) = ResourceMap::from_lists([&empty_gv, &bad, &too_many]);
        assert_eq!(errors.len(), 5, "{errors:?}");
        assert_eq!(m.len(), 1);
        assert!(m.get("g/v", "ok").is_some());
        assert!(parse_api_version("/v").is_err());
        assert!(parse_api_version("g/").is_err());
        assert_eq!(parse_api_version("v1").unwrap(), ("", "v1"));
    }

    #[test]
    fn failed_group_versions_are_kept_from_the_previous_map() {
        let old = map(&[CORE_V1, APPS_V1, CRD_V1]);
        let mut new = map(&[CORE_V1]);
        new.keep_failed_from(&old, ["apps/v1", "unknown/v1"]);
        assert!(new.get("apps/v1", "deployments").is_some());
        // A group version that loaded fine is not refilled from the previous map.
        assert!(new.get("ctl.example.com/v1", "widgets").is_none());
        assert_eq!(new.len(), old.len() - 1);
    }

    #[test]
    fn refresh_keeps_failed_group_versions_and_drops_removed_ones() {
        let old = map(&[CORE_V1, APPS_V1]);
        let failure = DiscoveryError::InvalidDocument {
            source_name: "apps/v1".into(),
            message: "503".into(),
        };
        let (result, errors) = ResourceMap::refresh(
            &old,
            vec![
                ("v1".to_string(), Ok(list(CORE_V1))),
                ("apps/v1".to_string(), Err(failure.clone())),
                ("ctl.example.com/v1".to_string(), Ok(list(CRD_V1))),
                // A document for another group version than requested is not trusted.
                ("other/v1".to_string(), Ok(list(CRD_V1))),
            ],
        );
        let new = result.unwrap();
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0], failure);
        assert!(new.get("apps/v1", "deployments").is_some());
        assert!(new.get("ctl.example.com/v1", "widgets").is_some());
        assert!(old.get("ctl.example.com/v1", "widgets").is_none());
        // A CRD that disappears is gone from the next map (deployments too: apps/v1 is not
        // among the results, so it neither loaded nor failed).
        let (result, _) = ResourceMap::refresh(&new, vec![("v1".to_string(), Ok(list(CORE_V1)))]);
        let next = result.unwrap();
        assert!(next.get("ctl.example.com/v1", "widgets").is_none());
        assert!(next.get("apps/v1", "deployments").is_none());
        // Nothing loadable: keep the previous map.
        let (result, errors) = ResourceMap::refresh(&new, vec![("v1".to_string(), Err(failure))]);
        assert!(result.is_none());
        assert_eq!(errors.len(), 1);
    }

    #[test]
    fn group_list_yields_all_versions() {
        let groups = parse_group_list(GROUPS.as_bytes()).unwrap();
        assert_eq!(
            group_versions_of(&groups),
            vec!["apps/v1", "ctl.example.com/v1", "ctl.example.com/v2"]
        );
        assert!(parse_group_list(b"[]").is_err());
    }

    #[test]
    fn first_resource_serving_a_kind_wins() {
        let m = map(&[r#"{"groupVersion": "v1", "resources": [
            {"name": "a", "singularName": "", "namespaced": true, "kind": "K", "verbs": []},
            {"name": "b", "singularName": "", "namespaced": true, "kind": "K", "verbs": []}]}"#]);
        assert_eq!(m.get_kind("v1", "K").unwrap().name, "a");
    }
}
