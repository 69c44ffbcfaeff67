//! `metacontroller-hooks`: the webhook client that calls user hook servers, accepting every
//! hook option of upstream Metacontroller v4.
//!
//! # Use
//!
//! ```no_run
//! # async fn demo(hook: &metacontroller_api::hook::Hook,
//! #               endpoint_configs: &[metacontroller_api::hook::EndpointConfig],
//! #               registry: prometheus::Registry,
//! #               secrets: std::sync::Arc<dyn metacontroller_hooks::SecretSource>,
//! #               config_maps: std::sync::Arc<dyn metacontroller_hooks::ConfigMapSource>)
//! #               -> Result<(), metacontroller_hooks::HookError> {
//! use metacontroller_hooks::{CallContext, HookClient, HookClientConfig};
//!
//! let client = HookClient::new(HookClientConfig {
//!     secrets: Some(secrets),          // served from the runtime's informer cache
//!     config_maps: Some(config_maps),
//!     registry: Some(registry),        // metrics are registered here
//!     ..HookClientConfig::default()    // 16 MiB body limit, DNS for hosts
//! })?;
//! let ctx = CallContext { controller: "my-controller", hook_name: "sync", parent_key: "ns/name" };
//! let request = serde_json::json!({"parent": {}});
//! let response: serde_json::Value = client.call(&ctx, hook, endpoint_configs, &request).await?;
//! # Ok(()) }
//! ```
//!
//! * [`HookClient::call`] decodes strictly or loosely as the hook says
//!   (`responseUnMarshallMode`; loose by default for v1 and strict for v2);
//!   [`HookClient::call_with_mode`] takes the mode explicitly.
//! * [`HookError`] separates configuration errors ([`HookError::Config`]: no target, bad
//!   timeout, missing Secret/key, bad PEM, conflicting auth), transport
//!   ([`HookError::Transport`], incl. TLS failures), [`HookError::Timeout`], non-200
//!   status ([`HookError::Status`], with the first 1 KiB of the body),
//!   [`HookError::TooManyRequests`] (429 with `Retry-After`), [`HookError::Oversize`] and
//!   [`HookError::Decode`]. [`HookError::kind`] is the metrics outcome label.
//! * [`HookClient::forget_parent`] / [`HookClient::forget_controller`] drop ETag entries
//!   of deleted objects.
//!
//! # Behaviour (upstream-compatible unless noted)
//!
//! * **Target**: `url`, else `service` + `path` → `<protocol>://<name>.<namespace>:<port><path>`
//!   (port 80, protocol `http` by default). A [`HostResolver`] (e.g.
//!   [`StaticHostResolver`]) lets tests and dev mode route any `host:port` to a local
//!   address; the URL keeps its host name, so TLS still verifies that name.
//! * **Request**: `POST`, `Content-Type: application/json`, per-hook `timeout` in Go
//!   duration syntax (default 10s; ≤ 0 falls back to 10s like upstream) covering the whole
//!   exchange including the body. Redirects are not followed.
//! * **Connections**: one pooled keep-alive reqwest client per distinct TLS material (keyed
//!   by a SHA-256 digest of CA bundle + client certificate + key), rustls with the ring
//!   provider, HTTP/2 via ALPN and HTTP/1.1. Unused TLS clients are dropped after 10 min.
//! * **Response**: only 200 succeeds (and 304/412 when an ETag was sent); 429 →
//!   `TooManyRequests`; bodies above `max_body_bytes` (default 16 MiB) fail early, also
//!   when streamed without `Content-Length`.
//! * **TLS**: system roots (webpki roots if the system has none) unless a `caBundle`
//!   (inline, Secret or ConfigMap key, default `ca.crt`) replaces them, as upstream does.
//!   `clientTLS` reads `tls.crt`/`tls.key` (defaults) from a Secret. Verification is never
//!   disabled.
//! * **Auth**: `authorization` → `Authorization: <type> <value>` (type `Bearer` by default,
//!   `Basic` refused), `basicAuth` (keys `username`/`password` by default); values are
//!   trimmed; the two are mutually exclusive. Header values are marked sensitive; types that
//!   hold credentials redact `Debug`; errors and trace-logged bodies are scrubbed of the
//!   credentials sent (also URL userinfo) in case a server echoes them.
//! * **endpointConfigs**: if a hook sets any of caBundle/clientTLS/authorization/basicAuth,
//!   those are used as a whole; else the first entry whose `host` matches (case-insensitive;
//!   a missing port means the scheme's default, so `h`, `h:443`, `https://h` and
//!   `https://h:443` agree) applies.
//! * **Secrets/ConfigMaps** are read through [`SecretSource`] / [`ConfigMapSource`] on every
//!   call, so rotated CAs, client certificates and tokens apply without a restart
//!   (improves on upstream, which reads them once per controller update).
//! * **Retries** (beyond upstream, [`retry`]): a webhook call whose connection could not be
//!   set up (refused, reset while connecting, DNS, connect timeout) is sent again after
//!   50 ms doubling to 1 s, with jitter, within the hook's timeout; TLS failures and
//!   anything after the request was sent are never retried. Counted in
//!   `metacontroller_hook_retries_total`.
//! * **ETag** (`etag.enabled`): per (controller, hook) cache of the last 200 body + ETag
//!   per (URL, parent key); `If-None-Match` is sent and 304/412 reuse the body. Entries
//!   expire after `cacheTimeoutSeconds` and a task sweeps every `cacheCleanupSeconds`;
//!   unset (or ≤ 0) means no expiry / no sweep, as upstream.
//! * **Decoding**: [`metacontroller_api::wire::decode_response`] — strict mode rejects
//!   unknown and duplicate fields by path; loose ignores unknown fields and keeps the last
//!   duplicate; a `null` body is the response type's default, as in Go.
//! * **Observability**: upstream's per-hook families
//!   `metacontroller_<hook>_requests_total`, `..._request_duration_histogram_seconds` and
//!   `..._in_flight_requests` (see [`metrics`]), plus
//!   `metacontroller_hook_calls_total{controller_name,controller_type,hook,outcome}`; a
//!   `hook_call` span with controller, hook, parent and URL (without userinfo); request and
//!   response bodies only at trace level, with the `data`/`stringData` values of every
//!   Secret in them replaced by `[REDACTED]` ([`redact`]).
//! * **Tracing** (`HookClientConfig::trace`): the `hook_call` span records `outcome` and
//!   `http.response.status_code`; with a [`TracePropagator`] installed each request carries
//!   the span's `traceparent`. Off by default; then no header is sent ([`trace`]).
//! * **Recording** (`HookClientConfig::recorder`): every exchange sent is handed to a
//!   [`HookRecorder`]; [`DirectoryRecorder`] writes one redacted JSON file per exchange
//!   off the sync path ([`record`]). Off by default; then nothing is kept.
//! * **WebAssembly** ([`wasm`]): a hook compiled to a WASI preview 1 command runs inside the
//!   controller (request on stdin, response on stdout) in a sandbox with no files, network
//!   or environment, a fresh instance per call, stopped at its timeout and memory limit.
//! * **Admission of in-process hooks** ([`InProcessLimits`]): each controller's calls run
//!   within its own share (calls at once, half the memory budget), under a process-wide cap
//!   and memory budget; every wait counts inside the hook's timeout ([`HookError::Queued`],
//!   or a `Failed` error naming the budget). Code loading (ConfigMap, single-flight download
//!   with failures backed off, compilation) is inside the timeout too.

mod call;
mod client;
pub mod credentials;
pub mod error;
mod etag;
pub mod inprocess;
pub mod metrics;
mod pinned;
mod pool;
pub mod quantity;
pub mod record;
pub mod redact;
pub mod retry;
pub mod sources;
mod system_roots;
pub mod target;
pub mod trace;
pub mod wasm;

pub use call::{
    code_config_map, Answer, CallContext, HookClient, HookClientConfig, DEFAULT_MAX_BODY_BYTES,
    REPLICA_HEADER,
};
pub use client::STATUS_BODY_PREFIX_BYTES;
pub use error::HookError;
pub use inprocess::jsonnet_pool::{
    run_worker as run_jsonnet_worker, JsonnetPoolConfig, WorkerCommand,
    WORKER_ARG as JSONNET_WORKER_ARG,
};
pub use inprocess::InProcessLimits;
pub use metacontroller_api::wire::DecodeError;
pub use pinned::{code_digest, with_pinned_code, PinnedCode};
pub use pool::plain_client;
pub use record::{DirectoryRecorder, HookRecorder, RecordedExchange, RecordedResponse};
pub use sources::{
    changed_keys, CodeChange, CodeObject, CodeSource, ConfigMapSource, MemoryCode, MemoryObjects,
    ObjectData, SecretSource, SourceError,
};
pub use target::{HostResolver, StaticHostResolver};
pub use trace::TracePropagator;
