//! Jsonnet hooks run by the controller itself: bad Jsonnet is a hook error with an Event
//! while other parents keep syncing. Runs on the embedded server and, with
//! METACONTROLLER_E2E_KUBECONFIG, on a real one. (Upstream's service-per-pod on Jsonnet hooks:
//! `example_upstream_service_per_pod_jsonnet.rs`.)

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, eventually_within, unique_name, until_event, until_sync_error,
    ControllerProcess, CrdBuilder, TestCluster,
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// Each case's parent is synced by the entry file named here.
const CASES: [(&str, &str); 4] = [
    ("good", "good.jsonnet"),
    ("recursive", "recursive.jsonnet"),
    ("broken", "broken.jsonnet"),
    ("missing", "missing.jsonnet"),
];

/// The ConfigMap `code` with a good hook, an infinitely recursive one and a syntax error.
async fn create_code(api: &Api<ConfigMap>) {
    let files = [
        ("good.jsonnet", "function(request) {children: [{apiVersion: 'v1', kind: 'ConfigMap', metadata: {name: request.parent.metadata.name}, data: {ok: 'yes'}}], events: [{type: 'Normal', reason: 'FromJsonnet', message: 'synced ' + request.parent.metadata.name}]}"),
        ("recursive.jsonnet", "local f(x) = f(x + 1) + 1;\nfunction(request) f(0)"),
        ("broken.jsonnet", "function(request) {\n  children: [,\n}"),
    ];
    let data: BTreeMap<String, String> = files
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let code = ConfigMap {
        metadata: kube::core::ObjectMeta {
            name: Some("code".into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    api.create(&Default::default(), &code).await.unwrap();
}

/// One CompositeController per case (parents labelled `case=<case>`), all labelled `label`.
async fn create_controllers(cluster: &TestCluster, parent: &CrdBuilder, ns: &str, label: &str) {
    for (case, key) in CASES {
        let mut spec = parent.composite_spec("http://unused.invalid/");
        spec["generateSelector"] = json!(true);
        spec["parentResource"]["labelSelector"] = json!({"matchLabels": {"case": case}});
        spec["hooks"] = json!({"sync": {"jsonnet": {
            "configMapRef": {"namespace": ns, "name": "code"}, "key": key}}});
        let _: CompositeController = cluster
            .create_controller(&unique_name(case), label, spec)
            .await;
    }
}

/// Infinitely recursive Jsonnet, a syntax error and a missing key each fail their own
/// parents with a SyncError naming the problem (file:line for the code), while a good hook
/// beside them keeps syncing, and the Events it returns land on its parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_jsonnet_is_a_hook_error_with_an_event_and_nothing_else_stops() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("jsonnet-bad").await;
    cluster.install_metacontroller_crds().await;
    let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    create_code(&config_maps).await;
    let label = unique_name("team");
    create_controllers(&cluster, &parent, &ns, &label).await;
    let _controller = ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &label,
        &[],
    );
    let parents = parent.api(cluster.client(), Some(&ns));
    for (case, _) in CASES {
        let object = json!({"apiVersion": parent.api_version(), "kind": parent.kind(),
            "metadata": {"name": case, "namespace": ns, "labels": {"case": case}}});
        create_object(&parents, object).await;
    }
    until_sync_error(&cluster, &ns, "recursive", "stack overflow", WAIT).await;
    until_sync_error(&cluster, &ns, "recursive", "recursive.jsonnet:1", WAIT).await;
    until_sync_error(&cluster, &ns, "broken", "broken.jsonnet:2", WAIT).await;
    until_sync_error(
        &cluster,
        &ns,
        "missing",
        "has no key \"missing.jsonnet\"",
        WAIT,
    )
    .await;
    eventually_within("the good parent's child", WAIT, || async {
        config_maps.get_opt("good").await.ok().flatten().is_some()
    })
    .await;
    let event = until_event(&cluster, (&ns, "good"), "FromJsonnet", "synced good", WAIT).await;
    assert_eq!(event.type_.as_deref(), Some("Normal"));
}
