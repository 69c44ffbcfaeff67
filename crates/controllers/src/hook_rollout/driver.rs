//! The driver of `spec.hookRollout`: picks the code of each parent's sync, watches the
//! code ConfigMaps, tracks the health of the parents on the new code and advances the
//! rollout ([`metacontroller_api::rollout::machine`]), writing every step to the
//! controller object's `status.hookRollout` before acting on it. The status and the stored
//! versions ([`super::store`]) are the whole state: a restarted controller reads them and
//! resumes at the same step; what lives in memory (the last sync result of each parent on
//! the new code) is rebuilt by the syncs every start makes anyway.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use metacontroller_api::rollout::assign::{digest_of, ParentKey, Version};
use metacontroller_api::rollout::machine::{self, Effect, Health, Observation, SyncResult};
use metacontroller_api::rollout::{HookRollout, HookRolloutStatus, RolloutPhase};
use metacontroller_api::wire::CustomizableController;
use metacontroller_hooks::{CodeChange, HookClient, PinnedCode};
use serde_json::{json, Value};
use tokio::sync::{watch, Notify};

use super::store::{self, CodeVersion, Owner};

pub(crate) mod metrics;
mod undo;

/// How often a running rollout is re-evaluated without news (pause and health deadlines).
const TICK: Duration = Duration::from_secs(1);
/// Longest a sync waits for the rollout state to be read before it is retried later.
const READY_WAIT: Duration = Duration::from_secs(5);
/// Wait before retrying a failed read or write of the rollout state.
const RETRY: Duration = Duration::from_secs(2);

/// One controller's rollout: its spec, where its state lives, and the state.
pub(crate) struct RolloutDriver {
    spec: HookRollout,
    pub(super) owner: Owner,
    /// The controller object as JSON (Events are recorded on it).
    object: Value,
    pub(super) resource: ApiResource,
    /// Namespace of the stored versions: the first code ConfigMap's.
    pub(super) namespace: String,
    /// The ConfigMaps holding the controller's in-process hook code.
    maps: Vec<(String, String)>,
    pub(super) client: kube::Client,
    hooks: HookClient,
    /// With `--sharding`: who drives, and the reports of the other replicas.
    pub(super) shared: Option<super::shared::Shared>,
    pub(super) state: Mutex<State>,
    /// Becomes true once the state is read (syncs wait for it).
    ready: watch::Sender<bool>,
    /// A sync finished: re-evaluate.
    wake: Notify,
    /// Rollback counters, once the controller's metrics track this driver.
    rollbacks: std::sync::OnceLock<metrics::Rollbacks>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) status: Option<HookRolloutStatus>,
    versions: HashMap<String, Arc<PinnedCode>>,
    /// Last sync result of each parent (by key) with the digest it ran and when it ended
    /// (Unix milliseconds).
    pub(super) results: HashMap<ParentKey, (String, SyncResult, i64)>,
    /// The controller object's `resourceVersion` the status was read at (sharded: writes
    /// are conditional on it).
    pub(super) resource_version: String,
}

/// The parents of a controller, as the driver needs them.
pub(crate) struct Parent {
    /// The parent's rollout key.
    pub(crate) key: ParentKey,
    /// `namespace/name`.
    pub(crate) shown: String,
    /// The parent object (its `status.conditions`).
    pub(crate) object: Value,
}

/// The rollout key of a parent object.
pub(crate) fn parent_key(object: &Value) -> ParentKey {
    let field = |f: &str| object.pointer(f).and_then(Value::as_str).unwrap_or("");
    ParentKey::new(
        field("/metadata/uid"),
        field("/metadata/namespace"),
        field("/metadata/name"),
    )
}

fn shown(object: &Value) -> String {
    let field = |f: &str| object.pointer(f).and_then(Value::as_str).unwrap_or("");
    match field("/metadata/namespace") {
        "" => field("/metadata/name").to_string(),
        ns => format!("{ns}/{}", field("/metadata/name")),
    }
}

impl RolloutDriver {
    /// The driver of `controller`, when it asks for a rollout and has in-process hook code
    /// in `maps`.
    pub(crate) fn new(
        controller: &CustomizableController,
        maps: Vec<(String, String)>,
        client: kube::Client,
        hooks: HookClient,
        gate: &metacontroller_workqueue::SyncGate,
        scope: Option<Vec<String>>,
    ) -> Option<Arc<Self>> {
        let (spec, kind, plural, meta, object) = match controller {
            CustomizableController::Composite(c) => (
                c.spec.hook_rollout.clone()?,
                "CompositeController",
                "compositecontrollers",
                c.metadata.clone(),
                serde_json::to_value(c.as_ref()).ok()?,
            ),
            CustomizableController::Decorator(c) => (
                c.spec.hook_rollout.clone()?,
                "DecoratorController",
                "decoratorcontrollers",
                c.metadata.clone(),
                serde_json::to_value(c.as_ref()).ok()?,
            ),
        };
        let Some((namespace, _)) = maps.first().cloned() else {
            super::warn_without_code(meta.name.as_deref().unwrap_or_default());
            return None;
        };
        let gvk =
            GroupVersionKind::gvk(metacontroller_api::GROUP, metacontroller_api::VERSION, kind);
        let owner = Owner {
            kind,
            name: meta.name.unwrap_or_default(),
            uid: meta.uid.unwrap_or_default(),
        };
        Some(Arc::new(RolloutDriver {
            spec,
            shared: super::shared::Shared::new(gate, &owner, scope),
            owner,
            object,
            resource: ApiResource::from_gvk_with_plural(&gvk, plural),
            namespace,
            maps,
            client,
            hooks,
            state: Mutex::new(State::default()),
            ready: watch::channel(false).0,
            wake: Notify::new(),
            rollbacks: std::sync::OnceLock::new(),
        }))
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The code `parent` runs now: its digest and the pinned ConfigMaps. Waits until the
    /// state is read (at most [`READY_WAIT`]); an error when the version is not loaded (the sync is retried).
    pub(crate) async fn code_for(
        &self,
        parent: &Value,
    ) -> Result<(String, Arc<PinnedCode>), String> {
        // Bounded: a state that cannot be read (API down, RBAC) must not hold a worker.
        let mut ready = self.ready.subscribe();
        match tokio::time::timeout(READY_WAIT, ready.wait_for(|r| *r)).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return Err("the rollout driver stopped".into()),
            Err(_) => return Err("the rollout state is not read yet".into()),
        }
        let state = self.lock();
        let Some(status) = &state.status else {
            return Err("no rollout state".into());
        };
        let digest = digest_of(status, &parent_key(parent)).to_string();
        match state.versions.get(&digest) {
            Some(pins) => Ok((digest, pins.clone())),
            None => Err(format!("code version {} is not loaded", short(&digest))),
        }
    }

    /// A sync of `parent` on code `digest` finished.
    pub(crate) fn record(&self, parent: &Value, digest: String, result: Result<(), String>) {
        let result = match result {
            Ok(()) => SyncResult::Ok,
            Err(e) => SyncResult::Err(e),
        };
        let at = super::shared::now_ms();
        self.lock()
            .results
            .insert(parent_key(parent), (digest, result, at));
        self.wake.notify_one();
    }

    /// Whether `change` is of one of this controller's code ConfigMaps.
    pub(crate) fn is_mine(&self, change: &CodeChange) -> bool {
        self.maps.iter().any(|(ns, name)| change.is_of(ns, name))
    }

    /// Reads the live code and stores it as a version.
    async fn live_version(&self) -> Result<CodeVersion, String> {
        let mut objects = BTreeMap::new();
        for (ns, name) in &self.maps {
            let object = self
                .hooks
                .code_object(ns, name)
                .await
                .map_err(|e| format!("reading ConfigMap {ns}/{name}: {e}"))?;
            if let Some(object) = object {
                objects.insert((ns.clone(), name.clone()), object);
            }
        }
        let version = CodeVersion::new(objects);
        store::store(&self.client, &self.owner, &self.namespace, &version)
            .await
            .map_err(|e| format!("storing code version {}: {e}", short(&version.digest)))?;
        self.lock()
            .versions
            .insert(version.digest.clone(), Arc::new(version.pinned()));
        Ok(version)
    }

    /// Loads version `digest` into memory unless it is there.
    pub(super) async fn ensure_loaded(&self, digest: &str) -> Result<(), String> {
        if digest.is_empty() || self.lock().versions.contains_key(digest) {
            return Ok(());
        }
        match store::load(&self.client, &self.owner, &self.namespace, digest).await? {
            Some(v) => {
                self.lock()
                    .versions
                    .insert(v.digest.clone(), Arc::new(v.pinned()));
                Ok(())
            }
            None => Err(format!(
                "code version {} is not stored (ControllerRevision {}/{} missing)",
                short(digest),
                self.namespace,
                self.owner.revision_name(digest)
            )),
        }
    }

    /// Reads `status.hookRollout` and the versions it names; with no state yet, the live
    /// code becomes the first (complete) one.
    async fn init(&self, host: &dyn RolloutHost) -> Result<(), String> {
        let api = kube::Api::<DynamicObject>::all_with(self.client.clone(), &self.resource);
        let object = api
            .get(&self.owner.name)
            .await
            .map_err(|e| format!("reading {} {}: {e}", self.owner.kind, self.owner.name))?;
        let status = HookRolloutStatus::from_status(object.data.get("status"));
        self.lock().resource_version = object.metadata.resource_version.unwrap_or_default();
        let status = match status {
            Some(status) => status,
            None => {
                let live = self.live_version().await?;
                let status = HookRolloutStatus {
                    from: live.digest.clone(),
                    to: live.digest.clone(),
                    phase: RolloutPhase::Complete,
                    observed: live.digest.clone(),
                    message: format!("every parent runs {}", short(&live.digest)),
                    ..Default::default()
                };
                self.write_status(&status).await?;
                status
            }
        };
        let status = self.undo_if_asked(status, host).await?;
        self.ensure_loaded(&status.from).await?;
        self.ensure_loaded(&status.to).await?;
        self.lock().status = Some(status);
        self.ready.send_replace(true);
        Ok(())
    }

    async fn write_status(&self, status: &HookRolloutStatus) -> Result<(), String> {
        let api = kube::Api::<DynamicObject>::all_with(self.client.clone(), &self.resource);
        let mut patch = json!({"status": {"hookRollout": status}});
        if self.shared.is_some() {
            // Several replicas: the write holds only on the state it was computed from.
            patch["metadata"] = json!({"resourceVersion": self.lock().resource_version});
        }
        api.patch_status(
            &self.owner.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(|written| {
            self.lock().resource_version = written.metadata.resource_version.unwrap_or_default();
        })
        .map_err(|e| {
            format!(
                "writing the status of {} {}: {e}",
                self.owner.kind, self.owner.name
            )
        })
    }

    /// One round: a code change starts a rollout, else a running one is re-evaluated.
    /// Returns the transition's effects once its status is written.
    pub(super) async fn step(
        &self,
        parents: &[Parent],
        remote: &HashMap<ParentKey, super::shared::Reported>,
        code_may_have_changed: bool,
    ) -> Result<Vec<Effect>, String> {
        let Some(prev) = self.lock().status.clone() else {
            return Ok(Vec::new());
        };
        let keys: Vec<ParentKey> = parents.iter().map(|p| p.key.clone()).collect();
        let now = unix_now();
        let mut transition = None;
        if code_may_have_changed {
            let live = self.live_version().await?;
            transition =
                machine::code_changed(&self.spec, Some(&prev), &prev.to, &live.digest, &keys, now);
        }
        if transition.is_none() {
            let obs = self.observe(&prev, parents, remote, now);
            transition = machine::evaluate(&self.spec, &prev, &obs);
        }
        let Some(transition) = transition else {
            return Ok(Vec::new());
        };
        self.ensure_loaded(&transition.status.from).await?;
        self.ensure_loaded(&transition.status.to).await?;
        self.write_status(&transition.status).await?;
        let mut state = self.lock();
        if transition.status.to != prev.to {
            // Results on other code say nothing about the new one.
            state.results.clear();
        }
        state.status = Some(transition.status);
        Ok(transition.effects)
    }

    /// The health of each parent on the new code.
    fn observe(
        &self,
        status: &HookRolloutStatus,
        parents: &[Parent],
        remote: &HashMap<ParentKey, super::shared::Reported>,
        now: i64,
    ) -> Observation {
        let state = self.lock();
        let rule = self.spec.healthy.as_ref();
        let condition = rule.and_then(|r| r.condition.as_ref());
        let on_new = parents
            .iter()
            .filter(|p| {
                metacontroller_api::rollout::assign::version_of(status, &p.key) == Version::To
            })
            .map(|p| {
                let own = match state.results.get(&p.key) {
                    Some((digest, result, at)) if *digest == status.to => Some((result, *at)),
                    _ => None,
                };
                // Sharded: another replica may have synced it since (reports of `to` only).
                let sync = match (own, remote.get(&p.key)) {
                    (Some((_, at)), Some(r)) if r.at > at => r.result(),
                    (Some((result, _)), _) => result.clone(),
                    (None, Some(r)) => r.result(),
                    (None, None) => SyncResult::NotYet,
                };
                let holds = condition.is_some_and(|c| c.holds(&p.object));
                let health = machine::health(rule, &sync, holds, status.step_started_at, now);
                (p.shown.clone(), health)
            })
            .collect::<Vec<(String, Health)>>();
        Observation {
            now,
            parents: parents.iter().map(|p| p.key.clone()).collect(),
            on_new,
        }
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

pub(crate) fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// What the driver needs of a reconciler: its parents, a way to resync some, and Events.
pub(crate) trait RolloutHost: Send + Sync {
    /// Every parent the controller syncs now.
    fn parents(&self) -> Vec<Parent>;
    /// Queues the parents with these keys.
    fn resync(&self, keys: &[ParentKey]);
    /// Records an Event on the controller object.
    fn event(&self, object: &Value, warning: bool, reason: &str, message: String);
    /// The resources of the controller's parents (listed from the API when sharded).
    fn parent_resources(&self) -> Vec<Arc<metacontroller_dynamic::ApiResource>>;
    /// Whether the controller syncs `object` (selected, or still finalized).
    fn cares(&self, object: &Value) -> bool;
}

/// Runs the rollout of one controller until it stops: reads the state, then reacts to code
/// changes, finished syncs and the clock.
pub(crate) async fn drive(driver: Arc<RolloutDriver>, host: Arc<dyn RolloutHost>) {
    use tokio::sync::broadcast::error::RecvError;
    while let Err(e) = driver.init(host.as_ref()).await {
        tracing::warn!(controller = %driver.owner.name, error = %e, "hook rollout: cannot read its state; retrying");
        if !super::shared::is_conflict(&e) {
            // A conflict is another replica writing the first state: nothing to report.
            host.event(&driver.object, true, "RolloutError", e);
        }
        tokio::time::sleep(RETRY).await;
    }
    tracing::info!(controller = %driver.owner.name, "hook rollout: state read; syncs run the code of their parent's assignment");
    let mut changes = driver.hooks.code_changes();
    let mut pending_change = true;
    let mut drove = false;
    loop {
        let round = match &driver.shared {
            None => driver
                .step(&host.parents(), &HashMap::new(), pending_change)
                .await
                .map(Some),
            Some(shared) => {
                let drives = shared.drives();
                // A new driver checks the code: a change may have come before it drove.
                pending_change |= drives && !drove;
                drove = drives;
                super::shared::sharded_round(&driver, host.as_ref(), drives, pending_change).await
            }
        };
        match round {
            Ok(None) => {}
            Ok(Some(effects)) => {
                pending_change = false;
                apply(&driver, host.as_ref(), effects);
            }
            Err(e) => {
                tracing::warn!(controller = %driver.owner.name, error = %e, "hook rollout: step failed; retrying");
                host.event(&driver.object, true, "RolloutError", e);
                tokio::time::sleep(RETRY).await;
                continue;
            }
        }
        let next_change = async {
            match changes.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            change = next_change => match change {
                Ok(change) => pending_change = driver.is_mine(&change),
                Err(RecvError::Lagged(_)) => pending_change = true,
                Err(RecvError::Closed) => changes = None,
            },
            _ = driver.wake.notified() => {}
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

fn apply(driver: &RolloutDriver, host: &dyn RolloutHost, effects: Vec<Effect>) {
    for effect in effects {
        match effect {
            Effect::Resync(keys) => {
                tracing::info!(controller = %driver.owner.name, parents = keys.len(), "hook rollout: resyncing the parents whose code changed");
                host.resync(&keys);
            }
            Effect::Event {
                warning,
                reason,
                message,
            } => {
                if warning {
                    tracing::warn!(controller = %driver.owner.name, reason, %message, "hook rollout");
                } else {
                    tracing::info!(controller = %driver.owner.name, reason, %message, "hook rollout");
                }
                driver.count_rollback(reason);
                host.event(&driver.object, warning, reason, message);
            }
        }
    }
}

/// The parent in `object` for [`RolloutHost::parents`].
pub(crate) fn parent_of(object: Value) -> Parent {
    Parent {
        key: parent_key(&object),
        shown: shown(&object),
        object,
    }
}
