//! Watches reconnect with growing delays during an API server outage, yet resume within about
//! a probe period once the server answers again (the reconnect probe cuts their waits short).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use metacontroller_dynamic::{discover, InformerConfig, Informers, NamespacedName, ResourceMap};

async fn client(server: &embedded_apiserver::ApiServerHandle) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&server.kubeconfig_yaml()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

async fn server_on(port: u16) -> embedded_apiserver::ApiServerHandle {
    let config = embedded_apiserver::Config {
        port,
        ..Default::default()
    };
    embedded_apiserver::ApiServer::start(config).await.unwrap()
}

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "data": {"k": "v"}
    }))
    .unwrap()
}

/// Waits up to `within` until `check` holds; panics naming `what` otherwise.
async fn within(what: &str, within: Duration, check: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "{what} not seen within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An outage long enough for the watch's next delay to grow past 10 s (0.2 s doubling: the
/// seventh wait is about 12.8 s); once the server is back, the informer lists it within a
/// few seconds rather than after that wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_long_outage_watches_resume_within_seconds_of_the_server_answering() {
    let first = server_on(0).await;
    let port = first.addr().port();
    let client = client(&first).await;
    let found = discover(&client, &ResourceMap::new()).await.unwrap();
    let (map, _) = found.update.expect("discovery loaded something");
    let configmaps = map.get("v1", "configmaps").unwrap().clone();
    let informers = Informers::new(client.clone(), InformerConfig::default());
    let informer = informers.lease(&configmaps);
    tokio::time::timeout(Duration::from_secs(10), informer.wait_synced())
        .await
        .unwrap();

    first.shutdown().await;
    // Outage: the watch fails and backs off, 0.2 + 0.4 + ... + 6.4 s = 12.6 s of waits.
    tokio::time::sleep(Duration::from_secs(13)).await;
    let second = server_on(port).await;
    let back = Instant::now();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &configmap("after-the-outage"))
        .await
        .unwrap();
    let key = NamespacedName::new("default", "after-the-outage");
    within(
        "the ConfigMap created after the outage in the cache",
        Duration::from_secs(6),
        || informer.get(&key).is_some(),
    )
    .await;
    eprintln!("cached {:?} after the server came back", back.elapsed());
    drop(second);
}
