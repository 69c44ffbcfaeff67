//! Field-level validation errors shaped like apimachinery's `field.Error`.
//!
//! The real API server turns a list of these into a 422 `Status` whose
//! `details.causes[]` carry `reason` (the error type, e.g. `FieldValueRequired`),
//! `message` (the error body without the field) and `field`; the top-level
//! message joins the full `field: body` strings. This module reproduces the
//! exact text so clients (kubectl, kube-rs) see what they would see from
//! kube-apiserver.

use serde_json::Value;
use std::fmt;

/// The machine-readable kind of a field error (`Status.details.causes[].reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldErrorType {
    /// `FieldValueNotFound`
    NotFound,
    /// `FieldValueRequired`
    Required,
    /// `FieldValueDuplicate`
    Duplicate,
    /// `FieldValueInvalid`
    Invalid,
    /// `FieldValueNotSupported`
    NotSupported,
    /// `FieldValueForbidden`
    Forbidden,
    /// `FieldValueTooLong`
    TooLong,
    /// `FieldValueTooMany`
    TooMany,
    /// `InternalError`
    Internal,
    /// `FieldValueTypeInvalid`
    TypeInvalid,
}

impl FieldErrorType {
    /// The cause `reason` string used in `Status.details.causes[]`.
    pub fn reason(self) -> &'static str {
        match self {
            FieldErrorType::NotFound => "FieldValueNotFound",
            FieldErrorType::Required => "FieldValueRequired",
            FieldErrorType::Duplicate => "FieldValueDuplicate",
            FieldErrorType::Invalid => "FieldValueInvalid",
            FieldErrorType::NotSupported => "FieldValueNotSupported",
            FieldErrorType::Forbidden => "FieldValueForbidden",
            FieldErrorType::TooLong => "FieldValueTooLong",
            FieldErrorType::TooMany => "FieldValueTooMany",
            FieldErrorType::Internal => "InternalError",
            FieldErrorType::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// The human-readable prefix of the error body (`Invalid value`, ...).
    pub fn label(self) -> &'static str {
        match self {
            FieldErrorType::NotFound => "Not found",
            FieldErrorType::Required => "Required value",
            FieldErrorType::Duplicate => "Duplicate value",
            FieldErrorType::Invalid | FieldErrorType::TypeInvalid => "Invalid value",
            FieldErrorType::NotSupported => "Unsupported value",
            FieldErrorType::Forbidden => "Forbidden",
            FieldErrorType::TooLong => "Too long",
            FieldErrorType::TooMany => "Too many",
            FieldErrorType::Internal => "Internal error",
        }
    }
}

/// One field error: type, field path (`spec.items[0].name`), the offending
/// value (printed like Go's `field.Error`; `None` omits it) and a detail.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Error type (the cause reason).
    pub error_type: FieldErrorType,
    /// Field path, dotted with `[i]` indices, as the real server prints it.
    pub field: String,
    /// The bad value; `None` means "omitted" (e.g. Too many without a count).
    pub bad_value: Option<Value>,
    /// Free-form detail appended after the value.
    pub detail: String,
}

impl FieldError {
    /// `field.Required(path, detail)`.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            error_type: FieldErrorType::Required,
            field: field.into(),
            bad_value: Some(Value::String(String::new())),
            detail: detail.into(),
        }
    }

    /// `field.Invalid(path, value, detail)`.
    pub fn invalid(field: impl Into<String>, value: Value, detail: impl Into<String>) -> Self {
        FieldError {
            error_type: FieldErrorType::Invalid,
            field: field.into(),
            bad_value: Some(value),
            detail: detail.into(),
        }
    }

    /// `field.TypeInvalid(path, value, detail)`.
    pub fn type_invalid(field: impl Into<String>, value: Value, detail: impl Into<String>) -> Self {
        FieldError {
            error_type: FieldErrorType::TypeInvalid,
            field: field.into(),
            bad_value: Some(value),
            detail: detail.into(),
        }
    }

    /// `field.NotSupported(path, value, validValues)`: each valid value quoted.
    pub fn not_supported(field: impl Into<String>, value: Value, valid: &[String]) -> Self {
        let detail = if valid.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = valid.iter().map(|v| go_quote(v)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        FieldError {
            error_type: FieldErrorType::NotSupported,
            field: field.into(),
            bad_value: Some(value),
            detail,
        }
    }

    /// `field.Duplicate(path, value)`.
    pub fn duplicate(field: impl Into<String>, value: Value) -> Self {
        FieldError {
            error_type: FieldErrorType::Duplicate,
            field: field.into(),
            bad_value: Some(value),
            detail: String::new(),
        }
    }

    /// `field.Forbidden(path, detail)`.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            error_type: FieldErrorType::Forbidden,
            field: field.into(),
            bad_value: Some(Value::String(String::new())),
            detail: detail.into(),
        }
    }

    /// `field.TooLongMaxLength(path, value, max)`.
    pub fn too_long(field: impl Into<String>, value: Value, max: i64) -> Self {
        let detail = if max >= 0 {
            format!("may not be longer than {max}")
        } else {
            "value is too long".to_string()
        };
        FieldError {
            error_type: FieldErrorType::TooLong,
            field: field.into(),
            bad_value: Some(value),
            detail,
        }
    }

    /// `field.TooMany(path, actual, max)`.
    pub fn too_many(field: impl Into<String>, actual: i64, max: i64) -> Self {
        let detail = if max >= 0 {
            format!("must have at most {max} items")
        } else {
            "has too many items".to_string()
        };
        FieldError {
            error_type: FieldErrorType::TooMany,
            field: field.into(),
            bad_value: if actual >= 0 {
                Some(Value::from(actual))
            } else {
                None
            },
            detail,
        }
    }

    /// The cause `reason` (`FieldValueInvalid`, ...).
    pub fn reason(&self) -> &'static str {
        self.error_type.reason()
    }

    /// The error text without the field name (`Status.details.causes[].message`).
    pub fn body(&self) -> String {
        let t = self.error_type;
        let mut s = match (t, &self.bad_value) {
            (
                FieldErrorType::Required
                | FieldErrorType::Forbidden
                | FieldErrorType::TooLong
                | FieldErrorType::Internal,
                _,
            )
            | (_, None) => t.label().to_string(),
            (_, Some(v)) => format!("{}: {}", t.label(), go_value(v)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }

    /// The JSON object for `Status.details.causes[]`.
    pub fn to_cause(&self) -> Value {
        serde_json::json!({
            "reason": self.reason(),
            "message": self.body(),
            "field": self.field,
        })
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// The message of a 422 `Invalid` status as kube-apiserver builds it:
/// `<Kind>.<group> "<name>" is invalid: <err>` for one error, or
/// `... is invalid: [<err1>, <err2>]` for several (duplicates collapsed).
pub fn invalid_message(qualified_kind: &str, name: &str, errors: &[FieldError]) -> String {
    let mut seen = Vec::<String>::new();
    for e in errors {
        let s = e.to_string();
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    let joined = if seen.len() == 1 {
        seen.remove(0)
    } else {
        format!("[{}]", seen.join(", "))
    };
    format!("{qualified_kind} \"{name}\" is invalid: {joined}")
}

/// The whole 422 `Status` body of `errors.NewInvalid(GroupKind, name, errs)`:
/// message as [`invalid_message`] with `Kind.group` (just `Kind` for the core
/// group), `reason: Invalid`, details with name/group/kind and one cause per
/// error.
pub fn invalid_status(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Value {
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let mut details = serde_json::Map::new();
    details.insert("name".into(), Value::String(name.to_string()));
    if !group.is_empty() {
        details.insert("group".into(), Value::String(group.to_string()));
    }
    details.insert("kind".into(), Value::String(kind.to_string()));
    details.insert(
        "causes".into(),
        Value::Array(errors.iter().map(FieldError::to_cause).collect()),
    );
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": invalid_message(&qualified, name, errors),
        "reason": "Invalid",
        "details": Value::Object(details),
        "code": 422
    })
}

/// Prints a JSON value the way Go's `field.Error` prints a decoded value:
/// strings quoted (`%q`), numbers and bools plain, `"null"` for nil, maps and
/// lists in Go's `%#v` syntax (`map[string]interface {}{"id":"a"}`).
pub fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "\"null\"".to_string(),
        Value::String(s) => go_quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        other => go_sharp_v(other),
    }
}

/// Go's `%#v` of a decoded JSON value (map keys sorted, as fmt prints them).
pub fn go_sharp_v(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".to_string(),
        Value::String(s) => go_quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::Array(a) => format!(
            "[]interface {{}}{{{}}}",
            a.iter().map(go_sharp_v).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", go_quote(k), go_sharp_v(&m[*k])))
                .collect();
            format!("map[string]interface {{}}{{{}}}", parts.join(", "))
        }
    }
}

/// Go's `%v` of a decoded JSON number: integers as is, floats in `%g`
/// shortest form (exponent when the decimal exponent is < -4 or >= 6).
pub fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    go_float(f)
}

/// `strconv.FormatFloat(f, 'g', -1, 64)` as used by `%v`.
pub fn go_float(f: f64) -> String {
    if f == 0.0 {
        return "0".to_string();
    }
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    // Shortest round-trip digits via Rust's `{:e}`.
    let e = format!("{f:e}");
    let (mant, exp) = e.split_once('e').unwrap_or((e.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    // strconv's shortest %g switches to exponent form at precision 6.
    if !(-4..6).contains(&exp) {
        let mut m = String::new();
        if neg {
            m.push('-');
        }
        m.push_str(&digits[..1]);
        if digits.len() > 1 {
            m.push('.');
            m.push_str(&digits[1..]);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

/// Go's `strconv.Quote`: double quotes, escapes for `"`, `\` and control
/// characters, printable Unicode kept as is.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{07}' => out.push_str("\\a"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\u{0b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn type_invalid_renders_like_kube_apiserver() {
        let e = FieldError::type_invalid(
            "spec.replicas",
            json!("string"),
            "spec.replicas in body must be of type integer: \"string\"",
        );
        assert_eq!(
            e.to_string(),
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        );
        assert_eq!(e.reason(), "FieldValueTypeInvalid");
        assert_eq!(
            e.to_cause(),
            json!({"reason":"FieldValueTypeInvalid","field":"spec.replicas",
                   "message":"Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""})
        );
    }

    #[test]
    fn required_has_no_value() {
        let e = FieldError::required("spec.foo", "");
        assert_eq!(e.to_string(), "spec.foo: Required value");
        assert_eq!(e.reason(), "FieldValueRequired");
    }

    #[test]
    fn not_supported_quotes_values() {
        let e = FieldError::not_supported("spec.mode", json!("c"), &["a".into(), "b".into()]);
        assert_eq!(
            e.to_string(),
            "spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\""
        );
    }

    #[test]
    fn too_long_omits_value_and_too_many_prints_count() {
        assert_eq!(
            FieldError::too_long("spec.s", json!("abcd"), 3).to_string(),
            "spec.s: Too long: may not be longer than 3"
        );
        assert_eq!(
            FieldError::too_many("spec.l", 4, 3).to_string(),
            "spec.l: Too many: 4: must have at most 3 items"
        );
    }

    #[test]
    fn numbers_print_like_go() {
        assert_eq!(go_value(&json!(5)), "5");
        assert_eq!(go_value(&json!(2.5)), "2.5");
        assert_eq!(go_value(&json!(1e21)), "1e+21");
        assert_eq!(go_value(&json!(1500000.5)), "1.5000005e+06");
        assert_eq!(go_value(&json!(123456.5)), "123456.5");
        assert_eq!(go_value(&json!(0.00001)), "1e-05");
        assert_eq!(go_value(&json!(true)), "true");
        assert_eq!(go_value(&json!("a\"b")), "\"a\\\"b\"");
        assert_eq!(
            go_value(&json!({"port": 80, "id": "a"})),
            "map[string]interface {}{\"id\":\"a\", \"port\":80}"
        );
        assert_eq!(go_value(&json!(["x", 1])), "[]interface {}{\"x\", 1}");
    }

    #[test]
    fn invalid_status_body() {
        let e = FieldError::required("spec.size", "");
        let s = invalid_status("example.com", "Widget", "w", std::slice::from_ref(&e));
        assert_eq!(s["code"], 422);
        assert_eq!(s["reason"], "Invalid");
        assert_eq!(
            s["message"],
            "Widget.example.com \"w\" is invalid: spec.size: Required value"
        );
        assert_eq!(
            s["details"],
            json!({"name": "w", "group": "example.com", "kind": "Widget",
                   "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.size"}]})
        );
        let core = invalid_status("", "Service", "s", &[e]);
        assert_eq!(
            core["message"],
            "Service \"s\" is invalid: spec.size: Required value"
        );
        assert!(core["details"].get("group").is_none());
    }

    #[test]
    fn invalid_message_joins_like_aggregate() {
        let a = FieldError::required("spec.a", "");
        let b = FieldError::required("spec.b", "");
        assert_eq!(
            invalid_message("Foo.example.com", "x", std::slice::from_ref(&a)),
            "Foo.example.com \"x\" is invalid: spec.a: Required value"
        );
        assert_eq!(
            invalid_message("Foo.example.com", "x", &[a.clone(), b, a]),
            "Foo.example.com \"x\" is invalid: [spec.a: Required value, spec.b: Required value]"
        );
    }
}
