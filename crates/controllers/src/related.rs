//! The customize hook and `related` objects, for any controller kind (CompositeController
//! and DecoratorController use the same [`RelatedManager`]).
//!
//! Behaviour follows upstream Metacontroller v4's customize manager:
//!
//! * The customize hook gets `{controller, parent}` and answers `relatedResources` rules.
//!   Answers are cached per parent **uid and generation** for 20 minutes
//!   ([`CUSTOMIZE_CACHE_TTL`]); a new generation (a spec change) or an expired entry calls
//!   the hook again. Failed calls are not cached.
//! * A rule selects objects in one of four ways ([`Selection`]): by labels; by labels in one
//!   namespace; by labels in namespaces whose labels match `namespaceSelector`; by
//!   namespace and/or names. `names` cannot be combined with a selector, nor `namespace`
//!   with `namespaceSelector`.
//! * Scope: with a **v1** customize hook, a namespaced parent only sees namespaced related
//!   objects of its own namespace when selecting by labels or by namespace (and names), and
//!   naming another namespace is an error. A v1 rule with `names` but no `namespace` lists
//!   the names in every namespace, as upstream's code does (its documentation says the
//!   parent's namespace; compatibility follows the code). With a **v2** customize hook, or
//!   for a cluster-scoped parent, objects come from any namespace the rule allows.
//! * Related objects are read from shared informers ([`Informers`]), leased when a rule
//!   first names their resource and released when no cached rule names it any more.
//! * A change of a related object enqueues every parent whose cached rules select it (old
//!   or new state), so the sync hook sees the new data. Matching uses the last rules known
//!   for each parent, also past their TTL (the newest upstream calls the customize hook from
//!   the informer handler instead; our handlers never do I/O). Unchanged relisted objects
//!   (same resourceVersion) enqueue nothing.
//! * The `related` map has an entry for every rule's type, even when empty; keys are
//!   relative names for v1 sync hooks and `namespace/name` for v2 (see [`ObjectMap`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use kube::core::DynamicObject;
use metacontroller_api::hook::{EndpointConfig, Hook, HookVersion};
use metacontroller_api::related::RelatedResourceRule;
use metacontroller_api::wire::{
    CustomizableController, CustomizeHookRequest, CustomizeHookResponse, ObjectMap,
};
use metacontroller_dynamic::{
    ApiResource, Change, HandlerId, Informer, Informers, NamespacedName, Origin, ResourceId,
    ResourceMap, Selector, Versioned,
};
use metacontroller_hooks::{CallContext, HookClient, HookError};
use serde_json::Value;
use tokio::time::Instant;

/// How long a customize response stays valid for a parent generation (upstream: 20 min).
pub(crate) const CUSTOMIZE_CACHE_TTL: Duration = Duration::from_secs(20 * 60);

/// At most one discovery refresh per this interval when a customize response names a
/// resource the current discovery does not know (a CRD installed after the controller
/// started).
pub(crate) const DISCOVERY_REFRESH_MIN_INTERVAL: Duration = Duration::from_secs(1);

/// How long a sync waits for a newly started related informer's first list.
pub(crate) const INFORMER_SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Why related objects could not be resolved (the sync fails and is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum RelatedError {
    /// The customize hook failed.
    #[error("customize hook: {0}")]
    Hook(#[from] HookError),
    /// A rule of the customize response is invalid.
    #[error("invalid customize hook response: relatedResources[{index}]: {message}")]
    InvalidRule {
        /// Index in `relatedResources`.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// A rule names a resource the API server does not serve.
    #[error(
        "invalid customize hook response: relatedResources[{index}]: {resource}.{api_version} is not served by the API server"
    )]
    UnknownResource {
        /// Index in `relatedResources`.
        index: usize,
        /// The rule's apiVersion.
        api_version: String,
        /// The rule's resource.
        resource: String,
    },
    /// A v1 rule of a namespaced parent asks for another namespace.
    #[error("requested related object namespace {requested} differs from parent object namespace {parent}")]
    NamespaceMismatch {
        /// The rule's namespace.
        requested: String,
        /// The parent's namespace.
        parent: String,
    },
    /// A related informer did not complete its first list in time.
    #[error("related informer for {0} not synced yet")]
    NotSynced(String),
    /// The parent could not be encoded.
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
}

/// How a rule selects objects (upstream's selection types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// `labelSelector` only (absent: everything), in the scope of the parent.
    Labels,
    /// `labelSelector` in `namespace`.
    NamespaceAndLabels,
    /// `labelSelector` (absent: everything) in namespaces matching `namespaceSelector`.
    NamespaceSelector,
    /// `namespace` and/or `names`.
    NamespaceAndNames,
}

/// The selection type of a rule, or why the rule is invalid.
pub(crate) fn selection(rule: &RelatedResourceRule) -> Result<Selection, String> {
    let has_labels = rule.label_selector.is_some();
    let has_ns_selector = rule.namespace_selector.is_some();
    let has_namespace = rule.namespace.as_deref().is_some_and(|n| !n.is_empty());
    let has_names = rule.names.as_ref().is_some_and(|n| !n.is_empty());
    if has_names && (has_labels || has_ns_selector) {
        return Err("names cannot be combined with labelSelector or namespaceSelector".into());
    }
    if has_namespace && has_ns_selector {
        return Err("namespace cannot be combined with namespaceSelector".into());
    }
    Ok(if has_ns_selector {
        Selection::NamespaceSelector
    } else if has_labels && has_namespace {
        Selection::NamespaceAndLabels
    } else if has_namespace || has_names {
        Selection::NamespaceAndNames
    } else {
        Selection::Labels
    })
}

/// A rule compiled against discovery: its resource, selection type and selectors.
#[derive(Debug, Clone)]
pub struct CompiledRule {
    /// The rule as the hook returned it.
    pub rule: RelatedResourceRule,
    /// The related resource.
    pub resource: Arc<ApiResource>,
    /// How it selects.
    pub selection: Selection,
    /// `labelSelector` (absent: everything).
    pub labels: Selector,
    /// `namespaceSelector`, for [`Selection::NamespaceSelector`].
    pub namespaces: Selector,
}

impl CompiledRule {
    /// Compiles rule `index` of a customize response.
    pub fn compile(
        index: usize,
        rule: &RelatedResourceRule,
        resources: &ResourceMap,
    ) -> Result<CompiledRule, RelatedError> {
        let invalid = |message: String| RelatedError::InvalidRule { index, message };
        let selection = selection(rule).map_err(invalid)?;
        let resource = resources
            .get(&rule.api_version, &rule.resource)
            .cloned()
            .ok_or_else(|| RelatedError::UnknownResource {
                index,
                api_version: rule.api_version.clone(),
                resource: rule.resource.clone(),
            })?;
        let labels = Selector::from_label_selector_or_everything(rule.label_selector.as_ref())
            .map_err(|e| invalid(format!("labelSelector: {e}")))?;
        let namespaces =
            Selector::from_label_selector_or_everything(rule.namespace_selector.as_ref())
                .map_err(|e| invalid(format!("namespaceSelector: {e}")))?;
        Ok(CompiledRule {
            rule: rule.clone(),
            resource,
            selection,
            labels,
            namespaces,
        })
    }

    fn namespace(&self) -> &str {
        self.rule.namespace.as_deref().unwrap_or_default()
    }

    fn names(&self) -> &[String] {
        self.rule.names.as_deref().unwrap_or_default()
    }
}

/// What decides a rule's reach: the customize hook's version and the parent's namespace
/// (`None` for a cluster-scoped parent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// Version of the customize hook.
    pub version: HookVersion,
    /// The parent's namespace; `None` when cluster-scoped.
    pub parent_namespace: Option<String>,
}

impl Scope {
    /// True when a v1 hook of a namespaced parent is confined to the parent's namespace.
    fn confined(&self) -> Option<&str> {
        match (&self.version, &self.parent_namespace) {
            (HookVersion::V1, Some(ns)) => Some(ns),
            _ => None,
        }
    }
}

/// Where a rule lists objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// Every namespace (and cluster-scoped objects).
    All,
    /// One namespace.
    Namespace(String),
    /// Namespaces whose labels match the rule's `namespaceSelector`.
    SelectedNamespaces,
}

/// Where `rule` lists objects for a parent in `scope`.
pub fn listing(rule: &CompiledRule, scope: &Scope) -> Result<Listing, RelatedError> {
    let namespaced = rule.resource.namespaced;
    Ok(match rule.selection {
        Selection::Labels => match scope.confined() {
            Some(ns) if namespaced => Listing::Namespace(ns.to_string()),
            _ => Listing::All,
        },
        Selection::NamespaceAndLabels => Listing::Namespace(rule.namespace().to_string()),
        Selection::NamespaceSelector => Listing::SelectedNamespaces,
        Selection::NamespaceAndNames => match (scope.confined(), rule.namespace()) {
            // Upstream: names without a namespace are looked up in every namespace.
            (Some(_), "") => Listing::All,
            (Some(parent), requested) if namespaced => {
                if requested != parent {
                    return Err(RelatedError::NamespaceMismatch {
                        requested: requested.to_string(),
                        parent: parent.to_string(),
                    });
                }
                Listing::Namespace(parent.to_string())
            }
            (_, "") => Listing::All,
            (_, ns) => Listing::Namespace(ns.to_string()),
        },
    })
}

fn labels_of(obj: &DynamicObject) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    obj.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// Whether `obj` (an object of the rule's resource) passes the rule's selectors and names;
/// where it lives is [`listing`]'s business.
pub fn selects(rule: &CompiledRule, obj: &DynamicObject) -> bool {
    match rule.selection {
        Selection::NamespaceAndNames => {
            let names = rule.names();
            names.is_empty()
                || obj
                    .metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| names.iter().any(|x| x == n))
        }
        _ => rule.labels.matches(labels_of(obj)),
    }
}

/// Whether a change of `obj` concerns a parent in `scope` with `rule`: the object is of the
/// rule's resource, passes its selectors, and lives where the rule lists. `namespace_labels`
/// gives a namespace's labels (for `namespaceSelector`); `None` when it is unknown.
pub(crate) fn matches(
    rule: &CompiledRule,
    scope: &Scope,
    obj: &DynamicObject,
    namespace_labels: &dyn Fn(&str) -> Option<BTreeMap<String, String>>,
) -> bool {
    if !selects(rule, obj) {
        return false;
    }
    let obj_ns = obj.metadata.namespace.as_deref().unwrap_or_default();
    match listing(rule, scope) {
        Err(_) => false,
        Ok(Listing::All) => true,
        Ok(Listing::Namespace(ns)) => obj_ns == ns,
        Ok(Listing::SelectedNamespaces) => {
            !obj_ns.is_empty()
                && namespace_labels(obj_ns).is_some_and(|labels| rule.namespaces.matches(&labels))
        }
    }
}

/// Identifies a parent to enqueue when a related object changes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ParentId {
    /// The parent's apiVersion.
    pub api_version: String,
    /// The parent's kind.
    pub kind: String,
    /// The parent's `namespace/name`.
    pub key: NamespacedName,
}

impl ParentId {
    /// The identity of a parent object (apiVersion, kind and metadata read from JSON).
    pub fn of(parent: &Value) -> ParentId {
        let s = |p: &str| {
            parent
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        ParentId {
            api_version: s("/apiVersion"),
            kind: s("/kind"),
            key: NamespacedName::new(s("/metadata/namespace"), s("/metadata/name")),
        }
    }
}

/// Called with the parent to sync again and the origin of the related change. Runs on an
/// informer task: it must only enqueue.
pub(crate) type Enqueue = Arc<dyn Fn(&ParentId, Origin) + Send + Sync>;

/// What a [`RelatedManager`] needs.
pub struct RelatedConfig {
    /// The controller object sent in customize requests.
    pub controller: CustomizableController,
    /// Controller name (metrics labels, logs).
    pub name: String,
    /// The customize hook; `None` disables related objects (empty map).
    pub hook: Option<Hook>,
    /// The controller's endpoint settings for hook calls.
    pub endpoint_configs: Vec<EndpointConfig>,
    /// Hook client.
    pub hooks: HookClient,
    /// Shared informers.
    pub informers: Informers,
    /// Discovery at controller start, to resolve rule resources. Refreshed from the API
    /// server (at most once per `DISCOVERY_REFRESH_MIN_INTERVAL`) when a rule names a
    /// resource it does not know.
    pub resources: ResourceMap,
    /// Where related changes send parents.
    pub enqueue: Enqueue,
}

struct Entry {
    uid: String,
    generation: i64,
    fetched: Instant,
    scope: Scope,
    rules: Arc<Vec<CompiledRule>>,
}

struct Watch {
    informer: metacontroller_dynamic::InformerLease,
    handler: HandlerId,
}

#[derive(Default)]
struct State {
    entries: HashMap<ParentId, Entry>,
    watches: HashMap<ResourceId, Watch>,
}

struct Shared {
    config: RelatedConfig,
    state: Mutex<State>,
    /// Current discovery (starts as `config.resources`).
    discovery: std::sync::RwLock<Arc<ResourceMap>>,
    /// When discovery was last refreshed here; serialises refreshes too.
    refreshed: tokio::sync::Mutex<Option<Instant>>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn discovery(&self) -> Arc<ResourceMap> {
        self.discovery
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Re-reads discovery from the API server unless that happened less than
    /// [`DISCOVERY_REFRESH_MIN_INTERVAL`] ago. Keeps the previous result on failure.
    async fn refresh_discovery(&self) {
        let mut refreshed = self.refreshed.lock().await;
        if refreshed.is_some_and(|t| t.elapsed() < DISCOVERY_REFRESH_MIN_INTERVAL) {
            return;
        }
        let previous = self.discovery();
        match ResourceMap::discover(self.config.informers.client(), &previous).await {
            Ok(found) => {
                if let Some(map) = found.update {
                    *self.discovery.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(map);
                }
            }
            Err(e) => tracing::warn!(
                controller = %self.config.name,
                error = %e,
                "discovery refresh for related resources failed; using the previous result"
            ),
        }
        *refreshed = Some(Instant::now());
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for (_, w) in state.watches.drain() {
            w.informer.remove_handler(w.handler);
        }
    }
}

/// Resolves related objects for one controller. Cheap to clone.
#[derive(Clone)]
pub struct RelatedManager {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RelatedManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelatedManager")
            .field("controller", &self.shared.config.name)
            .finish_non_exhaustive()
    }
}

const NAMESPACES: (&str, &str) = ("v1", "namespaces");

fn meta_str<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// A cached object as JSON with apiVersion/kind filled in (list items lack them).
fn object_value(obj: &DynamicObject, res: &ApiResource) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(obj)?;
    if let Some(map) = v.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(res.api_version.clone()));
        map.insert("kind".into(), Value::String(res.kind.clone()));
    }
    Ok(v)
}

impl RelatedManager {
    /// A manager; nothing is watched until a customize response names a resource.
    pub fn new(config: RelatedConfig) -> Self {
        RelatedManager {
            shared: Arc::new(Shared {
                discovery: std::sync::RwLock::new(Arc::new(config.resources.clone())),
                refreshed: tokio::sync::Mutex::new(None),
                config,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Resources with a related informer lease held by this manager.
    pub fn watched(&self) -> Vec<ResourceId> {
        let mut ids: Vec<_> = self.shared.state().watches.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Drops what is cached for a parent (call when it is gone); informers no longer needed
    /// are released.
    pub fn forget(&self, parent: &ParentId) {
        let removed = self.shared.state().entries.remove(parent);
        if removed.is_some() {
            self.release_unused();
        }
    }

    /// Keeps the cached rules of the parents `keep` accepts only (a sharded replica drops
    /// those of parents that left it); informers no longer needed are released. Returns how
    /// many parents were dropped.
    pub(crate) fn retain(&self, keep: impl Fn(&ParentId) -> bool) -> usize {
        let dropped = {
            let mut state = self.shared.state();
            let before = state.entries.len();
            state.entries.retain(|id, _| keep(id));
            before - state.entries.len()
        };
        if dropped > 0 {
            self.release_unused();
        }
        dropped
    }

    /// Parents with cached rules.
    pub(crate) fn parents(&self) -> usize {
        self.shared.state().entries.len()
    }

    /// The `related` map of a sync/finalize request for `parent` (its JSON with apiVersion
    /// and kind), keyed for a hook of `sync_version`. Empty when no customize hook is set.
    pub async fn related(
        &self,
        parent: &Value,
        sync_version: HookVersion,
    ) -> Result<ObjectMap, RelatedError> {
        let Some(hook) = self.shared.config.hook.clone() else {
            return Ok(ObjectMap::new());
        };
        let id = ParentId::of(parent);
        let uid = meta_str(parent, "uid").to_string();
        let generation = parent
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or_default();
        let cached = {
            let state = self.shared.state();
            state
                .entries
                .get(&id)
                .filter(|e| {
                    e.uid == uid
                        && e.generation == generation
                        && e.fetched.elapsed() < CUSTOMIZE_CACHE_TTL
                })
                .map(|e| (e.scope.clone(), e.rules.clone()))
        };
        let (scope, rules) = match cached {
            Some((scope, rules)) => {
                // Normally a no-op; re-leases an informer another parent's rule change
                // released while this parent's entry was being published.
                self.watch(&rules);
                (scope, rules)
            }
            None => {
                let scope = Scope {
                    version: hook.effective_version(),
                    parent_namespace: Some(meta_str(parent, "namespace"))
                        .filter(|ns| !ns.is_empty())
                        .map(str::to_string),
                };
                let rules = Arc::new(self.customize(&hook, &id, parent).await?);
                // Watch first (handlers must not run under our lock), then publish the entry.
                self.watch(&rules);
                let replaced = self.shared.state().entries.insert(
                    id.clone(),
                    Entry {
                        uid,
                        generation,
                        fetched: Instant::now(),
                        scope: scope.clone(),
                        rules: rules.clone(),
                    },
                );
                if replaced.is_some() {
                    self.release_unused();
                }
                (scope, rules)
            }
        };
        self.resolve(&scope, &rules, sync_version).await
    }

    async fn customize(
        &self,
        hook: &Hook,
        id: &ParentId,
        parent: &Value,
    ) -> Result<Vec<CompiledRule>, RelatedError> {
        let config = &self.shared.config;
        let request = CustomizeHookRequest {
            controller: config.controller.clone(),
            parent: parent.clone(),
        };
        let key = id.key.to_string();
        let ctx = CallContext {
            controller: &config.name,
            hook_name: "customize",
            parent_key: &key,
        };
        let response: CustomizeHookResponse = config
            .hooks
            .call(&ctx, hook, &config.endpoint_configs, &request)
            .await?;
        let compile = |resources: &ResourceMap| -> Result<Vec<CompiledRule>, RelatedError> {
            response
                .related_resource_rules
                .iter()
                .enumerate()
                .map(|(i, rule)| CompiledRule::compile(i, rule, resources))
                .collect()
        };
        match compile(&self.shared.discovery()) {
            // Resources come and go (CRDs): look again before calling the rule wrong.
            Err(RelatedError::UnknownResource { .. }) => {
                self.shared.refresh_discovery().await;
                compile(&self.shared.discovery())
            }
            result => result,
        }
    }

    /// Makes sure every resource the rules need is watched (with our change handler).
    fn watch(&self, rules: &[CompiledRule]) {
        let mut needed: Vec<Arc<ApiResource>> = Vec::new();
        for rule in rules {
            needed.push(rule.resource.clone());
            if rule.selection == Selection::NamespaceSelector {
                if let Some(ns) = self.shared.discovery().get(NAMESPACES.0, NAMESPACES.1) {
                    needed.push(ns.clone());
                }
            }
        }
        for resource in needed {
            let id = resource.id();
            if self.shared.state().watches.contains_key(&id) {
                continue;
            }
            let informer = self.shared.config.informers.lease(&resource);
            let handler =
                informer.add_handler(change_handler(Arc::downgrade(&self.shared), id.clone()));
            let duplicate = {
                let mut state = self.shared.state();
                match state.watches.entry(id) {
                    std::collections::hash_map::Entry::Occupied(_) => {
                        Some(Watch { informer, handler })
                    }
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(Watch { informer, handler });
                        None
                    }
                }
            };
            // Another sync won the race: drop ours outside the lock.
            if let Some(w) = duplicate {
                w.informer.remove_handler(w.handler);
            }
        }
    }

    /// Releases informers no cached rule needs any more.
    fn release_unused(&self) {
        let released: Vec<Watch> = {
            let mut state = self.shared.state();
            let mut needed: HashSet<ResourceId> = HashSet::new();
            for entry in state.entries.values() {
                for rule in entry.rules.iter() {
                    needed.insert(rule.resource.id());
                    if rule.selection == Selection::NamespaceSelector {
                        needed.insert(ResourceId {
                            api_version: NAMESPACES.0.into(),
                            resource: NAMESPACES.1.into(),
                        });
                    }
                }
            }
            let unused: Vec<ResourceId> = state
                .watches
                .keys()
                .filter(|id| !needed.contains(*id))
                .cloned()
                .collect();
            unused
                .into_iter()
                .filter_map(|id| state.watches.remove(&id))
                .collect()
        };
        for w in released {
            w.informer.remove_handler(w.handler);
        }
    }

    fn informer(&self, resource: &ResourceId) -> Option<Arc<Informer>> {
        self.shared
            .state()
            .watches
            .get(resource)
            .map(|w| w.informer.value().clone())
    }

    async fn synced(&self, resource: &ResourceId) -> Result<Arc<Informer>, RelatedError> {
        let not_synced =
            || RelatedError::NotSynced(format!("{}.{}", resource.resource, resource.api_version));
        let informer = self.informer(resource).ok_or_else(not_synced)?;
        if !informer.has_synced() {
            tokio::time::timeout(INFORMER_SYNC_TIMEOUT, informer.wait_synced())
                .await
                .map_err(|_| not_synced())?;
        }
        Ok(informer)
    }

    async fn resolve(
        &self,
        scope: &Scope,
        rules: &[CompiledRule],
        sync_version: HookVersion,
    ) -> Result<ObjectMap, RelatedError> {
        let parent_ns = scope.parent_namespace.as_deref();
        let mut map = ObjectMap::new();
        for rule in rules {
            let res = &rule.resource;
            map.init_group(&res.api_version, &res.kind);
            let listing = listing(rule, scope)?;
            let informer = self.synced(&res.id()).await?;
            let candidates = match &listing {
                Listing::All => informer.list(),
                Listing::Namespace(ns) => informer.list_namespace(ns),
                Listing::SelectedNamespaces => {
                    let namespaces = self
                        .synced(&ResourceId {
                            api_version: NAMESPACES.0.into(),
                            resource: NAMESPACES.1.into(),
                        })
                        .await?;
                    let mut out = Vec::new();
                    for ns in namespaces.list() {
                        if rule.namespaces.matches(labels_of(&ns)) {
                            if let Some(name) = ns.metadata.name.as_deref() {
                                out.extend(informer.list_namespace(name));
                            }
                        }
                    }
                    out
                }
            };
            for obj in candidates.iter().filter(|o| selects(rule, o)) {
                map.insert(sync_version, parent_ns, object_value(obj, res)?);
            }
        }
        Ok(map)
    }
}

/// The informer handler of one related resource: enqueue every parent whose cached rules
/// select the changed object (before or after the change).
fn change_handler(shared: Weak<Shared>, resource: ResourceId) -> metacontroller_dynamic::Handler {
    Arc::new(move |change: &Change<DynamicObject>, origin: Origin| {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let objects: Vec<&DynamicObject> = match change {
            Change::Added(o) | Change::Deleted(o) => vec![o.as_ref()],
            Change::Updated { old, new } => {
                // Same resourceVersion: a relist of an unchanged object.
                if old.resource_version() == new.resource_version() {
                    return;
                }
                vec![old.as_ref(), new.as_ref()]
            }
        };
        let namespaces = shared
            .state()
            .watches
            .get(&ResourceId {
                api_version: NAMESPACES.0.into(),
                resource: NAMESPACES.1.into(),
            })
            .map(|w| w.informer.value().clone());
        let namespace_labels = |ns: &str| -> Option<BTreeMap<String, String>> {
            let informer = namespaces.as_ref()?;
            let obj = informer.get(&NamespacedName::new("", ns))?;
            Some(labels_of(&obj).clone())
        };
        let parents: Vec<ParentId> = {
            let state = shared.state();
            state
                .entries
                .iter()
                .filter(|(_, entry)| {
                    entry.rules.iter().any(|rule| {
                        rule.resource.api_version == resource.api_version
                            && rule.resource.name == resource.resource
                            && objects
                                .iter()
                                .any(|o| matches(rule, &entry.scope, o, &namespace_labels))
                    })
                })
                .map(|(id, _)| id.clone())
                .collect()
        };
        for parent in &parents {
            (shared.config.enqueue)(parent, origin);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resources() -> ResourceMap {
        let list: k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList =
            serde_json::from_value(json!({
                "groupVersion": "v1",
                "resources": [
                    {"name": "configmaps", "singularName": "configmap", "namespaced": true,
                     "kind": "ConfigMap", "verbs": ["list", "watch", "get"]},
                    {"name": "namespaces", "singularName": "namespace", "namespaced": false,
                     "kind": "Namespace", "verbs": ["list", "watch", "get"]}
                ]
            }))
            .unwrap();
        ResourceMap::from_lists([&list]).0
    }

    fn rule(v: Value) -> RelatedResourceRule {
        serde_json::from_value(v).unwrap()
    }

    fn compiled(v: Value) -> CompiledRule {
        CompiledRule::compile(0, &rule(v), &resources()).unwrap()
    }

    fn cm(ns: &str, name: &str, labels: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": ns, "name": name, "labels": labels}
        }))
        .unwrap()
    }

    fn scope(version: HookVersion, ns: Option<&str>) -> Scope {
        Scope {
            version,
            parent_namespace: ns.map(str::to_string),
        }
    }

    #[test]
    fn selection_types_follow_upstream() {
        let sel = |v: Value| selection(&rule(v));
        let base = json!({"apiVersion": "v1", "resource": "configmaps"});
        assert_eq!(sel(base.clone()), Ok(Selection::Labels));
        assert_eq!(
            sel(json!({"apiVersion": "v1", "resource": "configmaps", "labelSelector": {}})),
            Ok(Selection::Labels)
        );
        assert_eq!(
            sel(
                json!({"apiVersion": "v1", "resource": "configmaps", "labelSelector": {}, "namespace": "a"})
            ),
            Ok(Selection::NamespaceAndLabels)
        );
        assert_eq!(
            sel(json!({"apiVersion": "v1", "resource": "configmaps", "namespaceSelector": {}})),
            Ok(Selection::NamespaceSelector)
        );
        assert_eq!(
            sel(json!({"apiVersion": "v1", "resource": "configmaps", "names": ["x"]})),
            Ok(Selection::NamespaceAndNames)
        );
        assert_eq!(
            sel(json!({"apiVersion": "v1", "resource": "configmaps", "namespace": "a"})),
            Ok(Selection::NamespaceAndNames)
        );
        // Empty strings and lists count as absent, as in Go.
        assert_eq!(
            sel(
                json!({"apiVersion": "v1", "resource": "configmaps", "namespace": "", "names": []})
            ),
            Ok(Selection::Labels)
        );
        assert!(sel(
            json!({"apiVersion": "v1", "resource": "configmaps", "names": ["x"], "labelSelector": {}})
        )
        .is_err());
        assert!(sel(
            json!({"apiVersion": "v1", "resource": "configmaps", "names": ["x"], "namespaceSelector": {}})
        )
        .is_err());
        assert!(sel(
            json!({"apiVersion": "v1", "resource": "configmaps", "namespace": "a", "namespaceSelector": {}})
        )
        .is_err());
    }

    #[test]
    fn compile_errors_name_the_rule() {
        let err = CompiledRule::compile(
            3,
            &rule(json!({"apiVersion": "v1", "resource": "pods"})),
            &resources(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("relatedResources[3]"), "{err}");
        assert!(err.to_string().contains("pods.v1"), "{err}");
        let bad_selector = rule(json!({"apiVersion": "v1", "resource": "configmaps",
            "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Sideways"}]}}));
        let err = CompiledRule::compile(0, &bad_selector, &resources()).unwrap_err();
        assert!(err.to_string().contains("labelSelector"), "{err}");
    }

    #[test]
    fn v1_namespaced_parent_is_confined_to_its_namespace_except_names_only() {
        let v1 = scope(HookVersion::V1, Some("p"));
        let labels =
            compiled(json!({"apiVersion": "v1", "resource": "configmaps", "labelSelector": {}}));
        assert_eq!(
            listing(&labels, &v1).unwrap(),
            Listing::Namespace("p".into())
        );
        // Names without a namespace: every namespace, as upstream's code.
        let names = compiled(json!({"apiVersion": "v1", "resource": "configmaps", "names": ["x"]}));
        assert_eq!(listing(&names, &v1).unwrap(), Listing::All);
        let same =
            compiled(json!({"apiVersion": "v1", "resource": "configmaps", "namespace": "p"}));
        assert_eq!(listing(&same, &v1).unwrap(), Listing::Namespace("p".into()));
        let other =
            compiled(json!({"apiVersion": "v1", "resource": "configmaps", "namespace": "q"}));
        let err = listing(&other, &v1).unwrap_err();
        assert!(
            matches!(err, RelatedError::NamespaceMismatch { .. }),
            "{err}"
        );
        // Cluster-scoped related resources are not confined.
        let nss =
            compiled(json!({"apiVersion": "v1", "resource": "namespaces", "labelSelector": {}}));
        assert_eq!(listing(&nss, &v1).unwrap(), Listing::All);
    }

    #[test]
    fn v2_or_cluster_scoped_parents_reach_any_namespace() {
        for s in [
            scope(HookVersion::V2, Some("p")),
            scope(HookVersion::V1, None),
        ] {
            let labels = compiled(
                json!({"apiVersion": "v1", "resource": "configmaps", "labelSelector": {}}),
            );
            assert_eq!(listing(&labels, &s).unwrap(), Listing::All);
            let names =
                compiled(json!({"apiVersion": "v1", "resource": "configmaps", "names": ["x"]}));
            assert_eq!(listing(&names, &s).unwrap(), Listing::All);
            let other =
                compiled(json!({"apiVersion": "v1", "resource": "configmaps", "namespace": "q"}));
            assert_eq!(listing(&other, &s).unwrap(), Listing::Namespace("q".into()));
        }
    }

    #[test]
    fn matching_applies_selectors_names_and_scope() {
        let no_ns = |_: &str| None;
        let v1 = scope(HookVersion::V1, Some("p"));
        let v2 = scope(HookVersion::V2, Some("p"));
        let by_label = compiled(json!({"apiVersion": "v1", "resource": "configmaps",
            "labelSelector": {"matchLabels": {"app": "x"}}}));
        assert!(matches(
            &by_label,
            &v1,
            &cm("p", "a", json!({"app": "x"})),
            &no_ns
        ));
        assert!(!matches(
            &by_label,
            &v1,
            &cm("p", "a", json!({"app": "y"})),
            &no_ns
        ));
        assert!(!matches(
            &by_label,
            &v1,
            &cm("q", "a", json!({"app": "x"})),
            &no_ns
        ));
        assert!(matches(
            &by_label,
            &v2,
            &cm("q", "a", json!({"app": "x"})),
            &no_ns
        ));

        let by_name = compiled(json!({"apiVersion": "v1", "resource": "configmaps",
            "namespace": "q", "names": ["a"]}));
        assert!(matches(&by_name, &v2, &cm("q", "a", json!({})), &no_ns));
        assert!(!matches(&by_name, &v2, &cm("q", "b", json!({})), &no_ns));
        assert!(!matches(&by_name, &v2, &cm("p", "a", json!({})), &no_ns));
        // The same rule is an error for a v1 namespaced parent: nothing matches.
        assert!(!matches(&by_name, &v1, &cm("q", "a", json!({})), &no_ns));

        let by_ns = compiled(json!({"apiVersion": "v1", "resource": "configmaps",
            "namespaceSelector": {"matchLabels": {"team": "a"}}}));
        let ns_labels = |ns: &str| -> Option<BTreeMap<String, String>> {
            (ns == "team-a").then(|| BTreeMap::from([("team".to_string(), "a".to_string())]))
        };
        assert!(matches(
            &by_ns,
            &v1,
            &cm("team-a", "x", json!({})),
            &ns_labels
        ));
        assert!(!matches(
            &by_ns,
            &v1,
            &cm("team-b", "x", json!({})),
            &ns_labels
        ));
    }

    #[test]
    fn parent_identity_reads_json() {
        let id = ParentId::of(&json!({"apiVersion": "example.com/v1", "kind": "P",
            "metadata": {"namespace": "ns", "name": "p"}}));
        assert_eq!(id.api_version, "example.com/v1");
        assert_eq!(id.kind, "P");
        assert_eq!(id.key, NamespacedName::new("ns", "p"));
        // Junk reads as empty, never panics.
        let junk = ParentId::of(&json!("junk"));
        assert_eq!(junk.key, NamespacedName::new("", ""));
    }
}
