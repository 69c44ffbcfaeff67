//! The kit itself against its cluster: CRD install + discovery, namespaces, dynamic objects,
//! counters, and a hook server whose behaviour changes mid-test.

use std::time::Duration;

use kube::api::PostParams;
use kube::core::DynamicObject;
use metacontroller_testkit::{crd, HookReply, HookServer, TestCluster};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_is_served_after_install_and_writes_are_counted() {
    let cluster = TestCluster::start().await;
    let parents = crd("kit.example.com", "v1", "KitParent", "kitparents");
    cluster.install_crd(&parents.build()).await;
    // Installing twice is fine (reruns against a real cluster).
    cluster.install_crd(&parents.build()).await;
    let ns = cluster.create_namespace("kit").await;
    let before = cluster.writes();
    let api = parents.api(cluster.client(), Some(&ns));
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": parents.api_version(), "kind": parents.kind(),
        "metadata": {"name": "one"}, "spec": {"x": 1}
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    let got = api.get("one").await.unwrap();
    assert_eq!(got.data["spec"]["x"], 1);
    if let (Some(before), Some(after)) = (before, cluster.writes()) {
        assert_eq!(after - before, 1, "one create is one write");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metacontroller_crds_install() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let list = cluster
        .client()
        .list_api_group_resources("metacontroller.k8s.io/v1alpha1")
        .await
        .unwrap();
    let mut names: Vec<_> = list.resources.iter().map(|r| r.name.as_str()).collect();
    names.sort();
    assert!(names.contains(&"compositecontrollers"), "{names:?}");
    assert!(names.contains(&"decoratorcontrollers"), "{names:?}");
    assert!(names.contains(&"controllerrevisions"), "{names:?}");
}

#[tokio::test]
async fn hook_server_records_calls_and_switches_behaviour() {
    let hook =
        HookServer::start(|path, body| HookReply::json(json!({"path": path, "echo": body["n"]})))
            .await;
    let http = reqwest_like_post(&hook.url("/sync"), r#"{"n": 1}"#).await;
    assert_eq!(http.0, 200);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&http.1).unwrap(),
        json!({"path": "/sync", "echo": 1})
    );
    hook.set_handler(|_, _| HookReply::status(500, "boom"));
    assert_eq!(reqwest_like_post(&hook.url("/sync"), "{}").await.0, 500);
    hook.set_handler(|_, _| HookReply::raw("not json"));
    assert_eq!(
        reqwest_like_post(&hook.url("/finalize"), "{}").await.1,
        "not json"
    );
    hook.set_handler(|_, _| HookReply::json(json!({})).delayed(Duration::from_millis(300)));
    let started = std::time::Instant::now();
    reqwest_like_post(&hook.url("/sync"), "{}").await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(hook.calls("/sync"), 3);
    assert_eq!(hook.calls("/finalize"), 1);
    assert_eq!(hook.requests("/sync")[0], json!({"n": 1}));
    assert_eq!(hook.last_request("/finalize"), Some(json!({})));
}

/// A minimal HTTP/1.1 POST over a TCP stream, so the kit needs no HTTP client dependency.
async fn reqwest_like_post(url: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let request = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
