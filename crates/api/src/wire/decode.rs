//! Decoding hook responses in `loose` or `strict` mode, as upstream does.
//!
//! * loose: unknown fields are ignored; a repeated field keeps its last value.
//! * strict: an unknown field (anywhere a typed field is expected) or a repeated key
//!   (anywhere, also inside free-form objects) is an error naming the field path.
//!
//! Matching is case-sensitive in both modes, as upstream's decoder
//! (`sigs.k8s.io/json`). A body of `null` decodes to the empty response.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::hook::ResponseUnmarshallMode;

/// Why a hook response could not be decoded. Messages name the JSON path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON at all (or trailing garbage).
    #[error("hook response is not valid JSON: {0}")]
    Syntax(String),
    /// Strict mode: a field the response type does not have.
    #[error("unknown field \"{path}\" in hook response (strict mode)")]
    UnknownField {
        /// Dotted path of the field, e.g. `relatedResources.0.labelSelectr`.
        path: String,
    },
    /// Strict mode: the same key twice in one object.
    #[error("duplicate field \"{path}\" in hook response (strict mode)")]
    DuplicateField {
        /// Dotted path of the repeated field.
        path: String,
    },
    /// Valid JSON with a wrong type or value.
    #[error("invalid hook response at \"{path}\": {message}")]
    Invalid {
        /// Dotted path of the offending value (`.` for the whole body).
        path: String,
        /// What was wrong.
        message: String,
    },
}

/// Decodes a hook response body in the given mode.
pub fn decode_response<T>(body: &[u8], mode: ResponseUnmarshallMode) -> Result<T, DecodeError>
where
    T: DeserializeOwned + Default,
{
    if is_null(body) {
        return Ok(T::default());
    }
    match mode {
        ResponseUnmarshallMode::Loose => decode_loose(body),
        ResponseUnmarshallMode::Strict => decode_strict(body),
    }
}

fn is_null(body: &[u8]) -> bool {
    std::str::from_utf8(body).is_ok_and(|s| s.trim() == "null")
}

fn decode_loose<T: DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    // Going through Value gives Go's "last duplicate wins" instead of serde's error.
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| DecodeError::Syntax(e.to_string()))?;
    serde_path_to_error::deserialize(value).map_err(invalid)
}

fn decode_strict<T: DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    check_duplicates(body)?;
    let mut unknown = Vec::new();
    let mut record = |path: serde_ignored::Path<'_>| unknown.push(clean_path(&path.to_string()));
    let mut de = serde_json::Deserializer::from_slice(body);
    let ignored = serde_ignored::Deserializer::new(&mut de, &mut record);
    let value: T = serde_path_to_error::deserialize(ignored).map_err(invalid)?;
    de.end().map_err(|e| DecodeError::Syntax(e.to_string()))?;
    match unknown.into_iter().next() {
        Some(path) => Err(DecodeError::UnknownField { path }),
        None => Ok(value),
    }
}

/// serde_ignored marks `Option` layers with `?`; they are not part of the JSON path.
fn clean_path(path: &str) -> String {
    path.split('.')
        .filter(|segment| *segment != "?")
        .collect::<Vec<_>>()
        .join(".")
}

fn invalid(e: serde_path_to_error::Error<serde_json::Error>) -> DecodeError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    if inner.is_syntax() || inner.is_eof() {
        return DecodeError::Syntax(inner.to_string());
    }
    DecodeError::Invalid {
        path,
        message: inner.to_string(),
    }
}

/// Walks the whole document and reports the first key repeated within one object.
fn check_duplicates(body: &[u8]) -> Result<(), DecodeError> {
    let mut path = Vec::new();
    let mut duplicate = None;
    let mut de = serde_json::Deserializer::from_slice(body);
    let result = DupCheck {
        path: &mut path,
        duplicate: &mut duplicate,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    match (duplicate, result) {
        (Some(path), _) => Err(DecodeError::DuplicateField { path }),
        (None, Err(e)) => Err(DecodeError::Syntax(e.to_string())),
        (None, Ok(())) => Ok(()),
    }
}

struct DupCheck<'a> {
    path: &'a mut Vec<String>,
    duplicate: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for DupCheck<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DupCheck<'_> {
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
            self.path.push(index.to_string());
            let next = seq.next_element_seed(DupCheck {
                path: self.path,
                duplicate: self.duplicate,
            })?;
            self.path.pop();
            if next.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            self.path.push(key.clone());
            if !seen.insert(key) {
                *self.duplicate = Some(self.path.join("."));
                return Err(de::Error::custom("duplicate field"));
            }
            map.next_value_seed(DupCheck {
                path: self.path,
                duplicate: self.duplicate,
            })?;
            self.path.pop();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{CompositeHookResponse, CustomizeHookResponse, DecoratorHookResponse};
    use ResponseUnmarshallMode::{Loose, Strict};

    fn composite(
        body: &str,
        mode: ResponseUnmarshallMode,
    ) -> Result<CompositeHookResponse, DecodeError> {
        decode_response(body.as_bytes(), mode)
    }

    #[test]
    fn loose_ignores_unknown_fields_strict_names_them() {
        let body = r#"{"finalized": true, "unknownField": 1}"#;
        assert!(composite(body, Loose).unwrap().finalized);
        let err = composite(body, Strict).unwrap_err();
        assert_eq!(
            err,
            DecodeError::UnknownField {
                path: "unknownField".into()
            }
        );
        assert!(err.to_string().contains("\"unknownField\""), "{err}");

        let nested = r#"{"relatedResources": [{"apiVersion": "v1", "resource": "pods", "labelSelectr": {}}]}"#;
        let loose: CustomizeHookResponse = decode_response(nested.as_bytes(), Loose).unwrap();
        assert_eq!(loose.related_resource_rules[0].resource, "pods");
        let err = decode_response::<CustomizeHookResponse>(nested.as_bytes(), Strict).unwrap_err();
        assert_eq!(
            err,
            DecodeError::UnknownField {
                path: "relatedResources.0.labelSelectr".into()
            }
        );
    }

    #[test]
    fn strict_sees_unknown_fields_inside_label_selectors() {
        let body = r#"{"relatedResources": [{"apiVersion": "v1", "resource": "pods",
                        "labelSelector": {"matchLabelz": {"a": "b"}}}]}"#;
        assert!(decode_response::<CustomizeHookResponse>(body.as_bytes(), Loose).is_ok());
        assert_eq!(
            decode_response::<CustomizeHookResponse>(body.as_bytes(), Strict).unwrap_err(),
            DecodeError::UnknownField {
                path: "relatedResources.0.labelSelector.matchLabelz".into()
            }
        );
    }

    #[test]
    fn strict_accepts_unknown_fields_inside_free_form_objects() {
        let body = r#"{"children": [{"apiVersion": "v1", "kind": "Pod", "anything": {"goes": 1}}],
                       "status": {"custom": true}}"#;
        let resp = composite(body, Strict).unwrap();
        assert_eq!(resp.children[0]["anything"]["goes"], 1);
    }

    #[test]
    fn duplicates_are_errors_in_strict_and_last_wins_in_loose() {
        let body = r#"{"resyncAfterSeconds": 1, "resyncAfterSeconds": 2}"#;
        assert_eq!(composite(body, Loose).unwrap().resync_after_seconds, 2.0);
        let err = composite(body, Strict).unwrap_err();
        assert_eq!(
            err,
            DecodeError::DuplicateField {
                path: "resyncAfterSeconds".into()
            }
        );
        assert!(
            err.to_string()
                .contains("duplicate field \"resyncAfterSeconds\""),
            "{err}"
        );

        let nested = r#"{"children": [{"metadata": {"name": "a", "name": "b"}}]}"#;
        assert_eq!(
            composite(nested, Loose).unwrap().children[0]["metadata"]["name"],
            "b"
        );
        assert_eq!(
            composite(nested, Strict).unwrap_err(),
            DecodeError::DuplicateField {
                path: "children.0.metadata.name".into()
            }
        );
    }

    #[test]
    fn field_names_are_case_sensitive() {
        let body = r#"{"Finalized": true}"#;
        assert!(!composite(body, Loose).unwrap().finalized);
        assert_eq!(
            composite(body, Strict).unwrap_err(),
            DecodeError::UnknownField {
                path: "Finalized".into()
            }
        );
    }

    #[test]
    fn nulls_decode_like_go() {
        for mode in [Loose, Strict] {
            assert_eq!(
                composite("null", mode).unwrap(),
                CompositeHookResponse::default()
            );
            let resp = composite(
                r#"{"status": null, "children": null, "resyncAfterSeconds": null, "finalized": null}"#,
                mode,
            )
            .unwrap();
            assert_eq!(resp, CompositeHookResponse::default());
            let resp: DecoratorHookResponse =
                decode_response(br#"{"labels": {"gone": null}, "attachments": null}"#, mode)
                    .unwrap();
            assert_eq!(resp.labels.unwrap()["gone"], None);
        }
    }

    #[test]
    fn wrong_types_and_bad_json_are_reported_with_paths() {
        for mode in [Loose, Strict] {
            let err = composite(r#"{"resyncAfterSeconds": "soon"}"#, mode).unwrap_err();
            assert!(
                matches!(&err, DecodeError::Invalid { path, .. } if path == "resyncAfterSeconds"),
                "{err:?}"
            );
            let err = composite(r#"{"children": [1]}"#, mode);
            // A child that is not an object still decodes as a JSON value; the
            // controller rejects it when validating children.
            assert!(err.is_ok());
            assert!(matches!(composite("{", mode), Err(DecodeError::Syntax(_))));
            assert!(matches!(
                composite("{} x", mode),
                Err(DecodeError::Syntax(_))
            ));
            assert!(matches!(composite("", mode), Err(DecodeError::Syntax(_))));
        }
    }

    #[test]
    fn events_decode_in_both_modes_and_strict_checks_their_fields() {
        use crate::wire::HookEvent;
        let body = r#"{"events": [{"type": "Normal", "reason": "Started", "message": "m"},
                                  {"type": "Bogus", "reason": "x"}]}"#;
        for mode in [Loose, Strict] {
            let resp = composite(body, mode).unwrap();
            assert_eq!(resp.events[0], HookEvent::normal("Started", "m"));
            // An invalid entry still decodes: the controller skips it, the sync goes on.
            assert_eq!(resp.events[1], HookEvent::new("Bogus", "x", ""));
            let resp: DecoratorHookResponse = decode_response(body.as_bytes(), mode).unwrap();
            assert_eq!(resp.events.len(), 2);
            assert!(composite(r#"{"events": null}"#, mode)
                .unwrap()
                .events
                .is_empty());
        }
        let typo = r#"{"events": [{"type": "Normal", "reason": "R", "mesage": "m"}]}"#;
        assert_eq!(composite(typo, Loose).unwrap().events[0].message, "");
        assert_eq!(
            composite(typo, Strict).unwrap_err(),
            DecodeError::UnknownField {
                path: "events.0.mesage".into()
            }
        );
    }

    #[test]
    fn integers_are_accepted_for_resync_after_seconds() {
        assert_eq!(
            composite(r#"{"resyncAfterSeconds": 30}"#, Strict)
                .unwrap()
                .resync_after_seconds,
            30.0
        );
    }
}
