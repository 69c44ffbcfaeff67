//! The real `metacontroller` binary as a child process of a test.
//!
//! Binary-level tests start the binary the way an operator does (flags, a kubeconfig) and
//! observe it from outside: through the API server, the hook servers, its HTTP endpoints and
//! its log output. [`ControllerProcess`] captures stdout and stderr into a file the test can
//! read at any time ([`ControllerProcess::logs`]), sends signals, and kills the process when
//! dropped, so a failing test never leaves a controller running.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running `metacontroller` process, killed on drop.
pub struct ControllerProcess {
    child: Option<Child>,
    log_path: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl ControllerProcess {
    /// Starts `binary` with `args` (use `env!("CARGO_BIN_EXE_metacontroller")` from the
    /// binary crate's tests), logging both output streams to a temporary file.
    pub fn start<I, S>(binary: impl AsRef<Path>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        Self::start_with_env(binary, args, std::iter::empty::<(String, String)>())
    }

    /// `binary run --kubeconfig <kubeconfig> <extra...>`: the binary as `metacontroller run`
    /// against a test cluster.
    pub fn run(binary: impl AsRef<Path>, kubeconfig: &Path, extra: &[&str]) -> Self {
        let mut command = Command::new(binary.as_ref());
        command
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(extra);
        Self::spawn(command)
    }

    /// [`ControllerProcess::run`] for the controllers labelled `team=<label>`, without
    /// metrics or probe listeners, plus `extra` flags.
    pub fn run_team(
        binary: impl AsRef<Path>,
        kubeconfig: &Path,
        label: &str,
        extra: &[&str],
    ) -> Self {
        let selector = format!("team={label}");
        let mut args = vec![
            "--target-label-selector",
            &selector,
            "--metrics-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ];
        args.extend_from_slice(extra);
        Self::run(binary, kubeconfig, &args)
    }

    /// `binary dev` with its API server, metrics and probes on ephemeral ports, its kubeconfig
    /// written to `kubeconfig`, `extra` flags and `env`; waits (60 s) until it says it is
    /// ready and returns it with a client for its API server.
    pub async fn start_dev(
        binary: impl AsRef<Path>,
        kubeconfig: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> (Self, kube::Client) {
        let mut command = Command::new(binary.as_ref());
        command
            .args(["dev", "--port", "0", "--metrics-address", "0"])
            .args(["--health-probe-bind-address", "0", "--dev-kubeconfig"])
            .arg(kubeconfig)
            .args(extra)
            .envs(env.iter().copied());
        let process = Self::spawn(command);
        crate::eventually_within("dev mode ready", Duration::from_secs(60), || async {
            process.logs().contains("press Ctrl-C")
        })
        .await;
        let client = crate::TestCluster::real(kubeconfig.to_path_buf())
            .await
            .client();
        (process, client)
    }

    /// Like [`ControllerProcess::start`], with extra environment variables.
    pub fn start_with_env<I, S, E, K, V>(binary: impl AsRef<Path>, args: I, env: E) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
        E: IntoIterator<Item = (K, V)>,
        K: AsRef<std::ffi::OsStr>,
        V: AsRef<std::ffi::OsStr>,
    {
        let mut command = Command::new(binary.as_ref());
        command.args(args).envs(env);
        Self::spawn(command)
    }

    /// Starts a prepared `command` (for settings `start_with_env` lacks, such as removing
    /// a variable); its stdin, stdout and stderr are replaced as for [`ControllerProcess::start`].
    pub fn spawn(mut command: Command) -> Self {
        let log_dir = tempfile::tempdir().expect("temporary directory for controller logs");
        let log_path = log_dir.path().join("controller.log");
        let log = std::fs::File::create(&log_path).expect("controller log file");
        let log_err = log.try_clone().expect("controller log file handle");
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .unwrap_or_else(|err| panic!("starting {:?}: {err}", command.get_program()));
        ControllerProcess {
            child: Some(child),
            log_path,
            _log_dir: log_dir,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or_default()
    }

    /// Everything the process has written to stdout and stderr so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Waits up to `timeout` for an output line satisfying `matches` and returns it. Blocks
    /// the calling thread (from async tests, prefer polling [`ControllerProcess::logs`]).
    ///
    /// # Panics
    /// On timeout, or when the process exits first, with its output.
    pub fn wait_for_line(
        &mut self,
        what: &str,
        timeout: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.logs().lines().find(|l| matches(l)) {
                return line.to_string();
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                panic!(
                    "waiting for {what}: the process exited ({status}):\n{}",
                    self.logs()
                );
            }
            if Instant::now() >= deadline {
                panic!("no {what} within {timeout:?}; output:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM (as the kubelet does on pod deletion).
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Sends SIGINT (Ctrl-C).
    pub fn interrupt(&self) {
        self.signal("INT");
    }

    /// Freezes the process with SIGSTOP (a replica that hangs: alive, but renews nothing).
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// Resumes a process frozen by [`ControllerProcess::freeze`] (SIGCONT).
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    /// Kills the process with SIGKILL (no chance to clean up) and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `timeout` for the process to exit; `None` if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut()?;
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return None,
            }
        }
    }

    fn signal(&self, name: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .arg(format!("-{name}"))
                .arg(child.id().to_string())
                .status()
                .expect("running kill");
            assert!(status.success(), "kill -{name} {} failed", child.id());
        }
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A failing test shows what the controller said.
            let logs = self.logs();
            let tail: Vec<&str> = logs.lines().rev().take(60).collect();
            eprintln!("--- last controller log lines ---");
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
        self.kill9();
    }
}
