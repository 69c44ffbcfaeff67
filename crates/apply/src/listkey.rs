//! List-map keys: which field(s) identify an item of an associative list, and the key value
//! of one item. Keys are compared by value (`80` and `80.0` are the same port), never by text.

use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Value};

use crate::error::{type_name, ApplyError};
use crate::path::Path;

/// Merge keys guessed by convention, in priority order (as upstream Metacontroller).
pub const CONVENTIONAL_MERGE_KEYS: [&str; 7] = [
    "containerPort",
    "port",
    "mountPath",
    "name",
    "uid",
    "ip",
    "path",
];

/// Lists at most this long are searched linearly; longer ones get a hash index.
const LINEAR_LIMIT: usize = 16;

/// One scalar component of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum KeyPart<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(u64),
    Str(&'a str),
}

impl<'a> KeyPart<'a> {
    /// `self == other`, comparing short strings without a library call (hot in list merges).
    #[inline]
    pub(crate) fn same_as(&self, other: &KeyPart<'_>) -> bool {
        match (self, other) {
            (KeyPart::Str(a), KeyPart::Str(b)) => crate::cursor::str_eq(a, b),
            _ => self == other,
        }
    }

    /// The key part of a scalar, `None` for objects and lists.
    pub(crate) fn of(v: &'a Value) -> Option<Self> {
        Some(match v {
            Value::Null => KeyPart::Null,
            Value::Bool(b) => KeyPart::Bool(*b),
            Value::String(s) => KeyPart::Str(s),
            Value::Number(n) => number_part(n),
            Value::Array(_) | Value::Object(_) => return None,
        })
    }
}

fn number_part(n: &serde_json::Number) -> KeyPart<'static> {
    if let Some(i) = n.as_i64() {
        return KeyPart::Int(i);
    }
    if let Some(u) = n.as_u64() {
        return KeyPart::UInt(u);
    }
    let f = n.as_f64().unwrap_or(0.0);
    // Integral floats are the same item as the integer (JSON has one number type).
    if f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64 {
        KeyPart::Int(f as i64)
    } else {
        KeyPart::Float(f.to_bits())
    }
}

impl fmt::Display for KeyPart<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPart::Null => f.write_str("null"),
            KeyPart::Bool(b) => write!(f, "{b}"),
            KeyPart::Int(i) => write!(f, "{i}"),
            KeyPart::UInt(u) => write!(f, "{u}"),
            KeyPart::Float(bits) => write!(f, "{}", f64::from_bits(*bits)),
            KeyPart::Str(s) => f.write_str(s),
        }
    }
}

/// The key of one list-map item: the values of the key fields, in declaration order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ListKey<'a> {
    fields: KeyFields<'a>,
    parts: Parts<'a>,
}

#[derive(Debug, Clone, Copy)]
enum KeyFields<'a> {
    One(&'a str),
    Many(&'a [String]),
}

// Field names never take part in identity: all keys of one list share them.
impl PartialEq for KeyFields<'_> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for KeyFields<'_> {}
impl std::hash::Hash for KeyFields<'_> {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Parts<'a> {
    One(KeyPart<'a>),
    Many(Vec<KeyPart<'a>>),
}

impl fmt::Display for ListKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.fields, &self.parts) {
            (KeyFields::One(name), Parts::One(p)) => write!(f, "{name}={p}"),
            (KeyFields::Many(names), Parts::Many(parts)) => {
                for (i, (n, p)) in names.iter().zip(parts).enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{n}={p}")?;
                }
                Ok(())
            }
            // Not constructed; keep Display total anyway.
            (_, Parts::One(p)) => write!(f, "{p}"),
            (_, Parts::Many(parts)) => write!(f, "{parts:?}"),
        }
    }
}

/// How the items of one list-map are keyed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeySpec<'s> {
    fields: KeyFields<'s>,
    /// Schema defaults of the key fields (same order as `fields`), used when an item omits a
    /// key field: the API server would fill it in, so `{containerPort: 80}` must meet
    /// `{containerPort: 80, protocol: TCP}`.
    defaults: &'s [Option<Value>],
}

impl<'s> KeySpec<'s> {
    /// A single conventional key field.
    pub(crate) fn single(field: &'s str) -> Self {
        KeySpec {
            fields: KeyFields::One(field),
            defaults: &[],
        }
    }

    /// Key fields declared by a schema, with their defaults.
    pub(crate) fn declared(fields: &'s [String], defaults: &'s [Option<Value>]) -> Self {
        if fields.len() == 1 {
            KeySpec {
                fields: KeyFields::One(&fields[0]),
                defaults,
            }
        } else {
            KeySpec {
                fields: KeyFields::Many(fields),
                defaults,
            }
        }
    }

    /// Whether two items have the same key; `None` when either is not an object or has an
    /// invalid key (the general merge reports that). Allocates nothing.
    pub(crate) fn same_key(&self, a: &Value, b: &Value, path: &Path<'_>) -> Option<bool> {
        let (a, b) = (a.as_object()?, b.as_object()?);
        let mut same = true;
        for i in 0..self.len() {
            let field = self.field(i);
            let pa = self.part(a, field, i, path).ok()?;
            let pb = self.part(b, field, i, path).ok()?;
            same &= pa == pb;
        }
        Some(same)
    }

    fn len(&self) -> usize {
        match self.fields {
            KeyFields::One(_) => 1,
            KeyFields::Many(fs) => fs.len(),
        }
    }

    fn field(&self, i: usize) -> &'s str {
        match self.fields {
            KeyFields::One(f) => f,
            KeyFields::Many(fs) => &fs[i],
        }
    }

    /// The key field when there is exactly one.
    pub(crate) fn single_field(&self) -> Option<&'s str> {
        match self.fields {
            KeyFields::One(f) => Some(f),
            KeyFields::Many(_) => None,
        }
    }

    pub(crate) fn part<'v>(
        &self,
        obj: &'v Map<String, Value>,
        field: &str,
        idx: usize,
        path: &Path<'_>,
    ) -> Result<KeyPart<'v>, ApplyError>
    where
        's: 'v,
    {
        // A null key field is unset (nulls are removed on merge), so it takes the default.
        let value = match obj.get(field).filter(|v| !v.is_null()) {
            Some(v) => v,
            None => match self.defaults.get(idx).and_then(Option::as_ref) {
                Some(d) => d,
                None => return Ok(KeyPart::Null),
            },
        };
        KeyPart::of(value).ok_or_else(|| ApplyError::InvalidMergeKey {
            path: path.render(),
            key: field.to_string(),
            found: type_name(value),
        })
    }

    /// The key of one item. The caller has checked that the item is an object.
    pub(crate) fn key_of<'v>(
        &self,
        item: &'v Value,
        path: &Path<'_>,
    ) -> Result<ListKey<'v>, ApplyError>
    where
        's: 'v,
    {
        let Some(obj) = item.as_object() else {
            return Err(ApplyError::invalid(
                path.render(),
                format!("list-map item must be an object, found {}", type_name(item)),
            ));
        };
        let parts = match self.fields {
            KeyFields::One(f) => Parts::One(self.part(obj, f, 0, path)?),
            KeyFields::Many(fs) => Parts::Many(
                fs.iter()
                    .enumerate()
                    .map(|(i, f)| self.part(obj, f, i, path))
                    .collect::<Result<_, _>>()?,
            ),
        };
        Ok(ListKey {
            fields: self.fields,
            parts,
        })
    }

    /// Keys of all items of a list.
    pub(crate) fn keys_of<'v>(
        &self,
        items: &'v [Value],
        path: &Path<'_>,
    ) -> Result<Vec<ListKey<'v>>, ApplyError>
    where
        's: 'v,
    {
        items
            .iter()
            .enumerate()
            .map(|(i, item)| self.key_of(item, &Path::Index(path, i)))
            .collect()
    }
}

/// Detects a conventional list-map: every item of all given lists is an object and all share
/// one of [`CONVENTIONAL_MERGE_KEYS`] (first in that order wins). Lists without any item are not
/// list-maps (they are replaced whole, as upstream does).
///
/// Unlike upstream, a candidate key whose value is null, an object or a list in some item is
/// skipped (such a key cannot identify items, and nulls are removed on merge); upstream would
/// compare their Go `%v` renderings.
pub(crate) fn detect_conventional(lists: [&[Value]; 3]) -> Option<&'static str> {
    let items = || lists.iter().flat_map(|l| l.iter());
    // Start from a desired item: usually the smallest, so the absent candidates are ruled out
    // with the cheapest lookups.
    let first = lists.iter().rev().find_map(|l| l.first())?.as_object()?;
    if !items().all(Value::is_object) {
        return None;
    }
    let usable =
        |v: Option<&Value>| v.is_some_and(|v| !v.is_null() && !v.is_object() && !v.is_array());
    // Candidates in priority order: the first one every item has wins, so lower-priority
    // candidates are never looked at.
    CONVENTIONAL_MERGE_KEYS.into_iter().find(|key| {
        usable(first.get(*key))
            && items().all(|item| item.as_object().is_some_and(|o| usable(o.get(*key))))
    })
}

/// Lookup of first and last positions of each key in one list.
pub(crate) struct KeyIndex<'k, 'a> {
    keys: &'k [ListKey<'a>],
    map: Option<HashMap<&'k ListKey<'a>, (usize, usize)>>,
}

impl<'k, 'a> KeyIndex<'k, 'a> {
    pub(crate) fn new(keys: &'k [ListKey<'a>]) -> Self {
        let map = (keys.len() > LINEAR_LIMIT).then(|| {
            let mut m: HashMap<&'k ListKey<'a>, (usize, usize)> =
                HashMap::with_capacity(keys.len());
            for (i, k) in keys.iter().enumerate() {
                m.entry(k).and_modify(|e| e.1 = i).or_insert((i, i));
            }
            m
        });
        KeyIndex { keys, map }
    }

    /// (first, last) position of `key`. (`KeyIndex` is covariant in `'a`, so callers may query
    /// with keys borrowed from a shorter-lived list.)
    /// True when some key occurs more than once.
    pub(crate) fn has_repeats(&self) -> bool {
        match &self.map {
            Some(m) => m.len() != self.keys.len(),
            None => self
                .keys
                .iter()
                .enumerate()
                .any(|(i, k)| self.keys[..i].contains(k)),
        }
    }

    pub(crate) fn find(&self, key: &ListKey<'a>) -> Option<(usize, usize)> {
        match &self.map {
            Some(m) => m.get(key).copied(),
            None => {
                let first = self.keys.iter().position(|k| k == key)?;
                let last = self.keys.iter().rposition(|k| k == key).unwrap_or(first);
                Some((first, last))
            }
        }
    }
}
