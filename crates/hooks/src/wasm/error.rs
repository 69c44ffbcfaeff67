//! Why compiling or running a WebAssembly hook failed. The messages end up in Events and
//! logs, so they say what happened in an operator's words and carry the tail of the module's
//! stderr when it has one.

use std::time::Duration;

/// Why a WebAssembly hook could not be compiled or did not answer.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    /// The bytes are not a WebAssembly module, or the module fails validation.
    #[error("invalid WebAssembly module: {0}")]
    Invalid(String),
    /// The module imports something the controller does not provide.
    #[error(
        "module imports unknown host function {module}.{name} \
         (hooks may import only WASI preview 1 functions from wasi_snapshot_preview1)"
    )]
    Import {
        /// Import module name, e.g. `env`.
        module: String,
        /// Imported item name.
        name: String,
    },
    /// The module does not export the `_start` function of a WASI command.
    #[error("module exports no _start function (a hook must be a WASI command module)")]
    NoStart,
    /// The module trapped (unreachable, out-of-bounds access, stack overflow, ...).
    #[error("module trapped: {message}{}", stderr_suffix(.stderr))]
    Trap {
        /// The trap, as the runtime describes it.
        message: String,
        /// The last bytes the module wrote to stderr (lossy UTF-8).
        stderr: String,
    },
    /// The module called `proc_exit` with a non-zero status.
    #[error("module exited with status {code}{}", stderr_suffix(.stderr))]
    Exit {
        /// Exit status.
        code: i32,
        /// The last bytes the module wrote to stderr (lossy UTF-8).
        stderr: String,
    },
    /// The module did not finish within the hook timeout; it was stopped.
    #[error("module did not finish within {timeout:?}")]
    Timeout {
        /// The timeout that elapsed.
        timeout: Duration,
    },
    /// The module asked for more memory than its limit; it was stopped.
    #[error("module exceeded its memory limit of {}{}", crate::quantity::quantity(*.limit), stderr_suffix(.stderr))]
    MemoryLimit {
        /// The limit in bytes (linear memory plus tables).
        limit: u64,
        /// The last bytes the module wrote to stderr (lossy UTF-8).
        stderr: String,
    },
    /// The module wrote more to stdout than the response size limit; it was stopped.
    #[error("module wrote more than the limit of {} to stdout", crate::quantity::quantity(*.limit as u64))]
    OutputTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

/// `"; stderr: …"` when the module wrote to stderr, else nothing.
fn stderr_suffix(stderr: &str) -> String {
    let stderr = stderr.trim_end();
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; stderr: {stderr}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_import_and_carry_stderr() {
        let import = WasmError::Import {
            module: "env".into(),
            name: "foo".into(),
        };
        assert!(import
            .to_string()
            .starts_with("module imports unknown host function env.foo"));
        let exit = WasmError::Exit {
            code: 2,
            stderr: "bad request\n".into(),
        };
        assert_eq!(
            exit.to_string(),
            "module exited with status 2; stderr: bad request"
        );
        let quiet = WasmError::Exit {
            code: 1,
            stderr: String::new(),
        };
        assert_eq!(quiet.to_string(), "module exited with status 1");
    }
}
