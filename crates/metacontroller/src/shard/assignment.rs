//! Which member owns each shard: rendezvous hashing with bounded loads (see the module docs
//! of [`crate::shard`]).

use std::collections::HashMap;

use metacontroller_workqueue::stable_hash;

/// Whether this round's members may be acted on: seen in the previous round already, or
/// only members of it (departures). A newcomer waits a round so that replicas started
/// together see each other before any takes shards.
pub(super) fn settled(previous: Option<&[String]>, members: &[String]) -> bool {
    previous.is_some_and(|last| members.iter().all(|m| last.contains(m)))
}

/// Which member owns each shard `0..shards` (rendezvous hashing with bounded loads, see
/// the module docs); `None` for every shard when there are no members. Members are
/// identified by name, so the order of `members` does not matter.
pub fn assignment<'a>(shards: u32, members: &[&'a str]) -> Vec<Option<&'a str>> {
    let mut owner: Vec<Option<&'a str>> = vec![None; shards as usize];
    if members.is_empty() {
        return owner;
    }
    let cap = (shards as usize).div_ceil(members.len());
    let mut pairs: Vec<(u64, &'a str, u32)> = members
        .iter()
        .flat_map(|m| (0..shards).map(move |s| (score(m, s), *m, s)))
        .collect();
    pairs.sort_unstable_by(|a, b| b.cmp(a));
    let mut load: HashMap<&'a str, usize> = HashMap::with_capacity(members.len());
    let mut placed = 0;
    for (_, member, shard) in pairs {
        let slot = &mut owner[shard as usize];
        let held = load.entry(member).or_default();
        if slot.is_none() && *held < cap {
            *slot = Some(member);
            *held += 1;
            placed += 1;
            if placed == owner.len() {
                break;
            }
        }
    }
    owner
}

fn score(member: &str, shard: u32) -> u64 {
    let mut bytes = Vec::with_capacity(member.len() + 5);
    bytes.extend_from_slice(member.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(&shard.to_be_bytes());
    stable_hash(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}-{i}")).collect()
    }

    fn loads<'a>(table: &[Option<&'a str>]) -> HashMap<&'a str, usize> {
        let mut counts = HashMap::new();
        for owner in table.iter().flatten() {
            *counts.entry(*owner).or_insert(0) += 1;
        }
        counts
    }

    #[test]
    fn the_default_shard_count_splits_evenly_over_common_replica_counts() {
        let shards = crate::cli::DEFAULT_SHARDS;
        for members in [2usize, 3, 4, 5, 6, 10, 12] {
            let ids = names("replica", members);
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            let counts = loads(&assignment(shards, &refs));
            let expected = shards as usize / members;
            assert!(
                counts.len() == members && counts.values().all(|&n| n == expected),
                "{shards} shards over {members} replicas: {counts:?}"
            );
        }
    }

    #[test]
    fn bounded_rendezvous_balances_and_moves_little() {
        let mut moves = 0;
        let mut minimal = 0;
        for trial in 0..200 {
            let all = names(&format!("replica-{trial}"), 4);
            let refs: Vec<&str> = all.iter().map(String::as_str).collect();
            let three = assignment(64, &refs[..3]);
            // Every shard placed, every member within the cap.
            assert!(three.iter().all(Option::is_some));
            let counts = loads(&three);
            assert_eq!(counts.len(), 3);
            // No member above the cap (22 = ceil(64 / 3)); the rest may hold fewer.
            assert!(counts.values().all(|&n| n <= 22), "{counts:?}");
            // The order of the member list does not matter.
            let reversed: Vec<&str> = refs[..3].iter().rev().copied().collect();
            assert_eq!(assignment(64, &reversed), three);

            // refs[1] leaves: at least its shards move.
            let two = assignment(64, &[refs[0], refs[2]]);
            assert!(loads(&two).values().all(|&n| n == 32));
            moves += three.iter().zip(&two).filter(|(a, b)| a != b).count();
            minimal += counts[refs[1]];
            // refs[3] joins: at least the shards it gets move.
            let four = assignment(64, &refs);
            assert!(loads(&four).values().all(|&n| n == 16));
            moves += three.iter().zip(&four).filter(|(a, b)| a != b).count();
            minimal += loads(&four)[refs[3]];
        }
        println!("bounded rendezvous: {moves} shard moves where {minimal} were unavoidable");
        assert!(
            moves * 100 <= minimal * 125,
            "{moves} moves, {minimal} unavoidable"
        );
    }

    #[test]
    fn a_membership_is_settled_unless_someone_joined() {
        let abc = names("m", 3);
        let ab = abc[..2].to_vec();
        assert!(!settled(None, &abc), "the first round only looks");
        assert!(settled(Some(&abc), &abc));
        assert!(settled(Some(&abc), &ab), "a departure is acted on at once");
        assert!(!settled(Some(&ab), &abc), "a newcomer waits a round");
        let ad = vec![abc[0].clone(), "m-new".to_string()];
        assert!(!settled(Some(&ab), &ad), "one left, one joined: wait");
    }

    #[test]
    fn assignment_of_edge_cases() {
        assert_eq!(assignment(4, &[]), vec![None; 4]);
        assert_eq!(assignment(0, &["a"]), Vec::<Option<&str>>::new());
        assert_eq!(assignment(3, &["a"]), vec![Some("a"); 3]);
        // More members than shards: each shard to a different member.
        let table = assignment(2, &["a", "b", "c"]);
        assert!(table.iter().all(Option::is_some));
        assert_ne!(table[0], table[1]);
    }
}
