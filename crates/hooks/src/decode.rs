//! Strict and loose decoding of hook responses, for any `DeserializeOwned` type.
//!
//! * **Loose** (default for v1 hooks): unknown fields are ignored and a field given twice
//!   takes its last value, like Go's `encoding/json`. serde's derived structs reject
//!   duplicates, so when a direct decode fails and the body has duplicate keys, it is
//!   decoded again through `serde_json::Value` (which keeps the last value).
//! * **Strict** (default for v2 hooks): a first pass over the raw JSON finds any key that
//!   appears twice in one object (anywhere in the document); the decode itself runs under
//!   [`serde_ignored`], which reports every field the target type did not consume. Either
//!   is an error naming the field path, e.g. `unknown field "status.replicas"`.
//!
//! Limits of the strict check: fields captured by `#[serde(flatten)]` maps or by
//! `serde_json::Value` fields are consumed, so they never count as unknown — which is the
//! intent for free-form parts such as child objects.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use metacontroller_api::hook::ResponseUnmarshallMode;
use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// Decodes `body` as `T` in the given mode. Errors are messages naming the field path.
pub fn decode<T: DeserializeOwned>(body: &[u8], mode: ResponseUnmarshallMode) -> Result<T, String> {
    match mode {
        ResponseUnmarshallMode::Loose => decode_loose(body),
        ResponseUnmarshallMode::Strict => decode_strict(body),
    }
}

fn decode_loose<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    match serde_json::from_slice::<T>(body) {
        Ok(value) => Ok(value),
        Err(err) => match find_duplicate_key(body) {
            Ok(Some(_)) => {
                let value: serde_json::Value =
                    serde_json::from_slice(body).map_err(|e| e.to_string())?;
                serde_json::from_value(value).map_err(|e| e.to_string())
            }
            _ => Err(err.to_string()),
        },
    }
}

fn decode_strict<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    if let Some(path) = find_duplicate_key(body).map_err(|e| e.to_string())? {
        return Err(format!("strict decoding: duplicate field {path:?}"));
    }
    let mut unknown = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value: T = serde_ignored::deserialize(&mut deserializer, |path| {
        unknown.push(field_path(&path));
    })
    .map_err(|e| e.to_string())?;
    deserializer.end().map_err(|e| e.to_string())?;
    if !unknown.is_empty() {
        let listed: Vec<String> = unknown.iter().map(|p| format!("{p:?}")).collect();
        let noun = if unknown.len() == 1 {
            "field"
        } else {
            "fields"
        };
        return Err(format!(
            "strict decoding: unknown {noun} {}",
            listed.join(", ")
        ));
    }
    Ok(value)
}

/// `a.b.0.c` for a serde_ignored path, leaving out Option and newtype wrappers.
fn field_path(path: &serde_ignored::Path<'_>) -> String {
    let mut parts = Vec::new();
    let mut current = path;
    loop {
        match current {
            serde_ignored::Path::Root => break,
            serde_ignored::Path::Seq { parent, index } => {
                parts.push(index.to_string());
                current = parent;
            }
            serde_ignored::Path::Map { parent, key } => {
                parts.push(key.clone());
                current = parent;
            }
            serde_ignored::Path::Some { parent }
            | serde_ignored::Path::NewtypeStruct { parent }
            | serde_ignored::Path::NewtypeVariant { parent } => current = parent,
        }
    }
    parts.reverse();
    parts.join(".")
}

/// The path (`a.b.0.c`) of the first key that appears twice in one JSON object, if any.
/// Errors when the body is not JSON.
pub fn find_duplicate_key(body: &[u8]) -> Result<Option<String>, serde_json::Error> {
    let state = DupState::default();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let result = Walker { state: &state }.deserialize(&mut deserializer);
    if let Some(found) = state.found.into_inner() {
        return Ok(Some(found));
    }
    result?;
    deserializer.end()?;
    Ok(None)
}

#[derive(Default)]
struct DupState {
    path: RefCell<Vec<String>>,
    found: RefCell<Option<String>>,
}

impl DupState {
    fn path_with(&self, last: &str) -> String {
        let path = self.path.borrow();
        let mut parts: Vec<&str> = path.iter().map(String::as_str).collect();
        parts.push(last);
        parts.join(".")
    }
}

#[derive(Clone, Copy)]
struct Walker<'s> {
    state: &'s DupState,
}

impl<'de> DeserializeSeed<'de> for Walker<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walker<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        loop {
            self.state.path.borrow_mut().push(index.to_string());
            let next = seq.next_element_seed(self);
            self.state.path.borrow_mut().pop();
            if next?.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                *self.state.found.borrow_mut() = Some(self.state.path_with(&key));
                // Abort the walk; the caller reports the recorded path.
                return Err(de::Error::custom("duplicate key"));
            }
            self.state.path.borrow_mut().push(key);
            let value = map.next_value_seed(self);
            self.state.path.borrow_mut().pop();
            value?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Response {
        status: Option<Status>,
        #[serde(default)]
        children: Vec<serde_json::Value>,
        #[serde(default)]
        labels: BTreeMap<String, String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Status {
        replicas: i64,
    }

    const STRICT: ResponseUnmarshallMode = ResponseUnmarshallMode::Strict;
    const LOOSE: ResponseUnmarshallMode = ResponseUnmarshallMode::Loose;

    #[test]
    fn loose_ignores_unknown_fields() {
        let body = br#"{"status":{"replicas":2,"extra":1},"other":true}"#;
        let r: Response = decode(body, LOOSE).unwrap();
        assert_eq!(r.status, Some(Status { replicas: 2 }));
    }

    #[test]
    fn strict_names_unknown_fields() {
        let body = br#"{"status":{"replicas":2,"extra":1},"other":true}"#;
        let err = decode::<Response>(body, STRICT).unwrap_err();
        assert!(err.contains(r#""status.extra""#), "{err}");
        assert!(err.contains(r#""other""#), "{err}");
    }

    #[test]
    fn strict_accepts_free_form_values() {
        let body = br#"{"children":[{"kind":"Pod","anything":{"goes":1}}]}"#;
        let r: Response = decode(body, STRICT).unwrap();
        assert_eq!(r.children.len(), 1);
    }

    #[test]
    fn strict_rejects_duplicates_anywhere() {
        let err =
            decode::<Response>(br#"{"status":{"replicas":1},"status":null}"#, STRICT).unwrap_err();
        assert!(err.contains(r#"duplicate field "status""#), "{err}");
        let err = decode::<Response>(
            br#"{"children":[{},{"metadata":{"name":"a","name":"b"}}]}"#,
            STRICT,
        )
        .unwrap_err();
        assert!(err.contains(r#""children.1.metadata.name""#), "{err}");
        let err = decode::<Response>(br#"{"labels":{"a":"1","a":"2"}}"#, STRICT).unwrap_err();
        assert!(err.contains(r#""labels.a""#), "{err}");
    }

    #[test]
    fn loose_takes_last_duplicate() {
        let r: Response = decode(
            br#"{"status":{"replicas":1},"status":{"replicas":3}}"#,
            LOOSE,
        )
        .unwrap();
        assert_eq!(r.status, Some(Status { replicas: 3 }));
    }

    #[test]
    fn type_errors_fail_in_both_modes() {
        for mode in [LOOSE, STRICT] {
            let err = decode::<Response>(br#"{"status":{"replicas":"two"}}"#, mode).unwrap_err();
            assert!(err.contains("invalid type"), "{err}");
            assert!(decode::<Response>(b"{not json", mode).is_err());
            assert!(decode::<Response>(br#"{} trailing"#, mode).is_err());
        }
    }

    #[test]
    fn duplicate_finder_ignores_distinct_keys() {
        assert_eq!(
            find_duplicate_key(br#"{"a":{"b":1},"c":{"b":2},"d":[{"b":1},{"b":2}]}"#).unwrap(),
            None
        );
    }
}
