//! The parts of a controller object the skeleton reads, whatever its kind, and the
//! resources it names.

use std::sync::Arc;

use metacontroller_api::hook::{EndpointConfig, Hook};
use metacontroller_api::wire::CustomizableController;
use metacontroller_api::ChildUpdateMethod;
use metacontroller_dynamic::{ApiResource, ResourceMap};

use crate::children::ChildType;

/// The parts of a controller object the skeleton reads, whatever its kind.
pub(crate) struct ControllerSpec {
    /// The controller object, as customize requests carry it.
    pub(crate) controller: CustomizableController,
    /// Its name.
    pub(crate) name: String,
    /// `spec.hooks.customize`.
    pub(crate) customize_hook: Option<Hook>,
    /// The endpoint settings of its hooks.
    pub(crate) endpoints: Vec<EndpointConfig>,
    /// `spec.resyncPeriodSeconds`.
    pub(crate) resync_period_seconds: Option<i32>,
    /// Every hook of the controller (sync, finalize, customize), for the ConfigMaps that
    /// hold in-process hook code.
    pub(crate) hooks: Vec<Hook>,
}

impl ControllerSpec {
    /// The `controller_type` metric label: upstream's kind name.
    pub(crate) fn controller_type(&self) -> &'static str {
        match self.controller {
            CustomizableController::Composite(_) => crate::metrics::COMPOSITE,
            CustomizableController::Decorator(_) => crate::metrics::DECORATOR,
        }
    }
}

impl From<CustomizableController> for ControllerSpec {
    fn from(controller: CustomizableController) -> Self {
        let (name, customize_hook, endpoints, resync_period_seconds, hooks) = match &controller {
            CustomizableController::Composite(c) => {
                let s = &c.spec;
                let endpoints = s.all_endpoint_configs().cloned().collect();
                let hooks = s
                    .hooks
                    .as_ref()
                    .map(|h| present_hooks([&h.sync, &h.finalize, &h.customize]));
                (
                    &c.metadata.name,
                    s.customize_hook(),
                    endpoints,
                    s.resync_period_seconds,
                    hooks,
                )
            }
            CustomizableController::Decorator(c) => {
                let s = &c.spec;
                let endpoints = s.all_endpoint_configs().cloned().collect();
                let hooks = s
                    .hooks
                    .as_ref()
                    .map(|h| present_hooks([&h.sync, &h.finalize, &h.customize]));
                (
                    &c.metadata.name,
                    s.customize_hook(),
                    endpoints,
                    s.resync_period_seconds,
                    hooks,
                )
            }
        };
        ControllerSpec {
            name: name.clone().unwrap_or_default(),
            customize_hook: customize_hook.cloned(),
            endpoints,
            resync_period_seconds,
            hooks: hooks.unwrap_or_default(),
            controller,
        }
    }
}

/// The hooks of a controller object that are set (sync, finalize, customize).
fn present_hooks(hooks: [&Option<Hook>; 3]) -> Vec<Hook> {
    hooks.into_iter().flatten().cloned().collect()
}

/// The served resource `resource` of `api_version`; the error names it as
/// `<resource>.<apiVersion>` (for the kind's `StartError::UnknownResource`).
pub(crate) fn resolve(
    resources: &ResourceMap,
    api_version: &str,
    resource: &str,
) -> Result<Arc<ApiResource>, String> {
    resources
        .get(api_version, resource)
        .cloned()
        .ok_or_else(|| format!("{resource}.{api_version}"))
}

/// A declared child (attachment) type: the resolved resource and its update method.
pub(crate) fn child_type(res: &ApiResource, method: ChildUpdateMethod) -> ChildType {
    ChildType {
        api_version: res.api_version.clone(),
        kind: res.kind.clone(),
        resource: res.name.clone(),
        namespaced: res.namespaced,
        method,
        namespaces: Vec::new(),
    }
}
