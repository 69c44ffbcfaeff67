//! The rollout state machine over arbitrary runs: parents come and go, health is random,
//! time advances, `paused` flips. Whatever happens, while one rollout runs (no rollback, no
//! newer change) no parent goes back from the new code to the old one, the status written
//! always describes itself (`updated` = parents under the cutoff), and a run where every
//! parent stays healthy ends `Complete` with every parent on the new code.

use metacontroller_api::rollout::assign::{
    count_within, digest_of, version_of, ParentKey, Version,
};
use metacontroller_api::rollout::machine::{code_changed, evaluate, Health, Observation};
use metacontroller_api::rollout::{HookRollout, HookRolloutStatus, RolloutPhase, RolloutStep};
use proptest::prelude::*;

fn key(i: usize) -> ParentKey {
    ParentKey::new(&format!("uid-{i}"), "ns", &format!("p{i}"))
}

/// One tick of a run: parents added, health of those on the new code, seconds passed, paused.
#[derive(Debug, Clone)]
struct Tick {
    add: usize,
    fail: bool,
    pending: bool,
    seconds: i64,
    paused: bool,
}

fn tick() -> impl Strategy<Value = Tick> {
    (
        0usize..3,
        prop::bool::weighted(0.03),
        prop::bool::weighted(0.3),
        0i64..20,
        prop::bool::weighted(0.1),
    )
        .prop_map(|(add, fail, pending, seconds, paused)| Tick {
            add,
            fail,
            pending,
            seconds,
            paused,
        })
}

fn steps() -> impl Strategy<Value = Vec<RolloutStep>> {
    prop::collection::vec(
        prop_oneof![
            (1i64..20).prop_map(RolloutStep::Count),
            (1usize..=100).prop_map(|p| RolloutStep::Percent(format!("{p}%")))
        ],
        1..4,
    )
}

fn observe(s: &HookRolloutStatus, parents: &[ParentKey], now: i64, t: &Tick) -> Observation {
    let on_new = parents
        .iter()
        .filter(|k| version_of(s, k) == Version::To)
        .map(|k| {
            let health = match (t.fail, t.pending) {
                (true, _) => Health::Failed("boom".into()),
                (false, true) => Health::Pending,
                _ => Health::Healthy,
            };
            (k.as_str().to_string(), health)
        })
        .collect();
    Observation {
        now,
        parents: parents.to_vec(),
        on_new,
    }
}

proptest! {
    #[test]
    fn no_parent_flips_back_while_a_rollout_runs(
        start in 1usize..60,
        steps in steps(),
        pause in 0i32..30,
        ticks in prop::collection::vec(tick(), 1..200),
    ) {
        let mut spec = HookRollout { steps, pause_seconds: Some(pause), ..Default::default() };
        let mut parents: Vec<ParentKey> = (0..start).map(key).collect();
        let mut now = 0;
        let mut s = code_changed(&spec, None, "old", "new", &parents, now).unwrap().status;
        for t in &ticks {
            let before: Vec<Version> = parents.iter().map(|k| version_of(&s, k)).collect();
            parents.extend((parents.len()..parents.len() + t.add).map(key));
            now += t.seconds;
            spec.paused = t.paused.then_some(true);
            if let Some(next) = evaluate(&spec, &s, &observe(&s, &parents, now, t)) {
                s = next.status;
            }
            if s.phase == RolloutPhase::RolledBack {
                prop_assert!(parents.iter().all(|k| digest_of(&s, k) == "old"));
                return Ok(());
            }
            for (k, was) in parents.iter().zip(before) {
                prop_assert!(!(was == Version::To && version_of(&s, k) == Version::From), "{k:?} went back");
            }
            if matches!(s.phase, RolloutPhase::Progressing | RolloutPhase::Paused) {
                prop_assert!(s.updated as usize <= count_within(&parents, &s.cutoff));
            }
        }
    }

    #[test]
    fn healthy_runs_complete(start in 1usize..60, steps in steps(), pause in 0i32..10) {
        let spec = HookRollout { steps, pause_seconds: Some(pause), ..Default::default() };
        let parents: Vec<ParentKey> = (0..start).map(key).collect();
        let healthy = Tick { add: 0, fail: false, pending: false, seconds: 0, paused: false };
        let mut s = code_changed(&spec, None, "old", "new", &parents, 0).unwrap().status;
        let mut now = 0;
        // Each step needs at most two evaluations (healthy, then past the pause).
        for _ in 0..(2 * spec.steps.len() + 4) {
            now += i64::from(pause);
            if let Some(next) = evaluate(&spec, &s, &observe(&s, &parents, now, &healthy)) {
                s = next.status;
            }
        }
        prop_assert_eq!(s.phase, RolloutPhase::Complete);
        prop_assert!(parents.iter().all(|k| digest_of(&s, k) == "new"));
    }
}
