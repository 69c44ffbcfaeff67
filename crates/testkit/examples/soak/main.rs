//! Fault soak (run through `hack/soak.sh`): replicas of the real `metacontroller` binary
//! (`--leader-election` or `--sharding`) keep N parents (one ConfigMap child each, carrying
//! the parent's `spec.v`) converged while a seeded schedule injects one fault at a time.
//!
//! Each round: a fault starts, parents change (one every 300 ms) for the fault window (8 s;
//! `--partition-s` for a partition), the fault ends, changes stop and the round measures how
//! long until every parent's child carries its current value (bound: `--bound-s`, default
//! 90 s; a miss is a violation).
//!
//! Every replica reaches the API server through its own TCP proxy (`TcpProxy`), so the API
//! link faults hit one replica or all of them, on either server. Faults: hook 5xx / garbage /
//! slow / timeout (over the 2 s hook timeout); controller kill -9 and SIGTERM (restarted at
//! once); a replica frozen (SIGSTOP for the window); a replica partitioned (its API link
//! stalled for longer than the lease, then healed); one replica's connections cut; every
//! replica's connections cut (watch cuts); every API link stalled; a replica joining and one
//! leaving. On the embedded server also API 409 / 429 / 500 and 410 (history compacted and
//! watches cut). On a real server given `--cluster-dir DIR` (a `cluster.sh` directory) also
//! kube-apiserver kill -9 and restart (`cluster.sh up DIR`). kube-apiserver's own answers
//! cannot be faked (TLS passes the proxy untouched): there, 409s come from real conflicts and
//! are counted from the replicas' `rest_client_requests_total`.
//!
//! Checked throughout: no two hook calls of one parent overlap unless the earlier one had
//! already timed out at the client (two processes syncing one parent at once; every answer
//! takes `--hook-delay-ms` so that such calls meet); at the end, every parent has exactly its
//! one child and no child is left without a parent. `--break overlap|lost|duplicate` breaks
//! the system on purpose to show each check can fail.
//!
//! Usage: `soak --binary PATH [--duration-s S] [--seed N] [--mode sharding|leader]
//! [--replicas N] [--server embedded|real] [--parents N] [--bound-s S] [--partition-s S]
//! [--hook-delay-ms MS] [--cluster-dir DIR] [--cluster-sh PATH] [--break KIND]`.
//! `--server real` uses `METACONTROLLER_E2E_KUBECONFIG`.

mod faults;
mod hook;
mod replicas;
mod report;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_testkit::{kubeconfig_server, unique_name, TestCluster};
use serde_json::json;

use faults::{ClusterDir, FAULTS_ANY, FAULTS_CLUSTER_DIR, FAULTS_EMBEDDED};
use hook::{Break, HookState};
use replicas::Replicas;

const WINDOW: Duration = Duration::from_secs(8);

/// Command-line settings.
pub struct Args {
    binary: PathBuf,
    duration: Duration,
    seed: u64,
    sharding: bool,
    replicas: usize,
    real: bool,
    parents: usize,
    bound: Duration,
    partition: Duration,
    hook_delay: Duration,
    cluster_dir: Option<PathBuf>,
    cluster_sh: PathBuf,
    broken: Option<Break>,
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
        partition: Duration::from_secs(25),
        hook_delay: Duration::from_millis(50),
        cluster_dir: None,
        cluster_sh: PathBuf::from("../shared/k8s/cluster.sh"),
        broken: None,
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
            "--replicas" => a.replicas = n()?.max(1) as usize,
            "--server" => a.real = v == "real",
            "--parents" => a.parents = n()? as usize,
            "--bound-s" => a.bound = Duration::from_secs(n()?),
            "--partition-s" => a.partition = Duration::from_secs(n()?),
            "--hook-delay-ms" => a.hook_delay = Duration::from_millis(n()?),
            "--cluster-dir" => a.cluster_dir = Some(absolute(&v)?),
            "--cluster-sh" => a.cluster_sh = PathBuf::from(&v),
            "--break" => a.broken = Some(parse_break(&v)?),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

fn parse_break(v: &str) -> Result<Break, String> {
    match v {
        "overlap" => Ok(Break::Overlap),
        "lost" => Ok(Break::Lost),
        "duplicate" => Ok(Break::Duplicate),
        _ => Err(format!("--break {v}: expected overlap, lost or duplicate")),
    }
}

/// `cluster.sh` records absolute paths in its processes' command lines.
fn absolute(path: &str) -> Result<PathBuf, String> {
    std::fs::canonicalize(path).map_err(|e| format!("{path}: {e}"))
}

/// xorshift64*: the fault schedule is a function of `--seed`.
pub struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

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

/// The parents, their children and the controller, set up in a fresh namespace.
struct Setup {
    ns: String,
    label: String,
    parents: Api<DynamicObject>,
    children: Api<ConfigMap>,
}

async fn setup(cluster: &TestCluster, args: &Args, url: &str) -> Result<Setup, String> {
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("soak").await;
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
        .map_err(|e| e.to_string())?;
        parents
            .create(&PostParams::default(), &obj)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(Setup {
        ns,
        label,
        parents,
        children,
    })
}

/// The replicas' flags (the kubeconfig and metrics address are added per replica).
fn replica_args(args: &Args, label: &str) -> Vec<String> {
    let mut v = vec![
        "run".to_string(),
        format!("--target-label-selector=team={label}"),
        "--health-probe-bind-address=0".to_string(),
        format!("--leader-election-id={}", unique_name("soak")),
    ];
    match (args.broken, args.sharding) {
        (Some(Break::Overlap), _) => {}
        (_, true) => v.extend(["--sharding".to_string(), "--shards=12".to_string()]),
        (_, false) => v.push("--leader-election".to_string()),
    }
    v
}

/// The fault kinds this run draws from.
fn fault_kinds(args: &Args) -> Vec<&'static str> {
    let mut kinds: Vec<&str> = FAULTS_ANY.to_vec();
    if !args.real {
        kinds.extend(FAULTS_EMBEDDED);
    } else if args.cluster_dir.is_some() {
        kinds.extend(FAULTS_CLUSTER_DIR);
    }
    kinds
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
    let hook_state = Arc::new(HookState::new(args.hook_delay, args.broken));
    let url = hook::start_hook(hook_state.clone()).await;
    let s = setup(&cluster, &args, &url).await?;
    let dir = std::env::temp_dir().join(format!("soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let mut replicas = Replicas {
        binary: args.binary.clone(),
        args: replica_args(&args, &s.label),
        ns: s.ns.clone(),
        upstream: kubeconfig_server(&kubeconfig).map_err(|e| format!("kubeconfig: {e}"))?,
        kubeconfig,
        dir: dir.clone(),
        running: Vec::new(),
        started: 0,
        rss: BTreeMap::new(),
        requests: BTreeMap::new(),
    };
    for _ in 0..args.replicas {
        replicas.start().await?;
    }
    let first = converge_time(&s.parents, &s.children, Duration::from_secs(180)).await;
    println!(
        "soak: {} parents converged {:.1} s after start ({} replicas, {}, {} server, seed {}, logs in {})",
        args.parents,
        first.map_or(f64::NAN, |d| d.as_secs_f64()),
        args.replicas,
        if args.sharding { "sharding" } else { "leader" },
        if args.real { "real" } else { "embedded" },
        args.seed,
        dir.display()
    );
    replicas.sample_rss();
    let rounds = run_rounds(&args, &cluster, &hook_state, &mut replicas, &s).await?;
    replicas.scrape().await;
    replicas.sample_rss();
    report::report(
        &args,
        &s.parents,
        &s.children,
        &hook_state,
        &replicas,
        rounds,
    )
    .await;
    Ok(())
}

/// What the rounds saw: per fault kind (count, worst convergence), and missed bounds.
pub struct Rounds {
    pub by_kind: BTreeMap<&'static str, (usize, Duration)>,
    pub violations: Vec<String>,
}

async fn run_rounds(
    args: &Args,
    cluster: &TestCluster,
    hook: &HookState,
    replicas: &mut Replicas,
    s: &Setup,
) -> Result<Rounds, String> {
    let cluster_dir = args.cluster_dir.as_ref().map(|dir| ClusterDir {
        dir: dir.clone(),
        cluster_sh: args.cluster_sh.clone(),
    });
    let mut rng = Rng(args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let kinds = fault_kinds(args);
    let mut out = Rounds {
        by_kind: BTreeMap::new(),
        violations: Vec::new(),
    };
    let mut version = 0u64;
    let started = Instant::now();
    let stop = stop_on_signal();
    while started.elapsed() < args.duration && !stop.load(Ordering::Relaxed) {
        let kind = kinds[rng.below(kinds.len())];
        let round = Instant::now();
        let active = faults::inject(
            kind,
            cluster,
            hook,
            replicas,
            &mut rng,
            cluster_dir.as_ref(),
        )
        .await?;
        let window = if kind == "partition" {
            args.partition
        } else {
            WINDOW
        };
        change_parents(&s.parents, args.parents, window, &mut version, &mut rng).await;
        faults::end(active, cluster, hook, replicas, cluster_dir.as_ref()).await?;
        let took = converge_time(&s.parents, &s.children, args.bound).await;
        replicas.scrape().await;
        replicas.sample_rss();
        let entry = out.by_kind.entry(kind).or_insert((0, Duration::ZERO));
        entry.0 += 1;
        match took {
            Some(t) => {
                entry.1 = entry.1.max(t);
                println!(
                    "soak: {kind:<17} converged {:5.1} s after the fault ended (round {:.1} s)",
                    t.as_secs_f64(),
                    round.elapsed().as_secs_f64()
                );
            }
            None => {
                out.violations
                    .push(format!("{kind}: not converged within {:?}", args.bound));
                println!("soak: {kind:<17} NOT converged within {:?}", args.bound);
            }
        }
    }
    Ok(out)
}

/// Set by SIGINT or SIGTERM: the soak ends after the current round and still reports.
fn stop_on_signal() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        eprintln!("soak: signal received; ending after this round");
        flag.store(true, Ordering::Relaxed);
    });
    stop
}

/// Changes one random parent every 300 ms for `window`.
async fn change_parents(
    parents: &Api<DynamicObject>,
    count: usize,
    window: Duration,
    version: &mut u64,
    rng: &mut Rng,
) {
    let start = Instant::now();
    while start.elapsed() < window {
        *version += 1;
        let name = format!("p-{}", rng.below(count));
        let patch = Patch::Merge(json!({"spec": {"v": version.to_string()}}));
        // A write refused by an injected API fault (or lost to a restarting API server) is
        // simply one change fewer; a stalled one must not stretch the window.
        let params = PatchParams::default();
        let write = parents.patch(&name, &params, &patch);
        let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Time until every parent's child carries the parent's `spec.v`; `None` after `bound`.
async fn converge_time(
    parents: &Api<DynamicObject>,
    children: &Api<ConfigMap>,
    bound: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < bound {
        // A list must not hang on a restarting API server past the bound.
        let lists = async {
            let ps = parents.list(&ListParams::default()).await;
            (ps, children.list(&ListParams::default()).await)
        };
        if let Ok((Ok(ps), Ok(cs))) = tokio::time::timeout(Duration::from_secs(10), lists).await {
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
