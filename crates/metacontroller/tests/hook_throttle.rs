//! A hook that answers 429 ("slow down") is called again after its `Retry-After`, not with
//! the fast error backoff, and each such sync counts as a failed reconcile in `/metrics`
//! (`controller_runtime_reconcile_total{result="error"}`,
//! `controller_runtime_reconcile_errors_total`), not a success; the parent converges once
//! the hook answers, and `resyncPeriodSeconds` keeps calling it afterwards. The real binary
//! against the embedded server, or a real one (`METACONTROLLER_E2E_KUBECONFIG`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, eventually_within, unique_name, ControllerProcess, HookReply, HookServer,
    TestCluster,
};
use serde_json::{json, Value};

/// How many times the hook answers 429 before it answers for real.
const THROTTLED: usize = 2;
/// The `Retry-After` of its 429s, in seconds.
const RETRY_AFTER: u64 = 2;

/// The sum of the samples of `family` whose labels contain every one of `labels`.
async fn metric_sum(process: &ControllerProcess, family: &str, labels: &[&str]) -> f64 {
    let text = process.scrape_metrics().await;
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// The hook: 429 with `Retry-After` for the first [`THROTTLED`] calls, then one ConfigMap
/// child and `status.ok`.
fn hook(calls: Arc<AtomicUsize>) -> impl Fn(&str, &Value) -> HookReply + Send + Sync + 'static {
    move |_, request| {
        if calls.fetch_add(1, Ordering::SeqCst) < THROTTLED {
            return HookReply::status(429, "slow down")
                .header("Retry-After", &RETRY_AFTER.to_string());
        }
        let name = request["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        HookReply::json(json!({
            "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": format!("{name}-cm"), "labels": {"app": name}},
                          "data": {"a": "b"}}],
            "status": {"ok": true},
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_hook_is_retried_after_retry_after_and_counted_as_failed() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("thrt").await;
    let calls = Arc::new(AtomicUsize::new(0));
    let server = HookServer::start(hook(calls.clone())).await;
    let name = unique_name("thrt");
    let label = unique_name("team");
    let mut spec = parent.composite_spec(&server.url("/sync"));
    spec["resyncPeriodSeconds"] = json!(3);
    let _: CompositeController = cluster.create_controller(&name, &label, spec).await;
    let selector = format!("team={label}");
    let process = ControllerProcess::run(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &[
            "--target-label-selector",
            &selector,
            "--metrics-address",
            "127.0.0.1:0",
            "--health-probe-bind-address",
            "0",
        ],
    );
    eventually_within("metrics served", Duration::from_secs(60), || async {
        process.metrics_address().is_some()
    })
    .await;
    let parents = parent.api(cluster.client(), Some(&ns));
    create_object(
        &parents,
        json!({"apiVersion": parent.api_version(), "kind": "Parent",
               "metadata": {"name": "p"}, "spec": {"selector": {"matchLabels": {"app": "p"}}}}),
    )
    .await;
    eventually_within("the parent converges", Duration::from_secs(90), || async {
        parents
            .get("p")
            .await
            .is_ok_and(|p| p.data["status"]["ok"] == json!(true))
    })
    .await;

    // Each 429 waited for its Retry-After (the error backoff would retry within ms).
    let times = server.call_times("/sync");
    assert!(times.len() > THROTTLED, "{times:?}");
    for pair in times[..=THROTTLED].windows(2) {
        let waited = pair[1] - pair[0];
        assert!(
            waited >= Duration::from_millis(RETRY_AFTER * 1000 - 100),
            "retried after {waited:?}, before the Retry-After of {RETRY_AFTER}s:\n{}",
            process.logs()
        );
    }

    // The throttled syncs are failed reconciles, not successes.
    let queue = format!("controller=\"CompositeController-{name}\"");
    let errors = metric_sum(
        &process,
        "controller_runtime_reconcile_total",
        &[&queue, "result=\"error\""],
    )
    .await;
    let error_total = metric_sum(
        &process,
        "controller_runtime_reconcile_errors_total",
        &[&queue],
    )
    .await;
    // (A real server may add a conflict or two: at least the throttled ones.)
    assert!(
        errors >= THROTTLED as f64 && error_total >= THROTTLED as f64,
        "errors {errors}, errors_total {error_total}:\n{}",
        process.scrape_metrics().await
    );

    // resyncPeriodSeconds still brings the parent back: two more hook calls.
    let converged = calls.load(Ordering::SeqCst);
    eventually_within("two resyncs", Duration::from_secs(60), || async {
        calls.load(Ordering::SeqCst) >= converged + 2
    })
    .await;
}
