//! The whole client-side apply step for one child, as upstream's `ApplyUpdate` + create path:
//! read the record, merge, keep system fields and status, record what we applied.

use serde_json::Value;

use crate::compare::{json_equal, needs_update, needs_update_with};
use crate::error::{type_name, ApplyError};
use crate::last_applied;
use crate::merge::{merge_opt, without_nulls};
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

/// What to do with an existing child.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// The desired state is already in place: send nothing.
    Unchanged,
    /// Write this full object (it keeps observed's `resourceVersion`, so an update is
    /// conditional on nobody having changed the object since it was read).
    Update(Value),
}

/// The hot path of a sync: decides whether `observed` needs a write to reflect `desired`, and
/// builds the object to write only when it does. In the steady state (record unchanged,
/// nothing to merge) nothing is allocated beyond the encoded record.
pub fn plan(
    observed: &Value,
    desired: &Value,
    schema: Option<&Schema>,
) -> Result<Plan, ApplyError> {
    let prepared = prepare(observed, LastApplied::FromAnnotation, desired, schema)?;
    if prepared.merged.is_none() && prepared.record_unchanged {
        return Ok(Plan::Unchanged);
    }
    let record_same = prepared.record_same_meaning;
    let merged = prepared.into_object(observed)?;
    // The records were compared already (without re-parsing both annotations).
    Ok(
        if !record_same || needs_update_with(observed, &merged, true) {
            Plan::Update(merged)
        } else {
            Plan::Unchanged
        },
    )
}

/// The object to write for an existing child: three-way merge of `observed`, its last-applied
/// record and `desired`, with the record updated (upstream's `ApplyUpdate`). Compare with
/// [`needs_update`] (or use [`plan`]) before sending it.
pub fn apply_update(
    observed: &Value,
    desired: &Value,
    schema: Option<&Schema>,
) -> Result<Value, ApplyError> {
    prepare(observed, LastApplied::FromAnnotation, desired, schema)?.into_object(observed)
}

/// [`apply_update`] followed by [`needs_update`], always returning the merged object.
pub fn plan_update(
    observed: &Value,
    desired: &Value,
    schema: Option<&Schema>,
) -> Result<MergeOutcome, ApplyError> {
    let merged = apply_update(observed, desired, schema)?;
    let update = needs_update(observed, &merged);
    Ok(MergeOutcome { merged, update })
}

enum LastApplied<'a> {
    FromAnnotation,
    Given(Option<&'a Value>),
}

struct Prepared {
    /// `None`: the merge left observed exactly as it is.
    merged: Option<Value>,
    /// The new record, when it differs from the observed one byte for byte.
    record: Option<String>,
    record_unchanged: bool,
    /// The observed record means the same as the new one (only computed for records read
    /// from the annotation; `false` otherwise).
    record_same_meaning: bool,
}

impl Prepared {
    fn into_object(self, observed: &Value) -> Result<Value, ApplyError> {
        // The merge may have rebuilt (or, with `metadata: null`, dropped) the annotations, so
        // the record is written whenever anything changed.
        match self.merged {
            None if self.record_unchanged => Ok(observed.clone()),
            merged => {
                let mut merged = merged.unwrap_or_else(|| observed.clone());
                let record = match self.record {
                    Some(r) => r,
                    // Unchanged record, but the merge rebuilt metadata: restore it.
                    None => last_applied::raw(observed).unwrap_or_default().to_string(),
                };
                last_applied::set_encoded(&mut merged, record)?;
                Ok(merged)
            }
        }
    }
}

fn prepare(
    observed: &Value,
    last: LastApplied<'_>,
    desired: &Value,
    schema: Option<&Schema>,
) -> Result<Prepared, ApplyError> {
    // Upstream blanks a copy of the record echoed by the hook, then merges and records that.
    let desired = last_applied::blank_cow(desired);
    let raw = last_applied::raw(observed);
    let record_unchanged = raw.is_some_and(|r| last_applied::is_encoding_of(r, &desired));
    // Encoded only when it has to be written.
    let record = if record_unchanged {
        None
    } else {
        Some(last_applied::encode(&desired))
    };
    let parsed;
    let mut record_same_meaning = record_unchanged;
    let last: Option<&Value> = match last {
        // The record we would write is already there, byte for byte: it *is* desired, so the
        // annotation need not be parsed.
        LastApplied::FromAnnotation if record_unchanged => Some(&*desired),
        LastApplied::FromAnnotation => {
            parsed = last_applied::get(observed)?;
            record_same_meaning = parsed.as_ref().is_some_and(|p| json_equal(p, &desired));
            parsed.as_ref()
        }
        LastApplied::Given(l) => l,
    };
    let merged = merge_opt(observed, last, &desired, schema.map(Schema::root))?;
    Ok(Prepared {
        merged,
        record,
        record_unchanged,
        record_same_meaning,
    })
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
    let merged = prepare(
        observed,
        LastApplied::Given(last.as_ref()),
        desired,
        schema.as_ref(),
    )?
    .into_object(observed)?;
    let update = needs_update(observed, &merged);
    Ok(MergeOutcome { merged, update })
}
