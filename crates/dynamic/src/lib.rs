//! `metacontroller-dynamic`: discovery cache, shared informers per resource, dynamic API
//! access, label/annotation selectors and the per-controller work queue.
//!
//! The modules here are the self-contained building blocks of the controller runtime; none of
//! them talks to an API server.

pub mod discovery;
pub mod expectations;
pub mod overlay;
pub mod selector;
pub mod workqueue;

pub use discovery::{ApiResource, DiscoveryError, ResourceDiff, ResourceId, ResourceMap};
pub use expectations::{Expectations, DEFAULT_EXPECTATION_TTL};
pub use overlay::{ObjectKey, Overlay, Versioned};
pub use selector::{ObjectSelector, Operator, Requirement, Selector, SelectorError};
pub use workqueue::{Backoff, Priority, QueueMetrics, WorkQueue};
