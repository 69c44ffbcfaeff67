//! `metacontroller run --sharding`: several replicas of the real binary on one API server
//! split the parents between them through Leases.
//!
//! Which replica synced a parent, and when, comes from the hook server's own log: with
//! sharding on, every hook call carries the caller's identity in `X-Metacontroller-Replica`,
//! and the hook records the parent, the replica and the time it received and answered each
//! call. "Never synced by two replicas at once" is asserted on those windows: the calls for
//! one parent never overlap.
//!
//! Which replica wrote what, and when, comes from a recording proxy between each replica and
//! the API server ([`ApiRecorder`], the same on both servers): "one writer at a time" is
//! asserted on hook calls and writes together ([`assert_one_writer_at_a_time`]), since a sync
//! gives up its worker before its writes and a replica writing after it lost a parent would
//! not show in its hook calls.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_testkit::metrics::sample;
use metacontroller_testkit::replicas::{
    assert_no_concurrent_syncs, assert_one_writer_at_a_time, sharded_replica_args,
    start_recording_hook, writes_by_replica, ProxiedKubeconfig, ReplicaCall, ReplicaCalls,
    ShardLeases,
};
use metacontroller_testkit::{
    create_object, eventually_within, unique_name, ApiRecorder, ApiWrite, ControllerProcess,
    CrdBuilder, TestCluster,
};
use metacontroller_workqueue::shard_of;
use serde_json::{json, Value};

const SHARDS: u32 = 16;

/// One scenario at a time: each runs three replicas and an API server, and their timing
/// bounds (lease duration + 10 s) mean nothing on a machine starved by four of them at once.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// `--shard-lease-duration` of the test replicas.
const LEASE: Duration = Duration::from_secs(4);

/// One hook call: the replica, the parent, when the hook received and answered it.
type Call = ReplicaCall;

/// The sync hook's answer for parent `name`: two ConfigMaps (children of a
/// CompositeController, attachments of a DecoratorController) and `status.ok`.
fn two_configmaps(name: &str, decorator: bool) -> Value {
    let children: Vec<Value> = ["a", "b"]
        .iter()
        .map(|s| {
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-{s}")},
                "data": {"parent": name},
            })
        })
        .collect();
    if decorator {
        json!({"attachments": children, "status": {"ok": true}})
    } else {
        json!({"children": children, "status": {"ok": true}})
    }
}

/// A parent object `name` of kind `parent`, with an empty spec.
fn parent_object(parent: &CrdBuilder, name: &str) -> Value {
    json!({
        "apiVersion": parent.api_version(), "kind": "Parent",
        "metadata": {"name": name}, "spec": {}
    })
}

struct Setup {
    cluster: TestCluster,
    ns: String,
    label: String,
    parent: CrdBuilder,
    hook: ReplicaCalls,
    shards: ShardLeases,
    /// One recording proxy per replica started, between it and the API server.
    recorders: Mutex<Vec<ApiRecorder>>,
}

impl Setup {
    /// A CompositeController whose parents want two ConfigMaps each.
    async fn new(delay: Duration) -> Setup {
        Setup::with(delay, false).await
    }

    /// A DecoratorController attaching two ConfigMaps to each target.
    async fn decorator(delay: Duration) -> Setup {
        Setup::with(delay, true).await
    }

    /// [`Setup::new`] with `resyncPeriodSeconds: 1`: every replica calls the hook for each
    /// of its parents every second, so a replica that syncs what it no longer owns shows.
    async fn resyncing(delay: Duration) -> Setup {
        Setup::with_spec(delay, false, json!({"resyncPeriodSeconds": 1})).await
    }

    async fn with(delay: Duration, decorator: bool) -> Setup {
        Setup::with_spec(delay, decorator, json!({})).await
    }

    /// A cluster with a parent kind, a recording hook answering after `delay`, and one
    /// controller of the kind asked (a CompositeController with `extra` in its spec, or a
    /// DecoratorController) selected by a fresh label.
    async fn with_spec(delay: Duration, decorator: bool, extra: Value) -> Setup {
        let cluster = TestCluster::start().await;
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace("shard").await;
        let (url, hook) = start_recording_hook(delay, two_configmaps).await;
        let parent = cluster.install_parent_crd("shard").await;
        let label = unique_name("team");
        let resource = json!({"apiVersion": parent.api_version(), "resource": parent.plural()});
        let configmaps = json!([{"apiVersion": "v1", "resource": "configmaps"}]);
        let hooks = json!({"sync": {"webhook": {"url": url}}});
        if decorator {
            let _: DecoratorController = cluster
                .create_controller(
                    &unique_name("shard"),
                    &label,
                    json!({"resources": [resource], "attachments": configmaps, "hooks": hooks}),
                )
                .await;
        } else {
            let mut spec = json!({
                "generateSelector": true,
                "parentResource": resource,
                "childResources": configmaps,
                "hooks": hooks,
            });
            if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
                spec.extend(extra.clone());
            }
            let _: CompositeController = cluster
                .create_controller(&unique_name("shard"), &label, spec)
                .await;
        }
        let shards = ShardLeases::new_group(cluster.client(), &ns, SHARDS);
        Setup {
            cluster,
            ns,
            label,
            parent,
            hook,
            shards,
            recorders: Mutex::default(),
        }
    }

    /// A replica of the group: `--sharding` with short lease timings, metrics on a random
    /// port, one worker so convergence takes long enough to interrupt.
    fn replica(&self) -> ControllerProcess {
        self.replica_with(SHARDS, LEASE)
    }

    /// [`Setup::replica`] with another `--shards`.
    fn replica_with_shards(&self, shards: u32) -> ControllerProcess {
        self.replica_with(shards, LEASE)
    }

    /// [`Setup::replica`] with another `--shards` and `--shard-lease-duration` (the renew
    /// deadline is three quarters of it).
    fn replica_with(&self, shards: u32, lease: Duration) -> ControllerProcess {
        self.replica_at(&self.recorded_kubeconfig(), shards, lease)
    }

    /// A kubeconfig reaching the API server through a new recording proxy (one per replica:
    /// the proxy's records are that replica's writes).
    fn recorded_kubeconfig(&self) -> std::path::PathBuf {
        let recorder = ApiRecorder::start(self.cluster.client());
        let path = recorder.kubeconfig_path().to_path_buf();
        self.recorders.lock().unwrap().push(recorder);
        path
    }

    /// [`Setup::replica_with`] talking to the API server through `kubeconfig` (a recording
    /// proxy, or a fault proxy in front of one).
    fn replica_at(
        &self,
        kubeconfig: &std::path::Path,
        shards: u32,
        lease: Duration,
    ) -> ControllerProcess {
        let mut args =
            sharded_replica_args(kubeconfig, &self.label, self.shards.group(), shards, lease);
        args.push("--workers=2".to_string());
        ControllerProcess::start_with_env(
            env!("CARGO_BIN_EXE_metacontroller"),
            args,
            [
                ("POD_NAMESPACE", self.ns.clone()),
                (
                    "RUST_LOG",
                    "warn,metacontroller=info,metacontroller_controllers=info".to_string(),
                ),
            ],
        )
    }

    /// Three replicas that joined and split the shards, with their identities.
    async fn three_replicas(&self) -> (Vec<ControllerProcess>, BTreeSet<String>) {
        self.joined(vec![self.replica(), self.replica(), self.replica()])
            .await
    }

    /// Waits until `replicas` joined and split the shards; returns them with their
    /// identities.
    async fn joined(
        &self,
        replicas: Vec<ControllerProcess>,
    ) -> (Vec<ControllerProcess>, BTreeSet<String>) {
        for r in &replicas {
            r.wait_joined().await;
        }
        let refs: Vec<&ControllerProcess> = replicas.iter().collect();
        self.wait_spread(&refs, Duration::from_secs(30)).await;
        let ids = identities(&refs);
        (replicas, ids)
    }

    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.cluster.client(), &self.ns)
    }

    /// Holder of each shard Lease (shard number → identity), free ones left out.
    async fn shard_holders(&self) -> BTreeMap<u32, String> {
        self.shards.holders().await
    }

    /// Waits until every shard is held, the holders are exactly `replicas`, and the holders
    /// did not change for three rounds (`--shard-retry-period=1s`): the handoffs are done.
    /// Then no replica may hold more than its bounded share.
    async fn wait_spread(&self, replicas: &[&ControllerProcess], within: Duration) {
        let ids = identities(replicas);
        let last = self.shards.wait_spread(&ids, within).await;
        // Bounded loads: nobody holds more than ceil(shards / replicas).
        let cap = (SHARDS as usize).div_ceil(ids.len());
        let mut held: BTreeMap<&str, usize> = BTreeMap::new();
        for holder in last.values() {
            *held.entry(holder).or_default() += 1;
        }
        assert!(
            held.values().all(|&n| n <= cap),
            "a replica holds more than {cap} of {SHARDS} shards: {held:?}"
        );
    }

    /// The parents among `parents` whose shard is in `shards`.
    fn parents_in<'a>(&self, parents: &'a [String], shards: &BTreeSet<u32>) -> BTreeSet<&'a str> {
        parents
            .iter()
            .filter(|n| shards.contains(&shard_of(&format!("{}/{n}", self.ns), SHARDS)))
            .map(String::as_str)
            .collect()
    }

    /// Creates `parents`, waits until 10 of them converged (mid-convergence) and SIGKILLs
    /// `victim`. Returns its identity, the shards it held and when it was killed.
    async fn kill_mid_convergence(
        &self,
        victim: &mut ControllerProcess,
        parents: &[String],
    ) -> (String, BTreeSet<u32>, Instant) {
        self.create_parents(parents).await;
        eventually_within(
            "a first share converges",
            Duration::from_secs(60),
            || async { self.converged().await.len() >= 10 },
        )
        .await;
        let id = victim.member_identity();
        let held = held_by(&self.shard_holders().await, &id);
        victim.kill9();
        (id, held, Instant::now())
    }

    /// Creates `n` more parents named `prefix-<i>`, waits up to `within` until they and
    /// `earlier` converged, and checks every child exists once and was created once. Returns
    /// all the names.
    async fn add_parents_and_converge(
        &self,
        earlier: &[String],
        prefix: &str,
        n: usize,
        within: Duration,
    ) -> Vec<String> {
        let more = names(prefix, n);
        self.create_parents(&more).await;
        let all: Vec<String> = earlier.iter().chain(&more).cloned().collect();
        self.wait_converged(&all, within).await;
        self.assert_children_exactly_once(&all).await;
        all
    }

    /// Creates `n` parents named `prefix-<i>` and waits up to `within` until they converged.
    /// Returns their names.
    async fn converge_new_parents(&self, prefix: &str, n: usize, within: Duration) -> Vec<String> {
        let parents = names(prefix, n);
        self.create_parents(&parents).await;
        self.wait_converged(&parents, within).await;
        parents
    }

    fn parents(&self) -> Api<DynamicObject> {
        self.parent.api(self.cluster.client(), Some(&self.ns))
    }

    async fn create_parent(&self, name: &str) {
        create_object(&self.parents(), parent_object(&self.parent, name)).await;
    }

    /// Creates a parent (empty spec) for each of `names`.
    async fn create_parents(&self, names: &[String]) {
        for n in names {
            self.create_parent(n).await;
        }
    }

    /// Names of the parents with `status.ok` and both children.
    async fn converged(&self) -> BTreeSet<String> {
        let parents = self.parents().list(&ListParams::default()).await.unwrap();
        let children = self.cluster.configmap_names(&self.ns).await;
        parents
            .items
            .into_iter()
            .filter(|p| p.data["status"]["ok"] == json!(true))
            .filter_map(|p| p.metadata.name)
            .filter(|n| {
                children.contains(&format!("{n}-a")) && children.contains(&format!("{n}-b"))
            })
            .collect()
    }

    async fn wait_converged(&self, names: &[String], within: Duration) {
        let want: BTreeSet<String> = names.iter().cloned().collect();
        let deadline = Instant::now() + within;
        loop {
            let done = self.converged().await;
            if want.is_subset(&done) {
                return;
            }
            let missing: Vec<_> = want.difference(&done).take(10).collect();
            if Instant::now() >= deadline {
                panic!(
                    "{} of {} parents not converged within {within:?}, e.g. {missing:?}; \
                     hook calls in the last 5 s per replica: {:?}",
                    want.len() - want.intersection(&done).count(),
                    want.len(),
                    self.recent_calls_per_replica()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Hook calls answered in the last 5 s per replica: tells a stalled replica from a slow
    /// one.
    fn recent_calls_per_replica(&self) -> BTreeMap<String, usize> {
        let mut recent: BTreeMap<String, usize> = BTreeMap::new();
        for c in self.hook.calls() {
            if c.end.elapsed() < Duration::from_secs(5) {
                *recent.entry(c.replica).or_default() += 1;
            }
        }
        recent
    }

    /// Waits until the hook got no call for two seconds: the syncs that follow a
    /// convergence or a takeover (children observed, status written) are over.
    async fn wait_hook_quiet(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let mut seen = self.hook.calls().len();
        let mut since = Instant::now();
        while since.elapsed() < Duration::from_secs(2) {
            assert!(
                Instant::now() < deadline,
                "the hook is still called: {seen} calls"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.hook.calls().len();
            if now != seen {
                seen = now;
                since = Instant::now();
            }
        }
    }

    /// Waits (at most 10 s) until replica `identity` called the hook: it resyncs its
    /// parents.
    async fn wait_synced_by(&self, identity: &str) {
        eventually_within(
            "the victim resyncs its parents",
            Duration::from_secs(10),
            || async { self.hook.calls().iter().any(|c| c.replica == identity) },
        )
        .await;
    }

    /// The hook calls so far, after checking that each came from one of `ids`, none
    /// overlapped another call for its parent, and no replica wrote for a parent during
    /// another replica's turn on it ([`assert_one_writer_at_a_time`]).
    fn calls_one_syncer_at_a_time(&self, ids: &BTreeSet<String>) -> Vec<Call> {
        let calls = self.hook.calls();
        assert_one_syncer_at_a_time(&calls, ids);
        let writes = self.writes();
        let checked = assert_one_writer_at_a_time(&calls, &writes, |w| self.parent_of(w));
        // Every test converges parents: no write attributed means the check saw nothing.
        assert!(checked > 0, "no write for a parent recorded");
        calls
    }

    /// The parent a write is for: the parent itself (metadata, status) or one of its
    /// children `<parent>-a` / `<parent>-b` in the test's namespace.
    fn parent_of(&self, w: &ApiWrite) -> Option<String> {
        if w.namespace.as_deref() != Some(self.ns.as_str()) {
            return None;
        }
        let name = w.name.as_deref()?;
        match w.resource.as_str() {
            "configmaps" => name
                .strip_suffix("-a")
                .or_else(|| name.strip_suffix("-b"))
                .map(str::to_string),
            r if r == self.parent.plural() => Some(name.to_string()),
            _ => None,
        }
    }

    /// [`Setup::assert_children_exact`] and [`Setup::assert_created_once`].
    async fn assert_children_exactly_once(&self, names: &[String]) {
        self.assert_children_exact(names).await;
        self.assert_created_once(names);
    }

    /// Exactly two children per parent, each controlled by its parent: none lost, none twice.
    async fn assert_children_exact(&self, names: &[String]) {
        let cms: Api<ConfigMap> = Api::namespaced(self.cluster.client(), &self.ns);
        let parents: HashMap<String, String> = self
            .parents()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
            .collect();
        let mut per_parent: BTreeMap<String, usize> = BTreeMap::new();
        for cm in cms.list(&ListParams::default()).await.unwrap().items {
            let name = cm.metadata.name.clone().unwrap_or_default();
            let Some(parent) = name
                .strip_suffix("-a")
                .or_else(|| name.strip_suffix("-b"))
                .map(str::to_string)
            else {
                continue;
            };
            let owner = cm
                .metadata
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .find(|o| o.controller == Some(true))
                .map(|o| o.uid);
            assert_eq!(
                owner.as_ref(),
                parents.get(&parent),
                "{name}: wrong controller"
            );
            *per_parent.entry(parent).or_default() += 1;
        }
        for n in names {
            assert_eq!(
                per_parent.get(n),
                Some(&2),
                "children of {n}: {per_parent:?}"
            );
        }
        assert_eq!(per_parent.len(), names.len(), "children of unknown parents");
    }

    /// Every child was created exactly once: a replica that synced a parent before its
    /// caches held the parent's children (e.g. right after a handoff) would create them
    /// again (and get 409 AlreadyExists). Counts every replica's create requests for
    /// children, answered or refused, from the recording proxies (so on both servers).
    fn assert_created_once(&self, names: &[String]) {
        let creates = self
            .writes()
            .iter()
            .filter(|(_, w)| w.method == "POST" && w.resource == "configmaps")
            .filter(|(_, w)| self.parent_of(w).is_some())
            .count();
        assert_eq!(
            creates,
            2 * names.len(),
            "ConfigMap creates for {} parents",
            names.len()
        );
    }

    /// Every write recorded so far, under the identity of the replica that made it.
    fn writes(&self) -> Vec<(String, ApiWrite)> {
        writes_by_replica(&self.recorders.lock().unwrap())
    }

    /// Each replica caches only its share: every parent in exactly one replica's cache,
    /// every child in exactly one (by its controller owner), orphans in all. Waits until the
    /// caches settled (a released shard is pruned after its syncs drained).
    async fn assert_caches_split(&self, replicas: &[&ControllerProcess], parents: usize) {
        let (owned, orphans) = self.owned_and_orphan_configmaps().await;
        let want_cms = owned + replicas.len() * orphans;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let per_replica = self.cached_per_replica(replicas).await;
            let total_parents: i64 = per_replica.iter().map(|(p, _)| p).sum();
            let total_cms: i64 = per_replica.iter().map(|(_, c)| c).sum();
            let each_partial = per_replica
                .iter()
                .all(|(p, _)| *p > 0 && (*p as usize) < parents);
            if total_parents == parents as i64 && total_cms == want_cms as i64 && each_partial {
                eprintln!(
                    "cached (parents, configmaps) per replica: {per_replica:?}; \
                     {parents} parents, {owned} owned + {orphans} orphan configmaps"
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "caches not split: (parents, configmaps) per replica {per_replica:?}, \
                 want {parents} parents and {want_cms} configmaps in total \
                 ({owned} owned, {orphans} orphans kept by all)"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// How many ConfigMaps of the cluster have a controller owner, and how many not.
    async fn owned_and_orphan_configmaps(&self) -> (usize, usize) {
        let cms: Api<ConfigMap> = Api::all(self.cluster.client());
        let all = cms
            .list_metadata(&ListParams::default())
            .await
            .unwrap()
            .items;
        let orphans = all
            .iter()
            .filter(|c| {
                !c.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.controller == Some(true))
            })
            .count();
        (all.len() - orphans, orphans)
    }

    /// Per replica: the parents and the ConfigMaps its informers cache.
    async fn cached_per_replica(&self, replicas: &[&ControllerProcess]) -> Vec<(i64, i64)> {
        let parent_labels = format!(
            "api_version=\"{}\",label_selector=\"\",resource=\"{}\"",
            self.parent.api_version(),
            self.parent.plural()
        );
        let cached = "metacontroller_informer_cached_objects";
        let mut per_replica = Vec::new();
        for r in replicas {
            let p = labeled_gauge(r, cached, &parent_labels).await;
            let c = labeled_gauge(
                r,
                cached,
                "api_version=\"v1\",label_selector=\"\",resource=\"configmaps\"",
            )
            .await;
            per_replica.push((p, c));
        }
        per_replica
    }
}

/// The shards `identity` holds among `holders` (shard → holder).
fn held_by(holders: &BTreeMap<u32, String>, identity: &str) -> BTreeSet<u32> {
    holders
        .iter()
        .filter(|(_, h)| *h == identity)
        .map(|(s, _)| *s)
        .collect()
}

/// The identities the replicas logged when they joined.
fn identities(replicas: &[&ControllerProcess]) -> BTreeSet<String> {
    replicas.iter().map(|p| p.member_identity()).collect()
}

/// No two calls for one parent overlap in time (whichever replicas made them), and every
/// call came from a known replica.
fn assert_one_syncer_at_a_time(calls: &[Call], replicas: &BTreeSet<String>) {
    for c in calls {
        assert!(replicas.contains(&c.replica), "call from {:?}", c.replica);
    }
    assert_no_concurrent_syncs(calls);
}

/// Some call of replica `victim` started after `since`.
fn assert_synced_again(calls: &[Call], victim: &str, since: Instant, what: &str) {
    assert!(
        calls.iter().any(|c| c.replica == victim && c.start > since),
        "the {what} replica never synced again"
    );
}

/// The holders of the shard Leases sampled every 50 ms from the test's own client, to
/// check each hook call against who owned the parent's shard at the time.
#[derive(Clone, Default)]
struct HolderLog(Arc<Mutex<Vec<Sample>>>);

/// One read of the shard Leases: it reflects the Leases at some moment between `sent` and
/// `received` (a loaded machine can stretch that), and per shard the holder and the Lease's
/// `leaseTransitions` (every acquisition counts one).
#[derive(Clone)]
struct Sample {
    sent: Instant,
    received: Instant,
    holders: BTreeMap<u32, (String, i32)>,
}

impl HolderLog {
    /// Samples until the returned task is aborted.
    fn record(setup: &Setup) -> (HolderLog, tokio::task::JoinHandle<()>) {
        let log = HolderLog::default();
        let shards = setup.shards.clone();
        let task = tokio::spawn({
            let log = log.clone();
            async move {
                loop {
                    let sent = Instant::now();
                    if let Ok(holders) = shards.read().await {
                        let received = Instant::now();
                        log.0.lock().unwrap().push(Sample {
                            sent,
                            received,
                            holders,
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
        (log, task)
    }

    /// Every call made while another replica held the parent's shard throughout: a read
    /// before the call and a read after it name the same other holder with the same
    /// `leaseTransitions`, so the shard did not change hands in between (however sparse
    /// the reads were).
    fn calls_without_ownership<'a>(&self, setup: &Setup, calls: &'a [Call]) -> Vec<&'a Call> {
        let samples = self.0.lock().unwrap().clone();
        calls
            .iter()
            .filter(|c| {
                let shard = shard_of(&format!("{}/{}", setup.ns, c.parent), SHARDS);
                let before = samples.iter().rev().find(|s| s.received <= c.start);
                let after = samples.iter().find(|s| s.sent >= c.end);
                let holder = |s: Option<&Sample>| s.and_then(|s| s.holders.get(&shard).cloned());
                match (holder(before), holder(after)) {
                    (Some(b), Some(a)) => b == a && b.0 != c.replica,
                    _ => false,
                }
            })
            .collect()
    }

    /// No call was made while another replica held the parent's shard throughout.
    fn assert_every_call_owned(&self, setup: &Setup, calls: &[Call]) {
        let unowned = self.calls_without_ownership(setup, calls);
        assert!(
            unowned.is_empty(),
            "hook calls without ownership: {unowned:?}"
        );
    }
}

/// With a stable membership of three: every parent synced, each by exactly one replica,
/// and all three replicas took part.
fn assert_stable_split(calls: &[Call], parents: usize) {
    let mut syncers: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for c in calls {
        syncers.entry(&c.parent).or_default().insert(&c.replica);
    }
    assert_eq!(syncers.len(), parents, "parents synced");
    for (parent, by) in &syncers {
        assert_eq!(by.len(), 1, "{parent} synced by {by:?}");
    }
    let used: BTreeSet<&str> = calls.iter().map(|c| c.replica.as_str()).collect();
    assert_eq!(used.len(), 3, "replicas that synced: {used:?}");
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// The gauge `name{labels}` of a replica, scraped from its /metrics (0 when absent).
async fn labeled_gauge(p: &ControllerProcess, name: &str, labels: &str) -> i64 {
    p.metric(name, labels).await.map_or(0, |v| v as i64)
}

/// The gauge `name` of a replica, scraped from its /metrics.
async fn gauge(p: &ControllerProcess, name: &str) -> i64 {
    let body = p.scrape_metrics().await;
    sample(&body, name, "").unwrap_or_else(|| panic!("no {name}:\n{body}")) as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_split_the_parents_and_each_parent_has_one_syncer() {
    let _serial = SERIAL.lock().await;
    let setup = Setup::new(Duration::from_millis(20)).await;
    let (replicas, ids) = setup.three_replicas().await;
    let refs: Vec<&ControllerProcess> = replicas.iter().collect();
    let mut owned = 0;
    for r in &replicas {
        let n = gauge(r, "metacontroller_shards_owned").await;
        assert!(n > 0, "a replica owns no shard");
        owned += n;
    }
    assert_eq!(owned, i64::from(SHARDS), "shards owned over all replicas");

    let parents = setup
        .converge_new_parents("p", 60, Duration::from_secs(60))
        .await;
    setup.assert_children_exact(&parents).await;
    // Each replica reports the parents it owns; together, every parent once.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut total = 0;
        for r in &replicas {
            total += gauge(r, "metacontroller_shard_parents_owned").await;
        }
        if total == parents.len() as i64 {
            break;
        }
        assert!(Instant::now() < deadline, "parents owned: {total}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let calls = setup.calls_one_syncer_at_a_time(&ids);
    assert_stable_split(&calls, parents.len());
    setup.assert_created_once(&parents);
    setup.assert_caches_split(&refs, parents.len()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_parents_move_to_the_others_within_the_lease_duration() {
    let _serial = SERIAL.lock().await;
    // 100 ms per hook call and two workers per replica: about 2 s of work per replica.
    let setup = Setup::new(Duration::from_millis(100)).await;
    let (mut replicas, ids) = setup.three_replicas().await;

    let parents = names("k", 90);
    let (victim, held, killed) = setup.kill_mid_convergence(&mut replicas[0], &parents).await;
    let victim_shards = held.len();
    let not_done = parents.len() - setup.converged().await.len();
    assert!(not_done > 0, "all parents converged before the kill");
    assert!(victim_shards > 0);

    setup
        .wait_converged(&parents, LEASE + Duration::from_secs(10))
        .await;
    let took = killed.elapsed();
    setup.assert_children_exactly_once(&parents).await;
    let calls = setup.calls_one_syncer_at_a_time(&ids);
    assert!(
        calls
            .iter()
            .all(|c| c.replica != victim || c.start <= killed),
        "the killed replica called the hook after the kill"
    );
    // The survivors hold every shard now.
    let survivors: Vec<&ControllerProcess> = replicas[1..].iter().collect();
    setup.wait_spread(&survivors, Duration::from_secs(10)).await;
    setup.assert_caches_split(&survivors, parents.len()).await;
    // They cached the silent replica's shards before its Lease expired, so the takeover did
    // not wait for a relist.
    let (mut taken, mut ahead) = (0, 0);
    for p in &survivors {
        let name = "metacontroller_shard_takeovers_total";
        let cached = labeled_gauge(p, name, "cached_ahead=\"true\"").await;
        ahead += cached;
        taken += cached + labeled_gauge(p, name, "cached_ahead=\"false\"").await;
    }
    let victim_shards = victim_shards as i64;
    assert!(
        taken == victim_shards,
        "{taken} shards taken over, {victim_shards} held by the victim"
    );
    assert!(
        ahead > 0,
        "no shard of the killed replica was cached ahead of its takeover"
    );
    eprintln!(
        "converged {took:?} after kill -9 ({not_done} parents left, {victim_shards} shards moved, \
         {ahead} of {taken} taken over from caches filled ahead)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_parents_go_ahead_of_the_survivors_own_backlog() {
    let _serial = SERIAL.lock().await;
    // 300 parents, 100 ms per hook call, two workers per replica: each replica has about 15 s
    // of its own work, so the survivors still have a backlog when they take over (about 5 s
    // after the kill).
    let setup = Setup::new(Duration::from_millis(100)).await;
    let (mut replicas, ids) = setup.three_replicas().await;
    let parents = names("x", 300);
    let (victim, held, killed) = setup.kill_mid_convergence(&mut replicas[0], &parents).await;
    let moved = setup.parents_in(&parents, &held);
    assert!(!moved.is_empty(), "the victim held no parent");
    setup
        .wait_converged(&parents, Duration::from_secs(120))
        .await;
    setup.assert_children_exactly_once(&parents).await;
    let calls = setup.calls_one_syncer_at_a_time(&ids);

    // Per survivor: from its first call for a moved parent until it has called the hook for
    // each moved parent it took, it serves only moved parents (the expedited lane), apart from
    // syncs its two workers had already taken from the queue.
    let mut report = Vec::new();
    for survivor in ids.iter().filter(|id| **id != victim) {
        let mut mine: Vec<&Call> = calls
            .iter()
            .filter(|c| &c.replica == survivor && c.start > killed)
            .collect();
        mine.sort_by_key(|c| c.start);
        let Some(first) = mine.iter().position(|c| moved.contains(c.parent.as_str())) else {
            continue;
        };
        let mut waiting: BTreeSet<&str> = mine[first..]
            .iter()
            .map(|c| c.parent.as_str())
            .filter(|p| moved.contains(p))
            .collect();
        let taken = waiting.len();
        let mut own = 0;
        for c in &mine[first..] {
            if waiting.is_empty() {
                break;
            }
            if !waiting.remove(c.parent.as_str()) && !moved.contains(c.parent.as_str()) {
                own += 1;
            }
        }
        assert!(
            own <= 2,
            "{survivor} synced {own} of its own parents before each of the {taken} parents it \
             took over from the killed replica"
        );
        let backlog = mine[first..]
            .iter()
            .filter(|c| !moved.contains(c.parent.as_str()))
            .count();
        report.push(format!(
            "{taken} taken over first ({own} own between), {backlog} own calls after"
        ));
    }
    assert!(!report.is_empty(), "no survivor took a moved parent");
    eprintln!(
        "{} moved parents; converged {:?} after the kill; {}",
        moved.len(),
        killed.elapsed(),
        report.join("; ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_that_renews_in_time_keeps_its_shards() {
    let _serial = SERIAL.lock().await;
    let setup = Setup::new(Duration::from_millis(20)).await;
    // A longer lease than the other tests: the frozen replica resumes well before it ends.
    let lease = Duration::from_secs(8);
    let (replicas, ids) = setup
        .joined((0..3).map(|_| setup.replica_with(SHARDS, lease)).collect())
        .await;
    let refs: Vec<&ControllerProcess> = replicas.iter().collect();
    let first = setup
        .converge_new_parents("f", 30, Duration::from_secs(30))
        .await;

    let holders = setup.shard_holders().await;
    let victim = replicas[0].member_identity();
    let held = held_by(&holders, &victim);
    assert!(!held.is_empty());
    let others = &replicas[1..];
    replicas[0].freeze();
    let frozen = Instant::now();
    eventually_within(
        "the others cache the silent replica's shards ahead",
        lease,
        || async {
            others.iter().any(|p| {
                p.logs()
                    .contains("caching the shards this replica would take over")
            })
        },
    )
    .await;
    replicas[0].thaw();
    let silent_for = frozen.elapsed();
    assert!(
        silent_for < lease * 3 / 4,
        "the test resumed the replica too late ({silent_for:?}) to show anything"
    );
    eventually_within(
        "the others drop what they cached ahead once it renews",
        lease,
        || async {
            others
                .iter()
                .any(|p| p.logs().contains("dropped the shards cached ahead"))
        },
    )
    .await;
    // Nothing moved: the replica that renewed in time syncs its shards, alone.
    assert_eq!(setup.shard_holders().await, holders);
    let all = setup
        .add_parents_and_converge(&first, "s", 30, Duration::from_secs(30))
        .await;
    let calls = setup.calls_one_syncer_at_a_time(&ids);
    let victims = setup.parents_in(&all, &held);
    assert!(
        calls
            .iter()
            .filter(|c| victims.contains(c.parent.as_str()))
            .all(|c| c.replica == victim),
        "another replica synced a parent of the frozen replica's shards"
    );
    // What was cached ahead is pruned again: every parent in exactly one cache.
    setup.assert_caches_split(&refs, all.len()).await;
    eprintln!(
        "frozen {silent_for:?}; {} of its parents synced by it alone",
        victims.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_another_shard_count_waits_until_the_old_replicas_are_gone() {
    let _serial = SERIAL.lock().await;
    let setup = Setup::new(Duration::from_millis(20)).await;
    // A rolling update that changes --shards: the old replica runs, a new one starts.
    let old = setup.replica();
    old.wait_joined().await;
    eventually_within(
        "the old replica holds every shard",
        Duration::from_secs(30),
        || async { gauge(&old, "metacontroller_shards_owned").await == i64::from(SHARDS) },
    )
    .await;
    let new = setup.replica_with_shards(SHARDS / 2);
    new.wait_joined().await;
    for p in [&old, &new] {
        eventually_within(
            "the mismatch is logged",
            Duration::from_secs(10),
            || async { p.logs().contains("live replicas use another --shards") },
        )
        .await;
    }
    let ids = identities(&[&old, &new]);
    let first = setup
        .converge_new_parents("a", 20, Duration::from_secs(60))
        .await;
    // Three rounds later the new replica still holds nothing; the old one kept everything.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(gauge(&new, "metacontroller_shards_owned").await, 0);
    assert_eq!(
        gauge(&old, "metacontroller_shards_owned").await,
        i64::from(SHARDS)
    );
    let new_id = new.member_identity();
    assert!(
        setup.hook.calls().iter().all(|c| c.replica != new_id),
        "the new replica synced while the old one ran"
    );

    // The old replica leaves (SIGTERM): the new one takes every shard of its own count.
    old.terminate();
    eventually_within(
        "the new replica takes over",
        LEASE + Duration::from_secs(10),
        || async { gauge(&new, "metacontroller_shards_owned").await == i64::from(SHARDS / 2) },
    )
    .await;
    setup
        .add_parents_and_converge(&first, "b", 20, Duration::from_secs(60))
        .await;
    setup.calls_one_syncer_at_a_time(&ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_one_to_three_to_two_under_load_keeps_one_syncer_per_parent() {
    let _serial = SERIAL.lock().await;
    let setup = Setup::new(Duration::from_millis(20)).await;
    let first = setup.replica();
    first.wait_joined().await;
    setup.wait_spread(&[&first], Duration::from_secs(30)).await;

    // Steady load: a new parent every 50 ms during the whole scale sequence.
    let parents = names("s", 200);
    let load = {
        let api = setup.parents();
        let parent = setup.parent.clone();
        let parents = parents.clone();
        tokio::spawn(async move {
            for n in parents {
                create_object(&api, parent_object(&parent, &n)).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut second = setup.replica();
    let third = setup.replica();
    second.wait_joined().await;
    third.wait_joined().await;
    setup
        .wait_spread(&[&first, &second, &third], Duration::from_secs(30))
        .await;
    let ids = identities(&[&first, &second, &third]);
    // Scale down as a Deployment does: SIGTERM, graceful exit.
    second.terminate();
    let status = second
        .wait_exit(Duration::from_secs(30))
        .expect("the replica exits after SIGTERM");
    assert!(status.success(), "{status}:\n{}", second.logs());
    setup
        .wait_spread(&[&first, &third], Duration::from_secs(10))
        .await;
    load.await.unwrap();

    setup
        .wait_converged(&parents, Duration::from_secs(60))
        .await;
    // One writer per parent first: two writers would also show as children created twice.
    let calls = setup.calls_one_syncer_at_a_time(&ids);
    setup.assert_children_exactly_once(&parents).await;
    setup
        .assert_caches_split(&[&first, &third], parents.len())
        .await;
    let used: BTreeSet<&str> = calls.iter().map(|c| c.replica.as_str()).collect();
    assert_eq!(used.len(), 3, "replicas that synced: {used:?}");
    // The departed replica left no member Lease behind.
    let members = setup
        .leases()
        .list(&ListParams::default().labels(&format!(
            "metacontroller.k8s.io/shard-group={},metacontroller.k8s.io/shard-role=member",
            setup.shards.group()
        )))
        .await
        .unwrap();
    assert_eq!(members.items.len(), 2, "member leases after scaling to 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_split_decorator_targets_and_attach_once() {
    let _serial = SERIAL.lock().await;
    let setup = Setup::decorator(Duration::from_millis(20)).await;
    let (replicas, ids) = setup.three_replicas().await;
    let refs: Vec<&ControllerProcess> = replicas.iter().collect();

    let targets = setup
        .converge_new_parents("d", 60, Duration::from_secs(60))
        .await;
    setup.assert_children_exactly_once(&targets).await;

    let calls = setup.calls_one_syncer_at_a_time(&ids);
    assert_stable_split(&calls, targets.len());
    setup.assert_caches_split(&refs, targets.len()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_only_the_parents_of_shards_that_moved_are_synced_again() {
    let _serial = SERIAL.lock().await;
    let setup = Setup::new(Duration::from_millis(20)).await;
    let (mut replicas, ids) = setup.three_replicas().await;
    let parents = setup
        .converge_new_parents("q", 60, Duration::from_secs(60))
        .await;
    setup.wait_hook_quiet(Duration::from_secs(30)).await;
    let before = setup.shard_holders().await;

    let calls_before = setup.hook.calls().len();
    replicas[0].kill9();
    let killed = Instant::now();
    let survivors: Vec<&ControllerProcess> = replicas[1..].iter().collect();
    setup
        .wait_spread(&survivors, LEASE + Duration::from_secs(10))
        .await;
    let after = setup.shard_holders().await;
    let moved: BTreeSet<u32> = (0..SHARDS)
        .filter(|s| before.get(s) != after.get(s))
        .collect();
    let moved_parents = setup.parents_in(&parents, &moved);
    assert!(!moved_parents.is_empty(), "no parent in the moved shards");
    eventually_within(
        "each parent of a moved shard is synced by its new owner",
        LEASE + Duration::from_secs(10),
        || async {
            let synced: BTreeSet<String> = setup.hook.calls()[calls_before..]
                .iter()
                .map(|c| c.parent.clone())
                .collect();
            moved_parents.iter().all(|p| synced.contains(*p))
        },
    )
    .await;
    setup.wait_hook_quiet(Duration::from_secs(30)).await;

    let calls = setup.calls_one_syncer_at_a_time(&ids);
    let since: Vec<&Call> = calls[calls_before..].iter().collect();
    // The new owners' caches relisted; a relist they asked for reports only what changed,
    // and only the acquired shards' parents are replayed: everything else stays quiet.
    let others: BTreeSet<&str> = since
        .iter()
        .map(|c| c.parent.as_str())
        .filter(|p| !moved_parents.contains(p))
        .collect();
    assert!(
        others.is_empty(),
        "parents of shards that did not move synced again after the kill: {others:?}"
    );
    assert!(
        since.len() <= 2 * moved_parents.len(),
        "{} hook calls for the {} parents of the moved shards",
        since.len(),
        moved_parents.len()
    );
    setup.assert_children_exactly_once(&parents).await;
    eprintln!(
        "{} shards moved ({} parents) in {:?}; {} hook calls since the kill",
        moved.len(),
        moved_parents.len(),
        killed.elapsed(),
        since.len()
    );
}

/// How long the proxied replica's API link stays stalled: several lease durations, long
/// enough for a replica that keeps syncing on stale ownership to show it many times over.
const STALL: Duration = Duration::from_secs(24);
/// `--shard-lease-duration` in the stalled-link test.
const STALL_LEASE: Duration = Duration::from_secs(8);

/// Three replicas of `setup` with `lease`, replica 0 reaching the API server through
/// `proxied` (its hooks stay reachable); they joined and split the shards. Returns them with
/// their identities.
async fn replicas_one_proxied(
    setup: &Setup,
    proxied: &ProxiedKubeconfig,
    lease: Duration,
) -> (Vec<ControllerProcess>, BTreeSet<String>) {
    setup
        .joined(vec![
            setup.replica_at(proxied.path(), SHARDS, lease),
            setup.replica_with(SHARDS, lease),
            setup.replica_with(SHARDS, lease),
        ])
        .await
}

/// Creates 30 parents `prefix-<i>`, waits until they converged and `victim` resynced some
/// of them (`resyncPeriodSeconds: 1`). Returns the names.
async fn converge_with_resyncs(setup: &Setup, prefix: &str, victim: &str) -> Vec<String> {
    let parents = setup
        .converge_new_parents(prefix, 30, Duration::from_secs(60))
        .await;
    setup.wait_synced_by(victim).await;
    parents
}

/// When the stalled link was stalled and healed, how long the others took to hold every
/// shard, and from when the stalled replica's lease could be taken.
struct StallTimes {
    stalled: Instant,
    takeable: Instant,
    taken: Duration,
    healed: Instant,
}

/// Stalls the proxied link of `refs[0]` for [`STALL`], waits until the others hold every
/// shard meanwhile, heals it and waits until all three split the shards again.
async fn stall_and_heal(
    setup: &Setup,
    proxied: &ProxiedKubeconfig,
    refs: &[&ControllerProcess],
    lease: Duration,
) -> StallTimes {
    proxied.proxy.stall();
    let stalled = Instant::now();
    // Its last renewal was sent before the stall: no other replica can take a shard of it
    // before `stalled + lease`.
    let takeable = stalled + lease;
    setup
        .wait_spread(&refs[1..], lease + Duration::from_secs(15))
        .await;
    let taken = stalled.elapsed();
    // The fault lasts STALL whatever happens meanwhile (this waits out the fault, it does
    // not wait for a result).
    tokio::time::sleep_until((stalled + STALL).into()).await;
    proxied.proxy.heal();
    let healed = Instant::now();
    setup.wait_spread(refs, Duration::from_secs(60)).await;
    StallTimes {
        stalled,
        takeable,
        taken,
        healed,
    }
}

/// Creates 10 parents `after-<i>` and waits until they and `parents` converged (printing the
/// stalled replica's log when they do not within 60 s), with their children exactly once.
/// Returns all the names.
async fn converge_after_heal(
    setup: &Setup,
    parents: &[String],
    stalled: &ControllerProcess,
) -> Vec<String> {
    let more = names("after", 10);
    setup.create_parents(&more).await;
    let all: Vec<String> = parents.iter().chain(&more).cloned().collect();
    let want: BTreeSet<String> = all.iter().cloned().collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !want.is_subset(&setup.converged().await) {
        if Instant::now() >= deadline {
            let logs = stalled.logs();
            let tail: Vec<&str> = logs.lines().rev().take(80).collect();
            eprintln!("stalled replica's log (newest first):\n{}", tail.join("\n"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    setup.wait_converged(&all, Duration::from_secs(1)).await;
    setup.assert_children_exactly_once(&all).await;
    all
}

/// The stalled replica `victim` made no hook call once its lease could be taken.
fn assert_stalled_replica_stopped(
    calls: &[Call],
    victim: &str,
    times: &StallTimes,
    lease: Duration,
) {
    let StallTimes {
        stalled,
        takeable,
        taken,
        healed,
    } = *times;
    let during: Vec<&Call> = calls
        .iter()
        .filter(|c| c.replica == victim && c.start >= stalled && c.start < healed)
        .collect();
    let last = during.iter().map(|c| c.start - stalled).max();
    let before = calls
        .iter()
        .filter(|c| c.replica == victim && c.start < stalled)
        .filter(|c| c.start + Duration::from_secs(3) >= stalled)
        .count();
    eprintln!("stall: the stalled replica called the hook {before} times in the 3 s before it");
    eprintln!(
        "stall: the others held every shard {taken:?} after it; the stalled replica's last \
         hook call started {last:?} after it (lease takeable after {lease:?}), {} calls during it",
        during.len()
    );
    let late: Vec<&&Call> = during.iter().filter(|c| c.start >= takeable).collect();
    assert!(
        late.is_empty(),
        "the stalled replica called the hook {} times after its lease could be taken, the \
         last {:?} after the stall",
        late.len(),
        last
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_api_link_stalls_stops_syncing_before_its_lease_can_be_taken() {
    let _serial = SERIAL.lock().await;
    let setup = Setup::resyncing(Duration::from_millis(50)).await;
    // The fault proxy in front of the replica's recording proxy: the records are the writes
    // as the server received them.
    let proxied = ProxiedKubeconfig::start(&setup.recorded_kubeconfig()).await;
    // A longer lease than the other tests: the proxied replica's requests take one more hop
    // through this (busy) test process, and a 3 s renew deadline is tight on a loaded machine.
    let lease = STALL_LEASE;
    let (replicas, ids) = replicas_one_proxied(&setup, &proxied, lease).await;
    let refs: Vec<&ControllerProcess> = replicas.iter().collect();
    let (holders, sampler) = HolderLog::record(&setup);
    let victim = replicas[0].member_identity();
    let parents = converge_with_resyncs(&setup, "st", &victim).await;

    let times = stall_and_heal(&setup, &proxied, &refs, lease).await;
    let all = converge_after_heal(&setup, &parents, &replicas[0]).await;
    sampler.abort();

    let calls = setup.calls_one_syncer_at_a_time(&ids);
    assert_stalled_replica_stopped(&calls, &victim, &times, lease);
    holders.assert_every_call_owned(&setup, &calls);
    assert_synced_again(&calls, &victim, times.healed, "healed");
    assert_eq!(all.len(), parents.len() + 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_paused_beyond_its_lease_does_not_sync_with_stale_ownership() {
    let _serial = SERIAL.lock().await;
    let setup = Setup::resyncing(Duration::from_millis(50)).await;
    let (replicas, ids) = setup.three_replicas().await;
    let refs: Vec<&ControllerProcess> = replicas.iter().collect();
    let (holders, sampler) = HolderLog::record(&setup);
    let victim = replicas[0].member_identity();
    let parents = converge_with_resyncs(&setup, "sp", &victim).await;

    replicas[0].freeze();
    let frozen = Instant::now();
    setup
        .wait_spread(&refs[1..], LEASE + Duration::from_secs(15))
        .await;
    // The others have synced its former parents since: resumed now, its caches, queues and
    // timers all say it owns them.
    let taken = Instant::now();
    eventually_within(
        "the others resync the victim's former parents",
        Duration::from_secs(10),
        || async {
            setup
                .hook
                .calls()
                .iter()
                .filter(|c| c.start > taken)
                .count()
                >= parents.len()
        },
    )
    .await;
    replicas[0].thaw();
    let thawed = Instant::now();
    setup.wait_spread(&refs, Duration::from_secs(60)).await;
    let all = setup
        .add_parents_and_converge(&parents, "after", 10, Duration::from_secs(60))
        .await;
    sampler.abort();

    let calls = setup.calls_one_syncer_at_a_time(&ids);
    holders.assert_every_call_owned(&setup, &calls);
    assert_synced_again(&calls, &victim, thawed, "resumed");
    eprintln!(
        "paused {:?}; after resuming it synced {} times, none without holding the shard",
        thawed - frozen,
        calls
            .iter()
            .filter(|c| c.replica == victim && c.start > thawed)
            .count()
    );
    assert_eq!(all.len(), parents.len() + 10);
}

/// A parent name and an owner name whose shards are held by different replicas of
/// `holders` (shard → identity).
fn names_in_different_replicas(ns: &str, holders: &BTreeMap<u32, String>) -> (String, String) {
    let holder = |name: &str| {
        holders
            .get(&shard_of(&format!("{ns}/{name}"), SHARDS))
            .cloned()
    };
    let parent = "taken-p".to_string();
    let mine = holder(&parent);
    let owner = (0..1000)
        .map(|i| format!("owner-{i}"))
        .find(|o| holder(o) != mine)
        .expect("an owner name in another replica's shard");
    (parent, owner)
}

/// Creates ConfigMap `owner` and ConfigMap `name` controlled by it. Returns the latter.
async fn create_controlled_configmap(setup: &Setup, owner: &str, name: &str) -> ConfigMap {
    let cms: Api<ConfigMap> = Api::namespaced(setup.cluster.client(), &setup.ns);
    let pp = kube::api::PostParams::default();
    let owner_cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": owner}})).unwrap();
    let owner_cm = cms.create(&pp, &owner_cm).await.unwrap();
    let held: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner,
            "uid": owner_cm.metadata.uid, "controller": true}]},
        "data": {"holder": owner},
    }))
    .unwrap();
    cms.create(&pp, &held).await.unwrap()
}

/// A child name held by an object controlled by a parent of another replica's shard: the
/// parent's replica does not cache that object, so no event of it ever reaches its writer.
/// Once the holder is deleted the child is created all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_name_freed_by_an_object_of_another_replicas_shard_is_taken_soon() {
    let _serial = SERIAL.lock().await;
    let setup = Setup::new(Duration::from_millis(20)).await;
    let (_replicas, _ids) = setup.three_replicas().await;
    let holders = setup.shard_holders().await;
    let (parent, owner) = names_in_different_replicas(&setup.ns, &holders);
    let taken = format!("{parent}-a");
    create_controlled_configmap(&setup, &owner, &taken).await;
    setup.create_parent(&parent).await;
    // The sync met the taken name (its other child exists, its SyncError names this one).
    let named = format!("ConfigMap {}/{taken}", setup.ns);
    eventually_within(
        "a SyncError naming the taken name",
        Duration::from_secs(60),
        || async { testkit_warnings(&setup, &parent, &named).await },
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(setup.cluster.client(), &setup.ns);
    cms.delete(&taken, &Default::default()).await.unwrap();
    eventually_within(
        "the child created in the freed name",
        Duration::from_secs(30),
        || async {
            cms.get_opt(&taken).await.unwrap().is_some_and(|cm| {
                cm.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|r| r.controller == Some(true) && r.name == parent)
            })
        },
    )
    .await;
}

/// Whether a SyncError Warning on `parent` names `needle`.
async fn testkit_warnings(setup: &Setup, parent: &str, needle: &str) -> bool {
    metacontroller_testkit::events_about(&setup.cluster, &setup.ns, parent)
        .await
        .iter()
        .any(|e| {
            e.reason.as_deref() == Some("SyncError")
                && e.message.as_deref().is_some_and(|m| m.contains(needle))
        })
}

/// A second controller of the group whose child type can no longer be listed (its CRD is
/// deleted): when a replica dies, the survivors' relist of that type fails for good. The
/// shards they take over must still be admitted, so the first controller's parents there
/// converge; only the controller of the unlistable type waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_type_that_cannot_be_listed_holds_back_only_its_own_controller() {
    let _serial = SERIAL.lock().await;
    let setup = Setup::new(Duration::from_millis(20)).await;
    let widgets = setup
        .cluster
        .install_unique_crd("gone", "Widget", "widgets")
        .await;
    let owners = setup.cluster.install_parent_crd("blocked").await;
    // It has no parents: its hook is never called; it only makes the Widget informer.
    let url = "http://127.0.0.1:9/never-called";
    let _: CompositeController = setup
        .cluster
        .create_controller(
            &unique_name("blocked"),
            &setup.label,
            json!({
                "generateSelector": true,
                "parentResource": {"apiVersion": owners.api_version(), "resource": owners.plural()},
                "childResources": [{"apiVersion": widgets.api_version(), "resource": widgets.plural()}],
                "hooks": {"sync": {"webhook": {"url": url}}},
            }),
        )
        .await;
    let (mut replicas, _ids) = setup.three_replicas().await;
    let before = setup
        .converge_new_parents("before", 6, Duration::from_secs(60))
        .await;

    setup.cluster.delete_crd(&widgets.name()).await;
    let victim = replicas[0].member_identity();
    let held = held_by(&setup.shard_holders().await, &victim);
    assert!(!held.is_empty(), "the victim holds no shard");
    replicas[0].kill9();
    let survivors: Vec<&ControllerProcess> = replicas[1..].iter().collect();
    setup
        .wait_spread(&survivors, LEASE + Duration::from_secs(20))
        .await;
    // Parents in every shard, the victim's former ones included.
    let after = names("after", 48);
    setup.create_parents(&after).await;
    assert!(
        after
            .iter()
            .any(|p| held.contains(&shard_of(&format!("{}/{p}", setup.ns), SHARDS))),
        "no new parent landed in a shard taken over"
    );
    let all: Vec<String> = before.iter().chain(&after).cloned().collect();
    setup.wait_converged(&all, Duration::from_secs(30)).await;
    setup.assert_children_exactly_once(&all).await;
}
