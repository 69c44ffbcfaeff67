//! Discovery fetch and shared informers against the embedded API server (unit tests: they
//! read informer internals such as [`LIST_PAGE_SIZE`] and test-only accessors).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::LIST_PAGE_SIZE;
use crate::{
    ApiResource, Change, Handler, Informer, InformerConfig, Informers, Keep, KeepKeys,
    NamespacedName, Origin, Relisted, ResourceMap, WatchScope,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};

async fn client(server: &embedded_apiserver::ApiServerHandle) -> kube::Client {
    server
        .client()
        .await
        .expect("a client of the embedded server")
}

/// An embedded API server, a client of it, and what discovery found there (every group
/// version loaded).
async fn discovered() -> (
    embedded_apiserver::ApiServerHandle,
    kube::Client,
    ResourceMap,
) {
    let server = embedded_apiserver::ApiServer::start(Default::default())
        .await
        .unwrap();
    let client = client(&server).await;
    let found = ResourceMap::discover(&client, &ResourceMap::default())
        .await
        .unwrap();
    let map = found.update.expect("discovery loaded something");
    assert!(found.errors.is_empty(), "{:?}", found.errors);
    (server, client, map)
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn cm(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "data": {"k": value}
    }))
    .unwrap()
}

type Seen = Arc<Mutex<Vec<(String, String, Origin)>>>;

fn record(seen: &Seen) -> Handler {
    let seen = seen.clone();
    Arc::new(move |change: &Change<kube::core::DynamicObject>, origin| {
        let kind = match change {
            Change::Added(_) => "added",
            Change::Updated { .. } => "updated",
            Change::Deleted(_) => "deleted",
        };
        let name = change.object().metadata.name.clone().unwrap_or_default();
        seen.lock().unwrap().push((kind.to_string(), name, origin));
    })
}

fn saw(seen: &Seen, kind: &str, name: &str, origin: Origin) -> bool {
    seen.lock()
        .unwrap()
        .iter()
        .any(|(k, n, o)| k == kind && n == name && *o == origin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_and_shared_informer() {
    let (server, client, map) = discovered().await;
    let configmaps = map.get("v1", "configmaps").unwrap().clone();
    assert!(configmaps.namespaced);
    assert!(map.get_kind("apps/v1", "Deployment").is_some());

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("before", "1"))
        .await
        .unwrap();

    let informers = Informers::new(client.clone(), InformerConfig::default());
    let a = informers.lease(&configmaps);
    let b = informers.lease(&configmaps);
    assert_eq!(informers.running().len(), 1, "one informer per resource");
    tokio::time::timeout(Duration::from_secs(10), a.wait_synced())
        .await
        .unwrap();
    let key = |n: &str| NamespacedName::new("default", n);
    assert!(b.get(&key("before")).is_some());

    let seen: Seen = Arc::default();
    b.add_handler(record(&seen));
    // A late handler is replayed the existing content.
    assert!(saw(&seen, "added", "before", Origin::Relist));

    cms.create(&PostParams::default(), &cm("x", "1"))
        .await
        .unwrap();
    eventually("x added", || saw(&seen, "added", "x", Origin::Watch)).await;
    cms.replace("x", &PostParams::default(), &{
        let mut c = cms.get("x").await.unwrap();
        c.data = Some([("k".to_string(), "2".to_string())].into());
        c
    })
    .await
    .unwrap();
    eventually("x updated", || saw(&seen, "updated", "x", Origin::Watch)).await;
    assert_eq!(a.get(&key("x")).unwrap().data["data"]["k"], "2");
    cms.delete("x", &DeleteParams::default()).await.unwrap();
    eventually("x deleted", || saw(&seen, "deleted", "x", Origin::Watch)).await;
    assert!(a.get(&key("x")).is_none());

    // The watch restarts after its history is compacted (410 Gone → relist).
    server.control().compact_history();
    server.control().close_watches();
    cms.create(&PostParams::default(), &cm("after-compaction", "1"))
        .await
        .unwrap();
    eventually("object after compaction", || {
        a.get(&key("after-compaction")).is_some()
    })
    .await;

    // The watch stops with the last lease.
    drop(a);
    assert_eq!(informers.running().len(), 1);
    drop(b);
    assert!(informers.running().is_empty());
    eventually("watch closed", || server.control().open_watches() == 0).await;
    server.shutdown().await;
}

/// A panicking handler is contained: the watch keeps running and other handlers keep
/// receiving changes. A flush interval replays the cache (unchanged `Updated`, `Relist`)
/// without any API request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_panics_are_contained_and_flush_replays_the_cache() {
    let (server, client, map) = discovered().await;
    let configmaps = map.get("v1", "configmaps").unwrap().clone();
    let informers = Informers::new(
        client.clone(),
        InformerConfig {
            flush_interval: Some(Duration::from_millis(300)),
            ..Default::default()
        },
    );
    let informer = informers.lease(&configmaps);
    tokio::time::timeout(Duration::from_secs(10), informer.wait_synced())
        .await
        .unwrap();
    informer.add_handler(Arc::new(|change: &Change<kube::core::DynamicObject>, _| {
        if change.object().metadata.name.as_deref() == Some("boom") {
            panic!("handler bug");
        }
    }));
    let seen: Seen = Arc::default();
    informer.add_handler(record(&seen));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("boom", "1"))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("after", "1"))
        .await
        .unwrap();
    eventually("change after the panic", || {
        saw(&seen, "added", "after", Origin::Watch)
    })
    .await;

    server.control().reset_counts();
    eventually("flush replay", || {
        saw(&seen, "updated", "after", Origin::Relist)
    })
    .await;
    assert_eq!(server.control().requests("list", "configmaps"), 0);
    assert_eq!(server.control().requests("watch", "configmaps"), 0);
}

/// A ConfigMap in `default`, controlled by the ConfigMap `owner` (name, uid) if given.
fn owned_cm(name: &str, owner: Option<(&str, &str)>) -> ConfigMap {
    let mut v = serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "data": {"k": "v"}
    });
    if let Some((owner, uid)) = owner {
        v["metadata"]["ownerReferences"] = serde_json::json!([{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": uid,
            "controller": true
        }]);
    }
    serde_json::from_value(v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_filter_keeps_only_the_share_relists_on_growth_and_prunes_silently() {
    let (_server, client, map) = discovered().await;
    let configmaps = map.get("v1", "configmaps").unwrap().clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let uids = create_parents_and_children(&cms).await;
    let retained: Retained = Arc::new(Mutex::new(["default/p1".to_string()].into()));
    let informers = retaining_informers(&client, &retained);
    let informer = informers.lease_keeping(&configmaps, Keep::Children);
    tokio::time::timeout(Duration::from_secs(10), informer.wait_synced())
        .await
        .unwrap();
    // The parent p1, its child, the orphan (p2 has no owner: an orphan too, for children).
    assert!(
        caches(&informer, &["c1", "orphan", "p1", "p2"]),
        "{:?}",
        informer.list()
    );
    let seen = Seen::default();
    informer.add_handler(record(&seen));

    other_shards_watch_events_are_not_stored(&cms, &uids, &informer, &seen).await;
    growing_the_share_relists(&informers, &retained, &informer, &seen).await;
    shrinking_the_share_prunes_silently(&informers, &retained, &informer, &seen);
    a_child_reowned_to_another_shard_leaves(&cms, &uids, &informer, &seen).await;
    a_full_user_widens_the_informer(&informers, &configmaps, &informer).await;
}

/// The parent keys a sharded replica keeps.
type Retained = Arc<Mutex<std::collections::HashSet<String>>>;

/// The uids of the parents, by name.
struct Uids(std::collections::HashMap<&'static str, String>);

impl Uids {
    /// The owner of a child of the parent `p` (see [`owned_cm`]).
    fn of(&self, p: &'static str) -> Option<(&'static str, &str)> {
        Some((p, self.0[p].as_str()))
    }
}

/// Creates the parents p1 and p2, an orphan, and the children c1 (of p1) and c2 (of p2).
async fn create_parents_and_children(cms: &Api<ConfigMap>) -> Uids {
    let mut uids = Uids(std::collections::HashMap::new());
    for name in ["p1", "p2", "orphan"] {
        let created = cms
            .create(&PostParams::default(), &owned_cm(name, None))
            .await
            .unwrap();
        uids.0.insert(name, created.metadata.uid.unwrap());
    }
    for (name, owner) in [("c1", "p1"), ("c2", "p2")] {
        cms.create(&PostParams::default(), &owned_cm(name, uids.of(owner)))
            .await
            .unwrap();
    }
    uids
}

/// Informers keeping only the objects of the parents in `retained`.
fn retaining_informers(client: &kube::Client, retained: &Retained) -> Informers {
    let keep_keys = {
        let retained = retained.clone();
        KeepKeys::new(move |key| retained.lock().unwrap().contains(key))
    };
    Informers::new(
        client.clone(),
        InformerConfig {
            keep_keys: Some(keep_keys),
            ..Default::default()
        },
    )
}

/// Whether the informer caches exactly the objects `names` (besides the `kube-*` ones).
fn caches(informer: &Informer, names: &[&str]) -> bool {
    let mut have: Vec<String> = informer
        .list()
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .filter(|n| !n.starts_with("kube-"))
        .collect();
    have.sort();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    have == want
}

/// A watch event of another shard's child is not stored.
async fn other_shards_watch_events_are_not_stored(
    cms: &Api<ConfigMap>,
    uids: &Uids,
    informer: &Informer,
    seen: &Seen,
) {
    cms.create(&PostParams::default(), &owned_cm("c2b", uids.of("p2")))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &owned_cm("c1b", uids.of("p1")))
        .await
        .unwrap();
    eventually("c1b cached", || {
        informer
            .get(&NamespacedName::new("default", "c1b"))
            .is_some()
    })
    .await;
    assert!(informer
        .get(&NamespacedName::new("default", "c2b"))
        .is_none());
    assert!(!saw(seen, "added", "c2b", Origin::Watch));
}

/// Growing the share: a relist started after the change brings the dropped objects.
async fn growing_the_share_relists(
    informers: &Informers,
    retained: &Retained,
    informer: &Informer,
    seen: &Seen,
) {
    retained.lock().unwrap().insert("default/p2".into());
    tokio::time::timeout(Duration::from_secs(10), informers.relist_filtered())
        .await
        .unwrap();
    assert!(caches(
        informer,
        &["c1", "c1b", "c2", "c2b", "orphan", "p1", "p2"]
    ));
    assert!(saw(seen, "added", "c2", Origin::Relist));
    // An asked-for relist tells only what changed: c1 was cached already, unchanged.
    assert!(!saw(seen, "updated", "c1", Origin::Relist));
}

/// Shrinking the share: pruned without any delete event.
fn shrinking_the_share_prunes_silently(
    informers: &Informers,
    retained: &Retained,
    informer: &Informer,
    seen: &Seen,
) {
    retained.lock().unwrap().remove("default/p1");
    assert_eq!(informers.prune_filtered(), 2);
    assert!(caches(informer, &["c2", "c2b", "orphan", "p1", "p2"]));
    assert!(!saw(seen, "deleted", "c1", Origin::Watch));
    assert!(!saw(seen, "deleted", "c1", Origin::Relist));
}

/// A kept child re-owned to a parent of another shard leaves the cache (as a delete).
async fn a_child_reowned_to_another_shard_leaves(
    cms: &Api<ConfigMap>,
    uids: &Uids,
    informer: &Informer,
    seen: &Seen,
) {
    let mut moved = cms.get("c2").await.unwrap();
    moved.metadata.owner_references = owned_cm("x", uids.of("p1")).metadata.owner_references;
    cms.replace("c2", &PostParams::default(), &moved)
        .await
        .unwrap();
    eventually("c2 forgotten", || saw(seen, "deleted", "c2", Origin::Watch)).await;
    assert!(informer
        .get(&NamespacedName::new("default", "c2"))
        .is_none());
}

/// A user that needs everything widens the shared informer: it relists before it reads
/// as synced again.
async fn a_full_user_widens_the_informer(
    informers: &Informers,
    configmaps: &Arc<ApiResource>,
    informer: &Informer,
) {
    let all = informers.lease(configmaps);
    assert!(all.keeps(Keep::All));
    tokio::time::timeout(Duration::from_secs(10), all.wait_synced())
        .await
        .unwrap();
    assert!(caches(
        informer,
        &["c1", "c1b", "c2", "c2b", "orphan", "p1", "p2"]
    ));
    assert_eq!(
        informers.prune_filtered(),
        0,
        "a full informer is never pruned"
    );
}

/// After a replica admits new shards it replays only their parents: the parents it already
/// syncs are not queued again, and an informer leased only for children replays nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resync_parents_replays_only_the_matching_parents() {
    let (_server, client, map) = discovered().await;
    let configmaps = map.get("v1", "configmaps").unwrap().clone();
    let secrets = map.get("v1", "secrets").unwrap().clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["a", "b", "c"] {
        cms.create(&PostParams::default(), &cm(name, "1"))
            .await
            .unwrap();
    }
    let informers = Informers::new(
        client.clone(),
        InformerConfig {
            keep_keys: Some(KeepKeys::new(|_| true)),
            ..Default::default()
        },
    );
    let parents = informers.lease_keeping(&configmaps, Keep::Parents);
    let children_only = informers.lease_keeping(&secrets, Keep::Children);
    for informer in [&parents, &children_only] {
        tokio::time::timeout(Duration::from_secs(10), informer.wait_synced())
            .await
            .unwrap();
    }
    let seen = Seen::default();
    parents.add_handler(record(&seen));
    let secret_events = Seen::default();
    children_only.add_handler(record(&secret_events));

    informers.resync_parents(|key| key == "default/a" || key == "default/c");
    let mut replayed: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(kind, _, origin)| kind == "updated" && *origin == Origin::Relist)
        .map(|(_, name, _)| name.clone())
        .collect();
    replayed.sort();
    assert_eq!(replayed, ["a", "c"]);
    assert!(secret_events.lock().unwrap().is_empty());
}

/// A list is read in pages of `LIST_PAGE_SIZE`: a decoded page is held whole until its last
/// object is handed on, and a decoded object costs several times its JSON, so the page size
/// bounds what every (re)list holds at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_are_read_in_pages() {
    let (server, client, map) = discovered().await;
    let configmaps = map.get("v1", "configmaps").unwrap().clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let count = 2 * LIST_PAGE_SIZE as usize + 50;
    for i in 0..count {
        cms.create(&PostParams::default(), &cm(&format!("page-{i}"), "1"))
            .await
            .unwrap();
    }
    let before = cms.list(&Default::default()).await.unwrap().items.len();
    server.control().reset_counts();
    let informers = Informers::new(client.clone(), InformerConfig::default());
    let informer = informers.lease(&configmaps);
    tokio::time::timeout(Duration::from_secs(10), informer.wait_synced())
        .await
        .unwrap();
    assert!(informer.len() >= before, "every listed ConfigMap is cached");
    assert_eq!(
        server.control().requests("list", "configmaps"),
        before.div_ceil(LIST_PAGE_SIZE as usize) as u64,
        "one list request per page of {} objects",
        LIST_PAGE_SIZE
    );
}

/// `--watch-namespaces`: a namespaced resource is listed and watched in the scope's
/// namespaces only (one watch each), a relist keeps every namespace's objects, and a
/// cluster-scoped resource outside the scope is never requested. Embedded-only: it reads the
/// server's request counts per namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_informers_watch_only_their_namespaces() {
    use k8s_openapi::api::core::v1::Namespace;
    let (server, client, map) = discovered().await;
    for ns in ["team-a", "team-b", "team-c"] {
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
        let mut obj = cm("x", ns);
        obj.metadata.namespace = Some(ns.into());
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }
    let scope = WatchScope::new(["team-a", "team-b"]).unwrap();
    let informers = Informers::new(
        client.clone(),
        InformerConfig {
            scope: Some(Arc::new(scope)),
            ..Default::default()
        },
    );
    let configmaps = informers.lease(map.get("v1", "configmaps").unwrap());
    let namespaces = informers.lease(map.get("v1", "namespaces").unwrap());
    tokio::time::timeout(Duration::from_secs(10), configmaps.wait_synced())
        .await
        .unwrap();
    assert!(namespaces.has_synced() && namespaces.is_empty());
    let keys = |informer: &Informer| {
        let mut keys: Vec<String> = informer
            .list()
            .iter()
            .filter_map(|o| NamespacedName::of(o.as_ref()).map(|k| k.to_string()))
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(keys(&configmaps), ["team-a/x", "team-b/x"]);
    // A relist (each namespace's list replaces only that namespace) keeps both.
    configmaps.relist().await;
    assert_eq!(keys(&configmaps), ["team-a/x", "team-b/x"]);
    let seen: Seen = Default::default();
    configmaps.add_handler(record(&seen));
    Api::<ConfigMap>::namespaced(client.clone(), "team-b")
        .delete("x", &DeleteParams::default())
        .await
        .unwrap();
    eventually("team-b/x deleted", || {
        saw(&seen, "deleted", "x", Origin::Watch)
    })
    .await;
    assert_eq!(keys(&configmaps), ["team-a/x"]);

    let control = server.control();
    let reads: Vec<(String, String, String)> = control
        .request_counts_by_namespace()
        .into_keys()
        .filter(|(verb, resource, _)| {
            matches!(verb.as_str(), "list" | "watch")
                && matches!(resource.as_str(), "configmaps" | "namespaces")
        })
        .collect();
    assert!(!reads.is_empty());
    for (verb, resource, ns) in &reads {
        assert!(
            resource == "configmaps" && (ns == "team-a" || ns == "team-b"),
            "{verb} {resource} in {ns:?}: outside the scope"
        );
    }
}

/// An informer kept with a retention filter, synced, over ConfigMaps.
async fn filtered_configmaps(
    client: &kube::Client,
    map: &ResourceMap,
) -> (Informers, crate::InformerLease) {
    let configmaps = map.get("v1", "configmaps").unwrap().clone();
    let informers = Informers::new(
        client.clone(),
        InformerConfig {
            keep_keys: Some(KeepKeys::new(|_| true)),
            ..Default::default()
        },
    );
    let informer = informers.lease_keeping(&configmaps, Keep::Children);
    tokio::time::timeout(Duration::from_secs(10), informer.wait_synced())
        .await
        .unwrap();
    (informers, informer)
}

/// Waits until the server has received `n` list requests for ConfigMaps.
async fn lists_received(server: &embedded_apiserver::ApiServerHandle, n: u64) {
    let control = server.control();
    eventually("the list request received", || {
        control.requests("list", "configmaps") >= n
    })
    .await;
}

/// Relists asked for while a list runs do not restart it: under a stream of requests a
/// restarted list would never end. It completes and answers the request it was started for;
/// one more list answers every request made meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relists_asked_for_during_a_list_follow_it_instead_of_restarting_it() {
    use embedded_apiserver::Fault;
    let (server, client, map) = discovered().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("a", "1"))
        .await
        .unwrap();
    let (informers, _informer) = filtered_configmaps(&client, &map).await;
    server.control().reset_counts();
    // Every list answers after a second; a request comes every 200 ms.
    let slow = Fault::latency(
        Some("list"),
        Some("configmaps"),
        100,
        Duration::from_secs(1),
    );
    server.control().inject(slow);
    let first = tokio::spawn(informers.relist_filtered());
    lists_received(&server, 1).await;
    let mut later = Vec::new();
    while !first.is_finished() && later.len() < 25 {
        // Pacing the stream of requests, not waiting for an outcome.
        tokio::time::sleep(Duration::from_millis(200)).await;
        later.push(tokio::spawn(informers.relist_filtered()));
    }
    assert!(
        first.is_finished(),
        "the first relist was still unanswered after {} more requests: each restarted its list",
        later.len()
    );
    assert_eq!(first.await.unwrap(), Relisted::Listed);
    for relist in later {
        let relisted = tokio::time::timeout(Duration::from_secs(10), relist)
            .await
            .expect("every later relist answered")
            .unwrap();
        assert_eq!(relisted, Relisted::Listed);
    }
}

/// A relist whose list fails is answered at once as failed (a shard takeover must not wait
/// for a resource that cannot be listed), and the informer reads as not synced, with the
/// list's error, until a list completes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_relist_is_reported_and_the_informer_is_unsynced_until_it_lists() {
    use embedded_apiserver::Fault;
    let (server, client, map) = discovered().await;
    let (informers, informer) = filtered_configmaps(&client, &map).await;
    server.control().reset_counts();
    let refused = Fault::status(Some("list"), Some("configmaps"), 1000, 403);
    server.control().inject(refused);
    let relisted = tokio::time::timeout(Duration::from_secs(10), informers.relist_filtered())
        .await
        .expect("a failed relist is answered");
    assert_eq!(relisted, Relisted::Failed);
    assert!(
        !informer.has_synced(),
        "a failed relist leaves the cache unsynced"
    );
    let error = informer.list_error().expect("the failed list's error");
    assert_eq!(
        error, "injected fault (403) (403 Forbidden)",
        "the server's answer"
    );
    // Still failing: a later request is answered as failed too.
    let again = tokio::time::timeout(Duration::from_secs(10), informers.relist_filtered())
        .await
        .expect("a second failed relist is answered");
    assert_eq!(again, Relisted::Failed);
    server.control().clear_faults();
    tokio::time::timeout(Duration::from_secs(30), informer.wait_synced())
        .await
        .expect("synced again once the resource can be listed");
    assert_eq!(
        informer.list_error(),
        None,
        "a synced cache has no list error"
    );
}

/// Watches reconnect with growing delays during an API server outage, yet resume within
/// about a probe period once the server answers again (the reconnect probe cuts their waits
/// short).
async fn server_on(port: u16) -> embedded_apiserver::ApiServerHandle {
    let config = embedded_apiserver::Config {
        port,
        ..Default::default()
    };
    embedded_apiserver::ApiServer::start(config).await.unwrap()
}

/// Waits up to `within` until `check` holds; panics naming `what` otherwise.
async fn seen_within(what: &str, within: Duration, check: impl Fn() -> bool) {
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
    let found = ResourceMap::discover(&client, &ResourceMap::default())
        .await
        .unwrap();
    let map = found.update.expect("discovery loaded something");
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
    cms.create(&PostParams::default(), &cm("after-the-outage", "1"))
        .await
        .unwrap();
    let key = NamespacedName::new("default", "after-the-outage");
    seen_within(
        "the ConfigMap created after the outage in the cache",
        Duration::from_secs(6),
        || informer.get(&key).is_some(),
    )
    .await;
    eprintln!("cached {:?} after the server came back", back.elapsed());
    drop(second);
}

fn labelled(name: &str, app: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
    }))
    .unwrap()
}

/// An informer leased with a label selector lists and watches only matching objects (the
/// server filters: its list count says so), runs beside the unfiltered informer of the same
/// resource, and sees an object whose labels stop matching as deleted, and as added when
/// they match again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selected_informer_is_filtered_by_the_server() {
    let (server, client, map) = discovered().await;
    let configmaps = map.get("v1", "configmaps").unwrap().clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for (name, app) in [("p1", "web"), ("p2", "web"), ("o1", "db"), ("o2", "db")] {
        cms.create(&PostParams::default(), &labelled(name, app))
            .await
            .unwrap();
    }
    let informers = Informers::new(client.clone(), InformerConfig::default());
    let all = informers.lease(&configmaps);
    let web = informers.lease_selected(&configmaps, Keep::Parents, Some("app=web".into()));
    let again = informers.lease_selected(&configmaps, Keep::Parents, Some("app=web".into()));
    assert_eq!(
        informers.running().len(),
        2,
        "one per resource and selector"
    );
    for lease in [&all, &web] {
        tokio::time::timeout(Duration::from_secs(10), lease.wait_synced())
            .await
            .unwrap();
    }
    let key = |n: &str| NamespacedName::new("default", n);
    assert!(web.contains(&key("p1")) && web.contains(&key("p2")));
    assert!(!web.contains(&key("o1")), "not matching: never listed");
    assert_eq!(
        web.listed_objects(),
        2,
        "the server returned matching objects only"
    );
    assert!(all.contains(&key("o1")) && all.contains(&key("p1")));
    assert!(
        again.contains(&key("p1")),
        "the same selector shares the informer"
    );

    let seen: Seen = Arc::default();
    web.add_handler(record(&seen));
    let relabel = |app: &'static str| {
        let cms = cms.clone();
        async move {
            let patch = serde_json::json!({"metadata": {"labels": {"app": app}}});
            let params = kube::api::PatchParams::default();
            cms.patch("p1", &params, &kube::api::Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    relabel("db").await;
    eventually("p1 left the selection", || {
        saw(&seen, "deleted", "p1", Origin::Watch)
    })
    .await;
    assert!(!web.contains(&key("p1")));
    assert!(all.contains(&key("p1")), "the unfiltered informer keeps it");
    relabel("web").await;
    eventually("p1 back in the selection", || {
        saw(&seen, "added", "p1", Origin::Watch)
    })
    .await;

    let stats = informers.cache_stats();
    let selected = stats
        .iter()
        .find(|s| s.key.label_selector.as_deref() == Some("app=web"))
        .unwrap();
    assert_eq!(selected.cached, 2);
    drop((web, again));
    assert_eq!(
        informers.running().len(),
        1,
        "the selected informer stopped"
    );
    drop(all);
    server.shutdown().await;
}
