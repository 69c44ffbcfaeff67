//! Plain-HTTP behaviour of the hook client against real local servers: targets, headers,
//! timeouts, status handling, size limit, decoding modes, ETag cache, metrics, keep-alive.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use metacontroller_api::hook::{
    Hook, ResponseUnmarshallMode, ServiceReference, Webhook, WebhookEtagConfig,
};
use metacontroller_hooks::{
    CallContext, DecodeError, HookClient, HookClientConfig, HookError, StaticHostResolver,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::{hook, hook_v2, json, start, webhook_mut};

const CTX: CallContext<'static> = CallContext {
    controller: "ctl",
    hook_name: "sync",
    parent_key: "default/parent-a",
};

#[derive(Debug, Serialize)]
struct SyncRequest {
    parent: serde_json::Value,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
struct SyncResponse {
    status: Option<serde_json::Value>,
    #[serde(default)]
    children: Vec<serde_json::Value>,
}

fn request() -> SyncRequest {
    SyncRequest {
        parent: json!({"metadata": {"name": "parent-a"}}),
    }
}

fn client() -> HookClient {
    HookClient::new(HookClientConfig::default()).unwrap()
}

async fn call(client: &HookClient, hook: &Hook) -> Result<SyncResponse, HookError> {
    bounded(client.call(&CTX, hook, &[], &request())).await
}

/// Every test call is bounded so a hang fails instead of blocking the suite.
async fn bounded<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .expect("call did not finish in 20s")
}

#[tokio::test]
async fn posts_json_and_decodes_200() {
    let server = start(None, |_, _| {
        json(StatusCode::OK, r#"{"status":{"ok":true}}"#)
    })
    .await;
    let response = call(&client(), &hook(&server.url("http", "/sync")))
        .await
        .unwrap();
    assert_eq!(response.status, Some(json!({"ok": true})));
    let seen = server.last();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path, "/sync");
    assert_eq!(
        seen.header("content-type").as_deref(),
        Some("application/json")
    );
    assert!(seen.header("authorization").is_none());
    let body: serde_json::Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(body, json!({"parent": {"metadata": {"name": "parent-a"}}}));
}

#[tokio::test]
async fn service_target_builds_cluster_url_and_uses_resolver() {
    let server = start(None, |_, _| json(StatusCode::OK, "{}")).await;
    let resolver = StaticHostResolver::new().with("hooks.team-a", 8080, server.addr);
    let client = HookClient::new(HookClientConfig {
        host_resolver: Some(Arc::new(resolver)),
        ..HookClientConfig::default()
    })
    .unwrap();
    let hook = Hook {
        version: None,
        webhook: Some(Webhook {
            service: Some(ServiceReference {
                name: "hooks".into(),
                namespace: "team-a".into(),
                port: Some(8080),
                protocol: None,
            }),
            path: Some("/my/sync".into()),
            ..Webhook::default()
        }),
        ..Hook::default()
    };
    call(&client, &hook).await.unwrap();
    let seen = server.last();
    assert_eq!(seen.path, "/my/sync");
    let host = seen.header("host").unwrap();
    assert!(host.starts_with("hooks.team-a:"), "host header {host}");

    // Default port 80: the resolver is asked for hooks.team-a:80.
    let resolver = StaticHostResolver::new().with("hooks.team-a", 80, server.addr);
    let client = HookClient::new(HookClientConfig {
        host_resolver: Some(Arc::new(resolver)),
        ..HookClientConfig::default()
    })
    .unwrap();
    let mut default_port = hook.clone();
    webhook_mut(&mut default_port)
        .service
        .as_mut()
        .unwrap()
        .port = None;
    call(&client, &default_port).await.unwrap();
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn invalid_targets_are_config_errors() {
    let client = client();
    let no_webhook = Hook::default();
    assert!(matches!(
        call(&client, &no_webhook).await,
        Err(HookError::Config { .. })
    ));
    let mut no_path = hook("http://unused");
    let webhook = webhook_mut(&mut no_path);
    webhook.url = None;
    webhook.service = Some(ServiceReference {
        name: "a".into(),
        namespace: "b".into(),
        ..ServiceReference::default()
    });
    let err = call(&client, &no_path).await.unwrap_err();
    assert!(err.to_string().contains("'service' and 'path'"), "{err}");
}

#[tokio::test]
async fn hook_timeout_aborts_slow_servers() {
    // A server that accepts connections and never answers: only the client's timeout can
    // end the call. (A responder that blocks a runtime thread made this test depend on
    // which thread drives tokio's timers.)
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let mut slow = hook(&format!("http://{addr}/"));
    webhook_mut(&mut slow).timeout = Some("200ms".into());
    let err = tokio::time::timeout(Duration::from_secs(10), call(&client(), &slow))
        .await
        .expect("the hook timeout must end the call")
        .unwrap_err();
    match err {
        HookError::Timeout { timeout, .. } => assert_eq!(timeout, Duration::from_millis(200)),
        other => panic!("expected timeout, got {other:?}"),
    }

    let mut bad = hook(&format!("http://{addr}/"));
    webhook_mut(&mut bad).timeout = Some("soon".into());
    assert!(matches!(
        call(&client(), &bad).await,
        Err(HookError::Config { .. })
    ));
}

#[tokio::test]
async fn only_200_succeeds() {
    let long_body = format!("boom {}", "x".repeat(5000));
    let body = long_body.clone();
    let server = start(None, move |seen, _| {
        let status = match seen.path.as_str() {
            "/500" => StatusCode::INTERNAL_SERVER_ERROR,
            "/201" => StatusCode::CREATED,
            "/304" => StatusCode::NOT_MODIFIED,
            _ => StatusCode::NOT_FOUND,
        };
        Response::builder()
            .status(status)
            .body(Body::from(body.clone()))
            .unwrap()
    })
    .await;
    let client = client();
    for (path, code) in [("/500", 500), ("/201", 201), ("/404", 404)] {
        match call(&client, &hook(&server.url("http", path))).await {
            Err(HookError::Status { status, body, url }) => {
                assert_eq!(status, code);
                assert!(body.starts_with("boom xxx"), "{body}");
                assert!(body.len() <= 1024, "body prefix is capped: {}", body.len());
                assert!(url.ends_with(path));
            }
            other => panic!("{path}: expected status error, got {other:?}"),
        }
    }
    // 304 without a cached ETag is not a success either.
    assert!(matches!(
        call(&client, &hook(&server.url("http", "/304"))).await,
        Err(HookError::Status { status: 304, .. })
    ));
    let err = call(&client, &hook(&server.url("http", "/500")))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("500"), "{err}");
}

#[tokio::test]
async fn too_many_requests_reports_retry_after() {
    let server = start(None, |_, _| {
        Response::builder()
            .status(StatusCode::TOO_MANY_REQUESTS)
            .header("retry-after", "7")
            .body(Body::empty())
            .unwrap()
    })
    .await;
    match call(&client(), &hook(&server.url("http", "/"))).await {
        Err(HookError::TooManyRequests { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)))
        }
        other => panic!("expected 429 error, got {other:?}"),
    }
}

#[tokio::test]
async fn transport_failures_are_reported() {
    // Bind then drop: nothing listens on this port any more.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    // Refused connections are retried within the hook's timeout: keep it short.
    let mut unreachable = hook(&format!("http://127.0.0.1:{port}/"));
    webhook_mut(&mut unreachable).timeout = Some("300ms".into());
    let err = call(&client(), &unreachable).await.unwrap_err();
    assert!(matches!(err, HookError::Transport { .. }), "{err:?}");
}

#[tokio::test]
async fn oversize_bodies_are_rejected() {
    let big = format!(r#"{{"status":{{"pad":"{}"}}}}"#, "x".repeat(4096));
    let body = big.clone();
    let server = start(None, move |seen, _| {
        if seen.path == "/stream" {
            // No Content-Length: the limit must hold while streaming.
            let chunks: Vec<Result<String, std::io::Error>> =
                (0..8).map(|_| Ok("x".repeat(1024))).collect();
            Response::builder()
                .status(StatusCode::OK)
                .body(Body::from_stream(futures::stream::iter(chunks)))
                .unwrap()
        } else {
            json(StatusCode::OK, &body)
        }
    })
    .await;
    let small = HookClient::new(HookClientConfig {
        max_body_bytes: 1024,
        ..HookClientConfig::default()
    })
    .unwrap();
    for path in ["/len", "/stream"] {
        match call(&small, &hook(&server.url("http", path))).await {
            Err(HookError::Oversize { limit, .. }) => assert_eq!(limit, 1024),
            other => panic!("{path}: expected oversize, got {other:?}"),
        }
    }
    let err = call(&small, &hook(&server.url("http", "/len")))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("1Ki"), "{err}");
    // The default limit (16 MiB) accepts it.
    call(&client(), &hook(&server.url("http", "/len")))
        .await
        .unwrap();
}

#[tokio::test]
async fn strict_and_loose_decoding() {
    let server = start(None, |seen, _| match seen.path.as_str() {
        "/dup" => json(StatusCode::OK, r#"{"status":{"n":1},"status":{"n":2}}"#),
        "/null" => json(StatusCode::OK, "null"),
        _ => json(StatusCode::OK, r#"{"status":{"n":1},"unexpected":true}"#),
    })
    .await;
    let client = client();
    let url = server.url("http", "/extra");

    // v1 defaults to loose: the unknown field is ignored.
    let response = call(&client, &hook(&url)).await.unwrap();
    assert_eq!(response.status, Some(json!({"n": 1})));

    // v2 defaults to strict: the unknown field is named.
    match call(&client, &hook_v2(&url)).await {
        Err(HookError::Decode { error, .. }) => assert_eq!(
            error,
            DecodeError::UnknownField {
                path: "unexpected".into()
            }
        ),
        other => panic!("expected decode error, got {other:?}"),
    }

    // An explicit responseUnMarshallMode wins over the version default, both ways.
    let mut loose_v2 = hook_v2(&url);
    webhook_mut(&mut loose_v2).response_un_marshall_mode = Some(ResponseUnmarshallMode::Loose);
    call(&client, &loose_v2).await.unwrap();
    // call_with_mode overrides the hook's own setting.
    let err = bounded(client.call_with_mode::<_, SyncResponse>(
        &CTX,
        &loose_v2,
        &[],
        &request(),
        ResponseUnmarshallMode::Strict,
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, HookError::Decode { .. }), "{err:?}");
    let mut strict_v1 = hook(&url);
    webhook_mut(&mut strict_v1).response_un_marshall_mode = Some(ResponseUnmarshallMode::Strict);
    assert!(matches!(
        call(&client, &strict_v1).await,
        Err(HookError::Decode { .. })
    ));

    // A `null` body is the empty response, as in Go.
    let response = call(&client, &hook(&server.url("http", "/null")))
        .await
        .unwrap();
    assert_eq!(response, SyncResponse::default());

    // Duplicates: loose keeps the last value, strict names the field.
    let dup = server.url("http", "/dup");
    let response = call(&client, &hook(&dup)).await.unwrap();
    assert_eq!(response.status, Some(json!({"n": 2})));
    let err = call(&client, &hook_v2(&dup)).await.unwrap_err();
    assert!(
        err.to_string().contains(r#"duplicate field "status""#),
        "{err}"
    );
}

fn etag_hook(url: &str, timeout: Option<i32>, cleanup: Option<i32>) -> Hook {
    let mut hook = hook(url);
    webhook_mut(&mut hook).etag = Some(WebhookEtagConfig {
        enabled: Some(true),
        cache_timeout_seconds: timeout,
        cache_cleanup_seconds: cleanup,
    });
    hook
}

/// A server that tags each body with a version and answers `not_modified` when the
/// client already has it.
async fn etag_server(not_modified: StatusCode) -> support::Server {
    let version = Arc::new(AtomicUsize::new(1));
    start(None, move |seen, index| {
        let current = format!("\"v{}\"", version.load(Ordering::SeqCst));
        if seen.header("if-none-match").as_deref() == Some(current.as_str()) {
            return Response::builder()
                .status(not_modified)
                .body(Body::empty())
                .unwrap();
        }
        Response::builder()
            .status(StatusCode::OK)
            .header("etag", current)
            .body(Body::from(format!(r#"{{"status":{{"served":{index}}}}}"#)))
            .unwrap()
    })
    .await
}

#[tokio::test]
async fn etag_304_reuses_cached_response() {
    for not_modified in [StatusCode::NOT_MODIFIED, StatusCode::PRECONDITION_FAILED] {
        let server = etag_server(not_modified).await;
        let client = client();
        let hook = etag_hook(&server.url("http", "/"), None, None);

        let first = call(&client, &hook).await.unwrap();
        assert_eq!(first.status, Some(json!({"served": 0})));
        assert!(server.last().header("if-none-match").is_none());

        let second = call(&client, &hook).await.unwrap();
        assert_eq!(
            server.last().header("if-none-match").as_deref(),
            Some("\"v1\"")
        );
        assert_eq!(second, first, "{not_modified}: cached body reused");
        assert_eq!(client.etag_entries("ctl", "sync"), 1);

        // Another parent has its own entry.
        let other = CallContext {
            parent_key: "default/parent-b",
            ..CTX
        };
        let response: SyncResponse = bounded(client.call(&other, &hook, &[], &request()))
            .await
            .unwrap();
        assert_eq!(response.status, Some(json!({"served": 2})));
        assert_eq!(client.etag_entries("ctl", "sync"), 2);

        client.forget_parent("ctl", "default/parent-b");
        assert_eq!(client.etag_entries("ctl", "sync"), 1);
        client.forget_controller("ctl");
        assert_eq!(client.etag_entries("ctl", "sync"), 0);
        call(&client, &hook).await.unwrap();
        assert!(server.last().header("if-none-match").is_none());
    }
}

#[tokio::test]
async fn etag_disabled_sends_no_if_none_match() {
    let server = etag_server(StatusCode::NOT_MODIFIED).await;
    let client = client();
    let plain = hook(&server.url("http", "/"));
    call(&client, &plain).await.unwrap();
    let second = call(&client, &plain).await.unwrap();
    assert!(server.last().header("if-none-match").is_none());
    assert_eq!(second.status, Some(json!({"served": 1})));
    assert_eq!(client.etag_entries("ctl", "sync"), 0);
}

#[tokio::test]
async fn etag_entries_expire_and_are_swept() {
    let server = etag_server(StatusCode::NOT_MODIFIED).await;
    let client = client();
    let hook = etag_hook(&server.url("http", "/"), Some(1), Some(1));
    call(&client, &hook).await.unwrap();
    assert_eq!(client.etag_entries("ctl", "sync"), 1);

    let deadline = Instant::now() + Duration::from_secs(10);
    while client.etag_entries("ctl", "sync") > 0 {
        assert!(Instant::now() < deadline, "entry was never swept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let again = call(&client, &hook).await.unwrap();
    assert!(server.last().header("if-none-match").is_none());
    assert_eq!(again.status, Some(json!({"served": 1})));
}

#[tokio::test]
async fn metrics_count_calls_by_controller_hook_and_outcome() {
    let server = etag_server(StatusCode::NOT_MODIFIED).await;
    let registry = prometheus::Registry::new();
    let client = HookClient::new(HookClientConfig {
        registry: Some(registry.clone()),
        ..HookClientConfig::default()
    })
    .unwrap()
    .for_controller_type("CompositeController");
    let url = server.url("http", "/");
    let cached_hook = etag_hook(&url, None, None);
    call(&client, &cached_hook).await.unwrap();
    call(&client, &cached_hook).await.unwrap();
    let broken = Hook::default();
    assert!(call(&client, &broken).await.is_err());

    let families = registry.gather();
    check_call_outcomes(&families);
    check_upstream_request_metrics(&families, &url);

    // A second client on the same registry is refused (duplicate registration).
    assert!(HookClient::new(HookClientConfig {
        registry: Some(registry),
        ..HookClientConfig::default()
    })
    .is_err());
}

/// The value of the sample of `family` carrying all of `want` as labels: a counter's value,
/// a histogram's sample count or a gauge's value (0 without such a sample).
fn sample_value(
    families: &[prometheus::proto::MetricFamily],
    family: &str,
    want: &[(&str, &str)],
) -> f64 {
    families
        .iter()
        .find(|f| f.name() == family)
        .unwrap_or_else(|| panic!("no family {family}"))
        .get_metric()
        .iter()
        .find(|m| {
            let labels: Vec<(&str, &str)> = m
                .get_label()
                .iter()
                .map(|l| (l.name(), l.value()))
                .collect();
            want.iter().all(|w| labels.contains(w))
        })
        .map(|m| {
            if m.get_counter().value() > 0.0 {
                m.get_counter().value()
            } else if m.get_histogram().get_sample_count() > 0 {
                m.get_histogram().get_sample_count() as f64
            } else {
                m.get_gauge().value()
            }
        })
        .unwrap_or(0.0)
}

/// Our family counts one call per outcome, labelled with controller and hook.
fn check_call_outcomes(families: &[prometheus::proto::MetricFamily]) {
    let ours = |outcome| {
        sample_value(
            families,
            "metacontroller_hook_calls_total",
            &[
                ("controller_name", "ctl"),
                ("controller_type", "CompositeController"),
                ("hook", "sync"),
                ("runtime", "webhook"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(ours("success"), 1.0);
    assert_eq!(ours("cached"), 1.0);
    assert_eq!(ours("config_error"), 1.0);
}

/// Upstream's families: one sample per status code, method "post", the URL as a label.
fn check_upstream_request_metrics(families: &[prometheus::proto::MetricFamily], url: &str) {
    let upstream = |code| {
        sample_value(
            families,
            "metacontroller_sync_requests_total",
            &[
                ("code", code),
                ("method", "post"),
                ("controller_name", "ctl"),
                ("controller_type", "CompositeController"),
                ("url", url),
            ],
        )
    };
    assert_eq!(upstream("200"), 1.0);
    assert_eq!(upstream("304"), 1.0);
    assert_eq!(
        sample_value(
            families,
            "metacontroller_sync_request_duration_histogram_seconds",
            &[("method", "post"), ("url", url)]
        ),
        2.0,
        "the call without a webhook sent nothing"
    );
    assert_eq!(
        sample_value(
            families,
            "metacontroller_sync_in_flight_requests",
            &[("url", url)]
        ),
        0.0
    );
}

#[tokio::test]
async fn sequential_calls_reuse_one_keep_alive_connection() {
    let server = start(None, |_, _| json(StatusCode::OK, "{}")).await;
    let client = client();
    let hook = hook(&server.url("http", "/"));
    for _ in 0..20 {
        call(&client, &hook).await.unwrap();
    }
    assert_eq!(server.requests().len(), 20);
    assert_eq!(server.connections(), 1);
}
