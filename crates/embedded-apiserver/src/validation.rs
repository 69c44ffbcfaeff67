//! Object-meta validation with apimachinery's messages (names, labels, annotations).

use crate::errors::Cause;
use serde_json::Value;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// A core/v1 Event without `eventTime` (the legacy form client-go's recorder writes) must live
/// in its involved object's namespace, or in `default` when that object is cluster-scoped
/// (apiserver's `legacyValidateEvent`).
pub fn validate_legacy_event_namespace(event: &Value) -> Vec<Cause> {
    let has_event_time = event
        .get("eventTime")
        .is_some_and(|t| !t.is_null() && t.as_str() != Some(""));
    if has_event_time {
        return Vec::new();
    }
    let namespace = event
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let involved = event
        .pointer("/involvedObject/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let matches = if involved.is_empty() {
        namespace.is_empty() || namespace == "default"
    } else {
        namespace == involved
    };
    if matches {
        Vec::new()
    } else {
        vec![invalid(
            "involvedObject.namespace",
            involved,
            "does not match event.namespace",
        )]
    }
}

/// Which rule a resource's names follow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NameRule {
    Dns1123Subdomain,
    Dns1123Label,
    Dns1035Label,
    PathSegment,
}

/// The name rule for a built-in or custom resource.
pub fn name_rule(group: &str, resource: &str) -> NameRule {
    match (group, resource) {
        ("", "namespaces") => NameRule::Dns1123Label,
        ("", "services") => NameRule::Dns1035Label,
        ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
        _ => NameRule::Dns1123Subdomain,
    }
}

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && !s.is_empty() && s.split('.').all(is_dns_label)
}

fn invalid(field: &str, value: &str, msg: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value:?}: {msg}"),
        field: field.into(),
    }
}

/// Required-value cause.
pub fn required(field: &str, msg: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired".into(),
        message: format!("Required value: {msg}"),
        field: field.into(),
    }
}

/// Forbidden cause.
pub fn forbidden(field: &str, msg: &str) -> Cause {
    Cause {
        reason: "FieldValueForbidden".into(),
        message: format!("Forbidden: {msg}"),
        field: field.into(),
    }
}

/// Validates a name under a rule; returns the causes.
pub fn validate_name(rule: NameRule, name: &str, field: &str) -> Vec<Cause> {
    let ok = match rule {
        NameRule::Dns1123Subdomain => is_dns_subdomain(name),
        NameRule::Dns1123Label => is_dns_label(name),
        NameRule::Dns1035Label => is_dns_label(name) && name.as_bytes()[0].is_ascii_lowercase(),
        NameRule::PathSegment => {
            return if name == "." || name == ".." {
                vec![invalid(field, name, &format!("may not be '{name}'"))]
            } else if name.contains('/') || name.contains('%') {
                let bad = if name.contains('/') { "/" } else { "%" };
                vec![invalid(field, name, &format!("may not contain '{bad}'"))]
            } else {
                vec![]
            }
        }
    };
    if ok {
        return vec![];
    }
    let too_long = match rule {
        NameRule::Dns1123Subdomain => name.len() > 253,
        _ => name.len() > 63,
    };
    if too_long {
        let max = if rule == NameRule::Dns1123Subdomain {
            253
        } else {
            63
        };
        return vec![invalid(
            field,
            name,
            &format!("must be no more than {max} characters"),
        )];
    }
    let msg = match rule {
        NameRule::Dns1123Subdomain => DNS1123_SUBDOMAIN_MSG,
        NameRule::Dns1123Label => DNS1123_LABEL_MSG,
        _ => DNS1035_LABEL_MSG,
    };
    vec![invalid(field, name, msg)]
}

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn validate_qualified_key(key: &str, field: &str, out: &mut Vec<Cause>) {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if !is_dns_subdomain(p) {
            out.push(invalid(
                field,
                key,
                &format!("prefix part {DNS1123_SUBDOMAIN_MSG}"),
            ));
            return;
        }
    }
    if !is_qualified_name_part(name) {
        out.push(invalid(field, key, QUALIFIED_NAME_MSG));
    }
}

/// Validates `metadata.labels` and `metadata.annotations` keys/values.
pub fn validate_labels_annotations(obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    if let Some(labels) = obj.pointer("/metadata/labels") {
        match labels.as_object() {
            Some(m) => {
                for (k, v) in m {
                    validate_qualified_key(k, "metadata.labels", &mut out);
                    match v.as_str() {
                        Some(s) => {
                            let b = s.as_bytes();
                            let ok = s.is_empty()
                                || (b.len() <= 63
                                    && b[0].is_ascii_alphanumeric()
                                    && b[b.len() - 1].is_ascii_alphanumeric()
                                    && b.iter().all(|c| {
                                        c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')
                                    }));
                            if !ok {
                                let msg = if b.len() > 63 {
                                    "must be no more than 63 characters"
                                } else {
                                    LABEL_VALUE_MSG
                                };
                                out.push(invalid("metadata.labels", s, msg));
                            }
                        }
                        None if v.is_null() => {}
                        None => out.push(invalid(
                            "metadata.labels",
                            &v.to_string(),
                            "label values must be strings",
                        )),
                    }
                }
            }
            None if labels.is_null() => {}
            None => out.push(invalid(
                "metadata.labels",
                &labels.to_string(),
                "must be a map of strings",
            )),
        }
    }
    if let Some(ann) = obj
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        for k in ann.keys() {
            validate_qualified_key(&k.to_lowercase(), "metadata.annotations", &mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn legacy_events_live_in_their_objects_namespace_or_default() {
        let event = |ns: &str, involved: Option<&str>| {
            let mut e = json!({"metadata": {"namespace": ns}, "involvedObject": {"name": "x"}});
            if let Some(i) = involved {
                e["involvedObject"]["namespace"] = json!(i);
            }
            e
        };
        assert!(validate_legacy_event_namespace(&event("default", None)).is_empty());
        assert!(validate_legacy_event_namespace(&event("a", Some("a"))).is_empty());
        let refused = validate_legacy_event_namespace(&event("a", None));
        assert_eq!(refused[0].field, "involvedObject.namespace");
        assert_eq!(
            refused[0].message,
            "Invalid value: \"\": does not match event.namespace"
        );
        assert_eq!(
            validate_legacy_event_namespace(&event("b", Some("a"))).len(),
            1
        );
        let mut new_style = event("a", None);
        new_style["eventTime"] = json!("2024-01-01T00:00:00.000000Z");
        assert!(validate_legacy_event_namespace(&new_style).is_empty());
    }

    #[test]
    fn names() {
        assert!(validate_name(NameRule::Dns1123Subdomain, "a.b-c", "metadata.name").is_empty());
        let c = validate_name(NameRule::Dns1123Subdomain, "Bad_Name", "metadata.name");
        assert_eq!(c[0].field, "metadata.name");
        assert!(c[0]
            .message
            .starts_with("Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"));
        assert!(!validate_name(NameRule::Dns1123Label, "a.b", "metadata.name").is_empty());
        assert!(!validate_name(NameRule::Dns1035Label, "1abc", "metadata.name").is_empty());
        assert!(validate_name(NameRule::PathSegment, "system:admin", "metadata.name").is_empty());
    }

    #[test]
    fn labels() {
        let ok = json!({"metadata": {"labels": {"app.kubernetes.io/name": "x", "e": ""}}});
        assert!(validate_labels_annotations(&ok).is_empty());
        let bad = json!({"metadata": {"labels": {"a": "-x-"}}});
        assert_eq!(validate_labels_annotations(&bad).len(), 1);
    }
}
