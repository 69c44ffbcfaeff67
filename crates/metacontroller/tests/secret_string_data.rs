//! A Secret child setting the same key in `data` and `stringData` (issue 51): Kubernetes
//! allows the overlap and stores `data[k] = base64(stringData[k])`. The hook answers
//! `data: {k: "YQ==", other: "eA=="}, stringData: {k: "b"}` with a resync every 2 s; over
//! [`RESYNCS`] resyncs (counted by hook calls) the binary never writes the Secret after
//! creating it (its resourceVersion stays the same, no write is logged) and every sample of
//! the Secret holds `k` = base64("b") and `other` as given. Run in the three apply modes
//! (`--apply-schema=auto` (default), `--apply-schema=off`,
//! `--apply-strategy=server-side-apply`), on the embedded server and on a real one
//! (`METACONTROLLER_E2E_KUBECONFIG`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, eventually_within, parent_name, ControllerProcess, HookReply, HookServer,
    TestCluster,
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);
/// Resyncs watched per mode (2 s each: about 30 s).
const RESYNCS: usize = 15;

const MODES: [(&str, &[&str]); 3] = [
    ("auto", &[]),
    ("off", &["--apply-schema=off"]),
    ("server-side-apply", &["--apply-strategy=server-side-apply"]),
];

/// What one mode saw: Secret samples taken, samples with a wrong or missing key, the
/// resourceVersions seen, and the Secret writes the binary logged.
struct Seen {
    samples: usize,
    wrong: Vec<String>,
    versions: Vec<String>,
    writes: usize,
    logs: String,
}

/// Secret writes the binary logged after creating it (update, server-side apply, delete).
fn logged_writes(logs: &str) -> usize {
    logs.lines()
        .filter(|l| {
            ["update Secret ", "apply Secret ", "delete Secret "]
                .iter()
                .any(|v| l.contains(v))
        })
        .filter(|l| {
            ["updating", "server-side apply", "deleting child"]
                .iter()
                .any(|m| l.contains(m))
        })
        .count()
}

async fn run_mode(flags: &[&str]) -> Seen {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("secret-overlap").await;
    let parent_crd = cluster.install_parent_crd("secretoverlap").await;
    let hook = HookServer::start(|_, req| {
        let name = format!("{}-secret", parent_name(req));
        HookReply::json(json!({"children": [{"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "labels": {"overlap": "p"}},
            "data": {"k": "YQ==", "other": "eA=="}, "stringData": {"k": "b"}}]}))
    })
    .await;
    let mut spec = parent_crd.composite_spec(&hook.url("/sync"));
    spec["childResources"] = json!([{"apiVersion": "v1", "resource": "secrets",
                                     "updateStrategy": {"method": "InPlace"}}]);
    spec["resyncPeriodSeconds"] = json!(2);
    let label = cluster
        .create_labelled_controller::<CompositeController>("secret-overlap", spec)
        .await;
    let process = ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &label,
        flags,
    );
    create_object(
        &parent_crd.api(cluster.client(), Some(&ns)),
        json!({"apiVersion": parent_crd.api_version(), "kind": parent_crd.kind(),
               "metadata": {"name": "p"},
               "spec": {"selector": {"matchLabels": {"overlap": "p"}}}}),
    )
    .await;
    let secrets: Api<Secret> = Api::namespaced(cluster.client(), &ns);
    eventually_within("the Secret is created", WAIT, || async {
        secrets.get_opt("p-secret").await.ok().flatten().is_some()
    })
    .await;
    let created = process.logs().len();
    let mut seen = Seen {
        samples: 0,
        wrong: Vec::new(),
        versions: Vec::new(),
        writes: 0,
        logs: String::new(),
    };
    let start = hook.calls("/sync");
    let deadline = tokio::time::Instant::now() + WAIT + Duration::from_secs(2 * RESYNCS as u64);
    while hook.calls("/sync") < start + RESYNCS {
        assert!(
            tokio::time::Instant::now() < deadline,
            "resyncs did not call the hook {RESYNCS} times; logs:\n{}",
            process.logs()
        );
        let secret = secrets.get("p-secret").await.expect("reading the Secret");
        let data = secret.data.unwrap_or_default();
        let value = |k: &str| {
            data.get(k)
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        };
        if value("k").as_deref() != Some("b") || value("other").as_deref() != Some("x") {
            seen.wrong
                .push(format!("k={:?} other={:?}", value("k"), value("other")));
        }
        let rv = secret.metadata.resource_version.unwrap_or_default();
        if seen.versions.last() != Some(&rv) {
            seen.versions.push(rv);
        }
        seen.samples += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let logs = process.logs();
    seen.writes = logged_writes(logs.get(created..).unwrap_or_default());
    seen.logs = logs;
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_with_a_key_in_data_and_string_data_is_not_rewritten() {
    let mut results = Vec::new();
    for (mode, flags) in MODES {
        results.push((mode, run_mode(flags).await));
    }
    for (mode, seen) in &results {
        println!(
            "mode {mode}: {} samples, {} wrong, resourceVersions {:?}, {} logged writes",
            seen.samples,
            seen.wrong.len(),
            seen.versions,
            seen.writes
        );
    }
    for (mode, seen) in &results {
        assert!(
            seen.wrong.is_empty() && seen.versions.len() == 1 && seen.writes == 0,
            "mode {mode}: {} of {} samples wrong ({:?}), resourceVersions {:?}, {} Secret \
             writes logged; logs:\n{}",
            seen.wrong.len(),
            seen.samples,
            seen.wrong.iter().take(5).collect::<Vec<_>>(),
            seen.versions,
            seen.writes,
            seen.logs
        );
    }
}
