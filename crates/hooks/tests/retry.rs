//! Retries of webhook calls that could not reach the hook, against real sockets on
//! 127.0.0.1: a hook that starts listening late is reached within its timeout; a hook that
//! got the request is never asked twice, whether it hangs up or never answers.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use metacontroller_hooks::metrics::RETRIES_TOTAL;
use metacontroller_hooks::{CallContext, HookClient, HookClientConfig, HookError};
use serde_json::{json, Value};
use support::{hook, webhook_mut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

const CTX: CallContext<'static> = CallContext {
    controller: "ctl",
    hook_name: "sync",
    parent_key: "default/parent-a",
};

fn client(registry: &prometheus::Registry) -> HookClient {
    HookClient::new(HookClientConfig {
        registry: Some(registry.clone()),
        ..HookClientConfig::default()
    })
    .unwrap()
}

/// Retries counted so far (over all reasons).
fn retries(registry: &prometheus::Registry) -> u64 {
    registry
        .gather()
        .iter()
        .filter(|f| f.name() == RETRIES_TOTAL)
        .flat_map(|f| f.get_metric())
        .map(|m| m.get_counter().value() as u64)
        .sum()
}

/// A port nothing listens on (bound, then released).
fn free_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// Reads one request (headers and a Content-Length body) from `conn`.
async fn read_request(conn: &mut tokio::net::TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = conn.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return buf;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return buf;
            }
        }
    }
}

async fn call(client: &HookClient, url: &str, timeout: &str) -> Result<Value, HookError> {
    let mut h = hook(url);
    webhook_mut(&mut h).timeout = Some(timeout.into());
    tokio::time::timeout(
        Duration::from_secs(30),
        client.call(&CTX, &h, &[], &json!({"parent": {}})),
    )
    .await
    .expect("call did not finish in 30s")
}

#[tokio::test]
async fn a_hook_listening_late_is_reached_within_its_timeout() {
    let registry = prometheus::Registry::new();
    let addr = free_addr();
    let watched = registry.clone();
    let server = tokio::spawn(async move {
        // Listen only once the client has been refused twice.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while retries(&watched) < 2 {
            assert!(tokio::time::Instant::now() < deadline, "no retries seen");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let listener = TcpListener::bind(addr).await.unwrap();
        let (mut conn, _) = listener.accept().await.unwrap();
        read_request(&mut conn).await;
        let body = r#"{"status":{"up":true}}"#;
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(answer.as_bytes()).await.unwrap();
    });
    let client = client(&registry);
    let response = call(&client, &format!("http://{addr}/sync"), "20s")
        .await
        .unwrap();
    assert_eq!(response["status"]["up"], true);
    server.await.unwrap();
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    assert!(
        text.contains(r#"metacontroller_hook_retries_total{controller_name="ctl",controller_type="",hook="sync",reason="connection_refused"}"#),
        "{text}"
    );
}

#[tokio::test]
async fn a_hook_that_stays_down_fails_with_the_connect_error() {
    let registry = prometheus::Registry::new();
    let addr = free_addr();
    let err = call(&client(&registry), &format!("http://{addr}/sync"), "300ms")
        .await
        .unwrap_err();
    assert!(matches!(&err, HookError::Transport { .. }), "{err:?}");
    assert!(retries(&registry) >= 1);
}

/// A server that accepts, reads each request and then does `then` with the connection;
/// counts requests.
async fn taker(
    then: fn(tokio::net::TcpStream) -> Option<tokio::net::TcpStream>,
) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut conn, _)) = listener.accept().await {
            if !read_request(&mut conn).await.is_empty() {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            held.extend(then(conn));
        }
    });
    (addr, requests)
}

#[tokio::test]
async fn a_request_that_got_no_answer_is_not_sent_again() {
    // Never answers (the connection is held open): only the timeout ends the call.
    let (addr, requests) = taker(Some).await;
    let registry = prometheus::Registry::new();
    let client = client(&registry);
    let err = call(&client, &format!("http://{addr}/sync"), "500ms")
        .await
        .unwrap_err();
    assert!(matches!(&err, HookError::Timeout { .. }), "{err:?}");
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    assert_eq!(retries(&registry), 0);

    // Hangs up after reading the request: the hook may have acted on it.
    let (addr, requests) = taker(|_| None).await;
    let err = call(&client, &format!("http://{addr}/sync"), "5s")
        .await
        .unwrap_err();
    assert!(matches!(&err, HookError::Transport { .. }), "{err:?}");
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    assert_eq!(retries(&registry), 0);
}
