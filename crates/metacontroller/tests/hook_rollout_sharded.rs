//! `spec.hookRollout` with three sharded replicas of the binary (issue 52): each replica
//! syncs only the parents of its shards, one of them (the holder of shard 0) drives the
//! rollout, every replica follows `status.hookRollout` from the API and reports the health
//! of its own parents. The hook writes its code version into each parent's child, and the
//! test reads the children and the status over and over: no parent ever runs the new code
//! before the step that includes it (by the stable order of parent keys), no parent goes
//! back, the steps come in order, and only one replica writes the rollout state during the
//! rollout (every write is seen by a recording proxy per replica). A failing change, on a
//! parent most likely synced by a replica that does not drive, rolls back from its report.
//! Passes on the embedded server and on a real one (`METACONTROLLER_E2E_KUBECONFIG`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_api::rollout::assign::ParentKey;
use metacontroller_api::rollout::{HookRolloutStatus, RolloutPhase};
use metacontroller_testkit::replicas::{sharded_replica_args, writes_by_replica, ShardLeases};
use metacontroller_testkit::{
    eventually_within, unique_name, until_event, ApiRecorder, ControllerProcess, TestCluster,
};
use metacontroller_workqueue::shard_of;
use serde_json::json;

mod rollout_support;
use rollout_support::{children, create_parents, set_code};

const WAIT: Duration = Duration::from_secs(120);
const PARENTS: usize = 40;
const SHARDS: u32 = 12;
const LEASE: Duration = Duration::from_secs(4);

/// The hook: one child ConfigMap per parent (a CompositeController's child, a
/// DecoratorController's attachment) holding the code's version; `failing` parents make it
/// fail.
fn code(version: &str, failing: &[String]) -> String {
    let failing = serde_json::to_string(failing).unwrap_or_default();
    format!(
        "function(request) local composite = std.objectHas(request, 'parent');\n\
         local name = (if composite then request.parent else request.object).metadata.name;\n\
         local out = [{{apiVersion: 'v1', kind: 'ConfigMap', \
         metadata: {{name: name + '-child'}}, data: {{version: '{version}'}}}}];\n\
         if std.member({failing}, name) then error 'version {version} cannot sync ' + name\n\
         else if composite then {{children: out}} else {{attachments: out}}"
    )
}

/// 40 parents on v1 code, a controller with `hookRollout`, and three sharded replicas
/// (each behind its own recording proxy) that split the shards and brought every child to
/// v1.
struct Fixture {
    cluster: TestCluster,
    ns: String,
    config_maps: Api<ConfigMap>,
    /// The controller objects of its kind.
    ctrls: Api<DynamicObject>,
    cc_name: String,
    /// `compositecontrollers` or `decoratorcontrollers`.
    plural: &'static str,
    /// Parent keys by name.
    keys: BTreeMap<String, ParentKey>,
    /// Parent names in the rollout's order (step 1 is the first).
    order: Vec<String>,
    shards: ShardLeases,
    recorders: Vec<ApiRecorder>,
    replicas: Vec<ControllerProcess>,
}

impl Fixture {
    async fn start(prefix: &str, rollout: serde_json::Value) -> Self {
        Fixture::start_kind(prefix, rollout, false).await
    }

    /// [`Fixture::start`] with a DecoratorController attaching the ConfigMaps when
    /// `decorator`.
    async fn start_kind(prefix: &str, rollout: serde_json::Value, decorator: bool) -> Self {
        let (cluster, ns, parent) = TestCluster::start_with_parent(prefix).await;
        let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
        set_code(&config_maps, &code("v1", &[])).await;
        let parents = parent.api(cluster.client(), Some(&ns));
        let parent_type = (parent.api_version(), parent.kind().to_string());
        let sorted = create_parents(&parents, (&parent_type.0, &parent_type.1), &ns, PARENTS).await;
        let order = sorted.iter().map(|(_, name)| name.clone()).collect();
        let keys: BTreeMap<String, ParentKey> =
            sorted.into_iter().map(|(key, name)| (name, key)).collect();
        let label = unique_name("team");
        let hooks = json!({"sync": {"jsonnet": {
            "configMapRef": {"namespace": ns, "name": "code"}, "key": "sync.jsonnet"}}});
        let cc_name = unique_name("rollout");
        let plural = if decorator {
            let spec = json!({
                "resources": [{"apiVersion": parent.api_version(), "resource": parent.plural()}],
                "attachments": [{"apiVersion": "v1", "resource": "configmaps",
                                 "updateStrategy": {"method": "InPlace"}}],
                "hooks": hooks, "hookRollout": rollout});
            let _: DecoratorController = cluster.create_controller(&cc_name, &label, spec).await;
            "decoratorcontrollers"
        } else {
            let mut spec = parent.composite_spec("http://unused.invalid/");
            spec["hooks"] = hooks;
            spec["generateSelector"] = json!(true);
            spec["hookRollout"] = rollout;
            let _: CompositeController = cluster.create_controller(&cc_name, &label, spec).await;
            "compositecontrollers"
        };
        let shards = ShardLeases::new_group(cluster.client(), &ns, SHARDS);
        let (recorders, replicas) = three_replicas(&cluster, &ns, &label, &shards).await;
        let kind = if decorator {
            "DecoratorController"
        } else {
            "CompositeController"
        };
        let gvk = GroupVersionKind::gvk("metacontroller.k8s.io", "v1alpha1", kind);
        let ctrls = Api::all_with(
            cluster.client(),
            &ApiResource::from_gvk_with_plural(&gvk, plural),
        );
        let f = Fixture {
            cluster,
            ns,
            config_maps,
            ctrls,
            cc_name,
            plural,
            keys,
            order,
            shards,
            recorders,
            replicas,
        };
        eventually_within(
            "every child on v1 and the rollout state written",
            WAIT,
            || async {
                let all = children(&f.config_maps).await;
                all.len() == PARENTS
                    && all.values().all(|(_, v)| v == "v1")
                    && f.status_opt()
                        .await
                        .is_some_and(|s| s.phase == RolloutPhase::Complete)
            },
        )
        .await;
        f
    }

    async fn status_opt(&self) -> Option<HookRolloutStatus> {
        let ctrl = self.ctrls.get(&self.cc_name).await.ok()?;
        HookRolloutStatus::from_status(ctrl.data.get("status"))
    }

    async fn status(&self) -> HookRolloutStatus {
        self.status_opt().await.expect("status.hookRollout")
    }

    /// Accepted writes of the controller's status, by replica identity.
    fn status_writes(&self) -> Vec<(String, std::time::Instant)> {
        writes_by_replica(&self.recorders)
            .into_iter()
            .filter(|(_, w)| {
                w.accepted()
                    && w.resource == self.plural
                    && w.subresource.as_deref() == Some("status")
                    && w.name.as_deref() == Some(self.cc_name.as_str())
            })
            .map(|(who, w)| (who, w.start))
            .collect()
    }

    /// The replicas that published a report for the controller.
    async fn reporters(&self) -> usize {
        let leases: Api<Lease> = Api::namespaced(self.cluster.client(), &self.ns);
        let selector = format!(
            "metacontroller.k8s.io/hook-rollout-report={}-{}",
            self.cc_name,
            if self.plural == "decoratorcontrollers" {
                "dc"
            } else {
                "cc"
            }
        );
        leases
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|l| l.items.len())
            .unwrap_or(0)
    }
}

/// Three replicas of group `shards` (each behind its own recording proxy) for the
/// controllers labelled `team=<label>`, once they joined and split the shards.
async fn three_replicas(
    cluster: &TestCluster,
    ns: &str,
    label: &str,
    shards: &ShardLeases,
) -> (Vec<ApiRecorder>, Vec<ControllerProcess>) {
    let mut recorders = Vec::new();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let recorder = ApiRecorder::start(cluster.client());
        let args = sharded_replica_args(
            recorder.kubeconfig_path(),
            label,
            shards.group(),
            SHARDS,
            LEASE,
        );
        replicas.push(ControllerProcess::start_with_env(
            env!("CARGO_BIN_EXE_metacontroller"),
            args,
            [
                ("POD_NAMESPACE", ns.to_string()),
                (
                    "RUST_LOG",
                    "warn,metacontroller=info,metacontroller_controllers=info".to_string(),
                ),
            ],
        ));
        recorders.push(recorder);
    }
    for r in &replicas {
        r.wait_joined().await;
    }
    let ids: BTreeSet<String> = replicas.iter().map(|r| r.member_identity()).collect();
    shards.wait_spread(&ids, WAIT).await;
    (recorders, replicas)
}

/// Whether a parent with `key` may run `to` under `status` (read after its child).
fn may_run_new(status: &HookRolloutStatus, key: &ParentKey) -> bool {
    match status.phase {
        RolloutPhase::Complete => true,
        RolloutPhase::RolledBack => false,
        _ => !status.cutoff.is_empty() && key.as_str() <= status.cutoff.as_str(),
    }
}

/// Reads the children, then the status, every 100 ms until every parent runs v2 and the
/// rollout is `Complete`, checking on each read that every child on v2 belongs to a parent
/// the status includes, at most 1, 4, 40 parents at the steps, and that no child goes back
/// to v1. `each` sees every status read. Returns the steps seen and the checks made.
async fn watch_until_complete(
    f: &Fixture,
    v1: &str,
    mut each: impl FnMut(&HookRolloutStatus),
) -> (BTreeSet<usize>, usize) {
    let allowed = [1, 4, PARENTS];
    let mut steps_seen = BTreeSet::new();
    let mut on_new: BTreeSet<String> = BTreeSet::new();
    let mut checks = 0usize;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let all = children(&f.config_maps).await;
        let status = f.status().await;
        each(&status);
        let v2: BTreeSet<String> = all
            .iter()
            .filter(|(_, (_, v))| v == "v2")
            .map(|(n, _)| n.clone())
            .collect();
        if status.to != v1 {
            for name in &v2 {
                assert!(
                    may_run_new(&status, &f.keys[name]),
                    "{name} runs v2 before its step: {status:?}"
                );
                checks += 1;
            }
            let step = status.step as usize;
            assert!(
                status.phase == RolloutPhase::Complete || v2.len() <= allowed[step.min(2)],
                "{} parents on v2 at step {step}: {status:?}",
                v2.len()
            );
            steps_seen.insert(step);
        }
        let back: Vec<&String> = on_new.difference(&v2).collect();
        assert!(back.is_empty(), "parents back on v1: {back:?}");
        on_new = v2;
        if status.phase == RolloutPhase::Complete && status.to != v1 && on_new.len() == PARENTS {
            return (steps_seen, checks);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rollout did not complete: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A good change over three replicas: steps 1, 4, 40 with a pause; every child read on v2
/// belongs to a parent the step read after it includes; no child goes back to v1; one
/// replica (the holder of shard 0) writes every state of the rollout; the other replicas'
/// parents count through their reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sharded_replicas_roll_out_each_parent_on_its_assignment() {
    let f = Fixture::start(
        "rollout-shard-good",
        json!({"steps": [1, "10%", "100%"], "pauseSeconds": 1}),
    )
    .await;
    let v1 = f.status().await.to;
    let started = std::time::Instant::now();
    set_code(&f.config_maps, &code("v2", &[])).await;
    let (steps_seen, checks) = watch_until_complete(&f, &v1, |_| {}).await;
    // A figure for the docs, not an assertion.
    eprintln!(
        "rollout of {PARENTS} parents over 3 replicas complete after {:?}",
        started.elapsed()
    );
    assert!(checks > PARENTS, "too few observations: {checks}");
    assert!(steps_seen.contains(&1), "step 2 observed: {steps_seen:?}");
    let status = f.status().await;
    assert_eq!((status.from, status.updated), (v1, PARENTS as u32));
    for needle in ["step 2: 4 of 40", "step 3: 40 of 40"] {
        until_event(
            &f.cluster,
            ("default", &f.cc_name),
            "RolloutStep",
            needle,
            WAIT,
        )
        .await;
    }
    // One writer of the rollout: the holder of shard 0.
    let writes: Vec<(String, std::time::Instant)> = f
        .status_writes()
        .into_iter()
        .filter(|(_, at)| *at >= started)
        .collect();
    let during: BTreeSet<&String> = writes.iter().map(|(w, _)| w).collect();
    let holder = f.shards.holders().await.get(&0).cloned();
    assert_eq!(during.len(), 1, "writers of the rollout state: {during:?}");
    assert_eq!(during.into_iter().next(), holder.as_ref());
    assert!(writes.len() >= 3, "one write per step at least: {writes:?}");
    assert!(f.reporters().await >= 2, "the other replicas reported");
}

/// A failing change over three replicas: v2 fails on a parent of the second step that a
/// replica other than the driver syncs; the driver learns it from that replica's report,
/// rolls back and names the parent; parents outside the step never ran v2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sharded_replicas_roll_back_a_failing_change() {
    let f = Fixture::start("rollout-shard-bad", json!({"steps": [1, "50%", "100%"]})).await;
    let holders = f.shards.holders().await;
    let driver = holders.get(&0).cloned().expect("shard 0 held");
    let holder_of = |name: &String| holders.get(&shard_of(&format!("{}/{name}", f.ns), SHARDS));
    // Step 2 holds the first 20 parents of the order: one of them is another replica's.
    let failing = f.order[1..PARENTS / 2]
        .iter()
        .find(|n| holder_of(n) != Some(&driver))
        .expect("a parent of step 2 synced by another replica")
        .clone();
    let before = children(&f.config_maps).await;
    let v1 = f.status().await.to;
    set_code(
        &f.config_maps,
        &code("v2", &[failing.clone(), f.order[30].clone()]),
    )
    .await;
    eventually_within("the rollout rolled back", WAIT, || async {
        f.status_opt()
            .await
            .is_some_and(|s| s.phase == RolloutPhase::RolledBack)
    })
    .await;
    let status = f.status().await;
    let shown = format!("{}/{failing}", f.ns);
    assert_eq!(status.failed_parent.as_deref(), Some(shown.as_str()));
    assert_eq!((status.from.as_str(), status.step), (v1.as_str(), 1));
    let event = until_event(
        &f.cluster,
        ("default", &f.cc_name),
        "RolloutRolledBack",
        &shown,
        WAIT,
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(f.shards.holders().await, holders, "the shards did not move");
    eventually_within("the step's parents back on v1", WAIT, || async {
        children(&f.config_maps)
            .await
            .values()
            .all(|(_, v)| v == "v1")
    })
    .await;
    let after = children(&f.config_maps).await;
    for name in &f.order[PARENTS / 2..] {
        assert_eq!(
            after.get(name),
            before.get(name),
            "{name} is outside the step"
        );
    }
}

/// The driving replica (holder of shard 0) is killed with SIGKILL at step 2, held there by a
/// pause: another replica takes shard 0 over and finishes the rollout from the state in the
/// API; through the handover no parent runs v2 before its step nor goes back, and after the
/// kill only the new holder of shard 0 writes the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_driver_hands_the_rollout_to_the_next_holder_of_shard_0() {
    let mut f = Fixture::start(
        "rollout-shard-kill",
        json!({"steps": [1, "10%", "100%"], "pauseSeconds": 2}),
    )
    .await;
    let v1 = f.status().await.to;
    let first = f
        .shards
        .holders()
        .await
        .get(&0)
        .cloned()
        .expect("shard 0 held");
    set_code(&f.config_maps, &code("v2", &[])).await;
    eventually_within("step 2", WAIT, || async { f.status().await.step == 1 }).await;
    let victim = f
        .replicas
        .iter()
        .position(|r| r.member_identity() == first)
        .expect("the driver is one of the replicas");
    f.replicas[victim].kill9();
    let killed = std::time::Instant::now();
    let mut seen = Vec::new();
    let (steps_seen, checks) = watch_until_complete(&f, &v1, |s| seen.push(s.step)).await;
    assert!(checks > 0 && steps_seen.contains(&2), "{steps_seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "the step never goes back: {seen:?}"
    );
    let second = f
        .shards
        .holders()
        .await
        .get(&0)
        .cloned()
        .expect("shard 0 held");
    assert_ne!(second, first, "shard 0 moved");
    let after: BTreeSet<String> = f
        .status_writes()
        .into_iter()
        .filter(|(_, at)| *at > killed)
        .map(|(who, _)| who)
        .collect();
    assert_eq!(after, BTreeSet::from([second]), "writers after the kill");
}

/// The same good change with a DecoratorController attaching the ConfigMaps to its targets:
/// each target runs the code of its assignment, one replica writes the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sharded_replicas_roll_out_a_decorator() {
    let f = Fixture::start_kind(
        "rollout-shard-dc",
        json!({"steps": [1, "10%", "100%"], "pauseSeconds": 1}),
        true,
    )
    .await;
    let v1 = f.status().await.to;
    let started = std::time::Instant::now();
    set_code(&f.config_maps, &code("v2", &[])).await;
    let (steps_seen, checks) = watch_until_complete(&f, &v1, |_| {}).await;
    assert!(
        checks > PARENTS && steps_seen.contains(&1),
        "{steps_seen:?}"
    );
    let writers: BTreeSet<String> = f
        .status_writes()
        .into_iter()
        .filter(|(_, at)| *at >= started)
        .map(|(who, _)| who)
        .collect();
    let holder = f.shards.holders().await.get(&0).cloned();
    assert_eq!(
        writers.into_iter().collect::<Vec<_>>(),
        Vec::from_iter(holder)
    );
    assert!(f.reporters().await >= 2, "the other replicas reported");
}
