//! Bytes per cached object in an informer [`Store`], and the peak of a relist.
//!
//! `cargo run -p metacontroller-dynamic --example cache_bytes [-- N]`
//!
//! Objects are decoded from JSON the way the watcher decodes them (`DynamicObject`), stored
//! decoded (the cache before) and as `CompactObject`s (the informers' cache now), and measured with a counting global allocator wrapped around the system allocator: it
//! reports exact live heap bytes (what the program asked for, allocator overhead excluded),
//! deterministic across runs and independent of the allocator's arenas, so a change to the
//! representation shows as a change of this number and nothing else. Peak RSS, which also
//! counts fragmentation, comes from the load harness (`hack/load-composite.sh`). It also
//! prints the time to decode a cached object (paid on every read) and to encode one (paid on
//! every watch event); run it with `--release` for those.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use kube::core::DynamicObject;
use metacontroller_dynamic::{CompactObject, Store};
use serde_json::json;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now =
                LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed) + layout.size() as isize;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            let now = LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            ) + new_size as isize
                - layout.size() as isize;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// A child as the API server returns it after our create: labels, a controller ownerReference,
/// two managedFields entries, the last-applied annotation and three data keys.
fn configmap(i: usize) -> Vec<u8> {
    let parent = format!("p-{}", i / 3);
    let name = format!("{parent}-c{}", i % 3);
    let uid = format!("6c1f3a52-0000-4000-8000-{i:012}");
    let puid = format!("9b2d7e10-0000-4000-8000-{:012}", i / 3);
    let data = json!({"index": format!("{}", i % 3), "parent": parent, "greeting": "hello from the load harness"});
    let last_applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "load", "labels": {"app": "load", "parent": parent}},
        "data": data});
    serde_json::to_vec(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": name, "namespace": "load", "uid": uid,
            "resourceVersion": format!("{}", 100000 + i),
            "creationTimestamp": "2026-11-23T14:00:00Z",
            "labels": {"app": "load", "parent": parent},
            "annotations": {"metacontroller.k8s.io/last-applied-configuration": last_applied.to_string()},
            "ownerReferences": [{"apiVersion": "load.example.com/v1", "kind": "LoadParent",
                "name": parent, "uid": puid, "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "metacontroller", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-11-23T14:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:data": {".": {}, "f:greeting": {}, "f:index": {}, "f:parent": {}},
                   "f:metadata": {"f:annotations": {".": {}, "f:metacontroller.k8s.io/last-applied-configuration": {}},
                     "f:labels": {".": {}, "f:app": {}, "f:parent": {}},
                     "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{puid}\"}}"): {}}}}}
            ]
        },
        "data": data
    }))
    .expect("serializable")
}

/// A parent custom resource with a spec and a status written by the controller.
fn parent(i: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "load.example.com/v1", "kind": "LoadParent",
        "metadata": {
            "name": format!("p-{i}"), "namespace": "load",
            "uid": format!("9b2d7e10-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 200000 + i), "generation": 1,
            "creationTimestamp": "2026-11-23T14:00:00Z",
            "labels": {"app": "load"},
            "finalizers": [],
            "managedFields": [
                {"manager": "load", "operation": "Update", "apiVersion": "load.example.com/v1",
                 "time": "2026-11-23T14:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": {".": {}, "f:children": {}, "f:message": {}}}},
                {"manager": "metacontroller", "operation": "Update", "apiVersion": "load.example.com/v1",
                 "time": "2026-11-23T14:00:01Z", "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {".": {}, "f:children": {}, "f:observedGeneration": {}}}}
            ]
        },
        "spec": {"children": 3, "message": "hello from the load harness"},
        "status": {"children": 3, "observedGeneration": 1}
    }))
    .expect("serializable")
}

fn decode(bytes: &[u8]) -> DynamicObject {
    serde_json::from_slice(bytes).expect("valid object")
}

fn compact(bytes: &[u8]) -> CompactObject {
    CompactObject::encode(&decode(bytes)).expect("encodable")
}

/// One object kind's figures, per object.
struct Figures {
    wire: usize,
    /// Live bytes of a store of decoded `DynamicObject`s (the cache before `CompactObject`).
    dynamic: f64,
    /// Live bytes of a store of `CompactObject`s (the informers' cache now).
    compact: f64,
    /// Peak during a relist of a decoded store that buffers every listed object.
    dynamic_relist: f64,
    /// Peak during a relist of a compact store where every object changed (a second compact
    /// copy is buffered until the list completes; unchanged objects are shared, no copy).
    compact_relist: f64,
    /// Microseconds to decode a cached object (every read) and to encode one (every event).
    decode_us: f64,
    encode_us: f64,
}

fn measure(n: usize, make: fn(usize) -> Vec<u8>) -> Figures {
    let wire: Vec<Vec<u8>> = (0..n).map(make).collect();
    let wire_len = wire.iter().map(Vec::len).sum::<usize>() / n;
    let per = |b: isize| b as f64 / n as f64;

    let before = live();
    let mut store = Store::default();
    for bytes in &wire {
        store.upsert(decode(bytes)).expect("named");
    }
    let dynamic = live() - before;
    PEAK.store(live(), Ordering::Relaxed);
    let buffer: Vec<Arc<DynamicObject>> = wire.iter().map(|b| Arc::new(decode(b))).collect();
    drop(store.replace_shared(buffer));
    let dynamic_relist = PEAK.load(Ordering::Relaxed) - before;
    drop(store);

    let before = live();
    let mut store = Store::default();
    for bytes in &wire {
        store.upsert(compact(bytes)).expect("named");
    }
    let compact_bytes = live() - before;
    PEAK.store(live(), Ordering::Relaxed);
    // Every listed object at a new resourceVersion: nothing can be shared.
    let buffer: Vec<Arc<CompactObject>> = wire
        .iter()
        .map(|b| {
            let mut obj = decode(b);
            obj.metadata.resource_version = Some("changed".into());
            Arc::new(CompactObject::encode(&obj).expect("encodable"))
        })
        .collect();
    drop(store.replace_shared(buffer));
    let compact_relist = PEAK.load(Ordering::Relaxed) - before;

    let cached: Vec<Arc<CompactObject>> = store.iter().cloned().collect();
    let start = Instant::now();
    for obj in &cached {
        std::hint::black_box(obj.decode().expect("decodes"));
    }
    let decode_us = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    let decoded: Vec<DynamicObject> = wire.iter().map(|b| decode(b)).collect();
    let start = Instant::now();
    for obj in &decoded {
        std::hint::black_box(CompactObject::encode(obj).expect("encodable"));
    }
    let encode_us = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    Figures {
        wire: wire_len,
        dynamic: per(dynamic),
        compact: per(compact_bytes),
        dynamic_relist: per(dynamic_relist),
        compact_relist: per(compact_relist),
        decode_us,
        encode_us,
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(30_000);
    for (what, make) in [
        ("ConfigMap child", configmap as fn(usize) -> Vec<u8>),
        ("parent (spec+status)", parent),
    ] {
        let f = measure(n, make);
        println!(
            "{what}: {n} objects, {} JSON bytes each\n  \
             cached as DynamicObject: {:.0} B/object, relist peak {:.0} B/object (list buffered)\n  \
             cached as CompactObject: {:.0} B/object, relist peak {:.0} B/object (every object changed)\n  \
             decode {:.1} us/object (each read), encode {:.1} us/object (each event)",
            f.wire, f.dynamic, f.dynamic_relist, f.compact, f.compact_relist, f.decode_us, f.encode_us
        );
    }
}
