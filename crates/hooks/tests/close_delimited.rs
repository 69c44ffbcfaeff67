//! Bodies delimited by the connection's end over TLS, as Python's `http.server` wrapped in
//! `ssl` sends them (upstream's webhook-auth example): an HTTP/1.0 answer without
//! Content-Length, then a TCP close without a TLS close_notify. Go's client reads such a body
//! to the connection's end; so must ours, while the JSON must still decode completely and
//! bodies with a length (Content-Length, chunked) cut short stay errors.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metacontroller_hooks::{CallContext, HookClient, HookClientConfig, HookError};
use rustls::ServerConfig;
use serde_json::{json, Value};
use support::{hook, server_tls, webhook_mut, Ca};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

const CTX: CallContext<'static> = CallContext {
    controller: "ctl",
    hook_name: "sync",
    parent_key: "default/p",
};

/// The JSON answer a complete response carries.
const ANSWER: &str = r#"{"status":{"working":"fine"},"children":[{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}]}"#;

/// The head Python's `BaseHTTPRequestHandler` writes with its defaults (HTTP/1.0, no
/// Content-Length unless the handler adds one).
const PYTHON_HEAD: &str = "HTTP/1.0 200 OK\r\nServer: BaseHTTP/0.6 Python/3.11.7\r\n\
    Date: Thu, 01 Jan 2026 00:00:00 GMT\r\nContent-type: application/json\r\n\r\n";

/// A TLS server on 127.0.0.1 that reads each request (head and Content-Length body), writes
/// `response` verbatim and then closes the TCP connection without a TLS close_notify, as
/// Python's `ssl`-wrapped `http.server` does.
async fn unclean_close_server(tls: Arc<ServerConfig>, response: Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(tls);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let response = response.clone();
            tokio::spawn(async move {
                let Ok(mut stream) = acceptor.accept(tcp).await else {
                    return;
                };
                if read_request(&mut stream).await.is_none() {
                    return;
                }
                if stream.write_all(&response).await.is_err() || stream.flush().await.is_err() {
                    return;
                }
                // Past TLS: shut the TCP connection down with nothing more, no close_notify.
                let (mut tcp, _session) = stream.into_inner();
                let _ = tcp.shutdown().await;
            });
        }
    });
    addr
}

/// Reads one request (head and Content-Length body); `None` when the client went away.
async fn read_request<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> Option<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(())
}

/// Calls a server answering `response` over TLS the way Python's `ssl` module serves it (a
/// certificate for 127.0.0.1, no ALPN).
async fn call(response: String) -> Result<Value, HookError> {
    let ca = Ca::new("hook ca");
    let mut tls = (*server_tls(&ca.server_leaf(&["127.0.0.1"]), None)).clone();
    tls.alpn_protocols.clear();
    let addr = unclean_close_server(Arc::new(tls), response.into_bytes()).await;
    let client = HookClient::new(HookClientConfig::default()).unwrap();
    let mut hook = hook(&format!("https://{addr}/sync"));
    webhook_mut(&mut hook).ca_bundle = Some(metacontroller_api::hook::CaBundle {
        inline: Some(ca.pem()),
        ..Default::default()
    });
    tokio::time::timeout(
        Duration::from_secs(20),
        client.call(&CTX, &hook, &[], &json!({"parent": {}})),
    )
    .await
    .expect("call did not finish in 20s")
}

#[tokio::test]
async fn close_delimited_tls_body_without_close_notify_is_read_to_the_end() {
    let got = call(format!("{PYTHON_HEAD}{ANSWER}")).await;
    let expected: Value = serde_json::from_str(ANSWER).unwrap();
    assert_eq!(got.expect("a complete close-delimited answer"), expected);
}

#[tokio::test]
async fn truncated_close_delimited_tls_body_is_a_decode_error() {
    let cut = &ANSWER[..ANSWER.len() / 2];
    match call(format!("{PYTHON_HEAD}{cut}")).await {
        Err(HookError::Decode { .. }) => {}
        other => panic!("expected a decode error for a cut-short answer, got {other:?}"),
    }
}

#[tokio::test]
async fn content_length_body_cut_short_without_close_notify_is_an_error() {
    let cut = &ANSWER[..ANSWER.len() / 2];
    let response = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{cut}",
        ANSWER.len()
    );
    match call(response).await {
        Err(HookError::Transport { message, .. }) => eprintln!("as expected: {message}"),
        other => panic!("expected a transport error for a short body, got {other:?}"),
    }
}

#[tokio::test]
async fn chunked_body_cut_short_without_close_notify_is_an_error() {
    let cut = &ANSWER[..ANSWER.len() / 2];
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\
         \r\n{:x}\r\n{cut}",
        ANSWER.len()
    );
    match call(response).await {
        Err(HookError::Transport { message, .. }) => eprintln!("as expected: {message}"),
        other => panic!("expected a transport error for a short chunk, got {other:?}"),
    }
}

#[tokio::test]
async fn content_length_body_complete_without_close_notify_is_accepted() {
    let response = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{ANSWER}",
        ANSWER.len()
    );
    let expected: Value = serde_json::from_str(ANSWER).unwrap();
    assert_eq!(call(response).await.expect("a complete answer"), expected);
}
