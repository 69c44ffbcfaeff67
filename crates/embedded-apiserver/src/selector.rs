//! Label selectors (equality- and set-based) and field selectors, parsed from
//! query strings the way apimachinery's `labels.Parse` / `fields.ParseSelector` accept them.

use crate::errors::ApiError;
use crate::string_list::string_list;
use serde_json::Value;
use std::collections::BTreeMap;

/// One label requirement.
#[derive(Clone, Debug, PartialEq)]
pub enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    Gt(String, i64),
    Lt(String, i64),
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(pub Vec<Requirement>);

/// Splits at top-level commas (commas inside parentheses belong to set values).
fn split_terms(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c)
            }
            ')' => {
                depth -= 1;
                cur.push(c)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

fn parse_set(key: &str, rest: &str, raw: &str) -> Result<Vec<String>, ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad_selector(raw, &format!("expected '(' and ')' for key {key}")))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn bad_selector(raw: &str, why: &str) -> ApiError {
    ApiError::bad_request(format!(
        "unable to parse requirement: {why} (selector {raw:?})"
    ))
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h,i>3`.
    pub fn parse(raw: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for term in split_terms(raw) {
            let req = if let Some(k) = term.strip_prefix('!') {
                Requirement::NotExists(k.trim().to_string())
            } else if let Some(i) = term.find(" notin ").or_else(|| term.find(" notin(")) {
                let key = term[..i].trim().to_string();
                let vals = parse_set(&key, &term[i + 6..], raw)?;
                Requirement::NotIn(key, vals)
            } else if let Some(i) = term.find(" in ").or_else(|| term.find(" in(")) {
                let key = term[..i].trim().to_string();
                let vals = parse_set(&key, &term[i + 3..], raw)?;
                Requirement::In(key, vals)
            } else if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==") {
                Requirement::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once('=') {
                Requirement::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once('>') {
                let n = v.trim().parse().map_err(|_| {
                    bad_selector(
                        raw,
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    )
                })?;
                Requirement::Gt(k.trim().into(), n)
            } else if let Some((k, v)) = term.split_once('<') {
                let n = v.trim().parse().map_err(|_| {
                    bad_selector(
                        raw,
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    )
                })?;
                Requirement::Lt(k.trim().into(), n)
            } else {
                Requirement::Exists(term.trim().to_string())
            };
            let key = match &req {
                Requirement::Eq(k, _)
                | Requirement::NotEq(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::NotExists(k)
                | Requirement::Gt(k, _)
                | Requirement::Lt(k, _) => k,
            };
            if !valid_key(key) {
                return Err(bad_selector(raw, &format!("invalid label key {key:?}")));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Builds a selector from a `metav1.LabelSelector` object (`matchLabels` + `matchExpressions`).
    pub fn from_object(sel: &Value) -> Self {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(Requirement::Eq(
                    k.clone(),
                    v.as_str().unwrap_or_default().into(),
                ));
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let values = string_list(e.get("values"));
                match e
                    .get("operator")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                {
                    "In" => reqs.push(Requirement::In(key, values)),
                    "NotIn" => reqs.push(Requirement::NotIn(key, values)),
                    "Exists" => reqs.push(Requirement::Exists(key)),
                    "DoesNotExist" => reqs.push(Requirement::NotExists(key)),
                    _ => {}
                }
            }
        }
        LabelSelector(reqs)
    }

    /// Whether the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Matches a label map.
    pub fn matches(&self, labels: &BTreeMap<&str, &str>) -> bool {
        self.matches_with(|k| labels.get(k).copied())
    }

    /// Matches labels given by a lookup function (no map is built).
    fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEq(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|l| !vs.iter().any(|v| v == l)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::Gt(k, n) => get(k)
                .and_then(|l| l.parse::<i64>().ok())
                .is_some_and(|l| l > *n),
            Requirement::Lt(k, n) => get(k)
                .and_then(|l| l.parse::<i64>().ok())
                .is_some_and(|l| l < *n),
        })
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches_object(&self, obj: &Value) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        self.matches_with(|k| labels.and_then(|m| m.get(k)).and_then(Value::as_str))
    }

    /// String form (`a=b,c in (d)`), as the scale subresource reports selectors.
    pub fn to_query(&self) -> String {
        self.0
            .iter()
            .map(|r| match r {
                Requirement::Eq(k, v) => format!("{k}={v}"),
                Requirement::NotEq(k, v) => format!("{k}!={v}"),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Requirement::Exists(k) => k.clone(),
                Requirement::NotExists(k) => format!("!{k}"),
                Requirement::Gt(k, n) => format!("{k}>{n}"),
                Requirement::Lt(k, n) => format!("{k}<{n}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `metadata.labels` as a map of strings.
pub fn labels_of(obj: &Value) -> BTreeMap<&str, &str> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v)))
                .collect()
        })
        .unwrap_or_default()
}

/// A field selector: conjunction of `field=value` / `field!=value`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses and checks the fields against those the resource supports.
    pub fn parse(raw: &str, supported: &[String]) -> Result<Self, ApiError> {
        let mut out = Vec::new();
        for term in split_terms(raw) {
            let (k, eq, v) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{raw}'; can't understand '{term}'"
                )));
            };
            let k = k.trim().to_string();
            if k != "metadata.name" && k != "metadata.namespace" && !supported.contains(&k) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {k}"
                )));
            }
            out.push((k, eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    /// The name required by `metadata.name=<x>`, if any.
    pub fn exact_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    /// Matches an object.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let mut cur = Some(obj);
            for seg in k.split('.') {
                cur = cur.and_then(|c| c.get(seg));
            }
            let actual = match cur {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            (actual == *v) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn set_based_selectors() {
        let s = LabelSelector::parse("app in (web, api),tier notin (db),env,!legacy,x!=1").unwrap();
        assert!(s.matches_object(&obj(json!({"app": "web", "env": "p"}))));
        assert!(!s.matches_object(&obj(json!({"app": "web", "env": "p", "legacy": "y"}))));
        assert!(!s.matches_object(&obj(json!({"app": "web"}))));
        assert!(!s.matches_object(&obj(json!({"app": "web", "env": "p", "tier": "db"}))));
        assert!(!s.matches_object(&obj(json!({"app": "x", "env": "p"}))));
        assert!(!s.matches_object(&obj(json!({"app": "web", "env": "p", "x": "1"}))));
    }

    #[test]
    fn bad_label_key_is_rejected() {
        assert_eq!(LabelSelector::parse("a b=c").unwrap_err().code, 400);
    }

    #[test]
    fn field_selectors() {
        let f = FieldSelector::parse("metadata.name=a,metadata.namespace!=other", &[]).unwrap();
        assert!(f.matches_object(&obj(json!({}))));
        assert_eq!(f.exact_name(), Some("a"));
        let err = FieldSelector::parse("spec.foo=1", &[]).unwrap_err();
        assert_eq!(err.message, "field label not supported: spec.foo");
    }
}
