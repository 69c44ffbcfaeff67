//! Hooks that run inside the controller: Jsonnet ([`jsonnet`]) and WebAssembly
//! ([`crate::wasm`]). A call takes the request body the webhook would have been sent and
//! gives back the body a webhook would have answered, so decoding, metrics, spans and
//! recordings are those of every hook.
//!
//! Code is read through the [`CodeSource`] (a watch per ConfigMap in the binary), compiled
//! once per content digest, and run in a sandbox: no files, sockets or environment; the
//! call's time is cut at the hook's timeout; WebAssembly memory is capped per call; output
//! is capped like a webhook body.

mod admission;
mod budget;
mod check;
mod code;
mod download;
mod imports;
pub mod jsonnet;
pub mod jsonnet_pool;

pub(crate) use imports::change_affects;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use metacontroller_api::hook::{HookRuntime, JsonnetHook, WasmHook};

use crate::error::HookError;
use crate::inprocess::jsonnet_pool::{JsonnetError, JsonnetLimits, JsonnetPool, JsonnetPoolConfig};
use crate::sources::{CodeObject, CodeSource};
use crate::wasm::{WasmError, WasmLimits, WasmModule, WasmRuntime};
use admission::{Admission, Refused};
use code::{CodeCache, CodeLoader, Digest};

pub use admission::{InProcessLimits, DEFAULT_PER_CONTROLLER, DEFAULT_PROCESS};
pub(crate) use budget::BudgetMetrics;
pub use budget::{format_bytes, DEFAULT_MEMORY_BUDGET};
pub use check::check_code;
pub use code::MAX_MODULE_BYTES;

/// Bytes of code kept (downloaded modules, compiled modules; by digest).
const CODE_CACHE_BYTES: u64 = 384 << 20;
/// ConfigMap keys whose module digest is remembered; past this the map starts over.
const MAX_KNOWN: usize = 1024;
/// How long after its deadline a call's runtime may take to report its own timeout before
/// the call ends without it.
const DEADLINE_GRACE: Duration = Duration::from_millis(50);
/// The default hook timeout (as `webhook.timeout`).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The SHA-256 of `bytes` as lower-case hex (the digest of code versions).
pub(crate) fn code_hex_sha256(bytes: &[u8]) -> String {
    code::hex(&code::sha256(bytes))
}

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
    cache: Arc<CodeCache>,
    /// The digest of the module last read from each ConfigMap key, while that ConfigMap
    /// is the same object (no hashing per call).
    known: Mutex<HashMap<KnownKey, (Arc<CodeObject>, Digest)>>,
    /// The worker processes evaluating Jsonnet.
    jsonnet: JsonnetPool,
    /// Each controller's share, the process cap and the memory budget.
    admission: Admission,
}

impl InProcess {
    pub(crate) fn new(
        source: Option<Arc<dyn CodeSource>>,
        limits: InProcessLimits,
        metrics: Option<crate::metrics::InProcessMetrics>,
        jsonnet: JsonnetPoolConfig,
    ) -> Self {
        let (budget, waits) = match metrics {
            Some(m) => (Some(m.budget), Some(m.waits)),
            None => (None, None),
        };
        let cache = Arc::new(CodeCache::new(CODE_CACHE_BYTES));
        Self {
            loader: CodeLoader::new(source, cache.clone()),
            wasm: WasmRuntime::new(),
            cache,
            known: Mutex::new(HashMap::new()),
            // Admission already gives each controller its share of the process cap; a
            // tighter pool-wide cap would let one controller's calls hold every worker.
            jsonnet: JsonnetPool::new(JsonnetPoolConfig {
                workers: limits.process.max(jsonnet.workers),
                ..jsonnet
            }),
            admission: Admission::new(limits, budget, waits),
        }
    }

    /// Runs `runtime` for `controller` (its identity: kind and name) on `request`; the
    /// response body, at most `max_body` bytes. The call waits for admission (its
    /// controller's share, the process cap, its memory reservation), loads its code and
    /// runs, all by `deadline` (the call's start plus the hook's timeout).
    pub(crate) async fn call(
        &self,
        controller: &str,
        runtime: &HookRuntime<'_>,
        shown: &str,
        request: Bytes,
        max_body: usize,
        deadline: Instant,
    ) -> Result<Bytes, HookError> {
        let (timeout, memory) = limits_of(runtime, shown)?;
        let _ticket = match self.admission.admit(controller, memory, deadline).await {
            Ok(ticket) => ticket,
            Err(Refused::Share(message)) => {
                return Err(HookError::Queued {
                    hook: shown.to_owned(),
                    timeout,
                    message,
                })
            }
            Err(Refused::Memory(message)) => return Err(failed(shown, message)),
        };
        let run = async {
            match runtime {
                HookRuntime::Jsonnet(hook) => {
                    self.jsonnet(hook, shown, request, memory, deadline).await
                }
                HookRuntime::Wasm(hook) => {
                    self.wasm(hook, shown, request, max_body, deadline).await
                }
                HookRuntime::Webhook(_) => {
                    Err(HookError::config("a webhook is not an in-process hook"))
                }
            }
        };
        let timed_out = || HookError::Timeout {
            url: shown.to_owned(),
            timeout,
        };
        let body = match tokio::time::timeout_at((deadline + DEADLINE_GRACE).into(), run).await {
            Ok(Err(HookError::Timeout { .. })) | Err(_) => return Err(timed_out()),
            Ok(result) => result?,
        };
        if body.len() > max_body {
            return Err(HookError::Oversize {
                url: shown.to_owned(),
                limit: max_body,
            });
        }
        Ok(body)
    }

    /// Evaluates a Jsonnet hook in a worker process; loading its code, waiting for a worker
    /// and evaluating end by `deadline`, in at most `memory_bytes`.
    async fn jsonnet(
        &self,
        hook: &JsonnetHook,
        shown: &str,
        request: Bytes,
        memory_bytes: u64,
        deadline: Instant,
    ) -> Result<Bytes, HookError> {
        let object = self
            .loader
            .config_map(&hook.config_map_ref)
            .await
            .map_err(|message| code_error(shown, message))?;
        code::check_jsonnet_entry(&object, &hook.config_map_ref, &hook.key)
            .map_err(|message| code_error(shown, message))?;
        let limits = JsonnetLimits {
            timeout: admission::remaining(deadline),
            memory_bytes,
        };
        let evaluated = self
            .jsonnet
            .evaluate(&object, &hook.key, &request, limits)
            .await;
        jsonnet_result(evaluated, shown)
    }

    /// Runs a WebAssembly hook; loading its code and running it end by `deadline`.
    async fn wasm(
        &self,
        hook: &WasmHook,
        shown: &str,
        request: Bytes,
        max_body: usize,
        deadline: Instant,
    ) -> Result<Bytes, HookError> {
        let memory_bytes = wasm_memory_bytes(hook, shown)?;
        let module = self.wasm_module(hook, shown).await?;
        let limits = WasmLimits {
            timeout: admission::remaining(deadline),
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
        if let Some(module) = self.cache.wasm(&digest) {
            return Ok(module);
        }
        let runtime = self.wasm.clone();
        let modules = self.cache.clone();
        // The compiled module is kept even when the call stops waiting for it (its
        // timeout): the next call finds it.
        let module = tokio::task::spawn_blocking(move || {
            let module = runtime.compile(&bytes)?;
            modules.insert_wasm(digest, module.clone(), compiled_weight(bytes.len()));
            Ok(module)
        })
        .await
        .map_err(|e| failed(shown, format!("compiling panicked: {e}")))?
        .map_err(|e| wasm_error(shown, e))?;
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
        if known.len() >= MAX_KNOWN && !known.contains_key(&key) {
            // Entries of ConfigMaps no hook reads any more would stay forever; the ones
            // in use come back at the cost of one hash each.
            known.clear();
        }
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
        self.cache.wasm(digest)
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

/// The timeout and the memory reservation of an in-process hook call.
fn limits_of(runtime: &HookRuntime<'_>, shown: &str) -> Result<(Duration, u64), HookError> {
    match runtime {
        HookRuntime::Jsonnet(hook) => Ok((
            effective_timeout(hook.timeout_duration(), shown)?,
            jsonnet_memory_bytes(hook, shown)?,
        )),
        HookRuntime::Wasm(hook) => Ok((
            effective_timeout(hook.timeout_duration(), shown)?,
            wasm_memory_bytes(hook, shown)?,
        )),
        HookRuntime::Webhook(_) => Err(HookError::config("a webhook is not an in-process hook")),
    }
}

/// The timeout of an in-process hook (`timeout`; zero or negative: the 10s default); errors
/// name the hook as `shown`.
pub(crate) fn timeout_of(runtime: &HookRuntime<'_>, shown: &str) -> Result<Duration, HookError> {
    match runtime {
        HookRuntime::Jsonnet(hook) => effective_timeout(hook.timeout_duration(), shown),
        HookRuntime::Wasm(hook) => effective_timeout(hook.timeout_duration(), shown),
        HookRuntime::Webhook(_) => Err(HookError::config("a webhook is not an in-process hook")),
    }
}

/// A Jsonnet hook's `memoryLimit` in bytes: what its call reserves from the budget and
/// what its worker may use beyond the worker's own overhead.
fn jsonnet_memory_bytes(hook: &JsonnetHook, shown: &str) -> Result<u64, HookError> {
    hook.memory_limit_bytes()
        .map_err(|e| HookError::config(format!("{shown}: memoryLimit: {e}")))
}

/// A WebAssembly hook's `memoryLimit` in bytes.
fn wasm_memory_bytes(hook: &WasmHook, shown: &str) -> Result<u64, HookError> {
    hook.memory_limit_bytes()
        .map_err(|e| HookError::config(format!("{shown}: memoryLimit: {e}")))
}

/// What a compiled module is counted as in the cache: wasmi's compiled form is a few times
/// its source.
fn compiled_weight(source_bytes: usize) -> u64 {
    (source_bytes as u64).saturating_mul(4)
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
fn jsonnet_result(
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
