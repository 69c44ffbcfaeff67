//! Running an example under `examples/` the way its README tells a user to: the real binary
//! (`metacontroller dev`, or `metacontroller run` against the cluster named by
//! `METACONTROLLER_E2E_KUBECONFIG`), the example's hook as a local process, and kubectl.
//!
//! Everything here is blocking (std threads and processes), like the commands a user types;
//! every wait has a deadline and names what it waited for when it gives up.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::E2E_KUBECONFIG_ENV;
use crate::ControllerProcess;

/// How long an example step may take before the test fails (generous: CI machines are
/// small and shared, and a real cluster pulls images).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(90);

/// Whether `program` can be started; when it cannot, the test is skipped, or fails with
/// `CI=true` ([`crate::missing_tool`]).
pub fn installed(program: &str) -> bool {
    let found = Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        crate::missing_tool(program, "it could not be started");
    }
    found
}

/// Whether every one of `programs` is installed (each missing one is reported).
pub fn all_installed(programs: &[&str]) -> bool {
    // Not `all`: it would stop at the first missing one and report only that.
    programs.iter().filter(|p| !installed(p)).count() == 0
}

/// The repository root (where `examples/` lives).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `examples/<example>/<file>` as an absolute-enough path.
pub fn example_file(example: &str, file: &str) -> PathBuf {
    repo_root().join("examples").join(example).join(file)
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Polls `check` every 100 ms until it returns `Some`; panics naming `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts an example's hook server (`command`, e.g. `python3 sync.py --port N`) and waits
/// until it accepts connections on `port`. The process is killed when the handle drops.
pub fn start_hook(command: Command, port: u16) -> ControllerProcess {
    let mut hook = ControllerProcess::spawn(command);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return hook;
        }
        if let Some(status) = hook.wait_exit(Duration::ZERO) {
            panic!(
                "the hook exited ({status}) before listening:\n{}",
                hook.logs()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the hook did not listen on 127.0.0.1:{port}:\n{}",
            hook.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The HTTP side of a test's own Python hook server (see [`start_python_json_hook`]): it
/// answers every POST with `answer(hook, body)` as JSON, `hook` being the request path
/// without its slashes and `body` the request bytes, on 127.0.0.1:`sys.argv[1]`.
const PYTHON_JSON_SERVER: &str = r#"

class _JsonHook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        out = json.dumps(answer(self.path.strip("/"), body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), _JsonHook).serve_forever()
"#;

/// Starts a test's own Python hook server: `answer` is Python code defining
/// `answer(hook, body)` (it may use `json`, `sys`, `BaseHTTPRequestHandler` and
/// `ThreadingHTTPServer`, imported already); the script, written to `dir/<name>.py`, runs as
/// `python3 <script> P <args…>` on a free port P. Returns the process (stopped when dropped)
/// and P once it listens.
pub fn start_python_json_hook(
    dir: &Path,
    name: &str,
    answer: &str,
    args: &[&std::ffi::OsStr],
) -> (ControllerProcess, u16) {
    let script = dir.join(format!("{name}.py"));
    let source = format!(
        "import json, sys\nfrom http.server import BaseHTTPRequestHandler, ThreadingHTTPServer\n{answer}{PYTHON_JSON_SERVER}"
    );
    std::fs::write(&script, source).unwrap_or_else(|e| panic!("writing {}: {e}", script.display()));
    let port = free_port();
    let mut hook = Command::new("python3");
    hook.arg(&script).arg(port.to_string()).args(args);
    (start_hook(hook, port), port)
}

/// Starts an example's Python hook, `python3 examples/<example>/<script> --port P`, on a free
/// port P; returns the process (stopped when dropped) and P once it listens.
pub fn start_python_hook(example: &str, script: &str) -> (ControllerProcess, u16) {
    let port = free_port();
    let mut hook = Command::new("python3");
    hook.arg(example_file(example, script))
        .args(["--port", &port.to_string()]);
    (start_hook(hook, port), port)
}

/// The cluster an example runs in and the controller serving it: `metacontroller dev` with
/// its kubeconfig in a temporary directory, or `metacontroller run` against
/// `METACONTROLLER_E2E_KUBECONFIG`.
pub struct ExampleCluster {
    /// The running binary.
    pub controller: ControllerProcess,
    /// kubectl bound to the cluster's kubeconfig.
    pub kubectl: Kubectl,
    /// A scratch directory for rewritten files, removed on drop.
    pub dir: tempfile::TempDir,
    real: bool,
}

impl ExampleCluster {
    /// Starts `binary` (pass `env!("CARGO_BIN_EXE_metacontroller")`) in dev mode, or in run
    /// mode against a real cluster, and waits until it is ready for kubectl.
    pub fn start(binary: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let real = std::env::var(E2E_KUBECONFIG_ENV)
            .ok()
            .filter(|p| !p.trim().is_empty());
        let kubeconfig = match &real {
            Some(path) => PathBuf::from(path),
            None => dir.path().join("kubeconfig"),
        };
        let mut command = Command::new(binary);
        match &real {
            Some(_) => command.arg("run").arg("--kubeconfig").arg(&kubeconfig),
            None => command
                .args(["dev", "--port", "0", "--dev-kubeconfig"])
                .arg(&kubeconfig),
        };
        // Ephemeral metrics/probe ports: examples may run in parallel on one machine.
        command
            .args(["--metrics-address", "127.0.0.1:0"])
            .args(["--health-probe-bind-address", "127.0.0.1:0"])
            .env_remove("KUBECONFIG");
        let mut controller = ControllerProcess::spawn(command);
        if real.is_none() {
            controller.wait_for_line("dev mode ready", Duration::from_secs(60), |l| {
                l.contains("press Ctrl-C")
            });
        }
        ExampleCluster {
            controller,
            kubectl: Kubectl {
                kubeconfig,
                namespace: None,
            },
            dir,
            real: real.is_some(),
        }
    }

    /// The README steps a Python example starts with: `binary` serving the cluster
    /// ([`ExampleCluster::start`]), the hook `examples/<example>/sync.py`, a namespace
    /// `<prefix>-<unique>`, the example's `crd.yaml` (CRD `crd_name`) and its
    /// controller.yaml calling the hook. Returns the cluster, the hook (stopped when dropped)
    /// and kubectl bound to the namespace; `None` (the test is skipped) when kubectl or
    /// python3 is missing ([`all_installed`]).
    pub fn start_python_example(
        binary: &str,
        example: &str,
        prefix: &str,
        crd_name: &str,
    ) -> Option<(Self, ControllerProcess, Kubectl)> {
        if !all_installed(&["kubectl", "python3"]) {
            return None;
        }
        let cluster = Self::start(binary);
        let (hook, port) = start_python_hook(example, "sync.py");
        let k = cluster.namespace(prefix);
        k.install_crd(&example_file(example, "crd.yaml"), crd_name);
        cluster.apply_controller(&k, example, port);
        Some((cluster, hook, k))
    }

    /// Whether this is a real cluster (no simulation, shared with other runs).
    pub fn is_real(&self) -> bool {
        self.real
    }

    /// Creates a namespace unique to this run and returns kubectl bound to it.
    pub fn namespace(&self, prefix: &str) -> Kubectl {
        let name = crate::unique_name(prefix);
        self.kubectl.ok(&["create", "namespace", &name]);
        self.kubectl.in_namespace(&name)
    }

    /// Applies `examples/<example>/controller.yaml` in `k`'s namespace with its hook address
    /// moved from 127.0.0.1:8080 (the README's) to 127.0.0.1:`port`.
    pub fn apply_controller(&self, k: &Kubectl, example: &str, port: u16) {
        let url = format!("127.0.0.1:{port}");
        k.apply(&self.rewrite(example, "controller.yaml", &[("127.0.0.1:8080", &url)]));
    }

    /// On a real cluster, deletes the namespaces of `kubectls` (without waiting); the
    /// embedded server goes away with the process anyway.
    pub fn clean_up(&self, kubectls: &[&Kubectl]) {
        if self.real {
            for k in kubectls {
                self.kubectl
                    .ok(&["delete", "namespace", k.ns(), "--wait=false"]);
            }
        }
    }

    /// Writes `examples/<example>/<file>` into the scratch directory with each `(from, to)`
    /// replaced (e.g. the hook's port) and returns the new path.
    pub fn rewrite(&self, example: &str, file: &str, replacements: &[(&str, &str)]) -> PathBuf {
        let path = example_file(example, file);
        let mut text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        for (from, to) in replacements {
            assert!(
                text.contains(from),
                "{} does not contain {from:?}",
                path.display()
            );
            text = text.replace(from, to);
        }
        let out = self
            .dir
            .path()
            .join(format!("{example}-{file}").replace('/', "-"));
        std::fs::write(&out, text).expect("writing a rewritten example file");
        out
    }
}

/// kubectl with an explicit kubeconfig (never `$KUBECONFIG`) and optionally a namespace.
#[derive(Clone, Debug)]
pub struct Kubectl {
    /// The kubeconfig file.
    pub kubeconfig: PathBuf,
    /// `-n` for every command, if set.
    pub namespace: Option<String>,
}

impl Kubectl {
    /// The same kubectl bound to `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Kubectl {
        Kubectl {
            kubeconfig: self.kubeconfig.clone(),
            namespace: Some(namespace.to_string()),
        }
    }

    /// The namespace this kubectl is bound to ("" if none).
    pub fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    /// Runs `kubectl args`; returns whether it succeeded and stdout followed by stderr.
    pub fn run(&self, args: &[&str]) -> (bool, String) {
        let mut command = Command::new("kubectl");
        command.arg("--kubeconfig").arg(&self.kubeconfig);
        if let Some(ns) = &self.namespace {
            command.args(["-n", ns]);
        }
        let out = command
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

    /// Runs `kubectl args` and panics with its output unless it succeeds.
    pub fn ok(&self, args: &[&str]) -> String {
        let (ok, text) = self.run(args);
        assert!(ok, "kubectl {args:?}: {text}");
        text
    }

    /// `kubectl apply -f path`, retried until it succeeds (a CRD just established may take
    /// a moment to be served for creates).
    pub fn apply(&self, path: &Path) -> String {
        let path = path.to_string_lossy().into_owned();
        self.until(
            &format!("kubectl apply -f {path}"),
            &["apply", "-f", &path],
            |ok, _| ok,
        )
    }

    /// `kubectl patch <kind> <name> --type merge -p <patch>`, which must succeed.
    pub fn merge_patch(&self, kind: &str, name: &str, patch: &str) -> String {
        self.ok(&["patch", kind, name, "--type", "merge", "-p", patch])
    }

    /// `kubectl get <what> -o jsonpath=<path>` ("" when the object does not exist).
    pub fn jsonpath(&self, what: &[&str], path: &str) -> String {
        let jsonpath = format!("jsonpath={path}");
        let mut args: Vec<&str> = vec!["get"];
        args.extend_from_slice(what);
        args.extend_from_slice(&["-o", &jsonpath]);
        let (ok, text) = self.run(&args);
        if ok {
            text
        } else {
            String::new()
        }
    }

    /// Names (`kind/name` stripped to `name`) of the objects `kubectl get <args> -o name`
    /// lists, sorted.
    pub fn names(&self, args: &[&str]) -> Vec<String> {
        let mut all: Vec<&str> = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "name"]);
        let text = self.ok(&all);
        let mut names: Vec<String> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.rsplit('/').next().unwrap_or(l).to_string())
            .collect();
        names.sort();
        names
    }

    /// Polls `kubectl args` until `done(success, output)` holds ([`STEP_TIMEOUT`]).
    pub fn until(&self, what: &str, args: &[&str], done: impl Fn(bool, &str) -> bool) -> String {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let (ok, text) = self.run(args);
            if done(ok, &text) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last `kubectl {args:?}`: {text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `kubectl get <what> -o jsonpath=<path>` prints exactly `expected`.
    pub fn until_jsonpath(&self, what: &[&str], path: &str, expected: &str) -> String {
        let jsonpath = format!("jsonpath={path}");
        let mut args: Vec<&str> = vec!["get"];
        args.extend_from_slice(what);
        args.extend_from_slice(&["-o", &jsonpath]);
        self.until(
            &format!("{what:?} {path} == {expected:?}"),
            &args,
            |ok, out| ok && out == expected,
        )
    }

    /// Waits until `kubectl get <what>` says NotFound.
    pub fn until_gone(&self, what: &[&str]) {
        let mut args: Vec<&str> = vec!["get"];
        args.extend_from_slice(what);
        args.extend_from_slice(&["-o", "name"]);
        self.until(&format!("{what:?} to be gone"), &args, |ok, out| {
            !ok && out.contains("NotFound")
        });
    }

    /// `kubectl apply -f` then `kubectl wait --for condition=established` on a CRD file.
    pub fn install_crd(&self, path: &Path, crd_name: &str) {
        self.ok(&["apply", "-f", &path.to_string_lossy()]);
        self.ok(&[
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            &format!("crd/{crd_name}"),
        ]);
    }
}
