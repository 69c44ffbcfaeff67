//! Hot paths of the runtime building blocks: selector matching and indexed child lookup.
//! (Queue throughput is `metacontroller-workqueue`'s bench; the own-writes overlay read is
//! timed by an ignored unit test in the controllers' writer,
//! `writer::overlay::tests::get_miss_among_10k_entries_timing`.)

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use metacontroller_dynamic::{NamespacedName, Selector, Store};
use serde_json::json;

fn selectors(c: &mut Criterion) {
    let text = "app=web,tier in (fe,be),env notin (prod),team,!legacy,example.com/owner=x";
    c.bench_function("selector_parse_6_requirements", |b| {
        b.iter(|| Selector::parse(black_box(text)).unwrap())
    });
    let sel = Selector::parse(text).unwrap();
    let labels: BTreeMap<String, String> = [
        ("app", "web"),
        ("tier", "fe"),
        ("team", "a"),
        ("example.com/owner", "x"),
        ("pod-template-hash", "abc"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    c.bench_function("selector_match_6_requirements", |b| {
        b.iter(|| black_box(&sel).matches(black_box(&labels)))
    });
}

fn store(c: &mut Criterion) {
    let mut s = Store::default();
    for p in 0..1_000 {
        for child in 0..100 {
            s.upsert(json!({"metadata": {
                "name": format!("p{p}-c{child}"), "namespace": format!("ns{}", p % 10),
                "resourceVersion": "1",
                "ownerReferences": [{"apiVersion": "v1", "kind": "P", "name": format!("p{p}"),
                                      "uid": format!("uid-{p}"), "controller": true}]}}))
                .unwrap();
        }
    }
    c.bench_function("store_children_of_parent_among_100k", |b| {
        b.iter(|| s.controlled_by(black_box("uid-500")).len())
    });
    c.bench_function("store_get_among_100k", |b| {
        let key = NamespacedName::new("ns0", "p500-c50");
        b.iter(|| s.get(black_box(&key)).is_some())
    });
}

criterion_group!(benches, selectors, store);
criterion_main!(benches);
