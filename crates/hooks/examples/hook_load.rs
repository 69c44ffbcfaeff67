//! Load harness: hook calls per second against a local axum server answering ~2 KB JSON,
//! sequential and with 32 concurrent callers, next to a bare reqwest baseline. Rounds
//! alternate between the variants so background load affects them alike.
//!
//! Run: `cargo run --release -p metacontroller-hooks --example hook_load [calls] [rounds]`

use std::sync::Arc;
use std::time::Instant;

use metacontroller_hooks::{HookClient, HookClientConfig};
use support::{hook_calls, raw_calls, request, response_body};

#[path = "../benches/support/mod.rs"]
mod support;

fn main() {
    let mut args = std::env::args().skip(1);
    let calls: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let _ = rustls::crypto::ring::default_provider().install_default();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = response_body();
    println!("response body: {} bytes", body.len());
    let url = support::serve_body(&rt, body);

    let client = HookClient::new(HookClientConfig::default()).unwrap();
    let hook = support::webhook(url.clone());
    let request = Arc::new(request());
    let raw = reqwest::Client::new();
    let raw_body = bytes::Bytes::from(serde_json::to_vec(&*request).unwrap());

    rt.block_on(async {
        hook_calls(client.clone(), hook.clone(), request.clone(), 200).await;
        raw_calls(raw.clone(), url.clone(), raw_body.clone(), 200).await;
    });

    for round in 1..=rounds {
        // Callers run as tasks on the runtime, as controller workers do.
        let started = Instant::now();
        let (raw2, url2, body2) = (raw.clone(), url.clone(), raw_body.clone());
        rt.block_on(rt.spawn(raw_calls(raw2, url2, body2, calls)))
            .unwrap();
        let raw_rate = calls as f64 / started.elapsed().as_secs_f64();

        let started = Instant::now();
        let (c2, h2, r2) = (client.clone(), hook.clone(), request.clone());
        rt.block_on(rt.spawn(hook_calls(c2, h2, r2, calls)))
            .unwrap();
        let seq_rate = calls as f64 / started.elapsed().as_secs_f64();

        let started = Instant::now();
        rt.block_on(async {
            let mut tasks = Vec::new();
            for _ in 0..32 {
                let (client, hook, request) = (client.clone(), hook.clone(), request.clone());
                tasks.push(tokio::spawn(hook_calls(client, hook, request, calls / 32)));
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
