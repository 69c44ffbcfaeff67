//! OpenTelemetry tracing of the real binary (docs/src/tracing.md). With
//! `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at a local OTLP receiver, each sync is one trace: a
//! root `sync` span with the hook call, the child write and the status write below it; the
//! hook server gets a `traceparent` naming the `hook_call` span of that trace; log lines of
//! the sync carry its `trace_id`. Without the OTEL environment nothing of this happens: no
//! header reaches the hook, no `trace_id` in the logs.
//!
//! Both tests pass on the embedded API server and on a real one
//! (`METACONTROLLER_E2E_KUBECONFIG`).

use std::process::Command;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    crd, eventually, unique_name, ControllerProcess, CrdBuilder, HookCall, HookServer,
    OtlpReceiver, ReceivedSpan, TestCluster,
};
use serde_json::json;

/// A cluster with a parent CRD, a namespace, a hook making one ConfigMap per parent and
/// setting a status, and a CompositeController for it (labelled for `--target-label-selector`).
struct Setup {
    cluster: TestCluster,
    ns: String,
    parent: CrdBuilder,
    hook: HookServer,
    label: String,
}

async fn setup(prefix: &str) -> Setup {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace(prefix).await;
    let hook = HookServer::one_configmap_child("traced").await;
    let parent = crd(
        &format!("{}.example.com", unique_name(prefix)),
        "v1",
        "Parent",
        "parents",
    );
    cluster.install_crd(&parent.build()).await;
    let label = unique_name("team");
    let _: CompositeController = cluster
        .create_controller(
            &unique_name(prefix),
            &label,
            json!({
                "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                    "updateStrategy": {"method": "InPlace"}}],
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}},
            }),
        )
        .await;
    Setup {
        cluster,
        ns,
        parent,
        hook,
        label,
    }
}

impl Setup {
    /// `metacontroller run` for this setup's controller, with no `OTEL_*` variable from the
    /// test's environment and `otel` added.
    fn run(&self, otel: &[(&str, String)]) -> ControllerProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_metacontroller"));
        command
            .arg("run")
            .arg("--kubeconfig")
            .arg(self.cluster.kubeconfig_path())
            .args(["--discovery-interval", "500ms", "--log-format", "json"])
            .args(["--metrics-address", "0", "--health-probe-bind-address", "0"])
            .arg("--target-label-selector")
            .arg(format!("team={}", self.label));
        for (name, _) in std::env::vars() {
            if name.starts_with("OTEL_") {
                command.env_remove(name);
            }
        }
        command.envs(otel.iter().map(|(k, v)| (k, v)));
        ControllerProcess::spawn(command)
    }

    /// Creates parent `name` and waits for its child and its status.
    async fn sync_parent(&self, name: &str) {
        let parents = self.parent.api(self.cluster.client(), Some(&self.ns));
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": self.parent.api_version(), "kind": "Parent",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": "traced"}}}
        }))
        .unwrap();
        parents.create(&PostParams::default(), &obj).await.unwrap();
        let cms: Api<ConfigMap> = Api::namespaced(self.cluster.client(), &self.ns);
        let child = format!("{name}-cm");
        eventually("the child ConfigMap", || async {
            cms.get_opt(&child).await.unwrap().is_some()
        })
        .await;
        eventually("the parent's status", || async {
            parents
                .get(name)
                .await
                .is_ok_and(|p| p.data["status"]["ok"] == true)
        })
        .await;
    }
}

/// `(trace id, parent span id)` of a `traceparent` header (`00-<trace>-<span>-<flags>`).
fn traceparent(call: &HookCall) -> Option<(String, String)> {
    let value = call.headers.get("traceparent")?.to_str().ok()?;
    let parts: Vec<&str> = value.split('-').collect();
    match parts.as_slice() {
        ["00", trace, span, _flags] => Some((trace.to_string(), span.to_string())),
        _ => panic!("malformed traceparent {value:?}"),
    }
}

/// The first sync of `parent` that created its child: its root `sync` span and the spans
/// of its trace.
fn creating_sync(
    spans: &[ReceivedSpan],
    parent: &str,
) -> Option<(ReceivedSpan, Vec<ReceivedSpan>)> {
    spans
        .iter()
        .filter(|s| s.name == "sync" && s.attr("parent") == Some(parent))
        .find_map(|sync| {
            let trace: Vec<ReceivedSpan> = spans
                .iter()
                .filter(|s| s.trace_id == sync.trace_id)
                .cloned()
                .collect();
            let created = trace.iter().any(|s| {
                s.name == "write"
                    && s.attr("verb") == Some("create")
                    && s.attr("kind") == Some("ConfigMap")
            });
            let status = trace.iter().any(|s| s.name == "status_write");
            (created && status).then(|| (sync.clone(), trace))
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_sync_is_one_trace_and_the_hook_joins_it() {
    let setup = setup("trace").await;
    let receiver = OtlpReceiver::start().await;
    let process = setup.run(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        // Export promptly (the SDK's default batch delay is 5 s).
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_string()),
    ]);
    setup.sync_parent("p").await;
    let parent_key = format!("{}/p", setup.ns);
    eventually("the creating sync's trace at the receiver", || async {
        creating_sync(&receiver.spans(), &parent_key).is_some()
    })
    .await;
    let spans = receiver.spans();
    let (sync, trace) = creating_sync(&spans, &parent_key).unwrap();
    let logs = process.logs();
    let context = format!("sync: {sync:#?}\ntrace: {trace:#?}\nlogs:\n{logs}");

    // One trace per sync: the sync span is the root, and no other sync shares its trace.
    assert_eq!(sync.parent_span_id, "", "{context}");
    assert_eq!(
        trace.iter().filter(|s| s.name == "sync").count(),
        1,
        "{context}"
    );
    assert_eq!(
        sync.attr("controller_type"),
        Some("CompositeController"),
        "{context}"
    );
    assert_eq!(sync.attr("outcome"), Some("success"), "{context}");
    assert!(sync.attr("trigger").is_some(), "{context}");
    assert_eq!(sync.service_name, "metacontroller", "{context}");
    let (decoded, bad) = receiver.requests();
    assert!(
        decoded > 0 && bad == 0,
        "{decoded} exports, {bad} undecodable"
    );

    // The hook call, the child create and the status write, each a child of the sync.
    let child_of_sync = |name: &str| -> ReceivedSpan {
        trace
            .iter()
            .find(|s| s.name == name && s.parent_span_id == sync.span_id)
            .unwrap_or_else(|| panic!("no {name} span below the sync\n{context}"))
            .clone()
    };
    let hook_call = child_of_sync("hook_call");
    assert_eq!(hook_call.attr("hook"), Some("sync"), "{context}");
    assert_eq!(hook_call.attr("outcome"), Some("success"), "{context}");
    assert_eq!(
        hook_call.attr("http.response.status_code"),
        Some("200"),
        "{context}"
    );
    let write = trace
        .iter()
        .find(|s| s.name == "write" && s.attr("verb") == Some("create"))
        .unwrap();
    assert_eq!(write.parent_span_id, sync.span_id, "{context}");
    assert_eq!(write.attr("name"), Some("p-cm"), "{context}");
    assert_eq!(write.attr("outcome"), Some("success"), "{context}");
    assert_eq!(
        write.attr("http.response.status_code"),
        Some("201"),
        "{context}"
    );
    let status = child_of_sync("status_write");
    assert_eq!(status.attr("verb"), Some("update_status"), "{context}");
    assert_eq!(
        status.attr("http.response.status_code"),
        Some("200"),
        "{context}"
    );

    // The hook server was called inside that trace, by that hook_call span.
    let calls = setup.hook.all_calls();
    let headers: Vec<(String, String)> = calls.iter().filter_map(traceparent).collect();
    assert_eq!(
        headers.len(),
        calls.len(),
        "every hook call carries a traceparent"
    );
    assert!(
        headers.contains(&(sync.trace_id.clone(), hook_call.span_id.clone())),
        "no call with the sync's traceparent: {headers:?}\n{context}"
    );

    // Logs inside the sync carry its trace id.
    let trace_field = format!("\"trace_id\":\"{}\"", sync.trace_id);
    assert!(
        logs.lines()
            .any(|l| l.contains("creating child") && l.contains(&trace_field)),
        "no 'creating child' log line with {trace_field}\n{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_otel_environment_no_trace_context_is_sent() {
    let setup = setup("notrace").await;
    let process = setup.run(&[]);
    setup.sync_parent("p").await;
    let calls = setup.hook.all_calls();
    assert!(!calls.is_empty());
    for call in &calls {
        assert!(
            !call.headers.contains_key("traceparent") && !call.headers.contains_key("tracestate"),
            "trace headers sent with tracing off: {:?}",
            call.headers
        );
    }
    let logs = process.logs();
    assert!(logs.contains("creating child"), "{logs}");
    assert!(!logs.contains("trace_id"), "{logs}");
}
