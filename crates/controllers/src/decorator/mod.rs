//! The DecoratorController: adds labels, annotations, status and attachments to existing
//! objects ("targets") selected by `resources` rules, behaving like upstream
//! Metacontroller v4.x.
//!
//! - [`select`]: which objects are targets (label + annotation selectors per rule,
//!   `ignoreStatusChanges`);
//! - [`attachments`]: the observed attachments of a target (controlled by it *and*
//!   annotated with this decorator's name) and the desired ones;
//! - [`target`]: finalizer rules, hook choice (sync vs finalize, also when a target stops
//!   matching) and the labels/annotations/status changes a hook response makes;
//! - [`reconciler`]: the running controller ([`start`]).

pub mod attachments;
pub mod reconciler;
pub mod select;
pub mod target;

pub use reconciler::{start, DecoratorHandle, StartError, SyncError, TargetKey};
