//! What a user does with `metacontroller dev` besides controllers: kubectl's imperative
//! commands (protobuf request bodies), `kubectl explain`, and a Helm chart installed,
//! upgraded and uninstalled with Helm v4's engine while the simulation runs its pods.
//!
//! Dev mode is by definition the embedded API server, so these tests ignore
//! `METACONTROLLER_E2E_KUBECONFIG`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use metacontroller_testkit::{eventually_within, unique_name, ControllerProcess};

mod helm;
use helm::{helm_chart, helm_sdk_available};

/// Starts `metacontroller dev` (simulation on, as by default) and waits until it is ready.
async fn start_dev(kubeconfig: &Path) -> (ControllerProcess, kube::Client) {
    ControllerProcess::start_dev(
        env!("CARGO_BIN_EXE_metacontroller"),
        kubeconfig,
        &["--pod-ready-after", "200ms"],
        &[],
    )
    .await
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Option<(bool, String)> {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .ok()?;
    Some((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_expose_run_and_explain_in_dev_mode() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let (_dev, _client) = start_dev(&kubeconfig).await;
    let Some((ok, out)) = kubectl(
        &kubeconfig,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
        ],
    ) else {
        metacontroller_testkit::missing_tool("kubectl", "it could not be started");
        return;
    };
    assert!(ok && out.contains("deployment.apps/web created"), "{out}");
    let run = |args: &[&str]| kubectl(&kubeconfig, args).expect("kubectl ran before");
    let (ok, out) = run(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert!(ok && out.contains("successfully rolled out"), "{out}");
    let (ok, out) = run(&["expose", "deployment", "web", "--port=80"]);
    assert!(ok && out.contains("service/web exposed"), "{out}");
    let (ok, out) = run(&["run", "shell", "--image=busybox:1.36", "--", "sleep", "60"]);
    assert!(ok && out.contains("pod/shell created"), "{out}");
    let (ok, out) = run(&[
        "wait",
        "--for=condition=Ready",
        "pod/shell",
        "--timeout=30s",
    ]);
    assert!(ok, "{out}");
    let (ok, out) = run(&["explain", "deployment.spec.replicas"]);
    assert!(ok && out.contains("Number of desired pods"), "{out}");
    let (ok, out) = run(&["explain", "compositecontroller.spec.resyncPeriodSeconds"]);
    assert!(ok && out.contains("resyncPeriodSeconds"), "{out}");
}

/// Dev mode installed the Metacontroller CRDs itself (field manager `metacontroller-dev`).
async fn assert_dev_mode_installed_the_crds(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .get("compositecontrollers.metacontroller.k8s.io")
        .await
        .expect("dev mode installed the CRD");
    let managers: Vec<String> = crd
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["metacontroller-dev"]);
}

/// Whether StatefulSet `name` has `want` ready replicas.
async fn ready_replicas(statefulsets: &Api<StatefulSet>, name: &str, want: i32) -> bool {
    statefulsets
        .get(name)
        .await
        .ok()
        .and_then(|s| s.status)
        .and_then(|s| s.ready_replicas)
        == Some(want)
}

/// `helm install`, `helm upgrade` (changed values) and `helm uninstall` of the project's own
/// chart against dev mode: the chart's CRDs meet the identical ones dev mode installed, the
/// simulated StatefulSet controller and kubelet run its pods, and uninstall leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_upgrades_and_uninstalls_a_chart_in_dev_mode() {
    if !helm_sdk_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let (_dev, client) = start_dev(&kubeconfig).await;
    assert_dev_mode_installed_the_crds(&client).await;
    let ns = unique_name("helm-dev");
    let release = unique_name("mc");
    let full = format!("{release}-metacontroller");
    let target = [
        "--kubeconfig",
        kubeconfig.to_str().expect("UTF-8 path"),
        "--release",
        &release,
        "--namespace",
        &ns,
    ];
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let release_secrets = ListParams::default().labels(&format!("owner=helm,name={release}"));

    helm_chart(&[&["install"], &target[..]].concat())
        .await
        .expect_ok("helm install");
    eventually_within("1 ready replica", Duration::from_secs(60), || {
        ready_replicas(&statefulsets, &full, 1)
    })
    .await;

    helm_chart(
        &[
            &["upgrade"],
            &target[..],
            &["--set-json", r#"{"replicas": 2}"#],
        ]
        .concat(),
    )
    .await
    .expect_ok("helm upgrade");
    eventually_within("2 ready replicas", Duration::from_secs(60), || {
        ready_replicas(&statefulsets, &full, 2)
    })
    .await;
    assert_eq!(
        secrets
            .list(&release_secrets)
            .await
            .expect("release Secrets")
            .items
            .len(),
        2
    );

    helm_chart(&[&["uninstall"], &target[..]].concat())
        .await
        .expect_ok("helm uninstall");
    eventually_within(
        "the release's objects, pods and Secrets gone",
        Duration::from_secs(60),
        || async {
            statefulsets.get_opt(&full).await.ok().flatten().is_none()
                && pods
                    .list(&ListParams::default())
                    .await
                    .is_ok_and(|l| l.items.is_empty())
                && secrets
                    .list(&release_secrets)
                    .await
                    .is_ok_and(|l| l.items.is_empty())
        },
    )
    .await;
}
