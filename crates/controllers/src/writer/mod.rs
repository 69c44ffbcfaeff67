//! The write path shared by both controller kinds: child create / update / server-side apply /
//! delete, parent metadata and status writes, with the stale-cache guards around them.
//!
//! A [`Writer`] belongs to one controller. It owns:
//! - the [`ApplyStrategy`] (`--apply-strategy`): client-side three-way merge + PUT with the
//!   observed resourceVersion (`dynamic-apply`), or `application/apply-patch+yaml` with the
//!   configured field manager and `force=true` (`server-side-apply`, as upstream);
//! - an [`Overlay`] of the objects our own writes returned, so a sync that runs before the
//!   informer delivers them does not act on the older cached object ([`Writer::fresh`]);
//! - [`Expectations`] of creates and deletes per owner uid, confirmed by informer events
//!   ([`Writer::observe`]) or by the cache content ([`Writer::satisfied`]).
//!
//! Errors are values ([`WriteError`]); [`WriteError::is_conflict`] tells the caller to abort the
//! sync and requeue with backoff rather than retry on stale data.
//!
//! Modules: `requests` (single reads and writes), `apply` (server-side apply and its body
//! cache), `batch` (a sync's planned child writes), `overlay` (the own-writes overlay),
//! `expectations` (creates and deletes per owner), `own_writes` (overlay and expectations
//! fed by informer events), `taken` (child names held by objects we do not control).

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::DynamicObject;
use metacontroller_dynamic::{ApiResource, Change, ObjectKey, ObjectMetaAccess, Versioned};
use serde_json::{json, Value};

use std::collections::BTreeMap;
use std::sync::Arc;

use metacontroller_apply::Schema;
use metacontroller_dynamic::Schemas;

use crate::children::{child_key, Action, ChildError, ChildKey, ChildType, ParentRef};

mod apply;
mod batch;
mod expectations;
mod overlay;
mod own_writes;
mod requests;
mod taken;

use crate::spans::{traced_write, Verb};
pub(crate) use apply::contains_all;
use expectations::Expectations;
use overlay::Overlay;
use taken::{Known, Taken};

/// How children are written (`--apply-strategy`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ApplyStrategy {
    /// Client-side three-way merge (metacontroller-apply), PUT with resourceVersion.
    #[default]
    DynamicApply,
    /// Server-side apply with this field manager, forcing conflicts (as upstream).
    ServerSideApply {
        /// `--apply-strategy-ssa-field-manager`.
        field_manager: String,
    },
}

impl ApplyStrategy {
    /// True for server-side apply.
    pub(crate) fn is_server_side(&self) -> bool {
        matches!(self, ApplyStrategy::ServerSideApply { .. })
    }
}

/// A failed write.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The API server refused the request.
    #[error("{what}: {source}")]
    Api {
        /// What was attempted (`create ConfigMap ns/name`).
        what: String,
        /// The error.
        source: kube::Error,
    },
    /// An object could not be converted for the request.
    #[error("{what}: {source}")]
    Encode {
        /// What was attempted.
        what: String,
        /// The error.
        source: serde_json::Error,
    },
    /// A request this writer cannot make (a programming error, reported not panicked).
    #[error("{0}")]
    Unsupported(String),
    /// The child's name is taken by an object this parent does not control. It is neither
    /// adopted nor overwritten, and not asked for again until that object changes.
    #[error(
        "{what}: the name is taken by an object not controlled by this parent ({holder}); \
         leaving it alone until it changes or is deleted"
    )]
    NameTaken {
        /// What was attempted (`create ConfigMap ns/name`).
        what: String,
        /// Who controls the existing object (`uid <uid>, no controller` or its controller).
        holder: String,
    },
}

impl WriteError {
    /// 409 Conflict (stale resourceVersion): abort this sync, requeue with backoff.
    pub(crate) fn is_conflict(&self) -> bool {
        matches!(self, WriteError::Api { source: kube::Error::Api(s), .. }
            if s.code == 409 && s.reason == "Conflict")
    }

    /// The API server could not be reached (connection refused or reset, TLS or HTTP
    /// failure below the API): nothing about the object, only about the server.
    pub(crate) fn is_unreachable(&self) -> bool {
        matches!(
            self,
            WriteError::Api {
                source: kube::Error::Service(_) | kube::Error::HyperError(_),
                ..
            }
        )
    }

    /// 404 Not Found.
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, WriteError::Api { source, .. } if is_not_found(source))
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

/// A cached object as JSON with apiVersion/kind filled in (list items lack them).
pub fn to_value(obj: &DynamicObject, res: &ApiResource) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(obj)?;
    if let Some(map) = v.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(res.api_version.clone()));
        map.insert("kind".into(), Value::String(res.kind.clone()));
    }
    Ok(v)
}

/// The overlay / expectations key of an object of `res`.
pub(crate) fn object_key(res: &ApiResource, namespace: &str, name: &str) -> ObjectKey {
    ObjectKey::new(
        format!("{}/{}", res.api_version, res.name),
        if res.namespaced { namespace } else { "" },
        name,
    )
}

fn key_of(res: &ApiResource, obj: &Value) -> ObjectKey {
    object_key(
        res,
        obj.namespace().unwrap_or_default(),
        obj.name().unwrap_or_default(),
    )
}

fn describe(res: &ApiResource, obj: &Value) -> String {
    match obj.namespace() {
        Some(ns) if res.namespaced => {
            format!("{} {ns}/{}", res.kind, obj.name().unwrap_or_default())
        }
        _ => format!("{} {}", res.kind, obj.name().unwrap_or_default()),
    }
}

fn hash_value(v: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    v.to_string().hash(&mut h);
    h.finish()
}

/// Semantic JSON equality (numbers by value): one definition with the apply path's.
pub use metacontroller_apply::json_equal;

/// The write path of one controller. Share it (`Arc`) between its workers and its informer
/// handlers.
pub struct Writer {
    client: kube::Client,
    strategy: ApplyStrategy,
    overlay: Overlay<Value>,
    expectations: Expectations<String, ObjectKey>,
    /// Hash of the last apply body sent per child (server-side apply), so an unchanged body
    /// is not sent again; a changed body (e.g. a field dropped) always is.
    applied: Mutex<HashMap<ObjectKey, u64>>,
    /// Names taken by objects we do not control, per (owner uid, child key): the taker as
    /// last seen, so a create is not sent again until the informer shows it changed.
    taken: Mutex<HashMap<(String, ObjectKey), Taken>>,
    /// Where merge schemas come from (`--apply-schema=auto`); `None`: conventions only.
    schemas: Option<Schemas>,
    /// Counts the child writes of [`Writer::execute`].
    writes: crate::metrics::ChildWrites,
    /// The most child writes of one sync in flight at once ([`Writer::execute_all`]).
    concurrency: usize,
}

/// Default for the child writes of one sync in flight at once
/// (`--max-concurrent-child-writes`). A real API server (+ etcd) answers one write in a few
/// milliseconds but takes hundreds per second in total, so a sync sending its writes one
/// after another is latency-bound. 8 at once bounds what one parent with many children sends
/// (with `--parents-in-flight` syncs writing at a time) and how many writes are already on
/// their way when a 409 Conflict stops a sync.
pub const DEFAULT_CHILD_WRITE_CONCURRENCY: usize = 8;

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("strategy", &self.strategy)
            .finish_non_exhaustive()
    }
}

impl Writer {
    /// A writer using `client` and `strategy`.
    pub fn new(client: kube::Client, strategy: ApplyStrategy) -> Self {
        Writer {
            client,
            strategy,
            overlay: Overlay::default(),
            expectations: Expectations::default(),
            applied: Mutex::new(HashMap::new()),
            taken: Mutex::new(HashMap::new()),
            schemas: None,
            writes: Default::default(),
            concurrency: DEFAULT_CHILD_WRITE_CONCURRENCY,
        }
    }

    /// Sends at most `n` child writes of one sync at once (at least 1; 1 is upstream's one
    /// after another).
    pub(crate) fn with_write_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Counts child writes into `writes` (metrics).
    pub(crate) fn with_metrics(mut self, writes: crate::metrics::ChildWrites) -> Self {
        self.writes = writes;
        self
    }

    /// Merges children with the schemas of their kinds from `schemas` (`None`: by
    /// conventions only, as upstream).
    pub fn with_schemas(mut self, schemas: Option<Schemas>) -> Self {
        self.schemas = schemas;
        self
    }

    /// The merge schema of each child type (same order; `None` where there is none or
    /// schemas are off).
    pub(crate) async fn schemas_for(&self, types: &[ChildType]) -> Vec<Option<Arc<Schema>>> {
        let mut out = Vec::with_capacity(types.len());
        for t in types {
            out.push(match &self.schemas {
                Some(s) => s.lookup(&t.api_version, &t.kind, &t.resource).await,
                None => None,
            });
        }
        out
    }

    /// `children::plan_children` with this writer's apply
    /// strategy, each child merged with the schema of its type.
    pub async fn plan_children(
        &self,
        types: &[ChildType],
        parent: &ParentRef,
        observed: &[Value],
        desired: &BTreeMap<ChildKey, (usize, Value)>,
    ) -> Result<Vec<Action>, ChildError> {
        let server_side = self.strategy.is_server_side();
        // Server-side apply merges on the server: no schema needed here.
        let schemas = if server_side {
            Vec::new()
        } else {
            self.schemas_for(types).await
        };
        crate::children::plan_children_with(types, parent, observed, desired, server_side, &|i| {
            schemas.get(i).and_then(Option::as_deref)
        })
    }

    /// The apply strategy.
    pub(crate) fn strategy(&self) -> &ApplyStrategy {
        &self.strategy
    }

    /// Create/delete expectations, keyed by owner uid.
    pub(crate) fn expectations(&self) -> &Expectations<String, ObjectKey> {
        &self.expectations
    }

    /// Drops what this writer holds for parents that left the process's caches without an
    /// event (a sharded replica released their shard): their expectations and taken names
    /// (`live_owner(uid)` false), the apply hashes of objects no longer cached, and the
    /// own-writes entries of objects no longer cached unless they are creates of a live
    /// parent still waiting for their event. `cached(key)`: whether the cache holds the
    /// written object (`None`: not watched, kept).
    pub(crate) fn retain_owners(
        &self,
        live_owner: &dyn Fn(&str) -> bool,
        cached: &dyn Fn(&ObjectKey) -> Option<bool>,
    ) {
        self.retain_live_owners(live_owner);
        self.applied_lock()
            .retain(|key, _| cached(key) != Some(false));
        self.overlay.retain(|key, written| {
            cached(key) != Some(false)
                || written
                    .and_then(|obj| obj.controller_uid())
                    .is_some_and(live_owner)
        });
    }

    /// Drops the expectations and taken names of the owners `live_owner` refuses.
    pub(crate) fn retain_live_owners(&self, live_owner: &dyn Fn(&str) -> bool) {
        self.expectations.retain(|uid| live_owner(uid.as_str()));
        self.taken_lock()
            .retain(|(uid, _), _| live_owner(uid.as_str()));
    }

    /// Whether any expectation or taken name is held (by owner uid).
    pub(crate) fn holds_owner_state(&self) -> bool {
        !self.expectations.is_empty() || !self.taken_lock().is_empty()
    }

    /// Whether any own-writes entry or apply hash is held.
    pub(crate) fn holds_writes(&self) -> bool {
        !self.overlay.is_empty() || !self.applied_lock().is_empty()
    }

    /// Entries per structure that grows with the parents (metrics): parents with
    /// unconfirmed writes, names taken, apply hashes, own-writes entries.
    pub(crate) fn state_entries(&self) -> [(&'static str, usize); 4] {
        [
            ("expectations", self.expectations.len()),
            ("taken_names", self.taken_lock().len()),
            ("apply_hashes", self.applied_lock().len()),
            ("own_writes", self.overlay.len()),
        ]
    }

    /// A dynamic API handle for `res` in `namespace` (ignored for cluster-scoped resources).
    pub(crate) fn api(&self, res: &ApiResource, namespace: &str) -> Api<DynamicObject> {
        let kr = res.to_kube();
        if res.namespaced {
            Api::namespaced_with(self.client.clone(), namespace, &kr)
        } else {
            Api::all_with(self.client.clone(), &kr)
        }
    }

    /// True when no create/delete of `owner`'s children is unconfirmed. `present(key)` says
    /// whether the cache holds the object and it is not being deleted (`None`: unknown
    /// resource).
    pub(crate) fn satisfied(
        &self,
        owner: &str,
        present: impl Fn(&ObjectKey) -> Option<bool>,
    ) -> bool {
        self.expectations
            .satisfied_given(&owner.to_string(), present)
    }

    /// The freshest view of a cached object: our own newer write, the cached object, or
    /// `None` when we deleted it and the cache does not know yet.
    pub(crate) fn fresh(&self, res: &ApiResource, cached: Value) -> Option<Value> {
        let key = key_of(res, &cached);
        self.overlay
            .get(&key, Some(&cached))
            .map(std::borrow::Cow::into_owned)
    }
}

/// The key of an action's object (for logs and errors).
pub fn action_key(action: &Action) -> crate::children::ChildKey {
    match action {
        Action::Create { object, .. }
        | Action::Update { object, .. }
        | Action::Apply { object, .. } => child_key(object),
        Action::Delete { observed, .. } => child_key(observed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_by_value() {
        assert!(json_equal(
            &json!({"a": 1, "b": [2.0]}),
            &json!({"b": [2], "a": 1.0})
        ));
        assert!(!json_equal(&json!({"a": 1}), &json!({"a": 1, "b": null})));
        assert!(!json_equal(&json!({"a": "1"}), &json!({"a": 1})));
    }

    #[test]
    fn apply_body_contained_in_observed() {
        let observed = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n", "resourceVersion": "3", "uid": "u",
                         "labels": {"x": "1", "other": "2"}},
            "data": {"k": "v", "foreign": "f"}});
        let same = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n", "labels": {"x": "1"}},
            "data": {"k": "v"}});
        assert!(contains_all(&observed, &same));
        let changed = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n"}, "data": {"k": "w"}});
        assert!(!contains_all(&observed, &changed));
    }

    fn cm(name: &str, rv: &str, uid: &str) -> std::sync::Arc<DynamicObject> {
        std::sync::Arc::new(
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "n", "resourceVersion": rv,
                             "uid": uid}}))
            .unwrap(),
        )
    }

    fn configmaps() -> ApiResource {
        ApiResource {
            api_version: "v1".into(),
            group: String::new(),
            version: "v1".into(),
            name: "configmaps".into(),
            singular_name: "configmap".into(),
            kind: "ConfigMap".into(),
            namespaced: true,
            verbs: Default::default(),
            short_names: Vec::new(),
            subresources: Default::default(),
        }
    }

    /// A writer that met a foreign `n/taken` (rv 5) while creating parent `owner`'s child.
    fn writer_with_taken() -> Writer {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let writer = Writer::new(
            kube::Client::try_from(config).unwrap(),
            ApplyStrategy::DynamicApply,
        );
        let desired = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "taken", "namespace": "n",
                         "ownerReferences": [{"apiVersion": "x/v1", "kind": "P", "name": "p",
                                              "uid": "owner", "controller": true}]}});
        writer.taken_lock().insert(
            ("owner".into(), object_key(&configmaps(), "n", "taken")),
            Taken {
                resource_version: "5".into(),
                desired,
                holder: "uid f, no controller".into(),
                checked: std::time::Instant::now(),
            },
        );
        writer
    }

    fn is_taken(writer: &Writer, owner: &str, key: &ObjectKey) -> bool {
        matches!(writer.known_taken(owner, key, "create"), Known::Taken(_))
    }

    #[tokio::test]
    async fn taken_name_is_released_only_when_the_taker_changes_or_goes() {
        let res = configmaps();
        let writer = writer_with_taken();
        let key = object_key(&res, "n", "taken");
        assert!(is_taken(&writer, "owner", &key));
        assert!(!is_taken(&writer, "other", &key));
        // A relist replay (same resourceVersion) and other objects release nothing.
        let same = Change::Updated {
            old: cm("taken", "5", "f"),
            new: cm("taken", "5", "f"),
        };
        assert!(writer.observe(&res, &same).is_empty());
        assert!(writer
            .observe(&res, &Change::Added(cm("other", "9", "g")))
            .is_empty());
        assert!(is_taken(&writer, "owner", &key));
        // A change hands back our desired child (with our ownerReference) once.
        let changed = Change::Updated {
            old: cm("taken", "5", "f"),
            new: cm("taken", "6", "f"),
        };
        let released = writer.observe(&res, &changed);
        let [Change::Added(obj)] = released.as_slice() else {
            panic!("expected one released child, got {released:?}");
        };
        assert_eq!(obj.controller_uid(), Some("owner"));
        assert!(!is_taken(&writer, "owner", &key));
        assert!(writer.observe(&res, &changed).is_empty());

        let writer = writer_with_taken();
        let gone = Change::Deleted(cm("taken", "5", "f"));
        assert_eq!(writer.observe(&res, &gone).len(), 1);

        // Believed for TAKEN_RECHECK only: then the holder is to be read again (a sharded
        // replica may never see its events).
        let writer = writer_with_taken();
        if let Some(long_ago) = std::time::Instant::now().checked_sub(taken::TAKEN_RECHECK) {
            for t in writer.taken_lock().values_mut() {
                t.checked = long_ago;
            }
            assert!(matches!(
                writer.known_taken("owner", &key, "create"),
                Known::Stale
            ));
        }

        // The parent going away forgets what it waited for.
        let writer = writer_with_taken();
        writer.observe(&res, &Change::Deleted(cm("parent", "1", "owner")));
        assert!(!is_taken(&writer, "owner", &key));
    }
}
