//! Upstream's service-per-pod example with its own jsonnet files unchanged, run by the
//! controller itself as `jsonnet:` hooks (no jsonnetd). Runs on the embedded server (dev
//! mode) and, with METACONTROLLER_E2E_KUBECONFIG, on a real one (alone: `run` without a
//! selector).

use std::path::{Path, PathBuf};

use metacontroller_testkit::example::{all_installed, ExampleCluster, Kubectl};
use serde::Deserialize;
use serde_json::{json, Value};

const HOOKS_CONFIG_MAP: &str = "service-per-pod-hooks";

fn upstream(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upstream-service-per-pod")
        .join(file)
}

/// Upstream's DecoratorControllers with each `webhook: {url: http://service-per-pod.metacontroller/<path>}`
/// (jsonnetd serving `<path>.jsonnet`) replaced by the same file as a `jsonnet:` hook, and
/// the controllers renamed with `suffix`; the jsonnetd Deployment and Service are dropped.
fn rewritten_controllers(namespace: &str, suffix: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(upstream("service-per-pod.yaml")).unwrap();
    let mut controllers = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut doc = Value::deserialize(doc).unwrap();
        if doc["kind"] != "DecoratorController" {
            continue;
        }
        let name = doc["metadata"]["name"].as_str().unwrap().to_string();
        doc["metadata"]["name"] = json!(format!("{name}-{suffix}"));
        let hooks = doc["spec"]["hooks"].as_object_mut().unwrap();
        for hook in hooks.values_mut() {
            let url = hook["webhook"]["url"].as_str().unwrap().to_string();
            let path = url.rsplit('/').next().unwrap();
            *hook = json!({"jsonnet": {
                "configMapRef": {"namespace": namespace, "name": HOOKS_CONFIG_MAP},
                "key": format!("{path}.jsonnet"),
            }});
        }
        controllers.push(doc);
    }
    assert_eq!(controllers.len(), 2, "upstream's two DecoratorControllers");
    controllers
}

fn write_json(dir: &Path, name: &str, value: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    path
}

/// The hook ConfigMap as upstream's kustomization generates it: one key per jsonnet file.
fn create_hook_config_map(k: &Kubectl) {
    let mut args = vec![
        "create".to_string(),
        "configmap".to_string(),
        HOOKS_CONFIG_MAP.to_string(),
    ];
    for file in [
        "finalize-service-per-pod.jsonnet",
        "sync-pod-name-label.jsonnet",
        "sync-service-per-pod.jsonnet",
    ] {
        args.push(format!("--from-file={}", upstream(file).display()));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    k.ok(&args);
}

fn service_names(k: &Kubectl) -> String {
    let mut names = k.names(&["services", "-l", "app=service-per-pod"]);
    names.sort();
    names.join(" ")
}

#[test]
fn upstream_service_per_pod_runs_on_jsonnet_hooks_without_jsonnetd() {
    if !all_installed(&["kubectl"]) {
        return;
    }
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let k = cluster.namespace("spp-jsonnet");
    create_hook_config_map(&k);
    let suffix = k.ns().to_string();
    let controllers = json!({"apiVersion": "v1", "kind": "List", "items": rewritten_controllers(k.ns(), &suffix)});
    cluster.kubectl.apply(&write_json(
        cluster.dir.path(),
        "controllers.json",
        &controllers,
    ));
    k.apply(&upstream("my-statefulset.yaml"));

    // sync-service-per-pod.jsonnet: a Service per replica, selecting the pod-name label,
    // with both ports of the annotation.
    k.until(
        "Services nginx-0..2",
        &["get", "services", "-l", "app=service-per-pod", "-o", "name"],
        |ok, _| ok && service_names(&k) == "nginx-0 nginx-1 nginx-2",
    );
    assert_eq!(
        k.jsonpath(
            &["service", "nginx-1"],
            "{.spec.selector.pod-name} {.spec.ports[*].port} {.spec.ports[*].targetPort} {.spec.ports[*].name}"
        ),
        "nginx-1 80 8080 80 8080 port-80 port-8080"
    );
    // sync-pod-name-label.jsonnet: each pod labelled with its own name.
    k.until_jsonpath(
        &["pod", "nginx-2"],
        "{.metadata.labels.pod-name}",
        "nginx-2",
    );

    // Scaling changes the Services; deleting runs finalize-service-per-pod.jsonnet.
    k.ok(&["scale", "statefulset", "nginx", "--replicas=1"]);
    k.until(
        "Service nginx-0 only",
        &["get", "services", "-l", "app=service-per-pod", "-o", "name"],
        |ok, _| ok && service_names(&k) == "nginx-0",
    );
    k.ok(&["delete", "statefulset", "nginx", "--wait=true"]);
    k.until_gone(&["statefulset", "nginx"]);
    assert_eq!(service_names(&k), "");
    for doc in controllers["items"].as_array().unwrap() {
        let name = doc["metadata"]["name"].as_str().unwrap();
        cluster
            .kubectl
            .ok(&["delete", "decoratorcontroller", name, "--wait=false"]);
    }
    cluster.clean_up(&[&k]);
}
