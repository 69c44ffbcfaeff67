//! The WebAssembly hook runtime against real modules (WAT fixtures in `fixtures/wasm/`, each
//! saying what it does): a well-behaved hook answers; hostile ones (endless loops, memory
//! hogs, floods, unknown imports, garbage) end in clear errors and leave the runtime usable.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;

use metacontroller_hooks::wasm::{
    WasmError, WasmLimits, WasmModule, WasmRuntime, DEFAULT_MEMORY_LIMIT,
};
use serde_json::{json, Value};

/// Compiles `fixtures/wasm/<name>.wat`.
fn compile(runtime: &WasmRuntime, name: &str) -> Result<WasmModule, WasmError> {
    runtime.compile(&wat_bytes(name))
}

fn wat_bytes(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/wasm/{name}.wat",
        env!("CARGO_MANIFEST_DIR")
    );
    wat::parse_file(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
}

fn limits() -> WasmLimits {
    WasmLimits {
        timeout: Duration::from_secs(10),
        memory_bytes: DEFAULT_MEMORY_LIMIT,
        max_stdout_bytes: 1024 * 1024,
    }
}

/// Waits (at most 10 s) until no call is running any more.
async fn wait_until_idle(runtime: &WasmRuntime) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while runtime.executing() > 0 {
        assert!(
            Instant::now() < deadline,
            "{} call(s) still executing after they were stopped",
            runtime.executing()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs `test` on a runtime of its own that lets go of its blocking threads a second after
/// the test: a module that never stops then fails the test (in `wait_until_idle`) instead of
/// hanging it in the runtime's shutdown, which otherwise waits for every blocking thread.
fn with_runtime<F: Future<Output = ()>>(test: F) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = runtime.block_on(AssertUnwindSafe(test).catch_unwind());
    runtime.shutdown_timeout(Duration::from_secs(1));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The echo hook and its request, to show the runtime still works after a hostile call.
async fn echo_still_answers(runtime: &WasmRuntime) {
    let echo = compile(runtime, "echo").unwrap();
    let output = runtime
        .run(&echo, br#"{"after":true}"#.to_vec(), limits())
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer, json!({"request": {"after": true}}));
}

#[tokio::test]
async fn a_hook_reads_the_request_on_stdin_and_answers_on_stdout() {
    let runtime = WasmRuntime::new();
    let echo = compile(&runtime, "echo").unwrap();
    let request = json!({"parent": {"metadata": {"name": "hello"}}, "children": {}});
    let output = runtime
        .run(&echo, serde_json::to_vec(&request).unwrap(), limits())
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer, json!({ "request": request }));
    assert_eq!(output.stderr, "");
}

#[test]
fn an_endless_loop_is_stopped_at_the_timeout_and_its_thread_freed() {
    with_runtime(async {
        let runtime = WasmRuntime::new();
        let spin = compile(&runtime, "spin").unwrap();
        let limits = WasmLimits {
            timeout: Duration::from_millis(200),
            ..limits()
        };
        // The bound only keeps a broken runtime from hanging the test.
        let result = tokio::time::timeout(
            Duration::from_secs(30),
            runtime.run(&spin, Vec::new(), limits),
        )
        .await
        .expect("the call did not return after its timeout");
        match result {
            Err(WasmError::Timeout { timeout }) => assert_eq!(timeout, Duration::from_millis(200)),
            other => panic!("expected a timeout, got {other:?}"),
        }
        // The guest itself stopped, not only the wait for it.
        wait_until_idle(&runtime).await;
        echo_still_answers(&runtime).await;
    });
}

#[test]
fn dropping_a_call_stops_its_module() {
    with_runtime(async {
        let runtime = WasmRuntime::new();
        let spin = compile(&runtime, "spin").unwrap();
        let limits = WasmLimits {
            timeout: Duration::from_secs(3600),
            ..limits()
        };
        let call = runtime.run(&spin, Vec::new(), limits);
        // The caller gives up (e.g. the controller shuts down) long before the hook timeout.
        let abandoned = tokio::time::timeout(Duration::from_millis(100), call).await;
        assert!(
            abandoned.is_err(),
            "the endless loop returned: {abandoned:?}"
        );
        wait_until_idle(&runtime).await;
    });
}

#[tokio::test]
async fn growing_memory_past_the_limit_is_a_memory_limit_error() {
    let runtime = WasmRuntime::new();
    let limits = WasmLimits {
        memory_bytes: 16 * 1024 * 1024,
        ..limits()
    };
    for fixture in ["grow", "big_memory"] {
        let module = compile(&runtime, fixture).unwrap();
        match runtime.run(&module, Vec::new(), limits.clone()).await {
            Err(WasmError::MemoryLimit { limit, .. }) => assert_eq!(limit, 16 * 1024 * 1024),
            other => panic!("{fixture}: expected a memory limit error, got {other:?}"),
        }
    }
    echo_still_answers(&runtime).await;
}

#[test]
fn unknown_imports_are_named() {
    let runtime = WasmRuntime::new();
    let cases = [
        ("import_env", "env", "foo"),
        (
            "import_unknown_wasi",
            "wasi_snapshot_preview1",
            "fd_frobnicate",
        ),
        ("import_memory", "wasi_snapshot_preview1", "memory"),
    ];
    for (fixture, module, name) in cases {
        match compile(&runtime, fixture) {
            Err(err @ WasmError::Import { .. }) => {
                let message = err.to_string();
                assert!(
                    message.starts_with(&format!(
                        "module imports unknown host function {module}.{name}"
                    )),
                    "{fixture}: {message}"
                );
            }
            other => panic!("{fixture}: expected an import error, got {other:?}"),
        }
    }
}

#[test]
fn a_wasi_import_of_the_wrong_type_is_invalid() {
    let runtime = WasmRuntime::new();
    match compile(&runtime, "import_wrong_type") {
        Err(WasmError::Invalid(message)) => assert_eq!(
            message,
            "import wasi_snapshot_preview1.fd_write has type (i32) -> (i32), \
             but WASI preview 1 defines (i32, i32, i32, i32) -> (i32)"
        ),
        other => panic!("expected an invalid module, got {other:?}"),
    }
}

#[test]
fn a_mebibyte_of_garbage_is_an_invalid_module() {
    // xorshift: the same "random" bytes every run.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let garbage: Vec<u8> = (0..1024 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let runtime = WasmRuntime::new();
    match runtime.compile(&garbage) {
        Err(err @ WasmError::Invalid(_)) => {
            assert!(
                err.to_string().starts_with("invalid WebAssembly module: "),
                "{err}"
            );
        }
        other => panic!("expected an invalid module, got {other:?}"),
    }
    // A valid header with a truncated body too.
    let mut truncated = wat_bytes("echo");
    truncated.truncate(truncated.len() / 2);
    assert!(matches!(
        runtime.compile(&truncated),
        Err(WasmError::Invalid(_))
    ));
}

#[test]
fn a_module_without_start_is_refused() {
    let runtime = WasmRuntime::new();
    let err = compile(&runtime, "no_start").unwrap_err();
    assert!(matches!(err, WasmError::NoStart), "{err:?}");
    assert_eq!(
        err.to_string(),
        "module exports no _start function (a hook must be a WASI command module)"
    );
}

#[test]
fn a_start_section_is_refused() {
    // Its loop would run during instantiation, where the timeout cannot stop it.
    let runtime = WasmRuntime::new();
    match compile(&runtime, "start_section") {
        Err(WasmError::Invalid(message)) => assert!(message.contains("start"), "{message}"),
        other => panic!("expected an invalid module, got {other:?}"),
    }
}

#[tokio::test]
async fn a_non_zero_exit_carries_the_tail_of_stderr() {
    let runtime = WasmRuntime::new();
    let module = compile(&runtime, "exit_stderr").unwrap();
    match runtime.run(&module, Vec::new(), limits()).await {
        Err(err @ WasmError::Exit { .. }) => {
            let WasmError::Exit { code, stderr } = &err else {
                unreachable!()
            };
            assert_eq!(*code, 3);
            assert!(
                stderr.ends_with("xxxbad request: no parent\n"),
                "{stderr:?}"
            );
            assert_eq!(stderr.len(), 4096, "only the tail of 10,023 bytes is kept");
            assert!(err
                .to_string()
                .starts_with("module exited with status 3; stderr: xxx"));
            assert!(err.to_string().ends_with("bad request: no parent"));
        }
        other => panic!("expected an exit error, got {other:?}"),
    }
}

/// fd_read/fd_write take at most 1024 buffers (IOV_MAX): a module can't have the host walk
/// its whole memory in one call, outside fuel.
#[tokio::test]
async fn more_than_1024_iovecs_are_einval() {
    let runtime = WasmRuntime::new();
    let module = compile(&runtime, "iovec_flood").unwrap();
    match runtime.run(&module, Vec::new(), limits()).await {
        Err(WasmError::Exit { code, .. }) => assert_eq!(code, 28, "EINVAL"),
        other => panic!("expected exit 28 (EINVAL), got {other:?}"),
    }
}

#[tokio::test]
async fn a_trap_is_an_error_with_stderr() {
    let runtime = WasmRuntime::new();
    let module = compile(&runtime, "trap").unwrap();
    match runtime.run(&module, Vec::new(), limits()).await {
        Err(WasmError::Trap { message, stderr }) => {
            assert!(message.contains("divi"), "{message}");
            assert_eq!(stderr, "about to fail\n");
        }
        other => panic!("expected a trap, got {other:?}"),
    }
}

#[tokio::test]
async fn stdout_over_the_cap_is_output_too_large() {
    let runtime = WasmRuntime::new();
    let module = compile(&runtime, "flood").unwrap();
    let limits = WasmLimits {
        max_stdout_bytes: 10_000,
        ..limits()
    };
    match runtime.run(&module, Vec::new(), limits).await {
        Err(WasmError::OutputTooLarge { limit }) => assert_eq!(limit, 10_000),
        other => panic!("expected output too large, got {other:?}"),
    }
}

#[tokio::test]
async fn no_state_survives_between_calls() {
    let runtime = WasmRuntime::new();
    let module = compile(&runtime, "counter").unwrap();
    for _ in 0..3 {
        let output = runtime.run(&module, Vec::new(), limits()).await.unwrap();
        assert_eq!(
            output.stdout, b"10",
            "1 call seen by the global, no mark in memory"
        );
    }
}

#[tokio::test]
async fn wasi_gives_no_files_no_environment_and_no_sleeping() {
    let runtime = WasmRuntime::new();
    let module = compile(&runtime, "sandbox").unwrap();
    let output = runtime.run(&module, Vec::new(), limits()).await.unwrap();
    let Ok(report) = <[u8; 10]>::try_from(&output.stdout[..]) else {
        panic!("unexpected report {:?}", output.stdout);
    };
    let [open3, prestat3, open0, poll, read3, envc, argc, random, clock, random_2m] = report;
    assert_eq!(
        open3, 8,
        "path_open(3, /etc/passwd): EBADF, there is no directory 3"
    );
    assert_eq!(
        prestat3, 8,
        "fd_prestat_get(3): EBADF, no preopened directory"
    );
    assert_eq!(open0, 54, "path_open(0, ...): ENOTDIR");
    assert_eq!(poll, 52, "poll_oneoff: ENOSYS");
    assert_eq!(read3, 8, "fd_read(3): EBADF");
    assert_eq!(envc, 0, "no environment variables");
    assert_eq!(argc, 1, "argv[0] only");
    assert_eq!(random, 0, "random_get works");
    assert_eq!(clock, 0, "clock_time_get works");
    assert_eq!(random_2m, 28, "random_get of 2 MiB: EINVAL");
}

/// A module of many large functions, each compiled on its first call: in wasmi's default
/// costs, compiling is paid in fuel, and running out of fuel in the middle of compiling a
/// callee ended the call instead of pausing it (a Go `wasip1` hello world hit this).
fn many_large_functions() -> String {
    let body: String = (0..500)
        .map(|n| format!("(drop (i32.const {n}))"))
        .collect();
    let functions: String = (0..200).map(|n| format!("(func $f{n} {body})\n")).collect();
    let calls: String = (0..200).map(|n| format!("(call $f{n})")).collect();
    format!(
        r#"(module
             (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
             (memory (export "memory") 1)
             (data (i32.const 16) "done")
             {functions}
             (func (export "_start")
               {calls}
               (i32.store (i32.const 0) (i32.const 16))
               (i32.store (i32.const 4) (i32.const 4))
               (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#
    )
}

#[tokio::test]
async fn compiling_functions_on_first_use_does_not_break_fuel_slices() {
    let runtime = WasmRuntime::new();
    let wasm = wat::parse_str(many_large_functions()).unwrap();
    assert!(
        wasm.len() > 300_000,
        "{} bytes: too small to span fuel slices",
        wasm.len()
    );
    let module = runtime.compile(&wasm).unwrap();
    let output = runtime.run(&module, Vec::new(), limits()).await.unwrap();
    assert_eq!(output.stdout, b"done");
}

#[test]
fn calls_run_side_by_side() {
    with_runtime(async {
        let runtime = WasmRuntime::new();
        let spin = compile(&runtime, "spin").unwrap();
        let echo = compile(&runtime, "echo").unwrap();
        let stuck = WasmLimits {
            timeout: Duration::from_millis(300),
            ..limits()
        };
        let (stuck, answered) = tokio::join!(
            runtime.run(&spin, Vec::new(), stuck),
            runtime.run(&echo, b"1".to_vec(), limits()),
        );
        assert!(matches!(stuck, Err(WasmError::Timeout { .. })), "{stuck:?}");
        assert_eq!(answered.unwrap().stdout, br#"{"request":1}"#);
        wait_until_idle(&runtime).await;
    });
}
