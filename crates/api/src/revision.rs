//! `ControllerRevision` (namespaced): Metacontroller's record of one parent revision
//! and which children belong to it, used by rolling updates.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{default_api_version, API_VERSION, GROUP, VERSION};

/// Label naming the parent's API group on a ControllerRevision.
pub const LABEL_API_GROUP: &str = "metacontroller.k8s.io/apiGroup";
/// Label naming the parent's resource on a ControllerRevision.
pub const LABEL_RESOURCE: &str = "metacontroller.k8s.io/resource";

/// A ControllerRevision object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerRevision {
    /// Always `metacontroller.k8s.io/v1alpha1`.
    #[serde(default = "default_api_version")]
    pub api_version: String,
    /// Always `ControllerRevision`.
    #[serde(default = "ControllerRevision::default_kind")]
    pub kind: String,
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The parent fields (a partial object) that define this revision.
    #[serde(default = "empty_object")]
    pub parent_patch: serde_json::Value,
    /// Children that belong to this revision, by group and kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ControllerRevisionChildren>,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

impl ControllerRevision {
    /// `kind` of this type.
    pub const KIND: &'static str = "ControllerRevision";
    /// Plural resource name.
    pub const PLURAL: &'static str = "controllerrevisions";

    fn default_kind() -> String {
        Self::KIND.to_string()
    }

    /// A revision with the given namespace, name and parent patch.
    pub fn new(namespace: &str, name: &str, parent_patch: serde_json::Value) -> Self {
        Self {
            api_version: API_VERSION.to_string(),
            kind: Self::KIND.to_string(),
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            parent_patch,
            children: Vec::new(),
        }
    }
}

impl k8s_openapi::Resource for ControllerRevision {
    const API_VERSION: &'static str = API_VERSION;
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = Self::KIND;
    const VERSION: &'static str = VERSION;
    const URL_PATH_SEGMENT: &'static str = Self::PLURAL;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for ControllerRevision {
    const LIST_KIND: &'static str = "ControllerRevisionList";
}

impl k8s_openapi::Metadata for ControllerRevision {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Children of one group/kind that belong to a revision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerRevisionChildren {
    /// API group of the children (empty for the core group).
    pub api_group: String,
    /// Kind of the children.
    pub kind: String,
    /// Names of the children.
    pub names: Vec<String>,
}
