//! A recording HTTP proxy between one process and the API server: it forwards every request
//! (watches stream through) and records each write (POST, PUT, PATCH, DELETE) with the times
//! it reached the server and was answered, so a test knows which replica wrote what, and when.
//!
//! Why a proxy in the test process: the same records are needed on both servers. The
//! embedded server serves plain HTTP and the real one HTTPS with client certificates; the
//! real server's audit log would need the cluster started with an audit policy (the shared
//! `cluster.sh` has none, and its log is shared by every test of the cluster), and the
//! embedded server keeps no per-client request log. So the process gets a kubeconfig naming
//! `http://127.0.0.1:<port>` without credentials, and the proxy forwards each request with
//! the test's own client (TLS and credentials of the original kubeconfig). The process's
//! headers (its User-Agent, hence its field manager) pass through untouched.
//!
//! A write is recorded when the proxy received it and when the server's answer came back:
//! the server applied it in between. Put the proxy nearest the server (after a
//! [`crate::TcpProxy`], not before), so the times are those the server saw.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, Response, StatusCode};
use serde_json::Value;

/// One write the server answered, as the proxy saw it.
#[derive(Debug, Clone)]
pub struct ApiWrite {
    /// `POST`, `PUT`, `PATCH` or `DELETE`.
    pub method: String,
    /// The resource (plural, e.g. `configmaps`).
    pub resource: String,
    /// The namespace of a namespaced request.
    pub namespace: Option<String>,
    /// The object's name: from the path, or for a create from the body's `metadata.name`.
    pub name: Option<String>,
    /// `status` for a status write, and so on.
    pub subresource: Option<String>,
    /// The server's answer (502 when the server could not be reached).
    pub status: u16,
    /// When the proxy received the request.
    pub start: Instant,
    /// When the server's answer reached the proxy.
    pub end: Instant,
    /// A Lease write's `spec.holderIdentity` (how the writer names itself).
    pub holder: Option<String>,
}

impl ApiWrite {
    /// Whether the server accepted it (2xx): only such a write changed anything.
    pub fn accepted(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// `PUT configmaps ns/name/status`, for messages.
    pub fn describe(&self) -> String {
        let object: Vec<&str> = [&self.namespace, &self.name, &self.subresource]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        format!(
            "{} {} {} ({})",
            self.method,
            self.resource,
            object.join("/"),
            self.status
        )
    }
}

/// The writes one proxy recorded.
#[derive(Clone, Default)]
pub struct ApiWrites(Arc<Mutex<Vec<ApiWrite>>>);

impl ApiWrites {
    /// Every write answered so far.
    pub fn writes(&self) -> Vec<ApiWrite> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The first holder identity the process wrote into a Lease it got (leader election,
    /// shard membership): who this process is, in the terms of its hook calls.
    pub fn identity(&self) -> Option<String> {
        self.writes()
            .into_iter()
            .filter(|w| w.resource == "leases" && w.accepted())
            .find_map(|w| w.holder.filter(|h| !h.is_empty()))
    }

    fn push(&self, write: ApiWrite) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(write);
    }
}

/// A running recording proxy on `127.0.0.1:0` and the kubeconfig that points at it (stops
/// when dropped).
pub struct ApiRecorder {
    addr: SocketAddr,
    writes: ApiWrites,
    refused: Refused,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl ApiRecorder {
    /// Listens on a free loopback port and forwards every request with `client` (the test's
    /// client of the cluster). Must run inside a tokio runtime.
    pub fn start(client: kube::Client) -> ApiRecorder {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding the recorder");
        let addr = listener.local_addr().expect("the recorder's address");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
        let writes = ApiWrites::default();
        let refused = Refused::default();
        let app = axum::Router::new().fallback({
            let writes = writes.clone();
            let refused = refused.clone();
            move |request: Request<Body>| {
                forward(client.clone(), writes.clone(), refused.clone(), request)
            }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let dir = tempfile::tempdir().expect("a temporary directory");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml(addr)).expect("writing the kubeconfig");
        ApiRecorder {
            addr,
            writes,
            refused,
            kubeconfig,
            _dir: dir,
            task,
        }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig naming this proxy (plain HTTP, no credentials).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The writes recorded (a handle that outlives the proxy).
    pub fn writes(&self) -> ApiWrites {
        self.writes.clone()
    }

    /// From now on writes to `resource` (a plural, e.g. `leases`) are answered 500 without
    /// reaching the server (recorded as refused); `None` forwards them again. Only this
    /// proxy's process is affected, on either server.
    pub fn refuse_writes_to(&self, resource: Option<&str>) {
        *self.refused.0.lock().unwrap_or_else(|p| p.into_inner()) = resource.map(str::to_string);
    }
}

/// The resource whose writes a recorder refuses, if any.
#[derive(Clone, Default)]
struct Refused(Arc<Mutex<Option<String>>>);

impl Refused {
    fn refuses(&self, write: &ApiWrite) -> bool {
        let refused = self.0.lock().unwrap_or_else(|p| p.into_inner());
        refused.as_deref() == Some(write.resource.as_str())
    }
}

impl Drop for ApiRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn kubeconfig_yaml(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: recorded\n  cluster:\n    server: \
         http://{addr}\nusers:\n- name: recorded\n  user: {{}}\ncontexts:\n- name: recorded\n  \
         context:\n    cluster: recorded\n    user: recorded\ncurrent-context: recorded\n"
    )
}

/// Headers of one hop only: the proxy's own connections set their own.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Forwards one request; records it when it is a write.
async fn forward(
    client: kube::Client,
    writes: ApiWrites,
    refused: Refused,
    request: Request<Body>,
) -> Response<Body> {
    let start = Instant::now();
    let (mut parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
        return status_only(StatusCode::BAD_REQUEST);
    };
    strip_hop_by_hop(&mut parts.headers);
    // The upstream connection has its own host and length.
    parts.headers.remove(header::HOST);
    parts.headers.remove(header::CONTENT_LENGTH);
    let method = parts.method.to_string();
    let path = parts.uri.path().to_string();
    if let Some(pq) = parts.uri.path_and_query().cloned() {
        parts.uri = pq.into();
    }
    let write = matches!(method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE");
    let body_json = if write {
        serde_json::from_slice::<Value>(&bytes).ok()
    } else {
        None
    };
    if write {
        let record = write_record(&method, &path, body_json.as_ref(), 500, start, start);
        if refused.refuses(&record) {
            writes.push(record);
            return status_only(StatusCode::INTERNAL_SERVER_ERROR);
        }
    }
    let upstream = Request::from_parts(parts, kube::client::Body::from(bytes.to_vec()));
    // Sent and recorded in a task of its own: when the process is killed mid-request its
    // connection drops and with it this handler, but the server still applies what was sent,
    // so the record must not be lost with the handler.
    let exchange = tokio::spawn(async move {
        let answer = client.send(upstream).await;
        let end = Instant::now();
        let status = answer.as_ref().map_or(502, |r| r.status().as_u16());
        if write {
            writes.push(write_record(
                &method,
                &path,
                body_json.as_ref(),
                status,
                start,
                end,
            ));
        }
        answer
    });
    let Ok(answer) = exchange.await else {
        return status_only(StatusCode::BAD_GATEWAY);
    };
    match answer {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, Body::new(body))
        }
        Err(_) => status_only(StatusCode::BAD_GATEWAY),
    }
}

fn status_only(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    response
}

/// The record of a write to `path` (`/api/v1/...` or `/apis/<group>/<version>/...`).
fn write_record(
    method: &str,
    path: &str,
    body: Option<&Value>,
    status: u16,
    start: Instant,
    end: Instant,
) -> ApiWrite {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // Skip `api/<version>` or `apis/<group>/<version>`.
    let rest = match parts.first() {
        Some(&"api") => parts.get(2..),
        Some(&"apis") => parts.get(3..),
        _ => None,
    }
    .unwrap_or_default();
    let (namespace, rest) = match rest {
        ["namespaces", ns, more @ ..] if !more.is_empty() => (Some(ns.to_string()), more),
        _ => (None, rest),
    };
    let resource = rest.first().copied().unwrap_or_default().to_string();
    let from_body = || {
        body.and_then(|b| b["metadata"]["name"].as_str())
            .map(str::to_string)
    };
    let name = rest.get(1).map(|s| s.to_string()).or_else(from_body);
    let holder = body
        .and_then(|b| b["spec"]["holderIdentity"].as_str())
        .map(str::to_string);
    ApiWrite {
        method: method.to_string(),
        resource,
        namespace,
        name,
        subresource: rest.get(2).map(|s| s.to_string()),
        status,
        start,
        end,
        holder,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_and_bodies_name_the_object() {
        let now = Instant::now();
        let create = write_record(
            "POST",
            "/api/v1/namespaces/ns/configmaps",
            Some(&json!({"metadata": {"name": "p-a"}})),
            201,
            now,
            now,
        );
        assert_eq!(create.resource, "configmaps");
        assert_eq!(create.namespace.as_deref(), Some("ns"));
        assert_eq!(create.name.as_deref(), Some("p-a"));
        assert!(create.accepted());
        let status = write_record(
            "PUT",
            "/apis/g.example.com/v1/namespaces/ns/parents/p/status",
            None,
            409,
            now,
            now,
        );
        assert_eq!(
            (status.resource.as_str(), status.name.as_deref()),
            ("parents", Some("p"))
        );
        assert_eq!(status.subresource.as_deref(), Some("status"));
        assert!(!status.accepted());
        assert_eq!(status.describe(), "PUT parents ns/p/status (409)");
        let lease = write_record(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
            Some(&json!({"spec": {"holderIdentity": "me"}})),
            200,
            now,
            now,
        );
        assert_eq!(lease.holder.as_deref(), Some("me"));
        let cluster_scoped = write_record("DELETE", "/apis/g/v1/things/t", None, 200, now, now);
        assert_eq!(
            (cluster_scoped.namespace, cluster_scoped.name.as_deref()),
            (None, Some("t"))
        );
    }
}
