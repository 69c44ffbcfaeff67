//! Small JSON helpers for Go-style defaulting ("unset" = absent, null, or the
//! zero value of a non-pointer field).

use serde_json::{Map, Value};

/// The object at `key`, created as `{}` when absent or null; `None` when the
/// field holds something that is not an object (left for validation).
pub(crate) fn obj_at<'a>(
    m: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    let slot = m.entry(key.to_string()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut()
}

/// The object at `key` only if it already is one.
pub(crate) fn existing_obj<'a>(
    m: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    m.get_mut(key).and_then(Value::as_object_mut)
}

/// Each object element of the list at `key` (non-objects skipped).
pub(crate) fn each_obj_in(
    m: &mut Map<String, Value>,
    key: &str,
    mut f: impl FnMut(&mut Map<String, Value>),
) {
    if let Some(Value::Array(a)) = m.get_mut(key) {
        for v in a.iter_mut() {
            if let Some(o) = v.as_object_mut() {
                f(o);
            }
        }
    }
}

/// Absent or null (unset pointer / slice / map field).
pub(crate) fn is_nil(m: &Map<String, Value>, key: &str) -> bool {
    matches!(m.get(key), None | Some(Value::Null))
}

/// Absent, null or `""` (unset non-pointer string field).
pub(crate) fn is_empty_str(m: &Map<String, Value>, key: &str) -> bool {
    match m.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    }
}

/// Absent, null or `0` (unset non-pointer number field).
pub(crate) fn is_zero_num(m: &Map<String, Value>, key: &str) -> bool {
    match m.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// Sets `key` to `v` when it is nil.
pub(crate) fn default_nil(m: &mut Map<String, Value>, key: &str, v: Value) {
    if is_nil(m, key) {
        m.insert(key.to_string(), v);
    }
}

/// Sets `key` to the string `v` when it is nil or empty.
pub(crate) fn default_str(m: &mut Map<String, Value>, key: &str, v: &str) {
    if is_empty_str(m, key) {
        m.insert(key.to_string(), Value::String(v.to_string()));
    }
}

/// Sets `key` to the number `v` when it is nil or zero.
pub(crate) fn default_num(m: &mut Map<String, Value>, key: &str, v: i64) {
    if is_zero_num(m, key) {
        m.insert(key.to_string(), Value::from(v));
    }
}

/// `metadata.creationTimestamp: null` as Go serializes the zero
/// `metav1.Time` of an embedded ObjectMeta (pod templates, job templates).
pub(crate) fn template_metadata(template: &mut Map<String, Value>) {
    if let Some(meta) = obj_at(template, "metadata") {
        if !meta.contains_key("creationTimestamp") {
            meta.insert("creationTimestamp".into(), Value::Null);
        }
    }
}
