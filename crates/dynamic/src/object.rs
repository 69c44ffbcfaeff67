//! Metadata access shared by the cache and the controllers, for both untyped JSON
//! (`serde_json::Value`) and `kube::core::DynamicObject`, plus the `namespace/name` key and
//! the resource/namespace/name [`ObjectKey`] the controllers' writer keys its state by.

use std::fmt;

use kube::core::DynamicObject;

/// Objects that carry a `metadata.resourceVersion`.
pub trait Versioned {
    /// The object's resourceVersion, if any.
    fn resource_version(&self) -> Option<&str>;
}

/// Metadata the runtime reads from cached objects. Missing or malformed fields read as `None`.
pub trait ObjectMetaAccess: Versioned {
    /// `metadata.namespace` (`None` for cluster-scoped objects).
    fn namespace(&self) -> Option<&str>;
    /// `metadata.name`.
    fn name(&self) -> Option<&str>;
    /// `metadata.uid`.
    fn uid(&self) -> Option<&str>;
    /// The uid of the owner reference with `controller: true`, if any; without one, the
    /// [`PARENT_UID_LABEL`] of a child tracked by label (a child outside its namespaced
    /// parent's namespace, which no ownerReference can name).
    fn controller_uid(&self) -> Option<&str>;
}

/// Extension: the label naming the uid of the parent of a child that lives outside its
/// parent's namespace (or is cluster-scoped while its parent is namespaced). Such a child
/// cannot carry an ownerReference (the garbage collector would delete it), so the caches
/// index it under this uid as if it were its controller's.
pub const PARENT_UID_LABEL: &str = "metacontroller.k8s.io/parent-uid";

/// Extension: the annotation naming the parent (`<namespace>/<name>`) of a child tracked by
/// [`PARENT_UID_LABEL`]. A sharded replica keeps such a child by this key, as it keeps an
/// owned child by its controller owner's.
pub const PARENT_ANNOTATION: &str = "metacontroller.k8s.io/parent";

/// The owner reference with `controller: true`, as far as the sharded caches need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ControllerRef<'a> {
    /// `apiVersion` of the owner.
    pub api_version: &'a str,
    /// `kind` of the owner.
    pub kind: &'a str,
    /// `name` of the owner.
    pub name: &'a str,
}

/// Objects whose controller owner reference can be read without decoding them: the
/// retention filter of a sharded replica runs on cached (compact) and watched objects alike.
pub(crate) trait ControllerOwner {
    /// The owner reference with `controller: true`, if any.
    fn controller_ref(&self) -> Option<ControllerRef<'_>>;
    /// For a child tracked by label (no controller owner, a [`PARENT_UID_LABEL`]): the
    /// parent's key from its [`PARENT_ANNOTATION`], when that is a `namespace/name` key.
    fn tracking_parent(&self) -> Option<&str>;
}

/// The key in a [`PARENT_ANNOTATION`] value, if it is one (`namespace/name`, both parts
/// non-empty): anything else leaves the child an orphan to the caches.
pub(crate) fn parent_key(annotation: &str) -> Option<&str> {
    let (namespace, name) = annotation.split_once('/')?;
    let valid = !namespace.is_empty() && !name.is_empty() && !name.contains('/');
    valid.then_some(annotation)
}

impl ControllerOwner for DynamicObject {
    fn controller_ref(&self) -> Option<ControllerRef<'_>> {
        let owner = self
            .metadata
            .owner_references
            .as_ref()?
            .iter()
            .find(|r| r.controller == Some(true))?;
        Some(ControllerRef {
            api_version: &owner.api_version,
            kind: &owner.kind,
            name: &owner.name,
        })
    }

    fn tracking_parent(&self) -> Option<&str> {
        if self.controller_ref().is_some() {
            return None;
        }
        self.metadata.labels.as_ref()?.get(PARENT_UID_LABEL)?;
        parent_key(self.metadata.annotations.as_ref()?.get(PARENT_ANNOTATION)?)
    }
}

fn meta_str<'a>(v: &'a serde_json::Value, field: &str) -> Option<&'a str> {
    v.get("metadata")?.get(field)?.as_str()
}

impl Versioned for serde_json::Value {
    fn resource_version(&self) -> Option<&str> {
        meta_str(self, "resourceVersion")
    }
}

impl ObjectMetaAccess for serde_json::Value {
    fn namespace(&self) -> Option<&str> {
        meta_str(self, "namespace").filter(|ns| !ns.is_empty())
    }
    fn name(&self) -> Option<&str> {
        meta_str(self, "name")
    }
    fn uid(&self) -> Option<&str> {
        meta_str(self, "uid")
    }
    fn controller_uid(&self) -> Option<&str> {
        let meta = self.get("metadata")?;
        meta.get("ownerReferences")
            .and_then(serde_json::Value::as_array)
            .and_then(|refs| {
                refs.iter().find(|r| {
                    r.get("controller").and_then(serde_json::Value::as_bool) == Some(true)
                })
            })
            .and_then(|r| r.get("uid")?.as_str())
            .or_else(|| meta.get("labels")?.get(PARENT_UID_LABEL)?.as_str())
    }
}

impl Versioned for DynamicObject {
    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
}

impl ObjectMetaAccess for DynamicObject {
    fn namespace(&self) -> Option<&str> {
        self.metadata
            .namespace
            .as_deref()
            .filter(|ns| !ns.is_empty())
    }
    fn name(&self) -> Option<&str> {
        self.metadata.name.as_deref()
    }
    fn uid(&self) -> Option<&str> {
        self.metadata.uid.as_deref()
    }
    fn controller_uid(&self) -> Option<&str> {
        self.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .map(|r| r.uid.as_str())
            .or_else(|| {
                self.metadata
                    .labels
                    .as_ref()?
                    .get(PARENT_UID_LABEL)
                    .map(String::as_str)
            })
    }
}

/// `namespace/name` (or `name` for cluster-scoped objects): the key of parents in work queues
/// and of objects in a cache.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespacedName {
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    /// Object name.
    pub name: String,
}

impl NamespacedName {
    /// Builds a key; `namespace` empty for cluster scope.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        NamespacedName {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of an object, `None` if it has no name.
    pub fn of<T: ObjectMetaAccess + ?Sized>(obj: &T) -> Option<Self> {
        let name = obj.name().filter(|n| !n.is_empty())?;
        Some(NamespacedName::new(obj.namespace().unwrap_or(""), name))
    }

    /// Parses `name` or `namespace/name` (client-go `SplitMetaNamespaceKey`); `None` for
    /// anything else (empty, or more than one `/`, or an empty part).
    pub fn parse(key: &str) -> Option<Self> {
        match key.split_once('/') {
            None if !key.is_empty() => Some(NamespacedName::new("", key)),
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Some(NamespacedName::new(ns, name))
            }
            _ => None,
        }
    }
}

impl fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// Identifies an object: resource (e.g. `apps/v1/deployments`), namespace (`""` for cluster
/// scope) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Resource identifier chosen by the caller; must be used consistently.
    pub resource: String,
    /// Namespace, empty for cluster-scoped objects.
    pub namespace: String,
    /// Object name.
    pub name: String,
}

impl ObjectKey {
    /// Builds a key.
    pub fn new(
        resource: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        ObjectKey {
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_and_dynamic_objects_expose_the_same_metadata() {
        let v = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": "9",
          "ownerReferences": [
            {"apiVersion": "x/v1", "kind": "A", "name": "a", "uid": "not-controller"},
            {"apiVersion": "x/v1", "kind": "B", "name": "b", "uid": "owner", "controller": true}
          ]}});
        let d: DynamicObject = serde_json::from_value(v.clone()).unwrap();
        for o in [&v as &dyn ObjectMetaAccess, &d as &dyn ObjectMetaAccess] {
            assert_eq!(o.name(), Some("c"));
            assert_eq!(o.namespace(), Some("ns"));
            assert_eq!(o.uid(), Some("u1"));
            assert_eq!(o.resource_version(), Some("9"));
            assert_eq!(o.controller_uid(), Some("owner"));
        }
    }

    #[test]
    fn malformed_json_metadata_reads_as_absent() {
        for v in [
            json!(null),
            json!({"metadata": 1}),
            json!({"metadata": {"name": 1, "ownerReferences": {"uid": "x"}}}),
            json!({"metadata": {"ownerReferences": [{"controller": "true", "uid": "x"}]}}),
        ] {
            assert_eq!(v.name(), None);
            assert_eq!(v.controller_uid(), None);
            assert_eq!(NamespacedName::of(&v), None);
        }
        assert_eq!(json!({"metadata": {"namespace": ""}}).namespace(), None);
    }

    #[test]
    fn keys_parse_and_print_like_client_go() {
        assert_eq!(
            NamespacedName::parse("ns/a").unwrap(),
            NamespacedName::new("ns", "a")
        );
        assert_eq!(
            NamespacedName::parse("a").unwrap(),
            NamespacedName::new("", "a")
        );
        for bad in ["", "/a", "ns/", "a/b/c"] {
            assert!(NamespacedName::parse(bad).is_none(), "{bad}");
        }
        assert_eq!(NamespacedName::new("ns", "a").to_string(), "ns/a");
        assert_eq!(NamespacedName::new("", "a").to_string(), "a");
    }
}
