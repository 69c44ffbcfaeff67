//! Calling the hook: at a URL through the controller's hook client (same timeout, headers,
//! size limit and decoding), or as a shell command (request on stdin, response on stdout).

use std::process::Stdio;

use std::sync::Arc;

use metacontroller_api::hook::{
    CodeConfigMapReference, EndpointConfig, Hook, JsonnetHook, ResponseUnmarshallMode, WasmHook,
    Webhook,
};
use metacontroller_api::wire::decode_response;
use metacontroller_hooks::{
    CallContext, CodeObject, CodeSource, HookClient, HookClientConfig, HookError, MemoryCode,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::AsyncWriteExt;

/// Where the hook is.
#[derive(Debug, Clone)]
pub enum Target {
    /// `--hook-url`.
    Url(String),
    /// `--hook-command`.
    Command(String),
    /// `--jsonnet`: a Jsonnet file (its directory's files importable).
    Jsonnet(std::path::PathBuf),
    /// `--wasm`: a WebAssembly module.
    Wasm(std::path::PathBuf),
    /// `--live` without a target: the controller's own hooks, as configured.
    Configured,
}

/// The ConfigMap a `--jsonnet` or `--wasm` file is served as.
const LOCAL_CODE: (&str, &str) = ("render", "local-files");

/// Why a call failed: the hook client's error (worded as the controller words it), or a
/// command that could not run or exited non-zero.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The hook client (or decoding a command's output) failed.
    #[error(transparent)]
    Hook(#[from] HookError),
    /// The command failed.
    #[error("hook command `{command}`: {message}")]
    Command {
        /// The command line.
        command: String,
        /// What went wrong (exit status and stderr).
        message: String,
    },
}

/// Calls hooks for one render.
pub struct Caller {
    target: Target,
    client: HookClient,
}

impl Caller {
    /// A caller for `target`. With `cluster` (a live cluster), hook credentials (caBundle,
    /// clientTLS, authorization, basicAuth) are read from its Secrets and ConfigMaps as the
    /// controller reads them; offline, hooks that need them fail with the client's own
    /// configuration error.
    pub fn new(target: Target, cluster: Option<kube::Client>) -> anyhow::Result<Caller> {
        let code = code_source(&target, cluster.clone())?;
        let sources = cluster.map(|c| std::sync::Arc::new(crate::sources::ApiSources::new(c)));
        let client = HookClient::new(HookClientConfig {
            code,
            secrets: sources
                .clone()
                .map(|s| s as std::sync::Arc<dyn metacontroller_hooks::SecretSource>),
            config_maps: sources
                .map(|s| s as std::sync::Arc<dyn metacontroller_hooks::ConfigMapSource>),
            ..HookClientConfig::default()
        })?;
        Ok(Caller { target, client })
    }

    /// Calls `hook` at its own configured URL (the customize hook, which --hook-url and
    /// --hook-command do not replace, when related objects are read from a cluster).
    pub async fn call_configured<Req, Resp>(
        &self,
        ctx: &CallContext<'_>,
        hook: &Hook,
        endpoint_configs: &[EndpointConfig],
        request: &Req,
    ) -> Result<Resp, HookError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned + Default,
    {
        self.client.call(ctx, hook, endpoint_configs, request).await
    }

    /// Calls `hook` (its timeout, version and decoding mode; its URL replaced by the
    /// target) with `request`.
    pub async fn call<Req, Resp>(
        &self,
        ctx: &CallContext<'_>,
        hook: &Hook,
        endpoint_configs: &[EndpointConfig],
        request: &Req,
    ) -> Result<Resp, CallError>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned + Default,
    {
        let webhook = hook.webhook.clone().unwrap_or_default();
        match &self.target {
            Target::Configured => Ok(self
                .client
                .call(ctx, hook, endpoint_configs, request)
                .await?),
            Target::Jsonnet(file) => {
                let hook = local_jsonnet(hook, file);
                Ok(self
                    .client
                    .call(ctx, &hook, endpoint_configs, request)
                    .await?)
            }
            Target::Wasm(file) => {
                let hook = local_wasm(hook, file);
                Ok(self
                    .client
                    .call(ctx, &hook, endpoint_configs, request)
                    .await?)
            }
            Target::Url(url) => {
                let hook = Hook {
                    version: hook.version,
                    webhook: Some(Webhook {
                        url: Some(url.clone()),
                        service: None,
                        path: None,
                        ..webhook
                    }),
                    ..Hook::default()
                };
                Ok(self
                    .client
                    .call(ctx, &hook, endpoint_configs, request)
                    .await?)
            }
            Target::Command(command) => {
                let mode = webhook.effective_unmarshall_mode(hook.effective_version());
                let timeout = webhook.timeout_duration().map_err(|e| HookError::Config {
                    message: format!("timeout: {e}"),
                })?;
                run_command(command, request, mode, timeout).await
            }
        }
    }
}

/// Where in-process hook code comes from: the `--jsonnet`/`--wasm` file (and, for Jsonnet,
/// the other files of its directory) as one in-memory ConfigMap; else, live, the cluster's
/// ConfigMaps as the controller reads them.
fn code_source(
    target: &Target,
    cluster: Option<kube::Client>,
) -> anyhow::Result<Option<Arc<dyn CodeSource>>> {
    use anyhow::Context as _;
    let object = match target {
        Target::Jsonnet(file) => {
            let mut object = CodeObject::default();
            let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
            for entry in std::fs::read_dir(dir.unwrap_or(std::path::Path::new(".")))
                .with_context(|| format!("reading the directory of {}", file.display()))?
                .flatten()
            {
                let path = entry.path();
                if let (true, Some(name)) = (path.is_file(), path.file_name()) {
                    if let Ok(text) = std::fs::read_to_string(&path) {
                        object
                            .data
                            .insert(name.to_string_lossy().into_owned(), text);
                    }
                }
            }
            object
        }
        Target::Wasm(file) => {
            let bytes =
                std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
            let mut object = CodeObject::default();
            object.binary_data.insert(file_key(file), bytes);
            object
        }
        _ => {
            return Ok(cluster.map(|client| {
                Arc::new(crate::code_source::WatchedConfigMaps::new(client, None))
                    as Arc<dyn CodeSource>
            }))
        }
    };
    let memory = MemoryCode::new();
    memory.set(LOCAL_CODE.0, LOCAL_CODE.1, object);
    Ok(Some(Arc::new(memory)))
}

fn file_key(file: &std::path::Path) -> String {
    file.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn local_config_map() -> CodeConfigMapReference {
    CodeConfigMapReference {
        namespace: LOCAL_CODE.0.into(),
        name: LOCAL_CODE.1.into(),
    }
}

/// `hook` as a `jsonnet:` hook of `file` (the configured timeout and memory limit kept).
fn local_jsonnet(hook: &Hook, file: &std::path::Path) -> Hook {
    let memory_limit = hook.jsonnet.as_ref().and_then(|j| j.memory_limit.clone());
    let timeout = hook
        .jsonnet
        .as_ref()
        .and_then(|j| j.timeout.clone())
        .or_else(|| hook.webhook.as_ref().and_then(|w| w.timeout.clone()));
    Hook {
        version: hook.version,
        jsonnet: Some(JsonnetHook {
            config_map_ref: local_config_map(),
            key: file_key(file),
            timeout,
            memory_limit,
        }),
        ..Hook::default()
    }
}

/// `hook` as a `wasm:` hook of `file` (the configured timeout and memory limit kept).
fn local_wasm(hook: &Hook, file: &std::path::Path) -> Hook {
    let configured = hook.wasm.clone().unwrap_or_default();
    let timeout = configured
        .timeout
        .clone()
        .or_else(|| hook.webhook.as_ref().and_then(|w| w.timeout.clone()));
    Hook {
        version: hook.version,
        wasm: Some(WasmHook {
            config_map_ref: Some(local_config_map()),
            key: Some(file_key(file)),
            url: None,
            sha256: None,
            timeout,
            memory_limit: configured.memory_limit,
        }),
        ..Hook::default()
    }
}

async fn run_command<Req, Resp>(
    command: &str,
    request: &Req,
    mode: ResponseUnmarshallMode,
    timeout: std::time::Duration,
) -> Result<Resp, CallError>
where
    Req: Serialize + ?Sized,
    Resp: DeserializeOwned + Default,
{
    let failed = |message: String| CallError::Command {
        command: command.to_string(),
        message,
    };
    let body = serde_json::to_vec(request).map_err(|e| HookError::Encode {
        message: e.to_string(),
    })?;
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("cannot start: {e}")))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| failed("no stdin".into()))?;
    let exchange = async move {
        // A command that exits without reading its input closes the pipe: not an error
        // of ours, its exit status tells.
        let _ = stdin.write_all(&body).await;
        drop(stdin);
        child.wait_with_output().await
    };
    let output = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| failed(format!("no response within {timeout:?}")))?
        .map_err(|e| failed(e.to_string()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(failed(format!(
            "exited with {}: {}",
            output.status,
            stderr.trim()
        )));
    }
    decode_response(&output.stdout, mode).map_err(|error| {
        CallError::Hook(HookError::Decode {
            url: format!("command `{command}`"),
            error,
        })
    })
}
