//! examples/webhook-auth as its README runs it: certificates made at test time by the
//! example's gen-certs.sh (openssl), the Python hook over HTTPS requiring a client certificate
//! and checking a Bearer token, the CA in a ConfigMap, the client certificate (X.509 v1, as
//! upstream's example makes it) and the token in Secrets. A rotated token is refused (SyncError Event,
//! child kept) until the Secret follows. Skipped without kubectl, python3 or openssl.

use std::path::{Path, PathBuf};
use std::process::Command;

use metacontroller_testkit::example::{
    all_installed, example_file, free_port, start_hook, ExampleCluster, Kubectl,
};
use metacontroller_testkit::ControllerProcess;

const EXAMPLE: &str = "webhook-auth";

/// Runs the example's gen-certs.sh into `<scratch>/certs`, checks that the client
/// certificate is X.509 v1, and writes the hook's token file (`first-token`); returns the
/// certificate directory and the token file.
fn make_certs(cluster: &ExampleCluster) -> (PathBuf, PathBuf) {
    let certs = cluster.dir.path().join("certs");
    let status = Command::new("sh")
        .arg(example_file(EXAMPLE, "gen-certs.sh"))
        .arg(&certs)
        .status()
        .expect("running gen-certs.sh");
    assert!(status.success(), "gen-certs.sh failed");
    // The point of upstream's scenario: a client certificate without extensions (v1).
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(certs.join("client.crt"))
        .output()
        .expect("running openssl x509");
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("Version: 1 (0x0)"),
        "gen-certs.sh no longer makes an X.509 v1 client certificate:\n{}",
        String::from_utf8_lossy(&text.stdout)
    );
    let token = certs.join("token");
    std::fs::write(&token, "first-token\n").unwrap();
    (certs, token)
}

/// Starts the example's hook over HTTPS (certificates from `certs`, the Bearer token read
/// from `token` on every call, client certificates required); returns it and its port.
fn start_https_hook(certs: &Path, token: &Path) -> (ControllerProcess, u16) {
    let port = free_port();
    let mut hook = Command::new("python3");
    hook.arg(example_file(EXAMPLE, "sync.py"))
        .args(["--port", &port.to_string()])
        .arg("--cert")
        .arg(certs.join("hook.crt"))
        .arg("--key")
        .arg(certs.join("hook.key"))
        .arg("--token-file")
        .arg(token)
        .arg("--client-ca")
        .arg(certs.join("ca.crt"));
    (start_hook(hook, port), port)
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The credentials as the README creates them: the CA in ConfigMap `hook-ca`, the token in
/// Secret `hook-token`, the client certificate in Secret `hook-client`.
fn create_credentials(k: &Kubectl, certs: &Path, token: &Path) {
    k.ok(&[
        "create",
        "configmap",
        "hook-ca",
        &format!("--from-file=ca.crt={}", path(&certs.join("ca.crt"))),
    ]);
    k.ok(&[
        "create",
        "secret",
        "generic",
        "hook-token",
        &format!("--from-file=token={}", path(token)),
    ]);
    k.ok(&[
        "create",
        "secret",
        "generic",
        "hook-client",
        &format!("--from-file=tls.crt={}", path(&certs.join("client.crt"))),
        &format!("--from-file=tls.key={}", path(&certs.join("client.key"))),
    ]);
}

/// The hook wants a new token while the Secret still holds the old one: the call is refused
/// (SyncError Event) and the child kept; once the Secret follows, the next call authenticates.
fn rotate_token(cluster: &ExampleCluster, k: &Kubectl, token: &Path) {
    std::fs::write(token, "second-token\n").unwrap();
    k.merge_patch(
        "securehello",
        "hello",
        r#"{"spec":{"who":"rotated tokens"}}"#,
    );
    k.until(
        "a SyncError Event about the refused call",
        &[
            "get",
            "events",
            "-o",
            r#"jsonpath={.items[?(@.reason=="SyncError")].message}"#,
        ],
        |ok, out| ok && out.contains("401"),
    );
    assert_eq!(
        k.jsonpath(&["configmap", "hello"], "{.data.greeting}"),
        "Hello, TLS!",
        "the child changed although the hook refused the call"
    );

    // The Secret follows: the next call authenticates.
    let secret = k.ok(&[
        "create",
        "secret",
        "generic",
        "hook-token",
        &format!("--from-file=token={}", path(token)),
        "--dry-run=client",
        "-o",
        "yaml",
    ]);
    let secret_file = cluster.dir.path().join("secret.yaml");
    std::fs::write(&secret_file, secret).unwrap();
    k.ok(&["apply", "-f", &path(&secret_file)]);
    k.until_jsonpath(
        &["configmap", "hello"],
        "{.data.greeting}",
        "Hello, rotated tokens!",
    );
}

#[test]
fn webhook_auth_calls_the_hook_over_https_with_the_secret_token() {
    if !all_installed(&["kubectl", "python3", "openssl", "sh"]) {
        return;
    }
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let (certs, token) = make_certs(&cluster);
    let (_hook, port) = start_https_hook(&certs, &token);

    let k = cluster.namespace("webhook-auth");
    create_credentials(&k, &certs, &token);
    k.install_crd(
        &example_file(EXAMPLE, "crd.yaml"),
        "securehellos.example.com",
    );
    let url = format!("https://127.0.0.1:{port}");
    let ns = format!("namespace: {}", k.ns());
    k.apply(&cluster.rewrite(
        EXAMPLE,
        "controller.yaml",
        &[
            ("https://127.0.0.1:8443", &url),
            ("namespace: webhook-auth", &ns),
        ],
    ));
    k.apply(&example_file(EXAMPLE, "hello.yaml"));
    k.until_jsonpath(&["configmap", "hello"], "{.data.greeting}", "Hello, TLS!");
    k.until_jsonpath(&["securehello", "hello"], "{.status.authenticated}", "true");
    rotate_token(&cluster, &k, &token);

    k.ok(&["delete", "securehello", "hello", "--wait=true"]);
    k.until_gone(&["configmap", "hello"]);
    cluster.clean_up(&[&k]);
}
