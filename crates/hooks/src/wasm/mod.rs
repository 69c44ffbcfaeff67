//! WebAssembly hooks: a hook compiled to a WASI preview 1 command module runs inside the
//! controller instead of behind an HTTP server.
//!
//! # Contract with the module
//!
//! * The request JSON is on stdin, the response JSON goes to stdout (at most
//!   [`WasmLimits::max_stdout_bytes`]); stderr is kept (its last 4 KiB) for logs and errors.
//! * `_start` returning, or `proc_exit(0)`, is success; `proc_exit(n)` with `n != 0` is
//!   [`WasmError::Exit`] carrying the tail of stderr; a trap is [`WasmError::Trap`].
//! * The sandbox has no preopened directories, no environment variables, one argument
//!   (`hook`) and no sockets: the host is our own (`wasi/`), and every WASI preview 1
//!   function it does not implement answers with an error code. Imports from anything but
//!   `wasi_snapshot_preview1`, or of names it does not define, fail [`WasmRuntime::compile`].
//! * Every call gets a fresh instance: nothing survives from one call to the next.
//! * A call is stopped at [`WasmLimits::timeout`] ([`WasmError::Timeout`]): the caller gets
//!   its answer then, and the guest stops within a slice of fuel (about a millisecond), so
//!   no thread keeps burning CPU. Memory (linear memory plus tables) is capped at
//!   [`WasmLimits::memory_bytes`] ([`WasmError::MemoryLimit`]).
//!
//! # Runtime
//!
//! [wasmi](https://docs.rs/wasmi) 2, an interpreter, chosen by measurement over wasmtime
//! (`docs/src/benchmarks.md`, "In-process hooks: WASM runtime choice"): a typical hook call
//! takes well under a millisecond on either, while wasmi compiles a module in milliseconds
//! instead of seconds and builds in a fraction of the time. Heavy computation is a few times
//! slower than with a JIT.

mod compile;
mod error;
mod exec;
mod limiter;
mod state;
mod wasi;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use error::WasmError;

/// Memory limit of a call when the hook sets none: 64 MiB.
pub const DEFAULT_MEMORY_LIMIT: u64 = 64 * 1024 * 1024;

/// How long after its timeout a call's future resolves at the latest, when the thread
/// running it has not reported the timeout itself (it checks between fuel slices), e.g.
/// because every blocking thread was busy.
const TIMEOUT_GRACE: Duration = Duration::from_millis(20);

/// Compiles and runs WebAssembly hooks; one per process, cheap to clone.
#[derive(Clone)]
pub struct WasmRuntime {
    config: Arc<wasmi::Config>,
    executing: Arc<AtomicUsize>,
}

/// A compiled module, ready to run; cheap to clone.
#[derive(Clone)]
pub struct WasmModule {
    compiled: Arc<compile::Compiled>,
}

impl std::fmt::Debug for WasmModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmModule").finish_non_exhaustive()
    }
}

/// The limits of one call.
#[derive(Debug, Clone)]
pub struct WasmLimits {
    /// Wall-clock time the call may take, from the moment it is asked for.
    pub timeout: Duration,
    /// Linear memory plus tables, in bytes.
    pub memory_bytes: u64,
    /// The most the module may write to stdout.
    pub max_stdout_bytes: usize,
}

/// What a successful call produced.
#[derive(Debug)]
pub struct WasmOutput {
    /// Everything the module wrote to stdout.
    pub stdout: Vec<u8>,
    /// The last (at most 4 KiB) of what it wrote to stderr, lossy UTF-8.
    pub stderr: String,
}

impl Default for WasmRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl WasmRuntime {
    /// A runtime with the engine settings of hook modules (fuel metering, no start function).
    pub fn new() -> Self {
        Self {
            config: Arc::new(compile::config()),
            executing: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Validates and compiles `bytes`; checks its imports (WASI preview 1 functions only)
    /// and that it exports `_start`. CPU-bound (milliseconds for a few MiB): call it off
    /// the async worker threads for large modules.
    ///
    /// # Errors
    ///
    /// [`WasmError::Invalid`], [`WasmError::Import`] or [`WasmError::NoStart`].
    pub fn compile(&self, bytes: &[u8]) -> Result<WasmModule, WasmError> {
        let compiled = compile::compile(&self.config, bytes)?;
        Ok(WasmModule {
            compiled: Arc::new(compiled),
        })
    }

    /// Runs `module` once, on a fresh instance, with `stdin` as its input. The module runs on
    /// a blocking thread; the returned future resolves by `limits.timeout` (plus a few
    /// milliseconds) whatever the module does, and dropping it stops the module too.
    ///
    /// # Errors
    ///
    /// [`WasmError::Trap`], [`WasmError::Exit`], [`WasmError::Timeout`],
    /// [`WasmError::MemoryLimit`] or [`WasmError::OutputTooLarge`].
    pub async fn run(
        &self,
        module: &WasmModule,
        stdin: Vec<u8>,
        limits: WasmLimits,
    ) -> Result<WasmOutput, WasmError> {
        let deadline = Instant::now() + limits.timeout;
        let cancel = CancelOnDrop(Arc::new(AtomicBool::new(false)));
        let cancelled = Arc::clone(&cancel.0);
        let counted = Executing::enter(&self.executing);
        let compiled = Arc::clone(&module.compiled);
        let timeout = limits.timeout;
        let task = tokio::task::spawn_blocking(move || {
            let _counted = counted;
            let stop = exec::Stop {
                deadline,
                cancelled: &cancelled,
            };
            exec::execute(&compiled, stdin, &limits, &stop)
        });
        match tokio::time::timeout_at((deadline + TIMEOUT_GRACE).into(), task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(WasmError::Trap {
                message: format!("the runtime failed: {join}"),
                stderr: String::new(),
            }),
            Err(_elapsed) => Err(WasmError::Timeout { timeout }),
        }
    }

    /// How many calls are running or waiting for a thread, including calls whose caller
    /// already got [`WasmError::Timeout`] and that have not stopped yet (they stop within a
    /// fuel slice). For metrics, and for tests that check a stopped module really stops.
    pub fn executing(&self) -> usize {
        self.executing.load(Ordering::Relaxed)
    }
}

/// Tells the call's thread to stop when the caller stops waiting, however that happens.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Counts a call in [`WasmRuntime::executing`] from its request until its thread is done
/// with it (or the task is dropped without running).
struct Executing(Arc<AtomicUsize>);

impl Executing {
    fn enter(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(counter))
    }
}

impl Drop for Executing {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
