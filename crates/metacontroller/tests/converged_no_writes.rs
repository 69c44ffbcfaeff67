//! A converged child is never written again (issues 33 and 43): for a corpus of kinds whose
//! desired objects leave fields to the API server's defaulting inside atomic maps, atomic lists
//! and un-keyed lists (env `fieldRef` without `apiVersion`, a downwardAPI volume, ports without
//! `protocol`, StatefulSet `volumeClaimTemplates`, CRD defaults inside atomic values, RBAC
//! subjects without `apiGroup`, HPA behavior rules, LimitRange defaults), or write fields in
//! a form the server changes (quantities not in canonical form in maps, in lists without merge
//! keys and as single values: LimitRange limits, ResourceQuota `hard`, HPA v2 metric targets,
//! container resources, `emptyDir.sizeLimit`; Secret `stringData`, which the server folds into
//! `data`; base64 with line breaks or unused trailing bits in Secret `data` and ConfigMap
//! `binaryData`), the real binary creates the children through a CompositeController and then,
//! over 5 resyncs, sends no write: neither its own `/metrics` (`rest_client_requests_total` other than GET) nor the
//! API server see one. The server's view is the watch events on the children since a list taken
//! before the resyncs, counting creations, deletions and modifications of the binary's own
//! `managedFields` entries (a real server's controllers update the children's status and
//! metadata at any time; those are not ours).
//!
//! Run in `--apply-schema=auto` (default), `--apply-schema=off` and
//! `--apply-strategy=server-side-apply`; the Pod child uses RollingRecreate (a planned write
//! would delete and recreate it), the others InPlace. Kinds the server does not serve are
//! reported as `n/a`. Passes on the embedded server and on a real one
//! (`METACONTROLLER_E2E_KUBECONFIG`). Prints the table kind × mode → writes.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, dynamic_api, eventually_within, parent_name, unique_crd, ControllerProcess,
    CrdBuilder, HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);
const RESYNCS: usize = 5;

/// One child kind of the corpus.
struct Kind {
    api_version: String,
    kind: &'static str,
    plural: &'static str,
    method: &'static str,
}

fn kind(api_version: &str, kind: &'static str, plural: &'static str, method: &'static str) -> Kind {
    Kind {
        api_version: api_version.to_string(),
        kind,
        plural,
        method,
    }
}

/// The CRD child: an atomic list and an atomic map whose items/fields have schema defaults.
fn widget_crd() -> CrdBuilder {
    unique_crd("widget", "Widget", "widgets").schema(json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "rules": {"type": "array", "x-kubernetes-list-type": "atomic",
                "items": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "weight": {"type": "integer", "default": 1}}}},
            "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                "properties": {"key": {"type": "string"},
                               "mode": {"type": "string", "default": "exact"}}}}},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}))
}

fn corpus(widget: &CrdBuilder) -> Vec<Kind> {
    vec![
        kind("v1", "Pod", "pods", "RollingRecreate"),
        kind("apps/v1", "Deployment", "deployments", "InPlace"),
        kind("apps/v1", "StatefulSet", "statefulsets", "InPlace"),
        kind("apps/v1", "DaemonSet", "daemonsets", "InPlace"),
        kind("batch/v1", "Job", "jobs", "InPlace"),
        kind("batch/v1", "CronJob", "cronjobs", "InPlace"),
        kind("v1", "Service", "services", "InPlace"),
        kind("networking.k8s.io/v1", "Ingress", "ingresses", "InPlace"),
        kind(
            "networking.k8s.io/v1",
            "NetworkPolicy",
            "networkpolicies",
            "InPlace",
        ),
        kind(
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            "InPlace",
        ),
        kind("v1", "ConfigMap", "configmaps", "InPlace"),
        kind("v1", "Secret", "secrets", "InPlace"),
        kind("v1", "ServiceAccount", "serviceaccounts", "InPlace"),
        kind("v1", "LimitRange", "limitranges", "InPlace"),
        kind("v1", "ResourceQuota", "resourcequotas", "InPlace"),
        kind(
            "autoscaling/v2",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
            "InPlace",
        ),
        kind(
            "policy/v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            "InPlace",
        ),
        kind("rbac.authorization.k8s.io/v1", "Role", "roles", "InPlace"),
        kind(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            "rolebindings",
            "InPlace",
        ),
        Kind {
            api_version: widget.api_version(),
            kind: "Widget",
            plural: "widgets",
            method: "InPlace",
        },
    ]
}

/// A pod spec with server-defaulted fields inside atomic values: an env `fieldRef` (atomic
/// map) and a downwardAPI volume (atomic list of `fieldRef`s) without `apiVersion`, a
/// container port without `protocol`; quantities the server rewrites (`0.5` → `500m`, a
/// number, `0.5Gi` → `512Mi`, an `emptyDir.sizeLimit` of `1.5Gi` → `1536Mi`).
fn pod_spec(restart: &str) -> Value {
    json!({
        "restartPolicy": restart,
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9",
            "ports": [{"containerPort": 8080}],
            "resources": {"limits": {"cpu": "0.5", "memory": "0.5Gi"},
                          "requests": {"cpu": 0.25, "memory": "0.25Gi"}},
            "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "volumeMounts": [{"name": "podinfo", "mountPath": "/etc/podinfo"},
                             {"name": "scratch", "mountPath": "/scratch"}]}],
        "volumes": [{"name": "podinfo", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "scratch", "emptyDir": {"sizeLimit": "1.5Gi"}}]
    })
}

fn template(labels: &Value, restart: &str) -> Value {
    json!({"metadata": {"labels": labels}, "spec": pod_spec(restart)})
}

/// Policy kinds whose quantities the server rewrites: non-canonical quantities (strings and
/// numbers) inside LimitRange's un-keyed `limits` list (whose `Container` item the server
/// completes with `defaultRequest`), in ResourceQuota's `hard` map and in HPA v2 metric
/// targets (the HPA's `behavior` and `minReplicas` are left to the server's defaults). The
/// limits admit the corpus' own pods and claims on a real server (LimitRanger, quota).
fn policy_spec(kind: &str, parent: &str) -> Value {
    match kind {
        "LimitRange" => json!({"limits": [
            {"type": "Container", "default": {"cpu": "0.5", "memory": "0.5Gi"},
             "defaultRequest": {"cpu": 0.25}, "max": {"cpu": 2, "memory": "1.5Gi"}},
            {"type": "PersistentVolumeClaim", "max": {"storage": "0.5Ti"}}]}),
        "ResourceQuota" => json!({"hard": {"requests.storage": "0.5Ti",
            "persistentvolumeclaims": "10000m", "services": 20, "count/configmaps": "1e2"}}),
        "HorizontalPodAutoscaler" => json!({
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                               "name": format!("{parent}-deployment")},
            "maxReplicas": 3,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "AverageValue", "averageValue": "0.5"}}},
                {"type": "Resource", "resource": {"name": "memory",
                    "target": {"type": "Utilization", "averageUtilization": 80}}},
                {"type": "Pods", "pods": {"metric": {"name": "qps"},
                    "target": {"type": "AverageValue", "averageValue": "1.5k"}}},
                {"type": "External", "external": {"metric": {"name": "queue"},
                    "target": {"type": "Value", "value": "2048Mi"}}}],
            "behavior": {"scaleDown": {"policies": [
                {"type": "Pods", "value": 1, "periodSeconds": 60}]}}}),
        "PodDisruptionBudget" => json!({"minAvailable": "50%",
            "selector": {"matchLabels": {"app": format!("{parent}-deployment")}}}),
        _ => Value::Null,
    }
}

/// Kinds without `spec`: a Secret with `stringData` (folded into `data` by the server) and
/// base64 `data` the server re-encodes (a line break, unused trailing bits); a ConfigMap with
/// such `binaryData`; a ServiceAccount; a Role; a RoleBinding whose User and Group subjects
/// leave `apiGroup` to the server.
fn top_level(kind: &str, parent: &str) -> Value {
    match kind {
        "ConfigMap" => json!({"data": {"a": "1"},
            "binaryData": {"wrapped": "AAEC\nAw==", "odd": "QR=="}}),
        "Secret" => json!({"stringData": {"greeting": "hello"},
            "data": {"wrapped": "QUJD\nREVG", "odd": "QR=="}}),
        "ServiceAccount" => json!({"automountServiceAccountToken": false,
            "imagePullSecrets": [{"name": "registry"}]}),
        "Role" => json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"],
            "resourceNames": [format!("{parent}-configmap")], "verbs": ["get", "watch"]}]}),
        "RoleBinding" => json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": format!("{parent}-role")},
            "subjects": [{"kind": "ServiceAccount", "name": format!("{parent}-serviceaccount")},
                         {"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"}]}),
        _ => json!({}),
    }
}

/// The desired child of `kind` for parent `parent`.
fn desired(k: &Kind, parent: &str) -> Value {
    let name = format!("{parent}-{}", k.kind.to_lowercase());
    let app = json!({"app": name});
    let spec = match k.kind {
        "Pod" => pod_spec("Always"),
        "Deployment" => json!({"replicas": 0, "selector": {"matchLabels": app},
                               "template": template(&app, "Always")}),
        "StatefulSet" => json!({"replicas": 0, "serviceName": name,
            "selector": {"matchLabels": app}, "template": template(&app, "Always"),
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "0.5Gi"}}}}]}),
        "DaemonSet" => json!({"selector": {"matchLabels": app},
                              "template": template(&app, "Always")}),
        "Job" => json!({"suspend": true, "template": template(&app, "Never")}),
        "CronJob" => json!({"schedule": "*/5 * * * *", "suspend": true,
            "jobTemplate": {"spec": {"template": template(&app, "Never")}}}),
        "Service" => json!({"selector": app, "ports": [{"port": 80}]}),
        "Ingress" => json!({"rules": [{"http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}]}),
        "NetworkPolicy" => json!({"podSelector": {"matchLabels": app},
            "ingress": [{"ports": [{"port": 80}, {"port": 443}]}]}),
        "PersistentVolumeClaim" => json!({"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "0.5Gi"}}}),
        "Widget" => json!({"rules": [{"name": "a"}, {"name": "b", "weight": 2}],
                           "selector": {"key": "k"}}),
        other => policy_spec(other, parent),
    };
    let mut obj = json!({"apiVersion": k.api_version, "kind": k.kind,
        "metadata": {"name": name, "labels": {"corpus": parent}}});
    if spec.is_null() {
        if let (Some(o), Value::Object(fields)) = (obj.as_object_mut(), top_level(k.kind, parent)) {
            o.extend(fields);
        }
    } else {
        obj["spec"] = spec;
    }
    obj
}

/// One run of the binary with `flags`.
struct Mode {
    name: &'static str,
    flags: &'static [&'static str],
}

const MODES: [Mode; 3] = [
    Mode {
        name: "auto",
        flags: &[],
    },
    Mode {
        name: "off",
        flags: &["--apply-schema=off"],
    },
    Mode {
        name: "server-side-apply",
        flags: &["--apply-strategy=server-side-apply"],
    },
];

/// Writes in one mode, per kind (`None`: not served): sent by the binary (its write log
/// lines; a PUT the server finds unchanged moves no resourceVersion but is still a write) and
/// seen by the server (watch events attributed to the binary's field manager); and the
/// binary's own non-GET requests.
struct Row {
    per_kind: BTreeMap<&'static str, Option<(usize, usize)>>,
    binary_writes: u64,
    logs: String,
}

/// The sum of `rest_client_requests_total` samples whose method is not GET.
fn non_get_requests(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{") && !l.contains("method=\"GET\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

async fn scrape(p: &ControllerProcess) -> String {
    let address = eventually_address(p).await;
    reqwest::Client::new()
        .get(format!("http://{address}/metrics"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("scraping /metrics")
        .text()
        .await
        .expect("reading /metrics")
}

async fn eventually_address(p: &ControllerProcess) -> String {
    let find = || {
        p.logs()
            .lines()
            .find(|l| l.contains("serving metrics"))
            .and_then(|l| l.split("address=").nth(1))
            .and_then(|a| a.split_whitespace().next())
            .map(str::to_owned)
    };
    eventually_within("the binary serves metrics", WAIT, || async {
        find().is_some()
    })
    .await;
    find().unwrap_or_default()
}

/// True when the server serves `k` (discovery), so the corpus adapts to the embedded server.
async fn served(client: &kube::Client, k: &Kind) -> bool {
    let (group, version) = k
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &k.api_version));
    let list = if group.is_empty() {
        client.list_core_api_resources(version).await
    } else {
        client.list_api_group_resources(&k.api_version).await
    };
    list.is_ok_and(|l| l.resources.iter().any(|r| r.name == k.plural))
}

/// The field manager the binary's writes are recorded under: upstream's (client-go's default
/// User-Agent, `metacontroller/<version> ...`, makes the server record `metacontroller` for
/// updates; server-side apply names it explicitly).
const MANAGER: &str = "metacontroller";

/// The binary's `managedFields` entries of `obj`. Any write of ours that changes the object
/// changes them (a new field set, operation or timestamp), so they tell our writes from status
/// and metadata writes by the cluster's own controllers (which a real server makes at any time).
fn our_entries(obj: &DynamicObject) -> Vec<Value> {
    obj.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.manager.as_deref() == Some(MANAGER))
        .filter_map(|e| serde_json::to_value(e).ok())
        .collect()
}

/// The children labelled `corpus=<parent>` at one moment: the list's resourceVersion and each
/// child's entries of ours.
struct Snapshot {
    rv: String,
    ours: BTreeMap<String, Vec<Value>>,
}

async fn snapshot(api: &Api<DynamicObject>, parent: &str) -> Snapshot {
    let lp = ListParams::default().labels(&format!("corpus={parent}"));
    let list = api.list(&lp).await.expect("listing the children");
    let ours = list
        .items
        .iter()
        .map(|o| (o.metadata.name.clone().unwrap_or_default(), our_entries(o)))
        .collect();
    Snapshot {
        rv: list.metadata.resource_version.unwrap_or_default(),
        ours,
    }
}

/// Writes by the binary the server recorded since `snap`: creations, deletions, and
/// modifications that changed the binary's `managedFields` entries.
async fn writes_seen_since(api: &Api<DynamicObject>, parent: &str, mut snap: Snapshot) -> usize {
    let wp = WatchParams::default()
        .labels(&format!("corpus={parent}"))
        .timeout(1);
    let Ok(stream) = api.watch(&wp, &snap.rv).await else {
        return usize::MAX;
    };
    let events: Vec<_> = stream.collect().await;
    let mut seen = 0;
    for event in events {
        match event {
            Ok(WatchEvent::Added(_) | WatchEvent::Deleted(_)) => seen += 1,
            Ok(WatchEvent::Modified(obj)) => {
                let name = obj.metadata.name.clone().unwrap_or_default();
                let now = our_entries(&obj);
                if snap.ours.get(&name) != Some(&now) {
                    seen += 1;
                }
                snap.ours.insert(name, now);
            }
            Ok(WatchEvent::Bookmark(_)) => {}
            Ok(WatchEvent::Error(_)) | Err(_) => return usize::MAX,
        }
    }
    seen
}

/// Child writes of `kind` the binary logged (create, update, server-side apply, delete).
fn logged_writes(logs: &str, kind: &str) -> usize {
    let verbs = ["create", "update", "apply", "delete"].map(|v| format!("{v} {kind} "));
    let messages = [
        "creating child",
        "updating",
        "server-side apply",
        "deleting child",
    ];
    logs.lines()
        .filter(|l| verbs.iter().any(|v| l.contains(v.as_str())))
        .filter(|l| messages.iter().any(|m| l.contains(m)))
        .count()
}

/// Per kind, the writes sent by the binary and seen by the server (`None`: not served).
type PerKind = BTreeMap<&'static str, Option<(usize, usize)>>;

/// The corpus kinds the server serves, and a row with `n/a` (`None`) for the others.
async fn served_kinds(cluster: &TestCluster, widget: &CrdBuilder) -> (Vec<Kind>, PerKind) {
    let mut kinds = Vec::new();
    let mut per_kind = BTreeMap::new();
    for k in corpus(widget) {
        if served(&cluster.client(), &k).await {
            kinds.push(k);
        } else {
            per_kind.insert(k.kind, None);
        }
    }
    (kinds, per_kind)
}

/// The hook: the desired child of every kind in `kinds` for the parent, and a status
/// counting them.
async fn corpus_hook(kinds: &[Kind], widget: &CrdBuilder) -> HookServer {
    let wanted: Vec<(String, &'static str)> = kinds
        .iter()
        .map(|k| (k.api_version.clone(), k.kind))
        .collect();
    let all = corpus(widget);
    HookServer::start(move |_, req| {
        let parent = parent_name(req);
        let children: Vec<Value> = all
            .iter()
            .filter(|k| {
                wanted
                    .iter()
                    .any(|(a, n)| *a == k.api_version && *n == k.kind)
            })
            .map(|k| desired(k, parent))
            .collect();
        HookReply::json(json!({"children": children, "status": {"children": children.len()}}))
    })
    .await
}

/// One mode's controller running: the CompositeController over the served kinds, its hook
/// and the binary with the mode's flags.
struct Running {
    ns: String,
    parent_crd: CrdBuilder,
    kinds: Vec<Kind>,
    per_kind: PerKind,
    hook: HookServer,
    process: ControllerProcess,
}

/// Installs the CRDs, creates the controller (resync every second) and starts the binary
/// in `mode`.
async fn start_mode(cluster: &TestCluster, mode: &Mode) -> Running {
    let ns = cluster.create_pod_namespace("converged").await;
    let parent_crd = cluster.install_parent_crd("converged").await;
    let widget = widget_crd();
    cluster.install_crd(&widget.build()).await;
    let (kinds, per_kind) = served_kinds(cluster, &widget).await;
    let hook = corpus_hook(&kinds, &widget).await;
    let child_resources: Vec<Value> = kinds
        .iter()
        .map(|k| {
            json!({"apiVersion": k.api_version, "resource": k.plural,
                        "updateStrategy": {"method": k.method}})
        })
        .collect();
    let mut spec = parent_crd.composite_spec(&hook.url("/sync"));
    spec["childResources"] = json!(child_resources);
    spec["resyncPeriodSeconds"] = json!(1);
    let label = cluster
        .create_labelled_controller::<CompositeController>("converged", spec)
        .await;
    let selector = format!("--target-label-selector=team={label}");
    let mut extra = vec![
        "--discovery-interval",
        "1s",
        "--metrics-address=127.0.0.1:0",
    ];
    extra.push(&selector);
    extra.extend(mode.flags);
    let process = ControllerProcess::run(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &extra,
    );
    Running {
        ns,
        parent_crd,
        kinds,
        per_kind,
        hook,
        process,
    }
}

/// Creates parent `p`, waits until each of its children exists and lets the first syncs
/// after the creates (and the servers' own status writes) pass; returns an API per kind.
async fn converge(cluster: &TestCluster, r: &Running) -> Vec<(&'static str, Api<DynamicObject>)> {
    create_object(
        &r.parent_crd.api(cluster.client(), Some(&r.ns)),
        json!({
            "apiVersion": r.parent_crd.api_version(), "kind": "Parent",
            "metadata": {"name": "p"}, "spec": {"selector": {"matchLabels": {"corpus": "p"}}}}),
    )
    .await;
    let apis: Vec<(&'static str, Api<DynamicObject>)> = r
        .kinds
        .iter()
        .map(|k| {
            let api = dynamic_api(
                cluster.client(),
                &k.api_version,
                k.kind,
                k.plural,
                Some(&r.ns),
            );
            (k.kind, api)
        })
        .collect();
    eventually_within("every child is created", WAIT, || async {
        for (kind, api) in &apis {
            if api
                .get(&format!("p-{}", kind.to_lowercase()))
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    })
    .await;
    let calls = r.hook.calls("/sync");
    eventually_within("the hook is called on resync", WAIT, || async {
        r.hook.calls("/sync") >= calls + 3
    })
    .await;
    apis
}

/// The writes during `RESYNCS` resyncs of the converged children: logged and seen per kind,
/// and the binary's non-GET requests.
async fn resync_writes(r: Running, apis: &[(&'static str, Api<DynamicObject>)]) -> Row {
    let mut snapshots = Vec::new();
    for (kind, api) in apis {
        let snap = snapshot(api, "p").await;
        assert!(
            snap.ours.values().all(|e| !e.is_empty()),
            "{kind}: the binary's writes are not recorded under field manager {MANAGER}"
        );
        snapshots.push(snap);
    }
    let before = non_get_requests(&scrape(&r.process).await);
    let logged_before = r.process.logs().len();
    let calls = r.hook.calls("/sync");
    eventually_within("resyncs call the hook", WAIT, || async {
        r.hook.calls("/sync") >= calls + RESYNCS
    })
    .await;
    let binary_writes = non_get_requests(&scrape(&r.process).await) - before;
    let logs = r.process.logs();
    let window = logs.get(logged_before..).unwrap_or_default();
    let mut per_kind = r.per_kind;
    for ((kind, api), snap) in apis.iter().zip(snapshots) {
        let seen = writes_seen_since(api, "p", snap).await;
        per_kind.insert(*kind, Some((logged_writes(window, kind), seen)));
    }
    Row {
        per_kind,
        binary_writes,
        logs,
    }
}

async fn run_mode(cluster: &TestCluster, mode: &Mode) -> Row {
    let running = start_mode(cluster, mode).await;
    let apis = converge(cluster, &running).await;
    resync_writes(running, &apis).await
}

fn print_table(server: &str, rows: &[(&str, Row)]) {
    let mut out = format!(
        "\nwrites during {RESYNCS} resyncs of converged children ({server} server), \
         sent by the binary / seen by the server\n"
    );
    out.push_str(&format!("{:<24}", "kind"));
    for (mode, _) in rows {
        out.push_str(&format!("{mode:>20}"));
    }
    out.push('\n');
    let kinds: Vec<&str> = rows
        .first()
        .map(|(_, r)| r.per_kind.keys().copied().collect())
        .unwrap_or_default();
    for k in kinds {
        out.push_str(&format!("{k:<24}"));
        for (_, row) in rows {
            let cell = match row.per_kind.get(k).copied().flatten() {
                Some((sent, seen)) => format!("{sent}/{seen}"),
                None => "n/a".to_string(),
            };
            out.push_str(&format!("{cell:>20}"));
        }
        out.push('\n');
    }
    out.push_str(&format!("{:<24}", "binary non-GET requests"));
    for (_, row) in rows {
        out.push_str(&format!("{:>20}", row.binary_writes));
    }
    println!("{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converged_children_are_not_written_on_resync() {
    let mut rows = Vec::new();
    let mut server = "embedded";
    for mode in &MODES {
        // A fresh embedded server per mode; a real cluster is shared (own namespaces).
        let cluster = TestCluster::start().await;
        if !cluster.is_embedded() {
            server = "real";
        }
        cluster.install_metacontroller_crds().await;
        rows.push((mode.name, run_mode(&cluster, mode).await));
    }
    print_table(server, &rows);
    for (mode, row) in &rows {
        let written: Vec<_> = row
            .per_kind
            .iter()
            .filter(|(_, n)| n.is_some_and(|(sent, seen)| sent + seen > 0))
            .collect();
        assert!(
            written.is_empty() && row.binary_writes == 0,
            "mode {mode}: converged children were written on resync: {written:?}, \
             {} non-GET requests by the binary\ncontroller logs:\n{}",
            row.binary_writes,
            row.logs
        );
    }
}
