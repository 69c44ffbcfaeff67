//! The Event recorder against a real API server: Events land in the object's namespace
//! (`default` for cluster-scoped objects), repeats raise `count` on one Event, and the
//! per-object burst holds the excess back, without blocking the caller, until a flush
//! (shutdown) writes it.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use metacontroller_controllers::events::{EventRecorder, EventType, InvolvedObject};
use metacontroller_testkit::{eventually, unique_name, TestCluster};

async fn events_about(client: &kube::Client, ns: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .collect()
}

fn object(ns: &str, name: &str) -> InvolvedObject {
    InvolvedObject {
        api_version: "example.com/v1".into(),
        kind: "Parent".into(),
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        resource_version: "1".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_are_counted_and_the_burst_is_enforced_per_object() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = cluster.create_namespace("ev").await;
    // Upstream default rate (one per 5 minutes) with a burst of 3.
    let recorder = EventRecorder::new(client.clone(), 1.0 / 300.0, 3).unwrap();

    let counted = unique_name("p");
    recorder.record(
        object(&ns, &counted),
        EventType::Warning,
        "SyncError",
        "boom",
    );
    recorder.record(
        object(&ns, &counted),
        EventType::Warning,
        "SyncError",
        "boom",
    );
    eventually("one Event with count 2", || async {
        let events = events_about(&client, &ns, &counted).await;
        events.len() == 1 && events[0].count == Some(2)
    })
    .await;

    let limited = unique_name("q");
    let started = Instant::now();
    for i in 0..10 {
        recorder.record(
            object(&ns, &limited),
            EventType::Normal,
            &format!("Reason{i}"),
            "msg",
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "record never waits"
    );
    eventually("three Events written", || async {
        events_about(&client, &ns, &limited).await.len() == 3
    })
    .await;
    // The recorder handles records in order: once an Event recorded after the burst is
    // written, the burst has been handled, and the rest is held back.
    let marker = unique_name("m");
    recorder.record(object(&ns, &marker), EventType::Normal, "Marker", "after");
    eventually("the marker Event written", || async {
        events_about(&client, &ns, &marker).await.len() == 1
    })
    .await;
    assert_eq!(events_about(&client, &ns, &limited).await.len(), 3);
    // Held back, not lost: a flush writes them.
    assert!(recorder.flush(Duration::from_secs(30)).await);
    assert_eq!(events_about(&client, &ns, &limited).await.len(), 10);

    // Cluster-scoped objects get their Events in `default`.
    let cluster_scoped = unique_name("c");
    recorder.record(
        object("", &cluster_scoped),
        EventType::Normal,
        "Started",
        "hi",
    );
    eventually("event in default", || async {
        events_about(&client, "default", &cluster_scoped)
            .await
            .len()
            == 1
    })
    .await;
}
