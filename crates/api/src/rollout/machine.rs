//! The rollout state machine, pure: each function takes the spec, the current
//! `status.hookRollout` and what was observed, and returns the next status and what to do
//! (which parents to resync, which Events to record). The driver (the one replica that
//! writes the controller object's status) calls it and writes the status; every replica
//! reads that status to choose each parent's code ([`super::assign`]).
//!
//! ```text
//!             code change                  step healthy + pause, more parents
//!   (none) ───────────────► Progressing ◄─────────────────────────────┐
//!                             │  │  ▲ └───────────────────────────────┘
//!               spec.paused   │  │  │ resume
//!                             ▼  │  │
//!                           Paused┘ │      every parent on `to`, healthy
//!                             │     └───────────────────────────────► Complete
//!   failures > maxFailures,   │
//!   or `rollout undo`         ▼
//!                         RolledBack      (a newer change starts again from `from`)
//! ```

use super::assign::{cutoff_for, digest_of, ParentKey};
use super::{HookRollout, HookRolloutStatus, RolloutHealth, RolloutPhase};

/// Something the driver does after writing the new status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Queue these parents: the code they run changed.
    Resync(Vec<ParentKey>),
    /// Record a Kubernetes Event on the controller object.
    Event {
        /// `Warning` rather than `Normal`.
        warning: bool,
        /// The Event's reason.
        reason: &'static str,
        /// The Event's message.
        message: String,
    },
}

/// The next status and its effects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The status to write.
    pub status: HookRolloutStatus,
    /// What to do once it is written.
    pub effects: Vec<Effect>,
}

/// The health of one parent that runs the new code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Not yet known (no sync on the new code yet, or the condition is not there yet).
    Pending,
    /// Syncs succeed and the condition (if any) holds.
    Healthy,
    /// A sync failed, or the condition did not hold by the deadline: why.
    Failed(String),
}

/// The last sync of a parent on the new code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncResult {
    /// No sync on the new code finished yet.
    NotYet,
    /// It succeeded.
    Ok,
    /// It failed with this error.
    Err(String),
}

/// One parent's health from its last sync on the new code, whether its condition holds,
/// and how long it has been on the new code (`since`, `now`: Unix seconds).
pub fn health(
    rule: Option<&RolloutHealth>,
    sync: &SyncResult,
    condition_holds: bool,
    since: i64,
    now: i64,
) -> Health {
    let needs_condition = rule.is_some_and(|r| r.condition.is_some());
    match sync {
        SyncResult::Err(e) => return Health::Failed(e.clone()),
        SyncResult::Ok if !needs_condition || condition_holds => return Health::Healthy,
        _ => {}
    }
    let deadline = rule.map_or(super::DEFAULT_HEALTH_DEADLINE_SECONDS, |r| {
        r.deadline_seconds()
    });
    if now - since <= deadline {
        return Health::Pending;
    }
    match (sync, rule.and_then(|r| r.condition.as_ref())) {
        (SyncResult::Ok, Some(cond)) => Health::Failed(format!(
            "condition {}={} did not hold within {deadline}s",
            cond.type_,
            cond.status.as_deref().unwrap_or("True")
        )),
        _ => Health::Failed(format!("no successful sync within {deadline}s")),
    }
}

/// What the driver saw of the parents at one moment.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// Unix seconds.
    pub now: i64,
    /// Every parent's key.
    pub parents: Vec<ParentKey>,
    /// Health of the parents on the new code, with their `namespace/name`.
    pub on_new: Vec<(String, Health)>,
}

/// The ConfigMaps now hold code `digest` (`current` is the digest parents ran so far when no
/// rollout state exists yet). Starts, supersedes or undoes a rollout; `None` when nothing
/// changes.
pub fn code_changed(
    spec: &HookRollout,
    prev: Option<&HookRolloutStatus>,
    current: &str,
    digest: &str,
    parents: &[ParentKey],
    now: i64,
) -> Option<Transition> {
    let base = match prev {
        Some(s) if s.observed == digest => return None,
        Some(s) => s.clone(),
        None if current == digest => return None,
        None => HookRolloutStatus {
            from: current.to_string(),
            to: current.to_string(),
            phase: RolloutPhase::Complete,
            observed: current.to_string(),
            ..Default::default()
        },
    };
    let last_good = match base.phase {
        RolloutPhase::Complete => base.to.clone(),
        _ => base.from.clone(),
    };
    let mut next = HookRolloutStatus {
        from: last_good.clone(),
        to: digest.to_string(),
        observed: digest.to_string(),
        step_started_at: now,
        ..Default::default()
    };
    let event;
    if digest == last_good || (base.phase == RolloutPhase::Complete && digest == base.from) {
        // Code every parent already ran: no reason to go slowly.
        next.from = base.to.clone();
        next.phase = RolloutPhase::Complete;
        next.message = format!(
            "code {} was rolled out before: every parent runs it",
            short(digest)
        );
        event = ("RolloutUndone", next.message.clone());
    } else {
        next.phase = if spec.is_paused() {
            RolloutPhase::Paused
        } else {
            RolloutPhase::Progressing
        };
        let n = spec
            .steps
            .first()
            .and_then(|s| s.target(parents.len()))
            .unwrap_or(0);
        next.cutoff = cutoff_for(parents, n, "");
        next.message = format!(
            "step 1: {n} of {} parents on {}",
            parents.len(),
            short(digest)
        );
        event = (
            "RolloutStarted",
            format!("rolling out {} over {}", short(digest), short(&last_good)),
        );
    }
    Some(finish(&base, next, parents, event.0, event.1))
}

/// `metacontroller rollout undo`: a running rollout rolls back, a complete one returns to
/// its `from` code at once.
pub fn undo(prev: &HookRolloutStatus, parents: &[ParentKey], now: i64) -> Option<Transition> {
    let mut next = prev.clone();
    next.step_started_at = now;
    match prev.phase {
        RolloutPhase::RolledBack => return None,
        RolloutPhase::Complete => {
            std::mem::swap(&mut next.from, &mut next.to);
            next.message = format!("undone: every parent back on {}", short(&next.to));
        }
        RolloutPhase::Progressing | RolloutPhase::Paused => {
            next.phase = RolloutPhase::RolledBack;
            next.cutoff.clear();
            next.message = format!("undone: every parent back on {}", short(&next.from));
        }
    }
    let message = next.message.clone();
    Some(finish(prev, next, parents, "RolloutUndone", message))
}

/// Re-evaluates a running rollout: counts, rollback on failures, pause, the next step or
/// completion. `None` when the rollout is not running or nothing changed.
pub fn evaluate(
    spec: &HookRollout,
    prev: &HookRolloutStatus,
    obs: &Observation,
) -> Option<Transition> {
    if !matches!(prev.phase, RolloutPhase::Progressing | RolloutPhase::Paused) {
        return None;
    }
    let mut next = prev.clone();
    let total = obs.parents.len();
    let updated = super::assign::count_within(&obs.parents, &prev.cutoff);
    let healthy = obs
        .on_new
        .iter()
        .filter(|(_, h)| *h == Health::Healthy)
        .count();
    let failures: Vec<&(String, Health)> = obs
        .on_new
        .iter()
        .filter(|(_, h)| matches!(h, Health::Failed(_)))
        .collect();
    next.updated = count_u32(updated);
    next.healthy = count_u32(healthy);
    next.failed = count_u32(failures.len());
    if failures.len() > spec.max_failures() as usize {
        return Some(roll_back(prev, next, &failures, obs));
    }
    next.phase = if spec.is_paused() {
        RolloutPhase::Paused
    } else {
        RolloutPhase::Progressing
    };
    let all_healthy = healthy >= updated;
    if !all_healthy {
        next.step_healthy_at = None;
        next.message = format!(
            "step {}: {healthy} of {updated} parents healthy",
            prev.step + 1
        );
        return changed(prev, next, &obs.parents);
    }
    if updated >= total {
        next.phase = RolloutPhase::Complete;
        next.cutoff.clear();
        next.message = format!("every parent ({total}) runs {}", short(&prev.to));
        let message = next.message.clone();
        return Some(finish(prev, next, &obs.parents, "RolloutComplete", message));
    }
    let healthy_at = *next.step_healthy_at.get_or_insert(obs.now);
    if next.phase == RolloutPhase::Paused {
        next.message = format!("paused at step {}", prev.step + 1);
        return changed(prev, next, &obs.parents);
    }
    let wait = healthy_at + spec.pause_seconds() - obs.now;
    if wait > 0 {
        // The message names the pause, not the seconds left, so waiting writes nothing.
        next.message = format!(
            "step {} healthy; pausing {}s before the next step",
            prev.step + 1,
            spec.pause_seconds()
        );
        return changed(prev, next, &obs.parents);
    }
    next.step += 1;
    let n = spec
        .steps
        .get(next.step as usize)
        .and_then(|s| s.target(total))
        .unwrap_or(total);
    next.cutoff = cutoff_for(&obs.parents, n, &prev.cutoff);
    next.step_started_at = obs.now;
    next.step_healthy_at = None;
    next.message = format!(
        "step {}: {n} of {total} parents on {}",
        next.step + 1,
        short(&prev.to)
    );
    let message = next.message.clone();
    Some(finish(prev, next, &obs.parents, "RolloutStep", message))
}

fn roll_back(
    prev: &HookRolloutStatus,
    mut next: HookRolloutStatus,
    failures: &[&(String, Health)],
    obs: &Observation,
) -> Transition {
    let (parent, why) = match failures.first() {
        Some((parent, Health::Failed(why))) => (parent.clone(), why.clone()),
        _ => (String::new(), String::new()),
    };
    next.phase = RolloutPhase::RolledBack;
    next.cutoff.clear();
    next.step_healthy_at = None;
    next.failed_parent = Some(parent.clone());
    next.message = format!(
        "parent {parent} failed on code {}: {why}; every parent back on {}",
        short(&prev.to),
        short(&prev.from)
    );
    let mut t = finish(prev, next, &obs.parents, "RolloutRolledBack", String::new());
    for e in &mut t.effects {
        if let Effect::Event {
            warning, message, ..
        } = e
        {
            *warning = true;
            message.clone_from(&t.status.message);
        }
    }
    t
}

/// The transition from `prev` to `next`: resync the parents whose code changed, and an Event.
fn finish(
    prev: &HookRolloutStatus,
    next: HookRolloutStatus,
    parents: &[ParentKey],
    reason: &'static str,
    message: String,
) -> Transition {
    let moved: Vec<ParentKey> = parents
        .iter()
        .filter(|k| digest_of(prev, k) != digest_of(&next, k))
        .cloned()
        .collect();
    let mut effects = Vec::new();
    if !moved.is_empty() {
        effects.push(Effect::Resync(moved));
    }
    effects.push(Effect::Event {
        warning: false,
        reason,
        message,
    });
    Transition {
        status: next,
        effects,
    }
}

fn changed(
    prev: &HookRolloutStatus,
    next: HookRolloutStatus,
    parents: &[ParentKey],
) -> Option<Transition> {
    if *prev == next {
        return None;
    }
    let mut t = finish(prev, next, parents, "", String::new());
    t.effects.retain(|e| !matches!(e, Effect::Event { .. }));
    Some(t)
}

fn count_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The first 12 characters of a digest, for messages.
fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::assign::{count_within, version_of, Version};
    use crate::rollout::{RolloutCondition, RolloutStep};

    fn parents(n: usize) -> Vec<ParentKey> {
        (0..n)
            .map(|i| ParentKey::new(&format!("uid-{i}"), "ns", &format!("p{i}")))
            .collect()
    }

    fn spec(pause: i32, max_failures: i32) -> HookRollout {
        HookRollout {
            steps: vec![
                RolloutStep::Count(1),
                RolloutStep::Percent("10%".into()),
                RolloutStep::Percent("100%".into()),
            ],
            pause_seconds: Some(pause),
            max_failures: Some(max_failures),
            ..Default::default()
        }
    }

    fn name(k: &ParentKey) -> String {
        k.as_str()
            .rsplit_once("/ns/")
            .map(|(_, n)| format!("ns/{n}"))
            .unwrap_or_default()
    }

    /// Every parent on the new code with the health `f` gives it.
    fn observe(
        s: &HookRolloutStatus,
        ps: &[ParentKey],
        now: i64,
        f: impl Fn(&ParentKey) -> Health,
    ) -> Observation {
        let on_new = ps
            .iter()
            .filter(|k| version_of(s, k) == Version::To)
            .map(|k| (name(k), f(k)))
            .collect();
        Observation {
            now,
            parents: ps.to_vec(),
            on_new,
        }
    }

    fn resynced(t: &Transition) -> usize {
        t.effects
            .iter()
            .map(|e| match e {
                Effect::Resync(ks) => ks.len(),
                Effect::Event { .. } => 0,
            })
            .sum()
    }

    #[test]
    fn good_change_reaches_everyone_in_steps_with_the_pause() {
        let ps = parents(50);
        let sp = spec(30, 0);
        let t = code_changed(&sp, None, "old", "new", &ps, 100).unwrap();
        assert_eq!(resynced(&t), 1, "only the first step's parent is resynced");
        let mut s = t.status;
        assert_eq!(
            (s.phase, s.step, count_within(&ps, &s.cutoff)),
            (RolloutPhase::Progressing, 0, 1)
        );
        // Pending parents hold the step.
        let t = evaluate(&sp, &s, &observe(&s, &ps, 101, |_| Health::Pending)).unwrap();
        assert_eq!(
            (t.status.step, t.status.updated, t.status.healthy),
            (0, 1, 0)
        );
        s = t.status;
        // Healthy: the pause starts, then the next step.
        s = evaluate(&sp, &s, &observe(&s, &ps, 102, |_| Health::Healthy))
            .unwrap()
            .status;
        assert_eq!((s.step, s.step_healthy_at), (0, Some(102)));
        assert!(evaluate(&sp, &s, &observe(&s, &ps, 131, |_| Health::Healthy)).is_none());
        let t = evaluate(&sp, &s, &observe(&s, &ps, 132, |_| Health::Healthy)).unwrap();
        assert_eq!((t.status.step, count_within(&ps, &t.status.cutoff)), (1, 5));
        assert_eq!(
            resynced(&t),
            4,
            "only parents entering the step are resynced"
        );
        s = t.status;
        s = evaluate(&sp, &s, &observe(&s, &ps, 140, |_| Health::Healthy))
            .unwrap()
            .status;
        s = evaluate(&sp, &s, &observe(&s, &ps, 170, |_| Health::Healthy))
            .unwrap()
            .status;
        assert_eq!((s.step, count_within(&ps, &s.cutoff)), (2, 50));
        s = evaluate(&sp, &s, &observe(&s, &ps, 171, |_| Health::Healthy))
            .unwrap()
            .status;
        assert_eq!(s.phase, RolloutPhase::Complete);
        assert!(ps.iter().all(|k| digest_of(&s, k) == "new"));
    }

    #[test]
    fn failure_rolls_back_and_names_the_parent() {
        let ps = parents(50);
        let sp = spec(0, 0);
        let mut s = code_changed(&sp, None, "old", "bad", &ps, 0)
            .unwrap()
            .status;
        // With no pause, a healthy step is followed at once by the next.
        s = evaluate(&sp, &s, &observe(&s, &ps, 1, |_| Health::Healthy))
            .unwrap()
            .status;
        assert_eq!(count_within(&ps, &s.cutoff), 5);
        let victim = ps
            .iter()
            .filter(|k| version_of(&s, k) == Version::To)
            .nth(3)
            .unwrap()
            .clone();
        let obs = observe(&s, &ps, 3, |k| {
            if *k == victim {
                Health::Failed("boom".into())
            } else {
                Health::Healthy
            }
        });
        let t = evaluate(&sp, &s, &obs).unwrap();
        assert_eq!(t.status.phase, RolloutPhase::RolledBack);
        assert_eq!(
            t.status.failed_parent.as_deref(),
            Some(name(&victim).as_str())
        );
        assert_eq!(
            resynced(&t),
            5,
            "the step's parents go back to the old code"
        );
        assert!(t.effects.iter().any(|e| matches!(e,
            Effect::Event { warning: true, reason: "RolloutRolledBack", message } if message.contains(&name(&victim)) && message.contains("boom"))));
        assert!(ps.iter().all(|k| digest_of(&t.status, k) == "old"));
        // Rolled back stays so; the same ConfigMap content is no new change.
        assert!(evaluate(&sp, &t.status, &obs).is_none());
        assert!(code_changed(&sp, Some(&t.status), "", "bad", &ps, 4).is_none());
    }

    #[test]
    fn max_failures_tolerates_that_many() {
        let ps = parents(10);
        let sp = spec(0, 1);
        let s = code_changed(&sp, None, "old", "new", &ps, 0)
            .unwrap()
            .status;
        let t = evaluate(
            &sp,
            &s,
            &observe(&s, &ps, 1, |_| Health::Failed("x".into())),
        )
        .unwrap();
        assert_eq!(
            (t.status.phase, t.status.failed),
            (RolloutPhase::Progressing, 1)
        );
    }

    #[test]
    fn newer_change_supersedes_and_returning_to_good_code_is_immediate() {
        let ps = parents(20);
        let sp = spec(0, 0);
        let s = code_changed(&sp, None, "v1", "v2", &ps, 0).unwrap().status;
        let t = code_changed(&sp, Some(&s), "", "v3", &ps, 1).unwrap();
        assert_eq!(
            (t.status.from.as_str(), t.status.to.as_str(), t.status.step),
            ("v1", "v3", 0)
        );
        let t = code_changed(&sp, Some(&t.status), "", "v1", &ps, 2).unwrap();
        assert_eq!(t.status.phase, RolloutPhase::Complete);
        assert!(ps.iter().all(|k| digest_of(&t.status, k) == "v1"));
        assert_eq!(resynced(&t), 1, "only the parent that ran v3 moves");
    }

    #[test]
    fn pause_holds_and_undo_rolls_back() {
        let ps = parents(20);
        let mut sp = spec(0, 0);
        let s = code_changed(&sp, None, "v1", "v2", &ps, 0).unwrap().status;
        sp.paused = Some(true);
        let s = evaluate(&sp, &s, &observe(&s, &ps, 1, |_| Health::Healthy))
            .unwrap()
            .status;
        assert_eq!((s.phase, s.step), (RolloutPhase::Paused, 0));
        assert!(evaluate(&sp, &s, &observe(&s, &ps, 100, |_| Health::Healthy)).is_none());
        sp.paused = None;
        let s = evaluate(&sp, &s, &observe(&s, &ps, 101, |_| Health::Healthy))
            .unwrap()
            .status;
        assert_eq!((s.phase, s.step), (RolloutPhase::Progressing, 1));
        let t = undo(&s, &ps, 102).unwrap();
        assert_eq!(t.status.phase, RolloutPhase::RolledBack);
        assert!(ps.iter().all(|k| digest_of(&t.status, k) == "v1"));
        assert!(undo(&t.status, &ps, 103).is_none());
    }

    #[test]
    fn undo_of_a_complete_rollout_returns_at_once() {
        let ps = parents(3);
        let sp = spec(0, 0);
        let mut s = code_changed(&sp, None, "v1", "v2", &ps, 0).unwrap().status;
        while s.phase != RolloutPhase::Complete {
            s = evaluate(&sp, &s, &observe(&s, &ps, 1, |_| Health::Healthy))
                .unwrap()
                .status;
        }
        let t = undo(&s, &ps, 2).unwrap();
        assert_eq!(
            (t.status.phase, t.status.to.as_str()),
            (RolloutPhase::Complete, "v1")
        );
        assert_eq!(resynced(&t), 3);
    }

    #[test]
    fn health_waits_for_the_condition_until_the_deadline() {
        let rule = RolloutHealth {
            condition: Some(RolloutCondition {
                type_: "Ready".into(),
                status: None,
            }),
            deadline_seconds: Some(60),
        };
        assert_eq!(
            health(Some(&rule), &SyncResult::Ok, false, 0, 60),
            Health::Pending
        );
        assert_eq!(
            health(Some(&rule), &SyncResult::Ok, true, 0, 61),
            Health::Healthy
        );
        assert_eq!(
            health(Some(&rule), &SyncResult::Ok, false, 0, 61),
            Health::Failed("condition Ready=True did not hold within 60s".into())
        );
        assert_eq!(
            health(None, &SyncResult::Err("e".into()), true, 0, 0),
            Health::Failed("e".into())
        );
        assert_eq!(
            health(None, &SyncResult::NotYet, false, 0, 1),
            Health::Pending
        );
    }
}
