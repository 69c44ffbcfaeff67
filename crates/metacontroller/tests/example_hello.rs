//! The hello-world example end to end, as its README tells a user to run it: the real binary
//! (`metacontroller dev`, or `metacontroller run` against the cluster named by
//! `METACONTROLLER_E2E_KUBECONFIG`), the example's Python hook server, and kubectl.
//! Skipped when kubectl or python3 is not installed.

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
        eprintln!("{program} not installed; skipping");
    }
    found
}

fn example(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/hello-world")
        .join(file)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
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

    /// Polls `kubectl args` until its output satisfies `done` (60 s).
    fn until(&self, what: &str, args: &[&str], done: impl Fn(bool, &str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (ok, text) = self.run(args);
            if done(ok, &text) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn hello_world_example_runs_as_documented() {
    if !installed("kubectl") || !installed("python3") {
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

    let port = free_port();
    let mut hook = Command::new("python3");
    hook.arg(example("sync.py"))
        .args(["--port", &port.to_string()]);
    let _hook = ControllerProcess::spawn(hook);

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

    let namespace = format!("hello-{}", std::process::id());
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
        "crd/helloworlds.example.com",
    ]);
    let controller_yaml = std::fs::read_to_string(example("controller.yaml"))
        .unwrap()
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
    let controller_file = dir.path().join("controller.yaml");
    std::fs::write(&controller_file, controller_yaml).unwrap();
    k.ok(&["apply", "-f", controller_file.to_str().unwrap()]);
    // The CRD may take a moment to be served for namespaced creates.
    k.until(
        "the HelloWorld to be created",
        &["apply", "-f", &path("hello.yaml")],
        |ok, _| ok,
    );

    let greeting = k.until(
        "the greeting ConfigMap",
        &[
            "get",
            "configmap",
            "hello",
            "-o",
            "jsonpath={.data.greeting}",
        ],
        |ok, out| ok && out == "Hello, World!",
    );
    assert_eq!(greeting, "Hello, World!");
    k.until(
        "the HelloWorld status",
        &[
            "get",
            "helloworld",
            "hello",
            "-o",
            "jsonpath={.status.greetings}",
        ],
        |ok, out| ok && out == "1",
    );
    // The ConfigMap is owned by its HelloWorld.
    let owner = k.ok(&[
        "get",
        "configmap",
        "hello",
        "-o",
        "jsonpath={.metadata.ownerReferences[0].kind}",
    ]);
    assert_eq!(owner, "HelloWorld");

    k.ok(&[
        "patch",
        "helloworld",
        "hello",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"who":"Kubernetes"}}"#,
    ]);
    k.until(
        "the updated greeting",
        &[
            "get",
            "configmap",
            "hello",
            "-o",
            "jsonpath={.data.greeting}",
        ],
        |ok, out| ok && out == "Hello, Kubernetes!",
    );

    k.ok(&["delete", "helloworld", "hello", "--wait=true"]);
    k.until(
        "the ConfigMap to be garbage collected",
        &["get", "configmap", "hello", "-o", "name"],
        |ok, out| !ok && out.contains("NotFound"),
    );
    if real.is_some() {
        k.ok(&["delete", "namespace", &namespace, "--wait=false"]);
    }
}
