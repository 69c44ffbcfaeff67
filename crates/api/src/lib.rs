//! `metacontroller-api`: Rust types for the `metacontroller.k8s.io/v1alpha1` API
//! (CompositeController, DecoratorController, ControllerRevision), the JSON wire
//! types that Metacontroller exchanges with hook servers, validation of what the CRD
//! schema cannot express, and the generated CRDs.
//!
//! The three kinds implement `k8s_openapi::Resource` and `k8s_openapi::Metadata`, so
//! `kube::Resource` applies through kube's blanket impl and `kube::Api<CompositeController>`
//! works as for built-in types.

pub mod composite;
pub mod crds;
pub mod decorator;
pub mod duration;
pub mod hook;
pub mod inprocess;
mod object;
pub mod related;
pub mod revision;
pub mod rollout;
pub mod selector;
pub mod update;
pub mod validation;
pub mod wire;

pub use composite::*;
pub use decorator::*;
pub use hook::{
    Authorization, BasicAuth, CaBundle, ClientTls, CodeConfigMapReference, ConfigMapKeyReference,
    EndpointConfig, Hook, HookRuntime, HookVersion, JsonnetHook, ResponseUnmarshallMode,
    SecretKeyReference, ServiceReference, WasmHook, Webhook, WebhookEtagConfig,
};
pub use related::RelatedResourceRule;
pub use revision::{ControllerRevision, ControllerRevisionChildren};
pub use selector::{AnnotationSelector, LabelSelector};
pub use update::ChildUpdateMethod;

/// API group of all Metacontroller kinds.
pub const GROUP: &str = "metacontroller.k8s.io";
/// API version of all Metacontroller kinds.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of all Metacontroller kinds.
pub const API_VERSION: &str = "metacontroller.k8s.io/v1alpha1";

/// Annotation holding the last configuration Metacontroller applied to an object.
pub const LAST_APPLIED_ANNOTATION: &str = "metacontroller.k8s.io/last-applied-configuration";
/// Annotation on attachments naming the DecoratorController that manages them.
pub const DECORATOR_CONTROLLER_ANNOTATION: &str = "metacontroller.k8s.io/decorator-controller";
/// Label put on children when `generateSelector` is true (value: the parent's uid).
pub const CONTROLLER_UID_LABEL: &str = "controller-uid";

pub(crate) fn default_api_version() -> String {
    API_VERSION.to_string()
}

/// Serializes a controller's optional status, writing `{}` for `None`.
pub(crate) fn serialize_status<S: serde::Serializer>(
    status: &Option<serde_json::Value>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    match status {
        Some(status) => status.serialize(serializer),
        None => serde_json::Map::new().serialize(serializer),
    }
}
