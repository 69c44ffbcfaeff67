//! `examples/hello-world-wasm`, built for `wasm32-wasip1` as its README says, answers real
//! hello-world sync requests through [`WasmRuntime`] like `examples/hello-world/sync.py` does.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use metacontroller_hooks::wasm::{WasmError, WasmLimits, WasmRuntime, DEFAULT_MEMORY_LIMIT};
use serde_json::{json, Value};

const TARGET: &str = "wasm32-wasip1";
/// A cold release build of the example and serde_json on a busy 2-core machine takes about a
/// minute; past this something is wrong.
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// Whether the toolchain has the standard library for [`TARGET`].
fn target_installed() -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(output) = Command::new(rustc).args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = String::from_utf8_lossy(&output.stdout).trim().to_string();
    Path::new(&sysroot)
        .join("lib/rustlib")
        .join(TARGET)
        .join("lib")
        .is_dir()
}

/// Builds the example (in a target directory of this test's own) and returns the module.
fn build_example() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hello-world-wasm");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let log_path = target_dir.with_extension("build.log");
    std::fs::create_dir_all(&target_dir).unwrap();
    let log = std::fs::File::create(&log_path).unwrap();
    let mut build = Command::new(cargo)
        .current_dir(&workspace)
        .args(["build", "--locked", "--release", "-p", "hello-world-wasm"])
        .args(["--target", TARGET])
        .env("CARGO_TARGET_DIR", &target_dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + BUILD_TIMEOUT;
    let status = loop {
        if let Some(status) = build.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = build.kill();
            let _ = build.wait();
            panic!("building hello-world-wasm took over {BUILD_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(status.success(), "building hello-world-wasm failed:\n{log}");
    target_dir
        .join(TARGET)
        .join("release/hello-world-wasm.wasm")
}

/// A sync request as the controller sends it for a HelloWorld.
fn request(who: Option<&str>, children: Value) -> Vec<u8> {
    let mut parent = json!({
        "apiVersion": "example.com/v1",
        "kind": "HelloWorld",
        "metadata": {"name": "hello", "namespace": "default", "uid": "4b1c-hello"},
    });
    if let Some(who) = who {
        parent["spec"] = json!({ "who": who });
    }
    serde_json::to_vec(&json!({
        "controller": {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
                       "metadata": {"name": "hello-controller"}},
        "parent": parent,
        "children": children,
        "related": {},
        "finalizing": false,
    }))
    .unwrap()
}

fn limits() -> WasmLimits {
    WasmLimits {
        timeout: Duration::from_secs(10),
        memory_bytes: DEFAULT_MEMORY_LIMIT,
        max_stdout_bytes: 1024 * 1024,
    }
}

#[tokio::test]
async fn hello_world_wasm_answers_sync_requests() {
    if !target_installed() {
        metacontroller_testkit::missing_tool(
            "the wasm32-wasip1 Rust target",
            "install it with `rustup target add wasm32-wasip1`",
        );
        return;
    }
    let wasm = std::fs::read(build_example()).unwrap();
    let runtime = WasmRuntime::new();
    let module = runtime.compile(&wasm).unwrap();

    let first = request(None, json!({"ConfigMap.v1": {}}));
    let output = runtime.run(&module, first, limits()).await.unwrap();
    let response: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        response,
        json!({
            "status": {"greetings": 0},
            "children": [{
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "hello"},
                "data": {"greeting": "Hello, World!"},
            }],
        })
    );

    let owned =
        json!({"ConfigMap.v1": {"default/hello": {"apiVersion": "v1", "kind": "ConfigMap"}}});
    let output = runtime
        .run(&module, request(Some("Kubernetes"), owned), limits())
        .await
        .unwrap();
    let response: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(response["status"], json!({"greetings": 1}));
    assert_eq!(
        response["children"][0]["data"]["greeting"],
        "Hello, Kubernetes!"
    );

    match runtime
        .run(&module, br#"{"children": {}}"#.to_vec(), limits())
        .await
    {
        Err(WasmError::Exit { code, stderr }) => {
            assert_eq!(code, 1);
            assert_eq!(stderr, "hello-world-wasm: the request has no parent\n");
        }
        other => panic!("expected exit status 1, got {other:?}"),
    }
}
