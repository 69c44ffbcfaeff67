//! `metacontroller run`: the controller process. It connects, then runs one reconciler per
//! CompositeController and per DecoratorController object (selected by
//! `--target-label-selector`), sharing informers and the hook client between them.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::Client;

use metacontroller_controllers::events::{reason, EventRecorder};
use metacontroller_controllers::metrics::{COMPOSITE, DECORATOR};
use metacontroller_controllers::ControllerHandle;

use crate::cli::ControllerArgs;
use crate::list_errors::ListErrorReports;

const GROUP: &str = "metacontroller.k8s.io";
const VERSION: &str = "v1alpha1";

/// How long shutdown waits for queued `--record-hooks` files.
const RECORDING_FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs the controller until SIGTERM/SIGINT, then shuts down gracefully.
pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    log_compat_flags(&args);
    let (leader, sharding) = coordination(&args)?;
    // One registry for the whole process; every part registers its families here.
    let registry = crate::metrics::registry()?;
    let readiness = crate::health::Readiness::default();
    // Every long-lived task runs under it: one ending or panicking stops the process.
    let supervisor = metacontroller_dynamic::Supervisor::default();
    let _servers = serve(&args, &registry, &readiness, &supervisor).await?;
    let client = crate::client::client(&args, &registry).await?;
    let namespaced = crate::namespaces::probe(&client, &args.watch_namespaces).await;
    tokio::select! {
        result = discover_controllers(&client, &args) => result?,
        _ = crate::shutdown::signal() => return Ok(()),
        end = supervisor.failed() => return Err(anyhow::anyhow!(end)),
    }
    let (gate, replica) = gate_and_replica(leader.as_ref(), sharding.as_ref());
    if let Some(config) = &leader {
        crate::metrics::register_leader(&registry, gate.clone(), &config.name)?;
    }
    let shared = Shared::new(
        client.clone(),
        &args,
        gate.clone(),
        &registry,
        readiness,
        replica,
        &supervisor,
        namespaced,
    )?;
    tokio::select! {
        () = sweep_at_start(&shared.sweeper) => {}
        _ = crate::shutdown::signal() => return Ok(()),
    }
    let leader = leader.map(|config| {
        crate::shutdown::LeaderTask::spawn(client.clone(), config, gate.clone(), &supervisor)
    });
    let sharding = sharding
        .map(|config| {
            let informers = shared.informers.clone();
            let gate = gate.clone();
            crate::shard::ShardTask::spawn(
                client.clone(),
                config,
                gate,
                informers,
                &registry,
                &supervisor,
            )
        })
        .transpose()?;
    // Pinned out here, not moved into the select: dropping them would stop the reconcilers,
    // cancelling running syncs, before the shutdown drain lets them finish.
    let composite = run_composite(shared.clone(), &args);
    let decorator = run_decorator(shared.clone(), &args);
    tokio::pin!(composite, decorator);
    let failure = tokio::select! {
        result = &mut composite => Some(unexpected_end("CompositeController", result)),
        result = &mut decorator => Some(unexpected_end("DecoratorController", result)),
        end = supervisor.failed() => Some(anyhow::anyhow!(end)),
        signal = crate::shutdown::signal() => {
            tracing::info!(signal, "shutdown requested");
            None
        }
    };
    // Tasks ending from here on are part of the shutdown. After a failure the same bounded
    // path runs (gate closed first), and the process then exits non-zero.
    supervisor.stopping();
    if let Some(err) = &failure {
        tracing::error!(error = %format!("{err:#}"), "stopping: the process cannot go on syncing");
    }
    crate::shutdown::graceful(&gate, &shared.events, leader, sharding).await;
    if !shared.hooks.flush_recordings(RECORDING_FLUSH_TIMEOUT).await {
        tracing::warn!(timeout = ?RECORDING_FLUSH_TIMEOUT, "--record-hooks: some recordings were not written before exit");
    }
    failure.map_or(Ok(()), Err)
}

/// How long the start waits for the stranded-finalizer sweep before the controllers start
/// (it goes on in the background after that).
const START_SWEEP_WAIT: Duration = Duration::from_secs(30);

/// Removes the finalizers of controller objects deleted while no process ran (or before a
/// process killed midway finished), see [`crate::stranded`]. Done before the controllers
/// start, so its lists do not mix with their first syncs; bounded by [`START_SWEEP_WAIT`].
async fn sweep_at_start(sweeper: &crate::stranded::Sweeper) {
    let sweeper = sweeper.clone();
    let started = std::time::Instant::now();
    let task = tokio::spawn(async move {
        let swept = sweeper.sweep_all().await;
        tracing::info!(
            resources = swept.resources,
            objects = swept.objects,
            removed = swept.removed,
            failed = swept.failed,
            elapsed = ?started.elapsed(),
            "swept finalizers of deleted controller objects"
        );
    });
    if tokio::time::timeout(START_SWEEP_WAIT, task).await.is_err() {
        tracing::warn!(waited = ?START_SWEEP_WAIT, "the sweep of finalizers of deleted controller objects goes on in the background");
    }
}

/// The leader election and sharding settings of the flags (at most one of them is on).
fn coordination(
    args: &ControllerArgs,
) -> anyhow::Result<(
    Option<crate::leader::LeaderConfig>,
    Option<crate::shard::ShardConfig>,
)> {
    let leader = args
        .leader_election
        .then(|| {
            crate::leader::LeaderConfig::from_args(
                &args.leader_election_namespace,
                &args.leader_election_id,
                &args.leader_election_resource_lock,
            )
        })
        .transpose()?;
    let sharding = args
        .sharding
        .then(|| crate::shard::ShardConfig::from_args(args))
        .transpose()?;
    Ok((leader, sharding))
}

/// The gate every sync passes, and the replica identity sent to hooks (so a hook, or a
/// test, can tell which replica synced a parent). With leader election the gate opens only
/// while this replica holds the Lease; the controllers run either way, so a standby keeps
/// its caches warm. With sharding the gate is open but admits only the keys of the shards
/// this replica holds.
fn gate_and_replica(
    leader: Option<&crate::leader::LeaderConfig>,
    sharding: Option<&crate::shard::ShardConfig>,
) -> (metacontroller_workqueue::SyncGate, Option<String>) {
    let gate = match sharding {
        Some(config) => metacontroller_workqueue::SyncGate::sharded(config.shards),
        None => metacontroller_workqueue::SyncGate::new(leader.is_none()),
    };
    let replica = sharding
        .map(|config| config.identity.clone())
        .or_else(|| leader.map(|config| config.identity.clone()));
    (gate, replica)
}

/// The error for a controller watch loop that returned: they run until shutdown, so even a
/// clean return means this process no longer follows its controller objects.
fn unexpected_end(kind: &str, result: anyhow::Result<()>) -> anyhow::Error {
    match result {
        Ok(()) => anyhow::anyhow!("the {kind} watch ended"),
        Err(err) => err.context(format!("running {kind} objects")),
    }
}

/// Starts the metrics and probe servers (each off when its flag is `0`).
async fn serve(
    args: &ControllerArgs,
    registry: &prometheus::Registry,
    readiness: &crate::health::Readiness,
    supervisor: &metacontroller_dynamic::Supervisor,
) -> anyhow::Result<crate::listen::Servers> {
    let mut servers = crate::listen::Servers::new(supervisor.clone());
    let metrics = crate::metrics::router(registry.clone());
    let flag = "metrics-address";
    servers
        .serve(
            "metrics-server",
            flag,
            &args.metrics_address,
            "metrics",
            metrics,
        )
        .await?;
    let probes = crate::health::router(readiness.clone());
    let flag = "health-probe-bind-address";
    servers
        .serve(
            "probe-server",
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
    /// Opened by leader election, closed by shutdown; every sync passes it.
    gate: metacontroller_workqueue::SyncGate,
    /// Merge schemas (`--apply-schema=auto`), shared by all controllers.
    schemas: Option<metacontroller_dynamic::Schemas>,
    metrics: metacontroller_controllers::metrics::ControllerMetrics,
    readiness: crate::health::Readiness,
    /// Removes the finalizers of deleted controller objects.
    sweeper: crate::stranded::Sweeper,
}

impl Shared {
    // One call site; bundling these would only move the list elsewhere.
    #[allow(clippy::too_many_arguments)]
    fn new(
        client: Client,
        args: &ControllerArgs,
        gate: metacontroller_workqueue::SyncGate,
        registry: &prometheus::Registry,
        readiness: crate::health::Readiness,
        replica: Option<String>,
        supervisor: &metacontroller_dynamic::Supervisor,
        namespaced: Option<crate::namespaces::Namespaced>,
    ) -> anyhow::Result<Shared> {
        let informers = metacontroller_dynamic::Informers::new(
            client.clone(),
            metacontroller_dynamic::InformerConfig {
                flush_interval: Some(args.cache_flush_interval).filter(|d| !d.is_zero()),
                // A sharded replica caches only its share (see `metacontroller_dynamic::Keep`).
                keep_keys: gate.shard_count().map(|_| {
                    let gate = gate.clone();
                    metacontroller_dynamic::KeepKeys::new(move |key| gate.retains_key(key))
                }),
                supervisor: Some(supervisor.clone()),
                scope: namespaced.as_ref().map(|n| n.scope.clone()),
                // One per client, created by `Informers`.
                reconnect: None,
            },
        );
        crate::metrics::register_informers(registry, informers.clone())?;
        readiness.set_informers(informers.clone());
        // Hook credentials are read from the API on each call that uses them.
        let sources = std::sync::Arc::new(crate::sources::ApiSources::new(client.clone()));
        // In-process hook code is watched (one watch per referenced ConfigMap).
        let code = std::sync::Arc::new(crate::code_source::WatchedConfigMaps::new(
            client.clone(),
            Some(supervisor.clone()),
        ));
        let hooks = metacontroller_hooks::HookClient::new(metacontroller_hooks::HookClientConfig {
            secrets: Some(sources.clone()),
            config_maps: Some(sources),
            code: Some(code),
            registry: Some(registry.clone()),
            replica,
            recorder: hook_recorder(args)?,
            trace: crate::telemetry::hook_propagator(),
            inprocess: metacontroller_hooks::InProcessLimits {
                per_controller: args.inprocess_hook_concurrency_per_controller as usize,
                process: args.inprocess_hook_concurrency as usize,
                memory_budget: args.inprocess_hook_memory_budget,
            },
            ..Default::default()
        })
        .context("building the hook client")?;
        let metrics = metacontroller_controllers::metrics::ControllerMetrics::register(registry)?;
        // Events about controller objects (cluster-scoped) go to `default`, the only
        // namespace the API server accepts for them; a namespaced install gets a Role there.
        let events = EventRecorder::supervised(
            client.clone(),
            args.events_qps,
            args.events_burst,
            Some(supervisor),
        )
        .context("--events-qps/--events-burst")?;
        if let Some(dropped) = events.dropped_metric() {
            registry.register(Box::new(dropped))?;
        }
        let openapi = namespaced.as_ref().is_none_or(|n| n.openapi);
        let schemas = (args.apply_schema == crate::cli::ApplySchema::Auto && openapi).then(|| {
            let refresh = Some(args.discovery_interval)
                .filter(|d| !d.is_zero())
                .unwrap_or(Duration::from_secs(30));
            metacontroller_dynamic::Schemas::new(client.clone(), &informers, refresh)
        });
        let sweeper = crate::stranded::Sweeper::new(client.clone(), &args.watch_namespaces);
        Ok(Shared {
            sweeper,
            client,
            informers,
            hooks,
            events,
            gate,
            schemas,
            metrics,
            readiness,
        })
    }
}

/// The `--record-hooks` recorder, if asked for. An unusable directory stops the start (the
/// user asked for recordings); later write failures are only logged.
fn hook_recorder(
    args: &ControllerArgs,
) -> anyhow::Result<Option<std::sync::Arc<dyn metacontroller_hooks::HookRecorder>>> {
    let Some(dir) = &args.record_hooks else {
        return Ok(None);
    };
    let max_files = args
        .record_hooks_max_files
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let recorder = metacontroller_hooks::DirectoryRecorder::new(dir, max_files)
        .with_context(|| format!("--record-hooks: cannot use {}", dir.display()))?;
    tracing::info!(dir = %dir.display(), max_files = ?max_files, "recording hook exchanges (Secret data redacted)");
    Ok(Some(std::sync::Arc::new(recorder)))
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
async fn run_controllers<T, K, Start>(
    shared: &Shared,
    args: &ControllerArgs,
    spec_of: fn(&T) -> serde_json::Value,
    start: Start,
) -> anyhow::Result<()>
where
    T: kube::Resource<DynamicType = ()>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize
        + std::fmt::Debug
        + Send
        + 'static,
    K: Clone + Eq + std::hash::Hash + Send + 'static,
    Start: Fn(T, &metacontroller_dynamic::ResourceMap) -> Result<ControllerHandle<K>, StartFailure>,
{
    use futures::StreamExt;
    use kube::runtime::watcher;

    let mut config = watcher::Config::default();
    let selector = args.target_label_selector.trim();
    if !selector.is_empty() {
        config = config.labels(selector);
    }
    let api: Api<T> = Api::all(shared.client.clone());
    let probe = shared.informers.reconnect_probe();
    let stream = probe.with_backoff(watcher(api, config).boxed());
    let mut stream = std::pin::pin!(stream);
    let mut retry = tokio::time::interval(retry_interval(args));
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut controllers = Controllers::new(shared, spec_of, start);
    loop {
        let event = tokio::select! {
            event = stream.next() => match event {
                Some(event) => event,
                None => break,
            },
            _ = retry.tick() => {
                controllers.retry_waiting().await;
                controllers.report_list_errors();
                continue;
            }
        };
        match event {
            Ok(watcher::Event::Init) => controllers.relist_started(),
            Ok(watcher::Event::InitApply(obj)) => {
                controllers.relisted(&obj);
                controllers.applied(obj).await
            }
            Ok(watcher::Event::InitDone) => {
                controllers.relist_done().await;
                shared.readiness.controllers_listed(&T::kind(&()));
            }
            Ok(watcher::Event::Apply(obj)) => controllers.applied(obj).await,
            Ok(watcher::Event::Delete(obj)) => controllers.deleted(&obj).await,
            Err(err) => tracing::warn!(kind = %T::kind(&()), error = %err, "watching controllers"),
        }
    }
    Ok(())
}

/// How often controller objects that could not start are retried: each discovery refresh
/// (`--discovery-interval`), or every 30s when that is disabled.
fn retry_interval(args: &ControllerArgs) -> Duration {
    if args.discovery_interval.is_zero() {
        Duration::from_secs(30)
    } else {
        args.discovery_interval
    }
}

/// The reconcilers of one controller kind: those running (with the spec they run) and the
/// controller objects waiting for a retry because they could not start.
struct Controllers<'a, T, K, Start>
where
    K: Clone + Eq + std::hash::Hash + Send + 'static,
{
    shared: &'a Shared,
    spec_of: fn(&T) -> serde_json::Value,
    start: Start,
    running: HashMap<String, (serde_json::Value, ControllerHandle<K>)>,
    waiting: HashMap<String, T>,
    resources: metacontroller_dynamic::ResourceMap,
    /// The last object seen per name, for the Stopping/Stopped Events of a controller whose
    /// deletion only a relist reveals.
    objects: HashMap<String, serde_json::Value>,
    /// The names a relist in progress has delivered so far.
    relisted: Option<std::collections::HashSet<String>>,
    /// What was last reported of the resources running controllers cannot list.
    list_errors: ListErrorReports,
}

impl<'a, T, K, Start> Controllers<'a, T, K, Start>
where
    T: kube::Resource<DynamicType = ()> + Clone + k8s_openapi::serde::Serialize,
    K: Clone + Eq + std::hash::Hash + Send + 'static,
    Start: Fn(T, &metacontroller_dynamic::ResourceMap) -> Result<ControllerHandle<K>, StartFailure>,
{
    fn new(shared: &'a Shared, spec_of: fn(&T) -> serde_json::Value, start: Start) -> Self {
        Controllers {
            shared,
            spec_of,
            start,
            running: HashMap::new(),
            waiting: HashMap::new(),
            resources: metacontroller_dynamic::ResourceMap::default(),
            objects: HashMap::new(),
            relisted: None,
            list_errors: ListErrorReports::default(),
        }
    }

    /// A relist (first list, or after 410 Gone / a watch error) begins.
    fn relist_started(&mut self) {
        self.relisted = Some(Default::default());
    }

    /// An object delivered by the relist in progress.
    fn relisted(&mut self, obj: &T) {
        if let (Some(seen), Some(name)) = (self.relisted.as_mut(), obj.meta().name.as_ref()) {
            seen.insert(name.clone());
        }
    }

    /// A relist is the whole truth: controllers missing from it were deleted while the
    /// watch was down, so their reconcilers stop.
    async fn relist_done(&mut self) {
        let seen = self.relisted.take().unwrap_or_default();
        self.waiting.retain(|name, _| seen.contains(name));
        let gone: Vec<String> = self
            .running
            .keys()
            .filter(|name| !seen.contains(*name))
            .cloned()
            .collect();
        for name in gone {
            if let Some((_, handle)) = self.running.remove(&name) {
                let object = self.objects.remove(&name).unwrap_or_default();
                tracing::info!(kind = %T::kind(&()), %name, "stopping controller deleted while the watch was down");
                self.stop_with_events(&name, &object, handle).await;
                self.sweep_finalizers(&name, &object);
            }
        }
        self.objects.retain(|name, _| seen.contains(name));
    }

    /// A controller object was added or changed: (re)start its reconciler unless it already
    /// runs this spec.
    async fn applied(&mut self, obj: T) {
        let Some(name) = obj.meta().name.clone() else {
            return;
        };
        self.objects
            .insert(name.clone(), serde_json::to_value(&obj).unwrap_or_default());
        let spec = (self.spec_of)(&obj);
        if self.running.get(&name).is_some_and(|(s, _)| *s == spec) {
            return;
        }
        if let Some((_, handle)) = self.running.remove(&name) {
            self.stop_reconciler(&name, &obj, handle).await;
        }
        // Discovery on every (re)start so CRDs installed since are found.
        refresh(&self.shared.client, &mut self.resources).await;
        self.try_start(obj);
    }

    /// A controller object was deleted: stop its reconciler and forget any pending retry.
    async fn deleted(&mut self, obj: &T) {
        let Some(name) = obj.meta().name.as_ref() else {
            return;
        };
        self.waiting.remove(name);
        self.objects.remove(name);
        if let Some((_, handle)) = self.running.remove(name) {
            tracing::info!(kind = %T::kind(&()), %name, "stopping controller");
            self.stop_reconciler(name, obj, handle).await;
        }
        // Also for a controller that never started: its finalizers may be left from before.
        let object = serde_json::to_value(obj).unwrap_or_default();
        self.sweep_finalizers(name, &object);
    }

    /// After controller object `name` (last seen as `object`) was deleted and its reconciler
    /// stopped: its finalizer leaves the objects of its parent or target resources, in the
    /// background (see [`crate::stranded`]).
    fn sweep_finalizers(&self, name: &str, object: &serde_json::Value) {
        let Some(owner) = crate::stranded::Owner::of_kind(&T::kind(&()), name) else {
            return;
        };
        let resources = crate::stranded::finalized_resources(object);
        let sweeper = self.shared.sweeper.clone();
        tokio::spawn(async move { sweeper.sweep_owner(owner, resources).await });
    }

    /// Retries the objects that could not start, against a fresh discovery result.
    async fn retry_waiting(&mut self) {
        if self.waiting.is_empty() {
            return;
        }
        refresh(&self.shared.client, &mut self.resources).await;
        for obj in self.waiting.values().cloned().collect::<Vec<_>>() {
            self.try_start(obj);
        }
    }

    /// Reports on each running controller's object the resources it cannot list now (see
    /// [`crate::list_errors`]).
    fn report_list_errors(&mut self) {
        let kind = T::kind(&());
        for (name, (_, handle)) in &self.running {
            if let Some(object) = self.objects.get(name) {
                let unlistable = handle.unlistable();
                let events = &self.shared.events;
                self.list_errors
                    .check(events, &kind, name, object, unlistable);
            }
        }
        let running = &self.running;
        self.list_errors.retain(|name| running.contains_key(name));
    }

    /// Starts a reconciler for `obj`, or records why not and queues it for a retry.
    fn try_start(&mut self, obj: T) {
        let kind = T::kind(&());
        let Some(name) = obj.meta().name.clone() else {
            return;
        };
        let spec = (self.spec_of)(&obj);
        let object = serde_json::to_value(&obj).unwrap_or_default();
        let events = &self.shared.events;
        match (self.start)(obj.clone(), &self.resources) {
            Ok(handle) => {
                tracing::info!(%kind, %name, "started controller");
                events.normal(
                    &object,
                    reason::STARTING,
                    format!("Starting controller: {name}"),
                );
                events.normal(
                    &object,
                    reason::STARTED,
                    format!("Started controller: {name}"),
                );
                self.waiting.remove(&name);
                // A new reconciler: what it cannot list is reported afresh.
                self.list_errors.forget(&name);
                self.running.insert(name, (spec, handle));
            }
            Err(err) => {
                tracing::error!(%kind, %name, error = %err.message, "cannot start controller; retrying after the next discovery refresh");
                // Once per failure, not once per retry.
                if !self.waiting.contains_key(&name) {
                    events.warning(&object, err.reason, err.event_message());
                }
                self.waiting.insert(name, obj);
            }
        }
    }

    /// Stops one reconciler, with the Stopping / Stopped Events around it.
    async fn stop_reconciler(&self, name: &str, obj: &T, handle: ControllerHandle<K>) {
        let object = serde_json::to_value(obj).unwrap_or_default();
        self.stop_with_events(name, &object, handle).await;
    }

    /// Stops one reconciler, with upstream's Stopping / Stopped Events on `object`.
    async fn stop_with_events(
        &self,
        name: &str,
        object: &serde_json::Value,
        handle: ControllerHandle<K>,
    ) {
        let events = &self.shared.events;
        events.normal(
            object,
            reason::STOPPING,
            format!("Stopping controller: {name}"),
        );
        handle.stop().await;
        events.normal(
            object,
            reason::STOPPED,
            format!("Stopped controller: {name}"),
        );
    }
}

/// Refreshes the discovery result in place (keeps the previous one on failure).
async fn refresh(client: &Client, resources: &mut metacontroller_dynamic::ResourceMap) {
    match metacontroller_dynamic::ResourceMap::discover(client, resources).await {
        Ok(found) => {
            if let Some(map) = found.update {
                *resources = map;
            }
        }
        Err(err) => tracing::warn!(error = %err, "discovery failed; using the previous result"),
    }
}

/// Runs one CompositeController reconciler per CompositeController object.
/// What restarts a controller's reconciler when it changes: its spec and a `rollout undo`
/// request (the annotation [`UNDO_ANNOTATION`], read by the restarted rollout driver before
/// any sync, as a change of `spec.hookRollout.paused` is).
///
/// [`UNDO_ANNOTATION`]: metacontroller_api::rollout::UNDO_ANNOTATION
fn restart_key<S: serde::Serialize>(
    spec: &S,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> serde_json::Value {
    let spec = serde_json::to_value(spec).unwrap_or_default();
    let undo = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(metacontroller_api::rollout::UNDO_ANNOTATION));
    match undo {
        Some(undo) => serde_json::json!({"spec": spec, "undo": undo}),
        None => spec,
    }
}

async fn run_composite(shared: Shared, args: &ControllerArgs) -> anyhow::Result<()> {
    use metacontroller_api::composite::CompositeController;
    use metacontroller_controllers::composite;
    // Boxed: inline, run_controllers' ~25 KiB of state would be this future's, and `run`'s,
    // moved and polled on the main thread's stack.
    Box::pin(run_controllers(
        &shared,
        args,
        |cc: &CompositeController| restart_key(&cc.spec, &cc.metadata),
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
    ))
    .await
}

/// Runs one DecoratorController reconciler per DecoratorController object.
async fn run_decorator(shared: Shared, args: &ControllerArgs) -> anyhow::Result<()> {
    use metacontroller_api::decorator::DecoratorController;
    use metacontroller_controllers::decorator;
    Box::pin(run_controllers(
        &shared,
        args,
        |dc: &DecoratorController| restart_key(&dc.spec, &dc.metadata),
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
    ))
    .await
}

/// The per-controller options from the command line (both controller kinds).
fn controller_options(
    args: &ControllerArgs,
    shared: &Shared,
) -> metacontroller_controllers::composite::Options {
    use crate::cli::ApplyStrategy;
    use metacontroller_controllers::ApplyStrategy as Strategy;
    metacontroller_controllers::composite::Options {
        workers: args.workers as usize,
        parents_in_flight: args.parents_in_flight as usize,
        apply_strategy: match args.apply_strategy {
            ApplyStrategy::DynamicApply => Strategy::DynamicApply,
            ApplyStrategy::ServerSideApply => Strategy::ServerSideApply {
                field_manager: args.apply_strategy_ssa_field_manager.clone(),
            },
        },
        events: shared.events.clone(),
        gate: shared.gate.clone(),
        schemas: shared.schemas.clone(),
        metrics: shared.metrics.clone(),
        child_write_concurrency: args.max_concurrent_child_writes as usize,
    }
}
