//! WebAssembly modules for in-process hook tests and benchmarks: the workspace's example
//! commands (`examples/hello-world-wasm`, `examples/load-hook-wasm`) built for
//! `wasm32-wasip1` (once per workspace target directory; cargo serialises concurrent
//! builds), and modules written in the WebAssembly text format.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The Rust target of WASI preview 1 command modules.
pub const TARGET: &str = "wasm32-wasip1";
/// How long building the example may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(540);

/// Whether the active Rust toolchain has the `wasm32-wasip1` standard library.
pub fn target_installed() -> bool {
    let Ok(out) = Command::new("rustc").args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Path::new(&sysroot)
        .join("lib/rustlib")
        .join(TARGET)
        .join("lib")
        .is_dir()
}

/// The module of `examples/hello-world-wasm` (release build), or `None` when the target is
/// not installed and this is not CI (under CI=true a missing target fails the test).
pub fn hello_world_module() -> Option<Vec<u8>> {
    example_module("hello-world-wasm")
}

/// The module of the workspace package `package` (a WASI command under `examples/`, release
/// build), or `None` when the target is not installed and this is not CI (under CI=true a
/// missing target fails the caller).
pub fn example_module(package: &str) -> Option<Vec<u8>> {
    if !target_installed() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !ci,
            "the {TARGET} Rust target is missing: run `rustup target add {TARGET}`"
        );
        eprintln!("skipped: no {TARGET} target (rustup target add {TARGET})");
        return None;
    }
    let workspace = crate::example::repo_root();
    let target_dir = workspace.join("target/wasm-examples");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(&workspace)
        .args(["build", "--locked", "--release", "-p", package])
        .args(["--target", TARGET])
        .env("CARGO_TARGET_DIR", &target_dir);
    run_bounded(
        build,
        package,
        &target_dir.join(format!("{package}.build.log")),
    );
    let module: PathBuf = target_dir
        .join(TARGET)
        .join(format!("release/{package}.wasm"));
    Some(std::fs::read(&module).unwrap_or_else(|e| panic!("reading {}: {e}", module.display())))
}

/// A module from WebAssembly text.
pub fn wat(text: &str) -> Vec<u8> {
    wat::parse_str(text).unwrap_or_else(|e| panic!("bad WAT: {e}"))
}

/// `bytes` with every `from` replaced by `to` (same length): a module whose data section
/// says something else, e.g. a new version of a hook's code.
pub fn patched(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len(), "a patch keeps the length");
    let mut out = bytes.to_vec();
    let mut found = false;
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            found = true;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(
        found,
        "the module does not contain {:?}",
        String::from_utf8_lossy(from)
    );
    out
}

fn run_bounded(mut command: Command, package: &str, log_path: &Path) {
    if let Some(dir) = log_path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let log = std::fs::File::create(log_path).expect("a build log");
    let mut child = command
        .stdout(log.try_clone().expect("a build log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|err| panic!("can't start cargo: {err}"));
    let deadline = Instant::now() + BUILD_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for cargo") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("building {package} took over {BUILD_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    assert!(status.success(), "building {package} failed:\n{log}");
}
