//! Hiding Secret contents in text that goes to logs. Hook requests carry the parent, its
//! children and related objects; any of them may be a Secret, and hook responses may
//! contain desired Secrets. Before a body is logged, the values of `data` and
//! `stringData` of every Secret in it are replaced (the keys stay, they help debugging).

use serde_json::Value;

/// What replaces a redacted value.
pub const REDACTED: &str = "[REDACTED]";

/// Replaces the values of `data` and `stringData` of every core/v1 Secret anywhere in
/// `value` (objects nested in maps and lists included) with [`REDACTED`].
pub fn redact_secret_data(value: &mut Value) {
    redact_secret_data_with(value, REDACTED);
}

/// Like [`redact_secret_data`] with `marker` as the replacement (recordings use a marker
/// that is valid base64, see [`crate::record::RECORD_REDACTED`]).
pub fn redact_secret_data_with(value: &mut Value, marker: &str) {
    match value {
        Value::Object(map) => {
            let is_secret = map.get("kind").and_then(Value::as_str) == Some("Secret")
                && map
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .is_none_or(|v| v == "v1");
            for (key, field) in map.iter_mut() {
                if is_secret && (key == "data" || key == "stringData") {
                    redact_values(field, marker);
                } else if is_secret && key == "metadata" {
                    redact_last_applied(field, marker);
                } else {
                    redact_secret_data_with(field, marker);
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| redact_secret_data_with(item, marker)),
        _ => {}
    }
}

/// A Secret's last-applied annotations (ours and kubectl's) hold a copy of its data.
fn redact_last_applied(metadata: &mut Value, marker: &str) {
    let Some(annotations) = metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (key, value) in annotations.iter_mut() {
        if !key.ends_with("/last-applied-configuration") {
            continue;
        }
        let redacted = value
            .as_str()
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            .map(|mut copy| {
                redact_secret_data_with(&mut copy, marker);
                copy.to_string()
            })
            .unwrap_or_else(|| marker.to_owned());
        *value = Value::String(redacted);
    }
}

fn redact_values(field: &mut Value, marker: &str) {
    match field {
        Value::Object(entries) => {
            for entry in entries.values_mut() {
                *entry = Value::String(marker.to_owned());
            }
        }
        Value::Null => {}
        // Not a map (invalid Secret): hide it whole.
        other => *other = Value::String(marker.to_owned()),
    }
}

/// A JSON body as text for a log line, with Secret data redacted. A body that is not
/// JSON is not shown at all (it could hold anything); only its length is.
pub fn loggable_body(bytes: &[u8]) -> String {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(mut value) => {
            redact_secret_data(&mut value);
            value.to_string()
        }
        Err(_) => format!("<{} bytes, not JSON: not shown>", bytes.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_anywhere_lose_their_values_but_keep_keys() {
        let mut body = json!({
            "parent": {"kind": "Secret", "apiVersion": "v1", "data": {"a": "c2VjcmV0"}},
            "children": {"Secret.v1": {"s": {"kind": "Secret", "apiVersion": "v1",
                "metadata": {"name": "s", "annotations": {
                    "metacontroller.k8s.io/last-applied-configuration":
                        "{\"kind\":\"Secret\",\"apiVersion\":\"v1\",\"data\":{\"k\":\"bGFzdA==\"}}",
                    "kubectl.kubernetes.io/last-applied-configuration": "not json bGFzdA==",
                }},
                "data": {"k": "djE="}, "stringData": {"p": "plain"}}}},
            "related": [{"kind": "Secret", "data": {"x": "eA=="}}],
            "other": {"kind": "ConfigMap", "apiVersion": "v1", "data": {"k": "visible"}},
            "custom": {"kind": "Secret", "apiVersion": "example.com/v1", "data": {"k": "kept"}},
        });
        redact_secret_data(&mut body);
        let text = body.to_string();
        for hidden in ["c2VjcmV0", "djE=", "plain", "eA==", "bGFzdA=="] {
            assert!(!text.contains(hidden), "{hidden} in {text}");
        }
        assert_eq!(body["children"]["Secret.v1"]["s"]["data"]["k"], REDACTED);
        assert_eq!(body["children"]["Secret.v1"]["s"]["metadata"]["name"], "s");
        assert_eq!(body["other"]["data"]["k"], "visible");
        assert_eq!(body["custom"]["data"]["k"], "kept");
    }

    #[test]
    fn non_json_bodies_are_not_shown() {
        assert_eq!(
            loggable_body(b"token=abc"),
            "<9 bytes, not JSON: not shown>"
        );
        assert_eq!(loggable_body(b"{\"a\":1}"), "{\"a\":1}");
    }
}
