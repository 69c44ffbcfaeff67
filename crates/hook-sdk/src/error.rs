//! The error a hook handler returns: rendered as HTTP 500 (or the status it carries)
//! with a JSON `{"message": ...}` body.

use std::fmt;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// An error answered to Metacontroller as a JSON body `{"message": "..."}`.
///
/// Any `std::error::Error` converts into it with `?`; use [`Error::msg`] for a plain
/// message. Like `anyhow::Error`, it does not implement `std::error::Error` itself (so
/// that blanket conversion can exist).
pub struct Error {
    status: StatusCode,
    message: String,
}

impl Error {
    /// A 500 error with this message.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.to_string(),
        }
    }

    /// An error answered with another status (e.g. 400 for a request the hook rejects).
    pub fn with_status(status: StatusCode, message: impl fmt::Display) -> Self {
        Self {
            status,
            message: message.to_string(),
        }
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The message sent in the body.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl<E: std::error::Error> From<E> for Error {
    fn from(err: E) -> Self {
        // Include the causes: the top-level message alone is often "request failed".
        let mut message = err.to_string();
        let mut source = err.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self::msg(message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.status)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "message": self.message });
        (self.status, Json(body)).into_response()
    }
}
