//! A converged DecoratorController resync of 100 targets makes zero API writes: every
//! target's labels, annotations, status and attachment are already as the hook wants, so
//! the hook is called again but nothing is sent (request counters of the embedded API
//! server; the assertion is skipped against a real cluster).

mod decorator_support;

use std::time::Duration;

use decorator_support::{object, sync_decorator, target_name, Env};
use kube::api::Api;
use kube::core::DynamicObject;
use metacontroller_testkit::{eventually_within, Control, HookReply, HookServer};
use serde_json::{json, Value};

const TARGETS: usize = 100;

/// The hook: labels, annotations, a status and one ConfigMap attachment `<target>-cm`,
/// the same on every call.
fn noop_hook(_: &str, req: &Value) -> HookReply {
    let name = target_name(req);
    HookReply::json(json!({
        "labels": {"decorated": "yes", "absent": null},
        "annotations": {"decorated-by": "noop"},
        "status": {"ready": true, "replicas": 1.0},
        "attachments": [{"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": format!("{name}-cm")},
                         "data": {"owner": name}}]
    }))
}

/// Waits (60 s at most) until all targets are decorated and every attachment exists.
async fn wait_all_decorated(targets: &Api<DynamicObject>, cms: &Api<DynamicObject>) {
    eventually_within("all targets decorated", Duration::from_secs(60), || async {
        let Ok(list) = targets.list(&Default::default()).await else {
            return false;
        };
        let Ok(cm_list) = cms.list(&Default::default()).await else {
            return false;
        };
        list.items.len() == TARGETS
            && list.items.iter().all(|t| {
                t.data["status"]["ready"] == true
                    && t.metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l["decorated"] == "yes")
            })
            && cm_list
                .items
                .iter()
                .filter(|c| c.metadata.name.as_deref().unwrap_or("").ends_with("-cm"))
                .count()
                == TARGETS
    })
    .await;
}

/// Two full resyncs of the converged targets make no write.
async fn assert_resyncs_write_nothing(env: &Env, control: &Control, hook: &HookServer) {
    env.cluster
        .settle(Duration::from_millis(1500), Duration::from_secs(30))
        .await;
    control.reset_counts();
    let before = hook.calls("/sync");
    eventually_within("two full resyncs", Duration::from_secs(30), || async {
        hook.calls("/sync") >= before + 2 * TARGETS
    })
    .await;
    eprintln!(
        "decorator: resync of {TARGETS} converged targets: {} hook calls, {} writes",
        hook.calls("/sync") - before,
        control.writes()
    );
    assert_eq!(
        control.writes(),
        0,
        "writes during a converged resync: {:?}",
        control.request_counts()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noop_resync_of_100_targets_makes_zero_writes() {
    let env = Env::start("dec-noop").await;
    let target = env.crd("Many").await;
    let hook = HookServer::start(noop_hook).await;
    let extra = json!({
        "attachments": [{"apiVersion": "v1", "resource": "configmaps",
                         "updateStrategy": {"method": "InPlace"}}],
        "resyncPeriodSeconds": 1,
    });
    let _dc = env
        .start_decorator(sync_decorator("noop", &target, &hook.url("/sync"), extra))
        .await;
    let targets = env.api(&target);
    let started = std::time::Instant::now();
    for i in 0..TARGETS {
        env.create(&targets, object(&target, &format!("t{i:03}"), json!({})))
            .await;
    }
    let cms = env.builtin("v1", "ConfigMap", "configmaps");
    wait_all_decorated(&targets, &cms).await;
    let converged = started.elapsed();
    let Some(control) = env
        .cluster
        .control_or_skip("noop_resync_of_100_targets_makes_zero_writes")
    else {
        return;
    };
    eprintln!(
        "decorator: {TARGETS} targets converged in {converged:?}; {} writes so far (incl. {TARGETS} target creates), {} hook calls",
        control.writes(),
        hook.calls("/sync")
    );
    assert_resyncs_write_nothing(&env, &control, &hook).await;
}
