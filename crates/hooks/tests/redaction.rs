//! Credentials never appear in logs (captured at TRACE), error `Display`/`Debug`, or
//! metrics — even when a hook server echoes the request headers back.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use metacontroller_api::hook::{Authorization, BasicAuth, ClientTls, SecretKeyReference};
use metacontroller_hooks::{CallContext, HookClient, HookClientConfig, HookError, MemoryObjects};
use serde_json::json;
use support::{hook, server_tls, start, webhook_mut, Ca, Capture, Server};

const TOKEN: &str = "tok-SECRET-4d1f9";
const PASSWORD: &str = "pw-SECRET-77a2c";
const URL_PASSWORD: &str = "url-SECRET-c0ffee";

fn secret_ref(name: &str, key: Option<&str>) -> SecretKeyReference {
    SecretKeyReference {
        name: name.into(),
        namespace: Some("hooks".into()),
        key: key.map(str::to_owned),
    }
}

fn assert_clean(what: &str, text: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!text.contains(secret), "{what} leaks {secret:?}:\n{text}");
    }
}

#[tokio::test]
async fn credentials_never_reach_logs_errors_or_metrics() {
    let capture = Capture::default();
    let _guard = capture_traces(&capture);
    let server = echo_server().await;

    let client_ca = Ca::new("client ca");
    let identity = client_ca.client_leaf("metacontroller");
    // A distinctive line from the middle of the private key PEM.
    let key_line = identity.key_pem.lines().nth(1).unwrap().to_owned();
    let objects = secret_objects(&identity.cert_pem, &identity.key_pem);
    let registry = prometheus::Registry::new();
    let client = HookClient::new(HookClientConfig {
        secrets: Some(objects.clone()),
        config_maps: Some(objects.clone()),
        registry: Some(registry.clone()),
        ..HookClientConfig::default()
    })
    .unwrap();
    // base64("alice:<PASSWORD>"), as sent in the Basic header.
    let basic_pair = "YWxpY2U6cHctU0VDUkVULTc3YTJj";
    let url_pair_password = URL_PASSWORD;
    let secrets = [
        TOKEN,
        PASSWORD,
        basic_pair,
        URL_PASSWORD,
        url_pair_password,
        key_line.as_str(),
    ];

    let mut errors: Vec<HookError> = Vec::new();
    call_with_echoed_credentials(&client, &server, &mut errors).await;
    call_with_refused_credentials(&client, &server, &mut errors).await;
    let _tls_server = call_with_untrusted_mtls(&client, &client_ca, &mut errors).await;

    check_errors(&errors, &secrets);
    check_logs(&capture, &secrets);
    check_metrics(&registry, &secrets);
    assert_clean("MemoryObjects Debug", &format!("{objects:?}"), &secrets);
}

const CTX: CallContext<'static> = CallContext {
    controller: "ctl",
    hook_name: "sync",
    parent_key: "ns/p",
};

/// Captures everything logged on this thread, down to TRACE, while the guard lives.
fn capture_traces(capture: &Capture) -> tracing::subscriber::DefaultGuard {
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(capture.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_default(subscriber)
}

/// A server echoing the Authorization header: in a 401 body, and in a 200 body on /ok.
async fn echo_server() -> Server {
    start(None, |seen, _| {
        let auth = seen.header("authorization").unwrap_or_default();
        let status = if seen.path == "/ok" {
            StatusCode::OK
        } else {
            StatusCode::UNAUTHORIZED
        };
        Response::builder()
            .status(status)
            .body(Body::from(format!(r#"{{"echo":"{auth}"}}"#)))
            .unwrap()
    })
    .await
}

/// The Secrets the hooks refer to: a token, a Basic pair and a client TLS identity.
fn secret_objects(cert_pem: &str, key_pem: &str) -> Arc<MemoryObjects> {
    let objects = Arc::new(MemoryObjects::new());
    objects.set("hooks", "token", [("token", TOKEN), ("other", PASSWORD)]);
    objects.set(
        "hooks",
        "basic",
        [("username", "alice"), ("password", PASSWORD)],
    );
    objects.set(
        "hooks",
        "client",
        [
            ("tls.crt", cert_pem.to_owned()),
            ("tls.key", key_pem.to_owned()),
        ],
    );
    objects
}

/// Keeps the error of a failed call; a decoded response is checked to be clean.
fn collect(errors: &mut Vec<HookError>, result: Result<serde_json::Value, HookError>) {
    match result {
        Ok(value) => assert_clean("decoded response", &value.to_string(), &[]),
        Err(err) => errors.push(err),
    }
}

/// A hook sending a bearer token from the `token` Secret's `key`.
fn bearer(url: &str, key: &str) -> metacontroller_api::hook::Hook {
    let mut hook = hook(url);
    webhook_mut(&mut hook).authorization = Some(Authorization {
        type_: None,
        secret_ref: secret_ref("token", Some(key)),
    });
    hook
}

/// Calls sending credentials the server echoes, or the connection fails with.
async fn call_with_echoed_credentials(
    client: &HookClient,
    server: &Server,
    errors: &mut Vec<HookError>,
) {
    // Bearer token: echoed in a 401 (error body) and in a 200 (trace-logged body).
    collect(
        errors,
        call(client, &CTX, &bearer(&server.url("http", "/deny"), "token")).await,
    );
    collect(
        errors,
        call(client, &CTX, &bearer(&server.url("http", "/ok"), "token")).await,
    );

    // Basic auth, echoed.
    let mut basic = hook(&server.url("http", "/deny"));
    webhook_mut(&mut basic).basic_auth = Some(BasicAuth {
        secret_ref: secret_ref("basic", None),
        ..BasicAuth::default()
    });
    collect(errors, call(client, &CTX, &basic).await);

    // Password in URL userinfo.
    let with_userinfo = format!("http://bob:{URL_PASSWORD}@{}/deny", server.addr);
    collect(errors, call(client, &CTX, &hook(&with_userinfo)).await);
    let unreachable = format!("http://bob:{URL_PASSWORD}@127.0.0.1:1/deny");
    // Refused connections are retried within the hook's timeout: keep it short.
    let mut unreachable = hook(&unreachable);
    webhook_mut(&mut unreachable).timeout = Some("300ms".into());
    collect(errors, call(client, &CTX, &unreachable).await);
}

/// Calls refused before sending: a missing key next to secret values, and the Basic type
/// on an authorization Secret.
async fn call_with_refused_credentials(
    client: &HookClient,
    server: &Server,
    errors: &mut Vec<HookError>,
) {
    let missing = bearer(&server.url("http", "/deny"), "absent");
    collect(errors, call(client, &CTX, &missing).await);
    let mut basic_type = hook(&server.url("http", "/deny"));
    webhook_mut(&mut basic_type).authorization = Some(Authorization {
        type_: Some("Basic".into()),
        secret_ref: secret_ref("token", Some("token")),
    });
    collect(errors, call(client, &CTX, &basic_type).await);
}

/// A call with the mTLS key against a server whose CA we do not trust; returns the server.
async fn call_with_untrusted_mtls(
    client: &HookClient,
    client_ca: &Ca,
    errors: &mut Vec<HookError>,
) -> Server {
    let server_ca = Ca::new("server ca");
    let tls_server = start(
        Some(server_tls(
            &server_ca.server_leaf(&["localhost"]),
            Some(client_ca),
        )),
        |_, _| support::json(StatusCode::OK, "{}"),
    )
    .await;
    let mut mtls = hook(&format!("https://localhost:{}/", tls_server.addr.port()));
    webhook_mut(&mut mtls).client_tls = Some(ClientTls {
        secret_ref: secret_ref("client", None),
        ..ClientTls::default()
    });
    collect(errors, call(client, &CTX, &mtls).await);
    tls_server
}

/// Every call failed but one, and no error shows a credential (while the echo did reach
/// the first one, scrubbed).
fn check_errors(errors: &[HookError], secrets: &[&str]) {
    assert_eq!(errors.len(), 7, "{errors:#?}");
    for err in errors {
        assert_clean("error Display", &err.to_string(), secrets);
        assert_clean("error Debug", &format!("{err:?}"), secrets);
    }
    // The echo really happened and was scrubbed, so the test can fail.
    let echoed = errors[0].to_string();
    assert!(echoed.contains("Bearer [REDACTED]"), "{echoed}");
}

/// The trace logs have the request and response bodies and the parent, and no credential.
fn check_logs(capture: &Capture, secrets: &[&str]) {
    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("hook request"),
        "trace capture works:\n{logs}"
    );
    assert!(
        logs.contains("hook response"),
        "trace capture works:\n{logs}"
    );
    assert!(
        logs.contains("parent=\"ns/p\"") || logs.contains("parent=ns/p"),
        "{logs}"
    );
    assert_clean("logs", &logs, secrets);
}

/// The hook metrics exist and show no credential.
fn check_metrics(registry: &prometheus::Registry, secrets: &[&str]) {
    let mut metrics = String::new();
    prometheus::TextEncoder::new()
        .encode_utf8(&registry.gather(), &mut metrics)
        .unwrap();
    assert!(metrics.contains("metacontroller_hook_calls_total"));
    assert!(metrics.contains("metacontroller_sync_requests_total"));
    assert_clean("metrics", &metrics, secrets);
}

async fn call(
    client: &HookClient,
    ctx: &CallContext<'_>,
    hook: &metacontroller_api::hook::Hook,
) -> Result<serde_json::Value, HookError> {
    tokio::time::timeout(
        Duration::from_secs(20),
        client.call(ctx, hook, &[], &json!({"parent": {"name": "p"}})),
    )
    .await
    .expect("call did not finish in 20s")
}
