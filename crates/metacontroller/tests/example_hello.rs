//! The hello-world example end to end, as its README tells a user to run it: the real binary
//! (`metacontroller dev`, or `metacontroller run` against the cluster named by
//! `METACONTROLLER_E2E_KUBECONFIG`), the example's Python hook server, and kubectl.
//! Skipped when kubectl or python3 is not installed.

use metacontroller_testkit::example::{
    all_installed, example_file, start_python_hook, ExampleCluster,
};

const EXAMPLE: &str = "hello-world";

#[test]
fn hello_world_example_runs_as_documented() {
    if !all_installed(&["kubectl", "python3"]) {
        return;
    }
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let (_hook, port) = start_python_hook(EXAMPLE, "sync.py");

    let k = cluster.namespace("hello");
    k.install_crd(
        &example_file(EXAMPLE, "crd.yaml"),
        "helloworlds.example.com",
    );
    let port = port.to_string();
    k.apply(&cluster.rewrite(
        EXAMPLE,
        "controller.yaml",
        &[("127.0.0.1:8080", &format!("127.0.0.1:{port}"))],
    ));
    k.apply(&example_file(EXAMPLE, "hello.yaml"));

    k.until_jsonpath(&["configmap", "hello"], "{.data.greeting}", "Hello, World!");
    k.until_jsonpath(&["helloworld", "hello"], "{.status.greetings}", "1");
    // The ConfigMap is owned by its HelloWorld.
    assert_eq!(
        k.jsonpath(
            &["configmap", "hello"],
            "{.metadata.ownerReferences[0].kind}"
        ),
        "HelloWorld"
    );

    k.ok(&[
        "patch",
        "helloworld",
        "hello",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"who":"Kubernetes"}}"#,
    ]);
    k.until_jsonpath(
        &["configmap", "hello"],
        "{.data.greeting}",
        "Hello, Kubernetes!",
    );

    k.ok(&["delete", "helloworld", "hello", "--wait=true"]);
    k.until_gone(&["configmap", "hello"]);
    if cluster.is_real() {
        k.ok(&["delete", "namespace", k.ns(), "--wait=false"]);
    }
}
