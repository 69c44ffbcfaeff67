//! One hook call, whatever runs the hook: the seam between the controllers and the hook
//! runtimes. A call encodes the request once, hands the bytes to its runtime — the webhook
//! transport ([`crate::client`]) or an in-process runtime (Jsonnet, WebAssembly:
//! [`crate::inprocess`]) — before one deadline taken from the hook's timeout, and wraps every
//! runtime alike: metrics and the call's span, the recording (`--record-hooks`), the ETag
//! cache, and decoding the response.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use metacontroller_api::hook::{
    CodeConfigMapReference, EndpointConfig, Hook, HookRuntime, ResponseUnmarshallMode, Webhook,
};
use metacontroller_api::wire::{decode_response, DecodeError};
use prometheus::Registry;
use reqwest::header::HeaderValue;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument as _;

use crate::client::{Fetched, Target, WebhookTransport};
use crate::credentials::Sources;
use crate::error::HookError;
use crate::etag::{CachedResponse, EtagCache, EtagSettings};
use crate::inprocess::jsonnet_pool::JsonnetPoolConfig;
use crate::inprocess::{InProcess, InProcessLimits};
use crate::metrics::{CallLabels, HookMetrics, OUTCOME_CACHED, OUTCOME_SUCCESS};
use crate::pool::{ClientPool, OverrideDns};
use crate::record::{HookRecorder, RecordedExchange, RecordedResponse};
use crate::sources::{CodeChange, CodeSource, ConfigMapSource, SecretSource};
use crate::target::{display_url, hook_timeout, hook_url, Deadline, HostResolver};
use crate::trace::TracePropagator;

/// Default limit of a response body: 16 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Construction parameters of a [`HookClient`].
pub struct HookClientConfig {
    /// Largest accepted response body (default [`DEFAULT_MAX_BODY_BYTES`]).
    pub max_body_bytes: usize,
    /// Maps hook hosts to local addresses (tests, dev mode); `None` uses DNS.
    pub host_resolver: Option<Arc<dyn HostResolver>>,
    /// Where Secrets referenced by hooks are read; `None` makes such hooks fail.
    pub secrets: Option<Arc<dyn SecretSource>>,
    /// Where ConfigMaps referenced by hooks are read; `None` makes such hooks fail.
    pub config_maps: Option<Arc<dyn ConfigMapSource>>,
    /// Registry the metrics are registered on; `None` keeps them unregistered.
    pub registry: Option<Registry>,
    /// Sent as [`REPLICA_HEADER`] on every call (sharding, leader election: which replica
    /// synced a parent); `None` sends no such header.
    pub replica: Option<String>,
    /// Receives every exchange sent (`--record-hooks`); `None` records nothing.
    pub recorder: Option<Arc<dyn HookRecorder>>,
    /// Adds trace context headers to every request (tracing on); `None` adds none.
    pub trace: Option<Arc<dyn TracePropagator>>,
    /// Where the code of in-process hooks (`jsonnet`, `wasm` from a ConfigMap) is read;
    /// `None` makes such hooks fail.
    pub code: Option<Arc<dyn CodeSource>>,
    /// The worker processes of Jsonnet hooks (default: this executable's `jsonnet-worker`).
    pub jsonnet: JsonnetPoolConfig,
    /// Limits of in-process hooks for the whole process: each controller's share of calls
    /// at once, the process cap, the memory budget.
    pub inprocess: InProcessLimits,
}

/// The request header naming the calling replica when sharding or leader election is on.
pub const REPLICA_HEADER: &str = "x-metacontroller-replica";

impl Default for HookClientConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            host_resolver: None,
            secrets: None,
            config_maps: None,
            registry: None,
            replica: None,
            recorder: None,
            trace: None,
            code: None,
            jsonnet: JsonnetPoolConfig::default(),
            inprocess: InProcessLimits::default(),
        }
    }
}

/// Who is calling: labels for metrics and spans, and the ETag cache key.
#[derive(Debug, Clone, Copy)]
pub struct CallContext<'a> {
    /// Controller name (e.g. the CompositeController's `metadata.name`).
    pub controller: &'a str,
    /// Hook name (`sync`, `finalize`, `customize`).
    pub hook_name: &'a str,
    /// Identifies the parent object (e.g. `namespace/name`); ETag entries are per parent.
    pub parent_key: &'a str,
}

/// Calls hook servers. Cheap to clone; clones share connection pools and caches.
#[derive(Clone)]
pub struct HookClient {
    inner: Arc<Inner>,
    /// The `controller_type` metrics label (see [`HookClient::for_controller_type`]).
    controller_type: &'static str,
}

struct Inner {
    webhook: WebhookTransport,
    max_body_bytes: usize,
    metrics: HookMetrics,
    etags: Mutex<HashMap<(String, String), Arc<EtagCache>>>,
    recorder: Option<Arc<dyn HookRecorder>>,
    trace: Option<Arc<dyn TracePropagator>>,
    inprocess: InProcess,
    code: Option<Arc<dyn CodeSource>>,
}

impl HookClient {
    /// Builds the client (and registers its metrics on `config.registry`).
    pub fn new(config: HookClientConfig) -> Result<Self, HookError> {
        let dns = config
            .host_resolver
            .as_ref()
            .map(|_| Arc::new(OverrideDns::default()));
        Ok(Self {
            inner: Arc::new(Inner {
                webhook: WebhookTransport {
                    pool: ClientPool::new(dns.clone())?,
                    resolver: config.host_resolver,
                    dns,
                    sources: Sources {
                        secrets: config.secrets,
                        config_maps: config.config_maps,
                    },
                    max_body_bytes: config.max_body_bytes,
                    replica: config
                        .replica
                        .as_deref()
                        .and_then(|r| HeaderValue::from_str(r).ok()),
                    trace: config.trace.clone(),
                },
                max_body_bytes: config.max_body_bytes,
                metrics: HookMetrics::new(config.registry.as_ref())?,
                etags: Mutex::new(HashMap::new()),
                recorder: config.recorder,
                trace: config.trace,
                inprocess: InProcess::new(
                    config.code.clone(),
                    config.inprocess,
                    Some(crate::metrics::InProcessMetrics::new(
                        config.registry.as_ref(),
                    )?),
                    config.jsonnet,
                ),
                code: config.code,
            }),
            controller_type: "",
        })
    }

    /// Waits (at most `within`) until the exchanges handed to the recorder so far are
    /// stored; `true` without a recorder. For shutdown: the last syncs' recordings.
    pub async fn flush_recordings(&self, within: Duration) -> bool {
        let Some(recorder) = self.inner.recorder.clone() else {
            return true;
        };
        tokio::task::spawn_blocking(move || recorder.flush(within))
            .await
            .unwrap_or(false)
    }

    /// A handle sharing this client's pools and caches whose calls carry
    /// `controller_type` (`CompositeController` or `DecoratorController`, as upstream) in
    /// their metrics labels.
    pub fn for_controller_type(&self, controller_type: &'static str) -> HookClient {
        HookClient {
            inner: self.inner.clone(),
            controller_type,
        }
    }

    /// Calls `hook` with `request` and decodes the response as `Resp`, strictly or loosely
    /// as [`Webhook::effective_unmarshall_mode`] says (`responseUnMarshallMode`; loose by
    /// default for v1 and strict for v2).
    ///
    /// [`Webhook::effective_unmarshall_mode`]: metacontroller_api::hook::Webhook::effective_unmarshall_mode
    pub async fn call<Req, Resp>(
        &self,
        ctx: &CallContext<'_>,
        hook: &Hook,
        endpoint_configs: &[EndpointConfig],
        request: &Req,
    ) -> Result<Resp, HookError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned + Default,
    {
        let mode = hook.effective_unmarshall_mode();
        self.call_with_mode(ctx, hook, endpoint_configs, request, mode)
            .await
    }

    /// Like [`HookClient::call`] with an explicit decoding mode.
    pub async fn call_with_mode<Req, Resp>(
        &self,
        ctx: &CallContext<'_>,
        hook: &Hook,
        endpoint_configs: &[EndpointConfig],
        request: &Req,
        mode: ResponseUnmarshallMode,
    ) -> Result<Resp, HookError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned + Default,
    {
        self.answer_with_mode(ctx, hook, endpoint_configs, request, mode)
            .await
            .map(|answer| answer.response)
    }

    /// Like [`HookClient::call`], also saying whether the response is the one the ETag
    /// cache held (the hook answered 304 or 412): what it asks for, it asked before.
    pub async fn answer<Req, Resp>(
        &self,
        ctx: &CallContext<'_>,
        hook: &Hook,
        endpoint_configs: &[EndpointConfig],
        request: &Req,
    ) -> Result<Answer<Resp>, HookError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned + Default,
    {
        let mode = hook.effective_unmarshall_mode();
        self.answer_with_mode(ctx, hook, endpoint_configs, request, mode)
            .await
    }

    /// [`HookClient::answer`] with an explicit decoding mode.
    async fn answer_with_mode<Req, Resp>(
        &self,
        ctx: &CallContext<'_>,
        hook: &Hook,
        endpoint_configs: &[EndpointConfig],
        request: &Req,
        mode: ResponseUnmarshallMode,
    ) -> Result<Answer<Resp>, HookError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned + Default,
    {
        let span = tracing::info_span!(
            "hook_call",
            controller = ctx.controller,
            hook = ctx.hook_name,
            parent = ctx.parent_key,
            url = tracing::field::Empty,
            outcome = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let runtime = hook.runtime();
        let shown_url = match &runtime {
            Some(HookRuntime::Webhook(w)) => hook_url(w)
                .ok()
                .map(|u| display_url(&u))
                .unwrap_or_default(),
            Some(other) => crate::inprocess::display(other),
            None => String::new(),
        };
        let labels = CallLabels {
            controller_name: ctx.controller,
            controller_type: self.controller_type,
            hook: ctx.hook_name,
            url: &shown_url,
            runtime: runtime.as_ref().map_or("webhook", HookRuntime::name),
        };
        let result = async {
            let (body, url, cached) = self
                .exchange(ctx, &labels, runtime.as_ref(), endpoint_configs, request)
                .await?;
            let decoded = decode(&body, mode).map_err(|error| HookError::Decode { url, error })?;
            Ok::<_, HookError>((decoded, cached))
        }
        .instrument(span.clone())
        .await;
        let outcome = match &result {
            Ok((_, true)) => OUTCOME_CACHED,
            Ok((_, false)) => OUTCOME_SUCCESS,
            Err(err) => err.kind(),
        };
        self.inner.metrics.observe_call(&labels, outcome);
        if self.inner.trace.is_some() {
            record_outcome(&span, outcome, result.is_ok());
        }
        match result {
            Ok((response, cached)) => Ok(Answer { response, cached }),
            Err(err) => {
                span.in_scope(|| tracing::debug!(error = %err, "hook call failed"));
                Err(err)
            }
        }
    }

    /// Runs `runtime` (a webhook when the hook names none) on the encoded request before
    /// the deadline its timeout sets, and records the exchange; the response body, the hook
    /// as shown in messages, and whether the body is the ETag cache's.
    async fn exchange<Req: Serialize + ?Sized>(
        &self,
        ctx: &CallContext<'_>,
        labels: &CallLabels<'_>,
        runtime: Option<&HookRuntime<'_>>,
        endpoint_configs: &[EndpointConfig],
        request: &Req,
    ) -> Result<(Bytes, String, bool), HookError> {
        let Some(runtime) = runtime else {
            return Err(HookError::config("hook has no webhook"));
        };
        let timeout = call_timeout(runtime, labels.url)?;
        let deadline = Deadline {
            at: Instant::now() + timeout,
            timeout,
        };
        let body = encode_request(request)?;
        // A recording shares the body buffer (no copy); nothing is kept when off.
        let recording = self
            .inner
            .recorder
            .as_ref()
            .map(|recorder| Recording::start(recorder, body.clone()));
        let exchanged = match runtime {
            HookRuntime::Webhook(webhook) => {
                self.webhook(ctx, labels, webhook, endpoint_configs, body, deadline)
                    .await?
            }
            in_process => {
                self.in_process(ctx, labels, in_process, body, deadline.at)
                    .await
            }
        };
        if let Some(recording) = recording {
            self.record(ctx, recording, &exchanged);
        }
        exchanged
            .result
            .map(|(body, cached)| (body, exchanged.shown, cached))
    }

    /// A webhook exchange: the transport sends the request (with the cached ETag, when the
    /// hook keeps one) and the answer updates the ETag cache. Resolving the target fails
    /// before anything is sent (and recorded).
    async fn webhook(
        &self,
        ctx: &CallContext<'_>,
        labels: &CallLabels<'_>,
        webhook: &Webhook,
        endpoint_configs: &[EndpointConfig],
        body: Bytes,
        deadline: Deadline,
    ) -> Result<Exchanged, HookError> {
        let transport = &self.inner.webhook;
        let (target, settings) = transport
            .resolve(webhook, endpoint_configs, deadline)
            .await?;
        tracing::trace!(body = %target.secrets.scrub_body(&body), "hook request");
        let etag_cache = EtagSettings::from_config(webhook.etag.as_ref())
            .map(|settings| self.etag_cache(ctx, settings));
        let cached = etag_cache
            .as_ref()
            .and_then(|cache| cache.get(target.url.as_str(), ctx.parent_key));
        let fetched = transport
            .send(
                &self.inner.metrics,
                labels,
                &target,
                &settings,
                body,
                cached.as_ref(),
            )
            .await;
        let recorded = recorded_response(&fetched, cached.as_ref().map(|c| &c.body))
            .map(|response| target.secrets.scrub_recorded(response));
        let error = fetched.as_ref().err().and_then(recorded_error);
        let shown = target.shown.clone();
        let result = fetched.and_then(|fetched| {
            finish(
                fetched,
                target,
                etag_cache.as_deref(),
                ctx.parent_key,
                cached,
            )
        });
        Ok(Exchanged {
            shown,
            result,
            recorded,
            error,
        })
    }

    /// An in-process exchange, with the metrics and span field of a webhook call (a
    /// success counts as status 200, a failure as 500, as jsonnetd answered).
    async fn in_process(
        &self,
        ctx: &CallContext<'_>,
        labels: &CallLabels<'_>,
        runtime: &HookRuntime<'_>,
        body: Bytes,
        deadline: Instant,
    ) -> Exchanged {
        tracing::Span::current().record("url", labels.url);
        let sent = Instant::now();
        let in_flight = self.inner.metrics.start_request(labels);
        // Admission is per controller: its kind and name.
        let controller = format!("{}/{}", self.controller_type, ctx.controller);
        let result = self
            .inner
            .inprocess
            .call(
                &controller,
                runtime,
                labels.url,
                body,
                self.inner.max_body_bytes,
                deadline,
            )
            .await;
        drop(in_flight);
        let status = if result.is_ok() { 200 } else { 500 };
        self.inner
            .metrics
            .observe_response(labels, status, sent.elapsed());
        Exchanged {
            shown: labels.url.to_owned(),
            recorded: result.as_ref().ok().map(|body| RecordedResponse {
                status: 200,
                body: body.clone(),
            }),
            error: result.as_ref().err().map(ToString::to_string),
            result: result.map(|body| (body, false)),
        }
    }

    /// Hands the finished exchange to the recorder.
    fn record(&self, ctx: &CallContext<'_>, recording: Recording<'_>, exchanged: &Exchanged) {
        recording.recorder.record(RecordedExchange {
            controller_kind: self.controller_type,
            controller: ctx.controller.to_owned(),
            hook: ctx.hook_name.to_owned(),
            parent_key: ctx.parent_key.to_owned(),
            url: exchanged.shown.clone(),
            started_at: recording.started_at,
            duration: recording.started.elapsed(),
            request: recording.request,
            response: exchanged.recorded.clone(),
            error: exchanged.error.clone(),
        });
    }

    /// Changes of the ConfigMaps that hold in-process hook code (`None` without a code
    /// source): a controller resyncs its parents when its code changes.
    pub fn code_changes(&self) -> Option<tokio::sync::broadcast::Receiver<CodeChange>> {
        self.inner.code.as_ref().map(|code| code.changes())
    }

    /// Whether `change` touches the code `hook` runs: its ConfigMap and, of it, a key the
    /// hook uses (WebAssembly: its key; Jsonnet: its entry and the files it imports,
    /// transitively). A controller resyncs its parents only for such changes.
    pub async fn code_change_affects(&self, hook: &Hook, change: &CodeChange) -> bool {
        crate::inprocess::change_affects(self.inner.code.as_deref(), hook, change).await
    }

    /// The live content of ConfigMap `namespace/name` from the code source (`Ok(None)`
    /// without a code source or when it does not exist): a hook rollout stores it as a
    /// version.
    pub async fn code_object(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<crate::CodeObject>>, crate::SourceError> {
        match &self.inner.code {
            Some(code) => code.get(namespace, name).await,
            None => Ok(None),
        }
    }

    /// Starts watching the ConfigMap holding `hook`'s code (if it has one), so a change is
    /// noticed before the next call.
    pub fn watch_code(&self, hook: &Hook) {
        let (Some(code), Some(reference)) = (&self.inner.code, code_config_map(hook)) else {
            return;
        };
        code.watch(&reference.namespace, &reference.name);
    }

    /// Ends the watch [`HookClient::watch_code`] started for `hook` (its controller went);
    /// the ConfigMap is no longer watched once no controller uses it.
    pub fn unwatch_code(&self, hook: &Hook) {
        let (Some(code), Some(reference)) = (&self.inner.code, code_config_map(hook)) else {
            return;
        };
        code.unwatch(&reference.namespace, &reference.name);
    }

    /// Drops the ETag entries of one parent of a controller (e.g. after it was deleted).
    pub fn forget_parent(&self, controller: &str, parent_key: &str) {
        let etags = self.inner.etags.lock().unwrap_or_else(|e| e.into_inner());
        for ((c, _), cache) in etags.iter() {
            if c == controller {
                cache.forget_parent(parent_key);
            }
        }
    }

    /// Keeps, in every ETag cache of a controller, only the entries of the parents `keep`
    /// accepts (given the parent key the calls named): a sharded replica drops the cached
    /// responses of the parents that left it.
    pub fn retain_parents(&self, controller: &str, keep: &dyn Fn(&str) -> bool) {
        let etags = self.inner.etags.lock().unwrap_or_else(|e| e.into_inner());
        for ((c, _), cache) in etags.iter() {
            if c == controller {
                cache.retain_parents(keep);
            }
        }
    }

    /// ETag entries cached for a controller over all its hooks.
    pub fn etag_entries_of(&self, controller: &str) -> usize {
        let etags = self.inner.etags.lock().unwrap_or_else(|e| e.into_inner());
        etags
            .iter()
            .filter(|((c, _), _)| c == controller)
            .map(|(_, cache)| cache.len())
            .sum()
    }

    /// Drops all ETag caches of a controller (e.g. after it was deleted).
    pub fn forget_controller(&self, controller: &str) {
        let mut etags = self.inner.etags.lock().unwrap_or_else(|e| e.into_inner());
        etags.retain(|(c, _), _| c != controller);
    }

    /// Number of ETag entries cached for a controller's hook (for tests and diagnostics).
    pub fn etag_entries(&self, controller: &str, hook_name: &str) -> usize {
        let etags = self.inner.etags.lock().unwrap_or_else(|e| e.into_inner());
        etags
            .get(&(controller.to_owned(), hook_name.to_owned()))
            .map_or(0, |cache| cache.len())
    }

    /// Number of pooled clients with non-default TLS material (for tests and diagnostics).
    pub fn tls_client_count(&self) -> usize {
        self.inner.webhook.pool.len()
    }

    fn etag_cache(&self, ctx: &CallContext<'_>, settings: EtagSettings) -> Arc<EtagCache> {
        let mut etags = self.inner.etags.lock().unwrap_or_else(|e| e.into_inner());
        let key = (ctx.controller.to_owned(), ctx.hook_name.to_owned());
        match etags.get(&key) {
            Some(cache) if cache.settings() == settings => cache.clone(),
            // New hook, or its ETag settings changed: start a fresh cache.
            _ => {
                let cache = EtagCache::new(settings);
                etags.insert(key, cache.clone());
                cache
            }
        }
    }
}

/// The ConfigMap holding an in-process hook's code, if it has one.
pub fn code_config_map(hook: &Hook) -> Option<&CodeConfigMapReference> {
    match hook.runtime()? {
        HookRuntime::Jsonnet(jsonnet) => Some(&jsonnet.config_map_ref),
        HookRuntime::Wasm(wasm) => wasm.config_map_ref.as_ref(),
        HookRuntime::Webhook(_) => None,
    }
}

/// The timeout of a call to `runtime`: the deadline its runtime must answer by is taken
/// from it once, when the call starts.
fn call_timeout(runtime: &HookRuntime<'_>, shown: &str) -> Result<Duration, HookError> {
    match runtime {
        HookRuntime::Webhook(webhook) => hook_timeout(webhook),
        in_process => crate::inprocess::timeout_of(in_process, shown),
    }
}

/// Puts the call's outcome on its span (only while tracing: the log layer would format the
/// fields into every `hook_call` span for nobody); a failed call marks the span as an error
/// for OpenTelemetry.
fn record_outcome(span: &tracing::Span, outcome: &str, ok: bool) {
    if span.is_disabled() {
        return;
    }
    span.record("outcome", outcome);
    span.record("otel.status_code", if ok { "ok" } else { "error" });
}

/// Decodes with the api crate's decoder. Loose mode first tries serde directly: for a
/// well-formed body that gives the same value (unknown fields ignored) without the
/// decoder's detour through `serde_json::Value`; anything serde rejects (duplicates,
/// `null` bodies, type errors) goes through the full decoder for Go semantics and a
/// path-naming error.
fn decode<T: DeserializeOwned + Default>(
    body: &[u8],
    mode: ResponseUnmarshallMode,
) -> Result<T, DecodeError> {
    if mode == ResponseUnmarshallMode::Loose {
        if let Ok(value) = serde_json::from_slice(body) {
            return Ok(value);
        }
    }
    decode_response(body, mode)
}

/// A decoded hook response ([`HookClient::answer`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer<T> {
    /// The response.
    pub response: T,
    /// Whether it is the ETag cache's (the hook answered 304 or 412 to `If-None-Match`).
    pub cached: bool,
}

/// One exchange as the runtime left it: the hook as shown, the body (and whether it is
/// the ETag cache's) or the error, and what a recording shows of the answer.
struct Exchanged {
    shown: String,
    result: Result<(Bytes, bool), HookError>,
    recorded: Option<RecordedResponse>,
    error: Option<String>,
}

/// An exchange being recorded: the request body (shared with the request, not copied)
/// and when the call started.
struct Recording<'a> {
    recorder: &'a Arc<dyn HookRecorder>,
    request: Bytes,
    started_at: SystemTime,
    started: Instant,
}

impl<'a> Recording<'a> {
    /// Starts recording a call sending `request` now.
    fn start(recorder: &'a Arc<dyn HookRecorder>, request: Bytes) -> Self {
        Self {
            recorder,
            request,
            started_at: SystemTime::now(),
            started: Instant::now(),
        }
    }
}

/// The JSON request body.
fn encode_request<Req: Serialize + ?Sized>(request: &Req) -> Result<Bytes, HookError> {
    let body = serde_json::to_vec(request).map_err(|err| HookError::Encode {
        message: err.to_string(),
    })?;
    Ok(Bytes::from(body))
}

/// The result of an exchange that got a usable answer: the body and whether it is the
/// cached one. A fresh body replaces the cache entry under its
/// ETag (a body without ETag drops the entry); a 304/412 answers with the cached body.
fn finish(
    fetched: Fetched,
    target: Target,
    etag_cache: Option<&EtagCache>,
    parent_key: &str,
    cached: Option<CachedResponse>,
) -> Result<(Bytes, bool), HookError> {
    let secrets = &target.secrets;
    match fetched {
        Fetched::Fresh { body, etag } => {
            tracing::trace!(body = %secrets.scrub_body(&body), "hook response");
            if let Some(cache) = etag_cache {
                match etag {
                    Some(tag) => cache.put(target.url.as_str(), parent_key, tag, body.clone()),
                    None => cache.remove(target.url.as_str(), parent_key),
                }
            }
            Ok((body, false))
        }
        Fetched::NotModified { .. } => {
            let Some(entry) = cached else {
                unreachable!("304/412 is only accepted with a cached entry")
            };
            tracing::debug!("hook response not modified; using the cached body");
            tracing::trace!(body = %secrets.scrub_body(&entry.body), "hook response (cached)");
            Ok((entry.body, true))
        }
    }
}

/// The status and body of an exchange for a recording: the body read, the cached body a
/// 304/412 stands for, or the (scrubbed) prefix of a refused call's body.
fn recorded_response(
    fetched: &Result<Fetched, HookError>,
    cached: Option<&Bytes>,
) -> Option<RecordedResponse> {
    let (status, body) = match fetched {
        Ok(Fetched::Fresh { body, .. }) => (200, body.clone()),
        Ok(Fetched::NotModified { status }) => (*status, cached.cloned().unwrap_or_default()),
        Err(HookError::Status { status, body, .. }) => (*status, Bytes::from(body.clone())),
        Err(HookError::TooManyRequests { .. }) => (429, Bytes::new()),
        Err(HookError::Oversize { .. }) => (200, Bytes::new()),
        Err(_) => return None,
    };
    Some(RecordedResponse { status, body })
}

/// The error of a recording: set when no usable body arrived (a refused status is in the
/// response itself).
fn recorded_error(err: &HookError) -> Option<String> {
    match err {
        HookError::Status { .. } | HookError::TooManyRequests { .. } => None,
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_fast_path_agrees_with_the_full_decoder() {
        use metacontroller_api::wire::CompositeHookResponse;
        let bodies: [&[u8]; 7] = [
            br#"{"status":{"a":1},"children":[{"kind":"Pod"}],"extra":true}"#,
            br#"{"status":{"a":1},"status":{"a":2}}"#,
            br#"{"children":null,"resyncAfterSeconds":1.5}"#,
            b"null",
            br#"{"children":"nope"}"#,
            b"{oops",
            br#"{"status":{"x":1,"x":2}}"#,
        ];
        for body in bodies {
            for mode in [
                ResponseUnmarshallMode::Loose,
                ResponseUnmarshallMode::Strict,
            ] {
                let fast = decode::<CompositeHookResponse>(body, mode);
                let full = decode_response::<CompositeHookResponse>(body, mode);
                assert_eq!(fast, full, "{}", String::from_utf8_lossy(body));
            }
        }
    }
}
