//! `metacontroller run --leader-election`: two replicas of the real binary on one API server.
//! Exactly one syncs (the Lease holder); a standby takes over within the lease duration after
//! the leader is killed, and at once after the leader shuts down cleanly (SIGTERM releases
//! the Lease and exits 0).
//!
//! Which process called the hook is read from its own log: `RUST_LOG` turns on the hook
//! client's per-request trace line, so each replica's syncs are attributable. Where a
//! recording hook records each call's replica and times, a recording proxy between each
//! replica and the API server ([`ApiRecorder`]) records its writes, and "one writer at a
//! time" is asserted on hook calls and writes together ([`assert_one_writer_at_a_time`]).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::replicas::{
    assert_no_concurrent_syncs, assert_one_writer_at_a_time, configmap_child, run_args,
    start_recording_hook, writes_by_replica, ProxiedKubeconfig, ReplicaCall, ReplicaCalls,
};
use metacontroller_testkit::{
    create_object, eventually_within, parent_name, unique_name, ApiRecorder, ApiWrite,
    ControllerProcess, CrdBuilder, Fault, HookReply, HookServer, TestCluster,
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
    /// One recording proxy per replica started, between it and the API server.
    recorders: std::sync::Mutex<Vec<ApiRecorder>>,
}

impl Setup {
    /// A CompositeController whose hook answers one ConfigMap per parent.
    async fn new() -> Setup {
        let cluster = TestCluster::start().await;
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace("leader").await;
        let hook = HookServer::start(|_, req| {
            HookReply::json(json!({
                "children": configmap_child(parent_name(req)),
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
            recorders: Default::default(),
        }
    }

    /// A replica: same Lease, namespace taken from `POD_NAMESPACE` as in a pod.
    fn replica(&self) -> ControllerProcess {
        self.replica_at(&self.recorded_kubeconfig())
    }

    /// A kubeconfig reaching the API server through a new recording proxy (one per replica:
    /// the proxy's records are that replica's writes).
    fn recorded_kubeconfig(&self) -> std::path::PathBuf {
        let recorder = ApiRecorder::start(self.cluster.client());
        let path = recorder.kubeconfig_path().to_path_buf();
        self.recorders.lock().unwrap().push(recorder);
        path
    }

    /// Makes the recording proxy of the `index`th replica started refuse its writes to
    /// `resource` (see [`ApiRecorder::refuse_writes_to`]).
    fn refuse_writes_of(&self, index: usize, resource: &str) {
        self.recorders.lock().unwrap()[index].refuse_writes_to(Some(resource));
    }

    /// Checks [`assert_one_writer_at_a_time`] on `calls` and the writes of every replica
    /// (to the parents, and to their children `<parent>-cm`); at least one write is checked.
    fn assert_one_writer_at_a_time(&self, calls: &[ReplicaCall]) {
        let recorded = writes_by_replica(&self.recorders.lock().unwrap());
        let parent_of = |w: &ApiWrite| {
            if w.namespace.as_deref() != Some(self.ns.as_str()) {
                return None;
            }
            let name = w.name.as_deref()?;
            match w.resource.as_str() {
                "configmaps" => name.strip_suffix("-cm").map(str::to_string),
                r if r == self.parent.plural() => Some(name.to_string()),
                _ => None,
            }
        };
        let checked = assert_one_writer_at_a_time(calls, &recorded, parent_of);
        assert!(checked > 0, "no write for a parent recorded");
    }

    /// [`Setup::replica`] talking to the API server through `kubeconfig` (a proxy).
    fn replica_at(&self, kubeconfig: &std::path::Path) -> ControllerProcess {
        self.replica_with(kubeconfig, &[])
    }

    /// [`Setup::replica_at`] with `extra` flags.
    fn replica_with(&self, kubeconfig: &std::path::Path, extra: &[&str]) -> ControllerProcess {
        let mut args = run_args(kubeconfig, &self.label);
        args.extend(extra.iter().map(|a| a.to_string()));
        args.extend([
            "--leader-election".to_string(),
            format!("--leader-election-id={}", self.lease_name),
        ]);
        ControllerProcess::start_with_env(
            env!("CARGO_BIN_EXE_metacontroller"),
            args,
            [
                ("POD_NAMESPACE", self.ns.clone()),
                (
                    "RUST_LOG",
                    "warn,metacontroller=info,metacontroller::leader=debug,metacontroller_controllers=info,metacontroller_hooks=trace"
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

    /// [`Setup::new`] with two replicas, the leader having synced parent `first` while the
    /// other stands by: `(setup, leader, standby)`.
    async fn leader_synced_first() -> (Setup, ControllerProcess, ControllerProcess) {
        let setup = Setup::new().await;
        let (leader, standby) = setup.leader_and_standby().await;
        setup
            .create_and_converge("first", Duration::from_secs(30))
            .await;
        (setup, leader, standby)
    }

    /// Two replicas, once one leads and the other stands by: `(leader, standby)`.
    async fn leader_and_standby(&self) -> (ControllerProcess, ControllerProcess) {
        let a = self.replica();
        let b = self.replica();
        let leader = self.leader_of(&[&a, &b]).await;
        let (leader, standby) = if leader == 0 { (a, b) } else { (b, a) };
        wait_standing_by(&standby).await;
        (leader, standby)
    }

    async fn create_parent(&self, name: &str) {
        create_parent(
            &self.parent.api(self.cluster.client(), Some(&self.ns)),
            &self.parent,
            name,
        )
        .await;
    }

    /// Creates parent `name` and waits up to `within` for its child.
    async fn create_and_converge(&self, name: &str, within: Duration) {
        self.create_parent(name).await;
        self.converged(name, within).await;
    }

    /// Creates parents `p0`..`p4` and waits until each has its child.
    async fn converge_five_parents(&self) {
        for i in 0..5 {
            self.create_parent(&format!("p{i}")).await;
        }
        for i in 0..5 {
            self.converged(&format!("p{i}"), Duration::from_secs(30))
                .await;
        }
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

/// Creates parent `name` (empty spec) of kind `parent` through `api`.
async fn create_parent(api: &Api<kube::core::DynamicObject>, parent: &CrdBuilder, name: &str) {
    create_object(
        api,
        json!({
            "apiVersion": parent.api_version(), "kind": "Parent",
            "metadata": {"name": name}, "spec": {}
        }),
    )
    .await;
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
    let (setup, mut leader, standby) = Setup::leader_synced_first().await;
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
    let (setup, mut leader, standby) = Setup::leader_synced_first().await;
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
    setup
        .create_and_converge("second", Duration::from_secs(10))
        .await;
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
        HookReply::json(json!({"children": configmap_child(parent_name(req))}))
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
    create_parent(&parent.api(cluster.client(), Some(&ns)), &parent, "slow").await;
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
    setup
        .create_and_converge("first", Duration::from_secs(30))
        .await;

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
    setup
        .create_and_converge("second", Duration::from_secs(10))
        .await;
}

/// The default `--leader-election-lease-duration`.
const LEADER_LEASE: Duration = Duration::from_secs(15);

/// A leader whose API link goes through a proxy and a standby, both calling a recording hook.
struct ProxiedLeader {
    setup: Setup,
    proxied: ProxiedKubeconfig,
    leader: ControllerProcess,
    standby: ControllerProcess,
    calls: ReplicaCalls,
    leader_id: String,
}

/// A leader reaching the API server through a proxy and a standby reaching it directly,
/// both syncing through a recording hook (one ConfigMap per parent after 50 ms, resync every
/// second); five parents converged, and the leader's calls carry its identity. Each answer
/// numbers its ConfigMap anew, so every sync writes: the writes go on up to a handoff, and
/// "one writer at a time" is checked on them, not only on the first convergence.
async fn proxied_leader_and_standby() -> ProxiedLeader {
    let (setup, calls) = writing_on_every_sync().await;
    // The fault proxy in front of the leader's recording proxy: the records are the writes
    // as the server received them.
    let proxied = ProxiedKubeconfig::start(&setup.recorded_kubeconfig()).await;
    // The leader reaches the API server through the fault proxy; the standby without one.
    let leader = setup.replica_at(proxied.path());
    setup.leader_of(&[&leader]).await;
    let standby = setup.replica();
    wait_standing_by(&standby).await;
    setup.converge_five_parents().await;
    let leader_id = identity_of(&leader);
    assert!(
        calls.calls().iter().any(|c| c.replica == leader_id),
        "the leader's hook calls carry its identity"
    );
    ProxiedLeader {
        setup,
        proxied,
        leader,
        standby,
        calls,
        leader_id,
    }
}

/// [`Setup::with_hook`] with a recording hook (50 ms per call) whose answers number the
/// parent's ConfigMap anew, so that every sync writes, and a resync every second.
async fn writing_on_every_sync() -> (Setup, ReplicaCalls) {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("leader").await;
    let answers = std::sync::atomic::AtomicU64::new(0);
    let (url, calls) = start_recording_hook(Duration::from_millis(50), move |name, _| {
        let n = answers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut child = configmap_child(name);
        child[0]["data"]["answer"] = json!(n.to_string());
        json!({"children": child, "status": {"ok": true}})
    })
    .await;
    let setup = Setup::with_hook(cluster, ns, url, None, json!({"resyncPeriodSeconds": 1})).await;
    (setup, calls)
}

/// The identity a leader logged when it acquired the Lease.
fn identity_of(leader: &ControllerProcess) -> String {
    leader
        .logs()
        .lines()
        .find(|l| l.contains("acquired the lease"))
        .and_then(|l| l.split("identity=").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .map(|s| s.trim_matches('"').to_string())
        .expect("the leader logs its identity")
}

/// A leader whose renewals are refused while everything else it sends still reaches the
/// API server (its proxy refuses its Lease writes only): it must stop writing before its
/// Lease can be taken. Every sync writes (each answer renumbers the child), so a write the
/// old leader made once the standby had started would show as two writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_but_reaches_the_api_writes_nothing_after_the_handoff() {
    let (setup, calls) = writing_on_every_sync().await;
    // Server-side apply sends no resourceVersion: a late write of the old leader would be
    // accepted rather than refused as a conflict, so the check sees it.
    let ssa = ["--apply-strategy=server-side-apply"];
    let leader = setup.replica_with(&setup.recorded_kubeconfig(), &ssa);
    setup.leader_of(&[&leader]).await;
    let standby = setup.replica_with(&setup.recorded_kubeconfig(), &ssa);
    wait_standing_by(&standby).await;
    setup.converge_five_parents().await;
    let leader_id = identity_of(&leader);
    setup.refuse_writes_of(0, "leases");
    eventually_within(
        "the standby takes over",
        LEADER_LEASE + Duration::from_secs(20),
        || async { standby.logs().contains("acquired the lease") },
    )
    .await;
    // The standby syncs (and writes: every parent resyncs each second) for a lease
    // duration, long enough for a write the old leader still had pending to show.
    eventually_within(
        "the standby syncs for a lease duration",
        LEADER_LEASE + Duration::from_secs(20),
        || async {
            let starts: Vec<Instant> = calls
                .calls()
                .iter()
                .filter(|c| c.replica != leader_id)
                .map(|c| c.start)
                .collect();
            let first = starts.iter().min();
            let last = starts.iter().max();
            first
                .zip(last)
                .is_some_and(|(f, l)| *l - *f >= LEADER_LEASE)
        },
    )
    .await;
    assert!(
        leader.logs().contains("lost the lease"),
        "the old leader did not notice it lost the lease"
    );
    setup.assert_one_writer_at_a_time(&calls.calls());
}

/// The leader's calls started before its lease could be taken (`stalled + LEADER_LEASE`),
/// and no two calls for one parent overlapped.
fn assert_stalled_leader_stopped(
    calls: &[ReplicaCall],
    leader_id: &str,
    stalled: Instant,
    taken: Duration,
) {
    let from_leader: Vec<&ReplicaCall> = calls.iter().filter(|c| c.replica == leader_id).collect();
    let last = from_leader
        .iter()
        .filter(|c| c.start >= stalled)
        .map(|c| c.start - stalled)
        .max();
    eprintln!(
        "leader stall: the standby took over {taken:?} after it; the stalled leader's last hook \
         call started {last:?} after it (lease takeable after {LEADER_LEASE:?})"
    );
    assert!(
        from_leader.iter().all(|c| c.start < stalled + LEADER_LEASE),
        "the stalled leader called the hook after its lease could be taken ({last:?})"
    );
    // Never two replicas on one parent at once.
    assert_no_concurrent_syncs(calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_api_link_stalls_stops_syncing_before_its_lease_can_be_taken() {
    let ProxiedLeader {
        setup,
        proxied,
        leader,
        standby,
        calls,
        leader_id,
    } = proxied_leader_and_standby().await;
    let proxy = &proxied.proxy;

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
    setup
        .create_and_converge("after", Duration::from_secs(30))
        .await;
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

    let calls = calls.calls();
    assert_stalled_leader_stopped(&calls, &leader_id, stalled, taken);
    setup.assert_one_writer_at_a_time(&calls);
    eprintln!("healed {:?} ago", healed.elapsed());
}

/// When the Lease's `renewTime` was first seen to differ from `before` (polled every
/// 20 ms, at most `within`): no earlier than the server wrote the renewal.
async fn renewal_seen(setup: &Setup, before: Option<String>, within: Duration) -> Instant {
    let renew_time = || async {
        let lease = setup.leases().get(&setup.lease_name).await.ok()?;
        let time = lease.spec?.renew_time?;
        Some(format!("{:?}", time.0))
    };
    let deadline = Instant::now() + within;
    loop {
        let now = renew_time().await;
        if now.is_some() && now != before {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "no renewal within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A renewal whose answer comes back 7 s late, then renewals that fail (and once the leader
/// gave up, a stalled link): the leader must count its deadlines from when it sent the
/// renewal (the standby counts from when it saw it), so it stops syncing before the standby
/// may take over and before the standby's first hook call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewal_answer_is_late_stops_before_the_standby_starts() {
    let ProxiedLeader {
        setup,
        leader,
        standby,
        calls,
        leader_id,
        proxied,
    } = proxied_leader_and_standby().await;
    let Some(control) = setup.cluster.control() else {
        eprintln!("skipped: needs the embedded API server (a slowed answer)");
        return;
    };
    let before = setup
        .leases()
        .get(&setup.lease_name)
        .await
        .ok()
        .and_then(|l| l.spec?.renew_time)
        .map(|t| format!("{:?}", t.0));
    // The standby only reads the Lease while it stands by: the next updates are the
    // leader's. The first is served at once and answered 7 s later, the others fail.
    let update = (Some("update"), Some("leases"));
    let late = Duration::from_secs(7);
    control.inject(Fault::slow_response(update.0, update.1, 1, late));
    control.inject(Fault::status(update.0, update.1, 1000, 500));
    let written = renewal_seen(&setup, before, Duration::from_secs(10)).await;
    eventually_within(
        "the leader gives up",
        LEADER_LEASE + Duration::from_secs(10),
        || async { leader.logs().contains("lost the lease") },
    )
    .await;
    // It still holds the Lease on the server and would take it back as soon as its
    // renewals work again: from now on only the standby's go through.
    proxied.proxy.stall();
    control.clear_faults();
    eventually_within(
        "the standby takes over",
        LEADER_LEASE + Duration::from_secs(20),
        || async { standby.logs().contains("acquired the lease") },
    )
    .await;
    eventually_within("the old leader stops", Duration::from_secs(30), || async {
        let logs = leader.logs();
        logs.contains("standing by") || logs.contains("exiting so two replicas never write")
    })
    .await;
    eventually_within("the standby syncs", Duration::from_secs(10), || async {
        calls.calls().iter().any(|c| c.replica != leader_id)
    })
    .await;
    let calls = calls.calls();
    assert_stopped_before_takeover(&calls, &leader_id, written);
    setup.assert_one_writer_at_a_time(&calls);
}

/// No hook call of the old leader `leader_id` started once its lease could be taken (the
/// lease duration after `written`, when its last renewal was seen on the server) or the
/// standby had started; never two calls for one parent at once.
fn assert_stopped_before_takeover(calls: &[ReplicaCall], leader_id: &str, written: Instant) {
    let standby_first = calls
        .iter()
        .filter(|c| c.replica != leader_id)
        .map(|c| c.start)
        .min();
    let after = |at: Instant| at.saturating_duration_since(written);
    let leader_last = calls
        .iter()
        .filter(|c| c.replica == leader_id)
        .map(|c| after(c.start))
        .max();
    eprintln!(
        "late renewal answer: the leader's last hook call started {leader_last:?} after the \
         renewal was on the server, the standby's first {:?} after it",
        standby_first.map(after)
    );
    let late: Vec<Duration> = calls
        .iter()
        .filter(|c| c.replica == leader_id && c.start >= written)
        .filter(|c| after(c.start) >= LEADER_LEASE || standby_first.is_some_and(|f| c.start >= f))
        .map(|c| after(c.start))
        .collect();
    assert!(
        late.is_empty(),
        "the old leader called the hook {late:?} after its last renewal was on the server, \
         once the standby could take over (after {LEADER_LEASE:?}) or had started"
    );
    assert_no_concurrent_syncs(calls);
}
