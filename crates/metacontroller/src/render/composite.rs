//! One CompositeController sync, rendered: the request the controller would send (built by
//! the controller's own functions), the hook's answer checked by the controller's own
//! rules, and (with --diff) the writes the controller's writer would plan.

use anyhow::{bail, Context};
use metacontroller_api::wire::{
    CompositeHookRequest, CompositeHookResponse, CustomizableController,
};
use metacontroller_api::CompositeController;
use metacontroller_controllers::children::{self, ChildType, ParentRef};
use metacontroller_controllers::claim::{self, Claim, Claimant};
use metacontroller_controllers::composite::{self, Resolved, SyncError};
use metacontroller_controllers::finalizer;
use metacontroller_dynamic::Selector;
use metacontroller_hooks::CallContext;
use serde_json::{json, Value};

use super::args::{HookName, RenderArgs};
use super::cluster::Cluster;
use super::hook::{CallError, Caller};
use super::inputs::{self, Replay};
use super::{meta_str, plan, steps, Prepared};

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
    let types: Vec<ChildType> = resolved.children.iter().map(|c| c.0.clone()).collect();
    let spec = &controller.spec;
    let name = controller.metadata.name.clone().unwrap_or_default();
    let generate = spec.generate_selector == Some(true);
    let endpoints: Vec<_> = spec.all_endpoint_configs().cloned().collect();
    if resolved.revisions.is_some() {
        eprintln!(
            "note: a child type uses a rolling update: the controller calls the hook once per \
             parent revision and moves one child per sync; this shows the latest revision only"
        );
    }

    let prepared = match replay {
        Some(replay) => from_replay(&controller, replay, requested)?,
        None => {
            let given = inputs::single_object(args.parent.as_deref().context("--parent")?)?;
            let parent = super::prepare_parent(
                cluster.parent(&given).await?,
                &controller.finalizer_name(),
                spec.finalize_hook().is_some(),
                requested,
            );
            if finalizer::is_ignored(
                resolved.parent_selector.matches(&super::labels(&parent)),
                &parent,
                &controller.finalizer_name(),
            ) {
                bail!("the controller ignores this parent: it does not match spec.parentResource.labelSelector");
            }
            if requested == Some(HookName::Customize) {
                return steps::customize(
                    caller,
                    spec.customize_hook(),
                    CustomizableController::Composite(Box::new(controller.clone())),
                    &endpoints,
                    &parent,
                )
                .await;
            }
            let (hook, hook_name, finalizing) =
                match steps::requested_hook(spec.sync_hook(), spec.finalize_hook(), requested)? {
                    Some(chosen) => chosen,
                    None => {
                        composite::choose_hook(&controller, &resolved.parent_selector, &parent)?
                    }
                };
            let selector = composite::parent_child_selector(&parent, generate)?;
            let observed = if cluster.is_live() {
                claimed_children(cluster, &resolved, &parent, &selector).await?
            } else {
                inputs::all_objects(&args.children)?
            };
            let version = hook.effective_version();
            let related = super::related(
                args,
                cluster,
                caller,
                CustomizableController::Composite(Box::new(controller.clone())),
                &endpoints,
                version,
                &parent,
            )
            .await?;
            let request = composite::hook_request(
                &controller,
                &parent,
                version,
                &types,
                &observed,
                related,
                finalizing,
            );
            Prepared {
                body: serde_json::to_value(&request)?,
                object: parent,
                observed,
                hook_name,
            }
        }
    };

    let parent = &prepared.object;
    let hook = steps::hook_named(spec.sync_hook(), spec.finalize_hook(), prepared.hook_name)?;
    let namespace = Some(meta_str(parent, "namespace")).filter(|ns| !ns.is_empty());
    let parent_name = meta_str(parent, "name");
    let parent_kind = resolved.parent.kind.clone();
    let key = match namespace {
        Some(ns) => format!("{ns}/{parent_name}"),
        None => parent_name.to_string(),
    };
    let ctx = CallContext {
        controller: &name,
        hook_name: prepared.hook_name,
        parent_key: &key,
    };
    let response: CompositeHookResponse = caller
        .call(&ctx, hook, &endpoints, &prepared.body)
        .await
        .map_err(|e| {
            let parent = composite::describe_parent(&parent_kind, namespace, parent_name);
            match e {
                CallError::Hook(source) => anyhow::Error::new(SyncError::Hook {
                    hook: prepared.hook_name,
                    parent,
                    source,
                }),
                other => anyhow::anyhow!("sync hook failed for {parent}: {other}"),
            }
        })?;

    let (mut desired, refused) = children::validate_desired(&types, namespace, response.children);
    let selector = composite::parent_child_selector(parent, generate)?;
    composite::label_desired(generate, meta_str(parent, "uid"), &selector, &mut desired)?;
    let status = composite::desired_status(parent, response.status);

    if args.diff {
        let manages = finalizer::manages_children(
            parent,
            &controller.finalizer_name(),
            spec.finalize_hook().is_some(),
        );
        let owner = ParentRef {
            api_version: resolved.parent.api_version.clone(),
            kind: resolved.parent.kind.clone(),
            name: parent_name.to_string(),
            uid: meta_str(parent, "uid").to_string(),
        };
        steps::print_owned_plan(
            args,
            cluster,
            manages,
            &owner,
            &types,
            &prepared.observed,
            &desired,
            "children: not managed (the parent is being deleted without our finalizer)",
        )
        .await?;
        if prepared.hook_name == "finalize" {
            println!(
                "finalizer: {}",
                if response.finalized {
                    "removed (finalized)"
                } else {
                    "kept (not finalized yet)"
                }
            );
        }
        print!("{}", plan::status(parent.get("status"), &status));
    } else {
        let doc = json!({
            "children": desired.values().map(|(_, c)| c).collect::<Vec<_>>(),
            "status": status,
        });
        steps::print_answer(
            doc,
            response.resync_after_seconds,
            prepared.hook_name,
            response.finalized,
        )?;
    }
    if !refused.is_empty() {
        return Err(SyncError::Refused(refused).into());
    }
    Ok(())
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
        deleting: finalizer::is_deleting(parent),
        selector,
    };
    let mut claimed = Vec::new();
    for (_, _, res) in &resolved.children {
        // A namespaced parent cannot own cluster-scoped objects.
        let can_adopt = namespace.is_none() || res.namespaced;
        for obj in cluster.list(res, namespace).await? {
            let what = plan::describe(&children::child_key(&obj));
            match claim::classify(&claimant, &obj) {
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
