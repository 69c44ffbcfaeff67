//! `metacontroller-dynamic`: discovery cache, shared informers per resource, dynamic API
//! access and label/annotation selectors (the work queue and the sync gate are
//! `metacontroller-workqueue`). Every public item is at the crate root; the modules below
//! are private and named here as a map of the code.
//!
//! [`ResourceMap::discover`] and the [`Informers`] talk to the API server (discovery fetch; shared list+watch
//! per resource). The other modules are self-contained building blocks:
//!
//! - `discovery`: [`ResourceMap`] from `APIResourceList` documents, lookups by resource or
//!   kind;
//! - `registry`: one reference-counted instance per key (informers: per resource and
//!   server-side label selector, shared by all controllers, stopped with the last lease);
//! - `store`: an informer's object store indexed by namespace and controller owner uid;
//! - `compact`: the compact form informers cache objects in (JSON + index metadata);
//! - `selector`: label / annotation selectors with Kubernetes semantics and the string form;
//! - `schemas`: the schemas the apply engine merges children with (CRD informer +
//!   lazily fetched OpenAPI v3 per group-version);
//! - `scope`: `--watch-namespaces`: which namespaces (and cluster-scoped resources) an
//!   informer lists and watches;
//! - `watch_backoff`: reconnect delays for watches, cut short when the API server is back;
//! - `supervise`: background tasks whose unexpected end stops the process;
//! - `rate`: token buckets for API requests and per-object Events;
//! - `object`: metadata access for `serde_json::Value` and `kube::core::DynamicObject`, the
//!   `namespace/name` key and the resource/namespace/name key.

mod compact;
mod discover;
mod discovery;
mod informer;
mod object;
mod rate;
mod registry;
mod schemas;
mod scope;
mod selector;
mod store;
mod supervise;
mod watch_backoff;

pub use compact::{CompactObject, EncodeError};
pub use discover::Discovered;
pub use discovery::{ApiResource, DiscoveryError, ResourceId, ResourceMap, Subresource};
pub use informer::{
    CacheStats, Handler, HandlerId, Informer, InformerConfig, InformerKey, InformerLease,
    Informers, Keep, KeepKeys, Origin, Relisted,
};
pub use object::{
    NamespacedName, ObjectKey, ObjectMetaAccess, Versioned, PARENT_ANNOTATION, PARENT_UID_LABEL,
};
pub use rate::{KeyedRateLimiter, RateError, TokenBucket};
pub use registry::Lease;
pub use schemas::Schemas;
pub use scope::WatchScope;
pub use selector::{
    Labels, ObjectSelector, Operator, Requirement, Selector, SelectorError, CONTROLLER_UID_LABEL,
};
pub use store::{Change, MissingName, Store};
pub use supervise::{Supervisor, TaskEnd};
pub use watch_backoff::ReconnectProbe;
