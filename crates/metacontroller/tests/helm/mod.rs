//! Driving Helm v4's engine from binary tests: `hack/helm_chart.py` over the
//! `helm-python-sdk` package, skipped without it except in CI.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The helm-python-sdk version `.ci/run` installs.
pub const SDK: &str = "helm-python-sdk==0.2.2";
/// Bound on one Helm action (they take well under a second against the embedded server).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(120);

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// Whether the Helm SDK is importable; skips (outside CI) or fails (in CI) when it is not.
pub fn helm_sdk_available() -> bool {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import helm_python"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if matches!(probe, Ok(status) if status.success()) {
        return true;
    }
    let why = match probe {
        Err(e) => format!("python3 is not runnable ({e})"),
        Ok(_) => format!("the Python package {SDK} is not installed"),
    };
    metacontroller_testkit::missing_tool(SDK, &format!("{why}; `pip install {SDK}`"));
    false
}

/// Output of one `hack/helm_chart.py` run.
pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn expect_ok(self, what: &str) -> String {
        assert!(
            self.ok,
            "{what} failed:\n{}\n{}",
            self.stderr.trim(),
            self.stdout.trim()
        );
        self.stdout
    }
}

pub async fn helm_chart(args: &[&str]) -> Run {
    let mut cmd = tokio::process::Command::new("python3");
    cmd.arg(repo_root().join("hack/helm_chart.py"))
        .args(args)
        .kill_on_drop(true);
    let out = tokio::time::timeout(STEP_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("hack/helm_chart.py {args:?} ran longer than {STEP_TIMEOUT:?}"))
        .expect("running python3");
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
