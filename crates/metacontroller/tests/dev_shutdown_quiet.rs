//! Shutdown is quiet: after Ctrl-C, `metacontroller dev` (or `run` against
//! METACONTROLLER_E2E_KUBECONFIG) logs no WARN for the watches of hook code ConfigMaps that
//! end with it — in dev mode the API server goes away with the process, and each watch used to
//! report that as a failure. Skipped without kubectl.

use std::time::Duration;

use metacontroller_testkit::example::{all_installed, example_file, ExampleCluster, Kubectl};
use metacontroller_testkit::hello::hello_greets;

const EXAMPLE: &str = "hello-world-jsonnet";

/// The example's code ConfigMap in `k`'s namespace (watched once the controller reads it),
/// and its CRD, controller and parent.
fn apply_code(cluster: &ExampleCluster, k: &Kubectl) {
    let sync = example_file(EXAMPLE, "sync.jsonnet");
    let greeting = example_file(EXAMPLE, "greeting.libsonnet");
    k.ok(&[
        "create",
        "configmap",
        "hello-world-jsonnet",
        &format!("--from-file={}", sync.display()),
        &format!("--from-file={}", greeting.display()),
    ]);
    cluster.apply_code_example(k, EXAMPLE, "hellojsonnets.example.com");
}

#[test]
fn shutdown_logs_no_warning_per_watched_configmap() {
    if !all_installed(&["kubectl"]) {
        return;
    }
    let mut cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let k = cluster.namespace("quiet");
    apply_code(&cluster, &k);
    hello_greets(&k, "hellojsonnet");

    // The controller stays while the process stops, so its code ConfigMap is still watched.
    cluster.controller.interrupt();
    let status = cluster.controller.wait_exit(Duration::from_secs(60));
    let logs = cluster.controller.logs();
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{logs}");
    let after = logs
        .split_once("shutdown requested")
        .map(|(_, after)| after)
        .unwrap_or_else(|| panic!("no shutdown line:\n{logs}"));
    let warnings: Vec<&str> = after.lines().filter(|l| l.contains("WARN")).collect();
    if cluster.is_real() {
        cluster.delete_composite_controller("hello-jsonnet-controller");
        cluster.clean_up(&[&k]);
    }
    assert!(
        warnings.is_empty(),
        "warnings after shutdown:\n{}",
        warnings.join("\n")
    );
}
