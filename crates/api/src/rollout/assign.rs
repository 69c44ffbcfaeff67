//! Which parents run the new code: a stable order of parents and a cutoff in it.
//!
//! Each parent has a [`ParentKey`]: a 64-bit FNV-1a hash of its UID (fixed-width hex, so
//! the text sorts as the number) then `namespace/name` for ties. A step's parents are the
//! first `n` keys; the status stores the key of the last one (`cutoff`), and a parent runs
//! `to` when its key sorts at or before the cutoff. Every replica, and the same replica
//! after a restart, computes the same keys, and a parent created or deleted later does not
//! move anybody across the cutoff, so no parent switches code while a step holds.

use super::{HookRolloutStatus, RolloutPhase};

/// The sort key of one parent in a rollout.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParentKey(String);

impl ParentKey {
    /// The key of the parent with this UID, namespace (empty when cluster-scoped) and name.
    pub fn new(uid: &str, namespace: &str, name: &str) -> Self {
        ParentKey(format!(
            "{:016x}/{namespace}/{name}",
            mix64(fnv1a64(uid.as_bytes()))
        ))
    }

    /// A key as another replica stored it (its text, unchanged).
    pub fn from_stored(text: String) -> Self {
        ParentKey(text)
    }

    /// The key as stored in `status.hookRollout.cutoff`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// FNV-1a (64 bit): tiny, and the same on every build, unlike `std`'s hashers whose
/// algorithm is not promised.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The splitmix64 finalizer: FNV-1a alone keeps similar UIDs next to each other, this
/// spreads them over the whole order.
fn mix64(h: u64) -> u64 {
    let h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Which code a parent runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The last good code (`status.hookRollout.from`).
    From,
    /// The code being rolled out (`status.hookRollout.to`).
    To,
}

/// The version a parent with `key` runs under `status`.
pub fn version_of(status: &HookRolloutStatus, key: &ParentKey) -> Version {
    match status.phase {
        RolloutPhase::Complete => Version::To,
        RolloutPhase::RolledBack => Version::From,
        RolloutPhase::Progressing | RolloutPhase::Paused => {
            if !status.cutoff.is_empty() && key.as_str() <= status.cutoff.as_str() {
                Version::To
            } else {
                Version::From
            }
        }
    }
}

/// The digest a parent with `key` runs under `status`.
pub fn digest_of<'a>(status: &'a HookRolloutStatus, key: &ParentKey) -> &'a str {
    match version_of(status, key) {
        Version::From => &status.from,
        Version::To => &status.to,
    }
}

/// The cutoff putting the first `n` of `keys` (sorted or not) on the new code: at least
/// the current `cutoff`, so a step never takes parents back. Empty when `n` is zero and
/// there was none.
pub fn cutoff_for(keys: &[ParentKey], n: usize, current: &str) -> String {
    let mut sorted: Vec<&ParentKey> = keys.iter().collect();
    sorted.sort();
    let chosen = match n {
        0 => String::new(),
        n => sorted
            .get(n.min(sorted.len()).saturating_sub(1))
            .map(|k| k.0.clone())
            .unwrap_or_default(),
    };
    if chosen.as_str() < current {
        current.to_string()
    } else {
        chosen
    }
}

/// How many of `keys` sort at or before `cutoff`.
pub fn count_within(keys: &[ParentKey], cutoff: &str) -> usize {
    if cutoff.is_empty() {
        return 0;
    }
    keys.iter().filter(|k| k.as_str() <= cutoff).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<ParentKey> {
        (0..n)
            .map(|i| ParentKey::new(&format!("uid-{i}"), "ns", &format!("p{i}")))
            .collect()
    }

    #[test]
    fn keys_are_stable_and_spread() {
        // A fixed value: the key must never change between builds or replicas.
        assert_eq!(
            ParentKey::new("uid-0", "ns", "p0").as_str(),
            format!("{:016x}/ns/p0", mix64(fnv1a64(b"uid-0")))
        );
        assert_eq!(
            ParentKey::new("uid-0", "ns", "p0").as_str(),
            "4b23e7ab30af525c/ns/p0"
        );
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        let ks = keys(50);
        let mut sorted = ks.clone();
        sorted.sort();
        // Hash order, not creation order.
        assert_ne!(sorted, ks);
    }

    #[test]
    fn cutoff_selects_exactly_n_and_never_shrinks() {
        let ks = keys(50);
        for n in [0, 1, 5, 50, 80] {
            let cut = cutoff_for(&ks, n, "");
            assert_eq!(count_within(&ks, &cut), n.min(50), "n={n}");
        }
        let five = cutoff_for(&ks, 5, "");
        assert_eq!(cutoff_for(&ks, 1, &five), five);
    }

    #[test]
    fn new_parents_do_not_move_others_across_the_cutoff() {
        let ks = keys(50);
        let cut = cutoff_for(&ks, 10, "");
        let on_new: Vec<&ParentKey> = ks.iter().filter(|k| k.as_str() <= cut.as_str()).collect();
        let mut more = ks.clone();
        more.extend((50..100).map(|i| ParentKey::new(&format!("uid-{i}"), "ns", &format!("p{i}"))));
        // Fifty more parents: a rank-based step (the first 10 by rank) would now pick other
        // parents; the stored cutoff keeps the first ten and only adds newcomers below it.
        assert_ne!(cutoff_for(&more, 10, ""), cut);
        let still: Vec<&ParentKey> = more
            .iter()
            .filter(|k| k.as_str() <= cut.as_str() && ks.contains(k))
            .collect();
        assert_eq!(still, on_new);
    }

    #[test]
    fn phases_decide_before_the_cutoff() {
        let k = ParentKey::new("u", "ns", "p");
        let mut s = HookRolloutStatus {
            from: "old".into(),
            to: "new".into(),
            ..Default::default()
        };
        assert_eq!(digest_of(&s, &k), "old");
        s.cutoff = k.as_str().to_string();
        assert_eq!(digest_of(&s, &k), "new");
        s.phase = RolloutPhase::RolledBack;
        assert_eq!(digest_of(&s, &k), "old");
        s.phase = RolloutPhase::Complete;
        s.cutoff.clear();
        assert_eq!(digest_of(&s, &k), "new");
    }
}
