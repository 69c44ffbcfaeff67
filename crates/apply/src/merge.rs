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
//!   `set`), and so is an atomic map — but only when a field-wise merge (list items by
//!   position) would change it, so defaults the API server fills inside are no change;
//! - at the top level, `status` and the server-populated metadata fields are never merged:
//!   they keep their observed values (upstream reverts them after merging).

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::cursor::{key_cmp, maps_iterate_sorted, str_eq, Seek};
use crate::error::{type_name, ApplyError};
use crate::listkey::{
    detect_conventional, KeyIndex, KeyPart, KeySpec, ListKey, CONVENTIONAL_MERGE_KEYS,
};
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
/// Rules (compatible with Metacontroller's `pkg/dynamic/apply`):
/// - fields in desired win; fields in last-applied but no longer in desired are removed;
///   fields set only by others are kept; objects merge recursively;
/// - a `null` in desired removes the field;
/// - a list is a list-map when every item of observed, last-applied and desired is an object
///   and all share a conventional key ([`crate::CONVENTIONAL_MERGE_KEYS`], first in that order
///   wins); list-maps merge item by item with the same rule, items already present keep their
///   observed order and new items follow in desired order; every other list is replaced whole
///   when an item-by-item (positional) merge would change it or its length differs;
/// - top-level `status` and the server-populated metadata ([`SYSTEM_METADATA_FIELDS`]) keep
///   their observed values.
///
/// `observed` is the object as read from the API server (`null` if it does not exist yet),
/// `last_applied` what we applied last time (`None`/`null` if unknown), `desired` what the hook
/// wants now; the result is the object to write. `desired` must be a JSON object.
pub fn merge(
    observed: &Value,
    last_applied: Option<&Value>,
    desired: &Value,
) -> Result<Value, ApplyError> {
    merge_cow(observed, last_applied, desired).map(Cow::into_owned)
}

/// Three-way merge guided by a structural schema (falls back to conventions wherever the
/// schema says nothing).
pub fn merge_with_schema(
    observed: &Value,
    last_applied: Option<&Value>,
    desired: &Value,
    schema: &Schema,
) -> Result<Value, ApplyError> {
    merge_with_schema_cow(observed, last_applied, desired, schema).map(Cow::into_owned)
}

/// [`merge`], copy-on-write: `Cow::Borrowed(observed)` when the merge leaves `observed` exactly
/// as it is (the steady state of a controller; nothing is cloned or allocated then), else the
/// merged object. Pass the result to [`needs_update`](crate::needs_update), which answers
/// `false` at once for the borrowed case.
///
/// ```
/// use std::borrow::Cow;
/// use metacontroller_apply::{merge_cow, needs_update};
/// use serde_json::json;
///
/// let observed = json!({"metadata": {"name": "a", "uid": "1"}, "data": {"k": "v"}});
/// let desired = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
/// let merged = merge_cow(&observed, Some(&desired), &desired).unwrap();
/// assert!(matches!(merged, Cow::Borrowed(_)));
/// assert!(!needs_update(&observed, &merged));
/// ```
pub fn merge_cow<'o>(
    observed: &'o Value,
    last_applied: Option<&Value>,
    desired: &Value,
) -> Result<Cow<'o, Value>, ApplyError> {
    Ok(cow_of(
        observed,
        merge_opt(observed, last_applied, desired, None)?,
    ))
}

/// [`merge_with_schema`], copy-on-write (see [`merge_cow`]).
pub fn merge_with_schema_cow<'o>(
    observed: &'o Value,
    last_applied: Option<&Value>,
    desired: &Value,
    schema: &Schema,
) -> Result<Cow<'o, Value>, ApplyError> {
    Ok(cow_of(
        observed,
        merge_opt(observed, last_applied, desired, Some(schema.root()))?,
    ))
}

fn cow_of(observed: &Value, merged: Option<Value>) -> Cow<'_, Value> {
    match merged {
        Some(v) => Cow::Owned(v),
        None => Cow::Borrowed(observed),
    }
}

/// The merge, copy-on-write: `None` when the result is exactly `observed` (nothing is
/// allocated then — the steady state of a controller), else the merged object. A `null`
/// observed always yields `Some` (the result is an object).
pub(crate) fn merge_opt(
    observed: &Value,
    last_applied: Option<&Value>,
    desired: &Value,
    schema: Option<SchemaRef<'_>>,
) -> Result<Option<Value>, ApplyError> {
    // Fields the server converts whatever their value (Secret `stringData`, base64 bytes)
    // are merged in the form it stores them, on both sides of the intent: the record too, so
    // a key we stop setting through `stringData` is removed from `data` as it would be had
    // we set it there.
    let desired = crate::conversions::as_stored(desired);
    let last_applied = last_applied.map(crate::conversions::as_stored);
    let last_applied = last_applied.as_deref();
    let Value::Object(des) = &*desired else {
        return Err(ApplyError::invalid(
            ".",
            format!("desired must be an object, found {}", type_name(&desired)),
        ));
    };
    let empty = Map::new();
    let obs = match observed {
        Value::Object(o) => o,
        Value::Null => &empty,
        other => {
            return Err(ApplyError::invalid(
                ".",
                format!("observed must be an object, found {}", type_name(other)),
            ))
        }
    };
    let last = last_applied.and_then(Value::as_object);
    Ok(
        match merge_object(&Path::Root, obs, last, des, schema, Level::Root)? {
            Some(m) => Some(Value::Object(m)),
            None if observed.is_null() => Some(Value::Object(Map::new())),
            None => None,
        },
    )
}

/// Longest list merged by [`merge_aligned`] (its keys live on the stack).
const ALIGNED_LIMIT: usize = 16;

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

/// The merge result of one field, relative to its observed value.
enum Out {
    /// Exactly the observed value (or still absent).
    Same,
    /// Remove the field.
    Remove,
    /// A new value.
    New(Value),
}

/// Merges two objects; `None` when the result is exactly `obs`.
fn merge_object(
    path: &Path<'_>,
    obs: &Map<String, Value>,
    last: Option<&Map<String, Value>>,
    des: &Map<String, Value>,
    schema: Option<SchemaRef<'_>>,
    level: Level,
) -> Result<Option<Map<String, Value>>, ApplyError> {
    let sorted = maps_iterate_sorted();
    merge_object_with(path, obs, last, des, schema, level, sorted)
}

/// [`merge_object`]; `sorted` says whether maps iterate in key order (then one lockstep walk
/// over the three maps replaces per-key tree lookups).
fn merge_object_with(
    path: &Path<'_>,
    obs: &Map<String, Value>,
    last: Option<&Map<String, Value>>,
    des: &Map<String, Value>,
    schema: Option<SchemaRef<'_>>,
    level: Level,
    sorted: bool,
) -> Result<Option<Map<String, Value>>, ApplyError> {
    // In the steady state the record *is* desired (same reference): nothing was dropped from
    // desired and every last-applied value is the desired one, so skip those lookups.
    let last_is_desired = last.is_some_and(|l| std::ptr::eq(l, des));
    let last = if last_is_desired { None } else { last };
    let changes = if sorted {
        merge_fields_sorted(path, obs, last, des, schema, level, last_is_desired)?
    } else {
        merge_fields_unsorted(path, obs, last, des, schema, level, last_is_desired)?
    };
    if changes.is_empty() {
        return Ok(None);
    }
    Ok(Some(rebuild(obs, changes, sorted)))
}

/// The changed fields of an object merge, in key order, found in one lockstep walk over
/// the three maps (maps iterate in key order). `last` is `None` when the record is desired
/// itself (`last_is_desired`). The no-change case allocates nothing.
fn merge_fields_sorted<'a>(
    path: &Path<'_>,
    obs: &Map<String, Value>,
    last: Option<&'a Map<String, Value>>,
    des: &'a Map<String, Value>,
    schema: Option<SchemaRef<'_>>,
    level: Level,
    last_is_desired: bool,
) -> Result<Vec<(&'a str, Out)>, ApplyError> {
    let mut changes: Vec<(&str, Out)> = Vec::new();
    let mut in_obs = Seek::new(obs);
    let mut in_last = last.map(Seek::new);
    for (key, dv) in des {
        let mut lv = None;
        if let Some(in_last) = in_last.as_mut() {
            // Record keys below this one are not in desired.
            lv = in_last.get_after(key, |lk| {
                if let Some(out) = removal(level, lk, in_obs.get(lk)) {
                    changes.push((lk, out));
                }
            });
        } else if last_is_desired {
            lv = Some(dv);
        }
        let ov = in_obs.get(key);
        if ov.is_some_and(|ov| same_scalar(ov, dv)) {
            continue;
        }
        if schema.is_none() && level == Level::Nested {
            if let Some(out) = merge_schemaless_nested(path, key, ov, lv, dv)? {
                if !matches!(out, Out::Same) {
                    changes.push((key, out));
                }
                continue;
            }
        }
        merge_field(path, key, ov, lv, dv, schema, level, &mut changes)?;
    }
    if let Some(in_last) = in_last.as_mut() {
        while let Some((lk, _)) = in_last.next_below(None) {
            if let Some(out) = removal(level, lk, in_obs.get(lk)) {
                changes.push((lk, out));
            }
        }
    }
    Ok(changes)
}

/// The changed fields of an object merge (maps not in key order): the fields the record has
/// and desired lacks first, then desired's fields, each by lookup. `last` is `None` when the
/// record is desired itself (`last_is_desired`).
fn merge_fields_unsorted<'a>(
    path: &Path<'_>,
    obs: &Map<String, Value>,
    last: Option<&'a Map<String, Value>>,
    des: &'a Map<String, Value>,
    schema: Option<SchemaRef<'_>>,
    level: Level,
    last_is_desired: bool,
) -> Result<Vec<(&'a str, Out)>, ApplyError> {
    let mut changes: Vec<(&str, Out)> = Vec::new();
    if let Some(last) = last {
        for key in last.keys() {
            if !des.contains_key(key) {
                if let Some(out) = removal(level, key, obs.get(key)) {
                    changes.push((key, out));
                }
            }
        }
    }
    for (key, dv) in des {
        let lv = if last_is_desired {
            Some(dv)
        } else {
            last.and_then(|l| l.get(key))
        };
        merge_field(path, key, obs.get(key), lv, dv, schema, level, &mut changes)?;
    }
    Ok(changes)
}

/// The change for a field we applied before and no longer want: removed, unless observed
/// lacks it or the level keeps it.
fn removal(level: Level, key: &str, ov: Option<&Value>) -> Option<Out> {
    (ov.is_some() && !level.keeps_observed(key)).then_some(Out::Remove)
}

/// Merges a nested object or list field where no schema applies, directly (what
/// [`merge_field`] would do, without its per-field rules); `None` when observed and desired
/// are not both objects or both lists.
#[inline]
fn merge_schemaless_nested(
    path: &Path<'_>,
    key: &str,
    ov: Option<&Value>,
    lv: Option<&Value>,
    dv: &Value,
) -> Result<Option<Out>, ApplyError> {
    let child_path = Path::Field(path, key);
    match (ov, dv) {
        (Some(Value::Object(om)), Value::Object(dm)) => {
            let lm = lv.and_then(Value::as_object);
            Ok(Some(
                match merge_object(&child_path, om, lm, dm, None, Level::Nested)? {
                    Some(m) => Out::New(Value::Object(m)),
                    None => Out::Same,
                },
            ))
        }
        (Some(Value::Array(oa)), Value::Array(da)) => {
            let la = lv.and_then(Value::as_array).map(Vec::as_slice);
            merge_list(&child_path, oa, la, da, None).map(Some)
        }
        _ => Ok(None),
    }
}

/// Merges the field `key` of an object, recording a change.
#[allow(clippy::too_many_arguments)]
#[inline]
fn merge_field<'k>(
    path: &Path<'_>,
    key: &'k str,
    ov: Option<&Value>,
    lv: Option<&Value>,
    dv: &Value,
    schema: Option<SchemaRef<'_>>,
    level: Level,
    changes: &mut Vec<(&'k str, Out)>,
) -> Result<(), ApplyError> {
    if level.keeps_observed(key) {
        return Ok(());
    }
    let child_path = Path::Field(path, key);
    let child_schema = schema.and_then(|s| s.property(key));
    let child_level = level.child(key);
    let out = if child_level == Level::RootMetadata {
        // Metadata is always merged field by field, even when observed lacks it, so that
        // system fields echoed by a hook never reach the result.
        match dv {
            Value::Object(dm) => {
                let empty = Map::new();
                let om = ov.and_then(Value::as_object).unwrap_or(&empty);
                let lm = lv.and_then(Value::as_object);
                let merged = merge_object(&child_path, om, lm, dm, child_schema, child_level)?;
                match (merged, ov) {
                    (Some(m), _) => Out::New(Value::Object(m)),
                    (None, Some(Value::Object(_))) => Out::Same,
                    (None, _) => Out::New(Value::Object(Map::new())),
                }
            }
            _ => merge_value(&child_path, ov, lv, dv, child_schema)?,
        }
    } else {
        merge_value(&child_path, ov, lv, dv, child_schema)?
    };
    if !matches!(out, Out::Same) {
        changes.push((key, out));
    }
    Ok(())
}

/// `obs` with the changes applied. Unchanged fields are cloned once; the changed ones are
/// moved in (cloning `obs` whole first would copy the changed subtrees for nothing).
fn rebuild(
    obs: &Map<String, Value>,
    changes: Vec<(&str, Out)>,
    sorted: bool,
) -> Map<String, Value> {
    let mut merged = Map::new();
    if sorted {
        // Both in key order: a merge join.
        let mut changes = changes.into_iter().peekable();
        for (k, v) in obs {
            while let Some((ck, out)) = changes.next_if(|(ck, _)| key_cmp(ck, k).is_lt()) {
                if let Out::New(v) = out {
                    merged.insert(ck.to_string(), v);
                }
            }
            match changes.next_if(|(ck, _)| *ck == k.as_str()) {
                Some((_, Out::New(v))) => {
                    merged.insert(k.clone(), v);
                }
                Some((_, Out::Remove)) => {}
                Some((_, Out::Same)) | None => {
                    merged.insert(k.clone(), v.clone());
                }
            }
        }
        for (ck, out) in changes {
            if let Out::New(v) = out {
                merged.insert(ck.to_string(), v);
            }
        }
    } else {
        merged = obs.clone();
        for (key, out) in changes {
            match out {
                Out::Same => {}
                Out::Remove => {
                    merged.remove(key);
                }
                Out::New(v) => {
                    merged.insert(key.to_string(), v);
                }
            }
        }
    }
    merged
}

/// Merges one field.
fn merge_value(
    path: &Path<'_>,
    obs: Option<&Value>,
    last: Option<&Value>,
    des: &Value,
    schema: Option<SchemaRef<'_>>,
) -> Result<Out, ApplyError> {
    if des.is_null() {
        return Ok(if obs.is_some() {
            Out::Remove
        } else {
            Out::Same
        });
    }
    match obs {
        Some(Value::Object(om)) => match des {
            Value::Object(dm) => {
                let lm = last.and_then(Value::as_object);
                if schema.is_some_and(|s| s.map_atomic()) {
                    return Ok(replace_atomic_map(path, obs, om, lm, dm, des, schema));
                }
                let out = match merge_object(path, om, lm, dm, schema, Level::Nested)? {
                    Some(m) => Out::New(Value::Object(m)),
                    None => Out::Same,
                };
                Ok(retain_desired_keys(
                    out,
                    des,
                    schema.is_some_and(|s| s.retain_keys()),
                ))
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
                merge_list(path, oa, la, da, schema)
            }
            _ => Err(ApplyError::TypeMismatch {
                path: path.render(),
                observed: "list",
                desired: type_name(des),
            }),
        },
        // Absent, null or scalar in observed: desired is taken as is, unless observed is
        // what the server stored for the same value applied before.
        _ => Ok(match obs {
            Some(o) if stored_as(o, last, des) => Out::Same,
            _ => replace_with(obs, des),
        }),
    }
}

/// True when observed `o` is the form the API server stored for desired `des`, which we
/// applied before as well (`last` is the same value): a quantity written `0.5` reads back
/// as `500m`, in any field, list or map, with or without a schema. The record is what makes
/// the field a quantity: the server changed exactly what we wrote into its stored form (a
/// string field keeps what it is given), and our intent did not change since; a desired
/// value that changed is written.
fn stored_as(o: &Value, last: Option<&Value>, des: &Value) -> bool {
    let (Value::String(stored), Some(last)) = (o, last) else {
        return false;
    };
    matches!(des, Value::String(_) | Value::Number(_))
        && !eq_without_nulls(o, des)
        && crate::compare::json_equal(last, des)
        && crate::quantity_form::server_form_of(des).is_some_and(|s| s == *stored)
}

/// `x-kubernetes-patch-strategy: retainKeys`: when the merge changes an object, fields that
/// desired does not set are cleared (kubectl sends `$retainKeys` with the keys of desired in
/// every non-empty patch of such an object). An object the merge leaves alone keeps every
/// field, so server defaults inside it cause no write.
fn retain_desired_keys(out: Out, des: &Value, retain: bool) -> Out {
    match (out, des) {
        (Out::New(Value::Object(mut m)), Value::Object(dm)) if retain => {
            m.retain(|k, _| dm.get(k).is_some_and(|v| !v.is_null()));
            Out::New(Value::Object(m))
        }
        (out, _) => out,
    }
}

/// True when both are the same string, bool or (identically written) number: such a field
/// merges to its observed value whatever the record, level or schema say. A cheap check that
/// spares most leaves of an unchanged object the general merge.
#[inline]
fn same_scalar(o: &Value, d: &Value) -> bool {
    match (o, d) {
        (Value::String(a), Value::String(b)) => str_eq(a, b),
        (Value::Number(a), Value::Number(b)) => a == b,
        (Value::Bool(a), Value::Bool(b)) => a == b,
        _ => false,
    }
}

/// Replace the observed value with desired (nulls removed), unless it already is exactly that.
fn replace_with(obs: Option<&Value>, des: &Value) -> Out {
    match obs {
        Some(o) if eq_without_nulls(o, des) => Out::Same,
        _ => Out::New(without_nulls(des)),
    }
}

/// `o == without_nulls(d)` (numbers by value), without building the copy.
fn eq_without_nulls(o: &Value, d: &Value) -> bool {
    match (o, d) {
        (Value::Object(om), Value::Object(dm)) => {
            dm.iter().filter(|(_, v)| !v.is_null()).count() == om.len()
                && dm.iter().all(|(k, dv)| {
                    dv.is_null() || om.get(k).is_some_and(|ov| eq_without_nulls(ov, dv))
                })
        }
        (Value::Array(oa), Value::Array(da)) => {
            oa.len() == da.len() && oa.iter().zip(da).all(|(x, y)| eq_without_nulls(x, y))
        }
        (Value::Number(_), Value::Number(_)) => crate::compare::json_equal(o, d),
        _ => o == d,
    }
}

fn merge_list(
    path: &Path<'_>,
    obs: &[Value],
    last: Option<&[Value]>,
    des: &[Value],
    schema: Option<SchemaRef<'_>>,
) -> Result<Out, ApplyError> {
    let last_items = last.unwrap_or_default();
    let (decl, defaults) = match schema {
        Some(s) => s.list_decl(),
        None => (None, None),
    };
    let items = ItemRules {
        schema: schema.and_then(|s| s.items()),
        // `retainKeys` on a list applies to its items.
        retain_keys: schema.is_some_and(|s| s.retain_keys()),
    };
    let all_objects = || {
        obs.iter()
            .chain(last_items)
            .chain(des)
            .all(Value::is_object)
    };
    let spec = match decl {
        Some(ListDecl::Atomic) => None,
        Some(ListDecl::Set) => return Ok(merge_set(obs, last_items, des)),
        // A declared map whose items are not all objects cannot be keyed: replace it.
        Some(ListDecl::Map(keys)) => {
            all_objects().then(|| KeySpec::declared(keys, defaults.unwrap_or_default()))
        }
        None => {
            match merge_conventional_small(path, obs, last_items, des, items)? {
                Conventional::Merged(out) => return Ok(out),
                Conventional::Keyed(field) => Some(KeySpec::single(field)),
                Conventional::NotMap => None,
                Conventional::Long => {
                    // Skip the record when it is desired itself (steady state).
                    let last_items = if std::ptr::eq(last_items, des) {
                        &[][..]
                    } else {
                        last_items
                    };
                    detect_conventional([obs, last_items, des]).map(KeySpec::single)
                }
            }
        }
    };
    match spec {
        Some(spec) => match merge_aligned(path, obs, last_items, des, spec, items)? {
            Some(out) => Ok(out),
            None => merge_list_map(path, obs, last_items, des, spec, items),
        },
        None => Ok(replace_unkeyed_list(
            path,
            obs,
            last_items,
            des,
            items.schema,
        )),
    }
}

/// An atomic map (`x-kubernetes-map-type: atomic`) is written whole, but only when a
/// field-wise three-way merge would change something: fields the API server defaults inside
/// it (`fieldRef.apiVersion`) or others added are then no reason to write, while a changed or
/// removed field of ours still replaces the whole value (which drops those extra fields, as
/// atomic means).
fn replace_atomic_map(
    path: &Path<'_>,
    obs: Option<&Value>,
    om: &Map<String, Value>,
    lm: Option<&Map<String, Value>>,
    dm: &Map<String, Value>,
    des: &Value,
    schema: Option<SchemaRef<'_>>,
) -> Out {
    match merge_object(path, om, lm, dm, schema, Level::Nested) {
        Ok(None) => Out::Same,
        // Changed, or not mergeable field by field: replacing is always valid for an atomic.
        Ok(Some(_)) | Err(_) => replace_with(obs, des),
    }
}

/// An atomic or un-keyed list is written whole, but only when it has a different length than
/// desired or a positional three-way merge of its items (observed, record, desired) would
/// change one: an item the API server filled with defaults (`volumeClaimTemplates[].spec.
/// volumeMode`, `ingress[].ports[].protocol`) is no reason to write. The record is used
/// positionally when it has desired's length (else a field we dropped since is not seen, but
/// then observed, written from that record, has another length too, or someone rewrote it).
fn replace_unkeyed_list(
    path: &Path<'_>,
    obs: &[Value],
    last: &[Value],
    des: &[Value],
    item_schema: Option<SchemaRef<'_>>,
) -> Out {
    if obs.len() == des.len() {
        let last = (last.len() == des.len()).then_some(last);
        let unchanged = obs.iter().zip(des).enumerate().all(|(i, (o, d))| {
            if same_scalar(o, d) {
                return true;
            }
            let item_path = Path::Index(path, i);
            let l = last.map(|l| &l[i]);
            // An item that cannot merge field by field (type change) is a change.
            matches!(
                merge_value(&item_path, Some(o), l, d, item_schema),
                Ok(Out::Same)
            ) || eq_without_nulls(o, d)
        });
        if unchanged {
            return Out::Same;
        }
    }
    Out::New(Value::Array(des.iter().map(without_nulls).collect()))
}

/// Bit `i` set when the object has a usable (non-null scalar) field
/// `CONVENTIONAL_MERGE_KEYS[i]`.
fn conventional_fields(obj: &Map<String, Value>) -> u8 {
    let mut found = 0;
    for (k, v) in obj {
        let bit = match k.as_str() {
            "containerPort" => 0,
            "port" => 1,
            "mountPath" => 2,
            "name" => 3,
            "uid" => 4,
            "ip" => 5,
            "path" => 6,
            _ => continue,
        };
        if !v.is_null() && KeyPart::of(v).is_some() {
            found |= 1 << bit;
        }
    }
    found
}

/// How the items of a list merge (from the list's schema).
#[derive(Clone, Copy, Default)]
struct ItemRules<'s> {
    /// The items' schema.
    schema: Option<SchemaRef<'s>>,
    /// The list is declared `retainKeys` (see [`retain_desired_keys`]).
    retain_keys: bool,
}

/// What [`merge_conventional_small`] found.
enum Conventional {
    /// Lists too long for it: detect the key the general way.
    Long,
    /// Not a conventional list-map.
    NotMap,
    /// A list-map by this conventional key, not aligned: merge it the general way.
    Keyed(&'static str),
    /// Aligned list-map, merged.
    Merged(Out),
}

/// For short lists without a schema: [`detect_conventional`] and [`merge_aligned`] in one pass,
/// so every item's key field is looked up once (detection and keying need the same lookups).
#[inline(never)]
fn merge_conventional_small<'v>(
    path: &Path<'_>,
    obs: &'v [Value],
    last: &'v [Value],
    des: &'v [Value],
    items: ItemRules<'_>,
) -> Result<Conventional, ApplyError> {
    let last_is_desired = std::ptr::eq(last, des);
    // Skip the record when it is desired itself (steady state).
    let last = if last_is_desired { &[][..] } else { last };
    if des.len() > ALIGNED_LIMIT || obs.len() > ALIGNED_LIMIT || last.len() > ALIGNED_LIMIT {
        return Ok(Conventional::Long);
    }
    let lists = [des, obs, last];
    let Some(first) = lists.iter().find_map(|l| l.first()) else {
        return Ok(Conventional::NotMap);
    };
    if !lists.iter().all(|l| l.iter().all(Value::is_object)) {
        return Ok(Conventional::NotMap);
    }
    let part_of = |item: &'v Value, key: &str| {
        item.as_object()
            .and_then(|o| o.get(key))
            .filter(|v| !v.is_null())
            .and_then(KeyPart::of)
    };
    let n = des.len();
    // Candidates: the conventional keys the first item has (one pass over its fields).
    let candidates = first.as_object().map_or(0, conventional_fields);
    // In priority order; the first one every item has is the key.
    for (c, &key) in CONVENTIONAL_MERGE_KEYS.iter().enumerate() {
        if candidates & (1 << c) == 0 {
            continue;
        }
        let mut keys = [KeyPart::Null; ALIGNED_LIMIT];
        let mut aligned = n > 0 && obs.len() == n && (last_is_desired || last.len() == n);
        let mut usable = true;
        for (i, item) in des.iter().enumerate() {
            match part_of(item, key) {
                Some(k) => {
                    aligned &= !keys[..i].iter().any(|p| p.same_as(&k));
                    keys[i] = k;
                }
                None => {
                    usable = false;
                    break;
                }
            }
        }
        for list in [obs, last] {
            if !usable {
                break;
            }
            for (i, item) in list.iter().enumerate() {
                match part_of(item, key) {
                    Some(k) => aligned &= keys.get(i).is_some_and(|p| p.same_as(&k)),
                    None => {
                        usable = false;
                        break;
                    }
                }
            }
        }
        if !usable {
            continue;
        }
        if !aligned {
            return Ok(Conventional::Keyed(key));
        }
        let last = if last_is_desired { des } else { last };
        let spec = KeySpec::single(key);
        return Ok(Conventional::Merged(merge_pairwise(
            path, obs, last, des, spec, items,
        )?));
    }
    Ok(Conventional::NotMap)
}

/// The list-map merge when observed (and the record) hold exactly the desired keys in the
/// desired order, as in the steady state: items merge pairwise, no index is built and nothing
/// is allocated unless an item changes. `None` when the lists are not so aligned (or are long,
/// have duplicate or multi-field keys, or a key is invalid): then the general merge decides,
/// with the same result it gives aligned lists.
fn merge_aligned<'v>(
    path: &Path<'_>,
    obs: &'v [Value],
    last: &'v [Value],
    des: &'v [Value],
    spec: KeySpec<'v>,
    items: ItemRules<'_>,
) -> Result<Option<Out>, ApplyError> {
    let n = des.len();
    let last_is_desired = std::ptr::eq(last, des);
    if n == 0 || n > ALIGNED_LIMIT || obs.len() != n || !(last_is_desired || last.len() == n) {
        return Ok(None);
    }
    let Some(field) = spec.single_field() else {
        // Multi-field keys: compared field by field, without building keys.
        let same = |a: &Value, b: &Value| spec.same_key(a, b, path);
        for (i, d) in des.iter().enumerate() {
            // Every desired key valid and unique (an item compared with itself is checked).
            for earlier in &des[..i] {
                if same(earlier, d) != Some(false) {
                    return Ok(None);
                }
            }
            if same(d, d) != Some(true) || same(&obs[i], d) != Some(true) {
                return Ok(None);
            }
            if !last_is_desired && same(&last[i], d) != Some(true) {
                return Ok(None);
            }
        }
        return merge_pairwise(path, obs, last, des, spec, items).map(Some);
    };
    let part_of = |item: &'v Value| {
        item.as_object()
            .and_then(|o| spec.part(o, field, 0, path).ok())
    };
    let mut keys = [KeyPart::Null; ALIGNED_LIMIT];
    for (i, item) in des.iter().enumerate() {
        match part_of(item) {
            Some(k) if !keys[..i].contains(&k) => keys[i] = k,
            _ => return Ok(None),
        }
    }
    let same_keys = |list: &'v [Value]| {
        list.iter()
            .zip(&keys)
            .all(|(item, k)| part_of(item) == Some(*k))
    };
    if !same_keys(obs) || !(last_is_desired || same_keys(last)) {
        return Ok(None);
    }
    merge_pairwise(path, obs, last, des, spec, items).map(Some)
}

/// Merges aligned list-map items pairwise (items named by `spec` in error paths).
fn merge_pairwise(
    path: &Path<'_>,
    obs: &[Value],
    last: &[Value],
    des: &[Value],
    spec: KeySpec<'_>,
    items: ItemRules<'_>,
) -> Result<Out, ApplyError> {
    let n = des.len();
    let last_is_desired = std::ptr::eq(last, des);
    // Built only once some item changes.
    let mut merged: Option<Vec<Value>> = None;
    for (i, (o, d)) in obs.iter().zip(des).enumerate() {
        let item_path = Path::Keyed(path, spec, d);
        let l = if last_is_desired { d } else { &last[i] };
        let out = match (o, d, items.schema) {
            _ if same_scalar(o, d) => Out::Same,
            // Object items without a schema recurse directly (what `merge_value` would do).
            (Value::Object(om), Value::Object(dm), None) => {
                match merge_object(&item_path, om, l.as_object(), dm, None, Level::Nested)? {
                    Some(m) => Out::New(Value::Object(m)),
                    None => Out::Same,
                }
            }
            _ => merge_value(&item_path, Some(o), Some(l), d, items.schema)?,
        };
        let out = retain_desired_keys(out, d, items.retain_keys);
        match (out, &mut merged) {
            (Out::Same, None) => {}
            (Out::Same, Some(m)) => m.push(o.clone()),
            (out, m) => {
                let m = m.get_or_insert_with(|| {
                    let mut m = Vec::with_capacity(n);
                    m.extend(obs[..i].iter().cloned());
                    m
                });
                if let Out::New(v) = out {
                    m.push(v);
                }
            }
        }
    }
    Ok(match merged {
        Some(m) => Out::New(Value::Array(m)),
        None => Out::Same,
    })
}

/// Merges a list-map: observed items keep their order, each merged with desired's item of
/// the same key or dropped when we applied it before and no longer want it; desired items
/// observed lacks follow in desired order.
fn merge_list_map(
    path: &Path<'_>,
    obs: &[Value],
    last: &[Value],
    des: &[Value],
    spec: KeySpec<'_>,
    rules: ItemRules<'_>,
) -> Result<Out, ApplyError> {
    let des_keys = spec.keys_of(des, path)?;
    let last_is_desired = std::ptr::eq(last, des);
    let last_keys = if last_is_desired {
        Vec::new()
    } else {
        spec.keys_of(last, path)?
    };
    let obs_keys = spec.keys_of(obs, path)?;
    let lists = KeyedLists {
        obs,
        last,
        des,
        obs_keys: &obs_keys,
        des_keys: &des_keys,
        obs_index: KeyIndex::new(&obs_keys),
        last_index: if last_is_desired {
            KeyIndex::new(&des_keys)
        } else {
            KeyIndex::new(&last_keys)
        },
        des_index: KeyIndex::new(&des_keys),
    };

    // A key that repeats does not identify an item (53/TCP and 53/UDP both have `port: 53`):
    // merging by it would fold distinct entries into one. Upstream folds them (it keys a map
    // by overwriting and writes the survivor at every duplicate position); a cluster that
    // validates the list rejects that write, so what users see upstream is the list left as
    // it is. We leave it as it is without the failing write; an empty observed list takes
    // desired whole (nothing can be lost there). The record is not consulted: it only says
    // which keys to remove, and a rule depending on it would not be idempotent (the next
    // sync's record is desired).
    if lists.obs_index.has_repeats() || lists.des_index.has_repeats() {
        return Ok(if obs.is_empty() {
            replace_with(Some(&Value::Array(Vec::new())), &Value::Array(des.to_vec()))
        } else {
            Out::Same
        });
    }
    let mut emitted = vec![false; des.len()];
    let (items, changed) = lists.merge_observed(path, rules, &mut emitted)?;
    let added = lists.merge_added(path, rules, &mut emitted)?;
    if !changed && added.is_empty() {
        return Ok(Out::Same);
    }
    Ok(Out::New(Value::Array(assemble_list_map(obs, items, added))))
}

/// The merged list-map: the observed items kept (cloned when unchanged) in observed order,
/// then the added ones.
fn assemble_list_map(obs: &[Value], items: Vec<(usize, Out)>, added: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(items.len() + added.len());
    for (base, item) in items {
        match item {
            Out::Same => out.push(obs[base].clone()),
            Out::New(v) => out.push(v),
            Out::Remove => {}
        }
    }
    out.extend(added);
    out
}

/// The three lists of a list-map merge with their items' keys, indexed by key.
struct KeyedLists<'k, 'v> {
    obs: &'v [Value],
    last: &'v [Value],
    des: &'v [Value],
    obs_keys: &'k [ListKey<'v>],
    des_keys: &'k [ListKey<'v>],
    obs_index: KeyIndex<'k, 'v>,
    /// The record's keys (desired's when the record is desired itself).
    last_index: KeyIndex<'k, 'v>,
    des_index: KeyIndex<'k, 'v>,
}

impl KeyedLists<'_, '_> {
    /// Walks observed in order: an item desired has is merged with desired's item of its
    /// key (marked in `emitted`), one only the record has is dropped, any other is kept.
    /// Returns the observed position and merge result of each item kept, and whether the
    /// list differs from observed so far.
    fn merge_observed(
        &self,
        path: &Path<'_>,
        rules: ItemRules<'_>,
        emitted: &mut [bool],
    ) -> Result<(Vec<(usize, Out)>, bool), ApplyError> {
        let mut changed = false;
        let mut items: Vec<(usize, Out)> = Vec::with_capacity(self.obs.len());
        for (i, key) in self.obs_keys.iter().enumerate() {
            let (first, base) = self.obs_index.find(key).unwrap_or((i, i));
            if first != i {
                changed = true;
                continue;
            }
            if let Some((d_first, d_last)) = self.des_index.find(key) {
                emitted[d_first] = true;
                let lv = self.last_index.find(key).map(|(_, l)| &self.last[l]);
                let item_path = Path::Item(path, &self.des_keys[d_last]);
                let dv = &self.des[d_last];
                let out = merge_value(&item_path, Some(&self.obs[base]), lv, dv, rules.schema)?;
                let out = retain_desired_keys(out, dv, rules.retain_keys);
                changed |= base != i || !matches!(out, Out::Same);
                items.push((base, out));
            } else if self.last_index.find(key).is_some() {
                changed = true;
            } else {
                changed |= base != i;
                items.push((base, Out::Same));
            }
        }
        Ok((items, changed))
    }

    /// The desired items not `emitted` by [`KeyedLists::merge_observed`] (observed lacks
    /// their key), each merged with the record's item of its key, in desired order.
    fn merge_added(
        &self,
        path: &Path<'_>,
        rules: ItemRules<'_>,
        emitted: &mut [bool],
    ) -> Result<Vec<Value>, ApplyError> {
        let mut added: Vec<Value> = Vec::new();
        for (i, key) in self.des_keys.iter().enumerate() {
            if emitted[i] {
                continue;
            }
            let Some((first, d_last)) = self.des_index.find(key) else {
                continue;
            };
            if first != i {
                continue;
            }
            emitted[i] = true;
            let item_path = Path::Item(path, key);
            let lv = self.last_index.find(key).map(|(_, l)| &self.last[l]);
            if let Out::New(v) = merge_value(&item_path, None, lv, &self.des[d_last], rules.schema)?
            {
                added.push(v);
            }
        }
        Ok(added)
    }
}

/// Set merge (`x-kubernetes-list-type: set`, or strategic `merge` without a key): observed
/// values stay in their order unless we applied them before and no longer want them; desired
/// values not yet present follow in desired order. Duplicates collapse.
fn merge_set(obs: &[Value], last: &[Value], des: &[Value]) -> Out {
    let contains =
        |list: &[&Value], v: &Value| list.iter().any(|x| crate::compare::json_equal(x, v));
    let has = |list: &[Value], v: &Value| list.iter().any(|x| crate::compare::json_equal(x, v));
    let mut kept: Vec<&Value> = Vec::with_capacity(obs.len() + des.len());
    for v in obs {
        if contains(&kept, v) || (has(last, v) && !has(des, v)) {
            continue;
        }
        kept.push(v);
    }
    let mut changed = kept.len() != obs.len();
    let mut added: Vec<Value> = Vec::new();
    for v in des {
        if v.is_null() || contains(&kept, v) || added.iter().any(|a| eq_without_nulls(a, v)) {
            continue;
        }
        changed = true;
        added.push(without_nulls(v));
    }
    if !changed {
        return Out::Same;
    }
    let mut out: Vec<Value> = kept.into_iter().cloned().collect();
    out.extend(added);
    Out::New(Value::Array(out))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: &Value) -> &Map<String, Value> {
        v.as_object().unwrap()
    }

    #[test]
    fn unsorted_walk_agrees_with_the_lockstep_walk() {
        // (observed, last-applied, desired): removals before, between and after desired keys,
        // additions, changes, kept status and system metadata.
        let cases = [
            (
                json!({"a": 1, "b": 2, "c": 3, "status": {"x": 1},
                       "metadata": {"uid": "u", "name": "n", "labels": {"k": "v"}}}),
                json!({"a": 1, "b": 2, "d": 4, "z": 0, "status": {}, "metadata": {"labels": {"k": "v"}}}),
                json!({"b": 3, "c": 3, "e": 5, "status": {"y": 1},
                       "metadata": {"uid": "x", "name": "n"}}),
            ),
            (
                json!({"spec": {"ports": [{"port": 80, "x": 1}, {"port": 81}]}, "z": 1}),
                json!({"spec": {"ports": [{"port": 81}]}, "z": 1}),
                json!({"spec": {"ports": [{"port": 80, "x": 2}]}}),
            ),
            (
                json!({}),
                json!({"a": 1}),
                json!({"b": null, "c": {"d": null}}),
            ),
        ];
        for (o, l, d) in &cases {
            for last in [Some(obj(l)), Some(obj(d)), None] {
                let walk = |sorted| {
                    merge_object_with(&Path::Root, obj(o), last, obj(d), None, Level::Root, sorted)
                };
                assert_eq!(
                    walk(false).unwrap(),
                    walk(true).unwrap(),
                    "{o} {last:?} {d}"
                );
            }
        }
    }

    #[test]
    fn aligned_list_maps_merge_as_the_general_list_map_merge() {
        let spec = KeySpec::single("name");
        let cases = [
            // steady state; one item changed; record with a field dropped since.
            (
                json!([{"name": "a", "v": 1}, {"name": "b"}]),
                json!([{"name": "a", "v": 1}, {"name": "b"}]),
            ),
            (
                json!([{"name": "a", "v": 1}, {"name": "b"}]),
                json!([{"name": "a", "v": 2}, {"name": "b"}]),
            ),
            (
                json!([{"name": "a", "v": 1, "w": 1}, {"name": "b", "w": 2}]),
                json!([{"name": "a"}, {"name": "b", "w": 3}]),
            ),
        ];
        let record = json!([{"name": "a", "w": 1}, {"name": "b"}]);
        for (o, d) in &cases {
            let (o, d) = (o.as_array().unwrap(), d.as_array().unwrap());
            for l in [record.as_array().unwrap().as_slice(), d.as_slice()] {
                let fast = merge_aligned(&Path::Root, o, l, d, spec, ItemRules::default()).unwrap();
                let fast = fast.expect("aligned lists take the fast path");
                let general =
                    merge_list_map(&Path::Root, o, l, d, spec, ItemRules::default()).unwrap();
                let render = |out: Out| match out {
                    Out::Same => None,
                    Out::Remove => Some(Value::Null),
                    Out::New(v) => Some(v),
                };
                assert_eq!(render(fast), render(general), "{o:?} {l:?} {d:?}");
            }
        }
    }

    fn render(out: Out) -> Option<Value> {
        match out {
            Out::Same => None,
            Out::Remove => Some(Value::Null),
            Out::New(v) => Some(v),
        }
    }

    /// The list merge without the one-pass fast path: detect, then merge by key or replace.
    fn general_list(o: &[Value], l: &[Value], d: &[Value]) -> Option<Value> {
        let det_l = if std::ptr::eq(l, d) { &[][..] } else { l };
        render(match detect_conventional([o, det_l, d]) {
            Some(key) => merge_list_map(
                &Path::Root,
                o,
                l,
                d,
                KeySpec::single(key),
                ItemRules::default(),
            )
            .unwrap(),
            None => replace_unkeyed_list(&Path::Root, o, l, d, None),
        })
    }

    #[test]
    fn one_pass_conventional_lists_agree_with_detect_then_merge() {
        let lists = [
            json!([]),
            json!([1, 2]),
            json!([{"name": "a", "v": 1}, {"name": "b"}]),
            json!([{"name": "b"}, {"name": "a", "v": 2}]),
            json!([{"name": "a", "v": 1}, {"name": "b"}, {"name": "c"}]),
            json!([{"name": "a", "port": 1}, {"name": "b", "port": 2}]),
            json!([{"name": "a", "port": 2}, {"name": "b", "port": 1}]),
            json!([{"port": 1, "x": 1}, {"port": 2}]),
            json!([{"name": "a"}, {"name": "a", "v": 3}]),
            json!([{"name": "a"}, 5]),
            json!([{"name": null}, {"name": "b"}]),
            json!([{"name": {"x": 1}}]),
            json!([{"containerPort": 80, "name": "http"}, {"containerPort": 81.0}]),
        ];
        let long: Vec<Value> = (0..20).map(|i| json!({"name": format!("n{i}")})).collect();
        let mut all: Vec<Vec<Value>> = lists
            .iter()
            .map(|l| l.as_array().unwrap().clone())
            .collect();
        all.push(long.clone());
        all.push(long.iter().rev().cloned().collect());
        for o in &all {
            for l in &all {
                for d in &all {
                    for l in [l.as_slice(), d.as_slice()] {
                        let got = render(merge_list(&Path::Root, o, Some(l), d, None).unwrap());
                        assert_eq!(got, general_list(o, l, d), "o={o:?} l={l:?} d={d:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn aligned_multi_field_keys_merge_as_the_general_list_map_merge() {
        let fields = ["port".to_string(), "protocol".to_string()];
        let defaults = [None, Some(json!("TCP"))];
        let spec = KeySpec::declared(&fields, &defaults);
        let arr = |v: Value| v.as_array().unwrap().clone();
        let obs = arr(json!([{"port": 53, "protocol": "UDP", "x": 1},
                              {"port": 53, "protocol": "TCP", "n": 1}]));
        let des = arr(json!([{"port": 53, "protocol": "UDP", "x": 2}, {"port": 53}]));
        let rec = arr(json!([{"port": 53, "protocol": "UDP", "x": 1, "y": 1}, {"port": 53.0}]));
        for l in [&des, &rec] {
            let fast = merge_aligned(&Path::Root, &obs, l, &des, spec, ItemRules::default())
                .unwrap()
                .expect("aligned multi-field lists take the fast path");
            let general =
                merge_list_map(&Path::Root, &obs, l, &des, spec, ItemRules::default()).unwrap();
            assert_eq!(render(fast), render(general));
        }
        // Duplicate (defaulted) keys in desired, or swapped items: the general merge decides.
        let dup = arr(json!([{"port": 53, "protocol": "TCP"}, {"port": 53}]));
        let swapped: Vec<Value> = obs.iter().rev().cloned().collect();
        for (o, d) in [(&obs, &dup), (&swapped, &des)] {
            let fast = merge_aligned(&Path::Root, o, d, d, spec, ItemRules::default()).unwrap();
            assert!(fast.is_none());
        }
        // Errors inside an item name it by its key, as the general merge does.
        let obs = arr(json!([{"port": 80, "sub": {"a": 1}}]));
        let des = arr(json!([{"port": 80, "sub": 5}]));
        let err = |r: Result<Option<Out>, ApplyError>| r.err().map(|e| e.to_string());
        let fast = err(merge_aligned(
            &Path::Root,
            &obs,
            &des,
            &des,
            spec,
            ItemRules::default(),
        ));
        let general =
            merge_list_map(&Path::Root, &obs, &des, &des, spec, ItemRules::default()).err();
        assert_eq!(fast, general.map(|e| e.to_string()));
        assert!(fast.unwrap().starts_with("[port=80,protocol=TCP].sub"));
    }

    #[test]
    fn conventional_field_bits_follow_the_priority_order() {
        for (i, key) in CONVENTIONAL_MERGE_KEYS.into_iter().enumerate() {
            let item = json!({key: "v", "other": 1});
            assert_eq!(conventional_fields(obj(&item)), 1 << i, "{key}");
            let unusable = json!({key: null, "x": {key: 1}});
            assert_eq!(conventional_fields(obj(&unusable)), 0, "{key}");
        }
        let both = json!({"name": "a", "containerPort": 80, "path": [1]});
        assert_eq!(conventional_fields(obj(&both)), 0b1001);
    }

    #[test]
    fn unaligned_or_duplicate_keys_take_the_general_path() {
        let spec = KeySpec::single("name");
        let a = json!([{"name": "a"}, {"name": "b"}]);
        let swapped = json!([{"name": "b"}, {"name": "a"}]);
        let dup = json!([{"name": "a"}, {"name": "a"}]);
        let short = json!([{"name": "a"}]);
        let arr = |v: &Value| v.as_array().unwrap().clone();
        let (a, swapped, dup, short) = (arr(&a), arr(&swapped), arr(&dup), arr(&short));
        for (o, l, d) in [
            (&swapped, &a, &a),
            (&a, &a, &dup),
            (&dup, &dup, &dup),
            (&a, &short, &a),
            (&short, &a, &a),
        ] {
            assert!(
                merge_aligned(&Path::Root, o, l, d, spec, ItemRules::default())
                    .unwrap()
                    .is_none()
            );
        }
    }
}
