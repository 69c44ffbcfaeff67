//! `metacontroller-dynamic`: discovery cache, shared informers per resource, dynamic API
//! access, label/annotation selectors and the per-controller work queue.
//!
//! The modules here are the self-contained building blocks of the controller runtime; none of
//! them talks to an API server.

pub mod discovery;
pub mod expectations;
pub mod object;
pub mod overlay;
pub mod rate;
pub mod registry;
pub mod selector;
pub mod store;
pub mod workqueue;

pub use discovery::{ApiResource, DiscoveryError, ResourceDiff, ResourceId, ResourceMap};
pub use expectations::{Expectations, DEFAULT_EXPECTATION_TTL};
pub use object::{NamespacedName, ObjectMetaAccess, Versioned};
pub use overlay::{ObjectKey, Overlay};
pub use rate::{KeyedRateLimiter, RateError, RateLimiter};
pub use registry::{Lease, SharedRegistry};
pub use selector::{ObjectSelector, Operator, Requirement, Selector, SelectorError};
pub use store::{Change, Store};
pub use workqueue::{Backoff, Priority, QueueMetrics, WorkQueue};
