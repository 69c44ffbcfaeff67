//! DecoratorController finalization: the `metacontroller.io/decoratorcontroller-<name>`
//! finalizer, the finalize hook when a target is deleted, and when it stops matching the
//! selectors (opt-out), with its attachments cleaned up and the finalizer removed.

mod decorator_support;

use decorator_support::{
    group_key, merge_patch, object, sync_decorator, target_name, wait_for, wait_gone, wait_until,
    Env,
};
use metacontroller_controllers::decorator::DecoratorHandle;
use metacontroller_testkit::{eventually, CrdBuilder, HookReply, HookServer};
use serde_json::{json, Value};

const FINALIZER: &str = "metacontroller.io/decoratorcontroller-cleanup";

/// Sync attaches `<target>-extra`; finalize asks for no attachments and reports
/// `finalized` once none are observed.
fn hook(child: &CrdBuilder) -> impl Fn(&str, &Value) -> HookReply + Send + Sync + 'static {
    let (child_av, child_kind, key) = (
        child.api_version(),
        child.kind().to_string(),
        group_key(child),
    );
    move |path, req| {
        if path == "/finalize" {
            let empty = req["attachments"][&key]
                .as_object()
                .is_some_and(|m| m.is_empty());
            return HookReply::json(json!({"attachments": [], "finalized": empty}));
        }
        let name = target_name(req);
        HookReply::json(json!({"attachments": [{
            "apiVersion": child_av, "kind": child_kind,
            "metadata": {"name": format!("{name}-extra")}}]}))
    }
}

fn finalizers(obj: &Value) -> Vec<String> {
    serde_json::from_value(obj["metadata"]["finalizers"].clone()).unwrap_or_default()
}

async fn setup(env: &Env, hook: &HookServer) -> (CrdBuilder, CrdBuilder) {
    let target = env.crd("Target").await;
    let child = env.crd("Extra").await;
    hook.set_handler(self::hook(&child));
    (target, child)
}

fn decorator(target: &CrdBuilder, child: &CrdBuilder, hook: &HookServer) -> Value {
    json!({
        "metadata": {"name": "cleanup"},
        "spec": {
            "resources": [{"apiVersion": target.api_version(), "resource": target.plural(),
                           "annotationSelector": {"matchAnnotations": {"decorate": "yes"}}}],
            "attachments": [{"apiVersion": child.api_version(), "resource": child.plural()}],
            "hooks": {
                "sync": {"webhook": {"url": hook.url("/sync")}},
                "finalize": {"webhook": {"url": hook.url("/finalize")}}
            }
        }
    })
}

/// Starts the cleanup decorator (keep its handle) and an opted-in target `name`; waits
/// until its attachment `<name>-extra` exists and our finalizer is on it.
async fn finalizable_target(
    env: &Env,
    hook: &HookServer,
    name: &str,
) -> (CrdBuilder, CrdBuilder, DecoratorHandle) {
    let (target, child) = setup(env, hook).await;
    let dc = env.start_decorator(decorator(&target, &child, hook)).await;
    let targets = env.api(&target);
    env.create(
        &targets,
        object(&target, name, json!({"annotations": {"decorate": "yes"}})),
    )
    .await;
    wait_for(&env.api(&child), &format!("{name}-extra")).await;
    wait_until(&targets, name, "our finalizer on the target", |o| {
        finalizers(o).contains(&FINALIZER.to_string())
    })
    .await;
    (target, child, dc)
}

/// Removing the opt-in annotation makes the target stop matching: the finalize hook runs
/// (`finalizing: true`), the attachment is deleted and the finalizer goes; the target
/// itself stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opt_out_by_removing_the_annotation_finalizes_and_cleans_up() {
    let env = Env::start("dec-optout").await;
    let hook = HookServer::start(|_, _| HookReply::json(json!({}))).await;
    let (target, child, _dc) = finalizable_target(&env, &hook, "t1").await;
    let targets = env.api(&target);
    assert_eq!(hook.calls("/finalize"), 0);

    merge_patch(
        &targets,
        "t1",
        json!({"metadata": {"annotations": {"decorate": null}}}),
    )
    .await;
    wait_gone(&env.api(&child), "t1-extra").await;
    let after = wait_until(&targets, "t1", "finalizer removed", |o| {
        !finalizers(o).contains(&FINALIZER.to_string())
    })
    .await;
    assert!(after["metadata"]["deletionTimestamp"].is_null());
    assert!(hook
        .requests("/finalize")
        .iter()
        .all(|r| r["finalizing"] == true));
    assert!(hook.calls("/finalize") >= 1);

    // No longer a target: later changes do not reach either hook. A target created after
    // the change is the positive signal: its events come after t1's and keys are taken in
    // order, so once it is decorated a sync of t1 would have started.
    let calls = hook.all_calls().len();
    merge_patch(&targets, "t1", json!({"spec": {"touched": true}})).await;
    env.create(
        &targets,
        object(&target, "t2", json!({"annotations": {"decorate": "yes"}})),
    )
    .await;
    wait_for(&env.api(&child), "t2-extra").await;
    let t1_calls = hook
        .all_calls()
        .into_iter()
        .skip(calls)
        .filter(|c| c.body["object"]["metadata"]["name"] == "t1")
        .count();
    assert_eq!(t1_calls, 0, "{:?}", hook.all_calls());
}

/// Deleting a target runs the finalize hook while our finalizer holds it; once finalized
/// the finalizer goes and the target disappears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_target_calls_the_finalize_hook_then_releases_it() {
    let env = Env::start("dec-delete").await;
    let hook = HookServer::start(|_, _| HookReply::json(json!({}))).await;
    let (target, child, _dc) = finalizable_target(&env, &hook, "t2").await;
    let targets = env.api(&target);

    targets.delete("t2", &Default::default()).await.unwrap();
    wait_gone(&targets, "t2").await;
    wait_gone(&env.api(&child), "t2-extra").await;
    eventually("a finalize call", || async { hook.calls("/finalize") >= 1 }).await;
    assert!(hook.requests("/finalize").iter().all(
        |r| r["finalizing"] == true && !r["object"]["metadata"]["deletionTimestamp"].is_null()
    ));
}

/// Without a finalize hook no finalizer is added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_finalizer_without_a_finalize_hook() {
    let env = Env::start("dec-nofin").await;
    let hook = HookServer::start(|_, _| HookReply::json(json!({"labels": {"seen": "yes"}}))).await;
    let target = env.crd("Plain").await;
    let dc = sync_decorator("plain", &target, &hook.url("/sync"), json!({}));
    let _dc = env.start_decorator(dc).await;
    let targets = env.api(&target);
    env.create(&targets, object(&target, "t3", json!({}))).await;
    let obj = wait_until(&targets, "t3", "the label", |o| {
        o["metadata"]["labels"]["seen"] == "yes"
    })
    .await;
    assert!(finalizers(&obj).is_empty(), "{obj}");
}
