//! Load harness: hook calls per second against a local axum server answering ~2 KB JSON,
//! sequential and with 32 concurrent callers, next to a bare reqwest baseline. Rounds
//! alternate between the variants so background load affects them alike.
//!
//! Run: `cargo run --release -p metacontroller-hooks --example hook_load [calls] [rounds]`

use std::sync::Arc;
use std::time::Instant;

use axum::routing::post;
use axum::Router;
use metacontroller_api::hook::{Hook, Webhook};
use metacontroller_api::wire::CompositeHookResponse;
use metacontroller_hooks::{CallContext, HookClient, HookClientConfig};
use serde_json::json;

const CTX: CallContext<'static> = CallContext {
    controller: "bench",
    hook_name: "sync",
    parent_key: "default/p",
};

fn response_body() -> String {
    let children: Vec<serde_json::Value> = (0..8)
        .map(|i| {
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": format!("child-{i}"), "labels": {"app": "bench"}},
                "data": {"key": "x".repeat(137)},
            })
        })
        .collect();
    json!({"status": {"replicas": 8, "ready": true}, "children": children}).to_string()
}

async fn hook_calls(client: &HookClient, hook: &Hook, request: &serde_json::Value, n: usize) {
    for _ in 0..n {
        let _: CompositeHookResponse = client.call(&CTX, hook, &[], request).await.unwrap();
    }
}

async fn raw_calls(client: &reqwest::Client, url: &str, body: &[u8], n: usize) {
    for _ in 0..n {
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        let bytes = response.bytes().await.unwrap();
        let _: CompositeHookResponse = serde_json::from_slice(&bytes).unwrap();
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let calls: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let _ = rustls::crypto::ring::default_provider().install_default();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = response_body();
    println!("response body: {} bytes", body.len());
    let body: &'static str = Box::leak(body.into_boxed_str());
    let app = Router::new().route(
        "/sync",
        post(move || async move { ([("content-type", "application/json")], body) }),
    );
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}/sync", listener.local_addr().unwrap());
    rt.spawn(async move { axum::serve(listener, app).await.unwrap() });

    let client = HookClient::new(HookClientConfig::default()).unwrap();
    let hook = Arc::new(Hook {
        version: None,
        webhook: Some(Webhook {
            url: Some(url.clone()),
            ..Webhook::default()
        }),
        ..Hook::default()
    });
    let request = Arc::new(json!({
        "controller": {"metadata": {"name": "bench"}},
        "parent": {"apiVersion": "example.com/v1", "kind": "Thing",
                   "metadata": {"name": "p", "namespace": "default", "uid": "1234"},
                   "spec": {"replicas": 8}},
        "children": {},
    }));
    let raw = reqwest::Client::new();
    let raw_body = serde_json::to_vec(&*request).unwrap();

    rt.block_on(async {
        hook_calls(&client, &hook, &request, 200).await;
        raw_calls(&raw, &url, &raw_body, 200).await;
    });

    for round in 1..=rounds {
        // Callers run as tasks on the runtime, as controller workers do.
        let started = Instant::now();
        let (raw2, url2, body2) = (raw.clone(), url.clone(), raw_body.clone());
        rt.block_on(rt.spawn(async move { raw_calls(&raw2, &url2, &body2, calls).await }))
            .unwrap();
        let raw_rate = calls as f64 / started.elapsed().as_secs_f64();

        let started = Instant::now();
        let (c2, h2, r2) = (client.clone(), hook.clone(), request.clone());
        rt.block_on(rt.spawn(async move { hook_calls(&c2, &h2, &r2, calls).await }))
            .unwrap();
        let seq_rate = calls as f64 / started.elapsed().as_secs_f64();

        let started = Instant::now();
        rt.block_on(async {
            let mut tasks = Vec::new();
            for _ in 0..32 {
                let (client, hook, request) = (client.clone(), hook.clone(), request.clone());
                tasks.push(tokio::spawn(async move {
                    hook_calls(&client, &hook, &request, calls / 32).await
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
        });
        let conc_rate = (calls / 32 * 32) as f64 / started.elapsed().as_secs_f64();
        println!(
            "round {round}: raw reqwest {raw_rate:.0}/s, hook client sequential {seq_rate:.0}/s, 32 concurrent {conc_rate:.0}/s"
        );
    }
}
