//! Dev-mode simulation: nodes, kubelets and the workload controllers of
//! kube-controller-manager, in the spirit of KWOK (Kubernetes WithOut Kubelet). Pods are
//! bound to simulated nodes and reported Running and Ready after a delay; no container runs
//! and there is no network.
//!
//! The simulation is a client of the store like any controller: it learns about changes from
//! the same event stream watches are fed from, and writes through the same create / update /
//! delete paths as HTTP requests, so watchers (and the controller under test) see its
//! writes as ordinary events. Work is keyed per object: an event marks the objects it
//! concerns (the pod itself, its controller owner, the Services of its namespace), and only
//! those are reconciled, so nothing scans the whole store per write.
//!
//! Pods can be steered with annotations (see [`PHASE_ANNOTATION`], [`READY_ANNOTATION`],
//! [`IGNORE_SIGTERM_ANNOTATION`]).

mod daemonset;
mod deployment;
mod endpointslice;
mod exit_status;
mod history;
mod job;
mod kubelet;
mod replicaset;
mod statefulset;
mod util;

use crate::server::Shared;
use crate::store::{Event, State};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// Pod annotation: the phase the simulated kubelet drives the pod to. `Pending` keeps it
/// from starting, `Running` keeps it running (even a Job's pod), `Succeeded` or `Failed`
/// ends it `--pod-succeed-after` once it runs (any pod, not only a Job's).
pub const PHASE_ANNOTATION: &str = "dev.metacontroller.k8s.io/phase";
/// Pod annotation: `"false"` keeps a running pod unready (readiness probe failing); changing
/// it later flips the pod's Ready condition.
pub const READY_ANNOTATION: &str = "dev.metacontroller.k8s.io/ready";
/// Pod annotation: `"true"` makes a deleted pod use its whole grace period, as a process
/// that ignores SIGTERM does; by default it stops at once.
pub const IGNORE_SIGTERM_ANNOTATION: &str = "dev.metacontroller.k8s.io/ignore-sigterm";

/// What the simulation does. `SimulationConfig::default()` is what `metacontroller dev` uses.
#[derive(Clone, Debug)]
pub struct SimulationConfig {
    /// Ready nodes to create (`dev-node-0`, `dev-node-1`, …).
    pub nodes: usize,
    /// How long a bound pod stays Pending before it runs and is Ready.
    pub pod_ready_after: Duration,
    /// How long a run-to-completion pod (restartPolicy Never/OnFailure) runs before it ends.
    pub pod_succeed_after: Duration,
}

impl Default for SimulationConfig {
    fn default() -> Self {
        SimulationConfig {
            nodes: 1,
            pod_ready_after: Duration::from_secs(1),
            pod_succeed_after: Duration::from_secs(1),
        }
    }
}

/// One unit of simulation work: an object to reconcile.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Key {
    Pod(String, String),
    ReplicaSet(String, String),
    Deployment(String, String),
    StatefulSet(String, String),
    DaemonSet(String, String),
    Job(String, String),
    Service(String, String),
    /// Every Service of a namespace (a pod's address or readiness changed).
    ServicesIn(String),
    /// Every DaemonSet (the set of nodes changed).
    AllDaemonSets,
}

/// What the simulated kubelet remembers about a pod (a real kubelet keeps this in memory too).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PodTimes {
    /// When the kubelet first saw the pod bound to its node.
    pub seen: Instant,
    /// When its containers started.
    pub running: Option<Instant>,
    /// When the kubelet saw its deletion.
    pub terminating: Option<Instant>,
}

/// The simulation's state between passes.
pub(crate) struct Sim {
    pub cfg: SimulationConfig,
    dirty: BTreeSet<Key>,
    timers: BinaryHeap<Reverse<(Instant, Key)>>,
    pub nodes: Vec<String>,
    pub pods: HashMap<String, PodTimes>,
    next_ip: u32,
    next_node: usize,
}

impl Sim {
    fn new(cfg: SimulationConfig) -> Self {
        let nodes = (0..cfg.nodes.max(1))
            .map(|i| format!("dev-node-{i}"))
            .collect();
        Sim {
            cfg,
            dirty: BTreeSet::new(),
            timers: BinaryHeap::new(),
            nodes,
            pods: HashMap::new(),
            next_ip: 0,
            next_node: 0,
        }
    }

    /// Reconciles `key` again at `when` (e.g. when a pod's start delay is over).
    pub fn at(&mut self, when: Instant, key: Key) {
        self.timers.push(Reverse((when, key)));
    }

    /// Reconciles `key` in the next pass.
    pub fn mark(&mut self, key: Key) {
        self.dirty.insert(key);
    }

    /// A fresh pod IP (10.244.0.0/16).
    pub fn pod_ip(&mut self) -> String {
        self.next_ip = self.next_ip.wrapping_add(1);
        let n = self.next_ip % 65_000 + 2;
        format!("10.244.{}.{}", n / 256, n % 256)
    }

    /// The next node in turn.
    pub fn pick_node(&mut self) -> String {
        let n = self.nodes[self.next_node % self.nodes.len()].clone();
        self.next_node = self.next_node.wrapping_add(1);
        n
    }

    /// The address of a node (`10.0.0.<index+2>`).
    pub fn node_ip(&self, node: &str) -> String {
        let i = self.nodes.iter().position(|n| n == node).unwrap_or(0);
        format!("10.0.{}.{}", (i + 2) / 256, (i + 2) % 256)
    }

    /// Marks what an event concerns.
    fn on_event(&mut self, ev: &Event) {
        let (group, resource) = (ev.gr.0.as_str(), ev.gr.1.as_str());
        let ns = ev.namespace.clone();
        let name = ev.name.clone();
        match (group, resource) {
            ("", "pods") => {
                if ev.etype == crate::store::EventType::Deleted {
                    self.pods.remove(crate::store::meta_str(&ev.object, "uid"));
                } else {
                    self.mark(Key::Pod(ns.clone(), name));
                }
                for obj in std::iter::once(&ev.object).chain(ev.prev.as_ref()) {
                    if let Some(key) = util::controller_key(obj, &ns) {
                        self.mark(key);
                    }
                }
                if endpointslice::pod_change_matters(ev) {
                    self.mark(Key::ServicesIn(ns));
                }
            }
            ("apps", "replicasets") => {
                if let Some(key) = util::controller_key(&ev.object, &ns) {
                    self.mark(key);
                }
                self.mark(Key::ReplicaSet(ns, name));
            }
            ("apps", "deployments") => self.mark(Key::Deployment(ns, name)),
            ("apps", "statefulsets") => self.mark(Key::StatefulSet(ns, name)),
            ("apps", "daemonsets") => self.mark(Key::DaemonSet(ns, name)),
            ("batch", "jobs") => self.mark(Key::Job(ns, name)),
            ("", "services") => self.mark(Key::Service(ns, name)),
            ("discovery.k8s.io", "endpointslices") => {
                if let Some(svc) = endpointslice::service_of(&ev.object) {
                    self.mark(Key::Service(ns, svc));
                }
            }
            ("", "nodes") => self.mark(Key::AllDaemonSets),
            _ => {}
        }
    }

    /// Marks every workload and Service (start-up, or events were missed).
    fn mark_everything(&mut self, st: &State) {
        for (group, resource) in [
            ("", "pods"),
            ("apps", "replicasets"),
            ("apps", "deployments"),
            ("apps", "statefulsets"),
            ("apps", "daemonsets"),
            ("batch", "jobs"),
            ("", "services"),
        ] {
            let gr = (group.to_string(), resource.to_string());
            for ((ns, name), _) in st.list(&gr, None) {
                self.mark(match resource {
                    "pods" => Key::Pod(ns, name),
                    "replicasets" => Key::ReplicaSet(ns, name),
                    "deployments" => Key::Deployment(ns, name),
                    "statefulsets" => Key::StatefulSet(ns, name),
                    "daemonsets" => Key::DaemonSet(ns, name),
                    "jobs" => Key::Job(ns, name),
                    _ => Key::Service(ns, name),
                });
            }
        }
    }

    fn due_timers(&mut self, now: Instant) {
        while let Some(Reverse((when, _))) = self.timers.peek() {
            if *when > now {
                break;
            }
            if let Some(Reverse((_, key))) = self.timers.pop() {
                self.dirty.insert(key);
            }
        }
    }

    fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((when, _))| *when)
    }

    /// Reconciles everything marked, under the store lock.
    fn pass(&mut self, st: &mut State) {
        let keys = std::mem::take(&mut self.dirty);
        for key in keys {
            match key {
                Key::Pod(ns, name) => kubelet::reconcile_pod(self, st, &ns, &name),
                Key::ReplicaSet(ns, name) => replicaset::reconcile(self, st, &ns, &name),
                Key::Deployment(ns, name) => deployment::reconcile(self, st, &ns, &name),
                Key::StatefulSet(ns, name) => statefulset::reconcile(self, st, &ns, &name),
                Key::DaemonSet(ns, name) => daemonset::reconcile(self, st, &ns, &name),
                Key::Job(ns, name) => job::reconcile(self, st, &ns, &name),
                Key::Service(ns, name) => endpointslice::reconcile(st, &ns, &name),
                Key::ServicesIn(ns) => {
                    let gr = (String::new(), "services".to_string());
                    for ((sns, sname), _) in st.list(&gr, Some(&ns)) {
                        endpointslice::reconcile(st, &sns, &sname);
                    }
                }
                Key::AllDaemonSets => {
                    let gr = ("apps".to_string(), "daemonsets".to_string());
                    for ((dns, dname), _) in st.list(&gr, None) {
                        daemonset::reconcile(self, st, &dns, &dname);
                    }
                }
            }
        }
    }
}

/// Runs the simulation until the server stops.
pub(crate) async fn run(
    sh: Arc<Shared>,
    cfg: SimulationConfig,
    mut events: broadcast::Receiver<Arc<Event>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut sim = Sim::new(cfg);
    sh.write(|st| {
        kubelet::register_nodes(&sim, st);
        sim.mark_everything(st);
    });
    loop {
        let now = Instant::now();
        sim.due_timers(now);
        if !sim.dirty.is_empty() {
            sh.write(|st| sim.pass(st));
            // Let HTTP handlers and the garbage collector have the lock between passes.
            tokio::task::yield_now().await;
        }
        let sleep = sim
            .next_timer()
            .map(|t| t.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(3600));
        tokio::select! {
            ev = events.recv() => match ev {
                Ok(ev) => sim.on_event(&ev),
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    sh.write(|st| sim.mark_everything(st));
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = tokio::time::sleep(sleep) => {}
            _ = stop.changed() => return,
        }
        // Take the rest of a burst so one pass handles it.
        loop {
            match events.try_recv() {
                Ok(ev) => sim.on_event(&ev),
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    sh.write(|st| sim.mark_everything(st));
                }
                Err(_) => break,
            }
        }
    }
}
