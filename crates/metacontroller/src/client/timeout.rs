//! A deadline on every API request except watches, covering the whole exchange (response
//! headers and body). kube sets no read timeout (watches are long-lived), so a request
//! sent on a half-open connection would wait forever and park the worker that made it. With the deadline the request fails, the sync is
//! retried with backoff, and the dead connection is dropped instead of returned to the
//! pool. Watches are left alone: kube's watcher has its own idle timeout.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
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

/// Fails a non-watch request whose response (headers and body) does not arrive within the
/// deadline.
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

impl<S, B, RB> Service<Request<B>> for Timeout<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    RB: Body<Data = Bytes> + Unpin + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<DeadlineBody<RB>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

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
                let response = response.await.map_err(Into::into)?;
                return Ok(response.map(|body| DeadlineBody { body, expiry: None }));
            };
            let timed_out = RequestTimedOut {
                deadline,
                method,
                path,
            };
            let at = Instant::now() + deadline;
            match tokio::time::timeout_at(at, response).await {
                Ok(result) => {
                    let response = result.map_err(Into::into)?;
                    let sleep = Box::pin(tokio::time::sleep_until(at));
                    Ok(response.map(|body| DeadlineBody {
                        body,
                        expiry: Some((sleep, Some(timed_out))),
                    }))
                }
                Err(_) => Err(Box::new(timed_out) as BoxError),
            }
        })
    }
}

/// A response body that fails once the request's deadline passes.
#[derive(Debug)]
pub struct DeadlineBody<B> {
    body: B,
    /// The deadline and the error to report (taken when reported).
    expiry: Option<(Pin<Box<Sleep>>, Option<RequestTimedOut>)>,
}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if let Some((sleep, error)) = &mut this.expiry {
            if sleep.as_mut().poll(cx).is_ready() {
                let error = error.take().map(|e| Box::new(e) as BoxError);
                return Poll::Ready(error.map(Err));
            }
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
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
            std::future::pending::<Result<Response<Stalled>, BoxError>>().await
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

    /// A body whose frames never come.
    #[derive(Debug)]
    struct Stalled;

    impl Body for Stalled {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_body_that_stalls_fails_at_the_deadline() {
        let headers_only = tower::service_fn(|_req: Request<()>| async {
            Ok::<_, BoxError>(Response::new(Stalled))
        });
        let mut svc = TimeoutLayer::new(Some(Duration::from_millis(50))).layer(headers_only);
        let response = svc
            .call(Request::get("/api/v1/configmaps").body(()).unwrap())
            .await
            .unwrap();
        let read = tokio::time::timeout(
            Duration::from_secs(5),
            http_body_util::BodyExt::collect(response.into_body()),
        )
        .await
        .expect("the body read ends at the deadline");
        let Err(err) = read else {
            panic!("the stalled body must end with an error")
        };
        assert!(err.to_string().contains("within 50ms"), "{err}");
    }
}
