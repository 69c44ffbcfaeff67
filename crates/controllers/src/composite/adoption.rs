//! Claiming a parent's children: owned ones kept, matching orphans adopted (after re-reading
//! parent and orphan from the API server), owned ones that stopped matching released.

use metacontroller_dynamic::{ApiResource, ObjectMetaAccess, Selector};
use serde_json::Value;

use super::reconciler::{Inner, ParentState};
use super::SyncError;
use crate::children;
use crate::claim::{self, Claim, Claimant};
use crate::meta::is_deleting;
use crate::reconcile::Reconciler;
use crate::writer::to_value;

impl Inner {
    /// The parent's children after orphaning and adoption: owned children (from the cache,
    /// owned-writes overlay applied) plus matching orphans adopted now.
    pub(super) async fn claim_children(
        &self,
        parent: &ParentState,
        selector: &Selector,
    ) -> Result<Vec<Value>, SyncError> {
        let claimant = Claimant {
            uid: &parent.uid,
            namespace: parent.namespace.as_deref(),
            deleting: is_deleting(&parent.object),
            selector,
        };
        let mut claimed = Vec::new();
        let mut can_adopt: Option<bool> = None;
        for c in &self.children {
            let orphan_scope = parent
                .namespace
                .as_deref()
                .filter(|_| c.resource.namespaced);
            let orphans = if claimant.deleting {
                Vec::new()
            } else if !c.resource.namespaced && parent.namespace.is_some() {
                // A namespaced parent cannot own cluster-scoped objects.
                Vec::new()
            } else {
                c.informer.orphans(orphan_scope)
            };
            let candidates = c
                .informer
                .controlled_by(&parent.uid)
                .into_iter()
                .chain(orphans);
            let empty = Default::default();
            for obj in candidates {
                // Most orphans (e.g. every namespace's kube-root-ca.crt) do not match: skip
                // them before converting anything.
                if obj.controller_uid().is_none()
                    && !selector.matches(obj.metadata.labels.as_ref().unwrap_or(&empty))
                {
                    continue;
                }
                let value = to_value(&obj, &c.resource)?;
                let Some(value) = self.common.writer.fresh(&c.resource, value) else {
                    continue;
                };
                match claim::classify(&claimant, &value) {
                    Claim::Owned => claimed.push(value),
                    Claim::Ignore => {}
                    Claim::Release => self.release(&c.resource, &parent.uid, &value).await?,
                    Claim::Adopt => {
                        if can_adopt.is_none() {
                            can_adopt = Some(self.can_adopt(parent).await?);
                        }
                        if can_adopt == Some(true) {
                            if let Some(adopted) =
                                self.adopt(&c.resource, parent, &claimant, &value).await?
                            {
                                claimed.push(adopted);
                            }
                        }
                    }
                }
            }
        }
        Ok(claimed)
    }

    /// Re-reads the parent from the API server: adopt only if it still exists with the same
    /// uid and is not being deleted.
    async fn can_adopt(&self, parent: &ParentState) -> Result<bool, SyncError> {
        let fresh = self
            .common
            .writer
            .get(
                &self.parent_resource,
                parent.namespace.as_deref().unwrap_or_default(),
                &parent.key.name,
            )
            .await?;
        Ok(fresh.is_some_and(|p| p.uid() == Some(parent.uid.as_str()) && !is_deleting(&p)))
    }

    /// Adopts an orphan after re-reading it from the API server (the cache may be stale).
    async fn adopt(
        &self,
        res: &ApiResource,
        parent: &ParentState,
        claimant: &Claimant<'_>,
        cached: &Value,
    ) -> Result<Option<Value>, SyncError> {
        let ns = cached.namespace().unwrap_or_default();
        let name = cached.name().unwrap_or_default();
        let Some(fresh) = self.common.writer.get(res, ns, name).await? else {
            return Ok(None);
        };
        if claim::classify(claimant, &fresh) != Claim::Adopt {
            return Ok(None);
        }
        tracing::info!(controller = self.name(), parent = %parent.key, kind = %res.kind, %ns, %name, "adopting");
        let mut updated = fresh;
        children::set_controller_ref(&mut updated, &self.parent_ref(parent));
        match self.common.writer.replace(res, updated).await {
            Ok(adopted) => Ok(Some(adopted)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes our ownerReference from a child that no longer matches the selector.
    async fn release(&self, res: &ApiResource, uid: &str, cached: &Value) -> Result<(), SyncError> {
        let ns = cached.namespace().unwrap_or_default();
        let name = cached.name().unwrap_or_default();
        tracing::info!(controller = self.name(), kind = %res.kind, %ns, %name, "releasing");
        let Some(mut fresh) = self.common.writer.get(res, ns, name).await? else {
            return Ok(());
        };
        if !claim::remove_owner(&mut fresh, uid) {
            return Ok(());
        }
        match self.common.writer.replace(res, fresh).await {
            Err(e) if e.is_not_found() => Ok(()),
            r => r.map(drop).map_err(Into::into),
        }
    }
}
