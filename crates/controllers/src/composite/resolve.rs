//! The resources a CompositeController's spec names, resolved through discovery.

use std::sync::Arc;

use metacontroller_api::composite::{ChildUpdateStatusChecks, CompositeController};
use metacontroller_api::revision::ControllerRevision;
use metacontroller_dynamic::{ApiResource, ResourceMap, Selector};

use super::StartError;
use crate::children::ChildType;
use crate::reconcile;

/// The resources a CompositeController's spec names, resolved through discovery (what
/// [`super::start`] checks before it starts anything; `metacontroller render` uses the same).
pub struct Resolved {
    /// The parent resource.
    pub parent: Arc<ApiResource>,
    /// `spec.parentResource.labelSelector` (everything when absent).
    pub parent_selector: Selector,
    /// Each declared child type, its status checks and its resource.
    pub children: Vec<(ChildType, Option<ChildUpdateStatusChecks>, Arc<ApiResource>)>,
    /// ControllerRevisions, when a child type uses a rolling update method.
    pub revisions: Option<Arc<ApiResource>>,
}

impl Resolved {
    /// Refuses cluster-scoped parent and child types when `scope` limits the process to
    /// namespaces (see [`crate::scope`]), and child types listing namespaces it does not watch.
    pub(crate) fn check_scope(
        &self,
        scope: Option<&metacontroller_dynamic::WatchScope>,
    ) -> Result<(), crate::scope::OutOfScope> {
        crate::scope::check(scope, "parent", &self.parent)?;
        for (kind, _, child) in &self.children {
            // As upstream, a cluster-scoped child type is refused, opted in or not; an
            // explicit namespace list must be watched. `["*"]` may still reach watched
            // namespaces: each unreachable child is refused on its own at sync (see `reach`).
            crate::scope::check(scope, "child", child)?;
            crate::scope::check_child_namespaces(scope, child, &kind.namespaces)?;
        }
        Ok(())
    }

    /// Resolves `controller`'s resources in `resources`; fails as [`super::start`] does.
    pub fn new(
        controller: &CompositeController,
        resources: &ResourceMap,
    ) -> Result<Self, StartError> {
        let spec = &controller.spec;
        let lookup = |api_version: &str, resource: &str| {
            reconcile::resolve(resources, api_version, resource)
                .map_err(StartError::UnknownResource)
        };
        let parent = lookup(
            &spec.parent_resource.api_version,
            &spec.parent_resource.resource,
        )?;
        if !parent.has_subresource("status") {
            return Err(StartError::NoStatusSubresource {
                controller: controller.metadata.name.clone().unwrap_or_default(),
                gvk: format!("{}, Kind={}", parent.api_version, parent.kind),
            });
        }
        let parent_selector = Selector::from_label_selector_or_everything(
            spec.parent_resource.label_selector.as_ref(),
        )
        .map_err(|e| StartError::Invalid(format!("spec.parentResource.labelSelector: {e}")))?;
        let mut children = Vec::new();
        for rule in &spec.child_resources {
            let resource = lookup(&rule.api_version, &rule.resource)?;
            let mut child_type = reconcile::child_type(&resource, rule.update_method());
            child_type.namespaces = rule.namespaces.clone();
            children.push((
                child_type,
                rule.update_strategy
                    .as_ref()
                    .and_then(|s| s.status_checks.clone()),
                resource,
            ));
        }
        let revisions = if children.iter().any(|(t, _, _)| t.method.is_rolling()) {
            Some(lookup(
                metacontroller_api::API_VERSION,
                ControllerRevision::PLURAL,
            )?)
        } else {
            None
        };
        Ok(Resolved {
            parent,
            parent_selector,
            children,
            revisions,
        })
    }
}
