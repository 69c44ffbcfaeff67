//! The connection layer under kube's stack when no proxy is configured: kube's own builder
//! gives its connector no TCP keepalive, so a connection whose peer vanished (a node gone,
//! a NAT entry dropped) is only noticed when a request's deadline passes — and a watch on
//! it waits for its server-side timeout. client-go probes idle connections every 30 s; this
//! connector does the same, and sets the other parts of kube's stack (base URL, auth,
//! default retry of 429/503/504, extra headers) as kube does. With a proxy, kube's builder
//! (which tunnels through it) is used instead. An `http://` API server gets no TLS layer at
//! all (kube's builder would still load the system's CA certificates for it).

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{ClientBuilder, ConfigExt, DynBody};
use kube::Config;
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// What kube's builder produces, so the layers above fit both paths.
pub type GenericService =
    BoxService<http::Request<kube::client::Body>, http::Response<Box<DynBody>>, BoxError>;

/// client-go's dialer keepalive.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// A client builder whose TCP connections send keepalive probes.
pub fn with_keepalive(config: &Config) -> anyhow::Result<ClientBuilder<GenericService>> {
    let mut http = HttpConnector::new();
    http.set_keepalive(Some(TCP_KEEPALIVE));
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let executor = TokioExecutor::new();
    let service = if speaks_tls(config) {
        http.enforce_http(false);
        let https = config.rustls_https_connector_with_connector(http)?;
        layered(
            config,
            hyper_util::client::legacy::Client::builder(executor).build(https),
        )?
    } else {
        // A plain-HTTP API server (the embedded one of dev mode, `kubectl proxy`): no TLS
        // configuration to build, so the system's CA certificates are never loaded.
        layered(
            config,
            hyper_util::client::legacy::Client::builder(executor).build(http),
        )?
    };
    Ok(ClientBuilder::new(
        service,
        config.default_namespace.clone(),
    ))
}

/// Whether the cluster URL needs TLS: anything but an explicit `http://` does, as kube
/// decides.
fn speaks_tls(config: &Config) -> bool {
    config.cluster_url.scheme_str() != Some("http")
}

/// kube's layers (base URL, retry, auth, extra headers) over a hyper client.
fn layered<C>(
    config: &Config,
    hyper: hyper_util::client::legacy::Client<C, kube::client::Body>,
) -> anyhow::Result<GenericService>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    Ok(ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper)
        .map_response(|response| {
            response.map(|body| {
                Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>
            })
        })
        .boxed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_http_cluster_url_goes_without_tls() {
        for (url, tls) in [
            ("http://127.0.0.1:8080", false),
            ("https://10.96.0.1:443", true),
            ("https://kubernetes.default.svc", true),
        ] {
            let uri: http::Uri = url.parse().expect("valid URL");
            assert_eq!(speaks_tls(&Config::new(uri)), tls, "{url}");
        }
    }
}
