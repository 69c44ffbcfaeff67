//! `rest_client_requests_total{code,method,host}`: API requests by outcome, the counter
//! client-go exposes in upstream's /metrics. `code` is the HTTP status, or `<error>` when
//! no response arrived (connection failure, timeout), as in client-go.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use prometheus::{IntCounterVec, Opts, Registry};
use tower::{BoxError, Layer, Service};

/// The request counter, registered once per process.
#[derive(Clone)]
pub struct RequestMetrics {
    requests: IntCounterVec,
    host: String,
}

impl RequestMetrics {
    /// Registers the counter in `registry`; `host` is the API server's `host:port`.
    pub fn register(registry: &Registry, host: String) -> prometheus::Result<Self> {
        let requests = IntCounterVec::new(
            Opts::new(
                "rest_client_requests_total",
                "Number of HTTP requests, partitioned by status code, method, and host.",
            ),
            &["code", "method", "host"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        Ok(Self { requests, host })
    }

    fn observe(&self, code: &str, method: &str) {
        self.requests
            .with_label_values(&[code, method, &self.host])
            .inc();
    }
}

/// Wraps a service with [`Metrics`].
#[derive(Clone)]
pub struct MetricsLayer {
    metrics: RequestMetrics,
}

impl MetricsLayer {
    /// Counts into `metrics`.
    pub fn new(metrics: RequestMetrics) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for MetricsLayer {
    type Service = Metrics<S>;

    fn layer(&self, inner: S) -> Metrics<S> {
        Metrics {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// Counts every request once its response headers (or its error) arrive.
pub struct Metrics<S> {
    inner: S,
    metrics: RequestMetrics,
}

impl<S, B, RB> Service<Request<B>> for Metrics<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let method = req.method().as_str().to_owned();
        let metrics = self.metrics.clone();
        let response = self.inner.call(req);
        Box::pin(async move {
            let result = response.await.map_err(Into::into);
            match &result {
                Ok(response) => metrics.observe(response.status().as_str(), &method),
                Err(_) => metrics.observe("<error>", &method),
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt as _;

    #[tokio::test]
    async fn requests_are_counted_by_code_method_and_host() {
        let registry = Registry::new();
        let metrics = RequestMetrics::register(&registry, "10.0.0.1:6443".into()).unwrap();
        let svc = tower::service_fn(|req: Request<()>| async move {
            if req.uri().path() == "/fail" {
                return Err::<Response<()>, BoxError>("connection reset".into());
            }
            Ok(Response::builder().status(404).body(()).unwrap())
        });
        let mut svc = MetricsLayer::new(metrics).layer(svc);
        for path in ["/a", "/b", "/fail"] {
            let req = Request::get(path).body(()).unwrap();
            let _ = svc.ready().await.unwrap().call(req).await;
        }
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        assert!(
            text.contains(
                r#"rest_client_requests_total{code="404",host="10.0.0.1:6443",method="GET"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"rest_client_requests_total{code="<error>",host="10.0.0.1:6443",method="GET"} 1"#
            ),
            "{text}"
        );
    }
}
