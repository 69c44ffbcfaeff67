//! Extension `childResources[].namespaces` (issue 53) with `--sharding`: three replicas of
//! the real binary split the parents of a namespaced parent kind whose children live
//! elsewhere (a ConfigMap in another namespace, a ClusterRole). Such a child carries no
//! ownerReference, only the parent-uid label and the annotation naming its parent, so the
//! replicas must tell by those whose child it is: every write to it comes from the replica
//! holding its parent's shard, one writer at a time; each replica caches only the children
//! elsewhere of its own parents; after one replica is killed -9 the others take its parents'
//! children over (no duplicate create), and deleting the parents deletes every child.
//!
//! Which replica wrote what comes from one recording proxy per replica ([`ApiRecorder`]),
//! which replica synced what from the hook's log (`X-Metacontroller-Replica`). Passes on the
//! embedded server and on a real one (`METACONTROLLER_E2E_KUBECONFIG`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::Resource;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::replicas::{
    assert_no_concurrent_syncs, assert_one_writer_at_a_time, sharded_replica_args,
    start_recording_hook, writes_by_replica, ReplicaCalls, ShardLeases,
};
use metacontroller_testkit::{
    create_object, unique_name, ApiRecorder, ApiWrite, ControllerProcess, CrdBuilder, TestCluster,
};
use metacontroller_workqueue::shard_of;
use serde_json::{json, Value};

const SHARDS: u32 = 16;
const LEASE: Duration = Duration::from_secs(4);
const PARENTS: usize = 15;
const WAIT: Duration = Duration::from_secs(60);
const UID_LABEL: &str = "metacontroller.k8s.io/parent-uid";
const PARENT_ANNOTATION: &str = "metacontroller.k8s.io/parent";

struct Setup {
    cluster: TestCluster,
    /// The parents' namespace (and the Leases').
    ns: String,
    /// Where the ConfigMap children go.
    other: String,
    /// ClusterRole children are named `<roles>-<parent>` and labelled `test=<roles>`.
    roles: String,
    label: String,
    parent: CrdBuilder,
    hook: ReplicaCalls,
    round: Arc<AtomicU64>,
    shards: ShardLeases,
    recorders: Vec<ApiRecorder>,
}

/// The hook's answer for parent `name`: a ConfigMap `<other>/<name>` and a ClusterRole
/// `<roles>-<name>`, both carrying the current round.
fn children(name: &str, other: &str, roles: &str, round: u64) -> Value {
    let round = round.to_string();
    json!({
        "children": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": name, "namespace": other, "labels": {"test": roles}},
             "data": {"round": round}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": format!("{roles}-{name}"),
                          "labels": {"test": roles, "round": round}},
             "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
        ],
        "status": {"ok": true},
    })
}

impl Setup {
    async fn new() -> Setup {
        let cluster = TestCluster::start().await;
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace("eshard").await;
        let other = cluster.create_namespace("eshard-other").await;
        let roles = unique_name("eshard-role");
        let round = Arc::new(AtomicU64::new(1));
        let (url, hook) = {
            let (other, roles, round) = (other.clone(), roles.clone(), round.clone());
            start_recording_hook(Duration::from_millis(20), move |name, _| {
                children(name, &other, &roles, round.load(Ordering::SeqCst))
            })
            .await
        };
        let parent = cluster.install_parent_crd("eshard").await;
        let label = unique_name("team");
        let anywhere = |api_version: &str, resource: &str| {
            json!({"apiVersion": api_version, "resource": resource, "namespaces": ["*"],
                   "updateStrategy": {"method": "InPlace"}})
        };
        let _: CompositeController = cluster
            .create_controller(
                &unique_name("eshard"),
                &label,
                json!({
                    "generateSelector": true,
                    "parentResource": {"apiVersion": parent.api_version(),
                                       "resource": parent.plural()},
                    "childResources": [
                        anywhere("v1", "configmaps"),
                        anywhere("rbac.authorization.k8s.io/v1", "clusterroles"),
                    ],
                    "hooks": {"sync": {"webhook": {"url": url}}},
                }),
            )
            .await;
        let shards = ShardLeases::new_group(cluster.client(), &ns, SHARDS);
        Setup {
            cluster,
            ns,
            other,
            roles,
            label,
            parent,
            hook,
            round,
            shards,
            recorders: Vec::new(),
        }
    }

    /// A sharded replica talking to the server through a new recording proxy.
    fn replica(&mut self) -> ControllerProcess {
        let recorder = ApiRecorder::start(self.cluster.client());
        let mut args = sharded_replica_args(
            recorder.kubeconfig_path(),
            &self.label,
            self.shards.group(),
            SHARDS,
            LEASE,
        );
        self.recorders.push(recorder);
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

    /// Waits until the holders of every shard are exactly `replicas`, stable for a while.
    async fn wait_spread(&self, replicas: &[&ControllerProcess]) -> BTreeMap<u32, String> {
        let ids: BTreeSet<String> = replicas.iter().map(|p| p.member_identity()).collect();
        self.shards.wait_spread(&ids, Duration::from_secs(30)).await
    }

    fn parents(&self) -> Api<DynamicObject> {
        self.parent.api(self.cluster.client(), Some(&self.ns))
    }

    fn names(&self) -> Vec<String> {
        (0..PARENTS).map(|i| format!("p-{i}")).collect()
    }

    /// Parent name → uid, of the parents that exist.
    async fn parent_uids(&self) -> BTreeMap<String, String> {
        let list = self.parents().list(&ListParams::default()).await;
        list.map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
            .collect()
    }

    /// The label-tracked ConfigMaps and ClusterRoles of this test: (name of the parent it
    /// names, parent-uid label, round) per child, ConfigMaps first.
    async fn tracked(&self) -> (Vec<(String, String, String)>, Vec<(String, String, String)>) {
        let selector = ListParams::default().labels(&format!("test={}", self.roles));
        let client = self.cluster.client();
        let cms = Api::<ConfigMap>::namespaced(client.clone(), &self.other)
            .list(&selector)
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let crs = Api::<ClusterRole>::all(client)
            .list(&selector)
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let cm_rounds = cms.iter().map(|c| {
            let round = c.data.as_ref().and_then(|d| d.get("round")).cloned();
            (tracking(c), round.unwrap_or_default())
        });
        let cr_rounds = crs.iter().map(|c| {
            let round = c.metadata.labels.as_ref().and_then(|l| l.get("round"));
            (tracking(c), round.cloned().unwrap_or_default())
        });
        let flatten = |it: Box<dyn Iterator<Item = ((String, String), String)> + '_>| {
            it.map(|((parent, uid), round)| (parent, uid, round))
                .collect::<Vec<_>>()
        };
        (flatten(Box::new(cm_rounds)), flatten(Box::new(cr_rounds)))
    }

    /// Whether every parent has `status.ok` and exactly one ConfigMap and one ClusterRole
    /// elsewhere, tracked by its uid and annotation, at `round`.
    async fn converged(&self, round: u64) -> bool {
        let uids = self.parent_uids().await;
        let parents = self.parents().list(&ListParams::default()).await;
        let all_ok = parents.is_ok_and(|l| {
            l.items.len() == PARENTS && l.items.iter().all(|p| p.data["status"]["ok"] == true)
        });
        let (cms, crs) = self.tracked().await;
        let want: BTreeSet<(String, String, String)> = uids
            .iter()
            .map(|(name, uid)| {
                let key = format!("{}/{name}", self.ns);
                (key, uid.clone(), round.to_string())
            })
            .collect();
        let exact = |got: &[(String, String, String)]| {
            got.len() == want.len() && got.iter().cloned().collect::<BTreeSet<_>>() == want
        };
        all_ok && uids.len() == PARENTS && exact(&cms) && exact(&crs)
    }

    async fn wait_converged(&self, round: u64, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.converged(round).await {
            assert!(
                Instant::now() < deadline,
                "not converged at round {round} within {within:?}: children {:?}",
                self.tracked().await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Moves to `round`: the hook answers with it, and a spec change syncs every parent.
    async fn next_round(&self, round: u64) {
        self.round.store(round, Ordering::SeqCst);
        let patch = json!({"spec": {"round": round}});
        for name in self.names() {
            self.parents()
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("patching a parent");
        }
    }

    /// The parent a write is for: the parent itself, or one of its children elsewhere.
    fn parent_of(&self, w: &ApiWrite) -> Option<String> {
        let name = w.name.as_deref()?;
        match (w.resource.as_str(), w.namespace.as_deref()) {
            ("configmaps", Some(ns)) if ns == self.other => Some(name.to_string()),
            ("clusterroles", None) => name
                .strip_prefix(&format!("{}-", self.roles))
                .map(str::to_string),
            (r, Some(ns)) if r == self.parent.plural() && ns == self.ns => Some(name.to_string()),
            _ => None,
        }
    }

    fn writes(&self) -> Vec<(String, ApiWrite)> {
        writes_by_replica(&self.recorders)
    }

    /// The writes for parents so far: each by the holder of its parent's shard in `holders`.
    /// Returns how many writes to children elsewhere were checked.
    fn assert_written_by_shard_owner(&self, holders: &BTreeMap<u32, String>) -> usize {
        let mut elsewhere = 0;
        for (replica, w) in self.writes().iter().filter(|(_, w)| w.accepted()) {
            let Some(parent) = self.parent_of(w) else {
                continue;
            };
            let shard = shard_of(&format!("{}/{parent}", self.ns), SHARDS);
            assert_eq!(
                holders.get(&shard),
                Some(replica),
                "{} for {parent} (shard {shard}) by {replica}",
                w.describe()
            );
            if w.resource != self.parent.plural() {
                elsewhere += 1;
            }
        }
        elsewhere
    }

    /// Every child elsewhere was created exactly once (requests answered or refused): a
    /// replica syncing a parent before its caches held the parent's children elsewhere
    /// would create them again and get 409 AlreadyExists.
    fn assert_created_once(&self) {
        let creates = |resource: &str| {
            self.writes()
                .iter()
                .filter(|(_, w)| w.method == "POST" && w.resource == resource)
                .filter(|(_, w)| self.parent_of(w).is_some())
                .count()
        };
        assert_eq!(creates("configmaps"), PARENTS, "ConfigMap creates");
        assert_eq!(creates("clusterroles"), PARENTS, "ClusterRole creates");
    }

    /// Each replica caches the children elsewhere of its own parents only: summed over the
    /// replicas, every tracked child once and every other object (orphans) once per replica.
    async fn assert_caches_split(&self, replicas: &[&ControllerProcess]) {
        let resources = [
            ("v1", "configmaps"),
            ("rbac.authorization.k8s.io/v1", "clusterroles"),
        ];
        for (api_version, plural) in resources {
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                let (tracked, others) = self.tracked_and_others(api_version, plural).await;
                let want = tracked + replicas.len() * others;
                let labels = format!(
                    "api_version=\"{api_version}\",label_selector=\"\",resource=\"{plural}\""
                );
                let mut cached = Vec::new();
                for r in replicas {
                    let n = r
                        .metric("metacontroller_informer_cached_objects", &labels)
                        .await;
                    cached.push(n.map_or(0, |v| v as usize));
                }
                if cached.iter().sum::<usize>() == want {
                    eprintln!("{plural} cached per replica: {cached:?} ({tracked} tracked)");
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{plural}: cached per replica {cached:?}, want {want} in total: \
                     {tracked} children elsewhere once, {others} others in every replica"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    /// How many objects of a resource one replica keeps (label-tracked children and owned
    /// objects), and how many every replica keeps.
    async fn tracked_and_others(&self, api_version: &str, plural: &str) -> (usize, usize) {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, "");
        let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::all_with(self.cluster.client(), &resource);
        let all = api
            .list_metadata(&ListParams::default())
            .await
            .expect("listing metadata")
            .items;
        // Kept by one replica: children tracked by label with a parent key, and objects with a
        // controller owner (a long-lived cluster holds other tests' owned children).
        let tracked = all
            .iter()
            .filter(|o| {
                let labels = o.metadata.labels.as_ref();
                let parent_key = o
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(PARENT_ANNOTATION))
                    .is_some_and(|key| key.split('/').filter(|s| !s.is_empty()).count() == 2);
                let owned = o
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|r| r.controller == Some(true));
                owned || (labels.is_some_and(|l| l.contains_key(UID_LABEL)) && parent_key)
            })
            .count();
        (tracked, all.len() - tracked)
    }

    /// Deletes what a failed run may have left (ClusterRoles outlive the namespaces).
    async fn cleanup(&self) {
        let roles: Api<ClusterRole> = Api::all(self.cluster.client());
        let selector = ListParams::default().labels(&format!("test={}", self.roles));
        let _ = roles
            .delete_collection(&DeleteParams::default(), &selector)
            .await;
    }
}

/// The parent annotation and parent-uid label of a child (empty when absent).
fn tracking<K: Resource>(obj: &K) -> (String, String) {
    let meta = obj.meta();
    let annotation = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(PARENT_ANNOTATION));
    let uid = meta.labels.as_ref().and_then(|l| l.get(UID_LABEL));
    let owned = meta
        .owner_references
        .as_ref()
        .is_some_and(|r| !r.is_empty());
    assert!(!owned, "a child elsewhere with ownerReferences");
    (
        annotation.cloned().unwrap_or_default(),
        uid.cloned().unwrap_or_default(),
    )
}

/// One scenario at a time: each runs three replicas, and their timing bounds mean little on
/// a machine starved by two such runs at once.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Three replicas that split the shards, the holders, and the parents created and
/// converged at round 1.
async fn three_replicas_and_parents(
    s: &mut Setup,
) -> (Vec<ControllerProcess>, BTreeMap<u32, String>) {
    let replicas = vec![s.replica(), s.replica(), s.replica()];
    for r in &replicas {
        r.wait_joined().await;
    }
    let holders = s.wait_spread(&replicas.iter().collect::<Vec<_>>()).await;
    for name in s.names() {
        let body = json!({"apiVersion": s.parent.api_version(), "kind": "Parent",
                          "metadata": {"name": name}, "spec": {"round": 1}});
        create_object(&s.parents(), body).await;
    }
    s.wait_converged(1, WAIT).await;
    (replicas, holders)
}

/// The parents whose shard `identity` holds in `holders`.
fn parents_of(s: &Setup, holders: &BTreeMap<u32, String>, identity: &str) -> Vec<String> {
    s.names()
        .into_iter()
        .filter(|n| {
            holders
                .get(&shard_of(&format!("{}/{n}", s.ns), SHARDS))
                .map(String::as_str)
                == Some(identity)
        })
        .collect()
}

/// Deletes every parent and waits until they and all their children elsewhere are gone.
async fn delete_parents_and_wait_gone(s: &Setup) {
    for name in s.names() {
        s.parents()
            .delete(&name, &DeleteParams::default())
            .await
            .expect("deleting a parent");
    }
    let deadline = Instant::now() + LEASE + WAIT;
    loop {
        let (cms, crs) = s.tracked().await;
        if s.parent_uids().await.is_empty() && cms.is_empty() && crs.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left after deleting the parents: {cms:?} {crs:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Over the whole run: no parent synced by two replicas at once, no write for a parent (to
/// it or to its children elsewhere) during another replica's turn on it, each child created
/// once and deleted once. Returns how many writes were checked.
fn assert_one_writer_and_each_child_once(s: &Setup) -> usize {
    let calls = s.hook.calls();
    assert_no_concurrent_syncs(&calls);
    let writes = s.writes();
    let checked = assert_one_writer_at_a_time(&calls, &writes, |w| s.parent_of(w));
    let deletes = writes
        .iter()
        .filter(|(_, w)| w.method == "DELETE" && w.accepted() && s.parent_of(w).is_some())
        .count();
    assert_eq!(deletes, 2 * PARENTS, "children elsewhere deleted");
    s.assert_created_once();
    checked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_replicas_write_children_elsewhere_from_the_parents_shard_owner_only() {
    let _serial = SERIAL.lock().await;
    let mut s = Setup::new().await;
    let (mut replicas, holders) = three_replicas_and_parents(&mut s).await;

    // Created and updated, each by its parent's shard owner; cached by it only.
    s.next_round(2).await;
    s.wait_converged(2, WAIT).await;
    let checked = s.assert_written_by_shard_owner(&holders);
    assert!(
        checked >= 4 * PARENTS,
        "{checked} writes to children elsewhere"
    );
    let all: Vec<&ControllerProcess> = replicas.iter().collect();
    s.assert_caches_split(&all).await;

    // kill -9: the survivors take the victim's parents and their children elsewhere over.
    let victim = replicas[0].member_identity();
    let victims = parents_of(&s, &holders, &victim);
    assert!(!victims.is_empty(), "the victim holds no parent");
    replicas[0].kill9();
    let killed = Instant::now();
    s.next_round(3).await;
    s.wait_converged(3, LEASE + WAIT).await;
    let survivors: Vec<&ControllerProcess> = replicas[1..].iter().collect();
    s.wait_spread(&survivors).await;
    s.assert_caches_split(&survivors).await;
    let calls = s.hook.calls();
    for name in &victims {
        assert!(
            calls
                .iter()
                .any(|c| &c.parent == name && c.start > killed && c.replica != victim),
            "{name} of the killed replica was not synced by a survivor"
        );
    }

    // Deleting the parents deletes every child elsewhere.
    delete_parents_and_wait_gone(&s).await;
    let checked = assert_one_writer_and_each_child_once(&s);
    eprintln!(
        "{checked} writes checked, {} parents moved after kill -9 of {victim}",
        victims.len()
    );
    s.cleanup().await;
}

/// The parents are deleted right after their shard owner was killed -9: their
/// children-elsewhere finalizer holds them until a survivor took the shard over, relisted,
/// and deleted the children; nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_deleted_parents_are_cleaned_up_by_the_survivors() {
    let _serial = SERIAL.lock().await;
    let mut s = Setup::new().await;
    let (mut replicas, holders) = three_replicas_and_parents(&mut s).await;
    let victim = replicas[0].member_identity();
    let victims = parents_of(&s, &holders, &victim);
    assert!(!victims.is_empty(), "the victim holds no parent");
    replicas[0].kill9();
    let killed = Instant::now();

    delete_parents_and_wait_gone(&s).await;
    let late: Vec<(String, ApiWrite)> = s
        .writes()
        .into_iter()
        .filter(|(_, w)| w.method == "DELETE" && w.accepted() && w.start > killed)
        .filter(|(_, w)| s.parent_of(w).is_some_and(|p| victims.contains(&p)))
        .collect();
    assert_eq!(
        late.len(),
        2 * victims.len(),
        "children elsewhere of the killed replica's parents deleted by the survivors"
    );
    assert!(late.iter().all(|(who, _)| *who != victim));
    let checked = assert_one_writer_and_each_child_once(&s);
    eprintln!(
        "{checked} writes checked, {} deleted parents cleaned up after kill -9 of {victim}",
        victims.len()
    );
    s.cleanup().await;
}
