//! DecoratorController under faults: a failing hook or an invalid response records a
//! `SyncError` Warning Event on the target and the target converges once the hook is
//! fixed; injected conflicts on target updates converge without duplicate attachments.

mod decorator_support;

use decorator_support::{events_for, object, target_name, wait_for, wait_until, Env};
use metacontroller_testkit::{eventually, Fault, HookReply, HookServer};
use serde_json::json;

fn good_reply(req: &serde_json::Value) -> HookReply {
    let name = target_name(req);
    HookReply::json(json!({
        "labels": {"decorated": "yes"},
        "attachments": [{"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": format!("{name}-cm")}}]
    }))
}

fn spec(target: &metacontroller_testkit::CrdBuilder, hook: &HookServer) -> serde_json::Value {
    json!({
        "metadata": {"name": "faulty"},
        "spec": {
            "resources": [{"apiVersion": target.api_version(), "resource": target.plural()}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}}
        }
    })
}

/// The hook answers 500: a SyncError Event on the target, retries with backoff, and the
/// target is decorated once the hook works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_hook_records_an_event_and_recovers() {
    let env = Env::start("dec-fail").await;
    let target = env.crd("Flaky").await;
    let hook = HookServer::start(|_, _| HookReply::status(500, "boom")).await;
    let _dc = env.start_decorator(spec(&target, &hook)).await;
    let targets = env.api(&target);
    env.create(&targets, object(&target, "f", json!({}))).await;
    eventually("a SyncError event on the target", || async {
        !events_for(&env, "f", "SyncError").await.is_empty()
    })
    .await;
    let event = events_for(&env, "f", "SyncError").await.remove(0);
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["involvedObject"]["kind"], target.kind());
    assert!(
        event["message"]
            .as_str()
            .unwrap_or_default()
            .contains("500"),
        "{event}"
    );
    eventually("retries", || async { hook.calls("/sync") >= 2 }).await;

    hook.set_handler(|_, req| good_reply(req));
    wait_until(&targets, "f", "decorated after the fix", |o| {
        o["metadata"]["labels"]["decorated"] == "yes"
    })
    .await;
    wait_for(&env.builtin("v1", "ConfigMap", "configmaps"), "f-cm").await;
}

/// An attachment of a type the decorator does not declare is refused with an Event; as
/// upstream, only that attachment is skipped: the target's labels and the valid
/// attachment are still written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_attachment_type_is_refused_with_an_event() {
    let env = Env::start("dec-undeclared").await;
    let target = env.crd("Strict").await;
    let hook = HookServer::start(|_, _| {
        HookReply::json(json!({"labels": {"decorated": "yes"}, "attachments": [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "nope"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "u-cm"}}]}))
    })
    .await;
    let _dc = env.start_decorator(spec(&target, &hook)).await;
    let targets = env.api(&target);
    env.create(&targets, object(&target, "u", json!({}))).await;
    eventually("a SyncError event naming the undeclared type", || async {
        events_for(&env, "u", "SyncError").await.iter().any(|e| {
            e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("not a declared child resource")
        })
    })
    .await;
    let cms = env.builtin("v1", "ConfigMap", "configmaps");
    wait_for(&cms, "u-cm").await;
    wait_until(&targets, "u", "labels written", |o| {
        o["metadata"]["labels"]["decorated"] == "yes"
    })
    .await;
    let secrets = env.builtin("v1", "Secret", "secrets");
    assert!(secrets.get_opt("nope").await.unwrap().is_none());
}

/// Updates of the target fail with 409 a few times: the sync is retried and converges,
/// with exactly one attachment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_on_target_updates_converge_without_duplicates() {
    let env = Env::start("dec-conflict").await;
    let Some(control) = env
        .cluster
        .control_or_skip("conflicts_on_target_updates_converge_without_duplicates")
    else {
        return;
    };
    let target = env.crd("Contested").await;
    let hook = HookServer::start(|_, req| good_reply(req)).await;
    control.inject(Fault::status(Some("update"), Some(target.plural()), 3, 409));
    let _dc = env.start_decorator(spec(&target, &hook)).await;
    let targets = env.api(&target);
    env.create(&targets, object(&target, "c", json!({}))).await;
    wait_until(&targets, "c", "decorated despite conflicts", |o| {
        o["metadata"]["labels"]["decorated"] == "yes"
    })
    .await;
    let cms = env.builtin("v1", "ConfigMap", "configmaps");
    wait_for(&cms, "c-cm").await;
    let count = cms
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|c| c.metadata.name.as_deref().unwrap_or("").starts_with("c-"))
        .count();
    assert_eq!(count, 1);
    assert!(
        hook.calls("/sync") >= 2,
        "the conflict made the sync run again"
    );
}
