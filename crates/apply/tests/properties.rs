//! Property tests of the merge engine (issue #4): idempotence, desired wins, foreign fields
//! kept, no write after a re-merge, and no panics on arbitrary input.

use metacontroller_apply::{
    last_applied, merge, merge_cow, merge_for_cli, merge_with_schema, merge_with_schema_cow,
    needs_update, plan, plan_update, prepare_create, ssa, Plan, Schema, CONVENTIONAL_MERGE_KEYS,
    SYSTEM_METADATA_FIELDS,
};
use proptest::prelude::*;
use serde_json::{Map, Value};
use std::borrow::Cow;

const KEYS: [&str; 12] = [
    "name",
    "port",
    "containerPort",
    "mountPath",
    "a",
    "b",
    "c",
    "spec",
    "metadata",
    "status",
    "uid",
    "x",
];

fn key() -> impl Strategy<Value = String> {
    proptest::sample::select(&KEYS[..]).prop_map(str::to_string)
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-2i64..4).prop_map(Value::from),
        Just(Value::from(1.5)),
        "[a-c]{0,2}".prop_map(Value::String),
    ]
}

fn object_of(inner: BoxedStrategy<Value>, max: usize) -> BoxedStrategy<Value> {
    prop::collection::btree_map(key(), inner, 0..max)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
        .boxed()
}

/// Objects without conventional key fields (the extra fields of keyed list items).
fn object_of_plain(inner: BoxedStrategy<Value>, max: usize) -> BoxedStrategy<Value> {
    let plain =
        proptest::sample::select(&["a", "b", "c", "x", "spec"][..]).prop_map(str::to_string);
    prop::collection::btree_map(plain, inner, 0..max)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
        .boxed()
}

/// True when some list holds an object with two or more conventional key fields. There the
/// convention is ambiguous: which key wins depends on the other items, so a later merge may
/// pick another key (upstream behaves the same); the schema-aware mode removes the ambiguity.
fn ambiguous(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.values().any(ambiguous),
        Value::Array(a) => a.iter().any(|item| {
            ambiguous(item)
                || item.as_object().is_some_and(|o| {
                    CONVENTIONAL_MERGE_KEYS
                        .iter()
                        .filter(|k| {
                            o.get(**k)
                                .is_some_and(|v| !v.is_null() && !v.is_object() && !v.is_array())
                        })
                        .count()
                        > 1
                })
        }),
        _ => false,
    }
}

/// JSON values biased towards Kubernetes shapes: nested objects and lists of objects that
/// share a conventional key.
fn value() -> BoxedStrategy<Value> {
    leaf()
        .prop_recursive(4, 64, 5, |inner| {
            let inner = inner.boxed();
            let keyed_item = (
                proptest::sample::select(&["name", "port", "containerPort"][..]),
                prop_oneof![
                    Just(Value::from("p")),
                    Just(Value::from("q")),
                    Just(Value::from(80)),
                    Just(Value::from("r"))
                ],
                object_of_plain(inner.clone(), 3),
            )
                .prop_map(|(k, v, mut o)| {
                    if let Value::Object(m) = &mut o {
                        m.insert(k.to_string(), v);
                    }
                    o
                });
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(keyed_item, 0..4).prop_map(Value::Array),
                object_of(inner, 5),
            ]
        })
        .boxed()
}

fn object() -> BoxedStrategy<Value> {
    object_of(value(), 6)
}

/// Small deterministic PRNG so that perturbations are reproducible from the seed proptest
/// shrinks.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn chance(&mut self, in_ten: u64) -> bool {
        self.next() % 10 < in_ten
    }
}

/// A variant of `v`: some fields dropped, some leaves changed, some fields added, some list
/// items dropped or added. This correlates observed, last-applied and desired like real syncs.
fn perturb(v: &Value, rng: &mut Rng) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                if rng.chance(2) {
                    continue;
                }
                out.insert(k.clone(), perturb(v, rng));
            }
            if rng.chance(2) {
                const PLAIN: [&str; 4] = ["a", "b", "c", "x"];
                let k = PLAIN[(rng.next() % PLAIN.len() as u64) as usize];
                out.insert(k.to_string(), Value::from(rng.next() % 3));
            }
            Value::Object(out)
        }
        Value::Array(a) => {
            let mut out: Vec<Value> = Vec::with_capacity(a.len() + 1);
            for item in a {
                if !rng.chance(2) {
                    out.push(perturb(item, rng));
                }
            }
            if rng.chance(2) {
                if let Some(first) = a.first() {
                    out.push(perturb(first, rng));
                }
            }
            Value::Array(out)
        }
        Value::Number(_) if rng.chance(2) => Value::from(rng.next() % 3),
        Value::String(_) if rng.chance(2) => Value::from("changed"),
        other => other.clone(),
    }
}

/// Desired lists with unique conventional keys (API validation requires unique keys; with
/// duplicates "last wins" makes a second merge collapse them further).
fn dedupe_keys(v: &mut Value) {
    match v {
        Value::Object(m) => m.values_mut().for_each(dedupe_keys),
        Value::Array(a) => {
            a.iter_mut().for_each(dedupe_keys);
            let mut seen: Vec<(&str, Value)> = Vec::new();
            a.retain(|item| {
                let Some(o) = item.as_object() else {
                    return true;
                };
                let mut dup = false;
                for k in CONVENTIONAL_MERGE_KEYS {
                    if let Some(kv) = o.get(k) {
                        if seen.iter().any(|(sk, sv)| *sk == k && sv == kv) {
                            dup = true;
                        }
                    }
                }
                if !dup {
                    for k in CONVENTIONAL_MERGE_KEYS {
                        if let Some(kv) = o.get(k) {
                            seen.push((k, kv.clone()));
                        }
                    }
                }
                !dup
            });
        }
        _ => {}
    }
}

fn triple() -> impl Strategy<Value = (Value, Value, Value)> {
    (object(), any::<u64>())
        .prop_map(|(base, seed)| {
            let mut rng = Rng(seed | 1);
            let observed = perturb(&base, &mut rng);
            let last = perturb(&base, &mut rng);
            let mut desired = perturb(&base, &mut rng);
            dedupe_keys(&mut desired);
            (observed, last, desired)
        })
        .prop_filter("ambiguous conventional keys", |(o, l, d)| {
            !ambiguous(o) && !ambiguous(l) && !ambiguous(d)
        })
}

/// Every non-null leaf of `d` is in `r` (list items: in some item of `r`). Top-level `status`
/// and system metadata are exempt: they always keep their observed values.
fn contains(r: &Value, d: &Value, root: bool, meta: bool) -> bool {
    match (r, d) {
        (_, Value::Null) => true,
        (Value::Object(rm), Value::Object(dm)) => dm.iter().all(|(k, dv)| {
            if (root && k == "status") || (meta && SYSTEM_METADATA_FIELDS.contains(&k.as_str())) {
                return true;
            }
            if dv.is_null() {
                return !rm.contains_key(k);
            }
            rm.get(k)
                .is_some_and(|rv| contains(rv, dv, false, root && k == "metadata"))
        }),
        (Value::Array(ra), Value::Array(da)) => da
            .iter()
            .filter(|d| !d.is_null())
            .all(|d| ra.iter().any(|r| contains(r, d, false, false))),
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => r == d,
    }
}

/// Test oracle for conventional list-map detection (upstream's rule).
fn list_key(lists: [&[Value]; 3]) -> Option<&'static str> {
    let items: Vec<&Value> = lists.iter().flat_map(|l| l.iter()).collect();
    if items.is_empty() || !items.iter().all(|i| i.is_object()) {
        return None;
    }
    CONVENTIONAL_MERGE_KEYS.into_iter().find(|k| {
        items.iter().all(|i| {
            i.get(*k)
                .is_some_and(|v| !v.is_null() && !v.is_object() && !v.is_array())
        })
    })
}

/// Fields of `o` that neither `l` nor `d` mention are unchanged in `r`; so are list-map items
/// whose key neither `l` nor `d` mention.
fn preserved(o: &Value, l: Option<&Value>, d: &Value, r: &Value, root: bool) -> bool {
    if let (Value::Array(oa), Value::Array(da), Value::Array(ra)) = (o, d, r) {
        let la = l
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let Some(k) = list_key([oa, la, da]) else {
            return true;
        };
        let mentions = |list: &[Value], key: &Value| {
            list.iter().any(|i| {
                i.get(k).and_then(|v| {
                    v.as_f64()
                        .zip(key.as_f64())
                        .map(|(a, b)| a == b)
                        .or(Some(v == key))
                }) == Some(true)
            })
        };
        return oa.iter().all(|item| {
            let key = &item[k];
            // Duplicate keys in observed collapse into one item (documented), so only unique
            // foreign items are expected verbatim.
            let duplicated = oa.iter().filter(|i| i.get(k) == Some(key)).count() > 1;
            duplicated || mentions(la, key) || mentions(da, key) || ra.contains(item)
        });
    }
    let (Value::Object(om), Value::Object(dm), Value::Object(rm)) = (o, d, r) else {
        return true;
    };
    let lm = l.and_then(Value::as_object);
    om.iter().all(|(k, ov)| {
        if root && k == "status" {
            return rm.get(k) == Some(ov);
        }
        let in_l = lm.is_some_and(|l| l.contains_key(k));
        match dm.get(k) {
            None if !in_l => rm.get(k) == Some(ov),
            Some(dv) if (dv.is_object() && ov.is_object()) || (dv.is_array() && ov.is_array()) => {
                match rm.get(k) {
                    Some(rv) => preserved(ov, lm.and_then(|l| l.get(k)), dv, rv, false),
                    None => false,
                }
            }
            _ => true,
        }
    })
}

/// True when some list of objects has two items with the same value of some conventional key
/// field (such a list cannot be merged by that key without folding items).
fn repeated_keys(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.values().any(repeated_keys),
        Value::Array(a) => {
            a.iter().any(repeated_keys)
                || CONVENTIONAL_MERGE_KEYS.iter().any(|k| {
                    let vals: Vec<&Value> = a.iter().filter_map(|i| i.get(*k)).collect();
                    vals.iter().enumerate().any(|(i, x)| {
                        vals[..i].iter().any(|y| {
                            x == y || x.as_f64().zip(y.as_f64()).is_some_and(|(a, b)| a == b)
                        })
                    })
                })
        }
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn merge_is_idempotent((o, l, d) in triple()) {
        let Ok(r1) = merge(&o, Some(&l), &d) else { return Ok(()); };
        // Next sync: observed is what we wrote, last-applied is what we applied.
        let r2 = merge(&r1, Some(&d), &d).expect("re-merge of a merge result");
        prop_assert_eq!(&r2, &r1);
        // Merging again with the old record also changes nothing.
        if let Ok(r3) = merge(&r1, Some(&l), &d) {
            prop_assert_eq!(&r3, &r1);
        }
    }

    #[test]
    fn record_identical_to_desired_takes_the_same_path_as_a_copy((o, _l, d) in triple()) {
        // The merge short-cuts when the record is desired itself (same reference); a copy
        // must give the same result.
        let copy = d.clone();
        let same = merge(&o, Some(&d), &d);
        let copied = merge(&o, Some(&copy), &d);
        prop_assert_eq!(same, copied);
    }

    #[test]
    fn copy_on_write_merge_agrees_with_owned_merge((o, l, d) in triple(), schema in schema_doc()) {
        // Borrowed exactly when the merge leaves observed as it is; owned results equal merge's.
        let owned = merge(&o, Some(&l), &d);
        match (merge_cow(&o, Some(&l), &d), &owned) {
            (Ok(Cow::Borrowed(b)), Ok(r)) => {
                prop_assert!(std::ptr::eq(b, &o));
                prop_assert_eq!(r, &o);
                prop_assert!(!needs_update(&o, b));
            }
            (Ok(Cow::Owned(m)), Ok(r)) => {
                prop_assert_eq!(&m, r);
                prop_assert_ne!(&m, &o);
            }
            (Err(a), Err(b)) => prop_assert_eq!(&a, b),
            (a, b) => prop_assert!(false, "cow {:?} vs owned {:?}", a, b),
        }
        if let Ok(schema) = Schema::from_openapi_v3_schema(&schema) {
            let owned = merge_with_schema(&o, Some(&l), &d, &schema);
            let cow = merge_with_schema_cow(&o, Some(&l), &d, &schema).map(Cow::into_owned);
            prop_assert_eq!(cow, owned);
        }
    }

    #[test]
    fn every_desired_leaf_is_in_the_result((o, l, d) in triple()) {
        // A list whose conventional key repeats is left as observed (documented).
        prop_assume!(!repeated_keys(&o) && !repeated_keys(&d));
        let Ok(r) = merge(&o, Some(&l), &d) else { return Ok(()); };
        prop_assert!(contains(&r, &d, true, false), "result {:#} misses desired {:#}", r, d);
    }

    #[test]
    fn observed_only_fields_are_preserved((o, l, d) in triple()) {
        let Ok(r) = merge(&o, Some(&l), &d) else { return Ok(()); };
        prop_assert!(preserved(&o, Some(&l), &d, &r, true), "o={:#} l={:#} d={:#} r={:#}", o, l, d, r);
    }

    #[test]
    fn no_update_after_applying_the_merge((o, l, d) in triple()) {
        let mut observed = o.clone();
        if observed.is_object() {
            let _ = last_applied::set(&mut observed, &l);
        }
        let Ok(first) = plan_update(&observed, &d, None) else { return Ok(()); };
        // The server stored `first.merged`; the next sync with the same desired is a no-op.
        let second = plan_update(&first.merged, &d, None).expect("re-plan");
        prop_assert!(!second.update, "second merge {:#} differs from {:#}", second.merged, first.merged);
        prop_assert!(!needs_update(&first.merged, &first.merged));
        // Creating and then re-applying is a no-op too.
        let created = prepare_create(&d).expect("create body");
        let again = plan_update(&created, &d, None).expect("plan after create");
        prop_assert!(!again.update);
    }

    #[test]
    fn fast_plan_agrees_with_full_merge_and_needs_update((o, l, d) in triple(), record in any::<bool>()) {
        let mut observed = o.clone();
        if observed.is_object() && record {
            let _ = last_applied::set(&mut observed, &l);
        }
        let full = plan_update(&observed, &d, None);
        let fast = plan(&observed, &d, None);
        match (full, fast) {
            (Ok(full), Ok(Plan::Unchanged)) => prop_assert!(!full.update, "{:#}", full.merged),
            (Ok(full), Ok(Plan::Update(v))) => {
                prop_assert!(full.update);
                prop_assert_eq!(v, full.merged);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "full {:?} vs fast {:?}", a, b),
        }
    }

    #[test]
    fn no_panic_on_arbitrary_json(o in value(), l in value(), d in value(), s in value()) {
        let _ = merge(&o, Some(&l), &d);
        let _ = merge(&o, None, &d);
        let _ = needs_update(&o, &d);
        let _ = merge_for_cli(&o, &d, Some(&l), Some(&s));
        let _ = merge_for_cli(&o, &d, None, None);
        let _ = ssa::apply_patch_body(&d, Some("ns"));
        let _ = last_applied::get(&o);
        let _ = plan_update(&o, &d, None);
        let _ = plan(&o, &d, None);
        if let Ok(schema) = Schema::detect(&s, "v1", "X") {
            let _ = merge_with_schema(&o, Some(&l), &d, &schema);
        }
    }

    #[test]
    fn no_panic_with_random_schemas((o, l, d) in triple(), schema in schema_doc()) {
        if let Ok(schema) = Schema::from_openapi_v3_schema(&schema) {
            if let Ok(r1) = merge_with_schema(&o, Some(&l), &d, &schema) {
                let _ = needs_update(&o, &r1);
            }
        }
    }
}

/// Random schemas using the list/map extensions on the keys the objects use.
fn schema_doc() -> impl Strategy<Value = Value> {
    let decl = prop_oneof![
        Just(serde_json::json!({"x-kubernetes-list-type": "atomic"})),
        Just(serde_json::json!({"x-kubernetes-list-type": "set"})),
        Just(
            serde_json::json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
        ),
        Just(
            serde_json::json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name", "port"]})
        ),
        Just(
            serde_json::json!({"x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "a"})
        ),
        Just(serde_json::json!({"x-kubernetes-map-type": "atomic"})),
        Just(serde_json::json!({"type": "object"})),
    ];
    let leaf = decl.boxed();
    leaf.prop_recursive(3, 32, 4, |inner| {
        (
            prop::collection::btree_map(key(), inner.clone(), 0..4),
            proptest::option::of(inner),
            proptest::sample::select(&["atomic", "set", "map", "granular"][..]),
        )
            .prop_map(|(props, items, lt)| {
                let mut m = Map::new();
                m.insert(
                    "properties".into(),
                    Value::Object(props.into_iter().collect()),
                );
                if let Some(i) = items {
                    m.insert("items".into(), i);
                }
                m.insert("x-kubernetes-list-type".into(), Value::from(lt));
                m.insert(
                    "x-kubernetes-list-map-keys".into(),
                    serde_json::json!(["name"]),
                );
                Value::Object(m)
            })
    })
}
