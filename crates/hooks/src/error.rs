//! Errors of a hook call. Messages name the hook URL (without userinfo) and never carry
//! credentials: secret values are not formatted anywhere in this crate.

use std::time::Duration;

use metacontroller_api::wire::DecodeError;

/// Why a hook call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    /// The hook configuration cannot be used: no target, bad URL or timeout, conflicting
    /// auth settings, a missing Secret/ConfigMap or key, unparsable PEM, ...
    #[error("invalid hook configuration: {message}")]
    Config {
        /// What is wrong (names fields and object references, never secret values).
        message: String,
    },
    /// The request body could not be serialized.
    #[error("can't encode hook request: {message}")]
    Encode {
        /// Serializer message.
        message: String,
    },
    /// Connecting, TLS handshake or exchanging the request/response failed.
    #[error("hook {url}: transport error: {message}")]
    Transport {
        /// Hook URL (userinfo removed).
        url: String,
        /// Error chain, outermost first.
        message: String,
    },
    /// No complete response arrived within the hook timeout.
    #[error("hook {url}: no response within {timeout:?}")]
    Timeout {
        /// Hook URL (userinfo removed).
        url: String,
        /// The timeout that elapsed.
        timeout: Duration,
    },
    /// An in-process hook call did not get to run within its timeout: it waited for its
    /// controller's share of in-process hook calls (or the process's), see `message`.
    #[error("hook {hook}: no response within {timeout:?}: {message}")]
    Queued {
        /// The hook as shown in messages.
        hook: String,
        /// The hook's timeout, which the wait used up.
        timeout: Duration,
        /// What it waited for.
        message: String,
    },
    /// The server answered with a status other than 200 (or 304/412 for a cached ETag).
    #[error("hook {url}: unsupported status code {status}, body: {body}")]
    Status {
        /// Hook URL (userinfo removed).
        url: String,
        /// HTTP status code.
        status: u16,
        /// The first bytes of the response body (lossy UTF-8).
        body: String,
    },
    /// The server answered 429 Too Many Requests.
    #[error("hook {url}: too many requests (retry after {retry_after:?})")]
    TooManyRequests {
        /// Hook URL (userinfo removed).
        url: String,
        /// Delay asked for by `Retry-After` (seconds or HTTP date), when present.
        retry_after: Option<Duration>,
    },
    /// The response body exceeded the configured size limit.
    #[error("hook {url}: response body larger than the limit of {}", crate::quantity::quantity(*.limit as u64))]
    Oversize {
        /// Hook URL (userinfo removed).
        url: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// The code of an in-process hook could not be had: a missing ConfigMap or key, bad
    /// base64 or gzip, a SHA-256 mismatch, a download that failed, code that does not
    /// compile or link.
    #[error("hook {hook}: can't load its code: {message}")]
    Code {
        /// The hook as shown in messages (`jsonnet:<namespace>/<name>#<key>`, ...).
        hook: String,
        /// What is wrong.
        message: String,
    },
    /// An in-process hook ran and failed: a Jsonnet error (with file:line), a WebAssembly
    /// trap, a non-zero exit (with the tail of stderr), or its memory limit.
    #[error("hook {hook}: {message}")]
    Failed {
        /// The hook as shown in messages.
        hook: String,
        /// What happened.
        message: String,
    },
    /// The response body is not valid for the response type (or, in strict mode, has
    /// unknown or duplicate fields).
    #[error("hook {url}: can't decode response: {error}")]
    Decode {
        /// Hook URL (userinfo removed).
        url: String,
        /// What was wrong, with the JSON path of the offending field.
        error: DecodeError,
    },
}

impl HookError {
    /// A short stable name of the error kind, used as the metrics `outcome` label.
    pub fn kind(&self) -> &'static str {
        match self {
            HookError::Config { .. } => "config_error",
            HookError::Encode { .. } => "encode_error",
            HookError::Transport { .. } => "transport_error",
            HookError::Timeout { .. } | HookError::Queued { .. } => "timeout",
            HookError::Status { .. } => "status_error",
            HookError::TooManyRequests { .. } => "too_many_requests",
            HookError::Oversize { .. } => "oversize",
            HookError::Decode { .. } => "decode_error",
            HookError::Code { .. } => "code_error",
            HookError::Failed { .. } => "hook_error",
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        HookError::Config {
            message: message.into(),
        }
    }
}
