//! The `children` / `attachments` / `related` maps of hook requests:
//! `<Kind>.<apiVersion>` → key → object, where the key is the object's name relative
//! to the parent in v1 and `<namespace>/<name>` (or `<name>` for cluster-scoped
//! objects) in v2.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hook::HookVersion;

/// Extension: the label carrying the parent's uid on a child outside its namespaced
/// parent's namespace (no ownerReference can name the parent there).
pub const PARENT_UID_LABEL: &str = "metacontroller.k8s.io/parent-uid";

/// The map key of a resource type: `<Kind>.<apiVersion>`, e.g. `Pod.v1` or
/// `StatefulSet.apps/v1`.
pub fn group_key(api_version: &str, kind: &str) -> String {
    format!("{kind}.{api_version}")
}

/// Splits `<Kind>.<apiVersion>` into `(kind, api_version)`; `None` when the key has no
/// `.` or an empty part. Kinds never contain dots, so the first dot separates them.
pub fn parse_group_key(key: &str) -> Option<(&str, &str)> {
    let (kind, api_version) = key.split_once('.')?;
    if kind.is_empty() || api_version.is_empty() {
        return None;
    }
    Some((kind, api_version))
}

/// Objects grouped by type and keyed per hook version.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct ObjectMap(pub BTreeMap<String, BTreeMap<String, Value>>);

impl ObjectMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes sure the type has an entry, so hooks see `{}` rather than a missing key
    /// for declared types without objects.
    pub fn init_group(&mut self, api_version: &str, kind: &str) {
        self.0.entry(group_key(api_version, kind)).or_default();
    }

    /// The key under which `object` is stored for a parent in `parent_namespace`
    /// (`None` or empty for a cluster-scoped parent).
    ///
    /// v1: the name, or `<namespace>/<name>` when a cluster-scoped parent has a
    /// namespaced object. v2: `<namespace>/<name>` for namespaced objects, `<name>` for
    /// cluster-scoped ones, whatever the parent.
    pub fn object_key(
        version: HookVersion,
        parent_namespace: Option<&str>,
        object: &Value,
    ) -> String {
        let name = str_at(object, "name");
        let namespace = str_at(object, "namespace");
        let parent_is_cluster_scoped = parent_namespace.is_none_or(str::is_empty);
        match (version, namespace) {
            (_, "") => name.to_string(),
            (HookVersion::V1, ns) if parent_is_cluster_scoped => format!("{ns}/{name}"),
            (HookVersion::V1, _) => name.to_string(),
            (HookVersion::V2, ns) => format!("{ns}/{name}"),
        }
    }

    /// Inserts an object under its type (`apiVersion`/`kind` read from the object) and
    /// its key for the given hook version and parent namespace.
    pub fn insert(&mut self, version: HookVersion, parent_namespace: Option<&str>, object: Value) {
        let group = object_group(&object);
        let key = Self::object_key(version, parent_namespace, &object);
        self.0.entry(group).or_default().insert(key, object);
    }

    /// Inserts an observed child/attachment the way upstream builds sync requests:
    /// in v1, a namespaced parent only sees children in its own namespace (others,
    /// including cluster-scoped objects, are left out, except the children placed elsewhere
    /// by the `childResources[].namespaces` extension, which carry [`PARENT_UID_LABEL`]);
    /// v2 sends every child. Returns
    /// whether the object was inserted. Related objects use [`ObjectMap::insert`].
    pub fn insert_child(
        &mut self,
        version: HookVersion,
        parent_namespace: Option<&str>,
        object: Value,
    ) -> bool {
        let parent_ns = parent_namespace.unwrap_or_default();
        let namespace = str_at(&object, "namespace");
        if version == HookVersion::V1 && !parent_ns.is_empty() && namespace != parent_ns {
            let tracked = object
                .pointer("/metadata/labels")
                .and_then(|l| l.get(PARENT_UID_LABEL))
                .is_some();
            if !tracked {
                return false;
            }
            // A child placed elsewhere: keyed as a cluster-scoped parent's children are.
            let key = match namespace {
                "" => str_at(&object, "name").to_string(),
                ns => format!("{ns}/{}", str_at(&object, "name")),
            };
            let group = object_group(&object);
            self.0.entry(group).or_default().insert(key, object);
            return true;
        }
        self.insert(version, parent_namespace, object);
        true
    }

    /// The objects of one type, if the type has an entry.
    pub fn group(&self, api_version: &str, kind: &str) -> Option<&BTreeMap<String, Value>> {
        self.0.get(&group_key(api_version, kind))
    }

    /// One object by type and key.
    pub fn get(&self, api_version: &str, kind: &str, key: &str) -> Option<&Value> {
        self.group(api_version, kind)?.get(key)
    }

    /// All objects of all types.
    pub fn objects(&self) -> impl Iterator<Item = &Value> {
        self.0.values().flat_map(|group| group.values())
    }

    /// Number of objects (not types).
    pub fn len(&self) -> usize {
        self.0.values().map(BTreeMap::len).sum()
    }

    /// True when there are no objects (there may still be empty type entries).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The map key of `object`'s type, from its own `apiVersion` and `kind`.
fn object_group(object: &Value) -> String {
    let field = |name| object.get(name).and_then(Value::as_str).unwrap_or_default();
    group_key(field("apiVersion"), field("kind"))
}

fn str_at<'a>(object: &'a Value, field: &str) -> &'a str {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": ns, "name": name}})
    }

    fn namespace(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    }

    #[test]
    fn group_keys_follow_upstream() {
        assert_eq!(group_key("v1", "Pod"), "Pod.v1");
        assert_eq!(group_key("apps/v1", "StatefulSet"), "StatefulSet.apps/v1");
        assert_eq!(
            parse_group_key("StatefulSet.apps/v1"),
            Some(("StatefulSet", "apps/v1"))
        );
        assert_eq!(
            parse_group_key("Issuer.cert-manager.io/v1"),
            Some(("Issuer", "cert-manager.io/v1"))
        );
        assert_eq!(parse_group_key("Pod"), None);
        assert_eq!(parse_group_key(".v1"), None);
    }

    #[test]
    fn v1_keys_are_relative_to_the_parent() {
        let v1 = HookVersion::V1;
        assert_eq!(ObjectMap::object_key(v1, Some("ns"), &pod("ns", "a")), "a");
        assert_eq!(ObjectMap::object_key(v1, None, &pod("ns", "a")), "ns/a");
        assert_eq!(ObjectMap::object_key(v1, Some(""), &pod("ns", "a")), "ns/a");
        assert_eq!(ObjectMap::object_key(v1, None, &namespace("n")), "n");
        // Related objects of a namespaced parent may live elsewhere: still the name in v1.
        assert_eq!(
            ObjectMap::object_key(v1, Some("ns"), &pod("other", "a")),
            "a"
        );
    }

    #[test]
    fn v2_keys_are_uniform() {
        let v2 = HookVersion::V2;
        assert_eq!(
            ObjectMap::object_key(v2, Some("ns"), &pod("ns", "a")),
            "ns/a"
        );
        assert_eq!(ObjectMap::object_key(v2, None, &pod("ns", "a")), "ns/a");
        assert_eq!(ObjectMap::object_key(v2, Some("ns"), &namespace("n")), "n");
    }

    #[test]
    fn v1_children_of_a_namespaced_parent_stay_in_its_namespace() {
        let mut v1 = ObjectMap::new();
        assert!(v1.insert_child(HookVersion::V1, Some("ns"), pod("ns", "a")));
        assert!(!v1.insert_child(HookVersion::V1, Some("ns"), pod("other", "b")));
        assert!(!v1.insert_child(HookVersion::V1, Some("ns"), namespace("n")));
        assert!(v1.insert_child(HookVersion::V1, None, pod("other", "b")));
        assert_eq!(v1.len(), 2);
        let mut v2 = ObjectMap::new();
        assert!(v2.insert_child(HookVersion::V2, Some("ns"), pod("other", "b")));
        assert!(v2.insert_child(HookVersion::V2, Some("ns"), namespace("n")));
        assert_eq!(v2.get("v1", "Pod", "other/b"), Some(&pod("other", "b")));
    }

    #[test]
    fn declared_types_are_present_when_empty() {
        let mut map = ObjectMap::new();
        map.init_group("v1", "ConfigMap");
        map.init_group("apps/v1", "Deployment");
        map.insert(HookVersion::V2, Some("ns"), pod("ns", "a"));
        map.init_group("v1", "Pod");
        assert_eq!(
            serde_json::to_value(&map).unwrap(),
            json!({
                "ConfigMap.v1": {},
                "Deployment.apps/v1": {},
                "Pod.v1": {"ns/a": pod("ns", "a")}
            })
        );
        assert_eq!(map.len(), 1);
        assert_eq!(map.get("v1", "Pod", "ns/a"), Some(&pod("ns", "a")));
    }
}
