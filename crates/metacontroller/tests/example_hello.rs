//! The hello-world example end to end, as its README tells a user to run it: the real binary
//! (`metacontroller dev`, or `metacontroller run` against the cluster named by
//! `METACONTROLLER_E2E_KUBECONFIG`), the example's Python hook server, and kubectl.
//! Skipped when kubectl or python3 is not installed.

use metacontroller_testkit::example::{example_file, ExampleCluster};
use metacontroller_testkit::hello::{delete_hello, hello_greets};

const EXAMPLE: &str = "hello-world";

#[test]
fn hello_world_example_runs_as_documented() {
    let Some((cluster, _hook, k)) = ExampleCluster::start_python_example(
        env!("CARGO_BIN_EXE_metacontroller"),
        EXAMPLE,
        "hello",
        "helloworlds.example.com",
    ) else {
        return;
    };
    k.apply(&example_file(EXAMPLE, "hello.yaml"));

    hello_greets(&k, "helloworld");
    // The ConfigMap is owned by its HelloWorld.
    assert_eq!(
        k.jsonpath(
            &["configmap", "hello"],
            "{.metadata.ownerReferences[0].kind}"
        ),
        "HelloWorld"
    );
    delete_hello(&k, "helloworld");
    cluster.clean_up(&[&k]);
}
