//! Progressive rollouts of in-process hook code (`spec.hookRollout`), an extension beyond
//! upstream Metacontroller: when the code of a controller's `jsonnet:`/`wasm:` hooks changes,
//! the new code reaches its parents in steps gated on their health, and is undone on failure.
//!
//! This module holds the API ([`HookRollout`] in the spec, [`HookRolloutStatus`] in the
//! controller object's `status.hookRollout`), its validation, the stable assignment of
//! parents to code versions ([`assign`]) and the pure state machine that drives a rollout
//! ([`machine`]). Absent `spec.hookRollout` means today's behaviour: every parent gets new
//! code at once.

pub mod assign;
pub mod machine;

use std::borrow::Cow;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use crate::validation::Collector;

/// `spec.hookRollout`: how a change of the controller's in-process hook code reaches its
/// parents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookRollout {
    /// Parents on the new code after each step: counts (`1`) or percentages of the current
    /// number of parents (`"10%"`, rounded up). A last step below all parents is followed by
    /// an implicit `"100%"`.
    pub steps: Vec<RolloutStep>,
    /// Seconds to wait after a step's parents are healthy before the next step starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_seconds: Option<i32>,
    /// When a parent on the new code counts as healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<RolloutHealth>,
    /// Parents that may fail on the new code before the rollout rolls back (0 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<i32>,
    /// Holds the rollout at its current step, as a Deployment's `spec.paused`
    /// (`metacontroller rollout pause` sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

impl HookRollout {
    /// `pauseSeconds`, zero when unset or negative.
    pub fn pause_seconds(&self) -> i64 {
        i64::from(self.pause_seconds.unwrap_or(0).max(0))
    }

    /// `maxFailures`, zero when unset or negative.
    pub fn max_failures(&self) -> u32 {
        u32::try_from(self.max_failures.unwrap_or(0)).unwrap_or(0)
    }

    /// Whether `paused` is true.
    pub fn is_paused(&self) -> bool {
        self.paused.unwrap_or(false)
    }
}

/// Health of a parent on the new code: its syncs succeed and, when `condition` is set, that
/// condition of the parent's `status.conditions` holds within `deadlineSeconds`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutHealth {
    /// A condition the parent must report, e.g. `{type: Ready, status: "True"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<RolloutCondition>,
    /// Seconds from a parent's first sync on the new code until it must be healthy; a parent
    /// not healthy by then counts as failed (300 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_seconds: Option<i32>,
}

/// Default `healthy.deadlineSeconds`.
pub const DEFAULT_HEALTH_DEADLINE_SECONDS: i64 = 300;

/// Annotation on a controller object asking its driver to undo the rollout whose `to` is
/// the annotation's value (`metacontroller rollout undo` sets it). The driver acts on it
/// once and removes it, as a Deployment's `spec.rollbackTo` was cleared once done; a value
/// other than the current `to` (a newer rollout started meanwhile) is refused.
pub const UNDO_ANNOTATION: &str = "metacontroller.k8s.io/hook-rollout-undo";

impl RolloutHealth {
    /// `deadlineSeconds`, [`DEFAULT_HEALTH_DEADLINE_SECONDS`] when unset.
    pub fn deadline_seconds(&self) -> i64 {
        self.deadline_seconds
            .map(i64::from)
            .unwrap_or(DEFAULT_HEALTH_DEADLINE_SECONDS)
    }
}

/// A `status.conditions[]` entry a healthy parent reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutCondition {
    /// Condition `type`, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Required `status` (`"True"` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

impl RolloutCondition {
    /// Whether a parent object's `status.conditions` holds this condition.
    pub fn holds(&self, parent: &serde_json::Value) -> bool {
        let want = self.status.as_deref().unwrap_or("True");
        parent
            .pointer("/status/conditions")
            .and_then(serde_json::Value::as_array)
            .is_some_and(|conds| {
                conds.iter().any(|c| {
                    c.get("type").and_then(serde_json::Value::as_str) == Some(&self.type_)
                        && c.get("status").and_then(serde_json::Value::as_str) == Some(want)
                })
            })
    }
}

/// One entry of `steps`: a count of parents or a percentage string (`"10%"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RolloutStep {
    /// A number of parents.
    Count(i64),
    /// A percentage of the parents, `"<n>%"`.
    Percent(String),
}

impl JsonSchema for RolloutStep {
    fn schema_name() -> Cow<'static, str> {
        "RolloutStep".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "x-kubernetes-int-or-string": true })
    }
}

impl RolloutStep {
    /// Parents on the new code at this step out of `total`: a count is capped at `total`,
    /// a percentage rounds up (so `1%` of a few parents is still one). `None` for a
    /// malformed entry (validation reports it).
    pub fn target(&self, total: usize) -> Option<usize> {
        match self {
            RolloutStep::Count(n) => Some(usize::try_from(*n).ok()?.min(total)),
            RolloutStep::Percent(text) => {
                let pct = parse_percent(text)?;
                Some((total * pct).div_ceil(100).min(total))
            }
        }
    }
}

fn parse_percent(text: &str) -> Option<usize> {
    let digits = text.trim().strip_suffix('%')?;
    let pct: usize = digits.parse().ok()?;
    (pct <= 100).then_some(pct)
}

/// Phase of a rollout in `status.hookRollout.phase`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RolloutPhase {
    /// Steps are advancing.
    #[default]
    Progressing,
    /// Held by `spec.hookRollout.paused`.
    Paused,
    /// Every parent runs `to`.
    Complete,
    /// Every parent runs `from` again (a failure beyond `maxFailures`, or an undo).
    RolledBack,
}

/// `status.hookRollout` of a controller object: which code versions exist and how far the
/// new one has got. Every replica reads it to pick each parent's code; only the replica
/// that writes the controller object's status advances it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookRolloutStatus {
    /// Digest of the last good code (every parent outside the step runs it).
    pub from: String,
    /// Digest of the code being rolled out.
    pub to: String,
    /// Index into `spec.hookRollout.steps` of the current step.
    pub step: u32,
    /// Parents on `to`.
    pub updated: u32,
    /// Parents on `to` that are healthy.
    pub healthy: u32,
    /// Parents on `to` that failed.
    pub failed: u32,
    /// The state of the rollout.
    pub phase: RolloutPhase,
    /// Parents whose assignment key sorts at or before this one run `to` (see
    /// [`assign::ParentKey`]); empty when no parent does.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cutoff: String,
    /// Unix seconds when the current step started.
    #[serde(default)]
    pub step_started_at: i64,
    /// Unix seconds when every parent of the current step was first seen healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_healthy_at: Option<i64>,
    /// The digest the ConfigMaps held when last seen: a change of the code is a ConfigMap
    /// digest other than this one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub observed: String,
    /// Human-readable state.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The parent (`namespace/name`) whose failure rolled the rollout back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_parent: Option<String>,
}

impl HookRolloutStatus {
    /// Reads `status.hookRollout` from a controller object's free-form status.
    pub fn from_status(status: Option<&serde_json::Value>) -> Option<Self> {
        let value = status?.get("hookRollout")?;
        serde_json::from_value(value.clone()).ok()
    }
}

/// Validates `spec.hookRollout` (`path` is where it sits).
pub(crate) fn validate_hook_rollout(c: &mut Collector, path: &str, rollout: &HookRollout) {
    if rollout.steps.is_empty() {
        c.push(
            format!("{path}.steps"),
            "at least one step is required, e.g. [1, \"10%\", \"100%\"]",
        );
    }
    let mut last: Option<(bool, f64)> = None;
    for (i, step) in rollout.steps.iter().enumerate() {
        let at = format!("{path}.steps[{i}]");
        let key = match step {
            RolloutStep::Count(n) if *n >= 1 => (false, *n as f64),
            RolloutStep::Count(n) => {
                c.push(at, format!("a count must be at least 1, got {n}"));
                continue;
            }
            RolloutStep::Percent(text) => match parse_percent(text) {
                Some(p) if p >= 1 => (true, p as f64),
                _ => {
                    c.push(
                        at,
                        format!("{text:?} is not a count or a percentage from \"1%\" to \"100%\""),
                    );
                    continue;
                }
            },
        };
        // Only steps of the same kind can be compared without knowing the parent count.
        if let Some(prev) = last.filter(|prev| prev.0 == key.0 && prev.1 > key.1) {
            c.push(
                at,
                format!("steps must not decrease ({} after {})", key.1, prev.1),
            );
        }
        last = Some(key);
    }
    for (field, value) in [
        ("pauseSeconds", rollout.pause_seconds),
        ("maxFailures", rollout.max_failures),
        (
            "healthy.deadlineSeconds",
            rollout.healthy.as_ref().and_then(|h| h.deadline_seconds),
        ),
    ] {
        if let Some(v) = value.filter(|v| *v < 0) {
            c.push(
                format!("{path}.{field}"),
                format!("must not be negative, got {v}"),
            );
        }
    }
    if let Some(cond) = rollout.healthy.as_ref().and_then(|h| h.condition.as_ref()) {
        c.require(format!("{path}.healthy.condition.type"), &cond.type_);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn steps_read_counts_and_percentages() {
        let r: HookRollout = serde_json::from_value(json!({"steps": [1, "10%", "100%"]})).unwrap();
        assert_eq!(
            r.steps,
            vec![
                RolloutStep::Count(1),
                RolloutStep::Percent("10%".into()),
                RolloutStep::Percent("100%".into())
            ]
        );
        let targets: Vec<_> = r.steps.iter().map(|s| s.target(50)).collect();
        assert_eq!(targets, vec![Some(1), Some(5), Some(50)]);
        assert_eq!(RolloutStep::Percent("10%".into()).target(3), Some(1));
        assert_eq!(RolloutStep::Count(80).target(50), Some(50));
    }

    #[test]
    fn condition_holds_only_with_matching_status() {
        let cond = RolloutCondition {
            type_: "Ready".into(),
            status: None,
        };
        let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        assert!(cond.holds(&ready));
        assert!(!cond.holds(&not_ready));
        assert!(!cond.holds(&json!({})));
    }

    fn errors(rollout: serde_json::Value) -> Vec<String> {
        let r: HookRollout = serde_json::from_value(rollout).unwrap();
        let mut c = Collector::default();
        validate_hook_rollout(&mut c, "spec.hookRollout", &r);
        c.into_errors().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn validation_names_the_bad_field() {
        assert!(errors(json!({"steps": [1, "10%", "100%"], "maxFailures": 2})).is_empty());
        assert_eq!(
            errors(json!({"steps": []})),
            vec!["spec.hookRollout.steps: at least one step is required, e.g. [1, \"10%\", \"100%\"]"]
        );
        assert_eq!(
            errors(json!({"steps": [0, "ten%", "150%"]})),
            vec![
                "spec.hookRollout.steps[0]: a count must be at least 1, got 0",
                "spec.hookRollout.steps[1]: \"ten%\" is not a count or a percentage from \"1%\" to \"100%\"",
                "spec.hookRollout.steps[2]: \"150%\" is not a count or a percentage from \"1%\" to \"100%\"",
            ]
        );
        assert_eq!(
            errors(json!({"steps": ["50%", "10%"]})),
            vec!["spec.hookRollout.steps[1]: steps must not decrease (10 after 50)"]
        );
        assert_eq!(
            errors(
                json!({"steps": [1], "pauseSeconds": -1, "healthy": {"condition": {"type": ""}}})
            ),
            vec![
                "spec.hookRollout.pauseSeconds: must not be negative, got -1",
                "spec.hookRollout.healthy.condition.type: must not be empty",
            ]
        );
    }
}
