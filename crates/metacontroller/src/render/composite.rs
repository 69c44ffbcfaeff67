//! One CompositeController sync, rendered: the request the controller would send (built by
//! the controller's own functions), the hook's answer checked by the controller's own
//! rules, and (with --diff) the writes the controller's writer would plan.

use anyhow::{bail, Context};
use metacontroller_api::wire::{
    CompositeHookRequest, CompositeHookResponse, CustomizableController,
};
use metacontroller_api::CompositeController;
use metacontroller_controllers::offline::composite::{
    self as sync_plan, HookOutcome, Resolved, SyncError, SyncPlan,
};
use metacontroller_controllers::offline::{self, ChildType, Claim, Claimant, ParentRef};
use metacontroller_dynamic::Selector;
use metacontroller_hooks::CallContext;
use serde_json::{json, Value};

use super::args::{HookName, RenderArgs};
use super::cluster::Cluster;
use super::hook::{CallError, Caller};
use super::inputs::{self, Replay};
use super::{meta_str, plan, steps, Env, Prepared};

/// Renders one sync of `controller`.
pub async fn render(
    args: &RenderArgs,
    cluster: &Cluster,
    caller: &Caller,
    controller: CompositeController,
    replay: Option<Replay>,
    requested: Option<HookName>,
) -> anyhow::Result<()> {
    let resolved = Resolved::new(&controller, &cluster.resources)
        .map_err(|e| cluster.explain(anyhow::Error::new(e)))?;
    if resolved.revisions.is_some() {
        eprintln!(
            "note: a child type uses a rolling update: the controller calls the hook once per \
             parent revision and moves one child per sync; this shows the latest revision only"
        );
    }
    let sync = Sync {
        env: Env {
            args,
            cluster,
            caller,
            endpoints: controller.spec.all_endpoint_configs().cloned().collect(),
        },
        types: resolved.children.iter().map(|c| c.0.clone()).collect(),
        generate: controller.spec.generate_selector == Some(true),
        controller: &controller,
        resolved: &resolved,
    };
    let prepared = match replay {
        Some(replay) => from_replay(&controller, replay, requested)?,
        None => match sync.prepare_live(requested).await? {
            Some(prepared) => prepared,
            None => return Ok(()), // the customize hook was rendered
        },
    };
    let parent = &prepared.object;
    let namespace = Some(meta_str(parent, "namespace")).filter(|ns| !ns.is_empty());
    let mut response = sync.call(&prepared).await?;
    let events = steps::checked_events(prepared.hook_name, std::mem::take(&mut response.events));
    // The controller's own steps from here: the answer checked, children labelled and
    // matched against the selector, the status with observedGeneration.
    let outcome = HookOutcome::from_response(response, &sync.types, namespace);
    let selector = sync_plan::parent_child_selector(parent, sync.generate)?;
    let planned = sync_plan::plan_sync(parent, &selector, sync.generate, outcome)?;
    if args.diff {
        sync.print_diff(&prepared, &planned).await?;
        steps::show_events(None, events);
    } else {
        // Children elsewhere carry the parent-uid label and annotations as written.
        let owner = sync.owner(parent);
        let children: Vec<Value> = planned
            .desired
            .values()
            .map(|(_, c)| offline::with_parent_label(c.clone(), &owner))
            .collect();
        let mut doc = json!({
            "children": children,
            "status": planned.status,
        });
        steps::show_events(Some(&mut doc), events);
        steps::print_answer(
            doc,
            planned.resync_after_seconds,
            prepared.hook_name,
            planned.finalized,
        )?;
    }
    if !planned.refused.is_empty() {
        return Err(SyncError::Refused(planned.refused).into());
    }
    Ok(())
}

/// One rendered sync of a CompositeController: what its steps share.
struct Sync<'a> {
    env: Env<'a>,
    controller: &'a CompositeController,
    resolved: &'a Resolved,
    /// The declared child types.
    types: Vec<ChildType>,
    /// `spec.generateSelector`.
    generate: bool,
}

impl Sync<'_> {
    /// The request the controller would send for the given parent, built from the cluster
    /// (or the given children offline). `None` when the customize hook was asked for: it
    /// was called and printed.
    async fn prepare_live(&self, requested: Option<HookName>) -> anyhow::Result<Option<Prepared>> {
        let (controller, spec) = (self.controller, &self.controller.spec);
        let given = inputs::single_object(self.env.args.parent.as_deref().context("--parent")?)?;
        let parent = super::prepare_parent(
            self.env.cluster.parent(&given).await?,
            &controller.finalizer_name(),
            spec.finalize_hook().is_some(),
            requested,
        );
        let matches = self
            .resolved
            .parent_selector
            .matches(&super::labels(&parent));
        if offline::is_ignored(matches, &parent, &controller.finalizer_name()) {
            bail!("the controller ignores this parent: it does not match spec.parentResource.labelSelector");
        }
        let customizable = CustomizableController::Composite(Box::new(controller.clone()));
        if requested == Some(HookName::Customize) {
            let hook = spec.customize_hook();
            self.env.customize(hook, customizable, &parent).await?;
            return Ok(None);
        }
        let (hook, hook_name, finalizing) =
            match steps::requested_hook(spec.sync_hook(), spec.finalize_hook(), requested)? {
                Some(chosen) => chosen,
                None => {
                    sync_plan::choose_hook(controller, &self.resolved.parent_selector, &parent)?
                }
            };
        let selector = sync_plan::parent_child_selector(&parent, self.generate)?;
        let observed = if self.env.cluster.is_live() {
            claimed_children(self.env.cluster, self.resolved, &parent, &selector).await?
        } else {
            inputs::all_objects(&self.env.args.children)?
        };
        let version = hook.effective_version();
        let build = |parent: &Value, observed: &[Value], related| {
            let types = &self.types;
            sync_plan::hook_request(
                controller, parent, version, types, observed, related, finalizing,
            )
        };
        let hook = (version, hook_name);
        let prepared = self
            .env
            .prepare(customizable, parent, observed, hook, build);
        Ok(Some(prepared.await?))
    }

    /// Sends the prepared request to the hook; errors read as the controller's.
    async fn call(&self, prepared: &Prepared) -> anyhow::Result<CompositeHookResponse> {
        let spec = &self.controller.spec;
        let hook = steps::hook_named(spec.sync_hook(), spec.finalize_hook(), prepared.hook_name)?;
        let parent = &prepared.object;
        let namespace = Some(meta_str(parent, "namespace")).filter(|ns| !ns.is_empty());
        let parent_name = meta_str(parent, "name");
        let key = match namespace {
            Some(ns) => format!("{ns}/{parent_name}"),
            None => parent_name.to_string(),
        };
        let name = self.controller.metadata.name.clone().unwrap_or_default();
        let ctx = CallContext {
            controller: &name,
            hook_name: prepared.hook_name,
            parent_key: &key,
        };
        let kind = &self.resolved.parent.kind;
        self.env
            .caller
            .call(&ctx, hook, &self.env.endpoints, &prepared.body)
            .await
            .map_err(|e| {
                let parent = sync_plan::describe_parent(kind, namespace, parent_name);
                match e {
                    // The controller's words, as one message: the hook error is part of the
                    // text already, so it must not come again as the error's cause.
                    CallError::Hook(source) => anyhow::anyhow!(
                        "{}",
                        SyncError::Hook {
                            hook: prepared.hook_name,
                            parent,
                            source,
                        }
                    ),
                    other => anyhow::anyhow!("sync hook failed for {parent}: {other}"),
                }
            })
    }

    /// The parent as its children's owner.
    fn owner(&self, parent: &Value) -> ParentRef {
        ParentRef {
            api_version: self.resolved.parent.api_version.clone(),
            kind: self.resolved.parent.kind.clone(),
            name: meta_str(parent, "name").to_string(),
            uid: meta_str(parent, "uid").to_string(),
            namespace: meta_str(parent, "namespace").to_string(),
        }
    }

    /// `--diff`: the child writes, the finalizer and the status change the sync would make.
    async fn print_diff(&self, prepared: &Prepared, planned: &SyncPlan) -> anyhow::Result<()> {
        let parent = &prepared.object;
        let finalizer_name = self.controller.finalizer_name();
        let finalize_hook = self.controller.spec.finalize_hook().is_some();
        let manages = offline::manages_children(parent, &finalizer_name, finalize_hook);
        let owner = self.owner(parent);
        steps::print_owned_plan(
            self.env.args,
            self.env.cluster,
            manages,
            &owner,
            &self.types,
            &prepared.observed,
            &planned.desired,
            "children: not managed (the parent is being deleted without our finalizer)",
        )
        .await?;
        if prepared.hook_name == "finalize" {
            let finalizer = if planned.finalized {
                "removed (finalized)"
            } else {
                "kept (not finalized yet)"
            };
            println!("finalizer: {finalizer}");
        }
        print!("{}", plan::status(parent.get("status"), &planned.status));
        Ok(())
    }
}

/// A replayed request: its parent and children, the hook it was sent to.
fn from_replay(
    controller: &CompositeController,
    replay: Replay,
    requested: Option<HookName>,
) -> anyhow::Result<Prepared> {
    steps::refuse_customize_replay(replay.hook.as_deref(), requested)?;
    let request: CompositeHookRequest = serde_json::from_value(replay.body.clone())
        .context("the request is not a CompositeController sync/finalize request")?;
    if request.controller.metadata.name != controller.metadata.name {
        eprintln!(
            "note: the request was sent by controller {:?}; validating with {:?}",
            request.controller.metadata.name.unwrap_or_default(),
            controller.metadata.name.clone().unwrap_or_default()
        );
    }
    Ok(Prepared {
        observed: request.children.objects().cloned().collect(),
        object: request.parent,
        hook_name: steps::replayed_hook_name(replay.hook.as_deref(), requested, request.finalizing),
        body: replay.body,
    })
}

/// The parent's children in the cluster after claiming, as the controller sees them:
/// owned and matching, plus matching orphans it would adopt (reported on stderr); owned
/// ones that no longer match would be released and are left out.
async fn claimed_children(
    cluster: &Cluster,
    resolved: &Resolved,
    parent: &Value,
    selector: &Selector,
) -> anyhow::Result<Vec<Value>> {
    let namespace = Some(meta_str(parent, "namespace")).filter(|ns| !ns.is_empty());
    let claimant = Claimant {
        uid: meta_str(parent, "uid"),
        namespace,
        deleting: offline::is_deleting(parent),
        selector,
    };
    let mut claimed = Vec::new();
    for (kind, _, res) in &resolved.children {
        // A namespaced parent cannot own cluster-scoped objects.
        let can_adopt = namespace.is_none() || res.namespaced;
        let mut listed = cluster.list(res, namespace).await?;
        if let (Some(ns), true, false) = (namespace, res.namespaced, kind.namespaces.is_empty()) {
            // Children elsewhere (extension): tracked by the parent-uid label in any namespace.
            let selector = format!("{}={}", offline::PARENT_UID_LABEL, claimant.uid);
            let elsewhere = cluster.list_labelled(res, &selector).await?;
            listed.extend(
                elsewhere
                    .into_iter()
                    .filter(|o| meta_str(o, "namespace") != ns),
            );
        }
        for obj in listed {
            let what = plan::describe(&offline::child_key(&obj));
            match offline::classify(&claimant, &obj) {
                Claim::Owned => claimed.push(obj),
                Claim::Adopt if can_adopt => {
                    eprintln!("note: the controller would adopt {what}");
                    claimed.push(obj);
                }
                Claim::Release => eprintln!("note: the controller would release {what}"),
                Claim::Adopt | Claim::Ignore => {}
            }
        }
    }
    Ok(claimed)
}
