//! The finalizer and hook-choice rules both controller kinds share (upstream
//! `finalizer.Manager` and `ShouldFinalize`), without I/O. The controller's finalizer
//! (`metacontroller.io/compositecontroller-<name>` / `decoratorcontroller-<name>`) is present
//! exactly while a finalize hook is configured (never added to an object already being
//! deleted); the finalize hook runs when the object is being deleted *or no longer matches
//! the controller's selector*, and `finalized: true` removes the finalizer.

use serde_json::{Map, Value};

pub use crate::meta::is_deleting;

/// Finalizers the garbage collector acts on: while one is present the GC deletes or
/// orphans dependents itself, so managing attachments would fight it.
const GC_FINALIZERS: [&str; 2] = ["foregroundDeletion", "orphan"];

fn finalizers(obj: &Value) -> impl Iterator<Item = &str> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// Whether the object lists `name` in `metadata.finalizers`.
pub(crate) fn has_finalizer(obj: &Value, name: &str) -> bool {
    finalizers(obj).any(|f| f == name)
}

/// What to do with our finalizer before calling a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizerSync {
    /// Already right.
    Keep,
    /// Add it (a finalize hook is configured and the object is not being deleted).
    Add,
    /// Remove it (no finalize hook any more).
    Remove,
}

/// Upstream `finalizer.Manager.SyncObject`: the finalizer is wanted iff a finalize hook
/// is configured; it is not added to an object already being deleted.
pub fn finalizer_sync(obj: &Value, name: &str, finalize_hook: bool) -> FinalizerSync {
    let has = has_finalizer(obj, name);
    match (has, finalize_hook) {
        (true, true) | (false, false) => FinalizerSync::Keep,
        (false, true) if is_deleting(obj) => FinalizerSync::Keep,
        (false, true) => FinalizerSync::Add,
        (true, false) => FinalizerSync::Remove,
    }
}

/// The object with the finalizer added or removed; `None` when already so.
pub fn with_finalizer(obj: &Value, name: &str, present: bool) -> Option<Value> {
    if has_finalizer(obj, name) == present {
        return None;
    }
    let mut out = obj.clone();
    let meta = out
        .as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let meta = meta.as_object_mut()?;
    let mut list: Vec<Value> = finalizers(obj)
        .filter(|f| *f != name)
        .map(|f| Value::String(f.to_string()))
        .collect();
    if present {
        list.push(Value::String(name.to_string()));
    }
    if list.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert("finalizers".into(), Value::Array(list));
    }
    Some(out)
}

/// Whether an object that is not a match any more (and carries no finalizer of ours) is
/// simply ignored. Objects that stopped matching but still carry our finalizer are
/// finalized first.
pub fn is_ignored(matches: bool, obj: &Value, finalizer: &str) -> bool {
    !matches && !has_finalizer(obj, finalizer)
}

/// Which hook a sync calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HookChoice {
    /// The sync hook (`finalizing: false`).
    Sync,
    /// The finalize hook (`finalizing: true`).
    Finalize,
}

/// Upstream's choice: the finalize hook when one is configured and the object is being
/// deleted or no longer matches the selectors; otherwise the sync hook.
pub(crate) fn choose_hook(obj: &Value, matches: bool, finalize_hook: bool) -> HookChoice {
    if finalize_hook && (is_deleting(obj) || !matches) {
        HookChoice::Finalize
    } else {
        HookChoice::Sync
    }
}

/// Whether children (attachments) are managed in this sync: always for a live object; for
/// one being deleted only while our finalizer holds it and no GC finalizer is deleting or
/// orphaning its dependents (upstream `ShouldFinalize`).
pub fn manages_children(obj: &Value, finalizer: &str, finalize_hook: bool) -> bool {
    if !is_deleting(obj) {
        return true;
    }
    finalize_hook
        && has_finalizer(obj, finalizer)
        && !finalizers(obj).any(|f| GC_FINALIZERS.contains(&f))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const FIN: &str = "metacontroller.io/decoratorcontroller-dc";

    /// An object with this metadata (the rules read nothing else).
    fn obj(meta: Value) -> Value {
        json!({"metadata": meta})
    }

    #[test]
    fn finalizer_present_exactly_while_a_finalize_hook_exists() {
        let plain = obj(json!({}));
        assert_eq!(finalizer_sync(&plain, FIN, true), FinalizerSync::Add);
        assert_eq!(finalizer_sync(&plain, FIN, false), FinalizerSync::Keep);
        let with = obj(json!({"finalizers": ["other", FIN]}));
        assert_eq!(finalizer_sync(&with, FIN, true), FinalizerSync::Keep);
        assert_eq!(finalizer_sync(&with, FIN, false), FinalizerSync::Remove);
        // Never added to an object already being deleted.
        let deleting = obj(json!({"deletionTimestamp": "2024-01-01T00:00:00Z"}));
        assert_eq!(finalizer_sync(&deleting, FIN, true), FinalizerSync::Keep);
    }

    #[test]
    fn finalizer_add_and_remove_keep_other_finalizers() {
        let t = obj(json!({"finalizers": ["other"]}));
        let added = with_finalizer(&t, FIN, true).unwrap();
        assert_eq!(added["metadata"]["finalizers"], json!(["other", FIN]));
        assert!(with_finalizer(&added, FIN, true).is_none());
        let removed = with_finalizer(&added, FIN, false).unwrap();
        assert_eq!(removed["metadata"]["finalizers"], json!(["other"]));
        let only = obj(json!({"finalizers": [FIN]}));
        let removed = with_finalizer(&only, FIN, false).unwrap();
        assert!(removed["metadata"].get("finalizers").is_none());
        assert!(with_finalizer(&t, FIN, false).is_none());
    }

    #[test]
    fn finalize_hook_when_deleting_or_no_longer_matching() {
        let live = obj(json!({}));
        let deleting = obj(json!({"deletionTimestamp": "2024-01-01T00:00:00Z"}));
        assert_eq!(choose_hook(&live, true, true), HookChoice::Sync);
        assert_eq!(choose_hook(&live, false, true), HookChoice::Finalize);
        assert_eq!(choose_hook(&deleting, true, true), HookChoice::Finalize);
        // Without a finalize hook the sync hook is called, even while deleting.
        assert_eq!(choose_hook(&deleting, true, false), HookChoice::Sync);
    }

    #[test]
    fn non_matching_targets_are_ignored_unless_they_carry_our_finalizer() {
        assert!(is_ignored(false, &obj(json!({})), FIN));
        assert!(!is_ignored(false, &obj(json!({"finalizers": [FIN]})), FIN));
        assert!(!is_ignored(true, &obj(json!({})), FIN));
    }

    #[test]
    fn children_managed_while_finalizing_only_with_our_finalizer_and_no_gc() {
        assert!(manages_children(&obj(json!({})), FIN, false));
        let ts = "2024-01-01T00:00:00Z";
        let ours = obj(json!({"deletionTimestamp": ts, "finalizers": [FIN]}));
        assert!(manages_children(&ours, FIN, true));
        assert!(!manages_children(&ours, FIN, false));
        let gone = obj(json!({"deletionTimestamp": ts, "finalizers": ["x"]}));
        assert!(!manages_children(&gone, FIN, true));
        let gc = obj(json!({"deletionTimestamp": ts, "finalizers": [FIN, "foregroundDeletion"]}));
        assert!(!manages_children(&gc, FIN, true));
    }
}
