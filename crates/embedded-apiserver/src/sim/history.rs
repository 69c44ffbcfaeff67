//! apps/v1 ControllerRevisions of StatefulSets and DaemonSets: the history
//! kube-controller-manager keeps, one revision per pod template, named `<set>-<hash>` and
//! referred to by the pods' `controller-revision-hash` label (and a StatefulSet's
//! `currentRevision` / `updateRevision`); `kubectl rollout history` reads them.

use super::util::{self, int_at, CONTROLLER_MANAGER};
use crate::store::{meta_str, State};
use serde_json::{json, Value};

/// Makes sure the revision `<set>-<hash>` of `template` exists (the newest revision number when
/// created) and prunes the oldest ones beyond `spec.revisionHistoryLimit` (default 10), except
/// those named in `in_use`.
pub(super) fn ensure_revision(
    st: &mut State,
    set: &Value,
    hash: &str,
    template: &Value,
    in_use: &[&str],
) {
    let name = format!("{}-{hash}", meta_str(set, "name"));
    let ns = meta_str(set, "namespace").to_string();
    let mut revisions = util::owned(st, meta_str(set, "uid"), "apps", "controllerrevisions");
    revisions.sort_by_key(|r| int_at(r, "/revision", 0));
    let newest = revisions
        .last()
        .map(|r| int_at(r, "/revision", 0))
        .unwrap_or(0);
    if !revisions.iter().any(|r| meta_str(r, "name") == name) {
        let mut labels = set
            .pointer("/spec/selector/matchLabels")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        labels["controller-revision-hash"] = json!(hash);
        let mut data_template = template.clone();
        if let Some(t) = data_template.as_object_mut() {
            t.insert("$patch".into(), json!("replace"));
        }
        let revision = json!({
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": labels,
                "ownerReferences": [util::owner_ref(set)],
            },
            "data": {"spec": {"template": data_template}},
            "revision": newest + 1,
        });
        if let Some(created) = util::create(
            st,
            "apps",
            "controllerrevisions",
            &ns,
            revision,
            CONTROLLER_MANAGER,
        ) {
            revisions.push(created);
        }
    }
    let limit = int_at(set, "/spec/revisionHistoryLimit", 10).max(0) as usize;
    let prunable: Vec<String> = revisions
        .iter()
        .map(|r| meta_str(r, "name").to_string())
        .filter(|n| *n != name && !in_use.contains(&n.as_str()))
        .collect();
    let excess = prunable.len().saturating_sub(limit);
    for old in prunable.into_iter().take(excess) {
        util::delete(st, "apps", "controllerrevisions", &ns, &old);
    }
}
