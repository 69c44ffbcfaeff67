//! HTTP front end: routing Kubernetes API paths, content negotiation, and
//! the REST verbs on top of [`crate::ops`].

use crate::control::{ControlState, FaultAction};
use crate::discovery;
use crate::errors::{ApiError, ApiResult};
use crate::hooks::FieldValidation;
use crate::ops::{self, DeleteOpts, Propagation, Subresource, WriteOpts};
use crate::patch;
use crate::registry::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{meta_str, State};
use crate::table::{self, IncludeObject};
use crate::watch;
use crate::Config;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use parking_lot::Mutex;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// State shared by all requests and background tasks.
pub struct Shared {
    pub(crate) state: Mutex<State>,
    pub(crate) config: Config,
    pub(crate) control: ControlState,
    pub(crate) controllers: tokio::sync::Notify,
    pub(crate) watch_close: tokio::sync::watch::Sender<u64>,
    pub(crate) open_watches: AtomicUsize,
    /// The commit slots of [`Config::write_latency`].
    pub(crate) commits: Option<crate::latency::CommitSlots>,
    pub(crate) addr: SocketAddr,
}

impl Shared {
    pub(crate) fn close_watches(&self) {
        self.watch_close.send_modify(|g| *g += 1);
    }

    pub(crate) fn open_watches(&self) -> usize {
        self.open_watches.load(Ordering::Relaxed)
    }

    /// Runs `f` under the storage lock and wakes the controllers if it left them work.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut st = self.state.lock();
        let out = f(&mut st);
        if st.controllers_dirty {
            st.controllers_dirty = false;
            drop(st);
            self.controllers.notify_one();
        }
        out
    }
}

/// Decoded query string (last value wins).
pub(crate) type Query = HashMap<String, String>;

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn parse_query(q: Option<&str>) -> Query {
    let mut out = HashMap::new();
    for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.insert(percent_decode(k), percent_decode(v));
    }
    out
}

/// A request addressed to a resource.
pub(crate) struct ResourceReq {
    pub info: Arc<ResourceInfo>,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
    pub query: Query,
    pub headers: HeaderMap,
    pub legacy_watch: bool,
}

impl ResourceReq {
    pub(crate) fn q(&self, k: &str) -> Option<&str> {
        self.query
            .get(k)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    fn accept(&self) -> &str {
        self.headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub(crate) fn wants_table(&self) -> bool {
        table::wants_table(self.accept())
    }

    pub(crate) fn label_selector(&self) -> ApiResult<LabelSelector> {
        LabelSelector::parse(self.q("labelSelector").unwrap_or(""))
    }

    pub(crate) fn field_selector(&self) -> ApiResult<FieldSelector> {
        FieldSelector::parse(
            self.q("fieldSelector").unwrap_or(""),
            &self.info.field_labels,
        )
    }

    fn write_opts(&self) -> ApiResult<WriteOpts> {
        Ok(WriteOpts {
            dry_run: dry_run(&self.query)?,
            field_validation: FieldValidation::parse(self.q("fieldValidation"))?,
            field_manager: Some(self.field_manager()),
        })
    }

    /// `fieldManager`, or the real server's default: the User-Agent up to the first `/`.
    fn field_manager(&self) -> String {
        if let Some(m) = self.q("fieldManager") {
            return m.to_string();
        }
        let ua = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("unknown");
        ua.split('/')
            .next()
            .unwrap_or("unknown")
            .chars()
            .take(128)
            .collect()
    }

    fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    fn verb(&self, method: &Method) -> &'static str {
        match (method.as_str(), self.name.is_some()) {
            ("GET", true) => {
                if self.legacy_watch {
                    "watch"
                } else {
                    "get"
                }
            }
            ("GET", false) => {
                if self.legacy_watch || is_true(self.query.get("watch")) {
                    "watch"
                } else {
                    "list"
                }
            }
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            _ => "unknown",
        }
    }
}

fn dry_run(q: &Query) -> ApiResult<bool> {
    match q.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "Invalid dry run value: {other}; supported values: All"
        ))),
    }
}

pub(crate) fn is_true(v: Option<&String>) -> bool {
    matches!(
        v.map(String::as_str),
        Some("true") | Some("1") | Some("True")
    )
}

/// Serializes an object, optionally rewriting `apiVersion` or dropping type meta
/// (built-in list items carry no kind/apiVersion on the wire).
pub(crate) struct ItemView<'a> {
    pub obj: &'a Value,
    pub api_version: Option<&'a str>,
    pub strip_type: bool,
}

impl Serialize for ItemView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.obj {
            Value::Object(m) => {
                let mut map = s.serialize_map(None)?;
                for (k, v) in m {
                    if k == "apiVersion" || k == "kind" {
                        if self.strip_type {
                            continue;
                        }
                        if k == "apiVersion" {
                            if let Some(av) = self.api_version {
                                map.serialize_entry(k, av)?;
                                continue;
                            }
                        }
                    }
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            other => other.serialize(s),
        }
    }
}

pub(crate) fn json_bytes<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v)
        .unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()).into_bytes())
}

fn respond(code: StatusCode, body: Vec<u8>, warnings: &[String]) -> Response {
    let mut resp = (code, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for w in warnings {
        let text = format!("299 - {:?}", w.replace('"', "'"));
        if let Ok(v) = HeaderValue::from_str(&text) {
            h.append("Warning", v);
        }
    }
    resp
}

fn respond_obj(
    code: StatusCode,
    info: &ResourceInfo,
    version: &str,
    obj: &Value,
    warnings: &[String],
) -> Response {
    let av = info.api_version(version);
    respond(
        code,
        json_bytes(&ItemView {
            obj,
            api_version: Some(&av),
            strip_type: false,
        }),
        warnings,
    )
}

fn respond_value(v: &Value) -> Response {
    respond(StatusCode::OK, json_bytes(v), &[])
}

/// Routes every request.
pub(crate) async fn handle(sh: Arc<Shared>, req: Request) -> Response {
    match handle_inner(sh, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn authorized(sh: &Shared, headers: &HeaderMap) -> bool {
    let Some(token) = &sh.config.token else {
        return true;
    };
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t.trim() == token)
}

async fn handle_inner(sh: Arc<Shared>, req: Request) -> ApiResult<Response> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = parse_query(parts.uri.query());
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let public = matches!(
        segs.first(),
        Some(&"healthz") | Some(&"readyz") | Some(&"livez") | Some(&"version")
    );
    if !public && !authorized(&sh, &parts.headers) {
        return Err(ApiError::unauthorized());
    }
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    match segs.as_slice() {
        ["version"] => return Ok(respond_value(&crate::version_info(&sh.config.version))),
        [h] | [h, ..] if ["healthz", "readyz", "livez"].contains(h) => {
            return Ok(
                (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], "ok").into_response(),
            )
        }
        ["openapi", "v2"] => return Ok(crate::openapi_v2::serve(&sh, &accept)),
        ["openapi", ..] => return Ok(crate::openapi::serve(&sh, &segs[1..], &accept)),
        ["api"] => {
            if let Some(v) = discovery::wants_aggregated(&accept) {
                let st = sh.state.lock();
                return Ok(aggregated_response(
                    discovery::aggregated(&st.registry, true, &format!("apidiscovery.k8s.io/{v}")),
                    v,
                ));
            }
            return Ok(respond_value(&discovery::api_versions(
                &sh.addr.to_string(),
            )));
        }
        ["apis"] => {
            let st = sh.state.lock();
            if let Some(v) = discovery::wants_aggregated(&accept) {
                return Ok(aggregated_response(
                    discovery::aggregated(&st.registry, false, &format!("apidiscovery.k8s.io/{v}")),
                    v,
                ));
            }
            return Ok(respond_value(&discovery::api_group_list(&st.registry)));
        }
        ["apis", group] => {
            let st = sh.state.lock();
            return discovery::api_group(&st.registry, group)
                .map(|v| respond_value(&v))
                .ok_or_else(ApiError::not_found_path);
        }
        ["api", "v1"] => {
            let st = sh.state.lock();
            return discovery::resource_list(&st.registry, "", "v1")
                .map(|v| respond_value(&v))
                .ok_or_else(ApiError::not_found_path);
        }
        ["apis", group, version] => {
            let st = sh.state.lock();
            return discovery::resource_list(&st.registry, group, version)
                .map(|v| respond_value(&v))
                .ok_or_else(ApiError::not_found_path);
        }
        _ => {}
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::not_found_path()),
    };
    let rreq = resolve(&sh, group, version, rest, query, parts.headers.clone())?;
    let verb = rreq.verb(&parts.method);
    let counted = match &rreq.sub {
        Some(s) => format!("{}/{}", rreq.info.resource, s),
        None => rreq.info.resource.clone(),
    };
    sh.control.count(verb, &counted, rreq.namespace.as_deref());
    let is_write = crate::control::WRITE_VERBS.contains(&verb);
    // Held until the response is built, for the in-flight gauges of `Control`.
    let _in_flight = is_write.then(|| sh.control.enter_write(verb, &counted));
    let mut answer_after = None;
    match sh.control.take_fault(verb, &counted) {
        Some(FaultAction::Status(code)) => return Err(ApiError::injected(code)),
        Some(FaultAction::Latency(d)) => tokio::time::sleep(d).await,
        Some(FaultAction::SlowResponse(d)) => answer_after = Some(d),
        None => {}
    }
    // Realistic latency: the write is applied once its commit is over.
    if let Some(commits) = sh.commits.as_ref().filter(|_| is_write) {
        commits.enter().await;
    }
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let body = axum::body::to_bytes(body, 64 * 1024 * 1024)
        .await
        .map_err(|e| ApiError::bad_request(format!("failed to read request body: {e}")))?;
    let served = match verb {
        "get" => get(&sh, &rreq),
        "list" => list(&sh, &rreq),
        "watch" => watch::serve(sh.clone(), rreq),
        "create" => {
            if rreq.name.is_some() {
                return Err(ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                ));
            }
            create(&sh, &rreq, &content_type, &body)
        }
        "update" => update(&sh, &rreq, &content_type, &body),
        "patch" => patch_handler(&sh, &rreq, &content_type, &body),
        "delete" => delete(&sh, &rreq, &body),
        "deletecollection" => {
            if !rreq.info.verbs.iter().any(|v| v == "deletecollection") {
                return Err(ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                ));
            }
            delete_collection(&sh, &rreq, &body)
        }
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )),
    };
    if let Some(delay) = answer_after {
        tokio::time::sleep(delay).await;
    }
    served
}

fn aggregated_response(v: Value, version: &str) -> Response {
    let mut r = respond_value(&v);
    if let Ok(ct) = HeaderValue::from_str(&format!(
        "application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
    )) {
        r.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    r
}

fn resolve(
    sh: &Shared,
    group: &str,
    version: &str,
    rest: &[&str],
    query: Query,
    headers: HeaderMap,
) -> ApiResult<ResourceReq> {
    let (legacy_watch, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let st = sh.state.lock();
    let lookup = |res: &str| st.registry.get(group, version, res);
    let (namespace, res, tail): (Option<String>, &str, &[&str]) = match rest {
        ["namespaces", ns, res, tail @ ..]
            if group.is_empty() && (*res == "status" || *res == "finalize") && tail.is_empty() =>
        {
            let _ = ns;
            (None, "namespaces", &rest[1..])
        }
        ["namespaces", ns, res, tail @ ..] => (Some(ns.to_string()), *res, tail),
        [res, tail @ ..] => (None, *res, tail),
        [] => return Err(ApiError::not_found_path()),
    };
    let info = lookup(res).ok_or_else(ApiError::not_found_path)?;
    if namespace.is_some() && !info.namespaced {
        return Err(ApiError::not_found_path());
    }
    let (name, sub) = match tail {
        [] => (None, None),
        [n] => (Some(n.to_string()), None),
        [n, s] => {
            if !info.has_subresource(s) {
                return Err(ApiError::not_found_path());
            }
            (Some(n.to_string()), Some(s.to_string()))
        }
        _ => return Err(ApiError::not_found_path()),
    };
    Ok(ResourceReq {
        info,
        version: version.to_string(),
        namespace,
        name,
        sub,
        query,
        headers,
        legacy_watch,
    })
}

fn get(sh: &Shared, r: &ResourceReq) -> ApiResult<Response> {
    let name = r.name.as_deref().unwrap_or("");
    let obj = {
        let st = sh.state.lock();
        st.get(&r.info.gr(), r.ns(), name)
    }
    .ok_or_else(|| ApiError::not_found(&r.info.group, &r.info.resource, name))?;
    let obj = ops::to_version(&r.info, &obj, &r.version);
    if r.sub.as_deref() == Some("scale") {
        return Ok(respond_value(&crate::scale::to_scale(&r.info, &obj)?));
    }
    if r.wants_table() {
        let t = table::render(
            &r.info,
            &r.version,
            &[&obj],
            IncludeObject::parse(r.q("includeObject")),
            json!({"resourceVersion": meta_str(&obj, "resourceVersion")}),
        );
        return Ok(respond_value(&t));
    }
    Ok(respond_obj(StatusCode::OK, &r.info, &r.version, &obj, &[]))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    ns: String,
    name: String,
}

fn list(sh: &Shared, r: &ResourceReq) -> ApiResult<Response> {
    let labels = r.label_selector()?;
    let fields = r.field_selector()?;
    let limit: usize = match r.q("limit") {
        Some(l) => l
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?
            .max(0) as usize,
        None => 0,
    };
    let cont = match r.q("continue") {
        Some(c) => {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(c)
                .map_err(|e| ApiError::bad_request(format!("continue key is not valid: {e}")))?;
            Some(
                serde_json::from_slice::<ContinueToken>(&raw).map_err(|e| {
                    ApiError::bad_request(format!("continue key is not valid: {e}"))
                })?,
            )
        }
        None => None,
    };
    let (items, rv, remaining, next) = {
        let st = sh.state.lock();
        if let Some(c) = &cont {
            if c.rv < st.compacted_rv {
                return Err(ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."));
            }
        }
        let ns = r.namespace.as_deref();
        let all = st.list(&r.info.gr(), ns);
        let rv = cont.as_ref().map(|c| c.rv).unwrap_or(st.rv);
        let mut matched = all.into_iter().filter(|((ns, name), obj)| {
            if let Some(c) = &cont {
                if (ns.as_str(), name.as_str()) <= (c.ns.as_str(), c.name.as_str()) {
                    return false;
                }
            }
            labels.matches_object(obj) && fields.matches_object(obj)
        });
        let mut items = Vec::new();
        let mut next = None;
        let mut remaining = 0usize;
        for (key, obj) in matched.by_ref() {
            if limit > 0 && items.len() == limit {
                next = Some(key);
                remaining = 1;
                break;
            }
            items.push(obj);
        }
        if next.is_some() {
            remaining += matched.count();
        }
        let next = next.map(|_| {
            let last = items
                .last()
                .map(|o| {
                    (
                        meta_str(o, "namespace").to_string(),
                        meta_str(o, "name").to_string(),
                    )
                })
                .unwrap_or_default();
            let tok = ContinueToken {
                rv,
                ns: if r.info.namespaced {
                    last.0
                } else {
                    String::new()
                },
                name: last.1,
            };
            base64::engine::general_purpose::STANDARD.encode(json_bytes(&tok))
        });
        (items, rv, remaining, next)
    };
    let mut list_meta = json!({"resourceVersion": rv.to_string()});
    if let Some(n) = &next {
        list_meta["continue"] = json!(n);
        if labels.is_empty() && fields.0.is_empty() {
            list_meta["remainingItemCount"] = json!(remaining);
        }
    }
    let av = r.info.api_version(&r.version);
    if r.wants_table() {
        let converted: Vec<Arc<Value>> = items
            .iter()
            .map(|o| ops::to_version(&r.info, o, &r.version))
            .collect();
        let refs: Vec<&Value> = converted.iter().map(|a| a.as_ref()).collect();
        let t = table::render(
            &r.info,
            &r.version,
            &refs,
            IncludeObject::parse(r.q("includeObject")),
            list_meta,
        );
        return Ok(respond_value(&t));
    }
    let strip = !r.info.is_custom();
    let views: Vec<ItemView> = items
        .iter()
        .map(|o| ItemView {
            obj: o,
            api_version: Some(&av),
            strip_type: strip,
        })
        .collect();
    #[derive(Serialize)]
    struct ListOut<'a> {
        kind: &'a str,
        #[serde(rename = "apiVersion")]
        api_version: &'a str,
        metadata: &'a Value,
        items: &'a [ItemView<'a>],
    }
    let body = json_bytes(&ListOut {
        kind: &r.info.list_kind,
        api_version: &av,
        metadata: &list_meta,
        items: &views,
    });
    Ok(respond(StatusCode::OK, body, &[]))
}

/// Decodes a request body (JSON or YAML).
pub(crate) fn decode_body(content_type: &str, body: &Bytes) -> ApiResult<Value> {
    let ct = content_type.split(';').next().unwrap_or("").trim();
    if body.is_empty() {
        return Err(ApiError::bad_request("the body of the request was empty"));
    }
    match ct {
        "application/yaml" | "application/apply-patch+yaml" => {
            serde_yaml::from_slice::<Value>(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
        }
        crate::protobuf::CONTENT_TYPE => crate::protobuf::decode(body),
        _ => serde_json::from_slice::<Value>(body).map_err(|e| {
            ApiError::bad_request(format!(
                "Object 'Kind' is missing in '{}': {e}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ))
        }),
    }
}

fn create(sh: &Shared, r: &ResourceReq, ct: &str, body: &Bytes) -> ApiResult<Response> {
    let obj = decode_body(ct, body)?;
    let opts = r.write_opts()?;
    let res =
        sh.write(|st| ops::create(st, &r.info, &r.version, r.namespace.as_deref(), obj, &opts))?;
    let obj = ops::to_version(&r.info, &res.object, &r.version);
    Ok(respond_obj(
        StatusCode::CREATED,
        &r.info,
        &r.version,
        &obj,
        &res.warnings,
    ))
}

fn subresource(r: &ResourceReq) -> ApiResult<Subresource> {
    match r.sub.as_deref() {
        None => Ok(Subresource::Main),
        Some("status") => Ok(Subresource::Status),
        Some("finalize") => Ok(Subresource::Finalize),
        Some(other) => Err(ApiError::not_found(
            &r.info.group,
            &format!("{}/{}", r.info.resource, other),
            r.name.as_deref().unwrap_or(""),
        )),
    }
}

fn update(sh: &Shared, r: &ResourceReq, ct: &str, body: &Bytes) -> ApiResult<Response> {
    let obj = decode_body(ct, body)?;
    let opts = r.write_opts()?;
    let name = r.name.clone().unwrap_or_default();
    if r.sub.as_deref() == Some("scale") {
        let res = sh.write(|st| {
            crate::scale::update_scale(st, &r.info, &r.version, r.ns(), &name, &obj, &opts)
        })?;
        return Ok(respond_value(&res));
    }
    let sub = subresource(r)?;
    let res = sh.write(|st| {
        ops::update(
            st,
            &r.info,
            &r.version,
            r.namespace.as_deref(),
            &name,
            obj,
            sub,
            &opts,
        )
    })?;
    let obj = ops::to_version(&r.info, &res.object, &r.version);
    let code = if res.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(respond_obj(code, &r.info, &r.version, &obj, &res.warnings))
}

fn patch_handler(sh: &Shared, r: &ResourceReq, ct: &str, body: &Bytes) -> ApiResult<Response> {
    let pt = patch::PatchType::from_content_type(ct, &r.info)?;
    let opts = r.write_opts()?;
    let name = r.name.clone().unwrap_or_default();
    let force = is_true(r.query.get("force"));
    if pt == patch::PatchType::Apply && r.q("fieldManager").is_none() {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![crate::validation::required(
                "fieldManager",
                "is required for apply patch",
            )],
        ));
    }
    let body = patch::PatchBody::parse(pt, body)?;
    if r.sub.as_deref() == Some("scale") {
        let res = sh.write(|st| {
            crate::scale::patch_scale(st, &r.info, &r.version, r.ns(), &name, &body, &opts)
        })?;
        return Ok(respond_value(&res));
    }
    let sub = subresource(r)?;
    let (res, created) = sh.write(|st| {
        patch::patch(
            st,
            &r.info,
            &r.version,
            r.namespace.as_deref(),
            &name,
            &body,
            sub,
            &opts,
            force,
        )
    })?;
    let obj = ops::to_version(&r.info, &res.object, &r.version);
    let code = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(respond_obj(code, &r.info, &r.version, &obj, &res.warnings))
}

fn delete_opts(r: &ResourceReq, body: &Bytes) -> ApiResult<(DeleteOpts, bool)> {
    let b: Value = if body.is_empty() {
        json!({})
    } else if body.starts_with(crate::protobuf::MAGIC) {
        crate::protobuf::delete_options(body)?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let mut propagation = b
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .map(String::from);
    if let Some(p) = r.q("propagationPolicy") {
        propagation = Some(p.to_string());
    }
    let orphan = b
        .get("orphanDependents")
        .and_then(Value::as_bool)
        .or_else(|| r.q("orphanDependents").map(|v| v == "true"));
    let propagation = match (propagation.as_deref(), orphan) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("", "DeleteOptions", "", vec![crate::errors::Cause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: \"\": orphanDependents and deletionPropagation cannot be both set".into(),
                field: "propagationPolicy".into(),
            }]))
        }
        (Some("Background"), _) => Some(Propagation::Background),
        (Some("Foreground"), _) => Some(Propagation::Foreground),
        (Some("Orphan"), _) => Some(Propagation::Orphan),
        (Some(other), _) => {
            return Err(ApiError::invalid("", "DeleteOptions", "", vec![crate::errors::Cause {
                reason: "FieldValueNotSupported".into(),
                message: format!("Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""),
                field: "propagationPolicy".into(),
            }]))
        }
        (None, Some(true)) => Some(Propagation::Orphan),
        (None, _) => None,
    };
    let grace = b
        .get("gracePeriodSeconds")
        .and_then(Value::as_i64)
        .or_else(|| r.q("gracePeriodSeconds").and_then(|g| g.parse().ok()));
    let mut dry = dry_run(&r.query)?;
    if let Some(d) = b.get("dryRun").and_then(Value::as_array) {
        dry |= d.iter().any(|v| v == "All");
    }
    Ok((
        DeleteOpts {
            propagation,
            grace_period_seconds: grace,
            precondition_uid: b
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(String::from),
            precondition_rv: b
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(String::from),
            dry_run: dry,
        },
        orphan == Some(false),
    ))
}

fn success_status(r: &ResourceReq, obj: &Value) -> Value {
    let mut details = json!({"name": meta_str(obj, "name"), "kind": r.info.resource, "uid": meta_str(obj, "uid")});
    if !r.info.group.is_empty() {
        details["group"] = json!(r.info.group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

fn delete(sh: &Shared, r: &ResourceReq, body: &Bytes) -> ApiResult<Response> {
    if r.sub.is_some() {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let (opts, accepted) = delete_opts(r, body)?;
    let name = r.name.clone().unwrap_or_default();
    let res = sh.write(|st| ops::delete(st, &r.info, r.ns(), &name, &opts))?;
    let obj = ops::to_version(&r.info, &res.object, &r.version);
    if res.deleted && !r.info.is_custom() {
        return Ok(respond_value(&success_status(r, &obj)));
    }
    let code = if !res.deleted && accepted {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok(respond_obj(code, &r.info, &r.version, &obj, &[]))
}

fn delete_collection(sh: &Shared, r: &ResourceReq, body: &Bytes) -> ApiResult<Response> {
    let (opts, _) = delete_opts(r, body)?;
    let labels = r.label_selector()?;
    let fields = r.field_selector()?;
    let deleted = sh.write(|st| -> ApiResult<Vec<Arc<Value>>> {
        let targets: Vec<(String, String)> = st
            .list(&r.info.gr(), r.namespace.as_deref())
            .into_iter()
            .filter(|(_, o)| labels.matches_object(o) && fields.matches_object(o))
            .map(|(k, _)| k)
            .collect();
        let mut out = Vec::new();
        for (ns, name) in targets {
            match ops::delete(st, &r.info, &ns, &name, &opts) {
                Ok(res) => out.push(res.object),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    })?;
    let av = r.info.api_version(&r.version);
    let items: Vec<ItemView> = deleted
        .iter()
        .map(|o| ItemView {
            obj: o,
            api_version: Some(&av),
            strip_type: !r.info.is_custom(),
        })
        .collect();
    let rv = sh.state.lock().rv;
    let body = json_bytes(&json!({
        "kind": r.info.list_kind,
        "apiVersion": av,
        "metadata": {"resourceVersion": rv.to_string()},
        "items": serde_json::to_value(&items).unwrap_or(json!([])),
    }));
    Ok(respond(StatusCode::OK, body, &[]))
}

/// Used by the server builder.
pub(crate) fn router(sh: Arc<Shared>) -> axum::Router {
    axum::Router::new().fallback(move |req: Request<Body>| {
        let sh = sh.clone();
        async move { handle(sh, req).await }
    })
}
