//! Where Secret and ConfigMap data comes from. The runtime implements these traits over its
//! informer cache; tests and dev mode use [`MemoryObjects`]. The client asks on every call,
//! so a rotated certificate or token takes effect on the next call without a restart.

use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;

use async_trait::async_trait;

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
