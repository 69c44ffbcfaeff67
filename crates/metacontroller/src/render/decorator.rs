//! One DecoratorController sync, rendered: the request built by the controller's own
//! functions, the answer checked and applied to the target by its own rules, and (with
//! --diff) the attachment writes its writer would plan and the target's change.

use anyhow::{bail, Context};
use metacontroller_api::wire::{
    CustomizableController, DecoratorHookRequest, DecoratorHookResponse,
};
use metacontroller_api::DecoratorController;
use metacontroller_controllers::offline::decorator::{
    self as sync_plan, is_own_attachment, Resolved, SyncError, SyncPlan,
};
use metacontroller_controllers::offline::{self, ChildType, ParentRef};
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
    controller: DecoratorController,
    replay: Option<Replay>,
    requested: Option<HookName>,
) -> anyhow::Result<()> {
    let resolved = Resolved::new(&controller, &cluster.resources)
        .map_err(|e| cluster.explain(anyhow::Error::new(e)))?;
    let sync = Sync {
        env: Env {
            args,
            cluster,
            caller,
            endpoints: controller.spec.all_endpoint_configs().cloned().collect(),
        },
        types: resolved.attachments.iter().map(|a| a.0.clone()).collect(),
        controller: &controller,
        resolved: &resolved,
    };
    let prepared = match replay {
        Some(replay) => from_replay(replay, requested)?,
        None => match sync.prepare_live(requested).await? {
            Some(prepared) => prepared,
            None => return Ok(()), // the customize hook was rendered
        },
    };
    let mut response = sync.call(&prepared).await?;
    let events = steps::checked_events(prepared.hook_name, std::mem::take(&mut response.events));
    let answer = Answer {
        labels: response.labels.clone(),
        annotations: response.annotations.clone(),
        resync_after_seconds: response.resync_after_seconds,
        finalized: response.finalized,
    };
    // The controller's own step from here: what the answer makes of the target and its
    // attachments.
    let planned = sync_plan::plan_sync(&controller, &prepared.object, &sync.types, response);
    if args.diff {
        sync.print_diff(&prepared, &planned).await?;
        steps::show_events(None, events);
    } else {
        print_answer(&prepared, &planned, &answer, events)?;
    }
    if !planned.refused.is_empty() {
        return Err(SyncError::Refused(planned.refused).into());
    }
    Ok(())
}

/// The fields of the hook's answer that are printed as given.
struct Answer {
    labels: Option<std::collections::BTreeMap<String, Option<String>>>,
    annotations: Option<std::collections::BTreeMap<String, Option<String>>>,
    resync_after_seconds: f64,
    finalized: bool,
}

/// A replayed request: its target and attachments, the hook it was sent to.
fn from_replay(replay: Replay, requested: Option<HookName>) -> anyhow::Result<Prepared> {
    steps::refuse_customize_replay(replay.hook.as_deref(), requested)?;
    let request: DecoratorHookRequest = serde_json::from_value(replay.body.clone())
        .context("the request is not a DecoratorController sync/finalize request")?;
    Ok(Prepared {
        observed: request.attachments.objects().cloned().collect(),
        object: request.object,
        hook_name: steps::replayed_hook_name(replay.hook.as_deref(), requested, request.finalizing),
        body: replay.body,
    })
}

/// One rendered sync of a DecoratorController: what its steps share.
struct Sync<'a> {
    env: Env<'a>,
    controller: &'a DecoratorController,
    resolved: &'a Resolved,
    /// The declared attachment types.
    types: Vec<ChildType>,
}

impl Sync<'_> {
    /// The request the controller would send for the given target, built from the cluster
    /// (or the given attachments offline). `None` when the customize hook was asked for: it
    /// was called and printed.
    async fn prepare_live(&self, requested: Option<HookName>) -> anyhow::Result<Option<Prepared>> {
        let (controller, spec) = (self.controller, &self.controller.spec);
        let finalizer_name = controller.finalizer_name();
        let given = inputs::single_object(self.env.args.parent.as_deref().context("--parent")?)?;
        let object = super::prepare_parent(
            self.env.cluster.parent(&given).await?,
            &finalizer_name,
            spec.finalize_hook().is_some(),
            requested,
        );
        let matches = self.resolved.selector.matches(&object);
        if offline::is_ignored(matches, &object, &finalizer_name) {
            bail!("the controller ignores this object: it matches none of spec.resources");
        }
        let customizable = CustomizableController::Decorator(Box::new(controller.clone()));
        if requested == Some(HookName::Customize) {
            let hook = spec.customize_hook();
            self.env.customize(hook, customizable, &object).await?;
            return Ok(None);
        }
        let (hook, hook_name, finalizing) =
            match steps::requested_hook(spec.sync_hook(), spec.finalize_hook(), requested)? {
                Some(chosen) => chosen,
                None => sync_plan::choose_hook(controller, &self.resolved.selector, &object)?,
            };
        let observed = self.observed_attachments(&object).await?;
        let version = hook.effective_version();
        let build = |target: &Value, observed: &[Value], related| {
            let types = &self.types;
            sync_plan::hook_request(
                controller, target, version, types, observed, related, finalizing,
            )
        };
        let hook = (version, hook_name);
        let prepared = self
            .env
            .prepare(customizable, object, observed, hook, build);
        Ok(Some(prepared.await?))
    }

    /// The target's attachments: from the cluster (controlled by it and annotated with
    /// this decorator's name, as the controller finds them), or the given ones offline.
    async fn observed_attachments(&self, object: &Value) -> anyhow::Result<Vec<Value>> {
        if !self.env.cluster.is_live() {
            return inputs::all_objects(&self.env.args.children);
        }
        let name = self.controller.metadata.name.as_deref().unwrap_or_default();
        let namespace = Some(meta_str(object, "namespace")).filter(|ns| !ns.is_empty());
        let uid = meta_str(object, "uid");
        let mut observed = Vec::new();
        for (_, res) in &self.resolved.attachments {
            for obj in self.env.cluster.list(res, namespace).await? {
                if is_own_attachment(&obj, uid, name) {
                    observed.push(obj);
                }
            }
        }
        Ok(observed)
    }

    /// Sends the prepared request to the hook; errors read as the controller's.
    async fn call(&self, prepared: &Prepared) -> anyhow::Result<DecoratorHookResponse> {
        let spec = &self.controller.spec;
        let hook = steps::hook_named(spec.sync_hook(), spec.finalize_hook(), prepared.hook_name)?;
        let object = &prepared.object;
        let namespace = Some(meta_str(object, "namespace")).filter(|ns| !ns.is_empty());
        let res = self.env.cluster.resource_of(object)?;
        let name = meta_str(object, "name");
        let key = match namespace {
            Some(ns) => format!("{}/{}/{ns}/{name}", res.api_version, res.kind),
            None => format!("{}/{}/{name}", res.api_version, res.kind),
        };
        let controller = self.controller.metadata.name.clone().unwrap_or_default();
        let ctx = CallContext {
            controller: &controller,
            hook_name: prepared.hook_name,
            parent_key: &key,
        };
        self.env
            .caller
            .call(&ctx, hook, &self.env.endpoints, &prepared.body)
            .await
            .map_err(|e| match e {
                // One message: the hook error is in the text, not again as its cause.
                CallError::Hook(source) => anyhow::anyhow!(
                    "{}",
                    SyncError::Hook {
                        hook: prepared.hook_name,
                        source,
                    }
                ),
                other => anyhow::anyhow!("{} hook: {other}", prepared.hook_name),
            })
    }

    /// `--diff`: the attachment writes and the target's change the sync would make.
    async fn print_diff(&self, prepared: &Prepared, planned: &SyncPlan) -> anyhow::Result<()> {
        let object = &prepared.object;
        let res = self.env.cluster.resource_of(object)?;
        let owner = ParentRef {
            api_version: res.api_version.clone(),
            kind: res.kind.clone(),
            name: meta_str(object, "name").to_string(),
            uid: meta_str(object, "uid").to_string(),
            namespace: String::new(),
        };
        steps::print_owned_plan(
            self.env.args,
            self.env.cluster,
            planned.manages_attachments,
            &owner,
            &self.types,
            &prepared.observed,
            &planned.desired,
            "attachments: not managed (the object is being deleted without our finalizer)",
        )
        .await?;
        let update = &planned.update;
        if update.is_noop() {
            println!("target: unchanged");
        } else {
            println!("target: update");
            let diff = plan::unified(Some(object), Some(&update.object), "observed", "decorated");
            print!("{diff}");
        }
        Ok(())
    }
}

/// The checked answer as YAML: attachments, the answer's labels and annotations, the
/// target's resulting status.
fn print_answer(
    prepared: &Prepared,
    planned: &SyncPlan,
    answer: &Answer,
    events: Vec<Value>,
) -> anyhow::Result<()> {
    let mut doc = json!({
        "attachments": planned.desired.values().map(|(_, c)| c).collect::<Vec<_>>(),
    });
    steps::show_events(Some(&mut doc), events);
    if let Some(labels) = &answer.labels {
        doc["labels"] = json!(labels);
    }
    if let Some(annotations) = &answer.annotations {
        doc["annotations"] = json!(annotations);
    }
    if let Some(status) = planned.update.object.get("status") {
        doc["status"] = status.clone();
    }
    steps::print_answer(
        doc,
        answer.resync_after_seconds,
        prepared.hook_name,
        answer.finalized,
    )
}
