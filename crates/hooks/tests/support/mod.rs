//! Real hook servers on 127.0.0.1 (plain HTTP and HTTPS with rustls, certificates from the
//! test kit's throwaway PKI), shared by the integration tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, Version};
use axum::response::Response;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use metacontroller_api::hook::{Hook, HookVersion, Webhook};
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub version: Version,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    }
}

type Responder = dyn Fn(&Recorded, usize) -> Response + Send + Sync;

/// Shared state of a test server: what it received and how it answers.
pub struct Server {
    pub addr: SocketAddr,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    connections: Arc<AtomicUsize>,
}

impl Server {
    pub fn requests(&self) -> Vec<Recorded> {
        self.recorded.lock().unwrap().clone()
    }

    pub fn last(&self) -> Recorded {
        self.requests()
            .last()
            .cloned()
            .expect("no request recorded")
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn url(&self, scheme: &str, path: &str) -> String {
        format!("{scheme}://{}{path}", self.addr)
    }
}

#[derive(Clone)]
struct AppState {
    recorded: Arc<Mutex<Vec<Recorded>>>,
    responder: Arc<Responder>,
}

async fn handle(State(state): State<AppState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let recorded = Recorded {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        version: parts.version,
        headers: parts.headers,
        body,
    };
    let index = {
        let mut all = state.recorded.lock().unwrap();
        all.push(recorded.clone());
        all.len() - 1
    };
    (state.responder)(&recorded, index)
}

fn router(recorded: Arc<Mutex<Vec<Recorded>>>, responder: Arc<Responder>) -> Router {
    Router::new().fallback(handle).with_state(AppState {
        recorded,
        responder,
    })
}

/// Starts a server; `tls` makes it HTTPS (h2 and http/1.1 offered via ALPN).
pub async fn start<F>(tls: Option<Arc<ServerConfig>>, responder: F) -> Server
where
    F: Fn(&Recorded, usize) -> Response + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let connections = Arc::new(AtomicUsize::new(0));
    let app = router(recorded.clone(), Arc::new(responder));
    let acceptor = tls.map(TlsAcceptor::from);
    let counter = connections.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            let app = app.clone();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let service = TowerToHyperService::new(app);
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                match acceptor {
                    Some(acceptor) => {
                        let Ok(stream) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                    None => {
                        let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
                    }
                }
            });
        }
    });
    Server {
        addr,
        recorded,
        connections,
    }
}

/// A 200 JSON response.
pub fn json(status: StatusCode, body: &str) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

/// A hook calling `url` with optional extra webhook fields.
pub fn hook(url: &str) -> Hook {
    Hook {
        version: None,
        webhook: Some(Webhook {
            url: Some(url.to_owned()),
            ..Webhook::default()
        }),
        ..Hook::default()
    }
}

pub fn hook_v2(url: &str) -> Hook {
    Hook {
        version: Some(HookVersion::V2),
        ..hook(url)
    }
}

pub fn webhook_mut(hook: &mut Hook) -> &mut Webhook {
    hook.webhook.as_mut().unwrap()
}

// Not every test binary that includes this module uses them.
#[allow(unused_imports)]
pub use metacontroller_testkit::pki::{server_tls, server_tls_http1, Ca};

/// A log sink for a tracing subscriber (`with_writer(capture.clone())`): keeps every byte
/// written, for the test to read from the shared buffer.
#[derive(Clone, Default)]
pub struct Capture(pub Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
