//! The DecoratorController: adds labels, annotations, status and attachments to existing
//! objects ("targets") selected by `resources` rules, behaving like upstream
//! Metacontroller v4.x.
//!
//! - `select`: which objects are targets (label + annotation selectors per rule,
//!   `ignoreStatusChanges`);
//! - `attachments`: the observed attachments of a target (controlled by it *and*
//!   annotated with this decorator's name) and the desired ones;
//! - `target`: finalizer rules, hook choice (sync vs finalize, also when a target stops
//!   matching) and the labels/annotations/status changes a hook response makes;
//! - `plan`: the pure steps of a sync that `metacontroller render` shares (hook choice,
//!   request, what the answer makes of the target and its attachments);
//! - `reconciler`: the running controller ([`start`]).
//!
//! The runtime is shared with the CompositeController: the reconciler skeleton (workers,
//! the rules around a sync, finalizer handling) from `crate::reconcile` and
//! `crate::finalizer`, informers and the work queue from `metacontroller-dynamic`,
//! writes through `crate::writer` (update strategies, server-side
//! apply, own-writes overlay, expectations), child planning from `crate::children`,
//! customize/related objects from `crate::related`, Events from [`crate::events`].
//!
//! One deliberate difference from upstream: `resyncPeriodSeconds` is a per-target delayed
//! requeue, so it also works with `ignoreStatusChanges` (upstream's informer resync is
//! filtered out by that option).

pub(crate) mod attachments;
pub(crate) mod plan;
pub(crate) mod reconciler;
pub(crate) mod select;
pub(crate) mod target;

pub(crate) use reconciler::SyncError;
pub use reconciler::{start, DecoratorHandle, StartError, TargetKey};
