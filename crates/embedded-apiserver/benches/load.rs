//! Load harness: write throughput, many concurrent watches, memory per stored object.
//! Run: `cargo bench -p embedded-apiserver --bench load` (prints a report; no assertions).
//! Environment: `LOAD_WRITES` (default 20000), `LOAD_WATCHES` (default 100),
//! `LOAD_CLIENTS` (concurrent writers, default 32).
//!
//! Measured 2026-11-21 on the 2-core dev machine (kube-rs clients in the same
//! process, machine shared with other builds): 7,501 creates/s and 7,549 merge
//! patches/s with 32 clients; 100 watches all matching every write: 3,624
//! writes/s with 354k events/s delivered, none lost; 100 watches on disjoint
//! selectors: 6,284 writes/s; memory linear at ~8 KB per stored ConfigMap
//! (~250 B of data, managedFields included; RSS 50k→110k objects).

use embedded_apiserver::{ApiServer, Config};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn cm(name: &str, i: usize) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "load", "shard": (i % 10).to_string()}},
        "data": {"key": format!("value-{i}"), "payload": "x".repeat(200)}
    }))
    .expect("configmap")
}

async fn run_writes(
    api: &Api<ConfigMap>,
    prefix: &str,
    total: usize,
    clients: usize,
    update: bool,
) -> f64 {
    let (api, prefix) = (api.clone(), prefix.to_string());
    concurrently(total, clients, move |i| {
        let (api, name) = (api.clone(), format!("{prefix}-{i}"));
        async move {
            let r = if update {
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"key": format!("updated-{i}")}})),
                )
                .await
                .map(|_| ())
            } else {
                api.create(&PostParams::default(), &cm(&name, i))
                    .await
                    .map(|_| ())
            };
            if let Err(e) = r {
                eprintln!("write {name} failed: {e}");
            }
        }
    })
    .await
}

/// Runs `write(i)` for every `i` below `total`, from `clients` concurrent tasks taking the
/// next `i` in turn; returns the writes per second.
async fn concurrently<W, F>(total: usize, clients: usize, write: W) -> f64
where
    W: Fn(usize) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = ()> + Send,
{
    let write = Arc::new(write);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (write, next) = (write.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                write(i).await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// A raw watch of the ConfigMaps in `default` from `rv` selected by `selector` (URL-encoded;
/// `extra_headers` end with CRLF) that adds every ADDED event it reads to `seen` until it has
/// read `until` of them: the count is the server's (kube-rs would spend the shared cores
/// decoding every copy).
fn count_added(
    addr: std::net::SocketAddr,
    rv: String,
    selector: String,
    extra_headers: &'static str,
    until: usize,
    seen: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut sock) = tokio::net::TcpStream::connect(addr).await else {
            return;
        };
        let req = format!(
            "GET /api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&labelSelector={selector}&timeoutSeconds=120 HTTP/1.1\r\nHost: {addr}\r\n{extra_headers}\r\n"
        );
        if sock.write_all(req.as_bytes()).await.is_err() {
            return;
        }
        let needle = b"\"type\":\"ADDED\"";
        let mut buf = vec![0u8; 64 * 1024];
        let mut carry: Vec<u8> = Vec::new();
        let mut n = 0;
        while n < until {
            let Ok(k) = sock.read(&mut buf).await else {
                break;
            };
            if k == 0 {
                break;
            }
            carry.extend_from_slice(&buf[..k]);
            let found = carry.windows(needle.len()).filter(|w| *w == needle).count();
            n += found;
            seen.fetch_add(found, Ordering::Relaxed);
            let keep = carry.len().min(needle.len() - 1);
            carry.drain(..carry.len() - keep);
        }
    })
}

/// The resourceVersion of a list now: where a watch of the writes to come starts.
async fn list_resource_version(api: &Api<ConfigMap>) -> String {
    let list = api
        .list(&ListParams::default().limit(1))
        .await
        .expect("list");
    list.metadata.resource_version.unwrap_or_default()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let writes = env("LOAD_WRITES", 20_000);
        let watches = env("LOAD_WATCHES", 100);
        let clients = env("LOAD_CLIENTS", 32);
        let rss0 = rss_kib();
        let server = ApiServer::start(Config { history_size: 10_000, ..Default::default() }).await.expect("start");
        let mut cfg = kube::Config::new(server.url().parse().expect("url"));
        cfg.default_namespace = "default".into();
        let client = kube::Client::try_from(cfg).expect("client");
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

        println!("== embedded-apiserver load ({} cores available)", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0));
        let creates = run_writes(&api, "a", writes, clients, false).await;
        println!("creates: {writes} in total, {clients} concurrent clients: {creates:.0} writes/s");
        let updates = run_writes(&api, "a", writes, clients, true).await;
        println!("merge patches: {updates:.0} writes/s");

        // Many concurrent watches while writing.
        let rv = list_resource_version(&api).await;
        let seen = Arc::new(AtomicUsize::new(0));
        let watch_writes = writes / 4;
        let addr = server.addr();
        let watchers: Vec<_> = (0..watches)
            .map(|_| {
                let selector = "app%3Dload2".to_string();
                let json = "Accept: application/json\r\n";
                count_added(addr, rv.clone(), selector, json, watch_writes, seen.clone())
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        while server.control().open_watches() < watches && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let start = Instant::now();
        let creates = api.clone();
        let write_rate = concurrently(watch_writes, clients, move |i| {
            let api = creates.clone();
            async move {
                let mut c = cm(&format!("w-{i}"), i);
                c.metadata.labels = Some([("app".to_string(), "load2".to_string())].into());
                let _ = api.create(&PostParams::default(), &c).await;
            }
        })
        .await;
        for w in watchers {
            let _ = tokio::time::timeout(Duration::from_secs(60), w).await;
        }
        let total = start.elapsed().as_secs_f64();
        println!(
            "{watches} concurrent watches: {watch_writes} creates at {write_rate:.0} writes/s; {} events delivered ({:.0} events/s, expected {})",
            seen.load(Ordering::Relaxed),
            seen.load(Ordering::Relaxed) as f64 / total,
            watches * watch_writes
        );

        // 100 watches that each select a different slice (one label value per
        // watch): every write reaches one watcher, as with per-parent watches.
        let rv = list_resource_version(&api).await;
        let per_watch = 50;
        let total = watches * per_watch;
        let seen = Arc::new(AtomicUsize::new(0));
        let before = server.control().open_watches();
        let watchers: Vec<_> = (0..watches)
            .map(|w| {
                let selector = format!("slice%3D{w}");
                count_added(addr, rv.clone(), selector, "", per_watch, seen.clone())
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        while server.control().open_watches() < before + watches && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let creates = api.clone();
        let rate = concurrently(total, clients, move |i| {
            let api = creates.clone();
            async move {
                let mut c = cm(&format!("s-{i}"), i);
                c.metadata.labels = Some([("slice".to_string(), (i % watches.max(1)).to_string())].into());
                let _ = api.create(&PostParams::default(), &c).await;
            }
        })
        .await;
        for w in watchers {
            let _ = tokio::time::timeout(Duration::from_secs(60), w).await;
        }
        println!(
            "{watches} concurrent watches on disjoint selectors: {total} creates at {rate:.0} writes/s; {} of {total} events delivered",
            seen.load(Ordering::Relaxed)
        );

        // Memory per stored object.
        let objects = server.control().object_count();
        let rss1 = rss_kib();
        println!("memory: {objects} objects stored, RSS {} MiB (baseline {} MiB)", rss1 / 1024, rss0 / 1024);
        let mut points = Vec::new();
        for step in 1..=4 {
            run_writes(&api, &format!("m{step}"), writes, clients, false).await;
            points.push((server.control().object_count(), rss_kib()));
        }
        for w in points.windows(2) {
            let (o0, r0) = w[0];
            let (o1, r1) = w[1];
            println!(
                "  {o0} -> {o1} objects: +{} KiB RSS, {:.0} bytes/object",
                r1.saturating_sub(r0),
                (r1.saturating_sub(r0) as f64 * 1024.0) / (o1 - o0) as f64
            );
        }
        server.shutdown().await;
    });
}
