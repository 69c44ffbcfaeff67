//! The hook client: one call = resolve target and credentials, pick the pooled client for
//! the TLS material, POST the JSON request, check status and size, decode the response.

use std::collections::HashMap;
use std::error::Error as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use metacontroller_api::hook::{
    CodeConfigMapReference, EndpointConfig, Hook, HookRuntime, ResponseUnmarshallMode,
};
use metacontroller_api::wire::{decode_response, DecodeError};
use prometheus::Registry;
use reqwest::header::{
    HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_NONE_MATCH, RETRY_AFTER,
    TRANSFER_ENCODING,
};
use reqwest::Url;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument as _;

use crate::credentials::{self, AuthHeader, ResolvedSettings, Sources};
use crate::error::HookError;
use crate::etag::{CachedResponse, EtagCache, EtagSettings};
use crate::inprocess::jsonnet_pool::JsonnetPoolConfig;
use crate::inprocess::{InProcess, InProcessLimits};
use crate::metrics::{CallLabels, HookMetrics, OUTCOME_CACHED, OUTCOME_SUCCESS};
use crate::pool::{ClientPool, OverrideDns};
use crate::record::{HookRecorder, RecordedExchange, RecordedResponse};
use crate::retry::{self, Backoff};
use crate::sources::{CodeChange, CodeSource, ConfigMapSource, SecretSource};
use crate::target::{display_url, hook_timeout, hook_url, HostResolver};
use crate::trace::TracePropagator;

/// Default limit of a response body: 16 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// How much of a non-200 body goes into [`HookError::Status`].
pub const STATUS_BODY_PREFIX_BYTES: usize = 1024;

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
    pool: ClientPool,
    resolver: Option<Arc<dyn HostResolver>>,
    dns: Option<Arc<OverrideDns>>,
    sources: Sources,
    max_body_bytes: usize,
    metrics: HookMetrics,
    etags: Mutex<HashMap<(String, String), Arc<EtagCache>>>,
    replica: Option<HeaderValue>,
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
                pool: ClientPool::new(dns.clone())?,
                resolver: config.host_resolver,
                dns,
                sources: Sources {
                    secrets: config.secrets,
                    config_maps: config.config_maps,
                },
                max_body_bytes: config.max_body_bytes,
                metrics: HookMetrics::new(config.registry.as_ref())?,
                etags: Mutex::new(HashMap::new()),
                replica: config
                    .replica
                    .as_deref()
                    .and_then(|r| HeaderValue::from_str(r).ok()),
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
            let (body, url, cached) = match &runtime {
                Some(HookRuntime::Webhook(_)) | None => {
                    self.exchange(ctx, &labels, hook, endpoint_configs, request)
                        .await?
                }
                Some(in_process) => (
                    self.run_in_process(ctx, &labels, in_process, request)
                        .await?,
                    shown_url.clone(),
                    false,
                ),
            };
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

    /// Runs an in-process hook on the encoded request, with the metrics, span field and
    /// recording of a webhook call (a success counts as status 200, a failure as 500, as
    /// jsonnetd answered).
    async fn run_in_process<Req: Serialize + ?Sized>(
        &self,
        ctx: &CallContext<'_>,
        labels: &CallLabels<'_>,
        runtime: &HookRuntime<'_>,
        request: &Req,
    ) -> Result<Bytes, HookError> {
        tracing::Span::current().record("url", labels.url);
        let body = encode_request(request)?;
        let recording = self
            .inner
            .recorder
            .as_ref()
            .map(|recorder| Recording::start(recorder, body.clone()));
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
            )
            .await;
        drop(in_flight);
        let status = if result.is_ok() { 200 } else { 500 };
        self.inner
            .metrics
            .observe_response(labels, status, sent.elapsed());
        if let Some(recording) = recording {
            recording.recorder.record(RecordedExchange {
                controller_kind: self.controller_type,
                controller: ctx.controller.to_owned(),
                hook: ctx.hook_name.to_owned(),
                parent_key: ctx.parent_key.to_owned(),
                url: labels.url.to_owned(),
                started_at: recording.started_at,
                duration: recording.started.elapsed(),
                request: recording.request,
                response: result.as_ref().ok().map(|body| RecordedResponse {
                    status: 200,
                    body: body.clone(),
                }),
                error: result.as_ref().err().map(ToString::to_string),
            });
        }
        result
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
        self.inner.pool.len()
    }

    /// Sends the request; returns the response body, the hook URL as shown in messages,
    /// and whether the body came from the ETag cache.
    async fn exchange<Req: Serialize + ?Sized>(
        &self,
        ctx: &CallContext<'_>,
        labels: &CallLabels<'_>,
        hook: &Hook,
        endpoint_configs: &[EndpointConfig],
        request: &Req,
    ) -> Result<(Bytes, String, bool), HookError> {
        let webhook = hook
            .webhook
            .as_ref()
            .ok_or_else(|| HookError::config("hook has no webhook"))?;
        let (target, settings) = self.resolve(webhook, endpoint_configs).await?;
        let client = self.inner.pool.client(&settings.tls)?;
        let connect_url = self.route(&target.url);

        let body = encode_request(request)?;
        tracing::trace!(body = %target.secrets.scrub_body(&body), "hook request");

        let etag_cache = EtagSettings::from_config(webhook.etag.as_ref())
            .map(|settings| self.etag_cache(ctx, settings));
        let cached = etag_cache
            .as_ref()
            .and_then(|cache| cache.get(target.url.as_str(), ctx.parent_key));

        // A recording shares the body buffer (no copy); nothing is kept when off.
        let recording = self
            .inner
            .recorder
            .as_ref()
            .map(|recorder| Recording::start(recorder, body.clone()));
        let request = self.build_request(
            &client,
            connect_url,
            body,
            settings.auth.as_ref(),
            cached.as_ref(),
        );
        let fetched = self
            .transfer(labels, request, &target, cached.is_some())
            .await;
        if let Some(recording) = recording {
            self.record(ctx, recording, &target, &fetched, cached.as_ref());
        }
        finish(
            fetched?,
            target,
            etag_cache.as_deref(),
            ctx.parent_key,
            cached,
        )
    }

    /// Where a call to `webhook` goes (its URL, shown on the current span, and timeout) and
    /// the credentials and TLS settings it uses (Secrets and ConfigMaps read).
    async fn resolve(
        &self,
        webhook: &metacontroller_api::hook::Webhook,
        endpoint_configs: &[EndpointConfig],
    ) -> Result<(Target, ResolvedSettings), HookError> {
        let url = hook_url(webhook)?;
        let shown = display_url(&url);
        tracing::Span::current().record("url", shown.as_str());
        let timeout = hook_timeout(webhook)?;
        let settings = match credentials::select(webhook, &url, endpoint_configs) {
            Some(selected) => credentials::resolve(&selected, &self.inner.sources).await?,
            None => ResolvedSettings::default(),
        };
        let secrets = Redactor::new(settings.auth.as_ref(), &url);
        let target = Target {
            url,
            shown,
            timeout,
            secrets,
        };
        Ok((target, settings))
    }

    /// The POST of `body` to `connect_url` with the call's headers: content type, the
    /// credentials' `Authorization`, the replica name, `If-None-Match` with the cached
    /// ETag (when it is a valid header value) and the trace context.
    fn build_request(
        &self,
        client: &reqwest::Client,
        connect_url: Url,
        body: Bytes,
        auth: Option<&AuthHeader>,
        cached: Option<&CachedResponse>,
    ) -> reqwest::RequestBuilder {
        let mut builder = client
            .post(connect_url)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body);
        if let Some(auth) = auth {
            builder = builder.header(AUTHORIZATION, auth.header_value().clone());
        }
        if let Some(replica) = &self.inner.replica {
            builder = builder.header(REPLICA_HEADER, replica.clone());
        }
        if let Some(entry) = cached {
            if let Ok(value) = HeaderValue::from_str(&entry.etag) {
                builder = builder.header(IF_NONE_MATCH, value);
            }
        }
        if let Some(trace) = &self.inner.trace {
            let mut headers = reqwest::header::HeaderMap::new();
            trace.inject(&mut headers);
            builder = builder.headers(headers);
        }
        builder
    }

    /// Sends the request and reads the response, all within the hook's timeout. The
    /// in-flight gauge covers the send; the response metrics (and, while tracing, the
    /// span's status code) are set as soon as the status is known, before the body is read.
    async fn transfer(
        &self,
        labels: &CallLabels<'_>,
        request: reqwest::RequestBuilder,
        target: &Target,
        offered_etag: bool,
    ) -> Result<Fetched, HookError> {
        let max_body = self.inner.max_body_bytes;
        let transfer = async {
            let (response, sent) = self.send_with_retries(labels, request, target).await?;
            let status = response.status().as_u16();
            if self.inner.trace.is_some() {
                tracing::Span::current().record("http.response.status_code", status);
            }
            self.inner
                .metrics
                .observe_response(labels, status, sent.elapsed());
            read_response(response, status, max_body, target, offered_etag).await
        };
        match tokio::time::timeout(target.timeout, transfer).await {
            Ok(result) => result,
            Err(_) => Err(HookError::Timeout {
                url: target.shown.clone(),
                timeout: target.timeout,
            }),
        }
    }

    /// Sends the request, again after a short backoff as long as it certainly did not
    /// reach the hook ([`crate::retry`]); the caller's timeout bounds all attempts. Returns
    /// the response headers and when the answered attempt was sent.
    async fn send_with_retries(
        &self,
        labels: &CallLabels<'_>,
        mut request: reqwest::RequestBuilder,
        target: &Target,
    ) -> Result<(reqwest::Response, Instant), HookError> {
        // The caller's timeout stops everything at this point; retrying stops before it so
        // the call fails with the connect error rather than a bare timeout.
        let deadline = Instant::now() + target.timeout;
        let mut backoff = Backoff::new();
        loop {
            // A body that cannot be cloned (never ours: it is always bytes) is sent once.
            let spare = request.try_clone();
            let sent = Instant::now();
            let in_flight = self.inner.metrics.start_request(labels);
            let result = request.send().await;
            drop(in_flight);
            let err = match result {
                Ok(response) => return Ok((response, sent)),
                Err(err) => err,
            };
            let delay = backoff.next_delay();
            let in_time = Instant::now() + delay < deadline;
            match (retry::retry_reason(&err), spare) {
                (Some(reason), Some(spare)) if in_time => {
                    tracing::debug!(error = %err.without_url(), reason, ?delay, "hook not reachable; retrying");
                    self.inner.metrics.observe_retry(labels, reason);
                    tokio::time::sleep(delay).await;
                    request = spare;
                }
                _ => return Err(transport_error(&target.shown, target.timeout, err)),
            }
        }
    }

    /// Hands the finished exchange to the recorder: the request as sent, the response
    /// (the cached body for a 304/412) with the call's credentials scrubbed, and the error
    /// when no usable body arrived.
    fn record(
        &self,
        ctx: &CallContext<'_>,
        recording: Recording<'_>,
        target: &Target,
        fetched: &Result<Fetched, HookError>,
        cached: Option<&CachedResponse>,
    ) {
        recording.recorder.record(RecordedExchange {
            controller_kind: self.controller_type,
            controller: ctx.controller.to_owned(),
            hook: ctx.hook_name.to_owned(),
            parent_key: ctx.parent_key.to_owned(),
            url: target.shown.clone(),
            started_at: recording.started_at,
            duration: recording.started.elapsed(),
            request: recording.request,
            response: recorded_response(fetched, cached.map(|c| &c.body))
                .map(|response| target.secrets.scrub_recorded(response)),
            error: fetched.as_ref().err().and_then(recorded_error),
        });
    }

    /// The URL to connect to: the hook URL, or its host and port replaced as the host
    /// resolver says. Host names stay in the URL (for TLS), routed by the DNS override.
    fn route(&self, url: &Url) -> Url {
        let (Some(resolver), Some(host), Some(port)) = (
            self.inner.resolver.as_ref(),
            url.host_str(),
            url.port_or_known_default(),
        ) else {
            return url.clone();
        };
        let bare_host = host.trim_start_matches('[').trim_end_matches(']');
        let Some(addr) = resolver.resolve(bare_host, port) else {
            return url.clone();
        };
        let mut routed = url.clone();
        match url.domain() {
            Some(name) => {
                if let Some(dns) = &self.inner.dns {
                    dns.set(name, addr.ip());
                }
            }
            None => {
                let _ = routed.set_ip_host(addr.ip());
            }
        }
        let _ = routed.set_port(Some(addr.port()));
        routed
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

enum Fetched {
    Fresh { body: Bytes, etag: Option<String> },
    NotModified { status: u16 },
}

/// Where one call goes, as resolved before anything is sent.
struct Target {
    /// The hook URL as configured (also the ETag cache key).
    url: Url,
    /// The URL as shown in errors, logs, metrics and recordings.
    shown: String,
    /// The hook's timeout for the whole transfer.
    timeout: Duration,
    /// Scrubs the call's credentials from anything shown.
    secrets: Redactor,
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

/// What a response with `status` brings: a 200 body (up to `max_body`) with its ETag, a
/// 304/412 standing for the cached body (only when one was offered with `If-None-Match`),
/// or the error for any other status (with the scrubbed start of its body).
async fn read_response(
    response: reqwest::Response,
    status: u16,
    max_body: usize,
    target: &Target,
    offered_etag: bool,
) -> Result<Fetched, HookError> {
    match status {
        200 => {
            let etag = response
                .headers()
                .get(ETAG)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = read_body(response, max_body, &target.shown, target.timeout).await?;
            Ok(Fetched::Fresh { body, etag })
        }
        304 | 412 if offered_etag => {
            // Read the (normally empty) body so the connection can be reused.
            let _ = read_body(
                response,
                STATUS_BODY_PREFIX_BYTES,
                &target.shown,
                target.timeout,
            )
            .await;
            Ok(Fetched::NotModified { status })
        }
        429 => Err(HookError::TooManyRequests {
            url: target.shown.clone(),
            retry_after: retry_after(response.headers().get(RETRY_AFTER)),
        }),
        _ => {
            let prefix = read_prefix(response, STATUS_BODY_PREFIX_BYTES).await;
            Err(HookError::Status {
                url: target.shown.clone(),
                status,
                body: target.secrets.scrub(&prefix),
            })
        }
    }
}

/// The result of an exchange that got a usable answer: the body, the shown URL and
/// whether the body is the cached one. A fresh body replaces the cache entry under its
/// ETag (a body without ETag drops the entry); a 304/412 answers with the cached body.
fn finish(
    fetched: Fetched,
    target: Target,
    etag_cache: Option<&EtagCache>,
    parent_key: &str,
    cached: Option<CachedResponse>,
) -> Result<(Bytes, String, bool), HookError> {
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
            Ok((body, target.shown, false))
        }
        Fetched::NotModified { .. } => {
            let Some(entry) = cached else {
                unreachable!("304/412 is only accepted with a cached entry")
            };
            tracing::debug!("hook response not modified; using the cached body");
            tracing::trace!(body = %secrets.scrub_body(&entry.body), "hook response (cached)");
            Ok((entry.body, target.shown, true))
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

/// Reads the whole body, failing as soon as it exceeds `limit`.
async fn read_body(
    mut response: reqwest::Response,
    limit: usize,
    url: &str,
    timeout: Duration,
) -> Result<Bytes, HookError> {
    let oversize = || HookError::Oversize {
        url: url.to_owned(),
        limit,
    };
    if response
        .content_length()
        .is_some_and(|len| len > limit as u64)
    {
        return Err(oversize());
    }
    let close_delimited = is_close_delimited(&response);
    let mut first: Option<Bytes> = None;
    let mut rest: Option<BytesMut> = None;
    let mut total = 0usize;
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            // The connection's end is this body's end, and Go's client takes a TCP close
            // without TLS close_notify as that end (Python's ssl-wrapped http.server sends
            // none). A cut-short answer still fails: the JSON must decode completely.
            Err(err) if close_delimited && ended_without_close_notify(&err) => break,
            Err(err) => return Err(transport_error(url, timeout, err)),
        };
        total += chunk.len();
        if total > limit {
            return Err(oversize());
        }
        // One chunk is the common case for small bodies: keep it without copying.
        match (&mut first, &mut rest) {
            (None, _) => first = Some(chunk),
            (Some(head), None) => {
                let mut buf = BytesMut::with_capacity(total.max(head.len() * 2));
                buf.extend_from_slice(head);
                buf.extend_from_slice(&chunk);
                rest = Some(buf);
            }
            (Some(_), Some(buf)) => buf.extend_from_slice(&chunk),
        }
    }
    Ok(match (first, rest) {
        (_, Some(buf)) => buf.freeze(),
        (Some(head), None) => head,
        (None, None) => Bytes::new(),
    })
}

/// Whether the body of `response` ends where the connection ends: HTTP/1 without
/// Content-Length and Transfer-Encoding. Bodies with a length stay strict.
fn is_close_delimited(response: &reqwest::Response) -> bool {
    let headers = response.headers();
    response.version() < reqwest::Version::HTTP_2
        && !headers.contains_key(CONTENT_LENGTH)
        && !headers.contains_key(TRANSFER_ENCODING)
}

/// Whether reading failed because the peer closed the connection without a TLS
/// close_notify (rustls reports that as an unexpected end of file). Only for close-delimited
/// bodies: hyper reports a body cut short of its length or last chunk the same way.
fn ended_without_close_notify(err: &reqwest::Error) -> bool {
    let mut source = err.source();
    while let Some(cause) = source {
        if cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof)
        {
            return true;
        }
        source = cause.source();
    }
    false
}

/// Up to `limit` bytes of the body; transport errors just end the prefix.
async fn read_prefix(mut response: reqwest::Response, limit: usize) -> Vec<u8> {
    let mut prefix = Vec::new();
    while prefix.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let take = chunk.len().min(limit - prefix.len());
                prefix.extend_from_slice(&chunk[..take]);
            }
            _ => break,
        }
    }
    prefix
}

fn transport_error(url: &str, timeout: Duration, err: reqwest::Error) -> HookError {
    if err.is_timeout() {
        return HookError::Timeout {
            url: url.to_owned(),
            timeout,
        };
    }
    // Without the URL: reqwest would print it with any userinfo.
    let err = err.without_url();
    let mut parts = vec![err.to_string()];
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        source = cause.source();
    }
    HookError::Transport {
        url: url.to_owned(),
        message: parts.join(": "),
    }
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(value: Option<&HeaderValue>) -> Option<Duration> {
    let text = value?.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Credentials sent with a call (auth header pieces, URL userinfo password and the Basic
/// pair reqwest derives from it). A server may echo request headers in an error page, and
/// bodies are logged at trace level: both pass through [`Redactor::scrub`].
struct Redactor {
    needles: Vec<String>,
}

impl Redactor {
    fn new(auth: Option<&AuthHeader>, url: &Url) -> Self {
        let mut needles: Vec<String> = auth
            .map(|auth| auth.secret_parts().map(str::to_owned).collect())
            .unwrap_or_default();
        if let Some(password) = url.password() {
            let decoded = percent_decode(password);
            let user = percent_decode(url.username());
            needles.push(
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{decoded}")),
            );
            needles.push(password.to_owned());
            needles.push(decoded);
        }
        needles.retain(|n| !n.is_empty());
        Self { needles }
    }

    /// A recorded response body with the call's credentials scrubbed (in case the
    /// server echoes them); free when the call sent none.
    fn scrub_recorded(&self, mut response: RecordedResponse) -> RecordedResponse {
        if !self.needles.is_empty() {
            response.body = Bytes::from(self.scrub(&response.body));
        }
        response
    }

    fn scrub(&self, bytes: &[u8]) -> String {
        let mut text = String::from_utf8_lossy(bytes).into_owned();
        for needle in &self.needles {
            if text.contains(needle.as_str()) {
                text = text.replace(needle.as_str(), "[REDACTED]");
            }
        }
        text
    }

    /// A JSON body for a trace log line: Secret `data`/`stringData` values redacted, then
    /// the call's credentials scrubbed.
    fn scrub_body(&self, bytes: &[u8]) -> String {
        self.scrub(crate::redact::loggable_body(bytes).as_bytes())
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
            if let Ok(byte) = u8::from_str_radix(hex, 16) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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

    #[test]
    fn redactor_scrubs_url_userinfo_secrets() {
        let url = Url::parse("http://user:p%40ss@host/").unwrap();
        let redactor = Redactor::new(None, &url);
        // base64("user:p@ss") is what reqwest sends as Basic credentials.
        let text = redactor.scrub(b"got p@ss and p%40ss and dXNlcjpwQHNz");
        assert_eq!(text, "got [REDACTED] and [REDACTED] and [REDACTED]");
        assert_eq!(percent_decode("a%2"), "a%2");
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(
            retry_after(Some(&HeaderValue::from_static("7"))),
            Some(Duration::from_secs(7))
        );
        let past = HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT");
        assert_eq!(retry_after(Some(&past)), Some(Duration::ZERO));
        let future =
            httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(120));
        let got = retry_after(Some(&HeaderValue::from_str(&future).unwrap())).unwrap();
        assert!(got > Duration::from_secs(100) && got <= Duration::from_secs(120));
        assert_eq!(retry_after(Some(&HeaderValue::from_static("soon"))), None);
        assert_eq!(retry_after(None), None);
    }
}
