//! The pure steps of one sync, shared by the running controller and `metacontroller
//! render`: which hook to call, the request, the hook's answer checked, and the children
//! and status the sync then writes. Nothing here reads the cluster or writes to it.

use metacontroller_api::composite::CompositeController;
use metacontroller_api::hook::Hook;
use metacontroller_api::wire::{CompositeHookRequest, CompositeHookResponse};
use metacontroller_dynamic::ObjectMetaAccess;
use metacontroller_dynamic::{Selector, CONTROLLER_UID_LABEL};
use serde_json::{json, Value};

use super::SyncError;
use crate::children::{self, ChildError, ChildType};
use crate::finalizer::{self, HookChoice};
use crate::rolling::Desired;

/// The outcome of the hook call(s) of one sync.
pub struct HookOutcome {
    /// The status the hook asked for (the latest revision's with rolling updates).
    pub status: Option<serde_json::Map<String, Value>>,
    /// The desired children, checked against the declared types.
    pub desired: Desired,
    /// `resyncAfterSeconds` (the earliest of the revisions'); 0: none.
    pub resync_after_seconds: f64,
    /// The finalize hook said the parent may go (every revision, with rolling updates).
    pub finalized: bool,
    /// Children refused by validation (skipped).
    pub refused: Vec<children::ChildError>,
}

impl HookOutcome {
    /// One hook answer for a parent in `parent_namespace`: its children checked against
    /// `types`, the invalid ones set aside as refused.
    pub fn from_response(
        response: CompositeHookResponse,
        types: &[ChildType],
        parent_namespace: Option<&str>,
    ) -> Self {
        let (desired, refused) =
            children::validate_desired(types, parent_namespace, response.children);
        HookOutcome {
            status: response.status,
            desired,
            resync_after_seconds: response.resync_after_seconds,
            finalized: response.finalized,
            refused,
        }
    }
}

/// What one sync writes, decided from its hook outcome before any write.
pub struct SyncPlan {
    /// The children to converge to (labelled, each matching the parent's selector).
    pub desired: Desired,
    /// The parent's status to write, with `observedGeneration`.
    pub status: Value,
    /// Children refused by validation (the sync fails after the other writes).
    pub refused: Vec<ChildError>,
    /// `resyncAfterSeconds` of the outcome.
    pub resync_after_seconds: f64,
    /// `finalized` of the outcome.
    pub finalized: bool,
}

/// The writes of one sync from its hook outcome: with `generate_selector` each desired
/// child is labelled `controller-uid: <parent uid>`, every desired child must match the
/// parent's `selector` (upstream refuses the sync otherwise), and the status carries the
/// parent's `observedGeneration`.
pub fn plan_sync(
    parent: &Value,
    selector: &Selector,
    generate_selector: bool,
    outcome: HookOutcome,
) -> Result<SyncPlan, SyncError> {
    let mut desired = outcome.desired;
    let uid = parent.uid().unwrap_or_default();
    label_desired(generate_selector, uid, selector, &mut desired)?;
    Ok(SyncPlan {
        desired,
        status: desired_status(parent, outcome.status),
        refused: outcome.refused,
        resync_after_seconds: outcome.resync_after_seconds,
        finalized: outcome.finalized,
    })
}

/// The selector of a parent's children (upstream `makeSelector`).
pub fn parent_child_selector(parent: &Value, generate: bool) -> Result<Selector, SyncError> {
    Selector::for_composite_parent(parent, generate, &Default::default())
        .map_err(|e| SyncError::Selector(format!("can't make the child selector: {e}")))
}

/// `<Kind> <namespace>/<name>` of a parent, as upstream's errors name it (an empty
/// namespace when cluster-scoped).
pub fn describe_parent(kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{kind} {}/{name}", namespace.unwrap_or_default())
}

/// The sync or finalize hook request for `parent` (as it is, or as one of its revisions
/// sees it): the observed children keyed for `version`, related objects already keyed.
pub fn hook_request(
    controller: &CompositeController,
    parent: &Value,
    version: metacontroller_api::hook::HookVersion,
    types: &[ChildType],
    observed: &[Value],
    related: metacontroller_api::wire::ObjectMap,
    finalizing: bool,
) -> CompositeHookRequest {
    let parent_namespace = parent.namespace();
    CompositeHookRequest {
        controller: controller.clone(),
        parent: parent.clone(),
        children: children::observed_map(
            version,
            parent_namespace,
            types,
            observed.iter().cloned(),
        ),
        related,
        finalizing,
    }
}

/// The hook a sync of `parent` calls, its name and `finalizing` (see
/// `finalizer::choose_hook`): the finalize hook while the parent is being deleted or
/// once it stops matching `parent_selector`; a live parent needs a sync hook.
pub fn choose_hook<'c>(
    controller: &'c CompositeController,
    parent_selector: &Selector,
    parent: &Value,
) -> Result<(&'c Hook, &'static str, bool), SyncError> {
    let spec = &controller.spec;
    let matches = parent_selector.matches(&value_labels(parent));
    match finalizer::choose_hook(parent, matches, spec.finalize_hook().is_some()) {
        HookChoice::Finalize => spec.finalize_hook().map(|h| (h, "finalize", true)),
        HookChoice::Sync => spec.sync_hook().map(|h| (h, "sync", false)),
    }
    .ok_or(SyncError::NoSyncHook)
}

/// With `generate_selector`, labels each desired child `controller-uid: <parent uid>`;
/// then every desired child must match the parent's child `selector` (upstream refuses
/// the sync otherwise).
fn label_desired(
    generate_selector: bool,
    parent_uid: &str,
    selector: &Selector,
    desired: &mut Desired,
) -> Result<(), SyncError> {
    for (key, (_, child)) in desired.iter_mut() {
        if generate_selector {
            add_label_if_absent(child, CONTROLLER_UID_LABEL, parent_uid);
        }
        if !selector.matches(&value_labels(child)) {
            return Err(SyncError::Selector(format!(
                "labels on desired child {} {}/{} don't match parent selector",
                key.1, key.2, key.3
            )));
        }
    }
    Ok(())
}

/// The status the controller writes for `parent`: the hook's (empty when it gave none)
/// with `observedGeneration` injected.
fn desired_status(parent: &Value, status: Option<serde_json::Map<String, Value>>) -> Value {
    let mut status = status.unwrap_or_default();
    if let Some(generation) = parent.pointer("/metadata/generation") {
        status.insert("observedGeneration".into(), generation.clone());
    }
    Value::Object(status)
}

/// Sets `metadata.labels[key] = value` unless the label is already set (upstream keeps a
/// hook-provided `controller-uid`).
pub(super) fn add_label_if_absent(obj: &mut Value, key: &str, value: &str) {
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let meta = root.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    if let Some(labels) = labels.as_object_mut() {
        labels
            .entry(key)
            .or_insert_with(|| Value::String(value.to_string()));
    }
}

/// A parent's or child's labels (empty when it has none).
pub(super) fn value_labels(obj: &Value) -> serde_json::Map<String, Value> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_selector_label_kept_when_set() {
        let mut child = json!({"metadata": {"name": "c"}});
        add_label_if_absent(&mut child, CONTROLLER_UID_LABEL, "u1");
        assert_eq!(child["metadata"]["labels"]["controller-uid"], "u1");
        add_label_if_absent(&mut child, CONTROLLER_UID_LABEL, "u2");
        assert_eq!(child["metadata"]["labels"]["controller-uid"], "u1");
    }

    fn configmaps() -> Vec<ChildType> {
        vec![ChildType {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            resource: "configmaps".into(),
            namespaced: true,
            method: metacontroller_api::ChildUpdateMethod::OnDelete,
            namespaces: Vec::new(),
        }]
    }

    fn response(children: Vec<Value>) -> CompositeHookResponse {
        serde_json::from_value(json!({"status": {"ready": 1}, "children": children}))
            .expect("a valid response")
    }

    #[test]
    fn a_plan_labels_generated_selector_children_and_carries_the_generation() {
        let parent =
            json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "generation": 4}});
        let selector = parent_child_selector(&parent, true).expect("selector");
        let child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let outcome = HookOutcome::from_response(
            response(vec![child, json!({"kind": 3})]),
            &configmaps(),
            Some("ns"),
        );
        let plan = plan_sync(&parent, &selector, true, outcome).expect("a plan");
        let (_, planned) = plan.desired.values().next().expect("one child");
        assert_eq!(planned["metadata"]["labels"][CONTROLLER_UID_LABEL], "u1");
        assert_eq!(planned["metadata"]["namespace"], "ns");
        assert_eq!(plan.status, json!({"ready": 1, "observedGeneration": 4}));
        assert_eq!(
            plan.refused.len(),
            1,
            "the child without apiVersion is refused"
        );
    }

    #[test]
    fn a_child_outside_the_parent_selector_fails_the_plan() {
        let parent = json!({"metadata": {"name": "p", "uid": "u1"}, "spec": {"selector": {"matchLabels": {"app": "a"}}}});
        let selector = parent_child_selector(&parent, false).expect("selector");
        let child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"app": "b"}}});
        let outcome = HookOutcome::from_response(response(vec![child]), &configmaps(), Some("ns"));
        let err = plan_sync(&parent, &selector, false, outcome)
            .err()
            .expect("refused");
        assert!(
            err.to_string().contains("don't match parent selector"),
            "{err}"
        );
    }
}
