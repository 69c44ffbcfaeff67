//! Server verification against the system's CA certificates, loaded at the first handshake
//! that needs them. Most hooks are plain HTTP inside the cluster, so parsing the system store
//! (~150 certificates) at startup would cost every such process memory for nothing.
//! Verification itself is rustls' webpki verifier. The load (a read of the system's
//! certificate files, once per process) happens inside that first handshake, on the runtime
//! thread that makes it.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The system trust store, loaded once; Mozilla's roots (webpki-roots) when the system has
/// none, so https hooks with public certificates still work in minimal images.
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            let loaded = rustls_native_certs::load_native_certs();
            let (added, ignored) = roots.add_parsable_certificates(loaded.certs);
            if ignored > 0 {
                tracing::warn!(ignored, "ignored unparsable system CA certificates");
            }
            if added == 0 {
                tracing::info!("no system CA certificates found; using the webpki root set");
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            }
            Arc::new(roots)
        })
        .clone()
}

/// A [`ServerCertVerifier`] that builds rustls' webpki verifier over [`system_roots`] on its
/// first use. Handshake signatures are checked by the provider's algorithms, as the webpki
/// verifier does; they need no roots.
#[derive(Debug)]
pub(crate) struct SystemRootsVerifier {
    provider: Arc<CryptoProvider>,
    verifier: OnceLock<Result<Arc<WebPkiServerVerifier>, String>>,
}

impl SystemRootsVerifier {
    pub(crate) fn new(provider: Arc<CryptoProvider>) -> Self {
        Self {
            provider,
            verifier: OnceLock::new(),
        }
    }

    fn verifier(&self) -> Result<&Arc<WebPkiServerVerifier>, rustls::Error> {
        self.verifier
            .get_or_init(|| {
                WebPkiServerVerifier::builder_with_provider(system_roots(), self.provider.clone())
                    .build()
                    .map_err(|err| format!("system CA certificates: {err}"))
            })
            .as_ref()
            .map_err(|err| rustls::Error::General(err.clone()))
    }

    /// Whether the system roots were loaded (for tests).
    #[cfg(test)]
    fn loaded(&self) -> bool {
        self.verifier.get().is_some()
    }
}

impl ServerCertVerifier for SystemRootsVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.verifier()?.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_loaded_by_the_first_verification_not_before() {
        let verifier = SystemRootsVerifier::new(Arc::new(rustls::crypto::ring::default_provider()));
        assert!(!verifier.loaded());
        let not_a_certificate = CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00]);
        let name = ServerName::try_from("hook.example").expect("valid name");
        let result =
            verifier.verify_server_cert(&not_a_certificate, &[], &name, &[], UnixTime::now());
        assert!(verifier.loaded());
        assert!(result.is_err(), "a malformed certificate must be rejected");
    }
}
