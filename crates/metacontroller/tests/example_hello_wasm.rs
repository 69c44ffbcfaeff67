//! examples/hello-world-wasm as its README runs it: the module built for wasm32-wasip1, put
//! in a ConfigMap, run by the controller (dev mode, or `run` against
//! METACONTROLLER_E2E_KUBECONFIG), and `render --wasm` offline. Skipped without kubectl, or
//! without the wasm32-wasip1 target outside CI.

use metacontroller_testkit::example::{all_installed, ExampleCluster};
use metacontroller_testkit::hello::{delete_hello, hello_greets, render_hello_offline};
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
    cluster.apply_code_example(&k, EXAMPLE, "hellowasms.example.com");
    hello_greets(&k, "hellowasm");
    delete_hello(&k, "hellowasm");
    cluster.delete_composite_controller("hello-wasm-controller");
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
    render_hello_offline(
        env!("CARGO_BIN_EXE_metacontroller"),
        EXAMPLE,
        &["--wasm".as_ref(), wasm.as_os_str()],
    );
}
