//! `metacontroller-controllers`: the CompositeController and DecoratorController
//! reconcilers.
//!
//! - [`children`]: the pure part of managing children (hook request `children` map,
//!   validation of desired children, create/update/delete planning).

pub mod children;
