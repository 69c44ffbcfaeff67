//! In-process hook code kept in ConfigMaps: which ones a controller's hooks read, and a
//! resync of every parent when code they use changes.

use std::hash::Hash;
use std::sync::Arc;

use metacontroller_api::hook::Hook;
use metacontroller_hooks::{CodeChange, HookClient};
use metacontroller_workqueue::Priority;

use super::{Common, Reconciler};

/// The ConfigMaps holding the code of `hooks` (in-process hooks), each watched from now on
/// so a change is seen before the next call.
pub(super) fn code_config_maps(hooks: &[Hook], client: &HookClient) -> Vec<CodeChange> {
    let mut maps: Vec<CodeChange> = Vec::new();
    for hook in hooks {
        client.watch_code(hook);
        if let Some(reference) = metacontroller_hooks::code_config_map(hook) {
            let map = CodeChange {
                namespace: reference.namespace.clone(),
                name: reference.name.clone(),
                keys: None,
            };
            if !maps.contains(&map) {
                maps.push(map);
            }
        }
    }
    maps
}

/// Queues every object the controller cares about whenever a key its hooks use (WebAssembly:
/// the module's key; Jsonnet: the entry and the files it imports) changes in a ConfigMap
/// holding its hook code (a missed notification counts as a change), so the new code reaches
/// every parent within seconds; a change of other keys resyncs nothing. Never ends for a
/// controller without such ConfigMaps.
pub(super) async fn resync_on_code_changes<R: Reconciler>(reconciler: Arc<R>) {
    use tokio::sync::broadcast::error::RecvError;
    let common = reconciler.common();
    let changes = match common.hooks.code_changes() {
        Some(changes) if !common.code.is_empty() => changes,
        _ => return std::future::pending().await,
    };
    let mut changes = changes;
    loop {
        let changed = match changes.recv().await {
            Ok(change) => code_change_affects(common, &change).await,
            Err(RecvError::Lagged(_)) => true,
            Err(RecvError::Closed) => return std::future::pending().await,
        };
        if changed {
            let keys: Vec<R::Key> = reconciler
                .cached_keys()
                .into_iter()
                .filter(|key| reconciler.object(key).is_some_and(|o| reconciler.cares(&o)))
                .collect();
            tracing::info!(controller = %common.name, objects = keys.len(), "hook code changed; resyncing");
            for key in keys {
                common.queue.add(key, Priority::Event);
            }
        }
    }
}

/// Whether `change` touches code a hook of the controller runs (logged when it is one of
/// the controller's ConfigMaps but none of the keys its hooks use).
async fn code_change_affects<K>(common: &Common<K>, change: &CodeChange) -> bool
where
    K: Clone + Eq + Hash + Send + 'static,
{
    if !common
        .code
        .iter()
        .any(|map| change.is_of(&map.namespace, &map.name))
    {
        return false;
    }
    for hook in &common.code_hooks {
        if common.hooks.code_change_affects(hook, change).await {
            return true;
        }
    }
    tracing::info!(controller = %common.name, namespace = %change.namespace, name = %change.name, keys = ?change.keys, "hook code ConfigMap changed in keys this controller does not use; not resyncing");
    false
}
