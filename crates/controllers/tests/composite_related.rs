//! Customize hook and `related` objects, end to end (embedded API server or
//! `METACONTROLLER_E2E_KUBECONFIG`, real HTTP hooks, in-process reconciler).
//!
//! The hook server answers `/customize` with rules naming ConfigMaps and `/sync` with one
//! child ConfigMap `<parent>-out` whose data lists the related objects it was sent and their
//! `value`, so the tests see what the sync hook saw — and that a related change resyncs.

mod common;

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, Patch, PatchParams, PostParams};
use metacontroller_testkit::{eventually, unique_name, HookReply, TestCluster};
use serde_json::{json, Value};

use common::{configmap_rule, parent_crd, Env};

/// `/sync`: one child listing `related` keys (`key=value;...`) and the related group names.
fn sync_reply(req: &Value) -> HookReply {
    HookReply::json(sync_body(req))
}

fn sync_body(req: &Value) -> Value {
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let mut seen = Vec::new();
    if let Some(groups) = req["related"].as_object() {
        for (group, objects) in groups {
            seen.push(format!("group:{group}"));
            for (key, obj) in objects.as_object().into_iter().flatten() {
                let value = obj["data"]["value"].as_str().unwrap_or("-");
                seen.push(format!("{key}={value}"));
            }
        }
    }
    seen.sort();
    json!({
        "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": format!("{name}-out")},
                      "data": {"seen": seen.join(";")}}],
        "status": {"related": seen.len()},
    })
}

async fn create_configmap(env: &Env, ns: &str, name: &str, labels: Value, value: &str) {
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "data": {"value": value},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(env.cluster.client(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

async fn set_value(env: &Env, ns: &str, name: &str, value: &str) {
    Api::<ConfigMap>::namespaced(env.cluster.client(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"value": value}})),
        )
        .await
        .unwrap();
}

async fn wait_seen(env: &Env, parent: &str, what: &str, expected: &str) {
    let out = format!("{parent}-out");
    eventually(what, || async {
        env.configmap(&out).await.is_some_and(|cm| {
            cm.data.unwrap_or_default().get("seen").map(String::as_str) == Some(expected)
        })
    })
    .await;
}

/// Sync calls once none arrived for a second (bounded by the kit's deadline).
async fn quiet_sync_calls(env: &Env) -> usize {
    let mut last = env.hook.calls("/sync");
    let mut since = std::time::Instant::now();
    eventually("sync calls to settle", || {
        let now = env.hook.calls("/sync");
        if now != last {
            last = now;
            since = std::time::Instant::now();
        }
        let quiet = since.elapsed() >= std::time::Duration::from_secs(1);
        async move { quiet }
    })
    .await;
    last
}

fn hooks(env: &Env, version: &str) -> Value {
    json!({
        "customize": {"version": version, "webhook": {"url": env.hook.url("/customize")}},
        "sync": {"version": version, "webhook": {"url": env.hook.url("/sync")}},
    })
}

/// Starts with a real Event recorder, generateSelector and one ConfigMap child type.
async fn start(env: &mut Env, version: &str) {
    let spec = json!({
        "generateSelector": true,
        "childResources": [configmap_rule("InPlace")],
        "hooks": hooks(env, version),
    });
    env.start_with_events(spec).await;
}

/// Rules selecting the ConfigMaps labelled `related: <label>`.
fn label_rules(label: &str) -> Value {
    json!({"relatedResources": [{"apiVersion": "v1", "resource": "configmaps",
        "labelSelector": {"matchLabels": {"related": label}}}]})
}

/// An environment whose hook answers `/customize` with `rules` and `/sync` with
/// [`sync_reply`].
async fn env_with_rules(rules: Value) -> Env {
    Env::new(
        TestCluster::start().await,
        parent_crd(),
        move |path, req| match path {
            "/customize" => HookReply::json(rules.clone()),
            _ => sync_reply(req),
        },
    )
    .await
}

/// Events with `reason` about object `name` in `ns`.
async fn events_for(env: &Env, ns: &str, name: &str, reason: &str) -> Vec<Event> {
    env.events_for(ns, name, reason).await
}

/// What the first sync and customize requests carried: `rel-a` of the parent's namespace
/// `ns` under its name, and the parent and controller kind.
fn assert_first_requests(env: &Env, ns: &str) {
    let req = env.hook.last_request("/sync").unwrap();
    assert_eq!(
        req["related"]["ConfigMap.v1"]["rel-a"]["metadata"]["namespace"],
        json!(ns)
    );
    assert_eq!(req["related"]["ConfigMap.v1"]["rel-a"]["kind"], "ConfigMap");
    let customize = env.hook.last_request("/customize").unwrap();
    assert_eq!(customize["parent"]["metadata"]["name"], "p");
    assert_eq!(customize["controller"]["kind"], "CompositeController");
}

/// Changes of `rel-b` in `other_ns` (another namespace) and of `unrelated` in `ns` (not
/// selected) do not resync parent `p`: the next sync after them is the barrier's.
async fn assert_unrelated_changes_do_not_resync(env: &Env, ns: &str, other_ns: &str) {
    // Let the parent's own follow-up syncs (its status write) finish first, so any sync
    // after the unrelated changes can only come from them.
    let syncs = quiet_sync_calls(env).await;
    set_value(env, other_ns, "rel-b", "2").await;
    set_value(env, ns, "unrelated", "2").await;
    // The reconciler has been handed both changes; the next sync must be the barrier's.
    for (namespace, name) in [(other_ns, "rel-b"), (ns, "unrelated")] {
        env.wait_informer_caught_up("v1", "configmaps", Some(namespace), name)
            .await;
    }
    env.sync_barrier("p").await;
    let after = env.hook.requests("/sync");
    assert!(
        after[syncs]["parent"]["metadata"]["annotations"]
            .get("test/barrier")
            .is_some(),
        "unrelated changes must not resync the parent: {:#?}",
        &after[syncs..]
    );
}

/// Waits until parent `p` has a SyncError Event whose message satisfies `check`.
async fn wait_sync_error(env: &Env, what: &str, check: impl Fn(&str) -> bool) {
    eventually(what, || async {
        events_for(env, &env.ns, "p", "SyncError")
            .await
            .iter()
            .any(|e| check(e.message.as_deref().unwrap_or_default()))
    })
    .await;
}

/// The customize hook answers without rules from now on.
fn fix_customize(env: &Env) {
    env.hook.set_handler(|path, req| match path {
        "/customize" => HookReply::json(json!({})),
        _ => sync_reply(req),
    });
}

/// v1 hooks, namespaced parent: a label rule only sees its own namespace, keys are names;
/// changing a related object resyncs with the new data; the customize hook is not called
/// again while the parent's generation is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_related_objects_from_the_parent_namespace_resync_on_change() {
    let label = unique_name("rel");
    let mut env = env_with_rules(label_rules(&label)).await;
    let other_ns = env.cluster.create_namespace("other").await;
    let ns = env.ns.clone();
    create_configmap(&env, &ns, "rel-a", json!({"related": label}), "1").await;
    create_configmap(&env, &other_ns, "rel-b", json!({"related": label}), "1").await;
    create_configmap(&env, &ns, "unrelated", json!({"related": "no"}), "1").await;
    start(&mut env, "v1").await;
    env.create_parent("p", json!({})).await;

    let expected = "group:ConfigMap.v1;rel-a=1";
    wait_seen(&env, "p", "related map sent to sync", expected).await;
    assert_first_requests(&env, &ns);

    set_value(&env, &ns, "rel-a", "2").await;
    let expected = "group:ConfigMap.v1;rel-a=2";
    wait_seen(&env, "p", "resync after related change", expected).await;
    // A change in another namespace is not this parent's business, nor is an unrelated one.
    assert_eq!(env.hook.calls("/customize"), 1, "customize response cached");
    assert_unrelated_changes_do_not_resync(&env, &ns, &other_ns).await;
    create_configmap(&env, &ns, "marker", json!({"related": label}), "9").await;
    let expected = "group:ConfigMap.v1;marker=9;rel-a=2";
    wait_seen(&env, "p", "new related object seen", expected).await;

    // A new generation calls the customize hook again.
    env.patch_parent_spec("p", json!({"touch": 1})).await;
    eventually("customize called for the new generation", || async {
        env.hook.calls("/customize") >= 2
    })
    .await;
}

/// v2 hooks: objects from any namespace, uniform `namespace/name` keys, names + namespace
/// rules and namespaceSelector rules; a related change resyncs with the new data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_related_objects_use_uniform_keys_across_namespaces() {
    let label = unique_name("rel");
    let mut env = Env::new(TestCluster::start().await, parent_crd(), |_, _| {
        HookReply::json(json!({}))
    })
    .await;
    let other_ns = env.cluster.create_namespace("other").await;
    let selected_ns = env.cluster.create_namespace("sel").await;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(env.cluster.client())
        .patch(
            &selected_ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": label}}})),
        )
        .await
        .unwrap();
    let ns = env.ns.clone();
    create_configmap(&env, &other_ns, "by-name", json!({}), "1").await;
    create_configmap(&env, &selected_ns, "by-ns", json!({"related": label}), "1").await;
    create_configmap(&env, &ns, "skipped", json!({}), "1").await;
    let rules = json!({"relatedResources": [
        {"apiVersion": "v1", "resource": "configmaps", "namespace": other_ns, "names": ["by-name"]},
        {"apiVersion": "v1", "resource": "configmaps",
         "namespaceSelector": {"matchLabels": {"team": label}},
         "labelSelector": {"matchLabels": {"related": label}}},
    ]});
    env.hook.set_handler(move |path, req| match path {
        "/customize" => HookReply::json(rules.clone()),
        _ => sync_reply(req),
    });
    start(&mut env, "v2").await;
    env.create_parent("p", json!({})).await;

    let expected = format!("group:ConfigMap.v1;{other_ns}/by-name=1;{selected_ns}/by-ns=1");
    wait_seen(&env, "p", "uniform keys from two namespaces", &expected).await;

    set_value(&env, &other_ns, "by-name", "2").await;
    let expected = format!("group:ConfigMap.v1;{other_ns}/by-name=2;{selected_ns}/by-ns=1");
    wait_seen(&env, "p", "resync after a related change", &expected).await;
    set_value(&env, &selected_ns, "by-ns", "3").await;
    let expected = format!("group:ConfigMap.v1;{other_ns}/by-name=2;{selected_ns}/by-ns=3");
    wait_seen(
        &env,
        "p",
        "resync after a namespace-selected change",
        &expected,
    )
    .await;
}

/// Every rule's type has an entry even when nothing matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn related_types_are_present_when_empty() {
    let mut env = env_with_rules(label_rules(&unique_name("none"))).await;
    start(&mut env, "v1").await;
    env.create_parent("p", json!({})).await;
    wait_seen(&env, "p", "empty related group", "group:ConfigMap.v1").await;
    let req = env.hook.last_request("/sync").unwrap();
    assert_eq!(req["related"], json!({"ConfigMap.v1": {}}));
}

/// A v1 rule naming another namespace for a namespaced parent fails the sync with a
/// SyncError Event on the parent; fixing the customize hook recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_rule_for_another_namespace_is_a_sync_error() {
    let mut env = Env::new(TestCluster::start().await, parent_crd(), |path, req| {
        match path {
            "/customize" => HookReply::json(json!({"relatedResources": [
                {"apiVersion": "v1", "resource": "configmaps", "namespace": "elsewhere", "names": ["x"]}
            ]})),
            _ => sync_reply(req),
        }
    })
    .await;
    start(&mut env, "v1").await;
    env.create_parent("p", json!({})).await;
    wait_sync_error(&env, "SyncError event", |msg| {
        msg.contains("differs from parent object namespace")
    })
    .await;
    assert!(env.configmap("p-out").await.is_none());
    // The rules are cached per parent generation (as upstream): a fixed customize hook is
    // asked again once the parent changes.
    fix_customize(&env);
    env.patch_parent_spec("p", json!({"touch": 1})).await;
    wait_seen(&env, "p", "recovered", "").await;
}

/// A cluster-scoped parent with v1 hooks sees related objects of any namespace, keyed
/// `namespace/name` (v1 relative keys for a cluster-scoped parent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scoped_parent_sees_related_objects_of_any_namespace() {
    let label = unique_name("rel");
    let mut env = Env::new(
        TestCluster::start().await,
        parent_crd().cluster_scoped(),
        |_, _| HookReply::json(json!({})),
    )
    .await;
    let other_ns = env.cluster.create_namespace("other").await;
    let ns = env.ns.clone();
    create_configmap(&env, &ns, "one", json!({"related": label}), "1").await;
    create_configmap(&env, &other_ns, "two", json!({"related": label}), "2").await;
    let rules = label_rules(&label);
    let child_ns = ns.clone();
    env.hook.set_handler(move |path, req| match path {
        "/customize" => HookReply::json(rules.clone()),
        _ => {
            // Children of a cluster-scoped parent need an explicit namespace.
            let mut body = sync_body(req);
            body["children"][0]["metadata"]["namespace"] = json!(child_ns);
            HookReply::json(body)
        }
    });
    start(&mut env, "v1").await;
    env.create_parent("p", json!({})).await;
    let mut seen = [
        "group:ConfigMap.v1".to_string(),
        format!("{ns}/one=1"),
        format!("{other_ns}/two=2"),
    ];
    seen.sort();
    let expected = seen.join(";");
    wait_seen(
        &env,
        "p",
        "namespace/name keys from two namespaces",
        &expected,
    )
    .await;
}

/// A failing customize hook is a SyncError Event; failures are not cached, so the parent
/// recovers on a backoff retry once the hook answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn customize_hook_failure_records_event_and_recovers() {
    let mut env = Env::new(
        TestCluster::start().await,
        parent_crd(),
        |path, req| match path {
            "/customize" => HookReply::status(500, "customize is down"),
            _ => sync_reply(req),
        },
    )
    .await;
    start(&mut env, "v1").await;
    env.create_parent("p", json!({})).await;
    wait_sync_error(&env, "SyncError event for the customize hook", |msg| {
        msg.starts_with("Sync error: customize hook: ") && msg.contains("500")
    })
    .await;
    assert_eq!(
        env.hook.calls("/sync"),
        0,
        "no sync without related objects"
    );
    fix_customize(&env);
    wait_seen(&env, "p", "recovered without a parent change", "").await;
}

/// Deleting a parent releases what the customize hook made us watch for it: the informer
/// of its related resource (Secrets here, watched only for it) stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_parent_releases_its_related_informers() {
    let mut env = Env::new(
        TestCluster::start().await,
        parent_crd(),
        |path, req| match path {
            "/customize" => HookReply::json(json!({"relatedResources": [
                {"apiVersion": "v1", "resource": "secrets",
                 "labelSelector": {"matchLabels": {"related": "yes"}}}]})),
            _ => sync_reply(req),
        },
    )
    .await;
    start(&mut env, "v1").await;
    let secrets_watched = |env: &Env| {
        env.informers()
            .running()
            .iter()
            .any(|id| id.api_version == "v1" && id.resource == "secrets")
    };
    env.create_parent("p", json!({})).await;
    env.wait_status("p", "first sync", |s| s["observedGeneration"] == 1)
        .await;
    assert!(secrets_watched(&env), "related informer started");
    env.parents()
        .delete("p", &Default::default())
        .await
        .unwrap();
    eventually("related informer released", || async {
        !secrets_watched(&env)
    })
    .await;
}

/// A 429 from the customize hook is a "slow down", like the sync hook's: retried after
/// Retry-After (one second without it), without a SyncError Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn customize_hook_429_is_retried_without_an_event() {
    let refusals = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = refusals.clone();
    let mut env = Env::new(
        TestCluster::start().await,
        parent_crd(),
        move |path, req| {
            use std::sync::atomic::Ordering;
            match path {
                "/customize" if counter.fetch_add(1, Ordering::SeqCst) < 2 => {
                    HookReply::status(429, "slow down")
                }
                "/customize" => HookReply::json(json!({"relatedResources": []})),
                _ => sync_reply(req),
            }
        },
    )
    .await;
    start(&mut env, "v1").await;
    let created = std::time::Instant::now();
    env.create_parent("p", json!({})).await;
    env.wait_status("p", "synced after the 429s", |s| {
        s["observedGeneration"] == 1
    })
    .await;
    assert!(env.hook.calls("/customize") >= 3);
    let ns = env.ns.clone();
    assert!(
        events_for(&env, &ns, "p", "SyncError").await.is_empty(),
        "a 429 is not a sync error"
    );
    // Two 429s without Retry-After: two one-second waits, not the fast error backoff.
    assert!(
        created.elapsed() >= std::time::Duration::from_millis(1500),
        "retried too soon: {:?}",
        created.elapsed()
    );
}
