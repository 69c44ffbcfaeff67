//! The webhook transport: the HTTP side of a hook call and nothing else. It resolves where a
//! call goes and with which credentials and TLS material, POSTs the request on the pooled
//! client for that material (retrying only what certainly did not reach the hook), and reads
//! the status and the body under the size limit, all before the call's deadline. Metrics,
//! recording, ETags and decoding wrap every runtime alike in [`crate::call`].

use std::error::Error as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use metacontroller_api::hook::EndpointConfig;
use reqwest::header::{
    HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_NONE_MATCH, RETRY_AFTER,
    TRANSFER_ENCODING,
};
use reqwest::Url;

use crate::call::REPLICA_HEADER;
use crate::credentials::{self, AuthHeader, ResolvedSettings, Sources};
use crate::error::HookError;
use crate::etag::CachedResponse;
use crate::metrics::{CallLabels, HookMetrics};
use crate::pool::{ClientPool, OverrideDns};
use crate::record::RecordedResponse;
use crate::retry::{self, Backoff};
use crate::target::{display_url, hook_url, Deadline, HostResolver};
use crate::trace::TracePropagator;

/// How much of a non-200 body goes into [`HookError::Status`].
pub const STATUS_BODY_PREFIX_BYTES: usize = 1024;

/// Sends webhook calls: the pooled clients and what every request carries.
pub(crate) struct WebhookTransport {
    pub(crate) pool: ClientPool,
    pub(crate) resolver: Option<Arc<dyn HostResolver>>,
    pub(crate) dns: Option<Arc<OverrideDns>>,
    pub(crate) sources: Sources,
    pub(crate) max_body_bytes: usize,
    pub(crate) replica: Option<HeaderValue>,
    pub(crate) trace: Option<Arc<dyn TracePropagator>>,
}

impl WebhookTransport {
    /// Where a call to `webhook` goes (its URL, shown on the current span, and timeout) and
    /// the credentials and TLS settings it uses (Secrets and ConfigMaps read); the transfer
    /// ends by `deadline`, which the caller took from the hook's timeout.
    pub(crate) async fn resolve(
        &self,
        webhook: &metacontroller_api::hook::Webhook,
        endpoint_configs: &[EndpointConfig],
        deadline: Deadline,
    ) -> Result<(Target, ResolvedSettings), HookError> {
        let url = hook_url(webhook)?;
        let shown = display_url(&url);
        tracing::Span::current().record("url", shown.as_str());
        let settings = match credentials::select(webhook, &url, endpoint_configs) {
            Some(selected) => credentials::resolve(&selected, &self.sources).await?,
            None => ResolvedSettings::default(),
        };
        let secrets = Redactor::new(settings.auth.as_ref(), &url);
        let target = Target {
            url,
            shown,
            timeout: deadline.timeout,
            deadline: deadline.at,
            secrets,
        };
        Ok((target, settings))
    }

    /// POSTs `body` to `target` with the credentials and TLS material of `settings`
    /// (offering `cached`'s ETag), and reads the answer before the target's deadline.
    pub(crate) async fn send(
        &self,
        metrics: &HookMetrics,
        labels: &CallLabels<'_>,
        target: &Target,
        settings: &ResolvedSettings,
        body: Bytes,
        cached: Option<&CachedResponse>,
    ) -> Result<Fetched, HookError> {
        let client = self.pool.client(&settings.tls)?;
        let connect_url = self.route(&target.url);
        let request =
            self.build_request(&client, connect_url, body, settings.auth.as_ref(), cached);
        self.transfer(metrics, labels, request, target, cached.is_some())
            .await
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
        if let Some(replica) = &self.replica {
            builder = builder.header(REPLICA_HEADER, replica.clone());
        }
        if let Some(entry) = cached {
            if let Ok(value) = HeaderValue::from_str(&entry.etag) {
                builder = builder.header(IF_NONE_MATCH, value);
            }
        }
        if let Some(trace) = &self.trace {
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
        metrics: &HookMetrics,
        labels: &CallLabels<'_>,
        request: reqwest::RequestBuilder,
        target: &Target,
        offered_etag: bool,
    ) -> Result<Fetched, HookError> {
        let max_body = self.max_body_bytes;
        let transfer = async {
            let (response, sent) = self
                .send_with_retries(metrics, labels, request, target)
                .await?;
            let status = response.status().as_u16();
            if self.trace.is_some() {
                tracing::Span::current().record("http.response.status_code", status);
            }
            metrics.observe_response(labels, status, sent.elapsed());
            read_response(response, status, max_body, target, offered_etag).await
        };
        match tokio::time::timeout_at(target.deadline.into(), transfer).await {
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
        metrics: &HookMetrics,
        labels: &CallLabels<'_>,
        mut request: reqwest::RequestBuilder,
        target: &Target,
    ) -> Result<(reqwest::Response, Instant), HookError> {
        // The caller's timeout stops everything at this point; retrying stops before it so
        // the call fails with the connect error rather than a bare timeout.
        let deadline = target.deadline;
        let mut backoff = Backoff::new();
        loop {
            // A body that cannot be cloned (never ours: it is always bytes) is sent once.
            let spare = request.try_clone();
            let sent = Instant::now();
            let in_flight = metrics.start_request(labels);
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
                    metrics.observe_retry(labels, reason);
                    tokio::time::sleep(delay).await;
                    request = spare;
                }
                _ => return Err(transport_error(&target.shown, target.timeout, err)),
            }
        }
    }

    /// The URL to connect to: the hook URL, or its host and port replaced as the host
    /// resolver says. Host names stay in the URL (for TLS), routed by the DNS override.
    fn route(&self, url: &Url) -> Url {
        let (Some(resolver), Some(host), Some(port)) = (
            self.resolver.as_ref(),
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
                if let Some(dns) = &self.dns {
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
}

pub(crate) enum Fetched {
    /// A 200 answer: its body and ETag.
    Fresh { body: Bytes, etag: Option<String> },
    /// A 304/412 answer to `If-None-Match`: the cached body stands for it.
    NotModified { status: u16 },
}

/// Where one call goes, as resolved before anything is sent.
pub(crate) struct Target {
    /// The hook URL as configured (also the ETag cache key).
    pub(crate) url: Url,
    /// The URL as shown in errors, logs, metrics and recordings.
    pub(crate) shown: String,
    /// The hook's timeout, as errors name it.
    pub(crate) timeout: Duration,
    /// When the call's timeout ends (set by the caller for the whole call).
    pub(crate) deadline: Instant,
    /// Scrubs the call's credentials from anything shown.
    pub(crate) secrets: Redactor,
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
pub(crate) struct Redactor {
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
    pub(crate) fn scrub_recorded(&self, mut response: RecordedResponse) -> RecordedResponse {
        if !self.needles.is_empty() {
            response.body = Bytes::from(self.scrub(&response.body));
        }
        response
    }

    pub(crate) fn scrub(&self, bytes: &[u8]) -> String {
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
    pub(crate) fn scrub_body(&self, bytes: &[u8]) -> String {
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
