//! OpenAPI v3 documents, as far as kubectl needs them: the root index and one
//! document per group-version whose PATCH operations carry
//! `x-kubernetes-group-version-kind` and the `fieldValidation` parameter, which
//! is how kubectl decides to let the server validate fields.
//! `/openapi/v2` lives in `openapi_v2.rs`.
//!
//! Each group-version document also carries `components.schemas` as kube-apiserver's do:
//! for built-in kinds, the structure and list semantics of [`crate::openapi_builtin`]; for
//! custom resources, the served version's `openAPIV3Schema` from the CRD, tagged with
//! `x-kubernetes-group-version-kind`. The index hashes each document, so a CRD update
//! changes its `serverRelativeURL` (clients refetch it).

use crate::registry::{Registry, ResourceInfo};
use crate::server::{json_bytes, Shared};
use crate::store::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use std::hash::{Hash, Hasher};

fn not_found() -> Response {
    let e = crate::errors::ApiError::not_found_path();
    e.into_response()
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn all_gvs(reg: &Registry) -> Vec<(String, String)> {
    let mut out = vec![(String::new(), "v1".to_string())];
    for (g, vs) in reg.groups() {
        for v in vs {
            out.push((g.clone(), v));
        }
    }
    out
}

/// The component name kube-apiserver gives a custom resource kind: the group reversed
/// (`example.com` → `com.example`), then version and kind.
fn crd_component_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The served `openAPIV3Schema` of `version` in the CRD named `crd_name`.
fn crd_schema(st: &State, crd_name: &str, version: &str) -> Option<Value> {
    let gr = (
        "apiextensions.k8s.io".to_string(),
        "customresourcedefinitions".to_string(),
    );
    let crd = st.get(&gr, "", crd_name)?;
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?
        .pointer("/schema/openAPIV3Schema")
        .cloned()
}

fn components(st: &State, group: &str, version: &str) -> Map<String, Value> {
    let mut schemas = Map::new();
    let resources = st.registry.in_group_version(group, version);
    let builtin: Vec<&str> = resources
        .iter()
        .filter(|r| r.crd.is_none())
        .map(|r| r.kind.as_str())
        .collect();
    crate::openapi_builtin::add_components(&mut schemas, group, version, &builtin);
    for r in resources.iter() {
        let Some(crd) = &r.crd else {
            continue;
        };
        let Some(Value::Object(mut schema)) = crd_schema(st, &crd.crd_name, version) else {
            continue;
        };
        schema.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": group, "version": version, "kind": r.kind}]),
        );
        schemas.insert(
            crd_component_name(group, version, &r.kind),
            Value::Object(schema),
        );
    }
    schemas
}

/// Where the paths of a group-version start: `/api/<version>` for the core group,
/// `/apis/<group>/<version>` for the others.
pub(crate) fn group_version_prefix(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// The path of one object of `r` below `prefix`.
pub(crate) fn item_path(prefix: &str, r: &ResourceInfo) -> String {
    if r.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.resource)
    } else {
        format!("{prefix}/{}/{{name}}", r.resource)
    }
}

/// The operations of an object's path (get, put, patch, delete), each with the write's
/// query `params` and the object's `gvk`; `id(action)` is the operation's ID.
pub(crate) fn item_operations(id: impl Fn(&str) -> String, params: &Value, gvk: &Value) -> Value {
    let op = |action: &str| {
        json!({
            "operationId": id(action),
            "parameters": params,
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        })
    };
    json!({"get": op("get"), "put": op("put"), "delete": op("delete"), "patch": op("patch")})
}

fn gv_doc(st: &State, group: &str, version: &str) -> Value {
    let reg = &st.registry;
    let mut paths = Map::new();
    let params = json!([
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
    ]);
    let prefix = group_version_prefix(group, version);
    for r in reg.in_group_version(group, version) {
        let gvk = json!({"group": r.group, "version": version, "kind": r.kind});
        let id = |action: &str| format!("{action}{}", r.kind);
        paths.insert(item_path(&prefix, &r), item_operations(id, &params, &gvk));
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": paths,
        "components": {"schemas": components(st, group, version)},
    })
}

fn hash_of(v: &Value) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.to_string().hash(&mut h);
    format!("{:016X}", h.finish())
}

fn respond(v: &Value) -> Response {
    let mut r = (StatusCode::OK, json_bytes(v)).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `/openapi/...`.
pub(crate) fn serve(sh: &Shared, rest: &[&str], _accept: &str) -> Response {
    let st = sh.state.lock();
    match rest {
        ["v3"] => {
            let mut paths = Map::new();
            for (g, v) in all_gvs(&st.registry) {
                let doc = gv_doc(&st, &g, &v);
                let p = gv_path(&g, &v);
                paths.insert(
                    p.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}", hash_of(&doc))}),
                );
            }
            respond(&json!({"paths": paths}))
        }
        ["v3", "api", v] => respond(&gv_doc(&st, "", v)),
        ["v3", "apis", g, v] if !st.registry.in_group_version(g, v).is_empty() => {
            respond(&gv_doc(&st, g, v))
        }
        _ => not_found(),
    }
}
