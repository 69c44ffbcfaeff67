//! CustomResourceDefinitions: validation, the status the apiextensions
//! controllers would write (NamesAccepted, Established, Terminating,
//! storedVersions), and turning a CRD into a served resource.

use crate::errors::{ApiError, ApiResult, Cause};
use crate::registry::{sort_versions, CrdInfo, ResourceInfo, ScaleInfo};
use crate::store::{meta_str, State};
use crate::string_list::string_list;
use crate::time::now_rfc3339;
use crate::validation::required;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Finalizer that holds a CRD until its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

const ALL_VERBS: &[&str] = &[
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
];

/// Whether `info` is the customresourcedefinitions resource itself.
pub fn is_crd(info: &ResourceInfo) -> bool {
    info.group == "apiextensions.k8s.io" && info.resource == "customresourcedefinitions"
}

fn crd_gr() -> (String, String) {
    (
        "apiextensions.k8s.io".into(),
        "customresourcedefinitions".into(),
    )
}

/// Whether the CRD serving `info` is being deleted.
pub fn is_terminating(st: &State, info: &ResourceInfo) -> bool {
    let Some(c) = &info.crd else {
        return false;
    };
    st.get(&crd_gr(), "", &c.crd_name)
        .is_some_and(|o| crate::ops::is_deleting(&o))
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn invalid_cause(field: &str, value: &str, msg: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value:?}: {msg}"),
        field: field.into(),
    }
}

fn validate(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut c = Vec::new();
    let group = s(obj, "/spec/group");
    let plural = s(obj, "/spec/names/plural");
    let kind = s(obj, "/spec/names/kind");
    let name = meta_str(obj, "name");
    if group.is_empty() {
        c.push(required("spec.group", ""));
    } else if !group.contains('.') {
        c.push(invalid_cause(
            "spec.group",
            group,
            "should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() {
        c.push(required("spec.names.plural", ""));
    }
    if kind.is_empty() {
        c.push(required("spec.names.kind", ""));
    }
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        c.push(invalid_cause(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let scope = s(obj, "/spec/scope");
    if scope != "Namespaced" && scope != "Cluster" {
        c.push(Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {scope:?}: supported values: \"Cluster\", \"Namespaced\""
            ),
            field: "spec.scope".into(),
        });
    }
    let versions = obj.pointer("/spec/versions").and_then(Value::as_array);
    match versions {
        None => c.push(required(
            "spec.versions",
            "must have exactly one version marked as storage version",
        )),
        Some(vs) => {
            let storage = vs
                .iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .count();
            if storage != 1 {
                c.push(invalid_cause(
                    "spec.versions",
                    "",
                    "must have exactly one version marked as storage version",
                ));
            }
            for (i, v) in vs.iter().enumerate() {
                if s(v, "/name").is_empty() {
                    c.push(required(&format!("spec.versions[{i}].name"), ""));
                }
                if v.pointer("/schema/openAPIV3Schema").is_none() {
                    c.push(required(
                        &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                        "schemas are required",
                    ));
                }
            }
        }
    }
    if let Some(old) = old {
        for (field, ptr) in [
            ("spec.group", "/spec/group"),
            ("spec.names.plural", "/spec/names/plural"),
        ] {
            if s(old, ptr) != s(obj, ptr) {
                c.push(invalid_cause(field, s(obj, ptr), "field is immutable"));
            }
        }
    }
    c
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, old: Option<&Value>) -> Value {
    let ltt = old
        .and_then(|o| o.pointer("/status/conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| s(c, "/type") == type_ && s(c, "/status") == status)
        })
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(now_rfc3339()));
    json!({"type": type_, "status": status, "lastTransitionTime": ltt, "reason": reason, "message": message})
}

/// Validates a CRD and fills in defaults and the status the real controllers maintain.
pub fn prepare_crd(st: &State, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    let causes = validate(obj, old);
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            meta_str(obj, "name"),
            causes,
        ));
    }
    let kind = s(obj, "/spec/names/kind").to_string();
    if let Some(names) = obj
        .pointer_mut("/spec/names")
        .and_then(Value::as_object_mut)
    {
        if names
            .get("singular")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            names.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if names
            .get("listKind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        if spec.get("conversion").is_none() {
            spec.insert("conversion".into(), json!({"strategy": "None"}));
        }
    }
    // Kind conflicts with another CRD of the same group.
    let group = s(obj, "/spec/group").to_string();
    let name = meta_str(obj, "name").to_string();
    let conflict = st.list(&crd_gr(), None).into_iter().any(|(_, other)| {
        meta_str(&other, "name") != name
            && s(&other, "/spec/group") == group
            && s(&other, "/spec/names/kind") == kind
    });
    let names = obj
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let storage = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        })
        .map(|v| s(v, "/name").to_string())
        .unwrap_or_default();
    let mut stored = string_list(old.and_then(|o| o.pointer("/status/storedVersions")));
    if !stored.contains(&storage) {
        stored.push(storage);
    }
    let mut conditions = if conflict {
        vec![
            condition(
                "NamesAccepted",
                "False",
                "KindConflict",
                &format!("{kind:?} is already in use"),
                old,
            ),
            condition(
                "Established",
                "False",
                "NotAccepted",
                "not all names are accepted",
                old,
            ),
        ]
    } else {
        vec![
            condition(
                "NamesAccepted",
                "True",
                "NoConflicts",
                "no conflicts found",
                old,
            ),
            condition(
                "Established",
                "True",
                "InitialNamesAccepted",
                "the initial names have been accepted",
                old,
            ),
        ]
    };
    if crate::ops::is_deleting(obj) {
        conditions.push(condition(
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
            old,
        ));
    }
    if let Some(m) = obj.as_object_mut() {
        m.insert(
            "status".into(),
            json!({
                "acceptedNames": if conflict { json!({"kind": "", "plural": ""}) } else { names },
                "conditions": conditions,
                "storedVersions": stored,
            }),
        );
    }
    Ok(())
}

/// Adds the Terminating condition when deletion starts.
pub fn mark_terminating(obj: &mut Value) {
    if let Some(conds) = obj
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        conds.retain(|c| s(c, "/type") != "Terminating");
        conds.push(json!({"type": "Terminating", "status": "True", "lastTransitionTime": now_rfc3339(), "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"}));
    }
}

/// The served resource a CRD defines (None if it serves no version or its names are not accepted).
pub fn resource_info(crd: &Value) -> Option<ResourceInfo> {
    let established = crd
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| s(c, "/type") == "Established" && s(c, "/status") == "True")
        });
    if !established {
        return None;
    }
    let vs = crd.pointer("/spec/versions").and_then(Value::as_array)?;
    let mut versions: Vec<String> = vs
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(false))
        .map(|v| s(v, "/name").to_string())
        .collect();
    if versions.is_empty() {
        return None;
    }
    sort_versions(&mut versions);
    let storage = vs
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .map(|v| s(v, "/name").to_string())?;
    let mut schemas = BTreeMap::new();
    let mut printer_columns = BTreeMap::new();
    let mut status_versions = BTreeMap::new();
    let mut status = false;
    let mut scale = None;
    for v in vs {
        let name = s(v, "/name").to_string();
        if let Some(sc) = v.pointer("/schema/openAPIV3Schema") {
            match crate::schema::StructuralSchema::from_openapi_v3(sc) {
                Ok(parsed) => {
                    schemas.insert(name.clone(), std::sync::Arc::new(parsed));
                }
                Err(e) => {
                    tracing::warn!(crd = meta_str(crd, "name"), version = %name, error = %e, "schema not structural; serving without pruning")
                }
            }
        }
        if let Some(cols) = v.get("additionalPrinterColumns").and_then(Value::as_array) {
            printer_columns.insert(name.clone(), cols.clone());
        }
        let has_status = v.pointer("/subresources/status").is_some();
        status |= has_status;
        status_versions.insert(name.clone(), has_status);
        if let Some(sc) = v.pointer("/subresources/scale") {
            scale = Some(ScaleInfo {
                spec_replicas_path: s(sc, "/specReplicasPath").to_string(),
                status_replicas_path: s(sc, "/statusReplicasPath").to_string(),
                label_selector_path: sc
                    .get("labelSelectorPath")
                    .and_then(Value::as_str)
                    .map(String::from),
            });
        }
    }
    let names = crd
        .pointer("/status/acceptedNames")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let strs = |key: &str| string_list(names.get(key));
    Some(ResourceInfo {
        group: s(crd, "/spec/group").to_string(),
        versions,
        storage_version: storage,
        resource: s(&names, "/plural").to_string(),
        singular: s(&names, "/singular").to_string(),
        kind: s(&names, "/kind").to_string(),
        list_kind: s(&names, "/listKind").to_string(),
        namespaced: s(crd, "/spec/scope") == "Namespaced",
        short_names: strs("shortNames"),
        categories: strs("categories"),
        verbs: ALL_VERBS.iter().map(|v| v.to_string()).collect(),
        status,
        scale,
        has_generation: true,
        field_labels: vec![],
        crd: Some(CrdInfo {
            crd_name: meta_str(crd, "name").to_string(),
            schemas,
            printer_columns,
            status_versions,
        }),
    })
}

/// Updates the registry after a CRD was stored.
pub fn sync_registry(st: &mut State, crd: &Value) {
    let gr = (
        s(crd, "/spec/group").to_string(),
        s(crd, "/spec/names/plural").to_string(),
    );
    match resource_info(crd) {
        Some(info) => st.registry.insert(info),
        None => st.registry.remove(&gr),
    }
}

/// Stops serving a removed CRD's resource and drops what is left of its objects.
pub fn sync_registry_removed(st: &mut State, crd: &Value) {
    let gr = (
        s(crd, "/spec/group").to_string(),
        s(crd, "/spec/names/plural").to_string(),
    );
    st.registry.remove(&gr);
    st.drop_resource(&gr);
}
