//! Object semantics through kube-rs: CRUD, resourceVersion, generation,
//! selectors, pagination, errors, dry-run, finalizers.

mod common;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::Status as ErrorResponse;
use serde_json::json;

fn err_of(e: kube::Error) -> ErrorResponse {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected API error, got {other:?}"),
    }
}

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

/// A JSON patch (RFC 6902) of `ops`.
fn json_patch(ops: serde_json::Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(ops).unwrap())
}

/// Removes every finalizer of ConfigMap `name` (a merge patch).
async fn clear_finalizers(api: &Api<ConfigMap>, name: &str) {
    let patch = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    api.patch(name, &PatchParams::default(), &patch)
        .await
        .unwrap();
}

/// The object's resourceVersion as the number the embedded server makes it.
fn resource_version(object: &ConfigMap) -> u64 {
    let rv = object.metadata.resource_version.as_deref().unwrap();
    rv.parse().unwrap()
}

#[tokio::test]
async fn configmap_crud_and_optimistic_locking() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let created = api
            .create(&PostParams::default(), &cm("a", json!({"app": "x"})))
            .await
            .unwrap();
        let rv1 = resource_version(&created);
        assert!(created.metadata.uid.is_some());
        assert!(created.metadata.creation_timestamp.is_some());
        assert_eq!(
            created.metadata.generation, None,
            "configmaps have no generation"
        );

        let e = err_of(
            api.create(&PostParams::default(), &cm("a", json!({})))
                .await
                .unwrap_err(),
        );
        assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
        assert_eq!(e.message, "configmaps \"a\" already exists");

        let mut upd = created.clone();
        upd.data = Some([("k".to_string(), "w".to_string())].into());
        let updated = api
            .replace("a", &PostParams::default(), &upd)
            .await
            .unwrap();
        let rv2 = resource_version(&updated);
        assert!(rv2 > rv1);
        // Stale resourceVersion -> 409 Conflict.
        let e = err_of(
            api.replace("a", &PostParams::default(), &upd)
                .await
                .unwrap_err(),
        );
        assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
        assert!(
            e.message.contains("the object has been modified"),
            "{}",
            e.message
        );

        // A no-op update does not change the resourceVersion.
        let same = api
            .replace("a", &PostParams::default(), &updated)
            .await
            .unwrap();
        assert_eq!(
            same.metadata.resource_version,
            updated.metadata.resource_version
        );

        let patched = api
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"m": "1"}})),
            )
            .await
            .unwrap();
        assert_eq!(patched.data.as_ref().unwrap()["m"], "1");
        let patched = api
            .patch(
                "a",
                &PatchParams::default(),
                &json_patch(json!([{"op": "replace", "path": "/data/m", "value": "2"}])),
            )
            .await
            .unwrap();
        assert_eq!(patched.data.as_ref().unwrap()["m"], "2");
        let e = err_of(
            api.patch(
                "a",
                &PatchParams::default(),
                &json_patch(json!([{"op": "test", "path": "/data/m", "value": "9"}])),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(e.code, 422);

        api.delete("a", &DeleteParams::default()).await.unwrap();
        let e = err_of(api.get("a").await.unwrap_err());
        assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
        assert_eq!(e.message, "configmaps \"a\" not found");
    })
    .await;
}

#[tokio::test]
async fn names_namespaces_and_generate_name() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let e = err_of(api.create(&PostParams::default(), &cm("Bad_Name", json!({}))).await.unwrap_err());
        assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
        assert!(e.message.starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"), "{}", e.message);

        let mut g = cm("", json!({}));
        g.metadata.name = None;
        g.metadata.generate_name = Some("gen-".into());
        let made = api.create(&PostParams::default(), &g).await.unwrap();
        let name = made.metadata.name.unwrap();
        assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

        let missing: Api<ConfigMap> = Api::namespaced(client.clone(), "nope");
        let e = err_of(missing.create(&PostParams::default(), &cm("x", json!({}))).await.unwrap_err());
        assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
        assert_eq!(e.message, "namespaces \"nope\" not found");

        let nss: Api<Namespace> = Api::all(client.clone());
        nss.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "fresh"}})).unwrap()).await.unwrap();
        let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), "fresh");
        eventually(5, || async { sas.get_opt("default").await.unwrap().is_some() }).await;
        let ns = nss.get("default").await.unwrap();
        assert_eq!(ns.metadata.labels.unwrap()["kubernetes.io/metadata.name"], "default");
        assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    })
    .await;
}

#[tokio::test]
async fn selectors_and_pagination() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        for (i, tier) in ["web", "web", "db", "cache", "web"].iter().enumerate() {
            api.create(
                &PostParams::default(),
                &cm(&format!("c{i}"), json!({"tier": tier, "i": i.to_string()})),
            )
            .await
            .unwrap();
        }
        let names = |l: kube::core::ObjectList<ConfigMap>| {
            l.items
                .into_iter()
                .map(|c| c.metadata.name.unwrap())
                .collect::<Vec<_>>()
        };
        for (params, want) in [
            (
                ListParams::default().labels("tier=web"),
                &["c0", "c1", "c4"][..],
            ),
            (
                ListParams::default().labels("tier in (db,cache)"),
                &["c2", "c3"],
            ),
            (
                ListParams::default().labels("tier notin (web),i!=3"),
                &["c2"],
            ),
            (ListParams::default().fields("metadata.name=c3"), &["c3"]),
        ] {
            assert_eq!(names(api.list(&params).await.unwrap()), want, "{params:?}");
        }
        let e = err_of(
            api.list(&ListParams::default().fields("spec.x=1"))
                .await
                .unwrap_err(),
        );
        assert_eq!(e.code, 400);

        let page1 = api.list(&ListParams::default().limit(2)).await.unwrap();
        assert_eq!(names(page1.clone()), ["c0", "c1"]);
        assert_eq!(page1.metadata.remaining_item_count, Some(3));
        let token = page1.metadata.continue_.clone().unwrap();
        let page2 = api
            .list(&ListParams::default().limit(2).continue_token(&token))
            .await
            .unwrap();
        assert_eq!(names(page2.clone()), ["c2", "c3"]);
        let page3 = api
            .list(
                &ListParams::default()
                    .limit(2)
                    .continue_token(page2.metadata.continue_.as_ref().unwrap()),
            )
            .await
            .unwrap();
        assert_eq!(names(page3.clone()), ["c4"]);
        assert!(page3.metadata.continue_.as_deref().unwrap_or("").is_empty());
    })
    .await;
}

#[tokio::test]
async fn generation_and_status_subresource_on_deployments() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "d"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                     "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
            "status": {"replicas": 7}
        }))
        .unwrap();
        let created = api.create(&PostParams::default(), &d).await.unwrap();
        assert_eq!(created.metadata.generation, Some(1));
        assert_eq!(created.status.as_ref().and_then(|s| s.replicas), None, "status is reset on create");

        // Metadata-only change: generation stays.
        let p = api.patch("d", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}))).await.unwrap();
        assert_eq!(p.metadata.generation, Some(1));
        // Status through the main resource is ignored.
        let p = api.patch("d", &PatchParams::default(), &Patch::Merge(json!({"status": {"replicas": 3}}))).await.unwrap();
        assert_eq!(p.status.as_ref().and_then(|s| s.replicas), None);
        // Status subresource: status changes, generation does not.
        let p = api.patch_status("d", &PatchParams::default(), &Patch::Merge(json!({"status": {"replicas": 3}, "spec": {"replicas": 9}}))).await.unwrap();
        assert_eq!(p.status.as_ref().and_then(|s| s.replicas), Some(3));
        assert_eq!(p.spec.replicas, Some(1));
        assert_eq!(p.metadata.generation, Some(1));
        // Spec change bumps generation.
        let p = api.patch("d", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 2}}))).await.unwrap();
        assert_eq!(p.metadata.generation, Some(2));
        // Scale subresource.
        let sc = api.get_scale("d").await.unwrap();
        assert_eq!(sc.spec.unwrap().replicas, Some(2));
        assert_eq!(sc.status.unwrap().selector.as_deref(), Some("app=d"));
        api.patch_scale("d", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await.unwrap();
        let p = api.get("d").await.unwrap();
        assert_eq!(p.spec.replicas, Some(5));
        assert_eq!(p.metadata.generation, Some(3));
    })
    .await;
}

#[tokio::test]
async fn secrets_string_data_and_dry_run() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<Secret> = Api::namespaced(client.clone(), "default");
        let s: Secret = serde_json::from_value(
            json!({"metadata": {"name": "s"}, "stringData": {"user": "admin"}}),
        )
        .unwrap();
        let dry = api
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &s,
            )
            .await
            .unwrap();
        assert_eq!(dry.type_.as_deref(), Some("Opaque"));
        assert!(
            api.get_opt("s").await.unwrap().is_none(),
            "dry run stores nothing"
        );
        let created = api.create(&PostParams::default(), &s).await.unwrap();
        assert_eq!(created.string_data, None);
        assert_eq!(created.data.unwrap()["user"].0, b"admin".to_vec());
        api.delete(
            "s",
            &DeleteParams {
                dry_run: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert!(
            api.get_opt("s").await.unwrap().is_some(),
            "dry-run delete keeps the object"
        );
    })
    .await;
}

#[tokio::test]
async fn finalizers_hold_deletion() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let mut c = cm("f", json!({}));
        c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        api.create(&PostParams::default(), &c).await.unwrap();
        let res = api.delete("f", &DeleteParams::default()).await.unwrap();
        let pending = res.left().expect("object returned while finalizers remain");
        assert!(pending.metadata.deletion_timestamp.is_some());
        assert_eq!(pending.metadata.deletion_grace_period_seconds, Some(0));
        // New finalizers cannot be added now.
        let e = err_of(
            api.patch(
                "f",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
                ),
            )
            .await
            .unwrap_err(),
        );
        assert_eq!(e.code, 422);
        assert!(
            e.message
                .contains("no new finalizers can be added if the object is being deleted"),
            "{}",
            e.message
        );
        // Removing the last finalizer deletes it.
        clear_finalizers(&api, "f").await;
        assert!(api.get_opt("f").await.unwrap().is_none());
    })
    .await;
}

#[tokio::test]
async fn delete_preconditions() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        api.create(&PostParams::default(), &cm("p", json!({})))
            .await
            .unwrap();
        let dp = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some("wrong".into()),
                resource_version: None,
            }),
            ..Default::default()
        };
        let e = err_of(api.delete("p", &dp).await.unwrap_err());
        assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
        assert!(
            e.message
                .contains("Precondition failed: UID in precondition: wrong"),
            "{}",
            e.message
        );
        let res = api.delete("p", &DeleteParams::default()).await.unwrap();
        let status = res.right().expect("Status for an immediate delete");
        assert_eq!(status.details.unwrap().name, "p");
    })
    .await;
}

#[tokio::test]
async fn namespace_deletion_removes_contents() {
    let (_s, client) = start().await;
    within(20, async {
        let nss: Api<Namespace> = Api::all(client.clone());
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "tmp"}})).unwrap(),
        )
        .await
        .unwrap();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "tmp");
        let mut held = cm("held", json!({}));
        held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        api.create(&PostParams::default(), &held).await.unwrap();
        api.create(&PostParams::default(), &cm("free", json!({})))
            .await
            .unwrap();
        nss.delete("tmp", &DeleteParams::default()).await.unwrap();
        let ns = nss.get("tmp").await.unwrap();
        assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
        let e = err_of(
            api.create(&PostParams::default(), &cm("late", json!({})))
                .await
                .unwrap_err(),
        );
        assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
        eventually(5, || async { api.get_opt("free").await.unwrap().is_none() }).await;
        // The namespace waits for the finalizer of its last object.
        assert!(nss.get_opt("tmp").await.unwrap().is_some());
        clear_finalizers(&api, "held").await;
        eventually(5, || async { nss.get_opt("tmp").await.unwrap().is_none() }).await;
    })
    .await;
}

#[tokio::test]
async fn services_get_defaults_and_a_cluster_ip() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), "default");
        let svc = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})).unwrap();
        let created = api.create(&PostParams::default(), &svc).await.unwrap();
        let spec = created.spec.clone().unwrap();
        let ip = spec.cluster_ip.clone().unwrap();
        assert!(ip.starts_with("10.9"), "{ip}");
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec.ports.as_ref().unwrap()[0].protocol.as_deref(), Some("TCP"));
        // An update that omits the allocated address keeps it.
        let replaced = api
            .patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"clusterIP": null, "clusterIPs": null}})))
            .await
            .unwrap();
        assert_eq!(replaced.spec.unwrap().cluster_ip, Some(ip));
    })
    .await;
}

#[tokio::test]
async fn unknown_fields_of_built_in_kinds_follow_field_validation() {
    let (_s, client) = start().await;
    within(20, async {
        let body = |name: &str| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                "spec": {"replicas": 1, "replica": 2, "selector": {"matchLabels": {"a": "b"}},
                    "template": {"metadata": {"labels": {"a": "b"}},
                        "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicyy": "Always"}]}}}})
        };
        let url = "/apis/apps/v1/namespaces/default/deployments";
        let ct = [("content-type", "application/json")];
        let (code, body_s, _) = raw(&client, "POST", &format!("{url}?fieldValidation=Strict"), &ct, Some(body("strict"))).await;
        assert_eq!(code, 400, "{body_s}");
        assert_eq!(body_s["reason"], "BadRequest");
        let msg = body_s["message"].as_str().unwrap();
        assert!(msg.contains("strict decoding error"), "{msg}");
        assert!(msg.contains("unknown field \"spec.replica\""), "{msg}");
        assert!(msg.contains("unknown field \"spec.template.spec.containers[0].imagePullPolicyy\""), "{msg}");

        // Warn (the default): created without the fields, one Warning each.
        let (code, created, headers) = raw(&client, "POST", url, &ct, Some(body("warn"))).await;
        assert_eq!(code, 201, "{created}");
        let warnings: Vec<_> = headers.get_all("warning").iter().map(|h| h.to_str().unwrap().to_string()).collect();
        assert!(warnings.iter().any(|w| w.contains("spec.replica")), "{warnings:?}");
        assert!(created["spec"].get("replica").is_none(), "{created}");
        assert!(created["spec"]["template"]["spec"]["containers"][0].get("imagePullPolicyy").is_none());
        assert_eq!(created["spec"]["replicas"], 1);

        // Ignore: created silently.
        let (code, _, headers) = raw(&client, "POST", &format!("{url}?fieldValidation=Ignore"), &ct, Some(body("ignore"))).await;
        assert_eq!(code, 201);
        assert!(headers.get("warning").is_none());

        // Updates go through the same decode.
        let mut update = created.clone();
        update["spec"]["bogus"] = json!(true);
        let (code, updated, _) = raw(&client, "PUT", &format!("{url}/warn"), &ct, Some(update)).await;
        assert_eq!(code, 200, "{updated}");
        assert!(updated["spec"].get("bogus").is_none());
    })
    .await;
}
