//! The steps of a rendered sync that are the same for both kinds of controller: which hook
//! a flag or a replayed request names, the customize call, the `--diff` plan of the owned
//! objects, and the printed answer's common fields.

use anyhow::{bail, Context};
use metacontroller_api::hook::{EndpointConfig, Hook};
use metacontroller_api::wire::{
    CustomizableController, CustomizeHookRequest, CustomizeHookResponse,
};
use metacontroller_controllers::offline::{ChildType, Desired, ParentRef};
use metacontroller_hooks::CallContext;
use serde_json::{json, Value};

use super::args::{HookName, RenderArgs};
use super::cluster::Cluster;
use super::hook::Caller;
use super::{meta_str, plan};

/// A hook to call: the hook, its name (`sync` / `finalize`) and whether the request is a
/// finalizing one.
pub type Chosen<'h> = (&'h Hook, &'static str, bool);

/// The hook `--hook sync|finalize` asks for; `None` when none was asked for (the controller's
/// own choice then applies).
pub fn requested_hook<'h>(
    sync: Option<&'h Hook>,
    finalize: Option<&'h Hook>,
    requested: Option<HookName>,
) -> anyhow::Result<Option<Chosen<'h>>> {
    Ok(match requested {
        Some(HookName::Sync) => Some((
            sync.context("the controller has no sync hook")?,
            "sync",
            false,
        )),
        Some(HookName::Finalize) => Some((
            finalize.context("the controller has no finalize hook")?,
            "finalize",
            true,
        )),
        Some(HookName::Customize) | None => None,
    })
}

/// The hook a replayed request goes to: the one asked for, else the one it was recorded
/// for, else `finalize` when the request says it is finalizing.
pub fn replayed_hook_name(
    recorded: Option<&str>,
    requested: Option<HookName>,
    finalizing: bool,
) -> &'static str {
    let finalize = match requested {
        Some(h) => h == HookName::Finalize,
        None => recorded == Some("finalize") || finalizing,
    };
    if finalize {
        "finalize"
    } else {
        "sync"
    }
}

/// Refuses to replay a customize request (only sync and finalize requests are replayed).
pub fn refuse_customize_replay(
    recorded: Option<&str>,
    requested: Option<HookName>,
) -> anyhow::Result<()> {
    if requested == Some(HookName::Customize) || recorded == Some("customize") {
        bail!("replaying a customize request is not supported: render it with --parent and --hook customize");
    }
    Ok(())
}

/// The hook a prepared request names.
pub fn hook_named<'h>(
    sync: Option<&'h Hook>,
    finalize: Option<&'h Hook>,
    hook_name: &str,
) -> anyhow::Result<&'h Hook> {
    match hook_name {
        "finalize" => finalize,
        _ => sync,
    }
    .with_context(|| format!("the controller has no {hook_name} hook"))
}

/// Where a customize request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CustomizeTarget {
    /// The hook under test (`--hook-url` / `--hook-command`).
    UnderTest,
    /// The customize hook at its configured URL (for a sync request's `related`).
    Configured,
}

/// Sends the customize request for `parent` to `target` and returns the checked answer.
pub async fn customize_response(
    caller: &Caller,
    hook: &Hook,
    controller: CustomizableController,
    endpoints: &[EndpointConfig],
    parent: &Value,
    target: CustomizeTarget,
) -> anyhow::Result<CustomizeHookResponse> {
    let name = match &controller {
        CustomizableController::Composite(c) => c.metadata.name.clone(),
        CustomizableController::Decorator(c) => c.metadata.name.clone(),
    }
    .unwrap_or_default();
    let ctx = CallContext {
        controller: &name,
        hook_name: "customize",
        parent_key: meta_str(parent, "name"),
    };
    let request = CustomizeHookRequest {
        controller,
        parent: parent.clone(),
    };
    Ok(match target {
        CustomizeTarget::UnderTest => caller.call(&ctx, hook, endpoints, &request).await?,
        CustomizeTarget::Configured => {
            caller
                .call_configured(&ctx, hook, endpoints, &request)
                .await?
        }
    })
}

/// `--hook customize`: calls the customize hook with the parent and prints its answer.
pub async fn customize(
    caller: &Caller,
    hook: Option<&Hook>,
    controller: CustomizableController,
    endpoints: &[EndpointConfig],
    parent: &Value,
) -> anyhow::Result<()> {
    let hook = hook.context("the controller has no customize hook")?;
    let response = customize_response(
        caller,
        hook,
        controller,
        endpoints,
        parent,
        CustomizeTarget::UnderTest,
    )
    .await?;
    print!("{}", serde_yaml::to_string(&response)?);
    Ok(())
}

/// `--diff`: the writes the controller's writer would make for the owned objects, or that
/// it leaves them alone (`unmanaged`) when the parent is being deleted without our
/// finalizer.
#[allow(clippy::too_many_arguments)]
pub async fn print_owned_plan(
    args: &RenderArgs,
    cluster: &Cluster,
    manages: bool,
    owner: &ParentRef,
    types: &[ChildType],
    observed: &[Value],
    desired: &Desired,
    unmanaged: &str,
) -> anyhow::Result<()> {
    if manages {
        let writer = plan::writer(args, cluster);
        print!(
            "{}",
            plan::children(&writer, owner, types, observed, desired).await?
        );
    } else {
        println!("{unmanaged}");
    }
    Ok(())
}

/// The answer's `events` checked as the controller checks them: the ones it would record
/// (as `{type, reason, message}`); each one it would skip is reported on stderr with the
/// `InvalidHookEvent` Warning it would record instead.
pub fn checked_events(
    hook_name: &str,
    events: Vec<metacontroller_api::wire::HookEvent>,
) -> Vec<Value> {
    let (kept, skipped) = metacontroller_controllers::offline::hook_events(hook_name, events);
    for message in skipped {
        eprintln!("warning: the controller would record an InvalidHookEvent Warning: {message}");
    }
    kept
}

/// Adds the recorded `events` to a printed answer (`--diff`: one `event:` line each).
pub fn show_events(doc: Option<&mut Value>, events: Vec<Value>) {
    if events.is_empty() {
        return;
    }
    match doc {
        Some(doc) => doc["events"] = Value::Array(events),
        None => {
            for e in events {
                let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                println!(
                    "event: {} {}: {}",
                    text("type"),
                    text("reason"),
                    text("message")
                );
            }
        }
    }
}

/// Prints the checked answer as YAML, with the fields both kinds of response share.
pub fn print_answer(
    mut doc: Value,
    resync_after_seconds: f64,
    hook_name: &str,
    finalized: bool,
) -> anyhow::Result<()> {
    if resync_after_seconds > 0.0 {
        doc["resyncAfterSeconds"] = json!(resync_after_seconds);
    }
    if hook_name == "finalize" {
        doc["finalized"] = json!(finalized);
    }
    print!("{}", serde_yaml::to_string(&doc)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_goes_to_the_hook_asked_for_then_the_recorded_one() {
        assert_eq!(replayed_hook_name(Some("sync"), None, false), "sync");
        assert_eq!(
            replayed_hook_name(Some("finalize"), None, false),
            "finalize"
        );
        // A request without a recorded hook (a bare body) says itself whether it finalizes.
        assert_eq!(replayed_hook_name(None, None, true), "finalize");
        assert_eq!(
            replayed_hook_name(Some("finalize"), Some(HookName::Sync), true),
            "sync"
        );
        assert_eq!(
            replayed_hook_name(Some("sync"), Some(HookName::Finalize), false),
            "finalize"
        );
    }

    #[test]
    fn customize_requests_are_not_replayed_for_either_kind() {
        assert!(refuse_customize_replay(Some("customize"), None).is_err());
        assert!(refuse_customize_replay(Some("sync"), Some(HookName::Customize)).is_err());
        assert!(refuse_customize_replay(Some("sync"), Some(HookName::Finalize)).is_ok());
        assert!(refuse_customize_replay(None, None).is_ok());
    }

    #[test]
    fn a_hook_asked_for_must_exist() {
        let hook: Hook = serde_json::from_value(json!({"webhook": {"url": "http://h/sync"}}))
            .expect("a webhook hook");
        let (_, name, finalizing) = requested_hook(Some(&hook), None, Some(HookName::Sync))
            .expect("sync exists")
            .expect("asked for");
        assert_eq!((name, finalizing), ("sync", false));
        let err = requested_hook(Some(&hook), None, Some(HookName::Finalize)).unwrap_err();
        assert!(err.to_string().contains("no finalize hook"), "{err}");
        assert!(requested_hook(Some(&hook), None, None)
            .expect("nothing asked")
            .is_none());
        assert!(hook_named(Some(&hook), None, "finalize").is_err());
        assert!(hook_named(Some(&hook), None, "sync").is_ok());
    }
}
