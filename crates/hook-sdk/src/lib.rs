//! Write [Metacontroller](https://metacontroller.github.io/metacontroller/) hooks in Rust.
//!
//! A hook is an HTTP server that Metacontroller POSTs JSON to. This crate gives you the
//! typed requests and responses of every hook (CompositeController and
//! DecoratorController sync/finalize, customize; hook versions v1 and v2) and an
//! [axum](https://docs.rs/axum) router that decodes them, calls your async function and
//! encodes its answer:
//!
//! ```no_run
//! use metacontroller_hook::{serve, shutdown_signal, CompositeHookRequest, CompositeHookResponse, Hooks};
//! use serde_json::json;
//!
//! async fn sync(req: CompositeHookRequest) -> Result<CompositeHookResponse, metacontroller_hook::Error> {
//!     let name = req.parent["metadata"]["name"].as_str().unwrap_or_default();
//!     let child = json!({
//!         "apiVersion": "v1",
//!         "kind": "ConfigMap",
//!         "metadata": {"name": name},
//!         "data": {"greeting": format!("Hello, {name}!")},
//!     });
//!     let mut status = serde_json::Map::new();
//!     status.insert("configMaps".into(), json!(req.children.objects().count()));
//!     Ok(CompositeHookResponse { children: vec![child], status: Some(status), ..Default::default() })
//! }
//!
//! #[tokio::main]
//! async fn main() -> std::io::Result<()> {
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//!     serve(listener, Hooks::new().sync(sync), shutdown_signal()).await
//! }
//! ```
//!
//! Handlers return `Result<Response, E>` for any `E` that converts into [`Error`]
//! (every `std::error::Error` does): an error becomes HTTP 500 with a JSON body
//! `{"message": "..."}`, which Metacontroller logs and records as an Event, then
//! retries with backoff. A body that is not valid JSON for the request type gets a 400
//! with the decoder's message; a body over the size limit gets a 413.
//!
//! A sync or finalize answer may ask Metacontroller to record Kubernetes Events on the
//! parent (the target for a DecoratorController) — an extension of metacontroller-rs,
//! ignored by upstream Metacontroller:
//!
//! ```
//! use metacontroller_hook::CompositeHookResponse;
//!
//! let answer = CompositeHookResponse::default()
//!     .event("Normal", "BackupStarted", "backup 42 started")
//!     .event("Warning", "QuotaLow", "less than 10% of the quota left");
//! assert_eq!(answer.events.len(), 2);
//! ```
//!
//! Each Event needs type `Normal` or `Warning` and a CamelCase reason that is not one of
//! the controller's own ([`RESERVED_HOOK_EVENT_REASONS`], e.g. `SyncError`); at most
//! [`MAX_HOOK_EVENTS`] per answer are recorded, messages are cut to
//! [`MAX_HOOK_EVENT_MESSAGE_BYTES`], and repeats are counted on one Event (see
//! [`HookEvent`]).
//!
//! The same Rust types serve v1 and v2 hooks: only the keys of the `children`,
//! `attachments` and `related` maps differ (`name` in v1, `namespace/name` in v2), so
//! look objects up with [`ObjectMap::group`] / [`ObjectMap::objects`] rather than by key
//! when a hook must work with both.
//!
//! Every request runs in a `hook_request` span (field `hook`). With the `opentelemetry`
//! feature that span continues the trace whose `traceparent` Metacontroller sent (its
//! tracing on): install a `tracing-opentelemetry` layer and set the global text-map
//! propagator (`TraceContextPropagator`), and the handler's spans join the sync's trace.

mod error;
mod router;
mod serve;
mod trace;

pub use error::Error;
pub use router::{Hooks, DEFAULT_BODY_LIMIT};
pub use serve::{serve, shutdown_signal};

pub use metacontroller_api::wire::{
    group_key, CompositeHookRequest, CompositeHookResponse, CustomizableController,
    CustomizeHookRequest, CustomizeHookResponse, DecoratorHookRequest, DecoratorHookResponse,
    HookEvent, ObjectMap, MAX_HOOK_EVENTS, MAX_HOOK_EVENT_MESSAGE_BYTES,
    RESERVED_HOOK_EVENT_REASONS,
};
pub use metacontroller_api::{
    CompositeController, DecoratorController, HookVersion, RelatedResourceRule,
};

/// The crate this SDK builds on, for the full controller types.
pub use metacontroller_api as api;
/// Re-exported so handlers can build children without naming another dependency.
pub use serde_json;

/// The README's example, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
