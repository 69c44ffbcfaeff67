//! Ordered lookups: walking a map's keys in order while looking up the same keys in another
//! map is a linear merge-join instead of one tree search per key. serde_json maps iterate in
//! key order unless its `preserve_order` feature is enabled somewhere in the build; that is
//! detected once and then every lookup is exact.

use std::iter::Peekable;
use std::sync::OnceLock;

use serde_json::{map, Map, Value};

/// True when `serde_json::Map` iterates in sorted key order.
fn maps_iterate_sorted() -> bool {
    static SORTED: OnceLock<bool> = OnceLock::new();
    *SORTED.get_or_init(|| {
        let mut m = Map::new();
        m.insert("b".into(), Value::Null);
        m.insert("a".into(), Value::Null);
        m.keys().next().map(String::as_str) == Some("a")
    })
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
            match k.as_str().cmp(key) {
                std::cmp::Ordering::Less => {
                    self.iter.next();
                }
                std::cmp::Ordering::Equal => {
                    let v: &'a Value = v;
                    self.iter.next();
                    return Some(v);
                }
                // Absent (keys are sorted) — unless the caller asked out of order, in which
                // case the key may lie behind the cursor.
                std::cmp::Ordering::Greater => return self.map.get(key),
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
