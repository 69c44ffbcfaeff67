//! `metacontroller rollout undo`: the controller object carries the annotation
//! [`UNDO_ANNOTATION`] naming the `to` of the rollout to undo. A change of it restarts the
//! reconciler, so the driver sees it while reading its state, before any sync runs: it
//! writes the undone state, records `RolloutUndone`, and removes the annotation (acted on
//! once, as a Deployment's `spec.rollbackTo` was cleared once done).

use kube::api::{DynamicObject, Patch, PatchParams};
use metacontroller_api::rollout::machine::{self, Effect};
use metacontroller_api::rollout::{HookRolloutStatus, RolloutPhase, UNDO_ANNOTATION};
use serde_json::{json, Value};

use super::{short, unix_now, RolloutDriver, RolloutHost};

/// What the annotation asks of the state read.
enum Request {
    /// Undo: the new state and its message.
    Undo(HookRolloutStatus, String),
    /// Already done (the rollout is rolled back): just remove the annotation.
    Done,
    /// Refused, with why.
    Refused(String),
}

fn request(asked: &str, status: &HookRolloutStatus) -> Request {
    if asked != status.to {
        return Request::Refused(format!(
            "{UNDO_ANNOTATION} asks to undo code {}, but the current rollout is of {}: nothing undone",
            short(asked),
            short(&status.to)
        ));
    }
    if status.phase == RolloutPhase::RolledBack {
        return Request::Done;
    }
    if status.from == status.to {
        return Request::Refused(format!(
            "{UNDO_ANNOTATION}: no code version before {}: nothing undone",
            short(&status.to)
        ));
    }
    match machine::undo(status, &[], unix_now()) {
        Some(t) => {
            let message = format!(
                "rollout undo ({UNDO_ANNOTATION}: {}): {}",
                short(asked),
                t.status.message
            );
            Request::Undo(t.status, message)
        }
        None => Request::Done,
    }
}

impl RolloutDriver {
    /// Applies an undo the controller object asks for to `status` (the state just read)
    /// and returns the state to run with. Parents need no resync: the reconciler has just
    /// (re)started and syncs every parent on the state returned.
    pub(super) async fn undo_if_asked(
        &self,
        status: HookRolloutStatus,
        host: &dyn RolloutHost,
    ) -> Result<HookRolloutStatus, String> {
        let Some(asked) = self
            .object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(UNDO_ANNOTATION))
            .and_then(Value::as_str)
        else {
            return Ok(status);
        };
        let status = match request(asked, &status) {
            Request::Undo(next, message) => {
                self.ensure_loaded(&next.from).await?;
                self.ensure_loaded(&next.to).await?;
                self.write_status(&next).await?;
                tracing::info!(controller = %self.owner.name, %message, "hook rollout undone");
                let event = Effect::Event {
                    warning: false,
                    reason: "RolloutUndone",
                    message,
                };
                super::apply(self, host, vec![event]);
                next
            }
            Request::Done => status,
            Request::Refused(why) => {
                tracing::warn!(controller = %self.owner.name, %why, "hook rollout: undo refused");
                host.event(&self.object, true, "RolloutUndoRefused", why);
                status
            }
        };
        if let Err(e) = self.remove_undo_annotation().await {
            // The state is written; a left annotation is refused or ignored next time.
            tracing::warn!(controller = %self.owner.name, error = %e, "hook rollout: cannot remove the undo annotation");
        }
        Ok(status)
    }

    async fn remove_undo_annotation(&self) -> Result<(), kube::Error> {
        let api = kube::Api::<DynamicObject>::all_with(self.client.clone(), &self.resource);
        let patch = json!({"metadata": {"annotations": {UNDO_ANNOTATION: null}}});
        api.patch(
            &self.owner.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(phase: RolloutPhase, from: &str) -> HookRolloutStatus {
        HookRolloutStatus {
            from: from.into(),
            to: "b".into(),
            phase,
            cutoff: "x".into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_undo_acts_only_on_the_rollout_it_names() {
        let Request::Undo(next, message) = request("b", &status(RolloutPhase::Progressing, "a"))
        else {
            panic!("undo expected");
        };
        assert_eq!(next.phase, RolloutPhase::RolledBack);
        assert!(message.contains(UNDO_ANNOTATION), "{message}");
        let Request::Undo(next, _) = request("b", &status(RolloutPhase::Complete, "a")) else {
            panic!("undo expected");
        };
        assert_eq!((next.from.as_str(), next.to.as_str()), ("b", "a"));
        assert!(matches!(
            request("c", &status(RolloutPhase::Progressing, "a")),
            Request::Refused(_)
        ));
        assert!(matches!(
            request("b", &status(RolloutPhase::RolledBack, "a")),
            Request::Done
        ));
        assert!(matches!(
            request("b", &status(RolloutPhase::Complete, "b")),
            Request::Refused(_)
        ));
    }
}
