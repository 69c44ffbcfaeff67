//! `metacontroller render`: one sync of one parent without a running controller, for hook
//! authors. It builds the exact request the controller would send (or replays a recorded
//! one), calls the hook at a URL or as a command, checks the answer as the controller does
//! and prints the desired objects — or, with `--diff`, the writes the controller would make.
//!
//! Everything that decides something is the controllers crate's own code (request
//! building, hook choice, validation, selector labels, the writer's planning); this module
//! only reads inputs and prints.
//!
//! - [`args`]: the flags;
//! - [`inputs`]: files (controller, objects, CRDs, replayed requests);
//! - [`cluster`]: the live cluster, or an in-process API server offline;
//! - [`hook`]: calling the hook (URL or command);
//! - [`composite`] / [`decorator`]: one sync of each kind;
//! - [`steps`]: the steps both kinds share (hook choice, customize, printing);
//! - [`plan`]: `--diff` output.

pub mod args;
mod cluster;
mod composite;
mod decorator;
mod hook;
mod inputs;
mod plan;
mod steps;

use anyhow::{bail, Context};
use metacontroller_api::hook::{EndpointConfig, HookVersion};
use metacontroller_api::wire::{CustomizableController, ObjectMap};
use metacontroller_controllers::offline::{
    self, listing, selects, CompiledRule, FinalizerSync, Listing, Scope,
};
use serde_json::Value;

use args::{HookName, RenderArgs};
use cluster::Cluster;
use hook::{Caller, Target};
use inputs::Controller;

/// A request ready to send, with what validation needs.
struct Prepared {
    /// The body, exactly as sent.
    body: Value,
    /// The parent (target) the request carries.
    object: Value,
    /// The observed children (attachments) the request carries.
    observed: Vec<Value>,
    /// `sync` or `finalize`.
    hook_name: &'static str,
}

/// What both kinds of rendered sync use to reach the cluster and the hooks.
struct Env<'a> {
    args: &'a RenderArgs,
    cluster: &'a Cluster,
    caller: &'a Caller,
    /// The controller's shared hook endpoint settings.
    endpoints: Vec<EndpointConfig>,
}

impl Env<'_> {
    /// `--hook customize`: calls the controller's customize hook for `object` and prints
    /// its answer.
    async fn customize(
        &self,
        hook: Option<&metacontroller_api::hook::Hook>,
        controller: CustomizableController,
        object: &Value,
    ) -> anyhow::Result<()> {
        steps::customize(self.caller, hook, controller, &self.endpoints, object).await
    }

    /// The request for `object` and its `observed` children: the related objects for the
    /// hook's `version` (from the customize hook, or `--related`), then the body `build`
    /// makes of them, exactly as the controller sends it.
    async fn prepare<R: serde::Serialize>(
        &self,
        controller: CustomizableController,
        object: Value,
        observed: Vec<Value>,
        (version, hook_name): (HookVersion, &'static str),
        build: impl FnOnce(&Value, &[Value], ObjectMap) -> R,
    ) -> anyhow::Result<Prepared> {
        let related = related(
            self.args,
            self.cluster,
            self.caller,
            controller,
            &self.endpoints,
            version,
            &object,
        )
        .await?;
        let request = build(&object, &observed, related);
        Ok(Prepared {
            body: serde_json::to_value(&request)?,
            object,
            observed,
            hook_name,
        })
    }
}

/// Runs `metacontroller render`.
pub async fn run(args: &RenderArgs) -> anyhow::Result<()> {
    let controller = inputs::controller(&args.controller)?;
    let target = if let Some(url) = &args.hook_url {
        Target::Url(url.clone())
    } else if let Some(command) = &args.hook_command {
        Target::Command(command.clone())
    } else if let Some(file) = &args.jsonnet {
        Target::Jsonnet(file.clone())
    } else if let Some(file) = &args.wasm {
        Target::Wasm(file.clone())
    } else if args.is_live() {
        Target::Configured
    } else {
        bail!("--hook-url, --hook-command, --jsonnet or --wasm is required (or --live, to call the controller's own hooks)")
    };
    let replay = args.request.as_deref().map(inputs::replay).transpose()?;
    if let Some(kind) = replay.as_ref().and_then(|r| r.controller_kind.as_deref()) {
        if kind != controller.kind() {
            bail!(
                "the request was recorded for a {kind}, but {} is a {}",
                args.controller.display(),
                controller.kind()
            );
        }
    }
    let requested = args.hook.or(args.finalizing.then_some(HookName::Finalize));
    let cluster = if args.is_live() {
        Cluster::live(args.kubeconfig.as_deref()).await?
    } else {
        let mut files = vec![args.controller.clone()];
        files.extend(args.crd.iter().cloned());
        Cluster::offline(&inputs::crds(&files)?).await?
    };
    let caller = Caller::new(target, cluster.is_live().then(|| cluster.client.clone()))?;
    tracing::debug!(controller = controller.name(), "rendering");
    let Some(choice) = &args.code else {
        return Box::pin(render_with(
            args, &cluster, &caller, controller, replay, requested,
        ))
        .await;
    };
    if !cluster.is_live() {
        bail!("--code runs a stored code version: it needs --live (or --kubeconfig)");
    }
    let customizable = match &controller {
        Controller::Composite(c) => CustomizableController::Composite(c.clone()),
        Controller::Decorator(c) => CustomizableController::Decorator(c.clone()),
    };
    let choice: metacontroller_controllers::CodeChoice = choice.parse()?;
    let (digest, pinned) =
        metacontroller_controllers::stored_code(&cluster.client, &customizable, &choice)
            .await
            .map_err(|e| anyhow::anyhow!("--code: {e}"))?;
    eprintln!("render: running stored code version {digest}");
    // Boxed: the render's state is large, and this future would hold it inline.
    let render = Box::pin(render_with(
        args, &cluster, &caller, controller, replay, requested,
    ));
    metacontroller_hooks::with_pinned_code(pinned, render).await
}

/// One render of `controller` (the hook calls inside it run pinned code, with --code).
async fn render_with(
    args: &RenderArgs,
    cluster: &Cluster,
    caller: &Caller,
    controller: Controller,
    replay: Option<inputs::Replay>,
    requested: Option<HookName>,
) -> anyhow::Result<()> {
    match controller {
        Controller::Composite(cc) => {
            Box::pin(composite::render(
                args, cluster, caller, *cc, replay, requested,
            ))
            .await
        }
        Controller::Decorator(dc) => {
            decorator::render(args, cluster, caller, *dc, replay, requested).await
        }
    }
}

/// A string field of `metadata` ("" when absent).
fn meta_str<'a>(object: &'a Value, field: &str) -> &'a str {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `metadata.labels` as a map.
fn labels(object: &Value) -> std::collections::BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// The parent as the hook sees it: with the controller's finalizer put in place first (as
/// the controller does before any hook call), and — for `--finalizing` — a
/// deletionTimestamp, as a parent being deleted has.
fn prepare_parent(
    mut parent: Value,
    finalizer_name: &str,
    finalize_hook: bool,
    requested: Option<HookName>,
) -> Value {
    let present = match offline::finalizer_sync(&parent, finalizer_name, finalize_hook) {
        FinalizerSync::Keep => None,
        FinalizerSync::Add => Some(true),
        FinalizerSync::Remove => Some(false),
    };
    if let Some(updated) = present.and_then(|p| offline::with_finalizer(&parent, finalizer_name, p))
    {
        parent = updated;
    }
    if requested == Some(HookName::Finalize) && !offline::is_deleting(&parent) {
        let now = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ");
        if let Some(meta) = parent.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("deletionTimestamp".into(), Value::String(now.to_string()));
        }
    }
    parent
}

/// The `related` map of a sync request. From `--related` files when given; else, against
/// a cluster with a customize hook configured, as the controller builds it: the customize
/// hook (at its configured URL) answers rules, which select objects with the controller's
/// own rule compilation, scope and matching.
async fn related(
    args: &RenderArgs,
    cluster: &Cluster,
    caller: &Caller,
    controller: CustomizableController,
    endpoints: &[EndpointConfig],
    version: HookVersion,
    parent: &Value,
) -> anyhow::Result<ObjectMap> {
    let customize = match &controller {
        CustomizableController::Composite(c) => c.spec.customize_hook().cloned(),
        CustomizableController::Decorator(c) => c.spec.customize_hook().cloned(),
    };
    let Some(hook) = customize.filter(|_| cluster.is_live() && args.related.is_empty()) else {
        return related_map(&args.related, version, parent);
    };
    let response = steps::customize_response(
        caller,
        &hook,
        controller,
        endpoints,
        parent,
        steps::CustomizeTarget::Configured,
    )
    .await
    .context("the customize hook (at its configured URL; or pass --related FILE)")?;
    let parent_namespace = Some(meta_str(parent, "namespace")).filter(|ns| !ns.is_empty());
    let scope = Scope {
        version: hook.effective_version(),
        parent_namespace: parent_namespace.map(str::to_owned),
    };
    let mut map = ObjectMap::new();
    for (index, rule) in response.related_resource_rules.iter().enumerate() {
        let rule = CompiledRule::compile(index, rule, &cluster.resources)?;
        let res = rule.resource.clone();
        map.init_group(&res.api_version, &res.kind);
        let candidates = match listing(&rule, &scope)? {
            Listing::All => cluster.list(&res, None).await?,
            Listing::Namespace(ns) => cluster.list(&res, Some(&ns)).await?,
            Listing::SelectedNamespaces => {
                let namespaces = cluster
                    .resources
                    .get("v1", "namespaces")
                    .context("namespaces are not served")?
                    .clone();
                let mut out = Vec::new();
                for ns in cluster.list(&namespaces, None).await? {
                    if rule.namespaces.matches(&labels(&ns)) {
                        out.extend(cluster.list(&res, Some(meta_str(&ns, "name"))).await?);
                    }
                }
                out
            }
        };
        for object in candidates {
            let dynamic: kube::core::DynamicObject = serde_json::from_value(object.clone())?;
            if selects(&rule, &dynamic) {
                map.insert(version, parent_namespace, object);
            }
        }
    }
    Ok(map)
}

/// The `related` map of `--related` files, keyed for a hook of `version`.
fn related_map(
    files: &[std::path::PathBuf],
    version: HookVersion,
    parent: &Value,
) -> anyhow::Result<ObjectMap> {
    let namespace = Some(meta_str(parent, "namespace")).filter(|ns| !ns.is_empty());
    let mut map = ObjectMap::new();
    for object in inputs::all_objects(files).context("--related")? {
        map.insert(version, namespace, object);
    }
    Ok(map)
}
