//! Lists of strings read out of JSON objects (finalizers, stored versions, accepted names,
//! selector values).

use serde_json::Value;

/// The strings of `v` when it is an array, in order, its other items skipped; empty when `v`
/// is absent or not an array.
pub(crate) fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}
