//! `--apply-schema`: the real binary merges children with the schema of their kind.
//!
//! A CRD child whose `spec.ports` is a list-map keyed by `[port, protocol]` holds 53/TCP and
//! 53/UDP: with schemas (default `auto`) the hook can rename the UDP entry, an entry added by
//! other automation survives re-syncs, an atomic list is replaced whole and a scalar set keeps
//! a foreign value. The same for a built-in kind (Deployment container ports, keyed by
//! `containerPort` + `protocol` in the API server's OpenAPI v3). With `--apply-schema=off`
//! the conventional (upstream) merge applies: both entries are kept, the rename cannot be
//! applied. A converged child is never rewritten (0 writes on resync, embedded server).

use std::time::Duration;

use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_testkit::{
    dynamic_api, eventually_within, unique_crd, unique_name, ControllerProcess, CrdBuilder,
    HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// The child CRD: `spec.ports` keyed by port+protocol, `spec.rules` atomic (its items would
/// be keyed by `name` by convention), `spec.tags` a set of strings.
fn gadget_crd() -> CrdBuilder {
    unique_crd("gadget", "Gadget", "gadgets").schema(json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["port", "protocol"],
                      "items": {"type": "object", "required": ["port", "protocol"], "properties": {
                          "port": {"type": "integer"}, "protocol": {"type": "string"},
                          "name": {"type": "string"}}}},
            "rules": {"type": "array", "x-kubernetes-list-type": "atomic",
                      "items": {"type": "object", "properties": {
                          "name": {"type": "string"}, "v": {"type": "integer"}}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set",
                     "items": {"type": "string"}}}},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}))
}

/// Parent spec fields the hooks read: the UDP port's name and the rule's value.
fn parent_spec(parent: &Value) -> (String, i64) {
    let spec = &parent["spec"];
    (
        spec["udpName"].as_str().unwrap_or("dns-udp").to_string(),
        spec["ruleV"].as_i64().unwrap_or(1),
    )
}

/// The hook of a Gadget child; `objects` is `children` (composite) or `attachments`.
fn gadget_hook(
    api_version: String,
    objects: &'static str,
) -> impl Fn(&str, &Value) -> HookReply + Send + Sync {
    move |_, req| {
        // A decorator's request names the target `object`.
        let parent = req.get("object").unwrap_or(&req["parent"]);
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        let (udp, v) = parent_spec(parent);
        HookReply::json(json!({
            objects: [{"apiVersion": api_version, "kind": "Gadget",
                "metadata": {"name": format!("{name}-gadget"),
                             "labels": {"schema-test": name}},
                "spec": {
                    "ports": [{"port": 53, "protocol": "TCP", "name": "dns-tcp"},
                              {"port": 53, "protocol": "UDP", "name": udp}],
                    "rules": [{"name": "r1", "v": v}],
                    "tags": ["a"]}}],
            "status": {"seen": v},
        }))
    }
}

fn deployment_hook() -> impl Fn(&str, &Value) -> HookReply + Send + Sync {
    move |_, req| {
        let parent = &req["parent"];
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        let (udp, v) = parent_spec(parent);
        let labels = json!({"app": format!("{name}-dns")});
        HookReply::json(json!({
            "children": [{"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": format!("{name}-dns"), "labels": {"schema-test": name}},
                "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
                        "name": "dns", "image": "registry.k8s.io/pause:3.9",
                        "args": [format!("--v={v}")],
                        "ports": [{"containerPort": 53, "protocol": "TCP", "name": "dns-tcp"},
                                  {"containerPort": 53, "protocol": "UDP", "name": udp}]}]}}}}],
            "status": {"seen": v},
        }))
    }
}

struct Setup {
    cluster: TestCluster,
    ns: String,
    parent: CrdBuilder,
    hook: HookServer,
    process: ControllerProcess,
}

/// Installs a parent CRD and a CompositeController with `child` (InPlace, resync every
/// second), starts the binary with `extra` flags.
async fn setup(
    child: Option<&CrdBuilder>,
    child_rule: Value,
    hook: impl Fn(&str, &Value) -> HookReply + Send + Sync + 'static,
    extra: &[&str],
) -> Setup {
    setup_controller(child, child_rule, hook, extra, false).await
}

/// [`setup`]; with `decorator`, a DecoratorController with `child_rule` as attachment.
async fn setup_controller(
    child: Option<&CrdBuilder>,
    child_rule: Value,
    hook: impl Fn(&str, &Value) -> HookReply + Send + Sync + 'static,
    extra: &[&str],
    decorator: bool,
) -> Setup {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace("schema").await;
    let parent = cluster
        .install_unique_crd("sp", "SchemaParent", "schemaparents")
        .await;
    if let Some(c) = child {
        cluster.install_crd(&c.build()).await;
    }
    let label = unique_name("team");
    if decorator {
        let hook = HookServer::start(hook).await;
        let _: DecoratorController = cluster
            .create_controller(&unique_name("schema"), &label, json!({
            "resources": [{"apiVersion": parent.api_version(), "resource": parent.plural()}],
            "attachments": [child_rule],
            "resyncPeriodSeconds": 1,
            "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}},
        }))
            .await;
        return start_binary(cluster, ns, parent, hook, &label, extra);
    }
    let hook = HookServer::start(hook).await;
    let _: CompositeController = cluster
        .create_controller(
            &unique_name("schema"),
            &label,
            json!({
                "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
                "childResources": [child_rule],
                "resyncPeriodSeconds": 1,
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}},
            }),
        )
        .await;
    start_binary(cluster, ns, parent, hook, &label, extra)
}

fn start_binary(
    cluster: TestCluster,
    ns: String,
    parent: CrdBuilder,
    hook: HookServer,
    label: &str,
    extra: &[&str],
) -> Setup {
    let mut args = vec![
        "run".to_string(),
        "--kubeconfig".into(),
        cluster.kubeconfig_path().display().to_string(),
        "--discovery-interval".into(),
        "1s".into(),
        "--target-label-selector".into(),
        format!("team={label}"),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let process = ControllerProcess::start(env!("CARGO_BIN_EXE_metacontroller"), args);
    Setup {
        cluster,
        ns,
        parent,
        hook,
        process,
    }
}

impl Setup {
    fn parents(&self) -> Api<DynamicObject> {
        self.parent.api(self.cluster.client(), Some(&self.ns))
    }

    async fn create_parent(&self, name: &str) {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": self.parent.api_version(), "kind": self.parent.kind(),
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"schema-test": name}},
                     "udpName": "dns-udp", "ruleV": 1}
        }))
        .unwrap();
        self.parents()
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }

    /// Changes what the hook wants: the UDP entry's name and the rule value.
    async fn change_parent(&self, name: &str, udp: &str, v: i64) {
        let patch = json!({"spec": {"udpName": udp, "ruleV": v}});
        self.parents()
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }

    /// Waits until the parent's status says the hook saw `v`.
    async fn wait_seen(&self, name: &str, v: i64) {
        let parents = self.parents();
        let deadline = tokio::time::Instant::now() + WAIT;
        while !parents
            .get(name)
            .await
            .is_ok_and(|p| p.data["status"]["seen"] == v)
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "parent status never reflected the hook; controller logs:\n{}",
                self.process.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// 0 writes while the hook is called (resync every second) at least `syncs` more times.
    /// Events are left out: the controller's Started Event is posted asynchronously.
    async fn assert_no_writes_on_resync(&self, syncs: usize) {
        let Some(control) = self.cluster.control_or_skip("assert_no_writes_on_resync") else {
            return;
        };
        let writes = || {
            control
                .request_counts()
                .into_iter()
                .filter(|((verb, resource), _)| {
                    ["create", "update", "patch", "delete", "deletecollection"]
                        .contains(&verb.as_str())
                        && resource != "events"
                })
                .map(|(_, n)| n)
                .sum::<u64>()
        };
        // Steady state first: a sync that met a 409 (the cache lagged the test's own parent
        // change) is retried and writes the status once more. Two further hook calls mean
        // that retry has finished (one worker per key), so only resyncs remain.
        let warm = self.hook.calls("/sync");
        eventually_within("the controller reaches steady state", WAIT, || async {
            self.hook.calls("/sync") >= warm + 2
        })
        .await;
        let before = writes();
        let calls = self.hook.calls("/sync");
        eventually_within("resyncs call the hook", WAIT, || async {
            self.hook.calls("/sync") >= calls + syncs
        })
        .await;
        assert_eq!(
            writes(),
            before,
            "a converged resync wrote: {:?}\ncontroller logs:\n{}",
            control.request_counts(),
            self.process.logs()
        );
    }
}

fn ports_of(v: &Value) -> Vec<(i64, String, String)> {
    let mut out: Vec<(i64, String, String)> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let port = p["port"]
                .as_i64()
                .or_else(|| p["containerPort"].as_i64())
                .unwrap_or_default();
            (
                port,
                p["protocol"].as_str().unwrap_or("TCP").to_string(),
                p["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn port(p: i64, proto: &str, name: &str) -> (i64, String, String) {
    (p, proto.into(), name.into())
}

/// Other automation edits the child: a read-modify-write with the resourceVersion (as
/// kubectl edit), retried on conflict with the controller's own writes.
async fn foreign_edit(api: &Api<DynamicObject>, name: &str, edit: impl Fn(&mut Value)) {
    eventually_within("foreign edit lands", WAIT, || async {
        let Ok(obj) = api.get(name).await else {
            return false;
        };
        let mut v = serde_json::to_value(&obj).unwrap();
        edit(&mut v);
        let obj: DynamicObject = serde_json::from_value(v).unwrap();
        api.replace(name, &PostParams::default(), &obj)
            .await
            .is_ok()
    })
    .await;
}

/// The Gadget child scenario: a CompositeController whose child is a Gadget (InPlace), the
/// binary started with `extra` flags, parent `p` created and seen by the hook once.
async fn gadget_scenario(gadget: &CrdBuilder, extra: &[&str]) -> (Setup, Api<DynamicObject>) {
    let s = setup(
        Some(gadget),
        json!({"apiVersion": gadget.api_version(), "resource": gadget.plural(),
               "updateStrategy": {"method": "InPlace"}}),
        gadget_hook(gadget.api_version(), "children"),
        extra,
    )
    .await;
    let gadgets = gadget.api(s.cluster.client(), Some(&s.ns));
    s.create_parent("p").await;
    s.wait_seen("p", 1).await;
    (s, gadgets)
}

/// Other automation adds an entry to each of the Gadget's lists.
async fn add_foreign_entries(gadgets: &Api<DynamicObject>) {
    foreign_edit(gadgets, "p-gadget", |v| {
        let spec = &mut v["spec"];
        spec["ports"]
            .as_array_mut()
            .unwrap()
            .push(json!({"port": 9153, "protocol": "TCP", "name": "metrics"}));
        spec["rules"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "foreign", "v": 9}));
        spec["tags"].as_array_mut().unwrap().push(json!("foreign"));
    })
    .await;
}

/// [`gadget_scenario`] with `extra` flags: the child is created with both port entries and
/// not rewritten without one over 2 resyncs; then foreign entries are added to it and the
/// parent changed (port `dns`, version 2).
async fn changed_after_foreign_entries(
    gadget: &CrdBuilder,
    extra: &[&str],
) -> (Setup, Api<DynamicObject>) {
    let (s, gadgets) = gadget_scenario(gadget, extra).await;
    s.assert_no_writes_on_resync(2).await;
    let child = gadgets.get("p-gadget").await.unwrap();
    assert_eq!(
        ports_of(&child.data["spec"]["ports"]),
        vec![port(53, "TCP", "dns-tcp"), port(53, "UDP", "dns-udp")]
    );
    add_foreign_entries(&gadgets).await;
    s.change_parent("p", "dns", 2).await;
    (s, gadgets)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_child_merges_by_its_schema() {
    let gadget = gadget_crd();
    let (s, gadgets) = changed_after_foreign_entries(&gadget, &[]).await;
    eventually_within("rename applied, foreign entries kept", WAIT, || async {
        gadgets.get("p-gadget").await.is_ok_and(|c| {
            let spec = &c.data["spec"];
            ports_of(&spec["ports"])
                == vec![
                    port(53, "TCP", "dns-tcp"),
                    port(53, "UDP", "dns"),
                    port(9153, "TCP", "metrics"),
                ]
                // Atomic: replaced whole, the foreign rule is gone.
                && spec["rules"] == json!([{"name": "r1", "v": 2}])
                // Set: the foreign value stays.
                && spec["tags"] == json!(["a", "foreign"])
        })
    })
    .await;
    s.wait_seen("p", 2).await;
    s.assert_no_writes_on_resync(3).await;

    // The CRD changes `tags` to atomic: the running controller merges by the new schema
    // (no restart), so the foreign tag goes.
    let mut updated = gadget.build();
    updated["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["tags"]["x-kubernetes-list-type"] = json!("atomic");
    let crds = dynamic_api(
        s.cluster.client(),
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        None,
    );
    let patch = json!({"spec": {"versions": updated["spec"]["versions"]}});
    crds.patch(
        &gadget.name(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
    eventually_within("a CRD update applies without a restart", WAIT, || async {
        gadgets
            .get("p-gadget")
            .await
            .is_ok_and(|c| c.data["spec"]["tags"] == json!(["a"]))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_schema_off_merges_by_conventions_as_upstream() {
    let gadget = gadget_crd();
    // Keyed by `port` alone, 53 repeats: the list is left as it is (never folded into one).
    let (s, gadgets) = changed_after_foreign_entries(&gadget, &["--apply-schema=off"]).await;
    // The positive signal: the rule change (keyed by `name` by convention) is applied.
    eventually_within("rule change applied", WAIT, || async {
        gadgets
            .get("p-gadget")
            .await
            .is_ok_and(|c| c.data["spec"]["rules"][0] == json!({"name": "r1", "v": 2}))
    })
    .await;
    s.wait_seen("p", 2).await;
    let child = gadgets.get("p-gadget").await.unwrap();
    let spec = &child.data["spec"];
    // Upstream: the rename cannot be applied (its key repeats); every entry is kept.
    assert_eq!(
        ports_of(&spec["ports"]),
        vec![
            port(53, "TCP", "dns-tcp"),
            port(53, "UDP", "dns-udp"),
            port(9153, "TCP", "metrics")
        ]
    );
    // Upstream: rules merge by the conventional key `name` (the foreign rule stays), a list
    // of scalars is replaced whole (the foreign tag goes).
    assert_eq!(
        spec["rules"],
        json!([{"name": "r1", "v": 2}, {"name": "foreign", "v": 9}])
    );
    assert_eq!(spec["tags"], json!(["a"]));
    s.assert_no_writes_on_resync(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_container_ports_merge_by_openapi_v3_keys() {
    let s = setup(
        None,
        json!({"apiVersion": "apps/v1", "resource": "deployments",
               "updateStrategy": {"method": "InPlace"}}),
        deployment_hook(),
        &[],
    )
    .await;
    let deployments = dynamic_api(
        s.cluster.client(),
        "apps/v1",
        "Deployment",
        "deployments",
        Some(&s.ns),
    );
    let container_ports =
        |d: &DynamicObject| ports_of(&d.data["spec"]["template"]["spec"]["containers"][0]["ports"]);
    s.create_parent("p").await;
    s.wait_seen("p", 1).await;
    s.assert_no_writes_on_resync(2).await;
    let d = deployments.get("p-dns").await.unwrap();
    assert_eq!(
        container_ports(&d),
        vec![port(53, "TCP", "dns-tcp"), port(53, "UDP", "dns-udp")]
    );

    foreign_edit(&deployments, "p-dns", |v| {
        let c = &mut v["spec"]["template"]["spec"]["containers"][0];
        c["ports"]
            .as_array_mut()
            .unwrap()
            .push(json!({"containerPort": 9153, "protocol": "TCP", "name": "metrics"}));
        c["args"].as_array_mut().unwrap().push(json!("--foreign"));
        c["env"] = json!([{"name": "FOREIGN", "value": "1"}]);
    })
    .await;
    s.change_parent("p", "dns", 2).await;
    eventually_within("rename applied, foreign port kept", WAIT, || async {
        deployments.get("p-dns").await.is_ok_and(|d| {
            let c = &d.data["spec"]["template"]["spec"]["containers"][0];
            container_ports(&d)
                == vec![
                    port(53, "TCP", "dns-tcp"),
                    port(53, "UDP", "dns"),
                    port(9153, "TCP", "metrics"),
                ]
                // args is atomic in Kubernetes' schema: replaced whole.
                && c["args"] == json!(["--v=2"])
                && c["env"] == json!([{"name": "FOREIGN", "value": "1"}])
        })
    })
    .await;
    s.wait_seen("p", 2).await;
    s.assert_no_writes_on_resync(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decorator_attachment_merges_by_its_schema() {
    let gadget = gadget_crd();
    let s = setup_controller(
        Some(&gadget),
        json!({"apiVersion": gadget.api_version(), "resource": gadget.plural(),
               "updateStrategy": {"method": "InPlace"}}),
        gadget_hook(gadget.api_version(), "attachments"),
        &[],
        true,
    )
    .await;
    let gadgets = gadget.api(s.cluster.client(), Some(&s.ns));
    s.create_parent("p").await;
    s.wait_seen("p", 1).await;
    // A decorator writes the target's status before its attachments.
    eventually_within("attachment created", WAIT, || async {
        gadgets.get("p-gadget").await.is_ok()
    })
    .await;
    s.assert_no_writes_on_resync(2).await;
    foreign_edit(&gadgets, "p-gadget", |v| {
        v["spec"]["ports"]
            .as_array_mut()
            .unwrap()
            .push(json!({"port": 9153, "protocol": "TCP", "name": "metrics"}));
    })
    .await;
    s.change_parent("p", "dns", 2).await;
    eventually_within(
        "attachment rename applied, foreign entry kept",
        WAIT,
        || async {
            gadgets.get("p-gadget").await.is_ok_and(|c| {
                ports_of(&c.data["spec"]["ports"])
                    == vec![
                        port(53, "TCP", "dns-tcp"),
                        port(53, "UDP", "dns"),
                        port(9153, "TCP", "metrics"),
                    ]
            })
        },
    )
    .await;
    s.wait_seen("p", 2).await;
    s.assert_no_writes_on_resync(3).await;
}
