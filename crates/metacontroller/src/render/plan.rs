//! `render --diff`: what the controller would write for the rendered desired state, planned
//! by the controller's own writer (same apply engine, same update/no-update rule, same
//! update strategies), printed as one line per child plus unified diffs. Nothing is sent.

use std::fmt::Write as _;

use metacontroller_apply::{merge, needs_update};
use metacontroller_controllers::offline::{
    child_key, is_deleting, json_equal, Action, ApplyStrategy, ChildKey, ChildType, Desired,
    ParentRef, Writer,
};
use metacontroller_dynamic::{InformerConfig, Informers, Schemas};
use serde_json::Value;

use super::args::RenderArgs;
use super::cluster::Cluster;
use crate::cli::{ApplySchema, ApplyStrategy as StrategyFlag};

/// The writer the controller would use (`--apply-strategy`, `--apply-schema`).
pub fn writer(args: &RenderArgs, cluster: &Cluster) -> Writer {
    let strategy = match args.apply_strategy {
        StrategyFlag::DynamicApply => ApplyStrategy::DynamicApply,
        StrategyFlag::ServerSideApply => ApplyStrategy::ServerSideApply {
            field_manager: "metacontroller".into(),
        },
    };
    let schemas = (args.apply_schema == ApplySchema::Auto).then(|| {
        let informers = Informers::new(
            cluster.client.clone(),
            InformerConfig {
                flush_interval: None,
                keep_keys: None,
                supervisor: None,
                scope: None,
                reconnect: None,
            },
        );
        Schemas::new(
            cluster.client.clone(),
            &informers,
            std::time::Duration::from_secs(30),
        )
    });
    Writer::new(cluster.client.clone(), strategy).with_schemas(schemas)
}

/// `Kind.apiVersion namespace/name` (or `Kind.apiVersion name` when cluster-scoped).
pub fn describe(key: &ChildKey) -> String {
    let (api_version, kind, namespace, name) = key;
    if namespace.is_empty() {
        format!("{kind}.{api_version} {name}")
    } else {
        format!("{kind}.{api_version} {namespace}/{name}")
    }
}

fn yaml(value: &Value) -> String {
    serde_yaml::to_string(value).unwrap_or_else(|e| format!("# cannot print: {e}\n"))
}

/// A unified diff of two objects as YAML (empty when equal).
pub fn unified(old: Option<&Value>, new: Option<&Value>, old_name: &str, new_name: &str) -> String {
    let old = old.map(yaml).unwrap_or_default();
    let new = new.map(yaml).unwrap_or_default();
    similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string()
}

/// Plans the child writes of one sync and describes them, one line per observed or
/// desired child (`create`, `update`, `recreate`, `delete`, `unchanged`), each write
/// followed by its diff.
pub async fn children(
    writer: &Writer,
    owner: &ParentRef,
    types: &[ChildType],
    observed: &[Value],
    desired: &Desired,
) -> anyhow::Result<String> {
    let actions = writer
        .plan_children(types, owner, observed, desired)
        .await?;
    let mut out = String::new();
    let mut described = std::collections::BTreeSet::new();
    for action in &actions {
        let key = metacontroller_controllers::offline::action_key(action);
        describe_action(&mut out, action, &key, observed, desired);
        described.insert(key);
    }
    for obs in observed {
        let key = child_key(obs);
        if described.insert(key.clone()) {
            describe_unplanned(&mut out, obs, &key, types, desired);
        }
    }
    Ok(out)
}

/// One planned write of the child `key`: its line and diff.
fn describe_action(
    out: &mut String,
    action: &Action,
    key: &ChildKey,
    observed: &[Value],
    desired: &Desired,
) {
    let what = describe(key);
    match action {
        Action::Create { object, .. }
        | Action::Apply {
            object,
            observed: None,
            ..
        } => {
            let _ = writeln!(out, "create {what}");
            out.push_str(&unified(None, Some(object), "/dev/null", &what));
        }
        Action::Update { object, .. } => {
            let _ = writeln!(out, "update {what}");
            let current = observed.iter().find(|o| &child_key(o) == key);
            out.push_str(&unified(current, Some(object), "observed", "merged"));
        }
        Action::Apply {
            object,
            observed: Some(obs),
            ..
        } => {
            // What the server-side apply would leave (the writer skips a body already
            // in place).
            // The body counts as applied before, as the writer's in-place check has it.
            let merged = merge(obs, Some(object), object).unwrap_or_else(|_| object.clone());
            if needs_update(obs, &merged) {
                let _ = writeln!(out, "update {what}");
                out.push_str(&unified(Some(obs), Some(&merged), "observed", "applied"));
            } else {
                let _ = writeln!(out, "unchanged {what}");
            }
        }
        Action::Delete { observed: obs, .. } => {
            if let Some((_, want)) = desired.get(key) {
                // Recreate: deleted now, created by the sync after the deletion.
                let _ = writeln!(
                    out,
                    "recreate {what} (deleted now, created again by a later sync)"
                );
                out.push_str(&unified(Some(obs), Some(want), "observed", "desired"));
            } else {
                let _ = writeln!(out, "delete {what}");
            }
        }
    }
}

/// An observed child the sync does not write: why it stays as it is.
fn describe_unplanned(
    out: &mut String,
    obs: &Value,
    key: &ChildKey,
    types: &[ChildType],
    desired: &Desired,
) {
    let what = describe(key);
    let on_delete = types
        .iter()
        .find(|t| t.api_version == key.0 && t.kind == key.1)
        .is_some_and(|t| matches!(t.method, metacontroller_api::ChildUpdateMethod::OnDelete));
    if is_deleting(obs) {
        let _ = writeln!(out, "unchanged {what} (being deleted)");
    } else if on_delete && desired.contains_key(key) {
        let _ = writeln!(
            out,
            "unchanged {what} (updateStrategy OnDelete: changes apply when it is recreated)"
        );
    } else {
        let _ = writeln!(out, "unchanged {what}");
    }
}

/// The status line and diff: `status: unchanged` or `status: update` with a diff.
pub fn status(current: Option<&Value>, new: &Value) -> String {
    if current.is_some_and(|c| json_equal(c, new)) {
        return "status: unchanged\n".to_string();
    }
    let mut out = "status: update\n".to_string();
    out.push_str(&unified(current, Some(new), "status", "status"));
    out
}
