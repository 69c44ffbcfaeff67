//! Small CustomResourceDefinitions for test parents and children.

use serde_json::{json, Value};

/// A CRD under construction: one served+storage version, a status subresource and a
/// schema that keeps every field, unless told otherwise.
#[derive(Clone, Debug)]
pub struct CrdBuilder {
    group: String,
    version: String,
    kind: String,
    plural: String,
    namespaced: bool,
    status_subresource: bool,
    schema: Value,
}

/// Starts a namespaced CRD `plural.group` of `kind` served at `group/version`.
pub fn crd(group: &str, version: &str, kind: &str, plural: &str) -> CrdBuilder {
    CrdBuilder {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        namespaced: true,
        status_subresource: true,
        schema: json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    }
}

/// Starts a namespaced CRD `plural` of `kind` served at version `v1` of a group of its own,
/// `<prefix>-<unique>.example.com` ([`crate::unique_name`]), so that tests sharing a real
/// cluster never install the same kind.
pub fn unique_crd(prefix: &str, kind: &str, plural: &str) -> CrdBuilder {
    crd(
        &format!("{}.example.com", crate::unique_name(prefix)),
        "v1",
        kind,
        plural,
    )
}

impl CrdBuilder {
    /// The spec of a CompositeController whose parents are of this kind, with ConfigMap
    /// children (`InPlace`) and the sync hook at `sync_url`. Tests add what they need
    /// (`generateSelector`, more hooks) to the returned object.
    pub fn composite_spec(&self, sync_url: &str) -> Value {
        json!({
            "parentResource": {"apiVersion": self.api_version(), "resource": self.plural()},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"webhook": {"url": sync_url}}},
        })
    }

    /// A dynamic API for objects of this kind (in `namespace`, or across all namespaces /
    /// cluster-scoped with `None`).
    pub fn api(
        &self,
        client: kube::Client,
        namespace: Option<&str>,
    ) -> kube::Api<kube::core::DynamicObject> {
        crate::dynamic_api(
            client,
            &self.api_version(),
            self.kind(),
            self.plural(),
            namespace,
        )
    }

    /// Makes the resource cluster-scoped.
    pub fn cluster_scoped(mut self) -> Self {
        self.namespaced = false;
        self
    }

    /// Leaves out the status subresource (status is then part of the main object).
    pub fn without_status_subresource(mut self) -> Self {
        self.status_subresource = false;
        self
    }

    /// Uses `schema` as the version's openAPIV3Schema.
    pub fn schema(mut self, schema: Value) -> Self {
        self.schema = schema;
        self
    }

    /// The CRD's name, `plural.group`.
    pub fn name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }

    /// `group/version`, the apiVersion of the custom objects.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    /// The kind of the custom objects.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The resource (plural) name.
    pub fn plural(&self) -> &str {
        &self.plural
    }

    /// Whether the objects are namespaced.
    pub fn is_namespaced(&self) -> bool {
        self.namespaced
    }

    /// The CRD object as JSON.
    pub fn build(&self) -> Value {
        let mut version = json!({
            "name": self.version, "served": true, "storage": true,
            "schema": {"openAPIV3Schema": self.schema},
        });
        if self.status_subresource {
            version["subresources"] = json!({"status": {}});
        }
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": self.name()},
            "spec": {
                "group": self.group,
                "scope": if self.namespaced { "Namespaced" } else { "Cluster" },
                "names": {
                    "plural": self.plural,
                    "singular": self.kind.to_lowercase(),
                    "kind": self.kind,
                    "listKind": format!("{}List", self.kind),
                },
                "versions": [version],
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_shapes_the_crd() {
        let c = crd("example.com", "v1", "Parent", "parents")
            .cluster_scoped()
            .without_status_subresource();
        let v = c.build();
        assert_eq!(v["metadata"]["name"], "parents.example.com");
        assert_eq!(v["spec"]["scope"], "Cluster");
        assert!(v["spec"]["versions"][0].get("subresources").is_none());
        assert_eq!(c.api_version(), "example.com/v1");
        let v = crd("example.com", "v1", "Parent", "parents").build();
        assert_eq!(v["spec"]["scope"], "Namespaced");
        assert_eq!(
            v["spec"]["versions"][0]["subresources"],
            json!({"status": {}})
        );
    }
}
