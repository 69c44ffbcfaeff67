//! Finalizers of controller objects that are gone (upstream #1062).
//!
//! A CompositeController's parents carry `metacontroller.io/compositecontroller-<name>` and a
//! DecoratorController's targets `metacontroller.io/decoratorcontroller-<name>` while a
//! finalize hook is configured. Once the controller object is deleted nothing would remove
//! them, and deleting such an object would hang for good. This module removes them:
//!
//! - when this process sees a controller object deleted (watch event, or a relist that no
//!   longer has it), from the objects of that controller's parent or target resources, after
//!   its reconciler stopped ([`Sweeper::sweep_owner`]);
//! - once at start, from every object of every resource this process can list and patch
//!   ([`Sweeper::sweep_all`]): a process killed before it finished (or not running when the
//!   controller object went) finishes the job from what the API holds, since the finalizer
//!   itself names its controller.
//!
//! A parent's children-elsewhere finalizer names its CompositeController too and is removed
//! likewise, after the children it holds (see [`crate::stranded_children`]).
//!
//! A finalizer is removed only when a GET of the controller object it names answers 404:
//! a controller object of another Metacontroller (another `--target-label-selector`) or one
//! re-created under the same name keeps its finalizers. The finalize hook is not called (see
//! docs/src/concepts.md, "Deleting a controller").

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::Client;
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_dynamic::{ApiResource, ResourceMap};
use serde_json::{json, Value};

use crate::stranded_children::{ChildrenElsewhere, ELSEWHERE_PREFIX};

/// Finalizer prefix of CompositeController parents.
pub(crate) const COMPOSITE_PREFIX: &str = "metacontroller.io/compositecontroller-";
/// Finalizer prefix of DecoratorController targets.
pub(crate) const DECORATOR_PREFIX: &str = "metacontroller.io/decoratorcontroller-";

/// Page size of the sweep's lists.
const PAGE: u32 = 500;
/// Attempts per object (a 409 re-reads it and tries again).
const ATTEMPTS: usize = 3;
/// Passes of an owner's sweep while some object could not be patched.
const OWNER_PASSES: u32 = 5;

/// The controller object a finalizer of ours names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Owner {
    /// `true`: a CompositeController; `false`: a DecoratorController.
    pub composite: bool,
    pub name: String,
}

impl Owner {
    /// The owner named by `finalizer`, if it is one of ours.
    pub fn of(finalizer: &str) -> Option<Owner> {
        let (composite, name) = if let Some(n) = finalizer.strip_prefix(COMPOSITE_PREFIX) {
            (true, n)
        } else if let Some(n) = finalizer.strip_prefix(ELSEWHERE_PREFIX) {
            // A parent's children-elsewhere finalizer names its CompositeController too.
            (true, n)
        } else {
            (false, finalizer.strip_prefix(DECORATOR_PREFIX)?)
        };
        (!name.is_empty()).then(|| Owner {
            composite,
            name: name.to_string(),
        })
    }

    /// The owner of kind `kind` (`CompositeController` or `DecoratorController`).
    pub fn of_kind(kind: &str, name: &str) -> Option<Owner> {
        let composite = match kind {
            "CompositeController" => true,
            "DecoratorController" => false,
            _ => return None,
        };
        Some(Owner {
            composite,
            name: name.to_string(),
        })
    }

    fn finalizer(&self) -> String {
        let prefix = if self.composite {
            COMPOSITE_PREFIX
        } else {
            DECORATOR_PREFIX
        };
        format!("{prefix}{}", self.name)
    }
}

/// The `(apiVersion, resource)` pairs whose objects a controller object puts its finalizer
/// on: a CompositeController's `spec.parentResource`, a DecoratorController's
/// `spec.resources`.
pub(crate) fn finalized_resources(object: &Value) -> Vec<(String, String)> {
    let pair = |r: &Value| {
        Some((
            r.get("apiVersion")?.as_str()?.to_string(),
            r.get("resource")?.as_str()?.to_string(),
        ))
    };
    let spec = object.get("spec");
    let parent = spec.and_then(|s| s.get("parentResource")).and_then(pair);
    let targets = spec
        .and_then(|s| s.get("resources"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(pair);
    parent.into_iter().chain(targets).collect()
}

/// What a sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Resources listed.
    pub resources: usize,
    /// Objects read.
    pub objects: usize,
    /// Finalizers removed.
    pub removed: usize,
    /// Lists or patches that failed (logged).
    pub failed: usize,
}

/// Removes finalizers of controller objects that no longer exist.
#[derive(Clone)]
pub(crate) struct Sweeper {
    client: Client,
    /// `--watch-namespaces`: namespaced resources are listed there only and cluster-scoped
    /// ones not at all. Empty: everywhere.
    namespaces: Arc<Vec<String>>,
}

impl Sweeper {
    pub fn new(client: Client, namespaces: &[String]) -> Self {
        Sweeper {
            client,
            // `WATCH_NAMESPACE=""` (and empty list entries) mean every namespace.
            namespaces: Arc::new(
                namespaces
                    .iter()
                    .map(|ns| ns.trim().to_string())
                    .filter(|ns| !ns.is_empty())
                    .collect(),
            ),
        }
    }

    /// The start pass: every resource that can be listed and patched (one version per
    /// group and resource, Events left out), every finalizer of a controller object that is
    /// gone.
    pub async fn sweep_all(&self) -> Swept {
        let map = match ResourceMap::discover(&self.client, &ResourceMap::default()).await {
            Ok(found) => found.update.unwrap_or_default(),
            Err(err) => {
                tracing::warn!(error = %err, "stranded finalizers: discovery failed; not swept");
                return Swept {
                    failed: 1,
                    ..Swept::default()
                };
            }
        };
        let mut seen = std::collections::HashSet::new();
        let resources: Vec<Arc<ApiResource>> = map
            .iter()
            .filter(|r| r.verbs.contains("list") && r.verbs.contains("patch"))
            .filter(|r| r.name != "events")
            .filter(|r| seen.insert((r.group.clone(), r.name.clone())))
            .cloned()
            .collect();
        self.sweep(&resources, None).await
    }

    /// After controller object `owner` was deleted: its finalizer leaves every object of
    /// `resources` (its parent or target resources). Objects that could not be patched are
    /// tried again in later passes (the next start's [`Sweeper::sweep_all`] is the last
    /// resort).
    pub async fn sweep_owner(&self, owner: Owner, resources: Vec<(String, String)>) {
        let map = match ResourceMap::discover(&self.client, &ResourceMap::default()).await {
            Ok(found) => found.update.unwrap_or_default(),
            Err(err) => {
                tracing::warn!(error = %err, controller = %owner.name, "stranded finalizers: discovery failed; left to the next start");
                return;
            }
        };
        let found: Vec<Arc<ApiResource>> = resources
            .iter()
            .filter_map(|(v, r)| map.get(v, r).cloned())
            .collect();
        for pass in 0..OWNER_PASSES {
            let swept = self.sweep(&found, Some(&owner)).await;
            tracing::info!(controller = %owner.name, finalizer = %owner.finalizer(), removed = swept.removed, failed = swept.failed, "removed the deleted controller's finalizers");
            if swept.failed == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1 << pass)).await;
        }
    }

    async fn sweep(&self, resources: &[Arc<ApiResource>], only: Option<&Owner>) -> Swept {
        let mut swept = Swept::default();
        let mut exists: HashMap<Owner, bool> = HashMap::new();
        let mut elsewhere = ChildrenElsewhere::default();
        for resource in resources {
            for api in self.apis(resource) {
                swept.resources += 1;
                let state = (&mut exists, &mut elsewhere);
                self.sweep_api(&api, resource, only, state, &mut swept)
                    .await;
            }
        }
        swept
    }

    /// One `Api` per namespace to list (`--watch-namespaces`), or one for all.
    fn apis(&self, resource: &ApiResource) -> Vec<Api<DynamicObject>> {
        let ar = resource.to_kube();
        if self.namespaces.is_empty() {
            return vec![Api::all_with(self.client.clone(), &ar)];
        }
        if !resource.namespaced {
            return Vec::new();
        }
        self.namespaces
            .iter()
            .map(|ns| Api::namespaced_with(self.client.clone(), ns, &ar))
            .collect()
    }

    async fn sweep_api(
        &self,
        api: &Api<DynamicObject>,
        resource: &ApiResource,
        only: Option<&Owner>,
        (exists, elsewhere): (&mut HashMap<Owner, bool>, &mut ChildrenElsewhere),
        swept: &mut Swept,
    ) {
        let ar = resource.to_kube();
        let mut token: Option<String> = None;
        loop {
            let mut lp = ListParams::default().limit(PAGE);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = match api.list(&lp).await {
                Ok(page) => page,
                Err(err) => {
                    tracing::debug!(resource = %resource.name, api_version = %resource.api_version, error = %err, "stranded finalizers: cannot list");
                    swept.failed += 1;
                    return;
                }
            };
            swept.objects += page.items.len();
            for item in &page.items {
                let meta = &item.metadata;
                let stranded = self
                    .stranded(meta.finalizers.as_deref().unwrap_or_default(), only, exists)
                    .await;
                if stranded.is_empty() {
                    continue;
                }
                let (Some(name), ns) = (meta.name.as_deref(), meta.namespace.as_deref()) else {
                    continue;
                };
                if let Err(err) = elsewhere
                    .before_removal(&self.client, &self.namespaces, item, &stranded)
                    .await
                {
                    tracing::warn!(resource = %resource.name, namespace = ?ns, %name, error = %err, "stranded finalizers: cannot delete the children elsewhere; retrying later");
                    swept.failed += 1;
                    continue;
                }
                let api: Api<DynamicObject> = match ns {
                    Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
                    None => Api::all_with(self.client.clone(), &ar),
                };
                match remove_finalizers(&api, name, &stranded).await {
                    Ok(n) => swept.removed += n,
                    Err(err) => {
                        tracing::warn!(resource = %resource.name, namespace = ?ns, %name, finalizers = ?stranded, error = %err, "stranded finalizers: cannot remove; retrying later");
                        swept.failed += 1;
                    }
                }
            }
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                return;
            }
        }
    }

    /// The finalizers in `finalizers` of controller objects that do not exist (restricted
    /// to `only`'s when given).
    async fn stranded(
        &self,
        finalizers: &[String],
        only: Option<&Owner>,
        exists: &mut HashMap<Owner, bool>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for f in finalizers {
            let Some(owner) = Owner::of(f) else { continue };
            if only.is_some_and(|o| *o != owner) {
                continue;
            }
            let present = match exists.get(&owner) {
                Some(p) => *p,
                None => {
                    let p = self.controller_exists(&owner).await;
                    exists.insert(owner, p);
                    p
                }
            };
            if !present {
                out.push(f.clone());
            }
        }
        out
    }

    /// Whether the controller object exists; an error other than 404 counts as "exists"
    /// (nothing is removed on a guess).
    async fn controller_exists(&self, owner: &Owner) -> bool {
        let result = if owner.composite {
            Api::<CompositeController>::all(self.client.clone())
                .get_opt(&owner.name)
                .await
                .map(|o| o.is_some())
        } else {
            Api::<DecoratorController>::all(self.client.clone())
                .get_opt(&owner.name)
                .await
                .map(|o| o.is_some())
        };
        result.unwrap_or_else(|err| {
            tracing::debug!(controller = %owner.name, error = %err, "stranded finalizers: cannot read the controller object");
            true
        })
    }
}

/// Removes `remove` from the object's finalizers, conditional on its resourceVersion (a
/// concurrent change of the list is re-read, never overwritten). Returns how many were
/// removed; a deleted object is fine.
async fn remove_finalizers(
    api: &Api<DynamicObject>,
    name: &str,
    remove: &[String],
) -> Result<usize, String> {
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        let obj = match api.get_opt(name).await.map_err(|e| e.to_string())? {
            Some(obj) => obj,
            None => return Ok(0),
        };
        let current = obj.metadata.finalizers.unwrap_or_default();
        let kept: Vec<&String> = current.iter().filter(|f| !remove.contains(f)).collect();
        let removed = current.len() - kept.len();
        if removed == 0 {
            return Ok(0);
        }
        let finalizers = if kept.is_empty() {
            Value::Null
        } else {
            json!(kept)
        };
        let patch = json!({"metadata": {"resourceVersion": obj.metadata.resource_version,
                                        "finalizers": finalizers}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(removed),
            Err(kube::Error::Api(e)) if e.code == 409 => last = e.message,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(0),
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("conflict {ATTEMPTS} times: {last}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizers_name_their_controller() {
        assert_eq!(
            Owner::of("metacontroller.io/decoratorcontroller-deco"),
            Some(Owner {
                composite: false,
                name: "deco".into()
            })
        );
        assert_eq!(
            Owner::of("metacontroller.io/compositecontroller-a-b").map(|o| o.finalizer()),
            Some("metacontroller.io/compositecontroller-a-b".to_string())
        );
        assert_eq!(Owner::of("metacontroller.io/compositecontroller-"), None);
        assert_eq!(Owner::of("kubernetes.io/pvc-protection"), None);
        assert_eq!(
            Owner::of("children-elsewhere.metacontroller.io/compositecontroller-teams"),
            Some(Owner {
                composite: true,
                name: "teams".into()
            })
        );
    }

    #[test]
    fn resources_of_both_kinds() {
        let cc = json!({"spec": {"parentResource": {"apiVersion": "x/v1", "resource": "ps"}}});
        assert_eq!(finalized_resources(&cc), vec![("x/v1".into(), "ps".into())]);
        let dc = json!({"spec": {"resources": [{"apiVersion": "v1", "resource": "configmaps"},
                                              {"apiVersion": "apps/v1"}]}});
        assert_eq!(
            finalized_resources(&dc),
            vec![("v1".into(), "configmaps".into())]
        );
    }
}
