//! The API server proxy from the environment, as client-go's `ProxyFromEnvironment`:
//! `HTTPS_PROXY` for an `https://` server, `HTTP_PROXY` for `http://` (either falls back
//! to `ALL_PROXY`), unless `NO_PROXY` names the server's host. A `proxy-url` in the
//! kubeconfig wins over the environment.
//!
//! kube alone reads only `HTTPS_PROXY` and checks `NO_PROXY` against the proxy's own
//! host instead of the API server's, so a `NO_PROXY` listing the API server would not
//! bypass the proxy.

use http::Uri;
use hyper_util::client::proxy::matcher::Matcher;
use kube::Config;

/// Replaces the proxy kube derived from the environment with the one client-go would use.
pub fn apply_environment(config: &mut Config) {
    let from_env = first_env(&["HTTPS_PROXY", "https_proxy"]).and_then(|v| parse(&v));
    let kube_took_env = match &config.proxy_url {
        None => true,
        Some(url) => Some(url) == from_env.as_ref(),
    };
    if !kube_took_env {
        return; // proxy-url from the kubeconfig
    }
    config.proxy_url = for_destination(&config.cluster_url);
    if let Some(proxy) = &config.proxy_url {
        tracing::info!(proxy = %without_userinfo(proxy), server = %config.cluster_url, "using a proxy for the API server (from the environment)");
    }
}

/// The proxy the environment gives for `destination`, `None` for a direct connection.
pub fn for_destination(destination: &Uri) -> Option<Uri> {
    // The matcher applies NO_PROXY (hosts, domain suffixes, IPs, CIDRs, `*`) the way
    // reqwest does for hook calls.
    Matcher::from_env().intercept(destination)?;
    let names: &[&str] = match destination.scheme_str() {
        Some("https") => &["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"],
        _ => &["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"],
    };
    // The raw value (not the matcher's) keeps the userinfo kube turns into
    // Proxy-Authorization.
    first_env(names).and_then(|v| parse(&v))
}

fn first_env(names: &[&str]) -> Option<String> {
    names
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|value| !value.trim().is_empty())
}

/// A proxy URL; `host:port` without a scheme means `http://host:port`.
fn parse(value: &str) -> Option<Uri> {
    let value = value.trim();
    let with_scheme = if value.contains("://") {
        value.to_owned()
    } else {
        format!("http://{value}")
    };
    with_scheme.parse().ok()
}

fn without_userinfo(uri: &Uri) -> String {
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    format!("{}://{host}", uri.scheme_str().unwrap_or("http"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_values_without_scheme_are_http() {
        assert_eq!(
            parse("proxy.corp:3128").unwrap().to_string(),
            "http://proxy.corp:3128/"
        );
        assert_eq!(
            without_userinfo(&parse("http://u:p@proxy:1").unwrap()),
            "http://proxy:1"
        );
    }
}
