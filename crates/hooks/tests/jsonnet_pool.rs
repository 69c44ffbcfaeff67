//! The Jsonnet worker pool with real worker processes (this crate's `jsonnet-worker`
//! program): results, code errors, a loop killed at the timeout, the memory limit, and
//! workers replaced after either.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use metacontroller_hooks::inprocess::jsonnet_pool::{
    JsonnetError, JsonnetLimits, JsonnetPool, JsonnetPoolConfig, WorkerCommand,
};
use metacontroller_hooks::CodeObject;

fn pool(workers: usize) -> JsonnetPool {
    JsonnetPool::new(JsonnetPoolConfig {
        command: WorkerCommand {
            program: PathBuf::from(env!("CARGO_BIN_EXE_jsonnet-worker")),
            args: vec![],
        },
        workers,
        idle: workers,
    })
}

fn code(entries: &[(&str, &str)]) -> Arc<CodeObject> {
    Arc::new(CodeObject::from_text(entries))
}

fn limits(seconds: u64) -> JsonnetLimits {
    JsonnetLimits {
        timeout: Duration::from_secs(seconds),
        memory_bytes: 256 << 20,
    }
}

const LOOP: &str = "function(request) { n: std.foldl(function(a, b) a + b, std.range(1, 1e9), 0) }";
const HELLO: &str =
    "local lib = import 'lib.libsonnet';\nfunction(request) { name: lib.greet(request.name) }";
const LIB: &str = "{ greet(n):: std.trace('greeting ' + n, 'hello ' + n) }";

#[tokio::test]
async fn evaluates_with_imports_traces_and_cached_code() {
    let pool = pool(2);
    let code = code(&[("sync.jsonnet", HELLO), ("lib.libsonnet", LIB)]);
    for name in ["a", "b"] {
        let request = format!(r#"{{"name":"{name}"}}"#);
        let out = pool
            .evaluate(&code, "sync.jsonnet", request.as_bytes(), limits(10))
            .await
            .unwrap();
        assert_eq!(
            out.body,
            format!(r#"{{"name":"hello {name}"}}"#).into_bytes()
        );
        assert_eq!(out.traces.len(), 1, "{:?}", out.traces);
        assert_eq!(out.traces, [format!("greeting {name}")]);
    }
}

/// A worker whose evaluation grew it past what an idle worker may keep is stopped after
/// answering; a small one is kept for the next call.
#[tokio::test]
async fn a_worker_left_large_by_its_evaluation_is_not_kept() {
    let pool = pool(1);
    // Many small objects alive at once (300,000 objects with arrays, and their text).
    let big = code(&[(
        "sync.jsonnet",
        "function(request) { n: std.length(std.toString([{a: i, b: [i, i + 1]} for i in std.range(1, 300000)])) }",
    )]);
    let small = code(&[("sync.jsonnet", "function(request) { n: 1 }")]);
    let generous = JsonnetLimits {
        timeout: Duration::from_secs(60),
        memory_bytes: 1 << 30,
    };
    pool.evaluate(&small, "sync.jsonnet", b"{}", generous)
        .await
        .unwrap();
    assert_eq!(pool.idle_workers(), 1, "a small worker is kept");
    pool.evaluate(&big, "sync.jsonnet", b"{}", generous)
        .await
        .unwrap();
    assert_eq!(pool.idle_workers(), 0, "the grown worker was stopped");
}

#[tokio::test]
async fn runtime_errors_name_key_line_and_column() {
    let pool = pool(1);
    let code = code(&[(
        "sync.jsonnet",
        "function(request) {\n  a: request.parent.spec.replicas,\n}",
    )]);
    let err = pool
        .evaluate(&code, "sync.jsonnet", br#"{"parent":null}"#, limits(10))
        .await
        .unwrap_err();
    let JsonnetError::Evaluation { message, .. } = err else {
        panic!("{err:?}");
    };
    assert!(message.contains("sync.jsonnet:2:"), "{message}");
}

#[tokio::test]
async fn recursion_of_depth_400_evaluates() {
    let pool = pool(1);
    let code = code(&[(
        "sync.jsonnet",
        "local f(n) = if n == 0 then 0 else 1 + f(n - 1);\nfunction(request) { depth: f(400) }",
    )]);
    let out = pool
        .evaluate(&code, "sync.jsonnet", b"{}", limits(10))
        .await
        .unwrap();
    assert_eq!(out.body, br#"{"depth":400}"#);
}

#[tokio::test]
async fn a_loop_is_killed_at_the_timeout_and_the_worker_replaced() {
    let pool = pool(1);
    let looping = code(&[("sync.jsonnet", LOOP)]);
    let err = pool
        .evaluate(&looping, "sync.jsonnet", b"{}", limits(1))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        JsonnetError::Timeout {
            timeout: Duration::from_secs(1)
        }
    );
    // The one slot is free again and a new worker answers.
    let hello = code(&[("sync.jsonnet", HELLO), ("lib.libsonnet", LIB)]);
    let out = pool
        .evaluate(&hello, "sync.jsonnet", br#"{"name":"x"}"#, limits(10))
        .await
        .unwrap();
    assert_eq!(out.body, br#"{"name":"hello x"}"#);
}

#[tokio::test]
async fn a_worker_past_its_memory_limit_is_a_memory_error() {
    let pool = pool(1);
    // Doubling a string 30 times: 1 GiB, far past 64Mi.
    let hog = code(&[(
        "sync.jsonnet",
        "local grow(s, n) = if n == 0 then s else grow(s + s, n - 1);\nfunction(request) { n: std.length(grow('x', 30)) }",
    )]);
    let limits = JsonnetLimits {
        timeout: Duration::from_secs(30),
        memory_bytes: 64 << 20,
    };
    let err = pool
        .evaluate(&hog, "sync.jsonnet", b"{}", limits)
        .await
        .unwrap_err();
    assert_eq!(err, JsonnetError::Memory { limit: 64 << 20 }, "{err}");
    assert_eq!(
        err.to_string(),
        "jsonnet evaluation exceeded memoryLimit 64Mi"
    );
    let hello = code(&[("sync.jsonnet", HELLO), ("lib.libsonnet", LIB)]);
    let out = pool
        .evaluate(&hello, "sync.jsonnet", br#"{"name":"y"}"#, limits)
        .await
        .unwrap();
    assert_eq!(out.body, br#"{"name":"hello y"}"#);
}

#[tokio::test]
async fn callers_beyond_the_pool_wait_at_most_their_timeout() {
    let pool = Arc::new(pool(1));
    let looping = code(&[("sync.jsonnet", LOOP)]);
    let busy = {
        let pool = pool.clone();
        let looping = looping.clone();
        tokio::spawn(async move {
            pool.evaluate(&looping, "sync.jsonnet", b"{}", limits(5))
                .await
        })
    };
    // Bounded wait until the first call holds the only worker.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while pool.in_use() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the looping call never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let hello = code(&[("sync.jsonnet", HELLO), ("lib.libsonnet", LIB)]);
    let short = JsonnetLimits {
        timeout: Duration::from_millis(500),
        memory_bytes: 256 << 20,
    };
    let waited = pool
        .evaluate(&hello, "sync.jsonnet", br#"{"name":"z"}"#, short)
        .await;
    assert!(
        matches!(waited, Err(JsonnetError::Timeout { .. })),
        "{waited:?}"
    );
    assert!(matches!(
        busy.await.unwrap(),
        Err(JsonnetError::Timeout { .. })
    ));
}
