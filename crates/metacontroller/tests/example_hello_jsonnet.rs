//! examples/hello-world-jsonnet as its README runs it: the hook code in a ConfigMap, run by
//! the controller (dev mode, or `run` against METACONTROLLER_E2E_KUBECONFIG), a code change
//! reaching the parent, and `render --jsonnet` offline. Skipped without kubectl.

use std::process::Command;

use metacontroller_testkit::example::{all_installed, example_file, ExampleCluster, Kubectl};

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
    k.install_crd(
        &example_file(EXAMPLE, "crd.yaml"),
        "hellojsonnets.example.com",
    );
    let namespace = format!("namespace: {}", k.ns());
    k.apply(&cluster.rewrite(
        EXAMPLE,
        "controller.yaml",
        &[("namespace: default", &namespace)],
    ));
    k.apply(&example_file(EXAMPLE, "hello.yaml"));

    k.until_jsonpath(&["configmap", "hello"], "{.data.greeting}", "Hello, World!");
    k.until_jsonpath(&["hellojsonnet", "hello"], "{.status.greetings}", "1");
    k.merge_patch("hellojsonnet", "hello", r#"{"spec":{"who":"Kubernetes"}}"#);
    k.until_jsonpath(
        &["configmap", "hello"],
        "{.data.greeting}",
        "Hello, Kubernetes!",
    );

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

    k.ok(&["delete", "hellojsonnet", "hello", "--wait=true"]);
    k.until_gone(&["configmap", "hello"]);
    cluster.kubectl.ok(&[
        "delete",
        "compositecontroller",
        "hello-jsonnet-controller",
        "--wait=false",
    ]);
    cluster.clean_up(&[&k]);
}

#[test]
fn hello_world_jsonnet_renders_offline() {
    let output = Command::new(env!("CARGO_BIN_EXE_metacontroller"))
        .arg("render")
        .arg("--controller")
        .arg(example_file(EXAMPLE, "controller.yaml"))
        .arg("--crd")
        .arg(example_file(EXAMPLE, "crd.yaml"))
        .arg("--parent")
        .arg(example_file(EXAMPLE, "hello.yaml"))
        .arg("--jsonnet")
        .arg(example_file(EXAMPLE, "sync.jsonnet"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("Hello, World!"), "{stdout}");
}
