//! `metacontroller run --leader-election`: two replicas of the real binary on one API server.
//! Exactly one syncs (the Lease holder); a standby takes over within the lease duration after
//! the leader is killed, and at once after the leader shuts down cleanly (SIGTERM releases
//! the Lease and exits 0).
//!
//! Which process called the hook is read from its own log: `RUST_LOG` turns on the hook
//! client's per-request trace line, so each replica's syncs are attributable.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    eventually_within, kubeconfig_server, unique_name, ControllerProcess, CrdBuilder, HookReply,
    HookServer, TcpProxy, TestCluster,
};
use serde_json::json;

/// The hook client's per-call trace line (one per hook request the process sends).
const HOOK_REQUEST_LINE: &str = "hook request";

struct Setup {
    cluster: TestCluster,
    ns: String,
    label: String,
    lease_name: String,
    parent: CrdBuilder,
    _hook: Option<HookServer>,
}

impl Setup {
    /// A CompositeController whose hook answers one ConfigMap per parent.
    async fn new() -> Setup {
        let cluster = TestCluster::start().await;
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace("leader").await;
        let hook = HookServer::start(|_, req| {
            let name = req["parent"]["metadata"]["name"]
                .as_str()
                .unwrap_or_default();
            HookReply::json(json!({
                "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": format!("{name}-cm")},
                              "data": {"k": "v"}}],
                "status": {"ok": true},
            }))
        })
        .await;
        let url = hook.url("/sync");
        Setup::with_hook(cluster, ns, url, Some(hook), json!({})).await
    }

    /// A CompositeController calling `url`, with `extra` fields in its spec.
    async fn with_hook(
        cluster: TestCluster,
        ns: String,
        url: String,
        hook: Option<HookServer>,
        extra: serde_json::Value,
    ) -> Setup {
        let parent = cluster.install_parent_crd("leader").await;
        let label = unique_name("team");
        let mut spec = json!({
            "generateSelector": true,
            "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"webhook": {"url": url}}},
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let _: CompositeController = cluster
            .create_controller(&unique_name("leader"), &label, spec)
            .await;
        Setup {
            cluster,
            ns,
            label,
            lease_name: unique_name("lease"),
            parent,
            _hook: hook,
        }
    }

    /// A replica: same Lease, namespace taken from `POD_NAMESPACE` as in a pod.
    fn replica(&self) -> ControllerProcess {
        self.replica_at(self.cluster.kubeconfig_path())
    }

    /// [`Setup::replica`] talking to the API server through `kubeconfig` (a proxy).
    fn replica_at(&self, kubeconfig: &std::path::Path) -> ControllerProcess {
        ControllerProcess::start_with_env(
            env!("CARGO_BIN_EXE_metacontroller"),
            [
                "run".to_string(),
                "--kubeconfig".to_string(),
                kubeconfig.display().to_string(),
                "--discovery-interval=500ms".to_string(),
                format!("--target-label-selector=team={}", self.label),
                "--leader-election".to_string(),
                format!("--leader-election-id={}", self.lease_name),
            ],
            [
                ("POD_NAMESPACE", self.ns.clone()),
                (
                    "RUST_LOG",
                    "warn,metacontroller=info,metacontroller_controllers=info,metacontroller_hooks=trace"
                        .to_string(),
                ),
            ],
        )
    }

    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.cluster.client(), &self.ns)
    }

    async fn holder(&self) -> Option<String> {
        self.leases()
            .get_opt(&self.lease_name)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    }

    /// Waits for a holder and returns the index (into `replicas`) of the process holding it.
    async fn leader_of(&self, replicas: &[&ControllerProcess]) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(holder) = self.holder().await {
                let found = replicas.iter().position(|p| {
                    let logs = p.logs();
                    logs.contains(&holder) && logs.contains("acquired the lease")
                });
                if let Some(found) = found {
                    return found;
                }
            }
            assert!(Instant::now() < deadline, "no replica holds the lease");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn create_parent(&self, name: &str) {
        let parents = self.parent.api(self.cluster.client(), Some(&self.ns));
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": self.parent.api_version(), "kind": "Parent",
            "metadata": {"name": name}, "spec": {}
        }))
        .unwrap();
        parents.create(&PostParams::default(), &obj).await.unwrap();
    }

    async fn converged(&self, name: &str, within: Duration) {
        let cms: Api<ConfigMap> = Api::namespaced(self.cluster.client(), &self.ns);
        let cm = format!("{name}-cm");
        eventually_within(&format!("child {cm}"), within, || async {
            cms.get_opt(&cm).await.ok().flatten().is_some()
        })
        .await;
    }
}

fn hook_requests(p: &ControllerProcess) -> usize {
    p.logs().matches(HOOK_REQUEST_LINE).count()
}

async fn wait_standing_by(p: &ControllerProcess) {
    eventually_within(
        "the other replica stands by",
        Duration::from_secs(30),
        || async { p.logs().contains("standing by") },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_syncs_and_a_standby_takes_over_after_kill9() {
    let setup = Setup::new().await;
    let a = setup.replica();
    let b = setup.replica();
    let leader = setup.leader_of(&[&a, &b]).await;
    let (mut leader, standby) = if leader == 0 { (a, b) } else { (b, a) };
    wait_standing_by(&standby).await;

    setup.create_parent("first").await;
    setup.converged("first", Duration::from_secs(30)).await;
    // The leader synced (positive signal); the standby, with the same controller running
    // and the same parent in its cache, sent no hook request.
    assert!(hook_requests(&leader) > 0, "leader did not call the hook");
    assert_eq!(
        hook_requests(&standby),
        0,
        "standby synced:\n{}",
        standby.logs()
    );
    let old_holder = setup.holder().await.unwrap();
    let transitions_before = setup
        .leases()
        .get(&setup.lease_name)
        .await
        .unwrap()
        .spec
        .unwrap()
        .lease_transitions
        .unwrap_or(0);

    leader.kill9();
    let killed = Instant::now();
    setup.create_parent("second").await;
    // Lease duration 15 s + 5 s.
    setup.converged("second", Duration::from_secs(20)).await;
    let took = killed.elapsed();
    eprintln!("standby converged a new parent {took:?} after kill -9 of the leader");
    assert!(hook_requests(&standby) > 0);
    let lease = setup.leases().get(&setup.lease_name).await.unwrap();
    let spec = lease.spec.unwrap();
    let holder = spec.holder_identity.unwrap();
    assert_ne!(holder, old_holder);
    assert!(standby.logs().contains(&holder));
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert_eq!(spec.lease_transitions, Some(transitions_before + 1));
    assert!(spec.acquire_time.is_some() && spec.renew_time.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_zero_releases_the_lease_and_the_standby_leads_at_once() {
    let setup = Setup::new().await;
    let a = setup.replica();
    let b = setup.replica();
    let leader = setup.leader_of(&[&a, &b]).await;
    let (mut leader, standby) = if leader == 0 { (a, b) } else { (b, a) };
    wait_standing_by(&standby).await;
    setup.create_parent("first").await;
    setup.converged("first", Duration::from_secs(30)).await;
    let old_holder = setup.holder().await.unwrap();

    leader.terminate();
    let status = leader
        .wait_exit(Duration::from_secs(30))
        .expect("leader exits after SIGTERM");
    let exited = Instant::now();
    assert!(
        status.success(),
        "exit status {status:?}:\n{}",
        leader.logs()
    );
    let logs = leader.logs();
    assert!(logs.contains("released the lease"), "{logs}");
    assert!(logs.contains("shutdown complete"), "{logs}");

    // A released Lease is free at once: the standby takes it at its next attempt (at most
    // one 2 s retry period later), not after the 15 s lease duration. The bound leaves 1 s
    // for a loaded CI machine.
    eventually_within(
        "standby holds the released lease",
        Duration::from_secs(3),
        || async { setup.holder().await.is_some_and(|h| h != old_holder) },
    )
    .await;
    eprintln!(
        "standby leads {:?} after the leader exited",
        exited.elapsed()
    );
    setup.create_parent("second").await;
    setup.converged("second", Duration::from_secs(10)).await;
    assert!(hook_requests(&standby) > 0);
}

#[test]
fn version_flag_prints_the_version() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_metacontroller"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        format!("metacontroller {}", env!("CARGO_PKG_VERSION"))
    );
}

/// SIGTERM while a sync is in flight (the hook answers after 3 s): the process takes no new
/// keys but lets the running sync finish (its child is written), then exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_running_sync_finish_then_exits_zero() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("drain").await;
    let hook = HookServer::start(|_, req| {
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        HookReply::json(json!({
            "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": format!("{name}-cm")}, "data": {"k": "v"}}],
        }))
        .delayed(Duration::from_secs(3))
    })
    .await;
    let parent = cluster.install_parent_crd("drain").await;
    let label = unique_name("team");
    let _: CompositeController = cluster
        .create_controller(
            &unique_name("drain"),
            &label,
            json!({
                "generateSelector": true,
                "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync"), "timeout": "30s"}}},
            }),
        )
        .await;
    let mut process = ControllerProcess::start(
        env!("CARGO_BIN_EXE_metacontroller"),
        [
            "run".to_string(),
            "--kubeconfig".to_string(),
            cluster.kubeconfig_path().display().to_string(),
            format!("--target-label-selector=team={label}"),
        ],
    );
    let parents = parent.api(cluster.client(), Some(&ns));
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": parent.api_version(), "kind": "Parent",
        "metadata": {"name": "slow"}, "spec": {}
    }))
    .unwrap();
    parents.create(&PostParams::default(), &obj).await.unwrap();
    eventually_within("the sync is in flight", Duration::from_secs(30), || async {
        hook.calls("/sync") > 0
    })
    .await;

    process.terminate();
    let status = process
        .wait_exit(Duration::from_secs(30))
        .expect("exits after SIGTERM");
    assert!(status.success(), "{status:?}:\n{}", process.logs());
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    assert!(
        cms.get_opt("slow-cm").await.unwrap().is_some(),
        "the in-flight sync was cut off:\n{}",
        process.logs()
    );
    assert_eq!(hook.calls("/sync"), 1, "a new sync started after SIGTERM");
}

/// A leader whose renewals fail (the API server answers 500 to Lease updates) gives up
/// leading at the renew deadline, stops its syncs, and leads again once renewals work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_that_cannot_renew_stops_syncing_and_recovers() {
    let setup = Setup::new().await;
    let Some(control) = setup.cluster.control() else {
        eprintln!("skipped: needs the embedded API server (fault injection)");
        return;
    };
    let process = setup.replica();
    setup.leader_of(&[&process]).await;
    setup.create_parent("first").await;
    setup.converged("first", Duration::from_secs(30)).await;

    // About 12 s of failed renewals (one attempt every 2 s): past the 10 s renew deadline.
    control.inject(metacontroller_testkit::Fault::status(
        Some("update"),
        Some("leases"),
        6,
        500,
    ));
    eventually_within(
        "the leader gives up at the renew deadline",
        Duration::from_secs(20),
        || async { process.logs().contains("syncs stopped; standing by") },
    )
    .await;
    let logs = process.logs();
    assert!(logs.contains("lost the lease"), "{logs}");
    eventually_within(
        "the lease is acquired again",
        Duration::from_secs(30),
        || async { process.logs().matches("acquired the lease").count() >= 2 },
    )
    .await;
    setup.create_parent("second").await;
    setup.converged("second", Duration::from_secs(10)).await;
}

/// One hook call: the calling replica (`X-Metacontroller-Replica`), the parent, and when the
/// hook received and answered it.
type Calls = std::sync::Arc<std::sync::Mutex<Vec<(String, String, Instant, Instant)>>>;

/// A sync hook answering one ConfigMap per parent after 50 ms, recording every call.
async fn recording_hook() -> (String, Calls) {
    use axum::body::Body;
    use axum::http::Request;
    let calls = Calls::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback({
        let calls = calls.clone();
        move |request: Request<Body>| {
            let calls = calls.clone();
            async move {
                let start = Instant::now();
                let replica = request
                    .headers()
                    .get("x-metacontroller-replica")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let bytes = axum::body::to_bytes(request.into_body(), 16 << 20)
                    .await
                    .unwrap_or_default();
                let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
                let name = body["parent"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                tokio::time::sleep(Duration::from_millis(50)).await;
                let reply = json!({
                    "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": format!("{name}-cm")},
                                  "data": {"k": "v"}}],
                    "status": {"ok": true},
                });
                calls
                    .lock()
                    .unwrap()
                    .push((replica, name, start, Instant::now()));
                axum::Json(reply)
            }
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/sync"), calls)
}

/// The default `--leader-election-lease-duration`.
const LEADER_LEASE: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_api_link_stalls_stops_syncing_before_its_lease_can_be_taken() {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("leader").await;
    let (url, calls) = recording_hook().await;
    let setup = Setup::with_hook(cluster, ns, url, None, json!({"resyncPeriodSeconds": 1})).await;
    let proxy = TcpProxy::start(kubeconfig_server(setup.cluster.kubeconfig_path()).unwrap())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let proxied = dir.path().join("kubeconfig");
    proxy
        .write_kubeconfig(setup.cluster.kubeconfig_path(), &proxied)
        .unwrap();
    // The leader reaches the API server through the proxy; the standby directly.
    let leader = setup.replica_at(&proxied);
    setup.leader_of(&[&leader]).await;
    let standby = setup.replica();
    wait_standing_by(&standby).await;
    for i in 0..5 {
        setup.create_parent(&format!("p{i}")).await;
    }
    for i in 0..5 {
        setup
            .converged(&format!("p{i}"), Duration::from_secs(30))
            .await;
    }
    let leader_id = leader
        .logs()
        .lines()
        .find(|l| l.contains("acquired the lease"))
        .and_then(|l| l.split("identity=").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .map(|s| s.trim_matches('"').to_string())
        .expect("the leader logs its identity");
    assert!(
        calls.lock().unwrap().iter().any(|c| c.0 == leader_id),
        "the leader's hook calls carry its identity"
    );

    proxy.stall();
    let stalled = Instant::now();
    eventually_within(
        "the standby takes over",
        LEADER_LEASE + Duration::from_secs(20),
        || async { standby.logs().contains("acquired the lease") },
    )
    .await;
    let taken = stalled.elapsed();
    // The fault lasts twice the lease, whatever happens meanwhile.
    tokio::time::sleep_until((stalled + 2 * LEADER_LEASE).into()).await;
    proxy.heal();
    let healed = Instant::now();
    setup.create_parent("after").await;
    setup.converged("after", Duration::from_secs(30)).await;
    // It stood by, or (syncs hung on the stalled link past its renew deadline) exited so
    // that two replicas never write at once; either way it does not sync again.
    eventually_within(
        "the old leader stands by or exits",
        Duration::from_secs(30),
        || async {
            let logs = leader.logs();
            logs.contains("standing by") || logs.contains("exiting so two replicas never write")
        },
    )
    .await;

    let calls = calls.lock().unwrap().clone();
    let from_leader: Vec<&(String, String, Instant, Instant)> =
        calls.iter().filter(|c| c.0 == leader_id).collect();
    let last = from_leader
        .iter()
        .filter(|c| c.2 >= stalled)
        .map(|c| c.2 - stalled)
        .max();
    eprintln!(
        "leader stall: the standby took over {taken:?} after it; the stalled leader's last hook \
         call started {last:?} after it (lease takeable after {LEADER_LEASE:?})"
    );
    assert!(
        from_leader.iter().all(|c| c.2 < stalled + LEADER_LEASE),
        "the stalled leader called the hook after its lease could be taken ({last:?})"
    );
    // Never two replicas on one parent at once.
    let mut sorted = calls.clone();
    sorted.sort_by_key(|c| (c.1.clone(), c.2));
    for pair in sorted.windows(2) {
        if pair[0].1 == pair[1].1 {
            assert!(
                pair[1].2 >= pair[0].3,
                "{} synced by {} and {} at once",
                pair[0].1,
                pair[0].0,
                pair[1].0
            );
        }
    }
    eprintln!("healed {:?} ago", healed.elapsed());
}
