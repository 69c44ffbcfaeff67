//! The EndpointSlice controller: every Service with a selector gets one EndpointSlice
//! (`kubernetes.io/service-name`) listing the selected pods that have an address, with
//! their ready / serving / terminating conditions.

use super::util::{self, CONTROLLER_MANAGER};
use crate::selector::LabelSelector;
use crate::store::{meta_str, Event, State};
use serde_json::{json, Value};

const SERVICE_NAME: &str = "kubernetes.io/service-name";
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const MANAGER: &str = "endpointslice-controller.k8s.io";

/// The Service an EndpointSlice belongs to (if the controller manages it).
pub(super) fn service_of(slice: &Value) -> Option<String> {
    let labels = slice.pointer("/metadata/labels")?;
    if labels.get(MANAGED_BY).and_then(Value::as_str) != Some(MANAGER) {
        return None;
    }
    labels
        .get(SERVICE_NAME)
        .and_then(Value::as_str)
        .map(String::from)
}

/// Whether a pod event can change any endpoint (address, readiness, labels, deletion).
pub(super) fn pod_change_matters(ev: &Event) -> bool {
    let view = |p: &Value| {
        (
            p.pointer("/status/podIP").cloned(),
            util::is_ready(p),
            util::is_deleting(p),
            p.pointer("/metadata/labels").cloned(),
            util::phase(p).to_string(),
        )
    };
    let has_ip = |p: &Value| p.pointer("/status/podIP").is_some();
    match &ev.prev {
        None => has_ip(&ev.object),
        Some(prev) => {
            (has_ip(prev) || has_ip(&ev.object))
                && (ev.etype == crate::store::EventType::Deleted || view(prev) != view(&ev.object))
        }
    }
}

pub(super) fn reconcile(st: &mut State, ns: &str, name: &str) {
    let Some(svc) = util::get(st, "", "services", ns, name) else {
        return;
    };
    let selector = svc
        .pointer("/spec/selector")
        .filter(|s| s.as_object().is_some_and(|m| !m.is_empty()))
        .cloned();
    let Some(selector) = selector else {
        return; // Without a selector the user manages the endpoints.
    };
    if util::is_deleting(&svc) {
        return;
    }
    let sel = LabelSelector::from_object(&json!({ "matchLabels": selector }));
    let publish_unready = svc
        .pointer("/spec/publishNotReadyAddresses")
        .and_then(Value::as_bool)
        == Some(true);
    let pods_gr = util::gr("", "pods");
    let mut endpoints = Vec::new();
    let mut ready_pods = Vec::new();
    for (_, pod) in st.list(&pods_gr, Some(ns)) {
        let Some(ip) = pod.pointer("/status/podIP").and_then(Value::as_str) else {
            continue;
        };
        if !sel.matches_object(&pod) || matches!(util::phase(&pod), "Succeeded" | "Failed") {
            continue;
        }
        let terminating = util::is_deleting(&pod);
        let serving = util::is_ready(&pod) || publish_unready;
        let mut ep = json!({
            "addresses": [ip],
            "conditions": {
                "ready": serving && !terminating,
                "serving": serving,
                "terminating": terminating,
            },
            "targetRef": {"kind": "Pod", "namespace": ns, "name": meta_str(&pod, "name"),
                          "uid": meta_str(&pod, "uid")},
        });
        if let Some(node) = pod.pointer("/spec/nodeName") {
            ep["nodeName"] = node.clone();
        }
        if serving && !terminating {
            ready_pods.push(pod.clone());
        }
        endpoints.push(ep);
    }
    let ports = ports(&svc, ready_pods.first().map(|p| &**p));
    let existing = util::owned(
        st,
        meta_str(&svc, "uid"),
        "discovery.k8s.io",
        "endpointslices",
    );
    match existing.first() {
        Some(slice) => {
            let same = slice.get("endpoints").cloned().unwrap_or(json!([])) == json!(endpoints)
                && slice.get("ports").cloned().unwrap_or(json!([])) == ports;
            if !same {
                let mut n = (**slice).clone();
                n["endpoints"] = json!(endpoints);
                n["ports"] = ports;
                util::update(
                    st,
                    "discovery.k8s.io",
                    "endpointslices",
                    n,
                    CONTROLLER_MANAGER,
                );
            }
        }
        None => {
            let slice = json!({
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "generateName": format!("{name}-"),
                    "namespace": ns,
                    "labels": {SERVICE_NAME: name, MANAGED_BY: MANAGER},
                    "ownerReferences": [util::owner_ref(&svc)],
                },
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": ports,
            });
            util::create(
                st,
                "discovery.k8s.io",
                "endpointslices",
                ns,
                slice,
                CONTROLLER_MANAGER,
            );
        }
    }
}

/// The Service's ports with their target ports resolved (named ports through a pod).
fn ports(svc: &Value, pod: Option<&Value>) -> Value {
    let list = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    json!(list
        .iter()
        .map(|p| {
            let target = match p.get("targetPort") {
                Some(Value::Number(n)) => n.as_i64(),
                Some(Value::String(named)) => pod.and_then(|pod| named_port(pod, named)),
                _ => p.get("port").and_then(Value::as_i64),
            };
            json!({
                "name": p.get("name").cloned().unwrap_or(json!("")),
                "port": target,
                "protocol": p.get("protocol").cloned().unwrap_or(json!("TCP")),
            })
        })
        .collect::<Vec<_>>())
}

fn named_port(pod: &Value, name: &str) -> Option<i64> {
    pod.pointer("/spec/containers")?
        .as_array()?
        .iter()
        .filter_map(|c| c.get("ports").and_then(Value::as_array))
        .flatten()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        .and_then(|p| p.get("containerPort"))
        .and_then(Value::as_i64)
}
