//! In-process hooks through the hook client, as controllers call them: a Jsonnet hook from a
//! ConfigMap answers like a webhook (same decoding, metrics with the runtime label,
//! recordings), an output over the body cap is refused, a missing ConfigMap or key is a code
//! error, a changed ConfigMap is announced, a hanging download ends at the hook's timeout, and
//! a call waits for its own controller's share only, and calls inside `with_pinned_code` run
//! the pinned (older) version of a ConfigMap while others run the live one.

use std::sync::Arc;

use metacontroller_api::hook::Hook;
use metacontroller_api::wire::CompositeHookResponse;
use metacontroller_hooks::{code_digest, with_pinned_code, PinnedCode};
use metacontroller_hooks::{
    CallContext, CodeObject, CodeSource, HookClient, HookClientConfig, HookError,
    JsonnetPoolConfig, MemoryCode, WorkerCommand,
};

/// Jsonnet workers run this crate's `jsonnet-worker` program (not the test binary).
fn jsonnet_workers() -> JsonnetPoolConfig {
    JsonnetPoolConfig {
        command: WorkerCommand {
            program: env!("CARGO_BIN_EXE_jsonnet-worker").into(),
            args: vec![],
        },
        ..JsonnetPoolConfig::default()
    }
}
use serde_json::json;

fn client(
    code: Arc<MemoryCode>,
    max_body_bytes: usize,
    registry: prometheus::Registry,
) -> HookClient {
    HookClient::new(HookClientConfig {
        code: Some(code),
        max_body_bytes,
        registry: Some(registry),
        jsonnet: jsonnet_workers(),
        ..HookClientConfig::default()
    })
    .unwrap()
    .for_controller_type("CompositeController")
}

fn jsonnet_hook(key: &str) -> Hook {
    serde_json::from_value(json!({"jsonnet": {
        "configMapRef": {"namespace": "hooks", "name": "code"}, "key": key, "timeout": "5s"}}))
    .unwrap()
}

fn code(files: &[(&str, &str)]) -> CodeObject {
    CodeObject::from_text(files)
}

const CTX: CallContext<'static> = CallContext {
    controller: "ctl",
    hook_name: "sync",
    parent_key: "ns/p",
};

#[tokio::test]
async fn jsonnet_hook_answers_like_a_webhook_and_output_is_capped() {
    let memory = Arc::new(MemoryCode::new());
    memory.set(
        "hooks",
        "code",
        code(&[
            (
                "sync.jsonnet",
                "function(request) {status: {seen: request.parent.metadata.name}, children: []}",
            ),
            (
                "big.jsonnet",
                "function(request) {status: {blob: std.join('', std.repeat(['x'], 5000))}}",
            ),
        ]),
    );
    let registry = prometheus::Registry::new();
    let hooks = client(memory.clone(), 4096, registry.clone());
    let request = json!({"parent": {"metadata": {"name": "p"}}});
    let response: CompositeHookResponse = hooks
        .call(&CTX, &jsonnet_hook("sync.jsonnet"), &[], &request)
        .await
        .unwrap();
    assert_eq!(json!(response.status), json!({"seen": "p"}));

    let err = hooks
        .call::<_, CompositeHookResponse>(&CTX, &jsonnet_hook("big.jsonnet"), &[], &request)
        .await
        .unwrap_err();
    assert!(
        matches!(err, HookError::Oversize { limit: 4096, .. }),
        "{err}"
    );

    let err = hooks
        .call::<_, CompositeHookResponse>(&CTX, &jsonnet_hook("nope.jsonnet"), &[], &request)
        .await
        .unwrap_err();
    assert!(matches!(err, HookError::Code { .. }), "{err}");
    assert!(
        err.to_string().contains("has no key \"nope.jsonnet\""),
        "{err}"
    );

    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    assert!(text.contains(r#"runtime="jsonnet""#), "{text}");
    assert!(text.contains(r#"outcome="oversize""#), "{text}");
    assert!(text.contains(r#"outcome="code_error""#), "{text}");
}

#[tokio::test]
async fn a_missing_config_map_is_a_code_error_and_changes_are_announced() {
    let memory = Arc::new(MemoryCode::new());
    let hooks = client(memory.clone(), 1 << 20, prometheus::Registry::new());
    let mut changes = hooks.code_changes().expect("a code source");
    let request = json!({"parent": {"metadata": {"name": "p"}}});
    let err = hooks
        .call::<_, CompositeHookResponse>(&CTX, &jsonnet_hook("sync.jsonnet"), &[], &request)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("ConfigMap hooks/code not found"),
        "{err}"
    );

    memory.set(
        "hooks",
        "code",
        code(&[("sync.jsonnet", "function(request) {status: {v: 2}}")]),
    );
    let change = changes.recv().await.unwrap();
    assert_eq!(
        (change.namespace.as_str(), change.name.as_str()),
        ("hooks", "code")
    );
    let response: CompositeHookResponse = hooks
        .call(&CTX, &jsonnet_hook("sync.jsonnet"), &[], &request)
        .await
        .unwrap();
    assert_eq!(json!(response.status), json!({"v": 2}));
    // The source's own subscription works the same.
    let _ = memory.changes();
}

/// `--record-hooks` records in-process calls as it records webhook calls: the request, the
/// response, and the hook shown as `jsonnet:<namespace>/<name>#<key>`.
#[tokio::test]
async fn in_process_calls_are_recorded_like_webhook_calls() {
    let memory = Arc::new(MemoryCode::new());
    memory.set(
        "hooks",
        "code",
        code(&[("sync.jsonnet", "function(request) {status: {ok: true}}")]),
    );
    let dir = tempfile::tempdir().unwrap();
    let hooks = HookClient::new(HookClientConfig {
        code: Some(memory),
        recorder: Some(Arc::new(
            metacontroller_hooks::DirectoryRecorder::new(dir.path(), None).unwrap(),
        )),
        jsonnet: jsonnet_workers(),
        ..HookClientConfig::default()
    })
    .unwrap();
    let request = json!({"parent": {"metadata": {"name": "p"}}});
    let _: CompositeHookResponse = hooks
        .call(&CTX, &jsonnet_hook("sync.jsonnet"), &[], &request)
        .await
        .unwrap();
    assert!(
        hooks
            .flush_recordings(std::time::Duration::from_secs(10))
            .await
    );
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(files.len(), 1);
    let text = std::fs::read_to_string(files[0].path()).unwrap();
    assert!(text.contains("jsonnet:hooks/code#sync.jsonnet"), "{text}");
    assert!(
        text.contains(r#""ok":true"#) || text.contains(r#""ok": true"#),
        "{text}"
    );
}

fn wasm_hook(wasm: serde_json::Value) -> Hook {
    serde_json::from_value(json!({ "wasm": wasm })).unwrap()
}

/// A module download that never answers ends at the hook's timeout (code loading is inside
/// it), not at the 30 s download timeout; the process's in-process hook metrics are there.
#[tokio::test]
async fn a_download_that_hangs_ends_at_the_hooks_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook.wasm", listener.local_addr().unwrap());
    // Accepts and keeps the connections, never answering.
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let registry = prometheus::Registry::new();
    let hooks = client(Arc::new(MemoryCode::new()), 4096, registry.clone());
    let hook = wasm_hook(json!({"url": url, "sha256": "ab".repeat(32), "timeout": "300ms"}));
    let err = hooks
        .call::<_, CompositeHookResponse>(&CTX, &hook, &[], &json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(err, HookError::Timeout { timeout, .. } if timeout.as_millis() == 300),
        "{err}"
    );
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    assert!(
        text.contains("metacontroller_inprocess_hook_memory_reserved_bytes 0"),
        "{text}"
    );
}

/// With a share of one call per controller, a controller's second call waits for the first
/// (a loop until its timeout) and fails saying it waited for its controller's share, while
/// another controller's call of the same hook is admitted at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_for_its_own_controllers_share_only() {
    let memory = Arc::new(MemoryCode::new());
    let spin = wat::parse_str(
        r#"(module (memory (export "memory") 1)
             (func (export "_start") (loop $forever (br $forever))))"#,
    )
    .unwrap();
    let mut object = CodeObject::default();
    object.binary_data.insert("spin.wasm".into(), spin);
    memory.set("hooks", "code", object);
    let registry = prometheus::Registry::new();
    let hooks = HookClient::new(HookClientConfig {
        code: Some(memory),
        registry: Some(registry.clone()),
        inprocess: metacontroller_hooks::InProcessLimits {
            per_controller: 1,
            ..Default::default()
        },
        ..HookClientConfig::default()
    })
    .unwrap()
    .for_controller_type("CompositeController");
    let hook = |timeout: &str| {
        wasm_hook(
            json!({"configMapRef": {"namespace": "hooks", "name": "code"},
                         "key": "spin.wasm", "timeout": timeout}),
        )
    };
    let first = {
        let (hooks, hook) = (hooks.clone(), hook("2s"));
        tokio::spawn(async move {
            hooks
                .call::<_, CompositeHookResponse>(&CTX, &hook, &[], &json!({}))
                .await
        })
    };
    // The first call holds A's share until its timeout (2 s): admitted once it reserved its
    // memory.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        if text.contains("metacontroller_inprocess_hook_memory_reserved_bytes 67108864") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "first call not admitted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let err = hooks
        .call::<_, CompositeHookResponse>(&CTX, &hook("300ms"), &[], &json!({}))
        .await
        .unwrap_err();
    assert!(matches!(err, HookError::Queued { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("waited for its controller's share"),
        "{err}"
    );
    let other = CallContext {
        controller: "other",
        ..CTX
    };
    let err = hooks
        .call::<_, CompositeHookResponse>(&other, &hook("300ms"), &[], &json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(err, HookError::Timeout { .. }),
        "the other controller's call ran (and looped): {err}"
    );
    let first = first.await.unwrap().unwrap_err();
    assert!(matches!(first, HookError::Timeout { .. }), "{first}");
}

#[tokio::test]
async fn pinned_code_runs_instead_of_the_live_config_map_inside_its_scope_only() {
    let memory = Arc::new(MemoryCode::new());
    let hooks = client(memory.clone(), 1 << 20, prometheus::Registry::new());
    let old = code(&[
        (
            "sync.jsonnet",
            "local lib = import 'lib.libsonnet'; function(request) {status: {v: lib.v}}",
        ),
        ("lib.libsonnet", "{v: 1}"),
    ]);
    let new = code(&[
        (
            "sync.jsonnet",
            "local lib = import 'lib.libsonnet'; function(request) {status: {v: lib.v}}",
        ),
        ("lib.libsonnet", "{v: 2}"),
    ]);
    assert_ne!(code_digest(&old), code_digest(&new));
    memory.set("hooks", "code", new);
    let request = json!({"parent": {"metadata": {"name": "p"}}});
    let mut pins = PinnedCode::default();
    pins.pin("hooks", "code", Arc::new(old));
    let pins = Arc::new(pins);
    let call = || async {
        let response: CompositeHookResponse = hooks
            .call(&CTX, &jsonnet_hook("sync.jsonnet"), &[], &request)
            .await
            .unwrap();
        json!(response.status)["v"].clone()
    };
    // Imports resolve in the pinned version too.
    assert_eq!(with_pinned_code(pins.clone(), call()).await, json!(1));
    assert_eq!(call().await, json!(2));
    assert_eq!(with_pinned_code(pins, call()).await, json!(1));
}
