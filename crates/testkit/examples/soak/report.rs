//! The end-of-soak checks (lost, duplicate and orphaned children; overlapping syncs) and the
//! summary.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;

use crate::hook::HookState;
use crate::replicas::Replicas;
use crate::{Args, Rounds};

/// What the final listing shows.
#[derive(Default)]
struct Census {
    parents: usize,
    children: usize,
    lost: Vec<String>,
    duplicates: Vec<String>,
    orphans: Vec<String>,
}

/// Counts every parent's controlled children (ours carry the generated selector's
/// `controller-uid` label; a real namespace also holds kube-root-ca.crt).
fn census(ps: &[DynamicObject], cs: &[ConfigMap]) -> Census {
    let uids: HashMap<String, String> = ps
        .iter()
        .filter_map(|p| Some((p.metadata.uid.clone()?, p.metadata.name.clone()?)))
        .collect();
    let mut out = Census {
        parents: ps.len(),
        ..Census::default()
    };
    let mut per_parent: HashMap<String, usize> = HashMap::new();
    let ours = cs.iter().filter(|c| {
        c.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("controller-uid"))
    });
    for c in ours {
        out.children += 1;
        let owner = c
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .and_then(|r| uids.get(&r.uid));
        match owner {
            Some(p) => *per_parent.entry(p.clone()).or_default() += 1,
            None => out
                .orphans
                .push(c.metadata.name.clone().unwrap_or_default()),
        }
    }
    for p in uids.values() {
        match per_parent.get(p).copied().unwrap_or(0) {
            1 => {}
            0 => out.lost.push(p.clone()),
            n => out.duplicates.push(format!("{p} ({n} children)")),
        }
    }
    out
}

async fn list_all(
    parents: &Api<DynamicObject>,
    children: &Api<ConfigMap>,
) -> (Vec<DynamicObject>, Vec<ConfigMap>) {
    let ps = parents.list(&ListParams::default()).await;
    let cs = children.list(&ListParams::default()).await;
    (
        ps.map(|l| l.items).unwrap_or_default(),
        cs.map(|l| l.items).unwrap_or_default(),
    )
}

/// Checks the end state and prints the summary.
pub async fn report(
    args: &Args,
    parents: &Api<DynamicObject>,
    children: &Api<ConfigMap>,
    hook: &HookState,
    replicas: &Replicas,
    rounds: Rounds,
) {
    let (ps, cs) = list_all(parents, children).await;
    let c = census(&ps, &cs);
    let overlaps = hook.overlaps.lock().unwrap().clone();
    let faults: usize = rounds.by_kind.values().map(|(n, _)| n).sum();
    let worst = rounds
        .by_kind
        .values()
        .map(|(_, d)| *d)
        .max()
        .unwrap_or_default();
    println!("\n== soak report ==");
    println!(
        "mode {} | server {} | replicas {} | parents {} | seed {} | duration {:?}{}",
        if args.sharding { "sharding" } else { "leader" },
        if args.real { "real" } else { "embedded" },
        args.replicas,
        args.parents,
        args.seed,
        args.duration,
        args.broken
            .map_or(String::new(), |b| format!(" | BROKEN ON PURPOSE: {b:?}"))
    );
    println!(
        "faults injected: {faults}; hook calls: {}",
        *hook.calls.lock().unwrap()
    );
    for (kind, (n, d)) in &rounds.by_kind {
        println!(
            "  {kind:<17} x{n:<3} worst convergence after it {:5.1} s",
            d.as_secs_f64()
        );
    }
    println!(
        "worst convergence after a fault: {:.1} s",
        worst.as_secs_f64()
    );
    println!(
        "checked at the end: {} parents, {} children | overlaps {} | lost {} | duplicates {} | orphans {} | missed bounds {}",
        c.parents,
        c.children,
        overlaps.len(),
        c.lost.len(),
        c.duplicates.len(),
        c.orphans.len(),
        rounds.violations.len()
    );
    let codes = replicas.requests_by_code();
    let codes: Vec<String> = codes.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    println!(
        "API requests of all replicas by status: {}",
        codes.join(", ")
    );
    print_rss(replicas);
    let mut violations = rounds.violations;
    violations.extend(
        overlaps
            .iter()
            .map(|o| format!("overlapping hook calls: {o}")),
    );
    violations.extend(c.lost.iter().map(|p| format!("parent {p}: child lost")));
    violations.extend(
        c.duplicates
            .iter()
            .map(|p| format!("parent {p}: duplicate")),
    );
    violations.extend(c.orphans.iter().map(|o| format!("child {o} has no parent")));
    println!("violations: {}", violations.len());
    for v in violations.iter().take(50) {
        println!("  {v}");
    }
}

/// Each replica's RSS at its first and latest sample (the first replicas' first sample is
/// taken when the first round starts), with how long it had run by then.
fn print_rss(replicas: &Replicas) {
    let mib =
        |kb: Option<u64>| kb.map_or("-".to_string(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
    for (i, t) in &replicas.rss {
        let ran = t.last_at.duration_since(t.started).as_secs_f64() / 60.0;
        println!(
            "  replica {i:>2}: RSS first {}, last {} after {ran:.1} min{}",
            mib(t.first),
            mib(t.last),
            if t.alive {
                " (running at the end)"
            } else {
                " (stopped by a fault)"
            }
        );
    }
}
