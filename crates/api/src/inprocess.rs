//! Hooks that run inside the controller (`jsonnet:` and `wasm:` beside `webhook:`), an
//! extension beyond upstream Metacontroller: the hook's code is data in the cluster (a
//! ConfigMap key, or for WebAssembly a URL pinned by SHA-256) and the controller evaluates it
//! in a sandbox with the same request and response JSON a webhook gets.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::{parse_go_duration, DurationParseError};
use crate::hook::DEFAULT_WEBHOOK_TIMEOUT;
use crate::validation::{positive_duration, Collector};

/// Default `wasm.memoryLimit`: 64 MiB.
pub const DEFAULT_WASM_MEMORY_LIMIT: &str = "64Mi";
/// The largest `wasm.memoryLimit` (a 32-bit WebAssembly memory cannot exceed 4 GiB).
pub const MAX_WASM_MEMORY_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// Default `jsonnet.memoryLimit`: 256 MiB.
pub const DEFAULT_JSONNET_MEMORY_LIMIT: &str = "256Mi";
/// The largest `jsonnet.memoryLimit`.
pub const MAX_JSONNET_MEMORY_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// The ConfigMap holding a hook's code. Both fields are required: controller objects are
/// cluster-scoped, so there is no namespace to default to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CodeConfigMapReference {
    /// ConfigMap namespace.
    pub namespace: String,
    /// ConfigMap name.
    pub name: String,
}

/// A Jsonnet hook: the entry file evaluates to a function of one top-level argument,
/// `request`, whose result is the hook response (the convention of upstream's jsonnetd).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonnetHook {
    /// The ConfigMap holding the code; its other keys are importable by name.
    pub config_map_ref: CodeConfigMapReference,
    /// The key of the entry file.
    pub key: String,
    /// Go duration string; 10s when unset, as `webhook.timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "duration"))]
    pub timeout: Option<String>,
    /// The most memory one evaluation may use (a Kubernetes quantity); 256Mi when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<String>,
}

impl JsonnetHook {
    /// The evaluation's time limit: `timeout` parsed as a Go duration, 10s when unset.
    pub fn timeout_duration(&self) -> Result<Duration, DurationParseError> {
        parse_go_duration(self.timeout.as_deref().unwrap_or(DEFAULT_WEBHOOK_TIMEOUT))
    }

    /// The memory limit in bytes (`memoryLimit`, 256Mi when unset).
    pub fn memory_limit_bytes(&self) -> Result<u64, String> {
        parse_quantity_bytes(
            self.memory_limit
                .as_deref()
                .unwrap_or(DEFAULT_JSONNET_MEMORY_LIMIT),
        )
    }
}

/// A WebAssembly hook: a WASI preview-1 command module that reads the request on stdin and
/// writes the response on stdout. The module comes from a ConfigMap key (`configMapRef` +
/// `key`) or from a URL pinned by its SHA-256 (`url` + `sha256`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.configMapRef) != has(self.url)",
     "message": "exactly one of configMapRef (with key) or url (with sha256) must be set"},
    {"rule": "!has(self.configMapRef) || has(self.key)",
     "message": "key is required with configMapRef"},
    {"rule": "!has(self.url) || has(self.sha256)",
     "message": "sha256 is required with url"}
]))]
pub struct WasmHook {
    /// The ConfigMap holding the module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<CodeConfigMapReference>,
    /// The key of the module in `binaryData` (or base64 in `data`); gzip is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Where to download the module (instead of `configMapRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Lower-case hex SHA-256 of the module at `url` (of the bytes as served).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Go duration string; 10s when unset, as `webhook.timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "duration"))]
    pub timeout: Option<String>,
    /// The most linear memory one call may use (a Kubernetes quantity); 64Mi when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<String>,
}

impl WasmHook {
    /// The call's time limit: `timeout` parsed as a Go duration, 10s when unset.
    pub fn timeout_duration(&self) -> Result<Duration, DurationParseError> {
        parse_go_duration(self.timeout.as_deref().unwrap_or(DEFAULT_WEBHOOK_TIMEOUT))
    }

    /// The memory limit in bytes (`memoryLimit`, 64Mi when unset).
    pub fn memory_limit_bytes(&self) -> Result<u64, String> {
        parse_quantity_bytes(
            self.memory_limit
                .as_deref()
                .unwrap_or(DEFAULT_WASM_MEMORY_LIMIT),
        )
    }
}

/// A Kubernetes quantity as a whole number of bytes: plain digits, or digits with a binary
/// (`Ki`, `Mi`, `Gi`, `Ti`) or decimal (`k`, `M`, `G`, `T`) suffix. Fractions and
/// exponents are refused: a memory limit is a byte count.
pub fn parse_quantity_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let not_bytes = || format!("{text:?} is not a quantity of bytes (e.g. 64Mi)");
    if suffix.starts_with(['.', 'e', 'E']) {
        return Err(not_bytes());
    }
    let number: u64 = digits.parse().map_err(|_| not_bytes())?;
    let unit: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {suffix:?} (use Ki, Mi, Gi or k, M, G)"
            ))
        }
    };
    number
        .checked_mul(unit)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// Checks a `jsonnet` hook (field paths under `path`).
pub(crate) fn validate_jsonnet(c: &mut Collector, path: &str, hook: &JsonnetHook) {
    config_map_ref(c, &format!("{path}.configMapRef"), &hook.config_map_ref);
    c.require(format!("{path}.key"), &hook.key);
    if let Some(timeout) = &hook.timeout {
        positive_duration(c, format!("{path}.timeout"), timeout);
    }
    memory_limit(
        c,
        path,
        hook.memory_limit_bytes(),
        16 << 20,
        MAX_JSONNET_MEMORY_BYTES,
    );
}

/// Checks `<path>.memoryLimit` (already parsed) against `min` and `max` bytes.
fn memory_limit(c: &mut Collector, path: &str, bytes: Result<u64, String>, min: u64, max: u64) {
    let field = format!("{path}.memoryLimit");
    match bytes {
        Ok(bytes) if bytes < min => c.push(field, format!("must be at least {}Mi", min >> 20)),
        Ok(bytes) if bytes > max => c.push(field, format!("must be at most {}Gi", max >> 30)),
        Ok(_) => {}
        Err(e) => c.push(field, e),
    }
}

/// Checks a `wasm` hook (field paths under `path`).
pub(crate) fn validate_wasm(c: &mut Collector, path: &str, hook: &WasmHook) {
    match (&hook.config_map_ref, &hook.url) {
        (Some(_), Some(_)) => c.push(
            path,
            "exactly one of configMapRef (with key) or url (with sha256) may be set, found both",
        ),
        (None, None) => c.push(
            path,
            "one of configMapRef (with key) or url (with sha256) must be set",
        ),
        (Some(reference), None) => {
            config_map_ref(c, &format!("{path}.configMapRef"), reference);
            c.require(format!("{path}.key"), hook.key.as_deref().unwrap_or(""));
        }
        (None, Some(url)) => {
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                c.push(
                    format!("{path}.url"),
                    format!("{url:?} is not an http:// or https:// URL"),
                );
            }
            match hook.sha256.as_deref() {
                None => c.push(format!("{path}.sha256"), "is required with url"),
                Some(hex) if !is_sha256_hex(hex) => c.push(
                    format!("{path}.sha256"),
                    "must be 64 hexadecimal digits (the module's SHA-256)",
                ),
                Some(_) => {}
            }
        }
    }
    if let Some(timeout) = &hook.timeout {
        positive_duration(c, format!("{path}.timeout"), timeout);
    }
    memory_limit(
        c,
        path,
        hook.memory_limit_bytes(),
        1 << 20,
        MAX_WASM_MEMORY_BYTES,
    );
}

fn config_map_ref(c: &mut Collector, path: &str, reference: &CodeConfigMapReference) {
    c.require(format!("{path}.namespace"), &reference.namespace);
    c.require(format!("{path}.name"), &reference.name);
}

/// Whether `text` is a SHA-256 digest in hex (either case).
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_parse_to_bytes() {
        assert_eq!(parse_quantity_bytes("64Mi"), Ok(64 << 20));
        assert_eq!(parse_quantity_bytes("1Gi"), Ok(1 << 30));
        assert_eq!(parse_quantity_bytes("500k"), Ok(500_000));
        assert_eq!(parse_quantity_bytes("4096"), Ok(4096));
        let fraction = parse_quantity_bytes("1.5Gi").unwrap_err();
        assert!(
            fraction.contains("is not a quantity of bytes"),
            "{fraction}"
        );
        assert!(parse_quantity_bytes("64MB").is_err());
        assert!(parse_quantity_bytes("").is_err());
        assert!(parse_quantity_bytes("99999999999999999999Ti").is_err());
    }

    #[test]
    fn wasm_hook_round_trips_and_defaults() {
        let value = json!({
            "url": "https://hooks.example.com/hello.wasm",
            "sha256": "ab".repeat(32),
            "timeout": "2s",
            "memoryLimit": "32Mi"
        });
        let hook: WasmHook = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(hook.memory_limit_bytes(), Ok(32 << 20));
        assert_eq!(hook.timeout_duration(), Ok(Duration::from_secs(2)));
        assert_eq!(serde_json::to_value(&hook).unwrap(), value);
        let jsonnet: JsonnetHook = serde_json::from_value(json!({
            "configMapRef": {"namespace": "n", "name": "c"},
            "key": "sync.jsonnet",
            "memoryLimit": "1Gi"
        }))
        .unwrap();
        assert_eq!(jsonnet.memory_limit_bytes(), Ok(1 << 30));
        assert_eq!(JsonnetHook::default().memory_limit_bytes(), Ok(256 << 20));
        let default = WasmHook::default();
        assert_eq!(default.memory_limit_bytes(), Ok(64 << 20));
        assert_eq!(default.timeout_duration(), Ok(Duration::from_secs(10)));
    }
}
