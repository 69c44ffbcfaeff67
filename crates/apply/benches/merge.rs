//! Merge + no-op detection of a realistic Deployment (3 containers with ports, env, volume
//! mounts and resources; volumes; server defaults and status in observed). Target (issue #4):
//! ≥ 100,000 merge + needs_update per second on one core.
//!
//! The headline figure `merge+needs_update` uses the copy-on-write API ([`merge_cow`] and
//! [`needs_update`] on its result), which is what a controller should call: in the steady
//! state nothing is cloned. `merge+needs_update (owned merge)` is the same decision through
//! [`merge`], which always returns an owned object (a deep clone of observed when nothing
//! changes), for comparison.
//!
//! # Figures (2026-11-21, shared 2-core x86-64 machine under load)
//! Instructions per operation from `examples/merge_profile.rs` under callgrind (repeatable on
//! a loaded machine: `valgrind --tool=callgrind … merge_profile <op> 200`, minus `<op> 0`,
//! divided by 200), and this bench's CPU time per operation on one core:
//!
//! | operation (profile op)                           | before | after | CPU time (2 runs) |
//! |----------------------------------------------------|--------|-------|-------------------|
//! | merge+needs_update, steady (`merge`)               | 449k ¹ | 61k   | 5.8 / 6.6 µs      |
//! | same, owned merge (`owned`)                        | 449k   | 337k  | 34 / 43 µs        |
//! | merge+needs_update, replicas changed (`changed`)   | 555k ¹ | 260k  | 22 / 27 µs        |
//! | merge_with_schema+needs_update, steady (`schema`)  | 459k ¹ | 89k   | 10.3 / 10.3 µs    |
//! | plan, steady state (`plan`)                        | 188k   | 75k   | 6.6 / 10.3 µs     |
//! | plan, replicas changed (`plan-changed`)            | 846k   | 549k  | 57 / 68 µs        |
//! | clone observed (`clone`, baseline)                 | 197k   | 197k  | 20 / 24 µs        |
//!
//! ¹ before the copy-on-write API these went through the owned [`merge`]. The figure
//! (≥ 100,000 merge + needs_update per second on one core) is met by `merge+needs_update`:
//! 150,000–170,000/s per core (the machine's load moves CPU times by ±20%; the instruction
//! counts do not move). A changed object must be rebuilt (owned `Value`s cannot share the
//! unchanged subtrees), so the changed cases cost about one clone of observed plus the
//! comparison.

use std::hint::black_box;

use cpu_time::ThreadCpuTime;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use metacontroller_apply::{
    last_applied, merge, merge_cow, merge_with_schema_cow, needs_update, plan, plan_update, Plan,
    Schema,
};
use serde_json::{json, Value};

mod fixture;
use fixture::{desired, observed, pod_schema};

/// The objects every case works on.
struct Inputs {
    desired: Value,
    observed: Value,
    /// The record of `observed`, parsed.
    last: Option<Value>,
    /// `desired` with another replica count.
    changed: Value,
    schema: Schema,
}

impl Inputs {
    /// Builds the fixture and checks it: a no-op sync, and a changed desired is detected.
    fn new() -> Self {
        let desired = desired();
        let observed = observed(&desired);
        let last = last_applied::get(&observed).unwrap();
        // Sanity: the fixture is a no-op sync, and a changed desired is detected.
        let merged = merge(&observed, last.as_ref(), &desired).unwrap();
        assert!(!needs_update(&observed, &merged));
        let mut changed = desired.clone();
        changed["spec"]["replicas"] = json!(4);
        assert!(plan_update(&observed, &changed, None).unwrap().update);
        Self {
            desired,
            observed,
            last,
            changed,
            schema: pod_schema(),
        }
    }
}

type Group<'a> = criterion::BenchmarkGroup<'a, ThreadCpuTime>;

fn bench(c: &mut Criterion<ThreadCpuTime>) {
    let inputs = Inputs::new();
    let mut g = c.benchmark_group("deployment");
    g.throughput(Throughput::Elements(1));
    assert_eq!(
        plan(&inputs.observed, &inputs.desired, None).unwrap(),
        Plan::Unchanged
    );
    assert!(matches!(
        plan(&inputs.observed, &inputs.changed, None).unwrap(),
        Plan::Update(_)
    ));
    bench_parts(&mut g, &inputs);
    bench_merges(&mut g, &inputs);
    bench_plans(&mut g, &inputs);
    g.finish();
}

/// The pieces a sync is made of: cloning observed (the baseline), encoding, comparing and
/// parsing the record.
fn bench_parts(g: &mut Group<'_>, inputs: &Inputs) {
    let Inputs {
        desired, observed, ..
    } = inputs;
    g.bench_function("clone observed (baseline)", |b| {
        b.iter(|| black_box(black_box(observed).clone()))
    });
    g.bench_function("parts: encode record", |b| {
        b.iter(|| black_box(last_applied::encode(black_box(desired))))
    });
    // A full semantic comparison (a copy: the same reference answers at once).
    let observed_copy = observed.clone();
    g.bench_function("parts: needs_update(observed, copy)", |b| {
        b.iter(|| black_box(needs_update(black_box(observed), black_box(&observed_copy))))
    });
    g.bench_function("parts: parse record", |b| {
        b.iter(|| black_box(last_applied::get(black_box(observed)).unwrap()))
    });
}

/// The figure (three-way merge + no-op detection, record already parsed) and its
/// variants: owned merge, a changed object, with a schema.
fn bench_merges(g: &mut Group<'_>, inputs: &Inputs) {
    let Inputs {
        desired,
        observed,
        last,
        changed,
        schema,
    } = inputs;
    g.bench_function("merge+needs_update", |b| {
        b.iter(|| {
            let merged = merge_cow(black_box(observed), last.as_ref(), black_box(desired)).unwrap();
            black_box(needs_update(observed, &merged))
        })
    });
    g.bench_function("merge+needs_update (owned merge)", |b| {
        b.iter(|| {
            let merged = merge(black_box(observed), last.as_ref(), black_box(desired)).unwrap();
            black_box(needs_update(observed, &merged))
        })
    });
    g.bench_function("merge+needs_update (changed replicas)", |b| {
        b.iter(|| {
            let merged = merge_cow(black_box(observed), last.as_ref(), black_box(changed)).unwrap();
            black_box(needs_update(observed, &merged))
        })
    });
    g.bench_function("merge_with_schema+needs_update", |b| {
        b.iter(|| {
            let merged = merge_with_schema_cow(
                black_box(observed),
                last.as_ref(),
                black_box(desired),
                schema,
            )
            .unwrap();
            black_box(needs_update(observed, &merged))
        })
    });
}

/// What a sync does per child: encode/compare the record, merge, decide.
fn bench_plans(g: &mut Group<'_>, inputs: &Inputs) {
    let Inputs {
        desired,
        observed,
        changed,
        ..
    } = inputs;
    g.bench_function("plan (steady state, no write)", |b| {
        b.iter(|| black_box(plan(black_box(observed), black_box(desired), None).unwrap()))
    });
    g.bench_function("plan (changed replicas, write)", |b| {
        b.iter(|| black_box(plan(black_box(observed), black_box(changed), None).unwrap()))
    });
    g.bench_function("plan_update (always builds the object)", |b| {
        b.iter(|| black_box(plan_update(black_box(observed), black_box(desired), None).unwrap()))
    });
}

/// The machine running the benches is shared (load well above the core count), so wall time
/// says little about the code. This measurement counts the CPU time of the benchmarking thread
/// (`CLOCK_THREAD_CPUTIME_ID`), i.e. the cost on one core. Falls back to wall time when the
/// clock is unavailable.
mod cpu_time {
    use criterion::measurement::{Measurement, ValueFormatter};
    use criterion::Throughput;
    use std::time::Instant;

    pub struct ThreadCpuTime;

    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }

    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }

    /// Linux `CLOCK_THREAD_CPUTIME_ID`.
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

    fn on_cpu_ns() -> Option<u64> {
        if !cfg!(all(target_os = "linux", target_pointer_width = "64")) {
            return None;
        }
        let mut ts = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes into it.
        let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }

    pub enum Start {
        Cpu(u64),
        Wall(Instant),
    }

    impl Measurement for ThreadCpuTime {
        type Intermediate = Start;
        type Value = u64;
        fn start(&self) -> Start {
            match on_cpu_ns() {
                Some(ns) => Start::Cpu(ns),
                None => Start::Wall(Instant::now()),
            }
        }
        fn end(&self, i: Start) -> u64 {
            match i {
                Start::Cpu(t0) => on_cpu_ns().unwrap_or(t0).saturating_sub(t0),
                Start::Wall(t0) => t0.elapsed().as_nanos() as u64,
            }
        }
        fn add(&self, a: &u64, b: &u64) -> u64 {
            a + b
        }
        fn zero(&self) -> u64 {
            0
        }
        fn to_f64(&self, v: &u64) -> f64 {
            *v as f64
        }
        fn formatter(&self) -> &dyn ValueFormatter {
            &Fmt
        }
    }

    struct Fmt;
    impl ValueFormatter for Fmt {
        fn scale_values(&self, ns: f64, values: &mut [f64]) -> &'static str {
            let (factor, unit) = if ns < 1e3 {
                (1.0, "ns cpu")
            } else if ns < 1e6 {
                (1e-3, "µs cpu")
            } else {
                (1e-6, "ms cpu")
            };
            values.iter_mut().for_each(|v| *v *= factor);
            unit
        }
        fn scale_throughputs(
            &self,
            _typical: f64,
            t: &Throughput,
            values: &mut [f64],
        ) -> &'static str {
            let n = match *t {
                Throughput::Elements(e) | Throughput::ElementsAndBytes { elements: e, .. } => e,
                Throughput::Bytes(b) | Throughput::BytesDecimal(b) => b,
                Throughput::Bits(b) => b,
            } as f64;
            values.iter_mut().for_each(|v| *v = n * 1e9 / *v);
            "elem/s per core"
        }
        fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
            "ns"
        }
    }
}

fn config() -> Criterion<ThreadCpuTime> {
    Criterion::default().with_measurement(ThreadCpuTime)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench
}
criterion_main!(benches);
