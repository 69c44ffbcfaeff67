//! Whole-system load figures for the CompositeController (run through `hack/load-composite.sh`).
//!
//! The real `metacontroller` binary runs as its own process against the embedded API server
//! started here, with a local hook server that answers after 1 ms. Phases:
//!
//! 1. cold start: N parents (default 1,000) exist before the controller starts; each wants 3
//!    ConfigMaps and a status. Reported: time until every parent has its status and all 3N
//!    ConfigMaps exist, API requests (by verb) and hook calls per parent, peak RSS of the
//!    controller process;
//! 2. full resync: the controller is restarted on the converged cluster, so it relists and
//!    syncs every parent again. Reported: time until every parent was synced, writes (must be
//!    0), requests per parent, peak RSS.
//!
//! Usage: `composite_load --binary PATH [--parents N] [--workers N] [--hook-delay-ms N]`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_testkit::{crd, dynamic_api, HookReply, HookServer, TestCluster};
use serde_json::{json, Value};

struct Args {
    binary: PathBuf,
    parents: usize,
    workers: u32,
    hook_delay: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        binary: PathBuf::from("target/release/metacontroller"),
        parents: 1000,
        workers: 5,
        hook_delay: Duration::from_millis(1),
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
            "--hook-delay-ms" => args.hook_delay = Duration::from_millis(number()?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(args)
}

/// The hook: 3 ConfigMaps per parent carrying `spec.value`; status counts observed children.
fn sync_reply(req: &Value) -> Value {
    let parent = &req["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let observed = req["children"]["ConfigMap.v1"]
        .as_object()
        .map_or(0, |m| m.len());
    let children: Vec<Value> = (0..3)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("{name}-{i}")},
                   "data": {"value": parent["spec"]["value"], "index": i.to_string()}})
        })
        .collect();
    json!({"children": children, "status": {"children": observed}})
}

/// Peak resident set size of a process, from /proc (Linux), in MiB.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

struct Controller {
    child: tokio::process::Child,
}

impl Controller {
    fn spawn(args: &Args, cluster: &TestCluster, log: &std::path::Path) -> Controller {
        let log = std::fs::File::create(log).expect("creating the controller log");
        let err = log.try_clone().expect("log handle");
        let child = tokio::process::Command::new(&args.binary)
            .arg("run")
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig_path())
            .arg("--workers")
            .arg(args.workers.to_string())
            .arg("--log-level")
            .arg("warn")
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

fn print_requests(title: &str, counts: &BTreeMap<(String, String), u64>, parents: usize) {
    let total: u64 = counts.values().sum();
    println!(
        "{title}: {total} API requests ({:.2} per parent)",
        total as f64 / parents as f64
    );
    for ((verb, resource), n) in counts {
        println!("    {verb:>8} {resource:<40} {n}");
    }
}

/// Counts minus the harness's own polling requests.
fn without(
    mut counts: BTreeMap<(String, String), u64>,
    ours: &[((&str, &str), u64)],
) -> BTreeMap<(String, String), u64> {
    for ((verb, resource), n) in ours {
        if let Some(c) = counts.get_mut(&(verb.to_string(), resource.to_string())) {
            *c = c.saturating_sub(*n);
        }
    }
    counts.retain(|_, n| *n > 0);
    counts
}

/// Writes to anything but Events (the controller records a `Starting`/`Started` Event on
/// its CompositeController whenever it starts; that is not a write of a sync).
fn writes(counts: &BTreeMap<(String, String), u64>) -> u64 {
    counts
        .iter()
        .filter(|((verb, resource), _)| {
            matches!(verb.as_str(), "create" | "update" | "patch" | "delete")
                && resource != "events"
        })
        .map(|(_, n)| n)
        .sum()
}

fn events_written(counts: &BTreeMap<(String, String), u64>) -> u64 {
    counts
        .iter()
        .filter(|((verb, resource), _)| {
            verb != "get" && verb != "list" && verb != "watch" && resource == "events"
        })
        .map(|(_, n)| n)
        .sum()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
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
    let n = args.parents;
    let cluster = TestCluster::embedded().await;
    let control = cluster.control().expect("embedded");
    cluster.install_metacontroller_crds().await;
    let parents_crd = crd("load.example.com", "v1", "LoadParent", "loadparents");
    cluster.install_crd(&parents_crd.build()).await;
    let ns = cluster.create_namespace("load").await;
    let delay = args.hook_delay;
    let hook = Arc::new(
        HookServer::start(move |_, req| HookReply::json(sync_reply(req)).delayed(delay)).await,
    );

    // The CompositeController and N parents exist before the controller process starts.
    let cc: Value = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "load"},
        "spec": {
            "parentResource": {"apiVersion": parents_crd.api_version(), "resource": parents_crd.plural()},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                "updateStrategy": {"method": "InPlace"}}],
            "generateSelector": true,
            "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}}
        }
    });
    dynamic_api(
        cluster.client(),
        "metacontroller.k8s.io/v1alpha1",
        "CompositeController",
        "compositecontrollers",
        None,
    )
    .create(
        &PostParams::default(),
        &serde_json::from_value(cc).expect("controller"),
    )
    .await
    .expect("creating the CompositeController");
    let parents = dynamic_api(
        cluster.client(),
        &parents_crd.api_version(),
        parents_crd.kind(),
        parents_crd.plural(),
        Some(&ns),
    );
    let created = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let chunk = n.div_ceil(32).max(1);
    for start in (0..n).step_by(chunk) {
        let parents = parents.clone();
        tasks.spawn(async move {
            for i in start..(start + chunk).min(n) {
                let p: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "load.example.com/v1", "kind": "LoadParent",
                    "metadata": {"name": format!("p{i}")}, "spec": {"value": "v1"}
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
    println!("setup: {n} parents created in {:?}", created.elapsed());

    let configmaps: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    let dir = std::env::temp_dir();

    // Phase 1: cold start.
    control.reset_counts();
    let mut polls = 0u64;
    let started = Instant::now();
    let controller = Controller::spawn(&args, &cluster, &dir.join("composite_load-1.log"));
    let deadline = Duration::from_secs(900);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            started.elapsed() < deadline,
            "not converged within {deadline:?}"
        );
        polls += 1;
        let list = parents
            .list(&ListParams::default())
            .await
            .expect("listing parents");
        let done = list
            .items
            .iter()
            .filter(|p| p.data["status"]["children"] == json!(3))
            .count();
        if done == n {
            polls += 1;
            let cms = configmaps
                .list_metadata(&ListParams::default())
                .await
                .expect("listing configmaps");
            if cms.items.len() == 3 * n {
                break;
            }
        }
    }
    let converge = started.elapsed();
    let rss = peak_rss_mib(controller.pid());
    cluster
        .settle(Duration::from_secs(2), Duration::from_secs(30))
        .await;
    let ours = [
        (("list", "loadparents"), polls),
        (("list", "configmaps"), 1),
    ];
    let counts = without(control.request_counts(), &ours);
    let hook_calls = hook.calls("/sync");
    println!(
        "cold start: {n} parents x 3 ConfigMaps converged in {:.2}s (hook delay {:?}, {} workers)",
        converge.as_secs_f64(),
        args.hook_delay,
        args.workers
    );
    print_requests("cold start", &counts, n);
    println!(
        "cold start: {} writes ({:.2} per parent), {hook_calls} hook calls ({:.2} per parent), controller peak RSS {}",
        writes(&counts),
        writes(&counts) as f64 / n as f64,
        hook_calls as f64 / n as f64,
        rss.map_or("unknown".into(), |m| format!("{m:.1} MiB"))
    );
    controller.stop().await;

    // Phase 2: full resync — a fresh process relists and syncs every converged parent.
    control.reset_counts();
    hook.clear_calls();
    let started = Instant::now();
    let controller = Controller::spawn(&args, &cluster, &dir.join("composite_load-2.log"));
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            started.elapsed() < deadline,
            "resync not done within {deadline:?}"
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
            break;
        }
    }
    let resync = started.elapsed();
    cluster
        .settle(Duration::from_secs(2), Duration::from_secs(30))
        .await;
    let rss = peak_rss_mib(controller.pid());
    let counts = control.request_counts();
    println!(
        "full resync: {n} parents synced in {:.2}s, {} hook calls",
        resync.as_secs_f64(),
        hook.calls("/sync")
    );
    print_requests("full resync", &counts, n);
    println!(
        "full resync: {} writes (must be 0; Event writes apart: {}), controller peak RSS {}",
        writes(&counts),
        events_written(&counts),
        rss.map_or("unknown".into(), |m| format!("{m:.1} MiB"))
    );
    controller.stop().await;
    if writes(&counts) != 0 {
        std::process::exit(1);
    }
}
