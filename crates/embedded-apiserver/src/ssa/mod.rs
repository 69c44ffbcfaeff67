//! Server-side apply and field ownership (`metadata.managedFields`) as
//! kube-apiserver's field manager does it on top of structured-merge-diff:
//!
//! * [`apply`] — `application/apply-patch+yaml`: merges the applied
//!   configuration into the live object (list-maps by their keys, sets by
//!   value, atomic lists and maps replaced; upstream item order), records the
//!   applier's field set (`Apply` entry, `f:`/`k:`/`v:` FieldsV1), removes
//!   fields the same manager applied before and no longer applies (unless
//!   another manager owns them), and detects conflicts: fields whose value
//!   changes and that another manager owns → [`ApplyError::Conflicts`]
//!   (409, `Apply failed with 1 conflict: conflict with "mgr" using apps/v1:
//!   .spec.replicas`); with `force` the ownership moves to the applier.
//! * [`record_update`] — every other write (create, update, patch): the
//!   manager's `Update` entry gains the fields the write added or changed
//!   (taken away from other managers), removed fields leave every entry.
//!   Nested objects a write creates are members themselves (`.: {}`), as the
//!   real comparison walker records them; for built-in kinds the "old" object
//!   of a create is the Go zero value of the type (see
//!   [`SsaSchema::empty_object`]) so the encoding matches a real server.
//!
//! Objects without `managedFields` (cleared with `[]`) stay untracked on
//! updates; their first apply records the existing fields for
//! `before-first-apply`. For the manager `kubectl` (`kubectl apply
//! --server-side`) an existing `kubectl.kubernetes.io/last-applied-configuration`
//! annotation is kept in step, and conflicts on fields that annotation still
//! describes accurately are waived (the upgrade path from client-side apply).
//!
//! Both drop `apiVersion`, `kind`, `metadata.name`, `metadata.uid`, ... from
//! every set like the real `stripMeta` step, sort entries like the real
//! encoder (operation, time, manager, apiVersion, subresource) and reset
//! unparseable `managedFields`, and merges the oldest `Update` entries into
//! `ancient-changes` beyond ten. Not modelled: version conversion of field
//! sets between API versions.
//!
//! The caller strips `status` from configurations applied to the main
//! resource of kinds with a status subresource (and everything but `status`
//! for `/status`), as the real reset-fields strategies do.

pub mod fieldset;
pub mod schema;

pub use fieldset::{canonical_json, path_string, FieldSet, Path, PathElement};
pub use schema::{BuiltinSchema, CrdSchema, ListType, SsaSchema, Untyped};

use metacontroller_apply::json_equal;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    /// `manager`.
    pub manager: String,
    /// `operation`: `Apply` or `Update`.
    pub operation: String,
    /// `apiVersion` of the object the fields were recorded against.
    pub api_version: String,
    /// `time` (RFC 3339).
    pub time: Option<String>,
    /// `subresource` (empty for the main resource).
    pub subresource: String,
    /// The owned fields.
    pub fields: FieldSet,
}

impl ManagedEntry {
    /// The identity the real server keys entries by: Apply entries by
    /// manager and subresource, Update entries also by apiVersion.
    fn identity(&self) -> (String, String, String, String) {
        let v = if self.operation == "Apply" {
            String::new()
        } else {
            self.api_version.clone()
        };
        (
            self.manager.clone(),
            self.operation.clone(),
            v,
            self.subresource.clone(),
        )
    }

    /// How conflicts name this manager: `"mgr"` for appliers, `"mgr" using
    /// apps/v1` for updaters, plus `with subresource "status"`.
    pub fn display(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s = format!("{s} with subresource {:?}", self.subresource);
        }
        if self.operation == "Update" {
            s = format!("{s} using {}", self.api_version);
        }
        s
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation));
        m.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            m.insert("time".into(), json!(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(m)
    }

    fn from_json(v: &Value) -> Option<ManagedEntry> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let fields = match v.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::new(),
            Some(f) => FieldSet::from_fields_v1(f)?,
        };
        if let Some(t) = s("fieldsType") {
            if t != "FieldsV1" {
                return None;
            }
        }
        Some(ManagedEntry {
            manager: s("manager").unwrap_or_default(),
            operation: s("operation")?,
            api_version: s("apiVersion").unwrap_or_default(),
            time: s("time"),
            subresource: s("subresource").unwrap_or_default(),
            fields,
        })
    }
}

/// `[]` or a single empty entry: the request asks to clear managedFields.
fn is_reset_managed_fields(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Array(a)) => {
            a.is_empty() || (a.len() == 1 && a[0].as_object().is_some_and(Map::is_empty))
        }
        _ => false,
    }
}

/// Decodes `metadata.managedFields`; malformed content resets to none, as
/// the real server does.
pub fn decode_managed_fields(obj: &Value) -> Vec<ManagedEntry> {
    let Some(list) = obj.pointer("/metadata/managedFields") else {
        return Vec::new();
    };
    let Some(list) = list.as_array() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in list {
        match ManagedEntry::from_json(e) {
            Some(m) => out.push(m),
            None => return Vec::new(),
        }
    }
    out
}

/// Encodes entries (empty ones dropped) sorted like the real encoder.
pub fn encode_managed_fields(entries: &[ManagedEntry]) -> Value {
    let mut es: Vec<&ManagedEntry> = entries.iter().filter(|e| !e.fields.is_empty()).collect();
    es.sort_by(|a, b| {
        a.operation
            .cmp(&b.operation)
            .then_with(|| {
                a.time
                    .as_deref()
                    .unwrap_or("")
                    .cmp(b.time.as_deref().unwrap_or(""))
            })
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    Value::Array(es.into_iter().map(ManagedEntry::to_json).collect())
}

fn strip_set() -> FieldSet {
    let mut s = FieldSet::new();
    let f = |x: &str| PathElement::Field(x.to_string());
    s.insert(&[f("apiVersion")]);
    s.insert(&[f("kind")]);
    s.insert(&[f("metadata")]);
    for m in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        s.insert(&[f("metadata"), f(m)]);
    }
    s
}

/// Most `Update` entries kept; older ones are merged into per-apiVersion
/// `ancient-changes` entries (the real server's cap).
pub const MAX_UPDATE_MANAGERS: usize = 10;

/// Merges the oldest `Update` entries into `ancient-changes` buckets until at
/// most [`MAX_UPDATE_MANAGERS`] remain, as the real field manager does.
fn cap_update_managers(managers: &mut Vec<ManagedEntry>) {
    let mut updaters: Vec<usize> = (0..managers.len())
        .filter(|i| managers[*i].operation == "Update")
        .collect();
    if updaters.len() <= MAX_UPDATE_MANAGERS {
        return;
    }
    updaters.sort_by(|a, b| {
        let (ea, eb) = (&managers[*a], &managers[*b]);
        ea.time
            .as_deref()
            .unwrap_or("")
            .cmp(eb.time.as_deref().unwrap_or(""))
            .then_with(|| ea.manager.cmp(&eb.manager))
    });
    let mut length = updaters.len();
    let mut first_by_version: BTreeMap<String, usize> = BTreeMap::new();
    let mut removed = vec![false; managers.len()];
    for &i in &updaters {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let version = managers[i].api_version.clone();
        match first_by_version.get(&version) {
            Some(&first) => {
                // `first` becomes (or already is) the bucket.
                let fields = managers[i].fields.clone();
                let time = managers[i].time.clone();
                let bucket = &mut managers[first];
                bucket.manager = "ancient-changes".into();
                bucket.subresource = String::new();
                bucket.fields = bucket.fields.union(&fields);
                bucket.time = time;
                removed[i] = true;
                length -= 1;
            }
            None => {
                first_by_version.insert(version, i);
            }
        }
    }
    let mut idx = 0;
    managers.retain(|_| {
        let keep = !removed[idx];
        idx += 1;
        keep
    });
}

/// The object without `metadata.managedFields`.
fn without_managed_fields(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    v
}

fn set_managed_fields(obj: &mut Value, entries: &[ManagedEntry]) {
    let encoded = encode_managed_fields(entries);
    let Some(o) = obj.as_object_mut() else { return };
    let meta = o
        .entry("metadata".to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(m) = meta.as_object_mut() {
        if encoded.as_array().is_some_and(Vec::is_empty) {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), encoded);
        }
    }
}

// ---------------------------------------------------------------------------
// Walking typed values.

static EMPTY_MAP: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

struct Walker<'a> {
    schema: &'a dyn SsaSchema,
}

impl Walker<'_> {
    fn list_type(&self, fpath: &[&str]) -> ListType {
        self.schema.list_type(fpath)
    }
    fn atomic_map(&self, fpath: &[&str]) -> bool {
        self.schema.is_atomic_map(fpath)
    }
    fn declared(&self, fpath: &[&str]) -> bool {
        self.schema.is_declared_field(fpath)
    }

    fn item_pe(
        &self,
        item: &Value,
        lt: &ListType,
        idx: usize,
        at: &Path,
    ) -> Result<PathElement, String> {
        match lt {
            ListType::Set => Ok(PathElement::Value(canonical_json(item))),
            ListType::Atomic => Ok(PathElement::Index(idx)),
            ListType::Map(keys) => {
                let Value::Object(m) = item else {
                    return Err(format!(
                        "{}: element {idx}: associative list with keys may only contain objects",
                        path_string(at)
                    ));
                };
                let mut k = Map::new();
                for (name, default) in keys {
                    match m.get(name).filter(|v| !v.is_null()).or(default.as_ref()) {
                        Some(v) => {
                            k.insert(name.clone(), v.clone());
                        }
                        None => {
                            return Err(format!(
                                "{}: element {idx}: associative list with keys has an element that omits key field {:?} (and doesn't have default value)",
                                path_string(at),
                                name
                            ))
                        }
                    }
                }
                Ok(PathElement::Key(canonical_json(&Value::Object(k))))
            }
        }
    }

    /// `ToFieldSet` of an applied configuration.
    fn to_field_set<'v>(
        &self,
        v: &'v Value,
        fpath: &mut Vec<&'v str>,
        path: &mut Path,
        set: &mut FieldSet,
    ) -> Result<(), String> {
        match v {
            Value::Object(m) => {
                if !path.is_empty() && self.atomic_map(fpath) {
                    set.insert(path);
                    return Ok(());
                }
                for (k, val) in m {
                    fpath.push(k.as_str());
                    path.push(PathElement::Field(k.clone()));
                    self.to_field_set(val, fpath, path, set)?;
                    // Declared struct fields are members only through their
                    // leaves; free-form map keys are members themselves.
                    if !self.declared(fpath) {
                        set.insert(path);
                    }
                    fpath.pop();
                    path.pop();
                }
            }
            Value::Array(a) => {
                let lt = self.list_type(fpath);
                if lt == ListType::Atomic {
                    set.insert(path);
                    return Ok(());
                }
                for (i, item) in a.iter().enumerate() {
                    let pe = self.item_pe(item, &lt, i, path)?;
                    path.push(pe);
                    if item.is_object() {
                        self.to_field_set(item, fpath, path, set)?;
                    }
                    set.insert(path);
                    path.pop();
                }
            }
            _ => set.insert(path),
        }
        Ok(())
    }

    fn index_items(
        &self,
        list: &[Value],
        lt: &ListType,
        at: &Path,
    ) -> Result<(Vec<PathElement>, BTreeMap<PathElement, usize>), String> {
        let mut pes = Vec::with_capacity(list.len());
        let mut first = BTreeMap::new();
        for (i, item) in list.iter().enumerate() {
            let pe = self.item_pe(item, lt, i, at)?;
            first.entry(pe.clone()).or_insert(i);
            pes.push(pe);
        }
        Ok((pes, first))
    }

    /// The structured-merge-diff comparison walk: leaves added, modified,
    /// removed; non-leaf nodes added or removed as a whole.
    fn compare<'v>(
        &self,
        lhs: Option<&'v Value>,
        rhs: Option<&'v Value>,
        fpath: &mut Vec<&'v str>,
        path: &mut Path,
        cmp: &mut Comparison,
    ) -> Result<(), String> {
        let is_obj = |v: Option<&Value>| matches!(v, Some(Value::Object(_)));
        let is_arr = |v: Option<&Value>| matches!(v, Some(Value::Array(_)));
        let nullish = |v: Option<&Value>| matches!(v, None | Some(Value::Null));
        let map_node = (is_obj(lhs) || is_obj(rhs))
            && (is_obj(lhs) || nullish(lhs))
            && (is_obj(rhs) || nullish(rhs));
        let list_node = (is_arr(lhs) || is_arr(rhs))
            && (is_arr(lhs) || nullish(lhs))
            && (is_arr(rhs) || nullish(rhs));
        let leaf = !(map_node || list_node)
            || (map_node && !path.is_empty() && self.atomic_map(fpath))
            || (list_node && self.list_type(fpath) == ListType::Atomic);
        if leaf {
            match (lhs, rhs) {
                (None, Some(_)) => cmp.added.insert(path),
                (Some(_), None) => cmp.removed.insert(path),
                (Some(l), Some(r)) if !json_equal(l, r) => cmp.modified.insert(path),
                _ => {}
            }
            return Ok(());
        }
        if map_node {
            let lm: &'v Map<String, Value> = lhs.and_then(Value::as_object).unwrap_or(&EMPTY_MAP);
            let rm: &'v Map<String, Value> = rhs.and_then(Value::as_object).unwrap_or(&EMPTY_MAP);
            let mut keys: Vec<&String> = lm.keys().chain(rm.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                // Ownership bookkeeping is not itself owned.
                if k == "managedFields" && fpath.as_slice() == ["metadata"] {
                    continue;
                }
                fpath.push(k.as_str());
                path.push(PathElement::Field(k.clone()));
                self.compare(lm.get(k), rm.get(k), fpath, path, cmp)?;
                fpath.pop();
                path.pop();
            }
        } else {
            let lt = self.list_type(fpath);
            let la: &'v [Value] = lhs.and_then(Value::as_array).map_or(&[], Vec::as_slice);
            let ra: &'v [Value] = rhs.and_then(Value::as_array).map_or(&[], Vec::as_slice);
            let (lpes, lfirst) = self.index_items(la, &lt, path)?;
            let (rpes, rfirst) = self.index_items(ra, &lt, path)?;
            let mut all: Vec<&PathElement> = lpes.iter().chain(rpes.iter()).collect();
            all.sort();
            all.dedup();
            for pe in all {
                let l = lfirst.get(pe).map(|i| &la[*i]);
                let r = rfirst.get(pe).map(|i| &ra[*i]);
                path.push(pe.clone());
                self.compare(l, r, fpath, path, cmp)?;
                path.pop();
            }
        }
        if !path.is_empty() {
            if lhs.is_none() {
                cmp.added.insert(path);
            } else if rhs.is_none() {
                cmp.removed.insert(path);
            }
        }
        Ok(())
    }

    /// Merge with "the applied configuration wins".
    fn merge<'v>(
        &self,
        lhs: Option<&'v Value>,
        rhs: Option<&'v Value>,
        fpath: &mut Vec<&'v str>,
        path: &mut Path,
    ) -> Result<Option<Value>, String> {
        let (l, r) = match (lhs, rhs) {
            (l, None) => return Ok(l.cloned()),
            (None, Some(r)) => return Ok(Some(r.clone())),
            (Some(l), Some(r)) => (l, r),
        };
        match (l, r) {
            (Value::Object(lm), Value::Object(rm))
                if path.is_empty() || !self.atomic_map(fpath) =>
            {
                let mut out = lm.clone();
                for (k, rv) in rm {
                    fpath.push(k.as_str());
                    path.push(PathElement::Field(k.clone()));
                    let merged = self.merge(lm.get(k), Some(rv), fpath, path)?;
                    fpath.pop();
                    path.pop();
                    if let Some(v) = merged {
                        out.insert(k.clone(), v);
                    }
                }
                Ok(Some(Value::Object(out)))
            }
            (Value::Array(la), Value::Array(ra)) => {
                let lt = self.list_type(fpath);
                if lt == ListType::Atomic {
                    return Ok(Some(r.clone()));
                }
                Ok(Some(Value::Array(
                    self.merge_list(la, ra, &lt, fpath, path)?,
                )))
            }
            _ => Ok(Some(r.clone())),
        }
    }

    /// structured-merge-diff's list merge: shared items follow the applied
    /// order, live-only items keep their place, new items are inserted where
    /// the applied list has them.
    fn merge_list<'v>(
        &self,
        lhs: &'v [Value],
        rhs: &'v [Value],
        lt: &ListType,
        fpath: &mut Vec<&'v str>,
        path: &mut Path,
    ) -> Result<Vec<Value>, String> {
        let (lpes, lfirst) = self.index_items(lhs, lt, path)?;
        let (rpes, rfirst) = self.index_items(rhs, lt, path)?;
        let mut shared: std::collections::VecDeque<&PathElement> =
            rpes.iter().filter(|pe| lfirst.contains_key(*pe)).collect();
        let mut next_shared = shared.pop_front();
        let mut merged_rhs = std::collections::BTreeSet::new();
        let mut out = Vec::with_capacity(lhs.len().max(rhs.len()));
        let (mut li, mut ri) = (0usize, 0usize);
        let merge_item = |this: &Self,
                          pe: &PathElement,
                          l: Option<&'v Value>,
                          r: Option<&'v Value>,
                          fpath: &mut Vec<&'v str>,
                          path: &mut Path|
         -> Result<Option<Value>, String> {
            path.push(pe.clone());
            let v = this.merge(l, r, fpath, path);
            path.pop();
            v
        };
        while li < lpes.len() || ri < rpes.len() {
            if li < lpes.len() && ri < rpes.len() {
                let pe = &lpes[li];
                if *pe == rpes[ri] {
                    merged_rhs.insert(pe.clone());
                    let l = lfirst.get(pe).map(|i| &lhs[*i]);
                    let r = rfirst.get(pe).map(|i| &rhs[*i]);
                    if let Some(v) = merge_item(self, pe, l, r, fpath, path)? {
                        out.push(v);
                    }
                    li += 1;
                    ri += 1;
                    next_shared = shared.pop_front();
                    continue;
                }
                if rfirst.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                    li += 1;
                    continue;
                }
            }
            if li < lpes.len() {
                let pe = &lpes[li];
                if !rfirst.contains_key(pe) {
                    out.push(lhs[li].clone());
                    li += 1;
                    continue;
                } else if merged_rhs.contains(pe) {
                    li += 1;
                    continue;
                }
            }
            if ri < rpes.len() {
                let pe = &rpes[ri];
                merged_rhs.insert(pe.clone());
                let l = lfirst.get(pe).map(|i| &lhs[*i]);
                let r = rfirst.get(pe).map(|i| &rhs[*i]);
                if let Some(v) = merge_item(self, pe, l, r, fpath, path)? {
                    out.push(v);
                }
                ri += 1;
                if next_shared.is_some_and(|n| n == pe) {
                    next_shared = shared.pop_front();
                }
            }
        }
        Ok(out)
    }

    /// Removes the node at `path` from `obj`; then removes ancestors left
    /// empty that nobody owns. Returns whether something was removed.
    fn remove_path(&self, obj: &mut Value, path: &[PathElement], owned: &FieldSet) -> bool {
        let removed = self.remove_at(obj, path, &mut Vec::new());
        if removed {
            for n in (1..path.len()).rev() {
                let anc = &path[..n];
                if owned.has_at_or_below(anc) {
                    break;
                }
                let empty = match self.get_at(obj, anc, &mut Vec::new()) {
                    Some(Value::Object(m)) => m.is_empty(),
                    Some(Value::Array(a)) => a.is_empty(),
                    _ => false,
                };
                if !empty {
                    break;
                }
                self.remove_at(obj, anc, &mut Vec::new());
            }
        }
        removed
    }

    fn find_item(&self, list: &[Value], pe: &PathElement, fpath: &[&str]) -> Option<usize> {
        let lt = self.list_type(fpath);
        list.iter()
            .enumerate()
            .position(|(i, item)| self.item_pe(item, &lt, i, &Vec::new()).ok().as_ref() == Some(pe))
    }

    fn get_at<'v, 'p>(
        &self,
        v: &'v Value,
        path: &'p [PathElement],
        fpath: &mut Vec<&'p str>,
    ) -> Option<&'v Value> {
        let Some((first, rest)) = path.split_first() else {
            return Some(v);
        };
        match (first, v) {
            (PathElement::Field(k), Value::Object(m)) => {
                fpath.push(k.as_str());
                let r = m.get(k).and_then(|c| self.get_at(c, rest, fpath));
                fpath.pop();
                r
            }
            (pe, Value::Array(a)) => {
                let i = self.find_item(a, pe, fpath)?;
                self.get_at(&a[i], rest, fpath)
            }
            _ => None,
        }
    }

    fn remove_at<'p>(
        &self,
        v: &mut Value,
        path: &'p [PathElement],
        fpath: &mut Vec<&'p str>,
    ) -> bool {
        let Some((first, rest)) = path.split_first() else {
            return false;
        };
        match (first, v) {
            (PathElement::Field(k), Value::Object(m)) => {
                if rest.is_empty() {
                    return m.remove(k).is_some();
                }
                fpath.push(k.as_str());
                let r = match m.get_mut(k) {
                    Some(c) => self.remove_at(c, rest, fpath),
                    None => false,
                };
                fpath.pop();
                r
            }
            (pe, Value::Array(a)) => {
                let Some(i) = self.find_item(a, pe, fpath) else {
                    return false;
                };
                if rest.is_empty() {
                    a.remove(i);
                    true
                } else {
                    self.remove_at(&mut a[i], rest, fpath)
                }
            }
            _ => false,
        }
    }
}

/// A key field of a list-map item stays as long as the item does.
fn is_key_field_of_item(p: &[PathElement]) -> bool {
    match p {
        [.., PathElement::Key(k), PathElement::Field(f)] => {
            matches!(serde_json::from_str::<Value>(k), Ok(Value::Object(m)) if m.contains_key(f))
        }
        _ => false,
    }
}

#[derive(Debug, Default)]
struct Comparison {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

fn compare(old: &Value, new: &Value, schema: &dyn SsaSchema) -> Result<Comparison, String> {
    let w = Walker { schema };
    let mut cmp = Comparison::default();
    w.compare(
        Some(old),
        Some(new),
        &mut Vec::new(),
        &mut Vec::new(),
        &mut cmp,
    )?;
    Ok(cmp)
}

/// The field set a configuration specifies (as recorded for an applier).
pub fn field_set_of(config: &Value, schema: &dyn SsaSchema) -> Result<FieldSet, String> {
    let w = Walker { schema };
    let mut set = FieldSet::new();
    w.to_field_set(config, &mut Vec::new(), &mut Vec::new(), &mut set)?;
    Ok(set.difference(&strip_set()))
}

// ---------------------------------------------------------------------------
// Apply.

/// One conflicting field.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// The manager as the real server prints it (`"kubectl" using apps/v1`).
    pub manager: String,
    /// The field path (`.spec.replicas`).
    pub path: String,
}

/// Why an apply failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change (409 Conflict).
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<Conflict>),
    /// The configuration cannot be interpreted: 400 for a set
    /// `managedFields` or a non-object body, 500 (`Internal error occurred`)
    /// for configurations the type cannot represent.
    #[error("{message}")]
    Invalid {
        /// HTTP status to answer with.
        code: u16,
        /// Message.
        message: String,
    },
}

fn conflict_message(c: &[Conflict]) -> String {
    if c.len() == 1 {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c[0].manager, c[0].path
        );
    }
    let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for x in c {
        by_manager.entry(&x.manager).or_default().push(&x.path);
    }
    let mut lines = Vec::new();
    for (m, paths) in by_manager {
        lines.push(format!("conflicts with {m}:"));
        for p in paths {
            lines.push(format!("- {p}"));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        c.len(),
        lines.join("\n")
    )
}

impl ApplyError {
    /// The `Status` body kube-apiserver answers with.
    pub fn to_status(&self) -> Value {
        match self {
            ApplyError::Conflicts(c) => json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure",
                "message": conflict_message(c),
                "reason": "Conflict",
                "details": {"causes": c.iter().map(|x| json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with {}", x.manager),
                    "field": x.path,
                })).collect::<Vec<_>>()},
                "code": 409
            }),
            ApplyError::Invalid { code: 400, message } => json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": message, "reason": "BadRequest", "code": 400
            }),
            ApplyError::Invalid { message, .. } => json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure",
                "message": format!("Internal error occurred: {message}"),
                "reason": "InternalError",
                "details": {"causes": [{"message": message}]},
                "code": 500
            }),
        }
    }
}

/// Options of one apply request.
#[derive(Debug, Clone, Copy)]
pub struct ApplyOptions<'a> {
    /// `fieldManager` (required for apply).
    pub manager: &'a str,
    /// `force=true`.
    pub force: bool,
    /// The timestamp to record (RFC 3339, seconds).
    pub now: &'a str,
    /// `Some("status")` for `/status`.
    pub subresource: Option<&'a str>,
}

/// Applies `applied` (the request body as JSON) to `live` (`None` on
/// create) and returns the new object with its `managedFields`. When the
/// result equals `live` (same content, same ownership), `live` is returned
/// unchanged (timestamps kept), so the caller can skip the write.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    opts: &ApplyOptions,
    schema: &dyn SsaSchema,
) -> Result<Value, ApplyError> {
    let invalid = |code: u16, message: String| ApplyError::Invalid { code, message };
    if !applied.is_object() {
        return Err(invalid(400, "apply configuration must be an object".into()));
    }
    if applied
        .pointer("/metadata/managedFields")
        .is_some_and(|v| !v.is_null())
    {
        return Err(invalid(400, "metadata.managedFields must be nil".into()));
    }
    let subresource = opts.subresource.unwrap_or("").to_string();
    let api_version = applied
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let w = Walker { schema };
    let empty = json!({});
    // managedFields of the live object ride along untouched (comparisons skip
    // them) and are replaced at the end.
    let live_obj: &Value = live.unwrap_or(&empty);
    let mut managers = live.map(decode_managed_fields).unwrap_or_default();
    if let (Some(l), true) = (live, managers.is_empty()) {
        // An object nobody was tracked on: its current fields go to
        // `before-first-apply` first, as the real server does.
        let tracked = record_update(
            None,
            &without_managed_fields(l),
            BEFORE_FIRST_APPLY,
            None,
            opts.now,
            schema,
        );
        managers = decode_managed_fields(&tracked);
    }
    let config = applied;

    let new_set = field_set_of(config, schema)
        .map_err(|e| invalid(500, format!("failed to create typed patch object: {e}")))?;
    let mut merged = w
        .merge(
            Some(live_obj),
            Some(config),
            &mut Vec::new(),
            &mut Vec::new(),
        )
        .map_err(|e| invalid(500, format!("failed to merge config: {e}")))?
        .unwrap_or_else(|| json!({}));

    let me = ManagedEntry {
        manager: opts.manager.to_string(),
        operation: "Apply".into(),
        api_version: api_version.clone(),
        time: Some(opts.now.to_string()),
        subresource: subresource.clone(),
        fields: new_set.clone(),
    };
    let my_id = me.identity();
    let previous = managers.iter().position(|e| e.identity() == my_id);
    let last_set = previous
        .map(|i| managers[i].fields.clone())
        .unwrap_or_default();

    // Prune what this applier applied before and no longer applies, unless
    // someone else owns it.
    let others_union = managers
        .iter()
        .filter(|e| e.identity() != my_id)
        .fold(FieldSet::new(), |acc, e| acc.union(&e.fields));
    let owned = others_union.union(&new_set);
    // Parents first: a node nobody else owns anything under goes as a whole.
    let mut to_remove = last_set
        .difference(&new_set)
        .difference(&others_union)
        .paths();
    to_remove.sort_by_key(Vec::len);
    for p in to_remove {
        if owned.has_below(&p) || is_key_field_of_item(&p) {
            continue;
        }
        w.remove_path(&mut merged, &p, &owned);
    }

    // Conflicts: fields another manager owns whose value changes.
    let cmp = compare(live_obj, &merged, schema)
        .map_err(|e| invalid(500, format!("failed to compare objects: {e}")))?;
    let changed = cmp.modified.union(&cmp.added);
    let mut conflicts: Vec<(Conflict, Path)> = Vec::new();
    for e in managers.iter().filter(|e| e.identity() != my_id) {
        for p in e.fields.intersection(&changed).paths() {
            conflicts.push((
                Conflict {
                    manager: e.display(),
                    path: path_string(&p),
                },
                p,
            ));
        }
    }
    if !conflicts.is_empty() && !opts.force && opts.manager == "kubectl" {
        // Upgrading from client-side apply: conflicts on fields the
        // last-applied annotation still describes accurately are allowed.
        if let Some(allowed) = live.and_then(|l| allowed_from_last_applied(l, schema)) {
            conflicts.retain(|(_, p)| !allowed.contains(p));
        }
    }
    if !conflicts.is_empty() && !opts.force {
        let mut list: Vec<Conflict> = conflicts.into_iter().map(|(c, _)| c).collect();
        list.sort_by(|a, b| a.manager.cmp(&b.manager).then(a.path.cmp(&b.path)));
        return Err(ApplyError::Conflicts(list));
    }
    let strip = strip_set();
    let old_managers = managers.clone();
    for e in managers.iter_mut().filter(|e| e.identity() != my_id) {
        e.fields = e.fields.difference(&changed).difference(&cmp.removed);
    }
    match previous {
        Some(i) => {
            let unchanged_set = managers[i].fields == me.fields;
            let old_time = managers[i].time.clone();
            managers[i] = me;
            if unchanged_set
                && cmp.added.is_empty()
                && cmp.modified.is_empty()
                && cmp.removed.is_empty()
            {
                managers[i].time = old_time;
            }
        }
        None => managers.push(me),
    }
    for e in managers.iter_mut() {
        e.fields = e.fields.difference(&strip);
    }
    managers.retain(|e| !e.fields.is_empty());
    cap_update_managers(&mut managers);

    let unchanged = live.is_some()
        && json_equal(&merged, live_obj)
        && encode_managed_fields(&managers) == encode_managed_fields(&old_managers);
    if unchanged {
        if let Some(l) = live {
            return Ok(l.clone());
        }
    }
    if opts.manager == "kubectl" {
        sync_last_applied(live, applied, &mut merged);
    }
    set_managed_fields(&mut merged, &managers);
    Ok(merged)
}

/// Fields of the client-side apply annotation whose values still match the
/// live object (`None` without a usable annotation).
fn allowed_from_last_applied(live: &Value, schema: &dyn SsaSchema) -> Option<FieldSet> {
    let text = live
        .pointer("/metadata/annotations")?
        .get(LAST_APPLIED_ANNOTATION)?
        .as_str()?;
    if text.is_empty() {
        return None;
    }
    let last: Value = serde_json::from_str(text).ok()?;
    let w = Walker { schema };
    let mut set = FieldSet::new();
    w.to_field_set(&last, &mut Vec::new(), &mut Vec::new(), &mut set)
        .ok()?;
    let cmp = compare(&last, live, schema).ok()?;
    Some(
        set.difference(&cmp.modified)
            .difference(&cmp.added)
            .difference(&cmp.removed),
    )
}

/// The manager owning an untracked object's fields at its first apply.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// The client-side apply annotation.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `kubectl apply --server-side` keeps an existing client-side apply
/// annotation in step with what it applied (the applied configuration
/// without that annotation, as JSON).
fn sync_last_applied(live: Option<&Value>, applied: &Value, merged: &mut Value) {
    let has = live
        .and_then(|l| l.pointer("/metadata/annotations"))
        .and_then(|a| a.get(LAST_APPLIED_ANNOTATION))
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty());
    if !has {
        return;
    }
    let mut cfg = applied.clone();
    if let Some(a) = cfg
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove(LAST_APPLIED_ANNOTATION);
    }
    let text = format!("{}\n", canonical_json(&cfg));
    if let Some(a) = merged
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.insert(LAST_APPLIED_ANNOTATION.into(), Value::String(text));
    }
}

/// Records a non-apply write by `manager` (create when `old` is `None`):
/// returns `new` with updated `managedFields`. As on the real server, valid
/// non-empty `managedFields` in the request are the starting point (that is
/// how clients edit them), `[]` or `[{}]` resets them, and anything else
/// (absent, null, malformed) keeps the live ones; subresource writes always
/// keep the live ones.
pub fn record_update(
    old: Option<&Value>,
    new: &Value,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
    schema: &dyn SsaSchema,
) -> Value {
    let live_managers = || old.map(decode_managed_fields).unwrap_or_default();
    let requested = new.pointer("/metadata/managedFields");
    let mut managers = if subresource.is_some() {
        // Subresource writes cannot set managedFields.
        live_managers()
    } else if is_reset_managed_fields(requested) {
        Vec::new()
    } else {
        match decode_managed_fields(new) {
            m if !m.is_empty() => m,
            _ => live_managers(),
        }
    };
    let mut out = new.clone();
    if old.is_some() && managers.is_empty() {
        // Updates of an object nobody is tracked on stay untracked (only
        // creates start tracking), as the real server's skip rule does.
        set_managed_fields(&mut out, &managers);
        return out;
    }
    let old_obj = match old {
        Some(o) => std::borrow::Cow::Borrowed(o),
        None => std::borrow::Cow::Owned(schema.empty_object()),
    };
    let Ok(cmp) = compare(&old_obj, new, schema) else {
        // Objects the schema cannot describe keep their ownership as is.
        set_managed_fields(&mut out, &managers);
        return out;
    };
    let strip = strip_set();
    let changed = cmp.added.union(&cmp.modified);
    for e in managers.iter_mut() {
        e.fields = e.fields.difference(&changed).difference(&cmp.removed);
    }
    let mine = changed.difference(&strip);
    if !mine.is_empty() {
        let api_version = new
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let entry = ManagedEntry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version,
            time: Some(now.to_string()),
            subresource: subresource.unwrap_or("").to_string(),
            fields: mine,
        };
        let id = entry.identity();
        match managers.iter_mut().find(|e| e.identity() == id) {
            Some(e) => {
                e.fields = e.fields.union(&entry.fields);
                e.time = entry.time;
            }
            None => managers.push(entry),
        }
    }
    for e in managers.iter_mut() {
        e.fields = e.fields.difference(&strip);
    }
    managers.retain(|e| !e.fields.is_empty());
    cap_update_managers(&mut managers);
    set_managed_fields(&mut out, &managers);
    out
}

#[cfg(test)]
mod tests;
