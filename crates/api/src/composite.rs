//! `CompositeController` (cluster-scoped): a parent resource and the children a hook
//! wants for each parent.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hook::{EndpointConfig, Hook};
use crate::selector::{label_selector_schema, LabelSelector};
use crate::update::ChildUpdateMethod;

crate::object::controller_object! {
    /// A CompositeController object.
    CompositeController {
        spec: CompositeControllerSpec,
        spec_doc: "What to control and how.",
        kind: "CompositeController",
        list_kind: "CompositeControllerList",
        plural: "compositecontrollers",
        finalizer_prefix: "metacontroller.io/compositecontroller-",
        default_kind: "CompositeController::default_kind",
        validate: crate::validation::validate_composite_controller,
    }
}

/// `spec` of a CompositeController.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeControllerSpec {
    /// The parent resource: one sync per parent object.
    pub parent_resource: CompositeControllerParentResourceRule,
    /// Every type of child the hooks may return.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_resources: Vec<CompositeControllerChildResourceRule>,
    /// How to call sync, finalize and customize hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<CompositeControllerHooks>,
    /// Connection settings (TLS, authentication) applied to hooks by URL host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_configs: Vec<EndpointConfig>,
    /// The same settings under the name newer upstream releases use; both lists apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<EndpointConfig>,
    /// Resync every parent at this interval even without changes. As upstream, any value
    /// below one second (zero and negatives included) means one second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_period_seconds: Option<i32>,
    /// Ignore parents' `spec.selector` and select children by a `controller-uid` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_selector: Option<bool>,
    /// Roll changes of the in-process hook code out to parents in steps (an extension;
    /// absent: every parent gets new code at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_rollout: Option<crate::rollout::HookRollout>,
}

impl CompositeControllerSpec {
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

/// The parent resource of a CompositeController.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeControllerParentResourceRule {
    /// `<group>/<version>` or `<version>` for the core group.
    pub api_version: String,
    /// Lower-case plural resource name.
    pub resource: String,
    /// Which parent fields trigger rolling updates of children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history: Option<CompositeControllerRevisionHistory>,
    /// Only parents matching this selector are managed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "label_selector_schema")]
    pub label_selector: Option<LabelSelector>,
    /// When true, changes to a parent's status alone do not trigger a sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_status_changes: Option<bool>,
}

/// Revision history settings of the parent resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeControllerRevisionHistory {
    /// Field paths (`spec.template`) that define a revision; `["spec"]` when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub field_paths: Vec<String>,
}

impl CompositeControllerRevisionHistory {
    /// The field paths in effect (`["spec"]` when none are listed).
    pub fn effective_field_paths(&self) -> Vec<String> {
        if self.field_paths.is_empty() {
            vec!["spec".to_string()]
        } else {
            self.field_paths.clone()
        }
    }
}

/// One type of child resource.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeControllerChildResourceRule {
    /// `<group>/<version>` or `<version>` for the core group.
    pub api_version: String,
    /// Lower-case plural resource name.
    pub resource: String,
    /// How differing existing children are updated (`OnDelete` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<CompositeControllerChildUpdateStrategy>,
    /// Extension (not in upstream Metacontroller): where children of this type may be
    /// placed besides the parent's own namespace. A list of namespace names, or `["*"]`
    /// for any namespace; `["*"]` also lets a namespaced parent have children of a
    /// cluster-scoped type. Unset or empty keeps upstream's rule (a namespaced parent's
    /// children live in its namespace and are never cluster-scoped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

/// The `namespaces` entry meaning "any namespace, or cluster-scoped".
pub const ANY_NAMESPACE: &str = "*";

impl CompositeControllerChildResourceRule {
    /// The effective update method (`OnDelete` when unset or empty).
    pub fn update_method(&self) -> ChildUpdateMethod {
        self.update_strategy
            .as_ref()
            .and_then(|s| s.method.as_ref())
            .map(|m| m.effective().into_owned())
            .unwrap_or_default()
    }

    /// True when `namespaces` is `["*"]`: children may be in any namespace, and a
    /// namespaced parent may have children of a cluster-scoped type.
    pub fn allows_anywhere(&self) -> bool {
        self.namespaces.iter().any(|n| n == ANY_NAMESPACE)
    }

    /// May a child of this type be placed in `namespace` when its parent is in
    /// `parent_namespace` (`None` for a cluster-scoped parent or child)?
    ///
    /// Without the extension this is upstream's rule: a namespaced parent's children are in
    /// its namespace; a cluster-scoped parent's children may be anywhere.
    pub fn allows_placement(
        &self,
        parent_namespace: Option<&str>,
        namespace: Option<&str>,
    ) -> bool {
        match parent_namespace {
            None => true,
            Some(parent) if namespace == Some(parent) => true,
            Some(_) => {
                self.allows_anywhere()
                    || namespace.is_some_and(|ns| self.namespaces.iter().any(|n| n == ns))
            }
        }
    }
}

/// Update strategy of a child resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeControllerChildUpdateStrategy {
    /// The update method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<ChildUpdateMethod>,
    /// Checks updated children must pass before a rolling update continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_checks: Option<ChildUpdateStatusChecks>,
}

/// Status checks gating rolling updates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChildUpdateStatusChecks {
    /// All of these conditions must hold on already-updated children.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<StatusConditionCheck>,
}

/// A check on one `status.conditions[]` entry of a child.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusConditionCheck {
    /// Condition `type` to look for.
    #[serde(rename = "type")]
    pub type_: String,
    /// Required `status`; not checked when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Required `reason`; not checked when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Hooks of a CompositeController.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeControllerHooks {
    /// Asks which related objects a parent needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customize: Option<Hook>,
    /// Computes desired children and parent status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<Hook>,
    /// Called while a parent is being deleted until it reports `finalized`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalize: Option<Hook>,
    /// Upstream field without behaviour (accepted for compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_update_child: Option<Hook>,
    /// Upstream field without behaviour (accepted for compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_update_child: Option<Hook>,
}
