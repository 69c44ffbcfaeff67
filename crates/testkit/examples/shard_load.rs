//! Sharding figures (run through `hack/load-shards.sh`): one replica against several
//! `--sharding` replicas of the real `metacontroller` binary, at the same load.
//!
//! For each replica count (default `1,3`) a fresh embedded API server gets N parents (default
//! 6,000) of one CompositeController, each wanting 3 ConfigMaps and a status, and a local hook
//! that answers after 20 ms. Then the replicas start (one replica runs without `--sharding`,
//! exactly as today). Reported per run: time until every parent has its status and all 3N
//! ConfigMaps exist, hook calls, parents synced by more than one replica, hook calls of one
//! parent that overlapped in time (must be 0), writes in a quiet period after convergence
//! (must be 0; Lease renewals are counted apart), and each replica's peak RSS and peak
//! anonymous memory (`RssAnon` sampled every 50 ms: heap and stacks without the binary's code
//! pages); then the largest replica's peaks against the single replica's, and the RSS above
//! the peak RSS of an idle process (the binary with no controller: the fixed cost every
//! replica pays). The binary is read whole first, so all of it is in the page cache, as after
//! an image pull (the code pages a process maps depend on it).
//!
//! With `--kill-after-s S`, each multi-replica run SIGKILLs its first replica S seconds in
//! (mid-convergence, or after it: the run then waits 25 s for the takeover) and reports,
//! from the hook's log of calls, when the survivors first synced a parent the dead replica
//! had synced, when the last parent of the dead replica's shards that had not converged at
//! the kill converged (the "within lease + 10 s"), how long after the kill everything
//! had converged, the hook calls made since
//! the kill, and the ConfigMap create requests (exactly 3 per parent: nothing created
//! twice); no RSS comparison is made for such runs.
//!
//! With `--scale S1,S2`, each multi-replica run starts with one replica, starts the others S1
//! seconds in and SIGTERMs the second replica S2 seconds in (1 → N → N-1 under load), then
//! reports the same guarantees: no overlapping calls of one parent, exactly 3 ConfigMap
//! creates per parent, no quiet writes.
//!
//! Usage: `shard_load --binary PATH [--parents N] [--replicas 1,3] [--workers N]
//! [--hook-delay-ms N] [--shards N] [--kill-after-s S] [--scale S1,S2] [--log-level L]`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{crd, Control, CrdBuilder, TestCluster};
use metacontroller_workqueue::shard_of;
use serde_json::{json, Value};

struct Args {
    binary: PathBuf,
    parents: usize,
    replicas: Vec<usize>,
    workers: u32,
    shards: u32,
    hook_delay: Duration,
    kill_after: Option<Duration>,
    /// `--scale S1,S2`: multi-replica runs start with one replica, start the others S1
    /// seconds in and SIGTERM the second S2 seconds in (1 → N → N-1).
    scale: Option<(Duration, Duration)>,
    /// `--log-level` of the replicas (their logs go to `$TMPDIR/shard_load-<i>.log`).
    log_level: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        binary: PathBuf::from("target/release/metacontroller"),
        parents: 6000,
        replicas: vec![1, 3],
        workers: 5,
        shards: 60,
        hook_delay: Duration::from_millis(20),
        kill_after: None,
        scale: None,
        log_level: "warn".to_string(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--binary" => args.binary = PathBuf::from(&value),
            "--parents" => args.parents = number()? as usize,
            "--workers" => args.workers = number()? as u32,
            "--shards" => args.shards = number()? as u32,
            "--hook-delay-ms" => args.hook_delay = Duration::from_millis(number()?),
            "--kill-after-s" => args.kill_after = Some(Duration::from_secs(number()?)),
            "--scale" => {
                let (join, leave) = value
                    .split_once(',')
                    .ok_or_else(|| format!("--scale {value}: want JOIN_S,LEAVE_S"))?;
                let secs = |v: &str| {
                    v.trim()
                        .parse::<u64>()
                        .map(Duration::from_secs)
                        .map_err(|e| format!("--scale {v}: {e}"))
                };
                let (join, leave) = (secs(join)?, secs(leave)?);
                if leave <= join {
                    return Err("--scale: the leave time must come after the join time".into());
                }
                args.scale = Some((join, leave));
            }
            "--log-level" => args.log_level = value,
            "--replicas" => {
                args.replicas = value
                    .split(',')
                    .map(|v| v.trim().parse::<usize>().map_err(|e| format!("{v}: {e}")))
                    .collect::<Result<_, _>>()?
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(args)
}

/// One hook call: which replica, which parent, when it arrived and was answered.
struct Call {
    replica: String,
    parent: String,
    start: Instant,
    end: Instant,
}

type Calls = Arc<Mutex<Vec<Call>>>;

/// The hook: 3 ConfigMaps per parent; status counts the observed children.
async fn start_hook(delay: Duration) -> (String, Calls) {
    let calls: Calls = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("hook listener");
    let addr = listener.local_addr().expect("hook address");
    let app = axum::Router::new().fallback({
        let calls = calls.clone();
        move |request: Request<Body>| {
            let calls = calls.clone();
            async move {
                let start = Instant::now();
                let replica = request
                    .headers()
                    .get("x-metacontroller-replica")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("single")
                    .to_string();
                let bytes = axum::body::to_bytes(request.into_body(), 64 << 20)
                    .await
                    .unwrap_or_default();
                let req: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let name = req["parent"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let observed = req["children"]["ConfigMap.v1"]
                    .as_object()
                    .map_or(0, |m| m.len());
                let children: Vec<Value> = (0..3)
                    .map(|i| {
                        json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": format!("{name}-{i}")},
                               "data": {"index": i.to_string()}})
                    })
                    .collect();
                tokio::time::sleep(delay).await;
                calls.lock().unwrap_or_else(|p| p.into_inner()).push(Call {
                    replica,
                    parent: name,
                    start,
                    end: Instant::now(),
                });
                axum::Json(json!({"children": children, "status": {"children": observed}}))
            }
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/sync"), calls)
}

/// A `/proc/<pid>/status` field in KiB, as MiB (Linux).
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Peak resident set size of a process (`VmHWM`), in MiB.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmHWM:")
}

/// The highest `RssAnon` (heap, stacks: the process's private memory, without the binary's
/// code pages, which replicas on one node share) of each process, sampled every 50 ms until
/// the task is aborted. The kernel keeps no peak of it.
fn sample_peak_anon(pids: Vec<u32>) -> (Arc<Mutex<Vec<f64>>>, tokio::task::JoinHandle<()>) {
    let peaks = Arc::new(Mutex::new(vec![0.0; pids.len()]));
    let task = tokio::spawn({
        let peaks = peaks.clone();
        async move {
            loop {
                for (i, pid) in pids.iter().enumerate() {
                    if let Some(anon) = status_mib(*pid, "RssAnon:") {
                        let mut peaks = peaks.lock().unwrap_or_else(|p| p.into_inner());
                        peaks[i] = f64::max(peaks[i], anon);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    (peaks, task)
}

fn spawn(
    args: &Args,
    cluster: &TestCluster,
    ns: &str,
    sharded: bool,
    i: usize,
) -> tokio::process::Child {
    let log = std::env::temp_dir().join(format!("shard_load-{i}.log"));
    let log = std::fs::File::create(log).expect("creating the controller log");
    let err = log.try_clone().expect("log handle");
    let mut cmd = tokio::process::Command::new(&args.binary);
    cmd.arg("run")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .arg(format!("--workers={}", args.workers))
        .arg("--metrics-address=0")
        .arg("--health-probe-bind-address=0")
        .arg(format!("--log-level={}", args.log_level))
        .env("POD_NAMESPACE", ns)
        // As a Deployment runs it: a developer's RUST_BACKTRACE=1 makes every error capture a
        // backtrace, which maps the unwind tables (~1.2 MiB) and costs CPU in every replica.
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE");
    if sharded {
        cmd.arg("--sharding")
            .arg(format!("--shards={}", args.shards));
    }
    cmd.stdout(Stdio::from(log))
        .stderr(Stdio::from(err))
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", args.binary.display()))
}

fn writes(counts: &BTreeMap<(String, String), u64>, of: impl Fn(&str) -> bool) -> u64 {
    counts
        .iter()
        .filter(|((verb, resource), _)| {
            matches!(verb.as_str(), "create" | "update" | "patch" | "delete") && of(resource)
        })
        .map(|(_, n)| n)
        .sum()
}

/// What one run measured.
struct Outcome {
    /// Whether its guarantees held (converged, no quiet writes, no overlapping calls).
    ok: bool,
    /// Peak RSS of each replica, MiB.
    rss: Vec<f64>,
    /// Peak anonymous memory of each replica, MiB.
    anon: Vec<f64>,
    /// Whether a replica was killed or the group scaled (peaks missing or not comparable).
    killed: bool,
    converge: Duration,
}

/// Peak RSS of the binary running with no controller at all (the fixed cost of a process:
/// code, runtime, TLS, client, metrics), against an API server with only the CRDs.
async fn idle_rss(args: &Args) -> Option<(f64, f64)> {
    let cluster = TestCluster::embedded().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("idle").await;
    let mut child = spawn(args, &cluster, &ns, true, 99);
    let (anon, sampler) = sample_peak_anon(vec![child.id().unwrap_or(0)]);
    tokio::time::sleep(Duration::from_secs(8)).await;
    sampler.abort();
    let rss = peak_rss_mib(child.id().unwrap_or(0));
    let _ = child.start_kill();
    let _ = child.wait().await;
    let anon = anon.lock().unwrap_or_else(|p| p.into_inner())[0];
    Some((rss?, anon))
}

/// Creates the CompositeController of the run: parents of `parents_crd` own ConfigMaps,
/// synced by the hook at `url`.
async fn create_controller(cluster: &TestCluster, parents_crd: &CrdBuilder, url: &str) {
    let cc: Value = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "load"},
        "spec": {
            "parentResource": {"apiVersion": parents_crd.api_version(), "resource": parents_crd.plural()},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                "updateStrategy": {"method": "InPlace"}}],
            "generateSelector": true,
            "hooks": {"sync": {"webhook": {"url": url}}}
        }
    });
    let _: CompositeController = cluster.create_controller_object(cc).await;
}

/// Creates `n` parents named `p<i>` through `parents` (32 at a time).
async fn create_parents(parents: &Api<DynamicObject>, n: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    let chunk = n.div_ceil(32).max(1);
    for start in (0..n).step_by(chunk) {
        let parents = parents.clone();
        tasks.spawn(async move {
            for i in start..(start + chunk).min(n) {
                let p: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "load.example.com/v1", "kind": "LoadParent",
                    "metadata": {"name": format!("p{i}")}, "spec": {}
                }))
                .expect("parent");
                parents
                    .create(&PostParams::default(), &p)
                    .await
                    .expect("creating a parent");
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// A run's cluster with its load in place: N parents of one CompositeController and the
/// hook's log of calls.
struct Load {
    cluster: TestCluster,
    control: Control,
    ns: String,
    calls: Calls,
    parents: Api<DynamicObject>,
}

/// Setup: a fresh embedded API server, the CRDs, the hook, the CompositeController and
/// `args.parents` parents.
async fn create_load(args: &Args) -> Load {
    let cluster = TestCluster::embedded().await;
    let control = cluster.control().expect("embedded");
    cluster.install_metacontroller_crds().await;
    let parents_crd = crd("load.example.com", "v1", "LoadParent", "loadparents");
    cluster.install_crd(&parents_crd.build()).await;
    let ns = cluster.create_namespace("load").await;
    let (url, calls) = start_hook(args.hook_delay).await;
    create_controller(&cluster, &parents_crd, &url).await;
    let parents = parents_crd.api(cluster.client(), Some(&ns));
    create_parents(&parents, args.parents).await;
    Load {
        cluster,
        control,
        ns,
        calls,
        parents,
    }
}

/// The replica processes of a run and what was done to them.
struct Group {
    children: Vec<tokio::process::Child>,
    replicas: usize,
    sharded: bool,
    /// `--scale` of a multi-replica run.
    scale: Option<(Duration, Duration)>,
    /// How many replicas start at once (1 when scaling).
    initial: usize,
    joined_at: Option<Instant>,
    left_at: Option<Instant>,
    killed_at: Option<Instant>,
}

impl Group {
    /// Starts the first replicas (all of them, or one with `--scale`).
    fn start(args: &Args, load: &Load, replicas: usize) -> Group {
        let sharded = replicas > 1;
        let scale = args.scale.filter(|_| sharded);
        let initial = if scale.is_some() { 1 } else { replicas };
        let children = (0..initial)
            .map(|i| spawn(args, &load.cluster, &load.ns, sharded, i))
            .collect();
        Group {
            children,
            replicas,
            sharded,
            scale,
            initial,
            joined_at: None,
            left_at: None,
            killed_at: None,
        }
    }

    /// The pids of the running replicas.
    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.id().unwrap_or(0)).collect()
    }

    /// Whether the run's SIGKILL (`--kill-after-s`, multi-replica runs) is still to come.
    fn kill_pending(&self, args: &Args) -> bool {
        args.kill_after.is_some() && self.replicas > 1 && self.killed_at.is_none()
    }

    /// Whether the run's scale-down (`--scale`) is still to come.
    fn scale_pending(&self) -> bool {
        self.scale.is_some() && self.left_at.is_none()
    }

    /// What is due `started.elapsed()` into the run: with `--scale`, start the others at
    /// the join time and SIGTERM the second at the leave time; with `--kill-after-s`,
    /// SIGKILL the first.
    fn act(&mut self, args: &Args, load: &Load, started: Instant) {
        if let Some((join, leave)) = self.scale {
            if self.joined_at.is_none() && started.elapsed() >= join {
                let (sharded, replicas) = (self.sharded, self.replicas);
                self.children.extend(
                    (self.initial..replicas)
                        .map(|i| spawn(args, &load.cluster, &load.ns, sharded, i)),
                );
                self.joined_at = Some(Instant::now());
            }
            if self.joined_at.is_some() && self.left_at.is_none() && started.elapsed() >= leave {
                // Scale down as a Deployment does: SIGTERM, then the process hands over.
                if let Some(pid) = self.children.get(1).and_then(tokio::process::Child::id) {
                    let _ = std::process::Command::new("kill")
                        .args(["-TERM", &pid.to_string()])
                        .status();
                }
                self.left_at = Some(Instant::now());
            }
        }
        if let (Some(after), true) = (args.kill_after, self.kill_pending(args)) {
            if started.elapsed() >= after {
                let _ = self.children[0].start_kill();
                self.killed_at = Some(Instant::now());
            }
        }
    }

    /// Stops every replica.
    async fn stop(&mut self) {
        for c in &mut self.children {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }
}

/// Polls every 500 ms, doing what is due to the group, until every parent has its status
/// (none of them is still to be killed or scaled down) and all 3N ConfigMaps exist;
/// `done_at` gets when each parent was first seen converged. Returns the time it took.
async fn wait_converged(
    args: &Args,
    load: &Load,
    group: &mut Group,
    started: Instant,
    done_at: &mut HashMap<String, Instant>,
) -> Duration {
    let n = args.parents;
    let configmaps: Api<ConfigMap> = Api::namespaced(load.cluster.client(), &load.ns);
    let deadline = Duration::from_secs(1800);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        group.act(args, load, started);
        assert!(
            started.elapsed() < deadline,
            "not converged within {deadline:?}"
        );
        let list = load
            .parents
            .list(&ListParams::default())
            .await
            .expect("listing parents");
        let now = Instant::now();
        let mut done = 0;
        for p in list
            .items
            .iter()
            .filter(|p| p.data["status"]["children"] == json!(3))
        {
            done += 1;
            if let Some(name) = &p.metadata.name {
                done_at.entry(name.clone()).or_insert(now);
            }
        }
        if done == n && !group.kill_pending(args) && !group.scale_pending() {
            let cms = configmaps
                .list_metadata(&ListParams::default())
                .await
                .expect("listing configmaps");
            if cms.items.len() == 3 * n {
                return started.elapsed();
            }
        }
    }
}

/// The writes after convergence.
struct Quiet {
    /// ConfigMap create requests of the whole run.
    configmap_creates: u64,
    /// Writes in the quiet period, Events and Leases apart.
    writes: u64,
    /// The quiet period's writes but Lease renewals, by verb and resource.
    by: Vec<((String, String), u64)>,
    lease_writes: u64,
}

/// After convergence: the takeover's time after a kill, the run's ConfigMap creates, then
/// a quiet period in which nothing changes and only Lease renewals may be written.
async fn quiet_period(control: &Control, killed_at: Option<Instant>) -> Quiet {
    if let Some(killed) = killed_at {
        // A kill after convergence changes no status: give the takeover its time (lease
        // 15 s + rounds + relist) so its hook calls are counted.
        let takeover = Duration::from_secs(25);
        tokio::time::sleep(takeover.saturating_sub(killed.elapsed())).await;
    }
    let configmap_creates = control
        .request_counts()
        .get(&("create".to_string(), "configmaps".to_string()))
        .copied()
        .unwrap_or(0);
    // A fixed pause, not `settle`: Lease renewals never let the write counter stand still.
    tokio::time::sleep(Duration::from_secs(3)).await;
    control.reset_counts();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let counts = control.request_counts();
    let by = counts
        .iter()
        .filter(|((v, r), _)| {
            matches!(v.as_str(), "create" | "update" | "patch" | "delete") && r != "leases"
        })
        .map(|(k, n)| (k.clone(), *n))
        .collect();
    Quiet {
        configmap_creates,
        writes: writes(&counts, |r| r != "events" && r != "leases"),
        by,
        lease_writes: writes(&counts, |r| r == "leases"),
    }
}

/// What the hook's log of calls tells.
struct CallFigures<'a> {
    /// Calls of one parent that overlapped in time.
    overlaps: usize,
    /// Parents synced by more than one replica.
    multi: usize,
    per_replica: BTreeMap<&'a str, usize>,
}

/// Reads the hook's log of calls.
fn call_figures(calls: &[Call]) -> CallFigures<'_> {
    let mut by_parent: HashMap<&str, Vec<&Call>> = HashMap::new();
    for c in calls.iter() {
        by_parent.entry(&c.parent).or_default().push(c);
    }
    let mut overlaps = 0;
    let mut multi = 0;
    for list in by_parent.values_mut() {
        list.sort_by_key(|c| c.start);
        overlaps += list.windows(2).filter(|w| w[1].start < w[0].end).count();
        let who: HashSet<&str> = list.iter().map(|c| c.replica.as_str()).collect();
        if who.len() > 1 {
            multi += 1;
        }
    }
    let mut per_replica: BTreeMap<&str, usize> = BTreeMap::new();
    for c in calls.iter() {
        *per_replica.entry(&c.replica).or_default() += 1;
    }
    CallFigures {
        overlaps,
        multi,
        per_replica,
    }
}

/// The run's first lines: convergence, hook calls, handoffs and overlaps, the quiet period.
fn report_run(
    args: &Args,
    group: &Group,
    converge: Duration,
    calls: &[Call],
    figures: &CallFigures<'_>,
    quiet: &Quiet,
) {
    let n = args.parents;
    let (multi, overlaps) = (figures.multi, figures.overlaps);
    println!(
        "{} replica(s){}: {n} parents x 3 ConfigMaps converged in {:.2}s \
         (hook delay {:?}, {} workers each)",
        group.replicas,
        if group.sharded { " --sharding" } else { "" },
        converge.as_secs_f64(),
        args.hook_delay,
        args.workers
    );
    println!(
        "    hook calls {} ({:.2} per parent), per replica {:?}",
        calls.len(),
        calls.len() as f64 / n as f64,
        figures.per_replica.values().collect::<Vec<_>>()
    );
    println!(
        "    parents synced by more than one replica (handoffs) {multi}, overlapping calls of one parent {overlaps}"
    );
    let (quiet_writes, lease_writes, quiet_by) = (quiet.writes, quiet.lease_writes, &quiet.by);
    println!(
        "    quiet 10 s after convergence: {quiet_writes} writes (must be 0), {lease_writes} Lease writes; other writes {quiet_by:?}"
    );
}

/// The scaled run's line (1 -> N -> N-1).
fn report_scale(group: &Group, started: Instant, multi: usize, quiet: &Quiet, n: usize) {
    let (Some(joined), Some(left)) = (group.joined_at, group.left_at) else {
        return;
    };
    let (replicas, configmap_creates) = (group.replicas, quiet.configmap_creates);
    println!(
        "    scaled 1 -> {replicas} at {:.1}s, SIGTERM to one at {:.1}s: {multi} parents synced by \
         more than one replica over the run, ConfigMap create requests {configmap_creates} \
         (3 per parent: {})",
        joined.duration_since(started).as_secs_f64(),
        left.duration_since(started).as_secs_f64(),
        3 * n
    );
}

/// One run with `replicas` processes.
async fn run(args: &Args, replicas: usize) -> Outcome {
    let n = args.parents;
    let load = create_load(args).await;
    let started = Instant::now();
    let mut group = Group::start(args, &load, replicas);
    let (anon_peaks, sampler) = sample_peak_anon(group.pids());
    // When each parent was first seen converged (the kill report times the dead replica's).
    let mut done_at: HashMap<String, Instant> = HashMap::new();
    let converge = wait_converged(args, &load, &mut group, started, &mut done_at).await;
    let quiet = quiet_period(&load.control, group.killed_at).await;
    let peaks: Vec<f64> = group
        .children
        .iter()
        .filter_map(|c| peak_rss_mib(c.id().unwrap_or(0)))
        .collect();
    sampler.abort();
    let anon = anon_peaks.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let rss: Vec<String> = peaks.iter().map(|m| format!("{m:.1} MiB")).collect();
    let anon_text: Vec<String> = anon.iter().map(|m| format!("{m:.1} MiB")).collect();

    // Taken out of the mutex: the hook server is done, and no guard may live across awaits.
    let calls = std::mem::take(&mut *load.calls.lock().unwrap_or_else(|p| p.into_inner()));
    let figures = call_figures(&calls);
    report_run(args, &group, converge, &calls, &figures, &quiet);
    if let Some(killed) = group.killed_at {
        report_kill(&KillRun {
            calls: &calls,
            killed,
            started,
            converge,
            configmap_creates: quiet.configmap_creates,
            parents: n,
            ns: &load.ns,
            shards: args.shards,
            done_at: &done_at,
        });
    }
    report_scale(&group, started, figures.multi, &quiet, n);
    println!("    peak RSS per replica: {}", rss.join(", "));
    println!(
        "    peak anonymous memory per replica: {}",
        anon_text.join(", ")
    );
    group.stop().await;
    let changed = group.killed_at.is_some() || group.scale.is_some();
    Outcome {
        ok: quiet.writes == 0
            && figures.overlaps == 0
            && (!changed || quiet.configmap_creates == 3 * n as u64),
        killed: changed,
        rss: peaks,
        anon,
        converge,
    }
}

/// A run with a SIGKILL, as `report_kill` reads it.
struct KillRun<'a> {
    /// The hook's log of calls.
    calls: &'a [Call],
    killed: Instant,
    started: Instant,
    converge: Duration,
    configmap_creates: u64,
    parents: usize,
    ns: &'a str,
    shards: u32,
    /// When each parent was first seen converged.
    done_at: &'a HashMap<String, Instant>,
}

/// What the hook saw around the SIGKILL: the dead replica is the one that made no call after
/// it; its parents are those it synced; the survivors' first call for one of them after the
/// kill is the handoff.
fn report_kill(run: &KillRun<'_>) {
    let KillRun {
        calls,
        killed,
        started,
        converge,
        configmap_creates,
        parents: n,
        ns,
        shards,
        done_at,
    } = *run;
    let replicas: HashSet<&str> = calls.iter().map(|c| c.replica.as_str()).collect();
    let Some(dead) = replicas
        .iter()
        .copied()
        .find(|r| !calls.iter().any(|c| c.replica == *r && c.start > killed))
    else {
        println!("    kill: every replica made calls after the kill (none identified as dead)");
        return;
    };
    let orphaned: HashSet<&str> = calls
        .iter()
        .filter(|c| c.replica == dead)
        .map(|c| c.parent.as_str())
        .collect();
    let handoff = calls
        .iter()
        .filter(|c| c.replica != dead && c.start > killed && orphaned.contains(c.parent.as_str()))
        .map(|c| c.start.duration_since(killed))
        .min();
    // Its parents: every parent of a shard it held (the shards of the parents it synced),
    // including those it had not reached; the ones not converged at the kill are the handoff.
    let key = |name: &str| shard_of(&format!("{ns}/{name}"), shards);
    let held: HashSet<u32> = orphaned.iter().map(|p| key(p)).collect();
    let handed_over: Vec<Duration> = done_at
        .iter()
        .filter(|(name, at)| **at > killed && held.contains(&key(name)))
        .map(|(_, at)| at.duration_since(killed))
        .collect();
    println!(
        "    the dead replica's {} shards: {} parents converged after the kill, the last {:.1}s after it",
        held.len(),
        handed_over.len(),
        handed_over.iter().max().map_or(0.0, Duration::as_secs_f64)
    );
    let after = converge.saturating_sub(killed.duration_since(started));
    let since_kill: Vec<&Call> = calls.iter().filter(|c| c.start > killed).collect();
    let since_kill_parents: HashSet<&str> = since_kill.iter().map(|c| c.parent.as_str()).collect();
    println!(
        "    kill -9 of {dead} at {:.1}s: it had synced {} parents; first survivor sync of one \
         of them {} after the kill; all converged {:.1}s after the kill (hook calls since the \
         kill: {} for {} parents); ConfigMap create requests {configmap_creates} (3 per parent: {})",
        killed.duration_since(started).as_secs_f64(),
        orphaned.len(),
        handoff.map_or("never".to_string(), |d| format!("{:.1}s", d.as_secs_f64())),
        after.as_secs_f64(),
        since_kill.len(),
        since_kill_parents.len(),
        3 * n
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("shard_load: {e}");
            std::process::exit(2);
        }
    };
    if !args.binary.exists() {
        eprintln!(
            "shard_load: {} not found (cargo build --release -p metacontroller)",
            args.binary.display()
        );
        std::process::exit(2);
    }
    // The kernel maps the cached pages of the binary around each page a process touches, so
    // the file-backed part of RSS depends on how much of the file is in the page cache: all of
    // it after an image pull or a build, less when it was last read long ago. Read it whole so
    // the figures do not depend on what ran before.
    if let Err(e) = std::fs::read(&args.binary) {
        eprintln!("shard_load: reading {}: {e}", args.binary.display());
        std::process::exit(2);
    }
    let idle = idle_rss(&args).await;
    if let Some((rss, anon)) = idle {
        println!(
            "idle process (no controller, --sharding): peak RSS {rss:.1} MiB, peak anonymous {anon:.1} MiB"
        );
    }
    let idle = idle.map(|(rss, _)| rss);
    let mut ok = true;
    let mut single: Option<(f64, f64, Duration)> = None;
    for r in args.replicas.clone() {
        let outcome = run(&args, r.max(1)).await;
        ok &= outcome.ok;
        if outcome.killed {
            continue;
        }
        let peak = outcome.rss.iter().copied().fold(0.0, f64::max);
        let peak_anon = outcome.anon.iter().copied().fold(0.0, f64::max);
        match single {
            None if r <= 1 => single = Some((peak, peak_anon, outcome.converge)),
            Some((one, one_anon, one_time)) if r > 1 && one > 0.0 => {
                println!(
                    "    {r} replicas vs 1: largest replica peak RSS {:.0}% of the single replica's \
                     (anonymous memory {:.0}%), converge time {:.0}%",
                    100.0 * peak / one,
                    100.0 * peak_anon / one_anon.max(f64::MIN_POSITIVE),
                    100.0 * outcome.converge.as_secs_f64() / one_time.as_secs_f64()
                );
                if let Some(idle) = idle {
                    // RSS = fixed + cache share: what the ratio would be with a zero-cost process.
                    let cache = one - idle;
                    if cache > 0.0 {
                        println!(
                            "    above the idle process: {:.1} MiB of {:.1} MiB ({:.0}%)",
                            peak - idle,
                            cache,
                            100.0 * (peak - idle) / cache
                        );
                    }
                }
            }
            _ => {}
        }
    }
    if !ok {
        std::process::exit(1);
    }
}
