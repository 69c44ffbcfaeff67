//! `metacontroller validate --kubeconfig PATH` (or `--live`): checks that every resource a
//! controller manifest names is served by the cluster, as the controller will look it up:
//! by `apiVersion` and plural `resource` name in API discovery.

use serde_json::Value;

use metacontroller_api::validation::ValidationError;
use metacontroller_dynamic::ResourceMap;

/// One `{apiVersion, resource}` reference of a controller manifest.
struct Reference<'a> {
    path: String,
    api_version: &'a str,
    resource: &'a str,
    /// The CompositeController's parent: its sync needs the `status` subresource.
    parent: bool,
}

/// The resource references of a CompositeController or DecoratorController document.
fn references(doc: &Value) -> Vec<Reference<'_>> {
    let spec = doc.get("spec").unwrap_or(&Value::Null);
    let mut found = Vec::new();
    match doc.get("kind").and_then(Value::as_str) {
        Some("CompositeController") => {
            if let Some(parent) = spec.get("parentResource") {
                found.extend(reference("spec.parentResource".into(), parent, true));
            }
            found.extend(list(spec, "childResources"));
        }
        Some("DecoratorController") => {
            found.extend(list(spec, "resources"));
            found.extend(list(spec, "attachments"));
        }
        _ => {}
    }
    found
}

/// The entry's reference; `None` when a field is missing (the offline checks report it).
fn reference(path: String, entry: &Value, parent: bool) -> Option<Reference<'_>> {
    let field = |name: &str| {
        entry
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    Some(Reference {
        path,
        api_version: field("apiVersion")?,
        resource: field("resource")?,
        parent,
    })
}

fn list<'a>(spec: &'a Value, field: &str) -> Vec<Reference<'a>> {
    spec.get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, entry)| reference(format!("spec.{field}[{i}]"), entry, false))
        .collect()
}

/// Errors (and warnings) for the references of `doc` that `served` does not serve.
pub fn check(doc: &Value, served: &ResourceMap) -> (Vec<ValidationError>, Vec<String>) {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    for reference in references(doc) {
        let Reference {
            path,
            api_version,
            resource,
            parent,
        } = reference;
        if let Some(found) = served.get(api_version, resource) {
            if parent && !found.has_subresource("status") {
                warnings.push(format!(
                    "{path}: {resource}.{api_version} has no status subresource: the controller \
                     does not sync parents without one"
                ));
            }
            continue;
        }
        let (field, message) = unserved(served, api_version, resource);
        errors.push(ValidationError {
            path: format!("{path}.{field}"),
            message,
        });
    }
    (errors, warnings)
}

/// Why `(api_version, resource)` is not found, with what the server serves instead: the
/// field at fault (`apiVersion` or `resource`) and the message.
fn unserved(served: &ResourceMap, api_version: &str, resource: &str) -> (&'static str, String) {
    let version_served = served.group_versions().any(|gv| gv == api_version);
    if version_served {
        let lower = resource.to_ascii_lowercase();
        if let Some(found) = served.iter().find(|r| {
            r.api_version == api_version
                && (r.kind.eq_ignore_ascii_case(resource)
                    || r.singular_name == lower
                    || r.short_names.contains(&lower))
        }) {
            return (
                "resource",
                format!(
                    "{resource:?} is not a resource name of {api_version}: resources are named \
                     by their plural; the server serves kind {} as {:?}",
                    found.kind, found.name
                ),
            );
        }
    }
    let elsewhere: Vec<&str> = served
        .iter()
        .filter(|r| r.name == resource)
        .map(|r| r.api_version.as_str())
        .collect();
    let hint = if elsewhere.is_empty() {
        String::new()
    } else {
        format!("; {resource:?} is served in {}", elsewhere.join(", "))
    };
    if version_served {
        return (
            "resource",
            format!("{resource:?} is not served in {api_version}{hint}"),
        );
    }
    let group_of = |gv: &str| gv.split_once('/').map_or("", |(group, _)| group).to_owned();
    let group = group_of(api_version);
    let versions: Vec<&str> = served
        .group_versions()
        .filter(|gv| group_of(gv) == group)
        .collect();
    let versions = if versions.is_empty() {
        String::new()
    } else {
        format!(" (the server serves {})", versions.join(", "))
    };
    (
        "apiVersion",
        format!("apiVersion {api_version} is not served{versions}{hint}"),
    )
}

/// Loads discovery from the cluster; a group version that failed to load is a warning
/// (its resources then look unserved).
pub async fn discover(client: &kube::Client) -> anyhow::Result<(ResourceMap, Vec<String>)> {
    let found = ResourceMap::discover(client, &ResourceMap::default())
        .await
        .map_err(|err| anyhow::anyhow!("reading API discovery from the cluster: {err}"))?;
    let warnings = found
        .errors
        .iter()
        .map(|err| format!("discovery: {err}"))
        .collect();
    let map = found.update.unwrap_or_default();
    Ok((map, warnings))
}
