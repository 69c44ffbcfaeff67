//! The running CompositeController: its informers and handlers ([`start`]) and one sync of
//! a parent (finalizer, hook, child writes, status).

use std::sync::Arc;

use metacontroller_api::composite::{ChildUpdateStatusChecks, CompositeController};
use metacontroller_api::hook::Hook;
use metacontroller_api::wire::{CompositeHookResponse, CustomizableController};
use metacontroller_dynamic::{
    ApiResource, HandlerId, Informer, Informers, Keep, NamespacedName, ObjectKey, ObjectMetaAccess,
    ResourceMap, Selector, Versioned,
};
use metacontroller_hooks::HookClient;
use serde_json::Value;

use super::mapper::Mapper;
use super::plan::{
    self, choose_hook, describe_parent, hook_request, parent_child_selector, value_labels,
    HookOutcome,
};
use super::{Options, Resolved, StartError, SyncError};
use crate::children::{self, ChildType, ParentRef};
use crate::finalizer;
use crate::reconcile::{self, priority, Plan, Reconciler};
use crate::related::ParentId;
use crate::writer::to_value;

pub(super) struct Child {
    pub(super) kind: ChildType,
    pub(super) status_checks: Option<ChildUpdateStatusChecks>,
    pub(super) resource: Arc<ApiResource>,
    pub(super) informer: metacontroller_dynamic::InformerLease,
    pub(super) handler: HandlerId,
}

pub(super) struct Inner {
    pub(super) common: reconcile::Common<NamespacedName>,
    pub(super) controller: CompositeController,
    pub(super) parent_resource: Arc<ApiResource>,
    pub(super) parent: metacontroller_dynamic::InformerLease,
    pub(super) parent_handler: HandlerId,
    pub(super) children: Vec<Child>,
    /// ControllerRevisions, when a child type uses a rolling update method.
    pub(super) revisions: Option<Revisions>,
    pub(super) mapper: Arc<Mapper>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.parent.remove_handler(self.parent_handler);
        for c in &self.children {
            c.informer.remove_handler(c.handler);
        }
        if let Some(r) = &self.revisions {
            r.informer.remove_handler(r.handler);
        }
        self.common.hooks.forget_controller(&self.common.name);
    }
}

pub(super) struct Revisions {
    pub(super) resource: Arc<ApiResource>,
    pub(super) informer: metacontroller_dynamic::InformerLease,
    pub(super) handler: HandlerId,
}

/// Which hook one sync calls, and what it shows the hook besides the parent.
pub(super) struct HookCall<'a> {
    pub(super) hook: &'a Hook,
    /// `sync` or `finalize`.
    pub(super) name: &'static str,
    pub(super) finalizing: bool,
    pub(super) types: &'a [ChildType],
    /// The claimed children.
    pub(super) observed: &'a [Value],
}

/// A running CompositeController. Dropping it (or `stop`) stops it.
pub type CompositeHandle = crate::handle::ControllerHandle<NamespacedName>;

/// Starts the reconciler of `controller`. Must run inside tokio.
pub fn start(
    controller: CompositeController,
    client: kube::Client,
    informers: &Informers,
    resources: &ResourceMap,
    hooks: HookClient,
    options: Options,
) -> Result<CompositeHandle, StartError> {
    controller
        .validate()
        .map_err(|e| StartError::Invalid(e.to_string()))?;
    let resolved = Resolved::new(&controller, resources)?;
    resolved.check_scope(informers.scope())?;
    let spec = reconcile::ControllerSpec::from(CustomizableController::Composite(Box::new(
        controller.clone(),
    )));
    let queue = options.metrics.queue(spec.controller_type(), &spec.name);
    queue.set_gate(options.gate.clone());
    let enqueue = {
        let queue = queue.clone();
        Arc::new(move |parent: &ParentId, origin| queue.add(parent.key.clone(), priority(origin)))
    };
    let concurrency = options.concurrency();
    let ctx = reconcile::StartContext {
        client,
        informers,
        resources,
        hooks,
        options,
    };
    let common = reconcile::Common::new(spec, queue.clone(), &ctx, enqueue);
    let writer = &common.writer;
    let parent = informers.lease_selected(
        &resolved.parent,
        Keep::Parents,
        server_selector(&controller, &resolved.parent_selector),
    );
    let spec = &controller.spec;
    let mapper = Arc::new(Mapper {
        parents: parent.value().clone(),
        parent_resource: resolved.parent.clone(),
        parent_selector: resolved.parent_selector,
        finalizer: controller.finalizer_name(),
        elsewhere_finalizer: super::cleanup::elsewhere_finalizer(&controller.finalizer_name()),
        generate_selector: spec.generate_selector == Some(true),
        ignore_status_changes: spec.parent_resource.ignore_status_changes == Some(true),
        queue: queue.clone(),
        read: Default::default(),
        orphaning: Default::default(),
    });
    let parent_handler = {
        let mapper = mapper.clone();
        reconcile::watch_owners(
            &parent,
            writer.clone(),
            resolved.parent.clone(),
            move |change, origin| mapper.on_parent(change, origin),
        )
    };
    let revisions = resolved
        .revisions
        .map(|resource| watch_revisions(informers, writer, resource));
    let children = resolved
        .children
        .into_iter()
        .map(|child| watch_child(informers, writer, &mapper, child))
        .collect();
    let inner = Arc::new(Inner {
        common,
        controller,
        parent_resource: resolved.parent,
        parent,
        parent_handler,
        children,
        revisions,
        mapper,
    });
    Ok(reconcile::run(inner, concurrency))
}

/// The `labelSelector` the API server applies to the parent informer: the parent selector,
/// unless a finalize hook is set or a child type may be placed elsewhere (whose finalizer
/// also outlives the labels). Then a parent keeps being managed after its labels stop
/// matching as long as it carries our finalizer (upstream's rule, so that its finalize hook
/// still runs when it is deleted), and the server cannot select "matches or has this
/// finalizer": the informer stays unfiltered and the selector is applied here only.
fn server_selector(
    controller: &CompositeController,
    selector: &metacontroller_dynamic::Selector,
) -> Option<String> {
    let elsewhere = controller
        .spec
        .child_resources
        .iter()
        .any(|c| !c.namespaces.is_empty());
    if controller.spec.finalize_hook().is_some() || elsewhere {
        return None;
    }
    selector.server_query()
}

/// Leases the informer of ControllerRevisions (rolling updates) for own-writes tracking.
fn watch_revisions(
    informers: &Informers,
    writer: &Arc<crate::writer::Writer>,
    resource: Arc<ApiResource>,
) -> Revisions {
    let (informer, handler) = reconcile::lease_owned(informers, writer, &resource, |_, _| {});
    Revisions {
        resource,
        informer,
        handler,
    }
}

/// Leases the informer of one child type; its events queue the owning (or, for orphans,
/// the matching) parents.
fn watch_child(
    informers: &Informers,
    writer: &Arc<crate::writer::Writer>,
    mapper: &Arc<Mapper>,
    (kind, status_checks, resource): (ChildType, Option<ChildUpdateStatusChecks>, Arc<ApiResource>),
) -> Child {
    let mapper = mapper.clone();
    let route = move |change: &_, origin| mapper.on_child(change, origin);
    let (informer, handler) = reconcile::lease_owned(informers, writer, &resource, route);
    Child {
        kind,
        status_checks,
        resource,
        informer,
        handler,
    }
}

impl Reconciler for Inner {
    type Key = NamespacedName;
    type Error = SyncError;
    type Writes = ParentWrites;

    fn common(&self) -> &reconcile::Common<NamespacedName> {
        &self.common
    }

    fn informers(&self) -> Vec<&Informer> {
        let children = self.children.iter().map(|c| &*c.informer);
        let revisions = self.revisions.iter().map(|r| &*r.informer);
        children
            .chain(revisions)
            .chain(std::iter::once(&*self.parent))
            .collect()
    }

    fn object(&self, key: &NamespacedName) -> Option<Value> {
        let cached = to_value(&*self.parent.get(key)?, &self.parent_resource).ok()?;
        self.common.writer.fresh(&self.parent_resource, cached)
    }

    /// Parents that neither match `parentResource.labelSelector` nor carry our finalizer
    /// are not ours.
    fn cares(&self, parent: &Value) -> bool {
        let matches = self.mapper.parent_selector.matches(&value_labels(parent));
        !finalizer::is_ignored(matches, parent, self.finalizer())
    }

    fn parent_resources(&self) -> Vec<Arc<ApiResource>> {
        vec![self.parent_resource.clone()]
    }

    fn cached_keys(&self) -> Vec<NamespacedName> {
        self.parent
            .list()
            .iter()
            .filter_map(|parent| NamespacedName::of(parent.as_ref()))
            .collect()
    }

    async fn plan(&self, key: &NamespacedName) -> Result<Plan<ParentWrites>, SyncError> {
        self.plan_key(key).await
    }

    async fn write(&self, writes: ParentWrites) -> Result<(), SyncError> {
        self.write_parent(writes).await
    }

    fn forget_departed(&self) {
        let parent = &*self.parent;
        self.mapper.read.retain(|key| parent.contains(key));
        self.common.queue.retain(|key| parent.contains(key));
        let held = crate::departed::Held::new(vec![(&*self.parent_resource, parent)]);
        crate::departed::forget_departed(&self.common, &held, &|key| self.written(key));
    }

    fn state_entries(&self) -> Vec<(&'static str, usize)> {
        let mut entries = vec![("last_read", self.mapper.read.len())];
        entries.extend(self.common.state_entries());
        entries
    }
}

/// What the hook's answer for a parent asks to write (phase two of its sync).
pub(super) struct ParentWrites {
    parent: ParentState,
    selector: Selector,
    types: Vec<ChildType>,
    /// The claimed children the hook saw.
    observed: Vec<Value>,
    outcome: HookOutcome,
    finalizing: bool,
}

/// A parent during one sync.
pub(super) struct ParentState {
    pub(super) key: NamespacedName,
    pub(super) object: Value,
    pub(super) uid: String,
    pub(super) namespace: Option<String>,
}

impl Inner {
    pub(super) fn finalizer(&self) -> &str {
        &self.mapper.finalizer
    }

    pub(super) fn child_types(&self) -> Vec<ChildType> {
        self.children.iter().map(|c| c.kind.clone()).collect()
    }

    /// Whether the caches hold the written object `key` (parent, child or revision), for
    /// [`crate::departed`].
    pub(super) fn written(&self, key: &ObjectKey) -> Option<bool> {
        let children = self.children.iter().map(|c| (&*c.resource, &*c.informer));
        let revisions = self.revisions.iter().map(|r| (&*r.resource, &*r.informer));
        let parent = std::iter::once((&*self.parent_resource, &*self.parent));
        crate::departed::cached(children.chain(revisions).chain(parent), key)
    }

    /// For expectations: whether the cache holds the child `key` (see
    /// [`reconcile::presence`]).
    pub(super) fn cached(&self, key: &ObjectKey) -> Option<bool> {
        let watched = self.children.iter().map(|c| (&*c.resource, &*c.informer));
        reconcile::presence(watched, key)
    }

    /// Drops the hook responses and customize rules cached for the parent `key`.
    fn forget_parent(&self, key: &NamespacedName) {
        self.common
            .hooks
            .forget_parent(&self.common.name, &key.to_string());
        self.common.related.forget(&ParentId {
            api_version: self.parent_resource.api_version.clone(),
            kind: self.parent_resource.kind.clone(),
            key: key.clone(),
        });
    }

    /// Phase one of a sync: the parent from the cache (own writes applied), its finalizer,
    /// then — once the cache has caught up with our last writes — the hook
    /// ([`Inner::plan_parent`]).
    async fn plan_key(&self, key: &NamespacedName) -> Result<Plan<ParentWrites>, SyncError> {
        let Some(cached) = self.parent.get(key) else {
            // Deleted; children go with the garbage collector. A sync that ran when the
            // deletion came may have recorded state since: this one runs after it.
            self.forget_parent(key);
            self.mapper.read.forget(key);
            let held = crate::departed::Held::new(vec![(&*self.parent_resource, &*self.parent)]);
            crate::departed::forget_deleted_owners(&self.common, &held, &|key| self.written(key));
            return Ok(Plan::done());
        };
        let cached = to_value(&cached, &self.parent_resource)?;
        let Some(object) = self.common.writer.fresh(&self.parent_resource, cached) else {
            return Ok(Plan::done());
        };
        self.mapper.record_read(key, object.resource_version());
        let cares = self.cares(&object);
        let holds_elsewhere = finalizer::has_finalizer(&object, &self.mapper.elsewhere_finalizer);
        if !cares && !holds_elsewhere {
            // Not ours (any more): nothing to keep for it.
            self.forget_parent(key);
            return Ok(Plan::done());
        }
        let uid = object.uid().unwrap_or_default().to_string();
        let namespace = object.namespace().map(str::to_owned);
        let mut parent = ParentState {
            key: key.clone(),
            object,
            uid,
            namespace,
        };
        if !cares {
            // Stopped matching but still holds children elsewhere: no hook call (as for any
            // parent that stopped matching), but its deletion still removes them.
            self.cleanup_elsewhere(&mut parent).await?;
            return Ok(Plan::done());
        }
        let finalize_hook = self.controller.spec.finalize_hook().is_some();
        let written = reconcile::sync_finalizer(
            &self.common.writer,
            &self.parent_resource,
            parent.object,
            self.finalizer(),
            finalize_hook,
        )
        .await?;
        let Some(written) = written else {
            return Ok(Plan::done()); // the parent is gone
        };
        parent.object = written;
        self.mapper
            .record_read(key, parent.object.resource_version());
        // Check again: we may just have removed our finalizer.
        if !self.cares(&parent.object) {
            return Ok(Plan::done());
        }
        if let super::cleanup::Cleanup::Done = self.cleanup_elsewhere(&mut parent).await? {
            return Ok(Plan::done());
        }
        if !self
            .common
            .own_writes_confirmed(key, &parent.uid, |k| self.cached(k))
        {
            return Ok(Plan::await_own_writes());
        }
        self.plan_parent(parent).await
    }

    /// Claims children and calls the hook (once per revision with rolling updates).
    async fn plan_parent(&self, parent: ParentState) -> Result<Plan<ParentWrites>, SyncError> {
        let generate_selector = self.mapper.generate_selector;
        let selector = parent_child_selector(&parent.object, generate_selector)?;
        let observed = self.claim_children(&parent, &selector).await?;
        let types = self.child_types();
        let (hook, name, finalizing) = self.choose_hook(&parent.object)?;
        let call = HookCall {
            hook,
            name,
            finalizing,
            types: &types,
            observed: &observed,
        };
        let use_revisions = self.revisions.is_some() && self.manages_children(&parent.object);
        let mut outcome = if use_revisions {
            self.sync_revisions(&parent, &call).await?
        } else {
            self.sync_once(&parent, &call).await?
        };
        self.refuse_unwatched(&parent, &mut outcome);
        let requeue = reconcile::requeue_after_seconds(outcome.resync_after_seconds);
        let writes = ParentWrites {
            parent,
            selector,
            types,
            observed,
            outcome,
            finalizing,
        };
        Ok(Plan::write(writes, requeue))
    }

    /// Phase two: the finalizer removal after `finalized`, the children, the status.
    async fn write_parent(&self, writes: ParentWrites) -> Result<(), SyncError> {
        let ParentWrites {
            mut parent,
            selector,
            types,
            observed,
            outcome,
            finalizing,
        } = writes;
        let parent = &mut parent;
        let generate_selector = self.mapper.generate_selector;
        let finalized_now = if finalizing && outcome.finalized {
            self.remove_finalizer(parent).await?
        } else {
            false
        };
        let plan = plan::plan_sync(&parent.object, &selector, generate_selector, outcome)?;
        let mut manage_result = Ok(());
        if self.manages_children(&parent.object) {
            // As upstream, the status is written even when a child write failed (a 409
            // Conflict included); the failure is returned afterwards, for a retry.
            manage_result = self
                .manage_children(parent, &types, &observed, &plan.desired)
                .await;
        }
        self.write_status(parent, plan.status, finalized_now)
            .await?;
        manage_result?;
        if plan.refused.is_empty() {
            Ok(())
        } else {
            Err(SyncError::Refused(plan.refused))
        }
    }

    /// The hook this sync calls (see [`finalizer::choose_hook`]): the finalize hook also
    /// once the parent stops matching `parentResource.labelSelector` (it still carries our
    /// finalizer, or we would not be here), so the hook can clean up before the parent is
    /// let go. A live parent needs a sync hook (SyncError, backoff), as upstream.
    fn choose_hook(&self, parent: &Value) -> Result<(&Hook, &'static str, bool), SyncError> {
        choose_hook(&self.controller, &self.mapper.parent_selector, parent)
    }

    /// Whether children are managed in this sync (see [`finalizer::manages_children`]).
    fn manages_children(&self, parent: &Value) -> bool {
        let finalize_hook = self.controller.spec.finalize_hook().is_some();
        finalizer::manages_children(parent, self.finalizer(), finalize_hook)
    }

    /// Without rolling updates: one hook call for the parent as it is.
    async fn sync_once(
        &self,
        parent: &ParentState,
        call: &HookCall<'_>,
    ) -> Result<HookOutcome, SyncError> {
        let response = self.call_hook(parent, &parent.object, call).await?;
        Ok(HookOutcome::from_response(
            response,
            call.types,
            parent.namespace.as_deref(),
        ))
    }

    /// Removes our finalizer after the finalize hook said `finalized`. True when it was
    /// removed now.
    async fn remove_finalizer(&self, parent: &mut ParentState) -> Result<bool, SyncError> {
        let Some(updated) = finalizer::with_finalizer(&parent.object, self.finalizer(), false)
        else {
            return Ok(false);
        };
        parent.object = self
            .common
            .writer
            .replace(&self.parent_resource, updated)
            .await?;
        Ok(true)
    }

    /// Writes the planned status through `/status` (only when it changed). A parent that
    /// is gone — or going, once we removed its last finalizer — is not an error.
    async fn write_status(
        &self,
        parent: &ParentState,
        status: Value,
        finalized_now: bool,
    ) -> Result<(), SyncError> {
        match self
            .common
            .writer
            .write_status(&self.parent_resource, &parent.object, status)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) if finalized_now && e.is_conflict() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Calls `call.hook` with `parent_object` as the parent (the parent itself, or as one
    /// of its revisions sees it).
    pub(super) async fn call_hook(
        &self,
        parent: &ParentState,
        parent_object: &Value,
        call: &HookCall<'_>,
    ) -> Result<CompositeHookResponse, SyncError> {
        let version = call.hook.effective_version();
        let related = self.common.related.related(&parent.object, version).await?;
        let request = hook_request(
            &self.controller,
            parent_object,
            version,
            call.types,
            call.observed,
            related,
            call.finalizing,
        );
        let answer = self
            .common
            .call_hook(call.name, &parent.key.to_string(), call.hook, &request)
            .await
            .map_err(|source| SyncError::Hook {
                hook: call.name,
                parent: self.describe(parent),
                source,
            })?;
        let mut response: CompositeHookResponse = answer.response;
        let events = std::mem::take(&mut response.events);
        // On the parent itself, also when the hook saw one of its revisions; a cached
        // answer's Events were recorded when the hook sent them.
        if !answer.cached {
            self.common
                .record_hook_events(call.name, &parent.object, events);
        }
        Ok(response)
    }

    /// `<Kind> <namespace>/<name>` of a parent (upstream's wording in errors).
    pub(super) fn describe(&self, parent: &ParentState) -> String {
        describe_parent(
            &self.parent_resource.kind,
            parent.namespace.as_deref(),
            &parent.key.name,
        )
    }

    /// The controller ownerReference our children carry.
    pub(super) fn parent_ref(&self, parent: &ParentState) -> ParentRef {
        ParentRef {
            api_version: self.parent_resource.api_version.clone(),
            kind: self.parent_resource.kind.clone(),
            name: parent.key.name.clone(),
            uid: parent.uid.clone(),
            namespace: parent.namespace.clone().unwrap_or_default(),
        }
    }

    /// Creates, updates and deletes children. Keeps going after a failed write (so one bad
    /// child does not block the others), except on a conflict, which aborts.
    async fn manage_children(
        &self,
        parent: &ParentState,
        types: &[ChildType],
        observed: &[Value],
        desired: &std::collections::BTreeMap<children::ChildKey, (usize, Value)>,
    ) -> Result<(), SyncError> {
        let errors = self
            .common
            .manage_children(&self.parent_ref(parent), types, observed, desired, |i| {
                self.children[i].resource.as_ref()
            })
            .await?;
        if errors.is_empty() {
            Ok(())
        } else {
            Err(SyncError::Writes {
                parent: self.describe(parent),
                errors,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn controller(finalize: bool) -> CompositeController {
        let mut hooks = json!({"sync": {"webhook": {"url": "http://127.0.0.1:1/sync"}}});
        if finalize {
            hooks["finalize"] = json!({"webhook": {"url": "http://127.0.0.1:1/finalize"}});
        }
        serde_json::from_value(json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "c"},
            "spec": {"parentResource": {"apiVersion": "v1", "resource": "things",
                                        "labelSelector": {"matchLabels": {"a": "b"}}},
                     "hooks": hooks},
        }))
        .expect("a CompositeController")
    }

    #[test]
    fn the_server_selects_parents_unless_a_finalize_hook_needs_the_unmatched_ones() {
        let selector = metacontroller_dynamic::Selector::parse("a=b").expect("a selector");
        assert_eq!(
            server_selector(&controller(false), &selector).as_deref(),
            Some("a=b")
        );
        assert_eq!(server_selector(&controller(true), &selector), None);
        let everything = metacontroller_dynamic::Selector::default();
        assert_eq!(server_selector(&controller(false), &everything), None);
    }
}
