//! What a DecoratorController writes on the target itself: labels and annotations merged
//! (a `null` value removes a key, other keys are kept) and status (through `/status` when
//! the resource has the subresource, in the main object otherwise).

mod decorator_support;
use decorator_support::{merge_patch, object, sync_barrier, sync_decorator, wait_until, Env};
use metacontroller_testkit::{assert_no_status_only_syncs, eventually, HookReply, HookServer};
use serde_json::{json, Value};

/// Labels and annotations are added, then removed with `null`, while the target's own
/// labels and annotations stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_and_annotations_are_added_and_removed() {
    let env = Env::start("dec-labels").await;
    let target = env.crd("Labelled").await;
    let hook = HookServer::start(|_, _| {
        HookReply::json(json!({
            "labels": {"decorated": "yes", "remove-me": null},
            "annotations": {"note": "hi"}
        }))
    })
    .await;
    let _dc = env
        .start_decorator(json!({
            "metadata": {"name": "labeller"},
            "spec": {
                "resources": [{"apiVersion": target.api_version(), "resource": target.plural(),
                               "labelSelector": {"matchLabels": {"app": "x"}}}],
                "resyncPeriodSeconds": 1,
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}}
            }
        }))
        .await;
    let targets = env.api(&target);
    env.create(
        &targets,
        object(
            &target,
            "t",
            json!({"labels": {"app": "x", "remove-me": "1"}, "annotations": {"mine": "keep"}}),
        ),
    )
    .await;
    let obj = wait_until(&targets, "t", "labels and annotations added", |o| {
        o["metadata"]["labels"]["decorated"] == "yes"
            && o["metadata"]["annotations"]["note"] == "hi"
    })
    .await;
    assert_eq!(
        obj["metadata"]["labels"],
        json!({"app": "x", "decorated": "yes"})
    );
    assert_eq!(obj["metadata"]["annotations"]["mine"], "keep");

    hook.set_handler(|_, _| {
        HookReply::json(json!({"labels": {"decorated": null}, "annotations": {"note": null}}))
    });
    let obj = wait_until(&targets, "t", "labels and annotations removed", |o| {
        o["metadata"]["labels"].get("decorated").is_none()
            && o["metadata"]["annotations"].get("note").is_none()
    })
    .await;
    assert_eq!(obj["metadata"]["labels"], json!({"app": "x"}));
    assert_eq!(obj["metadata"]["annotations"], json!({"mine": "keep"}));
}

/// A resource without the status subresource gets its status in the main object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_written_in_the_main_object_without_a_status_subresource() {
    let env = Env::start("dec-status").await;
    let target = env
        .install(env.crd_builder("NoStatus").without_status_subresource())
        .await;
    let hook = HookServer::start(|_, req| {
        let gen = req["object"]["metadata"]["generation"].clone();
        HookReply::json(json!({"status": {"phase": "decorated", "seenGeneration": gen}}))
    })
    .await;
    let dc = sync_decorator("statuser", &target, &hook.url("/sync"), json!({}));
    let _dc = env.start_decorator(dc).await;
    let targets = env.api(&target);
    env.create(&targets, object(&target, "s", json!({}))).await;
    let obj = wait_until(&targets, "s", "status in the main object", |o| {
        o["status"]["phase"] == "decorated"
    })
    .await;
    // Decorators do not inject observedGeneration (unlike CompositeController).
    assert!(obj["status"].get("observedGeneration").is_none(), "{obj}");
}

/// With `ignoreStatusChanges`, a status-only change of a target does not trigger a sync;
/// a label change does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_status_changes_skips_status_only_updates() {
    let env = Env::start("dec-ignore").await;
    let target = env.crd("Quiet").await;
    let hook = HookServer::start(|_, _| HookReply::json(json!({}))).await;
    let _dc = env
        .start_decorator(json!({
            "metadata": {"name": "quiet"},
            "spec": {
                "resources": [{"apiVersion": target.api_version(), "resource": target.plural(),
                               "ignoreStatusChanges": true}],
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}}
            }
        }))
        .await;
    let targets = env.api(&target);
    env.create(&targets, object(&target, "q", json!({}))).await;
    eventually("the first sync", || async { hook.calls("/sync") >= 1 }).await;

    let status = json!({"status": {"by": "someone else"}});
    targets
        .patch_status("q", &Default::default(), &kube::api::Patch::Merge(&status))
        .await
        .unwrap();
    // The reconciler has been handed the status change, and a later sync has started: a
    // sync the status change caused would have come before it.
    env.wait_cache_caught_up(&target, "q").await;
    sync_barrier(&targets, "q", &hook).await;
    let seen: Vec<Value> = hook
        .requests("/sync")
        .into_iter()
        .map(|r| r["object"].clone())
        .collect();
    assert_no_status_only_syncs(&seen);
    let before = hook.calls("/sync");

    merge_patch(
        &targets,
        "q",
        json!({"metadata": {"labels": {"poke": "1"}}}),
    )
    .await;
    eventually("a sync after the label change", || async {
        hook.calls("/sync") > before
    })
    .await;
}
