//! Where the apply engine's schemas come from (`--apply-schema=auto`): for a custom resource,
//! the served version's `openAPIV3Schema` of its CustomResourceDefinition, read from a shared
//! CRD informer (so a CRD update applies to the next sync, no restart); for everything else,
//! the API server's OpenAPI v3 document of the group-version (`/openapi/v3/apis/<g>/<v>`),
//! fetched on first use, cached, and re-checked once per refresh interval through the
//! `/openapi/v3` index (refetched only when its hash changed).
//!
//! A lookup never fails: when no schema can be had (no CRD schema, no OpenAPI v3, a fetch
//! error, RBAC), it answers `None` and the caller merges by conventions, as upstream does.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metacontroller_apply::Schema;
use serde_json::Value;

use crate::discovery::ApiResource;
use crate::informer::Informers;
use crate::object::NamespacedName;

/// How long one OpenAPI request may take before the lookup gives up (and merges by
/// conventions this time).
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the first lookup waits for the CRD informer's initial list.
const CRD_SYNC_WAIT: Duration = Duration::from_secs(10);

/// Shared schema lookups for the apply engine; clone freely (one cache per process).
#[derive(Clone)]
pub struct Schemas {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Schemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schemas")
            .field("refresh", &self.inner.refresh)
            .finish_non_exhaustive()
    }
}

struct Inner {
    client: kube::Client,
    informers: Informers,
    /// The CRD informer, started by the first custom resource lookup (a process whose
    /// children are all built-in kinds never caches CRDs).
    crds: std::sync::OnceLock<crate::InformerLease>,
    /// The first custom resource lookup waited for the CRD informer's initial list.
    crd_waited: AtomicBool,
    refresh: Duration,
    /// (CRD name, version) → (CRD resourceVersion, schema of that version).
    crd_schemas: Mutex<HashMap<(String, String), CrdSchema>>,
    /// Group-version path (`apis/apps/v1`) → its document.
    docs: tokio::sync::Mutex<HashMap<String, Doc>>,
}

/// The schema of one CRD version, as of the CRD's resourceVersion.
type CrdSchema = (String, Option<Arc<Schema>>);

/// One fetched group-version document.
struct Doc {
    checked: Instant,
    /// The index's `serverRelativeURL` the document was fetched from (carries its hash).
    url: Option<String>,
    /// The document trimmed by [`trim_document`], kept as JSON text: parsed again only to
    /// build a kind not built yet (a `Value` tree takes about ten times the bytes).
    doc: Option<Arc<str>>,
    /// Schemas built from `doc`, by kind.
    built: HashMap<String, Option<Arc<Schema>>>,
}

/// What of an OpenAPI v3 group-version document the schema builder reads: `components.schemas`
/// (or v2's `definitions`) without prose. A real API server's `api/v1` document is over a
/// megabyte of JSON, mostly `description` strings and `paths`, and it stays cached for the
/// process's life so other kinds can be built from it later; every replica pays for it.
/// Only string-valued `description`s go: a *property* named `description` is an object.
fn trim_document(doc: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                if map.get("description").is_some_and(Value::is_string) {
                    map.remove("description");
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let Value::Object(mut doc) = doc else {
        return doc;
    };
    let mut kept = serde_json::Map::new();
    if let Some(mut schemas) = doc
        .get_mut("components")
        .and_then(|c| c.get_mut("schemas"))
        .map(Value::take)
    {
        strip(&mut schemas);
        kept.insert(
            "components".into(),
            serde_json::json!({ "schemas": schemas }),
        );
    }
    if let Some(mut definitions) = doc.remove("definitions") {
        strip(&mut definitions);
        kept.insert("definitions".into(), definitions);
    }
    Value::Object(kept)
}

/// The CustomResourceDefinition resource (the informer's target).
fn crd_resource() -> Arc<ApiResource> {
    let verbs: BTreeSet<String> = ["get", "list", "watch"]
        .into_iter()
        .map(String::from)
        .collect();
    Arc::new(ApiResource {
        api_version: "apiextensions.k8s.io/v1".into(),
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        name: "customresourcedefinitions".into(),
        singular_name: "customresourcedefinition".into(),
        kind: "CustomResourceDefinition".into(),
        namespaced: false,
        verbs,
        short_names: vec!["crd".into()],
        subresources: BTreeMap::new(),
    })
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

impl Schemas {
    /// A schema source using `client`, with the CRD informer taken from `informers`;
    /// OpenAPI documents are re-checked every `refresh` (`--discovery-interval`).
    pub fn new(client: kube::Client, informers: &Informers, refresh: Duration) -> Self {
        Schemas {
            inner: Arc::new(Inner {
                client,
                informers: informers.clone(),
                crds: std::sync::OnceLock::new(),
                crd_waited: AtomicBool::new(false),
                refresh,
                crd_schemas: Mutex::new(HashMap::new()),
                docs: tokio::sync::Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The schema to merge objects of `api_version`/`kind` (plural `resource`) with, or `None`
    /// to merge by conventions.
    pub async fn lookup(
        &self,
        api_version: &str,
        kind: &str,
        resource: &str,
    ) -> Option<Arc<Schema>> {
        let (group, version) = match api_version.rsplit_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        // Custom resource groups always contain a dot; core and most built-in groups do not.
        if group.contains('.') {
            if let Some(found) = self.crd_schema(group, version, resource).await {
                return found;
            }
        }
        self.openapi_schema(group, version, kind).await
    }

    /// `Some(schema or None)` when a CRD serves the resource; `None` when none does.
    async fn crd_schema(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Option<Option<Arc<Schema>>> {
        let informer = self
            .inner
            .crds
            .get_or_init(|| self.inner.informers.lease(&crd_resource()))
            .value();
        // Without list/watch on CRDs (RBAC) the informer never syncs: wait once, then look
        // in the (possibly empty) cache and fall back to OpenAPI without waiting again.
        let first_wait =
            !informer.has_synced() && !self.inner.crd_waited.swap(true, Ordering::Relaxed);
        if first_wait
            && tokio::time::timeout(CRD_SYNC_WAIT, informer.wait_synced())
                .await
                .is_err()
        {
            tracing::warn!("CustomResourceDefinitions not listed yet (RBAC: list/watch customresourcedefinitions?); custom resources merge by their OpenAPI v3 schema or by conventions meanwhile");
        }
        let name = format!("{resource}.{group}");
        let crd_key = NamespacedName::new("", name.as_str());
        // The cache decodes on read and a CRD is large: compare its resourceVersion first.
        let rv = informer.resource_version(&crd_key).unwrap_or_default();
        let key = (name, version.to_string());
        if let Ok(cache) = self.inner.crd_schemas.lock() {
            if let Some((cached_rv, schema)) = cache.get(&key) {
                if *cached_rv == rv {
                    return Some(schema.clone());
                }
            }
        }
        let crd = informer.get(&crd_key)?;
        let rv = crd.metadata.resource_version.clone().unwrap_or_default();
        let schema = match serde_json::to_value(&*crd) {
            Ok(mut value) => {
                // Informer items lack apiVersion/kind, which `detect` does not need here.
                if let Some(map) = value.as_object_mut() {
                    map.insert("kind".into(), "CustomResourceDefinition".into());
                }
                match Schema::from_crd(&value, Some(version)) {
                    Ok(s) => Some(Arc::new(s)),
                    Err(err) => {
                        tracing::debug!(crd = %key.0, version, error = %err, "no usable schema in the CRD; merging by conventions");
                        None
                    }
                }
            }
            Err(_) => None,
        };
        if let Ok(mut cache) = self.inner.crd_schemas.lock() {
            cache.insert(key, (rv, schema.clone()));
        }
        Some(schema)
    }

    async fn openapi_schema(&self, group: &str, version: &str, kind: &str) -> Option<Arc<Schema>> {
        let path = gv_path(group, version);
        let mut docs = self.inner.docs.lock().await;
        let stale = docs
            .get(&path)
            .is_none_or(|d| d.checked.elapsed() >= self.inner.refresh);
        if stale {
            self.refresh_doc(&mut docs, &path).await;
        }
        let entry = docs.get_mut(&path)?;
        if let Some(built) = entry.built.get(kind) {
            return built.clone();
        }
        let doc: Value = match serde_json::from_str(entry.doc.as_deref()?) {
            Ok(doc) => doc,
            Err(err) => {
                tracing::warn!(%path, error = %err, "cannot read back the cached OpenAPI document; merging by conventions");
                return None;
            }
        };
        let built = match Schema::from_openapi_v3(&doc, group, version, kind) {
            Ok(s) => Some(Arc::new(s)),
            Err(err) => {
                tracing::debug!(%path, kind, error = %err, "no OpenAPI v3 schema for the kind; merging by conventions");
                None
            }
        };
        entry.built.insert(kind.to_string(), built.clone());
        built
    }

    /// Re-checks the document of `path`: reads the index, refetches the document only when
    /// its URL (hash) changed. Failures keep what was there (or record nothing) until the
    /// next refresh.
    async fn refresh_doc(&self, docs: &mut HashMap<String, Doc>, path: &str) {
        let now = Instant::now();
        let url = match self.get_json("/openapi/v3").await {
            Ok(index) => index
                .pointer(&format!(
                    "/paths/{}/serverRelativeURL",
                    path.replace('/', "~1")
                ))
                .and_then(Value::as_str)
                .map(String::from),
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the OpenAPI v3 index; merging by conventions where no schema is cached");
                None
            }
        };
        if let Some(entry) = docs.get_mut(path) {
            if url.is_some() && entry.url == url {
                entry.checked = now;
                return;
            }
        }
        let doc = match &url {
            Some(u) => match self.get_json(u).await {
                Ok(doc) => Some(Arc::from(trim_document(doc).to_string())),
                Err(err) => {
                    tracing::warn!(%path, error = %err, "cannot fetch the OpenAPI v3 document; merging by conventions");
                    None
                }
            },
            None => None,
        };
        if doc.is_none() {
            // Keep a previously fetched document rather than lose schemas on a blip.
            if let Some(entry) = docs.get_mut(path) {
                entry.checked = now;
                if entry.doc.is_some() {
                    return;
                }
            }
        }
        docs.insert(
            path.to_string(),
            Doc {
                checked: now,
                url: if doc.is_some() { url } else { None },
                doc,
                built: HashMap::new(),
            },
        );
    }

    async fn get_json(&self, uri: &str) -> Result<Value, String> {
        let request = http::Request::get(uri)
            .header(http::header::ACCEPT, "application/json")
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(FETCH_TIMEOUT, self.inner.client.request::<Value>(request)).await
        {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("GET {uri} timed out after {FETCH_TIMEOUT:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Pod-like document: a list keyed by `name` behind a `$ref`, descriptions everywhere,
    /// and a property that is itself called `description`.
    fn document() -> Value {
        json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.30.0"},
            "paths": {"/api/v1/pods": {"get": {"description": "list or watch objects of kind Pod"}}},
            "components": {"schemas": {
                "io.k8s.api.core.v1.Pod": {
                    "description": "Pod is a collection of containers.",
                    "type": "object",
                    "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Pod"}],
                    "properties": {
                        "spec": {"description": "Specification of the desired behavior.",
                                 "allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}]},
                        "description": {"description": "a field named description", "type": "string"}
                    }
                },
                "io.k8s.api.core.v1.PodSpec": {
                    "type": "object",
                    "properties": {"containers": {
                        "description": "List of containers.",
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"},
                        "x-kubernetes-list-map-keys": ["slot"],
                        "x-kubernetes-list-type": "map"
                    }}
                },
                "io.k8s.api.core.v1.Container": {
                    "type": "object",
                    "required": ["slot"],
                    "properties": {"slot": {"type": "string", "description": "A key no convention knows."},
                                   "image": {"type": "string"}}
                }
            }}
        })
    }

    #[test]
    fn trimming_keeps_what_the_schema_builder_reads() {
        let trimmed = trim_document(document());
        assert_eq!(trimmed.get("paths"), None);
        assert_eq!(trimmed.get("info"), None);
        let pod = &trimmed["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod.get("description"), None);
        // The property named `description` stays, only its prose goes.
        assert_eq!(pod["properties"]["description"], json!({"type": "string"}));
        assert_eq!(
            trimmed["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]
                ["containers"]["x-kubernetes-list-map-keys"],
            json!(["slot"])
        );
        assert!(
            serde_json::to_vec(&trimmed).map_or(0, |b| b.len())
                < serde_json::to_vec(&document()).map_or(0, |b| b.len())
        );

        // Both documents merge a list keyed by `slot` the same way (conventions would replace
        // it: `slot` is no conventional key).
        let full = Schema::from_openapi_v3(&document(), "", "v1", "Pod").expect("full");
        let small = Schema::from_openapi_v3(&trimmed, "", "v1", "Pod").expect("trimmed");
        let observed = json!({"spec": {"containers": [{"slot": "a", "image": "a:1"}, {"slot": "sidecar", "image": "s:1"}]}});
        let last = json!({"spec": {"containers": [{"slot": "a", "image": "a:1"}]}});
        let desired = json!({"spec": {"containers": [{"slot": "a", "image": "a:2"}]}});
        let merge = |schema: &Schema| {
            metacontroller_apply::merge_with_schema(&observed, Some(&last), &desired, schema)
                .expect("merge")
        };
        assert_eq!(merge(&full), merge(&small));
        assert_eq!(
            merge(&small)["spec"]["containers"],
            json!([{"slot": "a", "image": "a:2"}, {"slot": "sidecar", "image": "s:1"}])
        );
    }

    #[test]
    fn trimming_a_v2_document_or_a_stray_value() {
        let v2 =
            json!({"swagger": "2.0", "definitions": {"x": {"description": "d", "type": "object"}}});
        assert_eq!(
            trim_document(v2),
            json!({"definitions": {"x": {"type": "object"}}})
        );
        assert_eq!(trim_document(json!("text")), json!("text"));
    }
}
