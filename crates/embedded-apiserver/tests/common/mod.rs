//! Shared helpers for the integration tests.
#![allow(dead_code)]

use embedded_apiserver::{ApiServer, ApiServerHandle, Config};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::Client;
use serde_json::Value;
use std::future::Future;
use std::time::Duration;

/// Starts a server and a kube-rs client for it.
pub async fn start() -> (ApiServerHandle, Client) {
    start_with(Config::default()).await
}

pub async fn start_with(config: Config) -> (ApiServerHandle, Client) {
    let server = ApiServer::start(config).await.expect("start server");
    let client = client_for(&server, None);
    (server, client)
}

pub fn client_for(server: &ApiServerHandle, token: Option<&str>) -> Client {
    let mut cfg = kube::Config::new(server.url().parse().expect("url"));
    cfg.default_namespace = "default".into();
    if let Some(t) = token {
        cfg.auth_info.token = Some(t.to_string().into());
    }
    Client::try_from(cfg).expect("client")
}

/// Fails the test if `f` takes longer than `secs`.
pub async fn within<T>(secs: u64, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("test step timed out")
}

/// Polls `cond` until it returns true or the deadline passes.
pub async fn eventually<F, Fut>(secs: u64, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if cond().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached in {secs}s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn dynamic(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

pub fn obj(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("dynamic object")
}

/// Raw HTTP helper (reqwest is not a dependency; use kube's client request API).
pub async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, Value, http::HeaderMap) {
    let mut b = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let body = body
        .map(|v| serde_json::to_vec(&v).unwrap())
        .unwrap_or_default();
    let req = b.body(body).unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, v, headers)
}
