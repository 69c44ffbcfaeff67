//! Children of one parent, without I/O: the observed `children` map of a hook request, the
//! validation of a hook's desired children, and the create/update/delete actions that bring
//! the observed children to the desired ones.
//!
//! The rules follow upstream Metacontroller's `manage_children`: every declared child type
//! has an entry in the request even when empty; desired children of undeclared types, or in
//! a namespace other than a namespaced parent's, are refused; a namespaced child without a
//! namespace gets the parent's; differing children are updated per the type's update
//! method (OnDelete: never); observed children that are no longer desired are deleted.
//! Objects already being deleted are left alone until they are gone.

use std::collections::{BTreeMap, BTreeSet};

use metacontroller_api::hook::HookVersion;
use metacontroller_api::wire::ObjectMap;
use metacontroller_api::ChildUpdateMethod;
use metacontroller_apply::Schema;
use serde_json::{json, Value};

use crate::meta::is_deleting;

/// One declared child type, resolved through discovery.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildType {
    /// `v1`, `apps/v1`, ...
    pub api_version: String,
    /// Kind served by the resource.
    pub kind: String,
    /// Plural resource name.
    pub resource: String,
    /// Whether objects of the type live in a namespace.
    pub namespaced: bool,
    /// The effective update method.
    pub method: ChildUpdateMethod,
    /// Extension (`childResources[].namespaces`): where a namespaced parent may place
    /// children of this type besides its own namespace (`*`: anywhere, cluster-scoped
    /// types included). Empty: upstream's rule.
    pub namespaces: Vec<String>,
}

impl ChildType {
    /// May a namespaced parent have a child of this type in `namespace` (`""`:
    /// cluster-scoped) other than its own? Only when opted in.
    pub(crate) fn allows_elsewhere(&self, namespace: &str) -> bool {
        self.namespaces.iter().any(|n| {
            n == metacontroller_api::composite::ANY_NAMESPACE
                || (!namespace.is_empty() && n == namespace)
        })
    }
}

/// Identifies a child: (apiVersion, kind, namespace, name).
pub type ChildKey = (String, String, String, String);

/// Why a hook response's children were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChildError {
    /// A child without apiVersion, kind or metadata.name.
    #[error("children[{index}]: {message}")]
    Invalid {
        /// Index in the response's `children`.
        index: usize,
        /// What is missing.
        message: String,
    },
    /// A child of a type the controller does not declare.
    #[error("children[{index}]: {kind}.{api_version} is not a declared child resource")]
    Undeclared {
        /// Index in the response's `children`.
        index: usize,
        /// The child's apiVersion.
        api_version: String,
        /// The child's kind.
        kind: String,
    },
    /// A child outside the namespaced parent's namespace, or a namespace on a
    /// cluster-scoped type.
    #[error("children[{index}]: namespace {namespace:?} is not allowed: {reason}")]
    Namespace {
        /// Index in the response's `children`.
        index: usize,
        /// The namespace asked for.
        namespace: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Extension (children elsewhere in a namespaced install): a child in a namespace, or
    /// of a cluster-scoped type, that this process does not watch (`--watch-namespaces`);
    /// it would never be seen, so it is not written.
    #[error("{kind} {name} is not written: this process does not watch it, it is limited to the namespaces {namespaces} (--watch-namespaces)")]
    Unwatched {
        /// The child's kind.
        kind: String,
        /// `<namespace>/<name>`, or `<name>` when cluster-scoped.
        name: String,
        /// The watched namespaces, comma-separated.
        namespaces: String,
    },
    /// The apply engine refused an object.
    #[error("{key:?}: {message}")]
    Apply {
        /// The child.
        key: ChildKey,
        /// The apply engine's message.
        message: String,
    },
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(next) => cur = next,
            None => return "",
        }
    }
    cur.as_str().unwrap_or_default()
}

/// The key of an object (empty strings for missing fields).
pub fn child_key(obj: &Value) -> ChildKey {
    (
        str_at(obj, &["apiVersion"]).to_string(),
        str_at(obj, &["kind"]).to_string(),
        str_at(obj, &["metadata", "namespace"]).to_string(),
        str_at(obj, &["metadata", "name"]).to_string(),
    )
}

/// The `children` map of a hook request: one (possibly empty) entry per declared type, then
/// the observed children placed by the v1/v2 key rules.
pub(crate) fn observed_map(
    version: HookVersion,
    parent_namespace: Option<&str>,
    types: &[ChildType],
    observed: impl IntoIterator<Item = Value>,
) -> ObjectMap {
    let mut map = ObjectMap::new();
    for t in types {
        map.init_group(&t.api_version, &t.kind);
    }
    for obj in observed {
        map.insert_child(version, parent_namespace, obj);
    }
    map
}

/// Checks the desired children of a hook response and defaults their namespaces. Returns
/// the accepted ones keyed by [`ChildKey`] with the index of the declared type, and the
/// refused ones' errors: as upstream (where only that child's write fails), a refused
/// child is skipped and the others are still written.
pub(crate) fn validate_desired(
    types: &[ChildType],
    parent_namespace: Option<&str>,
    desired: Vec<Value>,
) -> (BTreeMap<ChildKey, (usize, Value)>, Vec<ChildError>) {
    let parent_ns = parent_namespace.unwrap_or_default();
    let mut out = BTreeMap::new();
    let mut refused = Vec::new();
    for (index, obj) in desired.into_iter().enumerate() {
        match validate_one(types, parent_ns, index, obj) {
            Ok((key, type_index, obj)) => {
                // As upstream (a map insert), a later duplicate replaces the earlier one.
                if out.insert(key.clone(), (type_index, obj)).is_some() {
                    tracing::debug!(index, ?key, "duplicate desired child: the last one wins");
                }
            }
            Err(e) => refused.push(e),
        }
    }
    (out, refused)
}

/// Checks one desired child (see [`validate_desired`]).
fn validate_one(
    types: &[ChildType],
    parent_ns: &str,
    index: usize,
    mut obj: Value,
) -> Result<(ChildKey, usize, Value), ChildError> {
    let invalid = |message: &str| ChildError::Invalid {
        index,
        message: message.to_string(),
    };
    if !obj.is_object() {
        return Err(invalid("not an object"));
    }
    let (api_version, kind, namespace, name) = child_key(&obj);
    if api_version.is_empty() || kind.is_empty() {
        return Err(invalid("apiVersion and kind are required"));
    }
    if name.is_empty() {
        return Err(invalid("metadata.name is required"));
    }
    let Some(type_index) = types
        .iter()
        .position(|t| t.api_version == api_version && t.kind == kind)
    else {
        return Err(ChildError::Undeclared {
            index,
            api_version,
            kind,
        });
    };
    let namespace = if types[type_index].namespaced {
        match namespace.as_str() {
            "" if parent_ns.is_empty() => {
                return Err(ChildError::Namespace {
                    index,
                    namespace,
                    reason: "a namespaced child of a cluster-scoped parent needs a namespace",
                })
            }
            "" => parent_ns.to_string(),
            ns if !parent_ns.is_empty()
                && ns != parent_ns
                && !types[type_index].allows_elsewhere(ns) =>
            {
                return Err(ChildError::Namespace {
                    index,
                    namespace,
                    reason: "children must be in the parent's namespace",
                })
            }
            ns => ns.to_string(),
        }
    } else if !namespace.is_empty() {
        // (`namespaces` never lets a cluster-scoped object have a namespace.)
        return Err(ChildError::Namespace {
            index,
            namespace,
            reason: "the child resource is cluster-scoped",
        });
    } else {
        namespace
    };
    if !namespace.is_empty() {
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("namespace".into(), Value::String(namespace.clone()));
        }
    }
    Ok(((api_version, kind, namespace, name), type_index, obj))
}

/// The parent an ownerReference points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentRef {
    /// Parent apiVersion.
    pub api_version: String,
    /// Parent kind.
    pub kind: String,
    /// Parent name.
    pub name: String,
    /// Parent uid.
    pub uid: String,
    /// Parent namespace: a child outside it is tracked by label, not by ownerReference
    /// (see [`crate::elsewhere`]). Empty for cluster-scoped parents and for decorators,
    /// whose children always carry an ownerReference.
    pub namespace: String,
}

/// Adds (or replaces) the controller ownerReference of `obj` with one to `parent`
/// (`controller: true`, `blockOwnerDeletion: true`), keeping other owners. A child outside
/// a namespaced parent's namespace gets the parent label and annotation instead.
pub(crate) fn set_controller_ref(obj: &mut Value, parent: &ParentRef) {
    if crate::elsewhere::is_elsewhere(obj, parent) {
        crate::elsewhere::set_parent_label(obj, parent);
        return;
    }
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let meta = root.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let refs = meta
        .entry("ownerReferences")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !refs.is_array() {
        *refs = Value::Array(Vec::new());
    }
    if let Some(refs) = refs.as_array_mut() {
        refs.retain(|r| r.get("controller") != Some(&Value::Bool(true)));
        refs.push(json!({
            "apiVersion": parent.api_version,
            "kind": parent.kind,
            "name": parent.name,
            "uid": parent.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }));
    }
}

/// One write that brings the children closer to the desired state.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create this object (last-applied recorded, controller ownerReference set).
    Create {
        /// Index of the child type.
        type_index: usize,
        /// The body to POST.
        object: Value,
    },
    /// Replace the observed object with this one (carries observed's resourceVersion).
    Update {
        /// Index of the child type.
        type_index: usize,
        /// The body to PUT.
        object: Value,
    },
    /// Server-side apply of this body (creates the child when `observed` is `None`).
    Apply {
        /// Index of the child type.
        type_index: usize,
        /// The current child, if it exists.
        observed: Option<Value>,
        /// The apply body (controller ownerReference included).
        object: Value,
    },
    /// Delete the observed child (with its uid as precondition).
    Delete {
        /// Index of the child type.
        type_index: usize,
        /// The child as observed.
        observed: Value,
    },
}

impl Action {
    /// Index of the child type the action is about.
    pub(crate) fn type_index(&self) -> usize {
        match self {
            Action::Create { type_index, .. }
            | Action::Update { type_index, .. }
            | Action::Apply { type_index, .. }
            | Action::Delete { type_index, .. } => *type_index,
        }
    }
}

fn apply_error(key: &ChildKey) -> impl Fn(metacontroller_apply::ApplyError) -> ChildError + '_ {
    move |e| ChildError::Apply {
        key: key.clone(),
        message: e.to_string(),
    }
}

/// The server-side apply body of a desired child, with the controller ownerReference.
pub(crate) fn apply_body(want: &Value, parent: &ParentRef) -> Result<Value, ChildError> {
    let key = child_key(want);
    let mut body =
        metacontroller_apply::ssa::apply_patch_body(want, None).map_err(apply_error(&key))?;
    set_controller_ref(&mut body, parent);
    Ok(body)
}

/// The actions for one sync: `observed` are the parent's owned children (all declared
/// types), `desired` the validated hook output. With `server_side_apply`, creates and
/// in-place updates become [`Action::Apply`] (the writer skips bodies already in place).
/// Empty when everything is in place (dynamic apply).
#[cfg(test)]
pub(crate) fn plan_children(
    types: &[ChildType],
    parent: &ParentRef,
    observed: &[Value],
    desired: &BTreeMap<ChildKey, (usize, Value)>,
    server_side_apply: bool,
) -> Result<Vec<Action>, ChildError> {
    plan_children_with(types, parent, observed, desired, server_side_apply, &|_| {
        None
    })
}

/// [`plan_children`], merging each child with the schema `schema(type_index)` of its type
/// (`None`: by conventions only).
pub(crate) fn plan_children_with<'s>(
    types: &[ChildType],
    parent: &ParentRef,
    observed: &[Value],
    desired: &BTreeMap<ChildKey, (usize, Value)>,
    server_side_apply: bool,
    schema: &dyn Fn(usize) -> Option<&'s Schema>,
) -> Result<Vec<Action>, ChildError> {
    let mut actions = Vec::new();
    let mut seen = BTreeSet::new();
    for obs in observed {
        let key = child_key(obs);
        let Some(type_index) = types
            .iter()
            .position(|t| t.api_version == key.0 && t.kind == key.1)
        else {
            continue;
        };
        seen.insert(key.clone());
        if is_deleting(obs) {
            continue;
        }
        let Some((_, want)) = desired.get(&key) else {
            actions.push(Action::Delete {
                type_index,
                observed: obs.clone(),
            });
            continue;
        };
        let method = &types[type_index].method;
        if matches!(method, ChildUpdateMethod::OnDelete) {
            continue;
        }
        let existing = Existing {
            key: &key,
            type_index,
            observed: obs,
            recreate: matches!(
                method,
                ChildUpdateMethod::Recreate | ChildUpdateMethod::RollingRecreate
            ),
        };
        let action = if server_side_apply {
            plan_apply(&existing, want, parent)?
        } else {
            plan_update(&existing, want, schema(type_index))?
        };
        actions.extend(action);
    }
    for (key, (type_index, want)) in desired {
        if !seen.contains(key) {
            actions.push(plan_create(
                key,
                *type_index,
                want,
                parent,
                server_side_apply,
            )?);
        }
    }
    Ok(actions)
}

/// An observed child that is also desired, and how its type is updated.
struct Existing<'a> {
    key: &'a ChildKey,
    type_index: usize,
    observed: &'a Value,
    /// `Recreate` or `RollingRecreate`: a change means delete, then create.
    recreate: bool,
}

impl Existing<'_> {
    fn delete(&self) -> Action {
        Action::Delete {
            type_index: self.type_index,
            observed: self.observed.clone(),
        }
    }
}

/// Server-side apply: the apply body for an in-place update, or a deletion when a
/// recreated child's body is not already in place.
fn plan_apply(
    existing: &Existing<'_>,
    want: &Value,
    parent: &ParentRef,
) -> Result<Option<Action>, ChildError> {
    let body = apply_body(want, parent)?;
    Ok(if !existing.recreate {
        Some(Action::Apply {
            type_index: existing.type_index,
            observed: Some(existing.observed.clone()),
            object: body,
        })
    } else if crate::writer::contains_all(existing.observed, &body) {
        None
    } else {
        Some(existing.delete())
    })
}

/// Dynamic apply: the merged object when it differs from the observed one (a deletion for
/// a recreated child), nothing when it is in place.
fn plan_update(
    existing: &Existing<'_>,
    want: &Value,
    schema: Option<&Schema>,
) -> Result<Option<Action>, ChildError> {
    let plan = metacontroller_apply::plan(existing.observed, want, schema)
        .map_err(apply_error(existing.key))?;
    Ok(match plan {
        metacontroller_apply::Plan::Update(_) if existing.recreate => Some(existing.delete()),
        metacontroller_apply::Plan::Update(object) => Some(Action::Update {
            type_index: existing.type_index,
            object,
        }),
        metacontroller_apply::Plan::Unchanged => None,
    })
}

/// A desired child nobody observed: created (or applied) with our controller reference.
fn plan_create(
    key: &ChildKey,
    type_index: usize,
    want: &Value,
    parent: &ParentRef,
    server_side_apply: bool,
) -> Result<Action, ChildError> {
    if server_side_apply {
        return Ok(Action::Apply {
            type_index,
            observed: None,
            object: apply_body(want, parent)?,
        });
    }
    let mut object = metacontroller_apply::prepare_create(want).map_err(apply_error(key))?;
    set_controller_ref(&mut object, parent);
    Ok(Action::Create { type_index, object })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm_type(method: ChildUpdateMethod) -> ChildType {
        ChildType {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            resource: "configmaps".into(),
            namespaced: true,
            method,
            namespaces: Vec::new(),
        }
    }

    fn ns_type() -> ChildType {
        ChildType {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            resource: "namespaces".into(),
            namespaced: false,
            method: ChildUpdateMethod::InPlace,
            namespaces: Vec::new(),
        }
    }

    fn parent() -> ParentRef {
        ParentRef {
            api_version: "example.com/v1".into(),
            kind: "Parent".into(),
            name: "p".into(),
            uid: "uid-p".into(),
            namespace: String::new(),
        }
    }

    fn accepted(
        (out, refused): (BTreeMap<ChildKey, (usize, Value)>, Vec<ChildError>),
    ) -> BTreeMap<ChildKey, (usize, Value)> {
        assert!(refused.is_empty(), "{refused:?}");
        out
    }

    /// The only error of a response whose one child was refused (and not kept).
    fn refused_one(
        (out, mut refused): (BTreeMap<ChildKey, (usize, Value)>, Vec<ChildError>),
    ) -> Option<ChildError> {
        assert!(out.is_empty());
        assert_eq!(refused.len(), 1, "{refused:?}");
        refused.pop()
    }

    #[test]
    fn refused_child_is_skipped_and_the_others_kept() {
        let types = [cm_type(ChildUpdateMethod::InPlace)];
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        let (out, refused) = validate_desired(
            &types,
            Some("default"),
            vec![cm("a", "1"), secret, cm("b", "2")],
        );
        assert_eq!(out.len(), 2);
        assert!(matches!(
            refused[..],
            [ChildError::Undeclared { index: 1, .. }]
        ));
    }

    fn cm(name: &str, value: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name}, "data": {"k": value}})
    }

    /// What the API server returns for a created object: server fields added.
    fn as_created(mut obj: Value, uid: &str) -> Value {
        let meta = obj["metadata"].as_object_mut().unwrap();
        meta.insert("uid".into(), json!(uid));
        meta.insert("resourceVersion".into(), json!("7"));
        meta.insert("creationTimestamp".into(), json!("2024-01-01T00:00:00Z"));
        obj
    }

    #[test]
    fn observed_map_has_every_declared_type() {
        let types = [cm_type(ChildUpdateMethod::InPlace), ns_type()];
        let map = observed_map(HookVersion::V1, Some("default"), &types, []);
        assert_eq!(
            serde_json::to_value(&map).unwrap(),
            json!({"ConfigMap.v1": {}, "Namespace.v1": {}})
        );
        let mut child = cm("a", "1");
        child["metadata"]["namespace"] = json!("default");
        let map = observed_map(HookVersion::V2, Some("default"), &types, [child]);
        assert!(map.get("v1", "ConfigMap", "default/a").is_some());
    }

    #[test]
    fn desired_namespace_defaulted_and_checked() {
        let types = [cm_type(ChildUpdateMethod::InPlace), ns_type()];
        let out = accepted(validate_desired(
            &types,
            Some("default"),
            vec![cm("a", "1")],
        ));
        let (key, (index, obj)) = out.iter().next().unwrap();
        assert_eq!(key.2, "default");
        assert_eq!(*index, 0);
        assert_eq!(obj["metadata"]["namespace"], "default");

        let mut other = cm("a", "1");
        other["metadata"]["namespace"] = json!("elsewhere");
        assert!(matches!(
            refused_one(validate_desired(&types, Some("default"), vec![other])),
            Some(ChildError::Namespace { index: 0, .. })
        ));
        assert!(matches!(
            refused_one(validate_desired(&types, None, vec![cm("a", "1")])),
            Some(ChildError::Namespace { .. })
        ));
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": "n", "namespace": "default"}});
        assert!(matches!(
            refused_one(validate_desired(&types, Some("default"), vec![ns])),
            Some(ChildError::Namespace { .. })
        ));
    }

    #[test]
    fn undeclared_and_invalid_children_refused() {
        let types = [cm_type(ChildUpdateMethod::InPlace)];
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        assert!(matches!(
            refused_one(validate_desired(&types, Some("default"), vec![secret])),
            Some(ChildError::Undeclared { index: 0, .. })
        ));
        let nameless = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
        assert!(matches!(
            refused_one(validate_desired(&types, Some("default"), vec![nameless])),
            Some(ChildError::Invalid { .. })
        ));
        assert!(matches!(
            refused_one(validate_desired(&types, Some("default"), vec![json!(3)])),
            Some(ChildError::Invalid { .. })
        ));
    }

    #[test]
    fn duplicate_children_last_one_wins() {
        let types = [cm_type(ChildUpdateMethod::InPlace)];
        let out = accepted(validate_desired(
            &types,
            Some("default"),
            vec![cm("a", "1"), cm("a", "2")],
        ));
        assert_eq!(out.len(), 1);
        let (_, obj) = out.values().next().unwrap();
        assert_eq!(obj["data"]["k"], "2");
    }

    fn converge(
        method: ChildUpdateMethod,
        observed_value: &str,
        desired_value: &str,
    ) -> Vec<Action> {
        let types = [cm_type(method)];
        let first = accepted(validate_desired(
            &types,
            Some("default"),
            vec![cm("a", observed_value)],
        ));
        let created = match plan_children(&types, &parent(), &[], &first, false)
            .unwrap()
            .as_slice()
        {
            [Action::Create { object, .. }] => as_created(object.clone(), "uid-a"),
            other => panic!("expected one create, got {other:?}"),
        };
        let desired = accepted(validate_desired(
            &types,
            Some("default"),
            vec![cm("a", desired_value)],
        ));
        plan_children(&types, &parent(), &[created], &desired, false).unwrap()
    }

    #[test]
    fn create_sets_controller_owner_reference() {
        let types = [cm_type(ChildUpdateMethod::InPlace)];
        let desired = accepted(validate_desired(
            &types,
            Some("default"),
            vec![cm("a", "1")],
        ));
        let actions = plan_children(&types, &parent(), &[], &desired, false).unwrap();
        let [Action::Create { object, .. }] = actions.as_slice() else {
            panic!("{actions:?}");
        };
        assert_eq!(
            object["metadata"]["ownerReferences"],
            json!([{"apiVersion": "example.com/v1", "kind": "Parent", "name": "p",
                    "uid": "uid-p", "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(object["metadata"]["namespace"], "default");
    }

    #[test]
    fn converged_children_need_no_write() {
        assert!(converge(ChildUpdateMethod::InPlace, "1", "1").is_empty());
    }

    #[test]
    fn update_methods() {
        let updated = converge(ChildUpdateMethod::InPlace, "1", "2");
        let [Action::Update { object, .. }] = updated.as_slice() else {
            panic!("{updated:?}");
        };
        assert_eq!(object["data"]["k"], "2");
        assert_eq!(object["metadata"]["resourceVersion"], "7");
        assert!(converge(ChildUpdateMethod::OnDelete, "1", "2").is_empty());
        assert!(matches!(
            converge(ChildUpdateMethod::Recreate, "1", "2").as_slice(),
            [Action::Delete { observed, .. }] if observed["metadata"]["uid"] == "uid-a"
        ));
    }

    #[test]
    fn undesired_children_deleted_unless_already_deleting() {
        let types = [cm_type(ChildUpdateMethod::InPlace)];
        let mut observed = as_created(cm("old", "1"), "uid-old");
        observed["metadata"]["namespace"] = json!("default");
        let actions = plan_children(
            &types,
            &parent(),
            &[observed.clone()],
            &BTreeMap::new(),
            false,
        )
        .unwrap();
        assert!(
            matches!(actions.as_slice(), [Action::Delete { observed, .. }] if observed["metadata"]["uid"] == "uid-old")
        );
        observed["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        assert!(
            plan_children(&types, &parent(), &[observed], &BTreeMap::new(), false)
                .unwrap()
                .is_empty()
        );
    }
}
