//! A deadline on every API request except watches. kube sets no read timeout (watches
//! are long-lived), so a request sent on a half-open connection would wait forever and
//! park the worker that made it. With the deadline the request fails, the sync is
//! retried with backoff, and the dead connection is dropped instead of returned to the
//! pool. Watches are left alone: kube's watcher has its own idle timeout.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Request;
use tower::{BoxError, Layer, Service};

/// Wraps a service with [`Timeout`].
#[derive(Debug, Clone)]
pub struct TimeoutLayer {
    deadline: Option<Duration>,
}

impl TimeoutLayer {
    /// `None` disables the deadline.
    pub fn new(deadline: Option<Duration>) -> Self {
        Self { deadline }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout {
            inner,
            deadline: self.deadline,
        }
    }
}

/// Fails a non-watch request whose response headers do not arrive within the deadline.
#[derive(Debug, Clone)]
pub struct Timeout<S> {
    inner: S,
    deadline: Option<Duration>,
}

/// The error of a request that hit the deadline.
#[derive(Debug, thiserror::Error)]
#[error("no response from the API server within {deadline:?} ({method} {path})")]
pub struct RequestTimedOut {
    deadline: Duration,
    method: http::Method,
    path: String,
}

/// Whether the request is a watch (`?watch=true` or `?watch=1`), which may legitimately
/// stay open for minutes.
pub fn is_watch<B>(req: &Request<B>) -> bool {
    req.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

impl<S, B, Resp> Service<Request<B>> for Timeout<S>
where
    S: Service<Request<B>, Response = Resp>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Resp;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Resp, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let deadline = self.deadline.filter(|_| !is_watch(&req));
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let response = self.inner.call(req);
        Box::pin(async move {
            let Some(deadline) = deadline else {
                return response.await.map_err(Into::into);
            };
            match tokio::time::timeout(deadline, response).await {
                Ok(result) => result.map_err(Into::into),
                Err(_) => Err(Box::new(RequestTimedOut {
                    deadline,
                    method,
                    path,
                }) as BoxError),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_are_recognised_by_their_query() {
        let req = |uri: &str| Request::get(uri).body(()).unwrap();
        assert!(is_watch(&req("/api/v1/pods?watch=true&resourceVersion=1")));
        assert!(is_watch(&req("/api/v1/pods?labelSelector=a&watch=1")));
        assert!(!is_watch(&req("/api/v1/pods?watch=false")));
        assert!(!is_watch(&req("/api/v1/pods?allowWatchBookmarks=true")));
        assert!(!is_watch(&req("/api/v1/pods")));
    }

    #[tokio::test]
    async fn a_stalled_request_fails_at_the_deadline_and_a_watch_does_not() {
        let stalled = tower::service_fn(|_req: Request<()>| async {
            std::future::pending::<Result<(), BoxError>>().await
        });
        let mut svc = TimeoutLayer::new(Some(Duration::from_millis(50))).layer(stalled);
        let err = svc
            .call(
                Request::get("/api/v1/namespaces/a/configmaps")
                    .body(())
                    .unwrap(),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("within 50ms"), "{err}");
        let watch = svc.call(
            Request::get("/api/v1/configmaps?watch=true")
                .body(())
                .unwrap(),
        );
        let waited = tokio::time::timeout(Duration::from_millis(300), watch).await;
        assert!(waited.is_err(), "a watch must not be cut by the deadline");
    }
}
