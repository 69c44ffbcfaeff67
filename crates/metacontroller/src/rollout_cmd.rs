//! `metacontroller rollout status|pause|resume|undo TARGET`: `kubectl rollout` for the code of a
//! controller's in-process hooks (`spec.hookRollout`, see docs/src/hook-rollout.md).
//!
//! `status` reads `status.hookRollout` of the controller object and prints it once; it fails
//! (exit 1) when the rollout rolled back, as `kubectl rollout status` does on a failed
//! rollout. `pause` and `resume` set and clear `spec.hookRollout.paused`, the field the rollout
//! honours (as `kubectl rollout pause` sets a Deployment's `spec.paused`). `undo` asks the
//! controller to roll back the rollout it shows now: it sets the annotation
//! [`UNDO_ANNOTATION`] to that rollout's `to`, which the driver acts on once and removes.

use anyhow::{bail, Context};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

use metacontroller_api::rollout::{HookRolloutStatus, RolloutPhase, UNDO_ANNOTATION};

use crate::cli::{RolloutAction, RolloutArgs};

/// Runs one `rollout` action.
pub async fn run(args: &RolloutArgs) -> anyhow::Result<()> {
    let (kind, name) = target(&args.target)?;
    let config = crate::client::config(args.kubeconfig.as_deref()).await?;
    let client = kube::Client::try_from(config).context("building the Kubernetes client")?;
    let gvk = GroupVersionKind::gvk(metacontroller_api::GROUP, metacontroller_api::VERSION, kind);
    let api: Api<DynamicObject> = Api::all_with(client, &ApiResource::from_gvk(&gvk));
    let object = api
        .get(name)
        .await
        .with_context(|| format!("reading {kind}/{name}"))?;
    let shown = format!("{kind}/{name}");
    if object.data.pointer("/spec/hookRollout").is_none() {
        bail!("{shown} has no spec.hookRollout: its hook code reaches every parent at once");
    }
    match args.action {
        RolloutAction::Status => status(&shown, object.data.get("status")),
        RolloutAction::Pause | RolloutAction::Resume => {
            let paused = args.action == RolloutAction::Pause;
            let patch = json!({"spec": {"hookRollout": {"paused": if paused { json!(true) } else { Value::Null }}}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .with_context(|| format!("patching {shown}"))?;
            println!("{shown} {}", if paused { "paused" } else { "resumed" });
            Ok(())
        }
        RolloutAction::Undo => {
            let to = undo_target(&shown, object.data.get("status"))?;
            let patch = json!({"metadata": {"annotations": {UNDO_ANNOTATION: to}}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .with_context(|| format!("patching {shown}"))?;
            println!(
                "{shown} rolled back (undo of code {} requested)",
                short(&to)
            );
            Ok(())
        }
    }
}

/// The `to` of the rollout `undo` rolls back; an error when there is nothing to undo.
fn undo_target(shown: &str, status: Option<&Value>) -> anyhow::Result<String> {
    let Some(rollout) = HookRolloutStatus::from_status(status) else {
        bail!("{shown}: no rollout yet, nothing to undo");
    };
    if rollout.phase == RolloutPhase::RolledBack {
        bail!(
            "{shown}: the rollout of {} is already rolled back; every parent runs {}",
            short(&rollout.to),
            short(&rollout.from)
        );
    }
    if rollout.from == rollout.to {
        bail!(
            "{shown}: no previous code version: every parent runs {}",
            short(&rollout.to)
        );
    }
    Ok(rollout.to)
}

/// `KIND/NAME` or `NAME` as the controller kind and name.
fn target(text: &str) -> anyhow::Result<(&'static str, &str)> {
    let (kind, name) = match text.split_once('/') {
        None => ("CompositeController", text),
        Some((kind, name)) => match kind.to_ascii_lowercase().as_str() {
            "compositecontroller" | "compositecontrollers" | "cc" => ("CompositeController", name),
            "decoratorcontroller" | "decoratorcontrollers" | "dc" => ("DecoratorController", name),
            other => bail!(
                "unknown kind {other:?}: use compositecontroller (cc) or decoratorcontroller (dc)"
            ),
        },
    };
    if name.is_empty() {
        bail!("no controller name in {text:?}");
    }
    Ok((kind, name))
}

/// Prints the rollout's state; an error when it rolled back.
fn status(shown: &str, status: Option<&Value>) -> anyhow::Result<()> {
    let Some(rollout) = HookRolloutStatus::from_status(status) else {
        println!("{shown}: no rollout yet");
        return Ok(());
    };
    println!("{}", describe(shown, &rollout));
    if rollout.phase == RolloutPhase::RolledBack {
        bail!("{shown}: rollout rolled back: {}", rollout.message);
    }
    Ok(())
}

/// One line: phase, step, counts, versions and the message.
fn describe(shown: &str, r: &HookRolloutStatus) -> String {
    let mut line = format!(
        "{shown}: {:?} at step {}: {} updated, {} healthy, {} failed (from {} to {})",
        r.phase,
        r.step + 1,
        r.updated,
        r.healthy,
        r.failed,
        short(&r.from),
        short(&r.to)
    );
    if let Some(parent) = &r.failed_parent {
        line.push_str(&format!("; failed parent {parent}"));
    }
    if !r.message.is_empty() {
        line.push_str(&format!(": {}", r.message));
    }
    line
}

fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_kind_and_controller() {
        assert_eq!(target("web").unwrap(), ("CompositeController", "web"));
        assert_eq!(target("dc/web").unwrap(), ("DecoratorController", "web"));
        assert_eq!(
            target("CompositeController/web").unwrap(),
            ("CompositeController", "web")
        );
        assert!(target("deployment/web").is_err());
        assert!(target("cc/").is_err());
    }

    #[test]
    fn undo_needs_a_rollout_with_a_previous_version() {
        let status = |phase: &str, from: &str| {
            json!({"hookRollout": {"from": from, "to": "b", "step": 0, "updated": 0,
                "healthy": 0, "failed": 0, "phase": phase}})
        };
        assert_eq!(
            undo_target("x", Some(&status("Progressing", "a"))).unwrap(),
            "b"
        );
        assert_eq!(
            undo_target("x", Some(&status("Complete", "a"))).unwrap(),
            "b"
        );
        assert!(undo_target("x", Some(&status("RolledBack", "a"))).is_err());
        assert!(undo_target("x", Some(&status("Complete", "b"))).is_err());
        assert!(undo_target("x", None).is_err());
    }
}
