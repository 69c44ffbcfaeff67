//! Where type-specific behaviour plugs into the write path: built-in
//! defaulting, CRD structural-schema pruning/defaulting/validation and the
//! status a create resets. Everything here runs under the storage lock on the
//! object in its *storage* version.

use crate::errors::{ApiError, Cause};
use crate::registry::ResourceInfo;
use crate::schema::FieldError;
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
    /// API version of the request (selects the CRD schema).
    pub version: &'a str,
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
    if !info.is_custom() {
        typed_values(ctx, obj)?;
    }
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "secrets") => prepare_secret(obj)?,
        ("", "namespaces") => prepare_namespace(obj, ctx.old),
        _ => {}
    }
    if info.is_custom() {
        prepare_custom_resource(ctx, obj)?;
    } else {
        drop_unknown_builtin_fields(ctx, obj)?;
        builtin_defaults(ctx, obj)?;
    }
    Ok(())
}

/// Quantities and `[]byte` fields in their stored form, as decoding into the Go struct leaves
/// them (see [`crate::typed_values`]); a value the decoder refuses is a 400 BadRequest.
fn typed_values(ctx: &PrepareCtx<'_>, obj: &mut Value) -> Result<(), ApiError> {
    let info = ctx.info;
    let api_version = info.api_version(ctx.version);
    crate::typed_values::normalize(&api_version, &info.kind, obj).map_err(|msg| {
        ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {msg}",
            kind = info.kind,
            version = ctx.version,
        ))
    })
}

fn field_errors(info: &ResourceInfo, obj: &Value, errs: &[FieldError]) -> ApiError {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut e = ApiError::invalid(&info.group, &info.kind, name, vec![]);
    let qualified = crate::errors::qualified(&info.group, &info.kind);
    e.message = crate::schema::invalid_message(&qualified, name, errs);
    if let Some(d) = e.details.as_mut() {
        d["causes"] = Value::Array(errs.iter().map(FieldError::to_cause).collect());
    }
    e
}

/// What decoding does with `fields` (`unknown field …` texts) the type lacks, by the request's
/// field validation: refused under `Strict`, warned about under `Warn`, nothing under
/// `Ignore`. The caller drops them.
fn report_unknown_fields(ctx: &mut PrepareCtx<'_>, fields: Vec<String>) -> Result<(), ApiError> {
    match ctx.field_validation {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "{} in version {:?} cannot be handled as a {}: strict decoding error: {}",
            ctx.info.kind,
            ctx.version,
            ctx.info.kind,
            fields.join(", ")
        ))),
        FieldValidation::Warn => {
            ctx.warnings.extend(fields);
            Ok(())
        }
        FieldValidation::Ignore => Ok(()),
    }
}

/// Built-in defaulting (apply defaults, create-only strategy changes, defaults
/// again). Service addresses are allocated later, by [`allocate`], after the
/// field manager ran — as the real Service storage does.
/// What decoding into the Go struct does to fields the type lacks (see
/// [`crate::builtin_fields`]): refused under `Strict`, dropped with a warning under `Warn`,
/// dropped silently under `Ignore`.
fn drop_unknown_builtin_fields(ctx: &mut PrepareCtx<'_>, obj: &mut Value) -> Result<(), ApiError> {
    let info = ctx.info;
    let unknown = crate::builtin_fields::unknown_fields(&info.group, &info.resource, obj);
    if unknown.is_empty() {
        return Ok(());
    }
    let fields: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field {:?}", crate::builtin_fields::render(p)))
        .collect();
    report_unknown_fields(ctx, fields)?;
    // Only object fields are ever removed, so list indices of later paths stay valid.
    for path in &unknown {
        crate::builtin_fields::remove(obj, path);
    }
    Ok(())
}

fn builtin_defaults(ctx: &mut PrepareCtx<'_>, obj: &mut Value) -> Result<(), ApiError> {
    let info = ctx.info;
    let (g, v, k) = (info.group.as_str(), ctx.version, info.kind.as_str());
    crate::defaults::apply_defaults_only(g, v, k, obj);
    if ctx.old.is_none() {
        crate::defaults::prepare_for_create(g, v, k, obj);
        crate::defaults::apply_defaults_only(g, v, k, obj);
    }
    Ok(())
}

/// Storage-time allocation (Service cluster IPs and node ports), after `managedFields` were recorded.
pub fn allocate(
    info: &ResourceInfo,
    old: Option<&Value>,
    obj: &mut Value,
    alloc: &mut dyn crate::defaults::ClusterIpAllocator,
) -> Result<(), ApiError> {
    if !(info.group.is_empty() && info.resource == "services") {
        return Ok(());
    }
    if let Some(old) = old {
        crate::defaults::preserve_service_allocations(old, obj);
    }
    crate::defaults::allocate_service_addresses(obj, alloc)
        .map_err(|e| field_errors(info, obj, &[e]))
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
        // The kubelet registers its Node with a status.
        ("apiextensions.k8s.io", _) | ("", "nodes") => {}
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

/// Structural-schema handling of custom resources: prune (honouring
/// `fieldValidation`), default, validate — the order kube-apiserver uses.
fn prepare_custom_resource(ctx: &mut PrepareCtx<'_>, obj: &mut Value) -> Result<(), ApiError> {
    let info = ctx.info;
    let Some(schema) = info
        .crd
        .as_ref()
        .and_then(|c| c.schemas.get(ctx.version))
        .cloned()
    else {
        return Ok(());
    };
    let pruned = schema.prune(obj);
    if !pruned.is_empty() {
        let fields: Vec<String> = pruned
            .iter()
            .map(|p| format!("unknown field {p:?}"))
            .collect();
        report_unknown_fields(ctx, fields)?;
    }
    schema.apply_defaults(obj);
    let mut errs = schema.validate(obj);
    if schema.has_rules() {
        if errs.iter().any(blocks_rules) {
            errs.push(FieldError {
                error_type: crate::schema::FieldErrorType::Invalid,
                field: "<nil>".into(),
                bad_value: Some(Value::Null),
                detail: "some validation rules were not checked because the object was invalid; \
                         correct the existing errors to complete validation"
                    .into(),
            });
        } else {
            errs.extend(schema.validate_rules(obj, ctx.old));
        }
    }
    if !errs.is_empty() {
        return Err(field_errors(info, obj, &errs));
    }
    Ok(())
}

/// Schema errors after which kube-apiserver does not run the CEL rules (a wrong type, a
/// missing required field, a value not in the enum, too long, too many).
fn blocks_rules(e: &FieldError) -> bool {
    use crate::schema::FieldErrorType as T;
    matches!(
        e.error_type,
        T::NotSupported | T::Required | T::TooLong | T::TooMany | T::TypeInvalid
    )
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
