//! Extension (children elsewhere under `--watch-namespaces`): a namespaced install sees only
//! its namespaces, so a desired child in another namespace (or of a cluster-scoped type it
//! cannot watch) would be written and then never seen: no cache entry, no update, no
//! cleanup. Such a child is refused on its own instead (log line, and the sync's Warning
//! Event names it with the watched namespaces); the parent's other children are written.

use super::plan::HookOutcome;
use super::reconciler::{Inner, ParentState};
use crate::children::{ChildError, ChildKey};
use crate::reconcile::Reconciler;

impl Inner {
    /// Moves the desired children this process cannot watch from `outcome.desired` to
    /// `outcome.refused`.
    pub(super) fn refuse_unwatched(&self, parent: &ParentState, outcome: &mut HookOutcome) {
        let Some(scope) = self.common.informers.scope() else {
            return;
        };
        let unwatched: Vec<ChildKey> = outcome
            .desired
            .iter()
            .filter(|(key, (type_index, _))| {
                self.children
                    .get(*type_index)
                    .is_some_and(|c| !scope.reaches(&c.resource, &key.2))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in unwatched {
            outcome.desired.remove(&key);
            let (_, kind, namespace, name) = key;
            let name = if namespace.is_empty() {
                name
            } else {
                format!("{namespace}/{name}")
            };
            tracing::warn!(controller = self.name(), parent = %parent.key, %kind, child = %name,
                watched = %scope, "child not written: outside the watched namespaces");
            outcome.refused.push(ChildError::Unwatched {
                kind,
                name,
                namespaces: scope.to_string(),
            });
        }
    }
}
