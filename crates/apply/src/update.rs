//! The whole client-side apply step for one child, as upstream's `ApplyUpdate` + create path:
//! read the record, merge, keep system fields and status, record what we applied.

use serde_json::Value;

use crate::compare::needs_update;
use crate::error::{type_name, ApplyError};
use crate::last_applied;
use crate::merge::{merge_inner, without_nulls};
use crate::schema::Schema;

/// Result of planning an update.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeOutcome {
    /// The object to write (full object, `resourceVersion` kept from observed).
    pub merged: Value,
    /// Whether writing it changes anything (see [`needs_update`]); `false` means send nothing.
    pub update: bool,
}

/// The body to create a child with: desired (nulls removed) plus the last-applied record of
/// desired as returned by the hook (upstream records it before adding anything else, e.g.
/// owner references, which the caller adds after this).
pub fn prepare_create(desired: &Value) -> Result<Value, ApplyError> {
    if !desired.is_object() {
        return Err(ApplyError::invalid(
            ".",
            format!("desired must be an object, found {}", type_name(desired)),
        ));
    }
    let mut body = without_nulls(desired);
    last_applied::set(&mut body, desired)?;
    Ok(body)
}

/// The object to write for an existing child: three-way merge of `observed`, its last-applied
/// record and `desired`, with the record updated. Compare with [`needs_update`] (or use
/// [`plan_update`]) before sending it.
pub fn apply_update(
    observed: &Value,
    desired: &Value,
    schema: Option<&Schema>,
) -> Result<Value, ApplyError> {
    let last = last_applied::get(observed)?;
    apply_update_with(observed, last.as_ref(), desired, schema)
}

/// [`apply_update`] followed by [`needs_update`].
pub fn plan_update(
    observed: &Value,
    desired: &Value,
    schema: Option<&Schema>,
) -> Result<MergeOutcome, ApplyError> {
    let merged = apply_update(observed, desired, schema)?;
    let update = needs_update(observed, &merged);
    Ok(MergeOutcome { merged, update })
}

fn apply_update_with(
    observed: &Value,
    last: Option<&Value>,
    desired: &Value,
    schema: Option<&Schema>,
) -> Result<Value, ApplyError> {
    // Upstream blanks a copy of the record echoed by the hook, then merges and records that.
    let desired = last_applied::blank_in(desired);
    let mut merged = merge_inner(observed, last, &desired, schema.map(Schema::root))?;
    last_applied::set(&mut merged, &desired)?;
    Ok(merged)
}

/// Entry point for the `metacontroller merge` debug command: everything except reading files
/// and printing.
///
/// - `observed`: the object as it is in the cluster, or `null` when it does not exist yet (the
///   result is then the create body and `update` is true);
/// - `desired`: the object the hook returns;
/// - `last_applied`: the last-applied record to use; default: the annotation on `observed`;
/// - `schema`: optional; any form [`Schema::detect`] accepts (a CRD, an `openAPIV3Schema`, a
///   CRD version's `schema`, or an OpenAPI v3/v2 document, in which the schema of desired's
///   `apiVersion`/`kind` is used).
pub fn merge_for_cli(
    observed: &Value,
    desired: &Value,
    last_applied: Option<&Value>,
    schema: Option<&Value>,
) -> Result<MergeOutcome, ApplyError> {
    if !desired.is_object() {
        return Err(ApplyError::invalid(
            ".",
            format!("desired must be an object, found {}", type_name(desired)),
        ));
    }
    let schema = match schema {
        Some(doc) => {
            let api_version = desired
                .get("apiVersion")
                .or_else(|| observed.get("apiVersion"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let kind = desired
                .get("kind")
                .or_else(|| observed.get("kind"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            Some(Schema::detect(doc, api_version, kind)?)
        }
        None => None,
    };
    if observed.is_null() {
        return Ok(MergeOutcome {
            merged: prepare_create(desired)?,
            update: true,
        });
    }
    if !observed.is_object() {
        return Err(ApplyError::invalid(
            ".",
            format!(
                "observed must be an object or null, found {}",
                type_name(observed)
            ),
        ));
    }
    let last = match last_applied {
        Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(v) => {
            return Err(ApplyError::invalid(
                ".",
                format!(
                    "last-applied must be an object or null, found {}",
                    type_name(v)
                ),
            ))
        }
        None => last_applied::get(observed)?,
    };
    let merged = apply_update_with(observed, last.as_ref(), desired, schema.as_ref())?;
    let update = needs_update(observed, &merged);
    Ok(MergeOutcome { merged, update })
}
