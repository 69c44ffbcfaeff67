//! Hook recordings (`DirectoryRecorder`) for every outcome of a call: 200 JSON, a refused
//! status with a text body, a connection refused; credentials sent with the call (and
//! echoed by the server) never reach a file.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use metacontroller_api::hook::{Authorization, Hook, SecretKeyReference};
use metacontroller_hooks::{
    CallContext, DirectoryRecorder, HookClient, HookClientConfig, MemoryObjects,
};
use serde_json::{json, Value};
use support::{hook, start, webhook_mut, Capture, Server};

const TOKEN: &str = "tok-SECRET-recorded-9";

/// The recordings of `dir` once there are `count`, in name order.
fn recordings(dir: &Path, count: usize) -> Vec<(String, Value)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
            .collect();
        if names.len() >= count {
            names.sort();
            return names
                .into_iter()
                .map(|n| {
                    let text = std::fs::read_to_string(dir.join(&n)).unwrap();
                    assert!(!text.contains(TOKEN), "{n} leaks the token:\n{text}");
                    (n, serde_json::from_str(&text).unwrap())
                })
                .collect();
        }
        assert!(Instant::now() < deadline, "only {names:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn every_outcome_is_recorded_without_credentials() {
    let server = echo_server().await;
    let dir = tempfile::tempdir().unwrap();
    let objects = Arc::new(MemoryObjects::new());
    objects.set("hooks", "token", [("token", TOKEN)]);
    let client = HookClient::new(HookClientConfig {
        secrets: Some(objects.clone()),
        recorder: Some(Arc::new(DirectoryRecorder::new(dir.path(), None).unwrap())),
        ..HookClientConfig::default()
    })
    .unwrap()
    .for_controller_type("DecoratorController");

    call_with_every_outcome(&client, &server).await;

    let files = recordings(dir.path(), 3);
    assert_eq!(files.len(), 3, "{files:?}");
    for (name, record) in &files {
        check_names_and_redaction(name, record);
    }
    check_outcomes(&files);
}

/// Echoes the Authorization header back, in a 200 JSON body and in a 500 text body.
async fn echo_server() -> Server {
    start(None, |seen, _| {
        let auth = seen.header("authorization").unwrap_or_default();
        let (status, body) = if seen.path == "/ok" {
            (
                StatusCode::OK,
                json!({"children": [], "echo": auth}).to_string(),
            )
        } else {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("boom {auth}"))
        };
        Response::builder()
            .status(status)
            .body(Body::from(body))
            .unwrap()
    })
    .await
}

/// A hook at `url` sending the token as a bearer token.
fn with_token(url: String) -> Hook {
    let mut h = hook(&url);
    webhook_mut(&mut h).authorization = Some(Authorization {
        type_: None,
        secret_ref: SecretKeyReference {
            name: "token".into(),
            namespace: Some("hooks".into()),
            key: Some("token".into()),
        },
    });
    h
}

/// One call for each outcome: a 200 (the server got the token), a refused status, and a
/// connection refused.
async fn call_with_every_outcome(client: &HookClient, server: &Server) {
    let ctx = CallContext {
        controller: "deco",
        hook_name: "sync",
        parent_key: "ns/p",
    };
    let request = json!({"parent": {"metadata": {"name": "p", "namespace": "ns"}},
        "attachments": {"Secret.v1": {"s": {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s"}, "stringData": {"k": "plain-secret"}}}}});

    let ok: Value = client
        .call(&ctx, &with_token(server.url("http", "/ok")), &[], &request)
        .await
        .unwrap();
    assert_eq!(
        ok["echo"],
        format!("Bearer {TOKEN}"),
        "the server got the token"
    );
    let refused = client
        .call::<_, Value>(
            &ctx,
            &with_token(server.url("http", "/fail")),
            &[],
            &request,
        )
        .await;
    assert!(refused.is_err());
    // Nothing listens on the discard port of localhost.
    let unreachable = client
        .call::<_, Value>(
            &ctx,
            &short_timeout(hook("http://127.0.0.1:9/sync")),
            &[],
            &request,
        )
        .await;
    assert!(unreachable.is_err());
}

/// A recording is named and labelled after the call, and its request's Secret values are
/// redacted.
fn check_names_and_redaction(name: &str, record: &Value) {
    assert!(name.ends_with("-deco-sync-ns-p.json"), "{name}");
    assert_eq!(record["controller"]["kind"], "DecoratorController");
    assert_eq!(record["controller"]["name"], "deco");
    let secret = &record["request"]["attachments"]["Secret.v1"]["s"];
    assert_eq!(secret["stringData"]["k"], "REDACTED", "{record:#}");
    assert!(!record.to_string().contains("plain-secret"));
}

/// Each outcome's response or error, with the echoed token scrubbed.
fn check_outcomes(files: &[(String, Value)]) {
    let ok = recording_of(files, "/ok");
    assert_eq!(ok["response"]["status"], 200);
    assert_eq!(ok["response"]["body"]["echo"], "Bearer [REDACTED]");
    assert!(ok.get("error").is_none());
    let fail = recording_of(files, "/fail");
    assert_eq!(fail["response"]["status"], 500);
    assert_eq!(fail["response"]["body"], Value::Null);
    assert_eq!(fail["response"]["bodyText"], "boom Bearer [REDACTED]");
    assert!(fail.get("error").is_none());
    let down = recording_of(files, ":9/sync");
    assert_eq!(down["response"], Value::Null);
    assert!(
        down["error"].as_str().unwrap().contains("transport error"),
        "{down:#}"
    );
}

/// The recording of the call to the URL ending in `path`.
fn recording_of<'a>(files: &'a [(String, Value)], path: &str) -> &'a Value {
    files
        .iter()
        .map(|(_, r)| r)
        .find(|r| r["url"].as_str().unwrap().ends_with(path))
        .unwrap_or_else(|| panic!("no recording of {path}: {files:?}"))
}

/// The directory becomes unusable after start (here: replaced by a file, which fails even
/// for root): calls still succeed, and the writer logs a warning.
#[tokio::test]
async fn a_failing_recording_never_fails_the_call() {
    let capture = Capture::default();
    // The writer logs from its own thread: a global subscriber sees it.
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(capture.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let server = start(None, |_, _| {
        Response::builder()
            .status(StatusCode::OK)
            .body(Body::from(r#"{"children":[]}"#))
            .unwrap()
    })
    .await;
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("rec");
    let client = HookClient::new(HookClientConfig {
        recorder: Some(Arc::new(DirectoryRecorder::new(&dir, None).unwrap())),
        ..HookClientConfig::default()
    })
    .unwrap();
    std::fs::remove_dir(&dir).unwrap();
    std::fs::write(&dir, "not a directory").unwrap();
    let ctx = CallContext {
        controller: "c",
        hook_name: "sync",
        parent_key: "p",
    };
    for _ in 0..3 {
        let reply: Value = client
            .call(&ctx, &hook(&server.url("http", "/sync")), &[], &json!({}))
            .await
            .unwrap();
        assert_eq!(reply, json!({"children": []}));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let logs = String::from_utf8_lossy(&capture.0.lock().unwrap()).into_owned();
        if logs.contains("--record-hooks: cannot write") {
            // One warning for the three failures (rate limited).
            assert_eq!(logs.matches("--record-hooks").count(), 1, "{logs}");
            break;
        }
        assert!(Instant::now() < deadline, "no warning: {logs}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `flush` returns only once everything recorded before it is on disk: what shutdown relies
/// on so the last exchanges before a SIGTERM are kept.
#[test]
fn flush_waits_for_every_queued_recording() {
    use metacontroller_hooks::{HookRecorder, RecordedExchange, RecordedResponse};
    let dir = tempfile::tempdir().unwrap();
    let recorder = DirectoryRecorder::new(dir.path(), None).unwrap();
    // Large bodies make the writer fall well behind the loop that records them.
    let body = bytes::Bytes::from(
        serde_json::to_vec(&json!({"parent": {"spec": {"blob": "x".repeat(64 << 10)}}})).unwrap(),
    );
    let count = 400;
    for i in 0..count {
        recorder.record(RecordedExchange {
            controller_kind: "CompositeController",
            controller: "flush".into(),
            hook: "sync".into(),
            parent_key: format!("default/p{i}"),
            url: "http://127.0.0.1:1/sync".into(),
            started_at: std::time::SystemTime::now(),
            duration: Duration::from_millis(1),
            request: body.clone(),
            response: Some(RecordedResponse {
                status: 200,
                body: bytes::Bytes::from_static(b"{\"children\":[]}"),
            }),
            error: None,
        });
    }
    assert!(recorder.flush(Duration::from_secs(60)), "flush timed out");
    let written = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".json") && !name.starts_with('.')
        })
        .count();
    assert_eq!(written, count);
    // A flush with nothing queued answers at once.
    assert!(recorder.flush(Duration::from_secs(5)));
}

/// `hook` with a short timeout: refused connections are retried until it runs out.
fn short_timeout(mut hook: Hook) -> Hook {
    webhook_mut(&mut hook).timeout = Some("300ms".into());
    hook
}
