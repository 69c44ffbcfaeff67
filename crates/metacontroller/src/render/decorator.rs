//! One DecoratorController sync, rendered: the request built by the controller's own
//! functions, the answer checked and applied to the target by its own rules, and (with
//! --diff) the attachment writes its writer would plan and the target's change.

use anyhow::{bail, Context};
use metacontroller_api::wire::{
    CustomizableController, DecoratorHookRequest, DecoratorHookResponse,
};
use metacontroller_api::DecoratorController;
use metacontroller_controllers::children::{ChildType, ParentRef};
use metacontroller_controllers::decorator::attachments::{self, is_own_attachment};
use metacontroller_controllers::decorator::{self, target, Resolved, SyncError};
use metacontroller_controllers::finalizer;
use metacontroller_hooks::CallContext;
use serde_json::json;

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
    controller: DecoratorController,
    replay: Option<Replay>,
    requested: Option<HookName>,
) -> anyhow::Result<()> {
    let resolved = Resolved::new(&controller, &cluster.resources)
        .map_err(|e| cluster.explain(anyhow::Error::new(e)))?;
    let types: Vec<ChildType> = resolved.attachments.iter().map(|a| a.0.clone()).collect();
    let spec = &controller.spec;
    let name = controller.metadata.name.clone().unwrap_or_default();
    let finalizer_name = controller.finalizer_name();
    let endpoints: Vec<_> = spec.all_endpoint_configs().cloned().collect();

    let prepared = match replay {
        Some(replay) => {
            steps::refuse_customize_replay(replay.hook.as_deref(), requested)?;
            let request: DecoratorHookRequest = serde_json::from_value(replay.body.clone())
                .context("the request is not a DecoratorController sync/finalize request")?;
            Prepared {
                observed: request.attachments.objects().cloned().collect(),
                object: request.object,
                hook_name: steps::replayed_hook_name(
                    replay.hook.as_deref(),
                    requested,
                    request.finalizing,
                ),
                body: replay.body,
            }
        }
        None => {
            let given = inputs::single_object(args.parent.as_deref().context("--parent")?)?;
            let object = super::prepare_parent(
                cluster.parent(&given).await?,
                &finalizer_name,
                spec.finalize_hook().is_some(),
                requested,
            );
            if finalizer::is_ignored(resolved.selector.matches(&object), &object, &finalizer_name) {
                bail!("the controller ignores this object: it matches none of spec.resources");
            }
            if requested == Some(HookName::Customize) {
                return steps::customize(
                    caller,
                    spec.customize_hook(),
                    CustomizableController::Decorator(Box::new(controller.clone())),
                    &endpoints,
                    &object,
                )
                .await;
            }
            let (hook, hook_name, finalizing) =
                match steps::requested_hook(spec.sync_hook(), spec.finalize_hook(), requested)? {
                    Some(chosen) => chosen,
                    None => decorator::choose_hook(&controller, &resolved.selector, &object)?,
                };
            let observed = if cluster.is_live() {
                let namespace = Some(meta_str(&object, "namespace")).filter(|ns| !ns.is_empty());
                let uid = meta_str(&object, "uid");
                let mut observed = Vec::new();
                for (_, res) in &resolved.attachments {
                    for obj in cluster.list(res, namespace).await? {
                        if is_own_attachment(&obj, uid, &name) {
                            observed.push(obj);
                        }
                    }
                }
                observed
            } else {
                inputs::all_objects(&args.children)?
            };
            let version = hook.effective_version();
            let related = super::related(
                args,
                cluster,
                caller,
                CustomizableController::Decorator(Box::new(controller.clone())),
                &endpoints,
                version,
                &object,
            )
            .await?;
            let request = decorator::hook_request(
                &controller,
                &object,
                version,
                &types,
                &observed,
                related,
                finalizing,
            );
            Prepared {
                body: serde_json::to_value(&request)?,
                object,
                observed,
                hook_name,
            }
        }
    };

    let object = &prepared.object;
    let hook = steps::hook_named(spec.sync_hook(), spec.finalize_hook(), prepared.hook_name)?;
    let namespace = Some(meta_str(object, "namespace")).filter(|ns| !ns.is_empty());
    let res = cluster.resource_of(object)?;
    let key = format!(
        "{}/{}/{}",
        res.api_version,
        res.kind,
        match namespace {
            Some(ns) => format!("{ns}/{}", meta_str(object, "name")),
            None => meta_str(object, "name").to_string(),
        }
    );
    let ctx = CallContext {
        controller: &name,
        hook_name: prepared.hook_name,
        parent_key: &key,
    };
    let response: DecoratorHookResponse = caller
        .call(&ctx, hook, &endpoints, &prepared.body)
        .await
        .map_err(|e| match e {
            CallError::Hook(source) => anyhow::Error::new(SyncError::Hook {
                hook: prepared.hook_name,
                source,
            }),
            other => anyhow::anyhow!("{} hook: {other}", prepared.hook_name),
        })?;

    let (desired, refused) =
        attachments::prepare_desired(&types, namespace, &name, response.attachments);
    let finalized = (response.finalized && finalizer::has_finalizer(object, &finalizer_name))
        .then_some(finalizer_name.as_str());
    let update = target::apply_response(
        object,
        response.labels.as_ref(),
        response.annotations.as_ref(),
        response.status.as_ref(),
        finalized,
    );

    if args.diff {
        let manages =
            finalizer::manages_children(object, &finalizer_name, spec.finalize_hook().is_some());
        let owner = ParentRef {
            api_version: res.api_version.clone(),
            kind: res.kind.clone(),
            name: meta_str(object, "name").to_string(),
            uid: meta_str(object, "uid").to_string(),
        };
        steps::print_owned_plan(
            args,
            cluster,
            manages,
            &owner,
            &types,
            &prepared.observed,
            &desired,
            "attachments: not managed (the object is being deleted without our finalizer)",
        )
        .await?;
        if update.is_noop() {
            println!("target: unchanged");
        } else {
            println!("target: update");
            print!(
                "{}",
                plan::unified(Some(object), Some(&update.object), "observed", "decorated")
            );
        }
    } else {
        let mut doc = json!({
            "attachments": desired.values().map(|(_, c)| c).collect::<Vec<_>>(),
        });
        if let Some(labels) = &response.labels {
            doc["labels"] = json!(labels);
        }
        if let Some(annotations) = &response.annotations {
            doc["annotations"] = json!(annotations);
        }
        if let Some(status) = update.object.get("status") {
            doc["status"] = status.clone();
        }
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
