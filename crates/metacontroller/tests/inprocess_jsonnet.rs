//! Jsonnet hooks run by the controller itself: bad Jsonnet is a hook error with an Event
//! while other parents keep syncing. Runs on the embedded server and, with
//! METACONTROLLER_E2E_KUBECONFIG, on a real one. (Upstream's service-per-pod on Jsonnet hooks:
//! `example_upstream_service_per_pod_jsonnet.rs`.)

use serde_json::json;

/// Infinitely recursive Jsonnet, a syntax error and a missing key each fail their own
/// parents with a SyncError naming the problem (file:line for the code), while a good hook
/// beside them keeps syncing. Both servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_jsonnet_is_a_hook_error_with_an_event_and_nothing_else_stops() {
    use metacontroller_api::composite::CompositeController;
    use metacontroller_testkit::{create_object, events_about, eventually_within, TestCluster};
    use std::time::Duration;

    let (cluster, ns, parent) = TestCluster::start_with_parent("jsonnet-bad").await;
    cluster.install_metacontroller_crds().await;
    let files = [
        ("good.jsonnet", "function(request) {children: [{apiVersion: 'v1', kind: 'ConfigMap', metadata: {name: request.parent.metadata.name}, data: {ok: 'yes'}}]}"),
        ("recursive.jsonnet", "local f(x) = f(x + 1) + 1;\nfunction(request) f(0)"),
        ("broken.jsonnet", "function(request) {\n  children: [,\n}"),
    ];
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(cluster.client(), &ns);
    let data: std::collections::BTreeMap<String, String> = files
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let code = k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::core::ObjectMeta {
            name: Some("code".into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    api.create(&Default::default(), &code).await.unwrap();
    let label = metacontroller_testkit::unique_name("team");
    let cases = [
        ("good", "good.jsonnet"),
        ("recursive", "recursive.jsonnet"),
        ("broken", "broken.jsonnet"),
        ("missing", "missing.jsonnet"),
    ];
    for (case, key) in cases {
        let mut spec = parent.composite_spec("http://unused.invalid/");
        spec["generateSelector"] = json!(true);
        spec["parentResource"]["labelSelector"] = json!({"matchLabels": {"case": case}});
        spec["hooks"] = json!({"sync": {"jsonnet": {
            "configMapRef": {"namespace": ns, "name": "code"}, "key": key}}});
        let _: CompositeController = cluster
            .create_controller(&metacontroller_testkit::unique_name(case), &label, spec)
            .await;
    }
    let _controller = metacontroller_testkit::ControllerProcess::run(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &[
            "--target-label-selector",
            &format!("team={label}"),
            "--metrics-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ],
    );
    let parents = parent.api(cluster.client(), Some(&ns));
    for (case, _) in cases {
        create_object(
            &parents,
            json!({"apiVersion": parent.api_version(), "kind": parent.kind(),
            "metadata": {"name": case, "namespace": ns, "labels": {"case": case}}}),
        )
        .await;
    }
    let expected = [
        ("recursive", "stack overflow"),
        ("recursive", "recursive.jsonnet:1"),
        ("broken", "broken.jsonnet:2"),
        ("missing", "has no key \"missing.jsonnet\""),
    ];
    for (name, needle) in expected {
        eventually_within(
            &format!("a SyncError on {name} saying {needle:?}"),
            Duration::from_secs(60),
            || async {
                events_about(&cluster, &ns, name).await.iter().any(|e| {
                    e.reason.as_deref() == Some("SyncError")
                        && e.message.as_deref().is_some_and(|m| m.contains(needle))
                })
            },
        )
        .await;
    }
    eventually_within(
        "the good parent's child",
        Duration::from_secs(60),
        || async { api.get_opt("good").await.ok().flatten().is_some() },
    )
    .await;
}
