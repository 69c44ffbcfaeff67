//! Ordered lookups: walking a map's keys in order while looking up the same keys in another
//! map is a linear merge-join instead of one tree search per key. serde_json maps iterate in
//! key order unless its `preserve_order` feature is enabled somewhere in the build; that is
//! detected once and then every lookup is exact.

use std::cmp::Ordering;
use std::iter::Peekable;
use std::sync::OnceLock;

use serde_json::{map, Map, Value};

/// True when `serde_json::Map` iterates in sorted key order.
pub(crate) fn maps_iterate_sorted() -> bool {
    static SORTED: OnceLock<bool> = OnceLock::new();
    *SORTED.get_or_init(|| {
        let mut m = Map::new();
        m.insert("b".into(), Value::Null);
        m.insert("a".into(), Value::Null);
        m.keys().next().map(String::as_str) == Some("a")
    })
}

/// `a.cmp(b)` for map keys, cheaper than `str::cmp` for the short keys of Kubernetes objects.
/// A lockstep walk mostly compares a key with itself (same length): that case reads words
/// without a library call; keys of different lengths mostly differ in their first byte.
#[inline]
pub(crate) fn key_cmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() == b.len() {
        return same_len_cmp(a, b);
    }
    match (a.first(), b.first()) {
        (Some(x), Some(y)) if x != y => x.cmp(y),
        _ => a.cmp(b),
    }
}

/// `a == b`; strings of up to 16 bytes (most Kubernetes values) compare a word at a time
/// without a library call.
#[inline]
pub(crate) fn str_eq(a: &str, b: &str) -> bool {
    bytes_eq(a.as_bytes(), b.as_bytes())
}

/// [`str_eq`] for byte slices.
#[inline]
pub(crate) fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if !(4..=16).contains(&n) {
        return a == b;
    }
    if n <= 8 {
        word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4)
    } else {
        word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8)
    }
}

/// Compares two slices of the same length. Words are read big-endian, so numeric order is
/// byte order; the second word may overlap bytes already found equal, which keeps it exact.
#[inline]
fn same_len_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len();
    if n < 4 {
        a.cmp(b)
    } else if n <= 8 {
        let x = (u64::from(word4(a, 0)) << 32) | u64::from(word4(a, n - 4));
        let y = (u64::from(word4(b, 0)) << 32) | u64::from(word4(b, n - 4));
        x.cmp(&y)
    } else if n <= 16 {
        (word8(a, 0), word8(a, n - 8)).cmp(&(word8(b, 0), word8(b, n - 8)))
    } else {
        a.cmp(b)
    }
}

#[inline]
fn word8(s: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[at..at + 8]);
    u64::from_be_bytes(w)
}

#[inline]
fn word4(s: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&s[at..at + 4]);
    u32::from_be_bytes(w)
}

/// Walks a sorted map's entries forward, looking keys up in ascending order.
pub(crate) struct Seek<'a> {
    head: Option<(&'a String, &'a Value)>,
    iter: map::Iter<'a>,
}

impl<'a> Seek<'a> {
    pub(crate) fn new(map: &'a Map<String, Value>) -> Self {
        let mut iter = map.iter();
        Seek {
            head: iter.next(),
            iter,
        }
    }

    /// The value at `key`, which must not be below any key asked before.
    #[inline]
    pub(crate) fn get(&mut self, key: &str) -> Option<&'a Value> {
        self.get_after(key, |_| {})
    }

    /// The value at `key` (as [`Seek::get`]), first handing every entry below it to
    /// `below`: the keys of this map that a map walked in step lacks.
    #[inline]
    pub(crate) fn get_after(
        &mut self,
        key: &str,
        mut below: impl FnMut(&'a String),
    ) -> Option<&'a Value> {
        while let Some((k, v)) = self.head {
            match key_cmp(k, key) {
                Ordering::Less => {
                    below(k);
                    self.head = self.iter.next();
                }
                Ordering::Equal => {
                    self.head = self.iter.next();
                    return Some(v);
                }
                Ordering::Greater => return None,
            }
        }
        None
    }

    /// The next entry if its key is below `key` (consumed), for walking the keys another map
    /// lacks.
    #[inline]
    pub(crate) fn next_below(&mut self, key: Option<&str>) -> Option<(&'a String, &'a Value)> {
        let (k, v) = self.head?;
        if key.is_some_and(|key| key_cmp(k, key) != Ordering::Less) {
            return None;
        }
        self.head = self.iter.next();
        Some((k, v))
    }
}

/// Looks up keys of a map, fastest when they are asked for in ascending order.
pub(crate) struct Cursor<'a> {
    map: &'a Map<String, Value>,
    iter: Peekable<map::Iter<'a>>,
    sorted: bool,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(map: &'a Map<String, Value>) -> Self {
        Cursor {
            map,
            iter: map.iter().peekable(),
            sorted: maps_iterate_sorted(),
        }
    }

    /// The value at `key`. Keys asked in ascending order cost amortised O(1) each.
    pub(crate) fn get(&mut self, key: &str) -> Option<&'a Value> {
        if !self.sorted {
            return self.map.get(key);
        }
        while let Some((k, v)) = self.iter.peek() {
            match key_cmp(k, key) {
                Ordering::Less => {
                    self.iter.next();
                }
                Ordering::Equal => {
                    let v: &'a Value = v;
                    self.iter.next();
                    return Some(v);
                }
                // Absent (keys are sorted) — unless the caller asked out of order, in which
                // case the key may lie behind the cursor.
                Ordering::Greater => return self.map.get(key),
            }
        }
        // Past the end: either absent, or asked out of order (callers may do that).
        self.map.get(key)
    }

    pub(crate) fn contains_key(&mut self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_cmp_is_str_cmp() {
        let keys = [
            "",
            "a",
            "b",
            "ab",
            "abcdefgh",
            "abcdefgi",
            "abcdefghi",
            "abcdefgh\u{0}",
            "abcdefghabcdefgh",
            "abcdefghabcdefgg",
            "é",
            "e\u{301}",
            "containerPort",
            "container",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(key_cmp(a, b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn key_cmp_agrees_with_str_cmp(a in "[ab\u{e9}]{0,20}", b in "[ab\u{e9}]{0,20}") {
            proptest::prop_assert_eq!(key_cmp(&a, &b), a.cmp(&b));
            proptest::prop_assert_eq!(str_eq(&a, &b), a == b);
            proptest::prop_assert_eq!(bytes_eq(a.as_bytes(), b.as_bytes()), a == b);
            let c = format!("{a}{b}");
            proptest::prop_assert_eq!(key_cmp(&a, &c), a.as_str().cmp(&c));
        }
    }

    #[test]
    fn seek_finds_ascending_keys_and_lists_the_ones_below() {
        let v = json!({"a": 1, "c": 3, "e": 5});
        let mut s = Seek::new(v.as_object().unwrap());
        assert_eq!(s.next_below(Some("a")), None);
        assert_eq!(s.get("a"), Some(&json!(1)));
        assert_eq!(s.get("b"), None);
        assert_eq!(s.next_below(Some("d")).map(|(k, _)| k.as_str()), Some("c"));
        assert_eq!(s.next_below(Some("d")), None);
        assert_eq!(s.get("e"), Some(&json!(5)));
        assert_eq!(s.get("f"), None);
        assert_eq!(s.next_below(None), None);

        let mut s = Seek::new(v.as_object().unwrap());
        let mut seen = Vec::new();
        assert_eq!(s.get_after("c", |k| seen.push(k.clone())), Some(&json!(3)));
        assert_eq!(s.get_after("d", |k| seen.push(k.clone())), None);
        assert_eq!(s.get_after("f", |k| seen.push(k.clone())), None);
        assert_eq!(seen, ["a", "e"]);
    }

    #[test]
    fn in_order_and_out_of_order_lookups_are_exact() {
        let v = json!({"a": 1, "c": 3, "e": 5});
        let m = v.as_object().unwrap();
        let mut c = Cursor::new(m);
        assert_eq!(c.get("a"), Some(&json!(1)));
        assert_eq!(c.get("b"), None);
        assert_eq!(c.get("e"), Some(&json!(5)));
        assert_eq!(c.get("f"), None);
        // Out of order after the cursor moved on.
        assert_eq!(c.get("c"), Some(&json!(3)));
    }
}
