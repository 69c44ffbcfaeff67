//! Watch streams: initial events or replay from the history, live events
//! filtered by namespace and selectors, bookmarks, timeouts and 410 on
//! compacted resourceVersions.

use crate::errors::{ApiError, ApiResult};
use crate::ops;
use crate::server::{is_true, json_bytes, ItemView, ResourceReq, Shared};
use crate::store::{meta_str, Event, EventType};
use crate::table::{self, IncludeObject};
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

struct Filter {
    namespace: Option<String>,
    labels: crate::selector::LabelSelector,
    fields: crate::selector::FieldSelector,
    name: Option<String>,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace {
            if meta_str(obj, "namespace") != ns {
                return false;
            }
        }
        if let Some(n) = &self.name {
            if meta_str(obj, "name") != n {
                return false;
            }
        }
        self.labels.matches_object(obj) && self.fields.matches_object(obj)
    }
}

/// Turns a stored event into what this watcher sees (selector transitions become ADDED/DELETED).
fn visible(ev: &Event, f: &Filter) -> Option<(EventType, Arc<Value>)> {
    let now = f.matches(&ev.object);
    match ev.etype {
        EventType::Added => now.then(|| (EventType::Added, ev.object.clone())),
        EventType::Deleted => now.then(|| (EventType::Deleted, ev.object.clone())),
        EventType::Modified => {
            let before = ev.prev.as_ref().is_some_and(|p| f.matches(p));
            match (before, now) {
                (true, true) => Some((EventType::Modified, ev.object.clone())),
                (false, true) => Some((EventType::Added, ev.object.clone())),
                (true, false) => Some((EventType::Deleted, ev.object.clone())),
                (false, false) => None,
            }
        }
    }
}

struct Encoder {
    info: Arc<crate::registry::ResourceInfo>,
    version: String,
    api_version: String,
    table: bool,
    include: IncludeObject,
}

impl Encoder {
    fn event(&self, et: &str, obj: &Arc<Value>) -> Bytes {
        let mut out = if self.table {
            let o = ops::to_version(&self.info, obj, &self.version);
            let t = table::render(
                &self.info,
                &self.version,
                &[&o],
                self.include,
                json!({"resourceVersion": meta_str(&o, "resourceVersion")}),
            );
            json_bytes(&json!({"type": et, "object": t}))
        } else {
            #[derive(serde::Serialize)]
            struct Ev<'a> {
                #[serde(rename = "type")]
                t: &'a str,
                object: ItemView<'a>,
            }
            json_bytes(&Ev {
                t: et,
                object: ItemView {
                    obj,
                    api_version: Some(&self.api_version),
                    strip_type: false,
                },
            })
        };
        out.push(b'\n');
        Bytes::from(out)
    }

    /// Whether this watcher's encoding of `obj` is the canonical one (no table,
    /// object already in the requested version) and can be shared.
    fn shareable(&self, obj: &Value) -> bool {
        !self.table
            && obj.get("apiVersion").and_then(Value::as_str) == Some(self.api_version.as_str())
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let mut out = json_bytes(&json!({"type": "BOOKMARK", "object": {
            "kind": self.info.kind, "apiVersion": self.api_version, "metadata": meta,
        }}));
        out.push(b'\n');
        Bytes::from(out)
    }

    fn error(&self, e: &ApiError) -> Bytes {
        let mut out = json_bytes(&json!({"type": "ERROR", "object": e.to_status()}));
        out.push(b'\n');
        Bytes::from(out)
    }
}

/// Serves `?watch=true`.
pub(crate) fn serve(sh: Arc<Shared>, r: ResourceReq) -> ApiResult<Response> {
    let filter = Filter {
        namespace: r.namespace.clone(),
        labels: r.label_selector()?,
        fields: r.field_selector()?,
        name: r.name.clone().or_else(|| {
            r.field_selector()
                .ok()
                .and_then(|f| f.exact_name().map(String::from))
        }),
    };
    let timeout = r
        .q("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(1800);
    let bookmarks = is_true(r.query.get("allowWatchBookmarks"));
    let send_initial = r.q("sendInitialEvents").map(|v| v == "true");
    let rv_param = r.q("resourceVersion").map(String::from);
    let enc = Encoder {
        info: r.info.clone(),
        version: r.version.clone(),
        api_version: r.info.api_version(&r.version),
        table: r.wants_table(),
        include: IncludeObject::parse(r.q("includeObject")),
    };
    let gr = r.info.gr();
    // Initial batch and subscription under one lock, so nothing falls in between.
    let (initial, start_rv, rx, initial_end) = {
        let st = sh.state.lock();
        let rx = st.subscribe();
        let mut initial: Vec<Bytes> = Vec::new();
        let mut initial_end = false;
        let from_scratch = match rv_param.as_deref() {
            None | Some("") | Some("0") => send_initial != Some(false),
            Some(_) => send_initial == Some(true),
        };
        if from_scratch {
            for (_, obj) in st.list(&gr, filter.namespace.as_deref()) {
                if filter.matches(&obj) {
                    initial.push(enc.event("ADDED", &obj));
                }
            }
            initial_end = send_initial == Some(true) && bookmarks;
            (initial, st.rv, rx, initial_end)
        } else {
            match rv_param.as_deref() {
                None | Some("") | Some("0") => {
                    let _ = &mut initial_end;
                    (initial, st.rv, rx, false)
                }
                Some(rv) => {
                    let rv: u64 = rv.parse().map_err(|_| {
                        ApiError::bad_request(format!("invalid resource version: {rv}"))
                    })?;
                    match st.events_since(&gr, rv) {
                        Some(evs) => {
                            for ev in evs {
                                if let Some((et, obj)) = visible(&ev, &filter) {
                                    initial.push(enc.event(et.as_str(), &obj));
                                }
                            }
                            (initial, st.rv.max(rv), rx, false)
                        }
                        None => {
                            let e = ApiError::expired(format!(
                                "too old resource version: {rv} ({})",
                                st.compacted_rv
                            ));
                            let mut e = e;
                            e.code = 410;
                            initial.push(enc.error(&e));
                            drop(st);
                            return Ok(stream_response(sh, initial, None));
                        }
                    }
                }
            }
        }
    };
    let (tx, out_rx) = mpsc::channel::<Bytes>(1024);
    let mut close = sh.watch_close.subscribe();
    let sh2 = sh.clone();
    sh.open_watches.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(async move {
        let _guard = WatchGuard(sh2.clone());
        for b in initial {
            if tx.send(b).await.is_err() {
                return;
            }
        }
        if initial_end && tx.send(enc.bookmark(start_rv, true)).await.is_err() {
            return;
        }
        let mut rx: broadcast::Receiver<Arc<Event>> = rx;
        let deadline = tokio::time::sleep(Duration::from_secs(timeout));
        tokio::pin!(deadline);
        let bm_every = sh2.config.bookmark_interval;
        let mut bm = tokio::time::interval_at(tokio::time::Instant::now() + bm_every, bm_every);
        let mut last_rv = start_rv;
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Ok(first) => {
                        // Drain what is already queued and send it as one chunk:
                        // far fewer writes when events arrive in bursts.
                        let mut batch: Vec<Bytes> = Vec::new();
                        let mut next = Some(first);
                        while let Some(ev) = next.take() {
                            if ev.rv > last_rv {
                                last_rv = ev.rv;
                                if ev.gr == gr {
                                    if let Some((et, obj)) = visible(&ev, &filter) {
                                        batch.push(if et == ev.etype && enc.shareable(&obj) {
                                            ev.wire.get_or_init(|| enc.event(et.as_str(), &obj)).clone()
                                        } else {
                                            enc.event(et.as_str(), &obj)
                                        });
                                    }
                                }
                            }
                            if batch.len() < 512 {
                                match rx.try_recv() {
                                    Ok(e) => next = Some(e),
                                    Err(broadcast::error::TryRecvError::Lagged(_)) => {
                                        let mut e = ApiError::expired(format!("too old resource version: {last_rv}"));
                                        e.code = 410;
                                        batch.push(enc.error(&e));
                                        let _ = tx.send(concat(batch)).await;
                                        return;
                                    }
                                    Err(_) => {}
                                }
                            }
                        }
                        if !batch.is_empty() && tx.send(concat(batch)).await.is_err() {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let mut e = ApiError::expired(format!("too old resource version: {last_rv}"));
                        e.code = 410;
                        let _ = tx.send(enc.error(&e)).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = bm.tick(), if bookmarks => {
                    if tx.send(enc.bookmark(last_rv, false)).await.is_err() {
                        return;
                    }
                }
                _ = &mut deadline => return,
                _ = close.changed() => return,
                _ = tx.closed() => return,
            }
        }
    });
    Ok(stream_response(sh, Vec::new(), Some(out_rx)))
}

fn concat(mut parts: Vec<Bytes>) -> Bytes {
    if parts.len() == 1 {
        return parts.remove(0);
    }
    let mut out = Vec::with_capacity(parts.iter().map(Bytes::len).sum());
    for p in &parts {
        out.extend_from_slice(p);
    }
    Bytes::from(out)
}

struct WatchGuard(Arc<Shared>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::Relaxed);
    }
}

fn stream_response(
    _sh: Arc<Shared>,
    first: Vec<Bytes>,
    rx: Option<mpsc::Receiver<Bytes>>,
) -> Response {
    let head = futures::stream::iter(first.into_iter().map(Ok::<Bytes, std::convert::Infallible>));
    let tail = futures::stream::unfold(rx, |rx| async move {
        let mut rx = rx?;
        let b = rx.recv().await?;
        Some((Ok::<Bytes, std::convert::Infallible>(b), Some(rx)))
    });
    use futures::StreamExt;
    let body = Body::from_stream(head.chain(tail));
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}
