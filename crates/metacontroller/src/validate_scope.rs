//! `metacontroller validate --watch-namespaces NS,...`: warnings for children elsewhere
//! (`childResources[].namespaces`, an extension) that a namespaced install cannot reach.
//! A namespace list naming an unwatched namespace keeps the controller from starting (a
//! `CreateError` Event); with `["*"]` each unreachable child is refused at sync time (a
//! `SyncError` Event on the parent, see docs/src/namespaced-install.md). These warnings say
//! so before the controller runs.

use serde_json::Value;

/// Warnings for `doc` (a controller document) under a process limited to `watched`
/// (blank entries ignored; none left: every namespace, no warning).
pub(crate) fn warnings(doc: &Value, watched: &[String]) -> Vec<String> {
    let watched: Vec<&str> = watched
        .iter()
        .map(|ns| ns.trim())
        .filter(|ns| !ns.is_empty())
        .collect();
    let children = doc
        .pointer("/spec/childResources")
        .and_then(Value::as_array);
    let (false, Some(children)) = (watched.is_empty(), children) else {
        return Vec::new();
    };
    let scope = watched.join(",");
    let mut out = Vec::new();
    for (i, child) in children.iter().enumerate() {
        let Some(namespaces) = child.get("namespaces").and_then(Value::as_array) else {
            continue;
        };
        for (j, ns) in namespaces.iter().enumerate() {
            let Some(ns) = ns.as_str() else { continue };
            let path = format!("spec.childResources[{i}].namespaces[{j}]");
            if ns == metacontroller_api::composite::ANY_NAMESPACE {
                out.push(format!("{path}: \"*\" under --watch-namespaces {scope}: only children in those namespaces are written; children in other namespaces are refused (SyncError), and a cluster-scoped child type keeps the controller from starting (CreateError)"));
            } else if !watched.contains(&ns) {
                out.push(format!("{path}: namespace {ns:?} is not watched (--watch-namespaces {scope}): the controller does not start (CreateError)"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unreachable_namespaces_are_flagged_by_path() {
        let doc = json!({"spec": {"childResources": [
            {"resource": "configmaps", "namespaces": ["a", "c"]},
            {"resource": "secrets"},
            {"resource": "namespaces", "namespaces": ["*"]}]}});
        let watched = ["a".to_string(), " b".to_string()];
        let got = warnings(&doc, &watched);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].starts_with("spec.childResources[0].namespaces[1]: namespace \"c\" is not watched (--watch-namespaces a,b)"));
        assert!(got[1].starts_with("spec.childResources[2].namespaces[0]: \"*\" under"));
        assert!(warnings(&doc, &[String::new()]).is_empty());
    }
}
