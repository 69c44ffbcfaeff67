//! PLACEHOLDER until the wasm branch lands: the WebAssembly runtime's interface.
#![allow(missing_docs, dead_code)]
use std::time::Duration;

#[derive(Clone, Default)]
pub struct WasmRuntime;
#[derive(Clone)]
pub struct WasmModule;
#[derive(Debug, Clone)]
pub struct WasmLimits {
    pub timeout: Duration,
    pub memory_bytes: u64,
    pub max_stdout_bytes: usize,
}
pub const DEFAULT_MEMORY_LIMIT: u64 = 64 * 1024 * 1024;
#[derive(Debug)]
pub struct WasmOutput {
    pub stdout: Vec<u8>,
    pub stderr: String,
}
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("import {module}.{name}")]
    Import { module: String, name: String },
    #[error("no _start")]
    NoStart,
    #[error("trap {message}")]
    Trap { message: String, stderr: String },
    #[error("exit {code}")]
    Exit { code: i32, stderr: String },
    #[error("timeout")]
    Timeout { timeout: Duration },
    #[error("memory")]
    MemoryLimit { limit: u64, stderr: String },
    #[error("output")]
    OutputTooLarge { limit: usize },
}
impl WasmRuntime {
    pub fn new() -> Self {
        WasmRuntime
    }
    pub fn compile(&self, _bytes: &[u8]) -> Result<WasmModule, WasmError> {
        Err(WasmError::Invalid("not built yet".into()))
    }
    pub async fn run(
        &self,
        _module: &WasmModule,
        _stdin: Vec<u8>,
        _limits: WasmLimits,
    ) -> Result<WasmOutput, WasmError> {
        Err(WasmError::Invalid("not built yet".into()))
    }
}
