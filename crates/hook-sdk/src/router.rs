//! The router builder: one POST route per hook, each decoding its typed request,
//! calling the user's async function and encoding the answer.

use std::future::Future;

use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument as _;

use crate::Error;

/// Request bodies larger than this are refused with 413 unless
/// [`Hooks::body_limit`] says otherwise: 16 MiB, room for a parent with thousands of
/// children.
pub const DEFAULT_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// Builds an axum [`Router`] serving hooks: `POST /sync`, `POST /finalize`,
/// `POST /customize`, plus any path added with [`Hooks::route`].
///
/// The request type of each handler picks the hook kind: [`CompositeHookRequest`]
/// for a CompositeController, [`DecoratorHookRequest`] for a DecoratorController,
/// [`CustomizeHookRequest`] for customize (or `serde_json::Value` for anything).
///
/// ```
/// use metacontroller_hook::{DecoratorHookRequest, DecoratorHookResponse, Error, Hooks};
///
/// let router: axum::Router = Hooks::new()
///     .sync(|req: DecoratorHookRequest| async move {
///         let mut labels = std::collections::BTreeMap::new();
///         labels.insert("decorated".to_string(), Some("true".to_string()));
///         Ok::<_, Error>(DecoratorHookResponse { labels: Some(labels), ..Default::default() })
///     })
///     .finalize(|_req: DecoratorHookRequest| async {
///         Ok::<_, Error>(DecoratorHookResponse { finalized: true, ..Default::default() })
///     })
///     .body_limit(1024 * 1024)
///     .into_router();
/// ```
///
/// [`CompositeHookRequest`]: crate::CompositeHookRequest
/// [`DecoratorHookRequest`]: crate::DecoratorHookRequest
/// [`CustomizeHookRequest`]: crate::CustomizeHookRequest
pub struct Hooks {
    router: Router,
    body_limit: usize,
}

impl Default for Hooks {
    fn default() -> Self {
        Self::new()
    }
}

impl Hooks {
    /// No routes yet; the body limit is [`DEFAULT_BODY_LIMIT`].
    pub fn new() -> Self {
        Self {
            router: Router::new(),
            body_limit: DEFAULT_BODY_LIMIT,
        }
    }

    /// Serves the sync hook at `POST /sync`.
    pub fn sync<Req, Resp, E, F, Fut>(self, handler: F) -> Self
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        E: Into<Error> + Send + 'static,
        F: Fn(Req) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, E>> + Send + 'static,
    {
        self.route("/sync", handler)
    }

    /// Serves the finalize hook at `POST /finalize`.
    pub fn finalize<Req, Resp, E, F, Fut>(self, handler: F) -> Self
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        E: Into<Error> + Send + 'static,
        F: Fn(Req) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, E>> + Send + 'static,
    {
        self.route("/finalize", handler)
    }

    /// Serves the customize hook at `POST /customize`.
    pub fn customize<Req, Resp, E, F, Fut>(self, handler: F) -> Self
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        E: Into<Error> + Send + 'static,
        F: Fn(Req) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, E>> + Send + 'static,
    {
        self.route("/customize", handler)
    }

    /// Serves a hook at `POST path` (e.g. several controllers in one server:
    /// `/blue-green/sync`, `/other/sync`).
    pub fn route<Req, Resp, E, F, Fut>(mut self, path: &str, handler: F) -> Self
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        E: Into<Error> + Send + 'static,
        F: Fn(Req) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, E>> + Send + 'static,
    {
        let hook = path.to_string();
        self.router = self.router.route(
            path,
            post(move |headers: HeaderMap, body: Bytes| {
                let handler = handler.clone();
                let hook = hook.clone();
                let span = crate::trace::request_span(&hook, &headers);
                async move { call(&hook, handler, body).await }.instrument(span)
            }),
        );
        self
    }

    /// Refuses request bodies over `bytes` with 413 Payload Too Large.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// The finished router, to serve with [`serve`](crate::serve) or to nest in a
    /// larger axum application.
    pub fn into_router(self) -> Router {
        self.router.layer(DefaultBodyLimit::max(self.body_limit))
    }
}

async fn call<Req, Resp, E, F, Fut>(hook: &str, handler: F, body: Bytes) -> Response
where
    Req: DeserializeOwned,
    Resp: Serialize,
    E: Into<Error>,
    F: Fn(Req) -> Fut,
    Fut: Future<Output = Result<Resp, E>>,
{
    let request: Req = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(err) => {
            tracing::warn!(hook, error = %err, "undecodable hook request");
            return Error::with_status(
                StatusCode::BAD_REQUEST,
                format!("cannot decode the {hook} request: {err}"),
            )
            .into_response();
        }
    };
    match handler(request).await {
        Ok(response) => {
            tracing::debug!(hook, "hook answered");
            Json(response).into_response()
        }
        Err(err) => {
            let err: Error = err.into();
            tracing::warn!(hook, error = %err, status = %err.status(), "hook failed");
            err.into_response()
        }
    }
}
