//! examples/hello-world-kustomize as its README runs it, with kubectl's own kustomize: the hook
//! code in a `configMapGenerator` ConfigMap (hash-suffixed name), the `deploy/kustomize`
//! component rewriting the hook's `configMapRef.name`, `kubectl apply -k`, and the parent
//! synced (dev mode, or `run` against METACONTROLLER_E2E_KUBECONFIG). Skipped without kubectl.

use metacontroller_testkit::example::{all_installed, example_file, ExampleCluster};
use metacontroller_testkit::hello::{delete_hello, hello_greets};

const EXAMPLE: &str = "hello-world-kustomize";

/// The generated ConfigMap's name, from `kubectl kustomize` of the example; asserts that
/// every `configMapRef` names it (the nameReference configuration at work).
fn generated_name(rendered: &str) -> String {
    let docs: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(rendered)
        .map(|d| serde::Deserialize::deserialize(d).expect("kustomize output is YAML"))
        .collect();
    let code = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .and_then(|d| d["metadata"]["name"].as_str())
        .expect("a generated ConfigMap")
        .to_string();
    assert!(
        code.starts_with("hello-kustomize-code-"),
        "not hash-suffixed: {code}"
    );
    let controller = docs
        .iter()
        .find(|d| d["kind"] == "CompositeController")
        .expect("the CompositeController");
    assert_eq!(
        controller["spec"]["hooks"]["sync"]["jsonnet"]["configMapRef"]["name"],
        code.as_str(),
        "configMapRef.name not rewritten:\n{rendered}"
    );
    code
}

#[test]
fn hello_world_kustomize_applies_with_kubectl_apply_k_and_syncs() {
    if !all_installed(&["kubectl"]) {
        return;
    }
    let dir = example_file(EXAMPLE, "");
    let dir = dir.to_string_lossy().into_owned();
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let code = generated_name(&cluster.kubectl.ok(&["kustomize", &dir]));

    cluster
        .kubectl
        .until("kubectl apply -k", &["apply", "-k", &dir], |ok, _| ok);
    cluster.kubectl.ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/hellokustomizes.example.com",
    ]);
    cluster
        .kubectl
        .in_namespace("default")
        .ok(&["get", "configmap", &code]);
    let k = cluster.namespace("hello-kustomize");
    k.apply(&example_file(EXAMPLE, "hello.yaml"));
    hello_greets(&k, "hellokustomize");

    delete_hello(&k, "hellokustomize");
    cluster.delete_composite_controller("hello-kustomize-controller");
    cluster
        .kubectl
        .in_namespace("default")
        .ok(&["delete", "configmap", &code, "--wait=false"]);
    cluster.clean_up(&[&k]);
}
