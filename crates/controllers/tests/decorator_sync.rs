//! DecoratorController end to end, the scenarios of upstream's decorator integration tests
//! (sync webhook, resyncAfterSeconds, v2 request shape) against the in-process reconciler,
//! an API server and a real HTTP hook server.

mod decorator_support;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use decorator_support::{group_key, object, sync_decorator, wait_for, wait_until, Env};
use metacontroller_api::DECORATOR_CONTROLLER_ANNOTATION;
use metacontroller_testkit::{eventually, CrdBuilder, HookReply, HookServer};
use serde_json::{json, Value};

/// The hook: attaches one `child` named after the target, labelled `test: <label>`.
fn attach_named_after_target(
    child: &CrdBuilder,
    label: &'static str,
) -> impl Fn(&str, &Value) -> HookReply + Send + Sync + 'static {
    let (child_av, child_kind) = (child.api_version(), child.kind().to_string());
    move |_, req| {
        let name = req["object"]["metadata"]["name"].clone();
        HookReply::json(json!({"attachments": [{
            "apiVersion": child_av, "kind": child_kind,
            "metadata": {"name": name, "labels": {"test": label}}}]}))
    }
}

/// Upstream TestSyncWebhook: the hook attaches a child named after the target; it is
/// created with the target as controller owner and this decorator's annotation, and the
/// next request lists it under its v1 (relative) key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_hook_attaches_a_child_named_after_the_target() {
    let env = Env::start("dec-sync").await;
    let parent = env.crd("Parent").await;
    let child = env.crd("Child").await;
    let hook = HookServer::start(attach_named_after_target(&child, "test")).await;
    let _dc = env
        .start_decorator(sync_decorator(
            "dc",
            &parent,
            &hook.url("/sync"),
            json!({"attachments": [{"apiVersion": child.api_version(), "resource": child.plural()}]}),
        ))
        .await;
    let target = env
        .create(
            &env.api(&parent),
            object(&parent, "test-sync-webhook", json!({})),
        )
        .await;

    let created = wait_for(&env.api(&child), "test-sync-webhook").await;
    let owner = &created.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.uid, target.metadata.uid.clone().unwrap());
    assert_eq!(owner.kind, "Parent");
    assert_eq!(owner.controller, Some(true));
    assert_eq!(
        created.metadata.annotations.as_ref().unwrap()[DECORATOR_CONTROLLER_ANNOTATION],
        "dc"
    );
    assert_eq!(created.metadata.labels.as_ref().unwrap()["test"], "test");

    let key = group_key(&child);
    eventually(
        "a request listing the attachment under its name",
        || async {
            hook.requests("/sync").iter().any(|r| {
                r["finalizing"] == false
                    && r["attachments"][&key].get("test-sync-webhook").is_some()
                    && r["controller"]["kind"] == "DecoratorController"
            })
        },
    )
    .await;
}

/// Upstream TestResyncAfter: after a quiet sync asking `resyncAfterSeconds: 0.1`, the next
/// sync comes well within a second, and the status the hook reports is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resync_after_seconds_brings_the_next_sync() {
    let env = Env::start("dec-resync").await;
    let parent = env.crd("ResyncParent").await;
    let last_sync: Arc<Mutex<Option<Instant>>> = Arc::default();
    let done = Arc::new(Mutex::new(false));
    let hook = HookServer::start(move |_, req| {
        let status = &req["object"]["status"];
        let mut last = last_sync.lock().unwrap();
        let mut done = done.lock().unwrap();
        let response = if status.is_null() {
            json!({"status": {}})
        } else if last.is_none() {
            *last = Some(Instant::now());
            json!({"resyncAfterSeconds": 0.1})
        } else if !*done {
            *done = true;
            let elapsed = last.map(|t| t.elapsed().as_secs_f64()).unwrap_or(99.0);
            json!({"status": {"elapsedSeconds": elapsed}})
        } else {
            json!({"status": status})
        };
        HookReply::json(response)
    })
    .await;
    let dc = sync_decorator("test-resync-after", &parent, &hook.url("/sync"), json!({}));
    let _dc = env.start_decorator(dc).await;
    env.create(
        &env.api(&parent),
        object(&parent, "test-resync-after", json!({})),
    )
    .await;
    let obj = wait_until(
        &env.api(&parent),
        "test-resync-after",
        "status.elapsedSeconds",
        |o| o["status"]["elapsedSeconds"].is_number(),
    )
    .await;
    let elapsed = obj["status"]["elapsedSeconds"].as_f64().unwrap();
    assert!(
        elapsed < 1.0,
        "resyncAfter did not occur in time: {elapsed}"
    );
}

/// Upstream TestSyncWebhookV2: a v2 sync hook gets `object` / `attachments` (the same
/// field names as v1) with uniform `<namespace>/<name>` keys and its attachment is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_hook_gets_object_and_uniformly_keyed_attachments() {
    let env = Env::start("dec-v2").await;
    let parent = env.crd("DecoratorParentV2").await;
    let child = env.crd("DecoratorChildV2").await;
    let hook = HookServer::start(attach_named_after_target(&child, "v2")).await;
    let _dc = env
        .start_decorator(sync_decorator(
            "test-sync-webhook-v2",
            &parent,
            &hook.url("/sync"),
            json!({
                "attachments": [{"apiVersion": child.api_version(), "resource": child.plural()}],
                "hooks": {"sync": {"version": "v2", "webhook": {"url": hook.url("/sync")}}}
            }),
        ))
        .await;
    env.create(&env.api(&parent), object(&parent, "v2-target", json!({})))
        .await;
    let created = wait_for(&env.api(&child), "v2-target").await;
    assert_eq!(created.metadata.labels.as_ref().unwrap()["test"], "v2");

    let key = group_key(&child);
    let uniform = format!("{}/v2-target", env.ns);
    eventually(
        "a v2 request with the attachment under namespace/name",
        || async {
            hook.requests("/sync").iter().any(|r| {
                r.get("parent").is_none()
                    && r.get("children").is_none()
                    && r["object"]["metadata"]["name"] == "v2-target"
                    && r["attachments"][&key].get(&uniform).is_some()
            })
        },
    )
    .await;
    let first: Value = hook.requests("/sync")[0].clone();
    assert_eq!(
        first["attachments"][&key],
        json!({}),
        "declared type present when empty"
    );
    assert_eq!(first["related"], json!({}));
}

/// `resyncPeriodSeconds` sends unchanged targets to the sync hook again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resync_period_resyncs_unchanged_targets() {
    let env = Env::start("dec-period").await;
    let parent = env.crd("PeriodParent").await;
    let hook = HookServer::start(|_, _| HookReply::json(json!({}))).await;
    let _dc = env
        .start_decorator(sync_decorator(
            "period",
            &parent,
            &hook.url("/sync"),
            json!({"resyncPeriodSeconds": 1}),
        ))
        .await;
    env.create(&env.api(&parent), object(&parent, "p", json!({})))
        .await;
    eventually("the first sync", || async { hook.calls("/sync") >= 1 }).await;
    let first = Instant::now();
    eventually("two periodic resyncs", || async {
        hook.calls("/sync") >= 3
    })
    .await;
    assert!(
        first.elapsed() >= std::time::Duration::from_millis(900),
        "resyncs came faster than the period: {:?}",
        first.elapsed()
    );
}

/// A negative `resyncPeriodSeconds` is accepted and means one second, as upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_resync_period_means_one_second() {
    let env = Env::start("dec-negperiod").await;
    let parent = env.crd("NegPeriodParent").await;
    let hook = HookServer::start(|_, _| HookReply::json(json!({}))).await;
    let _dc = env
        .start_decorator(sync_decorator(
            "negperiod",
            &parent,
            &hook.url("/sync"),
            json!({"resyncPeriodSeconds": -5}),
        ))
        .await;
    env.create(&env.api(&parent), object(&parent, "p", json!({})))
        .await;
    eventually("the first sync", || async { hook.calls("/sync") >= 1 }).await;
    eventually("two periodic resyncs", || async {
        hook.calls("/sync") >= 3
    })
    .await;
}
