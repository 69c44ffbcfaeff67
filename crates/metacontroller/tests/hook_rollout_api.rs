//! `spec.hookRollout` (issue 52) as far as this version carries it: the API server keeps the
//! spec field and a `status.hookRollout` on both controller kinds (nothing pruned), the
//! binary running such a controller with webhook hooks only says in its log that the
//! rollout does nothing for them, and `metacontroller rollout status|pause|resume` read and set what the rollout uses.
//! Passes on the embedded server and on a real one (`METACONTROLLER_E2E_KUBECONFIG`).

use std::path::PathBuf;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_api::rollout::{HookRolloutStatus, RolloutPhase, RolloutStep};
use metacontroller_testkit::{eventually_within, unique_name, ControllerProcess, TestCluster};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

fn rollout() -> serde_json::Value {
    json!({"steps": [1, "10%", "100%"], "pauseSeconds": 5, "maxFailures": 1,
           "healthy": {"condition": {"type": "Ready", "status": "True"}, "deadlineSeconds": 60}})
}

fn status() -> serde_json::Value {
    json!({"hookRollout": {"from": "a".repeat(64), "to": "b".repeat(64), "step": 1,
        "updated": 5, "healthy": 4, "failed": 1, "phase": "RolledBack",
        "cutoff": "00ff00ff00ff00ff/ns/p1", "stepStartedAt": 1_700_000_000,
        "observed": "b".repeat(64), "message": "parent ns/p1 failed",
        "failedParent": "ns/p1"}})
}

#[tokio::test]
async fn both_kinds_keep_hook_rollout_spec_and_status() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let parent = cluster.install_parent_crd("hookrollout").await;
    let label = unique_name("team");
    let mut spec = parent.composite_spec("http://127.0.0.1:9/sync");
    spec["hookRollout"] = rollout();
    let cc_name = unique_name("cc");
    let cc: CompositeController = cluster.create_controller(&cc_name, &label, spec).await;
    let kept = cc.spec.hook_rollout.expect("spec.hookRollout kept");
    assert_eq!(kept.steps[1], RolloutStep::Percent("10%".into()));
    assert_eq!(kept.steps[0], RolloutStep::Count(1));
    assert_eq!(kept.max_failures, Some(1));
    let dc_spec = json!({"resources": [{"apiVersion": "v1", "resource": "configmaps",
            "labelSelector": {"matchLabels": {"decorated": "none"}}}],
        "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:9/sync"}}},
        "hookRollout": rollout()});
    let dc_name = unique_name("dc");
    let dc: DecoratorController = cluster.create_controller(&dc_name, &label, dc_spec).await;
    assert_eq!(
        dc.spec.hook_rollout.expect("spec.hookRollout kept").healthy,
        kept.healthy
    );
    // The status subresource keeps every field of status.hookRollout.
    let ccs: Api<CompositeController> = Api::all(cluster.client());
    let written = ccs
        .patch_status(
            &cc_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status()})),
        )
        .await
        .expect("writing status.hookRollout");
    let read = HookRolloutStatus::from_status(written.status.as_ref()).expect("status.hookRollout");
    assert_eq!(read.phase, RolloutPhase::RolledBack);
    assert_eq!(read.failed_parent.as_deref(), Some("ns/p1"));
    assert_eq!(
        written.status.as_ref().and_then(|s| s.get("hookRollout")),
        status().get("hookRollout")
    );
    // The binary runs both controllers and says a rollout of webhook code does nothing
    // (polled: the embedded server runs on this test's thread).
    let process = ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &label,
        &[],
    );
    let warned = |name: &str| {
        process.logs().lines().any(|l| {
            l.contains("WARN")
                && l.contains("spec.hookRollout applies to in-process")
                && l.contains(name)
        })
    };
    eventually_within("both hookRollout warnings", WAIT, || {
        let both = warned(&cc_name) && warned(&dc_name);
        async move { both }
    })
    .await;
}

/// `metacontroller rollout ARGS --kubeconfig KUBECONFIG`: exit code and output (run off the
/// test's thread, which serves the embedded API server).
async fn rollout_cli(kubeconfig: PathBuf, args: &[&str]) -> (i32, String) {
    let args: Vec<String> = args.iter().map(ToString::to_string).collect();
    tokio::task::spawn_blocking(move || {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_metacontroller"))
            .arg("rollout")
            .args(&args)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .output()
            .expect("run the metacontroller binary");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.code().unwrap_or(-1), text)
    })
    .await
    .expect("rollout command")
}

#[tokio::test]
async fn rollout_status_pause_and_resume_work_like_kubectl_rollout() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let label = unique_name("team");
    let spec = |rollout: Option<serde_json::Value>| {
        let mut spec = json!({"resources": [{"apiVersion": "v1", "resource": "configmaps",
                "labelSelector": {"matchLabels": {"decorated": "none"}}}],
            "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:9/sync"}}}});
        if let Some(rollout) = rollout {
            spec["hookRollout"] = rollout;
        }
        spec
    };
    let name = unique_name("dc");
    let _: DecoratorController = cluster
        .create_controller(&name, &label, spec(Some(rollout())))
        .await;
    let plain = unique_name("dc");
    let _: DecoratorController = cluster.create_controller(&plain, &label, spec(None)).await;
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let target = format!("dc/{name}");

    let (code, text) = rollout_cli(kubeconfig.clone(), &["status", &target]).await;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("no rollout yet"), "{text}");
    let (code, text) = rollout_cli(kubeconfig.clone(), &["status", &format!("dc/{plain}")]).await;
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("has no spec.hookRollout"), "{text}");

    let dcs: Api<DecoratorController> = Api::all(cluster.client());
    let mut progressing = status();
    progressing["hookRollout"]["phase"] = json!("Progressing");
    progressing["hookRollout"]["failedParent"] = serde_json::Value::Null;
    for (body, rolled_back) in [(progressing, false), (status(), true)] {
        dcs.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": body})),
        )
        .await
        .expect("writing status.hookRollout");
        let (code, text) = rollout_cli(kubeconfig.clone(), &["status", &target]).await;
        if rolled_back {
            assert!(text.contains("RolledBack at step 2"), "{text}");
            assert_eq!(code, 1, "{text}");
            assert!(text.contains("failed parent ns/p1"), "{text}");
            assert!(text.contains("rollout rolled back"), "{text}");
        } else {
            assert_eq!(code, 0, "{text}");
            assert!(
                text.contains("Progressing at step 2: 5 updated, 4 healthy, 1 failed"),
                "{text}"
            );
        }
    }

    let paused = || async {
        let dc = dcs.get(&name).await.expect("reading the controller");
        dc.spec.hook_rollout.and_then(|r| r.paused)
    };
    let (code, text) = rollout_cli(kubeconfig.clone(), &["pause", &target]).await;
    assert_eq!((code, paused().await), (0, Some(true)), "{text}");
    let (code, text) = rollout_cli(kubeconfig.clone(), &["resume", &target]).await;
    assert_eq!((code, paused().await), (0, None), "{text}");
    // The rest of spec.hookRollout is left as it was.
    let dc = dcs.get(&name).await.expect("reading the controller");
    assert_eq!(dc.spec.hook_rollout.map(|r| r.steps.len()), Some(3));
}
