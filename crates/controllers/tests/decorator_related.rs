//! DecoratorController customize hook + related objects (upstream TestCustomizeWebhook):
//! the customize hook names a ConfigMap; the sync hook gets it under `related` and
//! attaches a child named after the target and the related object; a change of the related
//! object triggers a new sync.

mod decorator_support;

use decorator_support::{
    events_for, group_key, object, sync_decorator, target_name, wait_for, wait_until, Env,
};
use kube::api::{Patch, PatchParams};
use metacontroller_testkit::{eventually, CrdBuilder, HookReply, HookServer};
use serde_json::{json, Value};

/// The hook: `/customize` names ConfigMap `related-config-map` of the target's namespace;
/// `/sync` attaches a `child_kind` named `<target>-<related>` per related ConfigMap,
/// carrying its `data.v`.
fn customize_then_attach(
    child_av: String,
    child_kind: String,
) -> impl Fn(&str, &Value) -> HookReply + Send + Sync + 'static {
    move |path, req| {
        if path == "/customize" {
            let ns = req["parent"]["metadata"]["namespace"].clone();
            return HookReply::json(json!({"relatedResources": [{
                "apiVersion": "v1", "resource": "configmaps",
                "namespace": ns, "names": ["related-config-map"]}]}));
        }
        let related: Vec<&Value> = req["related"]["ConfigMap.v1"]
            .as_object()
            .map(|m| m.values().collect())
            .unwrap_or_default();
        let attachments: Vec<Value> = related
            .iter()
            .map(|r| {
                let name = format!(
                    "{}-{}",
                    target_name(req),
                    r["metadata"]["name"].as_str().unwrap_or_default()
                );
                json!({"apiVersion": child_av, "kind": child_kind,
                       "metadata": {"name": name},
                       "spec": {"v": r["data"]["v"]}})
            })
            .collect();
        HookReply::json(json!({"attachments": attachments}))
    }
}

/// What the hooks were sent: the customize request names the decorator kind and the
/// target; every sync request has the attachments' group.
fn assert_requests(hook: &HookServer, child: &CrdBuilder) {
    let customize = hook.last_request("/customize").unwrap();
    assert_eq!(customize["controller"]["kind"], "DecoratorController");
    assert_eq!(
        customize["parent"]["metadata"]["name"],
        "test-customize-webhook"
    );
    let key = group_key(child);
    assert!(hook
        .requests("/sync")
        .iter()
        .all(|r| r["attachments"].get(&key).is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn customize_hook_related_objects_reach_the_sync_hook() {
    let env = Env::start("dec-customize").await;
    let parent = env.crd("Parent").await;
    let child = env.crd("Child").await;
    let cms = env.builtin("v1", "ConfigMap", "configmaps");
    env.create(
        &cms,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "related-config-map"}, "data": {"v": "1"}}),
    )
    .await;
    let (child_av, child_kind) = (child.api_version(), child.kind().to_string());
    let hook = HookServer::start(customize_then_attach(child_av, child_kind)).await;
    let extra = json!({
        "attachments": [{"apiVersion": child.api_version(), "resource": child.plural(),
                         "updateStrategy": {"method": "InPlace"}}],
        "hooks": {
            "sync": {"webhook": {"url": hook.url("/sync")}},
            "customize": {"webhook": {"url": hook.url("/customize")}}
        }
    });
    let _dc = env
        .start_decorator(sync_decorator("dc", &parent, &hook.url("/sync"), extra))
        .await;
    env.create(
        &env.api(&parent),
        object(&parent, "test-customize-webhook", json!({})),
    )
    .await;
    let attached = wait_for(
        &env.api(&child),
        "test-customize-webhook-related-config-map",
    )
    .await;
    assert_eq!(attached.data["spec"]["v"], "1");
    assert_requests(&hook, &child);

    // The related object changes: the target is synced again with the new data.
    cms.patch(
        "related-config-map",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"v": "2"}})),
    )
    .await
    .unwrap();
    eventually("the attachment updated from the related object", || async {
        env.api(&child)
            .get("test-customize-webhook-related-config-map")
            .await
            .is_ok_and(|c| c.data["spec"]["v"] == "2")
    })
    .await;
}

/// A 429 from the customize hook is retried after Retry-After (one second without it),
/// without a SyncError Event, as the sync hook's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn customize_hook_429_is_retried_without_an_event() {
    let env = Env::start("dec-cust429").await;
    let target = env.crd("Busy").await;
    let refusals = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = refusals.clone();
    let hook = HookServer::start(move |path, _| {
        use std::sync::atomic::Ordering;
        match path {
            "/customize" if counter.fetch_add(1, Ordering::SeqCst) < 2 => {
                HookReply::status(429, "slow down")
            }
            "/customize" => HookReply::json(json!({"relatedResources": []})),
            _ => HookReply::json(json!({"labels": {"decorated": "yes"}})),
        }
    })
    .await;
    let _dc = env
        .start_decorator(sync_decorator(
            "busy",
            &target,
            &hook.url("/sync"),
            json!({"hooks": {
                "customize": {"webhook": {"url": hook.url("/customize")}},
                "sync": {"webhook": {"url": hook.url("/sync")}}
            }}),
        ))
        .await;
    let targets = env.api(&target);
    let created = std::time::Instant::now();
    env.create(&targets, object(&target, "b", json!({}))).await;
    wait_until(&targets, "b", "decorated after the 429s", |o| {
        o["metadata"]["labels"]["decorated"] == "yes"
    })
    .await;
    assert!(hook.calls("/customize") >= 3);
    assert!(
        events_for(&env, "b", "SyncError").await.is_empty(),
        "a 429 is not a sync error"
    );
    // Two 429s without Retry-After: two one-second waits, not the fast error backoff.
    assert!(
        created.elapsed() >= std::time::Duration::from_millis(1500),
        "retried too soon: {:?}",
        created.elapsed()
    );
}
