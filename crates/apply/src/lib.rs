//! `metacontroller-apply`: the pure merge engine (no I/O). Three-way merge of (observed,
//! last-applied, desired) with conventional and schema-aware list merging, the
//! last-applied annotation, semantic no-op detection and server-side-apply bodies.
//!
//! # Typical use (client-side apply of one child)
//! ```
//! use metacontroller_apply::{plan, prepare_create, Plan};
//! use serde_json::json;
//!
//! let desired = json!({"apiVersion": "v1", "kind": "ConfigMap",
//!                      "metadata": {"name": "c"}, "data": {"a": "1"}});
//! // Not there yet: create this body (add owner references after).
//! let created = prepare_create(&desired).unwrap();
//! // Next sync: the server added fields; nothing we want changed, so no write.
//! let mut observed = created.clone();
//! observed["metadata"]["resourceVersion"] = json!("7");
//! assert_eq!(plan(&observed, &desired, None).unwrap(), Plan::Unchanged);
//! // The hook changes its mind: write the merged object (PUT, resourceVersion kept).
//! let desired2 = json!({"apiVersion": "v1", "kind": "ConfigMap",
//!                       "metadata": {"name": "c"}, "data": {"a": "2"}});
//! let Plan::Update(object) = plan(&observed, &desired2, None).unwrap() else { panic!() };
//! assert_eq!(object["data"]["a"], "2");
//! ```
//!
//! # Public API
//! - Per child: [`prepare_create`] (create body with the record), [`plan`] (hot path:
//!   [`Plan::Unchanged`] or [`Plan::Update`] with the object to PUT), [`apply_update`] /
//!   [`plan_update`] (always return the merged object), [`merge_for_cli`] (the
//!   `metacontroller merge` debug command minus file I/O).
//! - Building blocks: [`merge`], [`merge_with_schema`], their copy-on-write forms
//!   [`merge_cow`] / [`merge_with_schema_cow`] (borrow observed when nothing changes: the
//!   cheap steady state), [`needs_update`], [`Schema`]
//!   (`from_crd`, `from_openapi_v3`, `from_openapi_v3_schema`, `detect`), [`last_applied`]
//!   (`ANNOTATION`, `get`, `set`, `encode`), [`ssa::apply_patch_body`] and
//!   [`ssa::is_in_place`] for `--apply-strategy=server-side-apply`.
//! - The forms kube-apiserver stores values in: [`quantity_server_form`] (`0.5` → `500m`),
//!   [`base64_server_form`] (`[]byte` fields re-encoded).
//! - Errors: [`ApplyError`], every variant with a field path ([`ApplyError::path`]).
//!
//! # Rules
//! See [`merge`] (the merge rules), [`Schema`] (which Kubernetes schema extensions are
//! honoured), [`needs_update`] (what counts as a change) and [`last_applied`] (the record
//! format, byte-compatible with upstream Metacontroller).
//!
//! # Differences from upstream Metacontroller (`pkg/dynamic/apply`)
//! Same results wherever upstream's result is well defined; different only here:
//! - `null` in desired removes the field (upstream writes `null` into the object).
//! - A last-applied value of a different JSON type than observed is ignored instead of failing.
//! - Schema-aware mode (optional) adds atomic lists, sets, multi-field and unconventional keys,
//!   atomic maps, and schema defaults for omitted key fields.
//! - A conventional key candidate whose value is null, an object or a list is skipped; a schema
//!   key with an object or list value is an error. Keys compare by JSON value (`80` == `80.0`,
//!   but `"80"` != `80`; upstream compared Go `%v` strings).
//! - A list-map whose key repeats in observed, last-applied or desired (53/TCP and 53/UDP
//!   keyed by `port` alone) is left as observed (taken from desired when observed is empty):
//!   no entry is ever lost. Upstream folds the repeats into one item written at every
//!   duplicate position, a write a cluster validating the list rejects.
//! - Top-level `status` and server-populated metadata are kept inside [`merge`] itself (upstream
//!   reverted them in its caller); [`needs_update`] is semantic (numbers, quantities, empty
//!   values, record by meaning) where upstream used `reflect.DeepEqual`.
//! - Like upstream, list-map items keep their observed order (reordering desired alone does not
//!   reorder the object) and the conventional key is chosen from all three lists, so a list
//!   whose items carry two conventional keys with clashing values may be keyed differently on a
//!   later sync; a schema (`x-kubernetes-list-map-keys`) removes that ambiguity.
//! - A list without a key (or declared atomic) and an atomic map are replaced only when a
//!   field-wise merge (list items by position, same length) would change something; upstream
//!   replaces an un-keyed list whenever it differs at all, so a default the API server fills
//!   inside it (`volumeClaimTemplates[].spec.volumeMode`, NetworkPolicy port `protocol`)
//!   makes it write on every sync.
//! - Values the API server stores in another form are in place in that form: a scalar whose
//!   observed value is the stored form of the desired one, applied before unchanged (the
//!   record), is kept (a quantity `0.5` read back as `500m`, in any map or list, with or
//!   without schema); Secret `stringData` already folded into `data`, and base64 of Secret
//!   `data`, ConfigMap `binaryData` and `caBundle` fields, compare in the stored form.
//!   Upstream wrote such objects on every sync.
//! - `x-kubernetes-patch-strategy: retainKeys` (schema-aware mode): an object so declared
//!   (or each item of a list so declared) that the merge changes keeps only the fields desired
//!   sets, as kubectl's `$retainKeys` directive does; an unchanged one keeps everything.

mod bytes_form;
mod compare;
mod conversions;
mod cursor;
mod error;
pub mod last_applied;
mod listkey;
mod merge;
mod path;
mod quantity;
mod quantity_form;
mod schema;
pub mod ssa;
mod update;

pub use bytes_form::base64_server_form;
pub use compare::{json_equal, needs_update, IGNORED_METADATA_FIELDS};
pub use error::ApplyError;
pub use listkey::CONVENTIONAL_MERGE_KEYS;
pub use merge::{
    merge, merge_cow, merge_with_schema, merge_with_schema_cow, SYSTEM_METADATA_FIELDS,
};
pub use quantity_form::{
    server_form as quantity_server_form, server_form_of as quantity_server_form_of, QuantityError,
};
pub use schema::Schema;
pub use update::{
    apply_update, merge_for_cli, plan, plan_update, prepare_create, MergeOutcome, Plan,
};
