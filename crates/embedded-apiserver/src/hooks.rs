//! Where type-specific behaviour plugs into the write path: built-in
//! defaulting, CRD structural-schema pruning/defaulting/validation and the
//! status a create resets. Everything here runs under the storage lock on the
//! object in its *storage* version.

use crate::errors::{ApiError, Cause};
use crate::registry::ResourceInfo;
use base64::Engine;
use serde_json::{json, Map, Value};

/// The `fieldValidation` query parameter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Unknown/duplicate fields fail the request with 400 BadRequest.
    Strict,
    /// Unknown fields are dropped and reported in `Warning` headers (the server default).
    #[default]
    Warn,
    /// Unknown fields are dropped silently.
    Ignore,
}

impl FieldValidation {
    /// Parses the query value (`Strict`, `Warn`, `Ignore`; empty → Warn).
    pub fn parse(s: Option<&str>) -> Result<Self, ApiError> {
        match s.unwrap_or("") {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Strict" => Ok(FieldValidation::Strict),
            "Ignore" => Ok(FieldValidation::Ignore),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other}"
            ))),
        }
    }
}

/// Context of one storage preparation.
pub struct PrepareCtx<'a> {
    pub info: &'a ResourceInfo,
    /// The stored object before this write (None on create).
    pub old: Option<&'a Value>,
    pub field_validation: FieldValidation,
    /// Warnings to return in `Warning` headers.
    pub warnings: Vec<String>,
}

/// Defaults, prunes and validates `obj` before it is stored.
/// Returns `Err` for requests the real server refuses (400 for strict unknown fields, 422 Invalid).
pub fn prepare_for_storage(ctx: &mut PrepareCtx<'_>, obj: &mut Value) -> Result<(), ApiError> {
    let info = ctx.info;
    if ctx.old.is_none() {
        reset_status_on_create(info, obj);
    }
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "secrets") => prepare_secret(obj)?,
        ("", "namespaces") => prepare_namespace(obj, ctx.old),
        _ => {}
    }
    if info.is_custom() {
        prepare_custom_resource(ctx, obj)?;
    }
    Ok(())
}

/// What PrepareForCreate of the real strategies does to status.
fn reset_status_on_create(info: &ResourceInfo, obj: &mut Value) {
    if !info.status {
        return;
    }
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "pods") => {
            map.insert(
                "status".into(),
                json!({"phase": "Pending", "qosClass": "BestEffort"}),
            );
        }
        ("", "namespaces") => {
            map.insert("status".into(), json!({"phase": "Active"}));
        }
        ("", "services") => {
            map.insert("status".into(), json!({"loadBalancer": {}}));
        }
        ("apiextensions.k8s.io", _) => {}
        _ if info.is_custom() => {
            map.remove("status");
        }
        _ => {
            map.insert("status".into(), json!({}));
        }
    }
}

fn prepare_secret(obj: &mut Value) -> Result<(), ApiError> {
    let Some(map) = obj.as_object_mut() else {
        return Ok(());
    };
    if let Some(sd) = map.remove("stringData") {
        let sd = match sd {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            _ => return Err(ApiError::bad_request("stringData must be a map of strings")),
        };
        let data = map
            .entry("data")
            .or_insert_with(|| Value::Object(Map::new()));
        if !data.is_object() {
            *data = Value::Object(Map::new());
        }
        if let Some(d) = data.as_object_mut() {
            for (k, v) in sd {
                let s = v.as_str().unwrap_or_default();
                d.insert(
                    k,
                    Value::String(base64::engine::general_purpose::STANDARD.encode(s)),
                );
            }
        }
    }
    if map
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        map.insert("type".into(), json!("Opaque"));
    }
    Ok(())
}

fn prepare_namespace(obj: &mut Value, old: Option<&Value>) {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if !labels.is_object() {
            *labels = Value::Object(Map::new());
        }
        if let Some(l) = labels.as_object_mut() {
            l.insert("kubernetes.io/metadata.name".into(), Value::String(name));
        }
    }
    if let Some(map) = obj.as_object_mut() {
        let spec = map.entry("spec").or_insert_with(|| json!({}));
        if !spec.is_object() {
            *spec = json!({});
        }
        // spec.finalizers only changes through /finalize; new namespaces get "kubernetes".
        let fin = match old {
            Some(o) => o.pointer("/spec/finalizers").cloned(),
            None => Some(json!(["kubernetes"])),
        };
        if let Some(s) = spec.as_object_mut() {
            match fin {
                Some(f) => {
                    s.insert("finalizers".into(), f);
                }
                None => {
                    s.remove("finalizers");
                }
            }
        }
    }
}

/// Structural-schema handling of custom resources. The pure schema module plugs in here.
fn prepare_custom_resource(ctx: &mut PrepareCtx<'_>, obj: &mut Value) -> Result<(), ApiError> {
    let _ = (&ctx.field_validation, &obj);
    Ok(())
}

/// Helper for type-specific 422s.
pub fn invalid(info: &ResourceInfo, obj: &Value, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(
        &info.group,
        &info.kind,
        obj.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or(""),
        causes,
    )
}
