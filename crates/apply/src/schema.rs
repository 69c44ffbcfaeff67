//! Structural schemas: the Kubernetes list/map extensions that decide how a list or object is
//! merged. Loaded from a CRD, a bare `openAPIV3Schema`, or an API server OpenAPI (v3, or v2)
//! document. Only what merging needs is kept; validation is the API server's business.
//!
//! Honoured extensions:
//! - `x-kubernetes-list-type`: `atomic` (replace whole), `set` (union of scalars),
//!   `map` (associative list keyed by `x-kubernetes-list-map-keys`, one or more fields);
//! - `x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key` (strategic merge
//!   metadata of built-in types): `merge` + key → list-map, `merge` without key → set,
//!   `replace` → atomic; used when `x-kubernetes-list-type` is absent; `retainKeys` (alone
//!   or as `merge,retainKeys`): a changed object (a changed item, for lists) keeps only the
//!   fields desired sets;
//! - `x-kubernetes-map-type: atomic` on objects (replace whole);
//! - `default` of list-map key fields (an omitted key field takes its default, as the API
//!   server would fill it in).
//!
//! Where a schema says nothing about a list, the conventional rules apply (see crate docs).

use std::collections::HashMap;

use serde_json::Value;

use crate::error::ApplyError;

/// Limit on `$ref`/`allOf` indirections followed in one lookup (guards reference cycles).
const MAX_INDIRECTION: usize = 16;

/// How a list is declared to merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListDecl {
    /// Replace the whole list with the desired one.
    Atomic,
    /// Union of (scalar) values.
    Set,
    /// Associative list keyed by these fields.
    Map(Vec<String>),
}

#[derive(Debug, Default, Clone)]
struct Node {
    properties: HashMap<String, usize>,
    additional: Option<usize>,
    items: Option<usize>,
    list: Option<ListDecl>,
    map_atomic: Option<bool>,
    /// `x-kubernetes-patch-strategy` includes `retainKeys`.
    retain_keys: Option<bool>,
    default: Option<Value>,
    /// Schemas this one extends (`$ref`, `allOf`, `anyOf`, `oneOf`).
    refs: Vec<usize>,
    /// Defaults of the list-map key fields, filled in after loading.
    key_defaults: Vec<Option<Value>>,
}

/// A loaded structural schema for one resource (kind/version).
#[derive(Debug, Clone)]
pub struct Schema {
    nodes: Vec<Node>,
    root: usize,
}

impl Schema {
    /// Loads a bare structural schema (a CRD's `openAPIV3Schema`, or any OpenAPI schema
    /// object without external `$ref`s).
    pub fn from_openapi_v3_schema(schema: &Value) -> Result<Self, ApplyError> {
        if !schema.is_object() {
            return Err(ApplyError::schema(".", "a schema must be a JSON object"));
        }
        let mut b = Builder::new(None);
        let root = b.convert(schema);
        Ok(b.finish(root))
    }

    /// Loads the schema of `version` (default: the storage version, else the first) from a
    /// `CustomResourceDefinition` (apiextensions.k8s.io/v1, or v1beta1 with
    /// `spec.validation`).
    pub fn from_crd(crd: &Value, version: Option<&str>) -> Result<Self, ApplyError> {
        let spec = crd
            .get("spec")
            .filter(|s| s.is_object())
            .ok_or_else(|| ApplyError::schema(".spec", "CRD has no spec"))?;
        let versions = spec
            .get("versions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let chosen = match version {
            Some(v) => versions
                .iter()
                .find(|ver| ver.get("name").and_then(Value::as_str) == Some(v)),
            None => versions
                .iter()
                .find(|ver| ver.get("storage").and_then(Value::as_bool) == Some(true))
                .or_else(|| versions.first()),
        };
        if version.is_some() && chosen.is_none() && !versions.is_empty() {
            return Err(ApplyError::schema(
                ".spec.versions",
                format!("CRD has no version {:?}", version.unwrap_or_default()),
            ));
        }
        let schema = chosen
            .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
            .or_else(|| spec.pointer("/validation/openAPIV3Schema"))
            .ok_or_else(|| {
                ApplyError::schema(
                    ".spec.versions[].schema.openAPIV3Schema",
                    "CRD has no openAPIV3Schema for the chosen version",
                )
            })?;
        Self::from_openapi_v3_schema(schema)
    }

    /// Loads the schema of `group/version, Kind=kind` from an API server OpenAPI document:
    /// v3 (`/openapi/v3/apis/<group>/<version>`, schemas under `components.schemas`) or v2
    /// (`/openapi/v2`, schemas under `definitions`). The resource's schema is the one whose
    /// `x-kubernetes-group-version-kind` names it; `$ref`s are followed lazily.
    pub fn from_openapi_v3(
        doc: &Value,
        group: &str,
        version: &str,
        kind: &str,
    ) -> Result<Self, ApplyError> {
        let schemas = doc
            .pointer("/components/schemas")
            .or_else(|| doc.get("definitions"))
            .and_then(Value::as_object)
            .ok_or_else(|| {
                ApplyError::schema(
                    ".components.schemas",
                    "document has neither components.schemas (OpenAPI v3) nor definitions (v2)",
                )
            })?;
        let found = schemas.values().find(|s| {
            s.get("x-kubernetes-group-version-kind")
                .and_then(Value::as_array)
                .is_some_and(|gvks| {
                    gvks.iter().any(|g| {
                        g.get("group").and_then(Value::as_str).unwrap_or("") == group
                            && g.get("version").and_then(Value::as_str) == Some(version)
                            && g.get("kind").and_then(Value::as_str) == Some(kind)
                    })
                })
        });
        let root_schema = found.ok_or_else(|| {
            ApplyError::schema(
                ".components.schemas",
                format!("no schema for group {group:?} version {version:?} kind {kind:?}"),
            )
        })?;
        let mut b = Builder::new(Some(doc));
        let root = b.convert(root_schema);
        Ok(b.finish(root))
    }

    /// Loads a schema from any accepted form, using `api_version`/`kind` of the object to pick
    /// the right part:
    /// 1. a `CustomResourceDefinition` (`kind: CustomResourceDefinition`) → the version of
    ///    `api_version`;
    /// 2. an OpenAPI v3 (or v2) document (`components.schemas` / `definitions`) → the schema
    ///    whose `x-kubernetes-group-version-kind` matches;
    /// 3. an object with an `openAPIV3Schema` field (a CRD version's `schema`) → that schema;
    /// 4. otherwise the value itself as a bare `openAPIV3Schema`.
    pub fn detect(doc: &Value, api_version: &str, kind: &str) -> Result<Self, ApplyError> {
        let (group, version) = match api_version.rsplit_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        if doc.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
            let v = (!version.is_empty()).then_some(version);
            return Self::from_crd(doc, v);
        }
        if doc.pointer("/components/schemas").is_some() || doc.get("definitions").is_some() {
            return Self::from_openapi_v3(doc, group, version, kind);
        }
        if let Some(s) = doc.get("openAPIV3Schema") {
            return Self::from_openapi_v3_schema(s);
        }
        Self::from_openapi_v3_schema(doc)
    }

    pub(crate) fn root(&self) -> SchemaRef<'_> {
        SchemaRef {
            schema: self,
            id: self.root,
        }
    }
}

/// A position inside a [`Schema`].
#[derive(Clone, Copy)]
pub(crate) struct SchemaRef<'s> {
    schema: &'s Schema,
    id: usize,
}

impl<'s> SchemaRef<'s> {
    fn node(&self) -> &'s Node {
        &self.schema.nodes[self.id]
    }

    fn at(&self, id: usize) -> SchemaRef<'s> {
        SchemaRef {
            schema: self.schema,
            id,
        }
    }

    /// Depth-first search over this node and the nodes it extends.
    fn search<T>(&self, f: &mut impl FnMut(&'s Node) -> Option<T>) -> Option<T> {
        // Most nodes answer themselves or extend nothing: no stack needed.
        let node = self.node();
        if let Some(t) = f(node) {
            return Some(t);
        }
        if node.refs.is_empty() {
            return None;
        }
        let mut stack = vec![(self.id, 0usize)];
        let mut steps = 0;
        while let Some((id, depth)) = stack.pop() {
            steps += 1;
            if steps > 256 {
                return None;
            }
            let node = &self.schema.nodes[id];
            if let Some(t) = f(node) {
                return Some(t);
            }
            if depth < MAX_INDIRECTION {
                stack.extend(node.refs.iter().rev().map(|r| (*r, depth + 1)));
            }
        }
        None
    }

    /// Schema of property `name` of an object.
    pub(crate) fn property(&self, name: &str) -> Option<SchemaRef<'s>> {
        let node = self.node();
        if let Some(id) = node.properties.get(name) {
            return Some(self.at(*id));
        }
        if node.refs.is_empty() {
            return node.additional.map(|id| self.at(id));
        }
        self.search(&mut |n| n.properties.get(name).copied())
            .or_else(|| self.search(&mut |n| n.additional))
            .map(|id| self.at(id))
    }

    /// Schema of the items of a list.
    pub(crate) fn items(&self) -> Option<SchemaRef<'s>> {
        self.search(&mut |n| n.items).map(|id| self.at(id))
    }

    /// The list declaration, and the node that declares it (for key defaults).
    pub(crate) fn list_decl(&self) -> (Option<&'s ListDecl>, Option<&'s [Option<Value>]>) {
        match self.search(&mut |n| n.list.as_ref().map(|l| (l, n.key_defaults.as_slice()))) {
            Some((l, d)) => (Some(l), Some(d)),
            None => (None, None),
        }
    }

    /// True when the object is declared `x-kubernetes-map-type: atomic`.
    pub(crate) fn map_atomic(&self) -> bool {
        self.search(&mut |n| n.map_atomic).unwrap_or(false)
    }

    /// True when the field is declared `x-kubernetes-patch-strategy: retainKeys` (alone or
    /// with `merge`): for an object, the object itself; for a list, each item.
    pub(crate) fn retain_keys(&self) -> bool {
        self.search(&mut |n| n.retain_keys).unwrap_or(false)
    }

    fn default_value(&self) -> Option<&'s Value> {
        self.search(&mut |n| n.default.as_ref())
    }
}

struct Builder<'d> {
    doc: Option<&'d Value>,
    nodes: Vec<Node>,
    refs: HashMap<String, usize>,
}

impl<'d> Builder<'d> {
    fn new(doc: Option<&'d Value>) -> Self {
        Builder {
            doc,
            nodes: Vec::new(),
            refs: HashMap::new(),
        }
    }

    fn convert(&mut self, v: &Value) -> usize {
        let id = self.nodes.len();
        self.nodes.push(Node::default());
        self.fill(id, v);
        id
    }

    fn fill(&mut self, id: usize, v: &Value) {
        let Some(obj) = v.as_object() else {
            // `true`/`false` schemas (additionalProperties) and junk say nothing about merging.
            return;
        };
        let mut node = Node::default();
        if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
            if let Some(target) = self.resolve(r) {
                node.refs.push(target);
            }
        }
        for comb in ["allOf", "anyOf", "oneOf"] {
            if let Some(members) = obj.get(comb).and_then(Value::as_array) {
                for m in members {
                    let child = self.convert(m);
                    node.refs.push(child);
                }
            }
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (name, p) in props {
                let child = self.convert(p);
                node.properties.insert(name.clone(), child);
            }
        }
        if let Some(add) = obj.get("additionalProperties").filter(|a| a.is_object()) {
            node.additional = Some(self.convert(add));
        }
        if let Some(items) = obj.get("items").filter(|i| i.is_object()) {
            node.items = Some(self.convert(items));
        }
        node.list = list_decl(obj);
        node.map_atomic = obj
            .get("x-kubernetes-map-type")
            .and_then(Value::as_str)
            .map(|t| t == "atomic");
        node.retain_keys = obj
            .get("x-kubernetes-patch-strategy")
            .and_then(Value::as_str)
            .map(|st| st.split(',').any(|p| p.trim() == "retainKeys"));
        node.default = obj.get("default").cloned();
        self.nodes[id] = node;
    }

    fn resolve(&mut self, r: &str) -> Option<usize> {
        if let Some(id) = self.refs.get(r) {
            return Some(*id);
        }
        let doc = self.doc?;
        let pointer = r.strip_prefix('#')?;
        let target = doc.pointer(pointer)?;
        let id = self.nodes.len();
        self.nodes.push(Node::default());
        // Register before filling so recursive schemas terminate.
        self.refs.insert(r.to_string(), id);
        self.fill(id, target);
        Some(id)
    }

    fn finish(mut self, root: usize) -> Schema {
        // Resolve the defaults of list-map key fields once, so merging needs no lookups.
        let mut schema = Schema {
            nodes: std::mem::take(&mut self.nodes),
            root,
        };
        for id in 0..schema.nodes.len() {
            let Some(ListDecl::Map(keys)) = schema.nodes[id].list.clone() else {
                continue;
            };
            let here = SchemaRef {
                schema: &schema,
                id,
            };
            let item = here.items();
            let defaults: Vec<Option<Value>> = keys
                .iter()
                .map(|k| {
                    item.and_then(|i| i.property(k))
                        .and_then(|p| p.default_value())
                        .filter(|d| !d.is_object() && !d.is_array())
                        .cloned()
                })
                .collect();
            schema.nodes[id].key_defaults = defaults;
        }
        schema
    }
}

fn list_decl(obj: &serde_json::Map<String, Value>) -> Option<ListDecl> {
    let merge_key = obj
        .get("x-kubernetes-patch-merge-key")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty());
    match obj.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("atomic") => return Some(ListDecl::Atomic),
        Some("set") => return Some(ListDecl::Set),
        Some("map") => {
            let keys: Vec<String> = obj
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|ks| {
                    ks.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            if !keys.is_empty() {
                return Some(ListDecl::Map(keys));
            }
            if let Some(k) = merge_key {
                return Some(ListDecl::Map(vec![k.to_string()]));
            }
            // A map without keys is invalid; let conventions decide.
            return None;
        }
        _ => {}
    }
    let strategy = obj
        .get("x-kubernetes-patch-strategy")
        .and_then(Value::as_str)?;
    let parts: Vec<&str> = strategy.split(',').map(str::trim).collect();
    if parts.contains(&"replace") {
        Some(ListDecl::Atomic)
    } else if parts.contains(&"merge") {
        Some(match merge_key {
            Some(k) => ListDecl::Map(vec![k.to_string()]),
            None => ListDecl::Set,
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn list_declarations() {
        let s = Schema::from_openapi_v3_schema(&json!({
            "type": "object",
            "properties": {
                "a": {"type": "array", "x-kubernetes-list-type": "atomic"},
                "s": {"type": "array", "x-kubernetes-list-type": "set"},
                "m": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["port", "protocol"],
                      "items": {"type": "object", "properties": {
                          "port": {"type": "integer"},
                          "protocol": {"type": "string", "default": "TCP"}}}},
                "p": {"type": "array", "x-kubernetes-patch-strategy": "merge",
                      "x-kubernetes-patch-merge-key": "name"},
                "f": {"type": "array", "x-kubernetes-patch-strategy": "merge"},
                "r": {"type": "array", "x-kubernetes-patch-strategy": "replace"},
                "n": {"type": "array"},
                "o": {"type": "object", "x-kubernetes-map-type": "atomic"}
            }
        }))
        .unwrap();
        let root = s.root();
        let decl = |name: &str| root.property(name).unwrap().list_decl().0.cloned();
        assert_eq!(decl("a"), Some(ListDecl::Atomic));
        assert_eq!(decl("s"), Some(ListDecl::Set));
        assert_eq!(
            decl("m"),
            Some(ListDecl::Map(vec!["port".into(), "protocol".into()]))
        );
        assert_eq!(decl("p"), Some(ListDecl::Map(vec!["name".into()])));
        assert_eq!(decl("f"), Some(ListDecl::Set));
        assert_eq!(decl("r"), Some(ListDecl::Atomic));
        assert_eq!(decl("n"), None);
        assert!(root.property("o").unwrap().map_atomic());
        assert!(!root.property("m").unwrap().map_atomic());
        let defaults = root.property("m").unwrap().list_decl().1.unwrap().to_vec();
        assert_eq!(defaults, vec![None, Some(json!("TCP"))]);
    }

    #[test]
    fn openapi_refs_are_followed_and_cycles_terminate() {
        let doc = json!({
            "openapi": "3.0.0",
            "components": {"schemas": {
                "io.k8s.api.apps.v1.Deployment": {
                    "type": "object",
                    "x-kubernetes-group-version-kind": [
                        {"group": "apps", "version": "v1", "kind": "Deployment"}],
                    "properties": {"spec": {"allOf": [
                        {"$ref": "#/components/schemas/Spec"}], "default": {}}}
                },
                "Spec": {"type": "object", "properties": {
                    "self": {"$ref": "#/components/schemas/Spec"},
                    "list": {"type": "array", "x-kubernetes-list-type": "map",
                             "x-kubernetes-list-map-keys": ["name"]}
                }}
            }}
        });
        let s = Schema::from_openapi_v3(&doc, "apps", "v1", "Deployment").unwrap();
        let spec = s.root().property("spec").unwrap();
        let deep = spec
            .property("self")
            .unwrap()
            .property("self")
            .unwrap()
            .property("list")
            .unwrap();
        assert_eq!(
            deep.list_decl().0.cloned(),
            Some(ListDecl::Map(vec!["name".into()]))
        );
        assert!(Schema::from_openapi_v3(&doc, "apps", "v1", "StatefulSet").is_err());
        assert!(Schema::detect(&doc, "apps/v1", "Deployment").is_ok());
    }

    #[test]
    fn crd_versions() {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "spec": {"versions": [
                {"name": "v1", "storage": false, "schema": {"openAPIV3Schema": {
                    "type": "object", "properties": {"x": {"type": "array",
                    "x-kubernetes-list-type": "atomic"}}}}},
                {"name": "v2", "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object", "properties": {"x": {"type": "array",
                    "x-kubernetes-list-type": "set"}}}}}
            ]}
        });
        let decl = |s: &Schema| s.root().property("x").unwrap().list_decl().0.cloned();
        assert_eq!(
            decl(&Schema::from_crd(&crd, Some("v1")).unwrap()),
            Some(ListDecl::Atomic)
        );
        assert_eq!(
            decl(&Schema::from_crd(&crd, None).unwrap()),
            Some(ListDecl::Set)
        );
        assert_eq!(
            decl(&Schema::detect(&crd, "example.com/v1", "Thing").unwrap()),
            Some(ListDecl::Atomic)
        );
        let err = Schema::from_crd(&crd, Some("v9")).unwrap_err();
        assert!(err.to_string().contains("v9"), "{err}");
        assert!(Schema::from_crd(&json!({"kind": "CustomResourceDefinition"}), None).is_err());
    }
}
