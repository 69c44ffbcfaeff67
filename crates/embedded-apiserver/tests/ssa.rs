//! Server-side apply and managedFields through kube-rs.

mod common;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// Applies Deployment `d` with `replicas` (image nginx) as `params` says (manager, force).
async fn apply_deploy(
    api: &Api<Deployment>,
    params: &PatchParams,
    replicas: i64,
) -> kube::Result<Deployment> {
    api.patch("d", params, &Patch::Apply(deploy(replicas, "nginx")))
        .await
}

fn deploy(replicas: i64, image: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": image}]}}}
    })
}

#[tokio::test]
async fn apply_conflicts_and_force() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
        let created = apply_deploy(&api, &PatchParams::apply("alice"), 1)
            .await
            .unwrap();
        let mf = created.metadata.managed_fields.clone().unwrap();
        assert_eq!(mf[0].manager.as_deref(), Some("alice"));
        assert_eq!(mf[0].operation.as_deref(), Some("Apply"));

        // Another manager changing alice's field conflicts.
        let e = apply_deploy(&api, &PatchParams::apply("bob"), 3)
            .await
            .unwrap_err();
        let kube::Error::Api(st) = e else {
            panic!("{e:?}")
        };
        assert_eq!((st.code, st.reason.as_str()), (409, "Conflict"));
        assert!(
            st.message
                .starts_with("Apply failed with 1 conflict: conflict with \"alice\""),
            "{}",
            st.message
        );
        assert!(st.message.contains(".spec.replicas"), "{}", st.message);

        // Force takes the field over.
        let forced = apply_deploy(&api, &PatchParams::apply("bob").force(), 3)
            .await
            .unwrap();
        assert_eq!(forced.spec.replicas, Some(3));
        assert_eq!(forced.metadata.generation, Some(2));
        let managers: Vec<String> = forced
            .metadata
            .managed_fields
            .unwrap()
            .into_iter()
            .filter_map(|m| m.manager)
            .collect();
        assert!(managers.contains(&"bob".to_string()), "{managers:?}");

        // Re-applying the same configuration is a no-op: no new resourceVersion.
        let again = apply_deploy(&api, &PatchParams::apply("bob").force(), 3)
            .await
            .unwrap();
        assert_eq!(
            again.metadata.resource_version,
            forced.metadata.resource_version
        );
    })
    .await;
}

#[tokio::test]
async fn apply_removes_fields_the_manager_stopped_applying() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let cfg = |data: serde_json::Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data});
        api.patch("c", &PatchParams::apply("me"), &Patch::Apply(cfg(json!({"a": "1", "b": "2"})))).await.unwrap();
        // Someone else adds a key with a plain update.
        api.patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"other": "x"}}))).await.unwrap();
        let after = api.patch("c", &PatchParams::apply("me"), &Patch::Apply(cfg(json!({"a": "1"})))).await.unwrap();
        let data = after.data.unwrap();
        assert!(!data.contains_key("b"), "field no longer applied is removed");
        assert_eq!(data["other"], "x", "fields of other managers stay");
        // Plain writes are recorded as Update entries.
        let created = api.create(&PostParams { field_manager: Some("creator".into()), ..Default::default() },
            &serde_json::from_value(json!({"metadata": {"name": "u"}, "data": {"k": "v"}})).unwrap()).await.unwrap();
        let mf = created.metadata.managed_fields.unwrap();
        assert_eq!((mf[0].manager.as_deref(), mf[0].operation.as_deref()), (Some("creator"), Some("Update")));
    })
    .await;
}

#[tokio::test]
async fn apply_without_field_manager_is_invalid() {
    let (_s, client) = start().await;
    let (status, body, _) = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x",
        &[("content-type", "application/apply-patch+yaml")],
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(
        body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    assert_eq!(body["details"]["kind"], "PatchOptions");
    assert_eq!(body["details"]["group"], "meta.k8s.io");
    assert_eq!(body["details"]["causes"][0]["field"], "fieldManager");
    assert_eq!(body["details"]["causes"][0]["reason"], "FieldValueRequired");
}

/// Re-applying a configuration whose values the server stores in another form (a quantity
/// `0.5` stored as `500m`, Secret `stringData` folded into `data`) changes nothing: the
/// field manager sees a change, the stored object does not, and kube-apiserver keeps the
/// object, its resourceVersion and its managedFields timestamps (measured on 1.28.7). The
/// recorded time is moved into the past first, so a re-recorded one would differ.
#[tokio::test]
async fn reapplying_values_the_server_normalizes_is_a_no_op() {
    let (_s, client) = start().await;
    within(20, async {
        let cases = [
            (
                "limitranges",
                json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "x"},
                    "spec": {"limits": [{"type": "Container", "default": {"cpu": "0.5"}}]}}),
            ),
            (
                "secrets",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"},
                    "stringData": {"a": "hello"}}),
            ),
        ];
        for (plural, config) in cases {
            let kind = config["kind"].as_str().unwrap().to_string();
            let api = dynamic(&client, "", "v1", &kind, plural, Some("default"));
            let pp = PatchParams::apply("t");
            let applied = api.patch("x", &pp, &Patch::Apply(&config)).await.unwrap();
            let mut past = serde_json::to_value(&applied).unwrap();
            for entry in past["metadata"]["managedFields"].as_array_mut().unwrap() {
                entry["time"] = json!("2020-01-01T00:00:00Z");
            }
            let before = api
                .replace("x", &PostParams::default(), &obj(past))
                .await
                .unwrap();
            let again = api.patch("x", &pp, &Patch::Apply(&config)).await.unwrap();
            assert_eq!(
                again.metadata.resource_version, before.metadata.resource_version,
                "{kind}: a repeated apply wrote the object"
            );
            assert_eq!(
                again.metadata.managed_fields,
                before.metadata.managed_fields
            );
        }
    })
    .await;
}
