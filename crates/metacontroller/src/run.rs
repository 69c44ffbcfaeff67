//! `metacontroller run`: the controller process. It connects, then runs one reconciler per
//! CompositeController and per DecoratorController object (selected by
//! `--target-label-selector`), sharing informers and the hook client between them.

use std::time::Duration;

use anyhow::Context;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::{Client, Config};

use metacontroller_controllers::events::{reason, EventRecorder};
use metacontroller_controllers::metrics::{COMPOSITE, DECORATOR};

use crate::cli::ControllerArgs;

const GROUP: &str = "metacontroller.k8s.io";
const VERSION: &str = "v1alpha1";

/// Builds a client from --kubeconfig, else the usual inference ($KUBECONFIG,
/// ~/.kube/config, in-cluster service account).
pub async fn client(args: &ControllerArgs) -> anyhow::Result<Client> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => Config::infer()
            .await
            .context("no kubeconfig found (set --kubeconfig or $KUBECONFIG, or run in a pod)")?,
    };
    Client::try_from(config).context("building the Kubernetes client")
}

/// Runs the controller until Ctrl-C.
pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    log_compat_flags(&args);
    // One registry for the whole process; every part registers its families here.
    let registry = crate::metrics::registry()?;
    let readiness = crate::health::Readiness::default();
    let _servers = serve(&args, &registry, &readiness).await?;
    let client = client(&args).await?;
    tokio::select! {
        result = discover_controllers(&client, &args) => result?,
        _ = tokio::signal::ctrl_c() => return Ok(()),
    }
    let shared = Shared::new(client.clone(), &args, &registry, readiness)?;
    tokio::select! {
        result = run_composite(shared.clone(), &args) => result?,
        result = run_decorator(shared, &args) => result?,
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C")?,
    }
    tracing::info!("shutting down");
    Ok(())
}

/// Starts the metrics and probe servers (each off when its flag is `0`).
async fn serve(
    args: &ControllerArgs,
    registry: &prometheus::Registry,
    readiness: &crate::health::Readiness,
) -> anyhow::Result<crate::listen::Servers> {
    let mut servers = crate::listen::Servers::default();
    let metrics = crate::metrics::router(registry.clone());
    servers
        .serve("metrics-address", &args.metrics_address, "metrics", metrics)
        .await?;
    let probes = crate::health::router(readiness.clone());
    let flag = "health-probe-bind-address";
    servers
        .serve(
            flag,
            &args.health_probe_bind_address,
            "health probes",
            probes,
        )
        .await?;
    Ok(servers)
}

/// Lists both controller kinds, retrying with backoff while the API server or the CRDs
/// are unavailable, and logs what it finds.
async fn discover_controllers(client: &Client, args: &ControllerArgs) -> anyhow::Result<()> {
    let selector = args.target_label_selector.trim();
    let params = if selector.is_empty() {
        ListParams::default()
    } else {
        ListParams::default().labels(selector)
    };
    let mut delay = Duration::from_secs(1);
    loop {
        match list_controllers(client, &params).await {
            Ok(found) => {
                for (kind, names) in found {
                    tracing::info!(kind, count = names.len(), names = ?names, "found controllers");
                }
                return Ok(());
            }
            Err(err) => {
                tracing::error!(error = %format!("{err:#}"), retry_in = ?delay, "cannot list controllers");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(60));
            }
        }
    }
}

async fn list_controllers(
    client: &Client,
    params: &ListParams,
) -> anyhow::Result<Vec<(&'static str, Vec<String>)>> {
    let mut found = Vec::new();
    for (kind, plural) in [
        ("CompositeController", "compositecontrollers"),
        ("DecoratorController", "decoratorcontrollers"),
    ] {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let list = api.list(params).await.map_err(|err| match &err {
            kube::Error::Api(status) if status.code == 404 => anyhow::anyhow!(
                "{kind} is not served by the API server: install the CRDs from deploy/crds ({err})"
            ),
            _ => anyhow::Error::new(err).context(format!("listing {plural}")),
        })?;
        let names = list
            .items
            .into_iter()
            .filter_map(|item| item.metadata.name)
            .collect();
        found.push((kind, names));
    }
    Ok(found)
}

/// Upstream flags we accept so existing manifests start, but do not act on yet.
fn log_compat_flags(args: &ControllerArgs) {
    if args.pprof_address != "0" {
        tracing::warn!(pprof_address = %args.pprof_address, "--pprof-address is accepted for compatibility; pprof is not served");
    }
    if args.api || args.api_trigger_sync {
        tracing::warn!("--api/--api-trigger-sync are accepted for compatibility; the HTTP API is not served yet");
    }
    if args.leader_election {
        tracing::warn!("--leader-election is accepted; leader election is not implemented yet");
    }
}

/// What every controller of the process shares: one informer per resource (whatever the
/// number of controllers using it), one hook client (connection pools, ETag caches) and one
/// Event recorder (one rate limit per object, whichever controller reports).
#[derive(Clone)]
struct Shared {
    client: Client,
    informers: metacontroller_dynamic::Informers,
    hooks: metacontroller_hooks::HookClient,
    events: EventRecorder,
    metrics: metacontroller_controllers::metrics::ControllerMetrics,
    readiness: crate::health::Readiness,
}

impl Shared {
    fn new(
        client: Client,
        args: &ControllerArgs,
        registry: &prometheus::Registry,
        readiness: crate::health::Readiness,
    ) -> anyhow::Result<Shared> {
        let informers = metacontroller_dynamic::Informers::new(
            client.clone(),
            metacontroller_dynamic::InformerConfig {
                flush_interval: Some(args.cache_flush_interval).filter(|d| !d.is_zero()),
            },
        );
        crate::metrics::register_informers(registry, informers.clone())?;
        readiness.set_informers(informers.clone());
        let hooks = metacontroller_hooks::HookClient::new(metacontroller_hooks::HookClientConfig {
            registry: Some(registry.clone()),
            ..Default::default()
        })
        .context("building the hook client")?;
        let metrics = metacontroller_controllers::metrics::ControllerMetrics::register(registry)?;
        let events = EventRecorder::new(client.clone(), args.events_qps, args.events_burst)
            .context("--events-qps/--events-burst")?;
        Ok(Shared {
            client,
            informers,
            hooks,
            events,
            metrics,
            readiness,
        })
    }
}

/// Why a reconciler could not start, and which Event reports it on the controller object.
struct StartFailure {
    /// The Event reason (`CreateError`, or `SyncError` for a parent without `/status`).
    reason: &'static str,
    /// The error.
    message: String,
}

impl StartFailure {
    /// Upstream's `Cannot create new controller: <error>`, except the parent-without-status
    /// case, whose message is complete as it is.
    fn event_message(&self) -> String {
        if self.reason == reason::CREATE_ERROR {
            format!("Cannot create new controller: {}", self.message)
        } else {
            self.message.clone()
        }
    }

    fn create_error(err: impl std::fmt::Display) -> Self {
        StartFailure {
            reason: reason::CREATE_ERROR,
            message: err.to_string(),
        }
    }
}

/// Watches controller objects of kind `T` (matching --target-label-selector) and keeps one
/// reconciler running per object: started on add, restarted when the spec changes, stopped
/// on delete. An object that cannot start (invalid spec, resource not served yet, ...) is
/// logged and retried after each discovery refresh (`--discovery-interval`), so a CRD
/// installed after its controller is picked up. `spec_of` gives the part whose change
/// restarts the reconciler. Starting / Started / Stopping / Stopped / CreateError /
/// SyncError Events are recorded on the controller object, as upstream.
async fn run_controllers<T, H, Start, Stop, StopFut>(
    shared: &Shared,
    args: &ControllerArgs,
    spec_of: fn(&T) -> serde_json::Value,
    start: Start,
    stop: Stop,
) -> anyhow::Result<()>
where
    T: kube::Resource<DynamicType = ()>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize
        + std::fmt::Debug
        + Send
        + 'static,
    Start: Fn(T, &metacontroller_dynamic::ResourceMap) -> Result<H, StartFailure>,
    Stop: Fn(H) -> StopFut,
    StopFut: std::future::Future<Output = ()>,
{
    use futures::StreamExt;
    use kube::runtime::{watcher, WatchStreamExt};
    use std::collections::HashMap;

    let kind = T::kind(&());
    let mut config = watcher::Config::default();
    let selector = args.target_label_selector.trim();
    if !selector.is_empty() {
        config = config.labels(selector);
    }
    let api: Api<T> = Api::all(shared.client.clone());
    let stream = watcher(api, config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut running: HashMap<String, (serde_json::Value, H)> = HashMap::new();
    // Objects that could not start, retried after each discovery refresh.
    let mut waiting: HashMap<String, T> = HashMap::new();
    let mut resources = metacontroller_dynamic::ResourceMap::new();
    let interval = if args.discovery_interval.is_zero() {
        Duration::from_secs(30)
    } else {
        args.discovery_interval
    };
    let mut retry = tokio::time::interval(interval);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let try_start = |obj: T,
                     resources: &metacontroller_dynamic::ResourceMap,
                     running: &mut HashMap<String, (serde_json::Value, H)>,
                     waiting: &mut HashMap<String, T>| {
        let Some(name) = obj.meta().name.clone() else {
            return;
        };
        let spec = spec_of(&obj);
        let object = serde_json::to_value(&obj).unwrap_or_default();
        match start(obj.clone(), resources) {
            Ok(handle) => {
                tracing::info!(%kind, %name, "started controller");
                shared.events.normal(
                    &object,
                    reason::STARTING,
                    format!("Starting controller: {name}"),
                );
                shared.events.normal(
                    &object,
                    reason::STARTED,
                    format!("Started controller: {name}"),
                );
                waiting.remove(&name);
                running.insert(name, (spec, handle));
            }
            Err(err) => {
                tracing::error!(%kind, %name, error = %err.message, "cannot start controller; retrying after the next discovery refresh");
                // Once per failure, not once per retry.
                if !waiting.contains_key(&name) {
                    shared
                        .events
                        .warning(&object, err.reason, err.event_message());
                }
                waiting.insert(name, obj);
            }
        }
    };
    loop {
        let event = tokio::select! {
            event = stream.next() => match event {
                Some(event) => event,
                None => break,
            },
            _ = retry.tick() => {
                if waiting.is_empty() {
                    continue;
                }
                refresh(&shared.client, &mut resources).await;
                for obj in waiting.values().cloned().collect::<Vec<_>>() {
                    try_start(obj, &resources, &mut running, &mut waiting);
                }
                continue;
            }
        };
        let obj = match event {
            Ok(watcher::Event::Apply(obj)) | Ok(watcher::Event::InitApply(obj)) => obj,
            Ok(watcher::Event::Delete(obj)) => {
                let Some(name) = obj.meta().name.as_ref() else {
                    continue;
                };
                waiting.remove(name);
                if let Some((_, handle)) = running.remove(name) {
                    tracing::info!(%kind, %name, "stopping controller");
                    let object = serde_json::to_value(&obj).unwrap_or_default();
                    shared.events.normal(
                        &object,
                        reason::STOPPING,
                        format!("Stopping controller: {name}"),
                    );
                    stop(handle).await;
                    shared.events.normal(
                        &object,
                        reason::STOPPED,
                        format!("Stopped controller: {name}"),
                    );
                }
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                shared.readiness.controllers_listed(&kind);
                continue;
            }
            Ok(_) => continue,
            Err(err) => {
                tracing::warn!(%kind, error = %err, "watching controllers");
                continue;
            }
        };
        let Some(name) = obj.meta().name.clone() else {
            continue;
        };
        let spec = spec_of(&obj);
        if running.get(&name).is_some_and(|(s, _)| *s == spec) {
            continue;
        }
        if let Some((_, handle)) = running.remove(&name) {
            let object = serde_json::to_value(&obj).unwrap_or_default();
            shared.events.normal(
                &object,
                reason::STOPPING,
                format!("Stopping controller: {name}"),
            );
            stop(handle).await;
            shared.events.normal(
                &object,
                reason::STOPPED,
                format!("Stopped controller: {name}"),
            );
        }
        // Discovery on every (re)start so CRDs installed since are found.
        refresh(&shared.client, &mut resources).await;
        try_start(obj, &resources, &mut running, &mut waiting);
    }
    Ok(())
}

/// Refreshes the discovery result in place (keeps the previous one on failure).
async fn refresh(client: &Client, resources: &mut metacontroller_dynamic::ResourceMap) {
    match metacontroller_dynamic::discover(client, resources).await {
        Ok(found) => {
            if let Some((map, _)) = found.update {
                *resources = map;
            }
        }
        Err(err) => tracing::warn!(error = %err, "discovery failed; using the previous result"),
    }
}

/// Runs one CompositeController reconciler per CompositeController object.
async fn run_composite(shared: Shared, args: &ControllerArgs) -> anyhow::Result<()> {
    use metacontroller_api::composite::CompositeController;
    use metacontroller_controllers::composite;
    run_controllers(
        &shared,
        args,
        |cc: &CompositeController| serde_json::to_value(&cc.spec).unwrap_or_default(),
        |cc, resources| {
            composite::start(
                cc,
                shared.client.clone(),
                &shared.informers,
                resources,
                shared.hooks.for_controller_type(COMPOSITE),
                controller_options(args, &shared),
            )
            .map_err(|e| match e {
                // Upstream: a SyncError Event "[<name>] Sync error - ignoring, ...".
                composite::StartError::NoStatusSubresource { .. } => StartFailure {
                    reason: reason::SYNC_ERROR,
                    message: e.to_string(),
                },
                e => StartFailure::create_error(e),
            })
        },
        composite::CompositeHandle::stop,
    )
    .await
}

/// Runs one DecoratorController reconciler per DecoratorController object.
async fn run_decorator(shared: Shared, args: &ControllerArgs) -> anyhow::Result<()> {
    use metacontroller_api::decorator::DecoratorController;
    use metacontroller_controllers::decorator;
    run_controllers(
        &shared,
        args,
        |dc: &DecoratorController| serde_json::to_value(&dc.spec).unwrap_or_default(),
        |dc, resources| {
            decorator::start(
                dc,
                shared.client.clone(),
                &shared.informers,
                resources,
                shared.hooks.for_controller_type(DECORATOR),
                controller_options(args, &shared),
            )
            .map_err(StartFailure::create_error)
        },
        decorator::DecoratorHandle::stop,
    )
    .await
}

/// The per-controller options from the command line (both controller kinds).
fn controller_options(
    args: &ControllerArgs,
    shared: &Shared,
) -> metacontroller_controllers::composite::Options {
    use crate::cli::ApplyStrategy;
    use metacontroller_controllers::writer::ApplyStrategy as Strategy;
    metacontroller_controllers::composite::Options {
        workers: args.workers as usize,
        apply_strategy: match args.apply_strategy {
            ApplyStrategy::DynamicApply => Strategy::DynamicApply,
            ApplyStrategy::ServerSideApply => Strategy::ServerSideApply {
                field_manager: args.apply_strategy_ssa_field_manager.clone(),
            },
        },
        events: shared.events.clone(),
        metrics: shared.metrics.clone(),
    }
}
