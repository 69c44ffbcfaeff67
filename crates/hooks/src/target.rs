//! Where a hook is reached: its URL (from `url`, or `service` + `path`), its timeout, and
//! the optional host resolver used by tests and dev mode.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::RwLock;
use std::time::Duration;

use metacontroller_api::duration::parse_go_duration;
use metacontroller_api::hook::{
    Webhook, DEFAULT_SERVICE_PORT, DEFAULT_SERVICE_PROTOCOL, DEFAULT_WEBHOOK_TIMEOUT,
};
use reqwest::Url;

use crate::error::HookError;

/// Default hook timeout (upstream: 10s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL a webhook is called at. A full `url` wins over `service` + `path`; a service
/// becomes `<protocol>://<name>.<namespace>:<port><path>` (port 80, protocol `http` by
/// default), exactly as upstream builds it.
pub fn hook_url(webhook: &Webhook) -> Result<Url, HookError> {
    let text = match (&webhook.url, &webhook.service, &webhook.path) {
        (Some(url), _, _) => url.clone(),
        (None, Some(service), Some(path)) => {
            if service.name.is_empty() || service.namespace.is_empty() {
                return Err(HookError::config(
                    "webhook.service: must specify service 'name' and 'namespace'",
                ));
            }
            let port = service.port.unwrap_or(DEFAULT_SERVICE_PORT);
            let protocol = service
                .protocol
                .as_deref()
                .unwrap_or(DEFAULT_SERVICE_PROTOCOL);
            format!(
                "{protocol}://{}.{}:{port}{path}",
                service.name, service.namespace
            )
        }
        _ => {
            return Err(HookError::config(
                "webhook: must specify either full 'url', or both 'service' and 'path'",
            ))
        }
    };
    let url = Url::parse(&text).map_err(|err| {
        HookError::config(format!(
            "webhook URL {:?} is invalid: {err}",
            redact_text_url(&text)
        ))
    })?;
    match url.scheme() {
        "http" | "https" => {}
        other => {
            return Err(HookError::config(format!(
                "webhook URL {}: unsupported scheme {other:?} (want http or https)",
                display_url(&url)
            )))
        }
    }
    if url.host_str().is_none() {
        return Err(HookError::config(format!(
            "webhook URL {} has no host",
            display_url(&url)
        )));
    }
    Ok(url)
}

/// The hook timeout: `webhook.timeout` in Go duration syntax, 10s when unset. Like
/// upstream, a zero or negative duration falls back to 10s; unparsable text is an error.
pub fn hook_timeout(webhook: &Webhook) -> Result<Duration, HookError> {
    let Some(text) = webhook.timeout.as_deref() else {
        return Ok(DEFAULT_TIMEOUT);
    };
    let trimmed = text.trim();
    if let Some(magnitude) = trimmed.strip_prefix('-') {
        parse_go_duration(magnitude).map_err(|err| {
            HookError::config(format!("webhook.timeout {text:?} is invalid: {err}"))
        })?;
        tracing::warn!(
            timeout = text,
            default = DEFAULT_WEBHOOK_TIMEOUT,
            "webhook timeout must be positive; using the default"
        );
        return Ok(DEFAULT_TIMEOUT);
    }
    let timeout = parse_go_duration(trimmed)
        .map_err(|err| HookError::config(format!("webhook.timeout {text:?} is invalid: {err}")))?;
    if timeout.is_zero() {
        tracing::warn!(
            timeout = text,
            default = DEFAULT_WEBHOOK_TIMEOUT,
            "webhook timeout must be positive; using the default"
        );
        return Ok(DEFAULT_TIMEOUT);
    }
    Ok(timeout)
}

/// The URL as shown in errors and logs: userinfo (which may hold a password) removed.
pub fn display_url(url: &Url) -> String {
    if url.username().is_empty() && url.password().is_none() {
        return url.as_str().to_owned();
    }
    let mut shown = url.clone();
    // Both setters only fail for URLs that cannot have userinfo, which then has none.
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.as_str().to_owned()
}

/// Best-effort userinfo removal for text that did not parse as a URL.
fn redact_text_url(text: &str) -> String {
    let Some(scheme_end) = text.find("://") else {
        return text.to_owned();
    };
    let rest = &text[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}://{}", &text[..scheme_end], &rest[at + 1..]),
        None => text.to_owned(),
    }
}

/// Maps a hook host and port to the socket address to connect to instead of using DNS.
///
/// Production leaves this unset (cluster DNS resolves `<name>.<namespace>`). Tests and
/// `metacontroller dev` map service hosts such as `hooks.default:80` to a local port. The
/// hook URL keeps its host name (so TLS verification and SNI use it); only the connection
/// goes to the returned address. The override is per host name: mapping one name to
/// different IP addresses for different ports is not supported (ports may differ freely).
pub trait HostResolver: Send + Sync {
    /// The address for `host:port`, or `None` to use normal DNS resolution.
    fn resolve(&self, host: &str, port: u16) -> Option<SocketAddr>;
}

/// A [`HostResolver`] backed by a table, editable while in use.
#[derive(Debug, Default)]
pub struct StaticHostResolver {
    table: RwLock<HashMap<(String, u16), SocketAddr>>,
}

impl StaticHostResolver {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Routes `host:port` (host case-insensitive) to `addr`.
    pub fn insert(&self, host: &str, port: u16, addr: SocketAddr) {
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        table.insert((host.to_ascii_lowercase(), port), addr);
    }

    /// Builder form of [`StaticHostResolver::insert`].
    pub fn with(self, host: &str, port: u16, addr: SocketAddr) -> Self {
        self.insert(host, port, addr);
        self
    }
}

impl HostResolver for StaticHostResolver {
    fn resolve(&self, host: &str, port: u16) -> Option<SocketAddr> {
        let table = self.table.read().unwrap_or_else(|e| e.into_inner());
        table.get(&(host.to_ascii_lowercase(), port)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metacontroller_api::hook::ServiceReference;

    fn service(name: &str, ns: &str, port: Option<i32>, protocol: Option<&str>) -> Webhook {
        Webhook {
            service: Some(ServiceReference {
                name: name.into(),
                namespace: ns.into(),
                port,
                protocol: protocol.map(str::to_owned),
            }),
            path: Some("/sync".into()),
            ..Webhook::default()
        }
    }

    #[test]
    fn service_url_defaults_to_http_port_80() {
        let url = hook_url(&service("hooks", "team-a", None, None)).unwrap();
        assert_eq!(url.scheme(), "http");
        assert_eq!(url.host_str(), Some("hooks.team-a"));
        assert_eq!(url.port_or_known_default(), Some(80));
        assert_eq!(url.path(), "/sync");
    }

    #[test]
    fn service_url_uses_port_and_protocol() {
        let url = hook_url(&service("hooks", "team-a", Some(8443), Some("https"))).unwrap();
        assert_eq!(url.as_str(), "https://hooks.team-a:8443/sync");
    }

    #[test]
    fn full_url_overrides_service() {
        let mut webhook = service("hooks", "team-a", None, None);
        webhook.url = Some("http://other:9000/x".into());
        assert_eq!(hook_url(&webhook).unwrap().as_str(), "http://other:9000/x");
    }

    #[test]
    fn missing_target_is_a_config_error() {
        let err = hook_url(&Webhook::default()).unwrap_err();
        assert!(matches!(err, HookError::Config { .. }), "{err}");
        let mut webhook = service("hooks", "team-a", None, None);
        webhook.path = None;
        assert!(hook_url(&webhook).is_err());
        assert!(hook_url(&service("", "team-a", None, None)).is_err());
    }

    #[test]
    fn non_http_scheme_is_rejected() {
        let webhook = Webhook {
            url: Some("ftp://host/x".into()),
            ..Webhook::default()
        };
        assert!(hook_url(&webhook).unwrap_err().to_string().contains("ftp"));
    }

    #[test]
    fn timeout_parses_go_durations_and_defaults() {
        let with = |t: &str| Webhook {
            timeout: Some(t.into()),
            ..Webhook::default()
        };
        assert_eq!(hook_timeout(&Webhook::default()).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(
            hook_timeout(&with("1m30s")).unwrap(),
            Duration::from_secs(90)
        );
        assert_eq!(
            hook_timeout(&with("500ms")).unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(hook_timeout(&with("0s")).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(hook_timeout(&with("-5s")).unwrap(), DEFAULT_TIMEOUT);
        assert!(hook_timeout(&with("ten seconds")).is_err());
    }

    #[test]
    fn display_url_drops_userinfo() {
        let url = Url::parse("https://user:hunter2@host:8443/p").unwrap();
        assert_eq!(display_url(&url), "https://host:8443/p");
        assert_eq!(
            redact_text_url("https://user:hunter2@ho st/p"),
            "https://ho st/p"
        );
    }

    #[test]
    fn static_resolver_is_case_insensitive() {
        let addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let resolver = StaticHostResolver::new().with("Hooks.NS", 80, addr);
        assert_eq!(resolver.resolve("hooks.ns", 80), Some(addr));
        assert_eq!(resolver.resolve("hooks.ns", 81), None);
    }
}

/// When a call must be answered by, and the hook's timeout that set it (as errors name it):
/// taken once per call, when it starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    pub(crate) at: std::time::Instant,
    pub(crate) timeout: Duration,
}
