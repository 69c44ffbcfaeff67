//! examples/hello-world-wasm as its README runs it: the module built for wasm32-wasip1, put
//! in a ConfigMap, run by the controller (dev mode, or `run` against
//! METACONTROLLER_E2E_KUBECONFIG), and `render --wasm` offline. Skipped without kubectl, or
//! without the wasm32-wasip1 target outside CI.

use std::process::Command;

use metacontroller_testkit::example::{all_installed, example_file, ExampleCluster};
use metacontroller_testkit::wasm::hello_world_module;

const EXAMPLE: &str = "hello-world-wasm";

#[test]
fn hello_world_wasm_example_runs_as_documented() {
    if !all_installed(&["kubectl"]) {
        return;
    }
    let Some(module) = hello_world_module() else {
        return;
    };
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let wasm = cluster.dir.path().join("hello.wasm");
    std::fs::write(&wasm, module).unwrap();
    let k = cluster.namespace("hello-wasm");
    k.ok(&[
        "create",
        "configmap",
        "hello-world-wasm",
        &format!("--from-file=hello.wasm={}", wasm.display()),
    ]);
    k.install_crd(&example_file(EXAMPLE, "crd.yaml"), "hellowasms.example.com");
    let namespace = format!("namespace: {}", k.ns());
    k.apply(&cluster.rewrite(
        EXAMPLE,
        "controller.yaml",
        &[("namespace: default", &namespace)],
    ));
    k.apply(&example_file(EXAMPLE, "hello.yaml"));

    k.until_jsonpath(&["configmap", "hello"], "{.data.greeting}", "Hello, World!");
    k.until_jsonpath(&["hellowasm", "hello"], "{.status.greetings}", "1");
    k.merge_patch("hellowasm", "hello", r#"{"spec":{"who":"Kubernetes"}}"#);
    k.until_jsonpath(
        &["configmap", "hello"],
        "{.data.greeting}",
        "Hello, Kubernetes!",
    );
    k.ok(&["delete", "hellowasm", "hello", "--wait=true"]);
    k.until_gone(&["configmap", "hello"]);
    cluster.kubectl.ok(&[
        "delete",
        "compositecontroller",
        "hello-wasm-controller",
        "--wait=false",
    ]);
    cluster.clean_up(&[&k]);
}

#[test]
fn hello_world_wasm_renders_offline() {
    let Some(module) = hello_world_module() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("hello.wasm");
    std::fs::write(&wasm, module).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_metacontroller"))
        .arg("render")
        .arg("--controller")
        .arg(example_file(EXAMPLE, "controller.yaml"))
        .arg("--crd")
        .arg(example_file(EXAMPLE, "crd.yaml"))
        .arg("--parent")
        .arg(example_file(EXAMPLE, "hello.yaml"))
        .arg("--wasm")
        .arg(&wasm)
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
