//! Where an in-process hook's code comes from, as bytes: a ConfigMap key (Jsonnet: the
//! ConfigMap's keys as files; WebAssembly: `binaryData`, or base64 in `data`, gzip accepted)
//! or a URL pinned by SHA-256. Downloads are kept by digest, so a module is fetched once.

use std::collections::HashMap;
use std::io::Read as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use metacontroller_api::hook::{CodeConfigMapReference, WasmHook};

use crate::sources::{CodeObject, CodeSource};

/// The largest module accepted, downloaded or after gunzip (a gzip bomb stops here).
pub const MAX_MODULE_BYTES: u64 = 64 * 1024 * 1024;
/// How long a module download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Downloaded modules kept (by digest); older ones are dropped first.
const MAX_DOWNLOADS: usize = 16;

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
    downloads: Mutex<Vec<(Digest, Arc<Vec<u8>>)>>,
    http: Mutex<Option<reqwest::Client>>,
}

impl CodeLoader {
    pub(crate) fn new(source: Option<Arc<dyn CodeSource>>) -> Self {
        Self {
            source,
            downloads: Mutex::new(Vec::new()),
            http: Mutex::new(None),
        }
    }

    /// The ConfigMap `reference`, or why it can't be had.
    pub(crate) async fn config_map(
        &self,
        reference: &CodeConfigMapReference,
    ) -> Result<Arc<CodeObject>, String> {
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
                self.download(url, pinned).await
            }
            (None, None) => Err("neither configMapRef nor url is set".into()),
        }
    }

    /// The module at `url`, which must hash to `pinned` (hex); kept once verified.
    async fn download(&self, url: &str, pinned: &str) -> Result<Arc<Vec<u8>>, String> {
        let wanted = pinned.to_ascii_lowercase();
        if let Some(bytes) = self.downloaded(&wanted) {
            return Ok(bytes);
        }
        let client = self.http_client()?;
        let bytes = fetch(&client, url).await?;
        let digest = sha256(&bytes);
        if hex(&digest) != wanted {
            return Err(format!(
                "the module at {url} has sha256 {}, not the pinned {wanted}",
                hex(&digest)
            ));
        }
        let bytes = Arc::new(gunzip_if_compressed(bytes)?);
        let mut downloads = self.downloads.lock().unwrap_or_else(|e| e.into_inner());
        if downloads.len() >= MAX_DOWNLOADS {
            downloads.remove(0);
        }
        downloads.push((digest, bytes.clone()));
        Ok(bytes)
    }

    fn downloaded(&self, wanted_hex: &str) -> Option<Arc<Vec<u8>>> {
        let downloads = self.downloads.lock().unwrap_or_else(|e| e.into_inner());
        downloads
            .iter()
            .find(|(digest, _)| hex(digest) == wanted_hex)
            .map(|(_, bytes)| bytes.clone())
    }

    fn http_client(&self) -> Result<reqwest::Client, String> {
        let mut http = self.http.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = http.as_ref() {
            return Ok(client.clone());
        }
        let client = crate::pool::plain_client().map_err(|e| e.to_string())?;
        *http = Some(client.clone());
        Ok(client)
    }
}

/// GETs `url` (at most [`MAX_MODULE_BYTES`], within [`DOWNLOAD_TIMEOUT`]).
async fn fetch(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
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

/// Compiled artefacts by the digest of their source, at most `capacity`, least recently
/// used dropped first. Keyed by content, so a ConfigMap edited back and forth compiles
/// each version once.
pub(crate) struct CompiledCache<T> {
    capacity: usize,
    entries: Mutex<HashMap<Digest, (T, u64)>>,
    clock: std::sync::atomic::AtomicU64,
}

impl<T: Clone> CompiledCache<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(HashMap::new()),
            clock: Default::default(),
        }
    }

    pub(crate) fn get(&self, digest: &Digest) -> Option<T> {
        let tick = self.tick();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let entry = entries.get_mut(digest)?;
        entry.1 = tick;
        Some(entry.0.clone())
    }

    pub(crate) fn insert(&self, digest: Digest, value: T) {
        let tick = self.tick();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(&digest) {
            let oldest = entries.iter().min_by_key(|(_, (_, t))| *t).map(|(d, _)| *d);
            if let Some(oldest) = oldest {
                entries.remove(&oldest);
            }
        }
        entries.insert(digest, (value, tick));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn tick(&self) -> u64 {
        self.clock
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
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
    fn the_cache_drops_the_least_recently_used() {
        let cache = CompiledCache::new(2);
        cache.insert([1; 32], "one");
        cache.insert([2; 32], "two");
        assert_eq!(cache.get(&[1; 32]), Some("one"));
        cache.insert([3; 32], "three");
        assert_eq!(cache.get(&[2; 32]), None);
        assert_eq!(cache.get(&[1; 32]), Some("one"));
        assert_eq!(cache.len(), 2);
    }
}
