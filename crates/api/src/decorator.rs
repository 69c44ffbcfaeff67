//! `DecoratorController` (cluster-scoped): adds labels, annotations, status and
//! attachments to existing objects selected by resource rules.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hook::{EndpointConfig, Hook};
use crate::selector::{label_selector_schema, AnnotationSelector, LabelSelector};
use crate::update::ChildUpdateMethod;

crate::object::controller_object! {
    /// A DecoratorController object.
    DecoratorController {
        spec: DecoratorControllerSpec,
        spec_doc: "What to decorate and how.",
        kind: "DecoratorController",
        list_kind: "DecoratorControllerList",
        plural: "decoratorcontrollers",
        finalizer_prefix: "metacontroller.io/decoratorcontroller-",
        default_kind: "DecoratorController::default_kind",
        validate: crate::validation::validate_decorator_controller,
    }
}

/// `spec` of a DecoratorController.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorControllerSpec {
    /// Which objects to decorate.
    pub resources: Vec<DecoratorControllerResourceRule>,
    /// Every type of attachment the hooks may return.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<DecoratorControllerAttachmentRule>,
    /// How to call sync, finalize and customize hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<DecoratorControllerHooks>,
    /// Connection settings (TLS, authentication) applied to hooks by URL host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_configs: Vec<EndpointConfig>,
    /// The same settings under the name newer upstream releases use; both lists apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<EndpointConfig>,
    /// Resync every target at this interval even without changes. As upstream, any value
    /// below one second (zero and negatives included) means one second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_period_seconds: Option<i32>,
    /// Roll changes of the in-process hook code out to parents in steps (an extension;
    /// absent: every parent gets new code at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_rollout: Option<crate::rollout::HookRollout>,
}

impl DecoratorControllerSpec {
    /// Endpoint settings from both `endpointConfigs` and `connections`, in that order.
    pub fn all_endpoint_configs(&self) -> impl Iterator<Item = &EndpointConfig> {
        self.endpoint_configs.iter().chain(self.connections.iter())
    }

    /// The sync hook, if any.
    pub fn sync_hook(&self) -> Option<&Hook> {
        self.hooks.as_ref().and_then(|h| h.sync.as_ref())
    }

    /// The finalize hook, if any.
    pub fn finalize_hook(&self) -> Option<&Hook> {
        self.hooks.as_ref().and_then(|h| h.finalize.as_ref())
    }

    /// The customize hook, if any.
    pub fn customize_hook(&self) -> Option<&Hook> {
        self.hooks.as_ref().and_then(|h| h.customize.as_ref())
    }
}

/// Objects a DecoratorController targets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorControllerResourceRule {
    /// `<group>/<version>` or `<version>` for the core group.
    pub api_version: String,
    /// Lower-case plural resource name.
    pub resource: String,
    /// Only objects matching these labels are targeted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "label_selector_schema")]
    pub label_selector: Option<LabelSelector>,
    /// Only objects matching these annotations are targeted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<AnnotationSelector>,
    /// When true, changes to a target's status alone do not trigger a sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_status_changes: Option<bool>,
}

/// One type of attachment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorControllerAttachmentRule {
    /// `<group>/<version>` or `<version>` for the core group.
    pub api_version: String,
    /// Lower-case plural resource name.
    pub resource: String,
    /// How differing existing attachments are updated (`OnDelete` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<DecoratorControllerAttachmentUpdateStrategy>,
}

impl DecoratorControllerAttachmentRule {
    /// The effective update method (`OnDelete` when unset or empty). Attachments are never
    /// rolled: as upstream, `RollingRecreate` means `Recreate` and `RollingInPlace` means
    /// `InPlace`.
    pub fn update_method(&self) -> ChildUpdateMethod {
        let method = self
            .update_strategy
            .as_ref()
            .and_then(|s| s.method.as_ref())
            .map(|m| m.effective().into_owned())
            .unwrap_or_default();
        match method {
            ChildUpdateMethod::RollingRecreate => ChildUpdateMethod::Recreate,
            ChildUpdateMethod::RollingInPlace => ChildUpdateMethod::InPlace,
            other => other,
        }
    }
}

/// Update strategy of an attachment (rolling methods act as their non-rolling forms).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorControllerAttachmentUpdateStrategy {
    /// `OnDelete`, `Recreate` or `InPlace` (`RollingRecreate`/`RollingInPlace` are
    /// accepted and mean `Recreate`/`InPlace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<ChildUpdateMethod>,
}

/// Hooks of a DecoratorController.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorControllerHooks {
    /// Asks which related objects a target needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customize: Option<Hook>,
    /// Computes desired attachments, labels, annotations and status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<Hook>,
    /// Called while a target is being deleted (or stops matching) until `finalized`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalize: Option<Hook>,
}
