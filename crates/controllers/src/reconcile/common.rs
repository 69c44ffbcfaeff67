//! What every reconciler holds, whatever its kind ([`Common`]), and the steps of a sync
//! they share through it: own-writes confirmation, child writes, hook calls and Events.

use std::fmt::Display;
use std::hash::Hash;
use std::sync::Arc;

use metacontroller_api::hook::{EndpointConfig, Hook};
use metacontroller_dynamic::{ApiResource, Informers, ObjectKey, ResourceMap};
use metacontroller_hooks::{CallContext, CodeChange, HookClient, HookError};
use metacontroller_workqueue::WorkQueue;
use serde_json::Value;

use super::code::code_config_maps;
use super::ControllerSpec;
use crate::children::{ChildError, ChildType, ParentRef};
use crate::composite::Options;
use crate::events::EventRecorder;
use crate::related::{Enqueue, RelatedConfig, RelatedManager};
use crate::rolling::Desired;
use crate::writer::{WriteError, Writer};

/// What every reconciler holds, whatever its kind.
pub(crate) struct Common<K>
where
    K: Clone + Eq + Hash + Send + 'static,
{
    /// The controller object's name (logs, metrics).
    pub(crate) name: String,
    /// Upstream's kind name (metrics label, sync span).
    pub(crate) controller_type: &'static str,
    /// The work queue of keys.
    pub(crate) queue: WorkQueue<K>,
    /// Every write goes through it (own-writes overlay, expectations).
    pub(crate) writer: Arc<Writer>,
    /// The customize hook and related objects.
    pub(crate) related: RelatedManager,
    /// Where Events about synced objects go.
    pub(crate) events: EventRecorder,
    /// The keys whose last sync failed with a `SyncError` (for `SyncRecovered`).
    pub(super) failing: crate::recovery::Failing<K>,
    /// The hook client (also told when parents and controllers go, for its ETag cache).
    pub(crate) hooks: HookClient,
    /// The shared informers (their prunes trigger [`Reconciler::forget_departed`]).
    pub(crate) informers: Informers,
    /// Where the per-parent state gauge reads this controller.
    pub(super) metrics: crate::metrics::ControllerMetrics,
    pub(super) endpoints: Vec<EndpointConfig>,
    pub(super) resync_period_seconds: Option<i32>,
    /// The ConfigMaps holding this controller's in-process hook code.
    pub(super) code: Vec<CodeChange>,
    /// Its hooks whose code is in one of them.
    pub(super) code_hooks: Vec<Hook>,
    /// The driver of `spec.hookRollout` (in-process hook code rolled out in steps).
    pub(crate) rollout: Option<Arc<crate::hook_rollout::driver::RolloutDriver>>,
}

/// What `start` of either kind is given, besides the controller object.
pub(crate) struct StartContext<'a> {
    pub(crate) client: kube::Client,
    pub(crate) informers: &'a Informers,
    pub(crate) resources: &'a ResourceMap,
    pub(crate) hooks: HookClient,
    pub(crate) options: Options,
}

impl<K> Drop for Common<K>
where
    K: Clone + Eq + Hash + Send + 'static,
{
    /// The controller is gone: its ConfigMaps of hook code are watched for it no more.
    fn drop(&mut self) {
        for hook in &self.code_hooks {
            self.hooks.unwatch_code(hook);
        }
    }
}

impl<K> Common<K>
where
    K: Clone + Eq + Hash + Send + 'static,
{
    /// Builds the common part; related-object changes are sent to `enqueue`.
    pub(crate) fn new(
        spec: ControllerSpec,
        queue: WorkQueue<K>,
        ctx: &StartContext<'_>,
        enqueue: Enqueue,
    ) -> Self {
        let controller_type = spec.controller_type();
        let child_writes = ctx
            .options
            .metrics
            .child_writes(controller_type, &spec.name);
        let code = code_config_maps(&spec.hooks, &ctx.hooks);
        let code_hooks: Vec<Hook> = spec
            .hooks
            .iter()
            .filter(|hook| metacontroller_hooks::code_config_map(hook).is_some())
            .cloned()
            .collect();
        let rollout = crate::hook_rollout::driver::RolloutDriver::new(
            &spec.controller,
            code.iter()
                .map(|m| (m.namespace.clone(), m.name.clone()))
                .collect(),
            ctx.client.clone(),
            ctx.hooks.clone(),
            &ctx.options.gate,
            ctx.informers
                .scope()
                .map(|s| s.namespaces().map(str::to_string).collect()),
        );
        if let Some(driver) = &rollout {
            ctx.options
                .metrics
                .track_rollout(controller_type, &spec.name, driver);
        }
        let related = RelatedManager::new(RelatedConfig {
            controller: spec.controller,
            name: spec.name.clone(),
            hook: spec.customize_hook,
            endpoint_configs: spec.endpoints.clone(),
            hooks: ctx.hooks.clone(),
            informers: ctx.informers.clone(),
            resources: ctx.resources.clone(),
            enqueue,
        });
        Common {
            name: spec.name,
            controller_type,
            queue,
            writer: Arc::new(
                Writer::new(ctx.client.clone(), ctx.options.apply_strategy.clone())
                    .with_schemas(ctx.options.schemas.clone())
                    .with_metrics(child_writes)
                    .with_write_concurrency(ctx.options.child_write_concurrency),
            ),
            related,
            events: ctx.options.events.clone(),
            failing: crate::recovery::Failing::default(),
            hooks: ctx.hooks.clone(),
            informers: ctx.informers.clone(),
            metrics: ctx.options.metrics.clone(),
            endpoints: spec.endpoints,
            resync_period_seconds: spec.resync_period_seconds,
            code,
            code_hooks,
            rollout,
        }
    }

    /// Whether the cache has caught up with our last creates/deletes for the object with
    /// uid `owner` (`present` answers for one written object, see [`presence`]). If not, the
    /// sync must not act on the stale cache and ends with [`Plan::await_own_writes`]: the
    /// watch events that confirm our writes queue the key again (each maps to its owner).
    pub(crate) fn own_writes_confirmed(
        &self,
        key: &K,
        owner: &str,
        present: impl Fn(&ObjectKey) -> Option<bool>,
    ) -> bool
    where
        K: Display,
    {
        let confirmed = self.writer.satisfied(owner, present);
        if !confirmed {
            tracing::debug!(controller = %self.name, object = %key, "waiting for the cache to confirm our writes");
        }
        confirmed
    }

    /// Entries per structure this controller keeps per parent (for
    /// `metacontroller_parent_state_entries`): customize rules and the related informers
    /// they lease, hook responses, and the writer's (see [`Writer::state_entries`]).
    pub(crate) fn state_entries(&self) -> Vec<(&'static str, usize)> {
        let mut entries = vec![
            ("related_rules", self.related.parents()),
            ("related_informers", self.related.watched().len()),
            ("hook_responses", self.hooks.etag_entries_of(&self.name)),
        ];
        entries.extend(self.writer.state_entries());
        entries
    }

    /// Creates, updates and deletes the children (attachments) of `owner` so they match
    /// `desired`, several at once ([`Writer::execute_all`]). One bad child does not block
    /// the others; a conflict stops further writes. Returns once every write has finished,
    /// with the failed ones.
    pub(crate) async fn manage_children<'a>(
        &self,
        owner: &ParentRef,
        types: &[ChildType],
        observed: &[Value],
        desired: &Desired,
        resource: impl Fn(usize) -> &'a ApiResource,
    ) -> Result<Vec<WriteError>, ChildError> {
        let actions = self
            .writer
            .plan_children(types, owner, observed, desired)
            .await?;
        Ok(self.writer.execute_all(&owner.uid, actions, resource).await)
    }

    /// Records the Events a `hook_name` response asked for on `object` (see
    /// [`crate::hook_events`]).
    pub(crate) fn record_hook_events(
        &self,
        hook_name: &str,
        object: &Value,
        events: Vec<metacontroller_api::wire::HookEvent>,
    ) {
        crate::hook_events::record(&self.events, &self.name, hook_name, object, events);
    }

    /// Calls `hook` (`hook_name` is `sync` or `finalize`) for the object `key_text`; the
    /// answer says whether it came from the ETag cache (its Events were recorded then).
    pub(crate) async fn call_hook<Req, Resp>(
        &self,
        hook_name: &str,
        key_text: &str,
        hook: &Hook,
        request: &Req,
    ) -> Result<metacontroller_hooks::Answer<Resp>, HookError>
    where
        Req: k8s_openapi::serde::Serialize,
        Resp: k8s_openapi::serde::de::DeserializeOwned + Default,
    {
        let ctx = CallContext {
            controller: &self.name,
            hook_name,
            parent_key: key_text,
        };
        self.hooks
            .answer(&ctx, hook, &self.endpoints, request)
            .await
    }
}
