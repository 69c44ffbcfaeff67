//! Semantic no-op detection: does writing `merged` change anything that matters compared with
//! `observed`? A sync whose desired state is already in place must cause zero writes.

use serde_json::{Map, Value};

use crate::cursor::Cursor;
use crate::last_applied::ANNOTATION;
use crate::quantity::quantity_eq;

/// Metadata fields the API server populates; differences in them never require a write.
pub const IGNORED_METADATA_FIELDS: [&str; 8] = [
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Objects whose values are resource quantities (`resources.limits`, quota `hard`, …).
const QUANTITY_MAPS: [&str; 7] = [
    "limits",
    "requests",
    "hard",
    "used",
    "capacity",
    "allocatable",
    "overhead",
];

/// Fields that hold a single quantity.
const QUANTITY_FIELDS: [&str; 1] = ["sizeLimit"];

/// True when `merged` differs from `observed` in a way that needs an update.
///
/// Ignored: top-level `status` (the controller of the object owns it), the server-populated
/// metadata in [`IGNORED_METADATA_FIELDS`]. Compared semantically: numbers by value (`1` ==
/// `1.0`); resource quantities by value (`1000m` == `1`, `1Gi` == `1073741824`) inside
/// `limits`/`requests`/`hard`/`capacity`/… maps and `sizeLimit`; a missing field equals `null`,
/// `{}` and `[]` (the API server drops empty values of built-in types); the last-applied
/// annotation by its decoded JSON (so key order and spacing never cause a write).
///
/// Passing the same reference twice (as a borrowed [`merge_cow`](crate::merge_cow) result
/// does) answers `false` without looking at the object.
pub fn needs_update(observed: &Value, merged: &Value) -> bool {
    if std::ptr::eq(observed, merged) {
        return false;
    }
    needs_update_with(observed, merged, false)
}

/// [`needs_update`], optionally ignoring the last-applied annotation (when the caller has
/// already compared the records).
pub(crate) fn needs_update_with(observed: &Value, merged: &Value, skip_record: bool) -> bool {
    match (observed, merged) {
        (Value::Object(o), Value::Object(m)) => !objects_eq(o, m, Ctx::Root, skip_record),
        _ => !json_equal(observed, merged),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Root,
    RootMetadata,
    Annotations,
    QuantityMap,
    Plain,
}

impl Ctx {
    fn ignored(self, key: &str) -> bool {
        match self {
            Ctx::Root => key == "status",
            Ctx::RootMetadata => IGNORED_METADATA_FIELDS.contains(&key),
            _ => false,
        }
    }

    fn child(self, key: &str) -> Ctx {
        match self {
            Ctx::Root if key == "metadata" => Ctx::RootMetadata,
            Ctx::RootMetadata if key == "annotations" => Ctx::Annotations,
            _ if QUANTITY_MAPS.contains(&key) => Ctx::QuantityMap,
            _ => Ctx::Plain,
        }
    }
}

fn is_empty_like(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn objects_eq(a: &Map<String, Value>, b: &Map<String, Value>, ctx: Ctx, skip_record: bool) -> bool {
    let field_eq = |key: &str, x: Option<&Value>, y: Option<&Value>| -> bool {
        if ctx.ignored(key) {
            return true;
        }
        match (x, y) {
            (Some(x), Some(y)) => {
                if ctx == Ctx::Annotations && key == ANNOTATION {
                    return skip_record || annotation_eq(x, y);
                }
                let quantity = ctx == Ctx::QuantityMap || QUANTITY_FIELDS.contains(&key);
                values_eq(x, y, ctx.child(key), quantity, skip_record)
            }
            (Some(_), None) | (None, Some(_))
                if skip_record && ctx == Ctx::Annotations && key == ANNOTATION =>
            {
                true
            }
            (Some(v), None) | (None, Some(v)) => is_empty_like(v),
            (None, None) => true,
        }
    };
    let mut in_b = Cursor::new(b);
    if !a.iter().all(|(k, x)| field_eq(k, Some(x), in_b.get(k))) {
        return false;
    }
    let mut in_a = Cursor::new(a);
    b.iter()
        .filter(|(k, _)| !in_a.contains_key(k))
        .all(|(k, y)| field_eq(k, None, Some(y)))
}

fn values_eq(a: &Value, b: &Value, ctx: Ctx, quantity: bool, skip_record: bool) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => objects_eq(x, y, ctx, skip_record),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(p, q)| values_eq(p, q, Ctx::Plain, false, false))
        }
        (Value::Number(x), Value::Number(y)) => numbers_eq(x, y),
        (Value::String(x), Value::String(y)) => x == y || (quantity && quantity_eq(x, y)),
        (Value::String(s), Value::Number(n)) | (Value::Number(n), Value::String(s)) => {
            quantity && quantity_eq(s, &n.to_string())
        }
        (Value::Null, v) | (v, Value::Null) => is_empty_like(v),
        _ => a == b,
    }
}

fn annotation_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(x), Value::String(y)) => {
            if x == y {
                return true;
            }
            match (
                serde_json::from_str::<Value>(x),
                serde_json::from_str::<Value>(y),
            ) {
                (Ok(p), Ok(q)) => json_equal(&p, &q),
                _ => false,
            }
        }
        _ => json_equal(a, b),
    }
}

fn numbers_eq(x: &serde_json::Number, y: &serde_json::Number) -> bool {
    if x == y {
        return true;
    }
    match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
        (Some(a), Some(b), _, _) => a == b,
        (_, _, Some(a), Some(b)) => a == b,
        _ => match (x.as_f64(), y.as_f64()) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        },
    }
}

/// Deep JSON equality with numbers compared by value (`1 == 1.0`), as the API server
/// re-encodes them; integers compare exactly (Kubernetes decodes integral numbers to int64).
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Number(x), Value::Number(y)) => numbers_eq(x, y),
        _ => a == b,
    }
}
