//! What one call's store holds: the request on stdin, the captured stdout (capped) and stderr
//! (its tail), the memory limiter and the call's clock base.

use std::time::Instant;

use super::limiter::MemoryLimiter;

/// How much of stderr is kept: the end, where a failing program says why.
pub(super) const STDERR_TAIL_BYTES: usize = 4096;

/// The host side of one call.
#[derive(Debug)]
pub(super) struct HostState {
    stdin: Vec<u8>,
    stdin_read: usize,
    stdout: Vec<u8>,
    max_stdout: usize,
    stderr: Vec<u8>,
    pub(super) limiter: MemoryLimiter,
    /// Base of the monotonic and CPU-time clocks the module sees.
    pub(super) started: Instant,
}

/// The module wrote more to stdout than allowed; raised as a host error so the call stops.
#[derive(Debug)]
pub(super) struct StdoutFull;

impl std::fmt::Display for StdoutFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout is larger than the limit")
    }
}

impl wasmi::errors::HostError for StdoutFull {}

impl HostState {
    /// State for a call reading `stdin`, allowed `max_stdout` bytes of output and
    /// `memory_bytes` of memory.
    pub(super) fn new(stdin: Vec<u8>, max_stdout: usize, memory_bytes: u64) -> Self {
        Self {
            stdin,
            stdin_read: 0,
            stdout: Vec::new(),
            max_stdout,
            stderr: Vec::new(),
            limiter: MemoryLimiter::new(memory_bytes),
            started: Instant::now(),
        }
    }

    /// The unread rest of stdin.
    pub(super) fn stdin_rest(&self) -> &[u8] {
        self.stdin.get(self.stdin_read..).unwrap_or_default()
    }

    /// Marks `n` more bytes of stdin as read.
    pub(super) fn consume_stdin(&mut self, n: usize) {
        self.stdin_read = self.stdin_read.saturating_add(n).min(self.stdin.len());
    }

    /// Appends to stdout, or fails if that would pass the cap (nothing is appended then).
    pub(super) fn write_stdout(&mut self, bytes: &[u8]) -> Result<(), StdoutFull> {
        if self.stdout.len().saturating_add(bytes.len()) > self.max_stdout {
            return Err(StdoutFull);
        }
        self.stdout.extend_from_slice(bytes);
        Ok(())
    }

    /// Appends to stderr, keeping only its last [`STDERR_TAIL_BYTES`] (amortised: trimmed
    /// when twice that has piled up).
    pub(super) fn write_stderr(&mut self, bytes: &[u8]) {
        let bytes = &bytes[bytes.len().saturating_sub(STDERR_TAIL_BYTES)..];
        self.stderr.extend_from_slice(bytes);
        if self.stderr.len() > 2 * STDERR_TAIL_BYTES {
            let cut = self.stderr.len() - STDERR_TAIL_BYTES;
            self.stderr.drain(..cut);
        }
    }

    /// The output cap given to this call.
    pub(super) fn max_stdout(&self) -> usize {
        self.max_stdout
    }

    /// Takes stdout out of the state.
    pub(super) fn take_stdout(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.stdout)
    }

    /// The last [`STDERR_TAIL_BYTES`] of stderr as text, starting at a character boundary.
    pub(super) fn stderr_tail(&self) -> String {
        let mut tail = &self.stderr[self.stderr.len().saturating_sub(STDERR_TAIL_BYTES)..];
        // A cut in the middle of a UTF-8 sequence would show as a replacement character.
        if self.stderr.len() > STDERR_TAIL_BYTES {
            while let Some((first, rest)) = tail.split_first() {
                if first & 0b1100_0000 != 0b1000_0000 {
                    break;
                }
                tail = rest;
            }
        }
        String::from_utf8_lossy(tail).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_end_of_stderr() {
        let mut state = HostState::new(Vec::new(), 0, 0);
        for _ in 0..3000 {
            state.write_stderr("é".as_bytes());
        }
        state.write_stderr(b"the end");
        let tail = state.stderr_tail();
        assert!(tail.ends_with("éthe end"), "{tail}");
        assert!(tail.len() <= STDERR_TAIL_BYTES);
        assert!(!tail.contains('\u{fffd}'), "cut inside a character");
    }

    #[test]
    fn stdout_stops_at_the_cap() {
        let mut state = HostState::new(b"in".to_vec(), 4, 0);
        assert!(state.write_stdout(b"abc").is_ok());
        assert!(state.write_stdout(b"de").is_err());
        assert_eq!(state.take_stdout(), b"abc");
        assert_eq!(state.stdin_rest(), b"in");
        state.consume_stdin(5);
        assert_eq!(state.stdin_rest(), b"");
    }
}
