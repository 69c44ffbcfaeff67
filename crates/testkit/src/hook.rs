//! A hook server a test can reprogram while the controller calls it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::Response;
use serde_json::Value;

/// What the hook server answers to one call.
#[derive(Clone, Debug)]
pub struct HookReply {
    status: u16,
    body: Vec<u8>,
    delay: Option<Duration>,
    headers: Vec<(String, String)>,
}

impl HookReply {
    /// 200 with `body` as JSON.
    pub fn json(body: Value) -> Self {
        HookReply {
            status: 200,
            body: body.to_string().into_bytes(),
            delay: None,
            headers: Vec::new(),
        }
    }

    /// `status` with a plain-text body.
    pub fn status(status: u16, body: &str) -> Self {
        HookReply {
            status,
            body: body.as_bytes().to_vec(),
            delay: None,
            headers: Vec::new(),
        }
    }

    /// 200 with these exact bytes (e.g. invalid JSON).
    pub fn raw(body: &str) -> Self {
        HookReply::status(200, body)
    }

    /// The same reply with the response header `name: value` (e.g. an `ETag`).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The same reply after `delay` (to make the controller's hook timeout fire).
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }
}

/// One request the hook server received.
#[derive(Clone, Debug)]
pub struct HookCall {
    /// Request path, e.g. `/sync`.
    pub path: String,
    /// The body as JSON (`Value::Null` when it was not JSON).
    pub body: Value,
    /// The request headers (e.g. `traceparent` when the controller traces).
    pub headers: HeaderMap,
    /// When the request arrived.
    pub received: Instant,
}

type Handler = Arc<dyn Fn(&str, &Value) -> HookReply + Send + Sync>;

struct State {
    handler: RwLock<Handler>,
    calls: Mutex<Vec<HookCall>>,
}

/// An HTTP server on 127.0.0.1 answering every POST with the current handler, given the
/// request path and JSON body. Stops when dropped; [`HookServer::kill`] and
/// [`HookServer::restart`] stop it (closing every connection, like a killed process) and
/// start it again on the same port.
pub struct HookServer {
    addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl HookServer {
    /// Starts serving `handler` on a random port.
    pub async fn start(
        handler: impl Fn(&str, &Value) -> HookReply + Send + Sync + 'static,
    ) -> Self {
        let state = Arc::new(State {
            handler: RwLock::new(Arc::new(handler)),
            calls: Mutex::new(Vec::new()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the hook server");
        let addr = listener.local_addr().expect("hook server address");
        let task = tokio::spawn(accept_loop(listener, state.clone()));
        HookServer { addr, state, task }
    }

    /// Stops serving at once, like a killed process: the port is closed and every open
    /// connection is dropped (in-flight requests get no answer).
    pub async fn kill(&mut self) {
        self.task.abort();
        // Awaited so that the listener and the connections are gone when this returns.
        let _ = (&mut self.task).await;
    }

    /// Serves again on the same address after [`HookServer::kill`], with the same handler
    /// and call log. Retries binding for up to 10 s (the port may still be held briefly).
    ///
    /// # Panics
    /// When the port cannot be bound within 10 s.
    pub async fn restart(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let listener = loop {
            // tokio sets SO_REUSEADDR on Unix, so TIME_WAIT connections do not block this.
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("rebinding the hook server on {}: {e}", self.addr),
            }
        };
        self.task = tokio::spawn(accept_loop(listener, self.state.clone()));
    }

    /// A hook server answering every sync with one ConfigMap child `<parent name>-cm`
    /// (labelled `app: <app>`, data `k: v`) and the status `{"ok": true}`.
    pub async fn one_configmap_child(app: &str) -> Self {
        let app = app.to_string();
        HookServer::start(move |_, req| {
            let name = parent_name(req);
            HookReply::json(serde_json::json!({
                "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": format!("{name}-cm"), "labels": {"app": app}},
                              "data": {"k": "v"}}],
                "status": {"ok": true},
            }))
        })
        .await
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the handler for the calls that follow.
    pub fn set_handler(&self, handler: impl Fn(&str, &Value) -> HookReply + Send + Sync + 'static) {
        *self
            .state
            .handler
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(handler);
    }

    /// Calls received on `path` so far.
    pub fn calls(&self, path: &str) -> usize {
        self.lock_calls().iter().filter(|c| c.path == path).count()
    }

    /// When each call on `path` arrived, oldest first.
    pub fn call_times(&self, path: &str) -> Vec<Instant> {
        self.lock_calls()
            .iter()
            .filter(|c| c.path == path)
            .map(|c| c.received)
            .collect()
    }

    /// Request bodies received on `path`, oldest first.
    pub fn requests(&self, path: &str) -> Vec<Value> {
        self.lock_calls()
            .iter()
            .filter(|c| c.path == path)
            .map(|c| c.body.clone())
            .collect()
    }

    /// The newest request body received on `path`.
    pub fn last_request(&self, path: &str) -> Option<Value> {
        self.lock_calls()
            .iter()
            .rev()
            .find(|c| c.path == path)
            .map(|c| c.body.clone())
    }

    /// Every call so far, oldest first.
    pub fn all_calls(&self) -> Vec<HookCall> {
        self.lock_calls().clone()
    }

    /// Forgets the calls received so far.
    pub fn clear_calls(&self) {
        self.lock_calls().clear();
    }

    fn lock_calls(&self) -> std::sync::MutexGuard<'_, Vec<HookCall>> {
        self.state.calls.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for HookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves HTTP/1.1 and HTTP/2 connections from `listener`. The connections are tasks of
/// this one, so aborting it drops them all (axum's `serve` would leave them running).
async fn accept_loop(listener: tokio::net::TcpListener, state: Arc<State>) {
    let app =
        axum::Router::new().fallback(move |request: Request<Body>| serve(state.clone(), request));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((tcp, _)) = accepted else { continue };
                let service = hyper_util::service::TowerToHyperService::new(app.clone());
                connections.spawn(async move {
                    let builder = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    let _ = builder
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve(state: Arc<State>, request: Request<Body>) -> Response {
    let received = Instant::now();
    let path = request.uri().path().to_string();
    let headers = request.headers().clone();
    let bytes: Bytes = axum::body::to_bytes(request.into_body(), 64 << 20)
        .await
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let handler = state
        .handler
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let reply = handler(&path, &body);
    state
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(HookCall {
            path,
            body,
            headers,
            received,
        });
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let mut response = Response::builder()
        .status(StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json");
    for (name, value) in &reply.headers {
        response = response.header(name.as_str(), value.as_str());
    }
    response.body(Body::from(reply.body)).unwrap_or_default()
}

/// A sync answer to a composite hook `request`: one ConfigMap child `<parent name>-cm`
/// (labelled `app: <parent name>`, data `k: v`) and the status `{"ok": true}`.
pub fn configmap_child_reply(request: &Value) -> Value {
    let name = parent_name(request);
    serde_json::json!({
        "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": format!("{name}-cm"), "labels": {"app": name}},
                      "data": {"k": "v"}}],
        "status": {"ok": true},
    })
}

/// The parent's name in a composite hook request (`parent.metadata.name`; "" when absent).
pub fn parent_name(request: &Value) -> &str {
    request["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
}

/// Panics when two consecutive objects a hook was sent (in call order) differ in their
/// status only — generation, labels and annotations equal: with `ignoreStatusChanges`
/// such a change must not cause a sync. Use after a barrier (a later change the hook has
/// seen), so a sync the status change caused would already be in the list.
pub fn assert_no_status_only_syncs(objects: &[Value]) {
    let meta = |o: &Value, f: &str| o["metadata"][f].clone();
    for pair in objects.windows(2) {
        let same_meta = ["generation", "labels", "annotations"]
            .iter()
            .all(|f| meta(&pair[0], f) == meta(&pair[1], f));
        assert!(
            !(same_meta && pair[0]["status"] != pair[1]["status"]),
            "a status-only change caused a sync: {objects:#?}"
        );
    }
}
