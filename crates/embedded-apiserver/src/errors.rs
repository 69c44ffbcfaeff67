//! API errors rendered as `meta/v1 Status` objects with the reason, code and
//! details kube-apiserver uses.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// One entry of `Status.details.causes`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// e.g. `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`.
    pub reason: String,
    pub message: String,
    /// Field path such as `metadata.name` or `spec.replicas`.
    pub field: String,
}

/// An error answered to the client as a `Status`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

/// `group` is empty for the core group; details carry the group as Kubernetes does.
fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut d = json!({ "name": name, "kind": kind });
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

/// `resource` / `resource.group` as used in messages.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl ApiError {
    fn new(code: u16, reason: &str, message: String, details: Option<Value>) -> Self {
        ApiError {
            code,
            reason: reason.into(),
            message,
            details,
        }
    }

    /// 404 `<resource> "<name>" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", qualified(group, resource), name),
            Some(details(name, group, resource)),
        )
    }

    /// 404 for a path that names no served resource.
    pub fn not_found_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
            None,
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", qualified(group, resource), name),
            Some(details(name, group, resource)),
        )
    }

    /// 409 Conflict with the standard optimistic-locking message.
    pub fn conflict_modified(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict `Operation cannot be fulfilled on <res> "<name>": <why>`.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                qualified(group, resource),
                name,
                why
            ),
            Some(details(name, group, resource)),
        )
    }

    /// 422 Invalid with field causes.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let msgs: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let joined = if msgs.len() == 1 {
            msgs[0].clone()
        } else {
            format!("[{}]", msgs.join(", "))
        };
        let mut d = details(name, group, kind);
        d["causes"] = Value::Array(
            causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect(),
        );
        Self::new(
            422,
            "Invalid",
            format!(
                "{} \"{}\" is invalid: {}",
                qualified(group, kind),
                name,
                joined
            ),
            Some(d),
        )
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into(), None)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message.into(), None)
    }

    /// 415 UnsupportedMediaType for a patch type the resource does not accept.
    pub fn unsupported_patch_type(strategic_allowed: bool) -> Self {
        let types = if strategic_allowed {
            "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
        } else {
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        };
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: {types}"),
            None,
        )
    }

    /// 415 UnsupportedMediaType for a body encoding we do not decode.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {content_type})"),
            None,
        )
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message.into(), None)
    }

    /// 410 Gone (watch from a compacted resourceVersion).
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Gone", message.into(), None)
    }

    /// 410 Expired (list continue token too old).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message.into(), None)
    }

    /// 403 Forbidden.
    pub fn forbidden(group: &str, resource: &str, name: &str, message: String) -> Self {
        Self::new(
            403,
            "Forbidden",
            message,
            Some(details(name, group, resource)),
        )
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".into(), None)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message.into(), None)
    }

    /// Fault injected by the test-control handle.
    pub fn injected(code: u16) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Gone",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self::new(code, reason, format!("injected fault ({code})"), None)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (code, axum::Json(self.to_status())).into_response();
        if self.code == 429 {
            resp.headers_mut()
                .insert("Retry-After", axum::http::HeaderValue::from_static("1"));
        }
        resp
    }
}

/// `Result` alias for API operations.
pub type ApiResult<T> = Result<T, ApiError>;
