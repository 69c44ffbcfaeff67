//! The dev-mode simulation (nodes, kubelet, workload controllers) seen through the API, as a
//! controller or kubectl sees a small cluster whose pods run.

mod common;

use common::*;
use embedded_apiserver::{Config, SimulationConfig};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use std::time::Duration;

async fn start_sim(nodes: usize) -> (embedded_apiserver::ApiServerHandle, Client) {
    start_with(Config {
        simulation: Some(SimulationConfig {
            nodes,
            pod_ready_after: Duration::from_millis(100),
            pod_succeed_after: Duration::from_millis(200),
        }),
        ..Default::default()
    })
    .await
}

fn api(client: &Client, group: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    dynamic(client, group, "v1", kind, plural, Some("default"))
}

fn pods(client: &Client) -> Api<DynamicObject> {
    api(client, "", "Pod", "pods")
}

async fn create(api: &Api<DynamicObject>, v: Value) -> Value {
    let o = api
        .create(&PostParams::default(), &obj(v))
        .await
        .expect("create");
    serde_json::to_value(o).unwrap()
}

async fn get(api: &Api<DynamicObject>, name: &str) -> Value {
    serde_json::to_value(api.get(name).await.expect("get")).unwrap()
}

async fn list(api: &Api<DynamicObject>, selector: &str) -> Vec<Value> {
    api.list(&ListParams::default().labels(selector))
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect()
}

fn int(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

fn ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn template(app: &str, image: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": image, "ports": [{"containerPort": 8080, "name": "http"}]}]}
    })
}

fn deployment(name: &str, replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": template(name, image),
        }
    })
}

#[tokio::test]
async fn nodes_are_ready_and_pods_run() {
    let (_s, client) = start_sim(2).await;
    let nodes = dynamic(&client, "", "v1", "Node", "nodes", None);
    let all = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 2);
    for n in &all.items {
        let v = serde_json::to_value(n).unwrap();
        let ready = v["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        assert!(ready, "{v}");
    }
    let pods = pods(&client);
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}),
    )
    .await;
    within(
        20,
        eventually(10, || async { ready(&get(&pods, "p").await) }),
    )
    .await;
    let p = get(&pods, "p").await;
    assert_eq!(p["status"]["phase"], "Running");
    assert!(p["spec"]["nodeName"]
        .as_str()
        .unwrap()
        .starts_with("dev-node-"));
    assert!(p["status"]["podIP"].as_str().is_some());
    assert!(p["status"]["startTime"].as_str().is_some());
    assert_eq!(p["status"]["containerStatuses"][0]["ready"], true);
    assert!(p["status"]["containerStatuses"][0]["state"]["running"].is_object());

    // Steering annotations: an unready pod stays unready until told otherwise.
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "slow", "annotations": {"dev.metacontroller.k8s.io/ready": "false"}},
               "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
    )
    .await;
    within(
        20,
        eventually(10, || async {
            get(&pods, "slow").await["status"]["phase"] == "Running"
        }),
    )
    .await;
    assert!(!ready(&get(&pods, "slow").await));
    let patch = json!({"metadata": {"annotations": {"dev.metacontroller.k8s.io/ready": "true"}}});
    pods.patch("slow", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    within(
        20,
        eventually(10, || async { ready(&get(&pods, "slow").await) }),
    )
    .await;

    // A deleted pod terminates gracefully: Terminating first, then gone.
    let deleted = pods.delete("p", &DeleteParams::default()).await.unwrap();
    let terminating = deleted
        .left()
        .expect("graceful deletion returns the object");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    within(
        20,
        eventually(10, || async { pods.get_opt("p").await.unwrap().is_none() }),
    )
    .await;
}

#[tokio::test]
async fn deployment_reaches_ready_and_rolls_within_surge() {
    let (_s, client) = start_sim(1).await;
    let deps = api(&client, "apps", "Deployment", "deployments");
    let rss = api(&client, "apps", "ReplicaSet", "replicasets");
    let pods = pods(&client);
    create(&deps, deployment("web", 3, "nginx:1.26")).await;
    within(
        30,
        eventually(20, || async {
            let d = get(&deps, "web").await;
            int(&d, "/status/readyReplicas") == 3
                && int(&d, "/status/availableReplicas") == 3
                && int(&d, "/status/updatedReplicas") == 3
                && int(&d, "/status/observedGeneration") == int(&d, "/metadata/generation")
        }),
    )
    .await;
    let d = get(&deps, "web").await;
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    let conds = d["status"]["conditions"].as_array().unwrap();
    assert!(conds
        .iter()
        .any(|c| c["type"] == "Available" && c["status"] == "True"));
    assert!(conds
        .iter()
        .any(|c| c["type"] == "Progressing" && c["reason"] == "NewReplicaSetAvailable"));
    let first = list(&rss, "app=web").await;
    assert_eq!(first.len(), 1);
    let hash = first[0]["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(first[0]["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(
        list(&pods, &format!("pod-template-hash={hash}"))
            .await
            .len(),
        3
    );

    // A template change rolls through a new ReplicaSet; with maxSurge 1 / maxUnavailable 0
    // there are never more than 4 pods nor fewer than 3 ready ones.
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}});
    deps.patch("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let all = list(&pods, "app=web").await;
        let live: Vec<&Value> = all
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        assert!(
            live.len() <= 4,
            "more than replicas + maxSurge pods: {}",
            live.len()
        );
        let ready_count = live.iter().filter(|p| ready(p)).count();
        assert!(
            ready_count >= 3,
            "fewer than replicas - maxUnavailable ready pods: {ready_count}"
        );
        let d = get(&deps, "web").await;
        if int(&d, "/status/updatedReplicas") == 3
            && int(&d, "/status/replicas") == 3
            && int(&d, "/status/availableReplicas") == 3
            && int(&d, "/status/observedGeneration") == int(&d, "/metadata/generation")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rollout did not finish: {d}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sets = list(&rss, "app=web").await;
    assert_eq!(sets.len(), 2);
    let old = sets
        .iter()
        .find(|r| r["metadata"]["labels"]["pod-template-hash"] == hash.as_str())
        .unwrap();
    assert_eq!(int(old, "/spec/replicas"), 0);
    let new = sets
        .iter()
        .find(|r| r["metadata"]["labels"]["pod-template-hash"] != hash.as_str())
        .unwrap();
    assert_eq!(
        new["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
    assert_eq!(int(new, "/status/readyReplicas"), 3);

    // Deleting the Deployment removes its ReplicaSets and pods (garbage collector).
    deps.delete("web", &DeleteParams::default()).await.unwrap();
    within(
        30,
        eventually(20, || async {
            list(&rss, "app=web").await.is_empty() && list(&pods, "app=web").await.is_empty()
        }),
    )
    .await;
}

#[tokio::test]
async fn recreate_deployment_replaces_all_pods() {
    let (_s, client) = start_sim(1).await;
    let deps = api(&client, "apps", "Deployment", "deployments");
    let pods = pods(&client);
    let mut d = deployment("rec", 2, "a:1");
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    create(&deps, d).await;
    within(
        30,
        eventually(20, || async {
            int(&get(&deps, "rec").await, "/status/readyReplicas") == 2
        }),
    )
    .await;
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "a:2"}]}}}});
    deps.patch("rec", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    within(
        30,
        eventually(20, || async {
            let d = get(&deps, "rec").await;
            let all = list(&pods, "app=rec").await;
            int(&d, "/status/updatedReplicas") == 2
                && int(&d, "/status/availableReplicas") == 2
                && all.len() == 2
                && all
                    .iter()
                    .all(|p| p["spec"]["containers"][0]["image"] == "a:2")
        }),
    )
    .await;
}

#[tokio::test]
async fn statefulset_starts_pods_in_order_and_rolls_by_partition() {
    let (_s, client) = start_sim(1).await;
    let sets = api(&client, "apps", "StatefulSet", "statefulsets");
    let pods = pods(&client);
    let mut watch_seen: Vec<String> = Vec::new();
    create(
        &sets,
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
               "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                        "template": template("db", "pg:16")}}),
    )
    .await;
    // Order: pod N is created only once pods 0..N are Running and Ready.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let all = list(&pods, "app=db").await;
        for p in &all {
            let name = p["metadata"]["name"].as_str().unwrap().to_string();
            if !watch_seen.contains(&name) {
                let ord: usize = name.trim_start_matches("db-").parse().unwrap();
                for lower in 0..ord {
                    let lp = all
                        .iter()
                        .find(|x| x["metadata"]["name"] == format!("db-{lower}"))
                        .unwrap_or_else(|| panic!("db-{ord} exists before db-{lower}"));
                    assert!(ready(lp), "db-{ord} created before db-{lower} was ready");
                }
                watch_seen.push(name);
            }
        }
        let s = get(&sets, "db").await;
        if int(&s, "/status/readyReplicas") == 3 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "statefulset not ready: {s}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(watch_seen, ["db-0", "db-1", "db-2"]);
    let s = get(&sets, "db").await;
    assert_eq!(
        s["status"]["currentRevision"],
        s["status"]["updateRevision"]
    );
    assert_eq!(int(&s, "/status/currentReplicas"), 3);
    let p0 = get(&pods, "db-0").await;
    assert_eq!(p0["spec"]["hostname"], "db-0");
    assert_eq!(p0["spec"]["subdomain"], "db");
    assert_eq!(
        p0["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
        "db-0"
    );
    let old_rev = s["status"]["currentRevision"].as_str().unwrap().to_string();

    // RollingUpdate with partition 1: db-2 and db-1 move to the new revision, db-0 stays.
    let patch = json!({"spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
                                "template": {"spec": {"containers": [{"name": "c", "image": "pg:17"}]}}}});
    sets.patch("db", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    within(
        40,
        eventually(30, || async {
            let s = get(&sets, "db").await;
            int(&s, "/status/updatedReplicas") == 2 && int(&s, "/status/readyReplicas") == 3
        }),
    )
    .await;
    let s = get(&sets, "db").await;
    assert_eq!(s["status"]["currentRevision"], old_rev.as_str());
    assert_ne!(s["status"]["updateRevision"], old_rev.as_str());
    assert_eq!(int(&s, "/status/currentReplicas"), 1);
    assert_eq!(
        get(&pods, "db-0").await["metadata"]["labels"]["controller-revision-hash"],
        old_rev.as_str()
    );
    assert_eq!(
        get(&pods, "db-2").await["spec"]["containers"][0]["image"],
        "pg:17"
    );
    // Both revisions are ControllerRevisions owned by the set, numbered in order, labelled
    // with their hash and holding the template they stand for.
    let revisions = dynamic(
        &client,
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        Some("default"),
    );
    let mut revs = list(&revisions, "app=db").await;
    revs.sort_by_key(|r| int(r, "/revision"));
    let names: Vec<&str> = revs
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap())
        .collect();
    let new_rev = s["status"]["updateRevision"].as_str().unwrap();
    assert_eq!(names, [old_rev.as_str(), new_rev], "{revs:?}");
    assert_eq!(int(&revs[0], "/revision"), 1);
    assert_eq!(int(&revs[1], "/revision"), 2);
    assert_eq!(
        revs[1]["data"]["spec"]["template"]["spec"]["containers"][0]["image"],
        "pg:17"
    );
    assert_eq!(revs[1]["metadata"]["ownerReferences"][0]["name"], "db");
    assert!(new_rev.ends_with(
        revs[1]["metadata"]["labels"]["controller-revision-hash"]
            .as_str()
            .unwrap()
    ));
}

#[tokio::test]
async fn jobs_complete_and_indexed_jobs_get_indexes() {
    let (_s, client) = start_sim(1).await;
    let jobs = api(&client, "batch", "Job", "jobs");
    let pods = pods(&client);
    let job_template = json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}});
    create(
        &jobs,
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "count"},
               "spec": {"completions": 3, "parallelism": 2, "template": job_template}}),
    )
    .await;
    within(
        30,
        eventually(20, || async {
            let j = get(&jobs, "count").await;
            j["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Complete" && c["status"] == "True")
            })
        }),
    )
    .await;
    let j = get(&jobs, "count").await;
    assert_eq!(int(&j, "/status/succeeded"), 3);
    assert!(j["status"]["completionTime"].is_string());
    assert!(j["status"].get("active").is_none());
    assert_eq!(list(&pods, "job-name=count").await.len(), 3);

    create(
        &jobs,
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "idx"},
               "spec": {"completions": 3, "parallelism": 3, "completionMode": "Indexed", "template": job_template}}),
    )
    .await;
    within(
        30,
        eventually(20, || async {
            get(&jobs, "idx").await["status"]["completedIndexes"] == "0-2"
        }),
    )
    .await;
    let mut indexes: Vec<String> = list(&pods, "job-name=idx")
        .await
        .iter()
        .map(|p| {
            p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2"]);

    // A failing pod template exhausts backoffLimit and the Job fails.
    let mut failing = job_template.clone();
    failing["metadata"] = json!({"annotations": {"dev.metacontroller.k8s.io/phase": "Failed"}});
    create(
        &jobs,
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bad"},
               "spec": {"backoffLimit": 1, "template": failing}}),
    )
    .await;
    within(
        30,
        eventually(20, || async {
            let j = get(&jobs, "bad").await;
            j["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Failed" && c["reason"] == "BackoffLimitExceeded")
            })
        }),
    )
    .await;
    assert_eq!(int(&get(&jobs, "bad").await, "/status/failed"), 2);
}

#[tokio::test]
async fn daemonset_runs_a_pod_per_node() {
    let (_s, client) = start_sim(3).await;
    let dss = api(&client, "apps", "DaemonSet", "daemonsets");
    let pods = pods(&client);
    create(
        &dss,
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
               "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template("agent", "agent:1")}}),
    )
    .await;
    within(
        30,
        eventually(20, || async {
            let d = get(&dss, "agent").await;
            int(&d, "/status/numberReady") == 3 && int(&d, "/status/desiredNumberScheduled") == 3
        }),
    )
    .await;
    let mut nodes: Vec<String> = list(&pods, "app=agent")
        .await
        .iter()
        .map(|p| p["spec"]["nodeName"].as_str().unwrap().to_string())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["dev-node-0", "dev-node-1", "dev-node-2"]);
    let revisions = dynamic(
        &client,
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        Some("default"),
    );
    let revs = list(&revisions, "app=agent").await;
    assert_eq!(revs.len(), 1, "{revs:?}");
    let hash = list(&pods, "app=agent").await[0]["metadata"]["labels"]["controller-revision-hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(revs[0]["metadata"]["name"], format!("agent-{hash}"));
}

#[tokio::test]
async fn service_endpointslice_lists_ready_pods() {
    let (_s, client) = start_sim(1).await;
    let deps = api(&client, "apps", "Deployment", "deployments");
    let svcs = api(&client, "", "Service", "services");
    let slices = dynamic(
        &client,
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        Some("default"),
    );
    let pods = pods(&client);
    create(&deps, deployment("api", 2, "api:1")).await;
    create(
        &svcs,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api"},
               "spec": {"selector": {"app": "api"}, "ports": [{"port": 80, "targetPort": "http"}]}}),
    )
    .await;
    within(
        30,
        eventually(20, || async {
            let s = list(&slices, "kubernetes.io/service-name=api").await;
            s.len() == 1
                && s[0]["endpoints"].as_array().is_some_and(|e| {
                    e.len() == 2 && e.iter().all(|e| e["conditions"]["ready"] == true)
                })
        }),
    )
    .await;
    let s = &list(&slices, "kubernetes.io/service-name=api").await[0];
    assert_eq!(s["ports"][0]["port"], 8080);
    assert_eq!(s["addressType"], "IPv4");
    let mut ips: Vec<String> = list(&pods, "app=api")
        .await
        .iter()
        .map(|p| p["status"]["podIP"].as_str().unwrap().to_string())
        .collect();
    let mut listed: Vec<String> = s["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["addresses"][0].as_str().unwrap().to_string())
        .collect();
    ips.sort();
    listed.sort();
    assert_eq!(ips, listed);

    // An unready pod is listed as not ready.
    let name = list(&pods, "app=api").await[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let patch = json!({"metadata": {"annotations": {"dev.metacontroller.k8s.io/ready": "false"}}});
    pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    within(
        30,
        eventually(20, || async {
            let s = list(&slices, "kubernetes.io/service-name=api").await;
            s[0]["endpoints"].as_array().is_some_and(|e| {
                e.iter()
                    .filter(|e| e["conditions"]["ready"] == false)
                    .count()
                    == 1
            })
        }),
    )
    .await;
}

#[tokio::test]
async fn simulation_is_off_by_default() {
    let (_s, client) = start().await;
    let pods = pods(&client);
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
    )
    .await;
    let nodes = dynamic(&client, "", "v1", "Node", "nodes", None);
    assert!(nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
    // The pod is deleted at once (no kubelet) and never left Pending.
    let p = get(&pods, "p").await;
    assert_eq!(p["status"]["phase"], "Pending");
    assert!(p["spec"].get("nodeName").is_none());
    let gone = pods.delete("p", &DeleteParams::default()).await.unwrap();
    assert!(gone.is_right() || pods.get_opt("p").await.unwrap().is_none());
}
