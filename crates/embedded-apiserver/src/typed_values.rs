//! Values of built-in kinds that have a JSON form of their own and come back changed from
//! kube-apiserver's decode into the Go struct and encode for storage: every resource
//! `Quantity` is stored in the form the server prints (`0.5` → `500m`, `1.5Gi` → `1536Mi`)
//! and every `[]byte` field (Secret `data`, ConfigMap `binaryData`, `caBundle`, …) re-encoded
//! as standard base64 (line breaks dropped, unused trailing bits cleared). A value the decoder
//! refuses fails the request with the server's message. The fields are found in the
//! generated protobuf table, which types every field of every built-in message.

use metacontroller_apply::{base64_server_form, quantity_server_form};
use serde_json::Value;

use crate::protobuf::{message_for, shapes};

const QUANTITY: &str = "apimachinery.pkg.api.resource.Quantity";

/// Messages without quantities or bytes below them (metadata, times, raw JSON): not walked.
const OPAQUE: [&str; 8] = [
    "apimachinery.pkg.apis.meta.v1.ObjectMeta",
    "apimachinery.pkg.apis.meta.v1.ListMeta",
    "apimachinery.pkg.apis.meta.v1.Time",
    "apimachinery.pkg.apis.meta.v1.MicroTime",
    "apimachinery.pkg.apis.meta.v1.Duration",
    "apimachinery.pkg.util.intstr.IntOrString",
    "apimachinery.pkg.runtime.RawExtension",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.Json",
];

/// Nesting walked at most (built-in types nest far less; CRD schemas are opaque above).
const MAX_DEPTH: usize = 64;

/// Puts the quantities and bytes of `obj` (a built-in `kind` of `api_version`) in their
/// stored form; `Err` with the decoder's message for a value the server refuses.
pub(crate) fn normalize(api_version: &str, kind: &str, obj: &mut Value) -> Result<(), String> {
    match message_for(api_version, kind) {
        Some(message) => walk(message, obj, 0),
        None => Ok(()),
    }
}

fn walk(message: &str, value: &mut Value, depth: usize) -> Result<(), String> {
    if message == QUANTITY {
        return quantity(value);
    }
    if depth > MAX_DEPTH || OPAQUE.contains(&message) || !value.is_object() {
        return Ok(());
    }
    let Some(fields) = shapes(message) else {
        return Ok(());
    };
    for f in fields {
        if f.json.is_empty() {
            // An inlined (embedded) struct: its fields sit in this object.
            walk(f.of, value, depth + 1)?;
            continue;
        }
        let Some(v) = value.get_mut(f.json) else {
            continue;
        };
        match v {
            Value::Object(m) if f.map => {
                for x in m.values_mut() {
                    one(f.of, x, depth)?;
                }
            }
            Value::Array(a) if f.repeated => {
                for x in a.iter_mut() {
                    one(f.of, x, depth)?;
                }
            }
            v if !f.map && !f.repeated => one(f.of, v, depth)?,
            _ => {}
        }
    }
    Ok(())
}

/// One value of type `of` (a message name or a scalar kind).
fn one(of: &str, v: &mut Value, depth: usize) -> Result<(), String> {
    match of {
        "bytes" => bytes(v),
        m if m.contains('.') => walk(m, v, depth + 1),
        _ => Ok(()),
    }
}

fn quantity(v: &mut Value) -> Result<(), String> {
    let text = match v {
        Value::Null => return Ok(()),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    };
    match quantity_server_form(&text) {
        Ok(Some(stored)) => *v = Value::String(stored),
        // Beyond what the form is computed for: kept as sent.
        Ok(None) => {}
        Err(e) => return Err(e.to_string()),
    }
    Ok(())
}

fn bytes(v: &mut Value) -> Result<(), String> {
    if let Value::String(s) = v {
        match base64_server_form(s) {
            Ok(stored) => *s = stored,
            Err(at) => return Err(format!("illegal base64 data at input byte {at}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::normalize;
    use serde_json::json;

    #[test]
    fn quantities_anywhere_and_bytes_take_their_stored_form() {
        let mut lr = json!({"spec": {"limits": [{"type": "Container",
            "default": {"cpu": "0.5", "memory": 0.25}, "max": {"cpu": 2}}]}});
        normalize("v1", "LimitRange", &mut lr).unwrap();
        assert_eq!(
            lr,
            json!({"spec": {"limits": [{"type": "Container",
                "default": {"cpu": "500m", "memory": "250m"}, "max": {"cpu": "2"}}]}})
        );
        let mut hpa = json!({"spec": {"metrics": [{"type": "Pods", "pods": {
            "metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1.5k"}}}]}});
        normalize("autoscaling/v2", "HorizontalPodAutoscaler", &mut hpa).unwrap();
        assert_eq!(
            hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"],
            "1500"
        );
        let mut pod = json!({"spec": {"containers": [{"name": "a",
            "resources": {"limits": {"memory": "0.5Gi"}}}],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1.5Gi"}}]}});
        normalize("v1", "Pod", &mut pod).unwrap();
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["limits"]["memory"],
            "512Mi"
        );
        assert_eq!(pod["spec"]["volumes"][0]["emptyDir"]["sizeLimit"], "1536Mi");
        let mut cm = json!({"data": {"t": "QR=="}, "binaryData": {"b": "QR==\n"}});
        normalize("v1", "ConfigMap", &mut cm).unwrap();
        assert_eq!(
            cm,
            json!({"data": {"t": "QR=="}, "binaryData": {"b": "QQ=="}})
        );
    }

    #[test]
    fn refused_values_fail_with_the_decoders_message() {
        let mut rq = json!({"spec": {"hard": {"pods": "abc"}}});
        let err = normalize("v1", "ResourceQuota", &mut rq).unwrap_err();
        assert!(
            err.starts_with("quantities must match the regular expression"),
            "{err}"
        );
        let mut s = json!({"data": {"k": "QQ"}});
        assert_eq!(
            normalize("v1", "Secret", &mut s).unwrap_err(),
            "illegal base64 data at input byte 0"
        );
    }
}
