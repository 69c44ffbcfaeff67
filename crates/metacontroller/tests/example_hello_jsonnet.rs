//! examples/hello-world-jsonnet as its README runs it: the hook code in a ConfigMap, run by
//! the controller (dev mode, or `run` against METACONTROLLER_E2E_KUBECONFIG), a code change
//! reaching the parent, and `render --jsonnet` offline. Skipped without kubectl.

use metacontroller_testkit::example::{all_installed, example_file, ExampleCluster, Kubectl};
use metacontroller_testkit::hello::{delete_hello, hello_greets, render_hello_offline};

const EXAMPLE: &str = "hello-world-jsonnet";

/// `kubectl create configmap hello-world-jsonnet` from the example's files (`greeting` is
/// the greeting.libsonnet to use), applied so it also updates.
fn apply_code(cluster: &ExampleCluster, k: &Kubectl, greeting: &std::path::Path) {
    let sync = example_file(EXAMPLE, "sync.jsonnet");
    let yaml = k.ok(&[
        "create",
        "configmap",
        "hello-world-jsonnet",
        "--dry-run=client",
        "-o",
        "yaml",
        &format!("--from-file={}", sync.display()),
        &format!("--from-file=greeting.libsonnet={}", greeting.display()),
    ]);
    let path = cluster.dir.path().join("code.yaml");
    std::fs::write(&path, yaml).unwrap();
    k.apply(&path);
}

#[test]
fn hello_world_jsonnet_example_runs_as_documented() {
    if !all_installed(&["kubectl"]) {
        return;
    }
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let k = cluster.namespace("hello-jsonnet");
    apply_code(&cluster, &k, &example_file(EXAMPLE, "greeting.libsonnet"));
    cluster.apply_code_example(&k, EXAMPLE, "hellojsonnets.example.com");
    hello_greets(&k, "hellojsonnet");

    // New code in the ConfigMap: the parent is synced again with it, with no change to it.
    let text = std::fs::read_to_string(example_file(EXAMPLE, "greeting.libsonnet")).unwrap();
    let changed = cluster.dir.path().join("greeting.libsonnet");
    std::fs::write(&changed, text.replace("Hello, ", "Hi, ")).unwrap();
    apply_code(&cluster, &k, &changed);
    k.until_jsonpath(
        &["configmap", "hello"],
        "{.data.greeting}",
        "Hi, Kubernetes!",
    );

    delete_hello(&k, "hellojsonnet");
    cluster.delete_composite_controller("hello-jsonnet-controller");
    cluster.clean_up(&[&k]);
}

#[test]
fn hello_world_jsonnet_renders_offline() {
    let sync = example_file(EXAMPLE, "sync.jsonnet");
    render_hello_offline(
        env!("CARGO_BIN_EXE_metacontroller"),
        EXAMPLE,
        &["--jsonnet".as_ref(), sync.as_os_str()],
    );
}
