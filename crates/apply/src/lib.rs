//! `metacontroller-apply`: the pure merge engine (no I/O). Three-way merge of (observed,
//! last-applied, desired) with conventional and schema-aware list merging, the
//! last-applied annotation, semantic no-op detection and server-side-apply bodies.
//!
//! # Typical use (client-side apply of one child)
//! ```
//! use metacontroller_apply::{plan_update, prepare_create};
//! use serde_json::json;
//!
//! let desired = json!({"apiVersion": "v1", "kind": "ConfigMap",
//!                      "metadata": {"name": "c"}, "data": {"a": "1"}});
//! // Not there yet: create this body (add owner references after).
//! let created = prepare_create(&desired).unwrap();
//! // Next sync: the server added fields; nothing we want changed, so no write.
//! let mut observed = created.clone();
//! observed["metadata"]["resourceVersion"] = json!("7");
//! let plan = plan_update(&observed, &desired, None).unwrap();
//! assert!(!plan.update);
//! ```
//!
//! # Rules
//! See [`merge`] (module docs of the merge rules), [`Schema`] (which Kubernetes schema
//! extensions are honoured), [`needs_update`] (what counts as a change) and [`last_applied`]
//! (the record format, byte-compatible with upstream Metacontroller).
//!
//! # Differences from upstream Metacontroller (all of them stricter or more lenient, never a
//! different result for inputs upstream handles)
//! - `null` in desired removes the field (upstream writes `null` into the object).
//! - A last-applied value of a different JSON type than observed is ignored instead of failing.
//! - Schema-aware mode (optional) adds atomic lists, sets, multi-field and unconventional keys.
//! - A conventional key candidate whose value is an object or list is skipped; a schema key with
//!   such a value is an error.
//! - Duplicate keys in an observed list-map collapse into one item (upstream repeated the merged
//!   item at every duplicate position).
//! - Top-level `status` and server-populated metadata are kept inside [`merge`] itself (upstream
//!   reverted them in its caller).

mod compare;
mod cursor;
mod error;
pub mod last_applied;
mod listkey;
mod merge;
mod path;
mod quantity;
mod schema;
pub mod ssa;
mod update;

pub use compare::{needs_update, IGNORED_METADATA_FIELDS};
pub use error::ApplyError;
pub use listkey::CONVENTIONAL_MERGE_KEYS;
pub use merge::{merge, merge_with_schema, SYSTEM_METADATA_FIELDS};
pub use schema::Schema;
pub use update::{
    apply_update, merge_for_cli, plan, plan_update, prepare_create, MergeOutcome, Plan,
};
