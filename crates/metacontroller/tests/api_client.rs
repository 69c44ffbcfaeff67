//! The binary's API client as operators run it: proxies from the environment (with
//! NO_PROXY honoured for the API server and for hooks), a deadline on stalled requests,
//! and the `--client-go-qps`/`--client-go-burst` token bucket measured at the server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    configmap_child_reply, create_object, replicas, ControllerProcess, CrdBuilder, Fault,
    HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

fn sync_reply(request: &Value) -> HookReply {
    HookReply::json(configmap_child_reply(request))
}

/// Installs a parent CRD and a CompositeController calling `hook_url`; returns the CRD
/// and the label selecting the controller.
async fn setup(cluster: &TestCluster, prefix: &str, hook_url: &str) -> (CrdBuilder, String) {
    cluster.install_metacontroller_crds().await;
    let parent = cluster.install_parent_crd(prefix).await;
    let label = cluster
        .create_labelled_controller::<CompositeController>(prefix, parent.composite_spec(hook_url))
        .await;
    (parent, label)
}

async fn create_parent(cluster: &TestCluster, parent: &CrdBuilder, ns: &str, name: &str) {
    create_object(
        &parent.api(cluster.client(), Some(ns)),
        json!({
            "apiVersion": parent.api_version(), "kind": "Parent",
            "metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": name}}}
        }),
    )
    .await;
}

fn run_args(cluster: &TestCluster, label: &str, extra: &[&str]) -> Vec<String> {
    let mut args = replicas::run_args(cluster.kubeconfig_path(), label);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Waits for ConfigMap `ns/name`, showing the controller's logs on timeout.
async fn wait_child(cluster: &TestCluster, ns: &str, name: &str, process: &ControllerProcess) {
    cluster.wait_for_configmap(ns, name, process, WAIT).await;
}

/// A port on 127.0.0.1 nothing listens on.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A controller (named after `prefix`) calling `hook_url`, run with `HTTPS_PROXY` and
/// `HTTP_PROXY` set to `proxy` and `NO_PROXY` to `no_proxy`, converges a parent: its
/// ConfigMap child appears.
async fn converges_with_proxy_env(
    cluster: &TestCluster,
    prefix: &str,
    hook_url: &str,
    (proxy, no_proxy): (&str, &str),
) {
    let (parent, label) = setup(cluster, prefix, hook_url).await;
    let ns = cluster.create_namespace(prefix).await;
    let process = ControllerProcess::start_with_env(
        env!("CARGO_BIN_EXE_metacontroller"),
        run_args(cluster, &label, &[]),
        [
            ("HTTPS_PROXY", proxy),
            ("HTTP_PROXY", proxy),
            ("NO_PROXY", no_proxy),
        ],
    );
    create_parent(cluster, &parent, &ns, "p").await;
    wait_child(cluster, &ns, "p-cm", &process).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_variables_with_no_proxy_for_the_api_server_still_converge() {
    let cluster = TestCluster::start().await;
    let hook = HookServer::start(|_, req| sync_reply(req)).await;
    // A dead proxy: any request sent to it fails.
    let proxy = format!("http://localhost:{}", dead_port());
    let proxies = (proxy.as_str(), "127.0.0.1,localhost");
    converges_with_proxy_env(&cluster, "noproxy", &hook.url("/sync"), proxies).await;
    assert!(hook.calls("/sync") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_calls_go_through_the_proxy_while_no_proxy_exempts_the_api_server() {
    let cluster = TestCluster::start().await;
    // The "proxy" is a hook server: a forward proxy gets `POST http://host:port/sync`,
    // whose path it serves. The hook URL itself points at a dead port, so a sync only
    // succeeds through the proxy.
    let proxy = HookServer::start(|_, req| sync_reply(req)).await;
    let hook_url = format!("http://localhost:{}/sync", dead_port());
    // The proxy is named `localhost` and only 127.0.0.1 (the API server) is exempt: API
    // requests sent to the proxy would fail (it does not tunnel), so convergence also
    // shows that NO_PROXY is matched against the API server, not the proxy.
    let proxy_url = format!("http://localhost:{}", proxy.addr().port());
    converges_with_proxy_env(&cluster, "proxied", &hook_url, (&proxy_url, "127.0.0.1")).await;
    assert!(
        proxy.calls("/sync") >= 1,
        "the hook call went through the proxy"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_api_request_times_out_and_the_sync_is_retried() {
    let cluster = TestCluster::start().await;
    let Some(control) =
        cluster.control_or_skip("a_stalled_api_request_times_out_and_the_sync_is_retried")
    else {
        return;
    };
    let hook = HookServer::start(|_, req| sync_reply(req)).await;
    let (parent, label) = setup(&cluster, "stall", &hook.url("/sync")).await;
    let ns = cluster.create_namespace("stall").await;
    // The first child create is never answered (within this test).
    control.inject(Fault::latency(
        Some("create"),
        Some("configmaps"),
        1,
        Duration::from_secs(3600),
    ));
    let process = ControllerProcess::start(
        env!("CARGO_BIN_EXE_metacontroller"),
        run_args(&cluster, &label, &["--api-request-timeout", "1s"]),
    );
    let started = Instant::now();
    create_parent(&cluster, &parent, &ns, "p").await;
    wait_child(&cluster, &ns, "p-cm", &process).await;
    let logs = process.logs();
    assert!(
        logs.contains("no response from the API server within 1s (POST /api/v1/namespaces/"),
        "the stalled create timed out:\n{logs}"
    );
    assert!(control.requests("create", "configmaps") >= 2, "retried");
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_qps_and_burst_bound_the_request_rate_at_the_server() {
    const QPS: f64 = 10.0;
    const BURST: f64 = 5.0;
    const PARENTS: usize = 8;
    let cluster = TestCluster::start().await;
    let Some(control) =
        cluster.control_or_skip("client_go_qps_and_burst_bound_the_request_rate_at_the_server")
    else {
        return;
    };
    let hook = HookServer::start(|_, req| sync_reply(req)).await;
    let (parent, label) = setup(&cluster, "qps", &hook.url("/sync")).await;
    let ns = cluster.create_namespace("qps").await;
    for i in 0..PARENTS {
        create_parent(&cluster, &parent, &ns, &format!("p{i}")).await;
    }
    // From here on only the binary talks to the server (the test polls the counters
    // in-process), so the counts are the binary's requests.
    control.reset_counts();
    let samples = Arc::new(Mutex::new(Vec::<(Instant, u64)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (control, samples, stop) = (control.clone(), samples.clone(), stop.clone());
        async move {
            while !stop.load(Ordering::SeqCst) {
                let count = control.requests("*", "*");
                samples.lock().unwrap().push((Instant::now(), count));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let qps = QPS.to_string();
    let burst = BURST.to_string();
    let process = ControllerProcess::start(
        env!("CARGO_BIN_EXE_metacontroller"),
        run_args(
            &cluster,
            &label,
            &["--client-go-qps", &qps, "--client-go-burst", &burst],
        ),
    );
    let deadline = Instant::now() + WAIT;
    while control.requests("create", "configmaps") < PARENTS as u64
        || control.requests("*", "parents/status") < PARENTS as u64
    {
        assert!(
            Instant::now() < deadline,
            "not converged; counts {:?}\n{}",
            control.request_counts(),
            process.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    sampler.await.unwrap();
    let samples = samples.lock().unwrap().clone();
    let total = samples.last().map_or(0, |s| s.1);
    assert!(
        total as f64 > 3.0 * BURST,
        "enough requests to exceed the burst ({total})"
    );
    // Server-side counts lag the client's dispatch a little: allow 2 requests of slack.
    let mut worst = f64::MIN;
    for (i, (t0, c0)) in samples.iter().enumerate() {
        for (t1, c1) in &samples[i + 1..] {
            let allowed = QPS * (*t1 - *t0).as_secs_f64() + BURST + 2.0;
            worst = worst.max((c1 - c0) as f64 - allowed);
        }
    }
    assert!(
        worst <= 0.0,
        "a window exceeded qps*t+burst by {worst:.1} requests"
    );
    let items = Api::<ConfigMap>::namespaced(cluster.client(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(items.len() >= PARENTS, "every parent has its child");
}
