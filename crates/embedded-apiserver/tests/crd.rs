//! CustomResourceDefinitions: serving, versions, schema pruning/defaulting/validation,
//! subresources, scopes and deletion.

mod common;

use common::*;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn crd(scope: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer"},
                        "replicas": {"type": "integer"},
                        "color": {"type": "string", "default": "blue"},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    "status": {"type": "object", "properties": {"replicas": {"type": "integer"}, "phase": {"type": "string"}}}}}}},
                {"name": "v2", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
            ]
        }
    }))
    .unwrap()
}

async fn install(client: &kube::Client, scope: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let created = crds
        .create(&PostParams::default(), &crd(scope))
        .await
        .unwrap();
    let conds = created.status.unwrap().conditions.unwrap();
    assert!(conds
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True"));
    assert!(conds
        .iter()
        .any(|c| c.type_ == "NamesAccepted" && c.status == "True"));
}

#[tokio::test]
async fn crd_serves_versions_and_applies_its_schema() {
    let (_s, client) = start().await;
    within(20, async {
        install(&client, "Namespaced").await;
        let api = dynamic(&client, "example.com", "v1", "Widget", "widgets", Some("default"));
        let w = obj(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                           "spec": {"size": 1, "bogus": true, "free": {"anything": 1}}, "status": {"phase": "x"}}));
        let created = api.create(&PostParams::default(), &w).await.unwrap();
        assert_eq!(created.data["spec"], json!({"size": 1, "color": "blue", "free": {"anything": 1}}), "pruned and defaulted");
        assert!(created.data.get("status").is_none(), "status is dropped on create with a status subresource");
        assert_eq!(created.metadata.generation, Some(1));

        // Served at v2 as well (None conversion rewrites apiVersion).
        let v2 = dynamic(&client, "example.com", "v2", "Widget", "widgets", Some("default"));
        let got = v2.get("w").await.unwrap();
        assert_eq!(got.types.unwrap().api_version, "example.com/v2");

        // Validation: wrong type and missing required field -> 422 with field paths.
        let bad = obj(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "bad"}, "spec": {"size": "big"}}));
        let e = api.create(&PostParams::default(), &bad).await.unwrap_err();
        let kube::Error::Api(s) = e else { panic!("{e:?}") };
        assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
        assert!(s.message.starts_with("Widget.example.com \"bad\" is invalid: spec.size: Invalid value: \"string\""), "{}", s.message);
        let bad = obj(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "bad"}, "spec": {}}));
        let kube::Error::Api(s) = api.create(&PostParams::default(), &bad).await.unwrap_err() else { panic!() };
        assert!(s.message.contains("spec.size: Required value"), "{}", s.message);

        // Strict field validation names the unknown field.
        let (code, body, _) = raw(&client, "POST", "/apis/example.com/v1/namespaces/default/widgets?fieldValidation=Strict", &[("content-type", "application/json")],
            Some(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "strict"}, "spec": {"size": 1, "nope": 1}}))).await;
        assert_eq!(code, 400);
        assert!(body["message"].as_str().unwrap().contains("unknown field \"spec.nope\""), "{body}");
        // Warn puts it in a Warning header.
        let (code, _, headers) = raw(&client, "POST", "/apis/example.com/v1/namespaces/default/widgets?fieldValidation=Warn", &[("content-type", "application/json")],
            Some(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "warn"}, "spec": {"size": 1, "nope": 1}}))).await;
        assert_eq!(code, 201);
        assert!(headers.get("warning").unwrap().to_str().unwrap().contains("unknown field \\\"spec.nope\\\"") || headers.get("warning").unwrap().to_str().unwrap().contains("unknown field"));

        // Strategic merge patch is refused for custom resources.
        let (code, body, _) = raw(&client, "PATCH", "/apis/example.com/v1/namespaces/default/widgets/w", &[("content-type", "application/strategic-merge-patch+json")], Some(json!({"spec": {"size": 2}}))).await;
        assert_eq!((code, body["reason"].as_str()), (415, Some("UnsupportedMediaType")));
    })
    .await;
}

#[tokio::test]
async fn crd_status_and_scale_subresources() {
    let (_s, client) = start().await;
    within(20, async {
        install(&client, "Namespaced").await;
        let api = dynamic(&client, "example.com", "v1", "Widget", "widgets", Some("default"));
        api.create(&PostParams::default(), &obj(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1, "replicas": 1}}))).await.unwrap();
        let s = api.patch_status("w", &PatchParams::default(), &Patch::Merge(json!({"status": {"replicas": 1, "phase": "Ready"}, "spec": {"size": 9}}))).await.unwrap();
        assert_eq!(s.data["status"]["phase"], "Ready");
        assert_eq!(s.data["spec"]["size"], 1, "status writes ignore spec");
        assert_eq!(s.metadata.generation, Some(1));
        let m = api.patch("w", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Lost"}, "spec": {"size": 2}}))).await.unwrap();
        assert_eq!(m.data["status"]["phase"], "Ready", "main writes ignore status");
        assert_eq!(m.metadata.generation, Some(2));
        let scale = api.get_scale("w").await.unwrap();
        assert_eq!(scale.spec.unwrap().replicas, Some(1));
        api.patch_scale("w", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}}))).await.unwrap();
        assert_eq!(api.get("w").await.unwrap().data["spec"]["replicas"], 4);
    })
    .await;
}

#[tokio::test]
async fn cluster_scoped_crd_and_crd_deletion() {
    let (s, client) = start().await;
    within(20, async {
        install(&client, "Cluster").await;
        let api = dynamic(&client, "example.com", "v1", "Widget", "widgets", None);
        api.create(&PostParams::default(), &obj(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "c"}, "spec": {"size": 1}}))).await.unwrap();
        let (code, _, _) = raw(&client, "GET", "/apis/example.com/v1/widgets/c", &[], None).await;
        assert_eq!(code, 200);
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.delete("widgets.example.com", &DeleteParams::default()).await.unwrap();
        eventually(5, || async { crds.get_opt("widgets.example.com").await.unwrap().is_none() }).await;
        let (code, _, _) = raw(&client, "GET", "/apis/example.com/v1/widgets", &[], None).await;
        assert_eq!(code, 404, "resource no longer served");
        let (code, _, _) = raw(&client, "GET", "/apis/example.com", &[], None).await;
        assert_eq!(code, 404);
        assert!(s.control().history().iter().any(|h| h.resource == "widgets" && h.event_type == "DELETED"), "objects were deleted with events");
    })
    .await;
}

#[tokio::test]
async fn openapi_v3_carries_crd_schemas_and_builtin_list_semantics() {
    let (_s, client) = start().await;
    within(20, async {
        install(&client, "Namespaced").await;
        let (code, index, _) = raw(&client, "GET", "/openapi/v3", &[], None).await;
        assert_eq!(code, 200);
        let url = index["paths"]["apis/example.com/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .to_string();
        let (code, doc, _) = raw(&client, "GET", &url, &[], None).await;
        assert_eq!(code, 200);
        let widget = &doc["components"]["schemas"]["com.example.v1.Widget"];
        assert_eq!(
            widget["x-kubernetes-group-version-kind"],
            json!([{"group": "example.com", "version": "v1", "kind": "Widget"}])
        );
        assert_eq!(widget["properties"]["spec"]["properties"]["color"]["default"], "blue");
        // A CRD update changes the document and its hash in the index.
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let patch = json!({"spec": {"versions": [
            {"name": "v1", "served": true, "storage": true,
             "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                 "type": "object", "properties": {"size": {"type": "integer"},
                 "tags": {"type": "array", "items": {"type": "string"},
                          "x-kubernetes-list-type": "set"}}}}}}},
            {"name": "v2", "served": true, "storage": false,
             "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
        crds.patch("widgets.example.com", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let (_, index2, _) = raw(&client, "GET", "/openapi/v3", &[], None).await;
        assert_ne!(index2["paths"]["apis/example.com/v1"]["serverRelativeURL"], json!(url));
        let (_, doc, _) = raw(&client, "GET", "/openapi/v3/apis/example.com/v1", &[], None).await;
        assert_eq!(
            doc["components"]["schemas"]["com.example.v1.Widget"]["properties"]["spec"]
                ["properties"]["tags"]["x-kubernetes-list-type"],
            "set"
        );

        // Built-in kinds: Kubernetes' list types and map keys.
        let (code, apps, _) = raw(&client, "GET", "/openapi/v3/apis/apps/v1", &[], None).await;
        assert_eq!(code, 200);
        let schemas = &apps["components"]["schemas"];
        assert_eq!(
            schemas["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"][0]["kind"],
            "Deployment"
        );
        let container = &schemas["io.k8s.api.core.v1.Container"]["properties"];
        assert_eq!(container["ports"]["x-kubernetes-list-map-keys"], json!(["containerPort", "protocol"]));
        assert_eq!(container["args"]["x-kubernetes-list-type"], "atomic");
        let (_, core, _) = raw(&client, "GET", "/openapi/v3/api/v1", &[], None).await;
        assert_eq!(
            core["components"]["schemas"]["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"]
                ["x-kubernetes-list-map-keys"],
            json!(["port", "protocol"])
        );
    })
    .await;
}
