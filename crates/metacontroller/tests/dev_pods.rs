//! Pods outside any workload end as on a cluster: `kubectl run --restart=Never -- echo hi`
//! ends Succeeded, a failing command ends Failed with its exit code, and a pod with the
//! default restartPolicy keeps running. In dev mode the simulated kubelet does this; against
//! `METACONTROLLER_E2E_KUBECONFIG` the same steps check what the real cluster's kubelet (or
//! the test stand-in for one) does, so both agree. Skipped without kubectl.

use metacontroller_testkit::example::{all_installed, ExampleCluster};

#[test]
fn run_to_completion_pods_end_and_others_keep_running() {
    if !all_installed(&["kubectl"]) {
        return;
    }
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let k = cluster.namespace("dev-pods");
    k.ok(&[
        "run",
        "solo",
        "--image=busybox",
        "--restart=Never",
        "--",
        "echo",
        "hi",
    ]);
    k.ok(&[
        "run",
        "broken",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sh",
        "-c",
        "echo starting; exit 3",
    ]);
    k.ok(&[
        "run",
        "retried",
        "--image=busybox",
        "--restart=OnFailure",
        "--",
        "true",
    ]);
    k.ok(&["run", "server", "--image=busybox", "--", "sleep", "3600"]);

    k.until_jsonpath(&["pod", "solo"], "{.status.phase}", "Succeeded");
    assert_eq!(
        k.jsonpath(
            &["pod", "solo"],
            "{.status.containerStatuses[0].state.terminated.exitCode}"
        ),
        "0"
    );
    k.until_jsonpath(&["pod", "broken"], "{.status.phase}", "Failed");
    assert_eq!(
        k.jsonpath(
            &["pod", "broken"],
            "{.status.containerStatuses[0].state.terminated.exitCode}"
        ),
        "3"
    );
    k.until_jsonpath(&["pod", "retried"], "{.status.phase}", "Succeeded");
    // The long-running pod is Running and Ready, and stays so while the others ended.
    k.until_jsonpath(&["pod", "server"], "{.status.phase}", "Running");
    assert_eq!(
        k.jsonpath(
            &["pod", "server"],
            r#"{.status.conditions[?(@.type=="Ready")].status}"#
        ),
        "True"
    );
    cluster.clean_up(&[&k]);
}
