//! `DecoratorController` (cluster-scoped): adds labels, annotations, status and
//! attachments to existing objects selected by resource rules.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hook::{EndpointConfig, Hook};
use crate::selector::{label_selector_schema, AnnotationSelector, LabelSelector};
use crate::update::ChildUpdateMethod;
use crate::{default_api_version, API_VERSION, GROUP, VERSION};

/// A DecoratorController object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorController {
    /// Always `metacontroller.k8s.io/v1alpha1`.
    #[serde(default = "default_api_version")]
    pub api_version: String,
    /// Always `DecoratorController`.
    #[serde(default = "DecoratorController::default_kind")]
    pub kind: String,
    /// Standard object metadata.
    #[serde(default)]
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    pub metadata: ObjectMeta,
    /// What to decorate and how.
    pub spec: DecoratorControllerSpec,
    /// Free-form status (upstream defines no fields). Serialized as `{}` when unset, as
    /// upstream's Go type does (its empty status struct is never omitted), so hook
    /// requests carry `controller.status` like upstream's.
    #[serde(default, serialize_with = "crate::serialize_status")]
    pub status: Option<serde_json::Value>,
}

impl DecoratorController {
    /// `kind` of this type.
    pub const KIND: &'static str = "DecoratorController";
    /// Plural resource name.
    pub const PLURAL: &'static str = "decoratorcontrollers";

    fn default_kind() -> String {
        Self::KIND.to_string()
    }

    /// A controller with the given name and spec (apiVersion and kind filled in).
    pub fn new(name: &str, spec: DecoratorControllerSpec) -> Self {
        Self {
            api_version: API_VERSION.to_string(),
            kind: Self::KIND.to_string(),
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }

    /// Checks what the CRD schema cannot (see [`crate::validation`]).
    pub fn validate(&self) -> Result<(), crate::validation::ValidationErrors> {
        crate::validation::validate_decorator_controller(self)
    }

    /// The finalizer Metacontroller puts on targets when a finalize hook is set.
    pub fn finalizer_name(&self) -> String {
        format!(
            "metacontroller.io/decoratorcontroller-{}",
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }
}

impl k8s_openapi::Resource for DecoratorController {
    const API_VERSION: &'static str = API_VERSION;
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = Self::KIND;
    const VERSION: &'static str = VERSION;
    const URL_PATH_SEGMENT: &'static str = Self::PLURAL;
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::ListableResource for DecoratorController {
    const LIST_KIND: &'static str = "DecoratorControllerList";
}

impl k8s_openapi::Metadata for DecoratorController {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
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
