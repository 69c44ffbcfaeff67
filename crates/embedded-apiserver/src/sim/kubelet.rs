//! Simulated nodes, scheduler and kubelet: Pending pods are bound to a node, start after
//! `pod_ready_after` (Running, Ready, a pod IP, container statuses), a Job's pods finish
//! after `pod_succeed_after`, and deleted pods end once their containers "stop".

use super::exit_status;
use super::util::{self, annotation, is_deleting, phase};
use super::{Key, PodTimes, Sim};
use super::{IGNORE_SIGTERM_ANNOTATION, PHASE_ANNOTATION, READY_ANNOTATION};
use crate::store::{meta_str, State};
use crate::time::now_rfc3339;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const KUBELET: &str = "kubelet";
const SCHEDULER: &str = "kube-scheduler";

/// Creates the simulated nodes (Ready, with capacity) unless they exist.
pub(super) fn register_nodes(sim: &Sim, st: &mut State) {
    for name in &sim.nodes {
        if util::get(st, "", "nodes", "", name).is_some() {
            continue;
        }
        let now = now_rfc3339();
        let cond = |t: &str, s: &str, reason: &str, msg: &str| {
            json!({"type": t, "status": s, "reason": reason, "message": msg,
                   "lastHeartbeatTime": now, "lastTransitionTime": now})
        };
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux",
                    "beta.kubernetes.io/arch": "amd64",
                    "type": "simulated",
                },
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {"podCIDR": "10.244.0.0/16", "podCIDRs": ["10.244.0.0/16"]},
            "status": {
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"},
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"},
                "conditions": [
                    cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                    cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    cond("Ready", "True", "KubeletReady", "kubelet is posting ready status (simulated: no containers run)"),
                ],
                "addresses": [
                    {"type": "InternalIP", "address": sim.node_ip(name)},
                    {"type": "Hostname", "address": name},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "machineID": "", "systemUUID": "", "bootID": "",
                    "kernelVersion": "simulated", "osImage": "metacontroller dev (simulated node)",
                    "containerRuntimeVersion": "simulated://0", "kubeletVersion": "v1.32.4",
                    "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
                },
            },
        });
        let _ = util::create(st, "", "nodes", "", node, KUBELET);
    }
}

/// Drives one pod one step further (each write brings the pod back here as an event).
pub(super) fn reconcile_pod(sim: &mut Sim, st: &mut State, ns: &str, name: &str) {
    let Some(pod) = util::get(st, "", "pods", ns, name) else {
        return;
    };
    let key = Key::Pod(ns.to_string(), name.to_string());
    let uid = meta_str(&pod, "uid").to_string();
    let now = Instant::now();
    if is_deleting(&pod) {
        terminate(sim, st, &pod, key, &uid, now);
        return;
    }
    if matches!(phase(&pod), "Succeeded" | "Failed") {
        return;
    }
    let wanted = annotation(&pod, PHASE_ANNOTATION);
    if wanted == Some("Pending") {
        return;
    }
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() {
        bind(sim, st, &pod);
        return;
    }
    let node = node.to_string();
    let times = *sim.pods.entry(uid.clone()).or_insert(PodTimes {
        seen: now,
        running: None,
        terminating: None,
    });
    if phase(&pod) == "Pending" {
        if pod.pointer("/status/startTime").is_none() {
            let status = pending_status(sim, &pod, &node);
            util::set_status(st, "", "pods", &pod, status, KUBELET);
            return;
        }
        let due = times.seen + sim.cfg.pod_ready_after;
        if now < due {
            sim.at(due, key);
            return;
        }
        let ip = sim.pod_ip();
        let status = running_status(&pod, &ip);
        if util::set_status(st, "", "pods", &pod, status, KUBELET) {
            if let Some(t) = sim.pods.get_mut(&uid) {
                t.running = Some(now);
            }
            started_events(st, &pod);
        }
        return;
    }
    // Running: keep readiness as the annotation asks, then finish if the pod is meant to.
    let running = times.running.unwrap_or_else(|| {
        if let Some(t) = sim.pods.get_mut(&uid) {
            t.running = Some(now);
        }
        now
    });
    let ready = annotation(&pod, READY_ANNOTATION) != Some("false");
    if util::is_ready(&pod) != ready {
        let ip = pod
            .pointer("/status/podIP")
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| sim.pod_ip());
        let status = running_status(&pod, &ip);
        util::set_status(st, "", "pods", &pod, status, KUBELET);
        return;
    }
    let Some(end) = finishes_as(&pod) else {
        return;
    };
    let due = running + sim.cfg.pod_succeed_after;
    if now < due {
        sim.at(due, key);
        return;
    }
    util::set_status(st, "", "pods", &pod, terminated_status(&pod, end), KUBELET);
}

/// The terminal phase a running pod goes to by itself, if any. Run-to-completion pods
/// (restartPolicy `Never` or `OnFailure`) end whoever created them, as on a kubelet: with
/// `Never` a failing container ([`exit_status`]) fails the pod; with `OnFailure` the kubelet
/// would restart it, so the pod keeps running.
fn finishes_as(pod: &Value) -> Option<&'static str> {
    match annotation(pod, PHASE_ANNOTATION) {
        Some("Succeeded") => return Some("Succeeded"),
        Some("Failed") => return Some("Failed"),
        Some("Running") => return None,
        _ => {}
    }
    let policy = pod
        .pointer("/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always");
    let fails = exit_status::of_pod(pod) != 0;
    match (policy, fails) {
        ("Never", true) => Some("Failed"),
        ("Never" | "OnFailure", false) => Some("Succeeded"),
        _ => None,
    }
}

/// The scheduler's part: pick a node (the one a DaemonSet's affinity names, else one whose
/// labels match the pod's nodeSelector, in turn) and bind the pod to it.
fn bind(sim: &mut Sim, st: &mut State, pod: &Value) {
    let pinned = pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
        .and_then(Value::as_str)
        .map(String::from);
    let node = match pinned {
        Some(n) => n,
        None => {
            let selector = pod.pointer("/spec/nodeSelector").cloned();
            let mut chosen = None;
            for _ in 0..sim.nodes.len() {
                let candidate = sim.pick_node();
                if node_matches(st, &candidate, selector.as_ref()) {
                    chosen = Some(candidate);
                    break;
                }
            }
            match chosen {
                Some(n) => n,
                None => {
                    unschedulable(st, pod);
                    return;
                }
            }
        }
    };
    let mut bound = pod.clone();
    bound["spec"]["nodeName"] = json!(node);
    let Some(stored) = util::update(st, "", "pods", bound, SCHEDULER) else {
        return;
    };
    let mut status = stored.get("status").cloned().unwrap_or_else(|| json!({}));
    let mut conds = conditions(&stored);
    util::put_condition(
        &mut conds,
        json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null}),
        false,
    );
    status["conditions"] = json!(conds);
    util::set_status(st, "", "pods", &stored, status, SCHEDULER);
    util::event(
        st,
        &stored,
        "Normal",
        "Scheduled",
        &format!(
            "Successfully assigned {}/{} to {node}",
            meta_str(&stored, "namespace"),
            meta_str(&stored, "name")
        ),
        "default-scheduler",
    );
}

fn node_matches(st: &State, node: &str, selector: Option<&Value>) -> bool {
    let Some(sel) = selector.and_then(Value::as_object) else {
        return true;
    };
    let Some(obj) = util::get(st, "", "nodes", "", node) else {
        return sel.is_empty();
    };
    sel.iter()
        .all(|(k, v)| obj.pointer("/metadata/labels").and_then(|l| l.get(k)) == Some(v))
}

fn unschedulable(st: &mut State, pod: &Value) {
    let mut status = pod.get("status").cloned().unwrap_or_else(|| json!({}));
    let mut conds = conditions(pod);
    util::put_condition(
        &mut conds,
        json!({"type": "PodScheduled", "status": "False", "lastProbeTime": null,
               "reason": "Unschedulable",
               "message": "0/1 nodes are available: node(s) didn't match Pod's node affinity/selector."}),
        false,
    );
    status["conditions"] = json!(conds);
    util::set_status(st, "", "pods", pod, status, SCHEDULER);
}

fn conditions(pod: &Value) -> Vec<Value> {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn containers(pod: &Value, key: &str) -> Vec<Value> {
    pod.pointer(&format!("/spec/{key}"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn image_id(image: &str) -> String {
    let digest = util::template_hash(&json!(image), 0);
    let repo = image.split(['@', ':']).next().unwrap_or(image);
    format!("{repo}@sha256:{:0>64}", digest)
}

fn container_id(pod: &Value, container: &str) -> String {
    let h = util::template_hash(&json!([meta_str(pod, "uid"), container]), 0);
    format!("containerd://{:0>64}", h)
}

/// Bound, containers being created.
fn pending_status(sim: &Sim, pod: &Value, node: &str) -> Value {
    let mut status = pod.get("status").cloned().unwrap_or_else(|| json!({}));
    let host_ip = sim.node_ip(node);
    status["hostIP"] = json!(host_ip);
    status["hostIPs"] = json!([{"ip": host_ip}]);
    status["startTime"] = json!(now_rfc3339());
    let mut conds = conditions(pod);
    for (t, s, r) in [
        ("PodReadyToStartContainers", "False", None),
        ("Initialized", "True", None),
        ("Ready", "False", Some("ContainersNotReady")),
        ("ContainersReady", "False", Some("ContainersNotReady")),
        ("PodScheduled", "True", None),
    ] {
        let mut c = json!({"type": t, "status": s, "lastProbeTime": null});
        if let Some(r) = r {
            c["reason"] = json!(r);
            c["message"] = json!(format!(
                "containers with unready status: [{}]",
                names(pod).join(" ")
            ));
        }
        util::put_condition(&mut conds, c, false);
    }
    status["conditions"] = json!(order(conds));
    status["containerStatuses"] = json!(containers(pod, "containers")
        .iter()
        .map(|c| json!({
            "name": c.get("name"), "image": c.get("image"), "imageID": "",
            "ready": false, "started": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {},
        }))
        .collect::<Vec<_>>());
    status
}

fn names(pod: &Value) -> Vec<String> {
    containers(pod, "containers")
        .iter()
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(String::from))
        .collect()
}

/// Conditions in the order the kubelet writes them.
fn order(mut conds: Vec<Value>) -> Vec<Value> {
    const ORDER: [&str; 5] = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ];
    conds.sort_by_key(|c| {
        let t = c.get("type").and_then(Value::as_str).unwrap_or("");
        ORDER.iter().position(|o| *o == t).unwrap_or(ORDER.len())
    });
    conds
}

/// Containers running; Ready unless the pod's annotation says otherwise.
fn running_status(pod: &Value, ip: &str) -> Value {
    let ready = annotation(pod, READY_ANNOTATION) != Some("false");
    let now = now_rfc3339();
    let mut status = pod.get("status").cloned().unwrap_or_else(|| json!({}));
    status["phase"] = json!("Running");
    status["podIP"] = json!(ip);
    status["podIPs"] = json!([{"ip": ip}]);
    let mut conds = conditions(pod);
    let ready_s = if ready { "True" } else { "False" };
    for (t, s) in [
        ("PodReadyToStartContainers", "True"),
        ("Initialized", "True"),
        ("Ready", ready_s),
        ("ContainersReady", ready_s),
        ("PodScheduled", "True"),
    ] {
        let mut c = json!({"type": t, "status": s, "lastProbeTime": null});
        if s == "False" {
            c["reason"] = json!("ContainersNotReady");
            c["message"] = json!(format!(
                "containers with unready status: [{}]",
                names(pod).join(" ")
            ));
        }
        util::put_condition(&mut conds, c, false);
    }
    status["conditions"] = json!(order(conds));
    let started_at = pod
        .pointer("/status/containerStatuses/0/state/running/startedAt")
        .cloned()
        .unwrap_or(json!(now));
    status["containerStatuses"] = json!(containers(pod, "containers")
        .iter()
        .map(|c| {
            container_status(pod, c, |_| {
                json!({
                    "ready": ready, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": started_at}}, "lastState": {},
                })
            })
        })
        .collect::<Vec<_>>());
    let inits = containers(pod, "initContainers");
    if !inits.is_empty() {
        status["initContainerStatuses"] = json!(inits
            .iter()
            .map(|c| {
                container_status(pod, c, |id| {
                    json!({
                        "ready": true, "started": false, "restartCount": 0,
                        "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                  "startedAt": started_at, "finishedAt": started_at,
                                  "containerID": id}},
                        "lastState": {},
                    })
                })
            })
            .collect::<Vec<_>>());
    }
    status
}

/// The status of container `c` of `pod`: its name, image and their IDs, with the fields
/// `rest` gives for its container ID (readiness, restarts, state).
fn container_status(pod: &Value, c: &Value, rest: impl FnOnce(&str) -> Value) -> Value {
    let name = c.get("name").and_then(Value::as_str).unwrap_or("");
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    let id = container_id(pod, name);
    let mut status = rest(&id);
    status["name"] = json!(name);
    status["image"] = json!(image);
    status["imageID"] = json!(image_id(image));
    status["containerID"] = json!(id);
    status
}

/// Containers exited: 0 (Succeeded), or with their emulated exit status (Failed).
fn terminated_status(pod: &Value, end: &str) -> Value {
    let now = now_rfc3339();
    let (reason, cond_reason) = if end == "Succeeded" {
        ("Completed", "PodCompleted")
    } else {
        ("Error", "PodFailed")
    };
    let failing_command = exit_status::of_pod(pod) != 0;
    let mut status = pod.get("status").cloned().unwrap_or_else(|| json!({}));
    status["phase"] = json!(end);
    let mut conds = conditions(pod);
    for (t, s) in [
        ("PodReadyToStartContainers", "False"),
        ("Ready", "False"),
        ("ContainersReady", "False"),
    ] {
        let mut c = json!({"type": t, "status": s, "lastProbeTime": null});
        if t != "PodReadyToStartContainers" {
            c["reason"] = json!(cond_reason);
        }
        util::put_condition(&mut conds, c, false);
    }
    status["conditions"] = json!(order(conds));
    if let Some(list) = status
        .get_mut("containerStatuses")
        .and_then(Value::as_array_mut)
    {
        for cs in list.iter_mut() {
            let started = cs
                .pointer("/state/running/startedAt")
                .cloned()
                .unwrap_or(json!(now));
            let id = cs.get("containerID").cloned().unwrap_or(Value::Null);
            let code = match end {
                "Succeeded" => 0,
                // Failed by annotation, with no failing command: every container exits 1.
                _ if !failing_command => 1,
                _ => container_exit_status(pod, cs),
            };
            let reason = if code == 0 { "Completed" } else { reason };
            cs["ready"] = json!(false);
            cs["started"] = json!(false);
            cs["state"] = json!({"terminated": {"exitCode": code, "reason": reason,
                "startedAt": started, "finishedAt": now, "containerID": id}});
        }
    }
    status
}

/// The emulated exit status of the container a `containerStatuses` entry describes.
fn container_exit_status(pod: &Value, status: &Value) -> i64 {
    let name = status.get("name").and_then(Value::as_str);
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("name").and_then(Value::as_str) == name)
        })
        .map_or(0, exit_status::of_container)
}

fn started_events(st: &mut State, pod: &Value) {
    for c in containers(pod, "containers") {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        util::event(
            st,
            pod,
            "Normal",
            "Pulled",
            &format!("Container image \"{image}\" already present on machine (simulated)"),
            KUBELET,
        );
        util::event(
            st,
            pod,
            "Normal",
            "Started",
            &format!("Started container {name} (simulated)"),
            KUBELET,
        );
    }
}

/// A deleted pod: its containers stop at once (or, with the ignore-SIGTERM annotation, when
/// the grace period is over), then the kubelet removes it unless finalizers hold it.
fn terminate(sim: &mut Sim, st: &mut State, pod: &Value, key: Key, uid: &str, now: Instant) {
    if pod.pointer("/metadata/deletionGracePeriodSeconds") == Some(&json!(0)) {
        return;
    }
    let times = sim.pods.entry(uid.to_string()).or_insert(PodTimes {
        seen: now,
        running: None,
        terminating: None,
    });
    let since = *times.terminating.get_or_insert(now);
    let grace = util::int_at(pod, "/metadata/deletionGracePeriodSeconds", 0).max(0) as u64;
    let wait = if annotation(pod, IGNORE_SIGTERM_ANNOTATION) == Some("true") {
        Duration::from_secs(grace)
    } else {
        Duration::ZERO
    };
    if now < since + wait {
        sim.at(since + wait, key);
        return;
    }
    if let Some(info) = util::info(st, "", "pods") {
        let ns = meta_str(pod, "namespace").to_string();
        let name = meta_str(pod, "name").to_string();
        crate::ops::finish_pod_termination(st, &info, &ns, &name);
    }
}
