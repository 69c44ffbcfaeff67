//! `metacontroller-hooks`: the webhook client that calls user hook servers.
//! (Crate documentation is completed below once the API settles.)

pub mod client;
pub mod credentials;
pub mod decode;
pub mod error;
mod etag;
pub mod metrics;
mod pool;
pub mod sources;
pub mod target;

pub use client::{CallContext, HookClient, HookClientConfig, DEFAULT_MAX_BODY_BYTES};
pub use error::HookError;
pub use sources::{ConfigMapSource, MemoryObjects, ObjectData, SecretSource, SourceError};
pub use target::{HostResolver, StaticHostResolver};
