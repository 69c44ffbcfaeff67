//! Fault soak (run through `hack/soak.sh`): replicas of the real `metacontroller` binary
//! (`--leader-election` or `--sharding`) keep N parents (one ConfigMap child each, carrying
//! the parent's `spec.v`) converged while a seeded schedule injects one fault at a time.
//!
//! Each round: a fault starts, parents change (one every 300 ms) for the fault window (8 s),
//! the fault ends, changes stop and the round measures how long until every parent's child
//! carries its current value (bound: `--bound-s`, default 90 s; a miss is a violation).
//! Faults: hook 5xx / garbage / slow / timeout (over the 2 s hook timeout); controller
//! kill -9 and SIGTERM (restarted at once); a replica partitioned (SIGSTOP for the window);
//! a replica joining and one leaving; on the embedded server also API 409 / 429 / 500,
//! 410 (history compacted and watches cut), watch cuts and stalled requests (3 s latency).
//! kube-apiserver restarts are not injected (the shared cluster serves other tests; see
//! `apiserver_crash` for that fault).
//!
//! Checked throughout: no two hook calls of one parent overlap unless the earlier one had
//! already timed out at the client (two processes syncing one parent at once); at the end,
//! every parent has exactly its one child and no child is left without a parent. Reported:
//! faults by kind, worst and per-kind convergence after a fault, violations, and each
//! replica's RSS when the first round starts and at the end.
//!
//! Usage: `soak --binary PATH [--duration-s S] [--seed N] [--mode sharding|leader]
//! [--replicas N] [--server embedded|real] [--parents N] [--bound-s S]`. `--server real`
//! uses `METACONTROLLER_E2E_KUBECONFIG`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_testkit::{unique_name, Fault, TestCluster};
use serde_json::{json, Value};

const HOOK_TIMEOUT: Duration = Duration::from_secs(2);
const WINDOW: Duration = Duration::from_secs(8);

struct Args {
    binary: PathBuf,
    duration: Duration,
    seed: u64,
    sharding: bool,
    replicas: usize,
    real: bool,
    parents: usize,
    bound: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        binary: PathBuf::from("target/release/metacontroller"),
        duration: Duration::from_secs(180),
        seed: 1,
        sharding: true,
        replicas: 2,
        real: false,
        parents: 30,
        bound: Duration::from_secs(90),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let n = || v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--binary" => a.binary = PathBuf::from(&v),
            "--duration-s" => a.duration = Duration::from_secs(n()?),
            "--seed" => a.seed = n()?,
            "--mode" => a.sharding = v == "sharding",
            "--replicas" => a.replicas = n()? as usize,
            "--server" => a.real = v == "real",
            "--parents" => a.parents = n()? as usize,
            "--bound-s" => a.bound = Duration::from_secs(n()?),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

/// xorshift64*: the fault schedule is a function of `--seed`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[derive(Clone, Copy, PartialEq)]
enum HookMode {
    Ok,
    Error,
    Garbage,
    Slow,
    Timeout,
}

/// The hook: answers by mode, records overlapping calls of one parent.
#[derive(Default)]
struct HookState {
    mode: Mutex<Option<HookMode>>,
    in_flight: Mutex<HashMap<String, Vec<(u64, Instant)>>>,
    next_id: Mutex<u64>,
    calls: Mutex<u64>,
    overlaps: Mutex<Vec<String>>,
}

async fn hook(
    state: axum::extract::State<Arc<HookState>>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let parent = &req["parent"];
    let key = format!(
        "{}/{}",
        parent["metadata"]["namespace"].as_str().unwrap_or_default(),
        parent["metadata"]["name"].as_str().unwrap_or_default()
    );
    let replica = headers
        .get("x-metacontroller-replica")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    let id = {
        let mut n = state.next_id.lock().unwrap();
        *n += 1;
        *n
    };
    *state.calls.lock().unwrap() += 1;
    {
        let mut in_flight = state.in_flight.lock().unwrap();
        let calls = in_flight.entry(key.clone()).or_default();
        // A call the client has not given up on yet overlaps this one.
        if calls.iter().any(|(_, t)| t.elapsed() < HOOK_TIMEOUT) {
            state
                .overlaps
                .lock()
                .unwrap()
                .push(format!("{key} (replica {replica})"));
        }
        calls.push((id, Instant::now()));
    }
    let mode = state.mode.lock().unwrap().unwrap_or(HookMode::Ok);
    match mode {
        HookMode::Slow => tokio::time::sleep(Duration::from_millis(1500)).await,
        HookMode::Timeout => tokio::time::sleep(HOOK_TIMEOUT + Duration::from_secs(1)).await,
        _ => {}
    }
    if let Some(calls) = state.in_flight.lock().unwrap().get_mut(&key) {
        calls.retain(|(i, _)| *i != id);
    }
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let v = parent["spec"]["v"].as_str().unwrap_or_default();
    match mode {
        HookMode::Error => (StatusCode::INTERNAL_SERVER_ERROR, "injected").into_response(),
        HookMode::Garbage => (StatusCode::OK, "{not json").into_response(),
        _ => axum::Json(json!({
            "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": format!("{name}-cm")}, "data": {"v": v}}],
        }))
        .into_response(),
    }
}

async fn start_hook(state: Arc<HookState>) -> String {
    let app = axum::Router::new()
        .route("/sync", axum::routing::post(hook))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/sync")
}

/// The replicas: started, killed, stopped, frozen.
struct Replicas {
    binary: PathBuf,
    args: Vec<String>,
    ns: String,
    running: Vec<(usize, Child)>,
    started: usize,
    rss_start: BTreeMap<usize, u64>,
}

impl Replicas {
    fn start(&mut self) {
        let index = self.started;
        self.started += 1;
        let log = std::env::temp_dir().join(format!("soak-replica-{index}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(&self.binary)
            .args(&self.args)
            .env("POD_NAMESPACE", &self.ns)
            .env("RUST_LOG", "warn,metacontroller=info")
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("starting the binary");
        self.running.push((index, child));
    }

    fn signal(&self, pos: usize, sig: &str) {
        let pid = self.running[pos].1.id().to_string();
        let _ = Command::new("kill").args([sig, &pid]).status();
    }

    /// Removes replica `pos` after `sig`, waiting (bounded) for it to exit.
    fn stop(&mut self, pos: usize, sig: &str) {
        self.signal(pos, sig);
        let (_, mut child) = self.running.remove(pos);
        let deadline = Instant::now() + Duration::from_secs(40);
        while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    fn rss(&self) -> BTreeMap<usize, u64> {
        self.running
            .iter()
            .filter_map(|(i, c)| {
                let status = std::fs::read_to_string(format!("/proc/{}/status", c.id())).ok()?;
                let kb = status
                    .lines()
                    .find(|l| l.starts_with("VmRSS:"))?
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()?;
                Some((*i, kb))
            })
            .collect()
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for (_, child) in &mut self.running {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

const FAULTS_ANY: [&str; 8] = [
    "hook-5xx",
    "hook-garbage",
    "hook-slow",
    "hook-timeout",
    "kill-9",
    "sigterm",
    "partition",
    "join-leave",
];
const FAULTS_EMBEDDED: [&str; 6] = [
    "api-409",
    "api-429",
    "api-500",
    "api-410",
    "watch-cut",
    "api-stall",
];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = soak(args).await {
        eprintln!("soak: {e}");
        std::process::exit(1);
    }
}

async fn soak(args: Args) -> Result<(), String> {
    let cluster = if args.real {
        TestCluster::start().await
    } else {
        TestCluster::embedded().await
    };
    if args.real && cluster.is_embedded() {
        return Err("--server real needs METACONTROLLER_E2E_KUBECONFIG".into());
    }
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("soak").await;
    let hook_state = Arc::new(HookState::default());
    let url = start_hook(hook_state.clone()).await;
    let parent = cluster.install_parent_crd("soak").await;
    let label = unique_name("soak");
    let _: metacontroller_api::composite::CompositeController = cluster
        .create_controller(
            &unique_name("soak"),
            &label,
            json!({
                "generateSelector": true,
                "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                    "updateStrategy": {"method": "InPlace"}}],
                "hooks": {"sync": {"webhook": {"url": url, "timeout": "2s"}}},
            }),
        )
        .await;
    let parents: Api<DynamicObject> = parent.api(cluster.client(), Some(&ns));
    let children: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    for i in 0..args.parents {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": parent.api_version(), "kind": parent.kind(),
            "metadata": {"name": format!("p-{i}"), "namespace": ns}, "spec": {"v": "0"},
        }))
        .unwrap();
        parents
            .create(&PostParams::default(), &obj)
            .await
            .map_err(|e| e.to_string())?;
    }
    let mut replica_args = vec![
        "run".to_string(),
        "--kubeconfig".to_string(),
        cluster.kubeconfig_path().display().to_string(),
        format!("--target-label-selector=team={label}"),
        "--metrics-address=0".to_string(),
        "--health-probe-bind-address=0".to_string(),
        format!("--leader-election-id={}", unique_name("soak")),
    ];
    if args.sharding {
        replica_args.extend(["--sharding".to_string(), "--shards=12".to_string()]);
    } else {
        replica_args.push("--leader-election".to_string());
    }
    let mut replicas = Replicas {
        binary: args.binary.clone(),
        args: replica_args,
        ns: ns.clone(),
        running: Vec::new(),
        started: 0,
        rss_start: BTreeMap::new(),
    };
    for _ in 0..args.replicas {
        replicas.start();
    }
    let first = converge_time(&parents, &children, Duration::from_secs(180)).await;
    println!(
        "soak: {} parents converged {:.1} s after start ({} replicas, {}, {} server, seed {})",
        args.parents,
        first.map_or(f64::NAN, |d| d.as_secs_f64()),
        args.replicas,
        if args.sharding { "sharding" } else { "leader" },
        if args.real { "real" } else { "embedded" },
        args.seed
    );
    replicas.rss_start = replicas.rss();
    let mut rng = Rng(args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut kinds: Vec<&str> = FAULTS_ANY.to_vec();
    if !args.real {
        kinds.extend(FAULTS_EMBEDDED);
    }
    let mut by_kind: BTreeMap<&str, (usize, Duration)> = BTreeMap::new();
    let mut violations: Vec<String> = Vec::new();
    let mut version = 0u64;
    let started = Instant::now();
    while started.elapsed() < args.duration {
        let kind = kinds[rng.below(kinds.len())];
        let round = Instant::now();
        let undo = inject(kind, &cluster, &hook_state, &mut replicas, &mut rng);
        let window = Instant::now();
        while window.elapsed() < WINDOW {
            version += 1;
            let name = format!("p-{}", rng.below(args.parents));
            let patch = Patch::Merge(json!({"spec": {"v": version.to_string()}}));
            // A write refused by an injected API fault is simply one change fewer; a stalled
            // one must not stretch the window.
            let params = PatchParams::default();
            let write = parents.patch(&name, &params, &patch);
            let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        undo(&cluster, &hook_state, &mut replicas);
        let took = converge_time(&parents, &children, args.bound).await;
        let entry = by_kind.entry(kind).or_insert((0, Duration::ZERO));
        entry.0 += 1;
        match took {
            Some(t) => {
                entry.1 = entry.1.max(t);
                println!(
                    "soak: {kind:<12} converged {:5.1} s after the fault ended (round {:.1} s)",
                    t.as_secs_f64(),
                    round.elapsed().as_secs_f64()
                );
            }
            None => {
                violations.push(format!("{kind}: not converged within {:?}", args.bound));
                println!("soak: {kind:<12} NOT converged within {:?}", args.bound);
            }
        }
    }
    report(
        &args,
        &parents,
        &children,
        &hook_state,
        &replicas,
        by_kind,
        violations,
    )
    .await;
    Ok(())
}

type Undo = Box<dyn FnOnce(&TestCluster, &HookState, &mut Replicas)>;

/// Starts fault `kind`; returns what ends it.
fn inject(
    kind: &str,
    cluster: &TestCluster,
    hook: &HookState,
    replicas: &mut Replicas,
    rng: &mut Rng,
) -> Undo {
    let set_hook = |mode| *hook.mode.lock().unwrap() = Some(mode);
    let control = cluster.control();
    let api = |fault: Fault| {
        if let Some(c) = &control {
            c.inject(fault)
        }
    };
    let clear: Undo = Box::new(|cluster, hook, _| {
        *hook.mode.lock().unwrap() = None;
        if let Some(c) = cluster.control() {
            c.clear_faults();
        }
    });
    match kind {
        "hook-5xx" => set_hook(HookMode::Error),
        "hook-garbage" => set_hook(HookMode::Garbage),
        "hook-slow" => set_hook(HookMode::Slow),
        "hook-timeout" => set_hook(HookMode::Timeout),
        "api-409" => api(Fault::status(None, None, 40, 409)),
        "api-429" => api(Fault::status(None, None, 40, 429)),
        "api-500" => api(Fault::status(None, None, 40, 500)),
        "api-410" => {
            if let Some(c) = &control {
                c.compact_history();
                c.close_watches();
            }
        }
        "watch-cut" => {
            if let Some(c) = &control {
                c.close_watches();
            }
        }
        "api-stall" => api(Fault {
            verb: None,
            resource: None,
            count: 20,
            action: metacontroller_testkit::FaultAction::Latency(Duration::from_secs(3)),
        }),
        "kill-9" | "sigterm" if !replicas.running.is_empty() => {
            let pos = rng.below(replicas.running.len());
            replicas.stop(pos, if kind == "kill-9" { "-KILL" } else { "-TERM" });
            replicas.start();
        }
        "partition" if !replicas.running.is_empty() => {
            let pos = rng.below(replicas.running.len());
            let index = replicas.running[pos].0;
            replicas.signal(pos, "-STOP");
            return Box::new(move |_, _, replicas| {
                if let Some(pos) = replicas.running.iter().position(|(i, _)| *i == index) {
                    replicas.signal(pos, "-CONT");
                }
            });
        }
        "join-leave" => {
            replicas.start();
            return Box::new(|_, _, replicas| {
                if replicas.running.len() > 1 {
                    replicas.stop(0, "-TERM");
                }
            });
        }
        _ => {}
    }
    clear
}

/// Time until every parent's child carries the parent's `spec.v`; `None` after `bound`.
async fn converge_time(
    parents: &Api<DynamicObject>,
    children: &Api<ConfigMap>,
    bound: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < bound {
        if let (Ok(ps), Ok(cs)) = (
            parents.list(&ListParams::default()).await,
            children.list(&ListParams::default()).await,
        ) {
            let have: HashMap<String, String> = cs
                .items
                .into_iter()
                .filter_map(|c| Some((c.metadata.name?, c.data?.get("v")?.clone())))
                .collect();
            let done = ps.items.iter().all(|p| {
                let name = p.metadata.name.clone().unwrap_or_default();
                let v = p.data["spec"]["v"].as_str().unwrap_or_default();
                have.get(&format!("{name}-cm")).map(String::as_str) == Some(v)
            });
            if done {
                return Some(start.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

async fn report(
    args: &Args,
    parents: &Api<DynamicObject>,
    children: &Api<ConfigMap>,
    hook: &HookState,
    replicas: &Replicas,
    by_kind: BTreeMap<&str, (usize, Duration)>,
    mut violations: Vec<String>,
) {
    let ps = parents
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let cs = children
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let uids: HashMap<String, String> = ps
        .iter()
        .filter_map(|p| Some((p.metadata.uid.clone()?, p.metadata.name.clone()?)))
        .collect();
    let mut per_parent: HashMap<String, usize> = HashMap::new();
    // Ours carry the generated selector's label (a real namespace also holds kube-root-ca.crt).
    let ours = cs.iter().filter(|c| {
        c.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("controller-uid"))
    });
    for c in ours {
        let owner = c
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .and_then(|r| uids.get(&r.uid));
        match owner {
            Some(p) => *per_parent.entry(p.clone()).or_default() += 1,
            None => violations.push(format!(
                "child {} has no parent",
                c.metadata.name.clone().unwrap_or_default()
            )),
        }
    }
    for p in uids.values() {
        match per_parent.get(p).copied().unwrap_or(0) {
            1 => {}
            0 => violations.push(format!("parent {p}: child lost")),
            n => violations.push(format!("parent {p}: {n} children")),
        }
    }
    for o in hook.overlaps.lock().unwrap().iter() {
        violations.push(format!("overlapping hook calls: {o}"));
    }
    let faults: usize = by_kind.values().map(|(n, _)| n).sum();
    let worst = by_kind.values().map(|(_, d)| *d).max().unwrap_or_default();
    println!("\n== soak report ==");
    println!(
        "mode {} | server {} | replicas {} | parents {} | seed {} | duration {:?}",
        if args.sharding { "sharding" } else { "leader" },
        if args.real { "real" } else { "embedded" },
        args.replicas,
        args.parents,
        args.seed,
        args.duration
    );
    println!(
        "faults injected: {faults}; hook calls: {}",
        *hook.calls.lock().unwrap()
    );
    for (kind, (n, d)) in &by_kind {
        println!(
            "  {kind:<12} x{n:<3} worst convergence after it {:5.1} s",
            d.as_secs_f64()
        );
    }
    println!(
        "worst convergence after a fault: {:.1} s",
        worst.as_secs_f64()
    );
    let end = replicas.rss();
    for (i, kb) in &replicas.rss_start {
        let at_end = end.get(i).map_or("gone".to_string(), |e| {
            format!("{:.1} MiB", *e as f64 / 1024.0)
        });
        println!(
            "  replica {i}: RSS start {:.1} MiB, end {at_end}",
            *kb as f64 / 1024.0
        );
    }
    for (i, kb) in &end {
        if !replicas.rss_start.contains_key(i) {
            println!(
                "  replica {i} (started during the soak): RSS end {:.1} MiB",
                *kb as f64 / 1024.0
            );
        }
    }
    println!("violations: {}", violations.len());
    for v in &violations {
        println!("  {v}");
    }
}
