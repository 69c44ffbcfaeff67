//! Claiming children by ControllerRef, as Kubernetes' `BaseControllerRefManager.ClaimObject`
//! (which upstream Metacontroller uses): a parent owns the objects whose controller
//! ownerReference names its uid *and* that its selector matches; it adopts matching orphans
//! (objects without a controller) and releases owned objects that stopped matching.
//!
//! This module is the pure decision plus the ownerReference edits; the controller does the
//! I/O (re-reading an orphan from the API server before adopting it, never from the cache).

use metacontroller_dynamic::{ObjectMetaAccess, Selector};
use serde_json::Value;

use crate::meta::is_deleting;

/// What to do with one candidate child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Ours and matching: a child.
    Owned,
    /// A matching orphan: adopt it (then it is a child).
    Adopt,
    /// Ours but no longer matching: remove our ownerReference.
    Release,
    /// Not ours (another controller's, or an orphan we must not adopt now).
    Ignore,
}

/// The parent as claiming sees it.
#[derive(Debug, Clone, Copy)]
pub struct Claimant<'a> {
    /// Parent uid.
    pub uid: &'a str,
    /// Parent namespace (`None` for a cluster-scoped parent).
    pub namespace: Option<&'a str>,
    /// The parent has a deletionTimestamp: neither adopt nor release.
    pub deleting: bool,
    /// Which children the parent selects.
    pub selector: &'a Selector,
}

fn labels(obj: &Value) -> serde_json::Map<String, Value> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Decides what `parent` does with `child`.
pub fn classify(parent: &Claimant<'_>, child: &Value) -> Claim {
    let matches = parent.selector.matches(&labels(child));
    match child.controller_uid() {
        Some(uid) if uid != parent.uid => Claim::Ignore,
        // Extension: a child outside the parent's namespace carries our uid label (set by
        // us, never adopted): ours whatever its other labels.
        Some(_)
            if child.pointer("/metadata/ownerReferences").is_none_or(|r| {
                r.as_array()
                    .is_none_or(|refs| !refs.iter().any(|r| r["controller"] == true))
            }) =>
        {
            Claim::Owned
        }
        Some(_) if matches => Claim::Owned,
        Some(_) if parent.deleting => Claim::Ignore,
        Some(_) => Claim::Release,
        None => {
            let other_namespace = parent
                .namespace
                .is_some_and(|ns| child.namespace().unwrap_or_default() != ns);
            if parent.deleting || !matches || is_deleting(child) || other_namespace {
                Claim::Ignore
            } else {
                Claim::Adopt
            }
        }
    }
}

/// Removes every ownerReference with `uid` (releasing the child). Returns whether any was
/// removed.
pub(crate) fn remove_owner(obj: &mut Value, uid: &str) -> bool {
    let Some(refs) = obj
        .pointer_mut("/metadata/ownerReferences")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let before = refs.len();
    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
    refs.len() != before
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn selector() -> Selector {
        Selector::parse("app=a").unwrap()
    }

    fn child(labels: Value, owner: Option<&str>) -> Value {
        let mut c = json!({"metadata": {"name": "c", "namespace": "ns", "labels": labels}});
        if let Some(uid) = owner {
            c["metadata"]["ownerReferences"] = json!([
                {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "other-owner"},
                {"apiVersion": "x/v1", "kind": "P", "name": "p", "uid": uid, "controller": true}
            ]);
        }
        c
    }

    #[test]
    fn claim_rules() {
        let sel = selector();
        let p = Claimant {
            uid: "p1",
            namespace: Some("ns"),
            deleting: false,
            selector: &sel,
        };
        let yes = json!({"app": "a"});
        let no = json!({"app": "b"});
        assert_eq!(classify(&p, &child(yes.clone(), Some("p1"))), Claim::Owned);
        assert_eq!(classify(&p, &child(no.clone(), Some("p1"))), Claim::Release);
        assert_eq!(classify(&p, &child(yes.clone(), Some("p2"))), Claim::Ignore);
        assert_eq!(classify(&p, &child(yes.clone(), None)), Claim::Adopt);
        assert_eq!(classify(&p, &child(no.clone(), None)), Claim::Ignore);

        let mut deleting_orphan = child(yes.clone(), None);
        deleting_orphan["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        assert_eq!(classify(&p, &deleting_orphan), Claim::Ignore);
        let mut elsewhere = child(yes.clone(), None);
        elsewhere["metadata"]["namespace"] = json!("other");
        assert_eq!(classify(&p, &elsewhere), Claim::Ignore);

        let dying = Claimant {
            deleting: true,
            ..p
        };
        assert_eq!(classify(&dying, &child(yes.clone(), None)), Claim::Ignore);
        assert_eq!(classify(&dying, &child(no, Some("p1"))), Claim::Ignore);
        assert_eq!(
            classify(&dying, &child(yes.clone(), Some("p1"))),
            Claim::Owned
        );

        // A cluster-scoped parent adopts across namespaces.
        let cluster = Claimant {
            namespace: None,
            ..p
        };
        assert_eq!(classify(&cluster, &elsewhere), Claim::Adopt);
    }

    #[test]
    fn release_removes_only_our_reference() {
        let mut c = child(json!({}), Some("p1"));
        assert!(remove_owner(&mut c, "p1"));
        assert_eq!(
            c["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "other-owner"}])
        );
        assert!(!remove_owner(&mut c, "p1"));
    }
}
