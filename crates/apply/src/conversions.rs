//! Fields the API server converts into another form whatever their value, known by kind:
//! desired is put in that form before it is merged, so a converged object compares equal to
//! what the server made of it instead of being written on every sync.
//!
//! - Secret (v1) `stringData`: write-only, the server folds it into `data` (base64) and drops
//!   it. An entry whose encoding `data` already holds is in place and left out; `data` entries
//!   that `stringData` overrides are left out (the server would replace them).
//! - `[]byte` fields: Secret `data`, ConfigMap `binaryData`, the `caBundle` of admission
//!   webhooks, APIServices and CRD conversion webhooks are stored re-encoded (see
//!   [`base64_server_form`]).

use std::borrow::Cow;

use base64::Engine;
use serde_json::{Map, Value};

use crate::bytes_form::base64_server_form;

/// `desired` with the kind's converted fields in their stored form (borrowed when nothing
/// changes). `observed` tells which `stringData` entries are in place already.
pub(crate) fn as_stored<'d>(observed: &Value, desired: &'d Value) -> Cow<'d, Value> {
    let api_version = desired.get("apiVersion").and_then(Value::as_str);
    let kind = desired.get("kind").and_then(Value::as_str);
    let group = api_version.and_then(|v| v.rsplit_once('/')).map(|(g, _)| g);
    let mut out = Cow::Borrowed(desired);
    match (api_version, kind) {
        (Some("v1"), Some("Secret")) => {
            fold_string_data(observed, &mut out);
            bytes_map(&mut out, "data");
        }
        (Some("v1"), Some("ConfigMap")) => bytes_map(&mut out, "binaryData"),
        (_, Some("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration"))
            if group == Some("admissionregistration.k8s.io") =>
        {
            let count = desired
                .get("webhooks")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            for i in 0..count {
                bytes_field(&mut out, &format!("/webhooks/{i}/clientConfig"));
            }
        }
        (_, Some("APIService")) if group == Some("apiregistration.k8s.io") => {
            bytes_field(&mut out, "/spec");
        }
        (_, Some("CustomResourceDefinition")) if group == Some("apiextensions.k8s.io") => {
            bytes_field(&mut out, "/spec/conversion/webhook/clientConfig");
        }
        _ => {}
    }
    out
}

/// The object under `pointer`, for writing (cloning desired the first time).
fn object_at<'a>(out: &'a mut Cow<'_, Value>, pointer: &str) -> Option<&'a mut Map<String, Value>> {
    out.to_mut().pointer_mut(pointer)?.as_object_mut()
}

/// `caBundle` of the object at `pointer` in its stored form.
fn bytes_field(out: &mut Cow<'_, Value>, pointer: &str) {
    let Some(stored) = out
        .pointer(pointer)
        .and_then(|o| o.get("caBundle"))
        .and_then(Value::as_str)
        .and_then(|s| base64_server_form(s).ok().filter(|t| t != s))
    else {
        return;
    };
    if let Some(obj) = object_at(out, pointer) {
        obj.insert("caBundle".into(), Value::String(stored));
    }
}

/// The values of the string map `field` (top level) in their stored base64 form.
fn bytes_map(out: &mut Cow<'_, Value>, field: &str) {
    let Some(map) = out.get(field).and_then(Value::as_object) else {
        return;
    };
    let changed: Vec<(String, String)> = map
        .iter()
        .filter_map(|(k, v)| {
            let s = v.as_str()?;
            let stored = base64_server_form(s).ok()?;
            (stored != s).then(|| (k.clone(), stored))
        })
        .collect();
    if changed.is_empty() {
        return;
    }
    if let Some(map) = object_at(out, &format!("/{field}")) {
        for (k, v) in changed {
            map.insert(k, Value::String(v));
        }
    }
}

/// Secret `stringData` as the server applies it: entries already encoded in observed `data`
/// are dropped (and `stringData` with them when none is left); `data` entries it overrides
/// are dropped.
fn fold_string_data(observed: &Value, out: &mut Cow<'_, Value>) {
    let Some(string_data) = out.get("stringData").and_then(Value::as_object) else {
        return;
    };
    if string_data.is_empty() {
        return;
    }
    let observed_data = observed.get("data").and_then(Value::as_object);
    let in_place: Vec<String> = string_data
        .iter()
        .filter(|(k, v)| {
            let encoded = v
                .as_str()
                .map(|s| base64::engine::general_purpose::STANDARD.encode(s));
            encoded.is_some_and(|e| {
                observed_data
                    .and_then(|d| d.get(*k))
                    .and_then(Value::as_str)
                    == Some(e.as_str())
            })
        })
        .map(|(k, _)| k.clone())
        .collect();
    let overridden: Vec<String> = out
        .get("data")
        .and_then(Value::as_object)
        .map(|d| {
            d.keys()
                .filter(|k| string_data.contains_key(*k))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if in_place.is_empty() && overridden.is_empty() {
        return;
    }
    let Some(obj) = out.to_mut().as_object_mut() else {
        return;
    };
    if let Some(Value::Object(data)) = obj.get_mut("data") {
        for k in &overridden {
            data.remove(k);
        }
    }
    if let Some(Value::Object(sd)) = obj.get_mut("stringData") {
        for k in &in_place {
            sd.remove(k);
        }
        if sd.is_empty() {
            obj.remove("stringData");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::as_stored;
    use serde_json::json;

    #[test]
    fn string_data_in_place_is_left_out() {
        let observed = json!({"data": {"a": "aGVsbG8=", "b": "b2xk"}});
        let desired = json!({"apiVersion": "v1", "kind": "Secret",
            "stringData": {"a": "hello", "b": "new"}, "data": {"b": "b2xk", "c": "QR=="}});
        let stored = as_stored(&observed, &desired);
        assert_eq!(
            *stored,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "stringData": {"b": "new"}, "data": {"c": "QQ=="}})
        );
        let all_in = json!({"apiVersion": "v1", "kind": "Secret", "stringData": {"a": "hello"}});
        assert_eq!(
            *as_stored(&observed, &all_in),
            json!({"apiVersion": "v1", "kind": "Secret"})
        );
    }

    #[test]
    fn bytes_fields_take_their_stored_form() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "binaryData": {"a": "AAEC\nAw==", "bad": "QQ"}, "data": {"t": "QR=="}});
        assert_eq!(
            *as_stored(&json!({}), &cm),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "binaryData": {"a": "AAECAw==", "bad": "QQ"}, "data": {"t": "QR=="}})
        );
        let hook = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "webhooks": [{"name": "a", "clientConfig": {"caBundle": "QUJD\nREVG"}}]});
        assert_eq!(
            as_stored(&json!({}), &hook)["webhooks"][0]["clientConfig"]["caBundle"],
            json!("QUJDREVG")
        );
        // Same-named fields of other kinds are left alone.
        let other = json!({"apiVersion": "example.com/v1", "kind": "Secret",
                           "data": {"a": "QR=="}});
        assert!(matches!(
            as_stored(&json!({}), &other),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
