//! The shard coordinator as a pure state machine: [`round`] takes what the replica knows
//! (its last renewal's send time, the member and shard Leases as observed, the shards it
//! owns, acquires, releases and caches ahead) and the current instant, and answers with
//! every decision of the round as [`Action`]s. The coordinator only gathers the [`View`],
//! calls it, and carries the actions out; each rule is unit-tested here with plain instants.
//!
//! A round calls [`round`] twice: first without the group's Leases (the answer is what the
//! renewal means: stop every shard, or read the group by a deadline), then with them (the
//! answer is the membership, and what to do with every shard).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use metacontroller_workqueue::Lapse;
use tokio::time::Instant;

use super::assignment::{assignment, settled};
use super::decision::{decide, shards_to_cache_ahead, ShardAction, ShardFacts};
use super::ShardConfig;
use crate::coordination::{expired, lease_deadlines, lease_validity};

/// What the replica knows at the start of a round (or after reading the group).
pub(super) struct View<'a> {
    /// Identity, `--shards` and the timings.
    pub config: &'a ShardConfig,
    /// When our last successful member renewal was *sent* (`None`: never renewed).
    pub renewed: Option<Instant>,
    /// What the gate reported when that renewal was just recorded (else [`Lapse::None`]).
    pub lapse: Lapse,
    /// Shards the gate admits now.
    pub owned: &'a HashSet<u32>,
    /// Shards whose Lease we took, waiting for their relist.
    pub acquiring: &'a HashSet<u32>,
    /// Shards being drained before their Lease is cleared.
    pub releasing: &'a HashSet<u32>,
    /// Shards retained ahead of a takeover.
    pub ahead: &'a HashSet<u32>,
    /// The members of the previous round that read the group.
    pub last_members: Option<&'a [String]>,
    /// Live members with another `--shards`, as last reported.
    pub foreign: &'a [String],
    /// The group's Leases, once read this round.
    pub group: Option<Group<'a>>,
}

/// The group's Leases as this round read them.
pub(super) struct Group<'a> {
    /// Every other replica's member Lease (by holder), with when its spec was first seen.
    pub others: Vec<MemberLease<'a>>,
    /// Each shard Lease's holder, by shard (`None`: no Lease, or no holder).
    pub holders: Vec<Option<&'a str>>,
}

/// Another replica's member Lease as observed by this replica's clock.
#[derive(Debug, Clone, Copy)]
pub(super) struct MemberLease<'a> {
    /// Its holder.
    pub holder: &'a str,
    /// Its replica's `--shards` (the [`super::SHARDS_ANNOTATION`]), if written.
    pub shards: Option<&'a str>,
    /// Its `leaseDurationSeconds`.
    pub valid_for: Duration,
    /// When this replica first saw the Lease's spec as it is now (a renewal changes it).
    pub first_seen: Instant,
}

/// One decision of a round, in the order it is to be carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    /// A renewal came after the renew deadline (keys were refused meanwhile): queue the owned
    /// shards' parents again.
    ResyncOwned,
    /// A renewal came after the fence (the gate revoked every shard): forget acquisitions
    /// and shards cached ahead, and prune the caches; every shard is acquired again.
    ForgetPending,
    /// Our membership is not current: stop every shard, draining until `drain_until`
    /// (a moment after the fence); exit if syncs still run then.
    StopAll { drain_until: Instant },
    /// Read the group's Leases, no request past `by`, and call [`round`] again with them.
    ReadGroup { by: Instant },
    /// The live members (us included) and the silent ones among them.
    Members {
        members: Vec<String>,
        silent: Vec<String>,
    },
    /// The live members using another `--shards` changed (empty: none left); while there are
    /// any, no shard is acquired.
    Foreign(Vec<String>),
    /// Another replica holds a shard we sync: stop syncing it, leave its Lease alone.
    Stop(u32),
    /// Ours but assigned elsewhere: drain it, then clear its Lease.
    Release(u32),
    /// Take the shard's Lease if it is not yet `by`; `orphaned` when its holder is no longer
    /// a member (its parents are expedited once admitted).
    Acquire {
        shard: u32,
        orphaned: bool,
        by: Instant,
    },
    /// Forget these shards cached ahead (their holder renewed, or the assignment changed);
    /// unreserve those in `unreserve` (the others are owned, acquired or released anyway).
    DropAhead {
        forget: Vec<u32>,
        unreserve: Vec<u32>,
    },
    /// Reserve these shards and relist once, ahead of their holder's expiry.
    CacheAhead(Vec<u32>),
    /// Admit the shards just acquired once a list started after their reservation has
    /// completed (the caches hold them).
    AdmitAcquired,
}

/// A member that has not renewed for this long (two renewals missed, and half a period of
/// slack) is *silent*: probably dead; its Lease expires within the rest of its duration.
pub(super) fn silent_after(retry_period: Duration) -> Duration {
    retry_period * 5 / 2
}

/// How long after a member Lease's expiry (as observed) the round that drops it runs.
const EXPIRY_MARGIN: Duration = Duration::from_millis(20);

/// Until the next round: `period`, or until just after the first live member's Lease
/// expires if that is sooner, so that a dead replica's shards are taken over at the expiry
/// rather than up to a retry period later.
pub(super) fn next_round_in(
    observed: &HashMap<String, (LeaseSpec, Instant)>,
    me: &str,
    now: Instant,
    period: Duration,
) -> Duration {
    observed
        .values()
        .filter(|(spec, _)| {
            spec.holder_identity
                .as_deref()
                .is_some_and(|h| !h.is_empty() && h != me)
        })
        .filter_map(|(spec, seen)| seen.checked_add(lease_validity(spec)))
        .filter(|expiry| *expiry > now)
        .map(|expiry| expiry - now + EXPIRY_MARGIN)
        .fold(period, Duration::min)
}

/// Every decision of a round at `now` (see the module docs).
pub(super) fn round(view: &View<'_>, now: Instant) -> Vec<Action> {
    let mut actions = Vec::new();
    let none = HashSet::new();
    let (acquiring, ahead) = match view.lapse {
        Lapse::None => (view.acquiring, view.ahead),
        Lapse::Refused => {
            actions.push(Action::ResyncOwned);
            (view.acquiring, view.ahead)
        }
        Lapse::Revoked => {
            actions.push(Action::ForgetPending);
            (&none, &none)
        }
    };
    let Some(renewed) = view.renewed else {
        return actions;
    };
    let config = view.config;
    let deadlines = lease_deadlines(renewed, config.lease_duration, config.renew_deadline);
    if now >= deadlines.renew_by {
        if !(view.owned.is_empty() && acquiring.is_empty() && ahead.is_empty()) {
            // Syncs still running at the fence are abandoned by the gate, so the drain ends
            // by then; a second more covers a busy runtime.
            let drain_until = deadlines.fence + Duration::from_secs(1);
            actions.push(Action::StopAll { drain_until });
        }
        return actions;
    }
    // Leave a retry period of the renew deadline for the next renewal.
    let act_by = deadlines
        .renew_by
        .checked_sub(config.retry_period)
        .unwrap_or(deadlines.renew_by)
        .max(now);
    match &view.group {
        None => actions.push(Action::ReadGroup { by: act_by }),
        Some(group) => act(view, group, acquiring, ahead, act_by, now, &mut actions),
    }
    actions
}

/// The live members by our clock: us, and every other member whose Lease changed within its
/// duration before `now`; the silent ones among them; and the live replicas using another
/// `--shards` (not members).
fn classify(
    config: &ShardConfig,
    others: &[MemberLease<'_>],
    now: Instant,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let ours = config.shards.to_string();
    let mut members = vec![config.identity.clone()];
    let (mut silent, mut foreign) = (Vec::new(), Vec::new());
    for m in others
        .iter()
        .filter(|m| !m.holder.is_empty() && m.holder != config.identity)
    {
        if expired(m.first_seen, m.valid_for, now) {
            continue;
        }
        let unchanged_for = now.saturating_duration_since(m.first_seen);
        if m.shards == Some(ours.as_str()) {
            if unchanged_for >= silent_after(config.retry_period) {
                silent.push(m.holder.to_string());
            }
            members.push(m.holder.to_string());
        } else {
            let theirs = m.shards.unwrap_or("unknown");
            foreign.push(format!("{} (--shards {theirs})", m.holder));
        }
    }
    for list in [&mut members, &mut silent, &mut foreign] {
        list.sort();
        list.dedup();
    }
    (members, silent, foreign)
}

/// The rest of a round once the group was read: membership, every shard, caching ahead.
fn act(
    view: &View<'_>,
    group: &Group<'_>,
    acquiring: &HashSet<u32>,
    ahead: &HashSet<u32>,
    act_by: Instant,
    now: Instant,
    actions: &mut Vec<Action>,
) {
    let config = view.config;
    let me = config.identity.as_str();
    let (members, silent, foreign) = classify(config, &group.others, now);
    if foreign != view.foreign {
        actions.push(Action::Foreign(foreign.clone()));
    }
    // While a live replica splits parents differently (a rolling update that changed
    // --shards), acquire nothing: keep syncing the shards held, take none of theirs.
    let may_acquire = settled(view.last_members, &members) && foreign.is_empty();
    let member_refs: Vec<&str> = members.iter().map(String::as_str).collect();
    let owners = assignment(config.shards, &member_refs);
    let mut busy: HashSet<u32> = view.owned | acquiring;
    busy.extend(view.releasing);
    let mut acquired = HashSet::new();
    let mut per_shard = Vec::new();
    for shard in 0..config.shards {
        let holder = group.holders.get(shard as usize).copied().flatten();
        let facts = ShardFacts {
            me,
            holder,
            holder_is_member: holder.is_some_and(|h| members.iter().any(|m| m == h)),
            active: view.owned.contains(&shard) || acquiring.contains(&shard),
            releasing: view.releasing.contains(&shard),
            mine: owners.get(shard as usize).copied().flatten() == Some(me),
            may_acquire,
            time_left: now < act_by,
        };
        match decide(&facts) {
            ShardAction::Leave => {}
            ShardAction::Stop => per_shard.push(Action::Stop(shard)),
            ShardAction::Release => per_shard.push(Action::Release(shard)),
            ShardAction::Take { orphaned } => {
                acquired.insert(shard);
                per_shard.push(Action::Acquire {
                    shard,
                    orphaned,
                    by: act_by,
                });
            }
        }
    }
    let wanted = if foreign.is_empty() {
        let silent_refs: Vec<&str> = silent.iter().map(String::as_str).collect();
        let holders: Vec<Option<&str>> = (0..config.shards)
            .map(|s| group.holders.get(s as usize).copied().flatten())
            .collect();
        shards_to_cache_ahead(me, &member_refs, &silent_refs, &holders, |s| {
            busy.contains(&s)
        })
    } else {
        HashSet::new()
    };
    actions.push(Action::Members { members, silent });
    actions.extend(per_shard);
    // A shard cached ahead and taken now keeps what was cached for it.
    let mut forget: Vec<u32> = ahead
        .iter()
        .filter(|s| !wanted.contains(s) && !acquired.contains(s))
        .copied()
        .collect();
    forget.sort_unstable();
    if !forget.is_empty() {
        let unreserve = forget
            .iter()
            .filter(|s| !busy.contains(s))
            .copied()
            .collect();
        actions.push(Action::DropAhead { forget, unreserve });
    }
    let mut new: Vec<u32> = wanted.into_iter().filter(|s| !ahead.contains(s)).collect();
    new.sort_unstable();
    if !new.is_empty() {
        actions.push(Action::CacheAhead(new));
    }
    if !acquired.is_empty() {
        actions.push(Action::AdmitAcquired);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARDS: u32 = 12;

    fn config(me: &str) -> ShardConfig {
        ShardConfig {
            namespace: "ns".into(),
            group: "g".into(),
            identity: me.into(),
            shards: SHARDS,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// Everything a test round knows; `view` borrows it.
    struct World {
        config: ShardConfig,
        renewed: Option<Instant>,
        lapse: Lapse,
        owned: HashSet<u32>,
        acquiring: HashSet<u32>,
        releasing: HashSet<u32>,
        ahead: HashSet<u32>,
        last_members: Option<Vec<String>>,
        foreign: Vec<String>,
        /// (holder, --shards, first seen)
        others: Vec<(String, String, Instant)>,
        holders: Vec<Option<String>>,
    }

    impl World {
        /// "a", renewed at `t0`, alone in the group for a round already, nothing held.
        fn new(t0: Instant) -> World {
            World {
                config: config("a"),
                renewed: Some(t0),
                lapse: Lapse::None,
                owned: HashSet::new(),
                acquiring: HashSet::new(),
                releasing: HashSet::new(),
                ahead: HashSet::new(),
                last_members: Some(vec!["a".into()]),
                foreign: Vec::new(),
                others: Vec::new(),
                holders: vec![None; SHARDS as usize],
            }
        }

        fn member(mut self, holder: &str, first_seen: Instant) -> World {
            self.others
                .push((holder.into(), SHARDS.to_string(), first_seen));
            self
        }

        fn view(&self, read: bool) -> View<'_> {
            View {
                config: &self.config,
                renewed: self.renewed,
                lapse: self.lapse,
                owned: &self.owned,
                acquiring: &self.acquiring,
                releasing: &self.releasing,
                ahead: &self.ahead,
                last_members: self.last_members.as_deref(),
                foreign: &self.foreign,
                group: read.then(|| Group {
                    others: self
                        .others
                        .iter()
                        .map(|(holder, shards, first_seen)| MemberLease {
                            holder,
                            shards: Some(shards),
                            valid_for: self.config.lease_duration,
                            first_seen: *first_seen,
                        })
                        .collect(),
                    holders: self.holders.iter().map(Option::as_deref).collect(),
                }),
            }
        }

        /// The second call of a round: with the group read.
        fn act(&self, now: Instant) -> Vec<Action> {
            round(&self.view(true), now)
        }
    }

    fn acquired(actions: &[Action]) -> Vec<(u32, bool)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Acquire {
                    shard, orphaned, ..
                } => Some((*shard, *orphaned)),
                _ => None,
            })
            .collect()
    }

    fn released(actions: &[Action]) -> Vec<u32> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Release(s) => Some(*s),
                _ => None,
            })
            .collect()
    }

    fn members(actions: &[Action]) -> (Vec<String>, Vec<String>) {
        actions
            .iter()
            .find_map(|a| match a {
                Action::Members { members, silent } => Some((members.clone(), silent.clone())),
                _ => None,
            })
            .expect("a round that read the group reports the members")
    }

    /// The shards the assignment gives `me` among `members`.
    fn assigned(me: &str, members: &[&str]) -> Vec<u32> {
        let owners = assignment(SHARDS, members);
        (0..SHARDS)
            .filter(|s| owners[*s as usize] == Some(me))
            .collect()
    }

    #[test]
    fn free_shards_assigned_to_us_are_acquired_then_admitted_after_their_relist() {
        let t0 = Instant::now();
        let world = World::new(t0);
        let actions = world.act(t0 + secs(0.1));
        let all: Vec<(u32, bool)> = (0..SHARDS).map(|s| (s, false)).collect();
        assert_eq!(acquired(&actions), all);
        assert_eq!(
            actions.last(),
            Some(&Action::AdmitAcquired),
            "admitted only after every acquisition, once relisted"
        );
        let by = t0 + secs(8.0);
        assert!(
            actions
                .iter()
                .all(|a| !matches!(a, Action::Acquire { by: b, .. } if *b != by)),
            "no acquisition after a retry period before the renew deadline"
        );
    }

    #[test]
    fn a_round_first_asks_for_the_group_by_a_retry_period_before_the_renew_deadline() {
        let t0 = Instant::now();
        let world = World::new(t0);
        assert_eq!(
            round(&world.view(false), t0 + secs(1.0)),
            vec![Action::ReadGroup { by: t0 + secs(8.0) }]
        );
        // Later than that, the read is still asked for, bounded by now: releases go on.
        assert_eq!(
            round(&world.view(false), t0 + secs(9.0)),
            vec![Action::ReadGroup { by: t0 + secs(9.0) }]
        );
        let late = world.act(t0 + secs(9.0));
        assert!(acquired(&late).is_empty(), "no acquisition past its bound");
    }

    #[test]
    fn nothing_happens_before_our_first_renewal() {
        let mut world = World::new(Instant::now());
        world.renewed = None;
        assert!(round(&world.view(false), Instant::now()).is_empty());
        assert!(world.act(Instant::now()).is_empty());
    }

    #[test]
    fn held_shards_are_kept_while_every_renewal_comes_in_time() {
        let t0 = Instant::now();
        let mut world = World::new(t0);
        world.owned = (0..SHARDS).collect();
        world.holders = vec![Some("a".into()); SHARDS as usize];
        // Renewed every retry period: each round counts from the latest send.
        for k in 0..20 {
            let sent = t0 + secs(2.0 * f64::from(k));
            world.renewed = Some(sent);
            let now = sent + secs(1.5);
            assert_eq!(
                round(&world.view(false), now),
                vec![Action::ReadGroup {
                    by: sent + secs(8.0)
                }]
            );
            let actions = world.act(now);
            assert_eq!(
                actions,
                vec![Action::Members {
                    members: vec!["a".into()],
                    silent: vec![]
                }],
                "round {k}"
            );
        }
    }

    #[test]
    fn every_shard_stops_at_the_renew_deadline_counted_from_the_send_of_the_last_renewal() {
        let t0 = Instant::now();
        let mut world = World::new(t0);
        world.owned = [1, 2].into();
        // The renewal sent at t0 was answered 9 s later: only the send counts, so the renew
        // deadline is t0 + 10 s, the fence t0 + 14 s (a second before the 15 s Lease).
        world.renewed = Some(t0);
        assert!(matches!(
            round(&world.view(false), t0 + secs(9.99))[..],
            [Action::ReadGroup { .. }]
        ));
        for now in [t0 + secs(10.0), t0 + secs(12.0)] {
            assert_eq!(
                round(&world.view(false), now),
                vec![Action::StopAll {
                    drain_until: t0 + secs(15.0)
                }]
            );
            assert_eq!(
                world.act(now),
                vec![Action::StopAll {
                    drain_until: t0 + secs(15.0)
                }],
                "nothing is acquired or released without a current membership"
            );
        }
        // Nothing owned, acquired or cached ahead: nothing to stop.
        world.owned.clear();
        assert!(round(&world.view(false), t0 + secs(10.0)).is_empty());
        world.ahead = [4].into();
        assert!(matches!(
            round(&world.view(false), t0 + secs(10.0))[..],
            [Action::StopAll { .. }]
        ));
    }

    #[test]
    fn a_member_is_taken_over_only_a_lease_duration_after_its_lease_last_changed() {
        let t0 = Instant::now();
        let seen = t0 - secs(1.0);
        let mut world = World::new(t0).member("b", seen);
        world.renewed = Some(t0 + secs(12.0));
        world.last_members = Some(vec!["a".into(), "b".into()]);
        let of_b = assigned("b", &["a", "b"]);
        for s in &of_b {
            world.holders[*s as usize] = Some("b".into());
        }
        world.owned = assigned("a", &["a", "b"]).into_iter().collect();
        for s in &world.owned {
            world.holders[*s as usize] = Some("a".into());
        }
        // Just before its 15 s from when its Lease was first seen unchanged: still a member.
        let before = world.act(seen + secs(14.99));
        assert_eq!(members(&before).0, vec!["a".to_string(), "b".to_string()]);
        assert!(acquired(&before).is_empty());
        // At its expiry: gone, its shards are taken over as orphaned.
        let after = world.act(seen + secs(15.0));
        assert_eq!(members(&after).0, vec!["a".to_string()]);
        let taken: Vec<(u32, bool)> = of_b.iter().map(|s| (*s, true)).collect();
        assert_eq!(acquired(&after), taken);
        // Its Lease changed (a renewal) at t0 + 10 s: valid again for 15 s from then.
        world.others[0].2 = t0 + secs(10.0);
        let renewed = world.act(seen + secs(15.0));
        assert!(acquired(&renewed).is_empty());
        assert_eq!(members(&renewed).1, Vec::<String>::new(), "not silent");
    }

    #[test]
    fn a_shard_assigned_to_a_newcomer_is_released_and_the_newcomer_waits_a_round() {
        let t0 = Instant::now();
        let mut world = World::new(t0).member("b", t0);
        world.owned = (0..SHARDS).collect();
        world.holders = vec![Some("a".into()); SHARDS as usize];
        let actions = world.act(t0 + secs(0.5));
        assert_eq!(released(&actions), assigned("b", &["a", "b"]));
        // b's first round: a is new to it, so it acquires nothing yet.
        let mut b = World::new(t0).member("a", t0);
        b.config = config("b");
        b.last_members = None;
        b.holders = world.holders.clone();
        assert!(acquired(&b.act(t0 + secs(0.5))).is_empty());
        // Next round, a has released them: b takes them (not orphaned).
        b.last_members = Some(vec!["a".into(), "b".into()]);
        for s in assigned("b", &["a", "b"]) {
            b.holders[s as usize] = None;
        }
        let taken: Vec<(u32, bool)> = assigned("b", &["a", "b"])
            .into_iter()
            .map(|s| (s, false))
            .collect();
        assert_eq!(acquired(&b.act(t0 + secs(2.5))), taken);
    }

    #[test]
    fn after_a_scale_down_the_departed_members_shards_are_taken_at_once() {
        let t0 = Instant::now();
        // b left (its member Lease deleted, its shard Leases cleared): a saw it last round.
        let mut world = World::new(t0);
        world.last_members = Some(vec!["a".into(), "b".into()]);
        world.owned = assigned("a", &["a", "b"]).into_iter().collect();
        for s in &world.owned {
            world.holders[*s as usize] = Some("a".into());
        }
        let actions = world.act(t0 + secs(0.5));
        let taken: Vec<(u32, bool)> = assigned("b", &["a", "b"])
            .into_iter()
            .map(|s| (s, false))
            .collect();
        assert_eq!(
            acquired(&actions),
            taken,
            "a departure needs no settling round"
        );
        assert!(released(&actions).is_empty());
    }

    #[test]
    fn a_live_replica_with_another_shard_count_blocks_acquisitions_but_not_what_is_held() {
        let t0 = Instant::now();
        let mut world = World::new(t0);
        world
            .others
            .push(("old".into(), "30".into(), t0 - secs(1.0)));
        world.owned = [0, 1].into();
        world.holders[0] = Some("a".into());
        world.holders[1] = Some("a".into());
        let actions = world.act(t0 + secs(0.5));
        assert_eq!(
            actions,
            vec![
                Action::Foreign(vec!["old (--shards 30)".into()]),
                Action::Members {
                    members: vec!["a".into()],
                    silent: vec![]
                },
            ],
            "no shard acquired, none stopped, reported once"
        );
        world.foreign = vec!["old (--shards 30)".into()];
        assert!(!world
            .act(t0 + secs(0.5))
            .iter()
            .any(|a| matches!(a, Action::Foreign(_))));
        // Gone (expired): acquisitions resume, and it is said.
        world.renewed = Some(t0 + secs(13.0));
        let later = world.act(t0 + secs(14.0));
        assert_eq!(later[0], Action::Foreign(vec![]));
        assert_eq!(acquired(&later).len(), SHARDS as usize - 2);
    }

    #[test]
    fn the_shards_of_a_silent_member_this_replica_would_inherit_are_cached_ahead() {
        let t0 = Instant::now();
        let mut world = World::new(t0).member("b", t0).member("c", t0);
        world.last_members = Some(vec!["a".into(), "b".into(), "c".into()]);
        let all = ["a", "b", "c"];
        for m in all {
            for s in assigned(m, &all) {
                world.holders[s as usize] = Some(m.into());
            }
        }
        world.owned = assigned("a", &all).into_iter().collect();
        // c renews, b stops: after 5 s (2.5 retry periods) b is silent.
        world.others[1].2 = t0 + secs(4.0);
        let quiet = world.act(t0 + secs(4.99));
        assert!(!quiet.iter().any(|a| matches!(a, Action::CacheAhead(_))));
        let actions = world.act(t0 + secs(5.0));
        assert_eq!(members(&actions).1, vec!["b".to_string()]);
        let inherit: Vec<u32> = assigned("b", &all)
            .into_iter()
            .filter(|s| assigned("a", &["a", "c"]).contains(s))
            .collect();
        assert!(!inherit.is_empty());
        assert_eq!(
            actions.iter().find(|a| matches!(a, Action::CacheAhead(_))),
            Some(&Action::CacheAhead(inherit.clone()))
        );
        assert!(acquired(&actions).is_empty(), "nothing taken before expiry");
        // Already cached ahead: not again. One is busy being acquired: not cached.
        world.ahead = inherit.iter().copied().collect();
        assert!(!world
            .act(t0 + secs(5.0))
            .iter()
            .any(|a| matches!(a, Action::CacheAhead(_) | Action::DropAhead { .. })));
    }

    #[test]
    fn shards_cached_ahead_are_dropped_when_their_holder_renews_and_kept_when_taken() {
        let t0 = Instant::now();
        let mut world = World::new(t0).member("b", t0);
        world.last_members = Some(vec!["a".into(), "b".into()]);
        let of_b = assigned("b", &["a", "b"]);
        for s in &of_b {
            world.holders[*s as usize] = Some("b".into());
        }
        world.ahead = of_b.iter().copied().collect();
        world.releasing = [of_b[0]].into();
        // b renewed (a new spec, first seen now): every shard cached ahead goes; the one
        // being released stays reserved by its release.
        world.others[0].2 = t0 + secs(6.0);
        let renewed = world.act(t0 + secs(6.5));
        assert_eq!(
            renewed
                .iter()
                .find(|a| matches!(a, Action::DropAhead { .. })),
            Some(&Action::DropAhead {
                forget: of_b.clone(),
                unreserve: of_b[1..].to_vec(),
            })
        );
        // b expired instead: the shards are taken, and what was cached for them is kept.
        world.others[0].2 = t0;
        world.releasing.clear();
        world.renewed = Some(t0 + secs(14.0));
        let expired = world.act(t0 + secs(15.0));
        let taken = acquired(&expired);
        assert!(of_b.iter().all(|s| taken.contains(&(*s, true))));
        assert!(!expired
            .iter()
            .any(|a| matches!(a, Action::DropAhead { .. })));
    }

    #[test]
    fn a_lapsed_membership_forgets_what_was_pending_and_a_late_one_resyncs() {
        let t0 = Instant::now();
        let mut world = World::new(t0);
        world.acquiring = [3].into();
        world.ahead = [4].into();
        world.lapse = Lapse::Revoked;
        assert_eq!(
            round(&world.view(false), t0),
            vec![
                Action::ForgetPending,
                Action::ReadGroup { by: t0 + secs(8.0) }
            ]
        );
        world.lapse = Lapse::Refused;
        assert_eq!(
            round(&world.view(false), t0),
            vec![
                Action::ResyncOwned,
                Action::ReadGroup { by: t0 + secs(8.0) }
            ]
        );
    }

    #[test]
    fn a_shard_we_sync_whose_lease_another_holds_is_stopped_not_released() {
        let t0 = Instant::now();
        let mut world = World::new(t0).member("b", t0);
        world.owned = [5].into();
        world.holders[5] = Some("b".into());
        let actions = world.act(t0 + secs(0.5));
        assert!(actions.contains(&Action::Stop(5)));
        assert!(!released(&actions).contains(&5));
    }

    #[test]
    fn a_member_lease_with_no_holder_or_our_own_is_no_other_member() {
        let t0 = Instant::now();
        let world = World::new(t0).member("", t0).member("a", t0);
        assert_eq!(members(&world.act(t0)), (vec!["a".to_string()], Vec::new()));
    }

    #[test]
    fn the_next_round_comes_when_a_member_lease_expires() {
        let now = Instant::now();
        let spec = |holder: &str, secs: i32| LeaseSpec {
            holder_identity: Some(holder.to_string()),
            lease_duration_seconds: Some(secs),
            ..LeaseSpec::default()
        };
        let period = Duration::from_secs(2);
        let mut observed = HashMap::new();
        assert_eq!(next_round_in(&observed, "me", now, period), period);
        // Renewed 14.5 s ago with a 15 s lease: the round comes at its expiry.
        observed.insert(
            "a".to_string(),
            (spec("a", 15), now - Duration::from_millis(14_500)),
        );
        assert_eq!(
            next_round_in(&observed, "me", now, period),
            Duration::from_millis(500) + EXPIRY_MARGIN
        );
        // An expired member is not waited for again; our own Lease never; nor a free one.
        observed.insert(
            "a".to_string(),
            (spec("a", 15), now - Duration::from_secs(16)),
        );
        observed.insert(
            "me".to_string(),
            (spec("me", 15), now - Duration::from_secs(14)),
        );
        observed.insert(
            "free".to_string(),
            (spec("", 15), now - Duration::from_secs(14)),
        );
        assert_eq!(next_round_in(&observed, "me", now, period), period);
        // A member far from its expiry: the period.
        observed.insert("b".to_string(), (spec("b", 15), now));
        assert_eq!(next_round_in(&observed, "me", now, period), period);
    }
}
