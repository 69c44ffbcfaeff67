//! Discovery, version, health, tables, auth and the test-control handle.

mod common;

use common::*;
use embedded_apiserver::{Config, Fault};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn version_health_and_discovery() {
    let (_s, client) = start().await;
    within(20, async {
        let v = client.apiserver_version().await.unwrap();
        assert_eq!(
            (v.major.as_str(), v.minor.as_str(), v.git_version.as_str()),
            ("1", "32", "v1.32.4")
        );
        for p in ["/healthz", "/readyz", "/livez"] {
            let (code, body, _) = raw(&client, "GET", p, &[], None).await;
            assert_eq!((code, body.as_str()), (200, Some("ok")));
        }
        let (_, api, _) = raw(&client, "GET", "/api", &[], None).await;
        assert_eq!(api["versions"], json!(["v1"]));
        let (_, core, _) = raw(&client, "GET", "/api/v1", &[], None).await;
        let pods = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods")
            .unwrap();
        assert_eq!(pods["kind"], "Pod");
        assert_eq!(pods["namespaced"], true);
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        let (_, apps, _) = raw(&client, "GET", "/apis/apps", &[], None).await;
        assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");
        // Aggregated discovery.
        let accept =
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
        let (code, agg, headers) = raw(&client, "GET", "/apis", &[("accept", accept)], None).await;
        assert_eq!(code, 200);
        assert_eq!(
            headers["content-type"],
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
        assert_eq!(agg["kind"], "APIGroupDiscoveryList");
        let apps = agg["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "apps")
            .unwrap();
        let deploy = apps["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "deployments")
            .unwrap();
        assert_eq!(deploy["scope"], "Namespaced");
        let subs: Vec<&str> = deploy["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["subresource"].as_str().unwrap())
            .collect();
        assert_eq!(subs, ["status", "scale"]);
        // kube-rs discovery agrees.
        let d = kube::Discovery::new(client.clone()).run().await.unwrap();
        assert!(d.groups().any(|g| g.name() == "rbac.authorization.k8s.io"));
        let (code, body, _) = raw(
            &client,
            "GET",
            "/apis/nope.example.com/v1/things",
            &[],
            None,
        )
        .await;
        assert_eq!((code, body["reason"].as_str()), (404, Some("NotFound")));
    })
    .await;
}

#[tokio::test]
async fn tables_for_kubectl_get() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "t"}})).unwrap(),
        )
        .await
        .unwrap();
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
        let (code, t, _) = raw(
            &client,
            "GET",
            "/api/v1/namespaces/default/configmaps",
            &[("accept", accept)],
            None,
        )
        .await;
        assert_eq!(code, 200);
        assert_eq!(t["kind"], "Table");
        let cols: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(cols, ["Name", "Data", "Age"]);
        assert_eq!(t["rows"][0]["cells"][0], "t");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    })
    .await;
}

#[tokio::test]
async fn bearer_token_auth() {
    let (s, anonymous) = start_with(Config {
        token: Some("s3cret".into()),
        ..Default::default()
    })
    .await;
    within(20, async {
        let (code, body, _) = raw(&anonymous, "GET", "/api/v1/namespaces", &[], None).await;
        assert_eq!((code, body["reason"].as_str()), (401, Some("Unauthorized")));
        let (code, _, _) = raw(&anonymous, "GET", "/version", &[], None).await;
        assert_eq!(code, 200);
        let authed = client_for(&s, Some("s3cret"));
        let api: Api<ConfigMap> = Api::namespaced(authed, "default");
        api.list(&ListParams::default()).await.unwrap();
        assert!(s.kubeconfig_yaml().contains("token: s3cret"));
    })
    .await;
}

#[tokio::test]
async fn control_counts_requests_and_injects_faults() {
    let (s, client) = start().await;
    within(20, async {
        let c = s.control();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        c.reset_counts();
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap(),
        )
        .await
        .unwrap();
        api.get("x").await.unwrap();
        api.list(&ListParams::default()).await.unwrap();
        assert_eq!(c.requests("create", "configmaps"), 1);
        assert_eq!(c.requests("get", "configmaps"), 1);
        assert_eq!(c.requests("list", "*"), 1);
        assert_eq!(c.writes(), 1);

        c.inject(Fault::status(Some("get"), Some("configmaps"), 2, 409));
        for _ in 0..2 {
            let kube::Error::Api(st) = api.get("x").await.unwrap_err() else {
                panic!()
            };
            assert_eq!(st.code, 409);
        }
        api.get("x").await.unwrap();

        c.inject(Fault::latency(
            None,
            Some("configmaps"),
            1,
            Duration::from_millis(300),
        ));
        let t = std::time::Instant::now();
        api.get("x").await.unwrap();
        assert!(t.elapsed() >= Duration::from_millis(300));

        let before = c.resource_version();
        api.delete("x", &DeleteParams::default()).await.unwrap();
        let h = c.history();
        let last = h.last().unwrap();
        assert_eq!((last.event_type, last.name.as_str()), ("DELETED", "x"));
        assert!(last.resource_version > before);
    })
    .await;
}

#[tokio::test]
async fn deletecollection_and_events() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        for (n, l) in [("a", "x"), ("b", "x"), ("c", "y")] {
            api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": n, "labels": {"l": l}}})).unwrap()).await.unwrap();
        }
        api.delete_collection(&DeleteParams::default(), &ListParams::default().labels("l=x")).await.unwrap();
        let left: Vec<String> = api.list(&ListParams::default()).await.unwrap().items.into_iter().map(|c| c.metadata.name.unwrap()).collect();
        assert_eq!(left, ["c"]);
        let ev = dynamic(&client, "events.k8s.io", "v1", "Event", "events", Some("default"));
        ev.create(&PostParams::default(), &obj(json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "x", "reportingInstance": "y", "action": "A", "reason": "R", "type": "Normal"}))).await.unwrap();
        let core = dynamic(&client, "", "v1", "Event", "events", Some("default"));
        core.create(&PostParams::default(), &obj(json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e2"},
            "involvedObject": {"kind": "ConfigMap", "name": "c", "namespace": "default"}, "reason": "R", "message": "m", "type": "Normal"}))).await.unwrap();
        let by_field = core.list(&ListParams::default().fields("involvedObject.name=c")).await.unwrap();
        assert_eq!(by_field.items.len(), 1);
    })
    .await;
}

#[tokio::test]
async fn leases_can_be_created_with_put() {
    let (_s, client) = start().await;
    within(20, async {
        let body = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}});
        let (code, _, _) = raw(&client, "PUT", "/apis/coordination.k8s.io/v1/namespaces/default/leases/l", &[("content-type", "application/json")], Some(body.clone())).await;
        assert_eq!(code, 201);
        let (code, _, _) = raw(&client, "PUT", "/api/v1/namespaces/default/configmaps/nope", &[("content-type", "application/json")], Some(json!({"metadata": {"name": "nope"}}))).await;
        assert_eq!(code, 404, "configmaps are not created by PUT");
    })
    .await;
}

/// `/openapi/v2` in both forms: client-go's discovery client asks for protobuf and reads
/// the PATCH operations' `fieldValidation` parameter (Helm's and kubectl's validation check).
#[tokio::test]
async fn openapi_v2_in_json_and_protobuf() {
    let (_s, client) = start().await;
    within(20, async {
        let (code, doc, headers) = raw(&client, "GET", "/openapi/v2", &[], None).await;
        assert_eq!(code, 200);
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(doc["swagger"], "2.0");
        let patch = &doc["paths"]
            ["/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "policy", "version": "v1", "kind": "PodDisruptionBudget"})
        );
        assert!(patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation"));

        let accept = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
        let req = http::Request::get("/openapi/v2")
            .header("accept", accept)
            .body(Vec::new())
            .unwrap();
        let resp = client
            .send(req.map(kube::client::Body::from))
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 200);
        // The spelling Go's mime parser accepts (no '@'), as kube-apiserver answers.
        assert_eq!(
            resp.headers()["content-type"],
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        );
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .expect("body")
            .to_bytes();
        // Document.swagger (field 1) = "2.0" comes first.
        assert!(body.starts_with(b"\x0a\x032.0"), "{:?}", &body[..16]);
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("fieldValidation"));
        assert!(text.contains("kind: PodDisruptionBudget"));
    })
    .await;
}

/// client-go's typed clients send `DeleteOptions` in protobuf (Helm does when it purges
/// its release Secrets); the body is honoured, not refused.
#[tokio::test]
async fn delete_accepts_a_protobuf_delete_options_body() {
    let (_s, client) = start().await;
    within(20, async {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        for name in ["plain", "guarded"] {
            cms.create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
            )
            .await
            .unwrap();
        }
        let delete = |name: &str, body: Vec<u8>| {
            let req =
                http::Request::delete(format!("/api/v1/namespaces/default/configmaps/{name}"))
                    .header("content-type", "application/vnd.kubernetes.protobuf")
                    .body(body)
                    .unwrap();
            client.send(req.map(kube::client::Body::from))
        };
        // Helm 4's exact body: an empty DeleteOptions.
        let helm_body = b"k8s\x00\n\x13\n\x02v1\x12\rDeleteOptions\x12\x00\x1a\x00\"\x00".to_vec();
        let resp = delete("plain", helm_body).await.expect("send");
        assert_eq!(resp.status().as_u16(), 200);
        assert!(cms.get_opt("plain").await.unwrap().is_none());

        // preconditions.uid (field 2 > 1) that does not match: 409 Conflict, kept.
        let pre = b"\x0a\x05wrong";
        let mut raw = vec![0x12, pre.len() as u8];
        raw.extend_from_slice(pre);
        let tm = b"\x0a\x02v1\x12\x0dDeleteOptions";
        let mut body = b"k8s\x00".to_vec();
        body.extend_from_slice(&[0x0a, tm.len() as u8]);
        body.extend_from_slice(tm);
        body.extend_from_slice(&[0x12, raw.len() as u8]);
        body.extend_from_slice(&raw);
        let resp = delete("guarded", body).await.expect("send");
        assert_eq!(resp.status().as_u16(), 409);
        assert!(cms.get_opt("guarded").await.unwrap().is_some());
    })
    .await;
}
