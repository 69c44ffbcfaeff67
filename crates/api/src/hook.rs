//! Hook configuration: how Metacontroller reaches a hook server (`spec.hooks.*` and
//! `spec.endpointConfigs` of both controller kinds). JSON names follow upstream exactly.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::{parse_go_duration, DurationParseError};
pub use crate::inprocess::{CodeConfigMapReference, JsonnetHook, WasmHook};

/// Default hook timeout when `webhook.timeout` is unset (upstream: 10s).
pub const DEFAULT_WEBHOOK_TIMEOUT: &str = "10s";
/// Default Service port when `webhook.service.port` is unset.
pub const DEFAULT_SERVICE_PORT: i32 = 80;
/// Default scheme when `webhook.service.protocol` is unset.
pub const DEFAULT_SERVICE_PROTOCOL: &str = "http";
/// Default key of a CA bundle held in a Secret or ConfigMap.
pub const DEFAULT_CA_BUNDLE_KEY: &str = "ca.crt";
/// Default `authorization.type`.
pub const DEFAULT_AUTHORIZATION_TYPE: &str = "Bearer";
/// Default key of the client certificate in a `clientTLS` Secret.
pub const DEFAULT_CLIENT_CERT_KEY: &str = "tls.crt";
/// Default key of the client private key in a `clientTLS` Secret.
pub const DEFAULT_CLIENT_KEY_KEY: &str = "tls.key";
/// Default key of the username in a `basicAuth` Secret.
pub const DEFAULT_BASIC_AUTH_USERNAME_KEY: &str = "username";
/// Default key of the password in a `basicAuth` Secret.
pub const DEFAULT_BASIC_AUTH_PASSWORD_KEY: &str = "password";

/// One hook (`sync`, `finalize` or `customize`): a webhook, or code run inside the
/// controller (`jsonnet`, `wasm`; an extension beyond upstream). Exactly one is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "(has(self.webhook) ? 1 : 0) + (has(self.jsonnet) ? 1 : 0) + (has(self.wasm) ? 1 : 0) <= 1",
     "message": "exactly one of webhook, jsonnet or wasm may be set"}
]))]
pub struct Hook {
    /// Wire protocol version of requests and responses; `v1` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "v1"))]
    pub version: Option<HookVersion>,
    /// How to call the hook over HTTP(S).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
    /// Jsonnet code from a ConfigMap, evaluated inside the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonnet: Option<JsonnetHook>,
    /// A WebAssembly (WASI) module run inside the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm: Option<WasmHook>,
}

/// What runs a hook: the one of `webhook`, `jsonnet` and `wasm` that is set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HookRuntime<'a> {
    /// An HTTP(S) call.
    Webhook(&'a Webhook),
    /// Jsonnet evaluated in-process.
    Jsonnet(&'a JsonnetHook),
    /// A WebAssembly module run in-process.
    Wasm(&'a WasmHook),
}

impl HookRuntime<'_> {
    /// The runtime's name as metrics and logs show it.
    pub fn name(&self) -> &'static str {
        match self {
            HookRuntime::Webhook(_) => "webhook",
            HookRuntime::Jsonnet(_) => "jsonnet",
            HookRuntime::Wasm(_) => "wasm",
        }
    }
}

impl Hook {
    /// The effective protocol version (`v1` by default).
    pub fn effective_version(&self) -> HookVersion {
        self.version.unwrap_or_default()
    }

    /// What runs this hook: `webhook`, else `jsonnet`, else `wasm` (validation refuses
    /// more than one); `None` when none is set.
    pub fn runtime(&self) -> Option<HookRuntime<'_>> {
        if let Some(webhook) = &self.webhook {
            return Some(HookRuntime::Webhook(webhook));
        }
        if let Some(jsonnet) = &self.jsonnet {
            return Some(HookRuntime::Jsonnet(jsonnet));
        }
        self.wasm.as_ref().map(HookRuntime::Wasm)
    }

    /// How responses are decoded: a webhook's `responseUnMarshallMode` when set, else
    /// loose for v1 and strict for v2 (in-process hooks always follow the version).
    pub fn effective_unmarshall_mode(&self) -> ResponseUnmarshallMode {
        let version = self.effective_version();
        match &self.webhook {
            Some(webhook) => webhook.effective_unmarshall_mode(version),
            None => ResponseUnmarshallMode::default_for(version),
        }
    }
}

/// Hook wire protocol version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum HookVersion {
    /// Children maps keyed by name relative to the parent's namespace.
    #[default]
    #[serde(rename = "v1")]
    V1,
    /// Children maps keyed uniformly by `<namespace>/<name>`.
    #[serde(rename = "v2")]
    V2,
}

/// How strictly hook responses are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResponseUnmarshallMode {
    /// Unknown fields are ignored.
    Loose,
    /// Unknown and duplicate fields are errors.
    Strict,
}

impl ResponseUnmarshallMode {
    /// Upstream's default: loose for v1 hooks, strict for v2 hooks.
    pub fn default_for(version: HookVersion) -> Self {
        match version {
            HookVersion::V1 => Self::Loose,
            HookVersion::V2 => Self::Strict,
        }
    }
}

/// Where and how to POST a hook request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    /// Full URL; overrides `service` and `path` when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Go duration string (`10s`, `1m30s`); 10s when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "duration"))]
    pub timeout: Option<String>,
    /// Path appended to the service URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A Service through which the hook is reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceReference>,
    /// ETag-based response caching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<WebhookEtagConfig>,
    /// `loose` or `strict` decoding of responses (upstream spelling of the field).
    #[serde(
        default,
        rename = "responseUnMarshallMode",
        skip_serializing_if = "Option::is_none"
    )]
    pub response_un_marshall_mode: Option<ResponseUnmarshallMode>,
    /// CA certificates used to verify the hook server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
    /// `Authorization: <type> <credentials>` header from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// HTTP basic authentication from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    /// Client certificate (mTLS) from a Secret.
    #[serde(default, rename = "clientTLS", skip_serializing_if = "Option::is_none")]
    pub client_tls: Option<ClientTls>,
}

impl Webhook {
    /// The effective decoding mode for a hook of the given version: the configured
    /// mode when set (upstream honours `loose` for v2 hooks too), else loose for v1 and
    /// strict for v2.
    pub fn effective_unmarshall_mode(&self, version: HookVersion) -> ResponseUnmarshallMode {
        self.response_un_marshall_mode
            .unwrap_or_else(|| ResponseUnmarshallMode::default_for(version))
    }

    /// The effective call timeout: `timeout` parsed as a Go duration, 10s when unset.
    pub fn timeout_duration(&self) -> Result<Duration, DurationParseError> {
        parse_go_duration(self.timeout.as_deref().unwrap_or(DEFAULT_WEBHOOK_TIMEOUT))
    }
}

/// A reference to a Kubernetes Service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceReference {
    /// `metadata.name` of the Service.
    pub name: String,
    /// `metadata.namespace` of the Service.
    pub namespace: String,
    /// Port on the Service; 80 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// URL scheme (`http` or `https`); `http` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

/// ETag caching of hook responses (RFC 7232 `If-None-Match`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEtagConfig {
    /// Turns the cache on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How long a cached response stays valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_timeout_seconds: Option<i32>,
    /// How often expired entries are swept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_cleanup_seconds: Option<i32>,
}

/// A key of a Secret (`key` is required where the context has no default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyReference {
    /// Secret name.
    pub name: String,
    /// Secret namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Key inside `data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A key of a ConfigMap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyReference {
    /// ConfigMap name.
    pub name: String,
    /// ConfigMap namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Key inside `data`; `ca.crt` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// CA certificates (PEM) to trust for a hook server: exactly one source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaBundle {
    /// PEM text inline in the controller spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// PEM held in a Secret key (`ca.crt` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyReference>,
    /// PEM held in a ConfigMap key (`ca.crt` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ConfigMapKeyReference>,
}

/// `Authorization` header credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Authorization {
    /// Scheme; `Bearer` when unset. `Basic` is refused (use `basicAuth`).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Secret key holding the credentials.
    pub secret_ref: SecretKeyReference,
}

/// HTTP basic authentication.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    /// Secret holding username and password.
    pub secret_ref: SecretKeyReference,
    /// Key of the username.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_key: Option<String>,
    /// Key of the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_key: Option<String>,
}

/// Client certificate for mutual TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientTls {
    /// Secret holding certificate and key.
    pub secret_ref: SecretKeyReference,
    /// Key of the PEM certificate; `tls.crt` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_key: Option<String>,
    /// Key of the PEM private key; `tls.key` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key_key: Option<String>,
}

/// Per-host connection settings shared by all hooks whose host matches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointConfig {
    /// Host (optionally `host:port`) the settings apply to; case-insensitive.
    pub host: String,
    /// CA certificates for this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
    /// Authorization header for this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// Basic auth for this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    /// Client certificate for this host.
    #[serde(default, rename = "clientTLS", skip_serializing_if = "Option::is_none")]
    pub client_tls: Option<ClientTls>,
}

impl ServiceReference {
    /// The effective port (80 when unset).
    pub fn effective_port(&self) -> i32 {
        self.port.unwrap_or(DEFAULT_SERVICE_PORT)
    }

    /// The effective URL scheme (`http` when unset).
    pub fn effective_protocol(&self) -> &str {
        self.protocol.as_deref().unwrap_or(DEFAULT_SERVICE_PROTOCOL)
    }
}

impl SecretKeyReference {
    /// The key, or `default` when unset.
    pub fn key_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.key.as_deref().unwrap_or(default)
    }
}

impl ConfigMapKeyReference {
    /// The key (`ca.crt` when unset).
    pub fn effective_key(&self) -> &str {
        self.key.as_deref().unwrap_or(DEFAULT_CA_BUNDLE_KEY)
    }
}

impl Authorization {
    /// The header scheme (`Bearer` when unset or empty).
    pub fn effective_type(&self) -> &str {
        match self.type_.as_deref() {
            Some(t) if !t.is_empty() => t,
            _ => DEFAULT_AUTHORIZATION_TYPE,
        }
    }
}

impl BasicAuth {
    /// Key of the username in the Secret (`username` when unset).
    pub fn effective_username_key(&self) -> &str {
        self.username_key
            .as_deref()
            .unwrap_or(DEFAULT_BASIC_AUTH_USERNAME_KEY)
    }

    /// Key of the password in the Secret (`password` when unset).
    pub fn effective_password_key(&self) -> &str {
        self.password_key
            .as_deref()
            .unwrap_or(DEFAULT_BASIC_AUTH_PASSWORD_KEY)
    }
}

impl ClientTls {
    /// Key of the certificate in the Secret (`tls.crt` when unset).
    pub fn effective_cert_key(&self) -> &str {
        self.cert_key.as_deref().unwrap_or(DEFAULT_CLIENT_CERT_KEY)
    }

    /// Key of the private key in the Secret (`tls.key` when unset).
    pub fn effective_private_key_key(&self) -> &str {
        self.private_key_key
            .as_deref()
            .unwrap_or(DEFAULT_CLIENT_KEY_KEY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn webhook_round_trips_upstream_names() {
        let value = json!({
            "version": "v2",
            "webhook": {
                "url": "https://hooks.example:8443/sync",
                "timeout": "1m30s",
                "etag": {"enabled": true, "cacheTimeoutSeconds": 60, "cacheCleanupSeconds": 300},
                "responseUnMarshallMode": "strict",
                "caBundle": {"configMapRef": {"name": "ca", "namespace": "hooks", "key": "root.pem"}},
                "authorization": {"type": "Token", "secretRef": {"name": "t", "namespace": "hooks", "key": "token"}},
                "clientTLS": {"secretRef": {"name": "c", "namespace": "hooks"}, "certKey": "c.pem", "privateKeyKey": "k.pem"}
            }
        });
        let hook: Hook = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(hook.effective_version(), HookVersion::V2);
        let webhook = hook.webhook.as_ref().unwrap();
        assert_eq!(webhook.timeout.as_deref(), Some("1m30s"));
        assert_eq!(
            webhook.effective_unmarshall_mode(HookVersion::V2),
            ResponseUnmarshallMode::Strict
        );
        assert_eq!(serde_json::to_value(&hook).unwrap(), value);
    }

    #[test]
    fn configured_mode_overrides_the_version_default() {
        let webhook = Webhook {
            response_un_marshall_mode: Some(ResponseUnmarshallMode::Loose),
            ..Webhook::default()
        };
        assert_eq!(
            webhook.effective_unmarshall_mode(HookVersion::V2),
            ResponseUnmarshallMode::Loose
        );
        let strict_v1 = Webhook {
            response_un_marshall_mode: Some(ResponseUnmarshallMode::Strict),
            ..Webhook::default()
        };
        assert_eq!(
            strict_v1.effective_unmarshall_mode(HookVersion::V1),
            ResponseUnmarshallMode::Strict
        );
    }

    #[test]
    fn timeout_defaults_to_ten_seconds_and_parses_go_durations() {
        let mut webhook = Webhook::default();
        assert_eq!(webhook.timeout_duration(), Ok(Duration::from_secs(10)));
        webhook.timeout = Some("1m30s".into());
        assert_eq!(webhook.timeout_duration(), Ok(Duration::from_secs(90)));
        webhook.timeout = Some("soon".into());
        assert!(webhook.timeout_duration().is_err());
    }

    #[test]
    fn unmarshall_mode_defaults_follow_version() {
        let webhook = Webhook::default();
        assert_eq!(
            webhook.effective_unmarshall_mode(HookVersion::V1),
            ResponseUnmarshallMode::Loose
        );
        assert_eq!(
            webhook.effective_unmarshall_mode(HookVersion::V2),
            ResponseUnmarshallMode::Strict
        );
    }
}
