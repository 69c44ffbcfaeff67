//! Hook wire format, golden-filed, through the shipped binary.
//!
//! For every hook kind (composite sync/finalize, decorator sync/finalize, customize for a
//! composite and a decorator parent) and both hook versions, the files under
//! `tests/golden/hooks/<version>/` hold the request the binary must send and the response
//! an upstream-style hook answers, written by hand from upstream Metacontroller v4.17.2's
//! documented shapes (field names, which fields are present when empty, map keying). The
//! test runs the real binary against a real hook server, captures what the binary sends,
//! replaces what differs per run (uids, resourceVersions, timestamps, generated names) by
//! placeholders and compares it with the golden file; the golden responses are served back
//! and their effects checked, so a renamed field on either side fails here.
//!
//! Placeholders in golden files: `${NS}` (namespace), `${GROUP}` (the CRD's API group),
//! `${CONTROLLER}` (controller name), `${LABEL}` (the controller's selector label),
//! `${HOOK}` (hook server base URL), and `<uid>`, `<resourceVersion>`, `<timestamp>`,
//! `<last-applied>` for server- or controller-generated values.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_apply::json_equal;
use metacontroller_testkit::replicas::run_args;
use metacontroller_testkit::{
    crd, create_object, eventually_within, unique_name, ControllerKind, ControllerProcess,
    CrdBuilder, HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// The per-run names and their placeholders.
struct Names {
    subs: Vec<(String, &'static str)>,
}

impl Names {
    fn new(ns: &str, group: &str, controller: &str, label: &str, hook: &str) -> Self {
        let mut subs = vec![
            (hook.to_string(), "${HOOK}"),
            (group.to_string(), "${GROUP}"),
            (ns.to_string(), "${NS}"),
            (controller.to_string(), "${CONTROLLER}"),
            (label.to_string(), "${LABEL}"),
        ];
        // Longest first, so no name is replaced inside another.
        subs.sort_by_key(|(actual, _)| std::cmp::Reverse(actual.len()));
        Names { subs }
    }

    fn fill(&self, text: &str) -> String {
        self.subs
            .iter()
            .fold(text.to_string(), |t, (actual, token)| {
                t.replace(token, actual)
            })
    }

    fn blank(&self, text: &str) -> String {
        self.subs
            .iter()
            .fold(text.to_string(), |t, (actual, token)| {
                t.replace(actual, token)
            })
    }
}

fn golden_path(version: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/hooks")
        .join(version)
        .join(name)
}

fn golden_text(version: &str, name: &str) -> String {
    let path = golden_path(version, name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A golden response with this run's names filled in, as the hook server sends it.
fn golden_response(names: &Names, version: &str, name: &str) -> Value {
    serde_json::from_str(&names.fill(&golden_text(version, name)))
        .unwrap_or_else(|e| panic!("{version}/{name}: {e}"))
}

/// Replaces per-run values by placeholders.
fn normalize(names: &Names, request: &Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(map) => {
                if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                    meta.remove("managedFields");
                    for (field, token) in [
                        ("uid", "<uid>"),
                        ("resourceVersion", "<resourceVersion>"),
                        ("creationTimestamp", "<timestamp>"),
                        ("deletionTimestamp", "<timestamp>"),
                    ] {
                        if meta.contains_key(field) {
                            meta.insert(field.into(), json!(token));
                        }
                    }
                    if let Some(Value::Array(refs)) = meta.get_mut("ownerReferences") {
                        for r in refs.iter_mut().filter_map(Value::as_object_mut) {
                            r.insert("uid".into(), json!("<uid>"));
                        }
                    }
                    if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
                        let key = "metacontroller.k8s.io/last-applied-configuration";
                        if annotations.contains_key(key) {
                            annotations.insert(key.into(), json!("<last-applied>"));
                        }
                    }
                }
                map.values_mut().for_each(walk);
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut v = request.clone();
    walk(&mut v);
    serde_json::from_str(&names.blank(&v.to_string())).expect("normalized JSON")
}

fn assert_golden(names: &Names, version: &str, name: &str, request: &Value) {
    let actual = normalize(names, request);
    let expected: Value = serde_json::from_str(&golden_text(version, name))
        .unwrap_or_else(|e| panic!("{version}/{name}: {e}"));
    assert!(
        json_equal(&actual, &expected),
        "{version}/{name}: the binary sent a different request\nexpected: {expected:#}\nactual:   {actual:#}"
    );
}

struct Setup {
    cluster: TestCluster,
    ns: String,
    hook: HookServer,
    names: Names,
    controller: String,
    label: String,
    parent: CrdBuilder,
}

/// A cluster with the parent CRD, a related ConfigMap, and a hook server answering every
/// path with the golden response `<prefix>-<path>-response.json` (customize: the shared
/// `customize-response.json`).
async fn setup(version: &'static str, kind: &str, prefix: &'static str) -> Setup {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("gns").await;
    let group = format!("{}.example.com", unique_name("ggrp"));
    let parent = crd(&group, "v1", kind, &format!("{}s", kind.to_lowercase()));
    cluster.install_crd(&parent.build()).await;
    let controller = unique_name("gctl");
    let label = unique_name("gteam");
    Api::<ConfigMap>::namespaced(cluster.client(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "golden-related"}, "data": {"related": "yes"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let hook = HookServer::start(|_, _| HookReply::status(500, "not ready")).await;
    let base = hook.url("");
    let names = Names::new(&ns, &group, &controller, &label, base.trim_end_matches('/'));
    let responses: Vec<(String, Value)> = ["customize", "sync", "finalize"]
        .into_iter()
        .map(|path| {
            let file = match path {
                "customize" => "customize-response.json".to_string(),
                _ => format!("{prefix}-{path}-response.json"),
            };
            (format!("/{path}"), golden_response(&names, version, &file))
        })
        .collect();
    hook.set_handler(move |path, _| {
        responses
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, body)| HookReply::json(body.clone()))
            .unwrap_or_else(|| HookReply::status(404, "no such hook"))
    });
    Setup {
        cluster,
        ns,
        hook,
        names,
        controller,
        label,
        parent,
    }
}

fn start_binary(s: &Setup) -> ControllerProcess {
    ControllerProcess::start(
        env!("CARGO_BIN_EXE_metacontroller"),
        run_args(s.cluster.kubeconfig_path(), &s.label),
    )
}

/// The first captured request on `path` that `pick` accepts.
async fn first_request(s: &Setup, path: &str, pick: impl Fn(&Value) -> bool) -> Value {
    let mut found = None;
    eventually_within(&format!("a matching {path} request"), WAIT, || {
        found = s.hook.requests(path).into_iter().find(|r| pick(r));
        let done = found.is_some();
        async move { done }
    })
    .await;
    found.expect("request found")
}

fn has_child(req: &Value, field: &str, key: &str) -> bool {
    req[field]["ConfigMap.v1"].get(key).is_some()
}

/// The customize, sync and finalize hooks of a controller speaking hook `version`, each on
/// its own path of the hook server.
fn golden_hooks(s: &Setup, version: &str) -> Value {
    json!({
        "customize": {"version": version, "webhook": {"url": s.hook.url("/customize")}},
        "sync": {"version": version, "webhook": {"url": s.hook.url("/sync")}},
        "finalize": {"version": version, "webhook": {"url": s.hook.url("/finalize")}},
    })
}

/// The key of child `name` in a request of hook `version` (v2 keys by `namespace/name`).
fn child_key(s: &Setup, version: &str, name: &str) -> String {
    match version {
        "v1" => name.to_string(),
        _ => format!("{}/{name}", s.ns),
    }
}

/// Compares the first sync request that `pick` accepts with golden `sync_file`, and the
/// first customize request with golden `customize_file`.
async fn sync_and_customize_match_golden(
    s: &Setup,
    version: &str,
    (sync_file, customize_file): (&str, &str),
    pick: impl Fn(&Value) -> bool,
) {
    let sync = first_request(s, "/sync", pick).await;
    assert_golden(&s.names, version, sync_file, &sync);
    let customize = first_request(s, "/customize", |_| true).await;
    assert_golden(&s.names, version, customize_file, &customize);
}

/// Deletes object `golden` through `api`, compares the first finalize request whose `field`
/// holds child `key` with golden `file`, and waits until the finalized object (`what`) is gone.
async fn finalize_matches_golden(
    s: &Setup,
    version: &str,
    api: &Api<DynamicObject>,
    (field, key): (&str, &str),
    file: &str,
    what: &str,
) {
    api.delete("golden", &DeleteParams::default())
        .await
        .unwrap();
    let finalize = first_request(s, "/finalize", |r| {
        r["finalizing"] == true && has_child(r, field, key)
    })
    .await;
    assert_golden(&s.names, version, file, &finalize);
    // `finalized: true` lets the object go.
    eventually_within(what, WAIT, || async {
        api.get_opt("golden").await.unwrap().is_none()
    })
    .await;
}

/// Creates this run's controller (`K`, named and labelled as `s` says) with `spec` and the
/// golden hooks of `version`, and starts the binary for it.
async fn start_controller<K: ControllerKind>(
    s: &Setup,
    version: &str,
    mut spec: Value,
) -> ControllerProcess {
    spec["hooks"] = golden_hooks(s, version);
    let _: K = s
        .cluster
        .create_controller(&s.controller, &s.label, spec)
        .await;
    start_binary(s)
}

async fn composite(version: &'static str) {
    let s = setup(version, "GoldenParent", "composite").await;
    let _binary = start_controller::<CompositeController>(
        &s,
        version,
        json!({
            "parentResource": {"apiVersion": s.parent.api_version(), "resource": s.parent.plural()},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                "updateStrategy": {"method": "InPlace"}}],
        }),
    )
    .await;
    let parents = s.parent.api(s.cluster.client(), Some(&s.ns));
    create_object(
        &parents,
        json!({
            "apiVersion": s.parent.api_version(), "kind": s.parent.kind(),
            "metadata": {"name": "golden"},
            "spec": {"selector": {"matchLabels": {"app": "golden"}}}
        }),
    )
    .await;

    let child_key = child_key(&s, version, "golden-child");
    // The sync that sees the child the first response created and the status it set.
    sync_and_customize_match_golden(
        &s,
        version,
        (
            "composite-sync-request.json",
            "customize-request-composite.json",
        ),
        |r| {
            has_child(r, "children", &child_key) && r["parent"]["status"]["observedGeneration"] == 1
        },
    )
    .await;
    // The response took effect: the child as desired, the status as answered.
    let child = Api::<ConfigMap>::namespaced(s.cluster.client(), &s.ns)
        .get("golden-child")
        .await
        .unwrap();
    assert_eq!(
        child
            .data
            .unwrap_or_default()
            .get("answer")
            .map(String::as_str),
        Some("42")
    );
    finalize_matches_golden(
        &s,
        version,
        &parents,
        ("children", &child_key),
        "composite-finalize-request.json",
        "parent finalized and gone",
    )
    .await;
}

async fn decorator(version: &'static str) {
    let s = setup(version, "GoldenTarget", "decorator").await;
    let _binary = start_controller::<DecoratorController>(
        &s,
        version,
        json!({
            "resources": [{"apiVersion": s.parent.api_version(), "resource": s.parent.plural()}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
        }),
    )
    .await;
    let targets = s.parent.api(s.cluster.client(), Some(&s.ns));
    create_object(
        &targets,
        json!({
            "apiVersion": s.parent.api_version(), "kind": s.parent.kind(),
            "metadata": {"name": "golden", "labels": {"removed": "soon"}},
            "spec": {"size": 1}
        }),
    )
    .await;

    let key = child_key(&s, version, "golden-attachment");
    sync_and_customize_match_golden(
        &s,
        version,
        (
            "decorator-sync-request.json",
            "customize-request-decorator.json",
        ),
        |r| {
            has_child(r, "attachments", &key)
                && r["object"]["status"]["phase"] == "decorated"
                && r["object"]["metadata"]["labels"]["decorated"] == "yes"
                && r["object"]["metadata"]["annotations"]["golden/note"] == "hello"
        },
    )
    .await;
    // Labels: set and removed (null); annotations set; the attachment exists.
    let current = targets.get("golden").await.unwrap();
    let labels = current.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("decorated").map(String::as_str), Some("yes"));
    assert!(!labels.contains_key("removed"), "a null label is removed");
    assert_eq!(
        current
            .metadata
            .annotations
            .unwrap_or_default()
            .get("golden/note")
            .map(String::as_str),
        Some("hello")
    );
    Api::<ConfigMap>::namespaced(s.cluster.client(), &s.ns)
        .get("golden-attachment")
        .await
        .unwrap();
    finalize_matches_golden(
        &s,
        version,
        &targets,
        ("attachments", &key),
        "decorator-finalize-request.json",
        "target finalized and gone",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_hooks_v1_match_golden_files() {
    composite("v1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_hooks_v2_match_golden_files() {
    composite("v2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decorator_hooks_v1_match_golden_files() {
    decorator("v1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decorator_hooks_v2_match_golden_files() {
    decorator("v2").await;
}

/// Every golden file is used by a test above (a new file without a test is a mistake).
#[test]
fn golden_files_are_complete() {
    for version in ["v1", "v2"] {
        let mut files: Vec<String> = std::fs::read_dir(golden_path(version, ""))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(
            files,
            [
                "composite-finalize-request.json",
                "composite-finalize-response.json",
                "composite-sync-request.json",
                "composite-sync-response.json",
                "customize-request-composite.json",
                "customize-request-decorator.json",
                "customize-response.json",
                "decorator-finalize-request.json",
                "decorator-finalize-response.json",
                "decorator-sync-request.json",
                "decorator-sync-response.json",
            ],
            "{version}"
        );
    }
}
