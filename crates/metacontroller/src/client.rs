//! The Kubernetes client of the process: configuration (kubeconfig or in-cluster, proxy
//! from the environment) and the request stack every API call goes through.
//!
//! Stack, outermost first: client-side rate limit (`--client-go-qps`/`--client-go-burst`)
//! → `rest_client_requests_total` counter → per-request deadline (`--api-request-timeout`,
//! watches exempt) → kube's stack (auth, base URL, retry, connection pool; with TCP
//! keepalive as client-go, see [`connector`], unless a proxy is configured).

mod connector;
mod metrics;
mod proxy;
mod rate_limit;
mod timeout;

use std::path::Path;

use anyhow::Context;
use http::header::USER_AGENT;
use http::HeaderValue;
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::cli::ControllerArgs;

pub use metrics::RequestMetrics;

/// The client configuration from `kubeconfig`, else the usual inference ($KUBECONFIG,
/// ~/.kube/config, in-cluster service account), with the proxy from the environment.
pub async fn config(kubeconfig: Option<&Path>) -> anyhow::Result<Config> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => Config::infer()
            .await
            .context("no kubeconfig found (set --kubeconfig or $KUBECONFIG, or run in a pod)")?,
    };
    proxy::apply_environment(&mut config);
    config.headers.push((USER_AGENT, user_agent()));
    Ok(config)
}

/// client-go's default User-Agent shape, `<binary>/<version> (<os>/<arch>) ...`, which upstream
/// sends. The API server records its first word as the field manager of our creates and updates
/// (`metacontroller`, as upstream's), where no User-Agent would be recorded as `unknown`.
fn user_agent() -> HeaderValue {
    let agent = format!(
        "metacontroller/v{} ({}/{}) metacontroller-rs",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    HeaderValue::from_str(&agent).unwrap_or_else(|_| HeaderValue::from_static("metacontroller"))
}

/// Burst used when `--client-go-burst` is 0 (client-go's default).
const DEFAULT_BURST: u32 = 10;

/// Builds the client from --kubeconfig, else the usual inference ($KUBECONFIG,
/// ~/.kube/config, in-cluster service account), and registers its request counter in
/// `registry`.
pub async fn client(
    args: &ControllerArgs,
    registry: &prometheus::Registry,
) -> anyhow::Result<Client> {
    let config = config(args.kubeconfig.as_deref()).await?;
    let host = config
        .cluster_url
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let metrics = RequestMetrics::register(registry, host)
        .context("registering rest_client_requests_total")?;
    let burst = match args.client_go_burst {
        0 => DEFAULT_BURST,
        n => n,
    };
    let bucket = if args.client_go_qps == 0.0 {
        None
    } else {
        let bucket = metacontroller_dynamic::TokenBucket::new(args.client_go_qps, burst)
            .context("--client-go-qps / --client-go-burst")?;
        Some(bucket)
    };
    let timeout = Some(args.api_request_timeout).filter(|t| !t.is_zero());
    let builder = if config.proxy_url.is_none() {
        connector::with_keepalive(&config).context("building the Kubernetes client")?
    } else {
        ClientBuilder::try_from(config).context("building the Kubernetes client")?
    };
    let client = builder
        .with_layer(&timeout::TimeoutLayer::new(timeout))
        .with_layer(&metrics::MetricsLayer::new(metrics))
        .with_layer(&rate_limit::RateLimitLayer::new(bucket))
        .build();
    Ok(client)
}
