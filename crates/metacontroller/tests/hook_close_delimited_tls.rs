//! Upstream's webhook-auth scenario with a hook of its exact server shape (Python's
//! `http.server` with `BaseHTTPRequestHandler` defaults on an ssl-wrapped socket): answers
//! are HTTP/1.0 without Content-Length and the connection closes without a TLS close_notify.
//! The shipped binary must read such a body to the connection's end, as Go's client does, and
//! sync: the parent's source Secret is copied into the labelled namespaces. Credentials come
//! from `endpointConfigs` (CA from a ConfigMap, Bearer token and client certificate from
//! Secrets), as in upstream's controller-with-good-auth.yaml. Skipped without python3.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, PostParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::example::{free_port, installed, start_hook};
use metacontroller_testkit::pki::Ca;
use metacontroller_testkit::replicas::run_args;
use metacontroller_testkit::{
    create_object, unique_crd, unique_name, ControllerProcess, CrdBuilder, TestCluster,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);
const TOKEN: &str = "e2e-integration-bearer-token";
/// The source Secret's data (`value\n`, as upstream's example-with-good-auth.yaml).
const DATA: &str = "dmFsdWUK";

fn hook_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/close_delimited_tls_hook.py")
}

/// Writes the hook's certificate directory (server certificate for 127.0.0.1 and the CA
/// of client certificates) and token file into `dir`; starts the hook on a free port.
fn start_python_hook(dir: &Path, ca: &Ca) -> (ControllerProcess, u16) {
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let leaf = ca.server_leaf(&["127.0.0.1"]);
    std::fs::write(certs.join("tls.crt"), &leaf.cert_pem).unwrap();
    std::fs::write(certs.join("tls.key"), &leaf.key_pem).unwrap();
    std::fs::write(certs.join("ca.crt"), ca.pem()).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let port = free_port();
    let mut python = Command::new("python3");
    python
        .arg(hook_script())
        .arg(&certs)
        .arg(&token)
        .arg(port.to_string());
    (start_hook(python, port), port)
}

async fn create<K>(api: &Api<K>, object: Value)
where
    K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

/// The credentials as upstream's test.sh creates them, in namespace `ns`: the CA in
/// ConfigMap `webhook-auth-ca`, the token in Secret `webhook-auth-token`, the client
/// certificate in Secret `webhook-auth-client`; plus the Secret `shareable` to propagate.
async fn create_credentials(cluster: &TestCluster, ns: &str, ca: &Ca) {
    let client = ca.client_leaf("metacontroller");
    let secrets: Api<Secret> = Api::namespaced(cluster.client(), ns);
    create(
        &Api::<ConfigMap>::namespaced(cluster.client(), ns),
        json!({"metadata": {"name": "webhook-auth-ca"}, "data": {"ca.crt": ca.pem()}}),
    )
    .await;
    create(
        &secrets,
        json!({"metadata": {"name": "webhook-auth-token"}, "stringData": {"token": TOKEN}}),
    )
    .await;
    create(
        &secrets,
        json!({"metadata": {"name": "webhook-auth-client"},
               "stringData": {"tls.crt": client.cert_pem, "tls.key": client.key_pem}}),
    )
    .await;
    create(
        &secrets,
        json!({"metadata": {"name": "shareable"}, "data": {"some": DATA, "other": DATA}}),
    )
    .await;
}

/// Namespaces `prefix-<unique>`, labelled `labels`; returns the name.
async fn namespace(cluster: &TestCluster, prefix: &str, labels: Value) -> String {
    let name = unique_name(prefix);
    create(
        &Api::<Namespace>::all(cluster.client()),
        json!({"metadata": {"name": name, "labels": labels}}),
    )
    .await;
    name
}

/// upstream's controller-with-good-auth.yaml, calling the hook on 127.0.0.1:`port` with the
/// credentials in namespace `ns`; returns the controller's label.
async fn create_controller(
    cluster: &TestCluster,
    parent: &CrdBuilder,
    ns: &str,
    port: u16,
) -> String {
    let base = format!("https://127.0.0.1:{port}");
    let spec = json!({
        "generateSelector": true,
        "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
        "childResources": [{"apiVersion": "v1", "resource": "secrets",
                            "updateStrategy": {"method": "InPlace"}}],
        "endpointConfigs": [{
            "host": format!("127.0.0.1:{port}"),
            "caBundle": {"configMapRef": {"name": "webhook-auth-ca", "namespace": ns, "key": "ca.crt"}},
            "authorization": {"type": "Bearer",
                              "secretRef": {"name": "webhook-auth-token", "namespace": ns, "key": "token"}},
            "clientTLS": {"secretRef": {"name": "webhook-auth-client", "namespace": ns},
                          "certKey": "tls.crt", "privateKeyKey": "tls.key"},
        }],
        "hooks": {
            "sync": {"webhook": {"url": format!("{base}/sync")}},
            "customize": {"webhook": {"url": format!("{base}/customize")}},
        },
    });
    cluster
        .create_labelled_controller::<CompositeController>("webhook-auth", spec)
        .await
}

/// Polls `check` until it holds; on timeout the panic shows both processes' logs.
async fn until<F, Fut>(what: &str, processes: [&ControllerProcess; 2], mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\ncontroller logs:\n{}\nhook logs:\n{}",
            processes[0].logs(),
            processes[1].logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `data` of Secret `ns/name`, if it exists.
async fn secret_data(cluster: &TestCluster, ns: &str, name: &str) -> Option<Value> {
    let secret = Api::<Secret>::namespaced(cluster.client(), ns)
        .get_opt(name)
        .await
        .unwrap()?;
    Some(serde_json::to_value(secret.data).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_https_hook_without_content_length_or_close_notify_syncs() {
    if !installed("python3") {
        return;
    }
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let work = tempfile::tempdir().unwrap();
    let ca = Ca::new("webhook-auth-test-ca");
    let (hook, port) = start_python_hook(work.path(), &ca);

    let source = cluster.create_namespace("secure-omega").await;
    create_credentials(&cluster, &source, &ca).await;
    let label_key = unique_name("propagate-secure");
    let alpha = namespace(&cluster, "secure-alpha", json!({&label_key: "true"})).await;
    let beta = namespace(&cluster, "secure-beta", json!({&label_key: "true"})).await;
    let gamma = namespace(&cluster, "secure-gamma", json!({})).await;

    let parent =
        unique_crd("ssp", "SecureSecretPropagation", "securesecretpropagations").cluster_scoped();
    cluster.install_crd(&parent.build()).await;
    let label = create_controller(&cluster, &parent, &source, port).await;
    let controller = ControllerProcess::start(
        env!("CARGO_BIN_EXE_metacontroller"),
        run_args(cluster.kubeconfig_path(), &label),
    );
    let parents = parent.api(cluster.client(), None);
    create_object(
        &parents,
        json!({
            "apiVersion": parent.api_version(), "kind": parent.kind(),
            "metadata": {"name": "secure-secret-propagation"},
            "spec": {"sourceName": "shareable", "sourceNamespace": source,
                     "targetNamespaceLabelSelector": {"matchLabels": {&label_key: "true"}}},
        }),
    )
    .await;

    let expected = json!({"some": DATA, "other": DATA});
    for ns in [&alpha, &beta] {
        until(
            &format!("Secret {ns}/shareable"),
            [&controller, &hook],
            || async { secret_data(&cluster, ns, "shareable").await.as_ref() == Some(&expected) },
        )
        .await;
    }
    until("status.working == fine", [&controller, &hook], || async {
        let got = parents.get("secure-secret-propagation").await.unwrap();
        got.data["status"]["working"] == "fine"
    })
    .await;
    // The sync that made both copies answered every child: none for the unlabelled one.
    assert_eq!(secret_data(&cluster, &gamma, "shareable").await, None);
}
