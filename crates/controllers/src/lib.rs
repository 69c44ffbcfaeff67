//! `metacontroller-controllers`: the CompositeController and DecoratorController
//! reconcilers.
//!
//! - [`children`]: the pure part of managing children (hook request `children` map,
//!   validation of desired children, create/update/delete planning).
//! - [`composite`]: the CompositeController reconciler (informers → queue → sync hook →
//!   child writes and parent status).
//! - [`decorator`]: the DecoratorController (targets, attachments, target updates).

pub mod children;
pub mod composite;
pub mod decorator;
