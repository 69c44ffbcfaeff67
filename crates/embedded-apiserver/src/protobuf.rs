//! Decoding of the protobuf request bodies client-go's typed clients send for built-in kinds
//! (`kubectl create deployment|job|configmap|…`, `kubectl run`, Helm's DeleteOptions).
//! Responses are always JSON, which client-go accepts. Kinds the generated table does not
//! know (custom resources never travel as protobuf) answer 415.

mod generic;

pub(crate) use generic::{message_for, shapes};

use crate::errors::{ApiError, ApiResult};
use serde_json::{json, Map, Value};

/// Protobuf content type of the Kubernetes envelope.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn malformed() -> ApiError {
    ApiError::bad_request("malformed protobuf body")
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn varint(&mut self) -> ApiResult<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or_else(malformed)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(malformed())
    }

    /// Next field: (number, wire type, payload for length-delimited or varint value).
    fn field(&mut self) -> ApiResult<Option<(u64, Field<'a>)>> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let (num, wt) = (key >> 3, key & 7);
        let f = match wt {
            0 => Field::Varint(self.varint()?),
            1 => {
                let bytes = self.buf.get(self.pos..self.pos + 8).ok_or_else(malformed)?;
                self.pos += 8;
                let mut v = [0u8; 8];
                v.copy_from_slice(bytes);
                Field::Fixed64(u64::from_le_bytes(v))
            }
            2 => {
                let len = self.varint()? as usize;
                let end = self
                    .pos
                    .checked_add(len)
                    .filter(|e| *e <= self.buf.len())
                    .ok_or_else(malformed)?;
                let b = &self.buf[self.pos..end];
                self.pos = end;
                Field::Bytes(b)
            }
            5 => {
                self.pos += 4;
                Field::Skip
            }
            _ => return Err(malformed()),
        };
        if self.pos > self.buf.len() {
            return Err(malformed());
        }
        Ok(Some((num, f)))
    }
}

enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Skip,
}

fn string(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn push(m: &mut Map<String, Value>, key: &str, v: Value) {
    let e = m.entry(key).or_insert_with(|| json!([]));
    if let Some(a) = e.as_array_mut() {
        a.push(v);
    }
}

/// Decodes a `k8s\0`-enveloped protobuf body of any built-in kind into JSON.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let (api_version, kind, raw) = envelope(body)?;
    let Some(message) = generic::message_for(&api_version, &kind) else {
        return Err(ApiError::unsupported_media_type(&format!(
            "{CONTENT_TYPE} for {api_version} {kind:?}; send JSON"
        )));
    };
    let mut obj = generic::decode_message(message, raw)?;
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(api_version));
        m.insert("kind".into(), json!(kind));
    }
    Ok(obj)
}

/// Prefix of every protobuf-encoded Kubernetes object.
pub const MAGIC: &[u8] = b"k8s\x00";

/// Splits a `k8s\0` envelope (`runtime.Unknown`) into apiVersion, kind and raw message.
fn envelope(body: &[u8]) -> ApiResult<(String, String, &[u8])> {
    let inner = body.strip_prefix(MAGIC).ok_or_else(malformed)?;
    let mut r = Reader::new(inner);
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    while let Some((n, f)) = r.field()? {
        match (n, f) {
            (1, Field::Bytes(tm)) => {
                let mut t = Reader::new(tm);
                while let Some((tn, tf)) = t.field()? {
                    match (tn, tf) {
                        (1, Field::Bytes(x)) => api_version = string(x),
                        (2, Field::Bytes(x)) => kind = string(x),
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(x)) => raw = x,
            _ => {}
        }
    }
    Ok((api_version, kind, raw))
}

/// Decodes a protobuf `DeleteOptions` body into its JSON form. client-go's typed
/// clients send one with every DELETE (Helm does when it purges its release Secrets).
pub fn delete_options(body: &[u8]) -> ApiResult<Value> {
    let (_, kind, raw) = envelope(body)?;
    if kind != "DeleteOptions" {
        return Err(ApiError::bad_request(format!(
            "invalid DeleteOptions: a protobuf {kind:?} was sent"
        )));
    }
    let mut r = Reader::new(raw);
    let mut m = Map::new();
    while let Some((n, f)) = r.field()? {
        match (n, f) {
            // int64 travels as a two's-complement varint.
            (1, Field::Varint(v)) => {
                m.insert("gracePeriodSeconds".into(), json!(v as i64));
            }
            (2, Field::Bytes(x)) => {
                let mut pre = Map::new();
                let mut pr = Reader::new(x);
                while let Some((pn, pf)) = pr.field()? {
                    match (pn, pf) {
                        (1, Field::Bytes(y)) => {
                            pre.insert("uid".into(), json!(string(y)));
                        }
                        (2, Field::Bytes(y)) => {
                            pre.insert("resourceVersion".into(), json!(string(y)));
                        }
                        _ => {}
                    }
                }
                m.insert("preconditions".into(), Value::Object(pre));
            }
            (3, Field::Varint(v)) => {
                m.insert("orphanDependents".into(), json!(v != 0));
            }
            (4, Field::Bytes(x)) => {
                m.insert("propagationPolicy".into(), json!(string(x)));
            }
            (5, Field::Bytes(x)) => push(&mut m, "dryRun", json!(string(x))),
            _ => {}
        }
    }
    Ok(Value::Object(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u64, b: &[u8]) -> Vec<u8> {
        let mut out = vec![((n << 3) | 2) as u8, b.len() as u8];
        out.extend_from_slice(b);
        out
    }

    #[test]
    fn decodes_a_configmap() {
        let meta = [
            field(1, b"cm"),
            field(11, &[field(1, b"app"), field(2, b"x")].concat()),
        ]
        .concat();
        let raw = [
            field(1, &meta),
            field(2, &[field(1, b"k"), field(2, b"v")].concat()),
        ]
        .concat();
        let tm = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [b"k8s\x00".to_vec(), field(1, &tm), field(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": {"app": "x"}}, "data": {"k": "v"}})
        );
    }

    #[test]
    fn garbage_is_a_bad_request() {
        assert_eq!(decode(b"k8s\x00\xff\xff").unwrap_err().code, 400);
        assert_eq!(decode(b"nope").unwrap_err().code, 400);
    }

    #[test]
    fn decodes_helms_empty_delete_options() {
        // The exact body Helm 4 sends when it purges a release Secret.
        let body = b"k8s\x00\n\x13\n\x02v1\x12\rDeleteOptions\x12\x00\x1a\x00\"\x00";
        assert_eq!(delete_options(body).unwrap(), json!({}));
    }

    #[test]
    fn decodes_every_delete_option() {
        let pre = [field(1, b"u-1"), field(2, b"42")].concat();
        let raw = [
            vec![0x08, 0x1e], // gracePeriodSeconds 30
            field(2, &pre),
            vec![0x18, 0x01], // orphanDependents true
            field(4, b"Foreground"),
            field(5, b"All"),
        ]
        .concat();
        let tm = [field(1, b"meta.k8s.io/v1"), field(2, b"DeleteOptions")].concat();
        let body = [MAGIC.to_vec(), field(1, &tm), field(2, &raw)].concat();
        assert_eq!(
            delete_options(&body).unwrap(),
            json!({
                "gracePeriodSeconds": 30,
                "preconditions": {"uid": "u-1", "resourceVersion": "42"},
                "orphanDependents": true,
                "propagationPolicy": "Foreground",
                "dryRun": ["All"],
            })
        );
    }

    #[test]
    fn another_kind_is_not_delete_options() {
        let tm = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), field(1, &tm)].concat();
        let err = delete_options(&body).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(err.message.contains("ConfigMap"), "{}", err.message);
    }
}
