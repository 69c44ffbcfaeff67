//! Recovery after a kube-apiserver crash (real server only: the embedded server runs inside
//! the test process and cannot be killed -9).
//!
//! Protocol: 40 parents converged (each has a ConfigMap child carrying its `spec.v`); the
//! kube-apiserver of a cluster directory of this test's own (`target/k8s-crash`, never the
//! shared one) is killed -9; after 15 s it is restarted (`cluster.sh up` starts what is
//! missing). Nothing can be written while it is down, so from the moment it answers `/readyz`
//! again the test creates 40 new parents and changes 10 of the old ones, and measures until
//! all 80 children carry their parent's value. The figure is printed; the bound (60 s) is
//! only the correctness property "the controller recovers by itself".
//!
//! Runs when `METACONTROLLER_E2E_KUBECONFIG` is set (real-server runs); the crash cluster is
//! `METACONTROLLER_CRASH_CLUSTER_DIR` or `<workspace>/target/k8s-crash`, stopped at the end.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    parent_name, ControllerProcess, CrdBuilder, HookReply, HookServer, TestCluster,
};
use serde_json::json;

const OLD: usize = 40;
const NEW: usize = 40;
const CHANGED: usize = 10;
const OUTAGE: Duration = Duration::from_secs(15);
/// Correctness bound only: recovery must not depend on anything but the controller itself.
const RECOVERY_BOUND: Duration = Duration::from_secs(60);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cluster_sh() -> PathBuf {
    std::env::var_os("METACONTROLLER_CLUSTER_SH")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("../shared/k8s/cluster.sh"))
}

/// The crash cluster's directory; stopped when dropped.
struct CrashCluster(PathBuf);

impl CrashCluster {
    fn up() -> (CrashCluster, PathBuf) {
        let dir = std::env::var_os("METACONTROLLER_CRASH_CLUSTER_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace().join("target/k8s-crash"));
        let kubeconfig = cluster_sh_run(&dir, "up");
        (CrashCluster(dir), PathBuf::from(kubeconfig.trim()))
    }

    fn kill_apiserver(&self) {
        let pid_file = self.0.join("run/kube-apiserver.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
        let status = std::process::Command::new("kill")
            .args(["-9", pid.trim()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -9 {pid}");
    }
}

impl Drop for CrashCluster {
    fn drop(&mut self) {
        cluster_sh_run(&self.0, "down");
    }
}

/// Runs `cluster.sh <verb> dir`; returns the last stdout line.
fn cluster_sh_run(dir: &Path, verb: &str) -> String {
    let out = std::process::Command::new(cluster_sh())
        .arg(verb)
        .arg(dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("running cluster.sh");
    assert!(out.status.success(), "cluster.sh {verb} {}", dir.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

async fn readyz(client: &kube::Client) -> bool {
    let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
    client.request_text(request).await.is_ok()
}

/// How many of `expected` (child name → value) children exist with their value.
async fn converged(api: &Api<ConfigMap>, expected: &[(String, String)]) -> usize {
    let Ok(list) = api.list(&ListParams::default()).await else {
        return 0;
    };
    let have: std::collections::HashMap<String, String> = list
        .items
        .into_iter()
        .filter_map(|cm| {
            let v = cm.data.as_ref()?.get("v")?.clone();
            Some((cm.metadata.name?, v))
        })
        .collect();
    expected
        .iter()
        .filter(|(name, v)| have.get(name) == Some(v))
        .count()
}

async fn wait_converged(api: &Api<ConfigMap>, expected: &[(String, String)], bound: Duration) {
    if let Err(done) = converge(api, expected, bound).await {
        panic!(
            "{done}/{} children converged after {bound:?}",
            expected.len()
        );
    }
}

/// Waits up to `bound` for every expected child; `Err(converged so far)` on timeout.
async fn converge(
    api: &Api<ConfigMap>,
    expected: &[(String, String)],
    bound: Duration,
) -> Result<(), usize> {
    let deadline = Instant::now() + bound;
    loop {
        let done = converged(api, expected).await;
        if done == expected.len() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(done);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A write right after the restart may meet a server still warming up (a CRD not served
/// yet): retried, bounded.
async fn retry<T, F, Fut>(write: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match write().await {
            Ok(_) => return,
            Err(err) if Instant::now() < deadline => {
                eprintln!("write after restart failed, retrying: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("write after restart: {err}"),
        }
    }
}

fn parent_object(parent: &CrdBuilder, ns: &str, name: &str, v: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": parent.api_version(), "kind": parent.kind(),
        "metadata": {"name": name, "namespace": ns},
        "spec": {"v": v},
    }))
    .unwrap()
}

/// A CompositeController over a fresh parent kind whose hook gives each parent one
/// ConfigMap child `<parent>-cm` carrying its `spec.v`; returns the parent kind, the hook
/// and the controller's label.
async fn crash_controller(cluster: &TestCluster) -> (CrdBuilder, HookServer, String) {
    cluster.install_metacontroller_crds().await;
    let hook = HookServer::start(|_, req| {
        let name = parent_name(req);
        let v = req["parent"]["spec"]["v"].as_str().unwrap_or_default();
        HookReply::json(json!({
            "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": format!("{name}-cm")}, "data": {"v": v}}],
        }))
    })
    .await;
    let parent = cluster.install_parent_crd("crash").await;
    let mut spec = parent.composite_spec(&hook.url("/sync"));
    spec["generateSelector"] = json!(true);
    let label = cluster
        .create_labelled_controller::<CompositeController>("crash", spec)
        .await;
    (parent, hook, label)
}

/// The binary running the controllers labelled `team=<label>` (log level from
/// `METACONTROLLER_CRASH_RUST_LOG`).
fn start_binary(cluster: &TestCluster, label: &str) -> ControllerProcess {
    ControllerProcess::start_with_env(
        env!("CARGO_BIN_EXE_metacontroller"),
        [
            "run".to_string(),
            "--kubeconfig".to_string(),
            cluster.kubeconfig_path().display().to_string(),
            format!("--target-label-selector=team={label}"),
            "--metrics-address=0".to_string(),
            "--health-probe-bind-address=0".to_string(),
        ],
        [(
            "RUST_LOG",
            std::env::var("METACONTROLLER_CRASH_RUST_LOG")
                .unwrap_or_else(|_| "warn,metacontroller=info".to_string()),
        )],
    )
}

/// Kills the kube-apiserver, restarts it after [`OUTAGE`] and waits (120 s) until it
/// answers `/readyz`; returns the restart (`cluster.sh up`, still running) and that moment.
async fn crash_and_restart(
    crash: &CrashCluster,
    cluster: &TestCluster,
) -> (tokio::task::JoinHandle<String>, Instant) {
    crash.kill_apiserver();
    tokio::time::sleep(OUTAGE).await;
    let dir = crash.0.clone();
    let restart = tokio::task::spawn_blocking(move || cluster_sh_run(&dir, "up"));
    let ready_deadline = Instant::now() + Duration::from_secs(120);
    while !readyz(&cluster.client()).await {
        assert!(
            Instant::now() < ready_deadline,
            "kube-apiserver not ready after restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (restart, Instant::now())
}

/// Creates [`NEW`] parents (`v: a`) and sets `v: b` on the first [`CHANGED`] old ones, all
/// at once, so that the figure is the controller's, not the test's own sequence of
/// requests; `expected` follows.
async fn write_after_restart(
    parents: &Api<DynamicObject>,
    parent: &CrdBuilder,
    ns: &str,
    expected: &mut Vec<(String, String)>,
) {
    let post = PostParams::default();
    let patch_params = PatchParams::default();
    let patch = Patch::Merge(json!({"spec": {"v": "b"}}));
    let new_names: Vec<String> = (0..NEW).map(|i| format!("new-{i}")).collect();
    let changed_names: Vec<String> = (0..CHANGED).map(|i| format!("old-{i}")).collect();
    let creates = new_names.iter().map(|name| {
        let obj = parent_object(parent, ns, name, "a");
        let post = &post;
        async move { retry(|| parents.create(post, &obj)).await }
    });
    let patches = changed_names
        .iter()
        .map(|name| retry(|| parents.patch(name, &patch_params, &patch)));
    futures::join!(
        futures::future::join_all(creates),
        futures::future::join_all(patches)
    );
    expected.extend(
        new_names
            .iter()
            .map(|n| (format!("{n}-cm"), "a".to_string())),
    );
    for child in expected.iter_mut().take(CHANGED) {
        child.1 = "b".to_string();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_promptly_after_a_kube_apiserver_crash() {
    if std::env::var_os(metacontroller_testkit::E2E_KUBECONFIG_ENV).is_none() {
        eprintln!("skipped: real server only (set METACONTROLLER_E2E_KUBECONFIG); the embedded server cannot be killed -9");
        return;
    }
    let (crash, kubeconfig) = CrashCluster::up();
    let cluster = TestCluster::real(kubeconfig).await;
    let ns = cluster.create_namespace("crash").await;
    let (parent, _hook, label) = crash_controller(&cluster).await;
    let parents: Api<DynamicObject> = parent.api(cluster.client(), Some(&ns));
    let children: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    let mut expected = Vec::new();
    for i in 0..OLD {
        let name = format!("old-{i}");
        parents
            .create(
                &PostParams::default(),
                &parent_object(&parent, &ns, &name, "a"),
            )
            .await
            .unwrap();
        expected.push((format!("{name}-cm"), "a".to_string()));
    }
    let mut process = start_binary(&cluster, &label);
    wait_converged(&children, &expected, Duration::from_secs(120)).await;

    let (restart, answered) = crash_and_restart(&crash, &cluster).await;
    write_after_restart(&parents, &parent, &ns, &mut expected).await;
    let recovered = converge(&children, &expected, RECOVERY_BOUND).await;
    let log = workspace().join("target/apiserver-crash-controller.log");
    let _ = std::fs::write(&log, process.logs());
    if let Err(done) = recovered {
        panic!(
            "{done}/{} children converged {RECOVERY_BOUND:?} after the restart; controller log: {}",
            expected.len(),
            log.display()
        );
    }
    let took = answered.elapsed();
    println!(
        "apiserver crash recovery: {NEW} new + {CHANGED} changed parents converged {:.1} s after /readyz answered ({OUTAGE:?} outage, real server)",
        took.as_secs_f64()
    );
    restart.await.unwrap();
    assert!(
        process.wait_exit(Duration::ZERO).is_none(),
        "the controller exited:\n{}",
        process.logs()
    );
}
