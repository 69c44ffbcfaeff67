//! Hooks that run inside the controller: Jsonnet ([`jsonnet`]) and WebAssembly
//! ([`crate::wasm`]). A call takes the request body the webhook would have been sent and
//! gives back the body a webhook would have answered, so decoding, metrics, spans and
//! recordings are those of every hook.
//!
//! Code is read through the [`CodeSource`] (a watch per ConfigMap in the binary), compiled
//! once per content digest, and run in a sandbox: no files, sockets or environment; the
//! call's time is cut at the hook's timeout; WebAssembly memory is capped per call; output
//! is capped like a webhook body.

mod code;
pub mod jsonnet;
pub mod jsonnet_pool;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use metacontroller_api::hook::{HookRuntime, JsonnetHook, WasmHook};

use crate::error::HookError;
use crate::inprocess::jsonnet_pool::{JsonnetError, JsonnetLimits, JsonnetPool, JsonnetPoolConfig};
use crate::sources::{CodeObject, CodeSource};
use crate::wasm::{WasmError, WasmLimits, WasmModule, WasmRuntime};
use code::{CodeLoader, CompiledCache, Digest};

pub use code::MAX_MODULE_BYTES;

/// Compiled WebAssembly modules kept (by digest).
const MODULE_CACHE: usize = 32;
/// The default hook timeout (as `webhook.timeout`).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How an in-process hook is shown in messages, logs, metrics (`url`) and recordings:
/// `jsonnet:<namespace>/<name>#<key>`, `wasm:<namespace>/<name>#<key>` or `wasm:<url>`.
pub fn display(runtime: &HookRuntime<'_>) -> String {
    match runtime {
        HookRuntime::Webhook(_) => String::new(),
        HookRuntime::Jsonnet(j) => format!(
            "jsonnet:{}/{}#{}",
            j.config_map_ref.namespace, j.config_map_ref.name, j.key
        ),
        HookRuntime::Wasm(w) => match (&w.config_map_ref, &w.url) {
            (Some(r), _) => format!(
                "wasm:{}/{}#{}",
                r.namespace,
                r.name,
                w.key.as_deref().unwrap_or_default()
            ),
            (None, Some(url)) => format!("wasm:{url}"),
            (None, None) => "wasm:".into(),
        },
    }
}

/// Runs Jsonnet and WebAssembly hooks; shared by every controller of the process.
pub(crate) struct InProcess {
    loader: CodeLoader,
    wasm: WasmRuntime,
    modules: CompiledCache<WasmModule>,
    /// The digest of the module last read from each ConfigMap key, while that ConfigMap
    /// is the same object (no hashing per call).
    known: Mutex<HashMap<KnownKey, (Arc<CodeObject>, Digest)>>,
    /// The worker processes evaluating Jsonnet.
    jsonnet: JsonnetPool,
}

impl InProcess {
    pub(crate) fn new(source: Option<Arc<dyn CodeSource>>, jsonnet: JsonnetPoolConfig) -> Self {
        Self {
            loader: CodeLoader::new(source),
            wasm: WasmRuntime::new(),
            modules: CompiledCache::new(MODULE_CACHE),
            known: Mutex::new(HashMap::new()),
            jsonnet: JsonnetPool::new(jsonnet),
        }
    }

    /// Runs `runtime` on `request`; the response body, at most `max_body` bytes.
    pub(crate) async fn call(
        &self,
        runtime: &HookRuntime<'_>,
        shown: &str,
        request: Bytes,
        max_body: usize,
    ) -> Result<Bytes, HookError> {
        let body = match runtime {
            HookRuntime::Jsonnet(hook) => self.jsonnet(hook, shown, request).await?,
            HookRuntime::Wasm(hook) => self.wasm(hook, shown, request, max_body).await?,
            HookRuntime::Webhook(_) => {
                return Err(HookError::config("a webhook is not an in-process hook"))
            }
        };
        if body.len() > max_body {
            return Err(HookError::Oversize {
                url: shown.to_owned(),
                limit: max_body,
            });
        }
        Ok(body)
    }

    async fn jsonnet(
        &self,
        hook: &JsonnetHook,
        shown: &str,
        request: Bytes,
    ) -> Result<Bytes, HookError> {
        let timeout = effective_timeout(hook.timeout_duration(), shown)?;
        let memory_bytes = hook
            .memory_limit_bytes()
            .map_err(|e| HookError::config(format!("{shown}: memoryLimit: {e}")))?;
        let object = self
            .loader
            .config_map(&hook.config_map_ref)
            .await
            .map_err(|message| code_error(shown, message))?;
        code::check_jsonnet_entry(&object, &hook.config_map_ref, &hook.key)
            .map_err(|message| code_error(shown, message))?;
        let limits = JsonnetLimits {
            timeout,
            memory_bytes,
        };
        let evaluated = self
            .jsonnet
            .evaluate(&object, &hook.key, &request, limits)
            .await;
        await_jsonnet(evaluated, shown)
    }

    async fn wasm(
        &self,
        hook: &WasmHook,
        shown: &str,
        request: Bytes,
        max_body: usize,
    ) -> Result<Bytes, HookError> {
        let timeout = effective_timeout(hook.timeout_duration(), shown)?;
        let memory_bytes = hook
            .memory_limit_bytes()
            .map_err(|e| HookError::config(format!("{shown}: memoryLimit: {e}")))?;
        let module = self.wasm_module(hook, shown).await?;
        let limits = WasmLimits {
            timeout,
            memory_bytes,
            max_stdout_bytes: max_body,
        };
        match self.wasm.run(&module, request.to_vec(), limits).await {
            Ok(output) => {
                if !output.stderr.is_empty() {
                    tracing::info!(hook = shown, stderr = %output.stderr, "hook wrote to stderr");
                }
                Ok(Bytes::from(output.stdout))
            }
            Err(error) => Err(wasm_error(shown, error)),
        }
    }

    /// The compiled module of `hook`: cached by digest; compiled off the async threads.
    async fn wasm_module(&self, hook: &WasmHook, shown: &str) -> Result<WasmModule, HookError> {
        let (bytes, digest) = match self.module_bytes(hook).await {
            Ok(ModuleBytes::Compiled(module)) => return Ok(module),
            Ok(ModuleBytes::Source(bytes, digest)) => (bytes, digest),
            Err(message) => return Err(code_error(shown, message)),
        };
        if let Some(module) = self.modules.get(&digest) {
            return Ok(module);
        }
        let runtime = self.wasm.clone();
        let module = tokio::task::spawn_blocking(move || runtime.compile(&bytes))
            .await
            .map_err(|e| failed(shown, format!("compiling panicked: {e}")))?
            .map_err(|e| wasm_error(shown, e))?;
        self.modules.insert(digest, module.clone());
        Ok(module)
    }

    /// The module's bytes and digest, or the compiled module when the ConfigMap is the
    /// same object as at the last call (nothing to copy or hash then).
    async fn module_bytes(&self, hook: &WasmHook) -> Result<ModuleBytes, String> {
        let Some(reference) = &hook.config_map_ref else {
            let bytes = self.loader.wasm_module(hook).await?;
            let digest = code::sha256(&bytes);
            return Ok(ModuleBytes::Source(bytes, digest));
        };
        let object = self.loader.config_map(reference).await?;
        let key = known_key(reference, hook);
        if let Some(module) = self.known_module(&key, &object) {
            return Ok(ModuleBytes::Compiled(module));
        }
        let bytes = Arc::new(code::module_from_config_map(&object, reference, &key.2)?);
        let digest = code::sha256(&bytes);
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.insert(key, (object, digest));
        Ok(ModuleBytes::Source(bytes, digest))
    }

    /// The module compiled from ConfigMap key `key` when `object` is the ConfigMap it was
    /// read from.
    fn known_module(&self, key: &KnownKey, object: &Arc<CodeObject>) -> Option<WasmModule> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let (seen, digest) = known.get(key)?;
        if !Arc::ptr_eq(seen, object) {
            return None;
        }
        self.modules.get(digest)
    }
}

/// A ConfigMap key holding a module: namespace, name, key.
type KnownKey = (String, String, String);

/// A module as [`InProcess::module_bytes`] found it.
enum ModuleBytes {
    Compiled(WasmModule),
    Source(Arc<Vec<u8>>, Digest),
}

fn known_key(
    reference: &metacontroller_api::hook::CodeConfigMapReference,
    hook: &WasmHook,
) -> KnownKey {
    (
        reference.namespace.clone(),
        reference.name.clone(),
        hook.key.clone().unwrap_or_default(),
    )
}

/// The hook's timeout: as a webhook's, a zero or negative one means the 10s default.
fn effective_timeout(
    parsed: Result<Duration, metacontroller_api::duration::DurationParseError>,
    shown: &str,
) -> Result<Duration, HookError> {
    let timeout = parsed.map_err(|e| HookError::config(format!("{shown}: timeout: {e}")))?;
    Ok(if timeout.is_zero() {
        DEFAULT_TIMEOUT
    } else {
        timeout
    })
}

/// An evaluation's result as the hook's: `std.trace` lines go to the log with the hook's
/// name, a timeout is that of every hook, the rest names what failed.
fn await_jsonnet(
    evaluated: Result<jsonnet_pool::Evaluated, JsonnetError>,
    shown: &str,
) -> Result<Bytes, HookError> {
    let log_traces = |traces: &[String]| {
        for line in traces {
            tracing::info!(hook = shown, trace = %line, "std.trace");
        }
    };
    match evaluated {
        Ok(evaluated) => {
            log_traces(&evaluated.traces);
            Ok(Bytes::from(evaluated.body))
        }
        Err(JsonnetError::Timeout { timeout }) => Err(HookError::Timeout {
            url: shown.to_owned(),
            timeout,
        }),
        Err(JsonnetError::Evaluation { message, traces }) => {
            log_traces(&traces);
            Err(failed(shown, message))
        }
        Err(error) => Err(failed(shown, error.to_string())),
    }
}

fn code_error(shown: &str, message: String) -> HookError {
    HookError::Code {
        hook: shown.to_owned(),
        message,
    }
}

fn failed(shown: &str, message: String) -> HookError {
    HookError::Failed {
        hook: shown.to_owned(),
        message,
    }
}

/// A WebAssembly failure as a hook error: a module that can't be used is a code error, a
/// timeout and an oversize output are those of every hook, the rest is the run's failure.
fn wasm_error(shown: &str, error: WasmError) -> HookError {
    match error {
        WasmError::Timeout { timeout } => HookError::Timeout {
            url: shown.to_owned(),
            timeout,
        },
        WasmError::OutputTooLarge { limit } => HookError::Oversize {
            url: shown.to_owned(),
            limit,
        },
        e @ (WasmError::Invalid(_) | WasmError::Import { .. } | WasmError::NoStart) => {
            // One line: the validator's messages may span several.
            code_error(
                shown,
                e.to_string()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        }
        e => failed(shown, e.to_string()),
    }
}
