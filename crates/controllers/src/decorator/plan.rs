//! The pure steps of one decorator sync, shared by the running controller and
//! `metacontroller render`: which hook to call, the request, and what the hook's answer
//! makes of the target and its attachments. Nothing here reads the cluster or writes to it.

use metacontroller_api::decorator::DecoratorController;
use metacontroller_api::hook::Hook;
use metacontroller_api::wire::{DecoratorHookRequest, DecoratorHookResponse};
use metacontroller_dynamic::ObjectMetaAccess;
use serde_json::Value;

use super::attachments;
use super::select::TargetSelector;
use super::target::{self, TargetUpdate};
use super::SyncError;
use crate::children::{ChildError, ChildType};
use crate::finalizer::{self, HookChoice};
use crate::rolling::Desired;

/// The hook a sync of `target` calls, its name and `finalizing`: the finalize hook while
/// the target is being deleted or no longer matches `selector` (see
/// `finalizer::choose_hook`), else the sync hook.
pub fn choose_hook<'c>(
    controller: &'c DecoratorController,
    selector: &TargetSelector,
    target: &Value,
) -> Result<(&'c Hook, &'static str, bool), SyncError> {
    let spec = &controller.spec;
    let matches = selector.matches(target);
    let choice = finalizer::choose_hook(target, matches, spec.finalize_hook().is_some());
    let hook = match choice {
        HookChoice::Finalize => spec.finalize_hook().map(|h| (h, "finalize", true)),
        HookChoice::Sync => spec.sync_hook().map(|h| (h, "sync", false)),
    };
    hook.ok_or(SyncError::NoSyncHook)
}

/// The sync or finalize hook request for `target`: its observed attachments keyed for
/// `version`, related objects already keyed.
pub fn hook_request(
    controller: &DecoratorController,
    target: &Value,
    version: metacontroller_api::hook::HookVersion,
    types: &[ChildType],
    observed: &[Value],
    related: metacontroller_api::wire::ObjectMap,
    finalizing: bool,
) -> DecoratorHookRequest {
    let namespace = target.namespace();
    DecoratorHookRequest::new(
        controller.clone(),
        target.clone(),
        attachments::observed_map(version, namespace, types, observed.to_vec()),
        related,
        finalizing,
    )
}

/// What one sync writes, decided from the hook's answer before any write.
pub struct SyncPlan {
    /// The target with the answer's labels, annotations and status, and without our
    /// finalizer once the finalize hook said `finalized`.
    pub update: TargetUpdate,
    /// The attachments to converge to (checked, annotated with the decorator's name).
    pub desired: Desired,
    /// Attachments refused by validation (the sync fails after the other writes).
    pub refused: Vec<ChildError>,
    /// Whether this sync manages attachments (not while the target goes without our
    /// finalizer).
    pub manages_attachments: bool,
}

/// The writes of one sync of `target` from the hook's `response`: the attachments checked
/// against `types` and marked as this decorator's, the target update, and whether the
/// attachments are managed at all.
pub fn plan_sync(
    controller: &DecoratorController,
    target: &Value,
    types: &[ChildType],
    response: DecoratorHookResponse,
) -> SyncPlan {
    let name = controller.metadata.name.as_deref().unwrap_or_default();
    let finalizer_name = controller.finalizer_name();
    let namespace = target.namespace();
    let (desired, refused) =
        attachments::prepare_desired(types, namespace, name, response.attachments);
    let finalized = (response.finalized && finalizer::has_finalizer(target, &finalizer_name))
        .then_some(finalizer_name.as_str());
    let update = target::apply_response(
        target,
        response.labels.as_ref(),
        response.annotations.as_ref(),
        response.status.as_ref(),
        finalized,
    );
    let finalize_hook = controller.spec.finalize_hook().is_some();
    SyncPlan {
        update,
        desired,
        refused,
        manages_attachments: finalizer::manages_children(target, &finalizer_name, finalize_hook),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decorator() -> DecoratorController {
        serde_json::from_value(json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1",
            "kind": "DecoratorController",
            "metadata": {"name": "deco"},
            "spec": {
                "resources": [{"apiVersion": "v1", "resource": "configmaps"}],
                "hooks": {
                    "sync": {"webhook": {"url": "http://127.0.0.1:1/sync"}},
                    "finalize": {"webhook": {"url": "http://127.0.0.1:1/finalize"}}
                }
            }
        }))
        .expect("a valid DecoratorController")
    }

    fn secrets() -> Vec<ChildType> {
        vec![ChildType {
            api_version: "v1".into(),
            kind: "Secret".into(),
            resource: "secrets".into(),
            namespaced: true,
            method: metacontroller_api::ChildUpdateMethod::OnDelete,
            namespaces: Vec::new(),
        }]
    }

    #[test]
    fn a_plan_marks_attachments_and_drops_the_finalizer_once_finalized() {
        let controller = decorator();
        let finalizer = controller.finalizer_name();
        let target = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "t", "namespace": "ns", "uid": "u1",
                         "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": [finalizer]}
        });
        let response: DecoratorHookResponse = serde_json::from_value(json!({
            "labels": {"seen": "yes"},
            "attachments": [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}],
            "finalized": true
        }))
        .expect("a valid response");
        let plan = plan_sync(&controller, &target, &secrets(), response);
        let (_, secret) = plan.desired.values().next().expect("one attachment");
        assert_eq!(secret["metadata"]["namespace"], "ns");
        assert_eq!(
            secret["metadata"]["annotations"][metacontroller_api::DECORATOR_CONTROLLER_ANNOTATION],
            "deco"
        );
        assert!(plan.update.metadata_changed);
        assert_eq!(plan.update.object["metadata"]["labels"]["seen"], "yes");
        let finalizers = &plan.update.object["metadata"]["finalizers"];
        assert!(
            !finalizers
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == finalizer.as_str())),
            "our finalizer is dropped: {finalizers}"
        );
        assert!(
            plan.manages_attachments,
            "our finalizer is still on the target"
        );
        assert!(plan.refused.is_empty());
    }
}
