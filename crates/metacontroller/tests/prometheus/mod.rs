//! Prometheus for binary tests: `promtool`, and a real `prometheus` server from Debian's
//! `prometheus` package on 127.0.0.1 (free port, temporary directory, 1 s scrape and rule
//! evaluation) queried through its HTTP API. Both are skipped without the package except
//! in CI (`CI=true`), where `.ci/run` installs it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use metacontroller_testkit::{eventually_within, ControllerProcess};
use serde_json::Value;

/// How a test learns to install the tools.
const INSTALL: &str = "apt-get install prometheus (Debian's package has prometheus and promtool)";

/// Bound on one promtool run.
const PROMTOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether `tool --version` runs; reports it missing (skip, or fail in CI) when not.
fn tool_available(tool: &str) -> bool {
    let probe = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if matches!(probe, Ok(status) if status.success()) {
        return true;
    }
    metacontroller_testkit::missing_tool(tool, &format!("not runnable; {INSTALL}"));
    false
}

/// Whether promtool can run (else skipped, or failed in CI).
pub fn promtool_available() -> bool {
    tool_available("promtool")
}

/// Whether the prometheus server can run (else skipped, or failed in CI).
pub fn prometheus_available() -> bool {
    tool_available("prometheus")
}

/// What a promtool run said.
pub struct Promtool {
    pub ok: bool,
    /// stdout and stderr.
    pub output: String,
}

/// Runs `promtool args` in `dir`.
pub async fn run_promtool(dir: &Path, args: &[&str]) -> Promtool {
    let mut cmd = tokio::process::Command::new("promtool");
    cmd.args(args).current_dir(dir).kill_on_drop(true);
    let out = tokio::time::timeout(PROMTOOL_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("promtool {args:?} ran longer than {PROMTOOL_TIMEOUT:?}"))
        .expect("running promtool");
    Promtool {
        ok: out.status.success(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A free port on 127.0.0.1 (bound, then released for the server to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A Prometheus server scraping `targets` as job `job` every second and evaluating
/// `rules.yaml` (when given) every second. Killed on drop.
pub struct PrometheusServer {
    process: ControllerProcess,
    url: String,
    _dir: tempfile::TempDir,
}

impl PrometheusServer {
    /// Starts it and waits (60 s) until it is ready and has rules loaded.
    pub async fn start(job: &str, targets: &[String], rules: Option<&Value>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let rule_files = match rules {
            Some(groups) => {
                std::fs::write(dir.path().join("rules.yaml"), groups.to_string())
                    .expect("writing rules");
                "rule_files: [rules.yaml]\n"
            }
            None => "",
        };
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             {rule_files}scrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: {targets:?}\n"
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).expect("writing config");
        let port = free_port();
        let data: PathBuf = dir.path().join("data");
        let mut command = Command::new("prometheus");
        command
            .current_dir(dir.path())
            .arg("--config.file=prometheus.yml")
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn");
        let process = ControllerProcess::spawn(command);
        let server = PrometheusServer {
            process,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        let ready = format!("{}/-/ready", server.url);
        eventually_within("prometheus ready", Duration::from_secs(60), || async {
            reqwest::Client::new()
                .get(&ready)
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        server
    }

    /// The server's log so far.
    pub fn logs(&self) -> String {
        self.process.logs()
    }

    /// GET `path` of the HTTP API with `query` parameters; its `data` (panics on an error
    /// answer, with the server's message).
    pub async fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let params: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
            .collect();
        let url = format!("{}{path}?{}", self.url, params.join("&"));
        let response = reqwest::Client::new()
            .get(&url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let text = response
            .text()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let body: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}: {text}"));
        assert_eq!(body["status"], "success", "GET {url} {query:?}: {body}");
        body["data"].clone()
    }

    /// The series an instant query returns.
    pub async fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api("/api/v1/query", &[("query", expr)]).await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// The alerts Prometheus holds now (pending and firing).
    pub async fn alerts(&self) -> Vec<Value> {
        let data = self.api("/api/v1/alerts", &[]).await;
        data["alerts"].as_array().cloned().unwrap_or_default()
    }

    /// The state (`pending`, `firing`) of alert `name` whose labels include `labels`, if
    /// Prometheus holds one.
    pub async fn alert_state(&self, name: &str, labels: &[(&str, &str)]) -> Option<String> {
        self.alerts().await.into_iter().find_map(|a| {
            let l = &a["labels"];
            (l["alertname"] == name && labels.iter().all(|(k, v)| l[*k] == *v))
                .then(|| a["state"].as_str().unwrap_or_default().to_owned())
        })
    }

    /// Whether every target is up.
    pub async fn targets_up(&self) -> bool {
        let data = self.api("/api/v1/targets", &[]).await;
        let active = data["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        !active.is_empty() && active.iter().all(|t| t["health"] == "up")
    }
}

/// `value` as a URL query component: every byte but the unreserved ones as `%XX`.
fn percent_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
