//! The spans of a sync, for tracing (see docs/src/tracing.md): one `sync` span per sync with
//! the hook call (`hook_call`, from the hooks crate), each API write (`write`) and the status
//! write (`status_write`) below it, each with its outcome and HTTP status.
//!
//! They are DEBUG spans: at the default log level no layer wants them unless OpenTelemetry
//! tracing is on, so with tracing off a callsite costs one cached interest check and nothing
//! is allocated or recorded.

use std::fmt::Display;
use std::future::Future;

use metacontroller_dynamic::{ApiResource, ObjectKey};
use tracing::field::Empty;
use tracing::{Instrument as _, Span};

/// The span of one sync of `key` by `controller`. The caller records `trigger`: why the key
/// was queued as far as the queue knows it (`retry` after a failure, else `change`).
pub(crate) fn sync_span(
    controller_type: &'static str,
    controller: &str,
    key: &dyn Display,
) -> Span {
    tracing::debug_span!(
        "sync",
        controller_type,
        controller,
        parent = %key,
        trigger = Empty,
        outcome = Empty,
        error = Empty,
        otel.status_code = Empty,
    )
}

/// Records a sync's result on its span: `outcome` is `success` or `error` (with the error's
/// text), and a failure marks the span as an error for OpenTelemetry.
pub(crate) fn record_sync<E: Display>(span: &Span, result: &Result<(), E>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(()) => {
            span.record("outcome", "success");
            span.record("otel.status_code", "ok");
        }
        Err(error) => {
            span.record("outcome", "error");
            span.record("error", tracing::field::display(error));
            span.record("otel.status_code", "error");
        }
    }
}

/// What a write does, as the `verb` of its span.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Verb {
    Create,
    Update,
    UpdateStatus,
    Apply,
    Delete,
}

impl Verb {
    fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::UpdateStatus => "update_status",
            Verb::Apply => "apply",
            Verb::Delete => "delete",
        }
    }
}

/// A write span named `$name` (span names must be literals).
macro_rules! write_span {
    ($name:literal, $verb:expr, $res:expr, $key:expr) => {
        tracing::debug_span!(
            $name,
            verb = $verb.as_str(),
            kind = %$res.kind,
            namespace = %$key.namespace,
            name = %$key.name,
            outcome = Empty,
            http.response.status_code = Empty,
            otel.status_code = Empty,
        )
    };
}

/// Runs one API write inside its span (`status_write` for `/status`, else `write`) and
/// records its outcome and HTTP status (2xx on success, the API's code on an API error).
pub(crate) async fn traced_write<T>(
    verb: Verb,
    res: &ApiResource,
    key: &ObjectKey,
    write: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    let span = match verb {
        Verb::UpdateStatus => write_span!("status_write", verb, res, key),
        _ => write_span!("write", verb, res, key),
    };
    if span.is_disabled() {
        return write.await;
    }
    let result = write.instrument(span.clone()).await;
    let (outcome, code) = match &result {
        Ok(_) => (
            "success",
            Some(if matches!(verb, Verb::Create) {
                201
            } else {
                200
            }),
        ),
        Err(kube::Error::Api(status)) => ("error", Some(status.code)),
        Err(_) => ("error", None),
    };
    span.record("outcome", outcome);
    if let Some(code) = code {
        span.record("http.response.status_code", code);
    }
    span.record(
        "otel.status_code",
        if result.is_ok() { "ok" } else { "error" },
    );
    result
}
