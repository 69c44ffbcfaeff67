//! The realistic-latency mode (`Config::write_latency`, off by default): each write waits its
//! handling time, then holds one of a bounded number of commit slots and is applied at the
//! end of its commit. Only this file turns it on; the checks are lower bounds and gauges,
//! never upper bounds on time (the machine may be slow, never faster than the sleeps).

mod common;

use common::{start_with, within};
use embedded_apiserver::{Config, WriteLatency};
use futures::future::join_all;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("configmap")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_take_their_service_time_and_commit_one_at_a_time() {
    let latency = WriteLatency::realistic();
    let (server, client) = start_with(Config {
        write_latency: Some(latency.clone()),
        ..Default::default()
    })
    .await;
    let control = server.control();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");

    // A lone write takes at least the single-client service time.
    let started = Instant::now();
    within(10, api.create(&PostParams::default(), &configmap("lone")))
        .await
        .expect("create");
    assert!(started.elapsed() >= latency.single_client());

    // 40 writes at once: they overlap while being handled, commit one at a time, and so
    // take at least 40 commit times in total (the server's writes/s ceiling).
    control.reset_counts();
    let started = Instant::now();
    let results = within(
        30,
        join_all((0..40).map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &configmap(&format!("c{i}")))
                    .await
            }
        })),
    )
    .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert!(started.elapsed() >= latency.commit * 40);
    assert!(
        control.peak_in_flight_writes("create", "configmaps") > 1,
        "concurrent clients' writes should overlap outside the commit"
    );
    assert_eq!(control.uncommitted_writes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_is_applied_at_the_end_of_its_commit() {
    let commit = Duration::from_secs(1);
    let (server, client) = start_with(Config {
        write_latency: Some(WriteLatency {
            handling: Duration::ZERO,
            commit,
            commit_slots: 2,
        }),
        ..Default::default()
    })
    .await;
    let control = server.control();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let started = Instant::now();
    let writes = {
        let api = api.clone();
        tokio::spawn(async move {
            join_all((0..4).map(|i| {
                let api = api.clone();
                async move {
                    api.create(&PostParams::default(), &configmap(&format!("w{i}")))
                        .await
                }
            }))
            .await
        })
    };
    // All four are waiting for their commit; none is visible before its commit ends.
    common::eventually(10, || async { control.uncommitted_writes() == 4 }).await;
    for i in 0..4 {
        let name = format!("w{i}");
        let seen = within(10, api.get_opt(&name)).await.expect("get");
        assert!(
            seen.is_none() || started.elapsed() >= commit,
            "{name} visible before its commit ended"
        );
    }
    let results = within(30, writes).await.expect("join");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // Two slots, four writes: two commit rounds.
    assert!(started.elapsed() >= commit * 2);
    for i in 0..4 {
        let name = format!("w{i}");
        assert!(within(10, api.get_opt(&name)).await.expect("get").is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_by_default() {
    let (server, client) = start_with(Config::default()).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    within(10, api.create(&PostParams::default(), &configmap("x")))
        .await
        .expect("create");
    assert_eq!(server.control().uncommitted_writes(), 0);
    assert_eq!(
        server
            .control()
            .peak_in_flight_writes("create", "configmaps"),
        1
    );
}
