//! Per-write cost of the pure modules on typical objects.

use criterion::{criterion_group, criterion_main, Criterion};
use embedded_apiserver::defaults::{apply_builtin_defaults, RangeAllocator};
use embedded_apiserver::schema::StructuralSchema;
use embedded_apiserver::ssa::{self, ApplyOptions, BuiltinSchema};
use embedded_apiserver::strategic_merge::{self, PatchMeta};
use serde_json::{json, Value};
use std::hint::black_box;

fn deployment(image: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "uid": "u", "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "app", "image": image, "ports": [{"containerPort": 80}],
                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                    {"name": "sidecar", "image": "proxy:1"}]}}}})
}

fn benches(c: &mut Criterion) {
    let schema = BuiltinSchema::for_kind("apps", "Deployment");
    let mut alloc = RangeAllocator::default();
    let mut base = deployment("app:1", 2);
    apply_builtin_defaults("apps", "v1", "Deployment", &mut base, &mut alloc).unwrap();
    let stored = ssa::record_update(
        None,
        &base,
        "creator",
        None,
        "2024-01-01T00:00:00Z",
        &schema,
    );
    let mut next = stored.clone();
    next["spec"]["replicas"] = json!(3);

    c.bench_function("defaults/deployment", |b| {
        b.iter(|| {
            let mut d = deployment("app:1", 2);
            apply_builtin_defaults("apps", "v1", "Deployment", &mut d, &mut alloc).unwrap();
            black_box(d)
        })
    });
    c.bench_function("ssa/record_update deployment", |b| {
        b.iter(|| {
            black_box(ssa::record_update(
                Some(&stored),
                &next,
                "m",
                None,
                "2024-01-01T00:01:00Z",
                &schema,
            ))
        })
    });
    let opts = ApplyOptions {
        manager: "applier",
        force: true,
        now: "2024-01-01T00:02:00Z",
        subresource: None,
    };
    let cfg = deployment("app:2", 3);
    c.bench_function("ssa/apply deployment", |b| {
        b.iter(|| black_box(ssa::apply(Some(&stored), &cfg, &opts, &schema).unwrap()))
    });
    let meta = PatchMeta::for_kind("apps", "Deployment").unwrap();
    let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:3"}]}}}});
    c.bench_function("smp/deployment container image", |b| {
        b.iter(|| black_box(strategic_merge::patch(&stored, &p, &meta).unwrap()))
    });
    let crd_schema = StructuralSchema::from_openapi_v3(&json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "size": {"type": "integer", "minimum": 1, "default": 1},
            "name": {"type": "string", "pattern": "^[a-z]+$"},
            "items": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "string"}}}}}}}}))
    .unwrap();
    let cr = json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"},
        "spec": {"name": "abc", "items": [{"id": "a", "x": 1}, {"id": "b"}], "extra": true}});
    c.bench_function("schema/prune+default+validate", |b| {
        b.iter(|| {
            let mut o = cr.clone();
            let pruned = crd_schema.prune(&mut o);
            crd_schema.apply_defaults(&mut o);
            black_box((pruned, crd_schema.validate(&o)))
        })
    });
    rules(c);
}

/// The CEL rules of the project's CompositeController CRD on a controller with a sync
/// (Jsonnet) and a finalize (webhook) hook: what every CompositeController write now costs
/// on top of the schema checks.
fn rules(c: &mut Criterion) {
    let crds = include_str!("../../../deploy/crds/metacontroller-crds-v1.yaml");
    let crd: Value = serde_yaml::Deserializer::from_str(crds)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .find(|d: &Value| d["spec"]["names"]["kind"] == "CompositeController")
        .unwrap();
    let schema = StructuralSchema::from_crd(&crd, "v1alpha1")
        .unwrap()
        .unwrap();
    let cc = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "c"}, "spec": {
            "parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {
                "sync": {"jsonnet": {"configMapRef": {"namespace": "d", "name": "code"}, "key": "s.jsonnet"}},
                "finalize": {"webhook": {"url": "http://h/finalize"}}}}});
    assert!(schema.validate_rules(&cc, None).is_empty());
    c.bench_function("schema/validate compositecontroller", |b| {
        b.iter(|| black_box(schema.validate(&cc)))
    });
    c.bench_function("schema/rules compositecontroller", |b| {
        b.iter(|| black_box(schema.validate_rules(&cc, Some(&cc))))
    });
}

criterion_group!(pure, benches);
criterion_main!(pure);
