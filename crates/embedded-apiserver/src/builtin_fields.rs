//! Unknown fields of built-in kinds. kube-apiserver decodes a built-in object into its Go
//! struct, so a field the struct lacks never reaches storage; with `fieldValidation=Strict`
//! (kubectl's default) the request fails naming the field, with `Warn` it is dropped with a
//! `Warning` header. The typed structs of `k8s-openapi` stand in for the Go structs here: the
//! object is decoded with `serde_ignored`, which reports every field the type skipped.
//!
//! Only unknown fields are taken from the typed decode; the stored JSON is otherwise left as
//! sent. When the typed decode fails (a value of the wrong type), no unknown fields are
//! reported, so a difference between the Rust and Go decoders never refuses a valid object.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// One step of a path into an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

/// Paths of the fields in `obj` that the built-in type of `group`/`resource` does not have,
/// in document order. Empty for custom resources and unknown types.
pub(crate) fn unknown_fields(group: &str, resource: &str, obj: &Value) -> Vec<Vec<Segment>> {
    use k8s_openapi::api::{
        apps, autoscaling, batch, coordination, core, discovery, events, networking, policy, rbac,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    match (group, resource) {
        ("", "namespaces") => ignored::<core::v1::Namespace>(obj),
        ("", "configmaps") => ignored::<core::v1::ConfigMap>(obj),
        ("", "secrets") => ignored::<core::v1::Secret>(obj),
        ("", "limitranges") => ignored::<core::v1::LimitRange>(obj),
        ("", "resourcequotas") => ignored::<core::v1::ResourceQuota>(obj),
        ("autoscaling", "horizontalpodautoscalers") => {
            ignored::<autoscaling::v2::HorizontalPodAutoscaler>(obj)
        }
        ("", "services") => ignored::<core::v1::Service>(obj),
        ("", "pods") => ignored::<core::v1::Pod>(obj),
        ("", "persistentvolumeclaims") => ignored::<core::v1::PersistentVolumeClaim>(obj),
        ("networking.k8s.io", "ingresses") => ignored::<networking::v1::Ingress>(obj),
        ("networking.k8s.io", "networkpolicies") => ignored::<networking::v1::NetworkPolicy>(obj),
        ("", "serviceaccounts") => ignored::<core::v1::ServiceAccount>(obj),
        ("", "nodes") => ignored::<core::v1::Node>(obj),
        ("discovery.k8s.io", "endpointslices") => ignored::<discovery::v1::EndpointSlice>(obj),
        ("", "events") => ignored::<core::v1::Event>(obj),
        ("events.k8s.io", "events") => ignored::<events::v1::Event>(obj),
        ("coordination.k8s.io", "leases") => ignored::<coordination::v1::Lease>(obj),
        ("apps", "deployments") => ignored::<apps::v1::Deployment>(obj),
        ("apps", "replicasets") => ignored::<apps::v1::ReplicaSet>(obj),
        ("apps", "statefulsets") => ignored::<apps::v1::StatefulSet>(obj),
        ("apps", "daemonsets") => ignored::<apps::v1::DaemonSet>(obj),
        ("apps", "controllerrevisions") => ignored::<apps::v1::ControllerRevision>(obj),
        ("policy", "poddisruptionbudgets") => ignored::<policy::v1::PodDisruptionBudget>(obj),
        ("batch", "jobs") => ignored::<batch::v1::Job>(obj),
        ("batch", "cronjobs") => ignored::<batch::v1::CronJob>(obj),
        ("rbac.authorization.k8s.io", "roles") => ignored::<rbac::v1::Role>(obj),
        ("rbac.authorization.k8s.io", "rolebindings") => ignored::<rbac::v1::RoleBinding>(obj),
        ("rbac.authorization.k8s.io", "clusterroles") => ignored::<rbac::v1::ClusterRole>(obj),
        ("rbac.authorization.k8s.io", "clusterrolebindings") => {
            ignored::<rbac::v1::ClusterRoleBinding>(obj)
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            ignored::<apiextensions::CustomResourceDefinition>(obj)
        }
        _ => Vec::new(),
    }
}

fn ignored<T: DeserializeOwned>(obj: &Value) -> Vec<Vec<Segment>> {
    let mut found = Vec::new();
    let decoded: Result<T, _> = serde_ignored::deserialize(obj, |path| {
        let mut segments = Vec::new();
        collect(&path, &mut segments);
        found.push(segments);
    });
    match decoded {
        Ok(_) => found,
        Err(_) => Vec::new(),
    }
}

fn collect(path: &serde_ignored::Path<'_>, out: &mut Vec<Segment>) {
    use serde_ignored::Path;
    match path {
        Path::Root => {}
        Path::Seq { parent, index } => {
            collect(parent, out);
            out.push(Segment::Index(*index));
        }
        Path::Map { parent, key } => {
            collect(parent, out);
            out.push(Segment::Key(key.clone()));
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => collect(parent, out),
    }
}

/// The path as kube-apiserver prints it in `unknown field "<path>"`: keys joined by dots,
/// list indices in brackets (`spec.template.spec.containers[0].foo`).
pub(crate) fn render(path: &[Segment]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Segment::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Segment::Index(i) => {
                s.push('[');
                s.push_str(&i.to_string());
                s.push(']');
            }
        }
    }
    s
}

/// Removes the field at `path` from `obj` (nothing when it is not there).
pub(crate) fn remove(obj: &mut Value, path: &[Segment]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for seg in parents {
        let next = match (seg, cur) {
            (Segment::Key(k), Value::Object(m)) => m.get_mut(k),
            (Segment::Index(i), Value::Array(a)) => a.get_mut(*i),
            _ => None,
        };
        match next {
            Some(v) => cur = v,
            None => return,
        }
    }
    if let (Segment::Key(k), Value::Object(m)) = (last, cur) {
        m.remove(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rendered(group: &str, resource: &str, obj: &Value) -> Vec<String> {
        unknown_fields(group, resource, obj)
            .iter()
            .map(|p| render(p))
            .collect()
    }

    #[test]
    fn unknown_fields_of_a_deployment_are_found_with_kube_paths() {
        let obj = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "bogus": 1},
            "spec": {"replicas": 1, "replica": 2,
                "selector": {"matchLabels": {"a": "b"}},
                "template": {"metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [
                        {"name": "c", "image": "i"},
                        {"name": "d", "image": "i", "imagePullPolicyy": "Always"}]}}}
        });
        assert_eq!(
            rendered("apps", "deployments", &obj),
            vec![
                "metadata.bogus",
                "spec.replica",
                "spec.template.spec.containers[1].imagePullPolicyy"
            ]
        );
    }

    #[test]
    fn known_objects_report_nothing() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"any-key": "x"}}, "data": {"k": "v"}});
        assert!(rendered("", "configmaps", &cm).is_empty());
        // Custom resources are the schema's business, not this module's.
        assert!(rendered("example.com", "widgets", &json!({"x": 1})).is_empty());
    }

    #[test]
    fn quantities_as_numbers_decode_and_undecodable_objects_report_nothing() {
        // Go accepts a quantity written as a number; so does the typed decode.
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"cpu": 1}}, "typo": true}]}});
        assert_eq!(rendered("", "pods", &pod), vec!["spec.containers[0].typo"]);
        // A value of the wrong type: no unknown-field verdict (the object is not decodable).
        let bad = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": "nope", "typo": true}});
        assert!(rendered("", "pods", &bad).is_empty());
    }

    #[test]
    fn remove_drops_exactly_the_path() {
        let mut obj = json!({"spec": {"a": [{"x": 1, "y": 2}], "b": 1}});
        remove(
            &mut obj,
            &[
                Segment::Key("spec".into()),
                Segment::Key("a".into()),
                Segment::Index(0),
                Segment::Key("y".into()),
            ],
        );
        remove(
            &mut obj,
            &[Segment::Key("missing".into()), Segment::Key("z".into())],
        );
        assert_eq!(obj, json!({"spec": {"a": [{"x": 1}], "b": 1}}));
    }
}
