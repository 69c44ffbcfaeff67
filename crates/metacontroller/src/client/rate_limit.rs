//! Client-side rate limit of API requests (`--client-go-qps`, `--client-go-burst`): the
//! shared token bucket ([`metacontroller_dynamic::TokenBucket`]), like client-go's. It waits in `poll_ready`, so it paces the dispatch of
//! requests; kube's client puts one `Buffer` in front of the stack, so all clones of the
//! client share this one bucket.

use metacontroller_dynamic::TokenBucket;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::time::{Instant, Sleep};
use tower::{BoxError, Layer, Service};

/// Wraps a service with [`RateLimit`].
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Option<TokenBucket>,
}

impl RateLimitLayer {
    /// `None` passes requests through unthrottled.
    pub fn new(bucket: Option<TokenBucket>) -> Self {
        Self { bucket }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            holds_token: false,
        }
    }
}

/// Readiness waits for a token of the bucket (if any), then for the inner service.
pub struct RateLimit<S> {
    inner: S,
    bucket: Option<TokenBucket>,
    wait: Option<Pin<Box<Sleep>>>,
    /// A token was taken for the next `call` (the inner service may not be ready yet).
    holds_token: bool,
}

impl<S, Req> Service<Req> for RateLimit<S>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if let Some(bucket) = &mut self.bucket {
            while !self.holds_token {
                if let Some(wait) = &mut self.wait {
                    std::task::ready!(wait.as_mut().poll(cx));
                    self.wait = None;
                }
                match bucket.try_take(Instant::now()) {
                    Ok(()) => self.holds_token = true,
                    Err(delay) => self.wait = Some(Box::pin(tokio::time::sleep(delay))),
                }
            }
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.holds_token = false;
        let response = self.inner.call(req);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tower::ServiceExt as _;

    #[tokio::test]
    async fn burst_goes_at_once_then_requests_are_paced_at_qps() {
        let svc = tower::service_fn(|_: ()| async { Ok::<_, BoxError>(()) });
        let mut svc = RateLimitLayer::new(Some(TokenBucket::new(100.0, 3).unwrap())).layer(svc);
        let start = Instant::now();
        for _ in 0..3 {
            svc.ready().await.unwrap().call(()).await.unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_millis(5),
            "the burst is not delayed"
        );
        for _ in 0..10 {
            svc.ready().await.unwrap().call(()).await.unwrap();
        }
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(95) && elapsed <= Duration::from_millis(600),
            "10 requests beyond the burst at 100 qps take 100ms, took {elapsed:?}"
        );
    }

    #[tokio::test]
    async fn without_a_bucket_nothing_waits() {
        let svc = tower::service_fn(|_: ()| async { Ok::<_, BoxError>(()) });
        let mut svc = RateLimitLayer::new(None).layer(svc);
        let start = Instant::now();
        for _ in 0..100 {
            svc.ready().await.unwrap().call(()).await.unwrap();
        }
        assert!(start.elapsed() < Duration::from_millis(50));
    }
}
