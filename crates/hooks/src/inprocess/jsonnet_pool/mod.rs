//! Jsonnet evaluations in worker processes. jrsonnet cannot be interrupted inside a
//! thread, so each evaluation runs in a child process of the controller (its own binary,
//! hidden `jsonnet-worker` command) that the pool kills at the hook's timeout and that
//! aborts at the hook's memory limit (a soft `RLIMIT_DATA`). Idle workers are reused and
//! keep the parsed code of recent digests, so a call sends only the request; a dead or
//! killed worker is replaced when next needed.

mod child;
mod digests;
mod frame;
mod worker;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

pub use child::run_worker;
use digests::Digests;
use frame::{Request, Response};
use worker::Worker;

use crate::quantity::quantity;
use crate::sources::CodeObject;

/// Worker processes running at once by default (evaluations beyond wait for one).
pub const DEFAULT_JSONNET_WORKERS: usize = 4;
/// Idle worker processes kept for the next calls; more are stopped when their call ends.
pub const IDLE_JSONNET_WORKERS: usize = 4;
/// The most memory an idle worker may keep: a worker whose evaluation left it larger (the
/// allocator keeps what a big evaluation used) is stopped rather than kept, so idle workers
/// hold no memory the budget no longer counts.
pub const IDLE_WORKER_BYTES: u64 = 64 << 20;
/// The argument that makes the `metacontroller` binary a Jsonnet worker.
pub const WORKER_ARG: &str = "jsonnet-worker";

/// The program started as a worker, with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
}

impl WorkerCommand {
    /// This process's own executable with `jsonnet-worker`: the `metacontroller` binary.
    /// On Linux `/proc/self/exe`, which stays valid when the file is replaced on disk.
    pub fn current_exe() -> WorkerCommand {
        let program = if cfg!(target_os = "linux") {
            PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe().unwrap_or_else(|_| PathBuf::from("metacontroller"))
        };
        WorkerCommand {
            program,
            args: vec![OsString::from(WORKER_ARG)],
        }
    }
}

/// How the pool is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonnetPoolConfig {
    /// What a worker runs.
    pub command: WorkerCommand,
    /// How many workers may run at once.
    pub workers: usize,
    /// How many idle workers are kept for the next calls.
    pub idle: usize,
}

impl Default for JsonnetPoolConfig {
    fn default() -> Self {
        JsonnetPoolConfig {
            command: WorkerCommand::current_exe(),
            workers: DEFAULT_JSONNET_WORKERS,
            idle: IDLE_JSONNET_WORKERS,
        }
    }
}

/// The limits of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonnetLimits {
    /// Waiting for a worker and evaluating, together.
    pub timeout: Duration,
    /// The evaluation's memory (beyond the worker's fixed overhead).
    pub memory_bytes: u64,
}

/// A successful evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluated {
    /// The response JSON.
    pub body: Vec<u8>,
    /// What `std.trace` printed (bounded).
    pub traces: Vec<String>,
}

/// Why an evaluation gave no response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonnetError {
    /// The timeout passed (waiting for a worker, or evaluating: the worker was killed).
    #[error("no result within {timeout:?}")]
    Timeout {
        /// The limit that passed.
        timeout: Duration,
    },
    /// The worker ran out of memory under the limit and was replaced.
    #[error("jsonnet evaluation exceeded memoryLimit {}", quantity(*limit))]
    Memory {
        /// The limit in bytes.
        limit: u64,
    },
    /// The code's own error (syntax, runtime, `error`), with `std.trace` lines before it.
    #[error("{message}")]
    Evaluation {
        /// The evaluator's message.
        message: String,
        /// What `std.trace` printed before the error.
        traces: Vec<String>,
    },
    /// The worker could not be started or died for another reason.
    #[error("{0}")]
    Worker(String),
}

/// Runs Jsonnet evaluations in a bounded set of worker processes.
pub struct JsonnetPool {
    command: WorkerCommand,
    workers: usize,
    idle_kept: usize,
    slots: Semaphore,
    idle: Mutex<Vec<Worker>>,
    digests: Digests,
}

impl JsonnetPool {
    /// A pool starting workers as `config` says (none until the first call).
    pub fn new(config: JsonnetPoolConfig) -> JsonnetPool {
        JsonnetPool {
            command: config.command,
            workers: config.workers.max(1),
            idle_kept: config.idle,
            slots: Semaphore::new(config.workers.max(1)),
            idle: Mutex::new(Vec::new()),
            digests: Digests::default(),
        }
    }

    /// Evaluates `entry` of `code` as a function of `request`, within `limits`: the wait
    /// for a free worker counts against the timeout, and a worker still evaluating at the
    /// timeout is killed.
    pub async fn evaluate(
        &self,
        code: &Arc<CodeObject>,
        entry: &str,
        request: &[u8],
        limits: JsonnetLimits,
    ) -> Result<Evaluated, JsonnetError> {
        let deadline = Instant::now() + limits.timeout;
        let timeout = JsonnetError::Timeout {
            timeout: limits.timeout,
        };
        let Ok(Ok(_slot)) = tokio::time::timeout_at(deadline, self.slots.acquire()).await else {
            return Err(timeout);
        };
        let mut worker = match self.take_idle() {
            Some(worker) => worker,
            None => Worker::spawn(&self.command)
                .map_err(|e| JsonnetError::Worker(format!("can't start a Jsonnet worker: {e}")))?,
        };
        let digest = self.digests.of(code);
        let request = Request {
            memory_bytes: limits.memory_bytes,
            digest,
            files: None,
            entry: entry.to_owned(),
            request: request.to_vec(),
        };
        let exchanged = tokio::time::timeout_at(deadline, exchange(&mut worker, request, code));
        match exchanged.await {
            Err(_) => {
                worker.kill().await;
                Err(timeout)
            }
            Ok(Ok(response)) => {
                self.put_idle(worker);
                answer(response)
            }
            Ok(Err(_broken)) => {
                let death = worker.death().await;
                if death.out_of_memory() {
                    return Err(JsonnetError::Memory {
                        limit: limits.memory_bytes,
                    });
                }
                Err(JsonnetError::Worker(death.describe()))
            }
        }
    }

    /// How many workers are serving a call now.
    pub fn in_use(&self) -> usize {
        self.workers - self.slots.available_permits()
    }

    fn take_idle(&self) -> Option<Worker> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    /// Keeps `worker` for the next call, or stops it (on drop) when enough are kept or it
    /// holds more than [`IDLE_WORKER_BYTES`].
    fn put_idle(&self, worker: Worker) {
        if worker
            .resident_bytes()
            .is_some_and(|bytes| bytes > IDLE_WORKER_BYTES)
        {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.idle_kept {
            idle.push(worker);
        }
    }

    /// How many workers wait for a call.
    pub fn idle_workers(&self) -> usize {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// One request to `worker`, sending the files when it lacks their digest.
async fn exchange(
    worker: &mut Worker,
    mut request: Request,
    code: &CodeObject,
) -> std::io::Result<Response> {
    if !worker.knows(&request.digest) {
        request.files = Some(code.clone());
    }
    let response = worker.exchange(&request).await?;
    if response != Response::UnknownCode {
        return Ok(response);
    }
    request.files = Some(code.clone());
    worker.exchange(&request).await
}

fn answer(response: Response) -> Result<Evaluated, JsonnetError> {
    match response {
        Response::Body { body, traces } => Ok(Evaluated { body, traces }),
        Response::Error { message, traces } => Err(JsonnetError::Evaluation { message, traces }),
        Response::UnknownCode => Err(JsonnetError::Worker(
            "the Jsonnet worker did not take the hook's code".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_error_names_the_limit_as_a_quantity() {
        let error = JsonnetError::Memory { limit: 256 << 20 };
        assert_eq!(
            error.to_string(),
            "jsonnet evaluation exceeded memoryLimit 256Mi"
        );
    }
}
