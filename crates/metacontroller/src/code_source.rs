//! The ConfigMaps holding in-process hook code (`jsonnet`, `wasm` with `configMapRef`),
//! served from one watch per referenced ConfigMap (a field selector on its name), so a
//! hook call reads no API and a new version of the code is announced within a second or
//! two. RBAC: `list` and `watch` on `configmaps` in the namespaces referenced (in a
//! namespaced install, only the watched namespaces are granted).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher;
use kube::{Api, Client};
use metacontroller_hooks::{CodeChange, CodeObject, CodeSource, SourceError};
use tokio::sync::{broadcast, watch};

/// How long a first call waits for the ConfigMap's watch to deliver it.
const FIRST_READ_WAIT: Duration = Duration::from_secs(10);

/// What the watch of one ConfigMap knows.
#[derive(Debug, Clone)]
enum Known {
    /// Not listed yet.
    Pending,
    Present(Arc<CodeObject>),
    Absent,
    /// Listing failed before it ever succeeded (e.g. forbidden).
    Failed(String),
}

/// The watch of one ConfigMap.
struct Watched {
    known: watch::Receiver<Known>,
    /// Controllers' hooks that use it ([`CodeSource::watch`] minus [`CodeSource::unwatch`]).
    users: usize,
    task: tokio::task::JoinHandle<()>,
}

/// Watches referenced ConfigMaps and serves them to the hook client.
pub struct WatchedConfigMaps {
    client: Client,
    supervisor: Option<metacontroller_dynamic::Supervisor>,
    watches: Mutex<HashMap<(String, String), Watched>>,
    changes: broadcast::Sender<CodeChange>,
    /// Shared by the ConfigMap watches (see `metacontroller_dynamic::ReconnectProbe`).
    reconnect: metacontroller_dynamic::ReconnectProbe,
}

impl WatchedConfigMaps {
    /// Watches through `client`; watch tasks run under `supervisor` when given.
    pub fn new(client: Client, supervisor: Option<metacontroller_dynamic::Supervisor>) -> Self {
        Self {
            reconnect: metacontroller_dynamic::ReconnectProbe::new(client.clone()),
            client,
            supervisor,
            watches: Mutex::new(HashMap::new()),
            changes: broadcast::channel(256).0,
        }
    }

    /// The watch of `namespace/name`, started on first use; `users` more of it counted.
    fn known(&self, namespace: &str, name: &str, users: usize) -> watch::Receiver<Known> {
        let key = (namespace.to_owned(), name.to_owned());
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(watched) = watches.get_mut(&key) {
            watched.users += users;
            return watched.known.clone();
        }
        let (tx, rx) = watch::channel(Known::Pending);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let change = CodeChange {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            keys: None,
        };
        let reconnect = self.reconnect.clone();
        let stopping = self.supervisor.clone();
        let task = follow(api, change, tx, self.changes.clone(), reconnect, stopping);
        let label = format!("hook code ConfigMap {namespace}/{name}");
        // Aborting the task (when the last user goes) ends it without a report.
        let task =
            metacontroller_dynamic::Supervisor::spawn_with(self.supervisor.as_ref(), label, task);
        watches.insert(
            key,
            Watched {
                known: rx.clone(),
                users,
                task,
            },
        );
        rx
    }
}

#[async_trait]
impl CodeSource for WatchedConfigMaps {
    async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<CodeObject>>, SourceError> {
        let mut known = self.known(namespace, name, 0);
        let listed = tokio::time::timeout(
            FIRST_READ_WAIT,
            known.wait_for(|k| !matches!(k, Known::Pending)),
        )
        .await;
        let state = match listed {
            Ok(Ok(state)) => state.clone(),
            _ => {
                return Err(SourceError(format!(
                    "ConfigMap {namespace}/{name}: its watch has not listed it within {FIRST_READ_WAIT:?}"
                )))
            }
        };
        match state {
            Known::Present(object) => Ok(Some(object)),
            Known::Absent => Ok(None),
            Known::Failed(message) => Err(SourceError(message)),
            Known::Pending => Ok(None),
        }
    }

    fn watch(&self, namespace: &str, name: &str) {
        let _ = self.known(namespace, name, 1);
    }

    fn unwatch(&self, namespace: &str, name: &str) {
        let key = (namespace.to_owned(), name.to_owned());
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        let Some(watched) = watches.get_mut(&key) else {
            return;
        };
        watched.users = watched.users.saturating_sub(1);
        if watched.users == 0 {
            if let Some(watched) = watches.remove(&key) {
                watched.task.abort();
            }
            tracing::info!(%namespace, %name, "no controller uses this hook code ConfigMap any more; stopped watching it");
        }
    }

    fn changes(&self) -> broadcast::Receiver<CodeChange> {
        self.changes.subscribe()
    }
}

/// Follows one ConfigMap until the process ends: every new version (or its deletion) is
/// published on `known` and announced on `changes` — except the first listing, which
/// changes nothing a sync has seen. Ends quietly at the first error after shutdown began
/// (`supervisor` stopping): the API server going away then is expected, not worth a WARN.
async fn follow(
    api: Api<ConfigMap>,
    change: CodeChange,
    known: watch::Sender<Known>,
    changes: broadcast::Sender<CodeChange>,
    reconnect: metacontroller_dynamic::ReconnectProbe,
    supervisor: Option<metacontroller_dynamic::Supervisor>,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={}", change.name));
    let stream = reconnect.with_backoff(watcher(api, config).boxed());
    let mut stream = std::pin::pin!(stream);
    let mut listing: Option<ConfigMap> = None;
    while let Some(event) = stream.next().await {
        let seen = match event {
            Ok(watcher::Event::Init) => {
                listing = None;
                continue;
            }
            Ok(watcher::Event::InitApply(cm)) => {
                listing = Some(cm);
                continue;
            }
            Ok(watcher::Event::InitDone) => listing.take().map(code_object),
            Ok(watcher::Event::Apply(cm)) => Some(code_object(cm)),
            Ok(watcher::Event::Delete(_)) => None,
            Err(_) if supervisor.as_ref().is_some_and(|s| s.is_stopping()) => return,
            Err(error) => {
                tracing::warn!(namespace = %change.namespace, name = %change.name, %error, "watching a hook code ConfigMap");
                known.send_if_modified(|k| match k {
                    Known::Pending | Known::Failed(_) => {
                        *k = Known::Failed(format!(
                            "reading ConfigMap {}/{}: {error}",
                            change.namespace, change.name
                        ));
                        true
                    }
                    _ => false,
                });
                continue;
            }
        };
        publish(&known, &changes, &change, seen);
    }
}

/// Publishes what the watch saw; announces it when it differs from what was served.
fn publish(
    known: &watch::Sender<Known>,
    changes: &broadcast::Sender<CodeChange>,
    change: &CodeChange,
    seen: Option<CodeObject>,
) {
    let mut announce = false;
    let mut keys = None;
    known.send_if_modified(|current| {
        let next = match seen {
            Some(object) => Known::Present(Arc::new(object)),
            None => Known::Absent,
        };
        let same = match (&*current, &next) {
            (Known::Present(a), Known::Present(b)) => a == b,
            (Known::Absent, Known::Absent) => true,
            _ => false,
        };
        if same {
            return false;
        }
        announce = !matches!(current, Known::Pending);
        if let (Known::Present(old), Known::Present(new)) = (&*current, &next) {
            keys = Some(metacontroller_hooks::changed_keys(old, new));
        }
        *current = next;
        true
    });
    if announce {
        tracing::info!(namespace = %change.namespace, name = %change.name, keys = ?keys, "hook code changed");
        let _ = changes.send(CodeChange {
            keys,
            ..change.clone()
        });
    }
}

pub(crate) fn code_object(cm: ConfigMap) -> CodeObject {
    CodeObject {
        data: cm.data.unwrap_or_default(),
        binary_data: cm
            .binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(key, value)| (key, value.0))
            .collect(),
    }
}
