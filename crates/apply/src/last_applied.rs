//! The last-applied record: the desired object as we applied it, stored as JSON in the
//! `metacontroller.k8s.io/last-applied-configuration` annotation of the object itself.
//!
//! Format, as upstream Metacontroller writes it (Go `encoding/json` of the desired object):
//! compact JSON, object keys sorted, `<`, `>`, `&`, U+2028 and U+2029 escaped as `\u003c`…,
//! integral numbers without a fraction. Upstream stores the desired object exactly as the hook
//! returned it — metadata is not stripped — except that on updates a copy of this annotation
//! inside the desired object is blanked to `""` first. [`encode`] produces byte-identical text,
//! so objects written by Go Metacontroller are adopted without a single write.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::error::ApplyError;

/// The annotation holding the last-applied record.
pub const ANNOTATION: &str = "metacontroller.k8s.io/last-applied-configuration";

/// Reads the last-applied record of an object. `Ok(None)` when the object has no annotation,
/// or it is empty or `null` (as upstream).
pub fn get(object: &Value) -> Result<Option<Value>, ApplyError> {
    let Some(raw) = object
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(ANNOTATION))
    else {
        return Ok(None);
    };
    let Some(text) = raw.as_str() else {
        return Err(ApplyError::LastApplied {
            annotation: ANNOTATION,
            message: "annotation value is not a string".into(),
        });
    };
    if text.is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Null) => Ok(None),
        Ok(v @ Value::Object(_)) => Ok(Some(v)),
        Ok(other) => Err(ApplyError::LastApplied {
            annotation: ANNOTATION,
            message: format!(
                "expected a JSON object, found {}",
                crate::error::type_name(&other)
            ),
        }),
        Err(e) => Err(ApplyError::LastApplied {
            annotation: ANNOTATION,
            message: e.to_string(),
        }),
    }
}

/// Stores `applied` as the last-applied record of `object` (creating `metadata` and
/// `metadata.annotations` as needed).
pub fn set(object: &mut Value, applied: &Value) -> Result<(), ApplyError> {
    set_encoded(object, encode(applied))
}

/// The raw annotation text of an object, if any.
pub(crate) fn raw(object: &Value) -> Option<&str> {
    object
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(ANNOTATION))
        .and_then(Value::as_str)
}

/// Stores an already encoded record.
pub(crate) fn set_encoded(object: &mut Value, text: String) -> Result<(), ApplyError> {
    let Value::Object(obj) = object else {
        return Err(ApplyError::invalid(".", "object must be a JSON object"));
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    let Value::Object(meta) = meta else {
        return Err(ApplyError::invalid(
            ".metadata",
            "metadata must be an object",
        ));
    };
    let ann = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !ann.is_object() {
        *ann = Value::Object(Map::new());
    }
    if let Value::Object(ann) = ann {
        ann.insert(ANNOTATION.to_string(), Value::String(text));
    }
    Ok(())
}

/// A copy of `desired` with this annotation (if present) blanked to `""`, which is what
/// upstream records and applies on updates so the record never nests itself.
pub fn blank_in(desired: &Value) -> Value {
    blank_cow(desired).into_owned()
}

/// [`blank_in`], copying only when the annotation is present.
pub(crate) fn blank_cow(desired: &Value) -> std::borrow::Cow<'_, Value> {
    let present = desired
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(ANNOTATION));
    if present.is_none_or(|v| v.as_str() == Some("")) {
        return std::borrow::Cow::Borrowed(desired);
    }
    let mut copy = desired.clone();
    if let Some(v) = copy
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(|a| a.get_mut(ANNOTATION))
    {
        *v = Value::String(String::new());
    }
    std::borrow::Cow::Owned(copy)
}

/// Encodes a value exactly as Go's `encoding/json.Marshal` would encode the same object.
pub fn encode(v: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_value(&mut out, v);
    out
}

/// True when `text` is exactly `encode(v)`, checked without building the encoding (the
/// steady-state check of every sync).
pub(crate) fn is_encoding_of(text: &str, v: &Value) -> bool {
    let mut rest = text.as_bytes();
    matches_value(&mut rest, v) && rest.is_empty()
}

fn eat_byte(rest: &mut &[u8], expected: u8) -> bool {
    match rest.split_first() {
        Some((b, r)) if *b == expected => {
            *rest = r;
            true
        }
        _ => false,
    }
}

fn eat(rest: &mut &[u8], expected: &[u8]) -> bool {
    match rest.strip_prefix(expected) {
        Some(r) => {
            *rest = r;
            true
        }
        None => false,
    }
}

fn matches_value(rest: &mut &[u8], v: &Value) -> bool {
    match v {
        Value::Object(m) => {
            if !crate::cursor::maps_iterate_sorted() {
                // Unusual map order (serde_json `preserve_order`): compare the full encoding.
                let mut enc = String::new();
                write_value(&mut enc, v);
                return eat(rest, enc.as_bytes());
            }
            let mut open = b'{';
            for (k, item) in m {
                // `{"key":` or `,"key":` in one comparison when the key needs no escape.
                let matched = if is_plain(k) {
                    eat_framed(rest, open, k.as_bytes(), b':')
                } else {
                    eat_byte(rest, open) && matches_string(rest, k) && eat_byte(rest, b':')
                };
                if !matched || !matches_child(rest, item) {
                    return false;
                }
                open = b',';
            }
            if open == b'{' && !eat_byte(rest, b'{') {
                return false;
            }
            eat_byte(rest, b'}')
        }
        Value::Array(a) => {
            if !eat_byte(rest, b'[') {
                return false;
            }
            for (i, item) in a.iter().enumerate() {
                if (i > 0 && !eat_byte(rest, b',')) || !matches_child(rest, item) {
                    return false;
                }
            }
            eat_byte(rest, b']')
        }
        Value::String(s) => matches_string(rest, s),
        Value::Null => eat(rest, b"null"),
        Value::Bool(b) => eat(rest, if *b { b"true" } else { b"false" }),
        Value::Number(n) => {
            let mut buf = [0u8; 20];
            if let Some(digits) = integer_text(n, &mut buf) {
                return eat(rest, digits);
            }
            let mut enc = String::new();
            write_number(&mut enc, n);
            eat(rest, enc.as_bytes())
        }
    }
}

/// [`matches_value`] for a field or item: strings (most leaves) are matched in place, without
/// the recursive call.
#[inline]
fn matches_child(rest: &mut &[u8], v: &Value) -> bool {
    match v {
        Value::String(s) => matches_string(rest, s),
        _ => matches_value(rest, v),
    }
}

/// The decimal text of an integer number, written into `buf` (no allocation); `None` for
/// numbers stored as floats.
fn integer_text<'b>(n: &serde_json::Number, buf: &'b mut [u8; 20]) -> Option<&'b [u8]> {
    let (negative, mut magnitude) = match (n.as_u64(), n.as_i64()) {
        (Some(u), _) => (false, u),
        (None, Some(i)) => (true, i.unsigned_abs()),
        (None, None) => return None,
    };
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (magnitude % 10) as u8;
        magnitude /= 10;
        if magnitude == 0 {
            break;
        }
    }
    if negative {
        at -= 1;
        buf[at] = b'-';
    }
    Some(&buf[at..])
}

/// Eats `before` `"` `s` `"` `after` (`s` needing no escape).
#[inline]
fn eat_framed(rest: &mut &[u8], before: u8, s: &[u8], after: u8) -> bool {
    let n = s.len();
    match rest.get(..n + 4) {
        Some([b0, b'"', body @ .., b'"', b1])
            if *b0 == before && *b1 == after && crate::cursor::bytes_eq(body, s) =>
        {
            *rest = &rest[n + 4..];
            true
        }
        _ => false,
    }
}

#[inline]
fn matches_string(rest: &mut &[u8], s: &str) -> bool {
    if is_plain(s) {
        // `"` + s + `"`, checked with one comparison.
        let n = s.len();
        match rest.get(..n + 2) {
            Some([b'"', body @ .., b'"']) if crate::cursor::bytes_eq(body, s.as_bytes()) => {
                *rest = &rest[n + 2..];
                true
            }
            _ => false,
        }
    } else {
        let mut enc = String::new();
        write_string(&mut enc, s);
        eat(rest, enc.as_bytes())
    }
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            // Go sorts map keys by their UTF-8 bytes, as Rust's `str` ordering does. serde_json
            // maps iterate sorted already unless its `preserve_order` feature is on.
            let sorted = m.keys().zip(m.keys().skip(1)).all(|(a, b)| a < b);
            let mut write_entry = |i: usize, k: &String, v: &Value| {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, v);
            };
            if sorted {
                for (i, (k, v)) in m.iter().enumerate() {
                    write_entry(i, k, v);
                }
            } else {
                let mut entries: Vec<(&String, &Value)> = m.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    write_entry(i, k, v);
                }
            }
            out.push('}');
        }
    }
}

fn write_number(out: &mut String, n: &serde_json::Number) {
    if n.is_i64() || n.is_u64() {
        let _ = write!(out, "{n}");
        return;
    }
    let f = n.as_f64().unwrap_or(0.0);
    let abs = f.abs();
    // Go: 'f' format for 1e-6 <= |f| < 1e21 (and 0), else 'e' with a sign on the exponent.
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        let _ = write!(out, "{f}");
    } else {
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((mant, exp)) if !exp.starts_with('-') => {
                let _ = write!(out, "{mant}e+{exp}");
            }
            _ => out.push_str(&s),
        }
    }
}

/// True when Go writes `s` without any escape. One table lookup per byte: 0xE2 (the first
/// byte of U+2028 and U+2029, and of other characters) conservatively takes the slow path.
fn is_plain(s: &str) -> bool {
    let escapes = |b: &u8| NEEDS_ESCAPE[usize::from(*b)];
    // Eight lookups per branch.
    let mut chunks = s.as_bytes().chunks_exact(8);
    for chunk in &mut chunks {
        if chunk.iter().fold(false, |any, b| any | escapes(b)) {
            return false;
        }
    }
    !chunks.remainder().iter().any(escapes)
}

/// Bytes that Go's encoder escapes (or that may start U+2028/U+2029).
static NEEDS_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t[b'<' as usize] = true;
    t[b'>' as usize] = true;
    t[b'&' as usize] = true;
    t[0xE2] = true;
    t
};

fn write_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    if is_plain(s) {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let b = c as u8;
                out.push_str("\\u00");
                out.push(HEX[(b >> 4) as usize] as char);
                out.push(HEX[(b & 0xf) as usize] as char);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encodes_like_go() {
        let v = json!({
            "b": 1, "a": [true, null, 1.5, 80.0, -3],
            "s": "<a href=\"x\">&</a>\n\t\u{1}\u{2028}é",
            "f": 1e21, "g": 1.5e-7, "h": 0.000001, "z": {}
        });
        assert_eq!(
            encode(&v),
            r#"{"a":[true,null,1.5,80,-3],"b":1,"f":1e+21,"g":1.5e-7,"h":0.000001,"s":"\u003ca href=\"x\"\u003e\u0026\u003c/a\u003e\n\t\u0001\u2028é","z":{}}"#
        );
    }

    #[test]
    fn streaming_match_agrees_with_encode() {
        let v = json!({"b": 1, "a": [true, null, 1.5, "x<y", {"z": "é\n"}], "c": {}});
        let text = encode(&v);
        assert!(is_encoding_of(&text, &v));
        assert!(!is_encoding_of(&format!("{text} "), &v));
        assert!(!is_encoding_of(&text[..text.len() - 1], &v));
        assert!(!is_encoding_of(&text.replace("1.5", "1.6"), &v));
        assert!(!is_encoding_of("", &v));
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            // Exact binary fractions and the exponent-format boundaries (serde_json's own float
            // parsing may be off by an ULP on arbitrary doubles, which is not ours to test).
            prop_oneof![
                any::<i32>().prop_map(|i| f64::from(i) / 64.0),
                proptest::sample::select(vec![1e21, 1.5e-7, 1e-6, 2.5e300, -4e-300]),
            ]
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            ".{0,6}".prop_map(Value::String),
            // Long enough for the word-wise scans, with the bytes Go escapes now and then.
            "[a-z0-9<>&\"\\\\\u{2028}\u{2029}\u{e9}\n]{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(".{0,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn encoding_is_valid_json_and_matches_itself(v in any_json(), w in any_json()) {
            let text = encode(&v);
            let back: Value = serde_json::from_str(&text).unwrap();
            proptest::prop_assert!(crate::compare::json_equal(&back, &v));
            proptest::prop_assert!(is_encoding_of(&text, &v));
            proptest::prop_assert_eq!(is_encoding_of(&text, &w), text == encode(&w));
        }
    }

    #[test]
    fn round_trip_and_absent_cases() {
        let mut obj = json!({"metadata": {"name": "x"}});
        assert_eq!(get(&obj).unwrap(), None);
        let applied = json!({"testing": "123"});
        set(&mut obj, &applied).unwrap();
        assert_eq!(get(&obj).unwrap(), Some(applied));
        assert_eq!(
            obj["metadata"]["annotations"][ANNOTATION],
            json!(r#"{"testing":"123"}"#)
        );

        let blank = json!({"metadata": {"annotations": {ANNOTATION: ""}}});
        assert_eq!(get(&blank).unwrap(), None);
        let null = json!({"metadata": {"annotations": {ANNOTATION: "null"}}});
        assert_eq!(get(&null).unwrap(), None);
    }

    #[test]
    fn bad_annotation_is_an_error_value() {
        for bad in [json!("{not json"), json!("[1,2]"), json!(5)] {
            let obj = json!({"metadata": {"annotations": {ANNOTATION: bad}}});
            let err = get(&obj).unwrap_err();
            assert!(err.to_string().contains(ANNOTATION), "{err}");
        }
    }

    #[test]
    fn blank_in_only_touches_the_annotation() {
        let d = json!({"metadata": {"annotations": {ANNOTATION: "{}", "other": "x"}}});
        assert_eq!(
            blank_in(&d),
            json!({"metadata": {"annotations": {ANNOTATION: "", "other": "x"}}})
        );
        let plain = json!({"metadata": {"name": "a"}});
        assert_eq!(blank_in(&plain), plain);
    }
}
