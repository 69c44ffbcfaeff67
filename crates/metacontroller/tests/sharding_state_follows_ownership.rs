//! State follows ownership (`--sharding`): what a replica keeps per parent — the last
//! parent version read, customize rules and the related informers they lease, hook response
//! (ETag) caches, expectations — follows the parents it owns through handoffs and deletions.
//!
//! Three replicas of the real binary share one CompositeController whose parents have a
//! customize hook (one related rule on Secrets), an ETag-cached sync hook and one child (and,
//! in a second test, one DecoratorController whose targets have the same hooks and one
//! attachment). The
//! test kills and restarts replicas several times (each restart makes the others release
//! shards to the newcomer) and after every handoff waits until, on every replica, each
//! per-parent structure holds exactly its owned parents
//! (`metacontroller_parent_state_entries` against `metacontroller_shard_parents_owned`),
//! the related Secrets informer runs only where some owned parent needs it, and the owned
//! parents add up to all parents. Then it deletes the parents: everything drops to zero.
//!
//! Named `sharding_*` so the real-cluster runner runs it alone (three replicas).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_testkit::metrics::sample;
use metacontroller_testkit::replicas::{sharded_replica_args, ShardLeases};
use metacontroller_testkit::{
    create_object, eventually_within, unique_name, ControllerProcess, CrdBuilder, TestCluster,
};
use serde_json::{json, Value};

const SHARDS: u32 = 16;
const PARENTS: usize = 12;
/// Kill one replica and start a new one this many times.
const HANDOFFS: usize = 3;

/// Which controller kind the replicas run.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Composite,
    Decorator,
}

/// The hook server: `/customize` asks for the Secrets labelled `related=<label>` of the
/// parent's namespace; `/sync` wants one ConfigMap child (`/decorate`: one attachment) and
/// answers with an ETag, so every parent synced has a cached response.
async fn start_hook(label: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move |request: Request<Body>| {
        let label = label.clone();
        async move {
            let path = request.uri().path().to_string();
            let bytes = axum::body::to_bytes(request.into_body(), 16 << 20)
                .await
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            // Decorator sync requests name the target `object`.
            let object = match body.get("object") {
                Some(object) => object,
                None => &body["parent"],
            };
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let reply = if path == "/customize" {
                json!({"relatedResources": [{
                    "apiVersion": "v1", "resource": "secrets",
                    "labelSelector": {"matchLabels": {"related": label}},
                }]})
            } else {
                let related = body["related"]["Secret.v1"]
                    .as_object()
                    .map_or(0, |m| m.len());
                let children = json!([{
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("{name}-c")},
                    "data": {"parent": name},
                }]);
                let key = if path == "/decorate" {
                    "attachments"
                } else {
                    "children"
                };
                json!({key: children, "status": {"ok": true, "related": related}})
            };
            Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/json")
                .header("etag", format!("\"{name}-{}\"", reply.to_string().len()))
                .body(Body::from(reply.to_string()))
                .unwrap()
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

struct Setup {
    cluster: TestCluster,
    ns: String,
    label: String,
    parent: CrdBuilder,
    shards: ShardLeases,
}

impl Setup {
    async fn new(kind: Kind) -> Setup {
        let cluster = TestCluster::start().await;
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace("state").await;
        let label = unique_name("team");
        let hook = start_hook(label.clone()).await;
        let parent = cluster.install_parent_crd("state").await;
        let customize = json!({"webhook": {"url": format!("{hook}/customize")}});
        let name = unique_name("state");
        match kind {
            Kind::Composite => {
                let _: CompositeController = cluster
                    .create_controller(&name, &label, json!({
                        "generateSelector": true,
                        "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
                        "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                        "hooks": {
                            "sync": {"webhook": {"url": format!("{hook}/sync"), "etag": {"enabled": true}}},
                            "customize": customize,
                        },
                    }))
                    .await;
            }
            Kind::Decorator => {
                let _: DecoratorController = cluster
                    .create_controller(&name, &label, json!({
                        "resources": [{"apiVersion": parent.api_version(), "resource": parent.plural()}],
                        "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
                        "hooks": {
                            "sync": {"webhook": {"url": format!("{hook}/decorate"), "etag": {"enabled": true}}},
                            "customize": customize,
                        },
                    }))
                    .await;
            }
        }
        // One related object, so the rule selects something.
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "related", "labels": {"related": label}},
            "stringData": {"k": "v"},
        }))
        .unwrap();
        Api::<Secret>::namespaced(cluster.client(), &ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let shards = ShardLeases::new_group(cluster.client(), &ns, SHARDS);
        Setup {
            cluster,
            ns,
            label,
            parent,
            shards,
        }
    }

    /// A replica of the group: `--sharding` with short lease timings and metrics on a
    /// random port.
    fn replica(&self) -> ControllerProcess {
        let args = sharded_replica_args(
            self.cluster.kubeconfig_path(),
            &self.label,
            self.shards.group(),
            SHARDS,
            Duration::from_secs(4),
        );
        ControllerProcess::start_with_env(
            env!("CARGO_BIN_EXE_metacontroller"),
            args,
            [
                ("POD_NAMESPACE", self.ns.clone()),
                ("RUST_LOG", "warn,metacontroller=info".to_string()),
            ],
        )
    }

    fn parents(&self) -> Api<DynamicObject> {
        self.parent.api(self.cluster.client(), Some(&self.ns))
    }

    async fn create_parents(&self) {
        for i in 0..PARENTS {
            let parent = json!({
                "apiVersion": self.parent.api_version(), "kind": "Parent",
                "metadata": {"name": format!("p-{i}")}, "spec": {},
            });
            create_object(&self.parents(), parent).await;
        }
    }

    /// Every parent has its status (which saw the related Secret) and its child.
    async fn wait_converged(&self) {
        eventually_within("the parents converge", Duration::from_secs(90), || async {
            let parents = self.parents().list(&ListParams::default()).await.unwrap();
            let children = self.cluster.configmap_names(&self.ns).await;
            parents.items.len() == PARENTS
                && parents.items.iter().all(|p| {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    p.data["status"]["related"] == json!(1)
                        && children.contains(&format!("{name}-c"))
                })
        })
        .await;
    }

    /// Waits until every shard Lease is held by one of `replicas` and the holders did not
    /// change for three rounds: the handoff is over.
    async fn wait_spread(&self, replicas: &[ControllerProcess]) {
        let ids: BTreeSet<String> = replicas.iter().map(|p| p.member_identity()).collect();
        self.shards.wait_spread(&ids, Duration::from_secs(60)).await;
    }
}

/// What one replica reports: its owned parents, the entries of each per-parent structure,
/// and whether its related (Secrets) informer runs.
#[derive(Debug, PartialEq)]
struct Report {
    owned: i64,
    entries: BTreeMap<String, i64>,
    secrets_informer: bool,
}

async fn report(p: &ControllerProcess) -> Report {
    let body = p.scrape_metrics().await;
    let value = |line: &str| line.rsplit(' ').next().and_then(|v| v.parse().ok());
    let owned = sample(&body, "metacontroller_shard_parents_owned", "")
        .unwrap_or_else(|| panic!("no parents_owned gauge:\n{body}")) as i64;
    let entries = body
        .lines()
        .filter(|l| l.starts_with("metacontroller_parent_state_entries{"))
        .filter_map(|l| {
            let structure = l.split("structure=\"").nth(1)?.split('"').next()?;
            Some((structure.to_string(), value(l)?))
        })
        .collect();
    let secrets_informer = body.lines().any(|l| {
        l.starts_with("metacontroller_informer_synced{")
            && l.contains("api_version=\"v1\"")
            && l.contains("resource=\"secrets\"")
    });
    Report {
        owned,
        entries,
        secrets_informer,
    }
}

/// The report of each replica, in order.
async fn reports(replicas: &[ControllerProcess]) -> Vec<Report> {
    let mut reports = Vec::new();
    for r in replicas {
        reports.push(report(r).await);
    }
    reports
}

/// Whether one replica's state matches the parents it owns (a decorator keeps no last read
/// version per target).
fn follows_ownership(r: &Report, kind: Kind) -> bool {
    let n = |s: &str| r.entries.get(s).copied();
    let needed = i64::from(r.owned > 0);
    let last_read = match kind {
        Kind::Composite => Some(r.owned),
        Kind::Decorator => None,
    };
    n("last_read") == last_read
        && n("related_rules") == Some(r.owned)
        && n("hook_responses") == Some(r.owned)
        && n("related_informers") == Some(needed)
        && r.secrets_informer == (r.owned > 0)
        && n("expectations") == Some(0)
        && n("taken_names") == Some(0)
}

/// Waits until every replica's per-parent state follows the parents it owns and the owned
/// parents add up to `parents`.
async fn assert_state_follows_ownership(
    kind: Kind,
    replicas: &[ControllerProcess],
    parents: i64,
    when: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let reports = reports(replicas).await;
        let total: i64 = reports.iter().map(|r| r.owned).sum();
        if total == parents && reports.iter().all(|r| follows_ownership(r, kind)) {
            eprintln!("{when}: {reports:?}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{when}: per-parent state does not follow ownership \
             ({total} parents owned in all, want {parents}): {reports:#?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_parent_state_follows_the_parents_through_handoffs_and_deletion() {
    handoffs_and_deletion(Kind::Composite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_target_state_of_a_decorator_follows_the_targets_through_handoffs_and_deletion() {
    handoffs_and_deletion(Kind::Decorator).await;
}

async fn handoffs_and_deletion(kind: Kind) {
    let setup = Setup::new(kind).await;
    let mut replicas = vec![setup.replica(), setup.replica(), setup.replica()];
    for r in &replicas {
        r.wait_joined().await;
    }
    setup.wait_spread(&replicas).await;
    setup.create_parents().await;
    setup.wait_converged().await;
    assert_state_follows_ownership(kind, &replicas, PARENTS as i64, "converged").await;

    for round in 0..HANDOFFS {
        // The oldest replica dies: the others take its shards over...
        let mut victim = replicas.remove(0);
        victim.kill9();
        setup.wait_spread(&replicas).await;
        assert_state_follows_ownership(kind, &replicas, PARENTS as i64, &format!("kill {round}"))
            .await;
        // ...and release some of them to a newcomer.
        let newcomer = setup.replica();
        newcomer.wait_joined().await;
        replicas.push(newcomer);
        setup.wait_spread(&replicas).await;
        assert_state_follows_ownership(kind, &replicas, PARENTS as i64, &format!("join {round}"))
            .await;
    }

    let parents = setup.parents();
    for i in 0..PARENTS {
        parents
            .delete(&format!("p-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    assert_state_follows_ownership(kind, &replicas, 0, "deleted").await;
    // Nothing else is left either (own writes, apply hashes). The garbage collector deletes
    // the children of deleted parents in its own time, and their entries go with them.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let reports = reports(&replicas).await;
        if reports.iter().all(|r| r.entries.values().all(|n| *n == 0)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "per-parent entries left 60 s after every parent was deleted: {reports:#?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
