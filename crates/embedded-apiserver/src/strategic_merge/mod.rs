//! Strategic merge patch (`application/strategic-merge-patch+json`) as
//! `k8s.io/apimachinery/pkg/util/strategicpatch` applies it on the server
//! (`StrategicMergeMapPatch` with parallel delete lists merged and unmatched
//! nulls ignored):
//!
//! * maps merge key by key; `null` deletes a key;
//! * lists tagged `patchStrategy:merge` merge — lists of maps by their
//!   `patchMergeKey` (containers by `name`, container ports by
//!   `containerPort`, service ports by `port`, ownerReferences by `uid`,
//!   conditions by `type`, ... see [`meta`]), lists of scalars as a set;
//!   other lists are replaced;
//! * directives: `$patch: replace|delete` on maps, `{"$patch": "delete",
//!   <key>: v}` and `{"$patch": "replace"}` inside merging lists,
//!   `$retainKeys`, `$deleteFromPrimitiveList/<field>`,
//!   `$setElementOrder/<field>`;
//! * element order: items named in the patch take the patch's (or
//!   `$setElementOrder`'s) order and are interleaved with server-only items
//!   by their live order — the upstream algorithm, including its habit of
//!   placing brand-new items before server-only ones when no
//!   `$setElementOrder` is given.
//!
//! Errors carry the HTTP status the real server maps them to.

pub mod meta;

pub use meta::{field_meta, FieldMeta, PatchMeta, Strategy, Ty};

use serde_json::{Map, Value};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

/// A failed strategic merge patch.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct PatchError {
    /// HTTP status the real server answers with: 400 (malformed directives
    /// or document), 422 (lists of lists, retainKeys mismatch) or 500 (other
    /// merge failures such as a missing merge key).
    pub code: u16,
    /// The upstream error text.
    pub message: String,
}

impl PatchError {
    /// The `Status` body kube-apiserver answers with: `BadRequest` (400),
    /// the generic 422 response with the text as an `UnexpectedServerResponse`
    /// cause, or `Internal error occurred: ...` (500).
    pub fn to_status(&self) -> Value {
        match self.code {
            400 => serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": "BadRequest", "code": 400
            }),
            422 => serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "the server rejected our request due to an error in our request",
                "reason": "Invalid",
                "details": {"causes": [{"reason": "UnexpectedServerResponse", "message": self.message}]},
                "code": 422
            }),
            _ => serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("Internal error occurred: {}", self.message),
                "reason": "InternalError",
                "details": {"causes": [{"message": self.message}]},
                "code": 500
            }),
        }
    }

    fn bad_request(m: impl Into<String>) -> Self {
        PatchError {
            code: 400,
            message: m.into(),
        }
    }
    fn unprocessable(m: impl Into<String>) -> Self {
        PatchError {
            code: 422,
            message: m.into(),
        }
    }
    fn internal(m: impl Into<String>) -> Self {
        PatchError {
            code: 500,
            message: m.into(),
        }
    }
}

fn err_bad_json_doc() -> PatchError {
    PatchError::bad_request("invalid JSON document")
}
fn err_primitive_list() -> PatchError {
    PatchError::bad_request("invalid patch format of primitive list")
}
fn err_retain_keys() -> PatchError {
    PatchError::bad_request("invalid patch format of retainKeys")
}
fn err_set_element_order() -> PatchError {
    PatchError::bad_request("invalid patch format of setElementOrder list")
}
fn err_list_of_lists() -> PatchError {
    PatchError::unprocessable("lists of lists are not supported")
}
fn err_no_merge_key(m: &Map<String, Value>, key: &str) -> PatchError {
    PatchError::internal(format!(
        "map: {} does not contain declared merge key: {key}",
        go_map_string(m)
    ))
}

/// Go's `%v` of a decoded map (`map[k:v ...]`, keys sorted).
fn go_map_string(m: &Map<String, Value>) -> String {
    fn v(x: &Value) -> String {
        match x {
            Value::Null => "<nil>".into(),
            Value::String(s) => s.clone(),
            Value::Object(m) => go_map_string(m),
            Value::Array(a) => format!("[{}]", a.iter().map(v).collect::<Vec<_>>().join(" ")),
            other => other.to_string(),
        }
    }
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    let parts: Vec<String> = keys.iter().map(|k| format!("{k}:{}", v(&m[*k]))).collect();
    format!("map[{}]", parts.join(" "))
}

/// Applies `patch` to `original` (both JSON objects) using `meta` for patch
/// strategies; returns the patched object.
pub fn patch(original: &Value, patch: &Value, meta: &PatchMeta) -> Result<Value, PatchError> {
    let orig = match original {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        _ => return Err(err_bad_json_doc()),
    };
    let p = match patch {
        Value::Object(m) => m.clone(),
        _ => return Err(err_bad_json_doc()),
    };
    let mut merged = Value::Object(merge_map(orig, p, meta.root)?);
    strip_directive_keys(&mut merged);
    Ok(merged)
}

/// Go's `==` on decoded JSON scalars (all numbers are float64).
fn go_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// Kind of a decoded JSON value as Go's reflect sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Nil,
    Map,
    Slice,
    String,
    Float,
    Bool,
}

fn kind(v: &Value) -> Kind {
    match v {
        Value::Null => Kind::Nil,
        Value::Object(_) => Kind::Map,
        Value::Array(_) => Kind::Slice,
        Value::String(_) => Kind::String,
        Value::Number(_) => Kind::Float,
        Value::Bool(_) => Kind::Bool,
    }
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    ty: Ty,
) -> Result<Map<String, Value>, PatchError> {
    if let Some(d) = patch.get(DIRECTIVE) {
        return match d.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                Ok(patch)
            }
            Some("delete") => Ok(Map::new()),
            _ => Err(PatchError::internal(format!(
                "unknown patch type: {} in map: {}",
                d.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| d.to_string()),
                go_map_string(&patch)
            ))),
        };
    }
    apply_retain_keys(&mut original, &mut patch)?;
    merge_set_element_order(&mut original, &mut patch, ty)?;

    for (k, pv) in patch {
        let (key, is_delete_list) = if k.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            match k.split_once('/') {
                Some((DELETE_FROM_PRIMITIVE_LIST, rest)) => (rest.to_string(), true),
                _ => return Err(err_primitive_list()),
            }
        } else {
            (k, false)
        };
        if pv.is_null() {
            original.remove(&key);
            continue;
        }
        let Some(ov) = original.get(&key) else {
            if !is_delete_list {
                if let Some(clean) = clean_patch_value(pv) {
                    original.insert(key, clean);
                }
            }
            continue;
        };
        if kind(ov) != kind(&pv) {
            if !is_delete_list {
                match clean_patch_value(pv) {
                    Some(clean) => {
                        original.insert(key, clean);
                    }
                    None => {
                        original.remove(&key);
                    }
                }
            }
            continue;
        }
        let fm = field_meta(ty, &key);
        let ov = original.remove(&key).unwrap_or(Value::Null);
        let merged = match (ov, pv) {
            (Value::Object(om), Value::Object(pm)) => {
                if fm.strategy == Strategy::Replace {
                    Value::Object(pm)
                } else {
                    Value::Object(merge_map(om, pm, fm.ty)?)
                }
            }
            (Value::Array(oa), Value::Array(pa)) => {
                if fm.strategy == Strategy::Merge || is_delete_list {
                    Value::Array(merge_slice(oa, pa, fm, is_delete_list)?)
                } else {
                    Value::Array(pa)
                }
            }
            (_, pv) => match clean_patch_value(pv) {
                Some(v) => v,
                None => continue,
            },
        };
        original.insert(key, merged);
    }
    Ok(original)
}

/// `$retainKeys`: keys of `original` not listed are cleared; every patch key
/// must be listed.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), PatchError> {
    let Some(list) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(list) = list else {
        return Err(err_retain_keys());
    };
    let listed = |k: &str| list.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !listed(k) {
            return Err(err_retain_keys());
        }
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

fn element_kind(lists: &[&[Value]]) -> Result<Option<Kind>, PatchError> {
    let mut prev: Option<Kind> = None;
    for l in lists {
        for v in l.iter() {
            let k = kind(v);
            match prev {
                None => {
                    if k == Kind::Slice {
                        return Err(err_list_of_lists());
                    }
                    prev = Some(k);
                }
                Some(p) if p != k => {
                    return Err(PatchError::internal(
                        "list element types are not identical".to_string(),
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(prev)
}

/// Processes every `$setElementOrder/<field>` directive with its list.
fn merge_set_element_order(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    ty: Ty,
) -> Result<(), PatchError> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for k in keys {
        let order = patch.remove(&k).unwrap_or(Value::Null);
        let Value::Array(order) = order else {
            return Err(err_set_element_order());
        };
        let field = match k.split_once('/') {
            Some((SET_ELEMENT_ORDER, rest)) => rest.to_string(),
            _ => return Err(err_set_element_order()),
        };
        let orig_list = match original.get(&field) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(_) => return Err(err_set_element_order()),
        };
        let patch_list = match patch.get(&field) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(_) => return Err(err_set_element_order()),
        };
        let fm = field_meta(ty, &field);
        let merge_key = fm.merge_key.unwrap_or("");
        if let Some(pl) = &patch_list {
            validate_patch_with_set_order(pl, &order, merge_key)?;
        }
        let merged = match (&orig_list, &patch_list) {
            (Some(o), None) => o.clone(),
            (None, Some(p)) => p.clone(),
            (Some(o), Some(p)) => {
                if fm.strategy == Strategy::Merge {
                    merge_slice(o.clone(), p.clone(), fm, false)?
                } else {
                    p.clone()
                }
            }
            (None, None) => continue,
        };
        let orig_slice = orig_list.clone().unwrap_or_default();
        let patch_slice = patch_list.clone().unwrap_or_default();
        let (patch_items, server_only) = partition(&merged, &order, merge_key)?;
        let kind = element_kind(&[&orig_slice, &patch_slice])?.unwrap_or(Kind::Nil);
        let both = normalize_element_order(
            patch_items,
            server_only,
            &order,
            &orig_slice,
            merge_key,
            kind == Kind::Map,
        )?;
        original.insert(field.clone(), Value::Array(both));
        patch.remove(&field);
    }
    Ok(())
}

/// The relative order of patch items must match the `$setElementOrder` list
/// and the patch may only name items the list names.
fn validate_patch_with_set_order(
    patch_list: &[Value],
    order: &[Value],
    merge_key: &str,
) -> Result<(), PatchError> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = if merge_key.is_empty() {
        patch_list.iter().collect()
    } else {
        patch_list
            .iter()
            .filter(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"))
            .collect()
    };
    let (mut pi, mut oi) = (0, 0);
    while pi < non_delete.len() && oi < order.len() {
        if non_delete[pi].get(DIRECTIVE).is_some() {
            pi += 1;
            continue;
        }
        if same_item(non_delete[pi], &order[oi], merge_key)? {
            pi += 1;
        }
        oi += 1;
    }
    if pi < non_delete.len() && oi >= order.len() {
        return Err(PatchError::internal(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            Value::Array(patch_list.to_vec()),
            Value::Array(order.to_vec())
        )));
    }
    Ok(())
}

fn same_item(a: &Value, b: &Value, merge_key: &str) -> Result<bool, PatchError> {
    if merge_key.is_empty() {
        return Ok(go_eq(a, b));
    }
    let (Value::Object(am), Value::Object(bm)) = (a, b) else {
        return Err(PatchError::internal("expected a map in a merging list"));
    };
    let av = am
        .get(merge_key)
        .ok_or_else(|| err_no_merge_key(am, merge_key))?;
    let bv = bm
        .get(merge_key)
        .ok_or_else(|| err_no_merge_key(bm, merge_key))?;
    Ok(go_eq(av, bv))
}

fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    fm: FieldMeta,
    is_delete_list: bool,
) -> Result<Vec<Value>, PatchError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let Some(k) = element_kind(&[&original, &patch])? else {
        return Ok(original);
    };
    let merge_key = fm.merge_key.unwrap_or("");
    let (original, patch, merged) = if k != Kind::Map {
        if is_delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.iter().any(|d| go_eq(v, d)))
                .collect());
        }
        let mut both = original.clone();
        both.extend(patch.iter().cloned());
        let merged = dedup_scalars(both);
        (original, patch, merged)
    } else {
        if merge_key.is_empty() {
            return Err(PatchError::internal(
                "cannot merge lists without merge key".to_string(),
            ));
        }
        let (original, patch) = merge_special_elements(original, patch, merge_key)?;
        let merged = merge_without_special_elements(original.clone(), &patch, merge_key, fm.ty)?;
        (original, patch, merged)
    };
    let (patch_items, server_only) = partition(&merged, &patch, merge_key)?;
    normalize_element_order(
        patch_items,
        server_only,
        &patch,
        &original,
        merge_key,
        k == Kind::Map,
    )
}

/// `$patch: delete` items remove live items with that key; a
/// `{"$patch": "replace"}` item makes the rest of the patch list the result.
fn merge_special_elements(
    original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut original = original;
    let mut rest = Vec::new();
    let mut replace = false;
    for v in patch {
        let Value::Object(m) = &v else {
            return Err(PatchError::internal("expected a map in a merging list"));
        };
        match m.get(DIRECTIVE) {
            None => rest.push(v),
            Some(d) => match d.as_str() {
                Some("delete") => {
                    let Some(kv) = m.get(merge_key) else {
                        return Err(err_no_merge_key(m, merge_key));
                    };
                    let kv = kv.clone();
                    let mut kept = Vec::with_capacity(original.len());
                    for o in original {
                        let Value::Object(om) = &o else {
                            return Err(PatchError::internal("expected a map in a merging list"));
                        };
                        if !om.get(merge_key).is_some_and(|x| go_eq(x, &kv)) {
                            kept.push(o);
                        }
                    }
                    original = kept;
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(PatchError::internal(
                        "merging lists cannot yet be specified in the patch",
                    ))
                }
                _ => {
                    return Err(PatchError::internal(format!(
                        "unknown patch type: {d} in map: {}",
                        go_map_string(m)
                    )))
                }
            },
        }
    }
    if replace {
        return Ok((rest, Vec::new()));
    }
    Ok((original, rest))
}

fn merge_without_special_elements(
    mut original: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    elem_ty: Ty,
) -> Result<Vec<Value>, PatchError> {
    for v in patch {
        let Value::Object(pm) = v else {
            return Err(PatchError::internal("expected a map in a merging list"));
        };
        let Some(kv) = pm.get(merge_key) else {
            return Err(err_no_merge_key(pm, merge_key));
        };
        let mut found = None;
        for (i, o) in original.iter().enumerate() {
            let Value::Object(om) = o else {
                return Err(PatchError::internal(format!(
                    "value for key {i} is not a map"
                )));
            };
            if om.get(merge_key).is_some_and(|x| go_eq(x, kv)) {
                found = Some(i);
                break;
            }
        }
        match found {
            Some(i) => {
                let om = match std::mem::take(&mut original[i]) {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                original[i] = Value::Object(merge_map(om, pm.clone(), elem_ty)?);
            }
            None => {
                if let Some(clean) = clean_patch_value(v.clone()) {
                    original.push(clean);
                }
            }
        }
    }
    Ok(original)
}

/// Go's in-place deduplication (order-changing; the order is normalized
/// afterwards anyway).
fn dedup_scalars(mut s: Vec<Value>) -> Vec<Value> {
    if s.is_empty() {
        return s;
    }
    let mut length = s.len() - 1;
    let mut i = 0;
    while i < length {
        let mut j = i + 1;
        while j <= length {
            if go_eq(&s[i], &s[j]) {
                s[j] = s[length].clone();
                s.truncate(length);
                length -= 1;
                continue;
            }
            j += 1;
        }
        i += 1;
    }
    s
}

fn key_of<'a>(v: &'a Value, merge_key: &str, is_map: bool) -> Option<&'a Value> {
    if is_map {
        v.get(merge_key)
    } else {
        Some(v)
    }
}

fn index_in(list: &[Value], v: &Value, merge_key: &str, is_map: bool) -> Option<usize> {
    let needle = key_of(v, merge_key, is_map);
    list.iter()
        .position(|x| match (key_of(x, merge_key, is_map), needle) {
            (Some(a), Some(b)) => go_eq(a, b),
            (None, None) => true,
            _ => false,
        })
}

/// Splits `merged` into items named in `by` and the others (live-only).
fn partition(
    merged: &[Value],
    by: &[Value],
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let is_map = !merge_key.is_empty();
    let mut in_patch = Vec::new();
    let mut server_only = Vec::new();
    for v in merged {
        if is_map {
            let Value::Object(m) = v else {
                return Err(PatchError::internal("expected a map in a merging list"));
            };
            if !m.contains_key(merge_key) {
                return Err(err_no_merge_key(m, merge_key));
            }
        }
        let found = by.iter().any(|b| {
            if is_map {
                matches!((b.get(merge_key), v.get(merge_key)), (Some(x), Some(y)) if go_eq(x, y))
            } else {
                go_eq(b, v)
            }
        });
        if found {
            in_patch.push(v.clone());
        } else {
            server_only.push(v.clone());
        }
    }
    Ok((in_patch, server_only))
}

fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    is_map: bool,
) -> Result<Vec<Value>, PatchError> {
    let patch = normalize_slice_order(patch, patch_order, merge_key, is_map)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, is_map)?;
    Ok(merge_sorted(
        server_only,
        patch,
        server_order,
        merge_key,
        is_map,
    ))
}

/// Stable insertion sort by position in `order` with upstream's comparator
/// (an item missing from `order` sorts as "less").
fn normalize_slice_order(
    to_sort: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    is_map: bool,
) -> Result<Vec<Value>, PatchError> {
    let mut to_sort = to_sort;
    let mut to_delete = Vec::new();
    if is_map {
        for v in to_sort.iter().chain(order.iter()) {
            let Value::Object(m) = v else {
                return Err(PatchError::internal("expected a map in a merging list"));
            };
            if !m.contains_key(merge_key) {
                return Err(err_no_merge_key(m, merge_key));
            }
        }
        let (keep, del): (Vec<Value>, Vec<Value>) = to_sort
            .into_iter()
            .partition(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"));
        to_sort = keep;
        to_delete = del;
    }
    let less = |a: &Value, b: &Value| -> bool {
        match (
            index_in(order, a, merge_key, is_map),
            index_in(order, b, merge_key, is_map),
        ) {
            (Some(ia), Some(ib)) => ia < ib,
            _ => true,
        }
    };
    for i in 1..to_sort.len() {
        let mut j = i;
        while j > 0 && less(&to_sort[j], &to_sort[j - 1]) {
            to_sort.swap(j, j - 1);
            j -= 1;
        }
    }
    to_sort.extend(to_delete);
    Ok(to_sort)
}

/// Interleaves live-only items (`left`) into patch items (`right`) by their
/// live positions; a patch item unknown to the live list goes first.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: &str,
    is_map: bool,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut i, mut j) = (0, 0);
    while i < left.len() || j < right.len() {
        if i >= left.len() {
            out.push(right[j].clone());
            j += 1;
        } else if j >= right.len() {
            out.push(left[i].clone());
            i += 1;
        } else {
            let li = index_in(server_order, &left[i], merge_key, is_map);
            let ri = index_in(server_order, &right[j], merge_key, is_map);
            match (li, ri) {
                (Some(a), Some(b)) if a < b => {
                    out.push(left[i].clone());
                    i += 1;
                }
                _ => {
                    out.push(right[j].clone());
                    j += 1;
                }
            }
        }
    }
    out
}

/// A patch value taken as is (no live counterpart): nulls discarded,
/// directive keys dropped, `{"$patch": "delete"}` maps removed. `None` when
/// the value itself is only a directive.
fn clean_patch_value(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                return None;
            }
            let mut out = Map::new();
            for (k, v) in m {
                if k.starts_with('$') || v.is_null() {
                    continue;
                }
                if let Some(c) = clean_patch_value(v) {
                    out.insert(k, c);
                }
            }
            Some(Value::Object(out))
        }
        Value::Array(a) => Some(Value::Array(
            a.into_iter().filter_map(clean_patch_value).collect(),
        )),
        other => Some(other),
    }
}

fn strip_directive_keys(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| {
                !(k == DIRECTIVE
                    || k == RETAIN_KEYS
                    || k.starts_with(SET_ELEMENT_ORDER)
                    || k.starts_with(DELETE_FROM_PRIMITIVE_LIST))
            });
            for x in m.values_mut() {
                strip_directive_keys(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directive_keys),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
