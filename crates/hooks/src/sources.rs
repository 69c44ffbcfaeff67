//! Where Secret and ConfigMap data comes from. The runtime implements these traits over its
//! informer cache; tests and dev mode use [`MemoryObjects`]. The client asks on every call,
//! so a rotated certificate or token takes effect on the next call without a restart.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use tokio::sync::broadcast;

/// The `data` of a Secret or ConfigMap (ConfigMap `data` and `binaryData` merged), as bytes.
pub type ObjectData = BTreeMap<String, Vec<u8>>;

/// A failure to read an object (not "not found", which is `Ok(None)`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SourceError(pub String);

/// Reads Secrets.
#[async_trait]
pub trait SecretSource: Send + Sync {
    /// The data of Secret `namespace/name`, `Ok(None)` when it does not exist.
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<ObjectData>, SourceError>;
}

/// Reads ConfigMaps.
#[async_trait]
pub trait ConfigMapSource: Send + Sync {
    /// The data of ConfigMap `namespace/name`, `Ok(None)` when it does not exist.
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<ObjectData>, SourceError>;
}

/// A ConfigMap holding in-process hook code, as read from the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodeObject {
    /// `data`: text keys (Jsonnet files; base64 of a module).
    pub data: BTreeMap<String, String>,
    /// `binaryData`: byte keys (WebAssembly modules, gzip).
    pub binary_data: BTreeMap<String, Vec<u8>>,
}

impl CodeObject {
    /// A code object of text keys only: each `(key, text)` of `files` (Jsonnet files).
    pub fn from_text(files: &[(&str, &str)]) -> Self {
        CodeObject {
            data: files
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..CodeObject::default()
        }
    }
}

/// A ConfigMap holding hook code changed (or appeared, or went away).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CodeChange {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The keys whose value changed (added, changed or removed, in `data` or `binaryData`);
    /// `None` when the ConfigMap as a whole appeared or went away, or it is not known: then
    /// every key counts as changed.
    pub keys: Option<BTreeSet<String>>,
}

impl CodeChange {
    /// Whether this is a change of ConfigMap `namespace/name`.
    pub fn is_of(&self, namespace: &str, name: &str) -> bool {
        self.namespace == namespace && self.name == name
    }

    /// Whether `key` may have changed.
    pub fn touches(&self, key: &str) -> bool {
        self.keys.as_ref().is_none_or(|keys| keys.contains(key))
    }
}

/// The keys whose value differs between `old` and `new` (`data` and `binaryData`).
pub fn changed_keys(old: &CodeObject, new: &CodeObject) -> BTreeSet<String> {
    fn diff<V: PartialEq>(
        a: &BTreeMap<String, V>,
        b: &BTreeMap<String, V>,
        out: &mut BTreeSet<String>,
    ) {
        for (key, value) in a {
            if b.get(key) != Some(value) {
                out.insert(key.clone());
            }
        }
        for key in b.keys() {
            if !a.contains_key(key) {
                out.insert(key.clone());
            }
        }
    }
    let mut keys = BTreeSet::new();
    diff(&old.data, &new.data, &mut keys);
    diff(&old.binary_data, &new.binary_data, &mut keys);
    keys
}

/// Reads the ConfigMaps that hold in-process hook code and tells when they change. The
/// runtime serves them from a watch per referenced ConfigMap, so a call costs no request and
/// a new version of the code reaches every parent of its controllers within seconds.
#[async_trait]
pub trait CodeSource: Send + Sync {
    /// ConfigMap `namespace/name`, `Ok(None)` when it does not exist.
    async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<CodeObject>>, SourceError>;
    /// Starts watching `namespace/name` ahead of the first call (so changes are seen
    /// before any call asks); the default does nothing.
    fn watch(&self, _namespace: &str, _name: &str) {}
    /// Ends one [`CodeSource::watch`] of `namespace/name` (a controller using it went);
    /// the watch stops when the last one ends. The default does nothing.
    fn unwatch(&self, _namespace: &str, _name: &str) {}
    /// Changes of the ConfigMaps read or watched so far.
    fn changes(&self) -> broadcast::Receiver<CodeChange>;
}

/// An in-memory [`CodeSource`] (tests, `render`): ConfigMaps set here are served as they
/// are, and each [`MemoryCode::set`] or [`MemoryCode::remove`] announces a change.
pub struct MemoryCode {
    objects: RwLock<HashMap<(String, String), Arc<CodeObject>>>,
    changes: broadcast::Sender<CodeChange>,
}

impl Default for MemoryCode {
    fn default() -> Self {
        Self {
            objects: RwLock::default(),
            changes: broadcast::channel(64).0,
        }
    }
}

impl std::fmt::Debug for MemoryCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("MemoryCode")
            .field("objects", &objects.len())
            .finish()
    }
}

impl MemoryCode {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates or replaces ConfigMap `namespace/name`.
    pub fn set(&self, namespace: &str, name: &str, object: CodeObject) {
        let key = (namespace.to_owned(), name.to_owned());
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        let keys = objects.get(&key).map(|old| changed_keys(old, &object));
        objects.insert(key, Arc::new(object));
        drop(objects);
        self.announce(namespace, name, keys);
    }

    /// Deletes ConfigMap `namespace/name`.
    pub fn remove(&self, namespace: &str, name: &str) {
        let key = (namespace.to_owned(), name.to_owned());
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        objects.remove(&key);
        drop(objects);
        self.announce(namespace, name, None);
    }

    fn announce(&self, namespace: &str, name: &str, keys: Option<BTreeSet<String>>) {
        // No receiver is fine: nobody is interested yet.
        let _ = self.changes.send(CodeChange {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            keys,
        });
    }
}

#[async_trait]
impl CodeSource for MemoryCode {
    async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<CodeObject>>, SourceError> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        Ok(objects
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned())
    }

    fn changes(&self) -> broadcast::Receiver<CodeChange> {
        self.changes.subscribe()
    }
}

/// An in-memory object store implementing both traits; objects can be changed while the
/// client uses it (the next call sees the change).
#[derive(Default)]
pub struct MemoryObjects {
    objects: RwLock<HashMap<(String, String), ObjectData>>,
}

impl std::fmt::Debug for MemoryObjects {
    // Only names: the data may be credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = objects.keys().map(|(ns, n)| format!("{ns}/{n}")).collect();
        names.sort();
        f.debug_struct("MemoryObjects")
            .field("objects", &names)
            .finish()
    }
}

impl MemoryObjects {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates or replaces `namespace/name` with the given key/value pairs.
    pub fn set<K, V, I>(&self, namespace: &str, name: &str, data: I)
    where
        K: Into<String>,
        V: Into<Vec<u8>>,
        I: IntoIterator<Item = (K, V)>,
    {
        let data = data
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        objects.insert((namespace.to_owned(), name.to_owned()), data);
    }

    /// Deletes `namespace/name`.
    pub fn remove(&self, namespace: &str, name: &str) {
        let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
        objects.remove(&(namespace.to_owned(), name.to_owned()));
    }

    fn lookup(&self, namespace: &str, name: &str) -> Option<ObjectData> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }
}

#[async_trait]
impl SecretSource for MemoryObjects {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<ObjectData>, SourceError> {
        Ok(self.lookup(namespace, name))
    }
}

#[async_trait]
impl ConfigMapSource for MemoryObjects {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<ObjectData>, SourceError> {
        Ok(self.lookup(namespace, name))
    }
}
