//! What the hook-rollout binary tests share: the code ConfigMap they edit, the parents they
//! create in rollout order, and the version each parent's child was written by.
#![allow(dead_code)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use metacontroller_api::rollout::assign::ParentKey;
use metacontroller_testkit::create_object;
use serde_json::json;

/// Writes `text` as `sync.jsonnet` of the ConfigMap `code` (created when missing).
pub async fn set_code(api: &Api<ConfigMap>, text: &str) {
    let patch = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "code"},
        "data": {"sync.jsonnet": text}});
    api.patch(
        "code",
        &PatchParams::apply("test").force(),
        &Patch::Apply(&patch),
    )
    .await
    .expect("writing the code ConfigMap");
}

/// `(resourceVersion, version)` of each parent's child `<parent>-child`, by parent name.
pub async fn children(api: &Api<ConfigMap>) -> BTreeMap<String, (String, String)> {
    let list = api
        .list(&Default::default())
        .await
        .expect("listing children");
    list.items
        .into_iter()
        .filter_map(|cm| {
            let parent = cm
                .metadata
                .name
                .as_deref()?
                .strip_suffix("-child")?
                .to_string();
            let rv = cm.metadata.resource_version.clone().unwrap_or_default();
            let version = cm.data.as_ref()?.get("version")?.clone();
            Some((parent, (rv, version)))
        })
        .collect()
}

/// The version each parent's child was written by, by parent name.
pub async fn versions(api: &Api<ConfigMap>) -> BTreeMap<String, String> {
    children(api)
        .await
        .into_iter()
        .map(|(parent, (_, version))| (parent, version))
        .collect()
}

/// Creates parents `p00`… (`count` of them, of `api_version`/`kind`) in `ns`; returns their
/// rollout keys and names in the rollout's order (step 1 takes the first).
pub async fn create_parents(
    parents: &Api<DynamicObject>,
    (api_version, kind): (&str, &str),
    ns: &str,
    count: usize,
) -> Vec<(ParentKey, String)> {
    let mut keys = Vec::new();
    for i in 0..count {
        let name = format!("p{i:02}");
        let object = json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": ns}});
        let created = create_object(parents, object).await;
        let uid = created.metadata.uid.unwrap_or_default();
        keys.push((ParentKey::new(&uid, ns, &name), name));
    }
    keys.sort();
    keys
}
