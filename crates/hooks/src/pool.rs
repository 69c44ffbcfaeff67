//! One pooled keep-alive HTTP client per distinct TLS configuration. Clients are keyed by
//! a SHA-256 digest of the TLS material, so a rotated CA or client certificate gets a new
//! client on the next call while unchanged configurations keep their warm connections.
//! Verification is always on: a caBundle replaces the trusted roots (as upstream does), it
//! never disables checking.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{ClientConfig, RootCertStore};

use crate::credentials::TlsMaterial;
use crate::error::HookError;
use crate::system_roots::SystemRootsVerifier;

/// Idle clients unused for this long are dropped when new ones are built.
const IDLE_CLIENT_TTL: Duration = Duration::from_secs(600);
/// Keep-alive connections idle for longer are closed.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

type Digest = [u8; 32];

struct Entry {
    client: reqwest::Client,
    last_used: Instant,
}

/// The client pool.
pub(crate) struct ClientPool {
    default_client: reqwest::Client,
    clients: Mutex<HashMap<Digest, Entry>>,
    dns: Option<Arc<OverrideDns>>,
}

impl ClientPool {
    pub(crate) fn new(dns: Option<Arc<OverrideDns>>) -> Result<Self, HookError> {
        let default_client = build_client(&TlsMaterial::default(), dns.clone())?;
        Ok(Self {
            default_client,
            clients: Mutex::new(HashMap::new()),
            dns,
        })
    }

    /// The client for this TLS material, built on first use.
    pub(crate) fn client(&self, material: &TlsMaterial) -> Result<reqwest::Client, HookError> {
        if material.is_default() {
            return Ok(self.default_client.clone());
        }
        let digest = digest(material);
        let now = Instant::now();
        {
            let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(entry) = clients.get_mut(&digest) {
                entry.last_used = now;
                return Ok(entry.client.clone());
            }
        }
        // Built outside the lock: parsing PEM and loading roots is the slow part.
        let client = build_client(material, self.dns.clone())?;
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.retain(|_, entry| now.duration_since(entry.last_used) < IDLE_CLIENT_TTL);
        let entry = clients.entry(digest).or_insert(Entry {
            client,
            last_used: now,
        });
        Ok(entry.client.clone())
    }

    /// Number of non-default clients currently pooled (for tests).
    pub(crate) fn len(&self) -> usize {
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

fn digest(material: &TlsMaterial) -> Digest {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    // Length-prefixed fields so that different splits of the same bytes differ.
    let mut field = |tag: u8, bytes: Option<&[u8]>| {
        ctx.update(&[tag]);
        match bytes {
            Some(bytes) => {
                ctx.update(&[1]);
                ctx.update(&(bytes.len() as u64).to_be_bytes());
                ctx.update(bytes);
            }
            None => ctx.update(&[0]),
        }
    };
    field(b'c', material.ca_pem.as_deref());
    field(
        b'i',
        material.identity.as_ref().map(|i| i.cert_pem.as_slice()),
    );
    field(b'k', material.identity.as_ref().map(|i| i.key_pem.expose()));
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    static PROVIDER: OnceLock<Arc<rustls::crypto::CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

fn tls_config(material: &TlsMaterial) -> Result<ClientConfig, HookError> {
    let roots = match &material.ca_pem {
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert =
                    cert.map_err(|err| HookError::config(format!("caBundle: invalid PEM: {err}")))?;
                roots.add(cert).map_err(|err| {
                    HookError::config(format!("caBundle: invalid CA certificate: {err}"))
                })?;
            }
            if roots.is_empty() {
                return Err(HookError::config(
                    "caBundle: no valid PEM-encoded certificates found",
                ));
            }
            Some(Arc::new(roots))
        }
        None => None,
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|err| HookError::config(format!("TLS setup failed: {err}")))?;
    let builder = match roots {
        Some(roots) => builder.with_root_certificates(roots),
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SystemRootsVerifier::new(provider()))),
    };
    let mut config = match &material.identity {
        None => builder.with_no_client_auth(),
        Some(identity) => {
            let certs = CertificateDer::pem_slice_iter(&identity.cert_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| {
                    HookError::config(format!("clientTLS: invalid certificate PEM: {err}"))
                })?;
            if certs.is_empty() {
                return Err(HookError::config(
                    "clientTLS: no certificate found in the certificate PEM",
                ));
            }
            // The parser's error never includes key bytes, but say only what failed.
            let key = PrivateKeyDer::from_pem_slice(identity.key_pem.expose())
                .map_err(|_| HookError::config("clientTLS: invalid or missing private key PEM"))?;
            builder.with_client_cert_resolver(Arc::new(client_identity(certs, key)?))
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Our own certificate and key, checked only for what we need to use them: the key loads and
/// its public key is the certificate's. The certificate itself is the hook server's to judge,
/// so it is not parsed by a path validator here: `with_client_auth_cert` would reject an
/// X.509 v1 certificate (what `openssl x509 -req` makes without extensions) that Go clients
/// send and servers accept.
fn client_identity(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<SingleCertAndKey, HookError> {
    let key = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|err| HookError::config(format!("clientTLS: unusable private key: {err}")))?;
    if let (Some(spki), Some(leaf)) = (key.public_key(), certs.first()) {
        // The SubjectPublicKeyInfo is embedded verbatim in the certificate's DER.
        let spki: &[u8] = spki.as_ref();
        if !leaf.as_ref().windows(spki.len()).any(|w| w == spki) {
            return Err(HookError::config(
                "clientTLS: certificate and private key do not form a usable pair: \
                 the key is not the certificate's",
            ));
        }
    }
    Ok(SingleCertAndKey::from(CertifiedKey::new(certs, key)))
}

fn build_client(
    material: &TlsMaterial,
    dns: Option<Arc<OverrideDns>>,
) -> Result<reqwest::Client, HookError> {
    let mut builder = reqwest::Client::builder()
        .tls_backend_preconfigured(tls_config(material)?)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .tcp_nodelay(true)
        // Hooks answer the request they got; redirects would re-send credentials elsewhere.
        .redirect(reqwest::redirect::Policy::none());
    if let Some(dns) = dns {
        builder = builder.dns_resolver(dns);
    }
    builder
        .build()
        .map_err(|err| HookError::config(format!("can't build HTTP client: {err}")))
}

/// An HTTP client like the hooks' default one (rustls with the ring provider, system roots,
/// no redirects) for other outgoing traffic of the binary, e.g. the OTLP trace exporter.
pub fn plain_client() -> Result<reqwest::Client, HookError> {
    build_client(&TlsMaterial::default(), None)
}

/// DNS with per-host overrides filled from the [`crate::HostResolver`] just before a call;
/// other names go to the system resolver.
#[derive(Default)]
pub(crate) struct OverrideDns {
    overrides: RwLock<HashMap<String, IpAddr>>,
}

impl OverrideDns {
    pub(crate) fn set(&self, host: &str, ip: IpAddr) {
        let host = host.to_ascii_lowercase();
        {
            let overrides = self.overrides.read().unwrap_or_else(|e| e.into_inner());
            if overrides.get(&host) == Some(&ip) {
                return;
            }
        }
        let mut overrides = self.overrides.write().unwrap_or_else(|e| e.into_inner());
        overrides.insert(host, ip);
    }
}

impl Resolve for OverrideDns {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_ascii_lowercase();
        let found = {
            let overrides = self.overrides.read().unwrap_or_else(|e| e.into_inner());
            overrides.get(&host).copied()
        };
        Box::pin(async move {
            // Port 0: the URL's port is used for the connection.
            if let Some(ip) = found {
                let addrs: Addrs = Box::new(std::iter::once(SocketAddr::new(ip, 0)));
                return Ok(addrs);
            }
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let addrs: Addrs = Box::new(resolved.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::{ClientIdentity, SecretBytes};

    const V1_CERT: &str = include_str!("../tests/fixtures/v1-client/client.crt");
    const V1_KEY: &str = include_str!("../tests/fixtures/v1-client/client.key");
    const OTHER_KEY: &str = include_str!("../tests/fixtures/v1-client/other.key");

    fn identity(cert: &str, key: &str) -> Result<SingleCertAndKey, HookError> {
        let certs = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        client_identity(
            certs,
            PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
        )
    }

    #[test]
    fn a_v1_client_certificate_is_ours_to_send() {
        assert!(identity(V1_CERT, V1_KEY).is_ok());
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let err = identity(V1_CERT, OTHER_KEY).expect_err("a mismatched pair");
        assert!(
            err.to_string().contains("do not form a usable pair"),
            "{err}"
        );
    }

    #[test]
    fn digest_separates_fields() {
        let a = TlsMaterial {
            ca_pem: Some(b"ab".to_vec()),
            identity: None,
        };
        let b = TlsMaterial {
            ca_pem: None,
            identity: Some(ClientIdentity {
                cert_pem: b"ab".to_vec(),
                key_pem: SecretBytes::new(Vec::new()),
            }),
        };
        assert_ne!(digest(&a), digest(&b));
        assert_eq!(digest(&a), digest(&a.clone()));
    }

    #[test]
    fn garbage_ca_bundle_is_a_config_error() {
        let material = TlsMaterial {
            ca_pem: Some(b"not a certificate".to_vec()),
            identity: None,
        };
        let err = tls_config(&material).unwrap_err();
        assert!(err.to_string().contains("caBundle"), "{err}");
    }
}
