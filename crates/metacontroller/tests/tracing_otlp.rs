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
use kube::api::Api;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    create_object, eventually, unique_name, ControllerProcess, CrdBuilder, HookCall, HookServer,
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
    let parent = cluster.install_parent_crd(prefix).await;
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
        let parent = json!({
            "apiVersion": self.parent.api_version(), "kind": "Parent",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": "traced"}}}
        });
        create_object(&parents, parent).await;
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

/// Asserts that `span` has each `(key, value)` attribute (`context` in the message).
fn assert_attrs(span: &ReceivedSpan, attrs: &[(&str, &str)], context: &str) {
    for (key, value) in attrs {
        assert_eq!(span.attr(key), Some(*value), "{key}\n{context}");
    }
}

/// One trace per sync: the sync span is the root, no other sync shares its trace, and it
/// names the controller type, the outcome and the trigger.
fn assert_sync_is_the_root(sync: &ReceivedSpan, trace: &[ReceivedSpan], context: &str) {
    assert_eq!(sync.parent_span_id, "", "{context}");
    assert_eq!(
        trace.iter().filter(|s| s.name == "sync").count(),
        1,
        "{context}"
    );
    assert_attrs(
        sync,
        &[
            ("controller_type", "CompositeController"),
            ("outcome", "success"),
        ],
        context,
    );
    assert!(sync.attr("trigger").is_some(), "{context}");
    assert_eq!(sync.service_name, "metacontroller", "{context}");
}

/// The hook call, the child create and the status write, each a child of the sync, with
/// their attributes. Returns the hook call's span.
fn assert_children_of_sync(
    sync: &ReceivedSpan,
    trace: &[ReceivedSpan],
    context: &str,
) -> ReceivedSpan {
    let child_of_sync = |name: &str| -> ReceivedSpan {
        trace
            .iter()
            .find(|s| s.name == name && s.parent_span_id == sync.span_id)
            .unwrap_or_else(|| panic!("no {name} span below the sync\n{context}"))
            .clone()
    };
    let hook_call = child_of_sync("hook_call");
    assert_attrs(
        &hook_call,
        &[
            ("hook", "sync"),
            ("outcome", "success"),
            ("http.response.status_code", "200"),
        ],
        context,
    );
    let write = trace
        .iter()
        .find(|s| s.name == "write" && s.attr("verb") == Some("create"))
        .unwrap();
    assert_eq!(write.parent_span_id, sync.span_id, "{context}");
    assert_attrs(
        write,
        &[
            ("name", "p-cm"),
            ("outcome", "success"),
            ("http.response.status_code", "201"),
        ],
        context,
    );
    let status = child_of_sync("status_write");
    assert_attrs(
        &status,
        &[
            ("verb", "update_status"),
            ("http.response.status_code", "200"),
        ],
        context,
    );
    hook_call
}

/// Every call the hook got carries a traceparent, one of them naming the sync's trace and
/// its `hook_call` span.
fn assert_hook_joined(
    calls: &[HookCall],
    sync: &ReceivedSpan,
    hook_call: &ReceivedSpan,
    context: &str,
) {
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

    assert_sync_is_the_root(&sync, &trace, &context);
    let (decoded, bad) = receiver.requests();
    assert!(
        decoded > 0 && bad == 0,
        "{decoded} exports, {bad} undecodable"
    );
    let hook_call = assert_children_of_sync(&sync, &trace, &context);
    // The hook server was called inside that trace, by that hook_call span.
    assert_hook_joined(&setup.hook.all_calls(), &sync, &hook_call, &context);

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
