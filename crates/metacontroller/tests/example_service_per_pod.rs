//! examples/service-per-pod as its README runs it: a DecoratorController on StatefulSets
//! (opt-in by annotation) adding a Service per pod, following scale changes, and a finalize
//! hook that removes the Services and its label on opt-out and on deletion. Dev mode's
//! simulation runs the StatefulSet's pods. Skipped without kubectl or node.

use std::process::Command;

use metacontroller_testkit::example::{
    all_installed, example_file, free_port, start_hook, ExampleCluster, Kubectl,
};

const EXAMPLE: &str = "service-per-pod";
const FINALIZER: &str = "metacontroller.io/decoratorcontroller-service-per-pod";
const DECORATED: &str = "{.metadata.labels.service-per-pod\\.example\\.com/decorated}";

fn services(k: &Kubectl) -> Vec<String> {
    k.names(&[
        "services",
        "-l",
        "app.kubernetes.io/managed-by=service-per-pod",
    ])
}

fn until_services(k: &Kubectl, expected: &[&str]) {
    k.until(
        &format!("Services {expected:?}"),
        &[
            "get",
            "services",
            "-l",
            "app.kubernetes.io/managed-by=service-per-pod",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
        |ok, out| {
            let mut names: Vec<&str> = out.split_whitespace().collect();
            names.sort();
            ok && names == expected
        },
    );
}

/// Opting out (removing the annotation): the finalize hook removes the Services and the
/// label, then the finalizer goes, and the StatefulSet itself is untouched (two ready pods).
fn opt_out_cleans_up(k: &Kubectl) {
    k.ok(&[
        "annotate",
        "statefulset",
        "web",
        "service-per-pod.example.com/port-",
    ]);
    until_services(k, &[]);
    k.until_jsonpath(&["statefulset", "web"], DECORATED, "");
    k.until(
        "the decorator's finalizer to be removed",
        &[
            "get",
            "statefulset",
            "web",
            "-o",
            "jsonpath={.metadata.finalizers}",
        ],
        |ok, out| ok && !out.contains(FINALIZER),
    );
    k.until_jsonpath(&["statefulset", "web"], "{.status.readyReplicas}", "2");
}

#[test]
fn service_per_pod_follows_scale_and_cleans_up_on_opt_out_and_delete() {
    if !all_installed(&["kubectl", "node"]) {
        return;
    }
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let port = free_port();
    let mut hook = Command::new("node");
    hook.arg(example_file(EXAMPLE, "hooks.js"))
        .args(["--port", &port.to_string()]);
    let _hook = start_hook(hook, port);

    let k = cluster.namespace("spp");
    cluster.apply_controller(&k, EXAMPLE, port);
    k.apply(&example_file(EXAMPLE, "statefulset.yaml"));

    // The StatefulSet's pods run (simulated kubelet in dev mode) and each gets its Service.
    k.until_jsonpath(&["statefulset", "web"], "{.status.readyReplicas}", "3");
    until_services(&k, &["web-0", "web-1", "web-2"]);
    assert_eq!(
        k.jsonpath(
            &["service", "web-1"],
            "{.spec.selector.statefulset\\.kubernetes\\.io/pod-name} {.spec.ports[0].port} {.spec.ports[0].targetPort} {.metadata.ownerReferences[0].kind}"
        ),
        "web-1 80 8080 StatefulSet"
    );
    k.until_jsonpath(&["statefulset", "web"], DECORATED, "true");
    assert!(k
        .jsonpath(&["statefulset", "web"], "{.metadata.finalizers}")
        .contains(FINALIZER));
    // Each Service reaches exactly its pod.
    k.until(
        "web-0's EndpointSlice to hold pod web-0",
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web-0",
            "-o",
            "jsonpath={.items[*].endpoints[*].targetRef.name}",
        ],
        |ok, out| ok && out == "web-0",
    );

    // Scale down, then up: Services follow the replica count.
    k.ok(&["scale", "statefulset", "web", "--replicas=1"]);
    until_services(&k, &["web-0"]);
    k.ok(&["scale", "statefulset", "web", "--replicas=2"]);
    until_services(&k, &["web-0", "web-1"]);

    opt_out_cleans_up(&k);

    // Opt in again, then delete: the finalize hook runs before the StatefulSet goes.
    k.ok(&[
        "annotate",
        "statefulset",
        "web",
        "service-per-pod.example.com/port=80",
    ]);
    until_services(&k, &["web-0", "web-1"]);
    k.ok(&["delete", "statefulset", "web", "--wait=true"]);
    k.until_gone(&["statefulset", "web"]);
    assert_eq!(services(&k), Vec::<String>::new());
    cluster.clean_up(&[&k]);
}
