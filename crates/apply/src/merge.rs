//! The three-way merge: apply the change from last-applied to desired onto observed.
//!
//! Rules (compatible with Metacontroller's `pkg/dynamic/apply`):
//! - fields in desired win; fields in last-applied but no longer in desired are removed;
//!   fields set only by others are kept; objects merge recursively;
//! - a `null` in desired removes the field (kubectl semantics; upstream would write `null`);
//! - a list is a list-map when the schema says so, or — where the schema says nothing — when
//!   every item of observed, last-applied and desired is an object and all share a
//!   conventional key (see [`crate::CONVENTIONAL_MERGE_KEYS`]); list-maps merge item by item
//!   with the same rule, items already present keep their observed order and new items follow
//!   in desired order; every other list is replaced whole (or set-merged if the schema says
//!   `set`);
//! - at the top level, `status` and the server-populated metadata fields are never merged:
//!   they keep their observed values (upstream reverts them after merging).

use serde_json::{Map, Value};

use crate::error::{type_name, ApplyError};
use crate::listkey::{detect_conventional, KeyIndex, KeySpec};
use crate::path::Path;
use crate::schema::{ListDecl, Schema, SchemaRef};

/// Read-only metadata fields populated by the API server; a merge never changes them
/// (upstream's `objectMetaSystemFields`).
pub const SYSTEM_METADATA_FIELDS: [&str; 7] = [
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Three-way merge by conventions only (no schema).
///
/// `observed` is the object as read from the API server (`null` if it does not exist yet),
/// `last_applied` what we applied last time (`None`/`null` if unknown), `desired` what the hook
/// wants now; the result is the object to write. `desired` must be a JSON object.
pub fn merge(
    observed: &Value,
    last_applied: Option<&Value>,
    desired: &Value,
) -> Result<Value, ApplyError> {
    merge_inner(observed, last_applied, desired, None)
}

/// Three-way merge guided by a structural schema (falls back to conventions wherever the
/// schema says nothing).
pub fn merge_with_schema(
    observed: &Value,
    last_applied: Option<&Value>,
    desired: &Value,
    schema: &Schema,
) -> Result<Value, ApplyError> {
    merge_inner(observed, last_applied, desired, Some(schema.root()))
}

pub(crate) fn merge_inner(
    observed: &Value,
    last_applied: Option<&Value>,
    desired: &Value,
    schema: Option<SchemaRef<'_>>,
) -> Result<Value, ApplyError> {
    let Value::Object(des) = desired else {
        return Err(ApplyError::invalid(
            ".",
            format!("desired must be an object, found {}", type_name(desired)),
        ));
    };
    let obs = match observed {
        Value::Object(o) => o.clone(),
        Value::Null => Map::new(),
        other => {
            return Err(ApplyError::invalid(
                ".",
                format!("observed must be an object, found {}", type_name(other)),
            ))
        }
    };
    let last = last_applied.and_then(Value::as_object);
    let merged = merge_object(&Path::Root, obs, last, des, schema, Level::Root)?;
    Ok(Value::Object(merged))
}

/// Where an object sits, for the top-level rules.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    RootMetadata,
    Nested,
}

impl Level {
    fn keeps_observed(self, key: &str) -> bool {
        match self {
            Level::Root => key == "status",
            Level::RootMetadata => SYSTEM_METADATA_FIELDS.contains(&key),
            Level::Nested => false,
        }
    }

    fn child(self, key: &str) -> Level {
        if self == Level::Root && key == "metadata" {
            Level::RootMetadata
        } else {
            Level::Nested
        }
    }
}

fn merge_object(
    path: &Path<'_>,
    mut obs: Map<String, Value>,
    last: Option<&Map<String, Value>>,
    des: &Map<String, Value>,
    schema: Option<SchemaRef<'_>>,
    level: Level,
) -> Result<Map<String, Value>, ApplyError> {
    if let Some(last) = last {
        for key in last.keys() {
            if !des.contains_key(key) && !level.keeps_observed(key) {
                obs.remove(key);
            }
        }
    }
    for (key, dv) in des {
        if level.keeps_observed(key) {
            continue;
        }
        let child_path = Path::Field(path, key);
        let child_schema = schema.and_then(|s| s.property(key));
        let lv = last.and_then(|l| l.get(key));
        let child_level = level.child(key);
        if child_level == Level::RootMetadata {
            // Metadata is always merged field by field, even when observed lacks it, so that
            // system fields echoed by a hook never reach the result.
            if let Value::Object(dm) = dv {
                let om = match obs.get_mut(key).map(std::mem::take) {
                    Some(Value::Object(om)) => om,
                    _ => Map::new(),
                };
                let lm = lv.and_then(Value::as_object);
                let merged = merge_object(&child_path, om, lm, dm, child_schema, child_level)?;
                obs.insert(key.clone(), Value::Object(merged));
                continue;
            }
        }
        match obs.get_mut(key) {
            Some(slot) => {
                let ov = std::mem::take(slot);
                match merge_value(&child_path, Some(ov), lv, dv, child_schema)? {
                    Some(v) => *slot = v,
                    None => {
                        obs.remove(key);
                    }
                }
            }
            None => {
                if let Some(v) = merge_value(&child_path, None, lv, dv, child_schema)? {
                    obs.insert(key.clone(), v);
                }
            }
        }
    }
    Ok(obs)
}

/// Merges one field. `None` means "remove the field".
fn merge_value(
    path: &Path<'_>,
    obs: Option<Value>,
    last: Option<&Value>,
    des: &Value,
    schema: Option<SchemaRef<'_>>,
) -> Result<Option<Value>, ApplyError> {
    if des.is_null() {
        return Ok(None);
    }
    match obs {
        Some(Value::Object(om)) => match des {
            Value::Object(dm) => {
                if schema.is_some_and(|s| s.map_atomic()) {
                    return Ok(Some(without_nulls(des)));
                }
                let lm = last.and_then(Value::as_object);
                let merged = merge_object(path, om, lm, dm, schema, Level::Nested)?;
                Ok(Some(Value::Object(merged)))
            }
            _ => Err(ApplyError::TypeMismatch {
                path: path.render(),
                observed: "object",
                desired: type_name(des),
            }),
        },
        Some(Value::Array(oa)) => match des {
            Value::Array(da) => {
                let la = last.and_then(Value::as_array).map(Vec::as_slice);
                merge_list(path, oa, la, da, schema).map(Some)
            }
            _ => Err(ApplyError::TypeMismatch {
                path: path.render(),
                observed: "list",
                desired: type_name(des),
            }),
        },
        // Absent, null or scalar in observed: desired is taken as is.
        _ => Ok(Some(without_nulls(des))),
    }
}

fn merge_list(
    path: &Path<'_>,
    obs: Vec<Value>,
    last: Option<&[Value]>,
    des: &[Value],
    schema: Option<SchemaRef<'_>>,
) -> Result<Value, ApplyError> {
    let last_items = last.unwrap_or_default();
    let (decl, defaults) = match schema {
        Some(s) => s.list_decl(),
        None => (None, None),
    };
    let item_schema = schema.and_then(|s| s.items());
    let all_objects = || {
        obs.iter()
            .chain(last_items)
            .chain(des)
            .all(Value::is_object)
    };
    let spec = match decl {
        Some(ListDecl::Atomic) => None,
        Some(ListDecl::Set) => return Ok(Value::Array(merge_set(obs, last_items, des))),
        // A declared map whose items are not all objects cannot be keyed: replace it.
        Some(ListDecl::Map(keys)) => {
            all_objects().then(|| KeySpec::declared(keys, defaults.unwrap_or_default()))
        }
        None => detect_conventional([&obs, last_items, des]).map(KeySpec::single),
    };
    match spec {
        Some(spec) => merge_list_map(path, obs, last_items, des, spec, item_schema),
        None => Ok(Value::Array(des.iter().map(without_nulls).collect())),
    }
}

/// What happens to one observed item of a list-map.
enum Fate {
    /// Merge with desired item `des` (the value base is observed item `base`).
    Merge { base: usize, des: usize },
    /// Keep observed item `base` untouched (set by others).
    Keep { base: usize },
    /// Removed (we applied it before and no longer want it), or a later duplicate.
    Drop,
}

fn merge_list_map(
    path: &Path<'_>,
    obs: Vec<Value>,
    last: &[Value],
    des: &[Value],
    spec: KeySpec<'_>,
    item_schema: Option<SchemaRef<'_>>,
) -> Result<Value, ApplyError> {
    let des_keys = spec.keys_of(des, path)?;
    let des_index = KeyIndex::new(&des_keys);
    let last_keys = spec.keys_of(last, path)?;
    let last_index = KeyIndex::new(&last_keys);

    // Decide each observed item's fate while the observed keys borrow the list, then consume
    // the list. With duplicate keys the first position wins and the last value is the base
    // (upstream keys its map by overwriting, so the last duplicate is what it merges).
    let mut emitted = vec![false; des.len()];
    let fates: Vec<Fate> = {
        let obs_keys = spec.keys_of(&obs, path)?;
        let obs_index = KeyIndex::new(&obs_keys);
        obs_keys
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let (first, base) = obs_index.find(key).unwrap_or((i, i));
                if first != i {
                    return Fate::Drop;
                }
                if let Some((d_first, d_last)) = des_index.find(key) {
                    emitted[d_first] = true;
                    Fate::Merge { base, des: d_last }
                } else if last_index.find(key).is_some() {
                    Fate::Drop
                } else {
                    Fate::Keep { base }
                }
            })
            .collect()
    };

    let mut slots: Vec<Option<Value>> = obs.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len() + des.len());
    for fate in fates {
        match fate {
            Fate::Drop => {}
            Fate::Keep { base } => out.extend(slots[base].take()),
            Fate::Merge { base, des: d } => {
                let key = &des_keys[d];
                let item_path = Path::Item(path, key);
                let lv = last_index.find(key).map(|(_, l)| &last[l]);
                let ov = slots[base].take();
                if let Some(v) = merge_value(&item_path, ov, lv, &des[d], item_schema)? {
                    out.push(v);
                }
            }
        }
    }
    for (i, key) in des_keys.iter().enumerate() {
        if emitted[i] {
            continue;
        }
        let Some((first, d_last)) = des_index.find(key) else {
            continue;
        };
        if first != i {
            continue;
        }
        emitted[i] = true;
        let item_path = Path::Item(path, key);
        let lv = last_index.find(key).map(|(_, l)| &last[l]);
        if let Some(v) = merge_value(&item_path, None, lv, &des[d_last], item_schema)? {
            out.push(v);
        }
    }
    Ok(Value::Array(out))
}

/// Set merge (`x-kubernetes-list-type: set`, or strategic `merge` without a key): observed
/// values stay in their order unless we applied them before and no longer want them; desired
/// values not yet present follow in desired order. Duplicates collapse.
fn merge_set(obs: Vec<Value>, last: &[Value], des: &[Value]) -> Vec<Value> {
    let contains = |list: &[Value], v: &Value| list.iter().any(|x| crate::compare::json_eq(x, v));
    let mut out: Vec<Value> = Vec::with_capacity(obs.len() + des.len());
    for v in obs {
        if contains(&out, &v) || (contains(last, &v) && !contains(des, &v)) {
            continue;
        }
        out.push(v);
    }
    for v in des {
        if v.is_null() || contains(&out, v) {
            continue;
        }
        out.push(without_nulls(v));
    }
    out
}

/// A copy of a desired value with every `null` object field removed (null means "unset").
pub(crate) fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}
