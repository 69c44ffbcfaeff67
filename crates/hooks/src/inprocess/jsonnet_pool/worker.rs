//! One worker process as the controller sees it: spawn, one exchange at a time, kill, and
//! what its death means.

use std::collections::HashSet;
use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::frame::{Request, Response, MAX_FRAME};
use super::WorkerCommand;

/// Digests a worker is believed to hold; past this the set is forgotten (the worker then
/// answers `UnknownCode` for what it dropped, and the files are sent again).
const KNOWN_DIGESTS: usize = 64;
/// The most of a dead worker's stderr read to explain its death.
const STDERR_BYTES: u64 = 4096;
/// How long reaping a killed worker may take.
const REAP_TIMEOUT: Duration = Duration::from_secs(5);

/// A running worker process, idle or serving one request.
pub(crate) struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    known: HashSet<[u8; 32]>,
}

/// How a worker ended while serving a request.
pub(crate) struct Death {
    /// Its exit status, when it could be reaped.
    pub status: Option<ExitStatus>,
    /// The end of what it wrote on stderr (e.g. Rust's "memory allocation ... failed").
    pub stderr: String,
}

impl Worker {
    /// Starts a worker: no environment, `/` as its directory, killed when dropped.
    pub(crate) fn spawn(command: &WorkerCommand) -> io::Result<Worker> {
        let mut child = tokio::process::Command::new(&command.program)
            .args(&command.args)
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(io::Error::other("worker pipes missing"));
        };
        Ok(Worker {
            child,
            stdin,
            stdout,
            known: HashSet::new(),
        })
    }

    /// Whether the worker holds the parsed code of `digest` (as far as the pool knows).
    pub(crate) fn knows(&self, digest: &[u8; 32]) -> bool {
        self.known.contains(digest)
    }

    /// Sends `request` and reads the answer. Not cancel-safe on its own: a caller that
    /// stops waiting must kill the worker (dropping it does).
    pub(crate) async fn exchange(&mut self, request: &Request) -> io::Result<Response> {
        let payload = request.encode();
        let length = u32::try_from(payload.len())
            .ok()
            .filter(|n| (*n as usize) <= MAX_FRAME)
            .ok_or_else(|| io::Error::other("the hook's code and request exceed 64 MiB"))?;
        self.stdin.write_all(&length.to_le_bytes()).await?;
        self.stdin.write_all(&payload).await?;
        self.stdin.flush().await?;
        if request.files.is_some() {
            if self.known.len() >= KNOWN_DIGESTS {
                self.known.clear();
            }
            self.known.insert(request.digest);
        }
        let mut length = [0u8; 4];
        self.stdout.read_exact(&mut length).await?;
        let length = u32::from_le_bytes(length) as usize;
        if length > MAX_FRAME {
            return Err(io::Error::other("worker answered an oversize frame"));
        }
        let mut answer = vec![0u8; length];
        self.stdout.read_exact(&mut answer).await?;
        let response = Response::decode(&answer)?;
        if response == Response::UnknownCode {
            self.known.remove(&request.digest);
        }
        Ok(response)
    }

    /// The worker's resident memory (Linux `VmRSS`); `None` where it can't be read.
    pub(crate) fn resident_bytes(&self) -> Option<u64> {
        let pid = self.child.id()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kib: u64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kib.saturating_mul(1024))
    }

    /// Kills the worker (SIGKILL) and reaps it.
    pub(crate) async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(REAP_TIMEOUT, self.child.wait()).await;
    }

    /// Reaps a worker whose pipe broke (it died, or is about to) and reads why.
    pub(crate) async fn death(mut self) -> Death {
        drop(self.stdin);
        let status = match tokio::time::timeout(REAP_TIMEOUT, self.child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => {
                let _ = self.child.start_kill();
                self.child.wait().await.ok()
            }
        };
        let mut stderr = Vec::new();
        if let Some(pipe) = self.child.stderr.take() {
            let mut pipe = pipe.take(STDERR_BYTES);
            let _ = tokio::time::timeout(REAP_TIMEOUT, pipe.read_to_end(&mut stderr)).await;
        }
        Death {
            status,
            stderr: String::from_utf8_lossy(&stderr).trim().to_owned(),
        }
    }
}

impl Death {
    /// Whether the worker ran out of memory: an allocation failed under its data limit
    /// (Rust aborts, saying so), or the kernel killed it for memory.
    pub(crate) fn out_of_memory(&self) -> bool {
        self.stderr.contains("memory allocation of")
            || self.stderr.contains("out of memory")
            || self.stderr.contains("failed to allocate")
    }

    /// One line: how it ended and the last thing it said.
    pub(crate) fn describe(&self) -> String {
        let status = self
            .status
            .map(|s| s.to_string())
            .unwrap_or_else(|| "unknown status".into());
        match self.stderr.lines().last() {
            Some(line) => format!("the Jsonnet worker died ({status}): {line}"),
            None => format!("the Jsonnet worker died ({status})"),
        }
    }
}
