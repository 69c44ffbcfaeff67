//! Field sets as structured-merge-diff keeps them, and their `FieldsV1`
//! encoding in `managedFields` (`f:<field>`, `k:<key fields as JSON>`,
//! `v:<value as JSON>`, `i:<index>`, and `.` marking a node that is itself a
//! member of the set).

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A struct field or map key (`f:name`).
    Field(String),
    /// A list-map item by its key fields, as compact JSON with sorted keys
    /// (`k:{"name":"app"}`).
    Key(String),
    /// A set item by value, as compact JSON (`v:"foo"`).
    Value(String),
    /// A list item by index (`i:0`).
    Index(usize),
}

impl PathElement {
    /// The `FieldsV1` key of this element.
    pub fn fields_v1_key(&self) -> String {
        match self {
            PathElement::Field(f) => format!("f:{f}"),
            PathElement::Key(k) => format!("k:{k}"),
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    fn parse(s: &str) -> Option<PathElement> {
        let (kind, rest) = s.split_once(':')?;
        Some(match kind {
            "f" => PathElement::Field(rest.to_string()),
            "k" => {
                let v: Value = serde_json::from_str(rest).ok()?;
                PathElement::Key(canonical_json(&v))
            }
            "v" => {
                let v: Value = serde_json::from_str(rest).ok()?;
                PathElement::Value(canonical_json(&v))
            }
            "i" => PathElement::Index(rest.parse().ok()?),
            _ => return None,
        })
    }

    /// The element as structured-merge-diff prints it in paths:
    /// `.name`, `[name="app"]`, `[containerPort=80,protocol="TCP"]`,
    /// `[="foo"]`, `[0]`.
    pub fn display(&self) -> String {
        match self {
            PathElement::Field(f) => format!(".{f}"),
            PathElement::Key(k) => {
                let parts: Vec<String> = match serde_json::from_str::<Value>(k) {
                    Ok(Value::Object(m)) => {
                        let mut keys: Vec<&String> = m.keys().collect();
                        keys.sort();
                        keys.iter()
                            .map(|name| format!("{name}={}", canonical_json(&m[*name])))
                            .collect()
                    }
                    _ => vec![k.clone()],
                };
                format!("[{}]", parts.join(","))
            }
            PathElement::Value(v) => format!("[={v}]"),
            PathElement::Index(i) => format!("[{i}]"),
        }
    }
}

/// A field path.
pub type Path = Vec<PathElement>;

/// Prints a path like structured-merge-diff (`.spec.containers[name="a"].image`).
pub fn path_string(p: &[PathElement]) -> String {
    p.iter().map(PathElement::display).collect()
}

/// Compact JSON with object keys sorted, independent of serde_json's map
/// ordering feature.
pub fn canonical_json(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        serde_json::to_string(k).unwrap_or_default(),
                        canonical_json(&m[*k])
                    )
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical_json).collect::<Vec<_>>().join(",")
        ),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// A set of field paths, stored as a tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// No paths at all.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(FieldSet::is_empty)
    }

    /// Adds `path` (a non-empty path) as a member.
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// Whether `path` is a member.
    pub fn contains(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.contains(rest)),
        }
    }

    /// Whether any member is `prefix` or lies below it.
    pub fn has_at_or_below(&self, prefix: &[PathElement]) -> bool {
        match prefix {
            [] => !self.is_empty(),
            [last] => {
                self.members.contains(last)
                    || self.children.get(last).is_some_and(|c| !c.is_empty())
            }
            [first, rest @ ..] => self
                .children
                .get(first)
                .is_some_and(|c| c.has_at_or_below(rest)),
        }
    }

    /// Whether any member lies strictly below `prefix`.
    pub fn has_below(&self, prefix: &[PathElement]) -> bool {
        match prefix {
            [] => !self.is_empty(),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has_below(rest)),
        }
    }

    /// Set union.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (k, v) in &other.children {
            let merged = match out.children.get(k) {
                Some(mine) => mine.union(v),
                None => v.clone(),
            };
            out.children.insert(k.clone(), merged);
        }
        out
    }

    /// Members of `self` not in `other` (exact paths).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.difference(&other.members).cloned().collect(),
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => v.difference(o),
                None => v.clone(),
            };
            if !d.is_empty() {
                out.children.insert(k.clone(), d);
            }
        }
        out
    }

    /// Members in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.intersection(&other.members).cloned().collect(),
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            if let Some(o) = other.children.get(k) {
                let i = v.intersection(o);
                if !i.is_empty() {
                    out.children.insert(k.clone(), i);
                }
            }
        }
        out
    }

    /// Every member path, in sorted order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        let mut keys: BTreeSet<&PathElement> = self.members.iter().collect();
        keys.extend(self.children.keys());
        for k in keys {
            prefix.push(k.clone());
            if self.members.contains(k) {
                out.push(prefix.clone());
            }
            if let Some(c) = self.children.get(k) {
                c.collect(prefix, out);
            }
            prefix.pop();
        }
    }

    /// The `fieldsV1` JSON of this set.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        for pe in &self.members {
            if self.children.get(pe).is_none_or(|c| c.is_empty()) {
                m.insert(pe.fields_v1_key(), Value::Object(Map::new()));
            }
        }
        for (pe, c) in &self.children {
            if c.is_empty() {
                continue;
            }
            let mut sub = match c.to_fields_v1() {
                Value::Object(s) => s,
                _ => Map::new(),
            };
            if self.members.contains(pe) {
                sub.insert(".".into(), Value::Object(Map::new()));
            }
            m.insert(pe.fields_v1_key(), Value::Object(sub));
        }
        Value::Object(m)
    }

    /// Parses `fieldsV1` JSON; `None` when it is malformed.
    pub fn from_fields_v1(v: &Value) -> Option<FieldSet> {
        let m = v.as_object()?;
        let mut out = FieldSet::new();
        for (k, sub) in m {
            if k == "." {
                continue;
            }
            let pe = PathElement::parse(k)?;
            let sm = sub.as_object()?;
            if sm.is_empty() || sm.contains_key(".") {
                out.members.insert(pe.clone());
            }
            let child = FieldSet::from_fields_v1(sub)?;
            if !child.is_empty() {
                out.children.insert(pe, child);
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(s: &str) -> PathElement {
        PathElement::Field(s.into())
    }

    #[test]
    fn fields_v1_round_trip_with_dot_members() {
        let v = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}},
                       "f:replicas": {}},
            "f:metadata2": {"f:finalizers": {".": {}, "v:\"a\"": {}}}
        });
        let s = FieldSet::from_fields_v1(&v).unwrap();
        assert!(s.contains(&[f("spec"), f("replicas")]));
        assert!(s.contains(&[f("metadata"), f("labels")]));
        assert!(!s.contains(&[f("metadata")]));
        assert!(s.contains(&[
            f("spec"),
            f("containers"),
            PathElement::Key("{\"name\":\"app\"}".into())
        ]));
        assert_eq!(s.to_fields_v1(), v);
    }

    #[test]
    fn set_algebra() {
        let mut a = FieldSet::new();
        a.insert(&[f("spec"), f("a")]);
        a.insert(&[f("spec"), f("b")]);
        let mut b = FieldSet::new();
        b.insert(&[f("spec"), f("b")]);
        b.insert(&[f("spec"), f("c")]);
        assert_eq!(a.intersection(&b).paths(), vec![vec![f("spec"), f("b")]]);
        assert_eq!(a.difference(&b).paths(), vec![vec![f("spec"), f("a")]]);
        assert_eq!(a.union(&b).paths().len(), 3);
        assert!(a.has_below(&[f("spec")]));
        assert!(!a.contains(&[f("spec")]));
    }

    #[test]
    fn path_strings_like_structured_merge_diff() {
        let p = vec![
            f("spec"),
            f("ports"),
            PathElement::Key(canonical_json(&json!({"protocol": "TCP", "port": 80}))),
            f("name"),
        ];
        assert_eq!(
            path_string(&p),
            ".spec.ports[port=80,protocol=\"TCP\"].name"
        );
        assert_eq!(
            path_string(&[
                f("metadata"),
                f("finalizers"),
                PathElement::Value("\"x\"".into())
            ]),
            ".metadata.finalizers[=\"x\"]"
        );
    }

    #[test]
    fn malformed_fields_v1_is_rejected() {
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_none());
        assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_none());
        assert!(FieldSet::from_fields_v1(&json!([])).is_none());
    }
}
