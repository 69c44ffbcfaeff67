//! A stored code version of a controller, for running one parent's hooks outside the
//! controller (`metacontroller render --code`): `from` or `to` of the controller's
//! `status.hookRollout`, or a digest, read from the ControllerRevisions the driver stores.

use std::sync::Arc;

use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use metacontroller_api::rollout::HookRolloutStatus;
use metacontroller_api::wire::CustomizableController;
use metacontroller_hooks::PinnedCode;

use super::store::{self, Owner};
use crate::reconcile::ControllerSpec;

/// Which stored version to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeChoice {
    /// `status.hookRollout.from`: the last good code.
    From,
    /// `status.hookRollout.to`: the code being (or last) rolled out.
    To,
    /// A digest, or a prefix of `from` or `to` (as `rollout status` shows them).
    Digest(String),
}

impl std::str::FromStr for CodeChoice {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "from" => CodeChoice::From,
            "to" => CodeChoice::To,
            other => CodeChoice::Digest(other.to_string()),
        })
    }
}

/// Reads `controller`'s rollout state from the cluster and loads the version `choice`
/// names: its full digest and the pinned code to run hooks with
/// ([`metacontroller_hooks::with_pinned_code`]).
pub async fn stored_code(
    client: &kube::Client,
    controller: &CustomizableController,
    choice: &CodeChoice,
) -> Result<(String, Arc<PinnedCode>), String> {
    let spec = ControllerSpec::from(controller.clone());
    let kind = match controller {
        CustomizableController::Composite(_) => "CompositeController",
        CustomizableController::Decorator(_) => "DecoratorController",
    };
    let namespace = spec
        .hooks
        .iter()
        .find_map(metacontroller_hooks::code_config_map)
        .map(|r| r.namespace.clone())
        .ok_or_else(|| {
            format!(
                "{kind} {} has no in-process (jsonnet:, wasm:) hook code",
                spec.name
            )
        })?;
    let gvk = GroupVersionKind::gvk(metacontroller_api::GROUP, metacontroller_api::VERSION, kind);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let live = api
        .get(&spec.name)
        .await
        .map_err(|e| format!("reading {kind} {}: {e}", spec.name))?;
    let status = HookRolloutStatus::from_status(live.data.get("status")).ok_or_else(|| {
        format!(
            "{kind} {} has no status.hookRollout: no code version is stored",
            spec.name
        )
    })?;
    let digest = match choice {
        CodeChoice::From => status.from.clone(),
        CodeChoice::To => status.to.clone(),
        CodeChoice::Digest(d) => [&status.from, &status.to]
            .into_iter()
            .find(|full| !d.is_empty() && full.starts_with(d.as_str()))
            .cloned()
            .unwrap_or_else(|| d.clone()),
    };
    let owner = Owner {
        kind,
        name: spec.name.clone(),
        uid: live.metadata.uid.clone().unwrap_or_default(),
    };
    match store::load(client, &owner, &namespace, &digest).await? {
        Some(version) => Ok((version.digest.clone(), Arc::new(version.pinned()))),
        None => Err(format!(
            "code version {digest} of {kind} {} is not stored (no ControllerRevision {namespace}/{})",
            spec.name,
            owner.revision_name(&digest)
        )),
    }
}
