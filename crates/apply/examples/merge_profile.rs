//! Runs one operation of the merge benchmark many times, for instruction-level profiling
//! (`valgrind --tool=callgrind`), which gives repeatable counts on a shared machine:
//!
//! ```text
//! cargo build --release -p metacontroller-apply --example merge_profile
//! valgrind --tool=callgrind target/release/examples/merge_profile merge 1000
//! ```
//! Operations: `merge` (merge_cow + needs_update, steady state), `owned` (owned merge +
//! needs_update, steady state), `changed` (merge_cow + needs_update, replicas changed),
//! `plan` (steady state), `plan-changed`, `schema` (merge_with_schema_cow + needs_update),
//! `clone`. Subtract the setup (`clone 0`) and divide by the count for per-operation figures.

use std::hint::black_box;

use metacontroller_apply::{
    last_applied, merge, merge_cow, merge_with_schema_cow, needs_update, plan,
};
use serde_json::json;

#[path = "../benches/fixture/mod.rs"]
mod fixture;

fn main() {
    let mut args = std::env::args().skip(1);
    let op = args.next().unwrap_or_else(|| "merge".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let desired = fixture::desired();
    let observed = fixture::observed(&desired);
    let schema = fixture::pod_schema();
    let last = match last_applied::get(&observed) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("fixture has no record: {e}");
            std::process::exit(1);
        }
    };
    let mut changed = desired.clone();
    changed["spec"]["replicas"] = json!(4);
    let mut updates = 0usize;
    for _ in 0..n {
        let update = match op.as_str() {
            "merge" => merge_cow(&observed, last.as_ref(), &desired)
                .is_ok_and(|m| needs_update(&observed, &m)),
            "owned" => {
                merge(&observed, last.as_ref(), &desired).is_ok_and(|m| needs_update(&observed, &m))
            }
            "changed" => merge_cow(&observed, last.as_ref(), &changed)
                .is_ok_and(|m| needs_update(&observed, &m)),
            "schema" => merge_with_schema_cow(&observed, last.as_ref(), &desired, &schema)
                .is_ok_and(|m| needs_update(&observed, &m)),
            "plan" => plan(&observed, &desired, None)
                .is_ok_and(|p| p != metacontroller_apply::Plan::Unchanged),
            "plan-changed" => plan(&observed, &changed, None)
                .is_ok_and(|p| p != metacontroller_apply::Plan::Unchanged),
            "clone" => black_box(observed.clone()).is_null(),
            other => {
                eprintln!("unknown operation {other}");
                std::process::exit(2);
            }
        };
        updates += usize::from(black_box(update));
    }
    println!("{op} x{n}: {updates} updates");
}
