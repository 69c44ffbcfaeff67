//! Connection settings of a hook call: which CA bundle, client certificate and
//! authorization apply (per-hook fields, else the first matching `endpointConfigs` entry),
//! and resolving them from Secrets/ConfigMaps. Types holding credentials redact
//! themselves in `Debug` and have no `Display`.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use metacontroller_api::hook::{
    Authorization, BasicAuth, CaBundle, ClientTls, EndpointConfig, SecretKeyReference, Webhook,
    DEFAULT_AUTHORIZATION_TYPE, DEFAULT_CA_BUNDLE_KEY, DEFAULT_CLIENT_CERT_KEY,
    DEFAULT_CLIENT_KEY_KEY,
};
use reqwest::header::HeaderValue;
use reqwest::Url;

use crate::error::HookError;
use crate::sources::{ConfigMapSource, ObjectData, SecretSource};

/// Default `basicAuth.usernameKey` (upstream).
pub const DEFAULT_USERNAME_KEY: &str = "username";
/// Default `basicAuth.passwordKey` (upstream).
pub const DEFAULT_PASSWORD_KEY: &str = "password";

/// Bytes that must never be printed (private keys).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SecretBytes(Vec<u8>);

impl SecretBytes {
    /// Wraps secret bytes.
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// The bytes, for the TLS library only.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// An `Authorization` header value. Marked sensitive for the HTTP stack; `Debug` redacts.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthHeader {
    header: HeaderValue,
    /// The secret pieces (token, encoded pair, password) to scrub from echoed text.
    secrets: Vec<String>,
}

impl AuthHeader {
    fn new(value: &str, secrets: Vec<String>, origin: &str) -> Result<Self, HookError> {
        let mut header = HeaderValue::from_str(value).map_err(|_| {
            HookError::config(format!(
                "{origin}: credentials contain characters not allowed in an HTTP header"
            ))
        })?;
        header.set_sensitive(true);
        let secrets = secrets.into_iter().filter(|s| !s.is_empty()).collect();
        Ok(Self { header, secrets })
    }

    /// The header value to send.
    pub fn header_value(&self) -> &HeaderValue {
        &self.header
    }

    /// The secret pieces of the header, to scrub from text a server sends back.
    pub fn secret_parts(&self) -> impl Iterator<Item = &str> {
        self.secrets.iter().map(String::as_str)
    }
}

impl fmt::Debug for AuthHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthHeader([REDACTED])")
    }
}

/// A client certificate chain and its private key (PEM).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClientIdentity {
    /// Certificate chain, PEM.
    pub cert_pem: Vec<u8>,
    /// Private key, PEM.
    pub key_pem: SecretBytes,
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("cert_pem_bytes", &self.cert_pem.len())
            .field("key_pem", &self.key_pem)
            .finish()
    }
}

/// TLS material of one connection configuration. Clients are pooled per distinct value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TlsMaterial {
    /// CA bundle (PEM) to trust instead of the system roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate for mTLS.
    pub identity: Option<ClientIdentity>,
}

impl TlsMaterial {
    /// True when the system roots and no client certificate are used.
    pub fn is_default(&self) -> bool {
        self.ca_pem.is_none() && self.identity.is_none()
    }
}

/// Fully resolved connection settings of a call.
#[derive(Debug, Clone, Default)]
pub struct ResolvedSettings {
    /// TLS material.
    pub tls: TlsMaterial,
    /// `Authorization` header, if any.
    pub auth: Option<AuthHeader>,
}

/// The settings fields a hook call uses, and where they came from (for error messages).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SelectedSettings<'a> {
    pub origin: Origin<'a>,
    pub ca_bundle: Option<&'a CaBundle>,
    pub client_tls: Option<&'a ClientTls>,
    pub authorization: Option<&'a Authorization>,
    pub basic_auth: Option<&'a BasicAuth>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Origin<'a> {
    Webhook,
    EndpointConfig(&'a str),
}

impl fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Webhook => f.write_str("webhook"),
            Origin::EndpointConfig(host) => write!(f, "endpointConfigs[host={host:?}]"),
        }
    }
}

/// Picks the settings for a call. If the webhook sets any of caBundle, clientTLS,
/// authorization or basicAuth, those fields are used as a whole and endpointConfigs are
/// not consulted (upstream rule); otherwise the first endpointConfigs entry whose host
/// matches the hook URL applies.
pub(crate) fn select<'a>(
    webhook: &'a Webhook,
    url: &Url,
    endpoint_configs: &'a [EndpointConfig],
) -> Option<SelectedSettings<'a>> {
    if webhook.ca_bundle.is_some()
        || webhook.client_tls.is_some()
        || webhook.authorization.is_some()
        || webhook.basic_auth.is_some()
    {
        return Some(SelectedSettings {
            origin: Origin::Webhook,
            ca_bundle: webhook.ca_bundle.as_ref(),
            client_tls: webhook.client_tls.as_ref(),
            authorization: webhook.authorization.as_ref(),
            basic_auth: webhook.basic_auth.as_ref(),
        });
    }
    let entry = endpoint_configs
        .iter()
        .find(|entry| endpoint_matches(&entry.host, url))?;
    Some(SelectedSettings {
        origin: Origin::EndpointConfig(&entry.host),
        ca_bundle: entry.ca_bundle.as_ref(),
        client_tls: entry.client_tls.as_ref(),
        authorization: entry.authorization.as_ref(),
        basic_auth: entry.basic_auth.as_ref(),
    })
}

/// Whether an endpointConfigs `host` (`host` or `host:port`, case-insensitive) matches the
/// URL. A missing port means the scheme's default port, so `example.com`,
/// `example.com:443`, `https://example.com` and `https://example.com:443` all agree.
pub fn endpoint_matches(entry_host: &str, url: &Url) -> bool {
    let (Some(url_host), Some(url_port)) = (url.host_str(), url.port_or_known_default()) else {
        return false;
    };
    let Some((host, port)) = split_host_port(entry_host.trim()) else {
        return false;
    };
    let port = match port {
        Some(port) => port,
        None => url_port_default(url),
    };
    let url_host = url_host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case(url_host) && port == url_port
}

fn url_port_default(url: &Url) -> u16 {
    match url.scheme() {
        "https" => 443,
        _ => 80,
    }
}

/// Splits `host`, `host:port`, `[v6]` or `[v6]:port`. `None` when the port is not a number.
fn split_host_port(spec: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = spec.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(port) => Some((host, Some(port.parse().ok()?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match spec.rsplit_once(':') {
        // More than one colon without brackets: a bare IPv6 address.
        Some((host, _)) if host.contains(':') => Some((spec, None)),
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
        None => Some((spec, None)),
    }
}

/// Where Secrets and ConfigMaps are read from.
#[derive(Clone, Default)]
pub(crate) struct Sources {
    pub secrets: Option<Arc<dyn SecretSource>>,
    pub config_maps: Option<Arc<dyn ConfigMapSource>>,
}

impl Sources {
    async fn secret(
        &self,
        field: &str,
        reference: &SecretKeyReference,
    ) -> Result<ObjectData, HookError> {
        let namespace = require_namespace(field, reference.namespace.as_deref())?;
        let source = self.secrets.as_ref().ok_or_else(|| {
            HookError::config(format!(
                "{field}: Secret {namespace}/{} is referenced but no Secret source is configured",
                reference.name
            ))
        })?;
        match source.get(namespace, &reference.name).await {
            Ok(Some(data)) => Ok(data),
            Ok(None) => Err(HookError::config(format!(
                "{field}: Secret {namespace}/{} not found",
                reference.name
            ))),
            Err(err) => Err(HookError::config(format!(
                "{field}: can't read Secret {namespace}/{}: {err}",
                reference.name
            ))),
        }
    }

    async fn config_map(
        &self,
        field: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<ObjectData, HookError> {
        let namespace = require_namespace(field, namespace)?;
        let source = self.config_maps.as_ref().ok_or_else(|| {
            HookError::config(format!(
                "{field}: ConfigMap {namespace}/{name} is referenced but no ConfigMap source is configured"
            ))
        })?;
        match source.get(namespace, name).await {
            Ok(Some(data)) => Ok(data),
            Ok(None) => Err(HookError::config(format!(
                "{field}: ConfigMap {namespace}/{name} not found"
            ))),
            Err(err) => Err(HookError::config(format!(
                "{field}: can't read ConfigMap {namespace}/{name}: {err}"
            ))),
        }
    }
}

fn require_namespace<'a>(field: &str, namespace: Option<&'a str>) -> Result<&'a str, HookError> {
    match namespace {
        Some(ns) if !ns.is_empty() => Ok(ns),
        _ => Err(HookError::config(format!("{field}: namespace is required"))),
    }
}

fn take_key(
    mut data: ObjectData,
    field: &str,
    kind: &str,
    reference: (&str, &str),
    key: &str,
) -> Result<Vec<u8>, HookError> {
    data.remove(key).ok_or_else(|| {
        HookError::config(format!(
            "{field}: {kind} {}/{} has no key {key:?}",
            reference.0, reference.1
        ))
    })
}

/// Reads everything the selected settings reference. Called on every hook call, so a
/// changed Secret or ConfigMap takes effect on the next call.
pub(crate) async fn resolve(
    selected: &SelectedSettings<'_>,
    sources: &Sources,
) -> Result<ResolvedSettings, HookError> {
    let origin = selected.origin;
    if selected.authorization.is_some() && selected.basic_auth.is_some() {
        return Err(HookError::config(format!(
            "{origin}: authorization and basicAuth are mutually exclusive"
        )));
    }
    let mut resolved = ResolvedSettings::default();
    if let Some(ca) = selected.ca_bundle {
        resolved.tls.ca_pem = Some(resolve_ca_bundle(origin, ca, sources).await?);
    }
    if let Some(client_tls) = selected.client_tls {
        resolved.tls.identity = Some(resolve_client_tls(origin, client_tls, sources).await?);
    }
    if let Some(authorization) = selected.authorization {
        resolved.auth = Some(resolve_authorization(origin, authorization, sources).await?);
    } else if let Some(basic) = selected.basic_auth {
        resolved.auth = Some(resolve_basic_auth(origin, basic, sources).await?);
    }
    Ok(resolved)
}

async fn resolve_ca_bundle(
    origin: Origin<'_>,
    ca: &CaBundle,
    sources: &Sources,
) -> Result<Vec<u8>, HookError> {
    let field = format!("{origin}.caBundle");
    let set = [
        ca.inline.is_some(),
        ca.secret_ref.is_some(),
        ca.config_map_ref.is_some(),
    ]
    .iter()
    .filter(|set| **set)
    .count();
    if set != 1 {
        return Err(HookError::config(format!(
            "{field}: exactly one of inline, secretRef or configMapRef must be set"
        )));
    }
    if let Some(inline) = &ca.inline {
        return Ok(inline.as_bytes().to_vec());
    }
    if let Some(reference) = &ca.secret_ref {
        let field = format!("{field}.secretRef");
        let data = sources.secret(&field, reference).await?;
        let key = reference.key.as_deref().unwrap_or(DEFAULT_CA_BUNDLE_KEY);
        let ns = reference.namespace.as_deref().unwrap_or_default();
        return take_key(data, &field, "Secret", (ns, &reference.name), key);
    }
    if let Some(reference) = &ca.config_map_ref {
        let field = format!("{field}.configMapRef");
        let data = sources
            .config_map(&field, reference.namespace.as_deref(), &reference.name)
            .await?;
        let key = reference.key.as_deref().unwrap_or(DEFAULT_CA_BUNDLE_KEY);
        let ns = reference.namespace.as_deref().unwrap_or_default();
        return take_key(data, &field, "ConfigMap", (ns, &reference.name), key);
    }
    unreachable!("exactly one caBundle source is set")
}

async fn resolve_client_tls(
    origin: Origin<'_>,
    client_tls: &ClientTls,
    sources: &Sources,
) -> Result<ClientIdentity, HookError> {
    let field = format!("{origin}.clientTLS.secretRef");
    let reference = &client_tls.secret_ref;
    let mut data = sources.secret(&field, reference).await?;
    let ns = reference.namespace.as_deref().unwrap_or_default();
    let cert_key = client_tls
        .cert_key
        .as_deref()
        .unwrap_or(DEFAULT_CLIENT_CERT_KEY);
    let key_key = client_tls
        .private_key_key
        .as_deref()
        .unwrap_or(DEFAULT_CLIENT_KEY_KEY);
    let key_pem = data.remove(key_key).ok_or_else(|| {
        HookError::config(format!(
            "{field}: Secret {ns}/{} has no key {key_key:?}",
            reference.name
        ))
    })?;
    let cert_pem = take_key(data, &field, "Secret", (ns, &reference.name), cert_key)?;
    Ok(ClientIdentity {
        cert_pem,
        key_pem: SecretBytes::new(key_pem),
    })
}

async fn resolve_authorization(
    origin: Origin<'_>,
    authorization: &Authorization,
    sources: &Sources,
) -> Result<AuthHeader, HookError> {
    let field = format!("{origin}.authorization");
    let scheme = authorization
        .type_
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or(DEFAULT_AUTHORIZATION_TYPE);
    if scheme.eq_ignore_ascii_case("basic") {
        return Err(HookError::config(format!(
            "{field}: type {scheme:?} is not supported; use basicAuth instead"
        )));
    }
    let reference = &authorization.secret_ref;
    let key = match reference.key.as_deref() {
        Some(key) if !key.is_empty() => key,
        _ => {
            return Err(HookError::config(format!(
                "{field}.secretRef: key is required"
            )))
        }
    };
    let data = sources
        .secret(&format!("{field}.secretRef"), reference)
        .await?;
    let ns = reference.namespace.as_deref().unwrap_or_default();
    let value = take_key(
        data,
        &format!("{field}.secretRef"),
        "Secret",
        (ns, &reference.name),
        key,
    )?;
    let token = String::from_utf8_lossy(&value).trim().to_owned();
    AuthHeader::new(&format!("{scheme} {token}"), vec![token.clone()], &field)
}

async fn resolve_basic_auth(
    origin: Origin<'_>,
    basic: &BasicAuth,
    sources: &Sources,
) -> Result<AuthHeader, HookError> {
    let field = format!("{origin}.basicAuth.secretRef");
    let reference = &basic.secret_ref;
    let mut data = sources.secret(&field, reference).await?;
    let ns = reference.namespace.as_deref().unwrap_or_default();
    let user_key = basic
        .username_key
        .as_deref()
        .unwrap_or(DEFAULT_USERNAME_KEY);
    let pass_key = basic
        .password_key
        .as_deref()
        .unwrap_or(DEFAULT_PASSWORD_KEY);
    let mut missing = |key: &str| {
        data.remove(key).ok_or_else(|| {
            HookError::config(format!(
                "{field}: Secret {ns}/{} has no key {key:?}",
                reference.name
            ))
        })
    };
    let username = missing(user_key)?;
    let password = missing(pass_key)?;
    let password = String::from_utf8_lossy(&password).trim().to_owned();
    let pair = format!("{}:{password}", String::from_utf8_lossy(&username).trim());
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair.as_bytes());
    AuthHeader::new(
        &format!("Basic {encoded}"),
        vec![encoded.clone(), password],
        &format!("{origin}.basicAuth"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).unwrap()
    }

    #[test]
    fn host_matching_is_case_insensitive() {
        assert!(endpoint_matches(
            "HOOKS.Example.com",
            &url("https://hooks.example.com/x")
        ));
    }

    #[test]
    fn default_ports_are_equivalent_to_none() {
        let https = url("https://hooks.example.com/x");
        let https_443 = url("https://hooks.example.com:443/x");
        let http = url("http://hooks.example.com/x");
        for entry in ["hooks.example.com", "hooks.example.com:443"] {
            assert!(endpoint_matches(entry, &https), "{entry}");
            assert!(endpoint_matches(entry, &https_443), "{entry}");
        }
        assert!(endpoint_matches("hooks.example.com", &http));
        assert!(endpoint_matches("hooks.example.com:80", &http));
        assert!(!endpoint_matches("hooks.example.com:80", &https));
        assert!(!endpoint_matches("hooks.example.com:443", &http));
    }

    #[test]
    fn explicit_ports_must_agree() {
        let u = url("https://hooks.example.com:8443/x");
        assert!(endpoint_matches("hooks.example.com:8443", &u));
        assert!(!endpoint_matches("hooks.example.com", &u));
        assert!(!endpoint_matches("hooks.example.com:9443", &u));
        assert!(!endpoint_matches("other.example.com:8443", &u));
        assert!(!endpoint_matches("hooks.example.com:notaport", &u));
    }

    #[test]
    fn ipv6_hosts_match() {
        let u = url("https://[::1]:8443/x");
        assert!(endpoint_matches("[::1]:8443", &u));
        assert!(!endpoint_matches("[::1]", &u));
        assert!(endpoint_matches("::1", &url("https://[::1]/x")));
    }

    #[test]
    fn per_hook_fields_override_matching_entry_as_a_whole() {
        let entry = EndpointConfig {
            host: "h".into(),
            ca_bundle: Some(CaBundle {
                inline: Some("pem".into()),
                ..CaBundle::default()
            }),
            ..EndpointConfig::default()
        };
        let webhook = Webhook {
            url: Some("http://h/x".into()),
            basic_auth: Some(BasicAuth::default()),
            ..Webhook::default()
        };
        let configs = [entry];
        let selected = select(&webhook, &url("http://h/x"), &configs).unwrap();
        assert!(matches!(selected.origin, Origin::Webhook));
        assert!(
            selected.ca_bundle.is_none(),
            "entry's CA must not be merged in"
        );
        assert!(selected.basic_auth.is_some());

        let plain = Webhook {
            url: Some("http://h/x".into()),
            ..Webhook::default()
        };
        let selected = select(&plain, &url("http://h/x"), &configs).unwrap();
        assert!(matches!(selected.origin, Origin::EndpointConfig("h")));
        assert!(selected.ca_bundle.is_some());
        assert!(select(&plain, &url("http://other/x"), &configs).is_none());
    }

    #[test]
    fn first_matching_entry_wins() {
        let configs = [
            EndpointConfig {
                host: "other".into(),
                ..EndpointConfig::default()
            },
            EndpointConfig {
                host: "H:80".into(),
                basic_auth: Some(BasicAuth::default()),
                ..EndpointConfig::default()
            },
            EndpointConfig {
                host: "h".into(),
                ..EndpointConfig::default()
            },
        ];
        let webhook = Webhook::default();
        let selected = select(&webhook, &url("http://h/x"), &configs).unwrap();
        assert!(matches!(selected.origin, Origin::EndpointConfig("H:80")));
    }

    #[test]
    fn credential_holders_redact_debug() {
        let header =
            AuthHeader::new("Bearer s3cr3t-token", vec!["s3cr3t-token".into()], "f").unwrap();
        assert!(!format!("{header:?}").contains("s3cr3t"));
        let identity = ClientIdentity {
            cert_pem: b"CERT".to_vec(),
            key_pem: SecretBytes::new(b"PRIVATE-KEY-BYTES".to_vec()),
        };
        let shown = format!(
            "{:?}",
            ResolvedSettings {
                tls: TlsMaterial {
                    ca_pem: None,
                    identity: Some(identity),
                },
                auth: Some(header),
            }
        );
        assert!(!shown.contains("PRIVATE-KEY-BYTES"), "{shown}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
    }
}
