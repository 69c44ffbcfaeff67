//! Whole-system load figures for the CompositeController (run through `hack/load-composite.sh`).
//!
//! The real `metacontroller` binary runs as its own process against the embedded API server
//! started here (optionally with realistic write latency: about 5 ms per write for one
//! client, about 465 writes/s in total), with a local hook server that answers after 1 ms.
//! Phases:
//!
//! 1. cold start: N parents (default 1,000) exist before the controller starts; each wants C
//!    ConfigMaps (default 3) and a status. Reported: time until every parent has its final
//!    status and all N×C ConfigMaps exist; then a quiet period (default 15 s) in which the
//!    controller must write nothing; API requests per parent by verb and hook calls per
//!    parent (converge + quiet period); peak RSS of the controller process;
//! 2. the bound: the harness itself sends the same writes the controller needed (per parent
//!    C ConfigMap creates and the status updates) from 8 keep-alive connections to the same
//!    server, on fresh objects in a fresh namespace. Reported: its time and the ratio
//!    converge / bound;
//! 3. full resync: the controller is restarted on the converged cluster, so it relists and
//!    syncs every parent again. Reported: time until every parent was synced, writes (must be
//!    0), requests per parent, peak RSS.
//!
//! With `--burst B` the CompositeController resyncs every parent every `--resync-secs`
//! (default 30), and after the quiet period B new parents are created at once in another
//! namespace while the converged ones keep resyncing. Reported: the time from the first
//! creation until all B have converged, the resync hook calls meanwhile, and the ratio to the
//! burst's own bound (the same writes for B parents from 8 connections, measured after).
//!
//! The hook's status is `{"children": <observed ConfigMaps>}` by default (`--status
//! observed`): the first sync writes 0, the second the full count, and the controller syncs
//! once more after its own status write (as upstream does, so hooks see their status
//! committed): 3 hook calls and 2 status writes per parent at least (2 hook calls with
//! `--ignore-status-changes`, which sets `parentResource.ignoreStatusChanges`). With `--status desired`
//! the status is `{"children": C}` from the first sync: 1 status write and 2 hook calls per
//! parent at least.
//!
//! With `--hook wasm` the sync hook is not the local hook server but the same hook as a
//! WebAssembly module run inside the controller (`examples/load-hook-wasm`, built here for
//! `wasm32-wasip1`, in a ConfigMap of a `hooks-…` namespace); with `--hook jsonnet` the same
//! hook written in Jsonnet, likewise from a ConfigMap: the cost of in-process hooks
//! against a webhook on loopback. The full resync and `--burst` count the hook server's calls,
//! so they are off in that mode; hook calls come from the controller's
//! `metacontroller_hook_calls_total` (on a real server, where `/metrics` is scraped).
//!
//! Usage: `composite_load --binary PATH [--parents N] [--children N] [--workers N]
//! [--realistic-latency] [--status observed|desired] [--hook-delay-ms N] [--quiet-secs N]
//! [--controller-arg ARG]... [--no-resync] [--burst B] [--resync-secs S]
//! [--ignore-status-changes] [--hook webhook|wasm|jsonnet] [--metrics-out FILE]`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use embedded_apiserver::WriteLatency;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    crd, metrics, unique_name, CrdBuilder, HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

/// Connections the bound is sent from.
const BOUND_CONNECTIONS: usize = 8;

struct Args {
    binary: PathBuf,
    parents: usize,
    children: usize,
    workers: u32,
    hook_delay: Duration,
    realistic_latency: bool,
    status_observed: bool,
    quiet: Duration,
    controller_args: Vec<String>,
    resync: bool,
    /// A real API server's kubeconfig (else the embedded server runs here).
    kubeconfig: Option<PathBuf>,
    /// Parents created at once after cold start, while the converged ones resync (0: none).
    burst: usize,
    /// The CompositeController's `resyncPeriodSeconds` (with `--burst`; default 30).
    resync_secs: u64,
    /// `parentResource.ignoreStatusChanges: true` (no sync for the parent's status writes).
    ignore_status_changes: bool,
    /// Where the sync hook runs: the local webhook, or inside the controller.
    hook: HookKind,
    /// Where to write the controller's `/metrics` after the quiet period (real server only).
    metrics_out: Option<PathBuf>,
}

/// Where the sync hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HookKind {
    /// The harness's hook server on loopback.
    Webhook,
    /// `examples/load-hook-wasm` inside the controller.
    Wasm,
    /// [`JSONNET_HOOK`] inside the controller.
    Jsonnet,
}

impl Default for Args {
    /// The harness's defaults (see the usage above).
    fn default() -> Self {
        Args {
            binary: PathBuf::from("target/release/metacontroller"),
            parents: 1000,
            children: 3,
            workers: 5,
            hook_delay: Duration::from_millis(1),
            realistic_latency: false,
            status_observed: true,
            quiet: Duration::from_secs(15),
            controller_args: Vec::new(),
            resync: true,
            kubeconfig: None,
            burst: 0,
            resync_secs: 30,
            ignore_status_changes: false,
            hook: HookKind::Webhook,
            metrics_out: None,
        }
    }
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--realistic-latency" => {
                args.realistic_latency = true;
                continue;
            }
            "--no-resync" => {
                args.resync = false;
                continue;
            }
            "--ignore-status-changes" => {
                args.ignore_status_changes = true;
                continue;
            }
            _ => {}
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--binary" => args.binary = PathBuf::from(&value),
            "--parents" => args.parents = number()?.max(1) as usize,
            "--children" => args.children = number()? as usize,
            "--workers" => args.workers = number()? as u32,
            "--hook-delay-ms" => args.hook_delay = Duration::from_millis(number()?),
            "--quiet-secs" => args.quiet = Duration::from_secs(number()?),
            "--controller-arg" => args.controller_args.push(value),
            "--kubeconfig" => args.kubeconfig = Some(PathBuf::from(&value)),
            "--metrics-out" => args.metrics_out = Some(PathBuf::from(&value)),
            "--burst" => args.burst = number()? as usize,
            "--resync-secs" => args.resync_secs = number()?.max(1),
            "--status" => {
                args.status_observed = match value.as_str() {
                    "observed" => true,
                    "desired" => false,
                    other => return Err(format!("--status {other}: observed or desired")),
                }
            }
            "--hook" => {
                args.hook = match value.as_str() {
                    "webhook" => HookKind::Webhook,
                    "wasm" => HookKind::Wasm,
                    "jsonnet" => HookKind::Jsonnet,
                    other => return Err(format!("--hook {other}: webhook, wasm or jsonnet")),
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.hook != HookKind::Webhook {
        // Both phases count the local hook server's calls, which an in-process hook never
        // makes.
        if args.burst > 0 {
            return Err("--burst needs --hook webhook".into());
        }
        if args.hook == HookKind::Wasm && args.children > 999 {
            return Err("--hook wasm takes at most 999 children".into());
        }
        args.resync = false;
    }
    Ok(args)
}

/// The hook: C ConfigMaps per parent carrying `spec.value`; the status counts the observed
/// children (or the desired ones).
fn sync_reply(req: &Value, children: usize, status_observed: bool) -> Value {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let observed = req["children"]["ConfigMap.v1"]
        .as_object()
        .map_or(0, |m| m.len());
    let desired: Vec<Value> = (0..children)
        .map(|i| child(name, i, &parent["spec"]["value"]))
        .collect();
    let count = if status_observed { observed } else { children };
    json!({"children": desired, "status": {"children": count}})
}

fn child(parent: &str, i: usize, value: &Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": format!("{parent}-{i}")},
           "data": {"value": value, "index": i.to_string()}})
}

/// Peak resident set size of a process, from /proc (Linux), in MiB.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    metrics::rss_kib(pid, true).map(|kib| kib as f64 / 1024.0)
}

fn rss_text(rss: Option<f64>) -> String {
    rss.map_or("unknown".into(), |m| format!("{m:.1} MiB"))
}

/// The pid of the kube-apiserver listening on `port` on this machine, if there is one.
fn apiserver_pid(port: u16) -> Option<u32> {
    let flag = format!("--secure-port={port}");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let is_apiserver = args.first()?.ends_with(b"kube-apiserver");
            let on_port = args.contains(&flag.as_bytes());
            (is_apiserver && on_port).then_some(pid)
        })
}

/// Where the request counts come from: the embedded server's own counters (by verb and
/// resource), or on a real server the controller's `rest_client_requests_total` from its
/// `/metrics` (by verb and status code; Event writes cannot be told apart there).
enum Requests {
    Embedded(metacontroller_testkit::Control),
    Metrics(Box<MetricsSource>),
}

/// The controller's `/metrics` on a real server, and what tells its Event writes apart.
struct MetricsSource {
    port: u16,
    /// Reads the Events about the run's CompositeController: their `count`s tell the
    /// controller's Event writes apart from the others in its metrics.
    events: Api<k8s_openapi::api::core::v1::Event>,
    controller: String,
    /// The Events' total count when the current controller process started.
    events_at_start: std::sync::Mutex<u64>,
}

impl Requests {
    /// The counts a phase starts from: the embedded server's so far, or nothing (a phase on
    /// a real server starts a new controller process, whose counters start at 0).
    async fn baseline(&self) -> Counts {
        match self {
            Requests::Embedded(control) => control.request_counts(),
            Requests::Metrics(m) => {
                let total = event_count(&m.events, &m.controller).await;
                *m.events_at_start.lock().expect("events lock") = total;
                Counts::new()
            }
        }
    }

    /// Waits until no write has been counted for `quiet` (at most `timeout`).
    async fn settle(&self, quiet: Duration, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut last = writes(&self.counts().await);
        let mut since = Instant::now();
        while Instant::now() < deadline && since.elapsed() < quiet {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = writes(&self.counts().await);
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
    }

    /// The counts so far (on a real server: of the running controller process).
    async fn counts(&self) -> Counts {
        match self {
            Requests::Embedded(control) => control.request_counts(),
            Requests::Metrics(m) => {
                let mut counts = scrape_requests(m.port).await;
                let start = *m.events_at_start.lock().expect("events lock");
                let written = event_count(&m.events, &m.controller)
                    .await
                    .saturating_sub(start);
                move_event_writes(&mut counts, written);
                counts
            }
        }
    }
}

/// `rest_client_requests_total` of the controller serving metrics on `port`, keyed by verb
/// (create/update/patch/delete/get) and `code <status>`.
async fn scrape_requests(port: u16) -> Counts {
    let text = metrics::http_get(
        &format!("127.0.0.1:{port}"),
        "/metrics",
        Duration::from_secs(10),
    )
    .await
    .unwrap_or_else(|e| panic!("scraping 127.0.0.1:{port}/metrics: {e}"));
    let mut counts = Counts::new();
    for line in text.lines() {
        let Some(labels) = line.strip_prefix("rest_client_requests_total{") else {
            continue;
        };
        let (labels, value) = labels.rsplit_once("} ").unwrap_or_default();
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let verb = match label("method").as_str() {
            "POST" => "create",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "get",
        };
        let n = value.trim().parse::<f64>().unwrap_or(0.0) as u64;
        *counts
            .entry((verb.to_string(), format!("code {}", label("code"))))
            .or_default() += n;
    }
    counts
}

/// The port of the API server a kubeconfig names (`https://host:port`).
fn server_port(kubeconfig: &std::path::Path) -> Option<u16> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).ok()?;
    let server = config.clusters.first()?.cluster.as_ref()?.server.clone()?;
    server
        .trim_end_matches('/')
        .rsplit(':')
        .next()?
        .parse()
        .ok()
}

/// The summed `count` of the Events about `controller` (each Event write adds one).
async fn event_count(events: &Api<k8s_openapi::api::core::v1::Event>, controller: &str) -> u64 {
    let lp = ListParams::default().fields(&format!("involvedObject.name={controller}"));
    match events.list(&lp).await {
        Ok(list) => list
            .items
            .iter()
            .map(|e| e.count.unwrap_or(1).max(1) as u64)
            .sum(),
        Err(e) => panic!("listing the controller's Events: {e}"),
    }
}

/// Moves `events` writes from the status-code keys (an Event is created with 201 or its
/// count patched with 200) to `("create", "events")`, which [`writes`] leaves out.
fn move_event_writes(counts: &mut Counts, events: u64) {
    let mut left = events;
    for key in [("create", "code 201"), ("patch", "code 200")] {
        let key = (key.0.to_string(), key.1.to_string());
        if let Some(n) = counts.get_mut(&key) {
            let take = left.min(*n);
            *n -= take;
            left -= take;
        }
    }
    *counts
        .entry(("create".to_string(), "events".to_string()))
        .or_default() += events - left;
    counts.retain(|_, n| *n > 0);
}

/// A free local port for the controller's metrics.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free local port")
}

struct Controller {
    child: tokio::process::Child,
}

impl Controller {
    /// Starts the binary; `metrics_port` makes it serve `/metrics` there.
    fn spawn(
        args: &Args,
        cluster: &TestCluster,
        log: &std::path::Path,
        metrics_port: Option<u16>,
    ) -> Controller {
        let log = std::fs::File::create(log).expect("creating the controller log");
        let err = log.try_clone().expect("log handle");
        let metrics = metrics_port.map(|p| format!("--metrics-address=127.0.0.1:{p}"));
        let child = tokio::process::Command::new(&args.binary)
            .arg("run")
            .args(metrics)
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig_path())
            .arg("--workers")
            .arg(args.workers.to_string())
            .arg("--log-level")
            .arg("warn")
            .args(&args.controller_args)
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", args.binary.display()));
        Controller { child }
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

type Counts = BTreeMap<(String, String), u64>;

fn print_requests(title: &str, counts: &Counts, parents: usize) {
    let total: u64 = counts.values().sum();
    println!(
        "{title}: {total} API requests ({:.2} per parent)",
        total as f64 / parents as f64
    );
    let mut by_verb: BTreeMap<&str, u64> = BTreeMap::new();
    for ((verb, _), n) in counts {
        *by_verb.entry(verb).or_default() += n;
    }
    let verbs: Vec<String> = by_verb
        .iter()
        .map(|(v, n)| format!("{v} {:.2}", *n as f64 / parents as f64))
        .collect();
    println!("{title}: per parent by verb: {}", verbs.join(", "));
    for ((verb, resource), n) in counts {
        println!(
            "    {verb:>8} {resource:<40} {n:>8} ({:.3} per parent)",
            *n as f64 / parents as f64
        );
    }
}

/// Counts minus the harness's own requests.
fn without(mut counts: Counts, ours: &Counts) -> Counts {
    for (key, n) in ours {
        if let Some(c) = counts.get_mut(key) {
            *c = c.saturating_sub(*n);
        }
    }
    counts.retain(|_, n| *n > 0);
    counts
}

fn add(into: &mut Counts, from: &Counts) {
    for (key, n) in from {
        *into.entry(key.clone()).or_default() += n;
    }
}

/// Writes to anything but Events (the controller records a `Starting`/`Started` Event on
/// its CompositeController whenever it starts; that is not a write of a sync).
fn writes(counts: &Counts) -> u64 {
    counts
        .iter()
        .filter(|((verb, resource), _)| {
            matches!(verb.as_str(), "create" | "update" | "patch" | "delete")
                && resource != "events"
        })
        .map(|(_, n)| n)
        .sum()
}

fn events_written(counts: &Counts) -> u64 {
    counts
        .iter()
        .filter(|((verb, resource), _)| {
            verb != "get" && verb != "list" && verb != "watch" && resource == "events"
        })
        .map(|(_, n)| n)
        .sum()
}

/// Creates `n` parents named `p<i>` through `api` (32 at a time); returns them as created.
async fn create_parents(api: &Api<DynamicObject>, api_version: &str, kind: &str, n: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    let chunk = n.div_ceil(32).max(1);
    for start in (0..n).step_by(chunk) {
        let api = api.clone();
        let (api_version, kind) = (api_version.to_string(), kind.to_string());
        tasks.spawn(async move {
            for i in start..(start + chunk).min(n) {
                let p: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": api_version, "kind": kind,
                    "metadata": {"name": format!("p{i}")}, "spec": {"value": "v1"}
                }))
                .expect("parent");
                api.create(&PostParams::default(), &p)
                    .await
                    .expect("creating a parent");
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// The bound: for every parent of `parents` (already created in `ns`), what the controller
/// writes — `children` ConfigMap creates (with the controller ownerReference) and
/// `status_writes` status updates — sent by the harness from [`BOUND_CONNECTIONS`] clients
/// of one connection each, every client writing its parents one request after another.
async fn bound(
    cluster: &TestCluster,
    parents_api: impl Fn(kube::Client) -> Api<DynamicObject>,
    ns: &str,
    n: usize,
    children: usize,
    status_writes: usize,
) -> (Duration, u64) {
    let list = parents_api(cluster.client())
        .list(&ListParams::default())
        .await
        .expect("listing the bound's parents");
    let parents = Arc::new(list.items);
    assert_eq!(parents.len(), n);
    let mut clients = Vec::new();
    for _ in 0..BOUND_CONNECTIONS {
        let config = kube::Config::from_custom_kubeconfig(kubeconfig(cluster), &Default::default())
            .await
            .expect("kubeconfig");
        clients.push(kube::Client::try_from(config).expect("client"));
    }
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (c, client) in clients.into_iter().enumerate() {
        let parents = parents.clone();
        let api = parents_api(client.clone());
        let cms: Api<ConfigMap> = Api::namespaced(client, ns);
        tasks.spawn(async move {
            let mut sent = 0u64;
            for parent in parents.iter().skip(c).step_by(BOUND_CONNECTIONS) {
                let name = parent.metadata.name.clone().unwrap_or_default();
                let uid = parent.metadata.uid.clone().unwrap_or_default();
                for i in 0..children {
                    let mut body = child(&name, i, &json!("v1"));
                    body["metadata"]["ownerReferences"] = json!([{
                        "apiVersion": "load.example.com/v1", "kind": "BoundParent",
                        "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
                    let cm: ConfigMap = serde_json::from_value(body).expect("configmap");
                    cms.create(&PostParams::default(), &cm)
                        .await
                        .expect("bound: creating a child");
                    sent += 1;
                }
                let mut current = parent.clone();
                current.types = Some(kube::core::TypeMeta {
                    api_version: "load.example.com/v1".into(),
                    kind: "BoundParent".into(),
                });
                for s in 0..status_writes {
                    let count = if s + 1 == status_writes { children } else { 0 };
                    current.data["status"] = json!({"children": count, "observedGeneration": 1});
                    current = api
                        .replace_status(&name, &PostParams::default(), &current)
                        .await
                        .expect("bound: writing a status");
                    sent += 1;
                }
            }
            sent
        });
    }
    let mut sent = 0;
    while let Some(r) = tasks.join_next().await {
        sent += r.expect("bound task");
    }
    (started.elapsed(), sent)
}

/// Whether all `n` parents behind `parents` report `c` children and the `c * n` ConfigMaps
/// behind `configmaps` exist (one check; the harness's lists are counted in `ours`).
async fn converged(
    parents: &Api<DynamicObject>,
    configmaps: &Api<ConfigMap>,
    n: usize,
    c: usize,
    plural: &str,
    ours: &mut Counts,
) -> bool {
    *ours.entry(("list".into(), plural.into())).or_default() += 1;
    let list = parents
        .list(&ListParams::default())
        .await
        .expect("listing parents");
    let done = list
        .items
        .iter()
        .filter(|p| p.data["status"]["children"] == json!(c))
        .count();
    if done != n {
        return false;
    }
    *ours
        .entry(("list".into(), "configmaps".into()))
        .or_default() += 1;
    let cms = configmaps
        .list_metadata(&ListParams::default())
        .await
        .expect("listing configmaps");
    // A real server adds `kube-root-ca.crt` to every namespace.
    let children = cms
        .items
        .iter()
        .filter(|cm| cm.metadata.name.as_deref() != Some("kube-root-ca.crt"))
        .count();
    children == c * n
}

/// The burst: `args.burst` parents created at once in a fresh namespace while the converged
/// ones resync; returns the time from the first creation until all of them converged.
async fn run_burst(
    cluster: &TestCluster,
    args: &Args,
    parents_crd: &CrdBuilder,
    main_calls: &AtomicU64,
) -> Duration {
    let (b, c) = (args.burst, args.children);
    let ns = cluster.create_namespace("burst").await;
    let parents = parents_crd.api(cluster.client(), Some(&ns));
    let configmaps: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    let plural = parents_crd.plural();
    let resyncs_before = main_calls.load(Ordering::Relaxed);
    let started = Instant::now();
    create_parents(&parents, &parents_crd.api_version(), parents_crd.kind(), b).await;
    let created = started.elapsed();
    let mut ours = Counts::new();
    let deadline = Duration::from_secs(600);
    while !converged(&parents, &configmaps, b, c, plural, &mut ours).await {
        assert!(
            started.elapsed() < deadline,
            "burst not converged within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let converge = started.elapsed();
    let resyncs = main_calls.load(Ordering::Relaxed) - resyncs_before;
    println!(
        "burst: {b} parents created in {:.2}s, converged {:.2}s after the first creation; \
         meanwhile {resyncs} resync hook calls of converged parents ({:.0}/s)",
        created.as_secs_f64(),
        converge.as_secs_f64(),
        resyncs as f64 / converge.as_secs_f64()
    );
    converge
}

fn kubeconfig(cluster: &TestCluster) -> kube::config::Kubeconfig {
    kube::config::Kubeconfig::read_from(cluster.kubeconfig_path()).expect("reading kubeconfig")
}

/// The arguments, or exit 2 with the reason (a bad flag, a missing binary).
fn args_or_exit() -> Args {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("composite_load: {e}");
            std::process::exit(2);
        }
    };
    if !args.binary.exists() {
        eprintln!(
            "composite_load: {} not found (cargo build --release -p metacontroller)",
            args.binary.display()
        );
        std::process::exit(2);
    }
    args
}

/// What the phases share: the cluster and how its requests are counted, the CRDs, the
/// cold-start namespace and the hook.
struct Setup {
    cluster: TestCluster,
    requests: Requests,
    /// Where the controller serves `/metrics` (on a real server only).
    metrics_port: Option<u16>,
    /// The pid of a local kube-apiserver, for its CPU seconds.
    apiserver: Option<u32>,
    latency: Option<WriteLatency>,
    controller_name: String,
    parents_crd: CrdBuilder,
    bound_crd: CrdBuilder,
    ns: String,
    hook: Arc<HookServer>,
    /// Hook calls for the cold-start namespace's parents (resyncs, during a burst).
    main_calls: Arc<AtomicU64>,
    /// With `--hook wasm`: the namespace and name of the ConfigMap holding the module.
    /// The in-process hook's ConfigMap (namespace, name), when the hook runs in-process.
    inprocess_code: Option<(String, String)>,
}

/// The cluster (the real one of `--kubeconfig`, else an embedded server with the chosen
/// write latency) and where its request counts come from.
async fn start_cluster(args: &Args) -> (TestCluster, Requests, Option<WriteLatency>, String) {
    let latency = args.realistic_latency.then(WriteLatency::realistic);
    let cluster = match &args.kubeconfig {
        Some(path) => TestCluster::real(path.clone()).await,
        None => {
            TestCluster::embedded_with_config(embedded_apiserver::Config {
                write_latency: latency.clone(),
                ..Default::default()
            })
            .await
        }
    };
    let controller_name = unique_name("load");
    let requests = match cluster.control() {
        Some(control) => Requests::Embedded(control),
        None => Requests::Metrics(Box::new(MetricsSource {
            port: free_port(),
            events: Api::all(cluster.client()),
            controller: controller_name.clone(),
            events_at_start: std::sync::Mutex::new(0),
        })),
    };
    (cluster, requests, latency, controller_name)
}

/// Setup: the cluster, the CRDs, the namespace and the hook server.
async fn setup(args: &Args) -> Setup {
    let (cluster, requests, latency, controller_name) = start_cluster(args).await;
    let metrics_port = match &requests {
        Requests::Metrics(m) => Some(m.port),
        Requests::Embedded(_) => None,
    };
    let apiserver = args
        .kubeconfig
        .as_deref()
        .and_then(server_port)
        .and_then(apiserver_pid);
    cluster.install_metacontroller_crds().await;
    let parents_crd = crd("load.example.com", "v1", "LoadParent", "loadparents");
    cluster.install_crd(&parents_crd.build()).await;
    let bound_crd = crd("load.example.com", "v1", "BoundParent", "boundparents");
    cluster.install_crd(&bound_crd.build()).await;
    let ns = cluster.create_namespace("load").await;
    let (delay, observed, c) = (args.hook_delay, args.status_observed, args.children);
    let main_calls = Arc::new(AtomicU64::new(0));
    let hook = Arc::new(
        HookServer::start({
            let (main_calls, ns) = (main_calls.clone(), ns.clone());
            move |_, req| {
                if req["parent"]["metadata"]["namespace"] == json!(ns) {
                    main_calls.fetch_add(1, Ordering::Relaxed);
                }
                HookReply::json(sync_reply(req, c, observed)).delayed(delay)
            }
        })
        .await,
    );
    let inprocess_code = match args.hook {
        HookKind::Webhook => None,
        HookKind::Wasm => Some(install_wasm_hook(args, &cluster).await),
        HookKind::Jsonnet => Some(install_jsonnet_hook(args, &cluster).await),
    };
    Setup {
        cluster,
        requests,
        metrics_port,
        apiserver,
        latency,
        controller_name,
        parents_crd,
        bound_crd,
        ns,
        hook,
        main_calls,
        inprocess_code,
    }
}

/// Key of the module in the hook ConfigMap.
const WASM_KEY: &str = "sync.wasm";

/// Builds `examples/load-hook-wasm`, sets its children and status settings, and stores it in
/// a ConfigMap of a fresh namespace (not the parents': the children are counted there).
async fn install_wasm_hook(args: &Args, cluster: &TestCluster) -> (String, String) {
    let Some(module) = metacontroller_testkit::wasm::example_module("load-hook-wasm") else {
        eprintln!("composite_load: --hook wasm needs the wasm32-wasip1 target");
        std::process::exit(2);
    };
    let status = if args.status_observed { 'o' } else { 'd' };
    let settings = format!("children={:03} status={status}", args.children);
    let module = metacontroller_testkit::wasm::patched(
        &module,
        b"children=003 status=o",
        settings.as_bytes(),
    );
    let (ns, name) = store_hook_code(
        cluster,
        ConfigMap {
            binary_data: Some(BTreeMap::from([(
                WASM_KEY.to_string(),
                k8s_openapi::ByteString(module.clone()),
            )])),
            ..Default::default()
        },
    )
    .await;
    println!(
        "hook: load-hook-wasm module, {} KiB, in {ns}/{name}",
        module.len() / 1024
    );
    (ns, name)
}

/// Key of the Jsonnet hook in the hook ConfigMap.
const JSONNET_KEY: &str = "sync.jsonnet";

/// The harness's hook as Jsonnet (what [`sync_reply`] answers), with the children per
/// parent and where the status count comes from filled in.
fn jsonnet_hook(children: usize, status_observed: bool) -> String {
    let count = if status_observed {
        "std.length(std.objectFields(std.get(request.children, 'ConfigMap.v1', {})))".to_string()
    } else {
        children.to_string()
    };
    format!(
        r#"function(request)
  local parent = request.parent;
  local name = parent.metadata.name;
  local value = std.get(std.get(parent, 'spec', {{}}), 'value', null);
  {{
    children: [
      {{apiVersion: 'v1', kind: 'ConfigMap', metadata: {{name: name + '-' + i}},
       data: {{value: value, index: std.toString(i)}}}}
      for i in std.range(0, {last})
    ],
    status: {{children: {count}}},
  }}
"#,
        last = children as i64 - 1,
    )
}

/// Stores [`jsonnet_hook`] in a ConfigMap of a fresh namespace (not the parents').
async fn install_jsonnet_hook(args: &Args, cluster: &TestCluster) -> (String, String) {
    let (ns, name) = store_hook_code(
        cluster,
        ConfigMap {
            data: Some(BTreeMap::from([(
                JSONNET_KEY.to_string(),
                jsonnet_hook(args.children, args.status_observed),
            )])),
            ..Default::default()
        },
    )
    .await;
    println!("hook: Jsonnet in {ns}/{name}");
    (ns, name)
}

/// Creates `code` as ConfigMap `load-hook` in a fresh namespace (not the parents': the
/// children are counted there); its namespace and name.
async fn store_hook_code(cluster: &TestCluster, mut code: ConfigMap) -> (String, String) {
    let ns = cluster.create_namespace("hooks").await;
    let name = "load-hook".to_string();
    code.metadata.name = Some(name.clone());
    code.metadata.namespace = Some(ns.clone());
    Api::<ConfigMap>::namespaced(cluster.client(), &ns)
        .create(&PostParams::default(), &code)
        .await
        .expect("creating the hook ConfigMap");
    (ns, name)
}

/// The `config:` line.
fn print_config(args: &Args, s: &Setup) {
    let (n, c) = (args.parents, args.children);
    println!(
        "config: {} server, {n} parents x {c} ConfigMaps, {} workers, hook {}, \
         status from {} children, realistic latency {}, controller args {:?}",
        if s.cluster.is_embedded() {
            "embedded"
        } else {
            "real"
        },
        args.workers,
        match args.hook {
            HookKind::Wasm => "WASM in the controller".to_string(),
            HookKind::Jsonnet => "Jsonnet in the controller".to_string(),
            HookKind::Webhook => format!("webhook (delay {:?})", args.hook_delay),
        },
        if args.status_observed {
            "observed"
        } else {
            "desired"
        },
        match &s.latency {
            Some(l) => format!(
                "on ({:?} per write alone, {:.0} writes/s max)",
                l.single_client(),
                l.max_writes_per_second()
            ),
            None => "off".into(),
        },
        args.controller_args
    );
}

/// The CompositeController and N parents exist before the controller process starts. The
/// controller process serves only this run's CompositeController (a shared real server may
/// hold others): its label selector is added to `args.controller_args`.
async fn create_controller_and_parents(args: &mut Args, s: &Setup) {
    let run = unique_name("run");
    args.controller_args
        .push(format!("--target-label-selector=load-run={run}"));
    let parents_crd = &s.parents_crd;
    let mut cc: Value = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": s.controller_name, "labels": {"load-run": run}},
        "spec": {
            "parentResource": {"apiVersion": parents_crd.api_version(), "resource": parents_crd.plural()},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                "updateStrategy": {"method": "InPlace"}}],
            "generateSelector": true,
            "hooks": {"sync": {"webhook": {"url": s.hook.url("/sync")}}}
        }
    });
    if let Some((ns, name)) = &s.inprocess_code {
        let (runtime, key) = match args.hook {
            HookKind::Jsonnet => ("jsonnet", JSONNET_KEY),
            _ => ("wasm", WASM_KEY),
        };
        cc["spec"]["hooks"]["sync"] = json!({ runtime: {
            "configMapRef": {"namespace": ns, "name": name}, "key": key}});
    }
    if args.ignore_status_changes {
        cc["spec"]["parentResource"]["ignoreStatusChanges"] = json!(true);
    }
    if args.burst > 0 {
        cc["spec"]["resyncPeriodSeconds"] = json!(args.resync_secs);
    }
    let _: CompositeController = s.cluster.create_controller_object(cc).await;
    let n = args.parents;
    let parents = parents_crd.api(s.cluster.client(), Some(&s.ns));
    let created = Instant::now();
    create_parents(&parents, &parents_crd.api_version(), parents_crd.kind(), n).await;
    println!("setup: {n} parents created in {:?}", created.elapsed());
}

/// How long the cold start and the resync may take at the most.
const DEADLINE: Duration = Duration::from_secs(1800);

/// What phase 1 measured.
struct ColdStart {
    converge: Duration,
    /// Requests of converge + quiet period.
    counts: Counts,
    quiet_counts: Counts,
    quiet_writes: u64,
    /// Unknown with `--hook wasm` on the embedded server (no `/metrics` scraped there).
    hook_calls: Option<usize>,
    rss: Option<f64>,
    controller_cpu: Option<f64>,
    api_cpu: Option<(f64, f64)>,
    /// The burst's convergence time, with `--burst`.
    burst: Option<Duration>,
}

/// Phase 1, cold start: the controller starts on N waiting parents; then the quiet period
/// (a converged controller writes nothing) and, with `--burst`, the burst.
async fn cold_start(args: &Args, s: &Setup) -> ColdStart {
    let (n, c) = (args.parents, args.children);
    let parents = s.parents_crd.api(s.cluster.client(), Some(&s.ns));
    let configmaps: Api<ConfigMap> = Api::namespaced(s.cluster.client(), &s.ns);
    let base = s.requests.baseline().await;
    let api_cpu_start = s.apiserver.and_then(metrics::cpu_seconds);
    let mut ours = Counts::new();
    let started = Instant::now();
    let log = std::env::temp_dir().join("composite_load-1.log");
    let controller = Controller::spawn(args, &s.cluster, &log, s.metrics_port);
    let plural = s.parents_crd.plural();
    while !converged(&parents, &configmaps, n, c, plural, &mut ours).await {
        assert!(
            started.elapsed() < DEADLINE,
            "not converged within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let converge = started.elapsed();
    let api_cpu = s
        .apiserver
        .and_then(metrics::cpu_seconds)
        .zip(api_cpu_start);
    // With its Jsonnet worker processes: their CPU is the controller's too.
    let controller_cpu = metrics::tree_cpu_seconds(controller.pid());
    let converge_counts = without(without(s.requests.counts().await, &base), &ours);
    // The quiet period: a converged controller writes nothing.
    let quiet_base = s.requests.counts().await;
    tokio::time::sleep(args.quiet).await;
    let quiet_counts = without(s.requests.counts().await, &quiet_base);
    let quiet_writes = writes(&quiet_counts);
    let rss = peak_rss_mib(controller.pid());
    let mut counts = converge_counts;
    add(&mut counts, &quiet_counts);
    let hook_calls = hook_calls(s).await;
    if let Some(path) = &args.metrics_out {
        save_metrics(s, path).await;
    }
    s.hook.clear_calls();
    let burst = if args.burst > 0 {
        Some(run_burst(&s.cluster, args, &s.parents_crd, &s.main_calls).await)
    } else {
        None
    };
    controller.stop().await;
    ColdStart {
        converge,
        counts,
        quiet_counts,
        quiet_writes,
        hook_calls,
        rss,
        controller_cpu,
        api_cpu,
        burst,
    }
}

/// The sync hook calls so far: the hook server's, or with a WASM hook the running
/// controller's `metacontroller_hook_calls_total` (when its `/metrics` is scraped).
async fn hook_calls(s: &Setup) -> Option<usize> {
    if s.inprocess_code.is_none() {
        return Some(s.hook.calls("/sync"));
    }
    let address = format!("127.0.0.1:{}", s.metrics_port?);
    let text = metrics::http_get(&address, "/metrics", Duration::from_secs(10))
        .await
        .ok()?;
    let total: f64 = text
        .lines()
        .filter(|line| line.starts_with("metacontroller_hook_calls_total{"))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    Some(total as usize)
}

/// Writes the running controller's `/metrics` to `path` (for the queue's and the hooks'
/// series behind the summary); says so when there is nothing to scrape.
async fn save_metrics(s: &Setup, path: &std::path::Path) {
    let Some(port) = s.metrics_port else {
        eprintln!("composite_load: --metrics-out needs a real server (--kubeconfig)");
        return;
    };
    let address = format!("127.0.0.1:{port}");
    match metrics::http_get(&address, "/metrics", Duration::from_secs(10)).await {
        Ok(text) => {
            if let Err(e) = std::fs::write(path, text) {
                eprintln!("composite_load: writing {}: {e}", path.display());
            }
        }
        Err(e) => eprintln!("composite_load: scraping {address}/metrics: {e}"),
    }
}

/// The cold start's lines; returns the controller's writes.
fn report_cold_start(args: &Args, cold: &ColdStart) -> u64 {
    let (n, c) = (args.parents, args.children);
    println!(
        "cold start: {n} parents x {c} ConfigMaps converged in {:.2}s",
        cold.converge.as_secs_f64()
    );
    println!(
        "quiet period: {} writes in {:?} after convergence (must be 0; Event writes apart: {})",
        cold.quiet_writes,
        args.quiet,
        events_written(&cold.quiet_counts)
    );
    print_requests("cold start (converge + quiet period)", &cold.counts, n);
    let controller_writes = writes(&cold.counts);
    let hook_calls = cold.hook_calls.map_or("unknown".into(), |calls| {
        format!("{calls} ({:.2} per parent)", calls as f64 / n as f64)
    });
    println!(
        "cold start: {} writes ({:.2} per parent), hook calls {hook_calls}, controller peak RSS {}",
        controller_writes,
        controller_writes as f64 / n as f64,
        rss_text(cold.rss)
    );
    println!(
        "cold start: CPU seconds until converged: controller {}, API server {}",
        cold.controller_cpu
            .map_or("unknown".into(), |s| format!("{s:.1}")),
        cold.api_cpu.map_or(
            "unknown (not a local kube-apiserver)".into(),
            |(end, start)| { format!("{:.1}", end - start) }
        )
    );
    controller_writes
}

/// Creates `n` BoundParents in a fresh namespace named after `prefix` and sends the bound
/// for them; returns its time and writes.
async fn bound_in_fresh_namespace(
    args: &Args,
    s: &Setup,
    prefix: &str,
    n: usize,
) -> (Duration, u64) {
    let bound_ns = s.cluster.create_namespace(prefix).await;
    let bound_crd = &s.bound_crd;
    let bound_api = |client: kube::Client| bound_crd.api(client, Some(&bound_ns));
    create_parents(
        &bound_api(s.cluster.client()),
        &bound_crd.api_version(),
        bound_crd.kind(),
        n,
    )
    .await;
    let status_writes = if args.status_observed { 2 } else { 1 };
    let c = args.children;
    bound(&s.cluster, bound_api, &bound_ns, n, c, status_writes).await
}

/// Phase 2: the bound, on fresh objects in a fresh namespace, against the cold start's
/// `converge` time (and the burst's, against its own bound).
async fn run_bound(args: &Args, s: &Setup, cold: &ColdStart, controller_writes: u64) {
    let c = args.children;
    let status_writes = if args.status_observed { 2 } else { 1 };
    let (bound_time, bound_writes) = bound_in_fresh_namespace(args, s, "bound", args.parents).await;
    println!(
        "bound: {bound_writes} writes ({c} creates + {status_writes} status updates per parent) \
         from {BOUND_CONNECTIONS} connections in {:.2}s ({:.0} writes/s)",
        bound_time.as_secs_f64(),
        bound_writes as f64 / bound_time.as_secs_f64()
    );
    println!(
        "ratio: converge / bound = {:.2} (controller writes {controller_writes}, bound writes {bound_writes})",
        cold.converge.as_secs_f64() / bound_time.as_secs_f64()
    );
    if let Some(burst) = cold.burst {
        let b = args.burst;
        let (time, sent) = bound_in_fresh_namespace(args, s, "burst-bound", b).await;
        println!(
            "burst bound: {sent} writes for {b} parents from {BOUND_CONNECTIONS} connections in {:.2}s",
            time.as_secs_f64()
        );
        println!(
            "burst ratio: converge / own bound = {:.2}",
            burst.as_secs_f64() / time.as_secs_f64()
        );
    }
}

/// Waits until the hook has synced every one of the `n` parents at least once.
async fn wait_all_synced(hook: &HookServer, n: usize, started: Instant) {
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            started.elapsed() < DEADLINE,
            "resync not done within {DEADLINE:?}"
        );
        if hook.calls("/sync") < n {
            continue;
        }
        let synced: std::collections::HashSet<String> = hook
            .requests("/sync")
            .iter()
            .filter_map(|r| r["parent"]["metadata"]["name"].as_str().map(String::from))
            .collect();
        if synced.len() == n {
            return;
        }
    }
}

/// Phase 3: full resync — a fresh process relists and syncs every converged parent.
/// Returns its writes.
async fn full_resync(args: &Args, s: &Setup) -> u64 {
    let n = args.parents;
    let base = s.requests.baseline().await;
    s.hook.clear_calls();
    let started = Instant::now();
    let log = std::env::temp_dir().join("composite_load-2.log");
    let controller = Controller::spawn(args, &s.cluster, &log, s.metrics_port);
    wait_all_synced(&s.hook, n, started).await;
    let resync = started.elapsed();
    s.requests
        .settle(Duration::from_secs(2), Duration::from_secs(30))
        .await;
    let rss = peak_rss_mib(controller.pid());
    let counts = without(s.requests.counts().await, &base);
    println!(
        "full resync: {n} parents synced in {:.2}s, {} hook calls",
        resync.as_secs_f64(),
        s.hook.calls("/sync")
    );
    print_requests("full resync", &counts, n);
    println!(
        "full resync: {} writes (must be 0; Event writes apart: {}), controller peak RSS {}",
        writes(&counts),
        events_written(&counts),
        rss_text(rss)
    );
    controller.stop().await;
    writes(&counts)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = args_or_exit();
    let s = setup(&args).await;
    print_config(&args, &s);
    create_controller_and_parents(&mut args, &s).await;
    let cold = cold_start(&args, &s).await;
    let controller_writes = report_cold_start(&args, &cold);
    run_bound(&args, &s, &cold, controller_writes).await;
    if !args.resync {
        return;
    }
    let resync_writes = full_resync(&args, &s).await;
    if resync_writes != 0 || cold.quiet_writes != 0 {
        std::process::exit(1);
    }
}
