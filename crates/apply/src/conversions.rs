//! Fields the API server converts into another form whatever their value, known by kind:
//! desired is put in that form before it is merged, so a converged object compares equal to
//! what the server made of it instead of being written on every sync.
//!
//! - Secret (v1) `stringData`: write-only, the server folds it into `data` (base64, winning
//!   over a `data` entry of the same key) and drops it; desired is folded the same way, so
//!   `data[k] = base64(stringData[k])` and no `stringData` (see [`fold_string_data`]).
//! - `[]byte` fields: Secret `data`, ConfigMap `binaryData`, the `caBundle` of admission
//!   webhooks, APIServices and CRD conversion webhooks are stored re-encoded (see
//!   [`base64_server_form`]).

use std::borrow::Cow;

use base64::Engine;
use serde_json::{Map, Value};

use crate::bytes_form::base64_server_form;

/// `desired` with the kind's converted fields in their stored form (borrowed when nothing
/// changes): what the API server would store for it, whatever is observed.
pub(crate) fn as_stored<'d>(desired: &'d Value) -> Cow<'d, Value> {
    let api_version = desired.get("apiVersion").and_then(Value::as_str);
    let kind = desired.get("kind").and_then(Value::as_str);
    let group = api_version.and_then(|v| v.rsplit_once('/')).map(|(g, _)| g);
    let mut out = Cow::Borrowed(desired);
    match (api_version, kind) {
        (Some("v1"), Some("Secret")) => {
            fold_string_data(&mut out);
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

/// Secret `stringData` as the server stores it: each string entry becomes
/// `data[k] = base64(v)`, overriding a `data` entry of the same key (the API server's
/// conversion lets `stringData` win), and `stringData` itself is never stored. Folding every
/// entry (not only those not in place yet) keeps `data[k]` in desired: leaving it out would
/// make the three-way merge delete the key the last-applied record still holds, and the next
/// sync write it back. A non-string entry stays in `stringData` for the server to refuse.
fn fold_string_data(out: &mut Cow<'_, Value>) {
    let Some(string_data) = out.get("stringData").and_then(Value::as_object) else {
        return;
    };
    let folded: Vec<(String, String)> = string_data
        .iter()
        .filter_map(|(k, v)| {
            let s = v.as_str()?;
            Some((
                k.clone(),
                base64::engine::general_purpose::STANDARD.encode(s),
            ))
        })
        .collect();
    let all_strings = folded.len() == string_data.len();
    if folded.is_empty() && !all_strings {
        return;
    }
    let Some(obj) = out.to_mut().as_object_mut() else {
        return;
    };
    if !folded.is_empty() {
        let data = obj
            .entry("data")
            .or_insert_with(|| Value::Object(Map::new()));
        if !data.is_object() {
            *data = Value::Object(Map::new());
        }
        if let Some(data) = data.as_object_mut() {
            for (k, v) in &folded {
                data.insert(k.clone(), Value::String(v.clone()));
            }
        }
    }
    if all_strings {
        obj.remove("stringData");
    } else if let Some(Value::Object(sd)) = obj.get_mut("stringData") {
        for (k, _) in &folded {
            sd.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::as_stored;
    use serde_json::json;

    #[test]
    fn string_data_is_folded_into_data_and_wins_over_it() {
        let desired = json!({"apiVersion": "v1", "kind": "Secret",
            "stringData": {"a": "hello", "b": "new"}, "data": {"b": "b2xk", "c": "QR=="}});
        assert_eq!(
            *as_stored(&desired),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "data": {"a": "aGVsbG8=", "b": "bmV3", "c": "QQ=="}})
        );
        let only = json!({"apiVersion": "v1", "kind": "Secret", "stringData": {"a": "hello"}});
        assert_eq!(
            *as_stored(&only),
            json!({"apiVersion": "v1", "kind": "Secret", "data": {"a": "aGVsbG8="}})
        );
        let empty = json!({"apiVersion": "v1", "kind": "Secret", "stringData": {}});
        assert_eq!(
            *as_stored(&empty),
            json!({"apiVersion": "v1", "kind": "Secret"})
        );
    }

    #[test]
    fn non_string_entries_stay_for_the_server_to_refuse() {
        let desired = json!({"apiVersion": "v1", "kind": "Secret",
            "stringData": {"a": "x", "n": 1}});
        assert_eq!(
            *as_stored(&desired),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "data": {"a": "eA=="}, "stringData": {"n": 1}})
        );
    }

    #[test]
    fn bytes_fields_take_their_stored_form() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "binaryData": {"a": "AAEC\nAw==", "bad": "QQ"}, "data": {"t": "QR=="}});
        assert_eq!(
            *as_stored(&cm),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "binaryData": {"a": "AAECAw==", "bad": "QQ"}, "data": {"t": "QR=="}})
        );
        let hook = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "webhooks": [{"name": "a", "clientConfig": {"caBundle": "QUJD\nREVG"}}]});
        assert_eq!(
            as_stored(&hook)["webhooks"][0]["clientConfig"]["caBundle"],
            json!("QUJDREVG")
        );
        // Same-named fields of other kinds are left alone.
        let other = json!({"apiVersion": "example.com/v1", "kind": "Secret",
                           "data": {"a": "QR=="}});
        assert!(matches!(as_stored(&other), std::borrow::Cow::Borrowed(_)));
    }
}
