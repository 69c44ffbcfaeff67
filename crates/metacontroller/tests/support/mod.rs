//! HTTPS hook servers for binary-level tests: the test kit's throwaway PKI and a rustls
//! server on 127.0.0.1 that records the `Authorization` header of each call and answers
//! with a handler (which may refuse the call, e.g. on wrong credentials).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

// Not every test binary that includes this module uses them.
#[allow(unused_imports)]
pub use metacontroller_testkit::pki::{server_tls, Ca};

/// One call as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
}

type Handler = dyn Fn(&Seen) -> (u16, Value) + Send + Sync;

/// An HTTPS server on 127.0.0.1; stops when dropped.
pub struct TlsHookServer {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsHookServer {
    /// Serves `handler` (status and JSON body) over TLS with `tls`.
    pub async fn start(
        tls: Arc<ServerConfig>,
        handler: impl Fn(&Seen) -> (u16, Value) + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let app = axum::Router::new().fallback({
            let seen = seen.clone();
            move |request: Request| {
                let seen = seen.clone();
                let handler = handler.clone();
                async move {
                    let (parts, body) = request.into_parts();
                    let bytes = axum::body::to_bytes(body, usize::MAX)
                        .await
                        .unwrap_or_default();
                    let call = Seen {
                        path: parts.uri.path().to_owned(),
                        authorization: parts
                            .headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned),
                        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                    };
                    let (status, reply) = handler(&call);
                    seen.lock().unwrap().push(call);
                    Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(Body::from(reply.to_string()))
                        .unwrap()
                }
            }
        });
        let acceptor = TlsAcceptor::from(tls);
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let app = app.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = TowerToHyperService::new(app);
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        TlsHookServer { addr, seen, task }
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// Every call so far, oldest first.
    pub fn calls(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for TlsHookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
