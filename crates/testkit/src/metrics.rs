//! Reading a running binary from outside, as an operator would: its `/metrics` over plain
//! HTTP, its identity and addresses from its log lines, and its memory and CPU from `/proc`.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::ControllerProcess;

/// The body of a plain HTTP/1.0 `GET path` on `addr` (`host:port`), within `timeout`.
pub async fn http_get(addr: &str, path: &str, timeout: Duration) -> std::io::Result<String> {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| std::io::Error::other(format!("no answer within {timeout:?}")))??;
    Ok(match response.split_once("\r\n\r\n") {
        Some((_, body)) => body.to_string(),
        None => response,
    })
}

/// The value of the first sample line `name{labels} value` (or `name value` with empty
/// `labels`) in a Prometheus text exposition.
pub fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = if labels.is_empty() {
        format!("{name} ")
    } else {
        format!("{name}{{{labels}}} ")
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// The resident set size of process `pid` (`VmRSS`) or its peak (`VmHWM`), in KiB.
pub fn rss_kib(pid: u32, peak: bool) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = if peak { "VmHWM:" } else { "VmRSS:" };
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU seconds (user + system) process `pid` has used so far.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) start at field 3; utime and
    // stime are fields 14 and 15, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// CPU seconds (user + system) process `pid` and its children have used so far: its own,
/// its children that ended and were waited for, and those still running.
pub fn tree_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime, cstime: fields 14 to 17, in clock ticks.
    let mut ticks = 0.0;
    for index in 11..=14 {
        ticks += fields.get(index)?.parse::<f64>().ok()?;
    }
    let children: f64 = child_pids(pid).into_iter().filter_map(cpu_seconds).sum();
    Some(ticks / 100.0 + children)
}

/// The processes whose parent is `pid`.
fn child_pids(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = s.rsplit_once(')')?.1.to_owned();
                    rest.split_whitespace().nth(1).map(|p| p == pid.to_string())
                })
                .unwrap_or(false)
        })
        .collect()
}

/// The value of `key=` in the first log line of `p` containing `marker` (quotes trimmed).
fn logged(p: &ControllerProcess, marker: &str, key: &str) -> Option<String> {
    p.logs()
        .lines()
        .find(|l| l.contains(marker))
        .and_then(|l| l.split(&format!("{key}=")).nth(1))
        .and_then(|s| s.split_whitespace().next())
        .map(|s| s.trim_matches('"').to_string())
}

impl ControllerProcess {
    /// The address its metrics server logged (`serving metrics address=…`), once it did.
    pub fn metrics_address(&self) -> Option<String> {
        logged(self, "serving metrics", "address")
    }

    /// Its `/metrics` text.
    ///
    /// # Panics
    /// When it has not logged a metrics address or does not answer within 10 s.
    pub async fn scrape_metrics(&self) -> String {
        let address = self
            .metrics_address()
            .unwrap_or_else(|| panic!("no metrics address logged:\n{}", self.logs()));
        http_get(&address, "/metrics", Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("scraping {address}/metrics: {e}"))
    }

    /// The value of the sample `name{labels}` (`name` alone with empty `labels`) in its
    /// `/metrics`, `None` when it shows no such sample.
    ///
    /// # Panics
    /// As [`ControllerProcess::scrape_metrics`].
    pub async fn metric(&self, name: &str, labels: &str) -> Option<f64> {
        sample(&self.scrape_metrics().await, name, labels)
    }

    /// The member identity it logged when it joined a sharded group.
    ///
    /// # Panics
    /// When it has not joined.
    pub fn member_identity(&self) -> String {
        logged(self, "joined as a member", "identity")
            .unwrap_or_else(|| panic!("no identity logged:\n{}", self.logs()))
    }

    /// Waits (at most 30 s) until it logs that it joined a sharded group.
    pub async fn wait_joined(&self) {
        crate::eventually_within("the replica joins", Duration::from_secs(30), || async {
            self.logs().contains("joined as a member")
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_with_and_without_labels() {
        let text = "# HELP x\nup 1\nreqs{code=\"200\"} 7\nreqs{code=\"409\"} 2\n";
        assert_eq!(sample(text, "up", ""), Some(1.0));
        assert_eq!(sample(text, "reqs", "code=\"409\""), Some(2.0));
        assert_eq!(sample(text, "missing", ""), None);
    }

    #[test]
    fn this_process_has_rss_and_cpu() {
        let pid = std::process::id();
        let rss = rss_kib(pid, false);
        assert!(rss.is_some_and(|k| k > 0));
        // Read after the RSS: the peak can only have grown since.
        assert!(rss_kib(pid, true) >= rss);
        assert!(cpu_seconds(pid).is_some());
    }
}
