//! Discovery documents: legacy (`/api`, `/apis`, group and group-version
//! resource lists) and aggregated (`apidiscovery.k8s.io/v2` and `v2beta1`).

use crate::registry::{Registry, ResourceInfo};
use serde_json::{json, Value};

/// `/api`.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_entry(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis`.
pub fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .map(|(g, v)| group_entry(g, v))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`.
pub fn api_group(reg: &Registry, group: &str) -> Option<Value> {
    let (g, v) = reg.groups().into_iter().find(|(g, _)| g == group)?;
    let mut e = group_entry(&g, &v);
    e["kind"] = json!("APIGroup");
    e["apiVersion"] = json!("v1");
    Some(e)
}

fn subresource_verbs(sub: &str) -> Vec<&'static str> {
    match sub {
        "finalize" => vec!["update"],
        _ => vec!["get", "patch", "update"],
    }
}

fn subresources(r: &ResourceInfo, version: &str) -> Vec<&'static str> {
    let mut subs = Vec::new();
    let status = match &r.crd {
        Some(c) => c.status_versions.get(version).copied().unwrap_or(false),
        None => r.status,
    };
    if status {
        subs.push("status");
    }
    if r.scale.is_some() {
        subs.push("scale");
    }
    if r.group.is_empty() && r.resource == "namespaces" {
        subs.push("finalize");
    }
    subs
}

/// `/api/v1` or `/apis/{group}/{version}`.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let rs = reg.in_group_version(group, version);
    if rs.is_empty() && !(group.is_empty() && version == "v1") {
        return None;
    }
    let mut resources = Vec::new();
    for r in rs {
        let mut e = json!({
            "name": r.resource,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
        });
        if !r.short_names.is_empty() {
            e["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            e["categories"] = json!(r.categories);
        }
        resources.push(e);
        for sub in subresources(&r, version) {
            let (kind, group_v, version_v) = if sub == "scale" {
                ("Scale", "autoscaling", "v1")
            } else {
                (r.kind.as_str(), "", "")
            };
            let mut e = json!({
                "name": format!("{}/{}", r.resource, sub),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": subresource_verbs(sub),
            });
            if !group_v.is_empty() {
                e["group"] = json!(group_v);
                e["version"] = json!(version_v);
            }
            resources.push(e);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn aggregated_resource(r: &ResourceInfo, version: &str) -> Value {
    let mut e = json!({
        "resource": r.resource,
        "responseKind": {"group": "", "version": "", "kind": r.kind},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        e["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        e["categories"] = json!(r.categories);
    }
    let subs: Vec<Value> = subresources(r, version)
        .into_iter()
        .map(|sub| {
            let kind = if sub == "scale" {
                json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
            } else {
                json!({"group": "", "version": "", "kind": r.kind})
            };
            json!({"subresource": sub, "responseKind": kind, "verbs": subresource_verbs(sub)})
        })
        .collect();
    if !subs.is_empty() {
        e["subresources"] = json!(subs);
    }
    e
}

/// Aggregated discovery for `/api` (core) or `/apis` (groups); `api_version` is
/// `apidiscovery.k8s.io/v2` or `apidiscovery.k8s.io/v2beta1`.
pub fn aggregated(reg: &Registry, core: bool, api_version: &str) -> Value {
    let groups: Vec<(String, Vec<String>)> = if core {
        vec![(String::new(), vec!["v1".to_string()])]
    } else {
        reg.groups()
    };
    let items: Vec<Value> = groups
        .iter()
        .map(|(g, versions)| {
            let vs: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = reg
                        .in_group_version(g, v)
                        .iter()
                        .map(|r| aggregated_resource(r, v))
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            let metadata = if g.is_empty() {
                json!({"creationTimestamp": null})
            } else {
                json!({"name": g, "creationTimestamp": null})
            };
            json!({"metadata": metadata, "versions": vs})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {}, "items": items})
}

/// Which aggregated-discovery version an `Accept` header asks for first, if any.
pub fn wants_aggregated(accept: &str) -> Option<&'static str> {
    for part in accept.split(',') {
        let p = part.replace(' ', "");
        if p.contains("as=APIGroupDiscoveryList") && p.contains("g=apidiscovery.k8s.io") {
            if p.contains("v=v2beta1") {
                return Some("v2beta1");
            }
            if p.contains("v=v2") {
                return Some("v2");
            }
        }
        if p.starts_with("application/json") && !p.contains("as=") {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        assert_eq!(
            wants_aggregated("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"),
            Some("v2")
        );
        assert_eq!(wants_aggregated("application/json, */*"), None);
    }

    #[test]
    fn core_list_has_status_subresources() {
        let reg = Registry::with_builtins();
        let l = resource_list(&reg, "", "v1").unwrap();
        let names: Vec<&str> = l["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"pods/status"));
        assert!(names.contains(&"namespaces/finalize"));
        let apps = resource_list(&reg, "apps", "v1").unwrap();
        assert!(apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "deployments/scale" && r["kind"] == "Scale"));
    }
}
