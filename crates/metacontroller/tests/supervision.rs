//! Supervised background tasks: when an informer driver, the leader elector, the shard
//! coordinator or the metrics server ends or panics, the real binary closes its gate, runs
//! the bounded shutdown and exits non-zero (so Kubernetes restarts it), instead of syncing on
//! with a stale cache or gate.
//!
//! The faults come from the test-only variable `METACONTROLLER_TEST_FAULT_TASK`
//! (`panic:<task>` / `end:<task>`, see `metacontroller_dynamic::Supervisor`). Runs on both
//! servers.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::replicas::{configmap_child, run_args};
use metacontroller_testkit::{
    create_object, eventually_within, parent_name, unique_name, ControllerProcess, CrdBuilder,
    HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

/// Generous: the shutdown path is bounded by its drain, Event flush and Lease release steps.
const EXIT_WITHIN: Duration = Duration::from_secs(60);

struct Setup {
    cluster: TestCluster,
    ns: String,
    label: String,
    parent: CrdBuilder,
    hook: HookServer,
}

impl Setup {
    /// A cluster with one CompositeController (ConfigMap children) and one parent.
    async fn new() -> Setup {
        let cluster = TestCluster::start().await;
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace("supervise").await;
        let hook = HookServer::start(|_, req| {
            HookReply::json(json!({"children": configmap_child(parent_name(req))}))
        })
        .await;
        let parent = cluster.install_parent_crd("supervise").await;
        let label = unique_name("team");
        let setup = Setup {
            cluster,
            ns,
            label,
            parent,
            hook,
        };
        setup.controller("v1", "configmaps").await;
        setup.create_parent("p1").await;
        setup
    }

    async fn controller(&self, api_version: &str, resource: &str) {
        let _: CompositeController = self
            .cluster
            .create_controller(&unique_name("sup"), &self.label, json!({
                "generateSelector": true,
                "parentResource": {"apiVersion": self.parent.api_version(), "resource": self.parent.plural()},
                "childResources": [{"apiVersion": api_version, "resource": resource}],
                "hooks": {"sync": {"webhook": {"url": self.hook.url("/sync")}}},
            }))
            .await;
    }

    async fn create_parent(&self, name: &str) {
        let api = self.parent.api(self.cluster.client(), Some(&self.ns));
        let parent = json!({
            "apiVersion": self.parent.api_version(), "kind": self.parent.kind(),
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {},
        });
        create_object(&api, parent).await;
    }

    /// The binary with `fault` injected and `extra` flags.
    fn start(&self, fault: &str, extra: &[&str]) -> ControllerProcess {
        let mut args = run_args(self.cluster.kubeconfig_path(), &self.label);
        args.push("--health-probe-bind-address=0".to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        ControllerProcess::start_with_env(
            env!("CARGO_BIN_EXE_metacontroller"),
            args,
            [
                ("POD_NAMESPACE", self.ns.clone()),
                ("METACONTROLLER_TEST_FAULT_TASK", fault.to_string()),
                ("RUST_LOG", "warn,metacontroller=info".to_string()),
            ],
        )
    }
}

/// Waits for `process` to exit and checks it failed because of `task`; a failure once the
/// controllers run also takes the shutdown path (gate closed, syncs drained).
fn assert_failed_because_of(process: &mut ControllerProcess, task: &str, running: bool) {
    let status = process.wait_exit(EXIT_WITHIN).unwrap_or_else(|| {
        panic!(
            "still running {EXIT_WITHIN:?} after {task} failed:\n{}",
            process.logs()
        )
    });
    let logs = process.logs();
    assert!(!status.success(), "exit status {status}:\n{logs}");
    let line = logs
        .lines()
        .find(|l| l.contains("background task ended unexpectedly"))
        .unwrap_or_else(|| panic!("no supervision error line:\n{logs}"));
    assert!(line.contains(task), "wrong task in {line:?}");
    if running {
        assert!(logs.contains("shutting down: no new syncs"), "{logs}");
        assert!(logs.contains("shutdown complete"), "{logs}");
    }
}

/// How long the hook takes to answer once the test holds a sync in flight: longer than the
/// failure takes to show, so the process is still draining that sync when the test checks
/// that the work stopped.
const SLOW_HOOK: Duration = Duration::from_secs(5);

/// A syncing process whose newly started informer panics stops its work and exits non-zero:
/// the sync running at the failure finishes (its child is written), a parent created after
/// the failure, while that sync still drains, is never synced, and the process exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_informer_stops_a_syncing_process() {
    let setup = Setup::new().await;
    let mut process = setup.start("panic:informer/v1/secrets", &["--metrics-address=0"]);
    let configmaps: Api<ConfigMap> = Api::namespaced(setup.cluster.client(), &setup.ns);
    eventually_within("the parent synced", Duration::from_secs(60), || async {
        configmaps.get_opt("p1-cm").await.ok().flatten().is_some()
    })
    .await;
    assert!(
        process.wait_exit(Duration::ZERO).is_none(),
        "{}",
        process.logs()
    );
    // A sync in flight at the failure: p2's hook call answers after SLOW_HOOK.
    setup.hook.set_handler(|_, req| {
        HookReply::json(json!({"children": configmap_child(parent_name(req))})).delayed(SLOW_HOOK)
    });
    setup.create_parent("p2").await;
    eventually_within("p2's sync in flight", Duration::from_secs(30), || async {
        setup
            .hook
            .requests("/sync")
            .iter()
            .any(|r| parent_name(r) == "p2")
    })
    .await;
    // A second controller needs a Secret informer: the one that panics.
    setup.controller("v1", "secrets").await;
    eventually_within("the failure", Duration::from_secs(30), || async {
        process
            .logs()
            .contains("background task ended unexpectedly")
    })
    .await;
    setup.create_parent("p3").await;
    assert!(
        process.wait_exit(Duration::ZERO).is_none(),
        "exited before p3 existed (the check below would mean nothing):\n{}",
        process.logs()
    );
    assert_failed_because_of(&mut process, "informer/v1/secrets", true);
    // The work stopped: nothing new started after the failure, what ran was finished.
    let synced: Vec<Value> = setup.hook.requests("/sync");
    assert!(
        synced.iter().all(|r| parent_name(r) != "p3"),
        "a parent created after the failure was synced:\n{}",
        process.logs()
    );
    assert!(configmaps.get_opt("p3-cm").await.unwrap().is_none());
    assert!(
        configmaps.get_opt("p2-cm").await.unwrap().is_some(),
        "the sync running at the failure was cut off:\n{}",
        process.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_leader_elector_stops_the_process() {
    let setup = Setup::new().await;
    let id = format!("--leader-election-id={}", unique_name("lease"));
    let mut process = setup.start(
        "panic:leader-election",
        &["--leader-election", &id, "--metrics-address=0"],
    );
    assert_failed_because_of(&mut process, "leader-election", true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_shard_coordinator_stops_the_process() {
    let setup = Setup::new().await;
    let id = format!("--leader-election-id={}", unique_name("group"));
    let mut process = setup.start(
        "panic:shard-coordinator",
        &["--sharding", "--shards=4", &id, "--metrics-address=0"],
    );
    assert_failed_because_of(&mut process, "shard-coordinator", true);
}

/// The metrics server returning (as when its listener fails) is an unexpected end too. It
/// ends before the controllers start, so the process exits without a shutdown drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_server_ending_stops_the_process() {
    let setup = Setup::new().await;
    let mut process = setup.start("end:metrics-server", &["--metrics-address=127.0.0.1:0"]);
    assert_failed_because_of(&mut process, "metrics-server", false);
}

/// A controller's worker task panicking outside a sync (a sync's own panic is caught and
/// retried) would stop that controller's work for good while /healthz stays green: the
/// process exits non-zero instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_controller_task_stops_the_process() {
    let setup = Setup::new().await;
    let mut process = setup.start("panic:controller", &["--metrics-address=0"]);
    assert_failed_because_of(&mut process, "controller/CompositeController/", false);
}

/// The task admitting acquired shards panicking would leave them reserved and never
/// synced: the process exits non-zero instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_shard_admission_stops_the_process() {
    let setup = Setup::new().await;
    let id = format!("--leader-election-id={}", unique_name("group"));
    let mut process = setup.start(
        "panic:shard-admit",
        &["--sharding", "--shards=4", &id, "--metrics-address=0"],
    );
    assert_failed_because_of(&mut process, "shard-admit", false);
}

/// The Event writer panicking would drop every later Event silently: the process exits
/// non-zero instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_event_writer_stops_the_process() {
    let setup = Setup::new().await;
    let mut process = setup.start("panic:event-writer", &["--metrics-address=0"]);
    assert_failed_because_of(&mut process, "event-writer", false);
}
