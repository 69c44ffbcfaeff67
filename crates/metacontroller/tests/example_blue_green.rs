//! The blue-green example end to end, as its README tells a user to run it: the real
//! binary (`metacontroller dev`, or `metacontroller run` against the cluster named by
//! `METACONTROLLER_E2E_KUBECONFIG`), the example's Rust hook (built on the
//! `metacontroller-hook` SDK, served in-process here instead of `cargo run`), and kubectl.
//! Skipped when kubectl is not installed. In dev mode the simulated Deployment
//! controller and kubelet make the pods Ready, as a cluster would.

use std::time::Duration;

use metacontroller_testkit::example::{
    all_installed, example_file, wait_for, ExampleCluster, Kubectl,
};

const EXAMPLE: &str = "blue-green";
const BGD: &str = "bluegreendeployment/web";

/// How long the parent may take to be accepted after its CRD, and each child to be
/// garbage collected.
const STEP: Duration = Duration::from_secs(60);

/// Polls `kubectl get object -o jsonpath=path` until it prints `want` (90 s).
fn until(k: &Kubectl, object: &str, path: &str, want: &str) {
    k.until_jsonpath(&[object], path, want);
}

fn jsonpath(k: &Kubectl, object: &str, path: &str) -> String {
    k.jsonpath(&[object], path)
}

/// Serves the example's hook on 127.0.0.1:<port> on its own runtime thread.
fn start_hook() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            metacontroller_hook::serve(
                listener,
                blue_green_hook::hooks(),
                std::future::pending::<()>(),
            )
            .await
            .unwrap();
        });
    });
    port
}

/// Installs the example's CRD and controller (hook on `port`) in `k`'s namespace and
/// applies `web.yaml`, retried until the new kind is served for creates.
fn deploy(cluster: &ExampleCluster, k: &Kubectl, port: u16) {
    k.install_crd(
        &example_file(EXAMPLE, "crd.yaml"),
        "bluegreendeployments.example.com",
    );
    let controller = cluster.rewrite(
        EXAMPLE,
        "controller.yaml",
        &[("127.0.0.1:8080", &format!("127.0.0.1:{port}"))],
    );
    k.ok(&["apply", "-f", &controller.to_string_lossy()]);
    let web = example_file(EXAMPLE, "web.yaml");
    wait_for("the BlueGreenDeployment to be created", STEP, || {
        k.run(&["apply", "-f", &web.to_string_lossy()])
            .0
            .then_some(())
    });
}

/// Blue rolls out and serves; green exists, scaled to 0. Returns blue's template hash.
fn blue_serves(k: &Kubectl) -> String {
    until(k, BGD, "{.status.blue.readyReplicas}", "2");
    until(k, BGD, "{.status.activeColor}", "blue");
    until(k, BGD, "{.status.phase}", "Stable");
    until(k, "service/web", "{.spec.selector.color}", "blue");
    until(k, "deployment/web-blue", "{.status.readyReplicas}", "2");
    until(k, "deployment/web-green", "{.spec.replicas}", "0");
    assert_eq!(
        jsonpath(
            k,
            "deployment/web-blue",
            "{.metadata.ownerReferences[0].kind}"
        ),
        "BlueGreenDeployment"
    );
    let blue_hash = jsonpath(k, BGD, "{.status.blue.templateHash}");
    assert!(!blue_hash.is_empty());
    blue_hash
}

/// A new template: green comes up, the Service switches, blue is scaled down but keeps
/// its old template.
fn green_takes_over(k: &Kubectl, blue_hash: &str) {
    k.merge_patch(
        "bluegreendeployment",
        "web",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.28","ports":[{"containerPort":80}]}]}}}}"#,
    );
    until(
        k,
        "deployment/web-green",
        "{.spec.template.spec.containers[0].image}",
        "nginx:1.28",
    );
    until(k, "service/web", "{.spec.selector.color}", "green");
    // Traffic switched only once green was fully ready.
    assert_eq!(
        jsonpath(k, "deployment/web-green", "{.status.readyReplicas}"),
        "2"
    );
    until(k, "deployment/web-blue", "{.spec.replicas}", "0");
    // Its pods are gone (Kubernetes omits a zero `status.replicas`).
    until(k, "deployment/web-blue", "{.status.replicas}", "");
    assert_eq!(jsonpath(k, "deployment/web-blue", "{.spec.replicas}"), "0");
    // Blue keeps its old template, ready for a rollback.
    assert_eq!(
        jsonpath(
            k,
            "deployment/web-blue",
            "{.spec.template.spec.containers[0].image}"
        ),
        "nginx:1.27"
    );
    until(k, BGD, "{.status.activeColor}", "green");
    until(k, BGD, "{.status.phase}", "Stable");
    until(k, BGD, "{.status.green.readyReplicas}", "2");
    until(k, BGD, "{.status.blue.replicas}", "0");
    assert_ne!(jsonpath(k, BGD, "{.status.green.templateHash}"), blue_hash);
}

#[test]
fn blue_green_example_runs_as_documented() {
    if !all_installed(&["kubectl"]) {
        return;
    }
    let port = start_hook();
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let k = cluster.namespace("blue-green");
    deploy(&cluster, &k, port);
    let blue_hash = blue_serves(&k);
    green_takes_over(&k, &blue_hash);

    k.ok(&["delete", "bluegreendeployment", "web", "--wait=true"]);
    for object in ["deployment/web-blue", "deployment/web-green", "service/web"] {
        wait_for(&format!("{object} to be garbage collected"), STEP, || {
            let (ok, out) = k.run(&["get", object, "-o", "name"]);
            (!ok && out.contains("NotFound")).then_some(())
        });
    }
    cluster.clean_up(&[&k]);
}
