//! `metacontroller-api`: Rust types for the `metacontroller.k8s.io/v1alpha1` API
//! (CompositeController, DecoratorController, ControllerRevision) and the JSON wire
//! types that Metacontroller exchanges with hook servers.

pub mod duration;
pub mod hook;
