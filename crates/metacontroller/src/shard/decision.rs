//! What a round does with one shard, decided from what the round saw. Pure, so every case of
//! the handoff rules is unit-tested here; the coordinator carries the decision out.

/// What a round saw of one shard.
#[derive(Debug, Clone, Copy)]
pub(super) struct ShardFacts<'a> {
    /// This replica's identity.
    pub me: &'a str,
    /// The shard Lease's holder, if any.
    pub holder: Option<&'a str>,
    /// Whether the holder is a live member of the group.
    pub holder_is_member: bool,
    /// This replica syncs the shard, or took its Lease and waits for the relist.
    pub active: bool,
    /// This replica is draining the shard before it clears the Lease.
    pub releasing: bool,
    /// The assignment gives the shard to this replica.
    pub mine: bool,
    /// The group is settled and splits parents the same way: shards may be taken.
    pub may_acquire: bool,
    /// The round may still send requests (before its `act_by`).
    pub time_left: bool,
}

/// What to do with the shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ShardAction {
    /// Nothing this round.
    Leave,
    /// Another replica holds a shard this replica syncs (possible only after our membership
    /// expired): stop syncing it now, without touching its Lease.
    Stop,
    /// Ours, but assigned elsewhere: drain it, then clear its Lease.
    Release,
    /// Assigned to us and free: take its Lease. `orphaned` when it was held by a replica that
    /// is no longer a member (it died without releasing; its parents had no owner since).
    Take { orphaned: bool },
}

/// The handoff rules for one shard (see the module docs of `shard`).
pub(super) fn decide(facts: &ShardFacts<'_>) -> ShardAction {
    if facts.releasing {
        return ShardAction::Leave;
    }
    let we_hold = facts.holder == Some(facts.me);
    if facts.active && !we_hold {
        return ShardAction::Stop;
    }
    if we_hold && !facts.mine {
        return ShardAction::Release;
    }
    if !facts.mine || facts.active || !facts.may_acquire || !facts.time_left {
        return ShardAction::Leave;
    }
    match facts.holder {
        None => ShardAction::Take { orphaned: false },
        Some(h) if h == facts.me => ShardAction::Take { orphaned: false },
        Some(_) if !facts.holder_is_member => ShardAction::Take { orphaned: true },
        Some(_) => ShardAction::Leave,
    }
}

/// The shards to cache ahead of a takeover: held by a silent member (see
/// `Coordinator::cache_ahead`), assigned to `me` once the silent members are gone, and not
/// `busy` here (owned, being acquired or released). `holders[shard]` is each shard Lease's
/// holder. Nothing while no member is silent.
pub(super) fn shards_to_cache_ahead(
    me: &str,
    members: &[&str],
    silent: &[&str],
    holders: &[Option<&str>],
    busy: impl Fn(u32) -> bool,
) -> std::collections::HashSet<u32> {
    if silent.is_empty() {
        return Default::default();
    }
    let remaining: Vec<&str> = members
        .iter()
        .copied()
        .filter(|m| !silent.contains(m))
        .collect();
    let shards = u32::try_from(holders.len()).unwrap_or(u32::MAX);
    let owners = super::assignment::assignment(shards, &remaining);
    (0..shards)
        .filter(|&shard| {
            let held_by_silent = holders[shard as usize].is_some_and(|h| silent.contains(&h));
            let mine_after = owners.get(shard as usize).copied().flatten() == Some(me);
            held_by_silent && mine_after && !busy(shard)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shards_a_silent_member_holds_and_we_would_inherit_are_cached_ahead() {
        let members = ["a", "b", "c"];
        let holders: Vec<Option<&str>> = (0..12).map(|s| Some(["a", "b", "c"][s % 3])).collect();
        let a = shards_to_cache_ahead("a", &members, &["c"], &holders, |_| false);
        let b = shards_to_cache_ahead("b", &members, &["c"], &holders, |_| false);
        let held_by_c: std::collections::HashSet<u32> = (0..12).filter(|s| s % 3 == 2).collect();
        assert!(
            a.is_disjoint(&b),
            "a shard is cached ahead by one replica only"
        );
        assert_eq!(
            &a | &b,
            held_by_c,
            "every shard of the silent member, nothing else"
        );
        let busy = *a.iter().next().expect("a inherits some");
        let without = shards_to_cache_ahead("a", &members, &["c"], &holders, |s| s == busy);
        assert!(!without.contains(&busy), "a busy shard is not cached ahead");
    }

    #[test]
    fn nothing_is_cached_ahead_while_every_member_renews() {
        let holders = vec![Some("a"), Some("b")];
        assert!(shards_to_cache_ahead("a", &["a", "b"], &[], &holders, |_| false).is_empty());
    }

    /// A free shard assigned to "a", which holds nothing yet.
    fn free() -> ShardFacts<'static> {
        ShardFacts {
            me: "a",
            holder: None,
            holder_is_member: false,
            active: false,
            releasing: false,
            mine: true,
            may_acquire: true,
            time_left: true,
        }
    }

    #[test]
    fn a_free_shard_assigned_to_us_is_taken() {
        assert_eq!(decide(&free()), ShardAction::Take { orphaned: false });
    }

    #[test]
    fn a_shard_held_by_a_live_member_is_never_taken() {
        let held = ShardFacts {
            holder: Some("b"),
            holder_is_member: true,
            ..free()
        };
        assert_eq!(decide(&held), ShardAction::Leave);
    }

    #[test]
    fn a_shard_left_by_a_dead_member_is_taken_as_orphaned() {
        let orphan = ShardFacts {
            holder: Some("b"),
            holder_is_member: false,
            ..free()
        };
        assert_eq!(decide(&orphan), ShardAction::Take { orphaned: true });
    }

    #[test]
    fn our_own_lease_from_before_a_lapse_is_taken_again() {
        let ours = ShardFacts {
            holder: Some("a"),
            holder_is_member: true,
            ..free()
        };
        assert_eq!(decide(&ours), ShardAction::Take { orphaned: false });
    }

    #[test]
    fn a_shard_we_sync_held_by_another_is_stopped_whatever_the_assignment() {
        for mine in [true, false] {
            let lost = ShardFacts {
                holder: Some("b"),
                holder_is_member: true,
                active: true,
                mine,
                ..free()
            };
            assert_eq!(decide(&lost), ShardAction::Stop);
        }
        let cleared = ShardFacts {
            active: true,
            ..free()
        };
        assert_eq!(decide(&cleared), ShardAction::Stop, "our Lease was cleared");
    }

    #[test]
    fn a_shard_we_hold_but_no_longer_own_is_released() {
        let moved = ShardFacts {
            holder: Some("a"),
            active: true,
            mine: false,
            ..free()
        };
        assert_eq!(decide(&moved), ShardAction::Release);
    }

    #[test]
    fn nothing_is_taken_unsettled_late_while_releasing_or_when_assigned_elsewhere() {
        let cases = [
            ShardFacts {
                may_acquire: false,
                ..free()
            },
            ShardFacts {
                time_left: false,
                ..free()
            },
            ShardFacts {
                releasing: true,
                ..free()
            },
            ShardFacts {
                mine: false,
                ..free()
            },
        ];
        for facts in cases {
            assert_eq!(decide(&facts), ShardAction::Leave, "{facts:?}");
        }
    }

    #[test]
    fn a_shard_being_released_is_left_alone_even_if_another_holds_it() {
        let releasing = ShardFacts {
            holder: Some("b"),
            holder_is_member: true,
            active: true,
            releasing: true,
            ..free()
        };
        assert_eq!(decide(&releasing), ShardAction::Leave);
    }
}
