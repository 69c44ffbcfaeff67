//! The faults: how each kind starts, and what ends it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use metacontroller_testkit::{Fault, TestCluster};

use crate::hook::{HookMode, HookState};
use crate::replicas::Replicas;
use crate::Rng;

/// Faults on either server: hook faults, process faults, and API link faults made by the
/// replicas' TCP proxies (stall, cut).
pub const FAULTS_ANY: [&str; 12] = [
    "hook-5xx",
    "hook-garbage",
    "hook-slow",
    "hook-timeout",
    "kill-9",
    "sigterm",
    "freeze",
    "partition",
    "link-cut",
    "watch-cut",
    "api-stall",
    "join-leave",
];
/// Faults only the embedded server can inject (kube-apiserver answers for itself, and TLS
/// keeps a proxy from forging its responses).
pub const FAULTS_EMBEDDED: [&str; 4] = ["api-409", "api-429", "api-500", "api-410"];
/// Faults on a real cluster whose directory the soak was given (`--cluster-dir`).
pub const FAULTS_CLUSTER_DIR: [&str; 1] = ["apiserver-restart"];

/// Where the real cluster lives, for `apiserver-restart`.
pub struct ClusterDir {
    pub dir: PathBuf,
    pub cluster_sh: PathBuf,
}

/// A fault in progress: what [`end`] must undo.
pub enum Active {
    /// Hook mode and embedded faults are cleared.
    Clear,
    /// Replica `index` was frozen (SIGSTOP): continue it.
    Thaw(usize),
    /// The API links of these replicas were stalled: heal them.
    Heal(Vec<usize>),
    /// A replica joined: the oldest one leaves (SIGTERM).
    Leave,
    /// kube-apiserver was killed: bring it back.
    Apiserver,
}

/// Starts fault `kind`.
pub async fn inject(
    kind: &str,
    cluster: &TestCluster,
    hook: &HookState,
    replicas: &mut Replicas,
    rng: &mut Rng,
    cluster_dir: Option<&ClusterDir>,
) -> Result<Active, String> {
    let api = |fault: Fault| {
        if let Some(c) = cluster.control() {
            c.inject(fault)
        }
    };
    let pick = rng.below(replicas.running.len());
    match kind {
        "hook-5xx" => hook.set_mode(Some(HookMode::Error)),
        "hook-garbage" => hook.set_mode(Some(HookMode::Garbage)),
        "hook-slow" => hook.set_mode(Some(HookMode::Slow)),
        "hook-timeout" => hook.set_mode(Some(HookMode::Timeout)),
        "api-409" => api(Fault::status(None, None, 40, 409)),
        "api-429" => api(Fault::status(None, None, 40, 429)),
        "api-500" => api(Fault::status(None, None, 40, 500)),
        "api-410" => {
            if let Some(c) = cluster.control() {
                c.compact_history();
                c.close_watches();
            }
        }
        "kill-9" | "sigterm" if !replicas.running.is_empty() => {
            let sig = if kind == "kill-9" { "-KILL" } else { "-TERM" };
            replicas.stop(pick, sig).await;
            replicas.start().await?;
        }
        "freeze" if !replicas.running.is_empty() => {
            replicas.signal(pick, "-STOP");
            return Ok(Active::Thaw(replicas.running[pick].index));
        }
        "partition" if !replicas.running.is_empty() => {
            replicas.running[pick].proxy.stall();
            return Ok(Active::Heal(vec![replicas.running[pick].index]));
        }
        "link-cut" if !replicas.running.is_empty() => replicas.running[pick].proxy.cut(),
        "watch-cut" => replicas.running.iter().for_each(|r| r.proxy.cut()),
        "api-stall" => {
            replicas.running.iter().for_each(|r| r.proxy.stall());
            return Ok(Active::Heal(
                replicas.running.iter().map(|r| r.index).collect(),
            ));
        }
        "join-leave" => {
            replicas.start().await?;
            return Ok(Active::Leave);
        }
        "apiserver-restart" => {
            let c = cluster_dir.ok_or("apiserver-restart needs --cluster-dir")?;
            kill_apiserver(&c.dir)?;
            return Ok(Active::Apiserver);
        }
        _ => {}
    }
    Ok(Active::Clear)
}

/// Ends the fault `active`.
pub async fn end(
    active: Active,
    cluster: &TestCluster,
    hook: &HookState,
    replicas: &mut Replicas,
    cluster_dir: Option<&ClusterDir>,
) -> Result<(), String> {
    match active {
        Active::Clear => {
            hook.set_mode(None);
            if let Some(c) = cluster.control() {
                c.clear_faults();
            }
        }
        Active::Thaw(index) => {
            if let Some(pos) = replicas.position(index) {
                replicas.signal(pos, "-CONT");
            }
        }
        Active::Heal(indices) => {
            for r in replicas
                .running
                .iter()
                .filter(|r| indices.contains(&r.index))
            {
                r.proxy.heal();
            }
        }
        Active::Leave => {
            if replicas.running.len() > 1 {
                replicas.stop(0, "-TERM").await;
            }
        }
        Active::Apiserver => {
            let c = cluster_dir.ok_or("apiserver-restart needs --cluster-dir")?;
            restart_cluster(&c.cluster_sh, &c.dir).await?;
        }
    }
    Ok(())
}

/// Kills the kube-apiserver of cluster `dir` with SIGKILL (its pid from `dir/run`, checked
/// to be a kube-apiserver of that directory so that a reused pid is never hit).
pub fn kill_apiserver(dir: &Path) -> Result<u32, String> {
    let pid_file = dir.join("run/kube-apiserver.pid");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .map_err(|e| format!("{}: {e}", pid_file.display()))?
        .trim()
        .parse()
        .map_err(|e| format!("{}: {e}", pid_file.display()))?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline);
    let dir_text = dir.display().to_string();
    if !cmdline.contains("kube-apiserver") || !cmdline.contains(&dir_text) {
        return Err(format!("pid {pid} is not the kube-apiserver of {dir_text}"));
    }
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    match status {
        Ok(s) if s.success() => Ok(pid),
        other => Err(format!("kill -9 {pid}: {other:?}")),
    }
}

/// Brings cluster `dir` back up with `cluster.sh up` (it starts only what is down).
pub async fn restart_cluster(cluster_sh: &Path, dir: &Path) -> Result<(), String> {
    let out = tokio::process::Command::new(cluster_sh)
        .arg("up")
        .arg(dir)
        .stdin(Stdio::null())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), out)
        .await
        .map_err(|_| "cluster.sh up: no answer within 180 s".to_string())?
        .map_err(|e| format!("cluster.sh up: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cluster.sh up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
