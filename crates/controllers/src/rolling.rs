//! Rolling updates (`RollingRecreate`, `RollingInPlace`) as upstream Metacontroller does them,
//! without I/O: each distinct value of the parent's revision fields (`revisionHistory.fieldPaths`,
//! default `spec`) is a ControllerRevision that *claims* children by name. The hook is asked
//! for each revision's desired children; a child keeps the desired state of the revision that
//! claims it; one child per sync moves to the latest revision, and only while every child
//! already on the latest revision is up to date and passes the type's `statusChecks`.
//! Progress is reported in the parent status as condition `Updated`
//! (`RolloutWaiting` / `RolloutProgressing` / `OnLatestRevision`).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use metacontroller_api::composite::ChildUpdateStatusChecks;
use metacontroller_api::revision::{
    ControllerRevision, ControllerRevisionChildren, LABEL_API_GROUP, LABEL_RESOURCE,
};
use metacontroller_api::ChildUpdateMethod;
use serde_json::{json, Map, Value};

use crate::children::ChildKey;
use crate::meta::api_group;

/// Desired children keyed as in `crate::children::validate_desired`.
pub type Desired = BTreeMap<ChildKey, (usize, Value)>;

/// The parent fields at `field_paths` (dotted) as a partial object.
pub(crate) fn make_patch(parent: &Value, field_paths: &[String]) -> Value {
    let mut patch = json!({});
    apply_patch(&mut patch, parent, field_paths);
    patch
}

fn set_path(dest: &mut Value, parts: &[&str], value: Value) {
    let mut cur = dest;
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == parts.len() {
            map.insert((*p).to_string(), value);
            return;
        }
        cur = map.entry((*p).to_string()).or_insert_with(|| json!({}));
    }
}

/// Overwrites the fields at `field_paths` of `dest` with those of `patch`.
pub(crate) fn apply_patch(dest: &mut Value, patch: &Value, field_paths: &[String]) {
    for path in field_paths {
        let parts: Vec<&str> = path.split('.').collect();
        let mut cur = patch;
        let mut found = true;
        for p in &parts {
            match cur.get(p) {
                Some(next) => cur = next,
                None => {
                    found = false;
                    break;
                }
            }
        }
        if found {
            set_path(dest, &parts, cur.clone());
        }
    }
}

/// Upstream's revision name: `<plural>.<group or core>-<sha1(parent uid + patch JSON)>`,
/// the prefix cut so the name stays within 253 characters.
pub(crate) fn revision_name(plural: &str, group: &str, parent_uid: &str, patch: &Value) -> String {
    let group = if group.is_empty() { "core" } else { group };
    let mut prefix = format!("{plural}.{group}");
    // Names are ASCII in practice; cut on a character boundary anyway (no panic on input).
    let mut cut = prefix.len().min(253 - 41);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    prefix.truncate(cut);
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(parent_uid.as_bytes());
    ctx.update(patch.to_string().as_bytes());
    let hash: String = ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{prefix}-{hash}")
}

/// What identifies the parent for new revisions.
#[derive(Debug, Clone)]
pub(crate) struct RevisionParent<'a> {
    /// Parent resource plural.
    pub plural: &'a str,
    /// Parent API group.
    pub group: &'a str,
    /// Parent apiVersion.
    pub api_version: &'a str,
    /// Parent kind.
    pub kind: &'a str,
    /// Parent object.
    pub object: &'a Value,
    /// `generateSelector` in effect.
    pub generate_selector: bool,
}

/// The labels a revision of this parent carries (how orphaned revisions are found).
pub(crate) fn revision_labels(parent: &RevisionParent<'_>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let source = if parent.generate_selector {
        let uid = parent
            .object
            .pointer("/metadata/uid")
            .and_then(Value::as_str);
        labels.insert(
            metacontroller_dynamic::CONTROLLER_UID_LABEL.to_string(),
            uid.unwrap_or_default().to_string(),
        );
        None
    } else {
        parent.object.pointer("/spec/template/metadata/labels")
    };
    if let Some(map) = source.and_then(Value::as_object) {
        for (k, v) in map {
            if let Some(v) = v.as_str() {
                labels.insert(k.clone(), v.to_string());
            }
        }
    }
    labels.insert(LABEL_API_GROUP.to_string(), parent.group.to_string());
    labels.insert(LABEL_RESOURCE.to_string(), parent.plural.to_string());
    labels
}

/// A new ControllerRevision for `patch` of `parent`, controlled by it.
pub(crate) fn new_revision(parent: &RevisionParent<'_>, patch: Value) -> ControllerRevision {
    let str_at = |p: &str| {
        parent
            .object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let uid = str_at("/metadata/uid");
    let name = revision_name(parent.plural, parent.group, &uid, &patch);
    let mut rev = ControllerRevision::new(&str_at("/metadata/namespace"), &name, patch);
    rev.metadata.labels = Some(revision_labels(parent));
    rev.metadata.owner_references = Some(vec![OwnerReference {
        api_version: parent.api_version.to_string(),
        kind: parent.kind.to_string(),
        name: str_at("/metadata/name"),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    rev
}

/// One parent revision during a sync.
#[derive(Debug, Clone)]
pub(crate) struct ParentRevision {
    /// The revision object (new, or a copy of the observed one).
    pub revision: ControllerRevision,
    /// The hook's desired children for this revision.
    pub desired: Desired,
    /// The hook's children in response order: (apiVersion, kind, name).
    pub order: Vec<(String, String, String)>,
}

/// A child's name within a revision: `name`, or `namespace/name` when the child lives in
/// another namespace than the parent (children of cluster-scoped parents).
pub(crate) fn child_name(key: &ChildKey, parent_namespace: Option<&str>) -> String {
    if key.2.is_empty() || Some(key.2.as_str()) == parent_namespace {
        key.3.clone()
    } else {
        format!("{}/{}", key.2, key.3)
    }
}

fn find<'a>(
    desired: &'a Desired,
    group: &str,
    kind: &str,
    name: &str,
    parent_ns: Option<&str>,
) -> Option<(&'a ChildKey, &'a (usize, Value))> {
    desired
        .iter()
        .find(|(k, _)| api_group(&k.0) == group && k.1 == kind && child_name(k, parent_ns) == name)
}

fn find_observed<'a>(
    observed: &'a [Value],
    group: &str,
    kind: &str,
    name: &str,
    parent_ns: Option<&str>,
) -> Option<&'a Value> {
    observed.iter().find(|o| {
        let key = crate::children::child_key(o);
        api_group(&key.0) == group && key.1 == kind && child_name(&key, parent_ns) == name
    })
}

impl ParentRevision {
    fn count(&self) -> usize {
        self.revision.children.iter().map(|c| c.names.len()).sum()
    }

    fn add_child(&mut self, group: &str, kind: &str, name: &str) {
        match self
            .revision
            .children
            .iter_mut()
            .find(|c| c.api_group == group && c.kind == kind)
        {
            Some(c) => {
                if !c.names.iter().any(|n| n == name) {
                    c.names.push(name.to_string());
                    c.names.sort();
                }
            }
            None => self.revision.children.push(ControllerRevisionChildren {
                api_group: group.to_string(),
                kind: kind.to_string(),
                names: vec![name.to_string()],
            }),
        }
    }

    fn remove_child(&mut self, group: &str, kind: &str, name: &str) {
        for c in &mut self.revision.children {
            if c.api_group == group && c.kind == kind {
                c.names.retain(|n| n != name);
            }
        }
        self.revision.children.retain(|c| !c.names.is_empty());
    }
}

/// The rolling settings of a child type (by group and kind), `None` when not rolling.
pub(crate) type RollingOf<'a> =
    dyn Fn(&str, &str) -> Option<(ChildUpdateMethod, Option<ChildUpdateStatusChecks>)> + 'a;

/// Everything a rollout step needs to know besides the revisions.
pub(crate) struct Rollout<'a> {
    /// Observed (claimed) children.
    pub observed: &'a [Value],
    /// Rolling settings per child type.
    pub rolling: &'a RollingOf<'a>,
    /// Whether `observed` already matches `desired` (an update would be a no-op).
    pub up_to_date: &'a dyn Fn(&Value, &Value) -> bool,
    /// The parent's namespace.
    pub parent_namespace: Option<&'a str>,
}

/// The `Updated` condition to put into the latest revision's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UpdatedCondition {
    /// `"True"` or `"False"`.
    pub status: &'static str,
    /// `RolloutWaiting`, `RolloutProgressing` or `OnLatestRevision`.
    pub reason: &'static str,
    /// Human-readable detail.
    pub message: String,
}

/// Advances the rollout by at most one child (upstream `syncRollingUpdate`); `revisions[0]`
/// is the latest. Returns the condition to report.
pub(crate) fn sync_rolling_update(
    revisions: &mut [ParentRevision],
    r: &Rollout<'_>,
) -> UpdatedCondition {
    let mut claimed = sync_claims(revisions, r);
    claim_for_latest(revisions, r, &mut claimed);
    if let Some(condition) = move_next_child(revisions, r, &claimed) {
        return condition;
    }
    UpdatedCondition {
        status: "True",
        reason: "OnLatestRevision",
        message: format!(
            "latest ControllerRevision: {}",
            revisions[0]
                .revision
                .metadata
                .name
                .as_deref()
                .unwrap_or_default()
        ),
    }
}

/// Unclaimed desired children go to the latest revision; claimed ones that would not
/// change move to it at once.
fn claim_for_latest(
    revisions: &mut [ParentRevision],
    r: &Rollout<'_>,
    claimed: &mut HashMap<(String, String, String), usize>,
) {
    let ns = r.parent_namespace;
    let latest_desired: Vec<(ChildKey, Value)> = revisions[0]
        .desired
        .iter()
        .map(|(k, (_, v))| (k.clone(), v.clone()))
        .collect();
    for (key, want) in &latest_desired {
        let group = api_group(&key.0).to_string();
        if (r.rolling)(&group, &key.1).is_none() {
            continue;
        }
        let name = child_name(key, ns);
        let id = (group.clone(), key.1.clone(), name.clone());
        match claimed.get(&id).copied() {
            None => {
                revisions[0].add_child(&group, &key.1, &name);
                claimed.insert(id, 0);
            }
            Some(0) => {}
            Some(other) => {
                let Some(child) = find_observed(r.observed, &group, &key.1, &name, ns) else {
                    continue;
                };
                if (r.up_to_date)(child, want) {
                    revisions[0].add_child(&group, &key.1, &name);
                    revisions[other].remove_child(&group, &key.1, &name);
                    claimed.insert(id, 0);
                }
            }
        }
    }
}

/// Moves the next child not on the latest revision to it, in the order the hook returned
/// them, once the status checks allow. `None` when every child is on the latest revision.
fn move_next_child(
    revisions: &mut [ParentRevision],
    r: &Rollout<'_>,
    claimed: &HashMap<(String, String, String), usize>,
) -> Option<UpdatedCondition> {
    let ns = r.parent_namespace;
    let order = revisions[0].order.clone();
    for (api_version, kind, plain_name) in order {
        let group = api_group(&api_version).to_string();
        if (r.rolling)(&group, &kind).is_none() {
            continue;
        }
        let Some((key, _)) = revisions[0]
            .desired
            .iter()
            .find(|(k, _)| k.0 == api_version && k.1 == kind && k.3 == plain_name)
        else {
            continue;
        };
        let name = child_name(key, ns);
        let id = (group.clone(), kind.clone(), name.clone());
        if claimed.get(&id) == Some(&0) {
            continue;
        }
        if let Err(message) = should_continue(&revisions[0], r) {
            return Some(UpdatedCondition {
                status: "False",
                reason: "RolloutWaiting",
                message,
            });
        }
        revisions[0].add_child(&group, &kind, &name);
        for pr in revisions.iter_mut().skip(1) {
            pr.remove_child(&group, &kind, &name);
        }
        return Some(UpdatedCondition {
            status: "False",
            reason: "RolloutProgressing",
            message: format!("updating {kind} {name}"),
        });
    }
    None
}

/// Drops claims of non-rolling kinds, of children the latest revision no longer wants, and
/// duplicates (the latest revision wins). Returns child → claiming revision index.
fn sync_claims(
    revisions: &mut [ParentRevision],
    r: &Rollout<'_>,
) -> HashMap<(String, String, String), usize> {
    let mut claimed = HashMap::new();
    let latest_desired = revisions[0].desired.clone();
    for (index, pr) in revisions.iter_mut().enumerate() {
        let mut kept = Vec::new();
        for ck in std::mem::take(&mut pr.revision.children) {
            if (r.rolling)(&ck.api_group, &ck.kind).is_none() {
                continue;
            }
            let mut names = Vec::new();
            for name in ck.names {
                if find(
                    &latest_desired,
                    &ck.api_group,
                    &ck.kind,
                    &name,
                    r.parent_namespace,
                )
                .is_none()
                {
                    continue;
                }
                let id = (ck.api_group.clone(), ck.kind.clone(), name.clone());
                if claimed.contains_key(&id) {
                    continue;
                }
                claimed.insert(id, index);
                names.push(name);
            }
            if !names.is_empty() {
                kept.push(ControllerRevisionChildren { names, ..ck });
            }
        }
        pr.revision.children = kept;
    }
    claimed
}

/// Every rolling child already on the latest revision must be observed, up to date, have
/// observed its latest spec (RollingInPlace, when it reports observedGeneration) and pass the
/// status checks.
fn should_continue(latest: &ParentRevision, r: &Rollout<'_>) -> Result<(), String> {
    let ns = r.parent_namespace;
    for ck in &latest.revision.children {
        let Some((method, checks)) = (r.rolling)(&ck.api_group, &ck.kind) else {
            continue;
        };
        for name in &ck.names {
            let Some(child) = find_observed(r.observed, &ck.api_group, &ck.kind, name, ns) else {
                return Err(format!("missing child {} {name}", ck.kind));
            };
            if let Some((_, (_, want))) = find(&latest.desired, &ck.api_group, &ck.kind, name, ns) {
                if !(r.up_to_date)(child, want) {
                    return Err(format!("child {} {name} is not updated yet", ck.kind));
                }
            }
            if method == ChildUpdateMethod::RollingInPlace {
                let observed_gen = child
                    .pointer("/status/observedGeneration")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let generation = child
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if observed_gen > 0 && observed_gen < generation {
                    return Err(format!(
                        "child {} {name} with RollingInPlace update strategy hasn't observed latest spec",
                        ck.kind
                    ));
                }
            }
            if let Some(checks) = &checks {
                status_check(checks, child)
                    .map_err(|e| format!("child {} {name} failed status check: {e}", ck.kind))?;
            }
        }
    }
    Ok(())
}

fn status_check(checks: &ChildUpdateStatusChecks, child: &Value) -> Result<(), String> {
    for check in &checks.conditions {
        let cond = child
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(check.type_.as_str()))
            });
        let Some(cond) = cond else {
            return Err(format!(
                "required condition type missing: {:?}",
                check.type_
            ));
        };
        let field = |f: &str| cond.get(f).and_then(Value::as_str).unwrap_or_default();
        for (name, want) in [("status", &check.status), ("reason", &check.reason)] {
            let Some(want) = want else { continue };
            if field(name) != want {
                return Err(format!(
                    "{:?} condition {name} is {:?} (want {want:?})",
                    check.type_,
                    field(name)
                ));
            }
        }
    }
    Ok(())
}

/// Keeps the latest revision and every other revision that still claims children.
pub(crate) fn prune(revisions: Vec<ParentRevision>) -> Vec<ParentRevision> {
    revisions
        .into_iter()
        .enumerate()
        .filter(|(i, pr)| *i == 0 || pr.count() > 0)
        .map(|(_, pr)| pr)
        .collect()
}

/// The desired children overall: the latest revision's, with children still claimed by
/// older revisions replaced by those revisions' versions.
pub(crate) fn merged_desired(revisions: &[ParentRevision], parent_ns: Option<&str>) -> Desired {
    let mut out = revisions[0].desired.clone();
    for pr in revisions.iter().skip(1) {
        for ck in &pr.revision.children {
            for name in &ck.names {
                if let Some((key, entry)) =
                    find(&pr.desired, &ck.api_group, &ck.kind, name, parent_ns)
                {
                    // Replace the latest version (the apiVersion may differ).
                    out.retain(|k, _| {
                        !(api_group(&k.0) == ck.api_group
                            && k.1 == ck.kind
                            && child_name(k, parent_ns) == *name)
                    });
                    out.insert(key.clone(), entry.clone());
                }
            }
        }
    }
    out
}

/// Sets (replaces or appends) condition `type` in `status.conditions`.
pub(crate) fn set_condition(status: &mut Map<String, Value>, type_: &str, cond: &UpdatedCondition) {
    let mut obj = Map::new();
    obj.insert("type".into(), Value::String(type_.into()));
    obj.insert("status".into(), Value::String(cond.status.into()));
    obj.insert("reason".into(), Value::String(cond.reason.into()));
    if !cond.message.is_empty() {
        obj.insert("message".into(), Value::String(cond.message.clone()));
    }
    let list = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    if let Some(items) = list.as_array_mut() {
        match items
            .iter_mut()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        {
            Some(existing) => *existing = Value::Object(obj),
            None => items.push(Value::Object(obj)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::child_key;

    fn cm(name: &str, value: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "ns"}, "data": {"v": value}})
    }

    fn desired(children: &[Value]) -> Desired {
        children
            .iter()
            .map(|c| (child_key(c), (0, c.clone())))
            .collect()
    }

    fn revision(name: &str, value: &str, children: &[&str]) -> ParentRevision {
        let wanted: Vec<Value> = ["a", "b"].iter().map(|n| cm(n, value)).collect();
        let mut rev = ControllerRevision::new("ns", name, json!({"spec": {"v": value}}));
        if !children.is_empty() {
            rev.children = vec![ControllerRevisionChildren {
                api_group: String::new(),
                kind: "ConfigMap".into(),
                names: children.iter().map(|s| s.to_string()).collect(),
            }];
        }
        ParentRevision {
            revision: rev,
            desired: desired(&wanted),
            order: vec![
                ("v1".into(), "ConfigMap".into(), "a".into()),
                ("v1".into(), "ConfigMap".into(), "b".into()),
            ],
        }
    }

    fn rolling(
        _: &str,
        kind: &str,
    ) -> Option<(ChildUpdateMethod, Option<ChildUpdateStatusChecks>)> {
        (kind == "ConfigMap").then_some((ChildUpdateMethod::RollingInPlace, None))
    }

    fn same(observed: &Value, want: &Value) -> bool {
        observed["data"] == want["data"]
    }

    #[test]
    fn patches_extract_and_apply_field_paths() {
        let parent = json!({"spec": {"template": {"x": 1}, "replicas": 3}, "status": {}});
        let paths = vec!["spec.template".to_string(), "spec.missing".to_string()];
        let patch = make_patch(&parent, &paths);
        assert_eq!(patch, json!({"spec": {"template": {"x": 1}}}));
        let mut other = json!({"spec": {"template": {"x": 2}, "replicas": 5}});
        apply_patch(&mut other, &patch, &paths);
        assert_eq!(
            other,
            json!({"spec": {"template": {"x": 1}, "replicas": 5}})
        );
        let name = revision_name("parents", "", "uid", &patch);
        assert!(name.starts_with("parents.core-") && name.len() == "parents.core-".len() + 40);
        assert_eq!(name, revision_name("parents", "", "uid", &patch));
        let long = revision_name(&"é".repeat(200), "g", "uid", &patch);
        assert!(long.len() <= 253, "{}", long.len());
    }

    #[test]
    fn one_child_moves_per_step_and_waits_for_updated_children() {
        let mut revs = vec![revision("new", "2", &[]), revision("old", "1", &["a", "b"])];
        let observed = vec![cm("a", "1"), cm("b", "1")];
        let r = Rollout {
            observed: &observed,
            rolling: &rolling,
            up_to_date: &same,
            parent_namespace: Some("ns"),
        };
        let cond = sync_rolling_update(&mut revs, &r);
        assert_eq!(cond.reason, "RolloutProgressing");
        assert_eq!(revs[0].revision.children[0].names, ["a"]);
        assert_eq!(revs[1].revision.children[0].names, ["b"]);
        // `a` keeps the latest desired, `b` the old one.
        let merged = merged_desired(&revs, Some("ns"));
        let values: Vec<_> = merged
            .values()
            .map(|(_, v)| v["data"]["v"].clone())
            .collect();
        assert_eq!(values, [json!("2"), json!("1")]);

        // `a` not updated yet: wait.
        let cond = sync_rolling_update(&mut revs, &r);
        assert_eq!(cond.reason, "RolloutWaiting");
        assert!(cond.message.contains("not updated yet"), "{}", cond.message);

        // `a` updated: `b` moves, then everything is on the latest revision.
        let observed = vec![cm("a", "2"), cm("b", "1")];
        let r = Rollout {
            observed: &observed,
            ..r
        };
        assert_eq!(
            sync_rolling_update(&mut revs, &r).reason,
            "RolloutProgressing"
        );
        let revs = prune(revs);
        assert_eq!(revs.len(), 1);
        let observed = vec![cm("a", "2"), cm("b", "2")];
        let mut revs = revs;
        let r = Rollout {
            observed: &observed,
            ..r
        };
        assert_eq!(sync_rolling_update(&mut revs, &r).status, "True");
    }

    #[test]
    fn conditions_are_replaced_by_type() {
        let mut status = Map::new();
        let c = UpdatedCondition {
            status: "False",
            reason: "RolloutWaiting",
            message: "m".into(),
        };
        set_condition(&mut status, "Updated", &c);
        set_condition(
            &mut status,
            "Updated",
            &UpdatedCondition {
                status: "True",
                ..c
            },
        );
        assert_eq!(status["conditions"].as_array().unwrap().len(), 1);
        assert_eq!(status["conditions"][0]["status"], "True");
    }
}
