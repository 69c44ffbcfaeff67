//! The replicas: processes of the real binary, each talking to the API server through its own
//! [`TcpProxy`] (so one replica's API link can be stalled or cut alone), each serving /metrics
//! on its own port (scraped for the API requests it made, by status code).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use metacontroller_testkit::{metrics, TcpProxy};

/// One running replica.
pub struct Replica {
    pub index: usize,
    child: Child,
    pub proxy: TcpProxy,
    metrics: SocketAddr,
}

/// One replica's memory over its life.
pub struct RssTrack {
    pub started: Instant,
    pub first: Option<u64>,
    pub last: Option<u64>,
    pub last_at: Instant,
    pub alive: bool,
}

/// Requests by status code (`rest_client_requests_total`), summed over methods.
pub type Codes = BTreeMap<String, u64>;

/// All replicas of one soak.
pub struct Replicas {
    pub binary: PathBuf,
    pub args: Vec<String>,
    pub ns: String,
    /// The API server's address (each replica's proxy forwards there).
    pub upstream: SocketAddr,
    /// The kubeconfig copied (pointed at the proxy) for each replica.
    pub kubeconfig: PathBuf,
    /// Logs and per-replica kubeconfigs.
    pub dir: PathBuf,
    pub running: Vec<Replica>,
    pub started: usize,
    /// Per replica: when it started, its RSS (KiB) at the first and the latest sample, and
    /// whether it was still running at the latest sample.
    pub rss: BTreeMap<usize, RssTrack>,
    /// The last scrape of each replica's request counter (kept after it exits).
    pub requests: BTreeMap<usize, Codes>,
}

impl Replicas {
    /// Starts one more replica behind a fresh proxy.
    pub async fn start(&mut self) -> Result<(), String> {
        let index = self.started;
        self.started += 1;
        let proxy = TcpProxy::start(self.upstream)
            .await
            .map_err(|e| format!("proxy: {e}"))?;
        let kubeconfig = self.dir.join(format!("kubeconfig-{index}"));
        proxy
            .write_kubeconfig(&self.kubeconfig, &kubeconfig)
            .map_err(|e| format!("kubeconfig for replica {index}: {e}"))?;
        let metrics = free_port()?;
        let log = self.dir.join(format!("replica-{index}.log"));
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(&self.binary)
            .args(&self.args)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg(format!("--metrics-address={metrics}"))
            .env("POD_NAMESPACE", &self.ns)
            .env("RUST_LOG", "warn,metacontroller=info")
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.binary.display()))?;
        let now = Instant::now();
        self.rss.insert(
            index,
            RssTrack {
                started: now,
                first: None,
                last: None,
                last_at: now,
                alive: true,
            },
        );
        self.running.push(Replica {
            index,
            child,
            proxy,
            metrics,
        });
        Ok(())
    }

    /// Sends `sig` (e.g. `-STOP`) to the replica at `pos`.
    pub fn signal(&self, pos: usize, sig: &str) {
        let pid = self.running[pos].child.id().to_string();
        let _ = Command::new("kill").args([sig, &pid]).status();
    }

    /// Position of replica `index` among the running ones.
    pub fn position(&self, index: usize) -> Option<usize> {
        self.running.iter().position(|r| r.index == index)
    }

    /// Removes replica `pos` after `sig`, waiting (bounded) for it to exit. Its counters are
    /// scraped first (after a kill -9 nothing could be).
    pub async fn stop(&mut self, pos: usize, sig: &str) {
        self.scrape_one(pos).await;
        self.signal(pos, sig);
        let mut replica = self.running.remove(pos);
        let deadline = Instant::now() + Duration::from_secs(40);
        while replica.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = replica.child.kill();
        let _ = replica.child.wait();
    }

    /// Scrapes every running replica's request counter.
    pub async fn scrape(&mut self) {
        for pos in 0..self.running.len() {
            self.scrape_one(pos).await;
        }
    }

    async fn scrape_one(&mut self, pos: usize) {
        let replica = &self.running[pos];
        if let Some(codes) = scrape_requests(replica.metrics).await {
            self.requests.insert(replica.index, codes);
        }
    }

    /// API requests of all replicas so far, by status code.
    pub fn requests_by_code(&self) -> Codes {
        let mut total = Codes::new();
        for codes in self.requests.values() {
            for (code, n) in codes {
                *total.entry(code.clone()).or_default() += n;
            }
        }
        total
    }

    /// Samples every running replica's resident set size; marks stopped ones.
    pub fn sample_rss(&mut self) {
        let now = Instant::now();
        for track in self.rss.values_mut() {
            track.alive = false;
        }
        for r in &self.running {
            let Some(track) = self.rss.get_mut(&r.index) else {
                continue;
            };
            track.alive = true;
            if let Some(kb) = metrics::rss_kib(r.child.id(), false) {
                track.first.get_or_insert(kb);
                track.last = Some(kb);
                track.last_at = now;
            }
        }
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for r in &mut self.running {
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
    }
}

/// A loopback port free right now (bound and released; the replica binds it a moment later).
fn free_port() -> Result<SocketAddr, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.local_addr().map_err(|e| e.to_string())
}

/// `rest_client_requests_total` from `/metrics` at `addr`, summed by code; `None` when the
/// replica does not answer within 2 s (stopped, starting, frozen).
async fn scrape_requests(addr: SocketAddr) -> Option<Codes> {
    let body = metrics::http_get(&addr.to_string(), "/metrics", Duration::from_secs(2))
        .await
        .ok()?;
    Some(parse_requests(&body))
}

/// Sums `rest_client_requests_total{code="..",..} N` lines by code.
fn parse_requests(text: &str) -> Codes {
    let mut codes = Codes::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("rest_client_requests_total{") else {
            continue;
        };
        let code = rest
            .split("code=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or("?");
        let n = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        *codes.entry(code.to_string()).or_default() += n as u64;
    }
    codes
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_request_counts() {
        let text = "# TYPE x counter\nrest_client_requests_total{code=\"200\",host=\"h\",method=\"GET\"} 5\nrest_client_requests_total{code=\"409\",host=\"h\",method=\"PUT\"} 2\nrest_client_requests_total{code=\"200\",host=\"h\",method=\"PUT\"} 1\n";
        let codes = super::parse_requests(text);
        assert_eq!(codes.get("200"), Some(&6));
        assert_eq!(codes.get("409"), Some(&2));
    }
}
