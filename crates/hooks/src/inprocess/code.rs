//! Where an in-process hook's code comes from, as bytes: a ConfigMap key (Jsonnet: the
//! ConfigMap's keys as files; WebAssembly: `binaryData`, or base64 in `data`, gzip accepted)
//! or a URL pinned by SHA-256 (see [`super::download`]: single flight, failures backed off).

use std::collections::HashMap;
use std::io::Read as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use metacontroller_api::hook::{CodeConfigMapReference, WasmHook};

use super::download::Downloads;
use crate::sources::{CodeObject, CodeSource};

/// The largest module accepted, downloaded or after gunzip (a gzip bomb stops here).
pub const MAX_MODULE_BYTES: u64 = 64 * 1024 * 1024;
/// How long a module download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// A SHA-256 digest.
pub(crate) type Digest = [u8; 32];

/// The SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> Digest {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// `digest` as lower-case hex.
pub(crate) fn hex(digest: &Digest) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads ConfigMaps through the [`CodeSource`] and downloads pinned modules.
pub(crate) struct CodeLoader {
    source: Option<Arc<dyn CodeSource>>,
    downloads: Arc<Downloads>,
}

impl CodeLoader {
    /// Reads `source`; keeps downloads in `cache`.
    pub(crate) fn new(source: Option<Arc<dyn CodeSource>>, cache: Arc<CodeCache>) -> Self {
        Self {
            source,
            downloads: Arc::new(Downloads::new(cache)),
        }
    }

    /// The ConfigMap `reference`, or why it can't be had.
    pub(crate) async fn config_map(
        &self,
        reference: &CodeConfigMapReference,
    ) -> Result<Arc<CodeObject>, String> {
        // A rollout's older version of this ConfigMap, for this call only.
        if let Some(object) = crate::pinned::pinned(&reference.namespace, &reference.name) {
            return Ok(object);
        }
        let Some(source) = &self.source else {
            return Err("this process reads no ConfigMaps for hook code".into());
        };
        let (namespace, name) = (&reference.namespace, &reference.name);
        match source.get(namespace, name).await {
            Ok(Some(object)) => Ok(object),
            Ok(None) => Err(format!("ConfigMap {namespace}/{name} not found")),
            Err(e) => Err(format!("reading ConfigMap {namespace}/{name}: {e}")),
        }
    }

    /// The bytes of a WebAssembly module: from its ConfigMap key or its pinned URL.
    pub(crate) async fn wasm_module(&self, hook: &WasmHook) -> Result<Arc<Vec<u8>>, String> {
        match (&hook.config_map_ref, &hook.url) {
            (Some(reference), _) => {
                let object = self.config_map(reference).await?;
                let key = hook.key.as_deref().unwrap_or_default();
                module_from_config_map(&object, reference, key).map(Arc::new)
            }
            (None, Some(url)) => {
                let pinned = hook.sha256.as_deref().unwrap_or_default();
                self.downloads.get(url, pinned).await
            }
            (None, None) => Err("neither configMapRef nor url is set".into()),
        }
    }
}

/// GETs `url` (at most [`MAX_MODULE_BYTES`], within [`DOWNLOAD_TIMEOUT`]).
pub(crate) async fn fetch(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
    let download = async {
        let mut response = client
            .get(url)
            .send()
            .await
            .map_err(|e| format!("downloading {url}: {}", e.without_url()))?;
        if !response.status().is_success() {
            return Err(format!("downloading {url}: status {}", response.status()));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("downloading {url}: {}", e.without_url()))?
        {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > MAX_MODULE_BYTES {
                return Err(format!(
                    "{url}: module larger than {}",
                    crate::quantity::quantity(MAX_MODULE_BYTES)
                ));
            }
        }
        Ok(bytes)
    };
    tokio::time::timeout(DOWNLOAD_TIMEOUT, download)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "downloading {url}: no answer within {DOWNLOAD_TIMEOUT:?}"
            ))
        })
}

/// A module held in ConfigMap key `key`: `binaryData`, else base64 in `data`; gunzipped
/// when it is gzip.
pub(crate) fn module_from_config_map(
    object: &CodeObject,
    reference: &CodeConfigMapReference,
    key: &str,
) -> Result<Vec<u8>, String> {
    let bytes = if let Some(bytes) = object.binary_data.get(key) {
        bytes.clone()
    } else if let Some(text) = object.data.get(key) {
        let compact: String = text.split_whitespace().collect();
        base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map_err(|e| {
                format!(
                    "ConfigMap {}/{} key {key:?}: data is not base64 ({e}); put modules in binaryData",
                    reference.namespace, reference.name
                )
            })?
    } else {
        return Err(format!(
            "ConfigMap {}/{} has no key {key:?}",
            reference.namespace, reference.name
        ));
    };
    gunzip_if_compressed(bytes)
}

/// `bytes` decompressed when they start with the gzip magic, else as they are.
pub(crate) fn gunzip_if_compressed(bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes.as_slice())
        .take(MAX_MODULE_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("bad gzip: {e}"))?;
    if out.len() as u64 > MAX_MODULE_BYTES {
        return Err(format!(
            "module larger than {} after gunzip",
            crate::quantity::quantity(MAX_MODULE_BYTES)
        ));
    }
    Ok(out)
}

/// Checks that the Jsonnet hook's entry key is in its ConfigMap (`data` or `binaryData`).
pub(crate) fn check_jsonnet_entry(
    object: &CodeObject,
    reference: &CodeConfigMapReference,
    entry: &str,
) -> Result<(), String> {
    if object.data.contains_key(entry) || object.binary_data.contains_key(entry) {
        return Ok(());
    }
    Err(format!(
        "ConfigMap {}/{} has no key {entry:?}",
        reference.namespace, reference.name
    ))
}

/// Code by the digest of its source (downloaded modules, compiled modules), within a byte
/// budget: each entry is weighed, and the least recently used go first when a new one
/// does not fit. Keyed by content, so a ConfigMap edited back and forth compiles each
/// version once.
pub(crate) struct CompiledCache<T, K = Digest> {
    budget: u64,
    state: Mutex<CacheState<K, T>>,
    clock: std::sync::atomic::AtomicU64,
}

struct CacheState<K, T> {
    /// Value, weight, last use.
    entries: HashMap<K, (T, u64, u64)>,
    bytes: u64,
}

impl<T: Clone, K: Clone + Eq + std::hash::Hash> CompiledCache<T, K> {
    /// A cache of at most `budget` bytes (by the weights given to [`CompiledCache::insert`]).
    pub(crate) fn new(budget: u64) -> Self {
        Self {
            budget,
            state: Mutex::new(CacheState {
                entries: HashMap::new(),
                bytes: 0,
            }),
            clock: Default::default(),
        }
    }

    pub(crate) fn get(&self, digest: &K) -> Option<T> {
        let tick = self.tick();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let entry = state.entries.get_mut(digest)?;
        entry.2 = tick;
        Some(entry.0.clone())
    }

    /// Keeps `value` (weighing `weight` bytes), dropping the least recently used entries
    /// until it fits; a value heavier than the whole budget is not kept.
    pub(crate) fn insert(&self, digest: K, value: T, weight: u64) {
        if weight > self.budget {
            return;
        }
        let tick = self.tick();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, old, _)) = state.entries.remove(&digest) {
            state.bytes -= old;
        }
        while state.bytes + weight > self.budget {
            let oldest = state
                .entries
                .iter()
                .min_by_key(|(_, (_, _, t))| *t)
                .map(|(d, _)| d.clone());
            let Some(oldest) = oldest else { break };
            if let Some((_, w, _)) = state.entries.remove(&oldest) {
                state.bytes -= w;
            }
        }
        state.bytes += weight;
        state.entries.insert(digest, (value, weight, tick));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.entries.len()
    }

    fn tick(&self) -> u64 {
        self.clock
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

/// The one cache of in-process hook code: module sources (downloads) and compiled modules, by
/// the digest of their source, within one byte budget.
pub(crate) struct CodeCache(CompiledCache<CodeEntry, (Digest, bool)>);

/// An entry of the [`CodeCache`].
#[derive(Clone)]
enum CodeEntry {
    Source(Arc<Vec<u8>>),
    Wasm(crate::wasm::WasmModule),
}

impl CodeCache {
    /// A cache of at most `budget` bytes.
    pub(crate) fn new(budget: u64) -> Self {
        Self(CompiledCache::new(budget))
    }

    /// The verified source of digest `digest`.
    pub(crate) fn source(&self, digest: &Digest) -> Option<Arc<Vec<u8>>> {
        match self.0.get(&(*digest, false))? {
            CodeEntry::Source(bytes) => Some(bytes),
            CodeEntry::Wasm(_) => None,
        }
    }

    /// Keeps a verified source (weighed by its size).
    pub(crate) fn insert_source(&self, digest: Digest, bytes: Arc<Vec<u8>>) {
        let weight = bytes.len() as u64;
        self.0
            .insert((digest, false), CodeEntry::Source(bytes), weight);
    }

    /// The module compiled from the source of digest `digest`.
    pub(crate) fn wasm(&self, digest: &Digest) -> Option<crate::wasm::WasmModule> {
        match self.0.get(&(*digest, true))? {
            CodeEntry::Wasm(module) => Some(module),
            CodeEntry::Source(_) => None,
        }
    }

    /// Keeps a compiled module weighing `weight` bytes.
    pub(crate) fn insert_wasm(&self, digest: Digest, module: crate::wasm::WasmModule, weight: u64) {
        self.0
            .insert((digest, true), CodeEntry::Wasm(module), weight);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn reference() -> CodeConfigMapReference {
        CodeConfigMapReference {
            namespace: "hooks".into(),
            name: "code".into(),
        }
    }

    #[test]
    fn modules_come_from_binary_data_or_base64_data_gzipped_or_not() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"\0asm-module").unwrap();
        let gzipped = gz.finish().unwrap();
        let mut object = CodeObject::default();
        object
            .binary_data
            .insert("raw".into(), b"\0asm-raw".to_vec());
        object.binary_data.insert("gz".into(), gzipped.clone());
        object.data.insert(
            "b64".into(),
            base64::engine::general_purpose::STANDARD.encode(&gzipped),
        );
        object.data.insert("junk".into(), "not base64!".into());
        let r = reference();
        assert_eq!(
            module_from_config_map(&object, &r, "raw").unwrap(),
            b"\0asm-raw"
        );
        assert_eq!(
            module_from_config_map(&object, &r, "gz").unwrap(),
            b"\0asm-module"
        );
        assert_eq!(
            module_from_config_map(&object, &r, "b64").unwrap(),
            b"\0asm-module"
        );
        let err = module_from_config_map(&object, &r, "junk").unwrap_err();
        assert!(err.contains("not base64"), "{err}");
        let err = module_from_config_map(&object, &r, "missing").unwrap_err();
        assert!(err.contains("has no key \"missing\""), "{err}");
    }

    #[test]
    fn bad_gzip_is_an_error() {
        let err = gunzip_if_compressed(vec![0x1f, 0x8b, 1, 2, 3]).unwrap_err();
        assert!(err.contains("bad gzip"), "{err}");
    }

    #[test]
    fn the_cache_drops_the_least_recently_used_to_stay_in_its_budget() {
        let cache = CompiledCache::new(100);
        cache.insert([1; 32], "one", 40);
        cache.insert([2; 32], "two", 40);
        assert_eq!(cache.get(&[1; 32]), Some("one"));
        cache.insert([3; 32], "three", 40);
        assert_eq!(cache.get(&[2; 32]), None);
        assert_eq!(cache.get(&[1; 32]), Some("one"));
        assert_eq!(cache.len(), 2);
        cache.insert([4; 32], "huge", 101);
        assert_eq!(
            cache.get(&[4; 32]),
            None,
            "heavier than the budget: not kept"
        );
        cache.insert([5; 32], "big", 100);
        assert_eq!(cache.len(), 1, "room made for it");
    }
}
