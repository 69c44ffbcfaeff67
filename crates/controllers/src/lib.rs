//! `metacontroller-controllers`: the CompositeController and DecoratorController
//! reconcilers.
//!
//! The public surface is what the `metacontroller` binary and the integration tests use:
//! [`composite`] and [`decorator`] (start a controller, its options and handle), [`events`]
//! (the Event recorder and reasons), [`metrics`] (controller metrics), the related-objects
//! manager ([`RelatedManager`]), the write strategy ([`ApplyStrategy`]), and [`offline`]: the
//! pure sync steps `metacontroller render` replays without a cluster. Everything else is
//! private; the modules below are named here as a map of the code.
//!
//! - `children`: the pure part of managing children (hook request `children` map,
//!   validation of desired children, create/update/delete planning).
//! - [`composite`]: the CompositeController reconciler (informers → queue → sync hook →
//!   child writes and parent status).
//! - `claim`: ControllerRef claiming (own / adopt / release) of candidate children.
//! - [`decorator`]: the DecoratorController (targets, attachments, target updates).
//! - `rolling`: rolling updates by ControllerRevision (pure rollout steps).
//! - `writer`: the controller-agnostic write path (create / update / server-side apply /
//!   delete / status) with the own-writes overlay and create/delete expectations.
//! - `related`: the customize hook and `related` objects (any controller kind).
//! - `reconcile`: the skeleton both kinds run on (queue, workers, the rules around a
//!   sync); each kind implements its `Reconciler` trait.
//! - `departed`: per-parent state follows the parent out of the caches (deleted or its
//!   shard released).
//! - `finalizer`: the finalizer and hook-choice rules of both kinds (pure).
//! - `meta`: object facts read the same way everywhere (deleting? API group?).
//! - [`events`]: the rate-limited, non-blocking Event recorder.
//! - `hook_events`: Events a sync or finalize hook asks for, checked and recorded.
//! - `recovery`: the `SyncRecovered` Event of a parent whose syncs failed and then passed.
//! - `spans`: the tracing spans of a sync (sync, writes, status write).
//! - `handle`, `scope`: the handle both kinds return; `--watch-namespaces` checks.

pub mod composite;
pub mod decorator;
pub mod events;
pub mod metrics;
pub mod offline;

mod children;
mod claim;
mod departed;
mod elsewhere;
mod finalizer;
mod handle;
mod hook_events;
mod hook_rollout;
mod meta;
mod reconcile;
mod recovery;
mod related;
mod rolling;
mod scope;
mod spans;
mod writer;

pub use handle::ControllerHandle;
pub use hook_rollout::stored::{stored_code, CodeChoice};
pub use related::{ParentId, RelatedConfig, RelatedManager};
pub use writer::{ApplyStrategy, DEFAULT_CHILD_WRITE_CONCURRENCY};
