//! `SetDefaults_LimitRangeItem`: a `Container` item's default limit falls back to its max,
//! its default request to the default limit, then to its min (key by key).

use serde_json::{Map, Value};

use super::util::{each_obj_in, obj_at};

/// Defaults of every `Container` item of `spec.limits`.
pub(crate) fn limit_range(o: &mut Map<String, Value>) {
    let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    each_obj_in(spec, "limits", |item| {
        if item.get("type").and_then(Value::as_str) != Some("Container") {
            return;
        }
        fill_from(item, "default", "max");
        fill_from(item, "defaultRequest", "default");
        fill_from(item, "defaultRequest", "min");
    });
}

/// Copies the entries of map `from` missing in map `to`. Go creates `to` empty when nil;
/// an empty map is omitted from JSON, so it is only created when something is copied.
fn fill_from(item: &mut Map<String, Value>, to: &str, from: &str) {
    let Some(Value::Object(source)) = item.get(from) else {
        return;
    };
    let target = item.get(to).and_then(Value::as_object);
    let missing: Vec<(String, Value)> = source
        .iter()
        .filter(|(k, _)| !target.is_some_and(|t| t.contains_key(*k)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if missing.is_empty() {
        return;
    }
    if let Some(target) = obj_at(item, to) {
        target.extend(missing);
    }
}
