//! PATCH: JSON patch, JSON merge patch, strategic merge patch (built-ins only)
//! and server-side apply, dispatched by content type.

use crate::errors::{ApiError, ApiResult};
use crate::ops::{self, Subresource, WriteOpts, WriteResult};
use crate::registry::ResourceInfo;
use crate::store::State;
use axum::body::Bytes;
use serde_json::Value;
use std::sync::Arc;

/// The patch formats Kubernetes accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json` (RFC 6902)
    Json,
    /// `application/merge-patch+json` (RFC 7386)
    Merge,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml`
    Apply,
}

impl PatchType {
    /// Maps a Content-Type; strategic merge patch is refused for custom resources (415).
    pub fn from_content_type(ct: &str, info: &ResourceInfo) -> ApiResult<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" if !info.is_custom() => {
                Ok(PatchType::Strategic)
            }
            "application/apply-patch+yaml" => Ok(PatchType::Apply),
            _ => Err(ApiError::unsupported_patch_type(!info.is_custom())),
        }
    }
}

fn decode_json(body: &Bytes) -> ApiResult<Value> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

fn unprocessable(msg: String) -> ApiError {
    ApiError {
        code: 422,
        reason: "Invalid".into(),
        message: msg,
        details: None,
    }
}

/// A decoded patch document (decoded before the storage lock is taken).
#[derive(Clone, Debug)]
pub enum PatchBody {
    Json(json_patch::Patch),
    Merge(Value),
    Strategic(Value),
    Apply(Value),
}

impl PatchBody {
    /// Decodes the body of a patch of type `pt`.
    pub fn parse(pt: PatchType, body: &Bytes) -> ApiResult<Self> {
        Ok(match pt {
            PatchType::Json => PatchBody::Json(
                serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?,
            ),
            PatchType::Merge => {
                let p = decode_json(body)?;
                if !p.is_object() {
                    return Err(ApiError::bad_request("merge patch must be a JSON object"));
                }
                PatchBody::Merge(p)
            }
            PatchType::Strategic => PatchBody::Strategic(decode_json(body)?),
            PatchType::Apply => PatchBody::Apply(
                serde_yaml::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?,
            ),
        })
    }
}

/// Applies a (non-apply) patch to `current` (already in the request's version).
/// An apply body only gets here for `/scale`, where it is merged.
pub fn apply_patch(info: &ResourceInfo, current: &Value, body: &PatchBody) -> ApiResult<Value> {
    let mut doc = current.clone();
    match body {
        PatchBody::Json(p) => {
            json_patch::patch(&mut doc, p).map_err(|e| unprocessable(e.to_string()))?;
            Ok(doc)
        }
        PatchBody::Merge(p) | PatchBody::Apply(p) => {
            json_patch::merge(&mut doc, p);
            Ok(doc)
        }
        PatchBody::Strategic(p) => strategic(info, current, p),
    }
}

/// Strategic merge patch with the patch strategies of the built-in kind.
fn strategic(info: &ResourceInfo, current: &Value, p: &Value) -> ApiResult<Value> {
    let meta = crate::strategic_merge::PatchMeta::for_kind(&info.group, &info.kind)
        .unwrap_or_else(crate::strategic_merge::PatchMeta::untyped);
    crate::strategic_merge::patch(current, p, &meta).map_err(|e| match e.code {
        400 => ApiError::bad_request(e.message),
        422 => unprocessable(e.message),
        _ => ApiError::internal(e.message),
    })
}

/// PATCH on an object or its status. Returns the write and whether it created the object (apply only).
#[allow(clippy::too_many_arguments)]
pub fn patch(
    st: &mut State,
    info: &Arc<ResourceInfo>,
    version: &str,
    ns: Option<&str>,
    name: &str,
    body: &PatchBody,
    sub: Subresource,
    opts: &WriteOpts,
    force: bool,
) -> ApiResult<(WriteResult, bool)> {
    if let PatchBody::Apply(applied) = body {
        return server_side_apply(
            st,
            info,
            version,
            ns,
            name,
            applied.clone(),
            sub,
            opts,
            force,
        );
    }
    let existing = st
        .get(&info.gr(), ns.unwrap_or(""), name)
        .ok_or_else(|| ApiError::not_found(&info.group, &info.resource, name))?;
    let current = ops::to_version(info, &existing, version);
    let patched = apply_patch(info, &current, body)?;
    let res = ops::update(st, info, version, ns, name, patched, sub, opts)?;
    Ok((res, false))
}

fn apply_error(e: crate::ssa::ApplyError) -> ApiError {
    let s = e.to_status();
    ApiError {
        code: s.get("code").and_then(Value::as_u64).unwrap_or(500) as u16,
        reason: s
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("InternalError")
            .to_string(),
        message: s
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        details: s.get("details").cloned(),
    }
}

/// `application/apply-patch+yaml`: field-managed apply, creating the object if needed.
#[allow(clippy::too_many_arguments)]
fn server_side_apply(
    st: &mut State,
    info: &Arc<ResourceInfo>,
    version: &str,
    ns: Option<&str>,
    name: &str,
    mut applied: Value,
    sub: Subresource,
    opts: &WriteOpts,
    force: bool,
) -> ApiResult<(WriteResult, bool)> {
    let Some(map) = applied.as_object_mut() else {
        return Err(ApiError::bad_request(
            "apply configuration must be an object",
        ));
    };
    // Reset fields as the real strategies do: the main resource cannot apply
    // status when a status subresource exists, /status only applies status.
    match sub {
        Subresource::Main if info.status => {
            map.remove("status");
        }
        Subresource::Status => {
            map.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
        }
        _ => {}
    }
    if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
        let body_name = meta.get("name").and_then(Value::as_str).unwrap_or("");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        meta.insert("name".into(), Value::String(name.to_string()));
    }
    let manager = opts.field_manager.clone().unwrap_or_default();
    let existing = st.get(&info.gr(), ns.unwrap_or(""), name);
    if existing.is_none() && sub != Subresource::Main {
        return Err(ApiError::not_found(&info.group, &info.resource, name));
    }
    let live = existing.as_ref().map(|e| ops::to_version(info, e, version));
    let now = crate::time::now_rfc3339();
    let subresource = (sub == Subresource::Status).then_some("status");
    let result = ops::with_ssa_schema(info, version, |schema| {
        crate::ssa::apply(
            live.as_deref(),
            &applied,
            &crate::ssa::ApplyOptions {
                manager: &manager,
                force,
                now: &now,
                subresource,
            },
            schema,
        )
    })
    .map_err(apply_error)?;
    // Apply recorded the ownership itself.
    let inner = WriteOpts {
        field_manager: None,
        ..opts.clone()
    };
    match live {
        None => Ok((ops::create(st, info, version, ns, result, &inner)?, true)),
        Some(_) => Ok((
            ops::update(st, info, version, ns, name, result, sub, &inner)?,
            false,
        )),
    }
}
