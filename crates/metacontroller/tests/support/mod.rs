//! HTTPS hook servers for binary-level tests: a throwaway PKI made with rcgen and a rustls
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
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its private key, PEM.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { issuer }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn leaf(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Leaf {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, "leaf");
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A server certificate for `127.0.0.1` (an IP SAN).
    pub fn server_leaf(&self) -> Leaf {
        self.leaf(&["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth)
    }

    pub fn client_leaf(&self, name: &str) -> Leaf {
        self.leaf(&[name], ExtendedKeyUsagePurpose::ClientAuth)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Server TLS config; with `client_ca`, a client certificate from that CA is required.
pub fn server_tls(leaf: &Leaf, client_ca: Option<&Ca>) -> Arc<ServerConfig> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca.pem().as_bytes()) {
                roots.add(cert.unwrap()).unwrap();
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

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
