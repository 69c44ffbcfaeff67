//! `spec.hookRollout` driven by the binary (issue 52): 50 parents on Jsonnet code, a new
//! version that fails on a parent of the second step, steps `[1, "10%", "100%"]`. The
//! rollout moves one parent, then five, stops at the failure and rolls every parent back;
//! the parents outside the step never ran the new code (their children keep their
//! resourceVersion; the hook writes its version into each child, so a child says which code
//! produced it); the Warning Event and `status.hookRollout` name the failing parent.
//! Passes on the embedded server and on a real one (`METACONTROLLER_E2E_KUBECONFIG`).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use metacontroller_api::composite::CompositeController;
use metacontroller_api::rollout::{HookRolloutStatus, RolloutPhase};
use metacontroller_testkit::{
    create_object, eventually_within, unique_name, until_event, ControllerProcess, TestCluster,
};
use serde_json::json;

mod rollout_support;
use rollout_support::{children, create_parents, set_code};

const WAIT: Duration = Duration::from_secs(120);
const PARENTS: usize = 50;

/// The hook: one child ConfigMap per parent holding the code's version; `failing` parents
/// make it fail.
fn code(version: &str, failing: &[String]) -> String {
    let failing = serde_json::to_string(failing).unwrap_or_default();
    format!(
        "function(request) local name = request.parent.metadata.name;\n\
         if std.member({failing}, name) then error 'version {version} cannot sync ' + name\n\
         else {{children: [{{apiVersion: 'v1', kind: 'ConfigMap', \
         metadata: {{name: name + '-child'}}, data: {{version: '{version}'}}}}]}}"
    )
}

async fn rollout_status(api: &Api<CompositeController>, name: &str) -> Option<HookRolloutStatus> {
    let cc = api.get(name).await.ok()?;
    HookRolloutStatus::from_status(cc.status.as_ref())
}

/// A cluster with 50 parents on v1 code, a controller with `rollout`, and the binary
/// running it, once every child is on v1 and the rollout state is written.
struct Fixture {
    cluster: TestCluster,
    ns: String,
    config_maps: Api<ConfigMap>,
    ccs: Api<CompositeController>,
    cc_name: String,
    /// Parent names in the rollout's order (step 1 is the first).
    order: Vec<String>,
    label: String,
    controller: ControllerProcess,
    parents: Api<kube::core::DynamicObject>,
    /// `apiVersion` and `kind` of the parents.
    parent_type: (String, String),
}

impl Fixture {
    async fn start(prefix: &str, rollout: serde_json::Value) -> Self {
        let (cluster, ns, parent) = TestCluster::start_with_parent(prefix).await;
        cluster.install_metacontroller_crds().await;
        let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
        set_code(&config_maps, &code("v1", &[])).await;
        let parents = parent.api(cluster.client(), Some(&ns));
        let parent_type = (parent.api_version(), parent.kind().to_string());
        let keys = create_parents(&parents, (&parent_type.0, &parent_type.1), &ns, PARENTS).await;
        let order = keys.into_iter().map(|(_, name)| name).collect();
        let label = unique_name("team");
        let mut spec = parent.composite_spec("http://unused.invalid/");
        spec["hooks"] = json!({"sync": {"jsonnet": {
            "configMapRef": {"namespace": ns, "name": "code"}, "key": "sync.jsonnet"}}});
        spec["generateSelector"] = json!(true);
        spec["hookRollout"] = rollout;
        let cc_name = unique_name("rollout");
        let _: CompositeController = cluster.create_controller(&cc_name, &label, spec).await;
        let controller = ControllerProcess::run_team(
            env!("CARGO_BIN_EXE_metacontroller"),
            cluster.kubeconfig_path(),
            &label,
            &[],
        );
        let ccs: Api<CompositeController> = Api::all(cluster.client());
        eventually_within(
            "every child on v1 and the rollout state written",
            WAIT,
            || async {
                let all = children(&config_maps).await;
                all.len() == PARENTS
                    && all.values().all(|(_, v)| v == "v1")
                    && rollout_status(&ccs, &cc_name)
                        .await
                        .is_some_and(|s| s.phase == RolloutPhase::Complete)
            },
        )
        .await;
        Fixture {
            cluster,
            ns,
            config_maps,
            ccs,
            cc_name,
            order,
            label,
            controller,
            parents,
            parent_type,
        }
    }

    /// Kills the controller with SIGKILL and starts a new process.
    fn kill9_and_restart(&mut self) {
        self.controller.kill9();
        self.controller = ControllerProcess::run_team(
            env!("CARGO_BIN_EXE_metacontroller"),
            self.cluster.kubeconfig_path(),
            &self.label,
            &[],
        );
    }

    async fn status(&self) -> HookRolloutStatus {
        rollout_status(&self.ccs, &self.cc_name)
            .await
            .expect("status.hookRollout")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_change_stops_at_its_step_and_rolls_back() {
    let f = Fixture::start("rollout-bad", json!({"steps": [1, "10%", "100%"]})).await;
    let (ns, config_maps, ccs, cc_name, order) =
        (&f.ns, &f.config_maps, &f.ccs, &f.cc_name, &f.order);
    let cluster = &f.cluster;
    let failing = order[2].clone();
    let before = children(config_maps).await;
    let v1 = f.status().await.to;

    // v2 fails on the third parent of the order (and on one far outside the steps).
    set_code(
        config_maps,
        &code("v2", &[failing.clone(), order[40].clone()]),
    )
    .await;
    eventually_within("the rollout rolled back", WAIT, || async {
        rollout_status(ccs, cc_name)
            .await
            .is_some_and(|s| s.phase == RolloutPhase::RolledBack)
    })
    .await;
    let status = f.status().await;
    let shown = format!("{ns}/{failing}");
    assert_eq!(status.failed_parent.as_deref(), Some(shown.as_str()));
    assert_eq!(status.from, v1);
    assert_ne!(status.to, v1);
    assert_eq!(status.step, 1, "stopped at the second step: {status:?}");
    assert!(status.message.contains(&shown), "{}", status.message);
    let event = until_event(
        cluster,
        ("default", cc_name),
        "RolloutRolledBack",
        &shown,
        WAIT,
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event
            .message
            .as_deref()
            .is_some_and(|m| m.contains("cannot sync")),
        "{event:?}"
    );

    // The step's parents are back on v1; the others never ran v2.
    eventually_within("the step's parents back on v1", WAIT, || async {
        children(config_maps).await.values().all(|(_, v)| v == "v1")
    })
    .await;
    let after = children(config_maps).await;
    for name in &order[5..] {
        assert_eq!(
            after.get(name),
            before.get(name),
            "{name} is outside the step"
        );
    }
    // The first step's parent did run v2 (its child was rewritten, then written back).
    assert_ne!(
        after.get(&order[0]).map(|c| &c.0),
        before.get(&order[0]).map(|c| &c.0)
    );
}

/// Children on v2 and the rollout status, read in this order: the step only grows, so the
/// children never count more parents than the step read after them allows.
async fn on_v2_within_step(f: &Fixture) -> (usize, HookRolloutStatus) {
    let on_v2 = children(&f.config_maps)
        .await
        .values()
        .filter(|(_, v)| v == "v2")
        .count();
    (on_v2, f.status().await)
}

/// A good change reaches all 50 parents in the steps (1, 5, 50), with a pause after each,
/// never more parents on the new code than the current step allows; Events name each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_change_goes_step_by_step_to_every_parent() {
    let f = Fixture::start(
        "rollout-good",
        json!({"steps": [1, "10%", "100%"], "pauseSeconds": 1}),
    )
    .await;
    let v1 = f.status().await.to;
    set_code(&f.config_maps, &code("v2", &[])).await;
    let allowed = [1, 5, PARENTS];
    let mut steps_seen = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (on_v2, status) = on_v2_within_step(&f).await;
        if status.to != v1 {
            let step = status.step as usize;
            assert!(
                status.phase == RolloutPhase::Complete || on_v2 <= allowed[step.min(2)],
                "{on_v2} parents on v2 at step {step}: {status:?}"
            );
            steps_seen.insert(step);
        }
        if status.phase == RolloutPhase::Complete && status.to != v1 && on_v2 == PARENTS {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rollout did not complete: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = f.status().await;
    assert_eq!((status.from, status.updated), (v1, PARENTS as u32));
    for needle in ["step 2: 5 of 50", "step 3: 50 of 50"] {
        until_event(
            &f.cluster,
            ("default", &f.cc_name),
            "RolloutStep",
            needle,
            WAIT,
        )
        .await;
    }
    until_event(
        &f.cluster,
        ("default", &f.cc_name),
        "RolloutComplete",
        "every parent (50)",
        WAIT,
    )
    .await;
    assert!(steps_seen.contains(&1), "step 2 observed: {steps_seen:?}");
}

/// kill -9 in mid-rollout (held at step 1 by a long pause): the restarted process reads
/// `status.hookRollout` and the stored versions and stays at the same step, with the same
/// parent on the new code, and no other parent's child rewritten (so none ran either code
/// anew, nor switched back); the state says why it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_mid_rollout_resumes_at_the_same_step() {
    let mut f = Fixture::start(
        "rollout-restart",
        json!({"steps": [1, "100%"], "pauseSeconds": 3600}),
    )
    .await;
    let before = children(&f.config_maps).await;
    set_code(&f.config_maps, &code("v2", &[])).await;
    eventually_within("step 1 healthy and pausing", WAIT, || async {
        let status = f.status().await;
        status.healthy == 1 && status.message.contains("pausing")
    })
    .await;
    let held = f.status().await;
    let first = f.order[0].clone();
    let during = children(&f.config_maps).await;
    assert_eq!(during.get(&first).map(|c| c.1.as_str()), Some("v2"));
    f.kill9_and_restart();
    // The new process queues every parent at start; a parent created after that is synced
    // after them, so once its child exists the others have been synced by the new process.
    eventually_within("the restarted process reads the state", WAIT, || async {
        f.controller.logs().contains("hook rollout: state read")
    })
    .await;
    let (api_version, kind) = f.parent_type.clone();
    let late = json!({"apiVersion": api_version, "kind": kind,
        "metadata": {"name": "late", "namespace": f.ns}});
    create_object(&f.parents, late).await;
    eventually_within("the late parent's child", WAIT, || async {
        children(&f.config_maps).await.contains_key("late")
    })
    .await;
    eventually_within("the restarted process holds the step", WAIT, || async {
        let status = f.status().await;
        status.healthy == 1 && status.message.contains("pausing")
    })
    .await;
    let after_restart = f.status().await;
    assert_eq!(
        (
            &after_restart.to,
            after_restart.step,
            &after_restart.cutoff,
            after_restart.phase
        ),
        (&held.to, held.step, &held.cutoff, held.phase)
    );
    let after = children(&f.config_maps).await;
    assert_eq!(
        after.get(&first),
        during.get(&first),
        "the step's parent stays on v2"
    );
    for name in &f.order[1..] {
        assert_eq!(after.get(name), before.get(name), "{name} stays on v1");
    }
    assert!(f.controller.logs().contains("hook rollout: state read"));
}
