//! Watch semantics through kube-rs and kube-runtime's watcher.

mod common;

use common::*;
use embedded_apiserver::Fault;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::json;
use std::time::Duration;

fn cm(name: &str, app: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": app}}})).unwrap()
}

fn name_of(c: &ConfigMap) -> String {
    c.metadata.name.clone().unwrap_or_default()
}

/// Creates ConfigMap `name` labelled `app`.
async fn create(api: &Api<ConfigMap>, name: &str, app: &str) {
    api.create(&PostParams::default(), &cm(name, app))
        .await
        .unwrap();
}

/// The resourceVersion of a list of the ConfigMaps now: where a watch starting after the
/// objects so far begins.
async fn list_resource_version(api: &Api<ConfigMap>) -> String {
    let list = api.list(&ListParams::default()).await.unwrap();
    list.metadata.resource_version.unwrap()
}

/// `ADDED <name>` or `DELETED <name>` for an object entering or leaving a watch's
/// selection; anything else as it prints.
fn selection_change(event: &WatchEvent<ConfigMap>) -> String {
    match event {
        WatchEvent::Added(c) => format!("ADDED {}", name_of(c)),
        WatchEvent::Deleted(c) => format!("DELETED {}", name_of(c)),
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn watch_replays_from_resource_version_and_tracks_selectors() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        create(&api, "a", "web").await;
        let rv = list_resource_version(&api).await;
        create(&api, "b", "web").await;
        create(&api, "c", "db").await;

        let mut stream = api
            .watch(&WatchParams::default().labels("app=web"), &rv)
            .await
            .unwrap()
            .boxed();
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(c) => assert_eq!(name_of(&c), "b"),
            other => panic!("unexpected {other:?}"),
        }
        // Moving out of the selection is seen as DELETED, moving in as ADDED.
        for (name, app, seen) in [("b", "db", "DELETED b"), ("c", "web", "ADDED c")] {
            let patch = Patch::Merge(json!({"metadata": {"labels": {"app": app}}}));
            api.patch(name, &PatchParams::default(), &patch)
                .await
                .unwrap();
            let event = stream.try_next().await.unwrap().unwrap();
            assert_eq!(selection_change(&event), seen, "{event:?}");
        }
        api.patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"x": "1"}})),
        )
        .await
        .unwrap();
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Modified(c) => assert_eq!(c.data.unwrap()["x"], "1"),
            other => panic!("unexpected {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn watch_timeout_ends_the_stream_and_bookmarks_arrive() {
    let (_s, client) = start_with(embedded_apiserver::Config {
        bookmark_interval: std::time::Duration::from_millis(200),
        ..Default::default()
    })
    .await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let rv = list_resource_version(&api).await;
        let events: Vec<_> = api
            .watch(
                &WatchParams {
                    bookmarks: true,
                    ..WatchParams::default().timeout(1)
                },
                &rv,
            )
            .await
            .unwrap()
            .collect()
            .await;
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Ok(WatchEvent::Bookmark(_)))),
            "{events:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn compacted_history_gives_410_expired() {
    let (s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let rv = list_resource_version(&api).await;
        create(&api, "a", "web").await;
        s.control().compact_history();
        let mut stream = api
            .watch(&WatchParams::default(), &rv)
            .await
            .unwrap()
            .boxed();
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Error(e) => {
                assert_eq!(e.code, 410);
                assert_eq!(e.reason, "Expired");
                assert!(
                    e.message.starts_with("too old resource version"),
                    "{}",
                    e.message
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn runtime_watcher_relists_after_410() {
    let (s, client) = start().await;
    within(30, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        create(&api, "first", "web").await;
        let mut w = watcher(api.clone(), watcher::Config::default()).boxed();
        // Initial list.
        let mut seen = Vec::new();
        loop {
            match w.next().await.unwrap() {
                Ok(watcher::Event::InitApply(c)) => seen.push(name_of(&c)),
                Ok(watcher::Event::InitDone) => break,
                _ => {}
            }
        }
        assert_eq!(seen, ["first"]);
        create(&api, "second", "web").await;
        loop {
            if let Ok(watcher::Event::Apply(c)) = w.next().await.unwrap() {
                assert_eq!(name_of(&c), "second");
                break;
            }
        }
        // Drop the connection; while the watcher reconnects (its next watch request
        // is delayed), a change lands and the history is compacted past the
        // watcher's resourceVersion: the re-watch gets 410 and the watcher lists again.
        s.control().inject(Fault::latency(
            Some("watch"),
            Some("configmaps"),
            1,
            Duration::from_millis(500),
        ));
        s.control().close_watches();
        create(&api, "third", "web").await;
        s.control().compact_history();
        let mut relisted = Vec::new();
        let mut saw_init = false;
        let mut saw_410 = false;
        loop {
            let ev = w.next().await.unwrap();
            match ev {
                Err(watcher::Error::WatchError(st)) if st.code == 410 => saw_410 = true,
                Ok(watcher::Event::Init) => saw_init = true,
                Ok(watcher::Event::InitApply(c)) if saw_init => relisted.push(name_of(&c)),
                Ok(watcher::Event::InitDone) if saw_init => break,
                _ => {}
            }
        }
        assert!(saw_410, "the re-watch was answered with 410");
        relisted.sort();
        assert_eq!(relisted, ["first", "second", "third"]);
    })
    .await;
}

#[tokio::test]
async fn streaming_list_watch_ends_initial_events_with_a_bookmark() {
    let (_s, client) = start().await;
    within(20, async {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        create(&api, "one", "web").await;
        let mut w = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
        let mut seen = Vec::new();
        loop {
            match w.next().await.unwrap().unwrap() {
                watcher::Event::InitApply(c) => seen.push(name_of(&c)),
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        assert_eq!(seen, ["one"]);
        create(&api, "two", "web").await;
        loop {
            if let watcher::Event::Apply(c) = w.next().await.unwrap().unwrap() {
                assert_eq!(name_of(&c), "two");
                break;
            }
        }
    })
    .await;
}
