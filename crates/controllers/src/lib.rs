//! `metacontroller-controllers`: the CompositeController and DecoratorController
//! reconcilers.
//!
//! - [`children`]: the pure part of managing children (hook request `children` map,
//!   validation of desired children, create/update/delete planning).
//! - [`composite`]: the CompositeController reconciler (informers → queue → sync hook →
//!   child writes and parent status).
//! - [`claim`]: ControllerRef claiming (own / adopt / release) of candidate children.
//! - [`decorator`]: the DecoratorController (targets, attachments, target updates).
//! - [`rolling`]: rolling updates by ControllerRevision (pure rollout steps).
//! - [`writer`]: the controller-agnostic write path (create / update / server-side apply /
//!   delete / status) with the own-writes overlay and create/delete expectations.
//! - [`related`]: the customize hook and `related` objects (any controller kind).
//! - `reconcile`: the skeleton both kinds run on (queue, workers, the rules around a
//!   sync); each kind implements its `Reconciler` trait.
//! - `departed`: per-parent state follows the parent out of the caches (deleted or its
//!   shard released).
//! - [`finalizer`]: the finalizer and hook-choice rules of both kinds (pure).
//! - [`meta`]: object facts read the same way everywhere (deleting? API group?).
//! - [`events`]: the rate-limited, non-blocking Event recorder.
//! - [`hook_events`]: Events a sync or finalize hook asks for, checked and recorded.
//! - `spans`: the tracing spans of a sync (sync, writes, status write).

pub mod children;
pub mod claim;
pub mod composite;
pub mod decorator;
mod departed;
pub mod events;
pub mod finalizer;
pub mod handle;
pub mod hook_events;
pub mod meta;
pub mod metrics;
mod reconcile;
pub mod related;
pub mod rolling;
pub mod scope;
mod spans;
pub mod writer;
