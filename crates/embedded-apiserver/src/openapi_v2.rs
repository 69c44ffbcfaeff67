//! `/openapi/v2`: the Swagger 2.0 document, as far as clients read it. client-go's
//! `OpenAPISchema()` asks for it in protobuf (gnostic's `openapi.v2.Document`) and kubectl's
//! and Helm's field-validation check falls back to it whenever a group-version is missing
//! from `/openapi/v3` (a kind whose CRD is not installed yet): it looks for the PATCH
//! operation carrying `x-kubernetes-group-version-kind` and a `fieldValidation` query
//! parameter. Without the document that check fails with "the server could not find the
//! requested resource" instead of the real cause.
//!
//! Every served resource and version gets its item path with get/put/patch/delete operations
//! and the query parameters of a write; `definitions` (object schemas) stay empty. The JSON
//! form is built first and the protobuf form is encoded from it, so the two cannot differ.

use crate::registry::Registry;
use crate::server::{json_bytes, Shared};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

/// Media type of the protobuf form as served. client-go asks for the older spelling
/// `...spec.v2@v1.0+protobuf`, but Go's `mime.ParseMediaType` refuses the `@` in a response
/// `Content-Type` ("unexpected content after media subtype"), so kube-apiserver answers with
/// this one, and so do we.
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// Whether an `Accept` header asks for the protobuf form (both spellings kube-apiserver
/// accepts: `...spec.v2@v1.0+protobuf` and `...spec.v2.v1.0+protobuf`).
fn wants_protobuf(accept: &str) -> bool {
    accept.split(',').any(|t| {
        let t = t.split(';').next().unwrap_or("").trim();
        t.starts_with("application/com.github.proto-openapi.spec.v2") && t.ends_with("+protobuf")
    })
}

/// The Swagger 2.0 document for the resources `reg` serves.
pub(crate) fn document(reg: &Registry) -> Value {
    let params = json!([
        {"name": "dryRun", "in": "query", "type": "string", "uniqueItems": true},
        {"name": "fieldManager", "in": "query", "type": "string", "uniqueItems": true},
        {"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": true},
        {"name": "force", "in": "query", "type": "boolean", "uniqueItems": true},
    ]);
    let mut paths = Map::new();
    for r in reg.all() {
        for version in &r.versions {
            let prefix = crate::openapi::group_version_prefix(&r.group, version);
            let gvk = json!({"group": r.group, "version": version, "kind": r.kind});
            let id = |action: &str| format!("{action}{}{}", r.kind, capitalized(version));
            let operations = crate::openapi::item_operations(id, &params, &gvk);
            paths.insert(crate::openapi::item_path(&prefix, &r), operations);
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": paths,
        "definitions": {},
    })
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// `GET /openapi/v2`.
pub(crate) fn serve(sh: &Shared, accept: &str) -> Response {
    let reg = sh.state.lock().registry.clone();
    let doc = document(&reg);
    let (body, content_type) = if wants_protobuf(accept) {
        (encode_document(&doc), PROTOBUF)
    } else {
        (json_bytes(&doc), "application/json")
    };
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// Protobuf writer for the handful of gnostic `openapi.v2` messages the document uses.
#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn bytes(&mut self, field: u64, b: &[u8]) {
        self.varint((field << 3) | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn string(&mut self, field: u64, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    fn bool(&mut self, field: u64, b: bool) {
        if b {
            self.varint(field << 3);
            self.varint(1);
        }
    }

    fn message(&mut self, field: u64, m: Writer) {
        self.bytes(field, &m.0);
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `openapi.v2.Document` (swagger = 1, info = 2, paths = 8).
fn encode_document(doc: &Value) -> Vec<u8> {
    let mut w = Writer::default();
    w.string(1, str_of(doc, "swagger"));
    let mut info = Writer::default();
    info.string(1, str_of(&doc["info"], "title"));
    info.string(2, str_of(&doc["info"], "version"));
    w.message(2, info);
    let mut paths = Writer::default();
    if let Some(map) = doc["paths"].as_object() {
        for (name, item) in map {
            // NamedPathItem: name = 1, value = 2.
            let mut named = Writer::default();
            named.string(1, name);
            named.message(2, encode_path_item(item));
            paths.message(2, named);
        }
    }
    w.message(8, paths);
    w.0
}

/// `PathItem`: get = 2, put = 3, delete = 5, patch = 8.
fn encode_path_item(item: &Value) -> Writer {
    let mut w = Writer::default();
    for (method, field) in [("get", 2), ("put", 3), ("delete", 5), ("patch", 8)] {
        if let Some(op) = item.get(method) {
            w.message(field, encode_operation(op));
        }
    }
    w
}

/// `Operation`: operation_id = 5, parameters = 8, responses = 9, vendor_extension = 13.
fn encode_operation(op: &Value) -> Writer {
    let mut w = Writer::default();
    w.string(5, str_of(op, "operationId"));
    for p in op["parameters"].as_array().into_iter().flatten() {
        // QueryParameterSubSchema: in = 2, name = 4, type = 6, unique_items = 20; wrapped in
        // NonBodyParameter (query = 3) < Parameter (non_body = 2) < ParametersItem (= 1).
        let mut query = Writer::default();
        query.string(2, str_of(p, "in"));
        query.string(4, str_of(p, "name"));
        query.string(6, str_of(p, "type"));
        query.bool(20, p["uniqueItems"].as_bool().unwrap_or(false));
        let mut non_body = Writer::default();
        non_body.message(3, query);
        let mut parameter = Writer::default();
        parameter.message(2, non_body);
        let mut item = Writer::default();
        item.message(1, parameter);
        w.message(8, item);
    }
    let mut responses = Writer::default();
    if let Some(map) = op["responses"].as_object() {
        for (code, resp) in map {
            // NamedResponseValue { name = 1, ResponseValue { Response = 1 { description = 1 } } }
            let mut response = Writer::default();
            response.string(1, str_of(resp, "description"));
            let mut value = Writer::default();
            value.message(1, response);
            let mut named = Writer::default();
            named.string(1, code);
            named.message(2, value);
            responses.message(1, named);
        }
    }
    w.message(9, responses);
    if let Some(map) = op.as_object() {
        for (key, value) in map.iter().filter(|(k, _)| k.starts_with("x-")) {
            // NamedAny { name = 1, Any { yaml = 2 } }: the value as YAML, as gnostic keeps it.
            let yaml = serde_yaml::to_string(value).unwrap_or_default();
            let mut any = Writer::default();
            any.string(2, &yaml);
            let mut named = Writer::default();
            named.string(1, key);
            named.message(2, any);
            w.message(13, named);
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_resource_has_a_patch_with_field_validation() {
        let doc = document(&Registry::with_builtins());
        let patch =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "version": "v1", "kind": "StatefulSet"})
        );
        assert!(patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));
        assert!(doc["paths"]
            .get("/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")
            .is_some());
    }

    #[test]
    fn protobuf_accept_headers() {
        assert!(wants_protobuf(PROTOBUF));
        assert!(wants_protobuf(
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
        ));
        assert!(wants_protobuf(
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf, application/json"
        ));
        assert!(!wants_protobuf("application/json"));
        assert!(!wants_protobuf(""));
    }

    #[test]
    fn varints_and_nesting_encode_like_protobuf() {
        let mut inner = Writer::default();
        inner.string(1, "a");
        let mut w = Writer::default();
        w.message(2, inner);
        w.bool(3, true);
        w.bool(4, false);
        assert_eq!(w.0, vec![0x12, 0x03, 0x0a, 0x01, b'a', 0x18, 0x01]);
        let mut big = Writer::default();
        big.varint(300);
        assert_eq!(big.0, vec![0xac, 0x02]);
    }
}
