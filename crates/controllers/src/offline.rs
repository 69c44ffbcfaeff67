//! The pure steps of a sync, for `metacontroller render`: it replays a sync offline (hook
//! request, desired children, claims, finalizer and rollout decisions, the writes a sync would
//! make) with the same code the controllers run, so the two cannot drift apart. This is the
//! only way into the controllers' internals from outside the crate; nothing here talks to the
//! API server on its own.

pub use crate::children::{child_key, Action, ChildError, ChildKey, ChildType, ParentRef};
pub use crate::claim::{classify, Claim, Claimant};
pub use crate::finalizer::{
    finalizer_sync, is_deleting, is_ignored, manages_children, with_finalizer, FinalizerSync,
};
pub use crate::related::{listing, selects, CompiledRule, Listing, RelatedError, Scope, Selection};
pub use crate::rolling::Desired;
pub use crate::scope::OutOfScope;
pub use crate::writer::{action_key, json_equal, to_value, ApplyStrategy, WriteError, Writer};

pub use crate::elsewhere::PARENT_UID_LABEL;

/// `child` as the controller writes it for `parent` when it is a child elsewhere (outside
/// a namespaced parent's namespace, or cluster-scoped): with the parent-uid label and the
/// parent annotations. Other children are returned unchanged (their ownerReference is set
/// at write time).
pub fn with_parent_label(mut child: serde_json::Value, parent: &ParentRef) -> serde_json::Value {
    if crate::elsewhere::is_elsewhere(&child, parent) {
        crate::elsewhere::set_parent_label(&mut child, parent);
    }
    child
}

/// The CompositeController's sync steps.
pub mod composite {
    pub use crate::composite::errors::SyncError;
    pub use crate::composite::plan::{
        choose_hook, describe_parent, hook_request, parent_child_selector, plan_sync, HookOutcome,
        SyncPlan,
    };
    pub use crate::composite::resolve::Resolved;
}

/// The DecoratorController's sync steps.
pub mod decorator {
    pub use crate::decorator::attachments::{is_own_attachment, AnnotationAccess};
    pub use crate::decorator::plan::{choose_hook, hook_request, plan_sync, SyncPlan};
    pub use crate::decorator::reconciler::{Resolved, SyncError};
    pub use crate::decorator::select::TargetSelector;
    pub use crate::decorator::target::TargetUpdate;
}

/// The `events` of a `hook_name` answer as the controller records them: the valid ones as
/// `{type, reason, message}` (messages capped), and one message per entry it skips (each
/// recorded as an `InvalidHookEvent` Warning on the parent).
pub fn hook_events(
    hook_name: &str,
    events: Vec<metacontroller_api::wire::HookEvent>,
) -> (Vec<serde_json::Value>, Vec<String>) {
    let plan = crate::hook_events::plan(hook_name, events);
    let kept = plan
        .events
        .into_iter()
        .map(|(type_, reason, message)| {
            serde_json::json!({"type": type_.as_str(), "reason": reason, "message": message})
        })
        .collect();
    (kept, plan.skipped)
}
