//! Children elsewhere of parents whose CompositeController is gone (extension
//! `childResources[].namespaces`). Such a parent carries
//! `children-elsewhere.metacontroller.io/compositecontroller-<name>`; once the controller
//! object is deleted nothing would remove it, and the parent's label-tracked children (no
//! ownerReference, so the garbage collector ignores them) would outlive a deleted parent.
//! The stranded-finalizer sweep ([`crate::stranded`]) removes that finalizer like the
//! controller's own; on a parent being deleted (not with `propagationPolicy: Orphan`) it
//! first deletes the parent's children elsewhere, as the controller would have.
//!
//! The children are found by the parent-uid label, selected by the API server: one list per
//! resource with `labelSelector=metacontroller.k8s.io/parent-uid` (the key's existence),
//! done once per sweep and only when a stranded parent needs it, so objects without the
//! label (50,000 unrelated ConfigMaps) are never sent.

use std::collections::HashMap;
use std::sync::Arc;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::Client;
use metacontroller_dynamic::{ApiResource, ResourceMap, PARENT_UID_LABEL};

/// Finalizer prefix of namespaced parents with children elsewhere.
pub(crate) const ELSEWHERE_PREFIX: &str =
    "children-elsewhere.metacontroller.io/compositecontroller-";

/// The finalizer Kubernetes puts on an object deleted with `propagationPolicy: Orphan`.
const ORPHAN_FINALIZER: &str = "orphan";

/// Page size of the label-selected lists.
const PAGE: u32 = 500;

/// One label-tracked child: its resource, namespace (cluster-scoped: `None`) and name.
type Tracked = (Arc<ApiResource>, Option<String>, String);

/// Label-tracked children by parent uid, listed on first use.
#[derive(Default)]
pub(crate) struct ChildrenElsewhere {
    by_parent: Option<HashMap<String, Vec<Tracked>>>,
}

impl ChildrenElsewhere {
    /// Before `stranded` finalizers leave `parent`: deletes its children elsewhere when one
    /// of them is the children-elsewhere finalizer and the parent is being deleted without
    /// Orphan. `Err` (logged by the caller) keeps the finalizer for a later sweep.
    pub async fn before_removal(
        &mut self,
        client: &Client,
        namespaces: &[String],
        parent: &DynamicObject,
        stranded: &[String],
    ) -> Result<usize, String> {
        let meta = &parent.metadata;
        let finalizers = meta.finalizers.as_deref().unwrap_or_default();
        let applies = stranded.iter().any(|f| f.starts_with(ELSEWHERE_PREFIX))
            && meta.deletion_timestamp.is_some()
            && !finalizers.iter().any(|f| f == ORPHAN_FINALIZER);
        let (true, Some(uid)) = (applies, meta.uid.as_deref()) else {
            return Ok(0);
        };
        if self.by_parent.is_none() {
            self.by_parent = Some(list_tracked(client, namespaces).await?);
        }
        let children = self
            .by_parent
            .as_mut()
            .and_then(|m| m.remove(uid))
            .unwrap_or_default();
        let mut deleted = 0;
        for (resource, namespace, name) in children {
            let ar = resource.to_kube();
            let api: Api<DynamicObject> = match &namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
                None => Api::all_with(client.clone(), &ar),
            };
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => deleted += 1,
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(format!("deleting {} {name}: {e}", resource.kind)),
            }
            tracing::info!(parent = ?meta.name, parent_namespace = ?meta.namespace, kind = %resource.kind,
                namespace = ?namespace, %name, "stranded finalizers: deleted a child elsewhere of a deleted parent");
        }
        Ok(deleted)
    }
}

/// Every object carrying the parent-uid label, by that label's value: one server-side
/// label-selected list per resource that can be listed and deleted (within `namespaces`
/// when the process is limited to some).
async fn list_tracked(
    client: &Client,
    namespaces: &[String],
) -> Result<HashMap<String, Vec<Tracked>>, String> {
    let map = ResourceMap::discover(client, &ResourceMap::default())
        .await
        .map_err(|e| format!("discovery: {e}"))?
        .update
        .unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    let mut out: HashMap<String, Vec<Tracked>> = HashMap::new();
    for resource in map.iter() {
        let usable = resource.verbs.contains("list") && resource.verbs.contains("delete");
        if !usable || !seen.insert((resource.group.clone(), resource.name.clone())) {
            continue;
        }
        for api in apis(client, resource, namespaces) {
            list_one(&api, resource, &mut out).await?;
        }
    }
    Ok(out)
}

/// One `Api` per watched namespace, or one for all (none for a cluster-scoped resource
/// when the process is limited to namespaces).
fn apis(client: &Client, resource: &ApiResource, namespaces: &[String]) -> Vec<Api<DynamicObject>> {
    let ar = resource.to_kube();
    if namespaces.is_empty() {
        return vec![Api::all_with(client.clone(), &ar)];
    }
    if !resource.namespaced {
        return Vec::new();
    }
    namespaces
        .iter()
        .map(|ns| Api::namespaced_with(client.clone(), ns, &ar))
        .collect()
}

async fn list_one(
    api: &Api<DynamicObject>,
    resource: &Arc<ApiResource>,
    out: &mut HashMap<String, Vec<Tracked>>,
) -> Result<(), String> {
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().labels(PARENT_UID_LABEL).limit(PAGE);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = match api.list(&lp).await {
            Ok(page) => page,
            // Not ours to read (403) or gone meanwhile: nothing of it can be cleaned here.
            Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 || e.code == 405 => {
                return Ok(())
            }
            Err(e) => return Err(format!("listing {} by label: {e}", resource.name)),
        };
        for item in page.items {
            let uid = item
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(PARENT_UID_LABEL));
            if let (Some(uid), Some(name)) = (uid, item.metadata.name.clone()) {
                out.entry(uid.clone()).or_default().push((
                    resource.clone(),
                    item.metadata.namespace.clone(),
                    name,
                ));
            }
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok(());
        }
    }
}
