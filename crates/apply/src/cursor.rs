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

/// `a.cmp(b)` for map keys, cheaper than `str::cmp` for the short keys of Kubernetes objects:
/// no library call, eight bytes per step, and most unequal keys differ in the first byte.
#[inline]
pub(crate) fn key_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    while let (Some((x, ra)), Some((y, rb))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        if x != y {
            return u64::from_be_bytes(*x).cmp(&u64::from_be_bytes(*y));
        }
        (a, b) = (ra, rb);
    }
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
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
        while let Some((k, v)) = self.head {
            match key_cmp(k, key) {
                Ordering::Less => self.head = self.iter.next(),
                Ordering::Equal => {
                    self.head = self.iter.next();
                    return Some(v);
                }
                Ordering::Greater => return None,
            }
        }
        None
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
