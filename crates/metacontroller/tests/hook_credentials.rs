//! Hook credentials in the shipped binary: CA bundles, Bearer/Basic authorization and
//! client certificates come from Secrets and ConfigMaps read through the API (per hook or
//! via `endpointConfigs`), a rotated Secret is used by the next call, a missing one is
//! reported as a SyncError Event naming it (children kept), and Secret data never
//! reaches the logs, even at `--log-level trace`.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::replicas::run_args;
use metacontroller_testkit::{
    configmap_child_reply, create_object, eventually_within, parent_name, ControllerProcess,
    CrdBuilder, HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};
use support::{server_tls, Ca, TlsHookServer};

const WAIT: Duration = Duration::from_secs(60);

/// Creates a CompositeController over `parent` with ConfigMap children and `spec` merged
/// into its spec; returns the label that selects it.
async fn create_controller(cluster: &TestCluster, parent: &CrdBuilder, spec: Value) -> String {
    let mut full = json!({
        "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
        "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                            "updateStrategy": {"method": "InPlace"}}],
    });
    for (key, value) in spec.as_object().unwrap() {
        full[key] = value.clone();
    }
    cluster
        .create_labelled_controller::<CompositeController>("creds", full)
        .await
}

fn start_binary(cluster: &TestCluster, label: &str, extra: &[&str]) -> ControllerProcess {
    start_binary_with_env(cluster, label, extra, &[])
}

fn start_binary_with_env(
    cluster: &TestCluster,
    label: &str,
    extra: &[&str],
    env: &[(&str, String)],
) -> ControllerProcess {
    let mut args = run_args(cluster.kubeconfig_path(), label);
    args.extend(extra.iter().map(|s| s.to_string()));
    ControllerProcess::start_with_env(
        env!("CARGO_BIN_EXE_metacontroller"),
        args,
        env.iter().map(|(k, v)| (k.to_string(), v.clone())),
    )
}

async fn create_parent(cluster: &TestCluster, parent: &CrdBuilder, ns: &str, name: &str) {
    create_object(
        &parent.api(cluster.client(), Some(ns)),
        json!({
            "apiVersion": parent.api_version(), "kind": "Parent",
            "metadata": {"name": name},
            "spec": {"n": 1, "selector": {"matchLabels": {"app": name}}}
        }),
    )
    .await;
}

/// Sets parent `name`'s `spec.n` to `n` (a change that causes a sync).
async fn set_n(parents: &Api<DynamicObject>, name: &str, n: u32) {
    parents
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"n": n}})),
        )
        .await
        .unwrap();
}

fn secret(name: &str, data: &[(&str, &[u8])]) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

async fn wait_child(cluster: &TestCluster, ns: &str, name: &str, process: &ControllerProcess) {
    cluster.wait_for_configmap(ns, name, process, WAIT).await;
}

/// The message of a SyncError Event on parent `parent` that `matches`, if one was recorded.
async fn sync_error(
    events: &Api<Event>,
    parent: &str,
    matches: impl Fn(&str) -> bool,
) -> Option<String> {
    let list = events.list(&ListParams::default()).await.unwrap();
    list.items.into_iter().find_map(|e| {
        let message = e.message.unwrap_or_default();
        (e.involved_object.name.as_deref() == Some(parent)
            && e.reason.as_deref() == Some("SyncError")
            && matches(&message))
        .then_some(message)
    })
}

/// Waits for a SyncError Event on `parent` whose message contains `needle` (`what` names
/// it) and returns the message.
async fn wait_sync_error(events: &Api<Event>, parent: &str, what: &str, needle: &str) -> String {
    let matches = |m: &str| m.contains(needle);
    eventually_within(what, WAIT, || async {
        sync_error(events, parent, matches).await.is_some()
    })
    .await;
    sync_error(events, parent, matches).await.unwrap()
}

/// An HTTPS hook server (certificate from `ca`) answering [`configmap_child_reply`] to calls whose
/// `Authorization` header is the current `expected` value, 401 to others.
async fn bearer_server(ca: &Ca, expected: Arc<Mutex<String>>) -> TlsHookServer {
    TlsHookServer::start(
        server_tls(&ca.server_leaf(&["127.0.0.1"]), None),
        move |call| {
            if call.authorization.as_deref() != Some(expected.lock().unwrap().as_str()) {
                return (401, json!({"error": "unauthorized"}));
            }
            (200, configmap_child_reply(&call.body))
        },
    )
    .await
}

/// A controller whose hook credentials come from `endpointConfigs`: the CA from ConfigMap
/// `hook-ca` (created here from `ca`), the Bearer token from Secret `hook-token` (created
/// here holding `token-one`); an entry for the same host on another port names a wrong
/// Secret. Returns the controller's label.
async fn endpoint_configs_controller(
    cluster: &TestCluster,
    parent: &CrdBuilder,
    ns: &str,
    ca: &Ca,
    server: &TlsHookServer,
) -> String {
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), ns);
    let ca_cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "hook-ca"}, "data": {"ca.crt": ca.pem()}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &ca_cm).await.unwrap();
    Api::<Secret>::namespaced(cluster.client(), ns)
        .create(
            &PostParams::default(),
            &secret("hook-token", &[("token", b"token-one")]),
        )
        .await
        .unwrap();
    let port = server.addr.port();
    create_controller(
        cluster,
        parent,
        json!({
            "hooks": {"sync": {"webhook": {"url": server.url("/sync")}}},
            "endpointConfigs": [
                // Same host, default HTTPS port (443): must not match the hook's port.
                {"host": "127.0.0.1",
                 "authorization": {"secretRef": {"name": "wrong", "namespace": ns, "key": "token"}}},
                {"host": format!("127.0.0.1:{port}"),
                 "caBundle": {"configMapRef": {"name": "hook-ca", "namespace": ns}},
                 "authorization": {"secretRef": {"name": "hook-token", "namespace": ns, "key": "token"}}},
            ],
        }),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_and_ca_via_endpoint_configs_follow_rotation_and_report_a_missing_secret() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("bearer").await;

    let ca = Ca::new("hook CA");
    let expected = Arc::new(Mutex::new("Bearer token-one".to_owned()));
    let server = bearer_server(&ca, expected.clone()).await;
    let label = endpoint_configs_controller(&cluster, &parent, &ns, &ca, &server).await;
    let process = start_binary(&cluster, &label, &[]);
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    let secrets: Api<Secret> = Api::namespaced(cluster.client(), &ns);

    create_parent(&cluster, &parent, &ns, "p1").await;
    wait_child(&cluster, &ns, "p1-cm", &process).await;
    assert!(server
        .calls()
        .iter()
        .any(|c| c.authorization.as_deref() == Some("Bearer token-one")));

    // Rotation: the server only accepts the new token from now on; a new parent converges
    // only if the binary reads the Secret again.
    *expected.lock().unwrap() = "Bearer token-two".to_owned();
    secrets
        .replace(
            "hook-token",
            &PostParams::default(),
            &secret("hook-token", &[("token", b"token-two")]),
        )
        .await
        .unwrap();
    create_parent(&cluster, &parent, &ns, "p2").await;
    wait_child(&cluster, &ns, "p2-cm", &process).await;
    let last = server.calls().last().cloned().unwrap();
    assert_eq!(last.authorization.as_deref(), Some("Bearer token-two"));

    // Missing Secret: a change to p1 triggers a sync that cannot authenticate.
    secrets
        .delete("hook-token", &DeleteParams::default())
        .await
        .unwrap();
    let parents = parent.api(cluster.client(), Some(&ns));
    set_n(&parents, "p1", 2).await;
    let events: Api<Event> = Api::namespaced(cluster.client(), &ns);
    let message = wait_sync_error(
        &events,
        "p1",
        "SyncError Event naming the Secret",
        &format!("Secret {ns}/hook-token not found"),
    )
    .await;
    assert!(
        message.contains(&format!("sync hook failed for Parent {ns}/p1: ")),
        "{message}"
    );
    // The sync failed before any write: the child is still there.
    assert!(cms.get_opt("p1-cm").await.unwrap().is_some());

    // The Secret is back without the referenced key: the Event names Secret and key.
    secrets
        .create(
            &PostParams::default(),
            &secret("hook-token", &[("other", b"x")]),
        )
        .await
        .unwrap();
    set_n(&parents, "p1", 3).await;
    wait_sync_error(
        &events,
        "p1",
        "SyncError Event naming the missing key",
        &format!("Secret {ns}/hook-token has no key \"token\""),
    )
    .await;
    assert!(cms.get_opt("p1-cm").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_and_client_certificate_from_secrets() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("mtls").await;

    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let client = client_ca.client_leaf("metacontroller");
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("alice:pw-1")
    );
    // The server requires a client certificate from `client_ca` (rustls refuses the
    // handshake otherwise) and the Basic credentials.
    let server = TlsHookServer::start(
        server_tls(&server_ca.server_leaf(&["127.0.0.1"]), Some(&client_ca)),
        {
            let basic = basic.clone();
            move |call| {
                if call.authorization.as_deref() != Some(basic.as_str()) {
                    return (401, json!({"error": "unauthorized"}));
                }
                (200, configmap_child_reply(&call.body))
            }
        },
    )
    .await;

    let secrets: Api<Secret> = Api::namespaced(cluster.client(), &ns);
    for s in [
        secret("hook-ca", &[("ca.crt", server_ca.pem().as_bytes())]),
        secret(
            "hook-client",
            &[
                ("tls.crt", client.cert_pem.as_bytes()),
                ("tls.key", client.key_pem.as_bytes()),
            ],
        ),
        secret(
            "hook-basic",
            &[("username", b"alice"), ("password", b"pw-1")],
        ),
    ] {
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }
    let label = create_controller(
        &cluster,
        &parent,
        json!({"hooks": {"sync": {"webhook": {
            "url": server.url("/sync"),
            "caBundle": {"secretRef": {"name": "hook-ca", "namespace": ns}},
            "clientTLS": {"secretRef": {"name": "hook-client", "namespace": ns}},
            "basicAuth": {"secretRef": {"name": "hook-basic", "namespace": ns}},
        }}}}),
    )
    .await;
    let process = start_binary(&cluster, &label, &[]);
    create_parent(&cluster, &parent, &ns, "p").await;
    wait_child(&cluster, &ns, "p-cm", &process).await;
    let calls = server.calls();
    assert!(
        calls
            .iter()
            .any(|c| c.authorization.as_deref() == Some(basic.as_str())),
        "{calls:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_data_never_reaches_trace_logs() {
    const RELATED_VALUE: &str = "related-SECRET-9f3b1";
    const CHILD_VALUE: &str = "child-SECRET-51c7e";
    let (cluster, ns, parent) = TestCluster::start_with_parent("redact").await;
    let secrets: Api<Secret> = Api::namespaced(cluster.client(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &secret("related", &[("password", RELATED_VALUE.as_bytes())]),
        )
        .await
        .unwrap();
    let child_b64 = base64::engine::general_purpose::STANDARD.encode(CHILD_VALUE);
    let related_b64 = base64::engine::general_purpose::STANDARD.encode(RELATED_VALUE);
    let hook = HookServer::start({
        let child_b64 = child_b64.clone();
        move |path, req| {
            if path == "/customize" {
                return HookReply::json(json!({"relatedResources": [
                    {"apiVersion": "v1", "resource": "secrets", "names": ["related"]}]}));
            }
            let name = parent_name(req);
            HookReply::json(json!({
                "children": [{"apiVersion": "v1", "kind": "Secret",
                              "metadata": {"name": format!("{name}-secret"),
                                           "labels": {"app": name}},
                              "data": {"value": child_b64}}],
                "status": {"ok": true},
            }))
        }
    })
    .await;
    let label = cluster
        .create_labelled_controller::<CompositeController>(
            "redact",
            json!({
                "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
                "childResources": [{"apiVersion": "v1", "resource": "secrets",
                                    "updateStrategy": {"method": "InPlace"}}],
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}},
                          "customize": {"webhook": {"url": hook.url("/customize")}}},
            }),
        )
        .await;
    let process = start_binary(&cluster, &label, &["--log-level", "trace"]);
    create_parent(&cluster, &parent, &ns, "p").await;

    // Positive signal first: a sync request that carried both the related Secret and the
    // observed child Secret with their data, so both were in a logged body.
    eventually_within("a sync request with both Secrets", WAIT, || async {
        hook.requests("/sync").iter().any(|req| {
            let text = req.to_string();
            text.contains(&related_b64) && text.contains(&child_b64)
        })
    })
    .await;
    // The request was logged before it was sent; the response after it arrived.
    eventually_within("the hook response logged", WAIT, || async {
        process.logs().matches("hook response").count() >= 2
    })
    .await;
    let logs = process.logs();
    assert!(logs.contains("hook request"), "trace bodies are logged");
    assert!(logs.contains("[REDACTED]"), "Secret data shown redacted");
    for value in [RELATED_VALUE, CHILD_VALUE, &related_b64, &child_b64] {
        assert!(!logs.contains(value), "logs leak {value:?}:\n{logs}");
    }
}

/// An https hook without a caBundle is verified against the system's CA certificates, which
/// the binary loads at the first such handshake (not at startup). A private CA is refused
/// (SyncError Event, no child, no request reaches the hook); trusted through
/// `SSL_CERT_FILE`, the system store rustls-native-certs reads, the same hook is called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_hook_without_ca_bundle_is_verified_against_the_system_roots() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("sysroots").await;
    let ca = Ca::new("private hook CA");
    let server = TlsHookServer::start(server_tls(&ca.server_leaf(&["127.0.0.1"]), None), |call| {
        (200, configmap_child_reply(&call.body))
    })
    .await;
    let label = create_controller(
        &cluster,
        &parent,
        json!({"hooks": {"sync": {"webhook": {"url": server.url("/sync")}}}}),
    )
    .await;
    create_parent(&cluster, &parent, &ns, "p").await;

    let untrusted = start_binary(&cluster, &label, &[]);
    let events: Api<Event> = Api::namespaced(cluster.client(), &ns);
    let failed_sync = format!("sync hook failed for Parent {ns}/p: ");
    eventually_within(
        "SyncError Event for the untrusted certificate",
        WAIT,
        || async {
            sync_error(&events, "p", |m| {
                m.contains(&failed_sync) && m.to_lowercase().contains("certificate")
            })
            .await
            .is_some()
        },
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
    assert!(cms.get_opt("p-cm").await.unwrap().is_none());
    assert!(server.calls().is_empty(), "{:?}", server.calls());
    untrusted.terminate();

    let dir = tempfile::tempdir().unwrap();
    let roots = dir.path().join("roots.pem");
    std::fs::write(&roots, ca.pem()).unwrap();
    // Only this file is the system store (rustls-native-certs reads these variables).
    let trusted = start_binary_with_env(
        &cluster,
        &label,
        &[],
        &[
            ("SSL_CERT_FILE", roots.display().to_string()),
            (
                "SSL_CERT_DIR",
                dir.path().join("none").display().to_string(),
            ),
        ],
    );
    wait_child(&cluster, &ns, "p-cm", &trusted).await;
    assert!(!server.calls().is_empty());
}
