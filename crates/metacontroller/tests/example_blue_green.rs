//! The blue-green example end to end, as its README tells a user to run it: the real
//! binary (`metacontroller dev`, or `metacontroller run` against the cluster named by
//! `METACONTROLLER_E2E_KUBECONFIG`), the example's Rust hook (built on the
//! `metacontroller-hook` SDK, served in-process here instead of `cargo run`), and kubectl.
//! Skipped when kubectl is not installed. In dev mode the simulated Deployment
//! controller and kubelet make the pods Ready, as a cluster would.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use metacontroller_testkit::ControllerProcess;

fn installed(program: &str) -> bool {
    let found = Command::new(program)
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        metacontroller_testkit::missing_tool(program, "it could not be started");
    }
    found
}

fn example(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/blue-green")
        .join(file)
}

struct Kubectl {
    kubeconfig: PathBuf,
    namespace: String,
}

impl Kubectl {
    fn run(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["-n", &self.namespace])
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .expect("running kubectl");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    fn ok(&self, args: &[&str]) -> String {
        let (ok, text) = self.run(args);
        assert!(ok, "kubectl {args:?}: {text}");
        text
    }

    fn jsonpath(&self, object: &str, path: &str) -> String {
        self.run(&["get", object, "-o", &format!("jsonpath={path}")])
            .1
    }

    /// Polls `kubectl get object -o jsonpath=path` until it prints `want` (90 s).
    fn until(&self, object: &str, path: &str, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let got = self.jsonpath(object, path);
            if got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {object} {path} == {want:?}; last: {got:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
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

#[test]
fn blue_green_example_runs_as_documented() {
    if !installed("kubectl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let real = std::env::var("METACONTROLLER_E2E_KUBECONFIG")
        .ok()
        .filter(|p| !p.trim().is_empty());
    let kubeconfig = match &real {
        Some(path) => PathBuf::from(path),
        None => dir.path().join("kubeconfig"),
    };

    let port = start_hook();
    let mut controller = Command::new(env!("CARGO_BIN_EXE_metacontroller"));
    match &real {
        Some(_) => controller.arg("run").arg("--kubeconfig").arg(&kubeconfig),
        None => controller
            .args(["dev", "--port", "0", "--dev-kubeconfig"])
            .arg(&kubeconfig),
    };
    controller.env_remove("KUBECONFIG");
    let mut controller = ControllerProcess::spawn(controller);
    if real.is_none() {
        controller.wait_for_line("dev mode ready", Duration::from_secs(60), |l| {
            l.contains("press Ctrl-C")
        });
    }

    let namespace = format!("blue-green-{}", std::process::id());
    let k = Kubectl {
        kubeconfig,
        namespace: namespace.clone(),
    };
    k.ok(&["create", "namespace", &namespace]);
    let path = |f: &str| example(f).to_string_lossy().into_owned();
    k.ok(&["apply", "-f", &path("crd.yaml")]);
    k.ok(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/bluegreendeployments.example.com",
    ]);
    let controller_yaml = std::fs::read_to_string(example("controller.yaml"))
        .unwrap()
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    let controller_file = dir.path().join("controller.yaml");
    std::fs::write(&controller_file, controller_yaml).unwrap();
    k.ok(&["apply", "-f", controller_file.to_str().unwrap()]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !k.run(&["apply", "-f", &path("web.yaml")]).0 {
        assert!(
            Instant::now() < deadline,
            "the BlueGreenDeployment was never created"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Blue rolls out and serves; green exists, scaled to 0.
    k.until(
        "bluegreendeployment/web",
        "{.status.blue.readyReplicas}",
        "2",
    );
    k.until("bluegreendeployment/web", "{.status.activeColor}", "blue");
    k.until("bluegreendeployment/web", "{.status.phase}", "Stable");
    k.until("service/web", "{.spec.selector.color}", "blue");
    k.until("deployment/web-blue", "{.status.readyReplicas}", "2");
    k.until("deployment/web-green", "{.spec.replicas}", "0");
    assert_eq!(
        k.jsonpath("deployment/web-blue", "{.metadata.ownerReferences[0].kind}"),
        "BlueGreenDeployment"
    );
    let blue_hash = k.jsonpath("bluegreendeployment/web", "{.status.blue.templateHash}");
    assert!(!blue_hash.is_empty());

    // A new template: green comes up, the Service switches, blue is scaled down.
    k.ok(&[
        "patch",
        "bluegreendeployment",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.28","ports":[{"containerPort":80}]}]}}}}"#,
    ]);
    k.until(
        "deployment/web-green",
        "{.spec.template.spec.containers[0].image}",
        "nginx:1.28",
    );
    k.until("service/web", "{.spec.selector.color}", "green");
    // Traffic switched only once green was fully ready.
    assert_eq!(
        k.jsonpath("deployment/web-green", "{.status.readyReplicas}"),
        "2"
    );
    k.until("deployment/web-blue", "{.spec.replicas}", "0");
    // Its pods are gone (Kubernetes omits a zero `status.replicas`).
    k.until("deployment/web-blue", "{.status.replicas}", "");
    assert_eq!(k.jsonpath("deployment/web-blue", "{.spec.replicas}"), "0");
    // Blue keeps its old template, ready for a rollback.
    assert_eq!(
        k.jsonpath(
            "deployment/web-blue",
            "{.spec.template.spec.containers[0].image}"
        ),
        "nginx:1.27"
    );
    k.until("bluegreendeployment/web", "{.status.activeColor}", "green");
    k.until("bluegreendeployment/web", "{.status.phase}", "Stable");
    k.until(
        "bluegreendeployment/web",
        "{.status.green.readyReplicas}",
        "2",
    );
    k.until("bluegreendeployment/web", "{.status.blue.replicas}", "0");
    assert_ne!(
        k.jsonpath("bluegreendeployment/web", "{.status.green.templateHash}"),
        blue_hash
    );

    k.ok(&["delete", "bluegreendeployment", "web", "--wait=true"]);
    for object in ["deployment/web-blue", "deployment/web-green", "service/web"] {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (ok, out) = k.run(&["get", object, "-o", "name"]);
            if !ok && out.contains("NotFound") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{object} was not garbage collected: {out}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    if real.is_some() {
        k.ok(&["delete", "namespace", &namespace, "--wait=false"]);
    }
}
