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

#[cfg(test)]
mod tests {
    use super::*;

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
